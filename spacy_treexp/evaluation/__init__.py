"""Evaluation of spacy_treexp's uncertainty on a gold treebank.

``run(EvalConfig(conllu=..., out_dir=...))`` parses a CoNLL-U file on gold tokens and
sentences and returns an :class:`EvalReport` (also written as JSON, a Markdown summary and
PNG plots); :func:`evaluate` computes the metrics from per-sentence scores; :mod:`.metrics`
holds the scalar metrics.
"""

from spacy_treexp.evaluation.conllu import GoldSentence, read_conllu
from spacy_treexp.evaluation.evaluator import EvalOptions, evaluate
from spacy_treexp.evaluation.run import EvalConfig, EvalReport, run
from spacy_treexp.evaluation.scores import spacy_scores, stanza_scores
from spacy_treexp.evaluation.temperature import fit_arc_temperature, fit_rel_temperature
from spacy_treexp.evaluation.timing import entropy_quartic, timing_table

__all__ = [
    "EvalConfig",
    "EvalOptions",
    "EvalReport",
    "GoldSentence",
    "entropy_quartic",
    "evaluate",
    "fit_arc_temperature",
    "fit_rel_temperature",
    "read_conllu",
    "run",
    "spacy_scores",
    "stanza_scores",
    "timing_table",
]
