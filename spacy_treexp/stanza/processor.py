"""The Stanza ``tree_expectations`` processor: marginals, entropy and samples of depparse.

Usage (after ``import spacy_treexp.stanza``)::

    nlp = stanza.Pipeline("en", processors="tokenize,pos,lemma,depparse,tree_expectations",
                          tree_expectations_n_samples=10)
    doc = nlp("The man saw the dog with the telescope.")
    doc.sentences[0].tree_entropy, doc.sentences[0].words[5].head_prob

The depparse scores are those of depparse's own pass (see :mod:`.capture`): nothing is
re-run. For every sentence the engine's :class:`~spacy_treexp.TreeDistribution` gives the
exact arc marginals and log Z (Koo et al. 2007, Prop. 1), the tree entropy (Zmigrod et
al. 2021, §5), the expected attachment score of Stanza's tree, the MBR tree (computed
when first read), and optionally unbiased samples with their exact log-probabilities
(Stanojević 2022). The values come from the annotation core (:mod:`spacy_treexp.annotate`):
one :class:`~spacy_treexp.annotate.SentenceAnnotation` per sentence (``start`` is the
number of words before it in its document), read through ``Sentence`` and ``Word`` properties
registered once (:data:`SENTENCE_PROPERTIES`, :data:`WORD_PROPERTIES`).

Options (``tree_expectations_<name>=...`` in ``stanza.Pipeline``), as in the spaCy
component: ``single_root`` (True), ``n_samples`` (0), ``sampler`` (None: ``colbourn``,
``sbs`` without replacement), ``without_replacement`` (False),
``top_k_heads`` (3), ``mixture_marginals`` (False) and ``mixture_samples`` (0): the arc
marginals of an ensemble's members' mixture and trees drawn from it, ``device`` (``cpu`` |
``cuda`` | ``auto``), ``batch_size`` (256 sentences per engine call) and ``seed`` (0; samples of a sentence come from a generator
seeded by the seed, the sentence's word offset in its document and its text (as the spaCy
component seeds the same sentence of the Doc ``to_spacy`` makes: both draw the same trees), so they do not
depend on batching; None: fresh samples every call). ``calibration_path``: a calibration
map's JSON file applied to depparse's scores first, by the core. Without it, a
``treexp_calibration.json`` beside the depparse model (where ``spacy-treexp calibrate
--stanza DIR`` stores it) is read, so a calibrated folder is calibrated wherever it is loaded;
``calibration_path=False`` applies no map at all (the raw scores), that one included.
"""

from __future__ import annotations

import math
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy
from stanza.models.common.doc import Document, Sentence, Word
from stanza.pipeline.processor import Processor

from spacy_treexp.annotate import (
    AnnotateOptions,
    SentenceAnnotation,
    SentenceScores,
    annotate_sentences,
    label_marginals,
    mbr_heads,
)
from spacy_treexp.calibration.map import CALIBRATION_FILE, CalibrationError, CalibrationMap, read_map
from spacy_treexp.stanza.capture import SCORES_ATTR, DepparseScoreCapture, captured_scores, sentence_tree

NAME = "tree_expectations"
#: Attribute holding a sentence's annotation (read by the properties).
RECORD_ATTR = "_tree_expectations"
#: The Document attribute holding the ``(options, calibration map)`` the processor annotated
#: it with: :func:`spacy_treexp.stanza.convert.to_spacy` annotates the spaCy Doc alike.
SETTINGS_ATTR = "_tree_expectations_settings"


def parse_options(config: Dict[str, Any]) -> AnnotateOptions:
    """Validate the processor's options (see :class:`spacy_treexp.annotate.AnnotateOptions`)."""
    return AnnotateOptions.from_config(config, prefix=NAME + "_")


