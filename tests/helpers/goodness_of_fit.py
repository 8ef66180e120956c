"""Pearson's chi-square test of sampled trees against their exact distribution."""

from __future__ import annotations

import torch


def chi_square_p(observed: torch.Tensor, categories: torch.Tensor, probs: torch.Tensor) -> float:
    """p-value of the draws ``observed`` (codes of trees) against ``probs`` over the codes
    ``categories``; cells expecting fewer than 5 draws are pooled. A draw outside the
    categories (not a tree) or of probability 0 fails the test outright."""
    assert torch.isin(observed, categories).all(), "a draw is not a tree of the sentence"
    order = categories.argsort()
    index = order[torch.searchsorted(categories[order], observed)]
    counts = torch.bincount(index, minlength=categories.numel()).double()
    assert counts[probs == 0].sum() == 0, "a draw has probability 0"
    expected = probs.double() * observed.numel()
    small = expected < 5
    counts = torch.cat([counts[~small], counts[small].sum().reshape(1)])
    expected = torch.cat([expected[~small], expected[small].sum().reshape(1)])
    keep = expected > 0
    counts, expected = counts[keep], expected[keep]
    statistic = ((counts - expected) ** 2 / expected).sum()
    dof = torch.tensor(float(counts.numel() - 1), dtype=torch.float64)
    return float(torch.special.gammaincc(dof / 2, statistic / 2))
