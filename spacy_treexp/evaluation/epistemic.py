"""Sentence-level risk and out-of-domain detection (issue 21, part 4).

Every score is a function of one sentence's annotation (``SentenceAnnotation``, the record
behind ``sent._``), so the same numbers come from the spaCy component, the Stanza processor
or the command line:

* ``error_probability`` = 1 − p(parse): the exact probability that the parse has at least
  one wrong head (``sent._.error_probability``);
* ``expected_errors`` = Σ_m (1 − μ(head_m, m)) (``sent._.expected_errors``);
* ``tree_entropy``, ``entropy_per_word`` (``sent._.tree_entropy``, ``sent._.entropy_per_word``);
* with ensemble members: ``mutual_information`` (``sent._.mutual_information``),
  ``mutual_information_per_word``, ``head_mutual_information_mean`` (mean of
  ``token._.head_mutual_information``), ``expected_entropy`` and
  ``mixture_error_probability`` = 1 − Σ_k w_k p_k(parse) (``sent._.mixture_error_probability``);
* with a calibration map that carries a novelty reference: ``novelty``
  (``sent._.novelty``, how far the sentence's encoder vectors are from the training data's)
  and, with its domain model, ``out_of_domain`` (``sent._.out_of_domain``);

and, as baselines that need only a per-word softmax over the same arc scores, the local
head entropy (mean over words of −Σ_h q(h|m) log q(h|m), q = softmax of the column) and the
local expected errors Σ_m (1 − q(head_m | m)). Sentence length is reported beside them.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy
import torch

from spacy_treexp.annotate.batching import pad_scores
from spacy_treexp.annotate.records import SentenceAnnotation, SentenceScores
from spacy_treexp.calibration.fit import GoldTree
from spacy_treexp.calibration.map import CalibrationMap, calibrate_sentences
from spacy_treexp.engine import TreeDistribution
from spacy_treexp.evaluation.metrics import auroc

#: The scores a sentence's annotation gives (see the module doc), by name.
ANNOTATION_SCORES = (
    "error_probability",
    "expected_errors",
    "tree_entropy",
    "entropy_per_word",
    "mutual_information",
    "mutual_information_per_word",
    "head_mutual_information_mean",
    "expected_entropy",
    "mixture_error_probability",
    "novelty",
    "out_of_domain",
    "length",
)
#: Baselines from a per-word softmax over the same arc scores.
LOCAL_SCORES = ("local_head_entropy", "local_expected_errors")


def annotation_scores(record: SentenceAnnotation) -> Dict[str, float]:
    """The module doc's scores of one sentence (NaN where the annotation lacks a value,
    e.g. the mutual information without ensemble members)."""
    n = max(record.n, 1)
    nan = float("nan")

    def value(x: Optional[float]) -> float:
        return nan if x is None else float(x)

    mi = value(record.mutual_information)
    head_mi = record.head_mutual_information
    return {
        "error_probability": value(record.error_probability),
        "expected_errors": value(record.expected_errors),
        "tree_entropy": value(record.entropy),
        "entropy_per_word": value(record.entropy_per_word),
        "mutual_information": mi,
        "mutual_information_per_word": mi / n,
        "head_mutual_information_mean": nan if head_mi is None else float(numpy.mean(head_mi)),
        "expected_entropy": value(record.expected_entropy),
        "mixture_error_probability": value(record.mixture_error_probability),
        "novelty": value(record.novelty),
        "out_of_domain": value(record.out_of_domain),
        "length": float(record.n),
    }


def local_scores(arc: numpy.ndarray, heads: numpy.ndarray) -> Dict[str, float]:
    """The local baselines of one sentence from its arc scores ``(n+1, n+1)`` and parse
    ``heads`` ``(n,)`` (0 = ROOT): each word's head distribution is the softmax of its
    column, without the tree constraint."""
    scores = numpy.array(arc, dtype=numpy.float64)
    n = scores.shape[-1] - 1
    scores[:, 0] = -numpy.inf
    numpy.fill_diagonal(scores, -numpy.inf)
    columns = scores[:, 1:]
    top = columns.max(axis=0, keepdims=True)
    log_q = columns - (top + numpy.log(numpy.exp(columns - top).sum(axis=0, keepdims=True)))
    q = numpy.exp(log_q)
    entropy = -numpy.where(q > 0, q * numpy.where(q > 0, log_q, 0.0), 0.0).sum(axis=0)
    head_q = q[numpy.asarray(heads), numpy.arange(n)]
    return {"local_head_entropy": float(entropy.mean()), "local_expected_errors": float((1.0 - head_q).sum())}


def score_table(
    records: Sequence[SentenceAnnotation], arcs: Optional[Sequence[numpy.ndarray]] = None
) -> Dict[str, numpy.ndarray]:
    """Every score of every sentence, ``{name: (S,) array}``; with the sentences' arc scores
    ``arcs``, the local baselines too."""
    rows: List[Dict[str, float]] = [annotation_scores(record) for record in records]
    if arcs is not None:
        for row, record, arc in zip(rows, records, arcs):
            row.update(local_scores(arc, record.heads))
    names = list(rows[0]) if rows else list(ANNOTATION_SCORES)
    return {name: numpy.array([row[name] for row in rows], dtype=numpy.float64) for name in names}


def has_attachment_error(predicted: Iterable[numpy.ndarray], gold: Iterable[numpy.ndarray]) -> numpy.ndarray:
    """Per sentence, whether any predicted head (``(n,)``, 0 = ROOT) differs from gold."""
    return numpy.array([bool((numpy.asarray(p) != numpy.asarray(g)).any()) for p, g in zip(predicted, gold)])


def auroc_table(
    scores: Mapping[str, numpy.ndarray], positive: numpy.ndarray, n_boot: int = 1000, seed: int = 0
) -> Dict[str, Dict[str, float]]:
    """AUROC of each score for ``positive`` (higher score = more likely positive), with a
    95% percentile bootstrap interval over sentences (``n_boot`` resamples); scores with a
    NaN are left out."""
    positive = numpy.asarray(positive, dtype=bool)
    rng = numpy.random.default_rng(seed)
    draws = [rng.integers(0, len(positive), len(positive)) for _ in range(n_boot)]
    out: Dict[str, Dict[str, float]] = {}
    for name, values in scores.items():
        values = numpy.asarray(values, dtype=numpy.float64)
        if numpy.isnan(values).any() or positive.all() or not positive.any():
            continue
        boot = [auroc(values[d], positive[d]) for d in draws if 0 < positive[d].sum() < len(d)]
        low, high = numpy.percentile(boot, [2.5, 97.5]) if boot else (float("nan"), float("nan"))
        out[name] = {"auroc": auroc(values, positive), "low": float(low), "high": float(high)}
    return out


def parse_log_probs(arcs: Sequence[numpy.ndarray], heads: Sequence[numpy.ndarray], temperature: float) -> numpy.ndarray:
    """log p_T(parse) of each sentence: its ``heads`` ``(n,)`` under the tree distribution of
    its arc scores ``(n+1, n+1)`` divided by ``temperature`` (single-root), float64."""
    out = numpy.empty(len(arcs))
    for start in range(0, len(arcs), 256):
        chunk = range(start, min(start + 256, len(arcs)))
        scores, lengths = pad_scores([numpy.asarray(arcs[i], dtype=numpy.float64) for i in chunk], temperature)
        padded = torch.full((len(chunk), scores.shape[-1]), -1, dtype=torch.long)
        for b, i in enumerate(chunk):
            padded[b, 1 : len(heads[i]) + 1] = torch.as_tensor(numpy.asarray(heads[i], dtype=numpy.int64))
        out[start : start + len(chunk)] = TreeDistribution(scores, lengths).log_prob(padded).double().numpy()
    return out


def map_trees(arcs: Sequence[numpy.ndarray]) -> List[numpy.ndarray]:
    """The single-root MAP tree ``(n,)`` (0 = ROOT) of each sentence's arc scores ``(n+1, n+1)``."""
    trees: List[numpy.ndarray] = []
    for start in range(0, len(arcs), 256):
        scores, lengths = pad_scores([numpy.asarray(a, dtype=numpy.float64) for a in arcs[start : start + 256]], 1.0)
        mode = TreeDistribution(scores, lengths).mode
        trees.extend(mode[b, 1 : n + 1].cpu().numpy() for b, n in enumerate(lengths.tolist()))
    return trees


