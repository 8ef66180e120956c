"""Reading and writing annotated corpora, losslessly (CoNLL-U: :mod:`spacy_treexp.io.conllu`)."""

from spacy_treexp.io.conllu import (
    COLUMNS,
    ConlluError,
    ConlluSentence,
    format_misc,
    parse_misc,
    read_conllu,
    write_conllu,
)

__all__ = [
    "COLUMNS",
    "ConlluError",
    "ConlluSentence",
    "format_misc",
    "parse_misc",
    "read_conllu",
    "write_conllu",
]
