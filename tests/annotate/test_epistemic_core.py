"""The annotation core's epistemic part (``_epistemic``) against enumeration: exact head mutual
information and expected entropy, and an unbiased, non-negative, reproducible estimate of
I(tree; member) from the sentences' own seeded generators."""

import math

import numpy
import pytest
from helpers.mixture import mixture_by_enumeration

from spacy_treexp.annotate import AnnotateOptions, SentenceScores, annotate_sentences


def members(seed: int, k: int = 3, n: int = 4) -> numpy.ndarray:
    """K member score matrices that share a common part, as an ensemble's do."""
    rng = numpy.random.default_rng(seed)
    common = 1.5 * rng.standard_normal((1, n + 1, n + 1))
    return common + 1.5 * rng.standard_normal((k, n + 1, n + 1))


def copies(scores: numpy.ndarray, count: int):
    """``count`` records of one sentence, each with its own text (so its own seed)."""
    return [SentenceScores(arc=scores[0], text=f"copy {i}", members=scores) for i in range(count)]


def test_exact_parts_and_unbiased_estimate():
    scores = members(1)
    exact = mixture_by_enumeration(scores)
    assert exact.mutual_information > 0.05  # the members differ: a test that can fail
    count = 1200
    annotations = annotate_sentences(copies(scores, count), AnnotateOptions(seed=3))
    for annotation in annotations[:5]:  # the members run in float32 (core._epistemic)
        numpy.testing.assert_allclose(annotation.head_mutual_information, exact.head_mutual_information, atol=1e-5)
        assert math.isclose(annotation.expected_entropy, exact.expected_entropy, abs_tol=1e-5)
    estimates = numpy.array([a.mutual_information for a in annotations])
    assert (estimates >= 0).all() and (estimates <= math.log(3) + 1e-12).all()
    se = estimates.std(ddof=1) / math.sqrt(count)
    assert abs(estimates.mean() - exact.mutual_information) < 4.5 * se, (estimates.mean(), exact.mutual_information, se)
    assert len(set(estimates.round(12).tolist())) > 10  # the copies are seeded apart


def test_estimate_is_reproducible_and_batch_independent():
    scores, other = members(2, n=5), members(3, n=3)
    batch = [
        SentenceScores(arc=other[0], text="b", members=other),
        SentenceScores(arc=scores[0], text="a", start=7, members=scores),
    ]
    together = annotate_sentences(batch, AnnotateOptions(seed=5))
    alone = annotate_sentences(batch[1:], AnnotateOptions(seed=5))
    assert together[1].mutual_information == alone[0].mutual_information
    reseeded = annotate_sentences(batch[1:], AnnotateOptions(seed=6))[0].mutual_information
    assert reseeded != alone[0].mutual_information


def test_mixture_marginals_and_trees_against_enumeration():
    """The record's mixture marginals are Σ_k w_k μ_k by enumeration, and its trees drawn from
    the mixture fit the mixture's distribution (chi-square); with weights, the heavier member
    dominates both."""
    import torch
    from helpers.enumerate_trees import tree_log_probs
    from helpers.goodness_of_fit import ALPHA, chi_square_p, codes

    n, scores = 4, members(11, k=2, n=4)
    weights = numpy.array([0.8, 0.2])
    sentence = SentenceScores(arc=scores[0], text="s", members=scores, member_weights=weights)
    record = annotate_sentences([sentence], AnnotateOptions(seed=2, mixture_samples=6000, mixture_marginals=True))[0]
    member_trees = [tree_log_probs(torch.from_numpy(s), n, True) for s in scores]
    trees = member_trees[0][0]
    mixture = sum(w * lp.exp() for w, (_, lp) in zip(weights, member_trees))
    expected = numpy.zeros((n + 1, n + 1))
    for tree, p in zip(trees.tolist(), mixture.tolist()):
        for m in range(1, n + 1):
            expected[tree[m], m] += p
    assert record.mixture_marginals.shape == (n + 1, n + 1)
    numpy.testing.assert_allclose(record.mixture_marginals, expected, atol=2e-5)
    main = numpy.asarray(record.marginals)
    assert numpy.abs(main - expected).max() > 0.05  # not the parser's own distribution
    drawn = torch.from_numpy(record.mixture_sampled_heads.astype(numpy.int64))
    assert drawn.shape == (6000, n)
    heads = torch.cat([torch.zeros(6000, 1, dtype=torch.int64), drawn], dim=1)
    assert chi_square_p(codes(heads, n), codes(trees, n), mixture) > ALPHA
    # the same seed, the same trees, in any batch; none without samples
    again = annotate_sentences(copies(scores, 1) + [sentence], AnnotateOptions(seed=2, mixture_samples=6000))[1]
    numpy.testing.assert_array_equal(again.mixture_sampled_heads, record.mixture_sampled_heads)
    plain = annotate_sentences([sentence], AnnotateOptions(seed=2, n_samples=5))[0]  # the parser's own samples only
    assert plain.mixture_sampled_heads is None and plain.mixture_marginals is None  # both are asked for
    assert annotate_sentences([SentenceScores(arc=scores[0], text="s")], AnnotateOptions())[0].mixture_marginals is None


