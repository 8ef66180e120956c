"""Export the ``tree_expectations`` annotations of a Stanza Document (dict/JSON, CoNLL-U).

Stanza's own ``to_dict`` / CoNLL-U writers drop properties added with ``add_property``,
so these functions carry them:

* :func:`to_dict` / :func:`from_dict`: lossless (with ``include_scores``, also the
  captured scores, an ensemble's ``members`` included), but for the processor's options and
  map, which ``to_spacy`` then asks for (a warning). One JSON-ready dict per sentence,
  ``{"words": <Stanza's sentence.to_dict()>, "tree_expectations": <record>}``; arrays
  become nested lists and non-finite floats the strings ``"nan"``, ``"inf"``, ``"-inf"``
  (strict JSON has none). ``from_dict(json.loads(json.dumps(to_dict(doc))))`` gives a
  Document whose properties equal the original's exactly, but for those read from the
  captured scores (``arc_scores``, ``rel_log_probs``, ``label_marginals``), which need
  ``include_scores``.
* :func:`to_conllu` / :func:`from_conllu`: the per-word values in the MISC column
  (``HeadProb=..|HeadEntropy=..|DepProb=..``, with members ``HeadMI`` and ``MixtureHeadProb``)
  and the per-sentence values as comments (``# tree_entropy = ..``, ``# log_partition = ..``,
  ``# expected_attachment = ..``, ``# error_probability = ..``, and where the sentence has them
  ``mixture_error_probability``, ``mutual_information``, ``expected_entropy``, ``novelty``,
  ``out_of_domain``; the keys: ``spacy_treexp.annotate.records.CONLLU_COMMENTS`` and
  ``CONLLU_MISC``), rounded to ``digits`` decimals. Reading the text back and writing it again
  gives the same text.
"""

from __future__ import annotations

import io
import math
from typing import Any, Dict, List, Optional

import numpy
from stanza.models.common.doc import Document, Sentence
from stanza.utils.conll import CoNLL

from spacy_treexp.annotate import SentenceAnnotation, SentenceScores, mbr_heads
from spacy_treexp.annotate.records import CONLLU_COMMENTS, CONLLU_DERIVED, CONLLU_MISC
from spacy_treexp.io import read_conllu, write_conllu
from spacy_treexp.stanza.capture import SCORES_ATTR, captured_scores, with_tree
from spacy_treexp.stanza.processor import RECORD_ATTR, checked_record

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
    "head_mutual_information": numpy.float32,
    "mixture_head_prob": numpy.float32,
    "mixture_marginals": numpy.float32,
    "mixture_sampled_heads": numpy.int32,
    "arc": numpy.float32,
    "rel": numpy.float32,
    "members": numpy.float32,
}
_SCORE_FIELDS = ("arc", "rel", "members")


def _record(sentence: Sentence, where: str) -> SentenceAnnotation:
    """The sentence's annotation, refused once its tree is not the one annotated."""
    record = checked_record(sentence, where)
    if record is None:
        raise ValueError(
            "sentence has no tree_expectations annotation "
            f"({' '.join(w.text for w in sentence.words)[:60]!r}): run the processor first."
        )
    return record


def check_document(doc: Any, where: str) -> None:
    """A ``ValueError`` naming ``where`` unless ``doc`` is a stanza Document (a list of them: one call each)."""
    if not isinstance(doc, Document):
        many = " (one call per Document of a list)" if isinstance(doc, (list, tuple)) else ""
        raise ValueError(f"{where} expects a stanza Document{many}, got {type(doc).__name__}.")


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
    check_document(doc, "to_dict")
    out = []
    for sentence in doc.sentences:
        record = _record(sentence, "to_dict")
        mbr_heads(record)  # computed on first access; exported with the rest
        fields = {key: _encode(value) for key, value in record.to_dict().items()}
        scores = captured_scores(sentence, "to_dict")
        if include_scores and scores is not None:
            fields.update(arc=_encode(scores.arc), rel=_encode(scores.rel))
            if scores.members is not None:
                fields.update(members=_encode(scores.members))
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
        not isinstance(item, dict) or "words" not in item or "tree_expectations" not in item for item in data
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
        arc, rel, members = (record.pop(key, None) for key in _SCORE_FIELDS)
        if arc is not None:
            labels = record.get("labels")
            # to_dict exports scores only with the tree they were captured with: the words' tree
            scores = SentenceScores(arc=arc, rel=rel, labels=labels, members=members)
            setattr(sentence, SCORES_ATTR, with_tree(scores, sentence))
        setattr(sentence, RECORD_ATTR, SentenceAnnotation.from_dict(record))
    return doc