def fit_risk_temperature(
    arcs: Sequence[numpy.ndarray],
    heads: Sequence[numpy.ndarray],
    has_error: numpy.ndarray,
    grid: Sequence[float] = tuple(numpy.round(numpy.arange(0.3, 1.51, 0.01), 2)),
) -> Dict[str, float]:
    """The ``risk_temperature`` T whose error probability 1 − p_T(parse) best predicts which
    parses have an attachment error: the maximum of the Bernoulli log-likelihood over
    ``grid`` (held-out sentences: arc scores as annotated, the parse's heads, whether it has
    an error). Among equal log-losses the T nearest 1 (scores that do not tell the parses
    apart, or parses all right or all wrong and certain, give no reason to move it). Returns T,
    the mean log-loss at T and at 1, the predicted and observed error rates at T, and
    ``at_edge``: whether T is an end of ``grid`` (the best T may lie beyond it)."""
    y = numpy.asarray(has_error, dtype=bool)

    def loss(temperature: float) -> Tuple[float, float]:
        p_error = numpy.clip(-numpy.expm1(parse_log_probs(arcs, heads, temperature)), 1e-12, 1 - 1e-12)
        return float(-numpy.mean(numpy.where(y, numpy.log(p_error), numpy.log1p(-p_error)))), float(p_error.mean())

    losses = {float(t): loss(float(t)) for t in grid}
    lowest = min(value[0] for value in losses.values())
    tied = [t for t in losses if losses[t][0] <= lowest + 1e-12 * max(1.0, abs(lowest))]
    best = min(tied, key=lambda t: abs(t - 1.0))
    return {
        "risk_temperature": best,
        "at_edge": best in (min(losses), max(losses)) and len(tied) == 1,
        "log_loss": losses[best][0],
        "log_loss_at_1": loss(1.0)[0],
        "predicted_error_rate": losses[best][1],
        "observed_error_rate": float(y.mean()),
    }


