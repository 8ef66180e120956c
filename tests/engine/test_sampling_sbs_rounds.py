"""Stochastic beam search on peaked single-root sentences, searched root child by root child
(without_replacement._trapped_rounds), and its fused unsettled states (_FusedTrapped).

The rounds must keep the law of draws without replacement: the ordered first three draws
are checked against enumeration (n = 5, float64) by chi-square, on graphs where several root
children hold likely trees (so that the second round runs), and the work they save (groups
set up) is counted, never timed.
"""

from __future__ import annotations

import pytest
import torch
from helpers.enumerate_trees import tree_log_probs
from helpers.goodness_of_fit import ALPHA, chi_square_p, codes

from spacy_treexp import TreeDistribution
from spacy_treexp.engine.native import NATIVE_ENV
from spacy_treexp.engine.sampling import colbourn, sample_without_replacement, without_replacement

pytest.importorskip("numba")

DRAWS = 12_000


def peaked(scale: float, seed: int) -> torch.Tensor:
    """n = 5: scale * integers 0..2 + N(0, 1), ROOT's arcs near-tied (several root children
    keep likely trees)."""
    gen = torch.Generator().manual_seed(seed)
    scores = scale * torch.randint(0, 3, (6, 6), generator=gen).double() + torch.randn(6, 6, generator=gen).double()
    scores[0, 1:] = torch.randn(5, generator=gen).double()
    return scores


def first_three_law(heads: torch.Tensor, scores: torch.Tensor, n: int) -> None:
    """Ordered draws a, b, c: p(a) p(b) / (1 - p(a)) p(c) / (1 - p(a) - p(b)), over the 12
    likeliest trees (any triple with another tree pooled in one cell)."""
    trees, log_probs = tree_log_probs(scores, n, True)
    probs = log_probs.exp()
    top = probs.argsort(descending=True)[:12]
    p = probs[top]
    m = top.numel()
    a, b, c = torch.meshgrid(torch.arange(m), torch.arange(m), torch.arange(m), indexing="ij")
    distinct = (a != b) & (a != c) & (b != c)
    law = p[a] * p[b] / (1 - p[a]) * p[c] / (1 - p[a] - p[b]).clamp_min(1e-300)
    law = torch.where(distinct, law, 0.0).reshape(-1)
    categories = torch.cat([torch.arange(m**3), torch.tensor([-1])])
    law = torch.cat([law, (1 - law.sum()).clamp_min(0).reshape(1)])
    index = {int(code): i for i, code in enumerate(codes(trees[top], n).tolist())}
    drawn = [codes(heads[i], n).tolist() for i in range(3)]
    observed = torch.tensor(
        [
            index[x] * m * m + index[y] * m + index[z] if x in index and y in index and z in index else -1
            for x, y, z in zip(*drawn)
        ]
    )
    assert chi_square_p(observed, categories, law) > ALPHA


