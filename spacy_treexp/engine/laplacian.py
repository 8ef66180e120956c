"""Partition function and arc marginals of (single- or multi-root) dependency trees.

Two exact algorithms compute the same quantities:

* the **fast path** (Koo et al. 2007, Prop. 1 and §3.3): Z = det(L̂) for the Laplacian L̂
  with its first row replaced by the ROOT weights (single-root) or with the ROOT weights added
  to its diagonal (multi-root); the marginals come in closed form from one LU factorisation
  and the inverse of L̂ (no double autograd);
* the **stable path**: the Grassmann–Taksar–Heyman state reduction on the Markov chain in
  which each word jumps to a head with probability proportional to w(head -> word). By the
  Markov-chain tree theorem its pivots are ratios of arborescence weights, computed as sums
  of positive terms only (no subtraction), in plain arithmetic where no weight can
  underflow and in log space otherwise. The marginals are the gradient of log Z.

Both shift the scores of each dependent column by their maximum (every tree has exactly one
head per word, so log Z shifts by the sum of those maxima and the marginals are unchanged).
The fast path's own pivots tell how much cancellation it suffered; a sentence whose error
estimate is above the dtype's tolerance, or whose marginals do not sum to 1, is recomputed
on the stable path, so callers never need to choose.
"""

from __future__ import annotations

import math
from typing import Tuple

import torch
from torch import Tensor

from spacy_treexp.engine.checks import word_mask

NEG_INF = float("-inf")

#: Largest error estimate (relative, eps times the pivot growth) the fast path may have.
_FAST_TOLERANCE = {torch.float64: 1e-12, torch.float32: 1e-4}


def fast_tolerance(dtype: torch.dtype) -> float:
    """Largest fast-path error estimate accepted for ``dtype`` (calibrated against mpmath)."""
    return _FAST_TOLERANCE.get(dtype, 1e-4)


def fast_accepted(log_det: Tensor, error: Tensor, dtype: torch.dtype) -> Tensor:
    """(B,) where the fast path's result is kept: a finite log det and an error estimate
    within :func:`fast_tolerance` for ``dtype``."""
    return (error <= fast_tolerance(dtype)) & torch.isfinite(log_det)


#: Largest deviation from 1 of a word's marginals summed over its heads that the fast path may
#: leave: its error estimate bounds the determinant's error, not the inverse's.
_NORMALISATION_TOLERANCE = {torch.float64: 1e-10, torch.float32: 1e-5}


def marginals_normalised(marginals: Tensor, lengths: Tensor, single_root: bool, dtype: torch.dtype) -> Tensor:
    """(B,) whether every word's marginals sum to 1 over its heads (and, single-root, ROOT's
    over its children) within the tolerance for ``dtype``: an a-posteriori check of the fast
    path, which costs one sum."""
    marginals = marginals.detach()
    words = torch.arange(1, marginals.shape[-1], device=lengths.device) <= lengths.unsqueeze(-1)
    deviation = (marginals.sum(-2)[..., 1:] - words.to(marginals.dtype)).abs_().amax(-1)  # padding: 0 - 0
    if single_root:
        deviation = torch.maximum(deviation, (marginals[..., 0, :].sum(-1) - 1).abs_())
    return deviation <= normalisation_tolerance(dtype)


def normalisation_tolerance(dtype: torch.dtype) -> float:
    """Largest deviation from 1 of a word's summed marginals the fast path may leave in ``dtype``."""
    return _NORMALISATION_TOLERANCE.get(dtype, 1e-5)


def shifted_weights(scores: Tensor, mask: Tensor) -> Tuple[Tensor, Tensor]:
    """Arc weights ``exp(score - shift[m])`` with masked arcs set to 0.

    ``shift[b, m]`` is the largest score of an arc into ``m`` (0 where no arc enters m, e.g.
    ROOT and padding). Returns ``(weights (B, N+1, N+1), shift (B, N+1))``; the shift is
    detached: log Z(scores) = log Z(weights) + Σ_m shift[m] holds for any shift, so its
    gradient is carried by the weights alone.
    """
    log_weights, shift = shifted_log_weights(scores, mask)
    return torch.exp(log_weights), shift


