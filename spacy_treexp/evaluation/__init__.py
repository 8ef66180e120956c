"""Evaluation of spacy_treexp's uncertainty on a gold treebank (issue 7).

``run(model, conllu, out_dir, ...)`` parses a CoNLL-U file on gold tokens and sentences and
writes a JSON report, a Markdown summary and PNG plots; :func:`evaluate` computes the
metrics from per-sentence scores; :mod:`.metrics` holds the scalar metrics.
"""
from spacy_treexp.evaluation.conllu import GoldSentence, read_conllu
from spacy_treexp.evaluation.evaluator import EvalOptions, evaluate
from spacy_treexp.evaluation.run import main, run
from spacy_treexp.evaluation.scores import SentenceScores, spacy_scores, stanza_scores
from spacy_treexp.evaluation.temperature import fit_arc_temperature, fit_rel_temperature
from spacy_treexp.evaluation.timing import entropy_quartic, timing_table

__all__ = [
    "GoldSentence", "read_conllu", "EvalOptions", "evaluate", "run", "main", "SentenceScores",
    "spacy_scores", "stanza_scores", "fit_arc_temperature", "fit_rel_temperature",
    "entropy_quartic", "timing_table",
]