class TreeExpectationsProcessor(Processor):
    """Stanza processor ``tree_expectations`` (requires ``depparse``); see the module doc."""

    PROVIDES_DEFAULT = {NAME}
    REQUIRES_DEFAULT = {"depparse"}

    def __init__(self, config: Dict[str, Any], pipeline: Any, device: Any) -> None:
        super().__init__(config, pipeline, device)
        # Stanza splits option names at the first "_", so "tree_expectations_x" reaches no
        # processor config; read them from the pipeline's own config instead.
        prefix = NAME + "_"
        options = {k[len(prefix) :]: v for k, v in pipeline.config.items() if k.startswith(prefix)}
        options.pop("model_path", None)  # Stanza itself adds "<processor>_model_path" for every processor
        options.pop("calibration_path", None)  # read below
        paths = sorted(k for k in options if k.endswith("_path"))
        if paths:  # a misspelt calibration_path would otherwise leave the scores uncalibrated, silently
            raise ValueError(f"unknown tree_expectations option(s) {paths}; the one path option is calibration_path.")
        self.options = parse_options(options)
        given = pipeline.config.get(prefix + "calibration_path")
        if given is not None and given is not False and (not isinstance(given, (str, os.PathLike)) or not str(given)):
            raise ValueError(
                f"{NAME}_calibration_path must be a map's JSON file, or False for none (not even the map "
                f"beside the depparse model), got {given!r}"
            )
        calibration = None if given is False else given or beside_depparse(pipeline.config)
        where = (
            f"{NAME}_calibration_path" if given else f"the calibration map beside the depparse model ({calibration})"
        )
        try:
            self.calibration = read_map(calibration, where) if calibration else None
        except CalibrationError as e:
            raise ValueError(str(e)) from e
        depparse = pipeline.processors.get("depparse")
        if depparse is None:
            raise ValueError("tree_expectations needs the depparse processor in the same pipeline.")
        self.capture = DepparseScoreCapture.attach(depparse)

    def mark_inactive(self) -> None:
        """Stanza calls this on every processor when one lacks what it requires, before it
        raises its own "requires depparse" error; only its ``UDProcessor`` defines it."""

    def process(self, doc: Document) -> Document:
        """Annotate every sentence of one document."""
        annotate_documents([doc], self.options, self.calibration)
        return doc

    def bulk_process(self, docs: List[Document]) -> List[Document]:
        """Annotate the sentences of many documents in shared engine batches."""
        annotate_documents(docs, self.options, self.calibration)
        return docs


def map_beside(model_path: str) -> str:
    """Where the processor looks for a calibration map of the depparse model ``model_path``:
    :data:`CALIBRATION_FILE` in the model's folder."""
    return os.path.join(os.path.dirname(str(model_path)), CALIBRATION_FILE)


def beside_depparse(config: Dict[str, Any]) -> Optional[str]:
    """The map beside the pipeline's depparse model (:func:`map_beside`), if there is one."""
    model = config.get("depparse_model_path")
    if not model:
        return None
    path = map_beside(str(model))
    return path if os.path.isfile(path) else None


def annotate_documents(
    docs: Sequence[Document], options: AnnotateOptions, calibration: Optional[CalibrationMap] = None
) -> None:
    """Compute and attach the annotation of every sentence of ``docs`` (``calibration``
    applied first by the core)."""
    sentences = [sentence for doc in docs for sentence in doc.sentences]
    scores = [sentence_scores(start, sentence) for doc in docs for start, sentence in word_offsets(doc)]
    places = [(d, s) for d, doc in enumerate(docs) for s in range(len(doc.sentences))]

    def names(i: int) -> str:  # a message names the document of a batch, and the sentence in it
        d, s = places[i]
        return (f"document {d}, " if len(docs) > 1 else "") + f"sentence {s} ({scores[i].text[:40]!r})"

    annotations = annotate_sentences(scores, options, calibration, names=names)
    for sentence, annotation in zip(sentences, annotations):
        setattr(sentence, RECORD_ATTR, annotation)
    for doc in docs:
        setattr(doc, SETTINGS_ATTR, (options, calibration))


def word_offsets(doc: Document) -> List[Tuple[int, Sentence]]:
    """Each sentence of ``doc`` with the number of words before it (its first word's position
    in the spaCy Doc :func:`~spacy_treexp.stanza.convert.to_spacy` makes of ``doc``)."""
    out, start = [], 0
    for sentence in doc.sentences:
        out.append((start, sentence))
        start += len(sentence.words)
    return out


def word_spaces(sentence: Sentence) -> List[Tuple[Word, bool]]:
    """Each word of the sentence with whether a space follows it in the Doc ``to_spacy`` makes:
    after the last word of a token that has space after it (one space, however much it has)."""
    return [
        (word, k == len(token.words) - 1 and bool(token.spaces_after))
        for token in sentence.tokens
        for k, word in enumerate(token.words)
    ]


