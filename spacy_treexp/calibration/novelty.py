"""How unfamiliar a sentence is to the parser: distance of its token vectors from the training data's.

A parser's encoder maps every token to a vector; text unlike its training data lands in parts
of that space the training tokens rarely visit. The reference is a set of R unit directions
c_r summarising the training tokens' centred vectors (spherical k-means, Dhillon & Modha
2001), and a token vector x scores

    d(x) = 1 − max_r cos(x − x̄, c_r)          (0: a training direction; up to 2),

the cosine distance to its nearest reference direction (a nearest-neighbour novelty score,
as in Sun et al. 2022, "Out-of-distribution detection with deep nearest neighbors", over
centroids instead of every training token). A sentence's novelty is the mean of d over its
words. It needs no gold trees: the reference is fitted on the vectors of unlabelled in-domain
text (:func:`fit_novelty`).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy
import torch

from spacy_treexp.calibration.domain import DomainModel, SentenceSignals, fit_domain, lexicon_counts
from spacy_treexp.calibration.language_model import WordLanguageModel
from spacy_treexp.calibration.map import CalibrationError
from spacy_treexp.calibration.packed import PACKED

#: Most vectors per product with the reference rows (bounds the similarity matrix to
#: CHUNK x R floats, 32 MB at R = 2,048).
CHUNK = 4096


def _unit(rows: torch.Tensor) -> torch.Tensor:
    return rows / rows.norm(dim=-1, keepdim=True).clamp(min=1e-12)


@dataclass(frozen=True)
class NoveltyReference:
    """Centre x̄ ``(width,)`` and reference directions ``(R, width)`` (unit rows), float32;
    ``domain``, the out-of-domain model that reads this novelty with other features of the
    sentence (:class:`~spacy_treexp.calibration.domain.DomainModel`, ``sent._.out_of_domain``),
    or None; ``encoder_domain``, the opt-in one that also reads a sentence encoder's embedding
    (:mod:`~spacy_treexp.calibration.sentence_encoder`; ``tree_expectations``'s
    ``sentence_encoder``), or None."""

    centre: numpy.ndarray
    rows: numpy.ndarray
    domain: Optional[DomainModel] = field(default=None, compare=False)
    encoder_domain: Optional[DomainModel] = field(default=None, compare=False)

    def __post_init__(self) -> None:
        # own, writable copies: torch warns on read-only arrays (e.g. a reference read from bytes)
        centre = numpy.array(self.centre, dtype=numpy.float32).reshape(-1)
        rows = numpy.array(self.rows, dtype=numpy.float32)
        if rows.ndim != 2 or rows.shape[0] == 0 or rows.shape[1] != centre.shape[0]:
            raise CalibrationError(
                f"novelty reference: rows must be (R, {centre.shape[0]}) with R >= 1, got {rows.shape}"
            )
        if not (numpy.isfinite(centre).all() and numpy.isfinite(rows).all()):
            raise CalibrationError("novelty reference: centre and rows must be finite")
        for what, model in (("domain model", self.domain), ("encoder domain model", self.encoder_domain)):
            if model is not None and model.token_width not in (None, 0, centre.shape[0]):
                raise CalibrationError(
                    f"novelty reference: its {what} reads mean vectors of width {model.token_width}, "
                    f"the reference's are {centre.shape[0]}"
                )
        if self.encoder_domain is not None and not self.encoder_domain.embedding_width:
            raise CalibrationError("novelty reference: its encoder domain model reads no sentence embedding")
        object.__setattr__(self, "centre", centre)
        object.__setattr__(self, "rows", rows)

    @property
    def width(self) -> int:
        return int(self.centre.shape[0])

    def token_distances(self, vectors: Any) -> numpy.ndarray:
        """d(x) of every row of ``vectors`` ``(n, width)``, ``(n,)`` (see the module doc; computed
        in float32, one product of the vectors with the R rows per :data:`CHUNK` vectors)."""
        x = torch.from_numpy(numpy.array(vectors, dtype=numpy.float32))  # a copy: doc.tensor may be read-only
        if x.ndim != 2 or x.shape[1] != self.width:
            raise ValueError(f"novelty: token vectors must be (n, {self.width}), got {tuple(x.shape)}")
        centred = _unit(x - torch.from_numpy(self.centre))  # float32: cosines of unit vectors to ~1e-7
        rows = torch.from_numpy(self.rows).T
        best = [torch.amax(chunk @ rows, dim=1) for chunk in centred.split(CHUNK)]  # (no argmax: ~15% less)
        return (1.0 - torch.cat(best)).double().numpy() if best else numpy.zeros(0)

    def sentence_novelty(self, vectors: Any) -> float:
        """Mean d over a sentence's word vectors ``(n, width)`` (NaN for no words)."""
        distances = self.token_distances(vectors)
        return float(distances.mean()) if distances.size else float("nan")

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form: the rows as base64 float16 (halves the size; d changes by < 1e-3)."""
        rows = numpy.ascontiguousarray(self.rows.astype("<f2"))
        domain = None if self.domain is None else self.domain.to_dict()
        return {
            "width": self.width,
            "size": int(self.rows.shape[0]),
            "centre": [float(v) for v in self.centre],
            "rows_float16_base64": base64.b64encode(rows.tobytes()).decode("ascii"),
            **({} if domain is None else {"domain": domain}),
            **({} if self.encoder_domain is None else {"encoder_domain": _without_shared(self.encoder_domain, domain)}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> NoveltyReference:
        try:
            width, size = int(data["width"]), int(data["size"])
            raw = base64.b64decode(data["rows_float16_base64"], validate=True)
            rows = numpy.frombuffer(raw, dtype="<f2").astype(numpy.float32)
            centre = numpy.asarray(data["centre"], dtype=numpy.float32)
        except (KeyError, TypeError, ValueError) as e:
            raise CalibrationError(f"novelty reference: cannot read it ({e})") from e
        if rows.size != width * size:
            raise CalibrationError(f"novelty reference: {rows.size} numbers for {size} rows of width {width}")
        rows = rows.reshape(size, width)  # unit again after float16 rounding: d stays a cosine distance
        domain = None if data.get("domain") is None else DomainModel.from_dict(data["domain"])
        encoder = None if data.get("encoder_domain") is None else DomainModel.from_dict(_with_shared(data))
        unit = rows / numpy.maximum(numpy.linalg.norm(rows, axis=1, keepdims=True), 1e-12)
        return cls(centre, unit, domain, encoder)


#: The encoder domain model's tables that may be stored once, in the domain model's form.
SHAREABLE = ("lexicon" + PACKED, "language_model")
#: The key naming them in the encoder domain model's form.
SHARED = "shared_with_domain"


def _without_shared(encoder_domain: DomainModel, domain: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """The encoder domain model's form less the tables it shares with the domain model's form
    (the same lexicon and language model, fitted on the same text: named, stored once)."""
    own = encoder_domain.to_dict()
    shared = [key for key in SHAREABLE if domain is not None and key in own and own[key] == domain.get(key)]
    return {**{k: v for k, v in own.items() if k not in shared}, **({SHARED: shared} if shared else {})}


def _with_shared(data: Mapping[str, Any]) -> Dict[str, Any]:
    """The encoder domain model's form with the tables it shares taken from the domain model's."""
    own = dict(data["encoder_domain"])
    shared = own.pop(SHARED, [])
    if not isinstance(shared, list) or not set(shared) <= set(SHAREABLE):
        raise CalibrationError(f"novelty reference: {SHARED} must list some of {list(SHAREABLE)}, got {shared!r}")
    domain = data.get("domain") or {}
    missing = [key for key in shared if key not in domain]
    if missing:
        raise CalibrationError(
            f"novelty reference: the encoder domain model shares {missing}, which the domain model lacks"
        )
    return {**{key: domain[key] for key in shared}, **own}


def fit_novelty(vectors: Any, size: int = 4096, iterations: int = 10, seed: int = 0) -> NoveltyReference:
    """Fit a :class:`NoveltyReference` on in-domain token vectors ``(T, width)``: the centre
    is their mean; the rows are the ``size`` directions of spherical k-means (Lloyd's
    iterations on the centred unit vectors, maximising Σ_t max_r cos(x_t, c_r); started from
    ``size`` distinct tokens drawn with ``seed``; a direction left without tokens keeps its
    place). With ``size`` >= T the rows are the tokens themselves."""
    x = torch.as_tensor(numpy.asarray(vectors, dtype=numpy.float32))
    if x.ndim != 2 or x.shape[0] == 0:
        raise CalibrationError(f"fit_novelty: expected token vectors (T, width) with T >= 1, got {tuple(x.shape)}")
    if not bool(torch.isfinite(x).all()):
        raise CalibrationError("fit_novelty: token vectors must be finite")
    if size < 1 or iterations < 0:
        raise CalibrationError(f"fit_novelty: size must be >= 1 and iterations >= 0, got {size}, {iterations}")
    centre = x.mean(dim=0)
    unit = _unit(x - centre)
    generator = torch.Generator().manual_seed(seed)
    if size >= unit.shape[0]:
        return NoveltyReference(centre.numpy(), unit.numpy())
    rows = unit[torch.randperm(unit.shape[0], generator=generator)[:size]].clone()
    for _ in range(iterations):
        nearest = torch.cat([(chunk @ rows.T).argmax(dim=1) for chunk in unit.split(8192)])
        sums = torch.zeros_like(rows).index_add_(0, nearest, unit)
        filled = torch.bincount(nearest, minlength=size) > 0
        rows = torch.where(filled.unsqueeze(1), _unit(sums), rows)
    return NoveltyReference(centre.numpy(), rows.numpy())


def fit_reference(
    train: SentenceSignals,
    size: int = 2048,
    inside: Optional[SentenceSignals] = None,
    outside: Optional[SentenceSignals] = None,
    seed: int = 0,
) -> NoveltyReference:
    """The novelty reference of ``train``'s token vectors (:func:`fit_novelty`, ``size``
    directions) and, given in-domain sentences ``inside`` (held out from the training data)
    and out-of-domain ones ``outside``, the out-of-domain model that reads it
    (:func:`~spacy_treexp.calibration.domain.fit_domain`; its lexicon and its word trigram
    model: ``train``'s words; its vector term: the sentences' mean token vectors). Sentences
    whose features cannot be formed (no words, no entropy, no vectors) are left out of that fit."""
    vectors = [v for v in train.vectors if len(v)]
    if not vectors:
        raise CalibrationError("fit_reference: the training sentences have no token vectors")
    reference = fit_novelty(numpy.concatenate(vectors), size=size, seed=seed)
    if inside is None or outside is None:
        return reference
    lexicon = lexicon_counts(train.words)
    language_model = WordLanguageModel.fit(train.words)

    def rows(signals: SentenceSignals) -> Tuple[List[Dict[str, float]], List[Any]]:
        novelty = [reference.sentence_novelty(v) if len(v) else None for v in signals.vectors]
        kept = [
            (row, mean)
            for row, mean in zip(signals.features(novelty, lexicon, language_model), signals.mean_vectors())
            if row is not None and mean is not None
        ]
        return [row for row, _ in kept], [mean for _, mean in kept]

    (inside_rows, inside_means), (outside_rows, outside_means) = rows(inside), rows(outside)
    domain = fit_domain(
        inside_rows,
        outside_rows,
        lexicon,
        language_model=language_model,
        inside_vectors=inside_means,
        outside_vectors=outside_means,
    )
    return NoveltyReference(reference.centre, reference.rows, domain)


def spans_novelty(
    reference: Optional[NoveltyReference], spans: Sequence[Tuple[Any, int, int]]
) -> List[Optional[float]]:
    """:func:`span_novelty` of many ``(tensor, start, end)`` spans (e.g. every sentence of a
    batch of Docs) with one product of all their word vectors with the reference's rows
    (instead of one per sentence); the same values up to float32 rounding."""
    out: List[Optional[float]] = [None] * len(spans)
    if reference is None:
        return out
    usable = [i for i, (tensor, start, end) in enumerate(spans) if _has_rows(reference, tensor, start, end)]
    if not usable:
        return out
    blocks = [numpy.asarray(spans[i][0][spans[i][1] : spans[i][2]], dtype=numpy.float32) for i in usable]
    distances = reference.token_distances(numpy.concatenate(blocks))
    offsets = numpy.cumsum([0] + [len(block) for block in blocks])
    for k, i in enumerate(usable):
        out[i] = float(distances[offsets[k] : offsets[k + 1]].mean())
    return out


def _has_rows(reference: NoveltyReference, tensor: Any, start: int, end: int) -> bool:
    if tensor is None:
        return False
    shape = numpy.shape(tensor)
    return len(shape) == 2 and shape[1] == reference.width and shape[0] >= end > start


def span_novelty(reference: Optional[NoveltyReference], tensor: Any, start: int, end: int) -> Optional[float]:
    """The novelty of words ``start``..``end - 1`` of a document whose token vectors are the
    rows of ``tensor`` (spaCy's ``doc.tensor``); None without a reference, or where
    ``tensor`` has no rows of the reference's width for those words (e.g. no encoder ran)."""
    if reference is None or not _has_rows(reference, tensor, start, end):
        return None
    return reference.sentence_novelty(numpy.asarray(tensor[start:end]))