@pytest.mark.parametrize("scale", [100.0, 1000.0])
def test_sbs_rounds_keep_the_law_of_draws_without_replacement(monkeypatch, scale):
    """k = 4 on copies of one peaked sentence whose trapped path runs: the ordered first three
    draws have their law, the k trees are distinct with exact log-probabilities, the second
    round ran; on longer peaked sentences, far fewer groups are set up than k per sentence."""
    scores = peaked(scale, 8)
    dist = TreeDistribution(scores.expand(DRAWS, -1, -1).clone())
    assert bool(colbourn.Prepared.of(dist).trapped().all())
    rounds = []
    original = without_replacement._trapped_beams

    def counted(state, k, generator, gumbel, log_p, floor=None):
        rounds.append(gumbel.shape[0])
        return original(state, k, generator, gumbel, log_p, floor)

    added = []
    add = colbourn.TrappedSetup._add

    def adding(self, sentence, root_child):
        added.append(sentence.numel())
        return add(self, sentence, root_child)

    monkeypatch.setattr(without_replacement, "_trapped_beams", counted)
    monkeypatch.setattr(colbourn.TrappedSetup, "_add", adding)
    heads, log_probs = sample_without_replacement(dist, 4, method="sbs", generator=torch.Generator().manual_seed(3))
    first_three_law(heads, scores, 5)
    assert torch.equal(log_probs, dist.log_prob(heads))
    assert (log_probs > -torch.inf).all()
    for i in range(4):
        for j in range(i):
            assert ((heads[i] != heads[j]).any(-1)).all()
    assert len(rounds) >= 2 and rounds[1] > 0  # round 2 ran (where another root child may win)
    # 20 peaked sentences of 12 words: most of the k root children's subtrees are never searched
    scores = torch.randn(20, 13, 13, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * scale
    dist = TreeDistribution(scores)
    trapped = int(colbourn.Prepared.of(dist).trapped().sum())
    added.clear()
    heads, log_probs = sample_without_replacement(dist, 6, method="sbs", generator=torch.Generator().manual_seed(4))
    assert trapped > 10 and sum(added) < 5 * trapped  # the search before the rounds set up 6 a sentence
    assert torch.equal(log_probs, dist.log_prob(heads))


@pytest.mark.parametrize("floored", [False, True])
@pytest.mark.parametrize("single_root", [True, False])
@pytest.mark.parametrize("scale", [30.0, 100.0, 1000.0])
def test_trapped_beams_kernel_follows_the_torch_model(monkeypatch, scale, single_root, floored):
    """The kernel's trapped-word beams (trapped_kernels.trapped_beams) against TrappedModel (the
    torch reference, unsettled states by unsettled_conditionals): each beam's log-probability is
    the sum of the torch model's conditionals along its heads, its states (reaches, horizon)
    are the torch model's, the beams are distinct, sorted, and each keeps its own Gumbel below
    its parent's (here the root child's); with a floor, every beam is above it."""
    gen = torch.Generator().manual_seed(41)
    scores = torch.randn(6, 13, 13, generator=gen, dtype=torch.float64) * scale
    lengths = torch.tensor([12, 12, 9, 12, 11, 12])
    dist = TreeDistribution(scores, lengths, single_root=single_root)
    setup = colbourn.TrappedSetup(dist, torch.arange(6))
    k = 8
    rows = torch.arange(6).repeat_interleave(k)
    state = colbourn.TrappedModel(setup, rows)
    start = torch.full((6, k), -torch.inf, dtype=torch.float64)
    start_log_p = start.clone()
    if single_root:  # beam i on the i-th likeliest root child, Gumbel = its log-probability
        root = setup.root.log()
        start, child = root[:, 1:].topk(k, -1)
        child = child + 1
        start_log_p = start.clone()
        state.fix(0, child.reshape(-1), torch.ones(6 * k, dtype=torch.bool))
    else:
        start[:, 0] = start_log_p[:, 0] = 0.0
    floor = None
    if floored:  # (the beams given start above it: a floor drops children)
        floor = start.amax(-1) - 8.0
        start = torch.where(start > floor.unsqueeze(-1), start, -torch.inf)
        start_log_p = torch.where(start > -torch.inf, start_log_p, -torch.inf)
    gumbel, log_p = without_replacement._trapped_beams(
        state, k, torch.Generator().manual_seed(5), start, start_log_p, floor
    )
    alive = gumbel > -torch.inf
    if floor is not None:
        assert (gumbel[alive] > floor.unsqueeze(-1).expand_as(gumbel)[alive]).all()
    assert alive.sum() > (5 if floored else 6) and (gumbel[:, 1:] <= gumbel[:, :-1]).all()
    assert (gumbel <= start.amax(-1, keepdim=True)).all()
    monkeypatch.setenv(NATIVE_ENV, "0")
    live = alive.view(-1).nonzero().squeeze(-1)
    replay = colbourn.TrappedModel(setup, rows[live])
    if single_root:
        replay.fix(0, state.root_child[live], torch.ones(live.numel(), dtype=torch.bool))
    expected = start_log_p.view(-1)[live].clone() if single_root else torch.zeros(live.numel(), dtype=torch.float64)
    if single_root:  # the root child each beam descends from
        expected = root[rows[live], state.root_child[live]]
    unsettled = 0
    for t in range(1, replay.words + 1):
        active = replay.active(t)
        if not bool(active.any()):
            continue
        unsettled += int((active & (replay.horizon >= t)).sum())
        probs = replay.probs(t)
        head = state.fixed[live, t - 1]
        step = (probs.gather(1, head.unsqueeze(-1)).squeeze(-1) / probs.sum(-1)).log()
        expected = torch.where(active, expected + step, expected)
        replay.fix(t, head, active)
    assert torch.allclose(log_p.view(-1)[live], expected, rtol=1e-9, atol=1e-9)
    assert torch.equal(replay.reaches, state.reaches[live]) and torch.equal(replay.horizon, state.horizon[live])
    assert unsettled > 0 or floored  # (a floor may leave only settled beams)
    for b in range(6):
        own = live[rows[live] == b]
        keys = torch.cat([state.root_child[own].unsqueeze(-1), state.fixed[own]], 1)
        assert torch.unique(keys, dim=0).shape[0] == own.numel()


def test_log_expm1_has_no_overflow():
    """trapped_kernels.log_expm1 against float64 where e^x - 1 is representable, and x itself
    far beyond (a child whose key is 800 nats above its beam's smallest)."""
    from spacy_treexp.engine.sampling import trapped_kernels

    for x in (1e-12, 1e-3, 0.5, 1.0, 2.0, 30.0, 700.0):
        exact = float(torch.tensor(x, dtype=torch.float64).expm1().log())
        assert trapped_kernels.log_expm1(x) == pytest.approx(exact, rel=1e-13)
    assert trapped_kernels.log_expm1(800.0) == 800.0 and trapped_kernels.log_expm1(5000.0) == 5000.0


def test_kernel_finds_the_trees_the_torch_search_finds_far_below_float64():
    """x1000 scores of 8 words, k = 50: trees whose probabilities are e^-1200 and below (out of
    float64's range, but reached through positive conditionals) are found by the kernel as by
    the torch search (their Gumbels are in log space: no child is lost to an overflow)."""
    gen = torch.Generator().manual_seed(0)
    for _ in range(4):
        scores = torch.randn(5, 9, 9, generator=gen, dtype=torch.float64) * 1000.0
    dist = TreeDistribution(scores[3:4, :6, :6])
    _, log_probs = sample_without_replacement(dist, 50, method="sbs", generator=torch.Generator().manual_seed(1))
    found = int((log_probs > -torch.inf).sum())
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(NATIVE_ENV, "0")
        _, reference = sample_without_replacement(dist, 50, method="sbs", generator=torch.Generator().manual_seed(1))
    assert found == int((reference > -torch.inf).sum()) > 13  # 13 trees are above e^-745
