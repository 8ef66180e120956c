"""Maximum spanning arborescences: the MAP tree and the minimum-Bayes-risk tree.

Chu–Liu–Edmonds (Chu & Liu 1965; Edmonds 1967) on each sentence, in float64. The single-root
constraint is imposed exactly by subtracting from every ROOT arc a constant larger than the
spread of all tree scores: a tree with k ROOT children loses k times that constant, so every
single-root tree beats every multi-root one while single-root trees keep their order. This
holds for scores of any sign (a reweighting that only works for negative scores does not).
"""

from __future__ import annotations

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
    weights = weights.detach()
    greedy, done = _greedy_trees(weights, lengths, single_root)
    if bool(done.all()):
        return greedy
    values = weights.to("cpu", torch.float64).numpy()
    heads = greedy.cpu().numpy().copy()
    for b in (~done).nonzero().squeeze(-1).tolist():
        n = int(lengths[b])
        try:
            heads[b, : n + 1] = _best_tree(values[b, : n + 1, : n + 1], single_root)
        except NoTreeError as error:
            raise NoTreeError(f"sentence {b}: {error}") from None
    return torch.from_numpy(heads).to(weights.device)


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
    """Maximum arborescence rooted at node 0 of the dense graph ``scores[h, m]``."""
    size = scores.shape[0]
    heads = scores.argmax(axis=0)
    best = scores[heads, np.arange(size)]
    if size > 1 and not np.isfinite(best[1:]).all():
        missing = int(np.flatnonzero(~np.isfinite(best[1:]))[0]) + 1
        raise NoTreeError(f"node {missing} has no allowed head")
    heads[0] = -1
    cycle = _find_cycle(heads)
    if cycle is None:
        return heads
    in_cycle = np.zeros(size, dtype=bool)
    in_cycle[cycle] = True
    outside = np.flatnonzero(~in_cycle)  # includes ROOT at position 0
    cycle_nodes = np.flatnonzero(in_cycle)
    contracted = len(outside)  # index of the new node
    reduced = np.full((contracted + 1, contracted + 1), NEG_INF)
    reduced[:contracted, :contracted] = scores[np.ix_(outside, outside)]
    # Arcs into the cycle: gain of replacing the cycle arc into v by u -> v.
    enter_gain = scores[np.ix_(outside, cycle_nodes)] - best[cycle_nodes]
    enter_at = enter_gain.argmax(axis=1)
    reduced[:contracted, contracted] = enter_gain[np.arange(contracted), enter_at]
    # Arcs out of the cycle: the best cycle node heading each outside node.
    leave = scores[np.ix_(cycle_nodes, outside)]
    leave_from = leave.argmax(axis=0)
    reduced[contracted, :contracted] = leave[leave_from, np.arange(contracted)]
    reduced[:, 0] = NEG_INF
    sub_heads = _chu_liu_edmonds(reduced)
    result = heads.copy()
    for position, node in enumerate(outside[1:], start=1):
        head = sub_heads[position]
        result[node] = cycle_nodes[leave_from[position]] if head == contracted else outside[head]
    entering_from = sub_heads[contracted]
    entry = cycle_nodes[enter_at[entering_from]]
    result[entry] = outside[entering_from]
    return result


def _find_cycle(heads: np.ndarray):
    """Nodes of one cycle of the head function (ROOT has head -1), or None."""
    size = len(heads)
    state = np.zeros(size, dtype=np.int8)  # 0 new, 1 on current path, 2 done
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
            return path[path.index(node) :]
        for visited in path:
            state[visited] = 2
    return None
