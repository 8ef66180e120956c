"""Quality of spacy_treexp's uncertainty on a gold treebank: ``spacy-treexp evaluate``.

    python benchmarks/quality.py --conllu ../shared/data/ud_en_ewt/en_ewt-ud-test.conllu \
        --dev ../shared/data/ud_en_ewt/en_ewt-ud-dev.conllu --out eval_ewt
    python benchmarks/quality.py --model PATH --conllu FILE --out DIR

Writes DIR/report.json, DIR/summary.md and PNG plots (README.md, "Evaluation").
"""

import sys

from spacy_treexp.cli import main

if __name__ == "__main__":
    sys.exit(main(["evaluate", *sys.argv[1:]]))
