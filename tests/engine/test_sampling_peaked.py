"""Samplers on peaked scores (x100 to x1e4): still exact, and their work is a function of n,
k and B only (counted by :mod:`spacy_treexp.engine.sampling.work`, never timed).

Peaked test graphs: scale * (integer scores 0..2) + N(0, 1) noise. The integer part makes
near-ties at the top, so that several trees keep non-negligible probability (the chi-square
tests have power), and cycles of each other's best heads bound by e^-100 or e^-1000 from the
rest (their L-hat is singular in float64: the trapped-words path of Colbourn's sampler).
Every statistical test uses a fixed seed and rejects at p < 1e-3, as in test_sampling.py.
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers.enumerate_trees import tree_log_probs
from helpers.goodness_of_fit import ALPHA, assert_fits, chi_square_p, codes

from spacy_treexp import TreeDistribution
from spacy_treexp.engine.sampling import colbourn as colbourn_module
from spacy_treexp.engine.sampling import (
    iter_without_replacement,
    sample,
    sample_without_replacement,
    work,
)
from spacy_treexp.engine.sampling.colbourn import Prepared, TrappedModel, TrappedSetup, colbourn_sample
from spacy_treexp.engine.sampling.trapped import trapped_conditionals, unsettled_conditionals
from spacy_treexp.engine.sampling.wilson import (
    WALK_BUDGET,
    expected_walk_steps,
    walkable,
    walkable_given_root,
    wilson_marginal,
    wilson_multi_root,
)

DRAWS = 20_000
#: base seeds whose graphs keep >= 7 trees above probability 0.02 at x100 and x1000 (checked)
PEAKED_SEEDS = (8, 19, 24, 27)


def peaked_batch(scale: float, seeds=(8, 24)) -> tuple[torch.Tensor, torch.Tensor]:
    """Two sentences (n = 5 and, padded, n = 4) of scale * integers 0..2 + N(0, 1) noise."""
    scores = torch.full((len(seeds), 6, 6), 0.0, dtype=torch.float64)
    for b, seed in enumerate(seeds):
        gen = torch.Generator().manual_seed(seed)
        base = torch.randint(0, 3, (6, 6), generator=gen).double()
        scores[b] = scale * base + torch.randn(6, 6, generator=gen, dtype=torch.float64)
    return scores, torch.tensor([5, 4][: len(seeds)])


@pytest.mark.parametrize("seed", PEAKED_SEEDS)
@pytest.mark.parametrize("scale", [100.0, 1000.0])
def test_peaked_graphs_keep_several_trees_and_are_trapped(seed, scale):
    """The test graphs do what the tests below need: several likely trees, and an L-hat that
    Sherman-Morrison cannot follow (so the trapped-words path runs)."""
    scores, _ = peaked_batch(scale, (seed,))
    for single_root in (True, False):
        probs = tree_log_probs(scores[0], 5, single_root)[1].exp()
        assert int((probs > 0.02).sum()) >= 7
        assert bool(Prepared.of(TreeDistribution(scores, single_root=single_root)).trapped().all())


# ---------------------------------------------------------------- goodness of fit
@pytest.mark.parametrize("scale", [100.0, 1000.0])
@pytest.mark.parametrize(
    "method,single_root",
    [("colbourn", True), ("colbourn", False), ("wilson_marginal", True), ("wilson_reject", True), ("wilson", False)],
)
def test_peaked_samples_fit_the_tree_distribution(scale, method, single_root):
    scores, lengths = peaked_batch(scale)
    dist = TreeDistribution(scores, lengths, single_root=single_root)
    heads = sample(dist, (DRAWS,), method=method, generator=torch.Generator().manual_seed(int(scale) + len(method)))
    assert_fits(heads, scores, lengths, single_root)


@pytest.mark.parametrize("scale", [100.0, 1000.0])
def test_peaked_float32_and_per_sentence_generators_fit(scale):
    scores, lengths = peaked_batch(scale, (19, 27))
    dist = TreeDistribution(scores.float(), lengths)
    generators = [torch.Generator().manual_seed(s) for s in (3, 4)]
    heads, log_prob = colbourn_sample(dist, DRAWS, generators)
    assert_fits(heads, scores.float().double(), lengths, True)
    # the sampler's own log-probabilities are those of the trees (float32 scores of 1e3: ~1e-4)
    exact = TreeDistribution(scores.float().double(), lengths).log_prob(heads)
    assert torch.allclose(log_prob, exact, atol=1e-3, rtol=0)


def first_two_law(heads: torch.Tensor, scores: torch.Tensor, n: int, single_root: bool) -> None:
    """The first draw is ~ p; the ordered pair (a, b) has probability p(a) p(b) / (1 - p(a))."""
    trees, log_probs = tree_log_probs(scores, n, single_root)
    probs = log_probs.exp()
    tree_codes = codes(trees, n)
    first, second = codes(heads[0], n), codes(heads[1], n)
    assert (first != second).all()
    assert chi_square_p(first, tree_codes, probs) > ALPHA
    pair = probs[:, None] * probs[None, :] / (1 - probs[:, None]).clamp_min(1e-300)
    pair_codes = tree_codes[:, None] * 10_000 + tree_codes[None, :]
    off = ~torch.eye(tree_codes.numel(), dtype=torch.bool)
    assert chi_square_p(first * 10_000 + second, pair_codes[off], pair[off]) > ALPHA


@pytest.mark.parametrize("scale", [100.0, 1000.0])
@pytest.mark.parametrize("method", ["sbs", "trie"])
@pytest.mark.parametrize("single_root", [True, False])
def test_peaked_draws_without_replacement_have_their_law(scale, method, single_root):
    scores, _ = peaked_batch(scale, (24,))
    dist = TreeDistribution(scores.expand(DRAWS, -1, -1), single_root=single_root)  # DRAWS copies
    heads, log_probs = sample_without_replacement(dist, 2, method=method, generator=torch.Generator().manual_seed(5))
    first_two_law(heads, scores[0], 5, single_root)
    assert torch.equal(log_probs, dist.log_prob(heads))


@pytest.mark.parametrize("scale", [100.0, 1000.0])
def test_peaked_trie_iterator_draws_every_likely_tree_once(scale):
    """The iterator yields distinct trees with their exact log-probabilities, every tree of
    probability above 1e-8 among them (conditionals are exact to float64's rounding, so trees
    whose conditionals are below it relative to their siblings may be out of reach)."""
    scores, lengths = peaked_batch(scale)
    dist = TreeDistribution(scores, lengths)
    steps = list(iter_without_replacement(dist, torch.Generator().manual_seed(6)))
    heads = torch.stack([h for h, _ in steps])
    log_probs = torch.stack([lp for _, lp in steps])
    for b, n in enumerate(lengths.tolist()):
        drawn = heads[:, b][heads[:, b, 1] >= 0]
        assert codes(drawn, n).unique().numel() == drawn.shape[0]
        likely = tree_log_probs(scores[b], n, True)[0][tree_log_probs(scores[b], n, True)[1] > math.log(1e-8)]
        assert torch.isin(codes(likely, n), codes(drawn, n)).all()
        valid = log_probs[:, b] > -torch.inf
        assert torch.equal(log_probs[valid, b], dist.log_prob(heads[valid])[:, b])


@pytest.mark.parametrize("method", ["colbourn", "wilson_marginal", "wilson_reject", "sbs", "trie"])
def test_scores_beyond_float64_resolution_give_the_best_tree(method):
    """x1e4 N(0, 1) scores of 30 words: the best tree carries all the probability float64 can
    hold (every other tree is thousands of nats below), so every draw must be it."""
    scores = torch.randn(2, 31, 31, generator=torch.Generator().manual_seed(9), dtype=torch.float64) * 1e4
    dist = TreeDistribution(scores, torch.tensor([30, 24]))
    best = dist.mode
    assert (dist.log_prob(best) > -1e-9).all()
    gen = torch.Generator().manual_seed(10)
    if method in ("sbs", "trie"):
        heads = sample_without_replacement(dist, 3, method=method, generator=gen)[0][:1]
    else:
        heads = sample(dist, (40,), method=method, generator=gen)
    assert (heads == best).all()


# ---------------------------------------------------------------- Wilson: walk or not
def strongly_bound(scale: float = 40.0) -> torch.Tensor:
    """Words 1, 2 and 3, 4 each other's best heads by `scale`: a walk circles them ~e^scale times."""
    scores = torch.randn(6, 6, generator=torch.Generator().manual_seed(12), dtype=torch.float64)
    scores[1, 2] = scores[2, 1] = scores[3, 4] = scores[4, 3] = scale
    return scores


