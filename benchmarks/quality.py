"""Quality of spacy_treexp's uncertainty on a gold treebank (issue 7).

    python benchmarks/quality.py --out eval_out                     # shipped model, EWT test,
                                                                     # temperatures fitted on EWT dev
    python benchmarks/quality.py --model PATH --conllu FILE --dev none --out DIR

Writes DIR/report.json, DIR/summary.md and PNG plots. See docs/README_evaluation.md.
"""
import sys

from spacy_treexp.evaluation.run import main

if __name__ == "__main__":
    sys.exit(main())
