"""The options of the annotation core, shared by the spaCy component, the Stanza processor
and the command line: one definition of their names, defaults and validation."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

import numpy

from spacy_treexp.engine.sampling import (
    DEFAULT_METHOD,
    DEFAULT_WITHOUT_REPLACEMENT,
    MULTI_ROOT_METHODS,
    SINGLE_ROOT_METHODS,
    WITH_REPLACEMENT_METHODS,
    WITHOUT_REPLACEMENT_METHODS,
)

DEVICES = ("cpu", "cuda", "auto")
#: The longest sentence (words) the components accept by default (0 would mean no limit).
DEFAULT_MAX_SENTENCE_LENGTH = 5000


@dataclass(frozen=True)
class AnnotateOptions:
    """What the core computes for each sentence.

    Attributes:
        single_root: trees with exactly one child of ROOT (Universal Dependencies).
        n_samples: sampled trees per sentence (0: none).
        sampler: an exact sampler of :mod:`spacy_treexp.engine.sampling`; None picks the
            engine's default (``colbourn``, or ``sbs`` without replacement), whose cost does
            not depend on the scores; Wilson's walks can take astronomically long on a trained
            parser's peaked scores.
        without_replacement: draw ``n_samples`` distinct trees (fewer when a sentence has
            fewer trees: the rest are padded with -1 heads and -inf log-probabilities; trees
            less probable than about e^-745 times the sentence's total count as absent, see
            :func:`spacy_treexp.engine.sampling.sample_without_replacement`).
        top_k_heads: candidate heads listed per word.
        mixture_marginals: also keep the arc marginals of the mixture of the parser's ensemble
            members (``SentenceScores.members``). Off by default: an ``(n+1, n+1)`` matrix more
            per sentence made a DocBin of the shipped pipeline's Docs 1.72x larger.
        mixture_samples: trees drawn per sentence from the members' mixture (0: none). Separate
            from ``n_samples``: each draw picks a member, so they cost several times the
            parser's own samples.
        device: ``cpu``, ``cuda`` or ``auto`` (cuda when available).
        batch_size: the most sentences per engine call.
        max_sentence_length: the longest sentence accepted, in words (0: no limit). Exact
            inference costs O(n²) memory and O(n³) time (a 3,000-word sentence: 1.2 GB peak
            and a few seconds in the engine; ``benchmarks/bench_long_sentences.py``); a longer
            sentence raises ``ValueError`` naming it and this option instead of exhausting
            the machine. Split such text, or raise the limit.
        seed: samples of a sentence come from a generator seeded from ``seed``, the
            sentence's offset and its text (:func:`spacy_treexp.annotate.sentence_seed`), so
            they do not depend on batching or worker processes; None draws fresh samples
            from torch's global generator (not reproducible).
        risk_temperature: the temperature T of the sentence risk ``error_probability`` =
            1 − p_T(parse), where p_T is the tree distribution of the scores divided by T
            (1: the annotated distribution itself). None (the default): the calibration
            map's own (``CalibrationMap.risk_temperature``, fitted with the map by
            ``spacy-treexp calibrate``), else 1. Whole-tree probabilities need their own
            scale: a distribution calibrated for its arc marginals is under-confident about
            whole trees. For the shipped pipeline's map T = 0.76, fitted with the map on EWT dev by the
            likelihood of "the parse is entirely right" (log-loss 0.363 against 0.405 at
            T = 1; ``benchmarks/epistemic.py --dev``).
    """

    single_root: bool = True
    n_samples: int = 0
    sampler: Optional[str] = None
    without_replacement: bool = False
    top_k_heads: int = 3
    mixture_marginals: bool = False
    mixture_samples: int = 0
    device: str = "cpu"
    batch_size: int = 256
    max_sentence_length: int = DEFAULT_MAX_SENTENCE_LENGTH
    seed: Optional[int] = 0
    risk_temperature: Optional[float] = None

    def __post_init__(self) -> None:
        check_fields(dataclasses.asdict(self))
        if self.sampler is None:
            chosen = DEFAULT_WITHOUT_REPLACEMENT if self.without_replacement else DEFAULT_METHOD
            object.__setattr__(self, "sampler", chosen)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], prefix: str = "") -> AnnotateOptions:
        """Options from a dict of (some of) the field names; an unknown name, a wrong type or
        an out-of-range value raises ``ValueError`` naming the option as ``prefix + name``."""
        unknown = sorted(set(config) - set(DEFAULTS))
        if unknown:
            raise ValueError(f"unknown tree_expectations option(s) {unknown}; known: {sorted(DEFAULTS)}.")
        config = {name: _plain(value) for name, value in config.items()}
        check_fields({**DEFAULTS, **config}, prefix)
        return cls(**config)


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python number or bool it holds (``numpy.int64(2)`` was refused as
    "not an integer"); anything else as it is."""
    if isinstance(value, numpy.bool_):
        return bool(value)
    if isinstance(value, numpy.integer):
        return int(value)
    if isinstance(value, numpy.floating):
        return float(value)
    return value


#: The default value of every option, by name.
DEFAULTS: Dict[str, Any] = {f.name: f.default for f in dataclasses.fields(AnnotateOptions)}


def check_fields(values: Mapping[str, Any], prefix: str = "") -> None:
    """Raise ``ValueError`` naming the first option of ``values`` that is invalid."""
    for name, minimum in (
        ("n_samples", 0),
        ("top_k_heads", 1),
        ("mixture_samples", 0),
        ("batch_size", 1),
        ("max_sentence_length", 0),
    ):
        value = values[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{prefix}{name} must be an integer >= {minimum}, got {value!r}.")
    temperature = values["risk_temperature"]
    if temperature is not None and (
        isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 < temperature < float("inf")
    ):
        raise ValueError(f"{prefix}risk_temperature must be a positive number or None, got {temperature!r}.")
    if values["device"] not in DEVICES:
        raise ValueError(f"{prefix}device must be one of {DEVICES}, got {values['device']!r}.")
    seed = values["seed"]
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError(f"{prefix}seed must be an integer or None, got {seed!r}.")
    for flag in ("single_root", "without_replacement", "mixture_marginals"):
        if not isinstance(values[flag], bool):
            raise ValueError(f"{prefix}{flag} must be True or False, got {values[flag]!r}.")
    sampler = values["sampler"]
    if sampler is None:
        return
    known = WITH_REPLACEMENT_METHODS + WITHOUT_REPLACEMENT_METHODS
    if sampler not in known:
        raise ValueError(f"{prefix}sampler {sampler!r} is not a sampler; choose one of {known}.")
    allowed = WITHOUT_REPLACEMENT_METHODS if values["without_replacement"] else WITH_REPLACEMENT_METHODS
    if sampler not in allowed:
        mode = "without" if values["without_replacement"] else "with"
        hint = " (set without_replacement)" if not values["without_replacement"] else ""
        raise ValueError(
            f"{prefix}sampler {sampler!r} cannot sample {mode} replacement; choose one of {allowed}{hint}."
        )
    if not values["without_replacement"]:
        rooted = SINGLE_ROOT_METHODS if values["single_root"] else MULTI_ROOT_METHODS
        if sampler not in rooted:
            kind = "single-root" if values["single_root"] else "multi-root"
            raise ValueError(
                f"{prefix}sampler {sampler!r} cannot sample {kind} trees (single_root = {values['single_root']}); "
                f"choose one of {rooted}."
            )
