"""Samplers of dependency trees are unbiased (Stanojević 2022): goodness-of-fit against
enumeration, the Wilson-RC counterexample, sampling without replacement, reproducibility.

Every statistical test uses a fixed seed and rejects at p < 1e-3, so a biased sampler fails.
"""

from __future__ import annotations

import random

import numpy
import pytest
import torch
from helpers.enumerate_trees import all_trees, tree_log_probs
from helpers.goodness_of_fit import ALPHA, assert_first_two_draws_fit, assert_fits, chi_square_p, codes
from hypothesis import given, settings
from hypothesis import strategies as st

from spacy_treexp import TreeDistribution
from spacy_treexp.engine.sampling import (
    iter_without_replacement,
    sample,
    sample_without_replacement,
    wilson_reject_acceptance,
)
from spacy_treexp.engine.sampling.colbourn import colbourn_sample
from spacy_treexp.engine.sampling.wilson import wilson_multi_root, wilson_reject

DRAWS = 20_000


# ---------------------------------------------------------------- exact distributions
def exact_probs(scores: torch.Tensor, n: int, single_root: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Trees (T, n+1) of one sentence and their probabilities (T,) float64 by enumeration."""
    trees, log_probs = tree_log_probs(scores, n, single_root)
    return trees, log_probs.exp()


def random_batch(seed: int, dtype=torch.float64):
    """Two sentences, n = 4 and a padded n = 3, random N(0, 1.5^2) scores."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(2, 5, 5, generator=gen, dtype=dtype) * 1.5
    return scores, torch.tensor([4, 3])


# ---------------------------------------------------------------- goodness of fit
@pytest.mark.parametrize(
    "method,single_root,seed",
    [
        ("wilson_marginal", True, 1),
        ("wilson_reject", True, 2),
        ("colbourn", True, 3),
        ("wilson", False, 4),
        ("colbourn", False, 5),
    ],
)
def test_samples_fit_the_tree_distribution(method, single_root, seed):
    scores, lengths = random_batch(seed)
    dist = TreeDistribution(scores, lengths, single_root=single_root)
    heads = sample(dist, (DRAWS,), method=method, generator=torch.Generator().manual_seed(seed))
    assert heads.shape == (DRAWS, 2, 5) and heads.dtype == torch.long
    assert_fits(heads, scores, lengths, single_root)


def test_chunked_draws_fit(monkeypatch):
    """Large sample_shape is drawn in chunks (bounded memory); chunks stay unbiased."""
    import spacy_treexp.engine.sampling.colbourn as colbourn_module
    import spacy_treexp.engine.sampling.wilson as wilson_module

    monkeypatch.setattr(colbourn_module, "CHUNK_ENTRIES", 2 * 16 * 997)  # 997 samples a chunk
    monkeypatch.setattr(wilson_module, "CHUNK_ENTRIES", 2 * 25 * 1009)
    scores, lengths = random_batch(21)
    dist = TreeDistribution(scores, lengths)
    for method in ("colbourn", "wilson_marginal"):
        heads = sample(dist, (DRAWS,), method=method, generator=torch.Generator().manual_seed(21))
        assert_fits(heads, scores, lengths, True)


def test_float32_peaked_scores_fit():
    """Colbourn in float32 with peaked scores (std 4) still matches enumeration."""
    scores, lengths = random_batch(6, dtype=torch.float32)
    scores = scores * 8 / 3
    dist = TreeDistribution(scores, lengths)
    heads = sample(dist, (DRAWS,), method="colbourn", generator=torch.Generator().manual_seed(6))
    assert_fits(heads, scores, lengths, True)


# ---------------------------------------------------------------- Wilson-RC counterexample
# ROOT=0, A=1, B=2, C=3; arcs R->A, R->C, A->B, A->C, B->A, C->B of weight 1. The three
# single-root trees each have probability 1/3; Wilson-RC gives 1/4, 1/4, 1/2.
COUNTER_ARCS = [(0, 1), (0, 3), (1, 2), (1, 3), (2, 1), (3, 2)]


def counterexample_scores() -> torch.Tensor:
    scores = torch.full((4, 4), -torch.inf, dtype=torch.float64)
    for h, m in COUNTER_ARCS:
        scores[h, m] = 0.0
    return scores


def wilson_rc(weights: list[list[float]], rng: random.Random) -> list[int]:
    """The biased Wilson-RC: ROOT child by its raw weight, then Wilson's loop-erased walks."""
    n = len(weights) - 1
    words = list(range(1, n + 1))
    root_child = rng.choices(words, weights=[weights[0][m] for m in words])[0]
    heads = [-1] * (n + 1)
    heads[root_child] = 0
    in_tree = {0, root_child}
    for start in words:
        node = start
        while node not in in_tree:
            heads[node] = rng.choices(words, weights=[weights[h][node] for h in words])[0]
            node = heads[node]
        node = start
        while node not in in_tree:
            in_tree.add(node)
            node = heads[node]
    return heads


def counterexample_p(heads: torch.Tensor) -> float:
    trees = torch.tensor([[-1, 0, 1, 1], [-1, 0, 3, 1], [-1, 2, 3, 0]])
    return chi_square_p(codes(heads, 3), codes(trees, 3), torch.full((3,), 1 / 3, dtype=torch.float64))


def test_counterexample_has_three_equiprobable_trees():
    trees, probs = exact_probs(counterexample_scores(), 3, True)
    finite = probs > 0
    assert int(finite.sum()) == 3
    assert torch.allclose(probs[finite], torch.full((3,), 1 / 3, dtype=torch.float64))


def test_wilson_rc_is_rejected():
    weights = counterexample_scores().exp().tolist()
    rng = random.Random(0)
    heads = torch.tensor([wilson_rc(weights, rng) for _ in range(DRAWS)])
    assert counterexample_p(heads) < ALPHA


@pytest.mark.parametrize("method", ["wilson_marginal", "wilson_reject", "colbourn"])
def test_our_samplers_pass_the_counterexample(method):
    dist = TreeDistribution(counterexample_scores())
    heads = sample(dist, (DRAWS,), method=method, generator=torch.Generator().manual_seed(7))
    assert counterexample_p(heads[:, 0]) > ALPHA


# ---------------------------------------------------------------- Wilson-Reject statistics
def test_wilson_reject_acceptance_is_z_ratio_and_tries_match():
    scores, lengths = random_batch(8)
    dist = TreeDistribution(scores, lengths)
    acceptance = wilson_reject_acceptance(dist)
    for b, n in enumerate(lengths.tolist()):
        z_single = exact_probs(scores[b], n, True)[0].shape[0]  # tree count, sanity
        assert z_single == n ** (n - 1)
        sub = scores[b, : n + 1, : n + 1]
        words = torch.arange(1, n + 1)
        log_z = {
            single: torch.logsumexp(sub[all_trees(n, single)[:, 1:], words].sum(-1), 0) for single in (True, False)
        }
        assert torch.allclose(acceptance[b], (log_z[True] - log_z[False]).exp(), rtol=1e-6)
    _, tries = wilson_reject(dist, DRAWS, torch.Generator().manual_seed(8))
    mean, expected = tries.double().mean(0), 1 / acceptance
    std = ((1 - acceptance) / acceptance**2 / DRAWS).sqrt()
    assert ((mean - expected).abs() < 5 * std).all(), (mean, expected)


# ---------------------------------------------------------------- without replacement
def assert_exact_log_probs(dist, heads: torch.Tensor, log_probs: torch.Tensor) -> None:
    """SWOR log-probabilities equal dist.log_prob on the drawn trees (padding: -inf)."""
    valid = log_probs > -torch.inf
    filled = torch.where(valid.unsqueeze(-1), heads, heads[:1])
    assert torch.equal(log_probs[valid], dist.log_prob(filled)[valid])


@pytest.mark.parametrize("method", ["sbs", "trie"])
@pytest.mark.parametrize("single_root", [True, False])
def test_without_replacement_draws_every_tree_once_then_pads(method, single_root):
    scores, _ = random_batch(9)
    lengths = torch.tensor([3, 2])
    dist = TreeDistribution(scores, lengths, single_root=single_root)
    k = 20  # more than the 9 / 16 trees of n = 3 and the 2 / 3 trees of n = 2
    heads, log_probs = sample_without_replacement(dist, k, method=method, generator=torch.Generator().manual_seed(9))
    assert heads.shape == (k, 2, 5) and log_probs.shape == (k, 2)
    for b, n in enumerate(lengths.tolist()):
        trees, probs = exact_probs(scores[b], n, single_root)
        count = trees.shape[0]
        drawn = codes(heads[:count, b], n)
        assert sorted(drawn.tolist()) == sorted(codes(trees, n).tolist())
        order = torch.argsort(codes(trees, n))
        expected = probs[order][torch.searchsorted(codes(trees, n)[order], drawn)].log()
        assert torch.allclose(log_probs[:count, b].double(), expected, atol=1e-9)
        assert (heads[count:, b] == -1).all() and (log_probs[count:, b] == -torch.inf).all()
    assert_exact_log_probs(dist, heads, log_probs)


@pytest.mark.parametrize(
    "method,single_root,seed,per_sentence",
    [
        ("sbs", True, 10, False),
        ("trie", True, 11, False),
        ("sbs", False, 19, False),
        ("trie", False, 20, False),
        ("sbs", True, 12, True),
    ],
)
def test_first_two_draws_have_the_without_replacement_law(method, single_root, seed, per_sentence):
    """Ordered pair (a, b) has probability p(a) p(b) / (1 - p(a)); the first draw is ~ p.
    (per_sentence: every copy draws from its own generator.)"""
    n = 3
    gen = torch.Generator().manual_seed(seed)
    one = torch.randn(1, n + 1, n + 1, generator=gen, dtype=torch.float64)
    dist = TreeDistribution(one.expand(DRAWS, -1, -1), single_root=single_root)  # DRAWS copies
    if per_sentence:
        gen = [torch.Generator().manual_seed(seed * DRAWS + i) for i in range(DRAWS)]
    heads, _ = sample_without_replacement(dist, 2, method=method, generator=gen)
    assert_first_two_draws_fit(heads, one[0], n, single_root)


@pytest.mark.parametrize("asked_at_once", [True, False])
def test_trie_rounds_give_the_law_of_three_draws_without_replacement(asked_at_once):
    """The trie draws rounds of i.i.d. candidates and keeps each tree's first occurrence, in
    order: the ordered triple (a, b, c) must have probability
    p(a) p(b) p(c) / ((1 - p(a)) (1 - p(a) - p(b))), with k = 3 asked at once (a round of 3
    candidates) and from the iterator (rounds of 1, 1 and 2 candidates). Peaked enough that most
    rounds hold a repeated candidate."""
    n = 3
    gen = torch.Generator().manual_seed(31)
    one = torch.randn(1, n + 1, n + 1, generator=gen, dtype=torch.float64) * 2
    dist = TreeDistribution(one.expand(DRAWS, -1, -1))
    if asked_at_once:
        heads, _ = sample_without_replacement(dist, 3, method="trie", generator=gen)
    else:
        heads = torch.stack([h for _, (h, _) in zip(range(3), iter_without_replacement(dist, gen))])
    trees, probs = exact_probs(one[0], n, True)
    assert probs.max() > 0.3
    tree_codes = codes(trees, n)
    drawn = codes(heads, n)  # (3, DRAWS)
    assert ((drawn[0] != drawn[1]) & (drawn[1] != drawn[2]) & (drawn[0] != drawn[2])).all()
    a, b, c = probs[:, None, None], probs[None, :, None], probs[None, None, :]
    triple = a * b * c / ((1 - a) * (1 - a - b).clamp_min(1e-300))
    count = tree_codes.numel()
    index = torch.arange(count)
    distinct = (
        (index[:, None, None] != index[None, :, None])
        & (index[None, :, None] != index[None, None, :])
        & (index[:, None, None] != index[None, None, :])
    )
    scale = 10_000
    triple_codes = (tree_codes[:, None, None] * scale + tree_codes[None, :, None]) * scale + tree_codes[None, None, :]
    observed = (drawn[0] * scale + drawn[1]) * scale + drawn[2]
    assert chi_square_p(observed, triple_codes[distinct], triple[distinct]) > ALPHA


@pytest.mark.parametrize("method", ["sbs", "trie"])
def test_without_replacement_follows_probability_order_when_peaked(method):
    """float32 scores of scale 300: the 6 most probable trees are >= 30 nats apart, so both
    samplers must return them in order (failure probability < 1e-12). The 6th hangs word 1
    from ROOT, whose float32 marginal underflows to 0: conditionals are taken in float64."""
    gen = torch.Generator().manual_seed(47)
    scores = (torch.randn(1, 5, 5, generator=gen) * 300).float()
    trees, log_probs = tree_log_probs(scores[0], 4, True)
    order = log_probs.argsort(descending=True)[:6]
    assert (log_probs[order][:-1] - log_probs[order][1:]).min() > 30 and trees[order[5], 1] == 0
    heads, _ = sample_without_replacement(TreeDistribution(scores), 6, method=method, generator=gen)
    assert heads[:, 0].tolist() == trees[order].tolist()


@pytest.mark.parametrize("asked_at_once", [True, False])
def test_trie_prunes_dead_ends_and_keeps_the_law(monkeypatch, asked_at_once):
    """A rounding error can give an impossible head positive probability; the prefix it
    starts has no tree (a dead end). Simulated: word 2 gets 30% of its mass on itself (a
    self-loop: no tree), the real heads 70%. Candidates entering it must be dropped and the
    prefix pruned, and the kept trees must still have the law of the first two draws without
    replacement (every real tree's proposal is scaled alike)."""
    from spacy_treexp.engine.sampling import without_replacement
    from spacy_treexp.engine.sampling.colbourn import Conditioner

    real_probs, real_descend = Conditioner.probs, without_replacement._descend
    dead_rows = []

    def leaky_probs(self, m):
        probs = real_probs(self, m)
        if m == 2:
            probs = probs * 0.7
            probs[:, 2] = 0.3
        return probs

    def counting_descend(*args):
        result = real_descend(*args)
        dead_rows.append(int(result[-1].sum()))
        return result

    monkeypatch.setattr(Conditioner, "probs", leaky_probs)
    monkeypatch.setattr(without_replacement, "_descend", counting_descend)
    n = 3
    gen = torch.Generator().manual_seed(23)
    one = torch.randn(1, n + 1, n + 1, generator=gen, dtype=torch.float64)
    dist = TreeDistribution(one.expand(DRAWS, -1, -1))
    if asked_at_once:
        heads, _ = sample_without_replacement(dist, 2, method="trie", generator=gen)
    else:
        heads = torch.stack([h for _, (h, _) in zip(range(2), iter_without_replacement(dist, gen))])
    assert sum(dead_rows) > 0.2 * DRAWS  # dead ends were entered, and left
    assert_first_two_draws_fit(heads, one[0], n, True)  # (every draw is a tree)


def test_iterator_yields_distinct_trees_and_stops():
    scores, _ = random_batch(12)
    dist = TreeDistribution(scores, torch.tensor([3, 2]))
    steps = list(iter_without_replacement(dist, torch.Generator().manual_seed(12)))
    assert len(steps) == 9  # n = 3 has 9 single-root trees; n = 2 runs out after 2
    heads = torch.stack([h for h, _ in steps])
    log_probs = torch.stack([lp for _, lp in steps])
    assert len(set(codes(heads[:, 0], 3).tolist())) == 9
    assert (log_probs[2:, 1] == -torch.inf).all() and (heads[2:, 1] == -1).all()
    assert torch.allclose(log_probs[:, 0].exp().sum(), torch.tensor(1.0, dtype=log_probs.dtype))


def test_sbs_scales_to_longer_sentences_with_exact_log_probs():
    gen = torch.Generator().manual_seed(13)
    scores = torch.randn(3, 31, 31, generator=gen) * 2
    dist = TreeDistribution(scores, torch.tensor([30, 12, 1]))
    for method in ("sbs", "trie"):
        heads, log_probs = sample_without_replacement(dist, 16, method=method, generator=gen)
        assert torch.isfinite(log_probs[:, :2]).all()
        assert torch.equal(log_probs[1:, 2], torch.full((15,), -torch.inf))  # n = 1: one tree
        for b in range(2):
            assert len(set(map(tuple, heads[:, b].tolist()))) == 16
        assert_exact_log_probs(dist, heads, log_probs)


# ---------------------------------------------------------------- accuracy of Colbourn
def test_colbourn_log_probs_stay_exact_in_float32_long_sentences():
    """Sherman-Morrison over 60 words from float32 peaked scores: the conditionals multiply
    to the exact tree probability (no drift)."""
    gen = torch.Generator().manual_seed(14)
    scores = torch.randn(2, 61, 61, generator=gen) * 5
    dist = TreeDistribution(scores, torch.tensor([60, 45]))
    heads, log_prob = colbourn_sample(dist, 50, gen)
    exact = TreeDistribution(scores.double(), torch.tensor([60, 45])).log_prob(heads)
    assert torch.allclose(log_prob, exact, atol=1e-6, rtol=0)


# ---------------------------------------------------------------- validity (property-based)
def draws_trees(dist, heads: torch.Tensor) -> bool:
    return bool(torch.isfinite(dist.log_prob(heads)).all())


@settings(max_examples=15, deadline=None, derandomize=True)
@given(n=st.integers(1, 7), seed=st.integers(0, 2**31 - 1), scale=st.sampled_from([0.1, 1.0]))
def test_wilson_methods_draw_trees(n, seed, scale):
    """Wilson's walks (expected time: the hitting time, fine for moderate score gaps)."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(2, n + 2, n + 2, generator=gen) * scale
    lengths = torch.tensor([n + 1, n])
    single, multi = TreeDistribution(scores, lengths), TreeDistribution(scores, lengths, single_root=False)
    for method in ("wilson_marginal", "wilson_reject"):
        assert draws_trees(single, sample(single, (4,), method=method, generator=gen)), method
    assert draws_trees(multi, sample(multi, (4,), method="wilson", generator=gen))


@settings(max_examples=15, deadline=None, derandomize=True)
@given(n=st.integers(1, 9), seed=st.integers(0, 2**31 - 1), scale=st.sampled_from([0.1, 4.0, 30.0, 300.0]))
def test_colbourn_and_swor_draw_trees_even_for_peaked_scores(n, seed, scale):
    """Colbourn-based samplers never stall; for gaps beyond float64 they refactorise."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(2, n + 2, n + 2, generator=gen) * scale
    lengths = torch.tensor([n + 1, n])
    for single_root in (True, False):
        dist = TreeDistribution(scores, lengths, single_root=single_root)
        assert draws_trees(dist, sample(dist, (4,), method="colbourn", generator=gen))
        for method in ("sbs", "trie"):
            heads, log_probs = sample_without_replacement(dist, 3, method=method, generator=gen)
            assert torch.isfinite(log_probs[0]).all()
            assert_exact_log_probs(dist, heads, log_probs)
            for b in range(2):
                valid = heads[log_probs[:, b] > -torch.inf, b]
                assert len(set(map(tuple, valid.tolist()))) == valid.shape[0]


# ---------------------------------------------------------------- reproducibility, errors
@pytest.mark.parametrize("method", ["wilson_marginal", "wilson_reject", "colbourn"])
def test_same_seed_same_trees(method):
    scores = torch.randn(3, 11, 11, generator=torch.Generator().manual_seed(15))
    dist = TreeDistribution(scores, torch.tensor([10, 7, 3]))
    one = sample(dist, (5, 2), method=method, generator=torch.Generator().manual_seed(3))
    two = sample(dist, (5, 2), method=method, generator=torch.Generator().manual_seed(3))
    other = sample(dist, (5, 2), method=method, generator=torch.Generator().manual_seed(4))
    assert one.shape == (5, 2, 3, 11)
    assert torch.equal(one, two) and not torch.equal(one, other)


@pytest.mark.parametrize("method", ["sbs", "trie"])
def test_same_seed_same_trees_without_replacement(method):
    scores = torch.randn(2, 9, 9, generator=torch.Generator().manual_seed(16))
    dist = TreeDistribution(scores)
    one = sample_without_replacement(dist, 6, method=method, generator=torch.Generator().manual_seed(1))
    two = sample_without_replacement(dist, 6, method=method, generator=torch.Generator().manual_seed(1))
    assert torch.equal(one[0], two[0]) and torch.equal(one[1], two[1])


def test_per_sentence_generators_fit_and_do_not_depend_on_the_batch(monkeypatch):
    """One generator per sentence (colbourn, sbs): draws fit the exact distribution, and a
    sentence gets the same trees alone or padded in a batch with longer sentences, and
    whatever chunks Colbourn's sampler cuts its samples into."""
    import spacy_treexp.engine.sampling.colbourn as colbourn_module

    scores, lengths = random_batch(23)
    dist = TreeDistribution(scores, lengths)
    heads = sample(dist, (DRAWS,), method="colbourn", generator=[torch.Generator().manual_seed(i) for i in (1, 2)])
    assert_fits(heads, scores, lengths, True)

    gen = torch.Generator().manual_seed(24)
    batch = torch.randn(3, 9, 9, generator=gen, dtype=torch.float64)
    batch_lengths = torch.tensor([8, 4, 6])
    seeds = [5, 6, 7]
    together = TreeDistribution(batch, batch_lengths)
    for b, n in enumerate(batch_lengths.tolist()):
        alone = TreeDistribution(batch[b : b + 1, : n + 1, : n + 1])
        for draw in (
            lambda d, g: sample(d, (7,), method="colbourn", generator=g),
            lambda d, g: sample_without_replacement(d, 5, method="sbs", generator=g)[0],
        ):
            mine = draw(alone, [torch.Generator().manual_seed(seeds[b])])[:, 0]
            in_batch = draw(together, [torch.Generator().manual_seed(s) for s in seeds])[:, b, : n + 1]
            assert torch.equal(mine, in_batch)
    whole = sample(together, (600,), method="colbourn", generator=[torch.Generator().manual_seed(s) for s in seeds])
    monkeypatch.setattr(colbourn_module, "CHUNK_ENTRIES", 3 * 64 * 97)  # chunks of 97 samples
    chunked = sample(together, (600,), method="colbourn", generator=[torch.Generator().manual_seed(s) for s in seeds])
    assert torch.equal(whole, chunked)
    again = sample(together, (7,), method="colbourn", generator=[torch.Generator().manual_seed(s) for s in seeds])
    other = sample(together, (7,), method="colbourn", generator=[torch.Generator().manual_seed(s + 1) for s in seeds])
    first = sample(together, (7,), method="colbourn", generator=[torch.Generator().manual_seed(s) for s in seeds])
    assert torch.equal(again, first) and not torch.equal(again, other)


def test_bad_arguments_are_clear_errors():
    scores = torch.randn(1, 4, 4)
    single, multi = TreeDistribution(scores), TreeDistribution(scores, single_root=False)
    with pytest.raises(ValueError, match="does not sample single-root"):
        sample(single, (2,), method="wilson")
    with pytest.raises(ValueError, match="does not sample multi-root"):
        sample(multi, (2,), method="wilson_reject")
    with pytest.raises(ValueError, match="does not sample"):
        sample(single, (2,), method="gibbs")
    with pytest.raises(ValueError, match="sample_shape"):
        sample(single, (-1,))
    for k in (0, -2, 2.5, True, "3"):
        with pytest.raises(ValueError, match="k must be a positive integer"):
            sample_without_replacement(single, k)
    with pytest.raises(ValueError, match="unknown method"):
        sample_without_replacement(single, 2, method="beam")
    with pytest.raises(ValueError, match="single-root"):
        wilson_reject_acceptance(multi)
    assert sample(single, (0, 3)).shape == (0, 3, 1, 4)
    assert sample(multi, (2,)).shape == (2, 1, 4)  # default method means "wilson" there
    generators = [torch.Generator(), torch.Generator()]
    with pytest.raises(ValueError, match="2 per-sentence generators for a batch of 1"):
        sample(single, (2,), method="colbourn", generator=generators)
    with pytest.raises(ValueError, match="supported by the methods"):
        sample(single, (2,), method="wilson_marginal", generator=generators[:1])
    with pytest.raises(ValueError, match="supported by the methods"):
        sample_without_replacement(single, 2, method="trie", generator=generators[:1])
    with pytest.raises(ValueError, match="is None"):
        sample(single, (2,), method="colbourn", generator=[None])
    with pytest.raises(TypeError, match="torch.Generator"):
        sample(single, (2,), method="colbourn", generator=[3])


def test_walk_that_cannot_reach_root_raises_naming_the_sentence():
    """Multi-root: words 1 and 2 prefer each other by e^10000, so the walk's step to ROOT
    underflows to probability 0 and cycle popping cannot end; it must fail, not hang."""
    scores = torch.zeros(2, 3, 3)
    scores[1, 1, 2] = scores[1, 2, 1] = 1e4
    dist = TreeDistribution(scores, single_root=False)
    with pytest.raises(ValueError, match=r"sentence\(s\) \[1\].*colbourn"):
        wilson_multi_root(dist, 3, torch.Generator().manual_seed(0), max_rounds=50)
    single = TreeDistribution(scores)  # Wilson-Reject's multi-root walks get stuck the same way
    with pytest.raises(ValueError, match=r"did not reach ROOT.*sentence\(s\) \[1\]"):
        wilson_reject(single, 3, torch.Generator().manual_seed(0), max_rounds=50)
    # Colbourn refactorises where L-hat is singular in float64: both trees, 1/2 each.
    heads = sample(dist, (DRAWS,), method="colbourn", generator=torch.Generator().manual_seed(0))
    trees = torch.tensor([[-1, 0, 1], [-1, 2, 0]])
    half = torch.full((2,), 0.5, dtype=torch.float64)
    assert chi_square_p(codes(heads[:, 1], 2), codes(trees, 2), half) > ALPHA
    swor, log_probs = sample_without_replacement(dist, 3, generator=torch.Generator().manual_seed(0))
    assert sorted(codes(swor[:2, 1], 2).tolist()) == sorted(codes(trees, 2).tolist())
    # float32 scores of 1e4: log-probabilities are good to the float32 ulp of 1e4 (~1e-3)
    assert torch.allclose(log_probs[:2, 1], torch.full((2,), 0.5).log(), atol=2e-3)


def test_hopeless_rejection_raises_naming_the_sentence():
    scores = torch.zeros(2, 7, 7)
    scores[0, 0, 1:] = 30.0  # multi-root trees almost surely have several ROOT children
    dist = TreeDistribution(scores)
    assert wilson_reject_acceptance(dist)[0] < 1e-30
    with pytest.raises(ValueError, match=r"sentence\(s\) \[0\].*acceptance"):
        wilson_reject(dist, 4, torch.Generator().manual_seed(0), max_tries=30)


# ---------------------------------------------------------------- CUDA
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
@pytest.mark.cuda
@pytest.mark.parametrize("method", ["wilson_marginal", "wilson_reject", "colbourn"])
def test_cuda_samples_fit_and_reproduce(method):
    scores, lengths = random_batch(17)
    dist = TreeDistribution(scores.cuda(), lengths.cuda())
    heads = sample(dist, (DRAWS,), method=method, generator=torch.Generator("cuda").manual_seed(1))
    again = sample(dist, (DRAWS,), method=method, generator=torch.Generator("cuda").manual_seed(1))
    assert heads.is_cuda and torch.equal(heads, again)
    assert_fits(heads.cpu(), scores, lengths, True)


@cuda
@pytest.mark.cuda
@pytest.mark.parametrize("method", ["sbs", "trie"])
def test_cuda_without_replacement(method):
    scores, _ = random_batch(18)
    dist = TreeDistribution(scores.cuda(), torch.tensor([3, 2], device="cuda"))
    gen = torch.Generator("cuda").manual_seed(2)
    heads, log_probs = sample_without_replacement(dist, 12, method=method, generator=gen)
    assert heads.is_cuda
    assert len(set(codes(heads[:9, 0].cpu(), 3).tolist())) == 9
    assert (log_probs[9:, 0] == -torch.inf).all()


def test_word_without_possible_head_is_a_clear_error():
    """Forbidden arcs are never walked; a word with no allowed head at all (no tree) is a
    ValueError naming the sentence, not an index error or a hang."""
    scores = torch.full((1, 3, 3), -torch.inf)
    scores[0, 0, 1] = scores[0, 0, 2] = 0.0
    dist = TreeDistribution(scores, single_root=False)  # both words on ROOT: one tree
    heads = sample(dist, (5,), method="wilson", generator=torch.Generator().manual_seed(0))
    assert heads[:, 0].tolist() == [[-1, 0, 0]] * 5
    assert sample(dist, (5,), method="colbourn").tolist() == heads.tolist()
    with pytest.raises(ValueError, match=r"no possible head in sentence\(s\) \[0\]"):
        wilson_multi_root(TreeDistribution(torch.full((1, 3, 3), -torch.inf), single_root=False), 2)


def test_without_replacement_log_probs_are_differentiable():
    """The returned log-probabilities are dist.log_prob of the drawn trees: they carry the
    gradient d log p(tree) / d scores = indicator(tree) - marginals."""
    scores = torch.randn(2, 6, 6, generator=torch.Generator().manual_seed(22), dtype=torch.float64)
    scores.requires_grad_(True)
    dist = TreeDistribution(scores)
    heads, log_probs = sample_without_replacement(dist, 3, generator=torch.Generator().manual_seed(22))
    (grad,) = torch.autograd.grad(log_probs[0].sum(), scores)
    indicator = torch.zeros_like(scores).scatter_(1, heads[0].clamp_min(0).unsqueeze(1), 1.0)
    indicator[:, 0, 0] = 0.0  # the ROOT position's -1 head is no arc
    assert torch.allclose(grad, (indicator - dist.marginals).detach(), atol=1e-9)


# ---------------------------------------------------------------- SBS's conditioned Gumbels
def test_child_gumbels_match_kool_et_al_in_high_precision():
    """The exponential-key form of the truncated Gumbel equals Kool et al. (2019, eq. 23),
    G~_i = -log(e^-T - e^-Z + e^-G_i), evaluated at 60 digits from the same uniforms: for
    ordinary children, a child of probability 1e-310 (its key overflows: -inf, then the
    exact value from _restore_overflowed), impossible children (q = 0, -inf), a dead beam
    (all -inf) and a beam truncated far below its own Gumbel (e^(T - l) underflows)."""
    import mpmath

    from spacy_treexp.engine.sampling.without_replacement import OVERFLOW_GAP, _child_gumbels, _restore_overflowed

    gen = torch.Generator().manual_seed(31)
    probs = torch.rand(2, 4, 6, generator=gen, dtype=torch.float64)
    probs[0, 1, 2] = 1e-310  # a subnormal: its key overflows
    probs[0, 2, 3:] = 0.0
    probs = probs / probs.sum(-1, keepdim=True)
    parent_log_p = -5 * torch.rand(2, 4, generator=gen, dtype=torch.float64)
    parent = parent_log_p + torch.randn(2, 4, generator=gen, dtype=torch.float64)
    parent[1, 0], parent_log_p[1, 0] = -torch.inf, -torch.inf  # dead beam
    parent[1, 1] = parent_log_p[1, 1] - 800.0  # truncated far below its prefix
    uniforms = torch.rand(probs.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(77))
    children = _child_gumbels(parent, parent_log_p, probs, uniforms)
    assert children[0, 1, 2] == -torch.inf  # overflowed ...
    assert _restore_overflowed(children, parent, parent_log_p, probs, uniforms)
    assert children[0, 1, 2] < parent[0, 1] - OVERFLOW_GAP  # ... and restored: far below T
    assert not _restore_overflowed(children, parent, parent_log_p, probs, uniforms)  # nothing left
    with mpmath.workdps(60):
        for b in range(2):
            for a in range(4):
                if parent[b, a] == -torch.inf:
                    assert (children[b, a] == -torch.inf).all()
                    continue
                T, log_p = mpmath.mpf(float(parent[b, a])), mpmath.mpf(float(parent_log_p[b, a]))
                gumbels = [
                    log_p + mpmath.log(float(q)) - mpmath.log(-mpmath.log(float(u))) if q > 0 else None
                    for q, u in zip(probs[b, a].tolist(), uniforms[b, a].tolist())
                ]
                Z = max(g for g in gumbels if g is not None)
                for i, g in enumerate(gumbels):
                    got = float(children[b, a, i])
                    if g is None:
                        assert got == -float("inf")
                        continue
                    expected = -mpmath.log(mpmath.e ** (-T) - mpmath.e ** (-Z) + mpmath.e ** (-g))
                    assert abs(got - float(expected)) <= 1e-12 * max(1.0, abs(float(expected))), (b, a, i)
    assert children[0, 1, 2] > -torch.inf  # the 1e-310 child stays possible


def test_sbs_refactorises_nothing_on_well_conditioned_scores(monkeypatch):
    """Refactorising (the engine per word) is for drifted or singular inverses only. Beams
    that die (word 1 has fewer children than k) and finished sentences must not look drifted:
    their conditionals are never used, and refactorising them would cost O(n^3) per word."""
    from spacy_treexp.engine.sampling.colbourn import Conditioner

    calls = []
    original = Conditioner._engine_conditionals
    monkeypatch.setattr(
        Conditioner, "_engine_conditionals", lambda self, m, rows: calls.append(m) or original(self, m, rows)
    )
    gen = torch.Generator().manual_seed(5)
    scores = torch.randn(3, 9, 9, generator=gen, dtype=torch.float64)
    for single_root in (True, False):
        dist = TreeDistribution(scores, torch.tensor([8, 5, 2]), single_root=single_root)
        heads, log_probs = sample_without_replacement(dist, 40, method="sbs", generator=gen)
        assert_exact_log_probs(dist, heads, log_probs)
    assert calls == []


@pytest.mark.parametrize("single_root", [True, False])
def test_update_column_table_gives_the_inverse_times_the_new_column(single_root):
    """Fixing word m's head h replaces column m-1 of L-hat by that of the single arc h -> m
    (weight 1). The table Colbourn's update reads must give L-hat^{-1} c for that column c,
    for every word and head (a wrong entry would otherwise only show as drift, silently
    repaired by refactorisation)."""
    from spacy_treexp.engine.laplacian import laplacian_matrix
    from spacy_treexp.engine.sampling.colbourn import _update_columns

    n = 5
    gen = torch.Generator().manual_seed(11)
    weights = torch.rand(1, n + 1, n + 1, generator=gen, dtype=torch.float64) + 0.1
    weights[:, :, 0] = 0.0  # no arc into ROOT
    weights[:, torch.arange(n + 1), torch.arange(n + 1)] = 0.0  # no self-loops
    lengths = torch.tensor([n])
    inverse = torch.linalg.inv(laplacian_matrix(weights, lengths, single_root))[0]
    columns, coefficients = _update_columns(n + 1, single_root)
    for m in range(1, n + 1):
        for h in range(n + 1):
            if h == m:
                continue
            single_arc = weights.clone()
            single_arc[:, :, m] = 0.0
            single_arc[:, h, m] = 1.0
            c = laplacian_matrix(single_arc, lengths, single_root)[0][:, m - 1]
            expected = inverse @ c
            got = inverse[:, columns[m, h, 0]] + coefficients[m, h] * inverse[:, columns[m, h, 1]]
            torch.testing.assert_close(got, expected, rtol=0, atol=1e-12, msg=f"word {m}, head {h}")


@pytest.mark.parametrize("k", [2, 3])
def test_sbs_draws_a_tree_of_subnormal_probability_when_k_asks_for_it(k):
    """Two trees, one of probability e^-720 (its word-1 conditional is subnormal, its key
    overflows float64): with k >= 2 SBS must still draw it, second, with its exact
    log-probability (no floor on probabilities)."""
    scores = torch.zeros(1, 3, 3, dtype=torch.float64)
    scores[0, 2, 1] = -720.0  # arc 2 -> 1
    dist = TreeDistribution(scores)
    heads, log_probs = sample_without_replacement(dist, k, method="sbs", generator=torch.Generator().manual_seed(0))
    assert heads[:2, 0].tolist() == [[-1, 0, 1], [-1, 2, 0]]
    assert log_probs[:2, 0].tolist() == [0.0, -720.0]
    assert (heads[2:] == -1).all() and (log_probs[2:] == -torch.inf).all()


@pytest.mark.parametrize("single_root", [True, False])
def test_every_sampler_returns_empty_results_for_an_empty_batch(single_root):
    """B = 0 (e.g. a pipeline batch with no sentences) is no error: empty heads, right shapes."""
    dist = TreeDistribution(torch.zeros(0, 4, 4, dtype=torch.float64), single_root=single_root)
    methods = ["wilson_marginal", "wilson_reject", "colbourn"] if single_root else ["wilson", "colbourn"]
    for method in methods:
        assert dist.sample((3,), method=method).shape == (3, 0, 4)
    for method in ("sbs", "trie"):
        heads, log_probs = dist.sample_without_replacement(2, method=method)
        assert heads.shape == (2, 0, 4) and log_probs.shape == (2, 0)


@pytest.mark.parametrize("single_root", [True, False])
@pytest.mark.parametrize("layout", ["by_sentence", "by_copy"])
def test_conditioner_layouts_match_the_per_row_copies(single_root, layout):
    """A layout only avoids copies (per-sentence weights broadcast; word 1 reads the
    sentences' own inverses): the conditionals and the updated inverses must equal those of
    the plain per-row Conditioner, word after word, for the same heads."""
    from spacy_treexp.engine.sampling.colbourn import Conditioner, Prepared, draw_positive

    gen = torch.Generator().manual_seed(3)
    dist = TreeDistribution(
        torch.randn(3, 7, 7, generator=gen, dtype=torch.float64), torch.tensor([6, 4, 2]), single_root=single_root
    )
    prepared, copies = Prepared.of(dist), 4
    batch = torch.arange(3)
    sentence = batch.repeat_interleave(copies) if layout == "by_sentence" else batch.repeat(copies)
    plain, shaped = Conditioner(dist, sentence, prepared), Conditioner(dist, sentence, prepared, layout)
    for m in range(1, 7):
        probs = plain.probs(m)
        torch.testing.assert_close(shaped.probs(m), probs, rtol=0, atol=0)
        head, possible = draw_positive(probs, gen)
        active = possible & (plain.lengths >= m)
        plain.fix(m, head, active)
        shaped.fix(m, head, active)
        torch.testing.assert_close(shaped.inverse, plain.inverse, rtol=0, atol=1e-15, equal_nan=True)
        assert torch.equal(shaped.chain_end, plain.chain_end) and torch.equal(shaped.heads, plain.heads)


@pytest.mark.parametrize("single_root", [True, False])
def test_sbs_in_chunks_of_sentences_draws_what_one_search_draws(monkeypatch, single_root):
    """A batch whose beams' inverses exceed CHUNK_ENTRIES is searched a few sentences at a
    time (memory stays bounded for large k): with per-sentence generators every sentence gets
    the trees of the unchunked search, with exact log-probabilities and gradients."""
    from spacy_treexp.engine.sampling import without_replacement

    gen = torch.Generator().manual_seed(8)
    scores = torch.randn(5, 7, 7, generator=gen, dtype=torch.float64, requires_grad=True)
    dist = TreeDistribution(scores, torch.tensor([6, 3, 5, 1, 6]), single_root=single_root)
    seeds = lambda: [torch.Generator().manual_seed(40 + b) for b in range(5)]  # noqa: E731
    whole = sample_without_replacement(dist, 6, method="sbs", generator=seeds())
    monkeypatch.setattr(without_replacement, "CHUNK_ENTRIES", 6 * 36 * 2)  # two sentences per chunk
    chunked = sample_without_replacement(dist, 6, method="sbs", generator=seeds())
    assert torch.equal(chunked[0], whole[0])
    assert_exact_log_probs(dist, *chunked)
    (grad,) = torch.autograd.grad(chunked[1][0].sum(), scores)
    assert torch.isfinite(grad).all()


def test_sample_shape_may_be_an_int_and_a_bad_one_is_named():
    """``dist.sample(k)`` draws k trees, as ``sample((k,))`` with the same generator; a shape
    that is neither an int nor a tuple of non-negative ints gets a ValueError naming it."""
    dist = TreeDistribution(torch.randn(2, 5, 5, generator=torch.Generator().manual_seed(0)))
    as_int = dist.sample(4, generator=torch.Generator().manual_seed(1))
    as_tuple = dist.sample((4,), generator=torch.Generator().manual_seed(1))
    assert as_int.shape == (4, 2, 5) and torch.equal(as_int, as_tuple)
    assert dist.sample(numpy.int64(3)).shape == (3, 2, 5) and dist.sample((torch.tensor(2), 1)).shape == (2, 1, 2, 5)
    for bad in (-1, 2.5, "3", True, (2.5,), ("3",), (True,)):
        with pytest.raises(ValueError, match="sample_shape"):
            dist.sample(bad)
