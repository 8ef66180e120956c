"""Maximum spanning arborescences: the MAP tree and the minimum-Bayes-risk tree.

Chu–Liu–Edmonds (Chu & Liu 1965; Edmonds 1967) on each sentence, in float64. The single-root
constraint is imposed exactly by subtracting from every ROOT arc a constant larger than the
spread of all tree scores: a tree with k ROOT children loses k times that constant, so every
single-root tree beats every multi-root one while single-root trees keep their order. This
holds for scores of any sign (a reweighting that only works for negative scores does not).
"""

from __future__ import annotations

import math
from typing import Tuple

import numpy as np
import torch
from torch import Tensor

from spacy_treexp.engine.checks import is_tree, word_mask

NEG_INF = float("-inf")


class NoTreeError(ValueError):
    """The arc weights admit no spanning arborescence."""


def max_spanning_trees(weights: Tensor, lengths: Tensor, single_root: bool) -> Tensor:
    """Best tree per sentence for additive arc ``weights`` ``(B, N+1, N+1)`` [head, dep].

    ``-inf`` marks an arc that may not be used. Returns heads ``(B, N+1)`` (long, on the
    weights' device) with -1 at ROOT and padding. Raises :class:`NoTreeError` naming the
    sentence when no tree exists.
    """
    return _best_trees(weights, lengths, single_root, strict=True)[0]


def _best_trees(weights: Tensor, lengths: Tensor, single_root: bool, strict: bool) -> Tuple[Tensor, Tensor]:
    """``(heads (B, N+1), exists (B,))``: :func:`max_spanning_trees`, where a sentence with no
    tree raises (``strict``) or gets ``exists`` False and heads -1."""
    weights = weights.detach()
    greedy, done = _greedy_trees(weights, lengths, single_root)
    exists = torch.ones_like(done)
    if bool(done.all()):
        return greedy, exists
    values = weights.to("cpu", torch.float64).numpy()
    heads = greedy.cpu().numpy().copy()
    for b in (~done).nonzero().squeeze(-1).tolist():
        n = int(lengths[b])
        try:
            heads[b, : n + 1] = _best_tree(values[b, : n + 1, : n + 1], single_root)
        except NoTreeError as error:
            if strict:
                raise NoTreeError(f"sentence {b}: {error}") from None
            heads[b] = -1
            exists[b] = False
    return torch.from_numpy(heads).to(weights.device), exists


def dominant_trees(weights: Tensor, lengths: Tensor, single_root: bool) -> Tuple[Tensor, Tensor]:
    """The best tree of each sentence ``(B, N+1)`` and whether it certainly carries all the
    probability of p(d) ∝ exp(Σ weights) that float64 can represent ``(B,)``.

    It does when it beats every other tree by more than 760 + log(number of trees) nats
    after the rounding of the tree scores is taken off (:func:`_runner_up_margin`): then
    p(best) rounds to 1, every other tree's probability and the entropy to 0, even summed
    over all trees. Costs up to n + 1 Chu–Liu–Edmonds runs per sentence; meant for the
    sentences whose scores are too large for the partition function to resolve their trees.
    """
    best = max_spanning_trees(weights, lengths, single_root)
    certain = torch.zeros(lengths.shape, dtype=torch.bool, device=lengths.device)
    for b in range(lengths.shape[0]):
        n = int(lengths[b])
        needed = 760.0 + (n - 1) * math.log(n + 1)  # (n + 1)^(n - 1) trees at most
        certain[b] = _runner_up_margin(weights[b, : n + 1, : n + 1], best[b, : n + 1], single_root, needed) > needed
    return best, certain


def _runner_up_margin(weights: Tensor, best: Tensor, single_root: bool, needed: float) -> float:
    """A lower bound on s(best) − s(any other tree) for one sentence ``(n+1, n+1)``, less a
    bound on the rounding of the sums and of the decoder's comparisons; exact (up to that
    rounding) where it is at most ``needed``; +inf where no other tree exists.

    Any other tree gives some word m another head than best[m], so the runner-up is the best
    of the n trees with the arc best[m] -> m forbidden, one word m at a time. Each of them
    scores at most the best head of every other word plus the best other head of m; only the
    words where that bound does not already clear ``needed`` are decoded.
    """
    n = weights.shape[-1] - 1
    values = weights.detach().to("cpu", torch.float64)
    deps = torch.arange(1, n + 1)
    heads = best[1:].cpu()
    finite = values[torch.isfinite(values)]
    magnitude = float(finite.abs().max()) if finite.numel() else 0.0
    # n-term sums, and contractions that each subtract scores (and, single-root, the ROOT
    # penalty of up to 2n times the magnitude): a generous bound on what rounding moves
    rounding = 4.0 * (n + 1) ** 3 * float(torch.finfo(torch.float64).eps) * magnitude
    top = float(values[heads, deps].sum())
    others = values[:, 1:].clone()
    others[heads, deps - 1] = NEG_INF
    column_best = values[:, 1:].amax(0)
    bounds = column_best.sum() - column_best + others.amax(0)  # (n,): head of m other than best[m]
    runner_up = torch.where(torch.isnan(bounds), NEG_INF, bounds)  # nan: -inf - -inf, no other head
    open_words = (top - runner_up - rounding <= needed).nonzero().squeeze(-1)
    if open_words.numel():
        copies = values.expand(open_words.numel(), n + 1, n + 1).clone()
        copies[torch.arange(open_words.numel()), heads[open_words], open_words + 1] = NEG_INF
        trees, exists = _best_trees(copies, torch.full(open_words.shape, n), single_root, strict=False)
        picked = copies[torch.arange(open_words.numel()).unsqueeze(-1), trees[:, 1:].clamp(min=0), deps].sum(-1)
        runner_up[open_words] = torch.where(exists, picked, NEG_INF)
    return top - float(runner_up.max()) - rounding