@pytest.mark.parametrize("method", ["wilson_marginal", "wilson_reject", "wilson"])
def test_expected_walk_steps_are_the_walks_draws(method):
    """expected_walk_steps is exact: the mean number of heads drawn per tree (counted) matches."""
    scores = torch.randn(2, 8, 8, generator=torch.Generator().manual_seed(13), dtype=torch.float64)
    lengths = torch.tensor([7, 4])
    single_root = method != "wilson"
    dist = TreeDistribution(scores, lengths, single_root=single_root)
    expected = expected_walk_steps(dist, method)
    for b, n in enumerate(lengths.tolist()):
        alone = TreeDistribution(scores[b : b + 1, : n + 1, : n + 1], single_root=single_root)
        with work.counting() as done:
            sample(alone, (DRAWS,), method=method, generator=torch.Generator().manual_seed(b))
        assert done["factorisations"] == 0  # it walked (no Colbourn)
        assert abs(done["walk_steps"] / DRAWS - float(expected[b])) < 0.03 * float(expected[b])


@pytest.mark.parametrize("method,single_root", [("wilson_marginal", True), ("wilson_reject", True), ("wilson", False)])
def test_a_sentence_whose_walks_are_too_long_goes_to_colbourn_and_the_mix_is_exact(method, single_root):
    """Sentence 0 is random (it walks), sentence 1 strongly bound (its expected draws are
    e^40-ish: it is sampled by Colbourn). The decision uses the scores only, so the batch's
    draws must still fit the exact distribution, sentence by sentence."""
    scores = torch.stack(
        [torch.randn(6, 6, generator=torch.Generator().manual_seed(14), dtype=torch.float64), strongly_bound()]
    )
    lengths = torch.tensor([5, 5])
    dist = TreeDistribution(scores, lengths, single_root=single_root)
    steps = expected_walk_steps(dist, method)
    assert steps[0] < 50 and steps[1] > 1e15
    assert walkable(dist, method).tolist() == [True, False]
    with work.counting() as done:
        heads = sample(dist, (DRAWS,), method=method, generator=torch.Generator().manual_seed(15))
    assert_fits(heads, scores, lengths, single_root)
    assert done["walk_steps"] < 2 * float(steps[0]) * DRAWS  # only sentence 0 walked
    assert done["factorisations"] >= 1  # sentence 1 went to Colbourn


