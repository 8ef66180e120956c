"""Swappable sources of arc scores for the ``tree_expectations`` component.

A score source is a callable ``Doc -> list of records`` registered in spaCy's ``misc``
registry, following the record format of ``Doc._.parser_scores`` (docs/CONTRACTS.md): one
dict per sentence in ``doc.sents`` order with ``"start"``, ``"end"``, ``"arc"`` (n+1, n+1)
log-potentials ``[head, dep]``, and optional ``"rel"`` (n+1, n+1, L) log p(label | head,
dep) and ``"labels"``.

The default, ``spacy_treexp.parser_scores.v1``, reads ``Doc._.parser_scores``, which the
``biaffine_parser`` component writes; any parser that writes that extension works. To
plug in another parser, register your own source and name it in the config::

    @spacy.registry.misc("my_scores.v1")
    def make_my_scores():
        def get_scores(doc):
            return [{"start": s.start, "end": s.end, "arc": ..., "rel": None,
                     "labels": None} for s in doc.sents]
        return get_scores

    nlp.add_pipe("tree_expectations", config={"scores": {"@misc": "my_scores.v1"}})
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Sequence

import numpy
from spacy.tokens import Doc, Span
from spacy.util import registry

import spacy_treexp.pipeline.extensions  # noqa: F401  (registers Doc._.parser_scores)
from spacy_treexp.annotate import SentenceScores

ScoreSource = Callable[[Doc], Sequence[Dict[str, Any]]]


class MissingScoresError(ValueError):
    """A Doc reached ``tree_expectations`` without arc scores."""


def read_parser_scores(doc: Doc) -> Sequence[Dict[str, Any]]:
    """Return ``doc._.parser_scores``, or raise naming the missing upstream component."""
    records = doc._.get("parser_scores")
    if records is None:
        raise MissingScoresError(
            "Doc has no arc scores (Doc._.parser_scores is None): 'tree_expectations' "
            "needs an upstream parser that writes them, e.g. add 'biaffine_parser' "
            "before 'tree_expectations' in the pipeline (spaCy's built-in transition-"
            "based 'parser' has no arc scores). Text: "
            f"{doc.text[:60]!r}"
        )
    return list(records)


@registry.misc("spacy_treexp.parser_scores.v1")
def make_parser_scores() -> ScoreSource:
    """The default source: the scores stored in ``Doc._.parser_scores``."""
    return read_parser_scores


def sentence_scores(doc: Doc, records: Sequence[Dict[str, Any]]) -> List[SentenceScores]:
    """The core's records of ``doc``'s sentences from a score source's records, checked
    against ``doc.sents``; each carries the Doc's tree (if parsed) and relations."""
    records = list(records)
    if not doc.has_annotation("SENT_START"):
        raise ValueError(
            "tree_expectations: the Doc has no sentence boundaries; add a 'senter' or "
            "'sentencizer' (and a parser writing arc scores) before it."
        )
    sents = list(doc.sents)
    if len(records) != len(sents):
        raise ValueError(
            f"tree_expectations: the score source gave {len(records)} sentence records "
            f"but the Doc has {len(sents)} sentences ({doc.text[:60]!r})."
        )
    has_parse = doc.has_annotation("DEP")
    return [_sentence(sent, record, has_parse) for sent, record in zip(sents, records)]


def _sentence(sent: Span, record: Dict[str, Any], has_parse: bool) -> SentenceScores:
    n = len(sent)
    if record.get("start") != sent.start or record.get("end") != sent.end:
        raise ValueError(
            f"tree_expectations: score record ({record.get('start')}, {record.get('end')}) "
            f"does not match the sentence ({sent.start}, {sent.end}) {sent.text[:40]!r}."
        )
    arc = numpy.asarray(record["arc"])
    if arc.shape != (n + 1, n + 1):
        raise ValueError(
            f"tree_expectations: arc scores of shape {arc.shape} for a sentence of {n} "
            f"words (expected {(n + 1, n + 1)}): {sent.text[:40]!r}."
        )
    rel = record.get("rel")
    labels = record.get("labels")
    if rel is not None:
        rel = numpy.asarray(rel)
        if labels is None or rel.shape != (n + 1, n + 1, len(labels)):
            raise ValueError(
                f"tree_expectations: relation scores of shape {rel.shape} do not match "
                f"{n} words and {None if labels is None else len(labels)} labels: "
                f"{sent.text[:40]!r}."
            )
    return SentenceScores(
        arc=arc,
        rel=rel,
        labels=None if labels is None else list(labels),
        start=sent.start,
        text=sent.text,
        heads=_doc_heads(sent) if has_parse else None,
        deprels=[token.dep_ for token in sent],
    )


def _doc_heads(sent: Span) -> numpy.ndarray:
    """The sentence's parse as heads ``(n,)``, 0 = ROOT."""
    heads = numpy.empty(len(sent), dtype=numpy.int64)
    for m, token in enumerate(sent, start=1):
        if token.head.i == token.i:
            heads[m - 1] = 0
        elif sent.start <= token.head.i < sent.end:
            heads[m - 1] = token.head.i - sent.start + 1
        else:
            raise ValueError(
                f"tree_expectations: token {token.i} ({token.text!r}) has its head "
                "outside its sentence; sentence boundaries and parse disagree."
            )
    return heads
