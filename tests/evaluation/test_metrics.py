"""Known-answer tests of the evaluation's scalar metrics."""

import math

import numpy
import pytest
import torch

from spacy_treexp.annotate import word_head_entropy
from spacy_treexp.evaluation import metrics


def test_perfectly_calibrated_predictor_has_zero_ece():
    # 15 groups of 20 predictions with confidence j/20 of which exactly j are correct:
    # the 15 equal-mass bins are exactly the groups.
    confidence, correct = [], []
    for j in range(1, 16):
        confidence += [j / 20] * 20
        correct += [1] * j + [0] * (20 - j)
    assert metrics.expected_calibration_error(confidence, correct, 15) == pytest.approx(0.0, abs=1e-12)
    bins = metrics.equal_mass_bins(confidence, correct, 15)
    assert [b["count"] for b in bins] == [20] * 15
    assert [b["accuracy"] for b in bins] == pytest.approx([j / 20 for j in range(1, 16)])


def test_overconfident_predictor():
    assert metrics.expected_calibration_error([0.9] * 10, [1, 0] * 5) == pytest.approx(0.4)


def test_ece_hand_computed():
    # bins {0.1, 0.2} (acc 0.5, conf 0.15) and {0.8, 0.9} (acc 1, conf 0.85)
    value = metrics.expected_calibration_error([0.9, 0.1, 0.8, 0.2], [1, 0, 1, 1], n_bins=2)
    assert value == pytest.approx(0.5 * 0.35 + 0.5 * 0.15)


def test_equal_mass_bins_sizes_differ_by_at_most_one():
    bins = metrics.equal_mass_bins(numpy.linspace(0, 1, 47), numpy.ones(47), 15)
    sizes = [b["count"] for b in bins]
    assert sum(sizes) == 47 and max(sizes) - min(sizes) <= 1
    assert len(metrics.equal_mass_bins([0.5, 0.6], [1, 0], 15)) == 2
    assert math.isnan(metrics.expected_calibration_error([], []))
    with pytest.raises(ValueError):
        metrics.expected_calibration_error([0.5], [1, 0])


def test_auroc_known_answers():
    assert metrics.auroc([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1]) == 1.0
    assert metrics.auroc([0.9, 0.8, 0.2, 0.1], [0, 0, 1, 1]) == 0.0
    assert metrics.auroc([0.5] * 4, [0, 1, 0, 1]) == 0.5
    assert metrics.auroc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    # a tie between a positive and a negative counts one half: pairs (p, n) = 4, wins 3.5
    assert metrics.auroc([0.3, 0.3, 0.5, 0.1], [1, 0, 1, 0]) == pytest.approx(3.5 / 4)
    assert math.isnan(metrics.auroc([0.1, 0.2], [1, 1]))


def test_rankdata_averages_ties():
    assert metrics.rankdata([10, 20, 20, 5]).tolist() == [2.0, 3.5, 3.5, 1.0]


def test_spearman_known_answers():
    assert metrics.spearman([1, 2, 3, 4], [10, 20, 30, 1000]) == pytest.approx(1.0)
    assert metrics.spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert metrics.spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(0.8207826816681233)  # scipy
    assert math.isnan(metrics.spearman([1, 2, 3], [1, 1, 1]))


def test_extreme_accuracy():
    confidence = numpy.arange(20) / 20
    correct = numpy.array([0] * 3 + [1] * 17)
    result = metrics.extreme_accuracy(confidence, correct, 0.1)
    assert result == {"most_certain": 1.0, "least_certain": 0.0, "count": 2}
    assert metrics.extreme_accuracy(confidence[:11], correct[:11], 0.1)["count"] == 2  # ceil(1.1)


def test_head_entropy():
    mu = torch.zeros((3, 3), dtype=torch.float64)
    mu[0, 1] = mu[2, 1] = 0.5  # word 1: two heads, half each
    mu[0, 2] = 1.0  # word 2: certain
    assert word_head_entropy(mu)[1:].tolist() == pytest.approx([math.log(2), 0.0])


def test_oracle_uas():
    correct = numpy.array([[1, 3], [2, 1], [0, 4]])  # 3 samples of 2 sentences (n = 2, 4)
    assert metrics.oracle_uas(correct, numpy.array([2, 4]), [1, 2, 3]) == {
        1: pytest.approx(4 / 6),
        2: pytest.approx(5 / 6),
        3: pytest.approx(6 / 6),
    }
    with pytest.raises(ValueError):
        metrics.oracle_uas(correct, numpy.array([2, 4]), [4])


def test_ties_do_not_depend_on_order():
    confidence = [0.5] * 6 + [0.9] * 4
    a = metrics.expected_calibration_error(confidence, [1, 1, 1, 0, 0, 0, 1, 1, 1, 1], 3)
    b = metrics.expected_calibration_error(confidence, [0, 0, 0, 1, 1, 1, 1, 1, 1, 1], 3)
    assert a == pytest.approx(b) == pytest.approx(0.04)
