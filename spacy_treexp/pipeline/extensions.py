"""The Doc extension that carries a parser's scores to ``tree_expectations``.

``Doc._.parser_scores`` is ``None`` (no scores) or a list with one record per sentence,
in ``doc.sents`` order. Each record is a dict of plain Python / numpy values (so it
survives ``Doc.to_bytes``, ``DocBin(store_user_data=True)``, pickle and
``nlp.pipe(n_process>1)``):

- ``"start"``, ``"end"``: token offsets of the sentence in the Doc.
- ``"arc"``: float32 ndarray ``(n+1, n+1)``; ``arc[h, d]`` is the log-potential of the arc
  head ``h`` -> dependent ``d``; index 0 is ROOT, index ``i`` is token ``start + i - 1``;
  -inf is a forbidden arc (``biaffine_parser`` uses it to fix whitespace tokens' heads).
- ``"rel"``: float32 ndarray ``(n+1, n+1, L)`` of log p(label | h, d), or an object with
  that ``shape`` and numpy indexing that computes them when indexed; or ``None``.
- ``"labels"``: list of the L label strings of the ``rel`` axis, or ``None``.
- optional ``"writer"`` and ``"writer_token"``: the name of the component that wrote the
  scores and its token (:func:`new_writer_token`), by which ``tree_expectations`` applies that
  component's calibration map.

DocBin may give lists back as tuples: readers accept both. See docs/CONTRACTS.md, and
:mod:`spacy_treexp.pipeline.score_sources` for the values ``tree_expectations`` accepts.

The scores are raw material: ``tree_expectations`` sets the extension back to ``None``
once it has annotated the Doc, unless its ``keep_scores`` setting is true (they are
tens of times larger than the annotations, and would travel in every pickle and
``DocBin(store_user_data=True)``).
"""

import uuid
import weakref
from typing import Any, List, Optional, Sequence

from spacy.language import Language
from spacy.tokens import Doc

PARSER_SCORES = "parser_scores"


def score_writers(nlp: Language, names: Optional[Sequence[str]] = None) -> List[str]:
    """The components of ``nlp`` (among ``names``; None: all) that declare they write
    ``Doc._.parser_scores`` (``assigns`` of their factory)."""
    candidates = nlp.pipe_names if names is None else names
    return [name for name in candidates if f"doc._.{PARSER_SCORES}" in nlp.get_pipe_meta(name).assigns]


#: The score writers alive in this process by the token they put in their records
#: (``"writer_token"``): ``tree_expectations`` tells by it which component wrote a Doc's scores,
#: whatever it is called now (``nlp.rename_pipe``) and whichever component now has its name.
LIVE_WRITERS: "weakref.WeakValueDictionary[str, Any]" = weakref.WeakValueDictionary()


def new_writer_token(component: Any) -> str:
    """A token for ``component``'s records, unique in this process, registered in :data:`LIVE_WRITERS`."""
    token = uuid.uuid4().hex
    LIVE_WRITERS[token] = component
    return token


def register_extensions() -> None:
    """Register ``Doc._.parser_scores`` (default ``None``) once; never overrides."""
    if not Doc.has_extension(PARSER_SCORES):
        Doc.set_extension(PARSER_SCORES, default=None)


register_extensions()
