"""The project's previous MAP decoder, kept as a reference for tests and benchmarks/bench_decoding.py.

Chu–Liu–Edmonds contracting all greedy cycles per round (O(n²) per round, up to n rounds:
O(n³)), with the single-root constraint imposed by a penalty on every ROOT arc larger than
the spread of all tree scores (so only for scores whose spread times n is finite).
"""

from __future__ import annotations

import numpy as np

NEG_INF = float("-inf")


class ReferenceNoTree(ValueError):
    """The arc weights admit no (single-root) tree."""


def reference_best_tree(weights: np.ndarray, single_root: bool) -> np.ndarray:
    """Heads ``(n+1,)`` (-1 at ROOT) of the best tree of ``weights[h, m]`` (-inf: no arc)."""
    scores = np.array(weights, dtype=np.float64)
    np.fill_diagonal(scores, NEG_INF)
    scores[:, 0] = NEG_INF
    finite = np.isfinite(scores)
    if single_root and scores.shape[0] > 2:
        if not finite[0].any():
            raise ReferenceNoTree("no arc from ROOT is allowed")
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
        raise ReferenceNoTree("no tree with exactly one child of ROOT exists")
    return heads


def _chu_liu_edmonds(scores: np.ndarray) -> np.ndarray:
    rounds = []
    while True:
        size = scores.shape[0]
        heads = scores.argmax(axis=0)
        best = scores[heads, np.arange(size)]
        if size > 1 and not np.isfinite(best[1:]).all():
            raise ReferenceNoTree("a node has no allowed head")
        heads[0] = -1
        cycles = _cycles(heads)
        if not cycles:
            break
        in_cycle = np.zeros(size, dtype=bool)
        for cycle in cycles:
            in_cycle[cycle] = True
        outside = np.flatnonzero(~in_cycle)
        adjusted = scores - np.where(in_cycle, best, 0.0)[None, :]
        leave = np.stack([cycle[adjusted[cycle].argmax(axis=0)] for cycle in cycles])
        rows = np.concatenate([adjusted[outside], adjusted[leave, np.arange(size)]])
        enter = np.stack([cycle[rows[:, cycle].argmax(axis=1)] for cycle in cycles], axis=1)
        scores = np.concatenate([rows[:, outside], rows[np.arange(len(rows))[:, None], enter]], axis=1)
        np.fill_diagonal(scores, NEG_INF)
        scores[:, 0] = NEG_INF
        rounds.append((heads, outside, leave, enter))
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
    size = len(heads)
    state = np.zeros(size, dtype=np.int8)
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