def test_an_unlikely_root_child_with_a_long_walk_goes_to_colbourn():
    """Wilson-Marginal decides per ROOT child drawn: words 1 and 2 are each other's best heads by
    e^40, and ROOT prefers word 1. Given r = 1 or 2 the pair is broken and the walks are short;
    given an unlikely r in 3..5 (probability ~1e-3) they would circle the pair ~e^40 times.
    Those draws go to Colbourn given r: the call finishes and the draws fit."""
    scores = torch.randn(6, 6, generator=torch.Generator().manual_seed(20), dtype=torch.float64)
    scores[1, 2] = scores[2, 1] = 40.0
    scores[0, 1] = 7.0
    dist = TreeDistribution(scores.unsqueeze(0))
    walk = walkable_given_root(dist, torch.zeros(5, dtype=torch.long), torch.arange(1, 6))
    assert walk.tolist() == [True, True, False, False, False]
    assert not bool(walkable(dist, "wilson_marginal")[0])  # its expected draws, over r, are huge
    assert 1e-5 < float(dist.marginals[0, 0, 3:].sum()) < 1e-2
    with work.counting() as done:
        heads = sample(dist, (DRAWS,), method="wilson_marginal", generator=torch.Generator().manual_seed(21))
    assert_fits(heads, scores.unsqueeze(0), torch.tensor([5]), True)
    assert done["walk_steps"] < 2 * WALK_BUDGET * 5 * DRAWS