def spacy_text(sentence: Sentence) -> str:
    """The sentence's text as spaCy spells the sentence Span of the Doc ``to_spacy`` makes: its
    words, each followed by its :func:`word_spaces` space but the last."""
    pairs = word_spaces(sentence)
    return "".join(word.text + (" " if space and i < len(pairs) - 1 else "") for i, (word, space) in enumerate(pairs))


def sentence_scores(start: int, sentence: Sentence) -> SentenceScores:
    """The core's record of a sentence: its captured depparse scores (the ensemble's members
    too) and Stanza's tree with its labels, as the processor annotates it and as
    ``spacy-treexp calibrate`` / ``evaluate`` fit and score it. ``start`` (the words before it in
    its document) and its :func:`spacy_text` seed its samples: the key the spaCy component gives
    the same sentence of the Doc ``to_spacy`` makes, so both draw the same trees."""
    captured = captured_scores(sentence, NAME)
    words = [word.text for word in sentence.words]
    if captured is None:
        raise ValueError(
            "tree_expectations: a sentence has no captured depparse scores "
            f"({' '.join(words)[:60]!r}); run it in the same "
            "pipeline right after Stanza's graph-based depparse."
        )
    n = len(words)
    if captured.arc.shape != (n + 1, n + 1):
        raise ValueError(
            f"tree_expectations: captured scores of shape {tuple(captured.arc.shape)} for a sentence of {n} words."
        )
    heads = numpy.array([word.head for word in sentence.words], dtype=numpy.int64)
    if (heads < 0).any() or (heads > n).any():
        raise ValueError(f"tree_expectations: sentence has heads outside it: {heads.tolist()}.")
    return SentenceScores(
        arc=captured.arc,
        rel=captured.rel,
        labels=captured.labels,
        start=start,
        text=spacy_text(sentence),
        heads=heads,
        deprels=[word.deprel for word in sentence.words],
        members=captured.members,
    )


# --- properties -----------------------------------------------------------------------


def _record(sentence: Sentence) -> Optional[SentenceAnnotation]:
    return getattr(sentence, RECORD_ATTR, None)


#: Values that describe the tree the sentence had when annotated (``record.heads``).
TREE_VALUES = ("expected_attachment", "parse_log_prob", "error_probability", "expected_errors", "head_prob", "dep_prob")


def checked_record(sentence: Sentence, where: str) -> Optional[SentenceAnnotation]:
    """The record, refused with a ``ValueError`` naming ``where`` when the sentence's tree is
    no longer the one it describes (re-parsed, or edited by hand): its heads are not the
    record's, or its heads or relations are not those its scores were captured with."""
    record = _record(sentence)
    if record is not None and record.heads is not None:
        if [int(h) for h in record.heads] != sentence_tree(sentence)[0]:
            raise ValueError(
                f"{where}: the sentence's heads changed after tree_expectations annotated it (re-parsed "
                "or edited), so it describes another tree; parse it again with the pipeline that has "
                "tree_expectations (arc_marginals give any other tree's arcs)"
            )
    if record is not None:
        captured_scores(sentence, where)
    return record


def _checked_record(sentence: Sentence, key: str) -> Optional[SentenceAnnotation]:
    """The record; for a value of :data:`TREE_VALUES`, :func:`checked_record`."""
    return checked_record(sentence, key) if key in TREE_VALUES else _record(sentence)


def _sentence_value(key: str) -> Callable[[Sentence], Any]:
    def getter(sentence: Sentence) -> Any:
        record = _checked_record(sentence, key)
        return None if record is None else getattr(record, key)

    getter.__name__ = f"get_{key}"
    return getter


def _score_value(key: str) -> Callable[[Sentence], Any]:
    def getter(sentence: Sentence) -> Any:
        scores = getattr(sentence, SCORES_ATTR, None)
        return None if scores is None else getattr(scores, key)

    getter.__name__ = f"get_{key}"
    return getter


def _word_value(key: str) -> Callable[[Word], Optional[float]]:
    def getter(word: Word) -> Optional[float]:
        record = _checked_record(word.sent, key) if word.sent is not None else None
        values = None if record is None else getattr(record, key)
        if values is None:
            return None
        value = float(values[word.id - 1])
        return None if math.isnan(value) else value

    getter.__name__ = f"get_{key}"
    return getter


