"""Post-hoc temperature scaling fitted on held-out data (Guo et al. 2017, for trees).

The arc temperature T divides every arc score: p_T(d) ∝ exp(Σ s(h, m) / T). It is fitted
by minimising the negative log-likelihood of the gold trees, NLL(β) = Σ_s log Z(β s) −
β s(gold), over β = 1/T. log Z(β s) is convex in β (it is a log-sum-exp of functions linear
in β), so NLL is convex and its derivative Σ_s E_β[s(d)] − s(gold) = Σ_s Σ μ_β · s − s(gold)
is increasing: we find its zero by bisection on log β, each step one exact marginal pass
of the engine. The relation temperature is fitted the same way on the gold label's
log-probability at the gold head (a softmax over labels, also convex in β).
The MAP tree does not change with T (a positive scale); marginals, entropy, MBR and
samples do.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, TypedDict

import numpy
import torch

from spacy_treexp.annotate import SentenceScores
from spacy_treexp.engine import TreeDistribution
from spacy_treexp.evaluation.conllu import GoldSentence
from spacy_treexp.evaluation.evaluator import batch_indices, normalise_label, padded_gold, padded_scores

BETA_RANGE = (1.0 / 20.0, 20.0)


class TemperatureFit(TypedDict):
    """A fitted temperature, how its bisection ended, and the NLL per word before and after."""

    temperature: float
    status: str
    nll_per_word_before: float
    nll_per_word_after: float


class ArcTemperatureFit(TemperatureFit):
    n_sentences: int


class RelTemperatureFit(TemperatureFit):
    n_words: int


def _bisect(gradient, low: float, high: float, iterations: int) -> Tuple[float, str]:
    """Zero of an increasing ``gradient(beta)`` on [low, high] by bisection in log beta.

    Returns (beta, status): status "ok" or "at_bound" when the minimum lies outside the range.
    """
    if gradient(low) >= 0:
        return low, "at_bound"
    if gradient(high) <= 0:
        return high, "at_bound"
    a, b = math.log(low), math.log(high)
    for _ in range(iterations):
        middle = 0.5 * (a + b)
        if gradient(math.exp(middle)) > 0:
            b = middle
        else:
            a = middle
    return math.exp(0.5 * (a + b)), "ok"


def arc_nll(
    gold: Sequence[GoldSentence], scores: Sequence[SentenceScores], temperature: float = 1.0, max_cells: int = 2_000_000
) -> Tuple[float, float]:
    """(NLL of the gold trees per word, its derivative with respect to β = 1/T, per word)."""
    lengths = [sentence.n for sentence in gold]
    total, derivative = 0.0, 0.0
    beta = 1.0 / temperature
    with torch.no_grad():
        for index in batch_indices(lengths, max_cells):
            raw, batch_lengths = padded_scores(scores, index)
            dist = TreeDistribution(raw * beta, batch_lengths, single_root=True)
            heads = padded_gold(gold, index, raw.shape[-1])
            total -= float(dist.log_prob(heads).sum())
            finite = torch.isfinite(raw)
            expected = dist.marginals * torch.where(finite, raw, torch.zeros_like(raw))
            words = heads >= 0
            gold_score = torch.gather(raw, 1, heads.clamp(min=0).unsqueeze(1)).squeeze(1)
            derivative += float(expected.sum() - torch.where(words, gold_score, torch.zeros_like(gold_score)).sum())
    n_words = float(sum(lengths))
    return total / n_words, derivative / n_words


def fit_arc_temperature(
    gold: Sequence[GoldSentence], scores: Sequence[SentenceScores], iterations: int = 25
) -> ArcTemperatureFit:
    """Fit T for the arc scores on held-out gold trees; returns T and the NLL before/after."""
    if len(gold) != len(scores) or not gold:
        raise ValueError("fit_arc_temperature needs as many scored sentences as gold sentences (and some)")
    beta, status = _bisect(lambda b: arc_nll(gold, scores, 1.0 / b)[1], *BETA_RANGE, iterations)
    before = arc_nll(gold, scores, 1.0)[0]
    after = arc_nll(gold, scores, 1.0 / beta)[0]
    return {
        "temperature": 1.0 / beta,
        "status": status,
        "nll_per_word_before": before,
        "nll_per_word_after": after,
        "n_sentences": len(gold),
    }


def _gold_label_logits(
    gold: Sequence[GoldSentence], scores: Sequence[SentenceScores]
) -> Optional[Tuple[numpy.ndarray, numpy.ndarray]]:
    """Relation log-probabilities at the gold head of each word whose gold label the model knows."""
    rows, targets = [], []
    for sentence, score in zip(gold, scores):
        if score.rel is None or score.labels is None:
            return None
        index = {normalise_label(label): i for i, label in enumerate(score.labels)}
        for m in range(1, sentence.n + 1):
            label = normalise_label(sentence.deprels[m - 1])
            if label in index:
                rows.append(score.rel[sentence.heads[m], m].astype(numpy.float64))
                targets.append(index[label])
    if not rows:
        return None
    return numpy.stack(rows), numpy.asarray(targets)


def label_nll(logits: numpy.ndarray, targets: numpy.ndarray, temperature: float) -> Tuple[float, float]:
    """(mean NLL of the gold labels at temperature T, derivative with respect to β = 1/T)."""
    scaled = logits / temperature
    scaled = scaled - scaled.max(-1, keepdims=True)
    probs = numpy.exp(scaled)
    probs /= probs.sum(-1, keepdims=True)
    rows = numpy.arange(len(targets))
    log_z = numpy.log(numpy.exp(scaled).sum(-1))
    nll = float((log_z - scaled[rows, targets]).mean())
    safe = numpy.where(numpy.isfinite(logits), logits, 0.0)
    derivative = float(((probs * safe).sum(-1) - safe[rows, targets]).mean())
    return nll, derivative


def fit_rel_temperature(
    gold: Sequence[GoldSentence], scores: Sequence[SentenceScores], iterations: int = 40
) -> Optional[RelTemperatureFit]:
    """Fit T for the relation log-probabilities on gold labels at gold heads (None: no labels)."""
    data = _gold_label_logits(gold, scores)
    if data is None:
        return None
    logits, targets = data
    beta, status = _bisect(lambda b: label_nll(logits, targets, 1.0 / b)[1], *BETA_RANGE, iterations)
    return {
        "temperature": 1.0 / beta,
        "status": status,
        "nll_per_word_before": label_nll(logits, targets, 1.0)[0],
        "nll_per_word_after": label_nll(logits, targets, 1.0 / beta)[0],
        "n_words": int(len(targets)),
    }
