"""Scalar metrics of the evaluation, in numpy, each with a known-answer test.

Conventions: ``confidence`` are probabilities in [0, 1]; ``correct`` are booleans (or 0/1).
Undefined values (e.g. AUROC with one class only) are ``nan``; the report writes them as null.
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy
import numpy.typing as npt

# any sequence or array of numbers (lists, numpy arrays); flattened to 1-D float64
ArrayLike = npt.ArrayLike
FloatArray = npt.NDArray[numpy.float64]


def _as_arrays(confidence: ArrayLike, correct: ArrayLike) -> Tuple[FloatArray, FloatArray]:
    confidence_array = numpy.asarray(confidence, dtype=numpy.float64).reshape(-1)
    correct_array = numpy.asarray(correct, dtype=numpy.float64).reshape(-1)
    if confidence_array.shape != correct_array.shape:
        raise ValueError(f"confidence {confidence_array.shape} and correct {correct_array.shape} differ in length")
    return confidence_array, correct_array


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
    conf, corr = _as_arrays(confidence, correct)
    if conf.size == 0:
        return []
    order = numpy.argsort(conf, kind="stable")
    sorted_confidence = conf[order]
    starts = numpy.flatnonzero(numpy.r_[True, sorted_confidence[1:] != sorted_confidence[:-1]])
    sums = numpy.add.reduceat(corr[order], starts)
    sizes = numpy.diff(numpy.r_[starts, conf.size])
    corr = corr.copy()
    corr[order] = numpy.repeat(sums / sizes, sizes)
    bins = []
    for index in numpy.array_split(order, min(n_bins, conf.size)):
        bins.append(
            {
                "count": int(index.size),
                "confidence": float(conf[index].mean()),
                "accuracy": float(corr[index].mean()),
                "low": float(conf[index].min()),
                "high": float(conf[index].max()),
            }
        )
    return bins


def expected_calibration_error(confidence: ArrayLike, correct: ArrayLike, n_bins: int = 15) -> float:
    """ECE = Σ_b (|b| / N) · |accuracy_b − confidence_b| over equal-mass bins (see
    :func:`equal_mass_bins`); ``nan`` for no predictions."""
    conf, corr = _as_arrays(confidence, correct)
    if conf.size == 0:
        return float("nan")
    bins = equal_mass_bins(conf, corr, n_bins)
    return float(sum(b["count"] * abs(b["accuracy"] - b["confidence"]) for b in bins) / conf.size)


def equal_width_ece(confidence: ArrayLike, correct: ArrayLike, n_bins: int = 15) -> float:
    """ECE over ``n_bins`` equal-width bins of [0, 1] (Guo et al. 2017; bin b holds
    confidences in [b/B, (b+1)/B), the last bin also 1): Σ_b (|b| / N) · |acc_b − conf_b|."""
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    conf, corr = _as_arrays(confidence, correct)
    if conf.size == 0:
        return float("nan")
    index = numpy.clip((conf * n_bins).astype(numpy.int64), 0, n_bins - 1)
    counts = numpy.bincount(index, minlength=n_bins)
    gap = numpy.bincount(index, weights=corr - conf, minlength=n_bins)
    return float(numpy.abs(gap).sum() / conf.size) if counts.sum() else float("nan")


def equal_width_bins(confidence: ArrayLike, correct: ArrayLike, n_bins: int = 15) -> List[Dict[str, float]]:
    """The non-empty bins of :func:`equal_width_ece`: ``count``, mean ``confidence``,
    ``accuracy``, and the bin's ``low`` and ``high`` edges."""
    conf, corr = _as_arrays(confidence, correct)
    index = numpy.clip((conf * n_bins).astype(numpy.int64), 0, n_bins - 1)
    bins = []
    for b in range(n_bins):
        chosen = index == b
        if chosen.any():
            bins.append(
                {
                    "count": int(chosen.sum()),
                    "confidence": float(conf[chosen].mean()),
                    "accuracy": float(corr[chosen].mean()),
                    "low": b / n_bins,
                    "high": (b + 1) / n_bins,
                }
            )
    return bins


def chance_ece_band(
    confidence: ArrayLike, n_bins: int = 15, replicates: int = 1000, quantile: float = 0.95, seed: int = 0
) -> float:
    """The ``quantile`` of the equal-width ECE that a perfectly calibrated model with these
    confidences shows by chance: correctness drawn as Bernoulli(confidence), ``replicates``
    times (seeded). An ECE below it cannot be told from perfect calibration at that level."""
    conf = numpy.asarray(confidence, dtype=numpy.float64).reshape(-1)
    if conf.size == 0:
        return float("nan")
    rng = numpy.random.default_rng(seed)
    index = numpy.clip((conf * n_bins).astype(numpy.int64), 0, n_bins - 1)
    values = numpy.empty(replicates)
    for r in range(replicates):
        drawn = rng.random(conf.size) < conf
        gap = numpy.bincount(index, weights=drawn - conf, minlength=n_bins)
        values[r] = numpy.abs(gap).sum() / conf.size
    return float(numpy.quantile(values, quantile))


def rankdata(values: ArrayLike) -> FloatArray:
    """1-based ranks with ties given their average rank (as ``scipy.stats.rankdata``)."""
    array = numpy.asarray(values, dtype=numpy.float64).reshape(-1)
    order = numpy.argsort(array, kind="stable")
    sorted_values = array[order]
    ranks = numpy.empty(array.size, dtype=numpy.float64)
    # boundaries of runs of equal values
    starts = numpy.flatnonzero(numpy.r_[True, sorted_values[1:] != sorted_values[:-1]])
    ends = numpy.r_[starts[1:], array.size]
    average = (starts + ends + 1) / 2.0  # mean of 1-based positions start+1 .. end
    ranks[order] = numpy.repeat(average, ends - starts)
    return ranks


def auroc(scores: ArrayLike, positive: ArrayLike) -> float:
    """Area under the ROC curve of ``scores`` for detecting ``positive`` items.

    Mann–Whitney form: the probability that a random positive scores higher than a random
    negative, ties counting one half. ``nan`` when either class is empty.
    """
    score_array, positive_array = _as_arrays(scores, positive)
    is_positive = positive_array.astype(bool)
    n_pos = int(is_positive.sum())
    n_neg = is_positive.size - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = rankdata(score_array)
    return float((ranks[is_positive].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def spearman(x: ArrayLike, y: ArrayLike) -> float:
    """Spearman's rank correlation (Pearson correlation of average ranks); ``nan`` if either
    side is constant or has fewer than two values."""
    x_array, y_array = _as_arrays(x, y)
    if x_array.size < 2:
        return float("nan")
    rx, ry = rankdata(x_array), rankdata(y_array)
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
    conf, corr = _as_arrays(confidence, correct)
    if conf.size == 0:
        return {"most_certain": float("nan"), "least_certain": float("nan"), "count": 0}
    count = int(numpy.ceil(fraction * conf.size - 1e-9))
    order = numpy.argsort(conf, kind="stable")
    return {
        "most_certain": float(corr[order[-count:]].mean()),
        "least_certain": float(corr[order[:count]].mean()),
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
