"""Scalar metrics of the evaluation, in numpy, each with a known-answer test.

Conventions: ``confidence`` are probabilities in [0, 1]; ``correct`` are booleans (or 0/1).
Undefined values (e.g. AUROC with one class only) are ``nan``; the report writes them as null.
"""
from __future__ import annotations

from typing import Dict, List, Sequence

import numpy

ArrayLike = Sequence[float]


def _as_arrays(confidence: ArrayLike, correct: ArrayLike):
    confidence = numpy.asarray(confidence, dtype=numpy.float64).reshape(-1)
    correct = numpy.asarray(correct, dtype=numpy.float64).reshape(-1)
    if confidence.shape != correct.shape:
        raise ValueError(f"confidence {confidence.shape} and correct {correct.shape} differ in length")
    return confidence, correct


def equal_mass_bins(confidence: ArrayLike, correct: ArrayLike, n_bins: int = 15) -> List[Dict[str, float]]:
    """Reliability bins holding (almost) equally many predictions.

    Predictions are sorted by confidence and cut into ``min(n_bins, N)`` consecutive groups
    whose sizes differ by at most one. Predictions with the same confidence may straddle a
    bin boundary; so that the result does not depend on their order, each of them counts
    with the mean correctness of its tie group. Each bin reports ``count``, mean
    ``confidence``, ``accuracy`` and its confidence range.
    """
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    confidence, correct = _as_arrays(confidence, correct)
    if confidence.size == 0:
        return []
    order = numpy.argsort(confidence, kind="stable")
    sorted_confidence = confidence[order]
    starts = numpy.flatnonzero(numpy.r_[True, sorted_confidence[1:] != sorted_confidence[:-1]])
    sums = numpy.add.reduceat(correct[order], starts)
    sizes = numpy.diff(numpy.r_[starts, confidence.size])
    correct = correct.copy()
    correct[order] = numpy.repeat(sums / sizes, sizes)
    bins = []
    for index in numpy.array_split(order, min(n_bins, confidence.size)):
        bins.append(
            {
                "count": int(index.size),
                "confidence": float(confidence[index].mean()),
                "accuracy": float(correct[index].mean()),
                "low": float(confidence[index].min()),
                "high": float(confidence[index].max()),
            }
        )
    return bins


def expected_calibration_error(confidence: ArrayLike, correct: ArrayLike, n_bins: int = 15) -> float:
    """ECE = Σ_b (|b| / N) · |accuracy_b − confidence_b| over equal-mass bins (see
    :func:`equal_mass_bins`); ``nan`` for no predictions."""
    confidence, correct = _as_arrays(confidence, correct)
    if confidence.size == 0:
        return float("nan")
    bins = equal_mass_bins(confidence, correct, n_bins)
    return float(sum(b["count"] * abs(b["accuracy"] - b["confidence"]) for b in bins) / confidence.size)


def rankdata(values: ArrayLike) -> numpy.ndarray:
    """1-based ranks with ties given their average rank (as ``scipy.stats.rankdata``)."""
    values = numpy.asarray(values, dtype=numpy.float64).reshape(-1)
    order = numpy.argsort(values, kind="stable")
    sorted_values = values[order]
    ranks = numpy.empty(values.size, dtype=numpy.float64)
    # boundaries of runs of equal values
    starts = numpy.flatnonzero(numpy.r_[True, sorted_values[1:] != sorted_values[:-1]])
    ends = numpy.r_[starts[1:], values.size]
    average = (starts + ends + 1) / 2.0  # mean of 1-based positions start+1 .. end
    ranks[order] = numpy.repeat(average, ends - starts)
    return ranks


def auroc(scores: ArrayLike, positive: ArrayLike) -> float:
    """Area under the ROC curve of ``scores`` for detecting ``positive`` items.

    Mann–Whitney form: the probability that a random positive scores higher than a random
    negative, ties counting one half. ``nan`` when either class is empty.
    """
    scores, positive = _as_arrays(scores, positive)
    positive = positive.astype(bool)
    n_pos = int(positive.sum())
    n_neg = positive.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(scores)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def spearman(x: ArrayLike, y: ArrayLike) -> float:
    """Spearman's rank correlation (Pearson correlation of average ranks); ``nan`` if either
    side is constant or has fewer than two values."""
    x, y = _as_arrays(x, y)
    if x.size < 2:
        return float("nan")
    rx, ry = rankdata(x), rankdata(y)
    rx -= rx.mean()
    ry -= ry.mean()
    denominator = numpy.sqrt((rx * rx).sum() * (ry * ry).sum())
    if denominator == 0:
        return float("nan")
    return float((rx * ry).sum() / denominator)


def extreme_accuracy(confidence: ArrayLike, correct: ArrayLike, fraction: float = 0.1) -> Dict[str, float]:
    """Accuracy of the ``fraction`` most and least confident predictions.

    The group size is ``ceil(fraction · N)``; ties are broken by input order (stable sort).
    Returns ``most_certain``, ``least_certain`` and ``count``.
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    confidence, correct = _as_arrays(confidence, correct)
    if confidence.size == 0:
        return {"most_certain": float("nan"), "least_certain": float("nan"), "count": 0}
    count = int(numpy.ceil(fraction * confidence.size - 1e-9))
    order = numpy.argsort(confidence, kind="stable")
    return {
        "most_certain": float(correct[order[-count:]].mean()),
        "least_certain": float(correct[order[:count]].mean()),
        "count": count,
    }


def oracle_uas(correct_per_sample: numpy.ndarray, lengths: numpy.ndarray, ks: Sequence[int]) -> Dict[int, float]:
    """Oracle UAS of the best of the first k samples, for each k.

    ``correct_per_sample`` is (K, S): correct heads of sample j of sentence s (``-1`` marks
    a missing sample, e.g. a sentence with fewer than K trees). Returns
    {k: Σ_s max_{j<k} correct[j, s] / Σ_s n_s}.
    """
    correct = numpy.asarray(correct_per_sample)
    total = float(numpy.asarray(lengths).sum())
    result = {}
    for k in ks:
        if k > correct.shape[0]:
            raise ValueError(f"k = {k} but only {correct.shape[0]} samples were drawn")
        best = correct[:k].max(axis=0)
        if (best < 0).any():
            raise ValueError("a sentence has no valid sample among its first k")
        result[int(k)] = float(best.sum() / total) if total else float("nan")
    return result
