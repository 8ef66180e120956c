"""The typed records that cross the annotation core's boundary.

:class:`SentenceScores` is what a parser says about one sentence (its arc and relation
scores, and optionally its own tree); :class:`SentenceAnnotation` is what the tree
distribution defined by those scores knows about it. Both hold numpy arrays and plain
Python values only (no torch tensors), so an annotation survives pickle, ``Doc.to_bytes``,
``DocBin(store_user_data=True)`` and ``nlp.pipe(n_process>1)``: ``to_dict`` / ``from_dict``
give its msgpack-friendly form and ``to_bytes`` / ``from_bytes`` its bytes (as
spacy-transformers does for ``doc._.trf_data``).

Conventions: index 0 is ROOT; word ``m`` (1-based) of a sentence is its m-th word; head
arrays use the CoNLL-U numbering (0 = ROOT, words 1..n).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy
import srsly


@dataclass
class SentenceScores:
    """One sentence's parser output in the engine's convention.

    Attributes:
        arc: ``(n+1, n+1)`` log-potentials, ``arc[h, m]`` for the arc h -> m; ``-inf``
            forbids an arc; column 0 and the diagonal are ignored.
        rel: ``(n+1, n+1, L)`` log p(label l | h, m), or None.
        labels: the L relation names of the ``rel`` axis, or None.
        start: where the sentence starts in its document (spaCy: the token index of its
            first word; Stanza: its position among the document's sentences).
        text: the sentence's identity within the document for seeding its samples
            (``sent.text``; Stanza: the same text of the Doc ``to_spacy`` makes). An adapter
            may leave it to be built when first read (:func:`set_text_source`).
        heads: the parser's own tree, ``(n,)`` with 0 = ROOT, to which ``head_prob``,
            ``dep_prob`` and ``expected_attachment`` refer; None: the MAP tree of ``arc``.
        deprels: the parser's relation of each word (for ``dep_prob``), or None.
        members: ``(K, n+1, n+1)`` arc log-potentials of K members of an ensemble (Stanza's
            ensemble parsers, checkpoints, MC-dropout passes), in ``arc``'s convention, or
            None. With members, the annotation also carries the epistemic uncertainty of
            their mixture (``spacy_treexp.engine.TreeMixture``); ``arc`` stays the scores
            of the tree the parser reports.
        member_weights: ``(K,)`` mixture weights of the members (non-negative, normalised
            when used), or None for equal weights.
    """

    arc: numpy.ndarray
    rel: Optional[numpy.ndarray] = None
    labels: Optional[List[str]] = None
    start: int = 0
    text: str = ""
    heads: Optional[numpy.ndarray] = None
    deprels: Optional[List[str]] = None
    members: Optional[numpy.ndarray] = None
    member_weights: Optional[numpy.ndarray] = None

    @property
    def n(self) -> int:
        """Number of words."""
        return int(self.arc.shape[-1]) - 1

    def replace(self, **changes: Any) -> SentenceScores:
        """A copy with ``changes`` (``dataclasses.replace``), whose text, if not yet built
        (:func:`set_text_source`), is still built only when read."""
        changes.setdefault("text", self.__dict__["_text"])
        return dataclasses.replace(self, **changes)

    def __getstate__(self) -> Dict[str, Any]:
        """The fields for pickle, with ``text`` built (a text source need not pickle)."""
        state = dict(self.__dict__)
        state["_text"] = self.text
        return state

    def check(self, where: object = "sentence", *, values_scanned: bool = False) -> None:
        """Raise ``ValueError`` naming ``where`` (formatted into the message only when one is
        raised) if the arrays do not fit together or hold values the engine cannot use.

        ``arc`` must hold numbers, finite or -inf (a forbidden arc), in every cell that
        counts (column 0 and the diagonal are ignored); NaN and +inf are refused with the
        (head, dependent) that holds them. ``rel`` given as an array is held to the same
        rule per label (-inf: an impossible label) and needs at least one label; ``rel``
        given as another object with a ``shape`` and numpy indexing (relation scores
        computed when indexed) is checked by shape only, so that checking does not build
        its dense array. That relation scores are normalised log-probabilities and that
        the allowed arcs leave a tree is the adapters' concern (the spaCy component checks
        both, docs/CONTRACTS.md). ``values_scanned``: the caller has already found no NaN or
        +inf in the cells of ``arc`` and ``rel`` that count (:func:`.scan.scan_sentence`), so
        only the shapes, dtypes and the other fields are checked here."""
        if not isinstance(self.arc, numpy.ndarray):  # a list, a tensor: the core indexes numpy arrays
            raise ValueError(f"{where}: arc scores must be a numpy array, got {type(self.arc).__name__}")
        arc = self.arc
        if arc.ndim != 2 or arc.shape[0] != arc.shape[1] or arc.shape[0] < 2:
            raise ValueError(f"{where}: arc scores must be an (n+1, n+1) matrix with n >= 1, got shape {arc.shape}")
        if arc.dtype.kind not in "fiu":
            raise ValueError(f"{where}: arc scores must be numbers, got an array of dtype {arc.dtype}")
        n = self.n

        def counted() -> numpy.ndarray:
            """The cells the engine reads: not ROOT's column, not the diagonal."""
            cells = numpy.ones((n + 1, n + 1), dtype=bool)
            cells[:, 0] = False
            numpy.fill_diagonal(cells, False)
            return cells

        # one reduction settles the usual case: max is NaN if any value is, +inf if any is
        if not values_scanned and not arc.max() < numpy.inf:
            bad = numpy.argwhere(~(arc < numpy.inf) & counted())
            if len(bad):
                h, d = (int(i) for i in bad[0])
                raise ValueError(
                    f"{where}: arc scores hold {arc[h, d]} for the arc (head {h}, dependent {d}); arc scores "
                    "must be finite log-potentials, or -inf for a forbidden arc"
                )
        if self.rel is not None:
            n_labels = None if self.labels is None else len(self.labels)
            if n_labels is None or numpy.shape(self.rel) != (n + 1, n + 1, n_labels):
                raise ValueError(
                    f"{where}: relation scores of shape {numpy.shape(self.rel)} do not match {n} words "
                    f"and {n_labels} labels"
                )
            if n_labels == 0:
                raise ValueError(f"{where}: relation scores have no labels (L = 0)")
            if isinstance(self.rel, numpy.ndarray):
                rel = self.rel
                if rel.dtype.kind not in "fiu":
                    raise ValueError(f"{where}: relation scores must be numbers, got an array of dtype {rel.dtype}")
                if not values_scanned and not rel.max() < numpy.inf:
                    bad = numpy.argwhere(~(rel < numpy.inf) & counted()[:, :, None])
                    if len(bad):
                        h, d, label = (int(i) for i in bad[0])
                        name = self.labels[label]  # type: ignore[index]  # n_labels is not None here
                        raise ValueError(
                            f"{where}: relation scores hold {rel[h, d, label]} for label {label} ({name!r}) "
                            f"of the arc (head {h}, dependent {d}); relation scores must be finite "
                            "log-probabilities, or -inf for an impossible label"
                        )
        if self.heads is not None and numpy.shape(self.heads) != (n,):
            raise ValueError(f"{where}: {numpy.shape(self.heads)} heads for a sentence of {n} words")
        if self.heads is not None and ((self.heads < 0) | (self.heads > n)).any():
            raise ValueError(f"{where}: heads outside the sentence: {numpy.asarray(self.heads).tolist()}")
        if self.deprels is not None and len(self.deprels) != n:
            raise ValueError(f"{where}: {len(self.deprels)} relations for a sentence of {n} words")
        if self.members is not None:
            members = numpy.asarray(self.members)
            if members.ndim != 3 or members.shape[1:] != (n + 1, n + 1) or members.shape[0] < 1:
                raise ValueError(
                    f"{where}: member arc scores must be a (K, n+1, n+1) array with K >= 1 for {n} words, "
                    f"got shape {members.shape}"
                )
            if members.dtype.kind not in "fiu":
                raise ValueError(f"{where}: member arc scores must be numbers, got an array of dtype {members.dtype}")
            if not members.max() < numpy.inf:
                bad = numpy.argwhere(~(members < numpy.inf) & counted()[None])
                if len(bad):
                    k, h, d = (int(i) for i in bad[0])
                    raise ValueError(
                        f"{where}: member {k}'s arc scores hold {members[k, h, d]} for the arc (head {h}, "
                        f"dependent {d}); arc scores must be finite log-potentials, or -inf for a forbidden arc"
                    )
            weights = self.member_weights
            if weights is not None:
                weights = numpy.asarray(weights, dtype=numpy.float64)
                if weights.shape != (members.shape[0],) or not (
                    numpy.isfinite(weights).all() and (weights >= 0).all() and weights.sum() > 0
                ):
                    raise ValueError(
                        f"{where}: member weights must be {members.shape[0]} non-negative numbers with a "
                        f"positive sum, got {weights.tolist()}"
                    )
        elif self.member_weights is not None:
            raise ValueError(f"{where}: member weights given without member arc scores")


