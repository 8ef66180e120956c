"""Swappable sources of arc scores for the ``tree_expectations`` component, and the
contract their records are held to.

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

The contract, checked for every sentence before the engine runs. A breach raises
:class:`ScoreSourceError` (a ``ValueError``) naming the component, the score source (its
registered name when it can be found, else its ``repr``), the sentence and what is wrong,
with the (head, dependent) of a bad value:

* The source returns a list (or tuple, or another iterable that is not a ``str`` or a
  dict) of one dict per sentence. Whatever the source raises reaches the component's error
  handler as a :class:`ScoreSourceError` whose ``__cause__`` is the original exception: a
  bare ``KeyError`` would otherwise be reported by spaCy as E109 ("did you forget to call
  initialize()?"), since ``Language.__call__`` turns every ``KeyError`` of a component
  into that message.
* ``"start"``, ``"end"``: the sentence's token offsets, ``sent.start`` and ``sent.end``.
* ``"arc"``: an array (or nested lists, or a torch tensor) of numbers of shape
  ``(n+1, n+1)``, ``arc[h, d]`` the log-potential of the arc h -> d; ROOT's column and the
  diagonal are ignored. Every other cell is finite, or ``-inf`` for a forbidden arc; NaN
  and ``+inf`` are refused. The allowed arcs must leave a tree (with ``single_root``, a
  tree with one child of ROOT): every ROOT arc forbidden, a word with no allowed head, or
  words that ROOT cannot reach are refused.
* ``"heads"``, ``"deps"`` (optional): the tree the annotations describe, ``(n,)`` heads with
  0 = ROOT and n relations, when it is not the Doc's parse (``biaffine_parser`` with
  ``overwrite = false`` keeps a host parser's tree on the Doc); default: the Doc's parse.
* ``"members"`` (optional): ``(K, n+1, n+1)`` arc log-potentials of K ensemble members
  (``biaffine_parser``'s MC-dropout members, a Stanza ensemble's parsers), held to the rules of
  ``"arc"`` each; ``"member_weights"`` (optional): their K non-negative mixture weights
  (default: equal). With members, ``tree_expectations`` adds the epistemic uncertainty of
  their mixture (``token._.head_mutual_information``, ``sent._.mutual_information``) and the
  parse's risk under it (``sent._.mixture_error_probability``, ``token._.mixture_head_prob``).
  ``"member_parsers"`` (optional, default 1): how many parsers the members come from, read by a
  later ``biaffine_parser`` with ``mixture_member = true`` (it joins with weight 1/(P+1)).
* ``"rel"``: ``None``, or numbers of shape ``(n+1, n+1, L)`` with ``"labels"`` the L
  distinct label strings of the last axis. ``rel[h, d, l]`` is log p(l | h, d): finite, or
  ``-inf`` for an impossible label; NaN and ``+inf`` are refused, and so is an allowed arc
  whose labels are all ``-inf``. Finite scores that are not normalised over the labels
  (``|log sum_l exp rel[h, d, l]| > 1e-3`` for an allowed arc) are taken as logits and
  normalised (log-softmax over the label axis), so that ``token._.dep_prob`` is a
  probability; normalised scores are used as given. ``rel`` may also be an object that is
  not an array but has a ``shape`` and numpy indexing (``rel[h, d]``, ``rel[heads,
  arange(1, n+1)]``), such as relation scores computed when indexed: it is checked by
  shape only (checking its values would build the dense array it avoids) and its values
  are its provider's responsibility.
* ``"rel_normalised"`` (optional): ``True`` when the source computed ``rel`` as a log-softmax
  over labels itself (``biaffine_parser`` does): its sums over labels are then not checked
  (its values still are, for NaN and +inf), and they are its provider's responsibility, as
  with relation scores computed when indexed.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Union

import numpy
import torch
from spacy.attrs import DEP, HEAD
from spacy.tokens import Doc, Span
from spacy.util import registry

import spacy_treexp.pipeline.extensions  # noqa: F401  (registers Doc._.parser_scores)
from spacy_treexp.annotate import SentenceScores, set_text_source
from spacy_treexp.annotate.scan import scan_sentence
from spacy_treexp.engine.native import native_requested

ScoreSource = Callable[[Doc], Sequence[Dict[str, Any]]]

#: The registered name of the default source.
PARSER_SCORES_SOURCE = "spacy_treexp.parser_scores.v1"

#: Relation scores whose log-sum over labels is further than this from 0 for an allowed arc
#: are logits, and are normalised (float32 log-softmax is exact to about 1e-6).
LOG_NORMALISED_TOLERANCE = 1e-3

#: Label scores the normalisation check reads at once (bounds its temporary memory).
_CHUNK_CELLS = 1 << 22

#: Label lists already found to be distinct strings (at most 64 kept).
_CHECKED_LABELS: set = set()
#: The last of them (a list compares with a list element by element, the same strings by identity).
_LAST_CHECKED_LABELS: List[str] = []


class Errors:
    """The component's messages about score sources and settings, in one place (codes
    after spaCy's ``Errors`` table, prefixed ``TX`` so as not to be taken for spaCy's)."""

    TXE001 = (
        "[TXE001] {where}: the score source returned None; it must return a list with one record (dict) per sentence."
    )
    TXE002 = (
        "[TXE002] {where}: the score source returned {kind}; it must return a list with one record (dict) per sentence."
    )
    TXE003 = "[TXE003] {where}: the score source failed with {error}"
    TXE004 = "[TXE004] {where}: the score source gave {got} sentence records, but the Doc has {sents} sentences."
    TXE005 = "[TXE005] {where}: the record is {kind}, not a dict with 'start', 'end' and 'arc'."
    TXE006 = "[TXE006] {where}: the record has no {key!r} (its keys: {keys})."
    TXE007 = (
        "[TXE007] {where}: the record spans tokens ({start}, {end}), but the sentence spans ({sent_start}, {sent_end})."
    )
    TXE008 = "[TXE008] {where}: {what} are not an array of numbers: {error}"
    TXE009 = "[TXE009] {where}: {what} must be numbers, got {kind}."
    TXE010 = "[TXE010] {where}: arc scores of shape {shape} for a sentence of {n} words (expected {expected})."
    TXE011 = (
        "[TXE011] {where}: relation scores must be an array of shape (n+1, n+1, L), nested lists, or an object "
        "with a 'shape' and numpy indexing; got {kind}."
    )
    TXE012 = (
        "[TXE012] {where}: relation scores come without 'labels' (the names of their last axis); give "
        "'labels' or set 'rel' to None."
    )
    TXE013 = "[TXE013] {where}: 'labels' must be a list of strings, got {got}."
    TXE014 = "[TXE014] {where}: 'labels' names {label!r} twice; labels must be distinct."
    TXE015 = (
        "[TXE015] {where}: relation scores of shape {shape} do not match {n} words and {n_labels} labels "
        "(expected {expected})."
    )
    TXE016 = "[TXE016] {message}"
    TXE017 = "[TXE017] {where}: the scores admit no dependency tree: {problem}. -inf forbids an arc."
    TXE018 = (
        "[TXE018] {where}: every label of the allowed arc (head {head}, dependent {dep}) is -inf; an arc that "
        "may be chosen needs a label with a finite log-probability."
    )
    TXE019 = (
        "[TXE019] {name}: 'scores' must be a score source, a callable Doc -> list of records (e.g. "
        "{{'@misc': '{default}'}}), got {got!r}."
    )
    TXE020 = "[TXE020] {name}: keep_scores must be True or False, got {got!r}."
    TXE021 = (
        "[TXE021] {where}: the Doc has no arc scores (Doc._.parser_scores is None): 'tree_expectations' "
        "needs an upstream parser that writes them, e.g. add 'biaffine_parser' before 'tree_expectations' "
        "in the pipeline (spaCy's built-in transition-based 'parser' has no arc scores). Text: {text!r}"
    )
    TXE022 = (
        "[TXE022] {where}: the Doc has no arc scores (Doc._.parser_scores is None) but already has "
        "tree_expectations annotations: a tree_expectations component dropped the parser's scores after "
        "annotating it. To run the component again on the same Doc, set keep_scores = true. Text: {text!r}"
    )
    TXE023 = (
        "[TXE023] {where}: the Doc has no sentence boundaries; add a 'senter' or 'sentencizer' (and a parser "
        "writing arc scores) before it."
    )
    TXE024 = (
        "[TXE024] {where}: token {i} ({text!r}) has its head outside its sentence; the Doc's sentence "
        "boundaries and parse disagree."
    )
    TXE025 = (
        "[TXE025] {where}: the record's own tree ('heads', 0 = ROOT, and 'deps') must give one head in 0..{n} "
        "(and one relation) per word; got {got}."
    )
    TXE026 = (
        "[TXE026] {name}: these scores were written by {writer!r}, but its calibration map is the one of "
        "{fitted!r}, fitted on that parser's scores. {hint}"
    )
    TXE027 = (
        "[TXE027] {name}: sentence_encoder is set ({path}), but these scores have no calibration map, or one that "
        "carries no out-of-domain model that reads a sentence embedding (novelty.encoder_domain); fit one with "
        "benchmarks/ood_novelty.py --sentence-encoder DIR --write-map MAP, or unset sentence_encoder."
    )
    TXE028 = (
        "[TXE028] {name}: the sentence encoder in {path} gives embeddings of width {got}, but the map's "
        "out-of-domain model was fitted on ones of width {expected} (another encoder)."
    )
    TXE029 = (
        "[TXE029] {where}: the record gives 'member_weights' but no 'members'; give the members' arc scores "
        "with them, or leave the weights out."
    )
    TXE030 = (
        "[TXE030] {name}: the sentence encoder in {path} is not the one the map's out-of-domain model was "
        "fitted with (its embedding of a fixed text differs from the one stored with the model): another "
        "encoder's embeddings, even of the same width, would give wrong out_of_domain values. Use that "
        "encoder, or fit a model on this one (benchmarks/ood_novelty.py --sentence-encoder DIR --write-map MAP)."
    )


class ScoreSourceError(ValueError):
    """A score source failed, or its records break the contract (see the module doc)."""


class MissingScoresError(ScoreSourceError):
    """A Doc reached ``tree_expectations`` without arc scores."""


def read_parser_scores(doc: Doc) -> Sequence[Dict[str, Any]]:
    """Return ``doc._.parser_scores``, or raise naming the missing upstream component."""
    records = doc._.get("parser_scores")
    if records is None:
        annotated = Doc.has_extension("tree_expectations") and doc._.get("tree_expectations") is not None
        message = Errors.TXE022 if annotated else Errors.TXE021
        raise MissingScoresError(message.format(where=f"score source {PARSER_SCORES_SOURCE!r}", text=doc.text[:60]))
    return list(records)


@registry.misc(PARSER_SCORES_SOURCE)
def make_parser_scores() -> ScoreSource:
    """The default source: the scores stored in ``Doc._.parser_scores``."""
    return read_parser_scores


def source_name(source: Any) -> str:
    """The score source as messages name it: its registered name in quotes when it is
    found in spaCy's ``misc`` registry (the registered function itself, a function defined
    inside it, or an instance of a registered class), else its ``repr``."""
    if source is read_parser_scores:
        return repr(PARSER_SCORES_SOURCE)
    try:
        registered = registry.misc.get_all()
    except Exception:  # a broken third-party entry point must not hide the real error
        registered = {}
    qualname = getattr(source, "__qualname__", "")
    module = getattr(source, "__module__", None)
    for name, func in registered.items():
        inner = getattr(func, "__qualname__", None)
        if (
            source is func
            or (isinstance(func, type) and isinstance(source, func))
            or (inner and module == getattr(func, "__module__", None) and qualname.startswith(f"{inner}.<locals>."))
        ):
            return repr(name)
    return repr(source)


def call_source(source: ScoreSource, doc: Doc, where: str) -> List[Any]:
    """The records ``source`` gives for ``doc`` as a list; anything the source raises comes
    back as :class:`ScoreSourceError` (see the module doc on ``KeyError``). ``where`` names
    the component and the source in messages."""
    try:
        records = source(doc)
    except ScoreSourceError:
        raise
    except Exception as error:
        raise ScoreSourceError(Errors.TXE003.format(where=_on(where, doc), error=_error(error))) from error
    if records is None:
        raise ScoreSourceError(Errors.TXE001.format(where=_on(where, doc)))
    if isinstance(records, (str, bytes, Mapping)) or not hasattr(records, "__iter__"):
        raise ScoreSourceError(Errors.TXE002.format(where=_on(where, doc), kind=_kind(records)))
    try:
        return list(records)
    except Exception as error:  # a generator that fails part way
        raise ScoreSourceError(Errors.TXE003.format(where=_on(where, doc), error=_error(error))) from error


def _on(where: str, doc: Doc) -> str:
    """``where`` and the Doc, for a message about the Doc as a whole."""
    return f"{where}, Doc {doc.text[:60]!r}"


def _error(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"


def sentence_scores(
    doc: Doc,
    records: Sequence[Any],
    where: str = "tree_expectations",
    *,
    single_root: bool = True,
    native: Optional[bool] = None,
) -> List[SentenceScores]:
    """The core's records of ``doc``'s sentences from a score source's records, held to the
    contract of the module doc (``where`` names the component and the source in messages);
    each carries the Doc's tree (if parsed) and relations, and its text, built from the Doc
    when first read (:func:`~spacy_treexp.annotate.set_text_source`; until then the record
    holds on to its Doc). ``native``: whether
    the checks' kernels may run (default: :func:`~spacy_treexp.engine.native.native_requested`;
    a caller converting many Docs reads it once)."""
    records = list(records)
    if not doc.has_annotation("SENT_START"):
        raise ScoreSourceError(Errors.TXE023.format(where=_on(where, doc)))
    sents = list(doc.sents)
    if len(records) != len(sents):
        raise ScoreSourceError(Errors.TXE004.format(where=_on(where, doc), got=len(records), sents=len(sents)))
    columns = doc.to_array([HEAD, DEP])  # both in one read
    parsed = doc.has_annotation("DEP")
    heads = _local_heads(doc, sents, where, columns[:, 0]) if parsed else None
    # no parse, no relations: "" for every word would be fitted as a relation of its own
    deprels = _relation_names(doc, columns[:, 1]) if parsed else None
    doc_text = _DocText(doc)
    scan = native_requested() if native is None else native
    out = []
    for k, (sent, record) in enumerate(zip(sents, records)):
        here = _SentenceName(where, k, sent)
        scores = _sentence(sent, record, here, single_root, scan)
        set_text_source(scores, doc_text.of(sent))
        scores.deprels = None if deprels is None else deprels[sent.start : sent.end]
        scores.heads = None if heads is None else heads[sent.start : sent.end]
        if isinstance(record, Mapping) and record.get("heads") is not None:
            _own_tree(scores, record, len(sent), here)
        out.append(scores)
    return out


def _sentence(sent: Span, record: Any, where: Where, single_root: bool, scan: bool) -> SentenceScores:
    """One sentence's scores checked and converted (see the module doc); ``scan``: the usual
    case is settled first in one pass (:func:`~spacy_treexp.annotate.scan.scan_sentence`)."""
    n = len(sent)
    if not isinstance(record, Mapping):
        raise ScoreSourceError(Errors.TXE005.format(where=where, kind=_kind(record)))
    for key in ("start", "end", "arc"):
        if key not in record:
            raise ScoreSourceError(Errors.TXE006.format(where=where, key=key, keys=sorted(map(str, record))))
    if record["start"] != sent.start or record["end"] != sent.end:
        raise ScoreSourceError(
            Errors.TXE007.format(
                where=where, start=record["start"], end=record["end"], sent_start=sent.start, sent_end=sent.end
            )
        )
    arc = _numbers(record["arc"], "arc scores", where)
    if arc.shape != (n + 1, n + 1):
        raise ScoreSourceError(Errors.TXE010.format(where=where, shape=arc.shape, n=n, expected=(n + 1, n + 1)))
    rel = _relation_scores(record.get("rel"), where)
    labels = None if rel is None else _labels(record.get("labels"), where)
    if rel is not None and labels is not None and tuple(rel.shape) != (n + 1, n + 1, len(labels)):
        expected = (n + 1, n + 1, len(labels))
        raise ScoreSourceError(
            Errors.TXE015.format(where=where, shape=tuple(rel.shape), n=n, n_labels=len(labels), expected=expected)
        )
    scores = SentenceScores(arc=arc, rel=rel, labels=labels, start=sent.start)
    if record.get("members") is not None:
        scores.members = _numbers(record["members"], "member arc scores", where)
        if record.get("member_weights") is not None:
            scores.member_weights = _numbers(record["member_weights"], "member weights", where)
    elif record.get("member_weights") is not None:  # weights of nothing: a source that lost its members
        raise ScoreSourceError(Errors.TXE029.format(where=where))
    # the usual case in one pass (annotate/scan.py); whatever it does not clear is checked below
    as_given = record.get("rel_normalised") is True  # the source normalised them itself
    dense = rel if isinstance(rel, numpy.ndarray) else None
    found = scan_sentence(arc, dense, LOG_NORMALISED_TOLERANCE, sums=not as_given) if scan else None
    clean = found if found is not None and found.values_clean else None
    try:
        scores.check(where, values_scanned=clean is not None)
    except ValueError as error:
        raise ScoreSourceError(Errors.TXE016.format(message=error)) from error
    if clean is not None and clean.all_allowed and scores.members is None:
        allowed = None  # every arc allowed: a tree exists
    else:
        allowed = _allowed(arc)
        problem = _no_tree(allowed, sent, single_root)
        if problem is not None:
            raise ScoreSourceError(Errors.TXE017.format(where=where, problem=problem))
    for k, member in enumerate(() if scores.members is None else scores.members):
        member_allowed = _allowed(member)
        problem = None if (member_allowed == allowed).all() else _no_tree(member_allowed, sent, single_root)
        if problem is not None:
            raise ScoreSourceError(Errors.TXE017.format(where=f"{where}, member {k}", problem=problem))
    if dense is not None and not as_given and not (clean is not None and clean.rel_normalised):
        scores.rel = _log_probabilities(rel, _allowed(arc) if allowed is None else allowed, where)
    return scores


def _allowed(arc: numpy.ndarray) -> numpy.ndarray:
    """The arcs the engine may use, bool ``(n+1, n+1)``: not -inf, not into ROOT, not loops."""
    allowed = arc > -numpy.inf
    allowed[:, 0] = False
    allowed.flat[:: arc.shape[0] + 1] = False  # the diagonal
    return allowed


def _own_tree(scores: SentenceScores, record: Mapping, n: int, where: Where) -> None:
    """A record's own ``"heads"`` ``(n,)`` (0 = ROOT) and ``"deps"``: the tree the annotations
    describe when it is not the Doc's parse (``biaffine_parser`` with ``overwrite = false``)."""
    heads = numpy.asarray(record["heads"])
    deps = record.get("deps")
    if heads.shape != (n,) or heads.dtype.kind not in "iu" or ((heads < 0) | (heads > n)).any():
        raise ScoreSourceError(Errors.TXE025.format(where=where, n=n, got=heads.tolist()))
    if deps is not None and len(deps) != n:
        raise ScoreSourceError(Errors.TXE025.format(where=where, n=n, got=list(deps)))
    scores.heads = heads.astype(numpy.int64)
    scores.deprels = None if deps is None else [str(d) for d in deps]