def shifted_log_weights(scores: Tensor, mask: Tensor) -> Tuple[Tensor, Tensor]:
    """Column-shifted log-weights ``score - shift[m]`` (masked arcs ``-inf``) and ``shift``.

    The log-space form of :func:`shifted_weights`, for the stable path.
    """
    masked = torch.where(mask, scores, NEG_INF)
    shift = masked.detach().amax(dim=-2).nan_to_num_(neginf=0.0)  # -inf: no arc enters m
    return masked - shift.unsqueeze(-2), shift


def laplacian_matrix(weights: Tensor, lengths: Tensor, single_root: bool) -> Tensor:
    """Koo et al. (2007)'s matrix L̂ ``(B, N, N)`` indexed by words (word i at row i-1).

    ``L[h, m] = -w(h -> m)``, ``L[m, m] = Σ_h w(h -> m)`` over word heads; multi-root adds
    the ROOT weights to the diagonal, single-root replaces the first row by them. Rows and
    columns past a sentence's length are the identity, so they change no determinant.
    """
    return _laplacian_and_column_scale(weights, lengths, single_root)[0]


def _laplacian_and_column_scale(weights: Tensor, lengths: Tensor, single_root: bool) -> Tuple[Tensor, Tensor]:
    """L̂ and the largest |entry| ``(B, N)`` of each of its columns, without a pass over L̂:
    a diagonal entry is a sum of the weights in its column, so it dominates them; the ROOT
    weight may be larger (single-root row 0)."""
    word_weights = weights[..., 1:, 1:]
    root_weights = weights[..., 0, 1:]
    n_max = word_weights.shape[-1]
    padding = torch.arange(n_max, device=weights.device) >= lengths.unsqueeze(1)
    diagonal = word_weights.sum(dim=-2).masked_fill_(padding, 1.0)  # a padding column has no arc
    if not single_root:
        diagonal = diagonal + root_weights
    lap = word_weights.neg()  # the diagonal of word_weights is 0 (no arc m -> m)
    lap.diagonal(dim1=-2, dim2=-1).copy_(diagonal)
    if single_root:
        lap[..., 0, :] = root_weights
        # column 0 holds w(ROOT -> 1) and -w(h -> 1): its largest weight, not the diagonal
        scale = torch.maximum(diagonal, root_weights).detach()
        scale[..., 0] = weights[..., :, 1].detach().amax(-1)
        return lap, scale
    return lap, diagonal.detach()