def _read_text(scores: SentenceScores) -> str:
    text = scores.__dict__["_text"]
    if not isinstance(text, str):  # a source left by set_text_source: built once, when first read
        text = scores.__dict__["_text"] = text()
    return text


def _write_text(scores: SentenceScores, text: str) -> None:
    scores.__dict__["_text"] = text


# ``text`` as a property over ``_text`` (the dataclass's __init__ and replace() go through it)
SentenceScores.text = property(_read_text, _write_text, doc="See the class doc.")  # type: ignore[assignment]


def set_text_source(scores: SentenceScores, source: Callable[[], str]) -> None:
    """Let ``scores.text`` be ``source()``, called when the text is first read: only seeded
    samples and messages read it, and some adapters' texts cost more than the rest of a
    sentence's conversion (spaCy's ``Doc.text`` builds a Token per word)."""
    scores.__dict__["_text"] = source


def _empty_samples(n: int) -> numpy.ndarray:
    return numpy.zeros((0, n), dtype=numpy.int32)


def _no_log_probs() -> numpy.ndarray:
    return numpy.zeros((0,), dtype=numpy.float64)


@dataclass
class SentenceAnnotation:
    """What the tree distribution of one sentence's scores knows (see the module doc).

    Attributes:
        start, end: the sentence's span in its document (``end - start`` = n words).
        heads: int32 ``(n,)``, the tree the per-word values refer to (0 = ROOT).
        marginals: float32 ``(n+1, n+1)``, μ[h, m] = p(h -> m) (Koo et al. 2007, Prop. 1).
        log_partition: log Z; entropy: the tree entropy in nats (Zmigrod et al. 2021, §5).
        expected_attachment: expected fraction of correct heads of ``heads``.
        head_prob: float32 ``(n,)``, μ(heads[m], m); head_entropy: float32 ``(n,)``, the
            entropy of each word's head distribution.
        dep_prob: float32 ``(n,)``, μ(h, m)·p(label | h, m) of each word's head and
            relation (NaN where the parser does not score that relation), or None without
            relation scores.
        sampled_heads: int32 ``(k, n)``, sampled trees (rows of -1 where a sentence has
            fewer than k distinct trees, without replacement); sample_log_probs: float64
            ``(k,)``; sampled_labels: int32 ``(k, n)``, the best relation of each sampled
            arc (index into ``labels``), or None.
        labels: relation names, or None; single_root: the kind of trees; top_k_heads: how
            many heads ``top_heads`` lists; mbr_heads: int32 ``(n,)``, the minimum-Bayes-risk
            tree once computed (``spacy_treexp.annotate.mbr_heads``), else None.
        parse_log_prob: log p(heads), the exact log-probability that ``heads`` is the whole
            tree (1 − its exponential: the probability of at least one attachment error),
            under the distribution at ``AnnotateOptions.risk_temperature``.
        head_mutual_information: float32 ``(n,)``, with ensemble members
            (:attr:`SentenceScores.members`): I(head of m; member) = H(Σ_k w_k μ_k(·, m)) −
            Σ_k w_k H(μ_k(·, m)), exact; else None.
        mutual_information: with members, an unbiased estimate of I(tree; member) = H(Σ_k
            w_k p_k) − Σ_k w_k H(p_k) (``spacy_treexp.engine.TreeMixture``); else None.
        expected_entropy: with members, Σ_k w_k H(p_k), the members' mean tree entropy
            (exact); else None.
        mixture_head_prob: float32 ``(n,)``, with members, Σ_k w_k μ_k(heads[m], m): the
            mixture's probability of each word's head in ``heads`` (exact); else None.
        mixture_parse_log_prob: with members, log Σ_k w_k p_k(heads), the exact
            log-probability of the whole tree under the members' mixture (at the members'
            own scale: no ``risk_temperature``); else None.
        mixture_marginals: float32 ``(n+1, n+1)``, with members and ``mixture_marginals``, the
            arc marginals of their mixture Σ_k w_k μ_k[h, m] (exact); else None.
        mixture_sampled_heads: int32 ``(k, n)``, with members and ``mixture_samples`` = k > 0, trees
            drawn from their mixture (a member ~ its weight, then a tree of that member; with
            replacement); else None.
        novelty: mean cosine distance of the sentence's encoder vectors from the training
            data's (``spacy_treexp.calibration.novelty``), where the calibration map carries a
            novelty reference and the vectors are at hand; else None.
        out_of_domain: p(the sentence is out of the parser's domain), where the novelty
            reference carries a domain model (``spacy_treexp.calibration.domain``) and the
            novelty is known; else None.
        token_offsets: int64 ``(n, 2)``, the character offsets where each word starts and
            ends in its document's text, set by an adapter whose documents can be retokenized
            (the spaCy component), so that a reader can tell the words are still the ones
            annotated; else None.

    An annotation read back from CoNLL-U has only the values that format keeps; the others
    are None.
    """

    start: int
    end: int
    heads: numpy.ndarray
    marginals: Optional[numpy.ndarray] = None
    log_partition: Optional[float] = None
    entropy: Optional[float] = None
    expected_attachment: Optional[float] = None
    head_prob: Optional[numpy.ndarray] = None
    head_entropy: Optional[numpy.ndarray] = None
    dep_prob: Optional[numpy.ndarray] = None
    sampled_heads: numpy.ndarray = field(default_factory=lambda: _empty_samples(0))
    sample_log_probs: numpy.ndarray = field(default_factory=_no_log_probs)
    sampled_labels: Optional[numpy.ndarray] = None
    labels: Optional[List[str]] = None
    single_root: bool = True
    top_k_heads: int = 3
    mbr_heads: Optional[numpy.ndarray] = None
    parse_log_prob: Optional[float] = None
    head_mutual_information: Optional[numpy.ndarray] = None
    mutual_information: Optional[float] = None
    expected_entropy: Optional[float] = None
    mixture_head_prob: Optional[numpy.ndarray] = None
    mixture_parse_log_prob: Optional[float] = None
    mixture_marginals: Optional[numpy.ndarray] = None
    mixture_sampled_heads: Optional[numpy.ndarray] = None
    novelty: Optional[float] = None
    out_of_domain: Optional[float] = None
    token_offsets: Optional[numpy.ndarray] = None

    @property
    def n(self) -> int:
        """Number of words."""
        return self.end - self.start

    @property
    def entropy_per_word(self) -> Optional[float]:
        """Tree entropy divided by the number of words (nats per word)."""
        return None if self.entropy is None else self.entropy / max(self.n, 1)

    @property
    def error_probability(self) -> Optional[float]:
        """1 − p(heads): the probability that ``heads`` has at least one wrong head (exact; a
        log p(heads) rounded just above 0 gives 0.0, never a negative probability or -0.0)."""
        return None if self.parse_log_prob is None else -math.expm1(min(self.parse_log_prob, 0.0)) + 0.0

    @property
    def mixture_error_probability(self) -> Optional[float]:
        """1 − Σ_k w_k p_k(heads): the members' mixture's probability that ``heads`` has at
        least one wrong head (exact), or None without members."""
        if self.mixture_parse_log_prob is None:
            return None
        return -math.expm1(min(self.mixture_parse_log_prob, 0.0)) + 0.0

    @property
    def expected_errors(self) -> Optional[float]:
        """Expected number of wrong heads in ``heads``, n (1 − expected attachment) (exact)."""
        return None if self.expected_attachment is None else self.n * (1.0 - self.expected_attachment)

    def top_heads(self, word: int) -> Optional[List[Tuple[int, float]]]:
        """The ``top_k_heads`` most probable heads of word ``word`` (1-based) with their
        marginals, best first (ties in head order), as ``[(head, μ), ...]``, 0 = ROOT."""
        if self.marginals is None:
            return None
        n = self.marginals.shape[1] - 1
        if isinstance(word, bool) or not isinstance(word, (int, numpy.integer)) or not 1 <= word <= n:
            raise IndexError(
                f"top_heads: word {word!r} is not a word of this sentence: its words are 1..{n} (0 is ROOT)"
            )
        column = self.marginals[:, word]
        order = numpy.argsort(-column, kind="stable")[: self.top_k_heads]
        return [(int(h), float(column[h])) for h in order if column[h] > 0.0]

    # --- serialisation -------------------------------------------------------------

    def to_dict(self) -> Dict[str, Any]:
        """The fields as a dict of numpy arrays and plain values (msgpack-friendly)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SentenceAnnotation:
        """Inverse of :meth:`to_dict`; unknown keys raise ``ValueError``."""
        unknown = sorted(set(data) - _FIELDS)
        if unknown:
            raise ValueError(f"unknown SentenceAnnotation field(s) {unknown}")
        values = dict(data)
        if values.get("labels") is not None:
            values["labels"] = [str(label) for label in values["labels"]]
        return cls(**values)

    def to_bytes(self) -> bytes:
        """msgpack bytes of :meth:`to_dict`."""
        return srsly.msgpack_dumps(self.to_dict())

    @classmethod
    def from_bytes(cls, data: bytes) -> SentenceAnnotation:
        """Inverse of :meth:`to_bytes`."""
        return cls.from_dict(srsly.msgpack_loads(data))


_FIELDS = frozenset(f.name for f in dataclasses.fields(SentenceAnnotation))
_MSGPACK_KEY = "__spacy_treexp.SentenceAnnotation__"


def _encode_annotation(obj: Any, chain: Any = None) -> Any:
    """srsly msgpack encoder: a :class:`SentenceAnnotation` as a tagged dict."""
    if isinstance(obj, SentenceAnnotation):
        return {_MSGPACK_KEY: obj.to_dict()}
    return obj if chain is None else chain(obj)


def _decode_annotation(obj: Any, chain: Any = None) -> Any:
    """srsly msgpack decoder: the inverse of :func:`_encode_annotation`."""
    if isinstance(obj, dict) and _MSGPACK_KEY in obj:
        return SentenceAnnotation.from_dict(obj[_MSGPACK_KEY])
    return obj if chain is None else chain(obj)


def register_msgpack() -> None:
    """Let srsly's msgpack (``Doc.to_bytes``, ``DocBin``) carry annotations (idempotent;
    also declared as srsly entry points, so a fresh process reads DocBins without importing
    this package first)."""
    if "spacy_treexp_annotation" not in srsly.msgpack_encoders.get_all():
        srsly.msgpack_encoders.register("spacy_treexp_annotation", func=_encode_annotation)
    if "spacy_treexp_annotation" not in srsly.msgpack_decoders.get_all():
        srsly.msgpack_decoders.register("spacy_treexp_annotation", func=_decode_annotation)


register_msgpack()


#: The annotation in CoNLL-U (``spacy-treexp annotate``, ``spacy_treexp.stanza.to_conllu``): each
#: per-sentence comment key with the :class:`SentenceAnnotation` value it holds. A key is also the
#: name of the spaCy ``Span`` extension holding that value. A value that is None is not written.
CONLLU_COMMENTS: Dict[str, str] = {
    "tree_entropy": "entropy",
    "log_partition": "log_partition",
    "expected_attachment": "expected_attachment",
    "error_probability": "error_probability",
    "mixture_error_probability": "mixture_error_probability",
    "mutual_information": "mutual_information",
    "expected_entropy": "expected_entropy",
    "novelty": "novelty",
    "out_of_domain": "out_of_domain",
}
#: Each per-word MISC key with the :class:`SentenceAnnotation` array (also the spaCy ``Token``
#: extension) it holds; a word without the value has no such key.
CONLLU_MISC: Dict[str, str] = {
    "HeadProb": "head_prob",
    "HeadEntropy": "head_entropy",
    "DepProb": "dep_prob",
    "HeadMI": "head_mutual_information",
    "MixtureHeadProb": "mixture_head_prob",
}
#: Values of :data:`CONLLU_COMMENTS` that are derived from a stored log-probability: read back
#: as that field, log(1 − value).
CONLLU_DERIVED: Dict[str, str] = {
    "error_probability": "parse_log_prob",
    "mixture_error_probability": "mixture_parse_log_prob",
}
