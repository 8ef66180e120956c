"""Pearson's chi-square test of sampled trees against their exact distribution."""

from __future__ import annotations

import torch

from helpers.enumerate_trees import tree_log_probs

#: The significance level of the samplers' goodness-of-fit tests.
ALPHA = 1e-3


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


def codes(heads: torch.Tensor, n: int) -> torch.Tensor:
    """Integer code of each head vector (..., >= n+1) over words 1..n."""
    base = (n + 1) ** torch.arange(n)
    return (heads[..., 1 : n + 1] * base).sum(-1)


def assert_fits(heads: torch.Tensor, scores: torch.Tensor, lengths: torch.Tensor, single_root: bool) -> None:
    """Chi-square goodness of fit of draws (S, B, N+1) for every sentence of the batch against
    its trees' probabilities by enumeration; ROOT and padding hold -1."""
    for b, n in enumerate(lengths.tolist()):
        assert (heads[:, b, n + 1 :] == -1).all() and (heads[:, b, 0] == -1).all()
        trees, log_probs = tree_log_probs(scores[b], n, single_root)
        p_value = chi_square_p(codes(heads[:, b], n), codes(trees, n), log_probs.exp())
        assert p_value > ALPHA, f"sentence {b}: chi-square p = {p_value:.2e}"


def assert_first_two_draws_fit(heads: torch.Tensor, scores: torch.Tensor, n: int, single_root: bool) -> None:
    """Draws (>= 2, copies, n+1) of one sentence without replacement: the first is ~ p, the
    ordered pair (a, b) has probability p(a) p(b) / (1 - p(a)) (chi-square, every draw a tree)."""
    trees, log_probs = tree_log_probs(scores, n, single_root)
    probs, tree_codes = log_probs.exp(), codes(trees, n)
    first, second = codes(heads[0], n), codes(heads[1], n)
    assert (first != second).all()
    assert chi_square_p(first, tree_codes, probs) > ALPHA
    pair_probs = probs[:, None] * probs[None, :] / (1 - probs[:, None])
    pair_codes = tree_codes[:, None] * 10_000 + tree_codes[None, :]
    off = ~torch.eye(tree_codes.numel(), dtype=torch.bool)
    assert chi_square_p(first * 10_000 + second, pair_codes[off], pair_probs[off]) > ALPHA
