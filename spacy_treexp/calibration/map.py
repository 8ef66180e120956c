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
reliably than their scores say. Every term is a function of the parser's output only, so
s' is again a matrix of arc log-potentials. The relation log-probabilities of dependent m
are re-normalised from its label logits multiplied by exp(ρ_r) / T_rel (one temperature,
and a factor per relation the parser gives m).

One group with b = 0 is temperature scaling (a = 1/T, Guo et al. 2017): the MAP tree does
not change. With several groups it may: the fit reports the attachment score before and
after. Relation log-probabilities are re-normalised at ``rel_temperature``
(log-softmax(log p / T) = log-softmax(logits / T)).

A map may also carry a :class:`~spacy_treexp.calibration.novelty.NoveltyReference`
(``novelty``): the reference of ``sent._.novelty``, how unfamiliar a sentence's encoder
vectors are (out-of-domain detection); it changes no score.

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

if TYPE_CHECKING:
    from spacy_treexp.calibration.novelty import NoveltyReference

#: ``temperature``: one scale, no bias; ``distance``: a scale and a bias per group.
KINDS = ("temperature", "distance")
#: Lower bounds of the arc-length buckets |h − m| of the ``distance`` map.
DEFAULT_EDGES = (1, 2, 3, 4, 6, 9, 15)
#: Local probabilities p_k whose logs are the knots of the ``distance`` map's hinge terms.
DEFAULT_KNOTS = (0.05, 0.2, 0.4, 0.6, 0.8, 0.95)
FORMAT_VERSION = 1


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


