"""``python -m spacy_treexp``: the same command line as ``spacy-treexp``."""

from spacy_treexp.cli import main

raise SystemExit(main())
