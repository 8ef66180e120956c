"""The numba kernel of :mod:`spacy_treexp.annotate.scan` (imported only where numba is)."""

from __future__ import annotations

import numba
import numpy as np

#: Bits of :func:`scan`'s answer.
VALUES_CLEAN, ALL_ALLOWED, REL_NORMALISED = 1, 2, 4


@numba.njit(cache=True, nogil=True, fastmath={"reassoc"})
def scan(arc, probabilities, low, high):
    """One pass over the cells the engine reads (not ROOT's column, not the diagonal) of
    ``arc`` ``(n+1, n+1)`` and of ``probabilities`` ``(n+1, n+1, L)`` = exp of the relation
    scores (``(0, 0, 0)``: none): :data:`VALUES_CLEAN` when no arc score is NaN or +inf and
    no probability is NaN or +inf (exp of NaN or of +inf, or of a logit that overflows: the
    numpy checks then decide), :data:`ALL_ALLOWED` when no arc score is -inf,
    :data:`REL_NORMALISED` when every allowed arc's label probabilities sum to within
    [low, high] (summed in their dtype: float32 sums 50 labels to about 1e-6)."""
    size = arc.shape[0]
    n_labels = probabilities.shape[2] if probabilities.shape[0] > 0 else 0
    all_allowed = True
    normalised = n_labels > 0
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
                total = probabilities[h, d, 0] - probabilities[h, d, 0]  # 0 in their dtype
                for label in range(n_labels):  # reassociated: a vectorised sum
                    total += probabilities[h, d, label]
                if total != total or total == np.inf:
                    return 0
                if allowed and not (low <= total <= high):
                    normalised = False
    flags = VALUES_CLEAN
    if all_allowed:
        flags |= ALL_ALLOWED
    if normalised:
        flags |= REL_NORMALISED
    return flags
