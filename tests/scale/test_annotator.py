"""TreexpAnnotator outside Ray: every batch format Ray Data hands a callable gives the same
table; our columns are those of the pipeline's Docs; bad rows and clashing columns."""

from __future__ import annotations

import numpy
import pandas
import pyarrow as pa
import pytest

from spacy_treexp.cli.pipelines import load_pipeline
from spacy_treexp.scale import TreexpAnnotator
from spacy_treexp.scale.schema import ANNOTATION, annotation_row

TEXTS = ["The cat sat on the mat . A dog barked .", "She reads old books .", "Give me the red pen ."]


@pytest.fixture(scope="module")
def annotator(toy_model):
    return TreexpAnnotator(toy_model, samples=2, batch_size=2)


def test_every_batch_format_gives_our_columns(annotator, toy_model) -> None:
    ids = numpy.arange(len(TEXTS))
    batches = [
        {"id": ids, "text": numpy.array(TEXTS, dtype=object)},
        pandas.DataFrame({"id": ids, "text": TEXTS}),
        pa.table({"id": ids, "text": TEXTS}),
    ]
    tables = [annotator(batch) for batch in batches]
    assert tables[0].to_pylist() == tables[1].to_pylist() == tables[2].to_pylist()
    for table in tables:  # the input columns keep their types (pandas may make large_string)
        assert table.select(ANNOTATION.names).schema == ANNOTATION
    table = tables[0]
    assert table.column_names == ["id", "text", *ANNOTATION.names]
    assert table.schema.field("sentences").type == ANNOTATION.field("sentences").type
    nlp = load_pipeline(toy_model, n_samples=2)
    for row, text in zip(table.to_pylist(), TEXTS):
        assert {key: row[key] for key in ANNOTATION.names} == annotation_row(nlp(text))
        assert all(len(s["samples"]) == 2 for s in row["sentences"])


def test_bad_rows_keep_their_place(annotator) -> None:
    table = annotator(pa.table({"text": ["One dog .", None, "Two cats ."]}))
    rows = table.to_pylist()
    assert [row["error"] for row in rows] == [None, "text is not a string", None]
    assert rows[1]["sentences"] is None and rows[0]["n_tokens"] == 3 and rows[2]["n_tokens"] == 3


def test_missing_or_clashing_columns_are_named(annotator) -> None:
    with pytest.raises(ValueError, match="no column 'text'"):
        annotator(pa.table({"body": ["A dog ."]}))
    with pytest.raises(ValueError, match=r"already has the column\(s\) \['error'\]"):
        annotator(pa.table({"text": ["A dog ."], "error": ["x"]}))