def get_mbr_heads(sentence: Sentence) -> Optional[numpy.ndarray]:
    """Heads (n,) of the minimum-Bayes-risk tree (max expected attachment), 0 = ROOT,
    computed on first access (:func:`spacy_treexp.annotate.mbr_heads`) and cached."""
    record = _record(sentence)
    return None if record is None else mbr_heads(record)


def get_label_marginals(sentence: Sentence) -> Optional[numpy.ndarray]:
    """μ(h, m, l) = μ(h, m)·p(l | h, m), float32 ``(n+1, n+1, L)`` (axis 2: ``deprel_labels``)."""
    record = _record(sentence)
    scores = getattr(sentence, SCORES_ATTR, None)
    return None if record is None or scores is None else label_marginals(record, scores.rel)


def get_head_distribution(word: Word) -> Optional[List[Tuple[int, float]]]:
    """The ``top_k_heads`` most probable heads of the word: ``[(head id, μ), ...]``, 0 = ROOT."""
    record = _record(word.sent) if word.sent is not None else None
    return None if record is None else record.top_heads(word.id)


#: Sentence properties: name -> getter (all read-only; None before annotation).
SENTENCE_PROPERTIES = {
    "arc_marginals": _sentence_value("marginals"),
    "tree_entropy": _sentence_value("entropy"),
    "log_partition": _sentence_value("log_partition"),
    "expected_attachment": _sentence_value("expected_attachment"),
    "mbr_heads": get_mbr_heads,
    "sampled_heads": _sentence_value("sampled_heads"),
    "sample_log_probs": _sentence_value("sample_log_probs"),
    "sampled_deprel_ids": _sentence_value("sampled_labels"),
    "deprel_labels": _sentence_value("labels"),
    "arc_scores": _score_value("arc"),
    "rel_log_probs": _score_value("rel"),
    "entropy_per_word": _sentence_value("entropy_per_word"),
    "label_marginals": get_label_marginals,
    "parse_log_prob": _sentence_value("parse_log_prob"),
    "error_probability": _sentence_value("error_probability"),
    "expected_errors": _sentence_value("expected_errors"),
    "mutual_information": _sentence_value("mutual_information"),
    "expected_entropy": _sentence_value("expected_entropy"),
    "mixture_error_probability": _sentence_value("mixture_error_probability"),
    "mixture_arc_marginals": _sentence_value("mixture_marginals"),
    "mixture_sampled_heads": _sentence_value("mixture_sampled_heads"),
    "novelty": _sentence_value("novelty"),  # None: a Stanza Document carries no token vectors
    "out_of_domain": _sentence_value("out_of_domain"),  # None, as it reads the novelty
}
#: Word properties: name -> getter.
WORD_PROPERTIES = {
    "head_prob": _word_value("head_prob"),
    "head_entropy": _word_value("head_entropy"),
    "dep_prob": _word_value("dep_prob"),
    "head_distribution": get_head_distribution,
    "head_mutual_information": _word_value("head_mutual_information"),
    "mixture_head_prob": _word_value("mixture_head_prob"),
}
_MARK = "_treexp_properties"


def register_properties() -> None:
    """Add the properties to ``Sentence`` and ``Word`` once (never replacing others')."""
    for cls, properties in ((Sentence, SENTENCE_PROPERTIES), (Word, WORD_PROPERTIES)):
        if getattr(cls, _MARK, False):
            continue
        clashes = [name for name in properties if hasattr(cls, name)]
        if clashes:
            raise ValueError(
                f"cannot add tree_expectations properties {clashes} to stanza {cls.__name__}: "
                "the names are already taken."
            )
        for name, getter in properties.items():
            cls.add_property(name, getter=getter)
        setattr(cls, _MARK, True)


def register_processor() -> None:
    """Register the ``tree_expectations`` processor with Stanza once.

    Stanza's ``register_processor`` appends the name to its run order every time it is
    called, which would run the processor twice; this checks first.
    """
    from stanza.pipeline.registry import NAME_TO_PROCESSOR_CLASS, PIPELINE_NAMES

    if NAME in NAME_TO_PROCESSOR_CLASS and NAME in PIPELINE_NAMES:
        return
    from stanza.pipeline.processor import register_processor as stanza_register

    stanza_register(NAME)(TreeExpectationsProcessor)
