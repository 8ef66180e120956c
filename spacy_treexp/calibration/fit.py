"""Fitting a calibration map on held-out gold trees: maximum likelihood of the trees.

The objective is the gold trees' negative log-likelihood per word under the recalibrated
distribution, NLL(θ, b) = Σ_s [log Z(s'_s) − Σ_m s'_s(gold_m, m)] / Σ_s n_s (Koo et al.
2007: log Z = log det L̂), plus a ridge penalty λ/2 · (Σ_g (θ_g − θ̄)² + Σ_g b_g² + the
squares of every other coefficient) that pulls the groups towards one shared temperature
(θ̄: their mean) and the other terms towards none when data are few. Its
gradient, marginals minus gold indicators chained through the map, comes from torch
autograd through the engine's log Z; L-BFGS minimises it over all sentences at once. The
relation temperature minimises the NLL of the gold label at the gold head (a softmax
over labels, convex in 1/T).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple, TypeVar

import numpy
import torch

from spacy_treexp.annotate import SentenceScores, length_buckets, pad_scores
from spacy_treexp.calibration.map import (
    DEFAULT_EDGES,
    DEFAULT_KNOTS,
    DEPENDENT_FEATURES,
    DIRECTIONS,
    HEAD_DIRECTIONS,
    KINDS,
    RELATION_FEATURES,
    CalibrationError,
    CalibrationMap,
    dependent_feature,
    dependent_relations,
    group_count,
    group_index,
    label_entropies,
    local_log_probs,
    transform_scores,
)
from spacy_treexp.engine import TreeDistribution

#: The default ridge strength λ (per word of the objective) and the ``distance`` map's default
#: dependent features: chosen together by 5-fold cross-validation on EWT dev (held-out arc ECE
#: under its chance band overall, then the most genres under theirs, then AUROC) among
#: λ 3e-3 / 1e-2 / 2e-2 / 3e-2 with and without ``label_entropy``.
DEFAULT_L2 = 1e-2
DEFAULT_FEATURES = ("entropy", "label_entropy")
#: Engine batches of at most this many score cells.
MAX_CELLS = 2_000_000


class GoldTree(Protocol):
    """What fitting reads of a gold sentence (as :class:`spacy_treexp.evaluation.GoldSentence`):
    ``heads`` (n+1,) with -1 at ROOT, 0 = ROOT, and ``deprels`` (n,)."""

    heads: numpy.ndarray
    deprels: List[str]


@dataclass
class _Batch:
    scores: torch.Tensor
    lengths: torch.Tensor
    gold: torch.Tensor
    groups: torch.Tensor
    knots: torch.Tensor
    columns: torch.Tensor  # index of each dependent's relation into γ (the last: none)
    given: Optional[Dict[str, torch.Tensor]] = None  # features of RELATION_FEATURES, (B, N+1)


def _batches(
    gold: Sequence[GoldTree],
    scores: Sequence[SentenceScores],
    kind: str,
    edges: Sequence[int],
    knots: torch.Tensor,
    relations: Sequence[Optional[List[str]]],
    names: Sequence[str],
    label_entropy: Optional[Sequence[Optional[numpy.ndarray]]] = None,
) -> List[_Batch]:
    lengths = [s.n for s in scores]
    position = {name: k for k, name in enumerate(names)}
    out = []
    for index in length_buckets(lengths, 512, max_cells=MAX_CELLS):
        raw, batch_lengths = pad_scores([scores[i].arc for i in index])
        heads = torch.full(raw.shape[:2], -1, dtype=torch.long)
        columns = torch.full(raw.shape[:2], len(names), dtype=torch.long)
        given = None
        if label_entropy is not None:
            values = torch.zeros(raw.shape[:2], dtype=torch.float64)
            for b, i in enumerate(index):
                row = label_entropy[i]
                if row is not None:
                    values[b, 1 : len(row) + 1] = torch.from_numpy(numpy.asarray(row, dtype=numpy.float64))
            given = {"label_entropy": values}
        for b, i in enumerate(index):
            heads[b, : lengths[i] + 1] = torch.from_numpy(numpy.asarray(gold[i].heads, dtype=numpy.int64))
            for m, name in enumerate(relations[i] or (), start=1):
                columns[b, m] = position.get(name, len(names))
        groups = group_index(raw.shape[-1], kind, edges)
        out.append(_Batch(raw, batch_lengths, heads, groups, knots, columns, given))
    return out


def tree_nll(
    batches: Sequence[_Batch],
    scale: torch.Tensor,
    bias: torch.Tensor,
    hinge: torch.Tensor,
    gamma: torch.Tensor,
    features: Sequence[str] = (),
    feature_scale: Optional[torch.Tensor] = None,
    tables: Sequence[Optional[torch.Tensor]] = (None, None, None, None),
) -> torch.Tensor:
    """Σ over sentences of −log p'(gold tree) (differentiable in the map's parameters);
    ``tables``: the relation tables β ``(R, 3)``, σ ``(R, 3)``, η ``(R, 2)`` and τ ``(R, 2)``
    (None: none)."""
    total = torch.zeros((), dtype=torch.float64)
    padded_gamma = torch.cat([gamma, gamma.new_zeros(1)])
    padded = [None if t is None else torch.cat([t, t.new_zeros(1, t.shape[1])]) for t in tables]
    for batch in batches:
        columns = padded_gamma[batch.columns]
        rows = [None if t is None else t[batch.columns] for t in padded]
        mapped = transform_scores(
            batch.scores,
            batch.lengths,
            scale,
            bias,
            batch.groups,
            batch.knots,
            hinge,
            columns,
            features,
            feature_scale,
            *rows,
            given=batch.given,
        )
        log_z = TreeDistribution(mapped, batch.lengths, single_root=True).log_partition
        words = batch.gold >= 0
        gold_scores = torch.gather(mapped, 1, batch.gold.clamp(min=0).unsqueeze(1)).squeeze(1)
        total = total + log_z.sum() - torch.where(words, gold_scores, torch.zeros_like(gold_scores)).sum()
    return total


def feature_means(batches: Sequence[_Batch], features: Sequence[str], n_words: int) -> torch.Tensor:
    """The mean of each dependent feature over the words of ``batches``, ``(F,)`` float64."""
    totals = torch.zeros(len(features), dtype=torch.float64)
    for batch in batches:
        local, allowed, _ = local_log_probs(batch.scores, batch.lengths)
        words = batch.gold >= 0
        for k, name in enumerate(features):
            given = batch.given.get(name) if batch.given is not None else None
            value = given if given is not None else dependent_feature(name, local, allowed)
            totals[k] += torch.where(words, value, torch.zeros_like(value)).sum()
    return totals / max(n_words, 1)


def forbids_gold(tree: GoldTree, score: SentenceScores) -> bool:
    """Whether ``score``'s arc scores forbid (-inf) an arc of the gold ``tree``: its likelihood
    is then 0 whatever the map, so the sentence cannot be fitted on (a parser that prunes arcs)."""
    heads = numpy.asarray(tree.heads)
    if heads.shape != (score.n + 1,):
        return False  # a length mismatch is _check's to report
    gold_scores = numpy.asarray(score.arc, dtype=numpy.float64)[heads[1:], numpy.arange(1, score.n + 1)]
    return not bool(numpy.isfinite(gold_scores).all())


Tree = TypeVar("Tree", bound=GoldTree)


def fittable(
    gold: Sequence[Tree], scores: Sequence[SentenceScores]
) -> Tuple[List[Tree], List[SentenceScores], List[int]]:
    """The gold trees and scores a map can be fitted on (those :func:`forbids_gold` does not
    refuse), and the indices of the others, which the fits leave out."""
    left_out = [i for i, (tree, score) in enumerate(zip(gold, scores)) if forbids_gold(tree, score)]
    if not left_out:
        return list(gold), list(scores), []
    dropped = set(left_out)
    kept = [i for i in range(len(gold)) if i not in dropped]
    return [gold[i] for i in kept], [scores[i] for i in kept], left_out


def _where(i: int, tree: GoldTree) -> str:
    """Which sentence ``i`` (counted from 0) is, by its ``sent_id`` where the gold tree has one."""
    sent_id = getattr(tree, "sent_id", None)
    return f"sentence {i} (sent_id {sent_id})" if sent_id else f"sentence {i} (counted from 0)"


def _check(gold: Sequence[GoldTree], scores: Sequence[SentenceScores]) -> int:
    if len(gold) != len(scores):
        raise CalibrationError(f"fit_calibration: {len(gold)} gold trees for {len(scores)} scored sentences")
    if not scores:
        raise CalibrationError("fit_calibration: no sentences to fit on")
    for i, (tree, score) in enumerate(zip(gold, scores)):
        score.check(_where(i, tree))
        heads = numpy.asarray(tree.heads)
        if heads.shape != (score.n + 1,):
            raise CalibrationError(
                f"fit_calibration: {_where(i, tree)} has {score.n} words but {heads.size - 1} gold heads"
            )
        if forbids_gold(tree, score):
            raise CalibrationError(
                f"fit_calibration: {_where(i, tree)}: the scores forbid an arc of the gold tree (leave it out: fittable)"
            )
    return int(sum(s.n for s in scores))


def fit_calibration(
    gold: Sequence[GoldTree],
    scores: Sequence[SentenceScores],
    kind: str = "distance",
    *,
    edges: Sequence[int] = DEFAULT_EDGES,
    knots: Sequence[float] = DEFAULT_KNOTS,
    by_relation: bool = True,
    min_relation_words: int = 50,
    features: Sequence[str] = DEFAULT_FEATURES,
    relation_directions: bool = True,
    l2: float = DEFAULT_L2,
    relations: bool = True,
    max_iter: int = 100,
) -> CalibrationMap:
    """The map of ``kind`` (``temperature`` or ``distance``) that maximises the gold trees'
    likelihood under ``scores`` (one :class:`SentenceScores` per gold tree), with the
    relation temperature when ``relations`` and the scores have relation scores. ``edges``
    and ``knots`` (the hinge terms' probabilities; empty: none) shape the ``distance`` map;
    ``by_relation``: a column scale γ_r for each relation the parser gives at least
    ``min_relation_words`` words of the data, and with ``relation_directions`` its terms
    by arc direction (σ and β of a dependent's relation, τ and η of a head's);
    ``features``: the dependent features that scale each column
    (:data:`~spacy_treexp.calibration.map.DEPENDENT_FEATURES`; ``label_entropy`` is dropped
    when a sentence has no relation scores or no parser tree); ``l2`` is the ridge
    strength λ. The defaults were chosen by 5-fold cross-validation on EWT dev (gold-tree
    NLL, arc ECE and AUROC of the held-out folds).

    The map's ``fit`` records the words, the per-word NLL before and after (trees and
    labels) and the optimiser's iterations."""
    if kind not in KINDS:
        raise CalibrationError(f"fit_calibration: kind must be one of {KINDS}, got {kind!r}")
    if not (l2 >= 0 and math.isfinite(l2)):
        raise CalibrationError(f"fit_calibration: l2 must be >= 0, got {l2!r}")
    n_words = _check(gold, scores)
    edges = tuple(int(e) for e in edges)
    knots = tuple(float(p) for p in knots) if kind != "temperature" else ()
    if not all(0 < p < 1 for p in knots):
        raise CalibrationError(f"fit_calibration: knots must be probabilities in (0, 1), got {list(knots)}")
    groups = group_count(kind, edges)
    rich = kind != "temperature"
    features = tuple(features) if rich else ()
    unknown = [f for f in features if f not in DEPENDENT_FEATURES]
    if unknown or len(set(features)) != len(features):
        raise CalibrationError(
            f"fit_calibration: features must be distinct names of {list(DEPENDENT_FEATURES)}, got {list(features)}"
        )
    entropies = label_entropies(scores) if "label_entropy" in features else None
    if entropies is not None and any(e is None for e in entropies):
        features, entropies = tuple(f for f in features if f not in RELATION_FEATURES), None
    per_sentence = [dependent_relations(s) if rich and by_relation else None for s in scores]
    counts: Dict[str, int] = {}
    for names in per_sentence:
        for name in names or ():
            counts[name] = counts.get(name, 0) + 1
    relation_names = sorted(name for name, count in counts.items() if count >= min_relation_words)
    knot_logs = torch.tensor(knots, dtype=torch.float64).log()
    batches = _batches(gold, scores, kind, edges, knot_logs, per_sentence, relation_names, entropies)
    log_scale = torch.zeros(groups, dtype=torch.float64, requires_grad=True)
    bias = torch.zeros(groups, dtype=torch.float64, requires_grad=rich)
    hinge = torch.zeros(len(knots), dtype=torch.float64, requires_grad=rich)
    gamma = torch.zeros(len(relation_names), dtype=torch.float64, requires_grad=rich)
    weights = torch.zeros(len(features), dtype=torch.float64, requires_grad=rich)
    with_tables = rich and relation_directions and bool(relation_names)
    tables = [
        torch.zeros((len(relation_names), width), dtype=torch.float64, requires_grad=with_tables)
        for width in (len(DIRECTIONS), len(DIRECTIONS), len(HEAD_DIRECTIONS), len(HEAD_DIRECTIONS))
    ]
    parameters = [log_scale] + ([bias, hinge, gamma, weights] if rich else []) + (tables if with_tables else [])
    # the features enter centred on their means (θ_g − Σ_f w_f · mean_f is the stored scale):
    # the same maps and the same optimum, as the ridge does not see a shift common to all
    # θ_g, but w no longer trades against that shift (a feature that barely varies, as an
    # untrained parser's label entropy, otherwise lets θ and w run off together)
    means = feature_means(batches, features, n_words) if features else torch.zeros(0, dtype=torch.float64)

    def stored(log_scale: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        return log_scale - (weights * means).sum()

    def nll(scale: torch.Tensor, *rest: torch.Tensor) -> torch.Tensor:
        b, c, g, w, *t = rest
        return tree_nll(batches, scale, b, c, g, features, w, t if with_tables else (None,) * 4) / n_words

    def objective() -> torch.Tensor:
        value = nll(stored(log_scale, weights).exp(), bias, hinge, gamma, weights, *tables)
        if rich and l2 > 0:
            penalty = ((log_scale - log_scale.mean()) ** 2).sum() + (bias**2).sum() + (hinge**2).sum()
            penalty = penalty + (gamma**2).sum() + (weights**2).sum() + sum((t**2).sum() for t in tables)
            value = value + 0.5 * l2 * penalty
        return value

    with torch.no_grad():
        identity = torch.ones(groups, dtype=torch.float64)
        zeros = (torch.zeros_like(t) for t in (identity, hinge, gamma, weights, *tables))
        before = float(nll(identity, *zeros))
    optimiser = torch.optim.LBFGS(parameters, lr=1.0, max_iter=max_iter, line_search_fn="strong_wolfe")
    evaluations = 0

    def closure() -> torch.Tensor:
        nonlocal evaluations
        evaluations += 1
        optimiser.zero_grad()
        value = objective()
        value.backward()
        return value

    optimiser.step(closure)
    with torch.no_grad():
        log_scale = stored(log_scale, weights)
        after = float(nll(log_scale.exp(), bias, hinge, gamma, weights, *tables))
    fit: Dict[str, Any] = {
        "n_sentences": len(scores),
        "n_words": n_words,
        "tree_nll_per_word_before": before,
        "tree_nll_per_word_after": after,
        "l2": l2 if rich else 0.0,
        "evaluations": evaluations,
    }
    rel_temperature, label_scale = 1.0, ()  # type: Tuple[float, Tuple[float, ...]]
    if relations:
        fitted = fit_rel_temperature(gold, scores, relation_names, per_sentence, l2)
        if fitted is not None:
            rel_temperature, label_scale = fitted[0], fitted[1] if relation_names else ()
            fit.update(label_nll_per_word_before=fitted[2], label_nll_per_word_after=fitted[3])
    member_map = None
    if members_add_up(scores):  # a Stanza ensemble: each member is a parser of its own (map.py's module doc)
        member_gold, member_scores = member_records(gold, scores)
        member_map = fit_calibration(
            member_gold,
            member_scores,
            kind,
            edges=edges,
            knots=knots,
            by_relation=by_relation,
            min_relation_words=min_relation_words,
            features=features,
            relation_directions=relation_directions,
            l2=l2,
            relations=False,  # members carry arc scores only
            max_iter=max_iter,
        )
    return CalibrationMap(
        kind,
        tuple(float(v) for v in log_scale.detach()),
        tuple(float(v) for v in bias.detach()),
        edges,
        knots,
        tuple(float(v) for v in hinge.detach()),
        tuple(relation_names),
        tuple(float(v) for v in gamma.detach()),
        label_scale,
        rel_temperature=rel_temperature,
        dependent_features=features,
        feature_scale=tuple(float(v) for v in weights.detach()),
        relation_bias=_rows(tables[0]) if with_tables else (),
        relation_direction_scale=_rows(tables[1]) if with_tables else (),
        head_relation_bias=_rows(tables[2]) if with_tables else (),
        head_relation_scale=_rows(tables[3]) if with_tables else (),
        fit=fit,
        members=member_map,
    )


def members_add_up(scores: Sequence[SentenceScores]) -> bool:
    """Whether the sentences' ensemble members are the summands of their scores (at least two
    members, adding up to ``arc`` on its finite entries, -inf where it is): a Stanza
    ``EnsembleGraphParser``'s, whose parsers were each trained alone. MC-dropout members, the
    product ensemble's summed members and the mixture's parsers are each on the scale of
    ``arc`` and do not add up to it."""
    found = False
    for score in scores:
        if score.members is None:
            continue
        members = numpy.asarray(score.members, dtype=numpy.float64)
        arc = numpy.asarray(score.arc, dtype=numpy.float64)
        total = members.sum(0)
        finite = numpy.isfinite(arc)
        if len(members) < 2 or not numpy.array_equal(finite, numpy.isfinite(total)):
            return False
        if not numpy.allclose(arc[finite], total[finite], rtol=1e-4, atol=1e-4):
            return False
        found = True
    return found


def member_records(gold: Sequence[Tree], scores: Sequence[SentenceScores]) -> Tuple[List[Tree], List[SentenceScores]]:
    """Each sentence's gold tree once per member, with that member's arc scores in the place
    of the sentence's (its relation scores, parse and labels kept): what the members' map is
    fitted on."""
    out_gold: List[Tree] = []
    out_scores: List[SentenceScores] = []
    for tree, score in zip(gold, scores):
        for arc in score.members if score.members is not None else ():
            out_gold.append(tree)
            out_scores.append(score.replace(arc=numpy.asarray(arc), members=None, member_weights=None))
    return out_gold, out_scores


#: Below this gold-tree NLL per word on the fitted sentences, a map has made the parser
#: certain of them (a calibrated parser this sure would attach more than 99.99% of words right).
SEPARATED_NLL = 1e-3


def separation_warning(calibration: CalibrationMap) -> Optional[str]:
    """A one-line warning when ``calibration`` was fitted to near-certainty of its gold trees,
    else None. The ridge leaves the shared scale free (it pulls the groups towards their mean),
    so where a scale and the map's other terms can make every fitted gold tree the mode (a
    parser right on almost every fitted word, or a small dev set the distance terms can
    learn by heart), the likelihood rises without end as the scale grows: every probability
    of the map is then 0 or 1 on any sentence (on a 24-sentence dev set, held-out gold-head
    NLL 0.41 -> 1.14, tree entropy 0)."""
    fit = calibration.fit or {}
    after, before = fit.get("tree_nll_per_word_after"), fit.get("tree_nll_per_word_before")
    if not isinstance(after, (int, float)) or not after < SEPARATED_NLL:
        return None
    if not isinstance(before, (int, float)) or before < SEPARATED_NLL:  # certain already: no map did it
        return None
    scale = max(calibration.log_scale, default=0.0)
    return (
        f"the {calibration.kind} map makes the parser certain of the {fit.get('n_sentences', '?')} fitted sentences' "
        f"gold trees (NLL per word {before:.3g} -> {after:.2g}, scores multiplied by up to e^{scale:.1f}): "
        "it learnt them by heart, and gives every word's head a probability of about 0 or 1, even on other "
        "sentences; fit it on more sentences, ones the parser gets wrong at times"
    )


def _rows(table: torch.Tensor) -> Tuple[Tuple[float, ...], ...]:
    return tuple(tuple(float(v) for v in row) for row in table.detach())


def gold_label_logits(
    gold: Sequence[GoldTree],
    scores: Sequence[SentenceScores],
    relation_names: Sequence[str] = (),
    per_sentence: Optional[Sequence[Optional[List[str]]]] = None,
) -> Optional[Tuple[numpy.ndarray, numpy.ndarray, numpy.ndarray]]:
    """Relation log-probabilities ``(W, L)`` at the gold head of each word whose gold label
    the parser knows, that label's index ``(W,)``, and the index of the relation the parser
    gives the word in ``relation_names`` (``len(relation_names)``: none) ``(W,)``; None
    without relation scores."""
    rows, targets, groups = [], [], []
    position = {name: k for k, name in enumerate(relation_names)}
    for s, (tree, score) in enumerate(zip(gold, scores)):
        if score.rel is None or score.labels is None:
            return None
        index = {_label(label): i for i, label in enumerate(score.labels)}
        heads = numpy.asarray(tree.heads)
        given = per_sentence[s] if per_sentence is not None else None
        for m, label in enumerate(tree.deprels, start=1):
            k = index.get(_label(label))
            if k is not None:
                rows.append(numpy.asarray(score.rel[heads[m], m], dtype=numpy.float64))
                targets.append(k)
                groups.append(position.get(given[m - 1], len(relation_names)) if given else len(relation_names))
    if not rows:
        return None
    return numpy.stack(rows), numpy.asarray(targets), numpy.asarray(groups)


def unknown_gold_labels(gold: Sequence[GoldTree], scores: Sequence[SentenceScores]) -> Tuple[int, int, List[str]]:
    """``(words whose gold label the parser does not know, words, those labels most frequent
    first)`` over the sentences with relation scores: their labels do not count in the fit of
    the relation temperature (:func:`gold_label_logits`)."""
    unknown: Dict[str, int] = {}
    words = 0
    for tree, score in zip(gold, scores):
        if score.labels is None:
            continue
        known = {_label(label) for label in score.labels}
        words += len(tree.deprels)
        for label in tree.deprels:
            if _label(label) not in known:
                unknown[label] = unknown.get(label, 0) + 1
    ranked = sorted(unknown, key=lambda label: -unknown[label])
    return sum(unknown.values()), words, ranked


def _label(label: str) -> str:
    """``ROOT`` (spaCy's name) and ``root`` (UD's) are the same relation."""
    return "root" if label.lower() == "root" else label


def fit_rel_temperature(
    gold: Sequence[GoldTree],
    scores: Sequence[SentenceScores],
    relation_names: Sequence[str] = (),
    per_sentence: Optional[Sequence[Optional[List[str]]]] = None,
    l2: float = DEFAULT_L2,
) -> Optional[Tuple[float, Tuple[float, ...], float, float]]:
    """(T, ρ per relation of ``relation_names``, NLL per word before, after) of the gold
    labels at the gold heads, the logits of a word whose parser relation is r multiplied by
    exp(ρ_r) / T (ridge λ = ``l2`` on ρ); None without labels."""
    data = gold_label_logits(gold, scores, relation_names, per_sentence)
    if data is None:
        return None
    logits = torch.from_numpy(data[0])
    logits = torch.where(torch.isfinite(logits), logits, torch.full_like(logits, -1e30))
    targets, groups = torch.from_numpy(data[1]), torch.from_numpy(data[2])
    log_beta = torch.zeros((), dtype=torch.float64, requires_grad=True)
    rho = torch.zeros(len(relation_names), dtype=torch.float64, requires_grad=True)

    def nll(log_factor: torch.Tensor) -> torch.Tensor:
        scaled = logits * log_factor.exp().unsqueeze(1)
        return (torch.logsumexp(scaled, -1) - scaled.gather(1, targets.unsqueeze(1)).squeeze(1)).mean()

    def log_factor() -> torch.Tensor:
        return log_beta + torch.cat([rho, rho.new_zeros(1)])[groups]

    optimiser = torch.optim.LBFGS([log_beta, rho], lr=1.0, max_iter=100, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        optimiser.zero_grad()
        value = nll(log_factor()) + 0.5 * l2 * (rho**2).sum()
        value.backward()
        return value

    optimiser.step(closure)
    with torch.no_grad():
        before = float(nll(torch.zeros(len(groups), dtype=torch.float64)))
        after = float(nll(log_factor()))
    return float(torch.exp(-log_beta.detach())), tuple(float(v) for v in rho.detach()), before, after
