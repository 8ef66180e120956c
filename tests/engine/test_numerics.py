"""Numerical accuracy on peaked and extreme scores, property tests and bad input."""

from __future__ import annotations

import pytest
import torch
from helpers.mp_reference import reference
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.distributions import kl_divergence

from spacy_treexp import TreeDistribution


@pytest.mark.parametrize("sigma", [2.0, 10.0, 30.0])
@pytest.mark.parametrize("single_root", [True, False])
def test_peaked_scores_against_high_precision(sigma, single_root):
    n = 30
    gen = torch.Generator().manual_seed(int(sigma) + 7 * single_root)
    scores = torch.randn(n + 1, n + 1, generator=gen, dtype=torch.float64) * sigma
    log_z, mu = reference(scores, n, single_root)
    dist = TreeDistribution(scores, single_root=single_root)
    assert abs(dist.log_partition.item() - log_z) <= 1e-9
    assert (dist.marginals - mu).abs().max().item() <= 1e-9
    # float32: the reference is taken on the float32-rounded scores.
    scores32 = scores.float()
    log_z32, mu32 = reference(scores32, n, single_root)
    dist32 = TreeDistribution(scores32, single_root=single_root)
    assert dist32.marginals.dtype == torch.float32
    assert abs(dist32.log_partition.item() - log_z32) <= 1e-3
    assert (dist32.marginals.double() - mu32).abs().max().item() <= 1e-4


@pytest.mark.parametrize("offset", [500.0, -500.0])
def test_shifted_scores(offset):
    gen = torch.Generator().manual_seed(1)
    scores = torch.randn(2, 21, 21, generator=gen, dtype=torch.float64)
    base = TreeDistribution(scores)
    shifted = TreeDistribution(scores + offset)
    assert torch.allclose(shifted.log_partition, base.log_partition + 20 * offset, atol=1e-9, rtol=0)
    assert torch.allclose(shifted.marginals, base.marginals, atol=1e-12)
    shifted32 = TreeDistribution((scores + offset).float())
    assert torch.allclose(shifted32.marginals.double(), base.marginals, atol=1e-4)


def test_long_sentence():
    n = 500
    gen = torch.Generator().manual_seed(3)
    scores = torch.randn(n + 1, n + 1, generator=gen, dtype=torch.float64)
    dist = TreeDistribution(scores)
    assert torch.isfinite(dist.log_partition)
    assert torch.allclose(dist.marginals[:, 1:].sum(0), torch.ones(n, dtype=torch.float64), atol=1e-9)
    assert dist.marginals.min() >= -1e-12
    heads = dist.mode
    assert int((heads == 0).sum()) == 1


def test_huge_magnitude_scores_agree_with_the_best_tree():
    # |scores| ~ 1e4: the distribution is a point mass on the best tree, exp() underflows.
    n = 12
    gen = torch.Generator().manual_seed(4)
    scores = torch.randn(n + 1, n + 1, generator=gen, dtype=torch.float64) * 1e4
    dist = TreeDistribution(scores)
    best = dist.mode
    best_score = scores[best[1:], torch.arange(1, n + 1)].sum()
    assert torch.isfinite(dist.log_partition)
    assert abs(dist.log_partition.item() - best_score.item()) <= 1e-9 * abs(best_score.item())
    point_mass = torch.zeros(n + 1, n + 1, dtype=torch.float64)
    point_mass[best[1:], torch.arange(1, n + 1)] = 1.0
    assert torch.allclose(dist.marginals, point_mass, atol=1e-9)
    assert abs(dist.entropy().item()) < 1e-6


def test_mutually_attached_pair_with_tiny_exits():
    # Two words that only want each other, every other arc exp(-800) smaller: float64 weights
    # underflow to 0 and the Laplacian is singular, the log-space GTH path is exact.
    scores = torch.full((4, 4), -800.0, dtype=torch.float64)
    scores[1, 2] = scores[2, 1] = 0.0
    scores[0, 3] = 0.0
    scores[3, 1] = -800.0
    dist = TreeDistribution(scores)
    assert bool(dist.used_stable_path)
    assert torch.isfinite(dist.log_partition)
    assert torch.allclose(dist.marginals[:, 1:].sum(0), torch.ones(3, dtype=torch.float64), atol=1e-12)


score_matrices = st.integers(min_value=1, max_value=7).flatmap(
    lambda n: st.lists(
        st.floats(min_value=-30, max_value=30, allow_nan=False), min_size=(n + 1) ** 2, max_size=(n + 1) ** 2
    ).map(lambda xs, n=n: torch.tensor(xs, dtype=torch.float64).reshape(n + 1, n + 1))
)