def _kind(value: Any) -> str:
    """How a message names what a source gave instead of what it should."""
    if isinstance(value, numpy.ndarray):
        return f"a numpy array of dtype {value.dtype}"
    name = type(value).__name__
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name} ({value!r:.60})"


def _numbers(value: Any, what: str, where: Where) -> numpy.ndarray:
    """``value`` (an array, nested lists or a torch tensor) as a numpy array of numbers."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() and value.dtype not in (torch.float32, torch.float64):
            value = value.float()  # bfloat16 has no numpy dtype; float16 is widened alike
        value = value.detach().cpu().numpy()
    try:
        array = numpy.asarray(value)
    except (TypeError, ValueError) as error:
        raise ScoreSourceError(Errors.TXE008.format(where=where, what=what, error=error)) from error
    if array.dtype.kind not in "fiu":
        kind = _kind(value) if array.dtype.kind == "O" else f"an array of dtype {array.dtype}"
        raise ScoreSourceError(Errors.TXE009.format(where=where, what=what, kind=kind))
    return array


def _relation_scores(value: Any, where: Where) -> Any:
    """``None``, an array of numbers, or an object that computes the scores when indexed
    (kept as it is: ``numpy.asarray`` would build its dense array)."""
    if value is None:
        return None
    if isinstance(value, (numpy.ndarray, list, tuple, torch.Tensor)):
        return _numbers(value, "relation scores", where)
    if hasattr(value, "shape") and hasattr(value, "__getitem__"):
        return value
    raise ScoreSourceError(Errors.TXE011.format(where=where, kind=_kind(value)))


def _labels(value: Any, where: Where) -> List[str]:
    """The relation names of the ``rel`` axis: a list of distinct strings."""
    if value is None:
        raise ScoreSourceError(Errors.TXE012.format(where=where))
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ScoreSourceError(Errors.TXE013.format(where=where, got=_kind(value)))
    labels = list(value)
    if labels == _LAST_CHECKED_LABELS:  # a source gives the same label list for every sentence
        return labels
    try:
        if tuple(labels) in _CHECKED_LABELS:
            _LAST_CHECKED_LABELS[:] = labels
            return labels
    except TypeError:  # an unhashable label: refused below
        pass
    if set(map(type, labels)) - {str}:
        other = next(label for label in labels if not isinstance(label, str))
        raise ScoreSourceError(Errors.TXE013.format(where=where, got=f"a list holding {_kind(other)}"))
    if len(set(labels)) < len(labels):
        twice = next(label for k, label in enumerate(labels) if label in labels[:k])
        raise ScoreSourceError(Errors.TXE014.format(where=where, label=twice))
    if len(_CHECKED_LABELS) >= 64:
        _CHECKED_LABELS.clear()
    _CHECKED_LABELS.add(tuple(labels))
    _LAST_CHECKED_LABELS[:] = labels
    return labels


def _no_tree(allowed: numpy.ndarray, sent: Span, single_root: bool) -> Optional[str]:
    """Why the ``allowed`` arcs ``(n+1, n+1)`` leave no tree (with ``single_root``, no tree
    with one child of ROOT), or None. Only looked into when an arc is forbidden."""
    n = allowed.shape[0] - 1
    if int(allowed.sum()) == n * n:  # every arc the engine reads is allowed
        return None

    def word(d: int) -> str:
        return f"word {d} ({sent[d - 1].text!r}, token {sent.start + d - 1})"

    if not allowed[0].any():
        return "every ROOT arc is forbidden"
    no_head = numpy.flatnonzero(~allowed[:, 1:].any(axis=0)) + 1
    if len(no_head):
        return f"{word(int(no_head[0]))} has no allowed head"
    unreached = numpy.flatnonzero(~_reachable(allowed, 0)[1:]) + 1
    if len(unreached):
        return f"{word(int(unreached[0]))} cannot be reached from ROOT through allowed arcs"
    if single_root:
        between_words = allowed.copy()
        between_words[0] = False
        candidates = allowed[0].copy()
        while candidates.any():
            child = int(numpy.flatnonzero(candidates)[0])
            reached = _reachable(between_words, child)
            if reached[1:].all():
                return None
            candidates &= ~reached  # a word this one reaches reaches no more than it
        return "no word that ROOT may govern reaches every other word, so there is no single-root tree"
    return None


def _reachable(allowed: numpy.ndarray, start: int) -> numpy.ndarray:
    """Which nodes ``start`` reaches through ``allowed`` arcs (breadth first), bool ``(n+1,)``."""
    reached = numpy.zeros(allowed.shape[0], dtype=bool)
    reached[start] = True
    frontier = numpy.array([start])
    while frontier.size:
        new = allowed[frontier].any(axis=0) & ~reached
        reached |= new
        frontier = numpy.flatnonzero(new)
    return reached


def _log_probabilities(rel: numpy.ndarray, allowed: numpy.ndarray, where: Where) -> numpy.ndarray:
    """``rel`` itself when it holds log-probabilities over labels for every allowed arc,
    else its log-softmax over labels; refuses an allowed arc with no possible label."""
    if _normalised(rel, allowed):  # the usual case, settled without logarithms
        return rel
    log_sums = _log_sum_exp(rel)
    dead = allowed & numpy.isneginf(log_sums)
    if dead.any():
        head, dep = (int(i) for i in numpy.argwhere(dead)[0])
        raise ScoreSourceError(Errors.TXE018.format(where=where, head=head, dep=dep))
    if not (numpy.abs(log_sums[allowed]) > LOG_NORMALISED_TOLERANCE).any():
        return rel
    with numpy.errstate(invalid="ignore"):
        shift = numpy.where(numpy.isfinite(log_sums), log_sums, 0)
        return rel - shift[..., None].astype(log_sums.dtype)


def _normalised(rel: numpy.ndarray, allowed: numpy.ndarray) -> bool:
    """True when no label score exceeds the tolerance (so ``exp`` cannot overflow) and every
    allowed arc's label probabilities sum to within ``LOG_NORMALISED_TOLERANCE`` of 1 in log
    space; False sends the scores to the full check (which also finds an allowed arc whose
    labels are all impossible: its sum is 0). Small arrays only: one temporary copy."""
    if rel.size > _CHUNK_CELLS or not rel.max() <= LOG_NORMALISED_TOLERANCE:
        return False
    probabilities = numpy.exp(rel)
    sums = (probabilities @ numpy.ones(rel.shape[-1], dtype=probabilities.dtype))[allowed]
    return bool(sums.size) and _NORMALISED_LOW <= sums.min() and sums.max() <= _NORMALISED_HIGH


#: The bounds of a normalised sum of label probabilities, exp(∓ LOG_NORMALISED_TOLERANCE).
_NORMALISED_LOW, _NORMALISED_HIGH = math.exp(-LOG_NORMALISED_TOLERANCE), math.exp(LOG_NORMALISED_TOLERANCE)


def _log_sum_exp(rel: numpy.ndarray) -> numpy.ndarray:
    """log Σ_l exp rel[h, d, l], ``(n+1, n+1)``, in at least float32 (-inf where every label
    is -inf). Without the usual shift by the maximum (half the time), which matters only
    where a sum overflows or underflows: those cells are summed again with it."""
    dtype = numpy.result_type(rel.dtype, numpy.float32)
    size, _, n_labels = rel.shape
    log_sums = numpy.empty((size, size), dtype=dtype)
    rows = max(1, _CHUNK_CELLS // max(1, size * n_labels))
    with numpy.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        for begin in range(0, size, rows):
            block = rel[begin : begin + rows].astype(dtype, copy=False)
            log_sums[begin : begin + rows] = numpy.log(numpy.exp(block).sum(axis=-1))
        if not numpy.isfinite(log_sums).all():
            again = numpy.nonzero(~numpy.isfinite(log_sums))
            block = rel[again].astype(dtype, copy=False)
            top = block.max(axis=-1)
            top = numpy.where(numpy.isfinite(top), top, 0)
            log_sums[again] = top + numpy.log(numpy.exp(block - top[..., None]).sum(axis=-1))
    return log_sums


class _DocText:
    """A Doc's text, built once when a sentence's text is first read (``Doc.text`` makes a
    Token per word: more than the rest of a short sentence's conversion; only seeded samples
    and messages read it)."""

    def __init__(self, doc: Doc) -> None:
        self.doc = doc
        self.text: Optional[str] = None

    def of(self, sent: Span) -> Callable[[], str]:
        """``sent.text`` when called."""
        return lambda: self.whole()[sent.start_char : sent.end_char]

    def whole(self) -> str:
        if self.text is None:
            self.text = self.doc.text
        return self.text


def sentence_name(where: str, doc: Doc, k: int) -> str:
    """How messages name sentence ``k`` of ``doc`` (the component and source ``where`` first),
    as the score contract's own messages do."""
    return str(_SentenceName(where, k, list(doc.sents)[k]))


