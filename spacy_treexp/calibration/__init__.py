"""Calibration that travels: a map of arc (and relation) scores fitted on a gold dev set,
stored with the pipeline or processor that reads it, applied by the annotation core.

:class:`CalibrationMap` is the typed, serialisable map (:mod:`.map`); :func:`fit_calibration`
fits it by the gold trees' likelihood (:mod:`.fit`); :func:`calibrate_sentences` applies it.
:class:`NoveltyReference` (:mod:`.novelty`) measures how unfamiliar a sentence's encoder
vectors are to the parser; :class:`DomainModel` (:mod:`.domain`, :func:`fit_domain`) turns it,
with the sentence's words, parts of speech and tree entropy, into p(out of domain).
"""

from spacy_treexp.calibration.domain import DomainModel, SentenceSignals, fit_domain
from spacy_treexp.calibration.fit import fit_calibration, fit_rel_temperature
from spacy_treexp.calibration.map import (
    DEFAULT_EDGES,
    DEFAULT_KNOTS,
    KINDS,
    CalibrationError,
    CalibrationMap,
    calibrate_sentences,
    read_map,
)
from spacy_treexp.calibration.novelty import NoveltyReference, fit_novelty, fit_reference

__all__ = [
    "DEFAULT_EDGES",
    "DEFAULT_KNOTS",
    "DomainModel",
    "KINDS",
    "NoveltyReference",
    "SentenceSignals",
    "CalibrationError",
    "CalibrationMap",
    "calibrate_sentences",
    "fit_domain",
    "fit_calibration",
    "fit_novelty",
    "fit_reference",
    "fit_rel_temperature",
    "read_map",
]
