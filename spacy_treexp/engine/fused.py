"""The fast path fused into one CPU kernel (numba): log Z, marginals and the error estimate.

The same algorithm as :func:`.laplacian.fast_partition_and_marginals` on the output of
:func:`.laplacian.shifted_log_weights` (Koo et al. 2007, Prop. 1 and §3.3), per sentence in
one compiled loop instead of some twenty batched torch calls: column shift, weights, the
Laplacian L̂ of the sentence's own n words (padding is never eliminated), one Gauss–Jordan
elimination with partial pivoting that yields the pivots of L̂'s LU factorisation (so
log |det L̂|, its sign and the same error estimate) and L̂⁻¹ in place, the closed-form
marginals, the deviation of each word's marginals from summing to 1, whether each sentence
is accepted and the entropy's terms (Zmigrod et al. 2021, T1). On matrices of a
few dozen rows the batched LAPACK calls are bound by their per-call overhead, which this
removes; on long sentences the two cost about the same (see :data:`NATIVE_MAX_LENGTH`).

Only :mod:`.distribution` calls it, where :func:`.native.native_enabled` holds and no
autograd graph is needed; the torch code stays the reference and the path on other devices.
:func:`scan_scores` is the input checks' common case in one pass (:mod:`.checks`). Together
they take an engine call on a short sentence from some fifty small torch calls (about
0.17 ms) to a few dozen microseconds.
Importing this module imports numba; it compiles on first use and caches the machine code
(``cache=True``). It runs on the calling thread (no numba threading, so it is fork-safe).
"""

from __future__ import annotations

import functools
import math
from typing import Optional, Tuple

import numba
import numpy as np
import torch
from torch import Tensor

from spacy_treexp.engine.checks import score_limit

#: Longest padded sentence (N) the fused kernel takes; longer batches run on LAPACK. Measured
#: with ``python benchmarks/bench_kernels.py --threads 1 --sweep 20 40 60 80 100 120 160 200
#: 250 300 400 500 600 700`` (batch 64, float32, one thread, a loaded 2-core CPU): the kernel
#: takes 0.45x the torch path's time up to N = 100, 0.8-0.9x from 200 to 600 and 1.03x at 700.
NATIVE_MAX_LENGTH = 600


class FusedPass:
    """What :func:`native_fast_pass` returns: tensors over the kernel's buffers, per sentence
    ``(B,)`` unless noted, each made when read (each tensor made costs about a microsecond,
    as much as the kernel on a short sentence: the entropy alone reads one of them)."""

    def __init__(
        self,
        stats: np.ndarray,
        accepted: np.ndarray,
        marginals: np.ndarray,
        shift: np.ndarray,
        all_accepted: bool,
    ) -> None:
        self._stats = stats
        self._accepted = accepted
        self._marginals = marginals
        self._shift = shift
        #: every sentence accepted
        self.all_accepted = all_accepted

    @property
    def log_det(self) -> Tensor:
        """log |det L̂| = log Z' in float64 (-inf on a zero pivot)."""
        return torch.from_numpy(self._stats[_LOG_DET])

    @property
    def log_z(self) -> Tensor:
        """log Z = log Z' + Σ_m shift[m] in float64."""
        return torch.from_numpy(self._stats[_LOG_Z])

    @property
    def shift_total(self) -> Tensor:
        """Σ_m shift[m] in float64."""
        return torch.from_numpy(self._stats[_SHIFT_TOTAL])

    @property
    def entropy(self) -> Tensor:
        """log Z' − Σ μ s', at least 0, in float64: the entropy where accepted (Zmigrod et al. 2021, T1)."""
        return torch.from_numpy(self._stats[_ENTROPY])

    @property
    def marginals(self) -> Tensor:
        """``(B, N+1, N+1)`` in the scores' dtype (0 where log_det is -inf)."""
        return torch.from_numpy(self._marginals)

    @property
    def shift(self) -> Tensor:
        """``(B, N+1)`` the column shifts in the scores' dtype."""
        return torch.from_numpy(self._shift)

    @property
    def accepted(self) -> Tensor:
        """bool: the result is kept (see :func:`native_fast_pass`)."""
        return torch.from_numpy(self._accepted)

    @property
    def error(self) -> Tensor:
        """The error estimate in float64 (inf where det L̂ <= 0)."""
        return torch.from_numpy(self._stats[_ERROR])

    @property
    def deviation(self) -> Tensor:
        """max |Σ_h μ(h→m) − 1| (single-root: and ROOT's) in float64."""
        return torch.from_numpy(self._stats[_DEVIATION])

    @property
    def expected(self) -> Tensor:
        """Σ μ s' over the allowed arcs in float64 (the entropy's second term)."""
        return torch.from_numpy(self._stats[_EXPECTED])


