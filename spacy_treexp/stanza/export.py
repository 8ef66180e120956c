"""Export the ``tree_expectations`` annotations of a Stanza Document (dict/JSON, CoNLL-U).

Stanza's own ``to_dict`` / CoNLL-U writers drop properties added with ``add_property``,
so these functions carry them:

* :func:`to_dict` / :func:`from_dict`: lossless. One JSON-ready dict per sentence,
  ``{"words": <Stanza's sentence.to_dict()>, "tree_expectations": <record>}``; arrays
  become nested lists and non-finite floats the strings ``"nan"``, ``"inf"``, ``"-inf"``
  (strict JSON has none). ``from_dict(json.loads(json.dumps(to_dict(doc))))`` gives a
  Document whose properties equal the original's exactly.
* :func:`to_conllu` / :func:`from_conllu`: the per-word values in the MISC column
  (``HeadProb=..|HeadEntropy=..|DepProb=..``) and the per-sentence values as comments
  (``# tree_entropy = ..``, ``# log_partition = ..``, ``# expected_attachment = ..``),
  rounded to ``digits`` decimals. Reading the text back and writing it again gives the
  same text.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import numpy
from stanza.models.common.doc import Document, Sentence
from stanza.utils.conll import CoNLL

from spacy_treexp.annotate import SentenceAnnotation, SentenceScores, mbr_heads
from spacy_treexp.stanza.capture import SCORES_ATTR
from spacy_treexp.stanza.processor import RECORD_ATTR

#: Annotation fields (and the captured scores) stored as arrays, with their dtypes.
_ARRAYS = {
    "marginals": numpy.float32,
    "heads": numpy.int32,
    "head_prob": numpy.float32,
    "head_entropy": numpy.float32,
    "dep_prob": numpy.float32,
    "mbr_heads": numpy.int32,
    "sampled_heads": numpy.int32,
    "sample_log_probs": numpy.float64,
    "sampled_labels": numpy.int32,
    "arc": numpy.float32,
    "rel": numpy.float32,
}
_SCORE_FIELDS = ("arc", "rel")
#: MISC keys of per-word values, and the record fields they hold.
MISC_FIELDS = {"HeadProb": "head_prob", "HeadEntropy": "head_entropy", "DepProb": "dep_prob"}
#: Comment keys of per-sentence values, and the record fields they hold.
COMMENT_FIELDS = {
    "tree_entropy": "entropy",
    "log_partition": "log_partition",
    "expected_attachment": "expected_attachment",
}


def _record(sentence: Sentence) -> SentenceAnnotation:
    record = getattr(sentence, RECORD_ATTR, None)
    if record is None:
        raise ValueError(
            "sentence has no tree_expectations annotation "
            f"({' '.join(w.text for w in sentence.words)[:60]!r}): run the processor first."
        )
    return record


def _encode(value: Any) -> Any:
    """Arrays to nested lists; non-finite floats to strings (strict JSON has none)."""
    if isinstance(value, numpy.ndarray):
        value = value.tolist()
    if isinstance(value, list):
        return [_encode(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _decode_floats(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode_floats(v) for v in value]
    return float(value) if isinstance(value, str) else value


def to_dict(doc: Document, *, include_scores: bool = False) -> List[Dict[str, Any]]:
    """JSON-ready annotations of every sentence (``include_scores``: also the captured
    arc scores and relation log-probabilities, ``(n+1)²·(L+1)`` numbers a sentence)."""
    out = []
    for sentence in doc.sentences:
        record = _record(sentence)
        mbr_heads(record)  # computed on first access; exported with the rest
        fields = {key: _encode(value) for key, value in record.to_dict().items()}
        scores = getattr(sentence, SCORES_ATTR, None)
        if include_scores and scores is not None:
            fields.update(arc=_encode(scores.arc), rel=_encode(scores.rel))
        out.append({"words": sentence.to_dict(), "tree_expectations": fields})
    return out


def _decode_array(key: str, value: Any, n: int) -> numpy.ndarray:
    array = numpy.asarray(_decode_floats(value), dtype=_ARRAYS[key])
    if key in ("sampled_heads", "sampled_labels") and array.size == 0:
        array = array.reshape(0, n)
    return array


def from_dict(data: List[Dict[str, Any]]) -> Document:
    """Rebuild a Stanza Document with its annotations from :func:`to_dict`'s output."""
    if not isinstance(data, list) or any(
        not isinstance(item, dict) or "words" not in item or "tree_expectations" not in item
        for item in data
    ):
        raise ValueError("from_dict expects a list of {'words': ..., 'tree_expectations': ...} dicts.")
    doc = Document([item["words"] for item in data])
    for sentence, item in zip(doc.sentences, data):
        n = len(sentence.words)
        record: Dict[str, Any] = {}
        for key, value in item["tree_expectations"].items():
            if key == "labels" or value is None:
                record[key] = value
            elif key not in _ARRAYS:
                record[key] = _decode_floats(value)
            else:
                record[key] = _decode_array(key, value, n)
        arc, rel = (record.pop(key, None) for key in _SCORE_FIELDS)
        if arc is not None:
            labels = record.get("labels")
            setattr(sentence, SCORES_ATTR, SentenceScores(arc=arc, rel=rel, labels=labels))
        setattr(sentence, RECORD_ATTR, SentenceAnnotation.from_dict(record))
    return doc