@settings(max_examples=60, deadline=None)
@given(score_matrices, st.booleans())
def test_properties(scores, single_root):
    dist = TreeDistribution(scores, single_root=single_root)
    mu = dist.marginals
    assert mu.min() >= -1e-9 and mu.max() <= 1 + 1e-9
    assert torch.allclose(mu[:, 1:].sum(0), torch.ones(mu.shape[0] - 1, dtype=torch.float64), atol=1e-8)
    if single_root:
        assert abs(mu[0].sum().item() - 1.0) < 1e-8
    assert dist.entropy().item() >= -1e-8
    other = TreeDistribution(scores.flip(0), single_root=single_root)
    assert kl_divergence(dist, other).item() >= -1e-7
    assert abs(kl_divergence(dist, dist).item()) < 1e-8


# ------------------------------------------------------------------ bad input
def test_nan_and_positive_infinity_name_the_sentence():
    scores = torch.zeros(3, 4, 4)
    scores[1, 2, 3] = float("nan")
    with pytest.raises(ValueError, match=r"sentence 1 .*nan.* arc 2 -> 3"):
        TreeDistribution(scores)
    scores = torch.zeros(3, 4, 4)
    scores[2, 0, 1] = float("inf")
    with pytest.raises(ValueError, match=r"sentence 2 .*inf"):
        TreeDistribution(scores)


@pytest.mark.parametrize("lengths", [[3, 0], [3, 4], [-1, 2]])
def test_lengths_out_of_range(lengths):
    with pytest.raises(ValueError, match=r"lengths\[\d\] = -?\d+ is out of range"):
        TreeDistribution(torch.zeros(2, 4, 4), torch.tensor(lengths))


def test_shape_errors():
    with pytest.raises(ValueError, match="square"):
        TreeDistribution(torch.zeros(2, 4, 5))
    with pytest.raises(ValueError, match="shape"):
        TreeDistribution(torch.zeros(4))
    with pytest.raises(ValueError, match=r"lengths must have shape \(2,\)"):
        TreeDistribution(torch.zeros(2, 4, 4), torch.tensor([1, 2, 3]))
    with pytest.raises(ValueError, match="floating-point"):
        TreeDistribution(torch.zeros(2, 4, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="integer"):
        TreeDistribution(torch.zeros(2, 4, 4), torch.tensor([1.0, 2.0]))
    dist = TreeDistribution(torch.zeros(2, 4, 4))
    with pytest.raises(ValueError, match=r"heads must have shape"):
        dist.log_prob(torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="values must have shape"):
        dist.expectation(torch.zeros(2, 3, 3))


def test_sentence_without_any_tree():
    scores = torch.zeros(2, 4, 4, dtype=torch.float64)
    scores[1, 0, :] = float("-inf")  # no arc from ROOT
    dist = TreeDistribution(scores)
    assert torch.isfinite(dist.log_partition[0])
    assert dist.log_partition[1].item() == float("-inf")
    assert dist.log_prob(torch.tensor([[-1, 0, 1, 2], [-1, 0, 1, 2]]))[1].item() == float("-inf")
    with pytest.raises(ValueError, match="sentence 1 admits no dependency tree"):
        dist.marginals
    with pytest.raises(ValueError, match="sentence 1 admits no dependency tree"):
        dist.entropy()
    # Single-root but the only words with a ROOT arc cannot head the rest.
    scores = torch.full((4, 4), float("-inf"), dtype=torch.float64)
    scores[0, 1] = scores[0, 2] = 0.0
    scores[1, 3] = 0.0
    assert TreeDistribution(scores).log_partition.item() == float("-inf")
    assert torch.isfinite(TreeDistribution(scores, single_root=False).log_partition)
    with pytest.raises(ValueError, match="sentence 0: no tree with exactly one child of ROOT"):
        TreeDistribution(scores).mode
    assert int((TreeDistribution(scores, single_root=False).mode == 0).sum()) == 2


def test_forbidden_arcs_are_respected():
    scores = torch.randn(5, 5, dtype=torch.float64)
    scores[2, 3] = float("-inf")
    scores[0, 1] = float("-inf")
    dist = TreeDistribution(scores)
    assert dist.marginals[2, 3] == 0 and dist.marginals[0, 1] == 0
    assert dist.mode[3] != 2 and dist.mode[1] != 0