def native_fast_pass(
    scores: Tensor,
    lengths: Tensor,
    single_root: bool,
    tolerance: float,
    normalisation: float,
) -> FusedPass:
    """The fast path on CPU tensors without autograd (see :class:`FusedPass`).

    ``scores`` float32 or float64 ``(B, N+1, N+1)``, ``lengths`` ``(B,)``; the allowed arcs
    are those of :attr:`.TreeDistribution.arc_mask`: inside the sentence, not scored -inf
    (the kernel tells them from the scores, one array less to convert). Each result equals
    the torch path's up to rounding: log det and marginals of
    :func:`.laplacian.fast_partition_and_marginals`, its error estimate (infinite where
    det L̂ is not positive), max_m |Σ_h μ(h→m) − 1| (and, single-root, |Σ_m μ(0→m) − 1|)
    as checked by :func:`.laplacian.marginals_normalised`, and the shift of
    :func:`.laplacian.shifted_log_weights` (its column-shifted scores s' stay in the kernel:
    the caller forms them where it needs them). A sentence with a zero pivot gets
    log det -inf, error and deviation inf, and zero marginals. A sentence is accepted where
    its log det is finite, its error is at most ``tolerance`` and
    its deviation at most ``normalisation`` (:func:`.laplacian.fast_accepted`).
    """
    # read in place, strided or not (a sentence cut from a padded batch: no copy)
    values = (scores.detach() if scores.requires_grad else scores).numpy()
    batch, size, _ = values.shape
    # numpy buffers wrapped by torch.from_numpy: a fifth of torch.empty's cost on small tensors
    stats = np.empty((_STATS, batch), np.float64)
    accepted = np.empty(batch, np.bool_)
    marginals = np.empty((batch, size, size), values.dtype)
    shift = np.empty((batch, size), values.dtype)
    all_accepted = _fused_pass(
        values,
        lengths.numpy(),
        single_root,
        _EPS[scores.dtype],
        tolerance,
        normalisation,
        stats,
        accepted,
        marginals,
        shift,
    )
    return FusedPass(stats, accepted, marginals, shift, all_accepted)


#: Rows of the float64 buffer :func:`_fused_pass` writes.
_LOG_DET, _ERROR, _DEVIATION, _SHIFT_TOTAL, _EXPECTED, _ENTROPY, _LOG_Z = range(7)
_STATS = 7
_EPS = {torch.float32: float(torch.finfo(torch.float32).eps), torch.float64: float(torch.finfo(torch.float64).eps)}


