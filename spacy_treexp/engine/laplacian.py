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
estimate is above the dtype's tolerance is recomputed on the stable path, so callers never
need to choose.
"""
from __future__ import annotations

from typing import Tuple

import torch
from torch import Tensor

from spacy_treexp.engine.checks import arc_mask, word_mask

NEG_INF = float("-inf")

#: Largest error estimate (relative, eps times the pivot growth) the fast path may have.
_FAST_TOLERANCE = {torch.float64: 1e-12, torch.float32: 1e-4}


def fast_tolerance(dtype: torch.dtype) -> float:
    """Largest fast-path error estimate accepted for ``dtype`` (calibrated against mpmath)."""
    return _FAST_TOLERANCE.get(dtype, 1e-4)


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
    masked = scores.masked_fill(~mask, NEG_INF)
    shift = masked.detach().amax(dim=-2)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    return masked - shift.unsqueeze(-2), shift


def laplacian_matrix(weights: Tensor, lengths: Tensor, single_root: bool) -> Tensor:
    """Koo et al. (2007)'s matrix L̂ ``(B, N, N)`` indexed by words (word i at row i-1).

    ``L[h, m] = -w(h -> m)``, ``L[m, m] = Σ_h w(h -> m)`` over word heads; multi-root adds
    the ROOT weights to the diagonal, single-root replaces the first row by them. Rows and
    columns past a sentence's length are the identity, so they change no determinant.
    """
    word_weights = weights[..., 1:, 1:]
    root_weights = weights[..., 0, 1:]
    n_max = word_weights.shape[-1]
    padding = torch.arange(n_max, device=weights.device).unsqueeze(0) >= lengths.unsqueeze(1)
    diagonal = word_weights.sum(dim=-2) + padding.to(weights.dtype)
    if not single_root:
        diagonal = diagonal + root_weights
    lap = torch.diag_embed(diagonal) - word_weights
    if single_root:
        lap[..., 0, :] = root_weights
    return lap


def fast_partition_and_marginals(
    weights: Tensor, lengths: Tensor, single_root: bool
) -> Tuple[Tensor, Tensor, Tensor]:
    """Fast path: ``(log det L̂, marginals (B, N+1, N+1), error estimate (B,))``.

    Marginals (Koo et al. 2007, §3.3), with A = L̂⁻¹ over 0-based word indices:
    multi-root μ(h→m) = w(h→m)(A[m,m] − A[m,h]), μ(0→m) = w(0→m) A[m,m];
    single-root μ(h→m) = w(h→m)([m≠0] A[m,m] − [h≠0] A[m,h]), μ(0→m) = w(0→m) A[m,0].
    The error estimate is eps · n · max_k |L̂|_{max, col k} / |U_kk| from the LU pivots: the
    amplification of rounding errors by cancellation during elimination.
    """
    lap = laplacian_matrix(weights, lengths, single_root)
    n_max = lap.shape[-1]
    lu, pivots, info = torch.linalg.lu_factor_ex(lap)
    u_diag = torch.diagonal(lu, dim1=-2, dim2=-1)
    permutation_sign = torch.where(
        (pivots != torch.arange(1, n_max + 1, device=lap.device, dtype=pivots.dtype)).sum(-1) % 2 == 1,
        -1.0,
        1.0,
    ).to(lap.dtype)
    det_sign = permutation_sign * torch.sign(u_diag).prod(-1)
    log_det = torch.log(u_diag.abs()).sum(-1)
    with torch.no_grad():
        column_scale = lap.abs().amax(dim=-2)
        growth = (column_scale / u_diag.abs()).amax(-1)
        eps = torch.finfo(lap.dtype).eps
        error = eps * n_max * growth
        error = torch.where((det_sign > 0) & (info == 0) & torch.isfinite(error), error, torch.full_like(error, float("inf")))
    eye = torch.eye(n_max, dtype=lap.dtype, device=lap.device).expand_as(lap)
    inverse = torch.linalg.lu_solve(lu, pivots, eye)
    marginals = _closed_form_marginals(weights, inverse, single_root)
    return log_det, marginals, error


def _closed_form_marginals(weights: Tensor, inverse: Tensor, single_root: bool) -> Tensor:
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


def stable_log_partition(scores: Tensor, mask: Tensor, lengths: Tensor, single_root: bool) -> Tensor:
    """Stable path: log Z by GTH state reduction, subtraction-free.

    Markov-chain tree theorem: in the chain where word m jumps to head h with probability
    ∝ w(h→m), eliminating a state k (the Schur complement of the Laplacian) gives the new
    word-to-word weights w'(h→m) = w(h→m) + w(h→k) w(k→m) / D_k with the pivot
    D_k = Σ_h w(h→k) over the states left — a sum, never a difference (Grassmann, Taksar &
    Heyman 1985). Multi-root keeps ROOT as the last state: Z = Π_k D_k. Single-root drops
    ROOT from the pivots and carries its row along: Z = Π_{k} D_k · w'(ROOT → last word), the
    first-order term of det(L + t·diag(w_ROOT)) in t, i.e. Σ_j w(ROOT→j) Z_j (Koo et al.
    2007). The next state eliminated is the one with the largest pivot, so a pivot is zero
    only when no tree exists. Computed in float64 (or the input's precision, if higher):
    with plain arithmetic where all weights are within exp(-300) of their column's best and
    no arc is forbidden, otherwise in log space, where nothing can underflow.
    """
    work_dtype = torch.float64 if scores.dtype in (torch.float16, torch.bfloat16, torch.float32) else scores.dtype
    logw, shift = shifted_log_weights(scores.to(work_dtype), mask)  # (B, N+1, N+1) [head, dep]
    structural = arc_mask(lengths, scores.shape[-1] - 1)
    with torch.no_grad():
        smallest = torch.where(structural, logw, torch.zeros_like(logw)).amin(dim=(-2, -1))
        linear = smallest >= _LINEAR_GTH_MIN_LOG_WEIGHT  # also False if any arc is -inf
    log_z = shift.sum(-1)
    result = torch.zeros_like(log_z)
    for use_linear in (True, False):
        index = (linear == use_linear).nonzero().squeeze(-1)
        if index.numel():
            part = _gth_eliminate(logw[index], lengths[index], single_root, use_linear)
            result = result.index_put((index,), part)
    return log_z + result


def _gth_eliminate(logw: Tensor, lengths: Tensor, single_root: bool, linear: bool) -> Tensor:
    """log Z of column-shifted log-weights by GTH elimination (see :func:`stable_log_partition`)."""
    batch, size, _ = logw.shape
    device = logw.device
    n_max = size - 1
    positions = torch.arange(size, device=device)
    remaining = word_mask(lengths, n_max)  # (B, N+1)
    batch_index = torch.arange(batch, device=device)
    off_diagonal = ~torch.eye(size, dtype=torch.bool, device=device)
    values = torch.exp(logw) if linear else logw
    log_z = torch.zeros(batch, dtype=logw.dtype, device=device)
    steps = n_max - 1 if single_root else n_max
    for step in range(steps):
        active = step < (lengths - 1 if single_root else lengths)  # (B,)
        head_rows = remaining.clone()
        if not single_root:
            head_rows[:, 0] = True
        if linear:
            pivots = (values * head_rows.unsqueeze(-1)).sum(dim=-2)
            free = torch.where(remaining, pivots, torch.full_like(pivots, -1.0))
        else:
            pivots = _logsumexp(values.masked_fill(~head_rows.unsqueeze(-1), NEG_INF), dim=-2)
            free = pivots.masked_fill(~remaining, NEG_INF)
        k = free.detach().argmax(-1)
        pivot = free[batch_index, k]
        remaining = remaining & ~(active.unsqueeze(-1) & (positions == k.unsqueeze(-1)))
        column = values[batch_index, :, k]  # w(h -> k)
        row = values[batch_index, k, :]  # w(k -> m)
        keep = remaining & active.unsqueeze(-1)
        # A path m -> k -> m is a self-loop of the reduced chain: GTH drops it (no diagonal).
        if linear:
            pivot = torch.where(active, pivot, torch.ones_like(pivot))
            log_z = log_z + torch.log(pivot)
            row = torch.where(keep, row, torch.zeros_like(row)) / pivot.unsqueeze(-1)
            values = values + column.unsqueeze(-1) * row.unsqueeze(-2) * off_diagonal
        else:
            pivot = torch.where(active, pivot, torch.zeros_like(pivot))
            log_z = log_z + pivot
            row = row.masked_fill(~keep, NEG_INF)
            update = column.unsqueeze(-1) + row.unsqueeze(-2) - pivot.unsqueeze(-1).unsqueeze(-1)
            update = update.masked_fill(~torch.isfinite(update) | ~off_diagonal, NEG_INF)
            values = _logaddexp(values, update)
    if single_root:
        last = remaining.to(torch.long).argmax(-1)  # the word never eliminated
        root_to_last = values[batch_index, 0, last]
        log_z = log_z + (torch.log(root_to_last) if linear else root_to_last)
    return log_z
