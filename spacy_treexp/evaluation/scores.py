"""Per-sentence parser scores for evaluation, and where they come from.

Sources produce the core's :class:`~spacy_treexp.annotate.SentenceScores` (arc
log-potentials, relation log-probabilities and the parser's own tree) for every gold
sentence, parsing on gold tokenization and gold sentences:

* :func:`spacy_scores` -- any spaCy pipeline whose parser writes ``Doc._.parser_scores``
  (the shipped ``biaffine_parser`` does);
* :func:`stanza_scores` -- a Stanza pipeline with graph-based depparse, through the scores
  that ``spacy_treexp.stanza`` captures during depparse's own pass.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, List, Optional, Sequence

import numpy
from thinc.api import to_numpy

from spacy_treexp.annotate import SentenceScores
from spacy_treexp.calibration.domain import SentenceSignals
from spacy_treexp.evaluation.conllu import GoldSentence

#: Components that would change the gold sentence boundaries or only add our own outputs.
SKIPPED_FACTORIES = ("senter", "sentencizer", "tree_expectations")


def spacy_scores(nlp: Any, gold: Sequence[GoldSentence], batch_size: int = 64) -> List[SentenceScores]:
    """Parse every gold sentence (as its own Doc, gold words and boundaries) with ``nlp``.

    Components that set sentence boundaries or compute tree expectations are skipped. The
    scores are those the pipeline's last ``tree_expectations`` reads from its score source
    (:func:`component_scores`: the parser's, or a custom source), or, in a pipeline without
    one, ``Doc._.parser_scores``.
    """

    import spacy_treexp.pipeline.extensions  # noqa: F401  (registers Doc._.parser_scores)
    from spacy_treexp.pipeline.score_sources import sentence_scores
    from spacy_treexp.pipeline.tree_expectations import last_annotator

    annotator = last_annotator(nlp)
    if annotator is not None:
        return component_scores(nlp, gold, annotator, batch_size=batch_size)
    skipped = _skipped_components(nlp)
    components = list(nlp.pipe_names)

    out: List[SentenceScores] = []
    with nlp.select_pipes(disable=skipped):
        for sentence, doc in zip(gold, nlp.pipe(gold_docs(nlp, gold), batch_size=batch_size)):
            where = f"sentence {sentence.sent_id}"
            records = doc._.get("parser_scores")
            if not records:
                raise ValueError(
                    f"{where}: the pipeline wrote no Doc._.parser_scores; it needs a parser that "
                    f"stores its arc scores (e.g. 'biaffine_parser'), or a tree_expectations with a score source. "
                    f"Components: {components}"
                )
            if len(records) != 1 or records[0]["start"] != 0 or records[0]["end"] != sentence.n:
                raise ValueError(f"{where}: the parser changed the gold sentence boundaries")
            # as tree_expectations reads them: members, the record's own tree, the sentence's text
            out.extend(sentence_scores(doc, records, where))
    return out


def component_scores(
    nlp: Any, gold: Sequence[GoldSentence], name: str = "tree_expectations", batch_size: int = 64
) -> List[SentenceScores]:
    """Scores of the gold sentences from the score source of ``nlp``'s ``tree_expectations``
    component ``name`` (the parser's, a stock pipeline's, or a custom source): the pipeline
    runs on gold words and boundaries up to that component, which then reads the scores."""

    component = nlp.get_pipe(name)
    skipped = _skipped_components(nlp)

    out: List[SentenceScores] = []
    with nlp.select_pipes(disable=skipped):
        for sentence, doc in zip(gold, nlp.pipe(gold_docs(nlp, gold), batch_size=batch_size)):
            try:
                records = component.sentence_scores(doc)
            except ValueError as error:  # its message counts sentences in the Doc: always "sentence 0" here
                raise ValueError(f"gold sentence {sentence.sent_id} (line {sentence.line}): {error}") from error
            if len(records) != 1 or records[0].n != sentence.n:
                raise ValueError(f"sentence {sentence.sent_id}: the pipeline changed the gold sentence boundaries")
            out.append(records[0])
    return out


def stanza_scores(
    pipeline_dir: str, gold: Sequence[GoldSentence], gold_tags: Optional[bool] = None, **options: Any
) -> List[SentenceScores]:
    """Parse the gold sentences with the Stanza pipeline saved in ``pipeline_dir``
    (:func:`stanza_scorer`, loaded for this call)."""
    return stanza_scorer(pipeline_dir, gold_tags, **options)(gold)


def stanza_scorer(
    pipeline_dir: str, gold_tags: Optional[bool] = None, **options: Any
) -> Callable[[Sequence[GoldSentence]], List[SentenceScores]]:
    """A function parsing gold sentences with the Stanza pipeline saved in ``pipeline_dir``,
    loaded once here.

    The scores are the ones ``spacy_treexp.stanza`` captures during depparse's own pass
    (``sentence._treexp_scores``), raw (the map the processor applies is not). With
    ``gold_tags`` (default: when the folder has ``depparse.pt`` but no ``pos.pt``) depparse
    runs pretagged on the gold UPOS / XPOS / features of the CoNLL-U file, as Stanza's own
    parser evaluation does; otherwise the folder's tagger tags the gold words
    (``spacy_treexp.stanza.pipeline_from_dir``).
    """
    import os

    try:
        from stanza.models.common.doc import Document

        import spacy_treexp.stanza as treexp_stanza
        from spacy_treexp.stanza.capture import SCORES_ATTR
        from spacy_treexp.stanza.processor import sentence_scores
    except ImportError as error:  # pragma: no cover - depends on the optional adapter
        raise RuntimeError(f"the Stanza adapter is not available: {error}") from error

    pipeline_dir = str(pipeline_dir)
    # the scores are read raw: a map beside depparse.pt (even a broken one) is not loaded
    options = {"tree_expectations_calibration_path": False, **options}
    depparse = os.path.join(pipeline_dir, "depparse.pt")
    gold_tags = stanza_uses_gold_tags(pipeline_dir, gold_tags)
    if gold_tags:
        from spacy_treexp.stanza.convert import load_folder_pipeline, model_folder_kwargs

        if not os.path.isfile(depparse):
            raise ValueError(f"{pipeline_dir!r} has no depparse.pt")
        kwargs: dict = dict(
            dir=pipeline_dir,
            download_method=None,
            allow_unknown_language=True,
            depparse_pretagged=True,
            logging_level="WARN",
            **model_folder_kwargs(pipeline_dir),  # depparse.pt, its pretrain and character LMs, batch size
        )
        kwargs.update(options)
        nlp = load_folder_pipeline(pipeline_dir, "en", "depparse,tree_expectations", **kwargs)
    else:
        make = getattr(treexp_stanza, "pipeline_from_dir", None)
        if make is None:
            raise RuntimeError(
                "spacy_treexp.stanza.pipeline_from_dir is missing: cannot load a Stanza pipeline directory"
            )
        nlp = make(pipeline_dir, **{"tokenize_pretokenized": True, "logging_level": "WARN", **options})

    def parse(gold: Sequence[GoldSentence]) -> Any:
        if not gold_tags:
            return nlp([list(sentence.words) for sentence in gold])
        for sentence in gold:  # Stanza says only "POS not run before depparse!"
            untagged = [
                w for i, w in enumerate(sentence.words) if not _tag(sentence.upos, i) and not _tag(sentence.xpos, i)
            ]
            if untagged:
                raise ValueError(
                    f"sentence {sentence.sent_id}: {untagged[0]!r} has no UPOS or XPOS in the CoNLL-U file; depparse "
                    "runs on the file's gold tags here (the folder has no pos.pt, or --stanza-tags gold)"
                )
        rows = [
            [
                {
                    "id": i + 1,
                    "text": word,
                    "lemma": word,
                    "upos": _tag(sentence.upos, i),
                    "xpos": _tag(sentence.xpos, i),
                    "feats": _tag(sentence.feats, i),
                }
                for i, word in enumerate(sentence.words)
            ]
            for sentence in gold
        ]
        return nlp(Document(rows))

    def score(gold: Sequence[GoldSentence]) -> List[SentenceScores]:
        doc = parse(gold)
        if len(doc.sentences) != len(gold):
            raise ValueError(f"Stanza returned {len(doc.sentences)} sentences for {len(gold)} gold sentences")
        out = []
        for sentence, parsed in zip(gold, doc.sentences):
            where = f"sentence {sentence.sent_id}"
            if getattr(parsed, SCORES_ATTR, None) is None:
                raise ValueError(f"{where}: Stanza's depparse scores were not captured")
            # as the processor reads it (Stanza's labels, the members): a map fitted on these applies alike
            scores = sentence_scores(0, parsed)
            scores.check(where)
            if scores.n != sentence.n:
                raise ValueError(
                    f"{where}: arc scores of shape {scores.arc.shape} for a sentence of {sentence.n} words"
                )
            out.append(scores)
        return out

    return score


def stanza_uses_gold_tags(pipeline_dir: str, gold_tags: Optional[bool] = None) -> bool:
    """``gold_tags`` if given, else whether the folder has ``depparse.pt`` but no ``pos.pt``."""
    import os

    if gold_tags is not None:
        return bool(gold_tags)
    pipeline_dir = str(pipeline_dir)
    return os.path.isfile(os.path.join(pipeline_dir, "depparse.pt")) and not os.path.isfile(
        os.path.join(pipeline_dir, "pos.pt")
    )


def _tag(values: Sequence[str], i: int) -> Optional[str]:
    """A gold tag, or None where the CoNLL-U file has ``_`` (or no tags were read)."""
    if i >= len(values) or values[i] in ("_", ""):
        return None
    return values[i]


def sentence_signals(nlp: Any, docs: Iterable[Any], batch_size: int = 128) -> SentenceSignals:
    """What the novelty reference and the out-of-domain model read of each Doc (taken as one
    sentence) once the whole pipeline but its sentence splitters has run: ``doc.tensor`` (what
    ``tree_expectations`` reads for ``sent._.novelty``; an empty ``(0, 0)`` array where the
    pipeline wrote no vectors for every word), the first sentence's tree entropy per word
    (None without ``tree_expectations``), the words and their UPOS tags; whitespace tokens are
    no words, as in ``tree_expectations``."""
    senters = [n for n in nlp.pipe_names if nlp.get_pipe_meta(n).factory in ("senter", "sentencizer")]
    out = SentenceSignals()
    with nlp.select_pipes(disable=senters):
        for doc in nlp.pipe(docs, batch_size=batch_size):
            tensor = numpy.asarray(to_numpy(doc.tensor), dtype=numpy.float32)  # CuPy on a GPU
            whole = tensor.ndim == 2 and tensor.shape[0] == len(doc) and tensor.shape[1] > 0
            annotations = doc._.get("tree_expectations") if doc.has_extension("tree_expectations") else None
            words = [token for token in doc if not token.is_space]
            out.vectors.append(tensor[[t.i for t in words]] if whole else numpy.zeros((0, 0), dtype=numpy.float32))
            entropy = annotations[0].entropy if annotations else None  # whitespace heads are pinned: none of it
            out.entropy_per_word.append(None if entropy is None or not words else entropy / len(words))
            out.words.append([token.text for token in words])
            out.pos.append([token.pos_ for token in words])
    return out


def text_docs(nlp: Any, texts: Iterable[str]) -> Iterable[Any]:
    """Each text as one Doc of one sentence (the pipeline's tokenizer)."""
    for text in texts:
        doc = nlp.make_doc(text)
        for i, token in enumerate(doc):
            token.is_sent_start = i == 0
        yield doc


def _skipped_components(nlp: Any) -> List[str]:
    """The components of ``nlp`` that would change the gold boundaries or annotate."""
    return [name for name in nlp.pipe_names if nlp.get_pipe_meta(name).factory in SKIPPED_FACTORIES]


def gold_docs(nlp: Any, gold: Sequence[GoldSentence]) -> Iterable[Any]:
    """One Doc per gold sentence: its words, spaces, and one sentence."""
    from spacy.tokens import Doc

    for sentence in gold:
        yield Doc(
            nlp.vocab,
            words=sentence.words,
            spaces=sentence.spaces or None,
            sent_starts=[True, *([False] * (sentence.n - 1))],
        )