@numba.njit(cache=True, nogil=True)
def _fused_pass(
    scores,
    lengths,
    single_root,
    eps,
    tolerance,
    normalisation,
    stats,
    accepted,
    marginals,
    shift,
):
    """The kernel of :func:`native_fast_pass`, one sentence after another; writes the outputs
    and returns whether every sentence was accepted."""
    batch, size, _ = scores.shape
    n_max = size - 1
    weights = np.zeros((size, size), scores.dtype)
    flat_weights = weights.reshape(size * size)  # a view: the weights by one vectorised exp
    log_weights = np.empty((size, size), scores.dtype)  # s' = score - shift, -inf off the arcs
    flat_log_weights = log_weights.reshape(size * size)
    exp_scratch = np.empty(size * size, np.float64)
    rows = (n_max + 3) // 4 * 4  # rows of L̂'s buffer: long sentences are updated four rows at a time
    columns = (n_max + 7) // 8 * 8  # and its rows are whole vectors of 8
    lap = np.zeros((rows, columns), scores.dtype)
    column_scale = np.empty(n_max, scores.dtype)
    best = np.empty(size, scores.dtype)
    row_swap = np.empty(n_max, np.int64)
    top = np.empty(columns, scores.dtype)
    factor = np.empty(rows, scores.dtype)
    diagonal = np.empty(size, scores.dtype)
    column_total = np.empty(size, np.float64)
    column_part = np.empty(size, np.float64)
    all_accepted = True
    for b in range(batch):
        n = lengths[b]
        # shift[m] = the best score into m (0 where no arc enters m); s' = score - shift, -inf off the arcs
        best[:] = -np.inf
        for h in range(n + 1):
            for m in range(1, n + 1):
                if h != m:  # -inf (a forbidden arc) never raises the maximum
                    best[m] = max(best[m], scores[b, h, m])
        total = 0.0
        for m in range(size):
            if best[m] == -np.inf:
                best[m] = 0.0
            shift[b, m] = best[m]
            total += best[m]
        stats[_SHIFT_TOTAL, b] = total
        log_weights[:] = -np.inf
        for h in range(n + 1):
            for m in range(1, n + 1):
                if h != m:
                    log_weights[h, m] = scores[b, h, m] - best[m]  # -inf where forbidden
        _exp_nonpositive(flat_log_weights, flat_weights, exp_scratch)
        _laplacian(weights, n, single_root, lap, column_scale)
        log_det, ratio = _invert_in_place(lap, n, column_scale, row_swap, top, factor)
        stats[_LOG_DET, b] = log_det
        stats[_LOG_Z, b] = total + log_det
        marginals[b] = 0.0
        stats[_EXPECTED, b] = 0.0
        stats[_ENTROPY, b] = 0.0
        if not math.isfinite(log_det):
            stats[_ERROR, b] = np.inf
            stats[_DEVIATION, b] = np.inf
            accepted[b] = False
            all_accepted = False
            continue
        if ratio < 0:  # det L̂ < 0: it is a sum of tree weights, so cancellation ruined it
            error = np.inf
        else:  # padding columns of the torch path have scale 1 and pivot 1
            error = (max(ratio, 1.0) if n < n_max else ratio) * eps * n_max
        stats[_ERROR, b] = error
        deviation, expected = _marginals(
            weights, lap, n, single_root, marginals[b], log_weights, diagonal, column_total, column_part
        )
        stats[_DEVIATION, b] = deviation
        stats[_EXPECTED, b] = expected
        stats[_ENTROPY, b] = max(log_det - expected, 0.0) + 0.0  # below 0: rounding (as _non_negative)
        accepted[b] = error <= tolerance and deviation <= normalisation
        all_accepted = all_accepted and accepted[b]
    return all_accepted


#: exp by Cody–Waite range reduction: x = k ln 2 + r, |r| <= ln 2 / 2, ln 2 in two parts so
#: that k ln 2 is exact, and the Taylor series of e^r to degree 13 (its remainder below 1e-17).
_LOG2_E = 1.4426950408889634
_LN2_HIGH = 6.93147180369123816490e-01  # the leading 32 bits of ln 2: k * _LN2_HIGH is exact
_LN2_LOW = 1.90821492927058770002e-10
_ROUND = 6755399441055744.0  # 1.5 * 2**52: adding and subtracting it rounds to an integer
_ROUND_BITS = 0x4338000000000000  # its bits: those of y + _ROUND minus these are round(y)


@numba.njit(cache=True, nogil=True, fastmath={"contract"})
def _exp_nonpositive(x, out, scratch):
    """``out[i] = exp(x[i])`` for ``x[i] <= 0`` (-inf gives 0; subnormal results as libm's),
    1-D, within 2 ulp of libm's exp in float64 (tested); ``scratch``: float64 of ``x``'s length.

    libm's exp is one call per element (about a third of the kernel's time at 36 words);
    these two loops are branch-free, so LLVM vectorises them. 2^k is built from its bits in
    two factors 2^⌊k/2⌋ 2^(k − ⌊k/2⌋) so that subnormal results are rounded once, not flushed.
    """
    for i in range(x.shape[0]):
        value = min(max(float(x[i]), -746.0), 0.0)  # below -745.2 the result rounds to 0
        shifted = value * _LOG2_E + _ROUND
        k = shifted - _ROUND
        r = (value - k * _LN2_HIGH) - k * _LN2_LOW
        p = 1.0 / 6227020800.0
        p = p * r + 1.0 / 479001600.0
        p = p * r + 1.0 / 39916800.0
        p = p * r + 1.0 / 3628800.0
        p = p * r + 1.0 / 362880.0
        p = p * r + 1.0 / 40320.0
        p = p * r + 1.0 / 5040.0
        p = p * r + 1.0 / 720.0
        p = p * r + 1.0 / 120.0
        p = p * r + 1.0 / 24.0
        p = p * r + 1.0 / 6.0
        p = p * r + 0.5
        p = p * r + 1.0
        out[i] = p * r + 1.0
        scratch[i] = shifted
    bits = scratch.view(np.int64)
    for i in range(x.shape[0]):
        k = bits[i] - _ROUND_BITS
        half = k >> 1
        bits[i] = (half + 1023) << 52
        value = out[i] * scratch[i]
        bits[i] = (k - half + 1023) << 52
        out[i] = value * scratch[i]


