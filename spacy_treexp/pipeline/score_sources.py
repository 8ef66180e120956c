"""Swappable sources of arc scores for the ``tree_expectations`` component.

A score source is a callable ``Doc -> list of records`` registered in spaCy's
``misc`` registry, following the record format of ``Doc._.parser_scores``
(docs/CONTRACTS.md): one dict per sentence in ``doc.sents`` order with ``"start"``,
``"end"``, ``"arc"`` (n+1, n+1) log-potentials ``[head, dep]``, and optional ``"rel"``
(n+1, n+1, L) log p(label | head, dep) and ``"labels"``.

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

from typing import Any, Callable, Dict, Sequence

from spacy.tokens import Doc
from spacy.util import registry

import spacy_treexp.pipeline.extensions  # noqa: F401  (registers Doc._.parser_scores)

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

