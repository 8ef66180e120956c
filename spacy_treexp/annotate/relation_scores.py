"""Relation scores of a biaffine label classifier, computed when they are read.

Dozat & Manning (2017, eq. 3) score label l of the arc h -> m as ``[r_h; 1]^T U_l [r_m; 1]``
and normalise over labels. Stored in full, the log-probabilities of a sentence of n words
take (n+1)² · L numbers: 1.8 GB of float32 for 3,000 words and 50 labels. Their factors take
(n+1) · L · (d+1) + (n+1) · (d+1), linear in n; :class:`BiaffineRelationScores` keeps the
factors and computes ``log p(l | h, m)`` for the arcs that are asked for, with numpy's
indexing (``rel[h, m]``, ``rel[h, m, l]``, ``rel[heads, arange(1, n+1)]``), so the annotation
core, the parser and the evaluation read it like the dense ``(n+1, n+1, L)`` array it
stands for (``numpy.asarray(rel)`` builds that array).

The biaffine parser keeps short sentences (where the dense array is the smaller one) dense.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple, Union

import numpy
import srsly


def log_softmax(logits: numpy.ndarray) -> numpy.ndarray:
    """log-softmax over the last axis, float64; -inf (impossible labels) stays -inf, and a
    row of -inf stays -inf."""
    logits = logits.astype(numpy.float64)
    peak = numpy.max(logits, axis=-1, keepdims=True)
    peak = numpy.where(numpy.isfinite(peak), peak, 0.0)
    with numpy.errstate(divide="ignore"):
        return logits - (numpy.log(numpy.exp(logits - peak).sum(-1, keepdims=True)) + peak)


def _no_fixed_labels() -> numpy.ndarray:
    return numpy.zeros((0,), dtype=numpy.int32)


@dataclass
class BiaffineRelationScores:
    """log p(label | h, m) for a sentence of n words, from the classifier's factors.

    Attributes:
        head_part: float32 ``(n+1, L, d+1)``, ``[r_h; 1]^T U_l`` for every head h and label l.
        dep_part: float32 ``(n+1, d+1)``, ``[r_m; 1]`` for every dependent m.
        temperature: the logits are divided by it before normalising (post-hoc scaling).
        fixed: int32 ``(n+1,)`` or empty: a label that dependent m takes with probability 1
            (``-1``: none), as the parser gives whitespace tokens the label ``dep``.
    """

    head_part: numpy.ndarray
    dep_part: numpy.ndarray
    temperature: float = 1.0
    fixed: numpy.ndarray = field(default_factory=_no_fixed_labels)

    @property
    def shape(self) -> Tuple[int, int, int]:
        size = int(self.head_part.shape[0])
        return (size, size, int(self.head_part.shape[1]))

    @property
    def ndim(self) -> int:
        return 3

    @property
    def dtype(self) -> numpy.dtype:
        return numpy.dtype(numpy.float32)

    @property
    def nbytes(self) -> int:
        return int(self.head_part.nbytes + self.dep_part.nbytes + self.fixed.nbytes)

    def fix_label(self, dependents: numpy.ndarray, label: int) -> None:
        """Give ``dependents`` the label ``label`` with probability 1."""
        if self.fixed.size == 0:
            self.fixed = numpy.full(self.shape[0], -1, dtype=numpy.int32)
        self.fixed[dependents] = label

    def __getitem__(self, key: Any) -> Any:
        """numpy indexing ``[h, m]`` -> ``(..., L)`` and ``[h, m, l]``, with integer or
        broadcastable integer-array indices; anything else goes through the dense array."""
        if not isinstance(key, tuple):
            key = (key,)
        if len(key) not in (2, 3) or any(k is Ellipsis or isinstance(k, slice) for k in key):
            return numpy.asarray(self)[key]
        heads, dependents = numpy.broadcast_arrays(numpy.asarray(key[0]), numpy.asarray(key[1]))
        values = self._log_probs(heads, dependents)
        if len(key) == 2:
            return values
        labels = numpy.asarray(key[2])
        if labels.ndim == 0:
            return values[..., labels]
        labels = numpy.broadcast_to(labels, values.shape[:-1])
        return numpy.take_along_axis(values, labels[..., None], axis=-1)[..., 0]

    def _log_probs(self, heads: numpy.ndarray, dependents: numpy.ndarray) -> numpy.ndarray:
        """log p(· | h, m) ``(*shape, L)`` for broadcast index arrays ``heads``, ``dependents``;
        where they ask for more pairs than a sentence has words (k sampled trees: mostly the
        same arcs), each distinct arc is computed once."""
        size = self.shape[0]
        if heads.size > 2 * size:
            keys = (heads.astype(numpy.int64) * size + dependents).ravel()
            unique, inverse = numpy.unique(keys, return_inverse=True)
            if 2 * unique.size <= keys.size:
                values = self._log_probs(unique // size, unique % size)
                return values[inverse].reshape(heads.shape + values.shape[-1:])
        logits = numpy.einsum("...lj,...j->...l", self.head_part[heads], self.dep_part[dependents])
        return self._normalise(logits, dependents)

    def _normalise(self, logits: numpy.ndarray, dependents: numpy.ndarray) -> numpy.ndarray:
        """log-softmax over labels at the temperature, then the fixed labels, float32."""
        if self.temperature != 1.0:
            logits = logits / numpy.float32(self.temperature)
        top = logits.max(axis=-1, keepdims=True)
        log_probs = logits - (top + numpy.log(numpy.exp(logits - top).sum(axis=-1, keepdims=True)))
        if self.fixed.size:
            label = numpy.broadcast_to(self.fixed[dependents], log_probs.shape[:-1])
            chosen = label >= 0
            if chosen.any():
                log_probs[chosen] = -numpy.inf
                log_probs[chosen, label[chosen]] = 0.0
        return log_probs.astype(numpy.float32, copy=False)

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> numpy.ndarray:
        """The dense ``(n+1, n+1, L)`` log-probabilities ((n+1)² · L numbers)."""
        logits = numpy.einsum("hlj,mj->hml", self.head_part, self.dep_part)
        dense = self._normalise(logits, numpy.arange(self.shape[0])[None, :])
        return dense if dtype is None else dense.astype(dtype, copy=False)

    # --- serialisation (msgpack, like spacy_treexp.annotate's records) ---------------

    def to_dict(self) -> Dict[str, Any]:
        return {
            "head_part": self.head_part,
            "dep_part": self.dep_part,
            "temperature": self.temperature,
            "fixed": self.fixed,
        }

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> BiaffineRelationScores:
        return cls(**data)


_MSGPACK_KEY = "__spacy_treexp.BiaffineRelationScores__"


def _encode(obj: Any, chain: Any = None) -> Any:
    if isinstance(obj, BiaffineRelationScores):
        return {_MSGPACK_KEY: obj.to_dict()}
    return obj if chain is None else chain(obj)


def _decode(obj: Any, chain: Any = None) -> Any:
    if isinstance(obj, dict) and _MSGPACK_KEY in obj:
        return BiaffineRelationScores.from_dict(obj[_MSGPACK_KEY])
    return obj if chain is None else chain(obj)


def register_msgpack() -> None:
    """Let srsly's msgpack (``Doc.to_bytes``, ``DocBin``) carry the scores (idempotent)."""
    if "spacy_treexp_relation_scores" not in srsly.msgpack_encoders.get_all():
        srsly.msgpack_encoders.register("spacy_treexp_relation_scores", func=_encode)
    if "spacy_treexp_relation_scores" not in srsly.msgpack_decoders.get_all():
        srsly.msgpack_decoders.register("spacy_treexp_relation_scores", func=_decode)


register_msgpack()


#: A sentence's relation log-probabilities: the dense (n+1, n+1, L) array or its factors.
RelationScores = Union[numpy.ndarray, BiaffineRelationScores]
