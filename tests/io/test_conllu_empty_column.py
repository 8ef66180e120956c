"""An empty FORM is a format error named by its line (UD writes ``_``), not an empty word
handed on to the parser (spaCy's E031, with no line). Other empty columns are read as they
are, as before (some converters leave MISC or DEPS empty)."""

from __future__ import annotations

import io

import pytest

from spacy_treexp.io import ConlluError, read_conllu

GOOD = "1\tHi\thi\tINTJ\tUH\t_\t0\troot\t_\t_\n\n"
COLUMNS = ["1", "Hi", "hi", "INTJ", "UH", "_", "0", "root", "_", "_"]


def test_an_empty_form_is_reported_with_its_line() -> None:
    cols = list(COLUMNS)
    cols[1] = ""
    text = GOOD + "\t".join(cols) + "\n\n" + GOOD
    with pytest.raises(ConlluError, match=r"column 2 \(FORM\) is empty") as caught:
        list(read_conllu(io.BytesIO(text.encode())))
    assert caught.value.line == 3
    errors: list[ConlluError] = []
    assert len(list(read_conllu(io.BytesIO(text.encode()), on_error=errors.append))) == 2 and len(errors) == 1


def test_an_empty_misc_column_is_read() -> None:
    cols = list(COLUMNS)
    cols[9] = ""
    [sentence] = list(read_conllu(io.BytesIO(("\t".join(cols) + "\n\n").encode())))
    assert sentence.n == 1
