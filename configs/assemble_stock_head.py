"""Turn the pipeline trained by configs/en_core_web_sm_head.cfg into the shipped head.

Drops the stock ``parser`` (it only gave the dev evaluation sentence boundaries), puts a
rule ``sentencizer`` before ``biaffine_parser`` so the folder also parses on its own (the
head is meant to be sourced into ``en_core_web_sm``, whose parser sets the sentences
there), and writes its meta (version, author and url from pyproject.toml, like the default
pipeline's). The stock ``tok2vec`` stays: it is en_core_web_sm's own, byte for byte, and
the parser runs it on copies of the Docs of any host that does not compute the same token
vectors. The output folder is replaced atomically (``spacy_treexp.cli.partial.replace_folder``).

    python configs/assemble_stock_head.py training_sm_head/model-best OUT

With ``--scores FILE`` (the JSON of ``configs/evaluate_en_ewt.py``), it only writes the
gold-sentence UAS/LAS of that file into the meta of the folder given as ``output``
(``performance``, spaCy's fractions), atomically.
"""

import argparse
import json
import sys
from pathlib import Path

import spacy

from spacy_treexp.cli.partial import replace_folder, write_atomic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from write_model_meta import package_metadata  # noqa: E402

SOURCES = [
    {
        "name": "Universal Dependencies English Web Treebank (UD_English-EWT)",
        "url": "https://github.com/UniversalDependencies/UD_English-EWT",
        "license": "CC BY-SA 4.0",
    },
    {
        "name": "en_core_web_sm 3.8.0 (Explosion): its tok2vec, frozen, unchanged",
        "url": "https://github.com/explosion/spacy-models",
        "license": "MIT",
    },
]
DESCRIPTION = (
    "spacy_treexp head for en_core_web_sm 3.8: a biaffine_parser (tree-CRF trained, keeps arc scores, "
    "UD relations) on en_core_web_sm's own frozen tok2vec, so that pipeline gains tree uncertainty "
    "without a second encoder (spacy_treexp.add_uncertainty). See ../MODEL_CARD.md."
)


def write_scores(folder: Path, scores_path: Path) -> int:
    """Put the gold-sentence UAS/LAS of ``scores_path`` into ``folder``'s meta.json."""
    gold = [row for row in json.loads(scores_path.read_text(encoding="utf8")) if row["sentences"] == "gold"]
    if not gold:
        print(f"assemble_stock_head: {scores_path} has no 'gold' condition", file=sys.stderr)
        return 2
    meta = json.loads((folder / "meta.json").read_text(encoding="utf8"))
    meta["performance"] = {"dep_uas": round(gold[0]["uas"] / 100, 4), "dep_las": round(gold[0]["las"] / 100, 4)}
    meta["performance_note"] = "UD English-EWT test, gold tokens and sentences (configs/evaluate_en_ewt.py)"
    write_atomic(folder / "meta.json", json.dumps(meta, indent=2) + "\n")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trained", type=Path, help="the trained pipeline (spacy train's model-best)")
    parser.add_argument("output", type=Path, help="the folder to write the head to")
    parser.add_argument("--scores", type=Path, default=None, help="only write these scores into output's meta")
    args = parser.parse_args()
    if args.scores is not None:
        return write_scores(args.output, args.scores)
    nlp = spacy.load(args.trained)
    if "parser" in nlp.pipe_names:
        nlp.remove_pipe("parser")
    nlp.add_pipe("sentencizer", before="biaffine_parser")
    nlp.meta.update(package_metadata())
    nlp.meta.update(name="core_web_sm_head", description=DESCRIPTION, sources=SOURCES, license="CC BY-SA 4.0")
    replace_folder(args.output, nlp.to_disk)
    print(f"assemble_stock_head: wrote {args.output} ({', '.join(nlp.pipe_names)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