def test_walk_step_underflow_names_the_real_problem():
    """A word whose best head by ~1e4 nats is ROOT: Wilson-Marginal's walks (no ROOT arcs)
    see weight 0 for all its other heads in float64. Called directly, the walk says so (not
    'no tree'); through sample(), the sentence never walks."""
    scores = torch.zeros(1, 4, 4, dtype=torch.float64)
    scores[0, 0, :] = 1e4  # every word prefers ROOT by 1e4 nats: only one can have it
    dist = TreeDistribution(scores)
    assert torch.isfinite(dist.log_partition).all()
    with pytest.raises(ValueError, match=r"weight 0 in float64.*colbourn"):
        wilson_marginal(dist, 4, torch.Generator().manual_seed(0))
    assert not bool(walkable(dist, "wilson_marginal")[0])
    assert not walkable_given_root(dist, torch.zeros(3, dtype=torch.long), torch.arange(1, 4)).any()
    heads = sample(dist, (50,), method="wilson_marginal", generator=torch.Generator().manual_seed(0))
    assert torch.isfinite(dist.log_prob(heads)).all()
    with pytest.raises(ValueError, match=r"no possible head in sentence\(s\) \[0\]"):
        wilson_multi_root(TreeDistribution(torch.full((1, 3, 3), -torch.inf), single_root=False), 2)


# ---------------------------------------------------------------- the trapped-words path
def test_unsettled_reduction_equals_the_full_reduction():
    """unsettled_conditionals (only the fixed trapped words that may not reach ROOT enter a
    small chain) gives the conditionals of the full GTH on the trace (trapped_conditionals),
    state by state, along real draws."""
    scores, lengths = peaked_batch(1000.0, (24, 8))
    for single_root in (True, False):
        dist = TreeDistribution(scores, lengths, single_root=single_root)
        setup = TrappedSetup(dist, torch.arange(2))
        state = TrappedModel(setup, torch.arange(2).repeat(200))
        gen = torch.Generator().manual_seed(16)
        checked = 0
        for t in range(state.first_step, state.words + 1):
            active = state.active(t)
            if not bool(active.any()):
                continue
            probs = state.probs(t)
            if t >= 2:  # (word 1 of the trapped words has no fixed ones before it)
                rows = active.nonzero().squeeze(-1)
                group = state.group[rows]
                full = trapped_conditionals(setup.groups, group, state.fixed[rows], t)
                fewer = unsettled_conditionals(setup.groups, group, state.fixed[rows], state.reaches[rows], t, 1e-20)
                torch.testing.assert_close(fewer, full, rtol=1e-9, atol=1e-12)
                torch.testing.assert_close(probs[rows], full, rtol=1e-9, atol=1e-12)
                checked += rows.numel()
            head, _ = colbourn_module.draw_positive(probs, gen)
            state.fix(t, head, active)
        assert checked > 0


def test_drift_is_refactorised_once_and_stays_exact(monkeypatch):
    """Conditionals that fail the sum check come from the engine for that word, and the row's
    inverse is then refactorised (one LU), not taken from the engine at every later word.
    Forced here with a zero tolerance on a well-conditioned batch: still exact."""
    monkeypatch.setattr(colbourn_module, "SUM_TOLERANCE", 0.0)
    gen = torch.Generator().manual_seed(17)
    scores = torch.randn(2, 5, 5, generator=gen, dtype=torch.float64) * 1.5
    lengths = torch.tensor([4, 3])
    dist = TreeDistribution(scores, lengths)
    with work.counting() as done:
        heads = sample(dist, (DRAWS,), method="colbourn", generator=gen)
    assert_fits(heads, scores, lengths, True)
    assert done["refactorisations"] <= 2 * DRAWS * 4  # at most one per row and word


# ---------------------------------------------------------------- work bounds (counted)
def documented_bound(counted, batch: int, samples: int, n: int, searches: bool = False) -> None:
    """The bound of :mod:`spacy_treexp.engine.sampling`'s docstring, for B sentences of at most
    n words and S samples (or k trees): L-hat factorisations at most B + B n + 2 B S (the
    sentences, their (sentence, root child) pairs, the conditioned sentences and refactorised
    rows); engine refactorisations none for independent draws, at most B S n for the searches
    (:func:`.sample_without_replacement` on prefixes of negligible probability); trapped-word
    work at most B S n^3 and setup work B n (n+1)^3; Wilson's draws at most 2 WALK_BUDGET n per
    tree (twice their expectation's bound: a sum over many trees)."""
    assert counted["refactorisations"] <= (batch * samples * n if searches else 0), dict(counted)
    assert counted["factorisations"] <= batch + batch * n + 2 * batch * samples, dict(counted)
    assert counted["trapped_nodes"] <= batch * samples * n**3, dict(counted)
    assert counted["setup_nodes"] <= batch * n * (n + 1) ** 3, dict(counted)
    assert counted["walk_steps"] <= 2 * WALK_BUDGET * n * batch * samples, dict(counted)