def _greedy_trees(weights: Tensor, lengths: Tensor, single_root: bool):
    """Every word's best head, for the whole batch, and which sentences that solves.

    The best head of every word bounds every tree's score from above, so where those heads
    form an admissible tree (one ROOT child when required) it is the best tree; trained
    parsers usually give such scores, and only the other sentences need Chu–Liu–Edmonds.
    """
    n_max = weights.shape[-1] - 1
    positions = torch.arange(n_max + 1, device=weights.device)
    words = word_mask(lengths, n_max)
    allowed = weights.masked_fill(positions.unsqueeze(-1) == positions, NEG_INF)
    best, heads = allowed.max(dim=-2)
    heads = torch.where(words, heads, torch.full_like(heads, -1))
    done = (torch.isfinite(best) | ~words).all(-1) & is_tree(heads, lengths, single_root)
    return heads, done


def _best_tree(weights: np.ndarray, single_root: bool) -> np.ndarray:
    scores = weights.copy()
    np.fill_diagonal(scores, NEG_INF)
    scores[:, 0] = NEG_INF
    finite = np.isfinite(scores)
    if single_root and scores.shape[0] > 2:
        if not finite[0].any():
            raise NoTreeError("no arc from ROOT is allowed")
        spread = 0.0
        for column in range(1, scores.shape[0]):
            allowed = scores[finite[:, column], column]
            if allowed.size:
                spread += float(allowed.max() - allowed.min())
        penalty = spread + 1.0
        scores[0] = np.where(finite[0], scores[0] - penalty, NEG_INF)
    heads = _chu_liu_edmonds(scores)
    heads[0] = -1
    if single_root and int((heads[1:] == 0).sum()) != 1:
        # The penalty makes any single-root tree win; several ROOT children mean none exists.
        raise NoTreeError("no tree with exactly one child of ROOT exists")
    return heads


def _chu_liu_edmonds(scores: np.ndarray) -> np.ndarray:
    """Maximum arborescence rooted at node 0 of the dense graph ``scores[h, m]`` (-inf: no arc).

    Iterative: each round takes every node's best head and contracts all the cycles they form
    at once. A round keeps O(n) numbers for the way back and only the current matrix, so the
    memory is O(n²) however many rounds there are (contracting one cycle per recursion kept
    every level's matrix: O(n³), 2.5 GB at n = 1,000, and overflowed Python's stack near
    n = 2,000). Each round costs O(n²)."""
    rounds = []
    while True:
        size = scores.shape[0]
        heads = scores.argmax(axis=0)
        best = scores[heads, np.arange(size)]
        if size > 1 and not np.isfinite(best[1:]).all():
            missing = int(np.flatnonzero(~np.isfinite(best[1:]))[0]) + 1
            raise NoTreeError(f"node {missing} has no allowed head")
        heads[0] = -1
        cycles = _cycles(heads)
        if not cycles:
            break
        in_cycle = np.zeros(size, dtype=bool)
        for cycle in cycles:
            in_cycle[cycle] = True
        outside = np.flatnonzero(~in_cycle)  # ROOT first
        # entering cycle node v from u instead of by its cycle arc gains scores[u, v] - best[v]
        adjusted = scores - np.where(in_cycle, best, 0.0)[None, :]
        # rows of the contracted graph: the outside nodes, then each cycle's best row per column
        leave = np.stack([cycle[adjusted[cycle].argmax(axis=0)] for cycle in cycles])  # (cycles, size)
        rows = np.concatenate([adjusted[outside], adjusted[leave, np.arange(size)]])
        # columns: the outside nodes, then each cycle's best column per row
        enter = np.stack([cycle[rows[:, cycle].argmax(axis=1)] for cycle in cycles], axis=1)  # (count, cycles)
        scores = np.concatenate([rows[:, outside], rows[np.arange(len(rows))[:, None], enter]], axis=1)
        np.fill_diagonal(scores, NEG_INF)
        scores[:, 0] = NEG_INF
        rounds.append((heads, outside, leave, enter))
    # back through the rounds: the chosen arc a -> b of a round is the node arc u -> v of the
    # round before; the other nodes of a contracted cycle keep their cycle heads
    for heads_before, outside, leave, enter in reversed(rounds):
        kept = len(outside)
        result = heads_before.copy()
        for b in range(1, len(heads)):
            a = heads[b]
            v = outside[b] if b < kept else enter[a, b - kept]
            result[v] = outside[a] if a < kept else leave[a - kept, v]
        heads = result
    return heads


def _cycles(heads: np.ndarray) -> list:
    """Every cycle of the head function (ROOT has head -1), each as an array of its nodes."""
    size = len(heads)
    state = np.zeros(size, dtype=np.int8)  # 0 new, 1 on the current path, 2 done
    found = []
    for start in range(1, size):
        if state[start]:
            continue
        path = []
        node = start
        while node > 0 and state[node] == 0:
            state[node] = 1
            path.append(node)
            node = heads[node]
        if node > 0 and state[node] == 1:
            found.append(np.array(path[path.index(node) :]))
        for visited in path:
            state[visited] = 2
    return found