def fit_map_risk_temperature(
    calibration: Optional[CalibrationMap], gold: Sequence[GoldTree], scores: Sequence[SentenceScores]
) -> Dict[str, float]:
    """:func:`fit_risk_temperature` on gold sentences' scores with ``calibration`` applied
    (None: the raw scores), the parser's own tree being the parse (the MAP tree where a record
    has none): the risk temperature that map carries (``CalibrationMap.risk_temperature``)."""
    calibrated = calibrate_sentences(scores, calibration)
    arcs = [numpy.asarray(s.arc, dtype=numpy.float64) for s in calibrated]
    missing = [i for i, s in enumerate(calibrated) if s.heads is None]
    best = dict(zip(missing, map_trees([arcs[i] for i in missing])))
    heads = [best[i] if s.heads is None else numpy.asarray(s.heads) for i, s in enumerate(calibrated)]
    wrong = has_attachment_error(heads, [numpy.asarray(g.heads)[1:] for g in gold])
    return fit_risk_temperature(arcs, heads, wrong)


def with_risk_temperature(
    calibration: CalibrationMap, gold: Sequence[GoldTree], scores: Sequence[SentenceScores]
) -> Tuple[CalibrationMap, Dict[str, float]]:
    """``calibration`` carrying the risk temperature :func:`fit_map_risk_temperature` fits
    with it on these sentences (and its log-losses in ``fit``), and that fit's figures: what
    ``spacy-treexp calibrate`` and ``spacy-treexp train`` store."""
    risk = fit_map_risk_temperature(calibration, gold, scores)
    fitted = {"risk_log_loss": risk["log_loss"], "risk_log_loss_at_1": risk["log_loss_at_1"]}
    mapped = dataclasses.replace(
        calibration, risk_temperature=risk["risk_temperature"], fit={**calibration.fit, **fitted}
    )
    return mapped, risk


def risk_section(
    gold: Sequence[GoldTree],
    scores: Sequence[SentenceScores],
    calibration: Optional[CalibrationMap] = None,
    genres: Optional[Sequence[str]] = None,
    n_boot: int = 1000,
    seed: int = 0,
    risk_temperature: Optional[float] = None,
) -> Dict[str, object]:
    """Sentence risk as ``spacy-treexp evaluate`` reports it: the AUROC of every sentence
    score of :func:`score_table` (and the local baselines, on the same mapped scores) for
    "the parser's tree has a wrong head", with bootstrap intervals over sentences, overall
    and per genre (``genres``, one label per sentence; none: overall only). The sentences are
    annotated as the pipeline annotates them: under ``calibration`` (the pipeline's own map),
    the risk temperature its ``tree_expectations`` sets (``risk_temperature``; None: the map's)
    and the members the scores carry. A score any sentence lacks (e.g.
    the mutual information without members) is left out, overall and in every genre alike;
    ``left_out`` names those that only some sentences lack, with how many lack them."""
    from spacy_treexp.annotate import AnnotateOptions, annotate_sentences

    records = annotate_sentences(scores, AnnotateOptions(seed=seed, risk_temperature=risk_temperature), calibration)
    arcs = [s.arc for s in calibrate_sentences(scores, calibration)]
    wrong = has_attachment_error([r.heads for r in records], [numpy.asarray(g.heads)[1:] for g in gold])
    table = score_table(records, arcs)
    # decided on all sentences: a genre whose sentences all have a score would report it alone
    lacking = {name: int(numpy.isnan(values).sum()) for name, values in table.items()}
    table = {name: values for name, values in table.items() if not lacking[name]}
    partly = {name: count for name, count in lacking.items() if 0 < count < len(records)}

    def block(mask: numpy.ndarray) -> Dict[str, object]:
        chosen = {name: values[mask] for name, values in table.items()}
        return {
            "sentences": int(mask.sum()),
            "with_error": float(wrong[mask].mean()) if mask.any() else float("nan"),
            "auroc": auroc_table(chosen, wrong[mask], n_boot=n_boot, seed=seed),
        }

    everything = numpy.ones(len(records), dtype=bool)
    out: Dict[str, object] = {"map": None if calibration is None else calibration.kind, "all": block(everything)}
    if partly:
        out["left_out"] = partly
    labels = numpy.asarray(list(genres) if genres is not None else ["all"] * len(records))
    if len(set(labels.tolist()) - {"all"}) > 1:
        out["genres"] = {name: block(labels == name) for name in sorted(set(labels.tolist()))}
    return out