@pytest.mark.parametrize("scale", [1.0, 30.0, 100.0, 1000.0, 1e4])
@pytest.mark.parametrize("method", ["colbourn", "wilson_marginal", "wilson_reject", "sbs", "trie"])
def test_every_sampler_does_bounded_work_at_every_scale(scale, method):
    n, batch, samples = 16, 3, 30
    gen = torch.Generator().manual_seed(18)
    scores = torch.randn(batch, n + 1, n + 1, generator=gen, dtype=torch.float64) * scale
    dist = TreeDistribution(scores, torch.tensor([16, 12, 9]))
    dist.marginals  # inference is the engine's, not the sampler's
    with work.counting() as done:
        if method in ("sbs", "trie"):
            heads, _ = sample_without_replacement(dist, samples, method=method, generator=gen)
        else:
            heads = sample(dist, (samples,), method=method, generator=gen)
    documented_bound(done, batch, samples, n, searches=method in ("sbs", "trie"))
    valid = heads[:, :, 1] >= 0
    assert torch.isfinite(dist.log_prob(heads)[valid]).all()


def test_multi_root_wilson_does_bounded_work_at_every_scale():
    n, batch, samples = 16, 3, 30
    for scale in (1.0, 100.0, 1e4):
        gen = torch.Generator().manual_seed(19)
        scores = torch.randn(batch, n + 1, n + 1, generator=gen, dtype=torch.float64) * scale
        dist = TreeDistribution(scores, single_root=False)
        with work.counting() as done:
            heads = sample(dist, (samples,), method="wilson", generator=gen)
        documented_bound(done, batch, samples, n)
        assert torch.isfinite(dist.log_prob(heads)).all()


@pytest.mark.parametrize("method", ["colbourn", "sbs"])
def test_per_sentence_generators_keep_a_peaked_sentences_trees_in_any_batch(method):
    """One generator per sentence: a peaked sentence (trapped-words path) gets the same trees
    alone as beside a longer, easy sentence (which pads it)."""
    peaked, _ = peaked_batch(1000.0, (24,))
    easy = torch.randn(1, 8, 8, generator=torch.Generator().manual_seed(22), dtype=torch.float64)
    together = torch.full((2, 8, 8), 0.0, dtype=torch.float64)
    together[0], together[1, :6, :6] = easy[0], peaked[0]
    batch = TreeDistribution(together, torch.tensor([7, 5]))
    alone = TreeDistribution(peaked)

    def draw(dist, seeds):
        generators = [torch.Generator().manual_seed(seed) for seed in seeds]
        if method == "sbs":
            return sample_without_replacement(dist, 6, method="sbs", generator=generators)[0]
        return sample(dist, (40,), method="colbourn", generator=generators)

    mine = draw(alone, [31])[:, 0]
    in_batch = draw(batch, [30, 31])[:, 1, :6]
    assert torch.equal(mine, in_batch)


# ---------------------------------------------------------------- the beam kernel's exact conditionals
def chain_ends(heads: list[int], size: int) -> list[int]:
    """The beam kernel's ``end``: where each node's chain of fixed heads ends (ROOT: size)."""
    ends = []
    for v in range(size):
        x = v
        while x != 0 and heads[x] >= 0:
            x = heads[x]
        ends.append(size if x == 0 else x)
    return ends


@pytest.mark.parametrize("scale", [1.0, 100.0, 1000.0])
@pytest.mark.parametrize("seed", [8, 24])
def test_exact_conditionals_are_the_enumerated_conditionals(scale, seed):
    """:func:`.fused_kernels.exact_conditionals` (the log-space last-exit reduction the beam
    kernel falls back on) gives each word's head distribution given the heads of the words
    before it, as enumeration does (multi-root, every prefix of the likeliest trees)."""
    pytest.importorskip("numba")
    import numpy as np

    from spacy_treexp.engine.sampling import fused_kernels

    scores, _ = peaked_batch(scale, (seed,))
    scores[0, 3, 2] = -torch.inf  # a masked arc
    n, size = 5, 6
    trees, log_probs = tree_log_probs(scores[0], n, False)
    grid = np.ascontiguousarray(scores.numpy())
    probs = np.zeros((1, size))
    chain, reach, leave = np.empty((size, size)), np.empty(size), np.empty(size)
    checked = 0
    for tree in trees[log_probs.argsort(descending=True)[:8]].tolist():
        for m in range(1, n + 1):
            prefix = [-1] + [tree[v] if v < m else -1 for v in range(1, size)]
            end = np.array([chain_ends(prefix, size)], dtype=np.int64)
            total = fused_kernels.exact_conditionals(grid, 0, end, probs, 0, m, n, size, chain, reach, leave)
            agree = (trees[:, 1:m] == torch.tensor(tree[1:m])).all(-1)
            expected = torch.zeros(size, dtype=torch.float64)
            weights = (log_probs[agree] - log_probs[agree].max()).exp()
            expected.index_add_(0, trees[agree, m], weights)
            expected /= expected.sum()
            assert total == 1.0
            assert torch.allclose(torch.from_numpy(probs[0].copy()), expected, rtol=1e-9, atol=1e-300)
            checked += 1
    assert checked == 8 * n