def test_mixture_trees_of_a_large_batch_are_drawn_in_parts(monkeypatch):
    """A batch whose mixture draws would hold more than MAX_SAMPLED_HEADS heads at once is drawn
    a few sentences at a time, with the same trees (one generator per sentence)."""
    from spacy_treexp.annotate import core

    sentences = [
        SentenceScores(arc=m[0], start=10 * i, text=f"s{i}", members=m)
        for i, m in enumerate(members(20 + i, n=n) for i, n in enumerate([4, 6, 3, 5, 6]))
    ]
    options = AnnotateOptions(seed=4, mixture_samples=9)
    whole = annotate_sentences(sentences, options)
    batches = []
    original = core.TreeMixture.sample
    monkeypatch.setattr(
        core.TreeMixture, "sample", lambda self, *a, **k: batches.append(self.batch) or original(self, *a, **k)
    )
    monkeypatch.setattr(core, "MAX_SAMPLED_HEADS", 9 * 7 * 2)  # two sentences of N+1 = 7 per draw
    parts = annotate_sentences(sentences, options)
    assert max(batches) <= 2
    for a, b in zip(whole, parts):
        numpy.testing.assert_array_equal(a.mixture_sampled_heads, b.mixture_sampled_heads)


def test_mixture_risk_of_the_parse_against_enumeration():
    """The mixture's probability of the record's tree, log Σ_k w_k p_k(heads), and of each of
    its heads, Σ_k w_k μ_k(heads[m], m), by enumeration: for the parser's own tree and for a
    tree the record is given; the per-word values are not the parser's own head_prob."""
    import torch
    from helpers.enumerate_trees import tree_log_probs

    n, scores = 5, members(21, k=2, n=5)
    weights = numpy.array([0.7, 0.3])
    member_trees = [tree_log_probs(torch.from_numpy(s), n, True) for s in scores]
    trees = member_trees[0][0]
    mixture = sum(w * lp.exp() for w, (_, lp) in zip(weights, member_trees)).numpy()
    given = trees[int(numpy.argsort(mixture)[len(mixture) // 2])].numpy()[1:]  # a middling tree
    for heads in (None, given):
        sentence = SentenceScores(arc=scores[0], text="s", members=scores, member_weights=weights, heads=heads)
        record = annotate_sentences([sentence], AnnotateOptions(seed=1))[0]
        index = [i for i, t in enumerate(trees.tolist()) if t[1:] == record.heads.tolist()][0]
        assert math.isclose(record.mixture_parse_log_prob, math.log(mixture[index]), abs_tol=1e-5)
        assert math.isclose(record.mixture_error_probability, 1 - mixture[index], abs_tol=1e-5)
        expected = numpy.zeros(n)
        for t, p in zip(trees.tolist(), mixture.tolist()):
            expected += p * (numpy.array(t[1:]) == record.heads)
        numpy.testing.assert_allclose(record.mixture_head_prob, expected, atol=2e-5)
        assert numpy.abs(record.mixture_head_prob - record.head_prob).max() > 0.02
    plain = annotate_sentences([SentenceScores(arc=scores[0], text="s")])[0]
    assert plain.mixture_head_prob is None and plain.mixture_error_probability is None


def test_mixture_risk_of_a_confident_parse_keeps_its_digits():
    """Two members that agree on a planted tree: 1 - p(parse) is about 1e-5 to 1e-8. Computed from
    float32 scores it came out 0 or a power of two; the record's value matches float64
    enumeration to 1e-6 relative."""
    import torch
    from helpers.enumerate_trees import tree_log_probs

    n, weights = 5, numpy.array([0.6, 0.4])
    rng = numpy.random.default_rng(33)
    base, noise = rng.standard_normal((n + 1, n + 1)), rng.standard_normal((2, n + 1, n + 1))
    for head, dependent in zip([0, 1, 1, 3, 3], range(1, n + 1)):
        base[head, dependent] += 3.0
    for scale in (5.0, 7.0, 9.0):
        scores = scale * (base[None] + 0.2 * noise)
        member_trees = [tree_log_probs(torch.from_numpy(s), n, True) for s in scores]
        trees = member_trees[0][0].tolist()
        mixture = sum(w * lp.exp() for w, (_, lp) in zip(weights, member_trees)).numpy()
        sentence = SentenceScores(arc=scores[0], text="s", members=scores, member_weights=weights)
        record = annotate_sentences([sentence], AnnotateOptions(seed=1))[0]
        index = [i for i, t in enumerate(trees) if t[1:] == record.heads.tolist()][0]
        expected = float(mixture[:index].sum() + mixture[index + 1 :].sum())  # 1 - p(parse), no cancellation
        assert expected < 1e-4
        assert record.mixture_error_probability == pytest.approx(expected, rel=1e-6)
