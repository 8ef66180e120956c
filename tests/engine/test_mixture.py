"""TreeMixture against brute-force enumeration of every tree (n <= 6, float64): exact
marginals, log-probabilities, per-word head mutual information and expected entropy;
unbiased estimates of the sentence's mutual information and mixture entropy; exact samples
(chi-square goodness of fit at p < 1e-3 with fixed seeds)."""

from __future__ import annotations

import pytest
import torch
from helpers.enumerate_trees import all_trees, tree_log_probs
from helpers.goodness_of_fit import chi_square_p

from spacy_treexp.engine import TreeMixture
from spacy_treexp.engine.mixture import _choose_members

ALPHA = 1e-3


def member_scores(seed: int, batch: int = 2, k: int = 3, n: int = 4, scale: float = 1.5) -> torch.Tensor:
    """Random N(0, scale^2) member scores ``(B, K, n+1, n+1)`` that share a common part,
    as an ensemble's members do."""
    gen = torch.Generator().manual_seed(seed)
    common = torch.randn(batch, 1, n + 1, n + 1, generator=gen, dtype=torch.float64) * scale
    return common + torch.randn(batch, k, n + 1, n + 1, generator=gen, dtype=torch.float64) * scale


def enumerate_mixture(scores: torch.Tensor, weights: torch.Tensor, n: int, single_root: bool):
    """Trees ``(T, n+1)``, member log-probs ``(K, T)`` and mixture log-probs ``(T,)`` of one sentence."""
    trees = all_trees(n, single_root)
    member = torch.stack([tree_log_probs(s, n, single_root)[1] for s in scores])
    mixture = torch.logsumexp(member + weights.log()[:, None], dim=0)
    return trees, member, mixture


def marginals_of(trees: torch.Tensor, log_probs: torch.Tensor, n: int) -> torch.Tensor:
    """μ(h, m) ``(n+1, n+1)`` from enumerated trees and their log-probabilities."""
    mu = torch.zeros(n + 1, n + 1, dtype=torch.float64)
    for m in range(1, n + 1):
        mu[:, m].index_add_(0, trees[:, m], log_probs.exp())
    return mu


def entropy_of(log_probs: torch.Tensor) -> torch.Tensor:
    return -(log_probs.exp() * log_probs).sum()


def column_entropy(mu: torch.Tensor) -> torch.Tensor:
    return -torch.special.xlogy(mu, mu).sum(0)


CASES = [
    pytest.param(True, None, id="single-root-equal"),
    pytest.param(False, None, id="multi-root-equal"),
    pytest.param(True, torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64), id="single-root-weighted"),
    pytest.param(True, torch.tensor([0.5, 0.0, 0.5], dtype=torch.float64), id="zero-weight"),
]


@pytest.mark.parametrize("single_root, weights", CASES)
def test_exact_quantities_match_enumeration(single_root, weights):
    scores = member_scores(1, n=5)
    lengths = torch.tensor([5, 3])
    mixture = TreeMixture(scores, weights, lengths, single_root=single_root)
    w = weights if weights is not None else torch.full((3,), 1 / 3, dtype=torch.float64)
    for b, n in enumerate(lengths.tolist()):
        trees, member, mix = enumerate_mixture(scores[b, :, : n + 1, : n + 1], w, n, single_root)
        mu = marginals_of(trees, mix, n)
        torch.testing.assert_close(mixture.marginals[b, : n + 1, : n + 1], mu, rtol=0, atol=1e-10)
        member_mu = [marginals_of(trees, member[k], n) for k in range(3)]
        head_mi = column_entropy(mu) - sum(w[k] * column_entropy(member_mu[k]) for k in range(3))
        torch.testing.assert_close(mixture.head_mutual_information()[b, : n + 1], head_mi, rtol=0, atol=1e-9)
        torch.testing.assert_close(mixture.head_entropy()[b, : n + 1], column_entropy(mu), rtol=0, atol=1e-9)
        expected = sum(w[k] * entropy_of(member[k]) for k in range(3))
        torch.testing.assert_close(mixture.expected_entropy()[b], expected, rtol=0, atol=1e-9)
        padded = torch.full((len(trees), 2, 6), -1)
        padded[:, b, : n + 1] = trees
        torch.testing.assert_close(mixture.log_prob(padded)[:, b], mix, rtol=0, atol=1e-10)
        assert (mixture.head_mutual_information()[b, n + 1 :] == 0).all()


