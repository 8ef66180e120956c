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
    original = without_replacement._beam_steps

    def counted(state, lengths, *args, **kwargs):
        rounds.append(lengths.numel())
        return original(state, lengths, *args, **kwargs)

    added = []
    add = colbourn.TrappedSetup._add

    def adding(self, sentence, root_child):
        added.append(sentence.numel())
        return add(self, sentence, root_child)

    monkeypatch.setattr(without_replacement, "_beam_steps", counted)
    monkeypatch.setattr(colbourn.TrappedSetup, "_add", adding)
    heads, log_probs = sample_without_replacement(dist, 4, method="sbs", generator=torch.Generator().manual_seed(3))
    first_three_law(heads, scores, 5)
    assert torch.equal(log_probs, dist.log_prob(heads))
    assert (log_probs > -torch.inf).all()
    for i in range(4):
        for j in range(i):
            assert ((heads[i] != heads[j]).any(-1)).all()
    assert len(rounds) == 2 and rounds[1] > 0  # round 2 ran (where another root child may win)
    # 20 peaked sentences of 12 words: most of the k root children's subtrees are never searched
    scores = torch.randn(20, 13, 13, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * scale
    dist = TreeDistribution(scores)
    trapped = int(colbourn.Prepared.of(dist).trapped().sum())
    added.clear()
    heads, log_probs = sample_without_replacement(dist, 6, method="sbs", generator=torch.Generator().manual_seed(4))
    assert trapped > 10 and sum(added) < 5 * trapped  # the search before the rounds set up 6 a sentence
    assert torch.equal(log_probs, dist.log_prob(heads))


@pytest.mark.parametrize("scale", [30.0, 100.0, 1000.0])
def test_fused_trapped_conditionals_are_the_torch_models(scale):
    """_FusedTrapped.probs (unsettled states by trapped_kernels.unsettled_rows) against
    TrappedModel.probs (unsettled_conditionals in torch), step by step along the same draws
    (any possible head, so that many states are unsettled)."""
    gen = torch.Generator().manual_seed(41)
    scores = torch.randn(6, 13, 13, generator=gen, dtype=torch.float64) * scale
    dist = TreeDistribution(scores, torch.tensor([12, 12, 9, 12, 11, 12]))
    setup = colbourn.TrappedSetup(dist, torch.arange(6))
    rows = torch.arange(6).repeat(40)
    fused, reference = without_replacement._FusedTrapped(setup, rows), colbourn.TrappedModel(setup, rows)
    draws = torch.Generator().manual_seed(7)
    unsettled = 0
    for t in range(0, fused.words + 1):
        active = reference.active(t)
        if not bool(active.any()):
            continue
        expected, found = reference.probs(t), fused.probs(t)
        assert torch.allclose(found, expected, rtol=1e-9, atol=1e-300)
        if t >= 1:
            unsettled += int((active & (reference.horizon >= t)).sum())
        # any possible head, uniformly (unlikely heads leave the states unsettled)
        possible = (expected > 0).double()
        possible[:, 0] += possible.sum(-1) == 0
        choice = torch.multinomial(possible, 1, generator=draws)
        for model in (fused, reference):
            model.fix(t, choice.squeeze(-1), active)
    assert unsettled > 0
