"""The common case of a sentence's contract checks in one pass (a numba kernel).

A score source's record is checked cell by cell (``pipeline/score_sources.py``): arc scores
finite or ``-inf`` where the engine reads them, relation scores finite or ``-inf``, and
normalised over labels for every allowed arc. Done with numpy, that is a dozen small calls
per sentence, most of a component's cost on short sentences. :func:`scan_sentence` takes
the label probabilities in one numpy ``exp`` (SIMD; numba's scalar ``exp`` is several times
slower) and reads everything else in one pass of a numba kernel, and says which of those
checks passed; it never raises: anything it does not clear is left to the numpy checks,
which name the problem. :func:`dense_dep_prob` forms ``dep_prob`` from dense relation scores
in one kernel call. Both run only where :func:`spacy_treexp.engine.native.native_requested`
holds (numba installed, ``SPACY_TREEXP_NATIVE`` not ``0``), which callers ask once per batch
of documents; elsewhere the numpy code runs. :func:`head_entropy` gives each word's head
entropy for a batch in one pass.
"""

from __future__ import annotations

import functools
import math
from typing import Any, List, NamedTuple, Optional

import numpy


class SentenceScan(NamedTuple):
    """What one pass over a sentence's scores cleared.

    Attributes:
        values_clean: no NaN or ``+inf`` in any arc or relation score the engine reads
            (ROOT's column and the diagonal are not read).
        all_allowed: no arc score the engine reads is ``-inf`` (so the arcs leave a tree).
        rel_normalised: the relation scores (when an array was given) are log-probabilities:
            for every allowed arc, Σ_l exp rel[h, d, l] lies in [low, high].
    """

    values_clean: bool
    all_allowed: bool
    rel_normalised: bool


_FLOATS = (numpy.dtype(numpy.float32), numpy.dtype(numpy.float64))


def scan_sentence(
    arc: numpy.ndarray, rel: Optional[numpy.ndarray], log_tolerance: float, *, sums: bool = True
) -> Optional[SentenceScan]:
    """One pass over ``arc`` ``(n+1, n+1)`` and ``rel`` ``(n+1, n+1, L)`` (or None), float32
    or float64; None when the kernel cannot read them (another dtype or shape), so that the
    caller runs its numpy checks. Only where :func:`~spacy_treexp.engine.native.native_requested`. ``log_tolerance``: the
    largest |log Σ_l exp rel[h, d, l]| of normalised relation scores; ``sums=False``: the
    sums over labels are not looked into (``rel_normalised`` stays False), only the values."""
    if arc.ndim != 2 or arc.dtype not in _FLOATS or arc.shape[0] != arc.shape[1] or arc.shape[0] < 2:
        return None
    if rel is None:
        labels = numpy.zeros((0, 0, 0), dtype=arc.dtype)
    elif rel.ndim == 3 and rel.dtype in _FLOATS and rel.shape[:2] == arc.shape and rel.shape[2] > 0:
        labels = rel
        if sums:
            with numpy.errstate(over="ignore", invalid="ignore"):  # +inf / NaN are read by the kernel
                labels = numpy.exp(rel)
    else:
        return None
    kernels = _kernels()
    flags = kernels.scan(arc, labels, math.exp(-log_tolerance), math.exp(log_tolerance), rel is not None and sums)
    # (positional: a NamedTuple built from keywords costs more than the rest of this wrapper)
    return SentenceScan(
        bool(flags & kernels.VALUES_CLEAN), bool(flags & kernels.ALL_ALLOWED), bool(flags & kernels.REL_NORMALISED)
    )


def dense_dep_prob(
    rel: numpy.ndarray, heads: numpy.ndarray, labels: List[int], head_prob: numpy.ndarray
) -> Optional[numpy.ndarray]:
    """μ(h, m)·p(l | h, m) of every word, float32 ``(n,)``, from dense relation scores ``rel``
    ``(n+1, n+1, L)`` at the words' ``heads`` ``(n,)`` and label indices ``labels`` in one
    kernel call (the same float64 exp and float32 product as the numpy route), or None where
    the kernel cannot read them (the caller's numpy route then runs). Only where
    :func:`~spacy_treexp.engine.native.native_requested`."""
    n = heads.shape[0]
    if rel.dtype not in _FLOATS or rel.ndim != 3 or rel.shape[0] != n + 1 or rel.shape[1] != n + 1:
        return None
    out = numpy.empty(n, dtype=numpy.float32)
    _kernels().dep_prob(
        rel, heads, numpy.array(labels, dtype=numpy.int64), head_prob.astype(numpy.float32, copy=False), out
    )
    return out


def head_entropy(marginals: numpy.ndarray) -> Optional[numpy.ndarray]:
    """Each word's head entropy, float32 ``(B, N+1)``, of float64 ``marginals`` ``(B, N+1, N+1)``
    [head, dep] in one kernel call (:func:`spacy_treexp.engine.distribution.word_head_entropy`'s values,
    to float64 rounding), or None where the kernel cannot read them. Only where
    :func:`~spacy_treexp.engine.native.native_requested`."""
    if marginals.dtype != numpy.float64 or marginals.ndim != 3:
        return None
    out = numpy.empty(marginals.shape[:2], dtype=numpy.float32)
    _kernels().head_entropy(marginals, out)
    return out


@functools.lru_cache(maxsize=1)
def _kernels() -> Any:
    """The kernel module, imported on first use (importing numba takes a while)."""
    from spacy_treexp.annotate import scan_kernels

    return scan_kernels
