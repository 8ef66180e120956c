"""``python -m spacy_treexp.evaluation``: see :mod:`spacy_treexp.evaluation.run`."""
import sys

from spacy_treexp.evaluation.run import main

sys.exit(main())