def scan_scores(scores: Tensor, lengths: Tensor) -> Optional[Tensor]:
    """The common case of :func:`.checks.prepare_scores` in one pass over float32 or float64
    CPU scores ``(B, N+1, N+1)``: the allowed arcs (inside the sentence, not -inf) where every
    length ``(B,)`` is in 1..N and every allowed score is finite and within its sentence's
    :func:`.checks.score_limit`; ``None`` otherwise, so that the torch checks run and name
    the problem."""
    values = (scores.detach() if scores.requires_grad else scores).numpy()
    allowed = np.empty(values.shape, np.bool_)
    limits = _score_limits(scores.dtype, values.shape[-1] - 1)
    if _scan_scores(values, lengths.contiguous().numpy(), limits, allowed) != SCAN_CLEAN:
        return None
    return torch.from_numpy(allowed)


SCAN_CLEAN, SCAN_BAD_LENGTHS, SCAN_BAD_SCORES = 0, 1, 2


def sums_at_heads(matrix: Tensor, heads: Tensor, lengths: Tensor, allowed: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
    """Σ_m matrix[b, heads[..., b, m], m] over each sentence's words for float64 CPU ``matrix``
    ``(B, N+1, N+1)`` and integer ``heads`` ``(..., B, N+1)`` (heads outside 0..N read row 0,
    as the torch code's clamp does), and whether any of those arcs is not ``allowed`` (bool
    ``(B, N+1, N+1)``; None: none is checked): ``(..., B)`` float64 and bool, one pass instead of
    the gathers and masks of :meth:`.TreeDistribution._sum_at_heads`."""
    batch, size = matrix.shape[0], matrix.shape[-1]
    flat = heads.reshape(-1, batch, size).contiguous().numpy()
    sums = np.empty(flat.shape[:2], np.float64)
    forbidden = np.zeros(flat.shape[:2], np.bool_)
    mask = np.ones((1, 1, 1), np.bool_) if allowed is None else allowed.contiguous().numpy()
    _sums_at_heads(
        matrix.contiguous().numpy(), flat, lengths.contiguous().numpy(), mask, allowed is not None, sums, forbidden
    )
    shape = heads.shape[:-1]
    return torch.from_numpy(sums).reshape(shape), torch.from_numpy(forbidden).reshape(shape)


@numba.njit(cache=True, nogil=True)
def _sums_at_heads(matrix, heads, lengths, allowed, check, sums, forbidden):
    """The kernel of :func:`sums_at_heads` (words summed in order)."""
    samples, batch, size = heads.shape
    for s in range(samples):
        for b in range(batch):
            total = 0.0
            for m in range(1, lengths[b] + 1):
                h = heads[s, b, m]
                if h < 0 or h >= size:
                    h = 0 if h < 0 else size - 1
                total += matrix[b, h, m]
                if check and not allowed[b, h, m]:
                    forbidden[s, b] = True
            sums[s, b] = total


def trees(heads: Tensor, lengths: Tensor, single_root: bool) -> Tensor:
    """:func:`.checks.is_tree` of CPU integer head vectors ``(..., B, N+1)`` in one pass:
    whether each is a tree over its sentence's words, ``(..., B)`` bool. Following the heads
    from each word with a mark per node finds a cycle in O(n) (the torch reference jumps
    pointers, O(n log n), in some fifteen batched calls)."""
    size = heads.shape[-1]
    flat = heads.reshape(-1, lengths.shape[0], size).contiguous().numpy()
    out = np.empty(flat.shape[:2], np.bool_)
    _trees(flat, lengths.contiguous().numpy(), single_root, out, np.empty(size, np.int8))
    return torch.from_numpy(out).reshape(heads.shape[:-1])


@numba.njit(cache=True, nogil=True)
def _trees(heads, lengths, single_root, out, state):
    """The kernel of :func:`trees`; ``state``: scratch ``(N+1,)`` (0 unseen, 1 on the path
    being followed, 2 reaches ROOT)."""
    samples, batch, _ = heads.shape
    for s in range(samples):
        for b in range(batch):
            n = lengths[b]
            ok = True
            roots = 0
            for m in range(1, n + 1):
                h = heads[s, b, m]
                if h < 0 or h > n or h == m:
                    ok = False
                    break
                if h == 0:
                    roots += 1
            if ok and single_root and roots != 1:
                ok = False
            if ok:
                state[0] = 2
                for m in range(1, n + 1):
                    state[m] = 0
                for m in range(1, n + 1):
                    v = m
                    while state[v] == 0:
                        state[v] = 1
                        v = heads[s, b, v]
                    if state[v] == 1:  # back on the path: a cycle
                        ok = False
                        break
                    v = m
                    while state[v] == 1:
                        state[v] = 2
                        v = heads[s, b, v]
            out[s, b] = ok


@functools.lru_cache(maxsize=64)
def _score_limits(dtype: torch.dtype, n_max: int) -> np.ndarray:
    """:func:`.checks.score_limit` of sentences of 0..N words, float64 ``(N+1,)`` (read-only)."""
    limits = np.array([score_limit(dtype, n) for n in range(n_max + 1)], dtype=np.float64)
    limits.flags.writeable = False
    return limits


@numba.njit(cache=True, nogil=True)
def _scan_scores(scores, lengths, limits, allowed):
    """The kernel of :func:`scan_scores`; ``limits[n]``: :func:`.checks.score_limit` of n words."""
    batch, size, _ = scores.shape
    n_max = size - 1
    for b in range(batch):
        if lengths[b] < 1 or lengths[b] > n_max:
            return SCAN_BAD_LENGTHS
    for b in range(batch):
        n = lengths[b]
        limit = limits[n]
        bad = False
        for h in range(size):
            row = h <= n
            for m in range(size):  # branch-free, so that it vectorises (3x at 43 words)
                value = scores[b, h, m]
                arc = row & (m >= 1) & (m <= n) & (h != m) & (value != -np.inf)  # -inf: forbidden
                allowed[b, h, m] = arc
                bad |= arc & ((abs(value) > limit) | (value != value))  # too large, +inf or NaN
        if bad:
            return SCAN_BAD_SCORES
    return SCAN_CLEAN


@numba.njit(cache=True, nogil=True)
def _laplacian(weights, n, single_root, lap, column_scale):
    """Koo et al.'s L̂ over words 1..n into ``lap[:n, :n]``, zero below and to the right (the
    rows and columns :func:`_invert_in_place` pads n with; see
    :func:`.laplacian.laplacian_matrix`) and the largest |entry| of each column (the scale
    of :func:`.laplacian.fast_inverse`'s error estimate)."""
    width = min((n + 7) // 8 * 8, lap.shape[1])
    for i in range(n):
        for j in range(n):
            lap[i, j] = -weights[i + 1, j + 1]
        for j in range(n, width):
            lap[i, j] = 0.0
    for i in range(n, min(lap.shape[0], n + 4)):
        for j in range(width):
            lap[i, j] = 0.0
    for j in range(n):
        column_scale[j] = 0.0
    for h in range(1, n + 1):
        for j in range(n):
            column_scale[j] += weights[h, j + 1]  # the diagonal: the word heads' weights
    for j in range(n):
        if single_root:
            lap[j, j] = column_scale[j]
            column_scale[j] = max(column_scale[j], weights[0, j + 1])
        else:
            column_scale[j] += weights[0, j + 1]
            lap[j, j] = column_scale[j]
    if single_root:
        top = weights[0, 1]
        for h in range(1, n + 1):
            top = max(top, weights[h, 1])
        column_scale[0] = top  # column 0 holds w(ROOT -> 1) and -w(h -> 1)
        for j in range(n):
            lap[0, j] = weights[0, j + 1]


#: Up to this n, :func:`_invert_in_place` updates one row at a time, above it four (measured
#: at n = 5-400, float64, one thread: the results are the same to the bit).
_ROW_BY_ROW = 128


@numba.njit(cache=True, nogil=True)
def _invert_in_place(a, n, column_scale, row_swap, top, factor):
    """Gauss–Jordan elimination with partial pivoting: ``a[:n, :n]`` becomes its inverse.

    The pivots are those of the LU factorisation with partial pivoting (the rows below the
    pivot see the same eliminations), so it returns ``(log |det|, max_k column_scale[k] /
    |pivot_k|)``, the ratio negated where det < 0 and log |det| -inf on a zero pivot.
    ``a`` has at least n rounded up to a multiple of 4 rows, zero past row n; its columns
    past n, up to n rounded up to a multiple of 8 (as many as it has), are zero and stay so:
    the row updates run over whole vectors, without a scalar remainder loop (n = 31 took
    longer than n = 32). ``row_swap``, ``factor`` (rows) and ``top`` (columns) are scratch.
    """
    rows = (n + 3) // 4 * 4
    width = min((n + 7) // 8 * 8, a.shape[1])
    log_abs = 0.0
    ratio = 0.0
    negative = False
    for k in range(n):
        pivot_row = k
        largest = abs(a[k, k])
        for i in range(k + 1, n):
            if abs(a[i, k]) > largest:
                largest = abs(a[i, k])
                pivot_row = i
        if largest == 0.0:
            return -np.inf, np.inf
        row_swap[k] = pivot_row
        if pivot_row != k:
            negative = not negative
            for j in range(n):
                a[k, j], a[pivot_row, j] = a[pivot_row, j], a[k, j]
        pivot = a[k, k]
        if pivot < 0:
            negative = not negative
        log_abs += math.log(largest)
        ratio = max(ratio, column_scale[k] / largest)
        a[k, k] = 1.0
        inverse_pivot = a[k, k] / pivot
        for j in range(width):
            a[k, j] *= inverse_pivot
            top[j] = a[k, j]  # a copy: LLVM vectorises the row updates only from a distinct buffer (3x at n = 100)
        # Every other row i: a[i] -= a[i, k] * top, with column k starting from 0 so that it
        # ends as -a[i, k] / pivot. The pivot row gets factor 0 and its column k back.
        for i in range(rows):
            factor[i] = a[i, k]
            a[i, k] = 0.0
        factor[k] = 0.0
        a[k, k] = top[k]
        if n <= _ROW_BY_ROW:  # one row at a time: 1.1-1.25x faster than four up to n = 100
            for i in range(n):
                f = factor[i]
                row = a[i]
                for j in range(width):
                    row[j] -= f * top[j]
        else:  # four rows per pass over top: less traffic once L̂ outgrows the caches (1.2x at 200)
            for i in range(0, rows, 4):
                f0, f1, f2, f3 = factor[i], factor[i + 1], factor[i + 2], factor[i + 3]
                for j in range(width):
                    t = top[j]
                    a[i, j] -= f0 * t
                    a[i + 1, j] -= f1 * t
                    a[i + 2, j] -= f2 * t
                    a[i + 3, j] -= f3 * t
    for k in range(n - 1, -1, -1):  # (P L̂)⁻¹ = L̂⁻¹ Pᵀ: undo the row swaps on the columns
        pivot_row = row_swap[k]
        if pivot_row != k:
            for i in range(n):
                a[i, k], a[i, pivot_row] = a[i, pivot_row], a[i, k]
    return log_abs, -ratio if negative else ratio


@numba.njit(cache=True, nogil=True)
def _marginals(weights, inverse, n, single_root, out, log_weights, diagonal, total, part):
    """Closed-form marginals from A = L̂⁻¹ into ``out`` (see
    :func:`.laplacian.closed_form_marginals`), in one pass over them: returns the largest
    deviation of a word's (and, single-root, ROOT's) marginals from summing to 1 and Σ μ s'
    over the arcs of positive weight (the others have μ = 0 and s' possibly -inf), in float64.
    Row by row, so that μ and the weights are read and written contiguously; ``diagonal``
    (the scores' dtype), ``total`` and ``part`` (float64) are scratch of N+1."""
    for m in range(1, n + 1):
        a_mm = inverse[m - 1, m - 1]
        diagonal[m] = a_mm if (m > 1 or not single_root) else 0.0
        if single_root:
            out[0, m] = weights[0, m] * inverse[m - 1, 0]
            out[1, m] = weights[1, m] * (a_mm if m > 1 else 0.0)
        else:
            out[0, m] = weights[0, m] * a_mm
            out[1, m] = weights[1, m] * (a_mm - inverse[m - 1, 0])
    for m in range(n + 1):
        total[m] = 0.0
        part[m] = 0.0
    for h in range(n + 1):
        for m in range(1, n + 1):
            if h >= 2:
                out[h, m] = weights[h, m] * (diagonal[m] - inverse[m - 1, h - 1])
            value = out[h, m]
            total[m] += value
            part[m] += float(value) * float(log_weights[h, m]) if weights[h, m] > 0 else 0.0
    largest = 0.0
    root_total = 0.0
    expected = 0.0
    for m in range(1, n + 1):
        largest = max(largest, abs(total[m] - 1.0))
        root_total += out[0, m]
        expected += part[m]
    if single_root:
        largest = max(largest, abs(root_total - 1.0))
    return largest, expected