def transform_scores(
    scores: torch.Tensor,
    lengths: torch.Tensor,
    scale: torch.Tensor,
    bias: torch.Tensor,
    groups: torch.Tensor,
    knots: Optional[torch.Tensor] = None,
    hinge: Optional[torch.Tensor] = None,
    column_log_scale: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """The map on a batch: ``scores`` ``(B, N+1, N+1)``, ``lengths`` ``(B,)``, per-group
    ``scale`` and ``bias`` ``(G,)``, ``groups`` ``(N+1, N+1)``, and optional hinge ``knots``
    (log-probabilities) with coefficients ``hinge`` ``(K,)`` -> s' (differentiable in
    ``scale``, ``bias`` and ``hinge``); ``column_log_scale`` ``(B, N+1)``: γ of each
    dependent's relation (0: none). -inf (forbidden) stays -inf; padding, column 0 and the diagonal
    become 0 (the engine ignores them)."""
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
    arc_scale = scale[groups]
    if column_log_scale is not None:
        arc_scale = arc_scale * column_log_scale.exp().unsqueeze(1)
    mapped = arc_scale * local + bias[groups]
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
        novelty: the reference of the sentences' encoder novelty, or None (see the module doc).
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
    fit: Dict[str, Any] = field(default_factory=dict, compare=False)
    novelty: Optional[NoveltyReference] = field(default=None, compare=False)

    def __post_init__(self) -> None:
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

    def column_scales(self, relations: Sequence[Optional[Sequence[str]]], size: int) -> torch.Tensor:
        """γ of each dependent's relation, ``(B, size)`` float64 (0 at ROOT, padding and
        relations without a scale); ``relations[b]``: sentence b's n relations, or None."""
        out = numpy.zeros((len(relations), size), dtype=numpy.float64)
        if self.relations:
            gamma = _by_relation(self.relations, self.relation_scale)
            for b, names in enumerate(relations):
                if names:
                    out[b, 1 : len(names) + 1] = [gamma.get(name, 0.0) for name in names]
        return torch.from_numpy(out)

    def apply_batch(
        self, scores: torch.Tensor, lengths: torch.Tensor, relations: Optional[Sequence[Optional[Sequence[str]]]] = None
    ) -> torch.Tensor:
        """s' of a padded batch ``(B, N+1, N+1)`` (see :func:`transform_scores`), float64;
        ``relations``: each sentence's dependent relations (see :func:`dependent_relations`)."""
        scale, bias, knots, hinge = self.parameters(scores.device)
        groups = group_index(scores.shape[-1], self.kind, self.edges).to(scores.device)
        columns = None
        if self.relations and relations is not None:
            columns = self.column_scales(relations, scores.shape[-1]).to(scores.device)
        return transform_scores(
            scores.to(torch.float64), lengths.to(scores.device), scale, bias, groups, knots, hinge, columns
        )

    def apply_arc(self, arc: numpy.ndarray, relations: Optional[Sequence[str]] = None) -> numpy.ndarray:
        """s' of one sentence's ``(n+1, n+1)`` arc scores, float64."""
        scores = torch.from_numpy(numpy.asarray(arc, dtype=numpy.float64)).unsqueeze(0)
        lengths = torch.tensor([arc.shape[-1] - 1])
        return self.apply_batch(scores, lengths, [relations])[0].numpy()

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
        return _log_softmax(rows.astype(numpy.float64) * (factors / self.rel_temperature)[:, None])

    # --- serialisation ------------------------------------------------------------

    def to_dict(self) -> Dict[str, Any]:
        """JSON- and config-ready form."""
        return {
            "version": FORMAT_VERSION,
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
            "fit": dict(self.fit),
            **({} if self.novelty is None else {"novelty": self.novelty.to_dict()}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CalibrationMap:
        """The map of :meth:`to_dict`'s form; ``CalibrationError`` naming what is wrong."""
        if not isinstance(data, Mapping):
            raise CalibrationError(f"calibration map: expected a mapping, got {type(data).__name__}")
        version = data.get("version", FORMAT_VERSION)
        if version != FORMAT_VERSION:
            raise CalibrationError(f"calibration map: format version {version!r}, this version reads {FORMAT_VERSION}")
        known = {"version", "kind", "log_scale", "bias", "edges", "knots", "hinge", "relations", "relation_scale"}
        known |= {"label_scale", "rel_temperature", "fit", "novelty"}
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
            fit=dict(data.get("fit") or {}),
            novelty=novelty,
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
        return cls.from_json(data.decode("utf8"))

    def to_disk(self, path: Union[str, Path]) -> None:
        """Write the JSON form atomically (a temporary file renamed into place)."""
        path = Path(path)
        partial = path.with_name(path.name + ".partial")
        partial.write_bytes(self.to_bytes())
        partial.replace(path)

    @classmethod
    def from_disk(cls, path: Union[str, Path]) -> CalibrationMap:
        path = Path(path)
        if not path.is_file():
            raise CalibrationError(f"calibration map: no such file {path}")
        try:
            return cls.from_json(path.read_text(encoding="utf8"))
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
    it), and to each ensemble member's arc scores (``members``). ``calibration`` None returns
    them unchanged."""
    if calibration is None:
        return list(sentences)
    from spacy_treexp.annotate.batching import length_buckets, pad_scores

    relations = [dependent_relations(s) if calibration.relations else None for s in sentences]
    # every arc matrix to map, in one padded pass per length bucket: each sentence's own
    # scores, then each ensemble member's (a member is a parser's scores of the same words)
    owners: List[int] = []
    matrices: List[numpy.ndarray] = []
    for i, sentence in enumerate(sentences):
        members = getattr(sentence, "members", None)
        for arc in [sentence.arc, *(members if members is not None else ())]:
            owners.append(i)
            matrices.append(arc)
    mapped_arcs: List[numpy.ndarray] = [numpy.empty(0)] * len(matrices)
    sizes = [sentences[i].n for i in owners]
    for index in length_buckets(sizes, 512, max_cells=4_000_000):
        raw, lengths = pad_scores([matrices[j] for j in index])
        mapped = calibration.apply_batch(raw, lengths, [relations[owners[j]] for j in index]).numpy()
        for b, j in enumerate(index):
            size = sizes[j] + 1
            mapped_arcs[j] = numpy.ascontiguousarray(mapped[b, :size, :size])
    out = []
    position = 0
    for sentence, names in zip(sentences, relations):
        members = getattr(sentence, "members", None)
        count = 1 + (len(members) if members is not None else 0)
        arcs = mapped_arcs[position : position + count]
        position += count
        changes = {"arc": arcs[0], "rel": calibration.apply_rel(sentence.rel, names)}
        if members is not None and count > 1:  # an ensemble's members: each is a parser's scores
            changes["members"] = numpy.stack(arcs[1:])
        out.append(dataclasses.replace(sentence, **changes))
    return out


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
        rows = _log_softmax(self.rel[heads, dependents] * self.factors[dependents][..., None])
        rows = rows.astype(self.rel.dtype)
        return rows if len(key) == 2 else rows[(Ellipsis, *key[2:])]

    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> numpy.ndarray:
        dense = _log_softmax(self.rel * self.factors[None, :, None]).astype(self.rel.dtype)
        return dense if dtype is None else dense.astype(dtype)


def _log_softmax(logits: numpy.ndarray) -> numpy.ndarray:
    """log-softmax over the last axis, float64; -inf (impossible labels) stays -inf."""
    logits = logits.astype(numpy.float64)
    peak = numpy.max(logits, axis=-1, keepdims=True)
    peak = numpy.where(numpy.isfinite(peak), peak, 0.0)
    with numpy.errstate(divide="ignore"):
        return logits - (numpy.log(numpy.exp(logits - peak).sum(-1, keepdims=True)) + peak)


def _by_relation(relations: Sequence[str], values: Sequence[float]) -> Dict[str, float]:
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