def fast_partition_and_marginals(weights: Tensor, lengths: Tensor, single_root: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """Fast path: ``(log det L̂, marginals (B, N+1, N+1), error estimate (B,))``.

    Marginals (Koo et al. 2007, §3.3), with A = L̂⁻¹ over 0-based word indices:
    multi-root μ(h→m) = w(h→m)(A[m,m] − A[m,h]), μ(0→m) = w(0→m) A[m,m];
    single-root μ(h→m) = w(h→m)([m≠0] A[m,m] − [h≠0] A[m,h]), μ(0→m) = w(0→m) A[m,0].
    """
    log_det, inverse, error = fast_inverse(weights, lengths, single_root)
    return log_det, closed_form_marginals(weights, inverse, single_root), error


def fast_inverse(weights: Tensor, lengths: Tensor, single_root: bool) -> Tuple[Tensor, Tensor, Tensor]:
    """``(log det L̂, L̂⁻¹ (B, N, N), error estimate (B,))`` from one LU factorisation.

    The error estimate is eps · n · max_k (column k's largest |entry|) / |U_kk| from the LU
    pivots: the amplification of rounding errors by cancellation during elimination. It is
    infinite where the determinant comes out non-positive (it is a positive sum of trees) or
    L̂ is singular; a result is trusted where it is at most :func:`fast_tolerance`.
    """
    lap, column_scale = _laplacian_and_column_scale(weights, lengths, single_root)
    n_max = lap.shape[-1]
    lu, pivots, info = torch.linalg.lu_factor_ex(lap)
    u_diag = torch.diagonal(lu, dim1=-2, dim2=-1)
    u_size = u_diag.abs()
    log_det = torch.log(u_size).sum(-1)
    with torch.no_grad():
        swaps = (pivots != torch.arange(1, n_max + 1, device=lap.device, dtype=pivots.dtype)).sum(-1)
        negative = (swaps + (u_diag < 0).sum(-1)) % 2 == 1  # det < 0
        error = (column_scale / u_size).amax(-1) * (torch.finfo(lap.dtype).eps * n_max)
        # NaN (0 / 0 on a zero pivot) becomes inf too
        error = error.nan_to_num_(nan=float("inf"), posinf=float("inf"))
        error = error.masked_fill_(negative | (info != 0), float("inf"))
    eye = torch.eye(n_max, dtype=lap.dtype, device=lap.device).expand_as(lap)
    inverse = torch.linalg.lu_solve(lu, pivots, eye, left=False)  # X L̂ = I: faster in LAPACK
    return log_det, inverse, error


def closed_form_marginals(weights: Tensor, inverse: Tensor, single_root: bool) -> Tensor:
    """Arc marginals from A = L̂⁻¹ (see :func:`fast_partition_and_marginals`)."""
    diag = torch.diagonal(inverse, dim1=-2, dim2=-1)  # A[m, m]
    transposed = inverse.transpose(-1, -2)  # [h, m] -> A[m, h]
    factor = torch.zeros_like(weights)  # [h, m] over ROOT and words; ROOT column stays 0
    if single_root:
        factor[..., 1:, 1:] = diag.unsqueeze(-2) - transposed
        factor[..., 1:, 1] = -transposed[..., :, 0]  # m = first word: no A[m, m] term
        factor[..., 1, 1:] = diag  # h = first word: no A[m, h] term
        factor[..., 0, 1:] = inverse[..., :, 0]
    else:
        factor[..., 1:, 1:] = diag.unsqueeze(-2) - transposed
        factor[..., 0, 1:] = diag
    return weights * factor


def _logsumexp(values: Tensor, dim: int) -> Tensor:
    """logsumexp whose gradient is 0, not NaN, where every term is -inf."""
    top = values.detach().amax(dim=dim, keepdim=True)
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    total = torch.exp(values - top).sum(dim=dim)
    positive = total > 0
    safe = torch.where(positive, total, torch.ones_like(total))
    return torch.where(positive, torch.log(safe) + top.squeeze(dim), torch.full_like(total, NEG_INF))


def _logaddexp(a: Tensor, b: Tensor) -> Tensor:
    """log(exp(a) + exp(b)) whose gradient is 0, not NaN, where both are -inf."""
    top = torch.maximum(a, b).detach()
    top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    total = torch.exp(a - top) + torch.exp(b - top)
    positive = total > 0
    safe = torch.where(positive, total, torch.ones_like(total))
    return torch.where(positive, torch.log(safe) + top, torch.full_like(total, NEG_INF))


#: Linear arithmetic is safe for the GTH elimination when every arc weight relative to its
#: column's best is at least exp(-300): then no product of two path terms reaches float64's
#: underflow (exp(-708)) while every entry and pivot stays above exp(-300).
_LINEAR_GTH_MIN_LOG_WEIGHT = -300.0


def stable_log_partition(scores: Tensor, mask: Tensor, lengths: Tensor, single_root: bool) -> Tuple[Tensor, Tensor]:
    """Stable path: ``(log Z', Σ shift)`` by GTH state reduction, subtraction-free, where
    log Z = log Z' + Σ shift and log Z' is that of the column-shifted scores.

    The two are returned apart because scores of huge magnitude make Σ shift and log Z'
    huge and opposite while the quantities derived from log Z (entropy, log-probabilities)
    are small: only log Z' keeps them free of cancellation.

    Markov-chain tree theorem: in the chain where word m jumps to head h with probability
    ∝ w(h→m), eliminating a state k (the Schur complement of the Laplacian) gives the new
    word-to-word weights w'(h→m) = w(h→m) + w(h→k) w(k→m) / D_k with the pivot
    D_k = Σ_h w(h→k) over the states left — a sum, never a difference (Grassmann, Taksar &
    Heyman 1985). Multi-root keeps ROOT as the last state: Z = Π_k D_k. Single-root drops
    ROOT from the pivots and carries its row along: Z = Π_{k} D_k · w'(ROOT → last word), the
    first-order term of det(L + t·diag(w_ROOT)) in t, i.e. Σ_j w(ROOT→j) Z_j (Koo et al.
    2007). Computed in float64 (or the input's precision, if higher): with plain arithmetic
    where all weights are within exp(-300) of their column's best and no arc is forbidden
    (every pivot is then positive in any order, and the words are eliminated from the last
    to the first: :func:`_gth_linear`), otherwise in log space, where nothing can underflow
    and the next state eliminated is the one with the largest pivot, so that a pivot is
    zero only when no tree exists (:func:`_gth_eliminate`).
    """
    logw, shift, linear = _stable_setup(scores, mask, lengths)
    result = torch.zeros_like(shift[:, 0])
    for use_linear in (True, False):
        index = (linear == use_linear).nonzero().squeeze(-1)
        if index.numel():
            if use_linear:
                part = _gth_linear(torch.exp(logw[index]), lengths[index], single_root)
            else:
                part = _gth_eliminate(logw[index], lengths[index], single_root)
            result = result.index_put((index,), part)
    return result, shift.sum(-1)


def stable_partition_and_marginals(
    scores: Tensor, mask: Tensor, lengths: Tensor, single_root: bool
) -> Tuple[Tensor, Tensor, Tensor]:
    """Stable path without an autograd graph: ``(log Z', Σ shift, marginals)`` in the working
    dtype (log Z = log Z' + Σ shift, see :func:`stable_log_partition`).

    Marginals are the gradient of :func:`stable_log_partition`: by running the plain
    elimination backwards by hand (:func:`_gth_linear_with_gradient`), and by autograd for
    the sentences in log space. Sentences with no tree get log Z = -inf and zero marginals.
    """
    with torch.no_grad():
        logw, shift, linear = _stable_setup(scores.detach(), mask, lengths)
    shift_total = shift.sum(-1)
    if bool(linear.all()):  # the common case: no copies in and out of the batch
        weights = torch.exp(logw)
        part, gradient = _gth_linear_with_gradient(weights, lengths, single_root)
        return part, shift_total, (weights * gradient).masked_fill_(~mask, 0.0)
    log_z = torch.zeros_like(shift_total)
    marginals = torch.zeros_like(logw)
    index = linear.nonzero().squeeze(-1)
    if index.numel():
        weights = torch.exp(logw[index])
        part, gradient = _gth_linear_with_gradient(weights, lengths[index], single_root)
        log_z = log_z.index_add(0, index, part)
        marginals = marginals.index_put((index,), weights * gradient)
    index = (~linear).nonzero().squeeze(-1)
    if index.numel():
        with torch.enable_grad():
            leaf = logw[index].requires_grad_(True)
            part = _gth_eliminate(leaf, lengths[index], single_root)
            finite = torch.isfinite(part)
            (gradient,) = torch.autograd.grad(torch.where(finite, part, torch.zeros_like(part)).sum(), leaf)
        log_z = log_z.index_add(0, index, part.detach())
        marginals = marginals.index_put((index,), gradient)
    possible = torch.isfinite(log_z).view(-1, 1, 1)
    return log_z, shift_total, torch.where(mask & possible, marginals, torch.zeros_like(marginals))


def _stable_setup(scores: Tensor, mask: Tensor, lengths: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """Column-shifted log-weights in float64 (or higher), the shift, and which sentences may
    be eliminated in plain arithmetic (see :data:`_LINEAR_GTH_MIN_LOG_WEIGHT`)."""
    work_dtype = torch.float64 if scores.dtype in (torch.float16, torch.bfloat16, torch.float32) else scores.dtype
    logw, shift = shifted_log_weights(scores.to(work_dtype), mask)  # (B, N+1, N+1) [head, dep]
    with torch.no_grad():
        smallest = logw.masked_fill(~mask, 0.0).amin(dim=(-2, -1))
        # n words have n * n possible arcs (n heads each): fewer in the mask = a forbidden arc
        complete = mask.sum(dim=(-2, -1)) == lengths * lengths
        linear = (smallest >= _LINEAR_GTH_MIN_LOG_WEIGHT) & complete
    return logw, shift, linear


def _gth_linear(values: Tensor, lengths: Tensor, single_root: bool) -> Tensor:
    """log Z of positive column-shifted weights by GTH elimination in plain arithmetic.

    Words are eliminated from the last to the first, so the states left before word k are
    ROOT and words 1..k-1 and each step works on the leading (k, k) block: D_k = Σ_{h<k}
    w(h→k) (words only for single-root), w'(h→m) = w(h→m) + w(h→k) w(k→m) / D_k. A diagonal
    entry (a self-loop of the reduced chain) is never read, so it is not masked. Padding
    states have no arcs: their step adds nothing and their pivot counts as 1.
    Differentiable by autograd; :func:`_gth_linear_with_gradient` is the same elimination
    with its gradient by hand.
    """
    return _gth_linear_steps(values, lengths, single_root, keep_steps=False)[0]


#: Steps per block of the in-place elimination and of its backward pass (see
#: :func:`_gth_linear_steps`), for weights of more than :data:`_GTH_BLOCKED_BYTES`; smaller
#: ones go step by step, which is faster while the leading block stays in cache. Measured (one
#: thread, float64, log Z and gradient, step by step / blocked): B = 4, n = 200 49 / 61 ms;
#: B = 1, n = 700 256 / 322 ms; B = 4, n = 400 322 / 274 ms; B = 1, n = 1,000 556 / 523 ms;
#: B = 1, n = 2,000 about 10 / 2.2 s.
_GTH_BLOCK = 64
_GTH_BLOCKED_BYTES = 4 << 20


def _gth_block(values: Tensor) -> int:
    """Steps per block for these weights (see :data:`_GTH_BLOCK`)."""
    return _GTH_BLOCK if values.numel() * values.element_size() > _GTH_BLOCKED_BYTES else 1


def _gth_linear_steps(values: Tensor, lengths: Tensor, single_root: bool, keep_steps: bool, block: int = 0):
    """The elimination of :func:`_gth_linear`: ``(log Z, [(k, c, r, 1/D_k)] if keep_steps,
    the weights left at the end)``; ``block`` steps at a time (default :func:`_gth_block`),
    in place where there is no autograd graph."""
    batch, size, _ = values.shape
    first_head = 1 if single_root else 0  # single-root: ROOT is no state of the chain
    last = 2 if single_root else 1  # single-root: word 1 is left, joined to ROOT at the end
    positions = torch.arange(size, device=values.device).unsqueeze(1)
    padding = (lengths.unsqueeze(0) < positions).to(values.dtype)  # (N+1, B): 1 past the sentence
    factors, steps = [], []  # the pivots, then (single-root) w'(ROOT -> word 1): Z = Π

    def eliminate(k: int) -> Tuple[Tensor, Tensor]:
        """Step k's pivot D_k (kept) and its column c and row r = w(k -> m) / D_k (ROOT: 0)."""
        column = values[:, :k, k]  # w(h -> k), h < k
        pivot = column[:, first_head:].sum(-1) + padding[k]
        inverse_pivot = pivot.reciprocal()
        factors.append(pivot)
        row = values[:, k, :k] * inverse_pivot.unsqueeze(-1)
        if keep_steps:
            steps.append((k, column.contiguous(), row, inverse_pivot))  # bmm wants dense rows
        return column, row

    block = block or _gth_block(values)
    if block == 1 or (torch.is_grad_enabled() and values.requires_grad):
        # step by step, each step makes its (k, k) block anew (faster while it stays in cache)
        for k in range(size - 1, last - 1, -1):
            column, row = eliminate(k)
            values = torch.addcmul(values[:, :k, :k], column.unsqueeze(-1), row.unsqueeze(-2))
    else:
        # In place on one copy, steps high..low form a block (as blocked LU): each step updates
        # only the block's columns and rows, and the leading (low, low) block, which the
        # block's steps do not read, takes their updates at once, one matrix product.
        values = values.clone()
        for high in range(size - 1, last - 1, -block):
            low = max(last, high - block + 1)
            block_columns, block_rows = [], []
            for k in range(high, low - 1, -1):
                column, row = eliminate(k)
                # column k lies outside the blocks it updates: rows :k of the block's columns,
                # then the block's rows over the leading columns
                values[:, :k, low:k].addcmul_(column.unsqueeze(-1), row[:, low:].unsqueeze(-2))
                values[:, low:k, :low].addcmul_(column[:, low:].unsqueeze(-1), row[:, :low].unsqueeze(-2))
                block_columns.append(column[:, :low])
                block_rows.append(row[:, :low])
            values[:, :low, :low].baddbmm_(torch.stack(block_columns, -1), torch.stack(block_rows, -2))
    if single_root:
        factors.append(values[:, 0, 1])
    if not factors:  # multi-root over no words
        return torch.zeros(batch, dtype=values.dtype, device=values.device), steps, values
    return torch.log(torch.stack(factors)).sum(0), steps, values


def _gth_linear_with_gradient(
    values: Tensor, lengths: Tensor, single_root: bool, block: int = 0
) -> Tuple[Tensor, Tensor]:
    """:func:`_gth_linear` and its gradient d log Z / d values, by reverse mode by hand.

    Step k maps V to V' = V[:k, :k] + c r^T with c = V[:k, k], D = Σ c[first_head:],
    r = V[k, :k] / D, and adds log D. Backwards, with G' = d/dV': d/dV[:k, :k] = G',
    d/dV[k, :k] = (G'^T c) / D, d/dV[:k, k] = G' r + [h >= first_head] (1 - r·(G'^T c)) / D.
    Each step's c, r and 1/D are kept: O(B n^2) memory. Large weights go ``block`` steps
    (default :func:`_gth_block`) at a time: two matrix products per block instead of two
    matrix-vector products over the whole leading block per step (which stream O(n^2)
    memory each: memory-bound once the block leaves the cache).
    """
    block = block or _gth_block(values)
    first_head = 1 if single_root else 0
    log_z, steps, left = _gth_linear_steps(values, lengths, single_root, keep_steps=True, block=block)
    gradient = torch.zeros_like(values)
    if single_root:
        gradient[:, 0, 1] = 1.0 / left[:, 0, 1]  # d log w'(ROOT -> word 1)
    in_pivot = torch.ones(values.shape[-1], dtype=values.dtype, device=values.device)
    in_pivot[:first_head] = 0.0  # which heads' weights D_k sums
    # A padding word's D is the constant 1, yet its entries here get d log D / dV = 1: they
    # are gradients for weights that are exactly 0, so they never reach a marginal.
    backwards = steps[::-1]  # k increasing
    if block == 1:  # step by step: two matrix-vector products with the whole leading block
        for k, column, row, inverse_pivot in backwards:
            outer = gradient[:, :k, :k]  # d/dV' of this step
            d_column = torch.bmm(outer, row.unsqueeze(-1)).squeeze(-1)
            d_row = torch.bmm(column.unsqueeze(-2), outer).squeeze(-2)
            _write_step_gradient(gradient, k, d_column, d_row, row, inverse_pivot, in_pivot)
        return log_z, gradient
    for begin in range(0, len(backwards), block):
        group = backwards[begin : begin + block]
        # Steps low..low+b-1 write only rows and columns >= low of the gradient, so the
        # leading (low, low) block G is the same for all of them: its products with the
        # group's rows and columns are two matrix products, and each step adds what its
        # predecessors in the group wrote (as blocked LU, backwards).
        low = group[0][0]
        leading = gradient[:, :low, :low]
        by_rows = torch.bmm(leading, torch.stack([row[:, :low] for _, _, row, _ in group], -1))  # G r_j
        by_columns = torch.bmm(torch.stack([column[:, :low] for _, column, _, _ in group], -2), leading)  # c_j^T G
        for j, (k, column, row, inverse_pivot) in enumerate(group):
            # d/dV' of this step is gradient[:, :k, :k]: G' r and c^T G', by parts
            d_column = torch.cat(
                [
                    by_rows[:, :, j] + torch.bmm(gradient[:, :low, low:k], row[:, low:].unsqueeze(-1)).squeeze(-1),
                    torch.bmm(gradient[:, low:k, :k], row.unsqueeze(-1)).squeeze(-1),
                ],
                -1,
            )
            d_row = torch.cat(
                [
                    by_columns[:, j] + torch.bmm(column[:, low:].unsqueeze(-2), gradient[:, low:k, :low]).squeeze(-2),
                    torch.bmm(column.unsqueeze(-2), gradient[:, :k, low:k]).squeeze(-2),
                ],
                -1,
            )
            _write_step_gradient(gradient, k, d_column, d_row, row, inverse_pivot, in_pivot)
    return log_z, gradient


def _write_step_gradient(
    gradient: Tensor, k: int, d_column: Tensor, d_row: Tensor, row: Tensor, inverse_pivot: Tensor, in_pivot: Tensor
) -> None:
    """Step k's gradient from G' r (``d_column``) and c^T G' (``d_row``): d/dV[k, :k] and
    d/dV[:k, k] (see :func:`_gth_linear_with_gradient`)."""
    torch.mul(d_row, inverse_pivot.unsqueeze(-1), out=gradient[:, k, :k])
    d_pivot = torch.addcmul(inverse_pivot, inverse_pivot, torch.linalg.vecdot(d_row, row), value=-1.0)
    torch.addcmul(d_column, d_pivot.unsqueeze(-1), in_pivot[:k], out=gradient[:, :k, k])


#: A log-space elimination whose autograd graph would hold more bytes than this keeps only
#: every chunk's input for the backward pass and recomputes the chunk (activation
#: checkpointing, ``_gth_chunk_steps``). Measured (one thread, one sentence, scores x100, log Z
#: and marginals, CPU time and peak memory over the process's start): 300 words 1.67 s and
#: 0.42 GB, 600 words 10.6 s and 0.45 GB (checkpointed); before the steps shrank the matrix
#: (``_gth_eliminate_steps``) 4.95 s / 0.59 GB and 21.7 s / 3.5 GB.
_CHECKPOINT_BYTES = 1 << 30
#: Tensors of a step's block size whose memory autograd keeps per elimination step (measured:
#: about 5 in float64, from the figures above).
_SAVED_PER_STEP = 5


def _gth_chunk_steps(steps: int) -> int:
    """Steps per checkpointed chunk: a chunk's input is one ``(B, N+1, N+1)`` tensor and its
    recomputation keeps :data:`_SAVED_PER_STEP` per step, so chunks of ~sqrt(steps / 5)
    steps keep the fewest: O(B n^2.5) memory instead of O(B n^3)."""
    return max(1, round(math.sqrt(steps / _SAVED_PER_STEP)))


def _gth_eliminate(logw: Tensor, lengths: Tensor, single_root: bool) -> Tensor:
    """log Z of column-shifted log-weights by GTH elimination in log space, largest pivot
    first (see :func:`stable_log_partition`). Differentiable by autograd; where its graph
    would exceed :data:`_CHECKPOINT_BYTES`, chunks of steps are recomputed in the backward
    pass instead of kept (same values; memory O(B n^2.5) instead of O(B n^3), about twice the
    time)."""
    batch, size, _ = logw.shape
    n_max = size - 1
    remaining = word_mask(lengths, n_max)  # (B, N+1)
    log_z = torch.zeros(batch, dtype=logw.dtype, device=logw.device)
    steps = n_max - 1 if single_root else n_max
    values = logw
    # step t works on a (B, N+1-t, N+1-t) block (see _gth_eliminate_steps)
    cells = sum((size - t) ** 2 for t in range(steps))
    graph_bytes = _SAVED_PER_STEP * batch * cells * logw.element_size()
    if torch.is_grad_enabled() and logw.requires_grad and graph_bytes > _CHECKPOINT_BYTES:
        from torch.utils.checkpoint import checkpoint

        chunk = _gth_chunk_steps(steps)
        for begin in range(0, steps, chunk):
            values, remaining, log_z = checkpoint(
                _gth_eliminate_steps,
                values,
                remaining,
                log_z,
                lengths,
                single_root,
                begin,
                min(begin + chunk, steps),
                use_reentrant=False,
            )
    else:
        values, remaining, log_z = _gth_eliminate_steps(values, remaining, log_z, lengths, single_root, 0, steps)
    if single_root:  # ROOT and the word never eliminated are left
        log_z = log_z + values[:, 0, 1]
    return log_z


def _gth_eliminate_steps(
    values: Tensor, remaining: Tensor, log_z: Tensor, lengths: Tensor, single_root: bool, begin: int, end: int
) -> Tuple[Tensor, Tensor, Tensor]:
    """Steps ``begin``..``end - 1`` of :func:`_gth_eliminate`: ``(values, remaining, log_z)``
    after them (``remaining``: the words not yet eliminated, over the states of ``values``).

    Each step drops the state it eliminates from the matrix, which shrinks from ``(B, s, s)``
    to ``(B, s-1, s-1)``: the steps cost Σ s² = O(n³/3) instead of n · (N+1)². A sentence
    whose own steps are done drops a state outside it (padding) instead, so every sentence
    of the batch keeps ROOT first and its words not yet eliminated."""
    batch = values.shape[0]
    device = values.device
    batch_index = torch.arange(batch, device=device)
    for step in range(begin, end):
        size = values.shape[-1]
        active = step < (lengths - 1 if single_root else lengths)  # (B,)
        head_rows = remaining.clone()
        if not single_root:
            head_rows[:, 0] = True
        pivots = _logsumexp(values.masked_fill(~head_rows.unsqueeze(-1), NEG_INF), dim=-2)
        free = pivots.masked_fill(~remaining, NEG_INF)
        spare = ~remaining  # a state that is no word of the sentence left, ROOT aside
        spare[:, 0] = False
        k = torch.where(active, free.detach().argmax(-1), spare.to(torch.int8).argmax(-1))
        pivot = torch.where(active, free[batch_index, k], torch.zeros_like(log_z))
        log_z = log_z + pivot
        kept = torch.arange(size - 1, device=device).unsqueeze(0).expand(batch, -1)
        kept = kept + (kept >= k.unsqueeze(-1)).to(kept.dtype)  # every state but k, in order
        column = values[batch_index, :, k].gather(1, kept)  # w(h -> k)
        row = values[batch_index, k, :].gather(1, kept)  # w(k -> m)
        remaining = remaining.gather(1, kept)
        values = values[batch_index.view(-1, 1, 1), kept.unsqueeze(-1), kept.unsqueeze(-2)]
        row = row.masked_fill(~(remaining & active.unsqueeze(-1)), NEG_INF)
        # A path m -> k -> m is a self-loop of the reduced chain: GTH drops it (no diagonal).
        update = column.unsqueeze(-1) + row.unsqueeze(-2) - pivot.unsqueeze(-1).unsqueeze(-1)
        diagonal = torch.eye(size - 1, dtype=torch.bool, device=device)
        update = update.masked_fill(~torch.isfinite(update) | diagonal, NEG_INF)
        values = _logaddexp(values, update)
    return values, remaining, log_z
