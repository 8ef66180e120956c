"""``python -m spacy_treexp.evaluation ...``: the same as ``spacy-treexp evaluate ...``."""

import sys

from spacy_treexp.cli import main

sys.exit(main(["evaluate", *sys.argv[1:]]))
