"""The engine's public surface for samplers and its argument checks."""

import pytest
import torch

from spacy_treexp import TreeDistribution
from spacy_treexp.engine import sampling


def scores(n=5, seed=0):
    return torch.randn(n + 1, n + 1, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_default_sampler_is_colbourn_everywhere():
    dist = TreeDistribution(scores())
    default = dist.sample((6,), generator=torch.Generator().manual_seed(3))
    colbourn = dist.sample((6,), method="colbourn", generator=torch.Generator().manual_seed(3))
    assert torch.equal(default, colbourn)
    heads, _ = dist.sample_without_replacement(4, generator=torch.Generator().manual_seed(3))
    sbs, _ = dist.sample_without_replacement(4, method="sbs", generator=torch.Generator().manual_seed(3))
    assert torch.equal(heads, sbs)
    assert (
        sampling.DEFAULT_METHOD in sampling.SINGLE_ROOT_METHODS
        and sampling.DEFAULT_METHOD in sampling.MULTI_ROOT_METHODS
    )


def test_public_sampler_surface():
    dist = TreeDistribution(scores())
    batched = dist.batched()
    assert batched.scores.shape == (1, 6, 6) and batched.arc_mask.shape == (1, 6, 6)
    assert not batched.arc_mask[0, :, 0].any() and not batched.arc_mask[0].diagonal().any()
    assert not dist.marginals_computed
    dist.marginals
    assert dist.marginals_computed and batched.marginals_computed  # shared cache


def test_single_root_must_be_a_bool():
    with pytest.raises(TypeError, match="single_root must be True or False"):
        TreeDistribution(scores(), single_root="no")


def test_validate_args_rejects_non_trees_in_log_prob():
    cycle = torch.tensor([-1, 2, 1, 0, 3, 4])
    assert TreeDistribution(scores()).log_prob(cycle) == float("-inf")
    with pytest.raises(ValueError, match="not a single-root tree"):
        TreeDistribution(scores(), validate_args=True).log_prob(cycle)
    tree = torch.tensor([-1, 0, 1, 2, 3, 4])
    assert torch.isfinite(TreeDistribution(scores(), validate_args=True).log_prob(tree))
