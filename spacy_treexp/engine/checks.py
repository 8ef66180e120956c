"""Input validation for arc scores, lengths and head vectors.

Every check raises :class:`ValueError` naming the batch index and the problem, so a bad
sentence is found at the boundary instead of turning into a silent NaN later.
"""

from __future__ import annotations

import functools
from typing import Optional, Tuple

import torch
from torch import Tensor

from spacy_treexp.engine.native import native_enabled


def prepare_scores(scores: Tensor, lengths: Optional[Tensor]) -> Tuple[Tensor, Tensor, Optional[Tensor], bool, Tensor]:
    """Validate and normalise ``scores`` and ``lengths``.

    Returns ``(arc_scores, lengths, label_scores, unbatched, allowed)`` where ``arc_scores`` is
    ``(B, N+1, N+1)`` (labeled scores reduced by logsumexp over labels, Koo et al. 2007
    §3.4), ``lengths`` is a long tensor ``(B,)`` on the scores' device, ``label_scores`` the
    original ``(B, N+1, N+1, L)`` tensor or ``None``, ``unbatched`` whether a single
    sentence was given, and the allowed arcs: the sentences' :func:`arc_mask` without the
    arcs scored -inf.
    """
    if not isinstance(scores, Tensor):
        raise TypeError(f"scores must be a torch.Tensor, got {type(scores).__name__}")
    if not scores.is_floating_point():
        raise ValueError(f"scores must be a floating-point tensor, got dtype {scores.dtype}")
    if scores.is_meta:
        raise ValueError("scores are on the meta device, which holds no values: give them on the CPU or a GPU")
    if scores.dim() < 2 or scores.dim() > 4:
        raise ValueError(
            f"scores must have shape (N+1, N+1), (B, N+1, N+1) or labeled (B, N+1, N+1, L); got {tuple(scores.shape)}"
        )
    unbatched = scores.dim() == 2
    if unbatched:
        scores = scores.unsqueeze(0)
    label_scores = None
    if scores.dim() == 4:
        if scores.shape[-1] == 0:
            raise ValueError("labeled scores have an empty label axis (L = 0)")
        label_scores = scores
        arc_scores = torch.logsumexp(scores, dim=-1)
    else:
        arc_scores = scores
    batch, rows, cols = arc_scores.shape
    if rows != cols:
        if label_scores is not None:  # most likely two batch axes, which 4-D scores are not
            raise ValueError(
                f"4-D scores are labeled (B, N+1, N+1, L), and {tuple(scores.shape)} is not square over "
                "(head, dependent): for more than one batch axis, flatten them (scores.reshape(-1, N+1, N+1))"
            )
        raise ValueError(f"scores must be square over (head, dependent); got {rows} x {cols}")
    if rows < 2:
        raise ValueError("scores must cover ROOT and at least one word: N+1 >= 2")
    n_max = rows - 1
    if lengths is None:
        lengths = torch.full((batch,), n_max, dtype=torch.long, device=scores.device)
    else:
        if not isinstance(lengths, Tensor):
            lengths = torch.as_tensor(lengths)
            if lengths.numel() == 0:  # [] for an empty batch: torch reads it as float32
                lengths = lengths.long()
        if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
            raise ValueError(f"lengths must be an integer tensor, got dtype {lengths.dtype}")
        if unbatched and lengths.dim() == 0:
            lengths = lengths.reshape(1)
        if lengths.dim() != 1 or lengths.shape[0] != batch:
            raise ValueError(
                f"lengths must have shape ({batch},) to match scores {tuple(scores.shape)}; got {tuple(lengths.shape)}"
            )
        if lengths.dtype != torch.long or lengths.device != scores.device:
            lengths = lengths.to(device=scores.device, dtype=torch.long)
    allowed = _scanned_arcs(arc_scores, lengths) if label_scores is None else None
    if allowed is None:  # the torch checks: they raise where something is off
        _check_lengths(lengths, n_max)
        mask = arc_mask(lengths, n_max)
        allowed = _allowed_arcs(arc_scores, mask, lengths)
        if label_scores is not None:
            _check_finite(label_scores, mask.unsqueeze(-1).expand_as(label_scores), "label scores")
    return arc_scores, lengths, label_scores, unbatched, allowed


