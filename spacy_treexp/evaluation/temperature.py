"""Post-hoc temperature scaling fitted on held-out data (Guo et al. 2017, for trees), as the
evaluation report shows it.

The fit itself is :func:`spacy_treexp.calibration.fit_calibration` with ``kind =
"temperature"``: the arc temperature T divides every arc score, p_T(d) ∝ exp(Σ s(h, m) / T),
and minimises the negative log-likelihood of the gold trees, log Z(s / T) − s(gold) / T
(convex in 1/T); the relation temperature minimises the NLL of the gold label at the gold
head. The MAP tree does not change with T; marginals, entropy, MBR and samples do. The
richer maps of :mod:`spacy_treexp.calibration` are reported in the report's
``calibration`` block.
"""

from __future__ import annotations

from typing import Optional, Sequence, TypedDict

from spacy_treexp.annotate import SentenceScores
from spacy_treexp.calibration import fit_calibration
from spacy_treexp.calibration import fit_rel_temperature as fit_label_temperature
from spacy_treexp.calibration.fit import gold_label_logits
from spacy_treexp.evaluation.conllu import GoldSentence


class TemperatureFit(TypedDict):
    """A fitted temperature, how its fit ended, and the NLL per word before and after."""

    temperature: float
    status: str
    nll_per_word_before: float
    nll_per_word_after: float


class ArcTemperatureFit(TemperatureFit):
    n_sentences: int


class RelTemperatureFit(TemperatureFit):
    n_words: int


def fit_arc_temperature(gold: Sequence[GoldSentence], scores: Sequence[SentenceScores]) -> ArcTemperatureFit:
    """Fit T for the arc scores on held-out gold trees; returns T and the NLL before/after
    (status ``ok``, or ``no_gain`` when the fit did not lower the NLL)."""
    if len(gold) != len(scores) or not gold:
        raise ValueError("fit_arc_temperature needs as many scored sentences as gold sentences (and some)")
    fitted = fit_calibration(gold, scores, "temperature", relations=False)
    before, after = fitted.fit["tree_nll_per_word_before"], fitted.fit["tree_nll_per_word_after"]
    return {
        "temperature": float(fitted.arc_temperature or 1.0),
        "status": "ok" if after <= before + 1e-12 else "no_gain",
        "nll_per_word_before": before,
        "nll_per_word_after": after,
        "n_sentences": len(gold),
    }


def fit_rel_temperature(gold: Sequence[GoldSentence], scores: Sequence[SentenceScores]) -> Optional[RelTemperatureFit]:
    """Fit T for the relation log-probabilities on gold labels at gold heads (None: no labels)."""
    fitted = fit_label_temperature(gold, scores)
    if fitted is None:
        return None
    temperature, _, before, after = fitted
    data = gold_label_logits(gold, scores)
    return {
        "temperature": temperature,
        "status": "ok" if after <= before + 1e-12 else "no_gain",
        "nll_per_word_before": before,
        "nll_per_word_after": after,
        "n_words": 0 if data is None else int(len(data[1])),
    }
