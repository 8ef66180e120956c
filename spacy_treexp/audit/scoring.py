"""The parser's scores of gold sentences, on the gold words, streamed in chunks.

Sentences are parsed as the evaluation parses them (:func:`spacy_treexp.evaluation.scores.spacy_scores`:
one Doc per sentence, gold words and spaces, sentence-setting components skipped), whether
or not their gold heads form a tree: only the words are read.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy

from spacy_treexp.annotate import SentenceScores
from spacy_treexp.io import ConlluSentence
from spacy_treexp.io.conllu import sentence_id
from spacy_treexp.pipeline.config_checks import PipelineError

#: A function from gold sentences to the parser's scores of each (same order).
Scorer = Callable[[Sequence[ConlluSentence]], List[SentenceScores]]


def spacy_scorer(nlp: Any, batch_size: int = 64) -> Scorer:
    """A :data:`Scorer` parsing with the spaCy pipeline ``nlp`` (its parser must write
    ``Doc._.parser_scores``, as ``biaffine_parser`` does), its scores under the calibration
    map the pipeline applies (:func:`pipeline_calibration`), so that the audit's
    probabilities are the ones ``parse``, ``annotate`` and ``select`` show."""
    from spacy_treexp.calibration.map import calibrate_sentences
    from spacy_treexp.evaluation.scores import spacy_scores
    from spacy_treexp.pipeline.tree_expectations import pipeline_calibration

    calibration = pipeline_calibration(nlp)

    def score(sentences: Sequence[ConlluSentence]) -> List[SentenceScores]:
        return calibrate_sentences(spacy_scores(nlp, _words(sentences), batch_size=batch_size), calibration)

    return score


def stanza_scorer(pipeline_dir: str, gold_tags: Optional[bool] = None) -> Scorer:
    """A :data:`Scorer` parsing with the Stanza pipeline saved in ``pipeline_dir`` (loaded
    once; :func:`spacy_treexp.evaluation.scores.stanza_scorer`: on the gold words, and on the
    file's gold tags with ``gold_tags``), its scores under the calibration map its
    ``tree_expectations`` processor applies (:func:`~spacy_treexp.stanza.convert.folder_calibration`)."""
    from spacy_treexp.calibration.map import calibrate_sentences
    from spacy_treexp.evaluation.scores import stanza_scorer as gold_scorer
    from spacy_treexp.stanza.convert import folder_calibration

    calibration = folder_calibration(str(pipeline_dir))
    parse = gold_scorer(pipeline_dir, gold_tags)

    def score(sentences: Sequence[ConlluSentence]) -> List[SentenceScores]:
        return calibrate_sentences(parse(_words(sentences, tags=True)), calibration)

    return score


def _words(sentences: Sequence[ConlluSentence], tags: bool = False) -> List[Any]:
    """Gold sentences of the words (and with ``tags`` the POS columns) alone: the heads are not
    read, so a sentence whose gold heads form no tree is parsed too."""
    from spacy_treexp.evaluation.conllu import GoldSentence

    return [
        GoldSentence(
            sentence_id(s),
            s.forms,
            numpy.zeros(s.n + 1, dtype=numpy.int64),
            s.deprels,
            s.spaces,
            upos=s.upos if tags else [],
            xpos=s.xpos if tags else [],
            feats=s.feats if tags else [],
        )
        for s in sentences
    ]


def chunks(items: Iterable[ConlluSentence], size: int) -> Iterator[List[ConlluSentence]]:
    """Consecutive lists of at most ``size`` items."""
    chunk: List[ConlluSentence] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def scored(
    sentences: Iterable[ConlluSentence],
    scorer: Scorer,
    chunk_size: int = 256,
    on_done: Optional[Callable[[int], None]] = None,
    on_error: Optional[Callable[[ConlluSentence, Exception], None]] = None,
) -> Iterator[Tuple[ConlluSentence, SentenceScores]]:
    """Each sentence with its scores, parsing ``chunk_size`` sentences at a time (constant
    memory); ``on_done(k)`` after each chunk of k sentences. With ``on_error``, a chunk the
    scorer fails on is scored again one sentence at a time, and each sentence that still
    fails is passed to ``on_error`` and left out; without it, the error is raised."""
    for chunk in chunks(sentences, chunk_size):
        try:
            results = scorer(chunk)
            if len(results) != len(chunk):
                raise ValueError(f"the scorer returned {len(results)} results for {len(chunk)} sentences")
            pairs = list(zip(chunk, results))
        except (ValueError, RuntimeError) as error:
            if on_error is None or isinstance(error, PipelineError):  # the pipeline's fault: every sentence's
                raise
            pairs = []
            for sentence in chunk if len(chunk) > 1 else []:
                try:
                    pairs.extend(zip([sentence], scorer([sentence])))
                except (ValueError, RuntimeError) as single:
                    on_error(sentence, single)
            if len(chunk) == 1:
                on_error(chunk[0], error)
        yield from pairs
        if on_done is not None:
            on_done(len(chunk))