def _check_lengths(lengths: Tensor, n_max: int) -> None:
    """Reject the first length outside 1..N."""
    bad = ((lengths < 1) | (lengths > n_max)).nonzero()
    if bad.numel():
        b = int(bad[0, 0])
        raise ValueError(
            f"lengths[{b}] = {int(lengths[b])} is out of range: each sentence needs 1 <= n <= N = {n_max} words"
        )


def _scanned_arcs(scores: Tensor, lengths: Tensor) -> Optional[Tensor]:
    """The allowed arcs by one pass of the fused CPU kernel (:func:`.fused.scan_scores`) where
    it runs and finds every length and score in order (the common case, in a few
    microseconds instead of some fifteen torch calls); ``None`` otherwise, and the torch checks
    (the reference, and the path on other devices) run and name the problem."""
    if scores.dtype not in (torch.float32, torch.float64) or not native_enabled(scores):
        return None
    from spacy_treexp.engine import fused

    return fused.scan_scores(scores, lengths)


def _allowed_arcs(scores: Tensor, mask: Tensor, lengths: Tensor) -> Tensor:
    """The arcs of ``mask`` whose score is not -inf, after checking that none is NaN or +inf
    and that no sentence's scores are too large (:func:`score_limit`).

    One pass for the smallest and largest score settles the common case (both finite and
    within the limit: every arc is allowed); only otherwise are the values looked at one by
    one.
    """
    with torch.no_grad():
        if not scores.numel():
            return mask
        zero = torch.zeros((), dtype=scores.dtype, device=scores.device)
        low, high = torch.aminmax(torch.where(mask, scores, zero))
        allowed = mask
        if not bool(torch.isfinite(low) & torch.isfinite(high)):
            _check_finite(scores, mask, "scores")
            allowed = mask & (scores > float("-inf"))
            low, high = torch.aminmax(torch.where(allowed, scores, zero))
        if max(-float(low), float(high)) > score_limit(scores.dtype, int(lengths.max())):
            _check_magnitude(scores, allowed, lengths)
        return allowed


def score_limit(dtype: torch.dtype, n: int) -> float:
    """The largest |score| a sentence of n words may hold in ``dtype``.

    A tree's score, log Z and the column shifts sum up to n scores, and the decoder's
    contracted arc scores (differences of scores along cycles) reach a few times n of them in
    float64; below this
    limit none of these overflows (e.g. about 5.5e305 for 80 words in float64, 404 in float16).
    """
    return min(torch.finfo(dtype).max / (2 * (n + 1)), torch.finfo(torch.float64).max / (4 * (n + 1)))


def _check_magnitude(scores: Tensor, allowed: Tensor, lengths: Tensor) -> None:
    """Reject the first sentence whose scores are above :func:`score_limit`, rather than let
    an overflow turn into a wrong number."""
    zero = torch.zeros((), dtype=scores.dtype, device=scores.device)
    largest = torch.where(allowed, scores.abs(), zero).amax(dim=(-2, -1))
    for b in range(lengths.shape[0]):
        n = int(lengths[b])
        limit = score_limit(scores.dtype, n)
        if float(largest[b]) > limit:
            raise ValueError(
                f"scores of sentence {b} reach magnitude {float(largest[b]):.3g}, above {limit:.3g}, "
                f"the largest for {n} words in {scores.dtype} (sums of them would overflow); "
                "rescale the scores"
            )


def _check_finite(values: Tensor, mask: Tensor, what: str) -> None:
    """Reject NaN and +inf inside the sentences (padding may hold anything)."""
    with torch.no_grad():
        bad = (values < float("inf")).logical_not_().logical_and_(mask)  # NaN or +inf
        if bad.any():
            idx = bad.nonzero()[0].tolist()
            value = values[tuple(idx)].item()
            b, h, m = idx[:3]
            raise ValueError(
                f"{what} of sentence {b} hold {value} for arc {h} -> {m}; "
                "scores must be finite or -inf (a forbidden arc)"
            )


def arc_mask(lengths: Tensor, n_max: int) -> Tensor:
    """Boolean ``(B, N+1, N+1)`` mask of the arcs h -> m inside each sentence.

    True where ``0 <= h <= n``, ``1 <= m <= n`` and ``h != m``; ROOT's column, the
    diagonal and padding are False. One comparison: arc (h, m) is inside a sentence of n
    words iff max(h, m) <= n, with the ROOT column and the diagonal set beyond any n.
    """
    return _arc_limits(n_max, lengths.device) <= lengths.view(-1, 1, 1)


