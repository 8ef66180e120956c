"""The numba kernels of :mod:`spacy_treexp.annotate.scan` (imported only where numba is)."""

from __future__ import annotations

import math

import numba
import numpy as np

#: Bits of :func:`scan`'s answer.
VALUES_CLEAN, ALL_ALLOWED, REL_NORMALISED = 1, 2, 4


@numba.njit(cache=True, nogil=True, fastmath={"reassoc"})
def scan(arc, labels, low, high, exponentiated):
    """One pass over the cells the engine reads (not ROOT's column, not the diagonal) of
    ``arc`` ``(n+1, n+1)`` and of ``labels`` ``(n+1, n+1, L)`` (``(0, 0, 0)``: none): the
    relation scores themselves, or with ``exponentiated`` their exp (label probabilities).
    Answers :data:`VALUES_CLEAN` when no arc score is NaN or +inf and no label value is NaN
    or +inf (nor a sum of them: a sum that overflows, or an exp that does, leaves the
    question to the numpy checks), :data:`ALL_ALLOWED` when no arc score is -inf, and with
    ``exponentiated`` :data:`REL_NORMALISED` when every allowed arc's label probabilities
    sum to within [low, high]."""
    size = arc.shape[0]
    n_labels = labels.shape[2] if labels.shape[0] > 0 else 0
    all_allowed = True
    normalised = exponentiated and n_labels > 0
    for h in range(size):
        for d in range(1, size):
            if h == d:
                continue
            value = arc[h, d]
            if value != value or value == np.inf:
                return 0
            allowed = value != -np.inf
            if not allowed:
                all_allowed = False
            if n_labels > 0:
                total = 0.0
                for label in range(n_labels):  # reassociated: a vectorised sum
                    total += labels[h, d, label]
                if total != total or total == np.inf:  # a NaN or +inf among them
                    return 0
                if normalised and allowed and not (low <= total <= high):
                    normalised = False
    flags = VALUES_CLEAN
    if all_allowed:
        flags |= ALL_ALLOWED
    if normalised:
        flags |= REL_NORMALISED
    return flags


@numba.njit(cache=True, nogil=True)
def dep_prob(rel, heads, labels, head_prob, out):
    """``out[m] = head_prob[m] · exp(rel[heads[m], m + 1, labels[m]])``: the exp in float64,
    the product in float32, as :func:`spacy_treexp.annotate.core.dep_prob` forms it."""
    for m in range(heads.shape[0]):
        out[m] = head_prob[m] * np.float32(math.exp(np.float64(rel[heads[m], m + 1, labels[m]])))


@numba.njit(cache=True, nogil=True)
def head_entropy(marginals, out):
    """Each word's head entropy -Σ_h μ(h, m) log μ(h, m) of float64 ``marginals`` (B, N+1, N+1)
    [head, dep] into float32 ``out`` (B, N+1), as :func:`spacy_treexp.engine.distribution.word_head_entropy`
    computes it (a marginal at or below 0 adds nothing, NaN stays NaN; the sum clamped at 0,
    -0 as 0), in one pass."""
    batch, size = marginals.shape[0], marginals.shape[1]
    for b in range(batch):
        for m in range(size):
            total = 0.0
            for h in range(size):
                p = marginals[b, h, m]
                if p > 0.0:
                    total -= p * math.log(p)
                elif p != p:
                    total = p
            out[b, m] = max(total, 0.0) + 0.0 if total == total else total
