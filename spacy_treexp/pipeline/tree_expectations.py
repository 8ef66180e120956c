"""The ``tree_expectations`` spaCy component.

Reads each sentence's arc scores (from a registered, swappable score source; by default
``Doc._.parser_scores`` written by ``biaffine_parser``), hands them to the annotation core
(:mod:`spacy_treexp.annotate`) and stores the :class:`~spacy_treexp.annotate.SentenceAnnotation`
of every sentence in ``doc._.tree_expectations`` (see ``attributes.py`` for the views on Doc,
sentence Span and Token): exact arc marginals and log Z (Koo et al. 2007, Prop. 1), the tree
entropy (Zmigrod et al. 2021), the expected attachment score of the predicted tree, and
optionally unbiased samples of alternative trees with their exact log-probabilities
(Stanojević 2022).

This module is an adapter: it converts between spaCy objects and the core's records and
does no maths of its own.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, List, Optional, Sequence

from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.tokens import Doc
from spacy.util import minibatch

from spacy_treexp.annotate import DEFAULTS, AnnotateOptions, SentenceScores, annotate_sentences, install_fork_hook
from spacy_treexp.pipeline import attributes
from spacy_treexp.pipeline.score_sources import ScoreSource, make_parser_scores, sentence_scores

DEFAULT_CONFIG = {"scores": {"@misc": "spacy_treexp.parser_scores.v1"}, **DEFAULTS}


@Language.factory(
    "tree_expectations",
    default_config=DEFAULT_CONFIG,
    requires=["doc._.parser_scores"],
    assigns=attributes.ASSIGNS,
)
def make_tree_expectations(
    nlp: Language,
    name: str,
    scores: ScoreSource,
    single_root: bool,
    n_samples: int,
    sampler: Optional[str],
    without_replacement: bool,
    top_k_heads: int,
    device: str,
    batch_size: int,
    seed: Optional[int],
) -> TreeExpectations:
    """Create the ``tree_expectations`` component (see :class:`TreeExpectations`)."""
    return TreeExpectations(
        nlp.vocab,
        name=name,
        scores=scores,
        single_root=single_root,
        n_samples=n_samples,
        sampler=sampler,
        without_replacement=without_replacement,
        top_k_heads=top_k_heads,
        device=device,
        batch_size=batch_size,
        seed=seed,
    )


class TreeExpectations(Pipe):
    """Marginals, entropy, MBR tree and sampled trees from a parser's arc scores.

    Settings: ``scores``, the score source (``Doc -> list of per-sentence records``); the
    others are the core's :class:`~spacy_treexp.annotate.AnnotateOptions` (``single_root``,
    ``n_samples``, ``sampler``, ``without_replacement``, ``top_k_heads``, ``device``,
    ``batch_size`` -- the most sentences per engine call, while ``pipe``'s own
    ``batch_size`` is the number of Docs gathered per call, as elsewhere in spaCy -- and
    ``seed``: a sentence's samples come from a generator seeded by ``seed``, the sentence's
    token offset and its text, so they do not depend on batching or worker processes).
    """

    def __init__(
        self,
        vocab: Any,
        name: str = "tree_expectations",
        *,
        scores: Optional[ScoreSource] = None,
        **options: Any,
    ) -> None:
        self.options = AnnotateOptions.from_config(options)
        self.vocab = vocab
        self.name = name
        self.score_source = scores if scores is not None else make_parser_scores()
        install_fork_hook()

    # --- spaCy API ----------------------------------------------------------------

    def __call__(self, doc: Doc) -> Doc:
        """Annotate one Doc (see the class docstring)."""
        try:
            self.annotate([doc])
        except Exception as e:
            self.get_error_handler()(self.name, self, [doc], e)
        return doc

    def pipe(self, stream: Iterable[Doc], *, batch_size: int = 128) -> Iterator[Doc]:
        """Annotate Docs in groups of ``batch_size``; sentences of all Docs in a group
        are bucketed by length into engine batches. Same results as ``__call__``."""
        for docs in minibatch(stream, size=batch_size):
            try:
                self.annotate(docs)
            except Exception as e:
                self.get_error_handler()(self.name, self, docs, e)
                continue
            yield from docs

    def initialize(self, get_examples: Any = None, *, nlp: Any = None) -> None:
        """Nothing to train: the component only reads scores."""

    # --- the work -----------------------------------------------------------------

    def annotate(self, docs: Sequence[Doc]) -> None:
        """Compute and store the annotations of every sentence of ``docs``."""
        per_doc: List[List[SentenceScores]] = [
            [] if len(doc) == 0 else sentence_scores(doc, self.score_source(doc)) for doc in docs
        ]
        annotations = annotate_sentences([s for doc_scores in per_doc for s in doc_scores], self.options)
        offset = 0
        for doc, doc_scores in zip(docs, per_doc):
            doc._.set(attributes.STORE, annotations[offset : offset + len(doc_scores)])
            offset += len(doc_scores)
