"""Two parsers' scores as a product of experts, against brute-force enumeration (float64)."""

import numpy
import pytest
from helpers.enumerate_trees import all_trees

from spacy_treexp.annotate import AnnotateOptions, SentenceScores, annotate_sentences
from spacy_treexp.annotate.product import ProductError, label_order, product_members, product_relations
from spacy_treexp.annotate.relation_scores import BiaffineRelationScores

LABELS_A = ["nsubj", "obj", "root", "dep"]
LABELS_B = ["dep", "root", "nsubj", "obj"]  # the same set, another order


def log_softmax64(values):
    values = numpy.asarray(values, dtype=numpy.float64)
    top = values.max(-1, keepdims=True)
    return values - top - numpy.log(numpy.exp(values - top).sum(-1, keepdims=True))


def factored(rng, n, labels, width, temperature):
    return BiaffineRelationScores(
        rng.standard_normal((n + 1, labels, width)).astype(numpy.float32),
        rng.standard_normal((n + 1, width)).astype(numpy.float32),
        temperature=temperature,
    )


def product_reference(first, second, order):
    """log of p_a(l) p_b(l) / sum_l' p_a(l') p_b(l'), float64, with ``second`` in ``first``'s order."""
    return log_softmax64(
        numpy.asarray(first, dtype=numpy.float64) + numpy.asarray(second, dtype=numpy.float64)[..., order]
    )


def test_label_order_maps_the_other_parsers_labels_by_name():
    order = label_order(LABELS_A, LABELS_B)
    assert [LABELS_B[i] for i in order] == LABELS_A
    with pytest.raises(ProductError, match="obl"):
        label_order(LABELS_A, ["nsubj", "obj", "root", "obl"])


def test_dense_relations_multiply_and_renormalise():
    rng = numpy.random.default_rng(0)
    n = 4
    first = log_softmax64(rng.standard_normal((n + 1, n + 1, 4)) * 3).astype(numpy.float32)
    second = log_softmax64(rng.standard_normal((n + 1, n + 1, 4)) * 3).astype(numpy.float32)
    order = label_order(LABELS_A, LABELS_B)
    got = product_relations(first, second, order)
    numpy.testing.assert_allclose(got, product_reference(first, second, order), atol=1e-5)
    numpy.testing.assert_allclose(numpy.exp(got).sum(-1), 1.0, atol=1e-5)


def test_two_factored_classifiers_stay_factored_and_read_like_the_dense_product():
    rng = numpy.random.default_rng(1)
    n = 5
    first, second = factored(rng, n, 4, 3, 1.6), factored(rng, n, 4, 6, 0.7)
    first.fix_label(numpy.array([2]), 3)  # a whitespace token's fixed label ("dep")
    second.fix_label(numpy.array([2]), 0)
    order = label_order(LABELS_A, LABELS_B)
    got = product_relations(first, second, order)
    assert isinstance(got, BiaffineRelationScores)
    expected = product_reference(first, second, order)
    numpy.testing.assert_allclose(numpy.asarray(got), expected, atol=1e-4)
    heads, words = numpy.array([0, 3, 1, 1, 4]), numpy.arange(1, n + 1)
    numpy.testing.assert_allclose(got[heads, words], expected[heads, words], atol=1e-4)
    assert got[4, 2, 3] == 0.0 and got[4, 2, 0] == -numpy.inf


def test_a_dense_and_a_factored_classifier_multiply_densely():
    rng = numpy.random.default_rng(2)
    n = 3
    first = log_softmax64(rng.standard_normal((n + 1, n + 1, 4))).astype(numpy.float32)
    second = factored(rng, n, 4, 2, 1.3)
    order = label_order(LABELS_A, LABELS_B)
    numpy.testing.assert_allclose(
        product_relations(first, second, order), product_reference(first, second, order), atol=1e-5
    )


def test_members_pair_up_or_ride_on_the_other_parsers_scores():
    rng = numpy.random.default_rng(3)
    arc_a, arc_b = rng.standard_normal((2, 4, 4)).astype(numpy.float32)
    members_a, members_b = rng.standard_normal((2, 3, 4, 4)).astype(numpy.float32)
    numpy.testing.assert_allclose(product_members(members_a, arc_a, members_b, arc_b), members_a + members_b)
    numpy.testing.assert_allclose(product_members(members_a, arc_a, None, arc_b), members_a + arc_b)
    numpy.testing.assert_allclose(product_members(None, arc_a, members_b, arc_b), arc_a + members_b)
    assert product_members(None, arc_a, None, arc_b) is None
    with pytest.raises(ProductError, match="this parser has 3 members and the earlier one 2"):
        product_members(members_a, arc_a, members_b[:2], arc_b)


@pytest.mark.parametrize("peaked", [False, True])
def test_the_summed_scores_give_the_product_of_the_two_tree_distributions(peaked):
    """p(t) ∝ p_a(t) p_b(t) by enumeration: marginals, entropy and the MAP tree's probability."""
    rng = numpy.random.default_rng(4)
    n = 5
    scale = 25.0 if peaked else 2.0
    arc_a, arc_b = (rng.standard_normal((n + 1, n + 1)) * scale for _ in range(2))
    trees = all_trees(n, single_root=True).numpy()
    words = numpy.arange(1, n + 1)

    def tree_log_probs(arc):
        totals = numpy.array([arc[tree[1:], words].sum() for tree in trees])
        return totals - numpy.logaddexp.reduce(totals)

    log_p = tree_log_probs(arc_a) + tree_log_probs(arc_b)
    p = numpy.exp(log_p - numpy.logaddexp.reduce(log_p))
    marginals = numpy.zeros((n + 1, n + 1))
    for tree, weight in zip(trees, p):
        marginals[tree[1:], words] += weight
    summed = (arc_a + arc_b).astype(numpy.float32)
    [annotation] = annotate_sentences([SentenceScores(arc=summed)], AnnotateOptions())
    got = numpy.asarray(annotation.marginals, dtype=numpy.float64)
    numpy.testing.assert_allclose(got[:, 1:], marginals[:, 1:], atol=2e-5)
    entropy = -(p[p > 0] * numpy.log(p[p > 0])).sum()
    assert float(annotation.entropy) == pytest.approx(entropy, abs=2e-4)
    best = trees[int(numpy.argmax(p))]
    assert list(numpy.asarray(annotation.heads)) == list(best[1:])
