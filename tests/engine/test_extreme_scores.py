"""Scores of huge magnitude and float32 precision: a right number or a clear error, never a wrong one."""

from __future__ import annotations

import math

import pytest
import torch
from helpers.enumerate_trees import tree_log_probs
from torch.distributions import kl_divergence

from spacy_treexp import TreeDistribution


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Many small kernels: on a shared 2-core machine a second thread only spins (see README)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _scores(batch, n, scale, seed, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, n + 1, n + 1, generator=gen, dtype=torch.float64) * scale).to(dtype)


def _tree_scores(scores, heads):
    n = scores.shape[-1] - 1
    return scores[torch.arange(scores.shape[0]).unsqueeze(-1), heads[:, 1:], torch.arange(1, n + 1)].sum(-1)


HUGE = [(scale, n) for scale in (1e10, 1e100, 1e200, 1e300) for n in (2, 5)] + [(1e200, 30)]


@pytest.mark.parametrize("scale,n", HUGE)
@pytest.mark.parametrize("single_root", [True, False])
def test_huge_scores_give_the_point_mass_of_the_best_tree(scale, single_root, n):
    # Used to give entropies of -1e185 and the like: log Z and Σ μ s cancelled.
    scores = _scores(4, n, scale, seed=n)
    dist = TreeDistribution(scores, single_root=single_root)
    best = dist.mode
    assert torch.equal(dist.entropy(), torch.zeros(4, dtype=torch.float64))
    one_hot = torch.zeros_like(scores)
    one_hot[torch.arange(4).unsqueeze(-1), best[:, 1:], torch.arange(1, n + 1)] = 1.0
    assert torch.equal(dist.marginals, one_hot)
    assert torch.equal(dist.log_prob(best), torch.zeros(4, dtype=torch.float64))
    tree_scores = _tree_scores(scores, best)
    assert torch.allclose(dist.log_partition, tree_scores, rtol=1e-15, atol=0)
    assert torch.equal(dist.mbr(), best)
    for alpha in (0.5, 2.0, float("inf")):
        assert torch.equal(dist.renyi_entropy(alpha), torch.zeros(4, dtype=torch.float64))
    assert torch.equal(kl_divergence(dist, dist), torch.zeros(4, dtype=torch.float64))
    other = TreeDistribution(_scores(4, n, scale, seed=n + 100), single_root=single_root)
    # H(p, q) = −log q(p's tree) = s_q(q's tree) − s_q(p's tree) ≥ 0, huge unless the trees agree
    expected = _tree_scores(other.scores, other.mode) - _tree_scores(other.scores, best)
    assert torch.allclose(dist.cross_entropy(other), expected, rtol=1e-12, atol=0)
    assert (kl_divergence(dist, other) >= 0).all()


def test_a_tie_float64_cannot_resolve_is_an_error_not_a_number():
    # Words 1 and 2 want each other (1e200), ROOT may take either: two trees of equal score
    # (entropy log 2), but their score differences are far below float64's resolution.
    scores = torch.zeros(3, 3, dtype=torch.float64)
    scores[1, 2] = scores[2, 1] = 1e200
    scores[0, 1] = scores[0, 2] = -1e200
    dist = TreeDistribution(scores)
    assert math.isfinite(dist.log_partition.item())
    assert int((dist.mode == 0).sum()) == 1
    for what in (dist.entropy, lambda: dist.marginals, lambda: dist.log_prob(dist.mode), dist.mbr):
        with pytest.raises(ValueError, match=r"sentence 0: .* too large for float64 to resolve .* rescale"):
            what()
    # the same tie at a scale float64 resolves
    small = TreeDistribution(scores / 1e196)
    assert abs(small.entropy().item() - math.log(2)) < 1e-9


def test_huge_scores_of_equal_value_are_uniform():
    # No cancellation with the column shifts: every tree has the same probability.
    n = 4
    dist = TreeDistribution(torch.full((n + 1, n + 1), 1e200, dtype=torch.float64))
    assert abs(dist.entropy().item() - (n - 1) * math.log(n)) < 1e-12
    trees, log_p = tree_log_probs(torch.zeros(n + 1, n + 1), n, True)
    assert torch.allclose(dist.log_prob(trees), log_p, atol=1e-12, rtol=0)


def test_huge_scores_stay_differentiable():
    scores = _scores(3, 5, 1e200, seed=1)
    scores[2] = _scores(1, 5, 5.0, seed=2)[0]
    scores[2, 1, 2] = float("-inf")
    scores = scores.requires_grad_(True)
    dist = TreeDistribution(scores)
    (dist.entropy().sum() + dist.log_partition.sum() + dist.marginals[:, 0].sum()).backward()
    assert torch.isfinite(scores.grad).all()


def test_gradients_of_a_batch_mixing_fast_and_stable_sentences_are_finite():
    # Sentence 0's Laplacian underflows to singular in float64 (stable path), sentence 1 is
    # taken by the fast path: no NaN from the first one's discarded inverse reaches the gradient.
    scores = _scores(2, 7, 1e3, seed=0)
    scores[1] = _scores(1, 7, 1.0, seed=1)[0]
    scores = scores.requires_grad_(True)
    dist = TreeDistribution(scores)
    assert dist.used_stable_path.tolist() == [True, False]
    (dist.entropy().sum() + dist.marginals[:, 0, 1].sum()).backward()
    assert torch.isfinite(scores.grad).all()


@pytest.mark.parametrize("scale", [1e-3, 1.0, 10.0, 100.0, 1e3, 1e4, 1e6])
@pytest.mark.parametrize("single_root", [True, False])
def test_float32_matches_float64_on_the_same_scores(scale, single_root):
    # Used to be 0.069 nats off at scale 1e3 and 16 nats at 1e6 (log Z − Σ μ s in float32).
    scores = _scores(8, 30, scale, seed=int(math.log10(scale)) + 7 * single_root, dtype=torch.float32)
    dist = TreeDistribution(scores, single_root=single_root)
    reference = TreeDistribution(scores.double(), single_root=single_root)
    entropy = reference.entropy()
    assert ((dist.entropy().double() - entropy).abs() <= 1e-3 * entropy.clamp(min=1)).all()
    assert (dist.marginals.double() - reference.marginals).abs().max() <= 1e-4
    log_z = reference.log_partition
    assert ((dist.log_partition.double() - log_z).abs() <= torch.clamp(1e-6 * log_z.abs(), min=1e-3)).all()


def test_float32_ties_at_a_large_scale():
    # Exact ties (three trees) behind scores of 1e6: rounding μ to float32 before Σ μ s'
    # would cost 0.01 nats; the sentences the stable path takes keep float64 marginals.
    scores = torch.full((4, 4), -1e6)
    scores[1, 2] = scores[2, 3] = scores[3, 1] = 1e6  # a 3-cycle
    scores[0, 1] = scores[0, 2] = scores[0, 3] = 0.0
    dist = TreeDistribution(scores)
    assert abs(dist.entropy().item() - math.log(3)) < 1e-6
    assert torch.allclose(dist.marginals[0, 1:], torch.full((3,), 1 / 3), atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_marginals_stay_in_the_unit_interval_on_peaked_scores(dtype):
    """Rounding on the stable path gave 1 + 2e-16 and -1e-74 here, and log(marginals) NaN."""
    scores = torch.randn(2, 31, 31, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).mul(100)
    marginals = TreeDistribution(scores.to(dtype), torch.tensor([30, 17])).marginals
    assert float(marginals.min()) >= 0.0 and float(marginals.max()) <= 1.0
    assert not torch.log(marginals).isnan().any()