def test_log_prob_of_every_tree_and_non_trees():
    scores = member_scores(2, batch=1, n=4)[0]
    mixture = TreeMixture(scores)
    trees, _, mix = enumerate_mixture(scores, torch.full((3,), 1 / 3, dtype=torch.float64), 4, True)
    torch.testing.assert_close(mixture.log_prob(trees), mix, rtol=0, atol=1e-10)
    cycle = torch.tensor([-1, 2, 1, 0, 3])
    assert mixture.log_prob(cycle) == float("-inf")


@pytest.mark.parametrize("single_root, weights", CASES[:3])
def test_mutual_information_estimate_is_unbiased(single_root, weights):
    """The mean of many independent estimates is within 4.5 standard errors of the exact
    I(T; K) = H(p) - Σ w_k H(p_k) by enumeration (and so is the entropy estimate)."""
    scores = member_scores(3, batch=2, n=4)
    repeats = 500  # independent estimates: every sentence repeated in one batch
    mixture = TreeMixture(scores.repeat(repeats, 1, 1, 1), weights, single_root=single_root)
    w = weights if weights is not None else torch.full((3,), 1 / 3, dtype=torch.float64)
    mi, entropy = mixture.mutual_information(2, generator=torch.Generator().manual_seed(7))
    for b in range(2):
        _, member, mix = enumerate_mixture(scores[b], w, 4, single_root)
        exact_h = entropy_of(mix)
        exact_mi = exact_h - sum(w[k] * entropy_of(member[k]) for k in range(3))
        assert exact_mi > 0.05  # the members differ: a test that can fail
        for value, exact in ((mi[b::2], exact_mi), (entropy[b::2], exact_h)):
            se = value.std() / len(value) ** 0.5
            assert abs(value.mean() - exact) < 4.5 * se + 1e-12, (float(value.mean()), float(exact), float(se))


@pytest.mark.parametrize("weights", [None, torch.tensor([0.2, 0.0, 0.8], dtype=torch.float64)], ids=["equal", "zero"])
def test_per_sentence_estimate_is_unbiased_and_bounded(weights):
    """The core's path: one tree per sentence, one generator per sentence. The mean of many
    independent estimates is within 4.5 standard errors of the exact I(T; K), and every
    estimate lies in [0, -log min_k w_k] (a KL divergence of the member posterior from w)."""
    scores = member_scores(9, batch=2, n=4)
    repeats = 1500
    mixture = TreeMixture(scores.repeat(repeats, 1, 1, 1), weights)
    w = weights if weights is not None else torch.full((3,), 1 / 3, dtype=torch.float64)
    generators = [torch.Generator().manual_seed(500 + i) for i in range(2 * repeats)]
    mi, entropy = mixture.mutual_information(1, generator=generators)
    assert (mi >= 0).all() and (mi <= -w[w > 0].min().log() + 1e-12).all()
    for b in range(2):
        _, member, mix = enumerate_mixture(scores[b], w, 4, True)
        exact_mi = entropy_of(mix) - sum(w[k] * entropy_of(member[k]) for k in range(3) if w[k] > 0)
        assert exact_mi > 0.05
        value = mi[b::2]
        se = value.std() / len(value) ** 0.5
        assert abs(value.mean() - exact_mi) < 4.5 * se, (float(value.mean()), float(exact_mi), float(se))
        torch.testing.assert_close(entropy[b::2] - value, mixture.expected_entropy()[b::2], rtol=0, atol=1e-12)


def test_estimate_is_posterior_divergence_of_the_drawn_tree():
    """One draw, checked term by term: Î = KL(π(· | t) ‖ w) of the tree t the same generator
    draws from the mixture, π from the enumerated member probabilities of t."""
    scores = member_scores(10, batch=1, n=4)
    w = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    mixture = TreeMixture(scores, w)
    (tree,) = mixture.sample(1, generator=[torch.Generator().manual_seed(3)])
    (mi,), _ = mixture.mutual_information(1, generator=[torch.Generator().manual_seed(3)])
    trees, member, mix = enumerate_mixture(scores[0], w, 4, True)
    index = int((trees == tree[0]).all(-1).nonzero())
    posterior = w * (member[:, index] - mix[index]).exp()
    torch.testing.assert_close(posterior.sum(), torch.tensor(1.0, dtype=torch.float64))
    torch.testing.assert_close(mi, (posterior * (posterior / w).log()).sum(), rtol=0, atol=1e-10)


