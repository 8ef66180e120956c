"""The calibration map: a reweighting of arc log-potentials that keeps an exact tree distribution.

Any new arc score s'(h, m) defines a tree distribution p'(d) ∝ exp Σ_{(h,m) ∈ d} s'(h, m)
with the same exact marginals, entropy and samplers (Koo et al. 2007). The map reads each
arc's *local* log-probability ℓ(h, m) = s(h, m) − log Σ_{h'} exp s(h', m) (a per-dependent
shift, which leaves the tree distribution unchanged, Koo et al. 2007 §3.1; it makes the map
ignore offsets a score source may add per dependent) and its group g(h, m) — ROOT, or the
direction of the arc and its length bucket — and returns

    s'(h, m) = a_g · ℓ(h, m) + b_g + Σ_k c_k · max(0, ℓ(h, m) − κ_k),   a_g = exp(θ_g) > 0,

the hinge terms (knots κ_k = log p_k, shared by all groups) bending the map where a
scale alone leaves mid-range confidences under-confident. The scale of a dependent's whole
column is further multiplied by exp(γ_r) for the relation r the parser gives it (its
``deprels``, else the best label at its head): words of some relations are attached less
reliably than their scores say, and by exp(w · H_m), H_m the dependent's local head
entropy −Σ_h exp ℓ(h, m) · ℓ(h, m) (``dependent_features``, format 2): a word whose scores
hesitate between heads is sharpened or flattened by its own factor; with ``label_entropy``
also by exp(w' · H^rel_m), H^rel_m the entropy of the relation distribution at the word's
head in the parser's own tree (``heads``), −Σ_l p(l | head_m, m) log p(l | head_m, m): a
word whose label the parser hesitates over is often attached wrongly too (0 where the
scores carry no relation scores or no tree). By the arc's direction
d — to ROOT, from a head before the dependent, from a head after it — an arc into a
dependent of relation r has its scale further multiplied by exp(σ_{r, d})
(``relation_direction_scale``) and gets a bias β_{r, d} (``relation_bias``), and an arc
out of a head of relation r' a scale exp(τ_{r', d}) (``head_relation_scale``) and a bias
η_{r', d} (``head_relation_bias``), d: before or after its dependent:
the parser misjudges how often, and how surely, words of a relation attach (or take
dependents) each way. All of these are format 2. Every term is a function of the parser's
output only, so s' is again a matrix of arc log-potentials. The relation log-probabilities of dependent m
are re-normalised from its label logits multiplied by exp(ρ_r) / T_rel (one temperature,
and a factor per relation the parser gives m).

One group with b = 0 is temperature scaling (a = 1/T, Guo et al. 2017): the MAP tree does
not change. With several groups it may: the fit reports the attachment score before and
after. Relation log-probabilities are re-normalised at ``rel_temperature``
(log-softmax(log p / T) = log-softmax(logits / T)).

A map may also carry ``risk_temperature``, the temperature of the sentence risk
(``sent._.error_probability`` = 1 − p_T(parse)) fitted with the map applied, by the
likelihood of "the parse is entirely right" (``spacy-treexp calibrate``;
:func:`spacy_treexp.evaluation.epistemic.fit_map_risk_temperature`): the annotation core
uses it where the component's own ``risk_temperature`` is not set. It changes no score.

A map may also carry a :class:`~spacy_treexp.calibration.novelty.NoveltyReference`
(``novelty``): the reference of ``sent._.novelty``, how unfamiliar a sentence's encoder
vectors are (out-of-domain detection); it changes no score.

A map may also carry ``members``, a map of its own for an ensemble's members where they are
the *summands* of the scores the map is fitted on (a Stanza ``EnsembleGraphParser`` decodes the
sum of its members' scores, and each member is a parser trained alone): fitted on each member's
own scores by the gold trees' likelihood (:func:`~spacy_treexp.calibration.fit.fit_calibration`
does so when the members add up to the scores), it calibrates each member as the parser it is,
where the map of the sum would scale every member as it scales the sum. Without it
the map serves the members too (MC-dropout members, the product ensemble's summed members and
the mixture's parsers are each on the scale of the scores).

A map is a frozen record with a dict / JSON / bytes form (``to_dict``, ``to_json``,
``to_bytes`` and their ``from_*``), stored in a spaCy config, a file or a pipeline folder.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy
import torch

from spacy_treexp.annotate.relation_scores import log_softmax

if TYPE_CHECKING:
    from spacy_treexp.calibration.novelty import NoveltyReference

#: ``temperature``: one scale, no bias; ``distance``: a scale and a bias per group.
KINDS = ("temperature", "distance")
#: Lower bounds of the arc-length buckets |h − m| of the ``distance`` map.
DEFAULT_EDGES = (1, 2, 3, 4, 6, 9, 15)
#: Local probabilities p_k whose logs are the knots of the ``distance`` map's hinge terms.
DEFAULT_KNOTS = (0.05, 0.2, 0.4, 0.6, 0.8, 0.95)
#: Per-dependent features a map may scale a dependent's column by (see :func:`dependent_feature`).
DEPENDENT_FEATURES = ("entropy", "label_entropy")
#: Dependent features read from the relation scores at the parser's heads (not from the arc scores).
RELATION_FEATURES = ("label_entropy",)
#: Arc directions of the dependent's relation terms: to ROOT, from a head before the dependent, from one after it.
DIRECTIONS = ("root", "head_before", "head_after")
#: Arc directions of ``head_relation_scale`` / ``_bias`` (a word's arcs as a head): before its dependent, after it.
HEAD_DIRECTIONS = DIRECTIONS[1:]
#: Version 2 added ``dependent_features`` / ``feature_scale``, ``relation_bias``,
#: ``relation_direction_scale``, ``head_relation_scale`` and ``head_relation_bias``; version 1 maps read as before.
#: Version 3 added the out-of-domain model's vector term (``novelty.domain.vector_weights``), which
#: a reader of version 2 would silently drop; version 1 and 2 maps read as before.
#: Version 4 added ``members`` (a map for an ensemble's members); a map without it is still written as version 3.
FORMAT_VERSION = 4
READABLE_VERSIONS = (1, 2, 3, 4)


class CalibrationError(ValueError):
    """A calibration map that cannot be read or used."""


def group_count(kind: str, edges: Sequence[int]) -> int:
    """Number of groups: 1 for ``temperature``; ROOT plus two directions per bucket for ``distance``."""
    return 1 if kind == "temperature" else 1 + 2 * len(edges)


def group_index(size: int, kind: str, edges: Sequence[int]) -> torch.Tensor:
    """Group of every arc (h, m) of a ``(size, size)`` score matrix, as int64 ``(size, size)``.

    ``distance``: 0 for ROOT's arcs (h = 0); 1 + k for a head left of its dependent in
    bucket k of |h − m|; 1 + K + k for a head to its right."""
    if kind == "temperature":
        return torch.zeros((size, size), dtype=torch.long)
    position = torch.arange(size)
    head, dep = position.unsqueeze(1), position.unsqueeze(0)
    distance = (head - dep).abs()
    bucket = torch.bucketize(distance, torch.tensor(list(edges), dtype=torch.long), right=True) - 1
    bucket = bucket.clamp(min=0)
    groups = torch.where(head < dep, 1 + bucket, 1 + len(edges) + bucket)
    return torch.where(head == 0, torch.zeros_like(groups), groups)


def dependent_feature(name: str, local: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """A per-dependent feature ``(B, N+1)`` from the local log-probabilities ``local``
    ``(B, N+1, N+1)`` of the ``allowed`` arcs: ``entropy``, −Σ_h exp ℓ(h, m) · ℓ(h, m) (nats).
    A feature of :data:`RELATION_FEATURES` is not in the arc scores: its values come from
    :func:`dependent_label_entropy` (see :func:`transform_scores`' ``given``), zeros here."""
    if name in RELATION_FEATURES:
        return torch.zeros(local.shape[:-2] + local.shape[-1:], dtype=local.dtype, device=local.device)
    if name == "entropy":
        terms = torch.where(allowed, local.exp() * local, torch.zeros_like(local))
        return -terms.sum(dim=-2)
    raise CalibrationError(f"calibration map: unknown dependent feature {name!r}; known: {list(DEPENDENT_FEATURES)}")


def local_log_probs(scores: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ℓ, allowed, counted) of a padded batch ``(B, N+1, N+1)``: each arc's local
    log-probability (0 outside the allowed arcs), the finite arcs of the sentences, and
    their cells that count (inside the sentence, off the diagonal, not into ROOT)."""
    size = scores.shape[-1]
    position = torch.arange(size, device=scores.device)
    inside = position.unsqueeze(0) <= lengths.unsqueeze(1)  # (B, N+1)
    counted = inside.unsqueeze(2) & inside.unsqueeze(1)
    counted = counted & (position.unsqueeze(1) != position.unsqueeze(0)) & (position > 0)
    allowed = counted & torch.isfinite(scores)
    safe = torch.where(allowed, scores, torch.full_like(scores, -math.inf))
    column = torch.logsumexp(safe, dim=-2, keepdim=True)
    column = torch.where(torch.isfinite(column), column, torch.zeros_like(column))
    local = torch.where(allowed, scores - column, torch.zeros_like(scores))
    return local, allowed, counted


def transform_scores(
    scores: torch.Tensor,
    lengths: torch.Tensor,
    scale: torch.Tensor,
    bias: torch.Tensor,
    groups: torch.Tensor,
    knots: Optional[torch.Tensor] = None,
    hinge: Optional[torch.Tensor] = None,
    column_log_scale: Optional[torch.Tensor] = None,
    features: Sequence[str] = (),
    feature_scale: Optional[torch.Tensor] = None,
    column_bias: Optional[torch.Tensor] = None,
    column_direction_log_scale: Optional[torch.Tensor] = None,
    head_bias: Optional[torch.Tensor] = None,
    head_log_scale: Optional[torch.Tensor] = None,
    *,
    given: Optional[Mapping[str, torch.Tensor]] = None,
) -> torch.Tensor:
    """The map on a batch: ``scores`` ``(B, N+1, N+1)``, ``lengths`` ``(B,)``, per-group
    ``scale`` and ``bias`` ``(G,)``, ``groups`` ``(N+1, N+1)``, and optional hinge ``knots``
    (log-probabilities) with coefficients ``hinge`` ``(K,)`` -> s' (differentiable in
    ``scale``, ``bias``, ``hinge``, ``feature_scale`` and the relation terms);
    ``column_log_scale`` ``(B, N+1)``: γ of each dependent's relation (0: none);
    ``features`` (names of :data:`DEPENDENT_FEATURES`) with weights ``feature_scale``
    ``(F,)``: each dependent's column scale times exp(Σ_f w_f · feature_f(m));
    ``column_bias`` and ``column_direction_log_scale`` ``(B, N+1, 3)``: β and σ of each
    dependent's relation per arc direction (:data:`DIRECTIONS`); ``head_bias`` and
    ``head_log_scale`` ``(B, N+1, 2)``: η and τ of each word's relation as a head, per
    direction; ``given``: values ``(B, N+1)`` of the features of :data:`RELATION_FEATURES`
    (absent: 0). -inf (forbidden) stays -inf; padding, column 0 and the
    diagonal become 0 (the engine ignores them)."""
    size = scores.shape[-1]
    position = torch.arange(size, device=scores.device)
    local, allowed, counted = local_log_probs(scores, lengths)
    arc_scale = scale[groups]
    log_column = column_log_scale
    if features and feature_scale is not None:
        for name, weight in zip(features, feature_scale):
            value = given[name] if given is not None and name in given else dependent_feature(name, local, allowed)
            term = weight * value
            log_column = term if log_column is None else log_column + term
    to_root = (position == 0).unsqueeze(1)  # (N+1, 1): the arcs out of ROOT
    before = position.unsqueeze(1) < position.unsqueeze(0)  # (N+1, N+1): head before its dependent

    def of_dependent(table: torch.Tensor) -> torch.Tensor:  # (B, N+1, 3) by dependent -> (B, N+1, N+1) per arc
        rows = table.unsqueeze(1)
        return torch.where(to_root, rows[..., 0], torch.where(before, rows[..., 1], rows[..., 2]))

    def of_head(table: torch.Tensor) -> torch.Tensor:  # (B, N+1, 2) by head -> (B, N+1, N+1); ROOT's rows are 0
        rows = table.unsqueeze(2)
        return torch.where(before, rows[..., 0], rows[..., 1])

    log_arc = None if log_column is None else log_column.unsqueeze(1)
    for term, spread in [(column_direction_log_scale, of_dependent), (head_log_scale, of_head)]:
        if term is not None:
            log_arc = spread(term) if log_arc is None else log_arc + spread(term)
    if log_arc is not None:
        arc_scale = arc_scale * log_arc.exp()
    mapped = arc_scale * local + bias[groups]
    if column_bias is not None:
        mapped = mapped + of_dependent(column_bias)
    if head_bias is not None:
        mapped = mapped + of_head(head_bias)
    if knots is not None and hinge is not None and knots.numel():
        mapped = mapped + (torch.relu(local.unsqueeze(-1) - knots) * hinge).sum(-1)
    out = torch.where(allowed, mapped, torch.zeros_like(mapped))
    forbidden = counted & ~torch.isfinite(scores)
    return torch.where(forbidden, torch.full_like(out, -math.inf), out)


def _floats(values: Any, name: str) -> Tuple[float, ...]:
    try:
        out = tuple(float(v) for v in values)
    except (TypeError, ValueError) as e:
        raise CalibrationError(f"calibration map: {name} must be a list of numbers, got {values!r}") from e
    if not all(math.isfinite(v) for v in out):
        raise CalibrationError(f"calibration map: {name} must be finite, got {list(out)}")
    return out


#: The map's file beside the parser that wrote the scores: a spaCy parser component's folder
#: (``biaffine_parser``, which carries it wherever it is sourced) or a Stanza depparse model's.
CALIBRATION_FILE = "treexp_calibration.json"


@dataclass(frozen=True)
class CalibrationMap:
    """A fitted calibration (see the module doc).

    Attributes:
        kind: ``temperature`` or ``distance``.
        log_scale: θ_g per group (a_g = exp θ_g).
        bias: b_g per group (all 0 for ``temperature``).
        edges: lower bounds of the arc-length buckets (``distance``).
        knots: probabilities p_k of the hinge terms' knots log p_k (``distance``; may be empty).
        hinge: c_k per knot.
        relations: relation names with a column scale of their own (``distance``).
        relation_scale: γ_r per relation.
        label_scale: ρ_r per relation (empty: none), the relation scores' factor.
        rel_temperature: the relation temperature (1: relation scores unchanged).
        dependent_features: names of :data:`DEPENDENT_FEATURES` scaling each column (``distance``).
        feature_scale: w_f per dependent feature.
        relation_bias: β_{r, d} per relation of ``relations`` (empty: none), one value per
            direction of :data:`DIRECTIONS`.
        relation_direction_scale: σ_{r, d}, in the same form.
        head_relation_bias: η_{r, d} per relation (empty: none), one value per direction of
            :data:`HEAD_DIRECTIONS`.
        head_relation_scale: τ_{r, d}, in the same form.
        risk_temperature: the sentence risk's temperature fitted with this map, or None (see
            the module doc).
        novelty: the reference of the sentences' encoder novelty, or None (see the module doc).
        members: the map of an ensemble's members that add up to the scores, or None: this
            map serves the members (see the module doc).
        fit: how it was fitted (data size, objective before/after); informative only.
    """

    kind: str = "temperature"
    log_scale: Tuple[float, ...] = (0.0,)
    bias: Tuple[float, ...] = (0.0,)
    edges: Tuple[int, ...] = DEFAULT_EDGES
    knots: Tuple[float, ...] = ()
    hinge: Tuple[float, ...] = ()
    relations: Tuple[str, ...] = ()
    relation_scale: Tuple[float, ...] = ()
    label_scale: Tuple[float, ...] = ()
    rel_temperature: float = 1.0
    dependent_features: Tuple[str, ...] = ()
    feature_scale: Tuple[float, ...] = ()
    relation_bias: Tuple[Tuple[float, ...], ...] = ()
    relation_direction_scale: Tuple[Tuple[float, ...], ...] = ()
    head_relation_bias: Tuple[Tuple[float, ...], ...] = ()
    head_relation_scale: Tuple[Tuple[float, ...], ...] = ()
    fit: Dict[str, Any] = field(default_factory=dict, compare=False)
    risk_temperature: Optional[float] = None
    novelty: Optional[NoveltyReference] = field(default=None, compare=False)
    members: Optional[CalibrationMap] = None

    def __post_init__(self) -> None:
        if self.members is not None and (not isinstance(self.members, CalibrationMap) or self.members.members):
            raise CalibrationError(
                "calibration map: members must be a CalibrationMap without members of its own, got "
                f"{type(self.members).__name__}"
            )
        if self.kind not in KINDS:
            raise CalibrationError(f"calibration map: kind must be one of {KINDS}, got {self.kind!r}")
        edges = tuple(int(e) for e in self.edges)
        if not edges or edges[0] != 1 or any(b <= a for a, b in zip(edges, edges[1:])):
            raise CalibrationError(f"calibration map: edges must rise strictly from 1, got {list(self.edges)}")
        object.__setattr__(self, "edges", edges)
        object.__setattr__(self, "log_scale", _floats(self.log_scale, "log_scale"))
        object.__setattr__(self, "bias", _floats(self.bias, "bias"))
        groups = group_count(self.kind, edges)
        if len(self.log_scale) != groups or len(self.bias) != groups:
            raise CalibrationError(
                f"calibration map: a {self.kind} map has {groups} groups, got {len(self.log_scale)} scales "
                f"and {len(self.bias)} biases"
            )
        if self.kind == "temperature" and (self.bias != (0.0,) or self.knots):
            raise CalibrationError("calibration map: a temperature map has no bias and no knots")
        object.__setattr__(self, "knots", _floats(self.knots, "knots"))
        object.__setattr__(self, "hinge", _floats(self.hinge, "hinge"))
        object.__setattr__(self, "relations", tuple(str(r) for r in self.relations))
        object.__setattr__(self, "relation_scale", _floats(self.relation_scale, "relation_scale"))
        if len(self.relations) != len(self.relation_scale) or (self.kind == "temperature" and self.relations):
            raise CalibrationError(
                f"calibration map: one relation_scale per relation (and none for a temperature map); got "
                f"{len(self.relations)} relations and {len(self.relation_scale)} scales"
            )
        object.__setattr__(self, "label_scale", _floats(self.label_scale, "label_scale"))
        if self.label_scale and len(self.label_scale) != len(self.relations):
            raise CalibrationError(
                f"calibration map: label_scale needs one value per relation ({len(self.relations)}), "
                f"got {len(self.label_scale)}"
            )
        if len(self.knots) != len(self.hinge) or not all(0 < p < 1 for p in self.knots):
            raise CalibrationError(
                f"calibration map: knots must be probabilities in (0, 1), one hinge coefficient each; got "
                f"{list(self.knots)} and {list(self.hinge)}"
            )
        t = float(self.rel_temperature)
        if not (math.isfinite(t) and t > 0):
            raise CalibrationError(f"calibration map: rel_temperature must be positive, got {self.rel_temperature!r}")
        object.__setattr__(self, "rel_temperature", t)
        if self.risk_temperature is not None:
            risk = float(self.risk_temperature)
            if isinstance(self.risk_temperature, bool) or not (math.isfinite(risk) and risk > 0):
                raise CalibrationError(
                    f"calibration map: risk_temperature must be positive or absent, got {self.risk_temperature!r}"
                )
            object.__setattr__(self, "risk_temperature", risk)
        features = tuple(str(f) for f in self.dependent_features)
        unknown = [f for f in features if f not in DEPENDENT_FEATURES]
        if unknown or len(set(features)) != len(features):
            raise CalibrationError(
                f"calibration map: dependent_features must be distinct names of {list(DEPENDENT_FEATURES)}, "
                f"got {list(self.dependent_features)}"
            )
        object.__setattr__(self, "dependent_features", features)
        object.__setattr__(self, "feature_scale", _floats(self.feature_scale, "feature_scale"))
        if len(features) != len(self.feature_scale) or (self.kind == "temperature" and features):
            raise CalibrationError(
                f"calibration map: one feature_scale per dependent feature (and none for a temperature map); got "
                f"{len(features)} features and {len(self.feature_scale)} scales"
            )
        for name, columns in [
            ("relation_bias", DIRECTIONS),
            ("relation_direction_scale", DIRECTIONS),
            ("head_relation_bias", HEAD_DIRECTIONS),
            ("head_relation_scale", HEAD_DIRECTIONS),
        ]:
            object.__setattr__(self, name, _relation_rows(name, getattr(self, name), self.relations, columns))

    # --- construction -------------------------------------------------------------

    @classmethod
    def temperature(cls, arc: float, rel: float = 1.0, fit: Optional[Dict[str, Any]] = None) -> CalibrationMap:
        """Temperature scaling: arc scores / ``arc``, relation logits / ``rel``."""
        if not (math.isfinite(arc) and arc > 0):
            raise CalibrationError(f"calibration map: the arc temperature must be positive, got {arc!r}")
        return cls("temperature", (-math.log(arc),), (0.0,), rel_temperature=rel, fit=dict(fit or {}))

    @classmethod
    def identity(cls, kind: str = "temperature", edges: Sequence[int] = DEFAULT_EDGES) -> CalibrationMap:
        """The map that changes no distribution."""
        groups = group_count(kind, edges)
        return cls(kind, (0.0,) * groups, (0.0,) * groups, tuple(edges))

    @property
    def arc_temperature(self) -> Optional[float]:
        """1 / a of a ``temperature`` map (None for other kinds)."""
        return math.exp(-self.log_scale[0]) if self.kind == "temperature" else None

    # --- applying -----------------------------------------------------------------

    def parameters(self, device: Any = None) -> Tuple[torch.Tensor, ...]:
        """(a_g, b_g, log knots, c_k) as float64 tensors."""

        def tensor(values: Sequence[float]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.float64, device=device).reshape(-1)

        return tensor(self.log_scale).exp(), tensor(self.bias), tensor(self.knots).log(), tensor(self.hinge)

    def relation_index(self, relations: Sequence[Optional[Sequence[str]]], size: int) -> torch.Tensor:
        """The position in ``self.relations`` of each word's relation, ``(B, size)`` int64
        (``len(self.relations)``: ROOT, padding and relations without terms);
        ``relations[b]``: sentence b's n relations, or None."""
        none = len(self.relations)
        position = _by_relation(self.relations, range(none))
        out = numpy.full((len(relations), size), none, dtype=numpy.int64)
        for b, names in enumerate(relations):
            if names:
                out[b, 1 : len(names) + 1] = [position.get(name, none) for name in names]
        return torch.from_numpy(out)

    def column_scales(self, relations: Sequence[Optional[Sequence[str]]], size: int) -> torch.Tensor:
        """γ of each dependent's relation, ``(B, size)`` float64 (0 at ROOT, padding and
        relations without a scale); ``relations[b]``: sentence b's n relations, or None."""
        gamma = torch.tensor([*self.relation_scale, 0.0], dtype=torch.float64)
        return gamma[self.relation_index(relations, size)]

    def relation_tables(self) -> Tuple[Tuple[Tuple[float, ...], ...], ...]:
        """β, σ, η, τ: the per-relation tables in :func:`transform_scores`' order."""
        return self.relation_bias, self.relation_direction_scale, self.head_relation_bias, self.head_relation_scale

    def relation_rows(self, table: Sequence[Sequence[float]], index: torch.Tensor) -> torch.Tensor:
        """The row of ``table`` (one of the map's per-relation tables) for each word's
        relation (``index``: :meth:`relation_index`), ``(B, size, width)`` float64 (0 at
        ROOT, padding and relations without terms)."""
        rows = torch.tensor([*table, (0.0,) * len(table[0])], dtype=torch.float64)
        return rows[index]

    @property
    def reads_label_entropy(self) -> bool:
        """Whether the map needs :func:`dependent_label_entropy` of each sentence."""
        return "label_entropy" in self.dependent_features

    def apply_batch(
        self,
        scores: torch.Tensor,
        lengths: torch.Tensor,
        relations: Optional[Sequence[Optional[Sequence[str]]]] = None,
        label_entropy: Optional[Sequence[Optional[numpy.ndarray]]] = None,
    ) -> torch.Tensor:
        """s' of a padded batch ``(B, N+1, N+1)`` (see :func:`transform_scores`), float64;
        ``relations``: each sentence's dependent relations (see :func:`dependent_relations`);
        ``label_entropy``: each sentence's :func:`dependent_label_entropy` (None: 0)."""
        scale, bias, knots, hinge = self.parameters(scores.device)
        groups = group_index(scores.shape[-1], self.kind, self.edges).to(scores.device)
        columns = None
        tables: List[Optional[torch.Tensor]] = [None] * 4
        if self.relations and relations is not None:
            index = self.relation_index(relations, scores.shape[-1])
            gamma = torch.tensor([*self.relation_scale, 0.0], dtype=torch.float64)
            columns = gamma[index].to(scores.device)
            for k, table in enumerate(self.relation_tables()):
                if table:
                    tables[k] = self.relation_rows(table, index).to(scores.device)
        weights = torch.tensor(self.feature_scale, dtype=torch.float64, device=scores.device)
        given = None
        if self.reads_label_entropy and label_entropy is not None:
            values = numpy.zeros((len(label_entropy), scores.shape[-1]), dtype=numpy.float64)
            for b, row in enumerate(label_entropy):
                if row is not None:
                    values[b, 1 : len(row) + 1] = row
            given = {"label_entropy": torch.from_numpy(values).to(scores.device)}
        return transform_scores(
            scores.to(torch.float64),
            lengths.to(scores.device),
            scale,
            bias,
            groups,
            knots,
            hinge,
            columns,
            self.dependent_features,
            weights,
            *tables,
            given=given,
        )

    def apply_arc(
        self,
        arc: numpy.ndarray,
        relations: Optional[Sequence[str]] = None,
        label_entropy: Optional[numpy.ndarray] = None,
    ) -> numpy.ndarray:
        """s' of one sentence's ``(n+1, n+1)`` arc scores, float64."""
        scores = torch.from_numpy(numpy.asarray(arc, dtype=numpy.float64)).unsqueeze(0)
        lengths = torch.tensor([arc.shape[-1] - 1])
        return self.apply_batch(scores, lengths, [relations], [label_entropy])[0].numpy()

    def label_factors(self, relations: Optional[Sequence[str]], n: int) -> numpy.ndarray:
        """exp(ρ_r(m)) per dependent m = 0..n (1 at ROOT and without a factor), float64."""
        out = numpy.zeros(n + 1, dtype=numpy.float64)
        if self.label_scale and relations is not None:
            rho = _by_relation(self.relations, self.label_scale)
            out[1 : len(relations) + 1] = [rho.get(name, 0.0) for name in relations]
        return numpy.exp(out)

    def apply_rel(self, rel: Any, relations: Optional[Sequence[str]] = None) -> Any:
        """Relation log-probabilities with dependent m's logits multiplied by exp(ρ_r(m)) /
        ``rel_temperature`` (``relations``: the parser's relation of each word): a dense
        ``(n+1, n+1, L)`` array becomes :class:`ScaledRelationScores`, re-normalised for the
        arcs that are read (the core reads a few per word); relation scores computed when read (as
        :class:`~spacy_treexp.annotate.relation_scores.BiaffineRelationScores`, whose logits
        are linear in each dependent's ``dep_part``) get their temperature and dependent
        factors changed."""
        if rel is None:
            return rel
        n = int(rel.shape[0]) - 1
        factors = self.label_factors(relations, n)
        if self.rel_temperature == 1.0 and (factors == 1.0).all():
            return rel
        if isinstance(rel, numpy.ndarray):
            return ScaledRelationScores(rel, factors / self.rel_temperature)
        if dataclasses.is_dataclass(rel) and hasattr(rel, "temperature") and hasattr(rel, "dep_part"):
            dep_part = (rel.dep_part * factors[:, None]).astype(rel.dep_part.dtype)
            return dataclasses.replace(rel, temperature=rel.temperature * self.rel_temperature, dep_part=dep_part)  # type: ignore[type-var]
        raise CalibrationError(
            f"calibration map: cannot apply a relation temperature to relation scores of type {type(rel).__name__}"
        )

    def apply_label_rows(self, rows: numpy.ndarray, relations: Optional[Sequence[str]] = None) -> numpy.ndarray:
        """:meth:`apply_rel` on the ``(n, L)`` relation log-probabilities of words 1..n at
        their heads."""
        factors = self.label_factors(relations, rows.shape[0])[1:]
        if self.rel_temperature == 1.0 and (factors == 1.0).all():
            return rows
        return log_softmax(rows.astype(numpy.float64) * (factors / self.rel_temperature)[:, None])

    # --- serialisation ------------------------------------------------------------

    def to_dict(self) -> Dict[str, Any]:
        """JSON- and config-ready form."""
        return {
            "version": FORMAT_VERSION if self.members is not None else 3,  # readable by a version-3 reader
            "kind": self.kind,
            "log_scale": list(self.log_scale),
            "bias": list(self.bias),
            "edges": list(self.edges),
            "knots": list(self.knots),
            "hinge": list(self.hinge),
            "relations": list(self.relations),
            "relation_scale": list(self.relation_scale),
            "label_scale": list(self.label_scale),
            "rel_temperature": self.rel_temperature,
            "dependent_features": list(self.dependent_features),
            "feature_scale": list(self.feature_scale),
            "relation_bias": [list(row) for row in self.relation_bias],
            "relation_direction_scale": [list(row) for row in self.relation_direction_scale],
            "head_relation_bias": [list(row) for row in self.head_relation_bias],
            "head_relation_scale": [list(row) for row in self.head_relation_scale],
            "fit": dict(self.fit),
            **({} if self.risk_temperature is None else {"risk_temperature": self.risk_temperature}),
            **({} if self.novelty is None else {"novelty": self.novelty.to_dict()}),
            **({} if self.members is None else {"members": self.members.to_dict()}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CalibrationMap:
        """The map of :meth:`to_dict`'s form; ``CalibrationError`` naming what is wrong."""
        if not isinstance(data, Mapping):
            raise CalibrationError(f"calibration map: expected a mapping, got {type(data).__name__}")
        version = data.get("version", FORMAT_VERSION)
        if version not in READABLE_VERSIONS:
            raise CalibrationError(
                f"calibration map: format version {version!r}, this version reads {list(READABLE_VERSIONS)}"
            )
        known = {"version", "kind", "log_scale", "bias", "edges", "knots", "hinge", "relations", "relation_scale"}
        known |= {"label_scale", "rel_temperature", "fit", "novelty", "risk_temperature"}
        if version >= 2:
            known |= {"dependent_features", "feature_scale", "relation_bias", "relation_direction_scale"}
            known |= {"head_relation_bias", "head_relation_scale"}
        if version >= 4:
            known.add("members")
        unknown = sorted(set(data) - known)
        if unknown:
            raise CalibrationError(f"calibration map: unknown field(s) {unknown}")
        missing = sorted({"kind", "log_scale", "bias"} - set(data))
        if missing:
            raise CalibrationError(f"calibration map: missing field(s) {missing}")
        novelty = None
        if data.get("novelty") is not None:
            from spacy_treexp.calibration.novelty import NoveltyReference

            novelty = NoveltyReference.from_dict(data["novelty"])
        return cls(
            kind=data["kind"],
            log_scale=tuple(data["log_scale"]),
            bias=tuple(data["bias"]),
            edges=tuple(data.get("edges", DEFAULT_EDGES)),
            knots=tuple(data.get("knots", ())),
            hinge=tuple(data.get("hinge", ())),
            relations=tuple(data.get("relations", ())),
            relation_scale=tuple(data.get("relation_scale", ())),
            label_scale=tuple(data.get("label_scale", ())),
            rel_temperature=data.get("rel_temperature", 1.0),
            dependent_features=tuple(data.get("dependent_features", ())),
            feature_scale=tuple(data.get("feature_scale", ())),
            relation_bias=data.get("relation_bias", ()),
            relation_direction_scale=data.get("relation_direction_scale", ()),
            head_relation_bias=data.get("head_relation_bias", ()),
            head_relation_scale=data.get("head_relation_scale", ()),
            fit=dict(data.get("fit") or {}),
            risk_temperature=data.get("risk_temperature"),
            novelty=novelty,
            members=None if data.get("members") is None else cls.from_dict(data["members"]),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> CalibrationMap:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise CalibrationError(f"calibration map: not JSON ({e})") from e
        return cls.from_dict(data)

    def to_bytes(self) -> bytes:
        return self.to_json().encode("utf8")

    @classmethod
    def from_bytes(cls, data: bytes) -> CalibrationMap:
        try:
            text = data.decode("utf8")
        except UnicodeDecodeError as e:  # a model file given as the map, say
            raise CalibrationError(f"calibration map: not UTF-8 JSON text ({e})") from e
        return cls.from_json(text)

    def to_disk(self, path: Union[str, Path]) -> None:
        """Write the JSON form atomically (a temporary file renamed into place; removed if that fails)."""
        path = Path(path)
        partial = path.with_name(path.name + ".partial")
        try:
            partial.write_bytes(self.to_bytes())
            partial.replace(path)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise

    @classmethod
    def from_disk(cls, path: Union[str, Path]) -> CalibrationMap:
        path = Path(path)
        if not path.is_file():
            raise CalibrationError(f"calibration map: no such file {path}")
        try:
            return cls.from_bytes(path.read_bytes())
        except CalibrationError as e:
            raise CalibrationError(f"{path}: {e}") from e


def read_map(value: Any, where: str = "calibration") -> Optional[CalibrationMap]:
    """A map from a config value: None, a :class:`CalibrationMap`, its dict form, or a path
    to its JSON file; ``CalibrationError`` prefixed with ``where`` otherwise."""
    if value is None or isinstance(value, CalibrationMap):
        return value
    try:
        if isinstance(value, Mapping):
            return CalibrationMap.from_dict(value)
        if isinstance(value, (str, Path)):
            return CalibrationMap.from_disk(value)
    except CalibrationError as e:
        raise CalibrationError(f"{where}: {e}") from e
    raise CalibrationError(f"{where}: expected a calibration map (dict or JSON file path), got {type(value).__name__}")


def calibrate_sentences(sentences: Sequence[Any], calibration: Optional[CalibrationMap]) -> List[Any]:
    """The sentences' :class:`~spacy_treexp.annotate.SentenceScores` with the map applied to
    their arc and relation scores (the one place a map is applied; the annotation core calls
    it), and to each ensemble member's arc scores (``members``; under ``calibration.members``
    where the map has one). ``calibration`` None returns them unchanged."""
    if calibration is None:
        return list(sentences)
    member_map = calibration.members or calibration
    relations = [dependent_relations(s) if calibration.relations or member_map.relations else None for s in sentences]
    reads_entropy = calibration.reads_label_entropy or member_map.reads_label_entropy
    entropies = label_entropies(sentences) if reads_entropy else [None] * len(sentences)
    # each sentence's own scores under the map, each ensemble member's (a member is a parser's
    # scores of the same words) under the members' map: one padded pass per length bucket
    arcs = _map_arcs(calibration, [(i, s.arc) for i, s in enumerate(sentences)], sentences, relations, entropies)
    members = [getattr(s, "members", None) for s in sentences]
    owned = [(i, arc) for i, own in enumerate(members) if own is not None for arc in own]
    member_arcs = _map_arcs(member_map, owned, sentences, relations, entropies)
    out = []
    position = 0
    for i, (sentence, names) in enumerate(zip(sentences, relations)):
        changes = {"arc": arcs[i], "rel": calibration.apply_rel(sentence.rel, names)}
        own = members[i]
        if own is not None and len(own):
            count = len(own)
            changes["members"] = numpy.stack(member_arcs[position : position + count])
            position += count
        out.append(sentence.replace(**changes))
    return out


def _map_arcs(
    calibration: CalibrationMap,
    owned: Sequence[Tuple[int, numpy.ndarray]],
    sentences: Sequence[Any],
    relations: Sequence[Optional[List[str]]],
    entropies: Sequence[Optional[numpy.ndarray]],
) -> List[numpy.ndarray]:
    """``calibration`` applied to each ``(sentence index, arc scores)`` of ``owned``, in one
    padded pass per length bucket; a map that turns finite scores into infinities is named."""
    from spacy_treexp.annotate.batching import length_buckets, pad_scores

    owners = [i for i, _ in owned]
    mapped_arcs: List[numpy.ndarray] = [numpy.empty(0)] * len(owned)
    sizes = [sentences[i].n for i in owners]
    for index in length_buckets(sizes, 512, max_cells=4_000_000):
        raw, lengths = pad_scores([owned[j][1] for j in index])
        mapped = calibration.apply_batch(
            raw, lengths, [relations[owners[j]] for j in index], [entropies[owners[j]] for j in index]
        ).numpy()
        overflow = ~numpy.isfinite(mapped) & numpy.isfinite(raw.numpy())  # a finite score mapped to ±inf or nan
        if overflow.any():
            j = index[int(overflow.reshape(len(index), -1).any(1).argmax())]
            raise CalibrationError(
                f"calibration map: it turns finite arc scores of sentence {owners[j]} into infinities or nan (its "
                f"scales overflow float64: log_scale up to {max(calibration.log_scale):.4g}); refit the map "
                "(spacy-treexp calibrate) or fix its values"
            )
        for b, j in enumerate(index):
            size = sizes[j] + 1
            mapped_arcs[j] = numpy.ascontiguousarray(mapped[b, :size, :size])
    return mapped_arcs


@dataclass
class ScaledRelationScores:
    """Relation log-probabilities ``rel`` (``(n+1, n+1, L)``) with dependent m's logits
    multiplied by ``factors[m]`` and re-normalised, computed for the arcs that are read:
    ``scaled[h, m]``, ``scaled[h, m, l]``, ``scaled[heads, dependents]`` with integer or
    array indices (numpy broadcasting), as the dense array it stands for
    (``numpy.asarray(scaled)`` builds it). log p is the logits up to a constant per arc, so
    re-normalising log p · f equals the softmax of the logits · f."""

    rel: numpy.ndarray
    factors: numpy.ndarray

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self.rel.shape)

    @property
    def ndim(self) -> int:
        return 3

    @property
    def dtype(self) -> numpy.dtype:
        return self.rel.dtype

    def __getitem__(self, key: Any) -> Any:
        key = key if isinstance(key, tuple) else (key,)
        if len(key) < 2 or any(isinstance(k, slice) or k is Ellipsis for k in key[:2]):
            return numpy.asarray(self)[key]
        heads, dependents = numpy.broadcast_arrays(numpy.asarray(key[0]), numpy.asarray(key[1]))
        rows = log_softmax(self.rel[heads, dependents] * self.factors[dependents][..., None])
        rows = rows.astype(self.rel.dtype)
        return rows if len(key) == 2 else rows[(Ellipsis, *key[2:])]

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> numpy.ndarray:
        dense = log_softmax(self.rel * self.factors[None, :, None]).astype(self.rel.dtype)
        return dense if dtype is None else dense.astype(dtype)


def _relation_rows(
    name: str, values: Any, relations: Sequence[str], columns: Sequence[str]
) -> Tuple[Tuple[float, ...], ...]:
    """A per-relation table: empty, or one row of ``len(columns)`` finite numbers per relation."""
    try:
        rows = tuple(_floats(row, name) for row in values)
    except TypeError as e:
        raise CalibrationError(f"calibration map: {name} must be a list of rows, got {values!r}") from e
    if rows and (len(rows) != len(relations) or any(len(row) != len(columns) for row in rows)):
        raise CalibrationError(
            f"calibration map: {name} needs one row of {len(columns)} values {list(columns)} per relation "
            f"({len(relations)}), got {[list(row) for row in rows]}"
        )
    return rows


def _by_relation(relations: Sequence[str], values: Sequence[Any]) -> Dict[str, Any]:
    """``{relation: value}``, with spaCy's ``ROOT`` as UD's ``root``."""
    out = dict(zip(relations, values))
    if "root" in out:
        out["ROOT"] = out["root"]
    return out


def normalise_relation(name: str) -> str:
    """``ROOT`` (spaCy's name) and ``root`` (UD's) are the same relation."""
    return "root" if name.lower() == "root" else name


def dependent_relations(sentence: Any) -> Optional[List[str]]:
    """The relation the parser gives each word of a :class:`~spacy_treexp.annotate.SentenceScores`:
    its ``deprels``, else the best label at its head (``heads``, else none) from ``rel``."""
    if sentence.deprels is not None:
        return [normalise_relation(r) for r in sentence.deprels]
    if sentence.rel is None or sentence.labels is None or sentence.heads is None:
        return None
    n = sentence.n
    rows = numpy.asarray(sentence.rel[numpy.asarray(sentence.heads), numpy.arange(1, n + 1)])
    return [normalise_relation(sentence.labels[int(k)]) for k in rows.argmax(-1)]


def dependent_label_entropy(sentence: Any) -> Optional[numpy.ndarray]:
    """The entropy (nats) of each word's relation distribution at its head in the parser's
    own tree, −Σ_l p(l | head_m, m) log p(l | head_m, m), ``(n,)``, from a
    :class:`~spacy_treexp.annotate.SentenceScores`' ``rel`` (normalised log-probabilities,
    as the score contract holds them) and ``heads``; None without either."""
    return label_entropies([sentence])[0]


def label_entropies(sentences: Sequence[Any]) -> List[Optional[numpy.ndarray]]:
    """:func:`dependent_label_entropy` of every sentence, computed in one pass over the
    words' relation rows at their heads (in their own float type, float32 or wider)."""
    out: List[Optional[numpy.ndarray]] = [None] * len(sentences)
    rows, owners = [], []
    for i, sentence in enumerate(sentences):
        if sentence.rel is not None and sentence.heads is not None:
            n = sentence.n
            rows.append(numpy.asarray(sentence.rel[numpy.asarray(sentence.heads), numpy.arange(1, n + 1)]))
            owners.append(i)
    if not rows:
        return out
    dtype = numpy.result_type(*(r.dtype for r in rows), numpy.float32)
    logs = numpy.concatenate(rows).astype(dtype, copy=False)
    with numpy.errstate(invalid="ignore", over="ignore"):
        terms = numpy.exp(logs) * numpy.maximum(logs, numpy.finfo(dtype).min)  # -inf: p = 0, no term
    entropy = -terms.sum(-1)
    splits = numpy.cumsum([len(r) for r in rows])[:-1]
    for i, values in zip(owners, numpy.split(entropy, splits)):
        out[i] = values
    return out