def _format(value: float, digits: int) -> str:
    return f"{value:.{digits}f}"


def to_conllu(doc: Document, *, digits: int = 4) -> str:
    """CoNLL-U text of ``doc`` with the annotations in MISC and comments (doc unchanged)."""
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 1:
        raise ValueError(f"digits must be a positive integer, got {digits!r}.")
    saved = []
    try:
        for sentence in doc.sentences:
            record = _record(sentence)
            saved.append((sentence, list(sentence.comments), [w.misc for w in sentence.words]))
            ours = tuple(f"# {key} = " for key in COMMENT_FIELDS)
            sentence.comments = [c for c in sentence.comments if not c.startswith(ours)]
            for key, field in COMMENT_FIELDS.items():
                value = getattr(record, field)
                if value is not None:
                    sentence.add_comment(f"# {key} = {_format(value, digits)}")
            for i, word in enumerate(sentence.words):
                kept = [
                    item for item in (word.misc or "").split("|")
                    if item and item.split("=", 1)[0] not in MISC_FIELDS
                ]
                for key, field in MISC_FIELDS.items():
                    values = getattr(record, field)
                    if values is not None and math.isfinite(float(values[i])):
                        kept.append(f"{key}={_format(float(values[i]), digits)}")
                word.misc = "|".join(kept) if kept else None
        return "{:C}\n\n".format(doc)
    finally:
        for sentence, comments, miscs in saved:
            sentence.comments = comments
            for word, misc in zip(sentence.words, miscs):
                word.misc = misc


def _comment_value(sentence: Sentence, key: str) -> Optional[float]:
    prefix = f"# {key} = "
    for comment in sentence.comments:
        if comment.startswith(prefix):
            return float(comment[len(prefix):])
    return None


def from_conllu(text: str) -> Document:
    """Read CoNLL-U written by :func:`to_conllu`; the values found (rounded) are put back
    in each sentence's record, so ``head_prob``, ``tree_entropy`` etc. work again."""
    doc = CoNLL.conll2doc(input_str=text)
    for position, sentence in enumerate(doc.sentences):
        n = len(sentence.words)
        record: Dict[str, Any] = {
            "start": position,
            "end": position + n,
            "heads": numpy.array([w.head for w in sentence.words], dtype=numpy.int32),
        }
        for key, field in COMMENT_FIELDS.items():
            record[field] = _comment_value(sentence, key)
        for key, field in MISC_FIELDS.items():
            values = numpy.full(len(sentence.words), numpy.nan, dtype=numpy.float32)
            found = False
            for i, word in enumerate(sentence.words):
                for item in (word.misc or "").split("|"):
                    name, _, value = item.partition("=")
                    if name == key:
                        values[i] = float(value)
                        found = True
            record[field] = values if found else None
        setattr(sentence, RECORD_ATTR, SentenceAnnotation.from_dict(record))
    return doc
