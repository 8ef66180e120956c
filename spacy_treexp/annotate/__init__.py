"""The one annotation core under the spaCy component, the Stanza processor, the command line
and the evaluation: typed :class:`SentenceScores` in, typed, serialisable
:class:`SentenceAnnotation` out (see :mod:`.core`)."""

from spacy_treexp.annotate.batching import batch_distribution, length_buckets, pad_scores
from spacy_treexp.annotate.core import (
    annotate_sentences,
    check_length,
    dep_prob,
    draw_samples,
    label_marginals,
    mbr_heads,
    sentence_seed,
    word_head_entropy,
)
from spacy_treexp.annotate.options import DEFAULTS, AnnotateOptions
from spacy_treexp.annotate.records import SentenceAnnotation, SentenceScores, set_text_source
from spacy_treexp.annotate.runtime import install_fork_hook, resolve_device, threads_for, torch_threads

__all__ = [
    "AnnotateOptions",
    "DEFAULTS",
    "SentenceAnnotation",
    "SentenceScores",
    "annotate_sentences",
    "check_length",
    "batch_distribution",
    "dep_prob",
    "draw_samples",
    "threads_for",
    "install_fork_hook",
    "label_marginals",
    "length_buckets",
    "mbr_heads",
    "pad_scores",
    "resolve_device",
    "sentence_seed",
    "set_text_source",
    "torch_threads",
    "word_head_entropy",
]