@functools.lru_cache(maxsize=64)
def _arc_limits(n_max: int, device: torch.device) -> Tensor:
    """``(N+1, N+1)`` the shortest sentence containing arc (h, m): max(h, m), or N+1 (never)
    for ROOT's column and the diagonal. Cached: it depends on N and the device only."""
    positions = torch.arange(n_max + 1, device=device)
    limit = torch.maximum(positions.unsqueeze(1), positions.unsqueeze(0))
    limit[:, 0] = n_max + 1
    limit.fill_diagonal_(n_max + 1)
    return limit


def word_mask(lengths: Tensor, n_max: int) -> Tensor:
    """Boolean ``(B, N+1)``: which positions are words of their sentence (1..n; not ROOT)."""
    positions = torch.arange(n_max + 1, device=lengths.device)
    return (positions > 0) & (positions <= lengths.unsqueeze(-1))


def integer_tensor(values, name: str, device: torch.device) -> Tensor:
    """``values`` (a tensor, array or nested list of head or label indices) as an int32 or
    int64 tensor on ``device``; other integer dtypes (int8, int16, uint8, ...) become int64,
    which torch's indexing needs, and floating-point, complex or bool values raise
    ``ValueError`` naming ``name``."""
    values = torch.as_tensor(values, device=device)
    if values.is_floating_point() or values.is_complex() or values.dtype == torch.bool:
        raise ValueError(f"{name} must be an integer tensor, got dtype {values.dtype}")
    return values if values.dtype in (torch.int64, torch.int32) else values.to(torch.int64)


def check_heads(heads: Tensor, lengths: Tensor, n_max: int, single_root: bool = False) -> Tensor:
    """Validate head vectors ``(..., B, N+1)`` against the sentence lengths.

    Returns a boolean tensor ``(..., B)``: whether each head vector is a tree (see
    :func:`is_tree`). Malformed shapes raise ``ValueError``.
    """
    if not isinstance(heads, Tensor):
        heads = torch.as_tensor(heads)
    if heads.is_floating_point():
        raise ValueError(f"heads must be an integer tensor, got dtype {heads.dtype}")
    batch = lengths.shape[0]
    if heads.dim() < 2 or heads.shape[-2:] != (batch, n_max + 1):
        raise ValueError(f"heads must have shape (..., {batch}, {n_max + 1}) (B, N+1); got {tuple(heads.shape)}")
    return is_tree(heads, lengths, single_root)


def is_tree(heads: Tensor, lengths: Tensor, single_root: bool = False) -> Tensor:
    """Whether each head vector ``(..., B, N+1)`` is a dependency tree over its words.

    Every word 1..n needs a head in 0..n other than itself, and following heads from any
    word must reach ROOT (no cycle): checked by n rounds of pointer jumping, O(n log n).
    ``single_root`` also requires exactly one child of ROOT. On the CPU with numba, one
    kernel pass (:func:`.fused.trees`) gives the same answer.
    """
    if native_enabled(heads) and heads.dtype in (torch.int64, torch.int32) and heads.numel() > 0:
        from spacy_treexp.engine import fused

        return fused.trees(heads, lengths, single_root)
    n_max = heads.shape[-1] - 1
    positions = torch.arange(n_max + 1, device=heads.device)
    words = word_mask(lengths, n_max)  # (B, N+1)
    in_range = (heads >= 0) & (heads <= lengths.unsqueeze(-1)) & (heads != positions)
    ok = torch.where(words, in_range, torch.ones_like(in_range)).all(-1)
    # Pointer jumping: ancestor^(2^k); a tree sends every word to ROOT within n steps.
    anc = torch.where(words & in_range, heads, torch.zeros_like(heads))
    steps = max(1, int(n_max).bit_length())
    for _ in range(steps):
        anc = torch.gather(anc, -1, anc)
    reaches_root = torch.where(words, anc == 0, torch.ones_like(words)).all(-1)
    tree = ok & reaches_root
    if single_root:
        tree = tree & ((heads == 0) & words).sum(-1).eq(1)
    return tree
