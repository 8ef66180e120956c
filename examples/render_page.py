"""Write the standalone HTML view of a parse's uncertainty (open it in any browser).

python examples/render_page.py "I saw the man with the telescope." -o uncertainty.html
"""

import argparse
from pathlib import Path

import spacy

import spacy_treexp

parser = argparse.ArgumentParser()
parser.add_argument("text", nargs="?", default="I saw the man with the telescope. Time flies like an arrow.")
parser.add_argument("-o", "--output", default="uncertainty.html")
parser.add_argument("--model", default=None, help="spaCy pipeline with a parser writing arc scores")
args = parser.parse_args()

nlp = spacy_treexp.load() if args.model is None else spacy.load(args.model)
if "tree_expectations" not in nlp.pipe_names:
    nlp.add_pipe("tree_expectations")
html = spacy_treexp.render(nlp(args.text), alt_threshold=0.1)
Path(args.output).write_text(html, encoding="utf8")
print(f"wrote {args.output}")
