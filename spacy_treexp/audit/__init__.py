"""Treebank audit and annotation selection from the tree distribution's exact marginals:
``spacy-treexp audit`` (which gold arcs and labels the parser finds unlikely) and
``spacy-treexp select`` (which unlabelled sentences to annotate next)."""

from spacy_treexp.audit.arcs import ARC_FIELDS, ArcAudit, SentenceAudit, audit_sentence, problem_words, rank_arcs

__all__ = ["ARC_FIELDS", "ArcAudit", "SentenceAudit", "audit_sentence", "problem_words", "rank_arcs"]