def test_mutual_information_is_zero_for_identical_members():
    one = member_scores(4, batch=1, k=1, n=5)
    mixture = TreeMixture(one.expand(1, 4, 6, 6))
    mi, entropy = mixture.mutual_information(3, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(mi, torch.zeros(1, dtype=torch.float64), rtol=0, atol=1e-9)
    torch.testing.assert_close(entropy, mixture.expected_entropy(), rtol=0, atol=1e-9)
    torch.testing.assert_close(mixture.head_mutual_information(), torch.zeros(1, 6, dtype=torch.float64))


def codes(heads: torch.Tensor, n: int) -> torch.Tensor:
    base = (n + 1) ** torch.arange(n)
    return (heads[..., 1 : n + 1] * base).sum(-1)


@pytest.mark.parametrize("single_root, weights", CASES)
def test_samples_follow_the_mixture(single_root, weights):
    scores = member_scores(5, batch=2, n=4)
    lengths = torch.tensor([4, 3])
    mixture = TreeMixture(scores, weights, lengths, single_root=single_root)
    w = weights if weights is not None else torch.full((3,), 1 / 3, dtype=torch.float64)
    heads = mixture.sample(4000, generator=torch.Generator().manual_seed(11))
    assert heads.shape == (4000, 2, 5)
    for b, n in enumerate(lengths.tolist()):
        assert (heads[:, b, n + 1 :] == -1).all()
        trees, _, mix = enumerate_mixture(scores[b, :, : n + 1, : n + 1], w, n, single_root)
        p_value = chi_square_p(codes(heads[:, b], n), codes(trees, n), mix.exp())
        assert p_value > ALPHA, f"sentence {b}: p = {p_value:.2e}"


def test_per_sentence_draws_follow_the_mixture():
    """One tree per sentence from its own generator (the members chosen by its uniform, a
    member of weight 0 never): 4,000 copies of a sentence fit the mixture."""
    scores = member_scores(5, batch=1, n=4)
    w = torch.tensor([0.3, 0.0, 0.7], dtype=torch.float64)
    copies = 4000
    mixture = TreeMixture(scores.expand(copies, 3, 5, 5), w)
    heads = mixture.sample(1, generator=[torch.Generator().manual_seed(i) for i in range(copies)])[0]
    trees, _, mix = enumerate_mixture(scores[0], w, 4, True)
    assert chi_square_p(codes(heads, 4), codes(trees, 4), mix.exp()) > ALPHA
    choice = _choose_members(w.expand(copies, 3), 1, [torch.Generator().manual_seed(i) for i in range(copies)])
    assert choice.shape == (copies, 1) and not (choice == 1).any()
    assert abs(float((choice == 0).double().mean()) - 0.3) < 4.5 * (0.3 * 0.7 / copies) ** 0.5


def test_a_biased_sampler_fails_the_fit():
    """The goodness-of-fit test can fail: draws from the first member alone are rejected."""
    scores = member_scores(5, batch=1, n=4)
    wrong = TreeMixture(scores[:, :1]).sample(6000, generator=torch.Generator().manual_seed(11))
    trees, _, mix = enumerate_mixture(scores[0], torch.full((3,), 1 / 3, dtype=torch.float64), 4, True)
    assert chi_square_p(codes(wrong[:, 0], 4), codes(trees, 4), mix.exp()) < ALPHA


def test_per_sentence_generators_make_draws_batch_independent():
    scores = member_scores(6, batch=3, n=4)

    def gens():
        return [torch.Generator().manual_seed(100 + b) for b in range(3)]

    together = TreeMixture(scores).sample(5, generator=gens())
    alone = TreeMixture(scores[1:2]).sample(5, generator=gens()[1:2])
    assert torch.equal(together[:, 1], alone[:, 0])
    mi_together = TreeMixture(scores).mutual_information(4, generator=gens())[0]
    mi_alone = TreeMixture(scores[1:2]).mutual_information(4, generator=gens()[1:2])[0]
    torch.testing.assert_close(mi_together[1:2], mi_alone)


def test_bad_input_is_named():
    scores = member_scores(0)
    with pytest.raises(ValueError, match="weights"):
        TreeMixture(scores, torch.tensor([1.0, -1.0, 0.5]))
    with pytest.raises(ValueError, match="weights"):
        TreeMixture(scores, torch.tensor([1.0, 1.0]))
    with pytest.raises(ValueError, match=r"\(B, K, N\+1, N\+1\)"):
        TreeMixture(scores[0, 0])
    with pytest.raises(ValueError, match="num_samples"):
        TreeMixture(scores).mutual_information(0)


def test_float32_members_give_finite_head_mutual_information():
    """float32 marginals may round a certain head's rivals below 0: no NaN comes of it."""
    scores = (member_scores(8, batch=4, n=6) * 20).float()
    mixture = TreeMixture(scores)
    head_mi = mixture.head_mutual_information()
    assert torch.isfinite(head_mi).all() and (head_mi >= 0).all()
    exact = TreeMixture(scores.double()).head_mutual_information()
    torch.testing.assert_close(head_mi, exact, rtol=0, atol=1e-3)


def test_errors_name_the_sentence_and_member_not_the_row_of_the_member_batch():
    """Member k of sentence b is row b K + k of one TreeDistribution: its messages are
    translated to the sentence and member."""
    scores = member_scores(0, batch=3, k=3)
    broken = scores.clone()
    broken[1, 2, 0, 1:] = float("-inf")  # sentence 1, member 2 (row 5): no arc from ROOT
    with pytest.raises(ValueError, match=r"sentence 1 \(member 2\) admits no dependency tree"):
        TreeMixture(broken).marginals
    with pytest.raises(ValueError, match=r"sentence 1 \(member 2\) admits no dependency tree"):
        TreeMixture(broken).expected_entropy()
    with pytest.raises(ValueError, match=r"sentence 1 \(member 2\) admits no dependency tree"):
        TreeMixture(broken).mutual_information(2)
    broken = scores.clone()
    broken[2, 0, 1, 2] = float("nan")  # row 6
    with pytest.raises(ValueError, match=r"scores of sentence 2 \(member 0\) hold nan"):
        TreeMixture(broken)
    with pytest.raises(ValueError, match=r"lengths\[1\] = 0 is out of range"):
        TreeMixture(scores, lengths=torch.tensor([4, 0, 2]))


def test_num_samples_that_is_not_a_positive_integer_is_named():
    mixture = TreeMixture(member_scores(0))
    for bad in (2.0, 0, -1, True, "3"):
        with pytest.raises(ValueError, match="num_samples must be an integer of at least 1"):
            mixture.sample(bad)
    assert mixture.sample(torch.tensor(2)).shape == (2, 2, 5)


def test_draws_in_parts_are_the_same_trees_and_fit_the_mixture(monkeypatch):
    """The draws copy their member's scores a bounded number of cells at a time (DRAW_CELLS):
    with one generator per sentence the trees do not change, and with one shared generator
    they still fit the mixture."""
    from spacy_treexp.engine import mixture as module

    scores = member_scores(7, batch=2, n=4)
    lengths = torch.tensor([4, 3])
    mixture = TreeMixture(scores, None, lengths)
    whole = mixture.sample(40, generator=[torch.Generator().manual_seed(i) for i in range(2)])
    draws = []
    original = module.sampling.sample
    monkeypatch.setattr(
        module.sampling, "sample", lambda d, *a, **k: draws.append(d.scores.shape[0]) or original(d, *a, **k)
    )
    monkeypatch.setattr(module, "DRAW_CELLS", 3 * 5 * 5)  # three rows of N+1 = 5 a part
    parts = mixture.sample(40, generator=[torch.Generator().manual_seed(i) for i in range(2)])
    assert max(draws) == 3 and len(draws) == 27  # 80 rows
    assert torch.equal(parts, whole)
    shared = TreeMixture(scores, None, lengths).sample(4000, generator=torch.Generator().manual_seed(3))
    w = torch.full((3,), 1 / 3, dtype=torch.float64)
    for b, n in enumerate(lengths.tolist()):
        trees, _, mix = enumerate_mixture(scores[b, :, : n + 1, : n + 1], w, n, True)
        assert chi_square_p(codes(shared[:, b], n), codes(trees, n), mix.exp()) > ALPHA


def test_a_member_of_weight_zero_is_not_read():
    """A member outside the mixture (weight 0) that admits no tree made every mixture quantity
    raise; the mixture is then its other members' (checked against enumeration)."""
    n = 3
    gen = torch.Generator().manual_seed(3)
    scores = torch.randn(2, n + 1, n + 1, generator=gen, dtype=torch.float64)
    scores[1, 0, :] = float("-inf")  # member 1: no arc from ROOT
    mix = TreeMixture(scores, torch.tensor([1.0, 0.0]))
    alone = TreeMixture(scores[:1])
    assert torch.allclose(mix.marginals, alone.marginals, atol=1e-12)
    assert torch.allclose(mix.expected_entropy(), alone.expected_entropy(), atol=1e-12)
    trees, log_p = tree_log_probs(scores[0], n, True)
    assert torch.allclose(mix.log_prob(trees), log_p, atol=1e-10)
    assert bool((mix.sample(5) >= -1).all())
