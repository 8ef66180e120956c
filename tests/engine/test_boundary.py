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


def test_expected_attachment_counts_a_head_outside_the_sentence_as_wrong():
    """-1 (an unknown head) or 99 can never be a word's head: they add 0, not μ(ROOT, m) or
    μ(N, m), which the clamp of an index outside 0..N read."""
    dist = TreeDistribution(scores(n=4))
    mu = dist.marginals
    tree = torch.tensor([-1, 0, 1, 2, 3])
    for unknown in (-1, -7, 99, 2**40):
        heads = tree.clone()
        heads[1] = unknown
        expected = sum(float(mu[tree[m], m]) for m in range(2, 5))
        assert float(dist.expected_attachment(heads)) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int16, torch.uint8, torch.int32])
def test_heads_and_labels_of_any_integer_dtype(dtype):
    labeled = torch.randn(1, 5, 5, 3, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    dist = TreeDistribution(labeled)
    tree = torch.tensor([[0, 0, 1, 2, 3]])  # ROOT's entry is ignored (uint8 has no -1)
    labels = torch.tensor([[0, 2, 1, 0, 1]])
    value = dist.log_prob(tree.to(dtype), labels.to(dtype))
    assert value == dist.log_prob(tree, labels) and torch.isfinite(value)
    assert dist.log_prob(tree.to(dtype)) == dist.log_prob(tree)
    assert dist.expected_attachment(tree.to(dtype)) == dist.expected_attachment(tree)


def test_heads_that_are_not_integers_are_named():
    dist = TreeDistribution(scores(n=4))
    for bad in (torch.tensor([-1.0, 0, 1, 2, 3]), torch.tensor([True, False, True, True, True])):
        with pytest.raises(ValueError, match="heads must be an integer tensor"):
            dist.log_prob(bad)
        with pytest.raises(ValueError, match="heads must be an integer tensor"):
            dist.expected_attachment(bad)


def test_an_empty_batch_scores_empty_head_vectors():
    """B = 0: log_prob, expected_attachment and the min-entropy are empty, as the other
    results are (the fused kernel's reshape could not size an empty batch)."""
    dist = TreeDistribution(torch.zeros(0, 5, 5, dtype=torch.float64))
    assert dist.log_prob(torch.zeros(3, 0, 5, dtype=torch.long)).shape == (3, 0)
    assert dist.expected_attachment(torch.zeros(0, 5, dtype=torch.long)).shape == (0,)
    assert dist.renyi_entropy(float("inf")).shape == (0,)


def test_an_empty_list_of_lengths_fits_an_empty_batch():
    dist = TreeDistribution(torch.zeros(0, 5, 5), [])
    assert dist.log_partition.shape == (0,) and dist.lengths.dtype == torch.long


def test_scores_on_the_meta_device_are_named():
    """They hold no values: torch's NotImplementedError about nonzero() on meta tensors came out."""
    with pytest.raises(ValueError, match="meta device"):
        TreeDistribution(torch.zeros(2, 5, 5, device="meta"))


def test_cross_entropy_of_other_lengths_names_the_sentence():
    """Same shapes, other lengths: the message showed the two equal shapes only."""
    batch = torch.randn(2, 5, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    p = TreeDistribution(batch, torch.tensor([4, 2]))
    q = TreeDistribution(batch, torch.tensor([4, 3]))
    with pytest.raises(ValueError, match="sentence 1 has 2 / 3 words"):
        p.cross_entropy(q)


@pytest.mark.parametrize("labeled", [False, True])
def test_changing_the_inputs_in_place_afterwards_changes_no_result(labeled):
    # results are lazy and cached: every one must describe the scores given at construction
    generator = torch.Generator().manual_seed(4)
    given = torch.randn((2, 5, 5, 3) if labeled else (2, 5, 5), generator=generator, dtype=torch.float64)
    lengths = torch.tensor([4, 3])
    reference = TreeDistribution(given.clone(), lengths.clone())
    dist = TreeDistribution(given, lengths)
    dist.log_partition  # cached before the change, the rest computed after it
    given.mul_(3)
    lengths.fill_(1)
    heads = reference.sample((3,), generator=generator)
    assert torch.allclose(dist.log_prob(heads), reference.log_prob(heads))
    assert torch.allclose(dist.entropy(), reference.entropy())
    assert torch.allclose(dist.renyi_entropy(2.0), reference.renyi_entropy(2.0))
    assert torch.equal(dist.mode, reference.mode)
    if labeled:
        assert torch.allclose(dist.label_marginals, reference.label_marginals)


def test_two_batch_axes_are_told_to_flatten():
    with pytest.raises(ValueError, match=r"labeled \(B, N\+1, N\+1, L\).*reshape\(-1, N\+1, N\+1\)"):
        TreeDistribution(torch.zeros(2, 3, 5, 5))