@pytest.mark.parametrize("scale", [100.0, 1000.0])
@pytest.mark.parametrize("single_root", [True, False])
def test_peaked_sbs_with_exact_conditionals_everywhere_keeps_its_law(monkeypatch, scale, single_root):
    """SBS's fused word steps on peaked sentences with every beam on the exact log-space
    conditionals (as if no conditioned L-hat were trusted): the first two draws have the
    law of draws without replacement, and on a ragged batch the first draw fits p."""
    pytest.importorskip("numba")
    from spacy_treexp.engine.sampling import without_replacement

    monkeypatch.setattr(without_replacement, "CONDITIONED_ERROR", -1.0)  # no L-hat trusted
    scores, _ = peaked_batch(scale, (24,))
    dist = TreeDistribution(scores.expand(DRAWS // 2, -1, -1), single_root=single_root)
    heads, log_probs = sample_without_replacement(dist, 2, method="sbs", generator=torch.Generator().manual_seed(7))
    first_two_law(heads, scores[0], 5, single_root)
    assert torch.equal(log_probs, dist.log_prob(heads))
    scores, lengths = peaked_batch(scale)
    copies = DRAWS // 4
    ragged = TreeDistribution(scores.repeat(copies, 1, 1), lengths.repeat(copies), single_root=single_root)
    heads, _ = sample_without_replacement(ragged, 3, method="sbs", generator=torch.Generator().manual_seed(8))
    assert_fits(heads[0].view(copies, 2, -1), scores, lengths, single_root)


def test_peaked_sbs_sentences_the_kernel_flags_are_searched_again_in_torch(monkeypatch):
    """A peaked sentence whose fused word steps fail is searched again whole by the torch
    steps, with the same law."""
    pytest.importorskip("numba")
    from spacy_treexp.engine.sampling import fused

    original = fused.beam_search_from

    def failing(*args, **kwargs):
        heads, failed = original(*args, **kwargs)
        failed[::3] = True
        return heads, failed

    monkeypatch.setattr(fused, "beam_search_from", failing)
    scores, _ = peaked_batch(100.0, (24,))
    dist = TreeDistribution(scores.expand(DRAWS // 2, -1, -1))
    heads, _ = sample_without_replacement(dist, 2, method="sbs", generator=torch.Generator().manual_seed(9))
    first_two_law(heads, scores[0], 5, True)


def test_peaked_sbs_gives_the_same_trees_on_any_thread_count(monkeypatch):
    """The fused word steps of peaked sentences split the batch over threads: a seed gives
    the same trees on one thread and on two, as many per sentence as the torch search finds
    (at x1000 some sentences have fewer than k trees of probability above 0 in float64)."""
    pytest.importorskip("numba")
    scores, lengths = peaked_batch(1000.0, (8, 19, 24, 27))
    dist = TreeDistribution(scores, torch.tensor([5, 4, 5, 3]))
    found = []
    threads = torch.get_num_threads()
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            found.append(sample_without_replacement(dist, 6, method="sbs", generator=torch.Generator().manual_seed(4)))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(found[0][0], found[1][0])
    monkeypatch.setenv("SPACY_TREEXP_NATIVE", "0")
    reference, _ = sample_without_replacement(dist, 6, method="sbs", generator=torch.Generator().manual_seed(4))
    assert torch.equal((found[0][0][:, :, 1] >= 0).sum(0), (reference[:, :, 1] >= 0).sum(0))
