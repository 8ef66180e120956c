"""``sampler="auto"``: each sentence by Wilson's walks or Colbourn's sampler, chosen from the
scores alone. The mixture must be exact (chi-square against enumeration, p < 1e-3 with
fixed seeds, as in test_sampling.py), also on peaked scores, and the choice must follow the
cost model. No timing here: ``benchmarks/bench_sampling.py --section auto`` measures it."""

from __future__ import annotations

import pytest
import torch
from helpers.goodness_of_fit import assert_fits

from spacy_treexp import TreeDistribution
from spacy_treexp.annotate.options import AnnotateOptions
from spacy_treexp.engine.native import NATIVE_ENV, numba_installed
from spacy_treexp.engine.sampling import auto, sample, work
from spacy_treexp.engine.sampling.wilson import WALK_BUDGET

DRAWS = 20_000


def mixed_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Sentence 0: parser-like (a tree's arcs +3 over N(0, 1)), short walks; sentence 1 (padded,
    n = 4): random; sentence 2: words 1, 2 and 3, 4 each other's best heads by 40 (walks
    circle them ~e^40 times: never walked)."""
    gen = torch.Generator().manual_seed(31)
    scores = torch.randn(3, 6, 6, generator=gen, dtype=torch.float64)
    for head, dep in ((0, 2), (2, 1), (2, 4), (4, 3), (4, 5)):
        scores[0, head, dep] += 3.0
    scores[2, 1, 2] = scores[2, 2, 1] = scores[2, 3, 4] = scores[2, 4, 3] = 40.0
    return scores, torch.tensor([5, 4, 5])


@pytest.fixture
def walks_are_cheap(monkeypatch):
    """At n <= 5 Colbourn's sampler is always predicted cheaper; these constants make the
    walks cheaper instead, so that the tests see both samplers in one batch."""
    monkeypatch.setattr(auto, "WALK_FIXED", 0.0)
    monkeypatch.setattr(auto, "FIRST_N2", 0.0)
    monkeypatch.setattr(auto, "PAIR_N2", 0.0)
    monkeypatch.setattr(auto, "PAIR_N3", 0.0)
    monkeypatch.setattr(auto, "STEP_BASE", 1e-4)
    monkeypatch.setattr(auto, "STEP_LOG", 0.0)
    for name in ("ROUND_BASE", "ROUND_LOG", "TAIL", "WALK_CALL", "SHORT_FIXED", "SHORT_N3"):
        monkeypatch.setattr(auto, name, 0.0)


@pytest.mark.parametrize("single_root", [True, False])
def test_the_mix_of_walks_and_colbourn_fits_the_tree_distribution(walks_are_cheap, single_root):
    scores, lengths = mixed_batch()
    dist = TreeDistribution(scores, lengths, single_root=single_root)
    assert auto.walk_or_not(dist, DRAWS).tolist() == [True, True, False]
    with work.counting() as done:
        heads = sample(dist, (DRAWS,), method="auto", generator=torch.Generator().manual_seed(32))
    assert done["walk_steps"] > 0 and done["factorisations"] >= 1  # both samplers ran
    assert_fits(heads, scores, lengths, single_root)


@pytest.mark.parametrize("single_root", [True, False])
def test_auto_on_small_sentences_is_colbourn_and_fits(single_root):
    """With the measured constants a 5-word sentence goes to Colbourn (cheaper there)."""
    scores, lengths = mixed_batch()
    dist = TreeDistribution(scores, lengths, single_root=single_root)
    assert not auto.walk_or_not(dist, DRAWS).any()
    with work.counting() as done:
        heads = sample(dist, (DRAWS,), method="auto", generator=torch.Generator().manual_seed(33))
    assert done["walk_steps"] == 0
    assert_fits(heads, scores, lengths, single_root)


@pytest.mark.parametrize("scale", [10.0, 100.0])
def test_auto_fits_peaked_scores(walks_are_cheap, scale):
    """scale * integers 0..2 + N(0, 1) (near-ties at the top, strongly bound cycles)."""
    scores = torch.zeros(2, 6, 6, dtype=torch.float64)
    for b, seed in enumerate((8, 24)):
        gen = torch.Generator().manual_seed(seed)
        scores[b] = scale * torch.randint(0, 3, (6, 6), generator=gen).double()
        scores[b] += torch.randn(6, 6, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([5, 4])
    dist = TreeDistribution(scores, lengths)
    heads = sample(dist, (DRAWS,), method="auto", generator=torch.Generator().manual_seed(int(scale)))
    assert_fits(heads, scores, lengths, True)


@pytest.mark.parametrize("single_root", [True, False])
def test_per_sentence_generators_fit_and_do_not_depend_on_the_batch(walks_are_cheap, single_root):
    """One generator per sentence: each sentence's trees are those it gets alone (walked or
    not), and the mix still fits."""
    scores, lengths = mixed_batch()
    dist = TreeDistribution(scores, lengths, single_root=single_root)
    assert auto.walk_or_not(dist, DRAWS, alone=True).tolist() == [True, True, False]
    heads = sample(dist, (DRAWS,), method="auto", generator=[torch.Generator().manual_seed(s) for s in (1, 2, 3)])
    assert_fits(heads, scores, lengths, single_root)
    for b, seed in ((1, 2), (2, 3)):
        n = int(lengths[b])
        alone = TreeDistribution(scores[b : b + 1, : n + 1, : n + 1], single_root=single_root)
        own = sample(alone, (DRAWS,), method="auto", generator=[torch.Generator().manual_seed(seed)])
        assert torch.equal(own[:, 0], heads[:, b, : n + 1])


def test_the_choice_follows_the_cost_model(monkeypatch):
    """Longer easy sentences walk, strongly bound ones never do; the same scores give the
    same choice (it reads the scores, not a draw). Against Colbourn's torch loop here; its
    fused kernel (next test) is faster."""
    monkeypatch.setenv(NATIVE_ENV, "0")
    gen = torch.Generator().manual_seed(34)
    n = 40
    scores = torch.randn(2, n + 1, n + 1, generator=gen, dtype=torch.float64)
    scores[1, 1, 2] = scores[1, 2, 1] = 40.0
    dist = TreeDistribution(scores)
    walk = auto.walk_or_not(dist, 100)
    assert walk.tolist() == [True, False]
    steps, _, _ = auto.walk_features(dist, 100)
    assert steps[0] <= WALK_BUDGET * n < steps[1]
    walks, colbourn = auto.predicted_costs(dist, 100)
    assert walks[0] < colbourn[0]
    assert auto.walk_or_not(TreeDistribution(scores), 100).tolist() == walk.tolist()


def test_the_choice_prices_colbourns_fused_kernel(monkeypatch):
    """With the fused kernel Colbourn's predicted cost per tree drops (about 8x at n = 40),
    and a random sentence walks only where its walks are still predicted cheaper by the
    margin."""
    if not numba_installed():
        pytest.skip("needs numba (the fused kernels)")
    gen = torch.Generator().manual_seed(34)
    n = 40
    dist = TreeDistribution(torch.randn(2, n + 1, n + 1, generator=gen, dtype=torch.float64))
    lengths = torch.tensor([n])
    monkeypatch.setenv(NATIVE_ENV, "0")
    slow = auto.colbourn_cost(lengths)
    monkeypatch.setenv(NATIVE_ENV, "1")
    fast = auto.colbourn_cost(lengths)
    assert fast < slow / 4
    walks, colbourn = auto.predicted_costs(dist, 100)
    chosen = auto.walk_or_not(dist, 100)
    assert not bool((chosen & (walks * (1 + auto.MARGIN) >= colbourn)).any())


def test_auto_is_an_option_everywhere():
    assert AnnotateOptions(sampler="auto").sampler == "auto"
    with pytest.raises(ValueError, match="cannot sample without replacement"):
        AnnotateOptions(sampler="auto", without_replacement=True)
    dist = TreeDistribution(torch.randn(2, 4, 4, dtype=torch.float64))
    assert dist.sample((3,), method="auto", generator=torch.Generator().manual_seed(0)).shape == (3, 2, 4)


def test_the_quick_estimate_matches_the_matrix_powers():
    """short_cycle_steps takes P^3 and P^4's diagonals from one product (float32): the same as
    summing the diagonals of P^2, P^3, P^4 by explicit float64 powers of the walk matrix."""
    gen = torch.Generator().manual_seed(35)
    scores = torch.randn(3, 9, 9, generator=gen, dtype=torch.float64) * torch.tensor([1.0, 2.0, 4.0]).view(3, 1, 1)
    lengths = torch.tensor([8, 6, 8])
    dist = TreeDistribution(scores, lengths)
    steps, most = auto.short_cycle_steps(dist)
    for b in range(3):
        n = int(lengths[b])
        weights = scores[b, : n + 1, : n + 1].exp().fill_diagonal_(0.0)  # no self-loops
        end = int((weights[0, 1:] / weights[:, 1:].sum(0)).argmax())  # the word that most prefers ROOT
        words = weights[1:, 1:]
        walk = (words / words.sum(0, keepdim=True)).T.clone()  # [v, u]: P(v -> u)
        walk[end] = 0.0
        back = sum(torch.linalg.matrix_power(walk, k).diagonal() for k in (2, 3, 4))
        visits = torch.where(torch.arange(n) != end, 1 / (1 - back.clamp(max=1.0)), 0.0)
        assert steps[b].item() == pytest.approx(visits.sum().item(), rel=1e-4)
        assert most[b].item() == pytest.approx(visits.max().item(), rel=1e-4)
    # on some sentences only, in their own padding: the same values, inf for the others
    part_steps, part_most = auto.short_cycle_steps(dist, torch.tensor([1]))
    assert part_steps[1].item() == pytest.approx(steps[1].item(), rel=1e-5)
    assert part_most[1].item() == pytest.approx(most[1].item(), rel=1e-5)
    assert torch.isinf(part_steps[[0, 2]]).all() and torch.isinf(part_most[[0, 2]]).all()


def test_no_analysis_where_it_cannot_pay(monkeypatch):
    """Short sentences: Colbourn's tree costs less than the walks' first pointers, so the
    analysis (its quick estimate, its LUs) is not run at all; the walks priced cheap, it is."""

    def analysed(dist, index=None):
        raise AssertionError("the quick estimate ran")

    dist = TreeDistribution(torch.randn(4, 8, 8, dtype=torch.float64))
    monkeypatch.setattr(auto, "short_cycle_steps", analysed)
    assert not auto.walk_or_not(dist, 100).any()
    assert not auto.walk_or_not(dist, 100, alone=True).any()
    for name in ("WALK_FIXED", "FIRST_N2", "PAIR_N2", "PAIR_N3", "ROUND_BASE", "ROUND_LOG", "WALK_CALL", "SHORT_FIXED"):
        monkeypatch.setattr(auto, name, 0.0)
    with pytest.raises(AssertionError, match="quick estimate ran"):
        auto.walk_or_not(dist, 100)


def test_unlikely_root_children_lengthen_the_rounds():
    """The rounds' tail (auto.TAIL) counts the sentences likely to draw a ROOT child that is
    not analysed ahead: none where one child takes every draw, about one where the draws
    spread over many; and the predicted rounds grow with it."""
    n, samples = 12, 100
    certain = torch.full((1, n + 1, n + 1), -5.0, dtype=torch.float64)
    certain[0, 0, 3] = 30.0  # word 3 is the ROOT child
    spread = torch.randn(1, n + 1, n + 1, generator=torch.Generator().manual_seed(36), dtype=torch.float64) * 0.1
    events = []
    for scores in (certain, spread):
        mu = TreeDistribution(scores).marginals[:, 0, :].double()
        unlikely = mu[0].sort(descending=True).values[auto.ROOT_CHILDREN :].sum() * samples
        found = auto.rare_events(mu, samples)
        assert found.item() == pytest.approx(1 - torch.exp(-unlikely).item(), rel=1e-9)
        events.append(found)
    assert events[0].item() < 1e-6 and events[1].item() > 0.99
    one = torch.tensor([2.0], dtype=torch.float64)
    assert bool(auto.expected_rounds(one, events[1], samples) > auto.expected_rounds(one, events[0], samples))


def test_the_checks_of_unlikely_root_children_are_priced_before_they_are_paid(monkeypatch):
    """The analysis checks each likely ROOT child's walk by an LU; beyond a sentence's likeliest
    child those LUs are priced ahead: a sentence whose ROOT children spread over four is not
    analysed where its quick saving is below their cost, one with a certain child still is."""
    for name in ("WALK_FIXED", "FIRST_N2", "PAIR_N3", "STEP_LOG", "ROUND_BASE", "ROUND_LOG", "TAIL", "WALK_CALL"):
        monkeypatch.setattr(auto, name, 0.0)
    for name in ("SHORT_FIXED", "SHORT_N3", "MARGIN"):
        monkeypatch.setattr(auto, name, 0.0)
    monkeypatch.setattr(auto, "STEP_BASE", 1e-9)
    gen = torch.Generator().manual_seed(37)
    scores = torch.randn(2, 6, 6, generator=gen, dtype=torch.float64) * 0.1
    scores[0, 0, 3] = 30.0  # sentence 0: word 3 is the ROOT child
    scores[1, 0, 5] = -30.0  # sentence 1: words 1-4 alike as ROOT children, word 5 never
    dist = TreeDistribution(scores)
    samples = 100
    mu = dist.marginals[:, 0, :].double()
    assert auto.likely_children(mu, samples).sum(-1).tolist() == [1, 4]
    saved = float(auto.colbourn_cost(dist.lengths)[0]) * samples  # per sentence, walks all but free
    pairs = (1 - (1 - mu) ** samples).sum(-1)  # about 1 and 4 LUs in the walks
    analysed = []
    original = auto.root_children_walks

    def recorded(dist, index, num_samples):
        analysed.append(index.tolist())
        return original(dist, index, num_samples)

    monkeypatch.setattr(auto, "root_children_walks", recorded)
    # one LU costs saved / 5.5: sentence 1 saves ~ saved - 4 LUs, below its 3 extra LUs
    monkeypatch.setattr(auto, "PAIR_N2", saved / 5.5 / 25)
    assert float(saved - pairs[1] * saved / 5.5) < 3 * saved / 5.5
    auto.walk_or_not(dist, samples)
    assert analysed == [[0]]
    # LUs cheap enough (saved / 10: sentence 1 saves ~0.6 saved, its 3 extra LUs cost 0.3)
    monkeypatch.setattr(auto, "PAIR_N2", saved / 10 / 25)
    analysed.clear()
    auto.walk_or_not(dist, samples)
    assert analysed == [[0, 1]]