class _SentenceName:
    """How messages name sentence ``k`` of a Doc, built only when a message is."""

    __slots__ = ("where", "k", "sent")

    def __init__(self, where: str, k: int, sent: Span) -> None:
        self.where, self.k, self.sent = where, k, sent

    def __str__(self) -> str:
        sent = self.sent
        return f"{self.where}, sentence {self.k} (tokens {sent.start}-{sent.end}, {sent.text[:40]!r})"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


#: How messages name a place: a string, or a sentence's name built only when a message is.
Where = Union[str, _SentenceName]


def _local_heads(doc: Doc, sents: Sequence[Span], where: str, head_column: numpy.ndarray) -> numpy.ndarray:
    """Every token's head within its sentence, ``(len(doc),)`` with 0 = ROOT and word m of a
    sentence numbered m (the engine's convention), from the Doc's parse (``head_column``: its
    ``HEAD`` attribute), for all sentences at once; a head outside its token's sentence is
    refused. (Python lists: for sentences of tens of words, cheaper than numpy's per-call cost.)"""
    offsets = head_column.astype(numpy.int64).tolist()  # signed offsets stored as uint64
    local = [0] * len(offsets)
    for k, sent in enumerate(sents):
        start, end = sent.start, sent.end
        for i in range(start, end):
            head = i + offsets[i]
            if head == i:
                continue  # a root: 0
            if not start <= head < end:
                here = str(_SentenceName(where, k, sent))
                raise ValueError(Errors.TXE024.format(where=here, i=i, text=doc[i].text))
            local[i] = head - start + 1
    return numpy.array(local, dtype=numpy.int64)


def _relation_names(doc: Doc, dep_column: numpy.ndarray) -> List[str]:
    """Every token's relation (``token.dep_``; ``dep_column``: the Doc's ``DEP`` attribute),
    through a cache of the names of the hash ids seen (a StringStore's id of a string is the
    same in every vocab: a hash or a symbol)."""
    ids = dep_column.tolist()
    try:
        return [_RELATION_NAMES[i] for i in ids]
    except KeyError:
        if len(_RELATION_NAMES) > 4096:
            _RELATION_NAMES.clear()
        strings = doc.vocab.strings
        _RELATION_NAMES.update((i, strings[i]) for i in ids)
        return [_RELATION_NAMES[i] for i in ids]


#: The relation names of the DEP ids seen (see :func:`_relation_names`).
_RELATION_NAMES: Dict[int, str] = {}
