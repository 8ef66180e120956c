"""The annotation core's epistemic part (``_epistemic``) against enumeration: exact head mutual
information and expected entropy, and an unbiased, non-negative, reproducible estimate of
I(tree; member) from the sentences' own seeded generators."""

import math

import numpy
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
