"""The log-space stable path with activation checkpointing (``laplacian._CHECKPOINT_BYTES``):
the same log Z and marginals as without it, and as brute-force enumeration."""

from __future__ import annotations

import pytest
import torch
from helpers.enumerate_trees import tree_log_probs

from spacy_treexp import TreeDistribution
from spacy_treexp.engine import laplacian


def _peaked_with_forbidden_arcs(batch: int, n: int, seed: int) -> torch.Tensor:
    """Scores x100 (the fast path's certificate fails) with forbidden arcs (the log-space
    elimination, not the plain one)."""
    generator = torch.Generator().manual_seed(seed)
    scores = 100 * torch.randn(batch, n + 1, n + 1, dtype=torch.float64, generator=generator)
    forbidden = torch.rand(batch, n + 1, n + 1, generator=generator) < 0.15
    forbidden[:, 0, 1:] = False  # every word may hang from ROOT: a tree always exists
    return scores.masked_fill(forbidden, -torch.inf)


@pytest.mark.parametrize("single_root", [True, False])
def test_checkpointed_elimination_matches_brute_force(monkeypatch, single_root):
    n = 5
    scores = _peaked_with_forbidden_arcs(3, n, seed=1) / 50  # every tree's mass readable; forbidden arcs: log space
    monkeypatch.setattr(laplacian, "_CHECKPOINT_BYTES", 0)
    dist = TreeDistribution(scores, single_root=single_root, stable=True)
    marginals, log_z = dist.marginals, dist.log_partition
    assert dist.used_stable_path.all()
    dependents = torch.arange(1, n + 1)
    for b in range(scores.shape[0]):
        trees, log_probs = tree_log_probs(scores[b], n, single_root)
        expected = torch.zeros_like(scores[b])
        expected.index_put_(
            (trees[:, 1:], dependents.expand(len(trees), n)),
            log_probs.exp().unsqueeze(-1).expand(-1, n),
            accumulate=True,
        )
        torch.testing.assert_close(marginals[b], expected, rtol=0, atol=1e-8)
        tree_scores = scores[b][trees[:, 1:], dependents].sum(-1)
        torch.testing.assert_close(log_z[b], torch.logsumexp(tree_scores, 0), rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("single_root", [True, False])
def test_checkpointed_elimination_equals_the_kept_graph(monkeypatch, single_root):
    scores = _peaked_with_forbidden_arcs(2, 40, seed=2)
    lengths = torch.tensor([40, 23])
    kept = TreeDistribution(scores, lengths=lengths, single_root=single_root)
    kept_marginals, kept_log_z = kept.marginals, kept.log_partition
    assert kept.used_stable_path.all()
    monkeypatch.setattr(laplacian, "_CHECKPOINT_BYTES", 0)
    recomputed = TreeDistribution(scores, lengths=lengths, single_root=single_root)
    torch.testing.assert_close(recomputed.marginals, kept_marginals, rtol=0, atol=1e-12)
    torch.testing.assert_close(recomputed.log_partition, kept_log_z, rtol=0, atol=1e-9)