def _format(value: float, digits: int) -> str:
    return f"{value:.{digits}f}"


def to_conllu(doc: Document, *, digits: int = 4) -> str:
    """CoNLL-U text of ``doc`` with the annotations in MISC and comments (doc unchanged):
    Stanza's own CoNLL-U of the parse, with our values set by :mod:`spacy_treexp.io`."""
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 1:
        raise ValueError(f"digits must be a positive integer, got {digits!r}.")
    check_document(doc, "to_conllu")
    records = [_record(sentence, "to_conllu") for sentence in doc.sentences]
    out = []
    for record, parsed in zip(records, read_conllu(io.StringIO(f"{doc:C}\n\n"))):
        for key, field in CONLLU_COMMENTS.items():
            value = getattr(record, field)
            parsed = parsed.with_comment(key, None if value is None else _format(value, digits))
        for m in range(1, parsed.n + 1):
            # ours go last, whatever order Stanza gives the other MISC items on re-reading
            parsed = parsed.with_misc(m, dict.fromkeys(CONLLU_MISC))
            items: Dict[str, Optional[str]] = {}
            for key, field in CONLLU_MISC.items():
                values = getattr(record, field)
                value = None if values is None else float(values[m - 1])
                items[key] = _format(value, digits) if value is not None and math.isfinite(value) else None
            parsed = parsed.with_misc(m, items)
        out.append(parsed)
    buffer = io.StringIO()
    write_conllu(out, buffer)
    return buffer.getvalue()


def _log_complement(probability: float) -> float:
    """log(1 − p), -inf at p = 1 (an error probability read back as the parse's log-probability)."""
    return -math.inf if probability >= 1.0 else math.log1p(-probability)


def from_conllu(text: str) -> Document:
    """Read CoNLL-U written by :func:`to_conllu`; the values found (rounded) are put back
    in each sentence's annotation, so ``head_prob``, ``tree_entropy`` etc. work again."""
    if not isinstance(text, str):
        raise ValueError(f"from_conllu expects CoNLL-U text (str), got {type(text).__name__}.")
    if not text.strip():  # what to_conllu writes for a Document without sentences
        return Document([])
    doc = CoNLL.conll2doc(input_str=text)
    for position, (sentence, parsed) in enumerate(zip(doc.sentences, read_conllu(io.StringIO(text)))):
        n = len(sentence.words)
        record: Dict[str, Any] = {
            "start": position,
            "end": position + n,
            "heads": numpy.array([w.head for w in sentence.words], dtype=numpy.int32),
        }
        for key, field in CONLLU_COMMENTS.items():
            value = parsed.comment(key)
            number = None if value is None else float(value)
            if key in CONLLU_DERIVED:  # 1 − exp(log p): stored as log p
                record[CONLLU_DERIVED[key]] = None if number is None else _log_complement(number)
            else:
                record[field] = number
        for key, field in CONLLU_MISC.items():
            found = [parsed.misc_items(m).get(key) for m in range(1, n + 1)]
            if any(value is not None for value in found):
                record[field] = numpy.array([numpy.nan if v is None else float(v) for v in found], dtype=numpy.float32)
            else:
                record[field] = None
        setattr(sentence, RECORD_ATTR, SentenceAnnotation.from_dict(record))
    return doc
