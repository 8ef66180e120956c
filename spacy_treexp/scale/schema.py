"""The Arrow / Parquet schema of annotated documents: one row per document.

The same columns come from ``spacy-treexp annotate --backend ray --output-format parquet``
(after ``source``, ``line``, ``meta`` and ``text``) and from
:class:`~spacy_treexp.scale.annotator.TreexpAnnotator` on a user's Ray Dataset (added to
the dataset's own columns). The values are those of the JSONL output
(:func:`spacy_treexp.cli.outputs.doc_to_json`): a token's heads are Doc token indices, the
root's head is the root itself; ``mbr_heads`` and samples number the sentence's words 1..n,
0 = ROOT (CoNLL-U); floats are rounded to 6 decimals.

======================  =====================================================  ==========================================
column                  type                                                   value
======================  =====================================================  ==========================================
``source``              string                                                 input file (sharded runs only)
``line``                int64                                                  input line the document starts on (idem)
``meta``                string                                                 JSON of a .jsonl object's other fields (idem)
``text``                string                                                 the document's text (idem)
``tree_entropy``        float64                                                sum of its sentences' tree entropies (nats)
``n_sentences``         int32                                                  sentences
``n_tokens``            int32                                                  tokens
``sentences``           list<struct>                                           per sentence, below
``error``               string                                                 why the document has no annotation, else null
======================  =====================================================  ==========================================

A sentence: ``start``, ``end`` (int32 token offsets), ``text``, ``tree_entropy``,
``entropy_per_word``, ``log_partition``, ``expected_attachment``, ``error_probability``,
``expected_errors``, ``mixture_error_probability``, ``mutual_information``,
``expected_entropy``, ``novelty``, ``out_of_domain`` (float64; the last five null without
members or a novelty reference), ``mbr_heads`` (list<int32>), ``samples``
(list<struct<heads: list<int32>, log_prob: float64>>) and ``tokens``: list<struct<i: int32,
text: string, head: int32, dep: string, head_prob, head_entropy, dep_prob: float64,
head_distribution: list<struct<head: int32, prob: float64>>, head_mutual_information,
mixture_head_prob: float64 (null without members)>>.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Optional

import pyarrow as pa

from spacy_treexp.cli.outputs import SENTENCE_VALUES, WORD_VALUES
from spacy_treexp.io.inputs import Context

HEAD = pa.struct([("head", pa.int32()), ("prob", pa.float64())])
TOKEN = pa.struct(
    [
        ("i", pa.int32()),
        ("text", pa.string()),
        ("head", pa.int32()),
        ("dep", pa.string()),
        ("head_prob", pa.float64()),
        ("head_entropy", pa.float64()),
        ("dep_prob", pa.float64()),
        ("head_distribution", pa.list_(HEAD)),
        *((name, pa.float64()) for name in WORD_VALUES),
    ]
)
SAMPLE = pa.struct([("heads", pa.list_(pa.int32())), ("log_prob", pa.float64())])
SENTENCE = pa.struct(
    [
        ("start", pa.int32()),
        ("end", pa.int32()),
        ("text", pa.string()),
        ("tree_entropy", pa.float64()),
        ("entropy_per_word", pa.float64()),
        ("log_partition", pa.float64()),
        ("expected_attachment", pa.float64()),
        *((name, pa.float64()) for name in SENTENCE_VALUES),
        ("mbr_heads", pa.list_(pa.int32())),
        ("samples", pa.list_(SAMPLE)),
        ("tokens", pa.list_(TOKEN)),
    ]
)
#: The columns our annotation adds to a document.
ANNOTATION = pa.schema(
    [
        ("tree_entropy", pa.float64()),
        ("n_sentences", pa.int32()),
        ("n_tokens", pa.int32()),
        ("sentences", pa.list_(SENTENCE)),
        ("error", pa.string()),
    ]
)
#: A sharded run's Parquet files: where each document comes from, then :data:`ANNOTATION`.
DOCUMENT = pa.schema(
    [("source", pa.string()), ("line", pa.int64()), ("meta", pa.string()), ("text", pa.string())] + list(ANNOTATION)
)


def annotation_row(doc: Any) -> dict[str, Any]:
    """The :data:`ANNOTATION` columns of an annotated Doc."""
    from spacy_treexp.cli.outputs import doc_to_json

    data = doc_to_json(doc)
    for sentence in data["sentences"]:
        for token in sentence["tokens"]:
            token["head_distribution"] = [{"head": h, "prob": p} for h, p in token["head_distribution"]]
    return {
        "tree_entropy": data["tree_entropy"],
        "n_sentences": len(data["sentences"]),
        "n_tokens": len(doc),
        "sentences": data["sentences"],
        "error": None,
    }


def failed_row(error: str) -> dict[str, Any]:
    """The :data:`ANNOTATION` columns of a document the pipeline failed on."""
    return {"tree_entropy": None, "n_sentences": None, "n_tokens": None, "sentences": None, "error": error}


def document_row(doc: Any, context: Context, source: str) -> dict[str, Any]:
    """A :data:`DOCUMENT` row: the document's origin and its annotation."""
    meta: Optional[dict[str, Any]] = context.get("meta")
    row = {
        "source": source,
        "line": context["line"],
        "meta": None if meta is None else json.dumps(meta, ensure_ascii=False),
        "text": doc.text,
    }
    row.update(annotation_row(doc))
    return row


def document_table(rows: Iterable[dict[str, Any]]) -> pa.Table:
    """The rows as an Arrow table of :data:`DOCUMENT`."""
    return pa.Table.from_pylist(list(rows), schema=DOCUMENT)
