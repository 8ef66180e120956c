"""Brute-force enumeration of all dependency trees of small sentences (test reference)."""

from __future__ import annotations

import itertools
from functools import cache
from typing import Tuple

import torch
from torch import Tensor


@cache
def _all_trees(n: int, single_root: bool) -> Tuple[Tuple[int, ...], ...]:
    trees = []
    for heads in itertools.product(range(n + 1), repeat=n):
        full = (-1,) + heads
        if any(full[m] == m for m in range(1, n + 1)):
            continue
        if single_root and sum(h == 0 for h in heads) != 1:
            continue
        if all(_reaches_root(full, m) for m in range(1, n + 1)):
            trees.append(full)
    return tuple(trees)


def _reaches_root(heads, node) -> bool:
    seen = set()
    while node != 0:
        if node in seen:
            return False
        seen.add(node)
        node = heads[node]
    return True


def all_trees(n: int, single_root: bool) -> Tensor:
    """Every tree over n words as head vectors ``(T, n+1)`` with -1 at ROOT."""
    return torch.tensor(_all_trees(n, single_root), dtype=torch.long)


def tree_log_probs(scores: Tensor, n: int, single_root: bool):
    """``(trees (T, n+1), log-probabilities (T,) float64)`` of all trees under ``scores[:n+1, :n+1]``."""
    trees = all_trees(n, single_root)
    s = scores[: n + 1, : n + 1].to(torch.float64)
    deps = torch.arange(1, n + 1)
    tree_scores = s[trees[:, 1:], deps].sum(-1)
    return trees, tree_scores - torch.logsumexp(tree_scores, 0)
