"""The ``tree_expectations`` spaCy component.

Reads each sentence's arc scores (from a registered, swappable score source; by default
``Doc._.parser_scores`` written by ``biaffine_parser``), hands them to the annotation core
(:mod:`spacy_treexp.annotate`) and stores the :class:`~spacy_treexp.annotate.SentenceAnnotation`
of every sentence in ``doc._.tree_expectations`` (see ``attributes.py`` for the views on Doc,
sentence Span and Token): exact arc marginals and log Z (Koo et al. 2007, Prop. 1), the tree
entropy (Zmigrod et al. 2021), the expected attachment score of the predicted tree, and
optionally unbiased samples of alternative trees with their exact log-probabilities
(Stanojević 2022).

``calibration`` (default null) holds a :class:`~spacy_treexp.calibration.CalibrationMap` in
its dict form (written by ``spacy-treexp calibrate``), which the core applies to the
scores first; being part of the config, ``nlp.to_disk`` keeps it. When it is null and the
component is added to a pipeline loaded from a folder whose parser folder holds
``treexp_calibration.json`` (as the shipped model's ``biaffine_parser`` does), that map is
used, and ``to_disk`` / ``to_bytes`` carry it in the component's own data. Set
``calibration`` to ``{"kind": "temperature", "log_scale": [0.0], "bias": [0.0]}`` (the
identity) to use the parser's scores as they are. A map that carries a novelty reference
also gives ``sent._.novelty``, read from ``doc.tensor`` (the vectors of the pipeline's last
encoder), and, where the reference has a domain model, ``sent._.out_of_domain``. ``Doc._.parser_scores`` stays the parser's own.
``sentence_encoder`` (default null), the directory of a local sentence encoder (the shipped map's
opt-in model reads all-MiniLM-L6-v2), makes ``sent._.out_of_domain`` the map's model that also
reads each sentence's embedding (``novelty.encoder_domain``; :mod:`spacy_treexp.calibration.sentence_encoder`).
``out_of_domain_prior`` (default 0.5) is the share of out-of-domain text the user expects:
``sent._.out_of_domain`` is the domain model's probability under that prior (Bayes' rule on its
logit, :mod:`spacy_treexp.calibration.domain`); 0.5, even odds, is the probability as fitted.

After annotating a Doc the component drops the parser's raw scores (``Doc._.parser_scores
= None``) unless ``keep_scores`` is set: they take tens of times the memory of the
annotations (on 22,683 tokens of EWT dev with the shipped parser, 126 MB of pickled scores
against 3.5 MB of annotations), and pickles and ``DocBin(store_user_data=True)`` would
carry them.

This module is an adapter: it converts between spaCy objects and the core's records and
does no maths of its own.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy
from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.tokens import Doc
from spacy.util import minibatch
from thinc.api import to_numpy

from spacy_treexp.annotate import DEFAULTS, AnnotateOptions, SentenceScores, annotate_sentences, install_fork_hook
from spacy_treexp.calibration.domain import DomainModel, check_prior
from spacy_treexp.calibration.map import CALIBRATION_FILE, CalibrationError, CalibrationMap, read_map
from spacy_treexp.calibration.novelty import spans_novelty
from spacy_treexp.calibration.sentence_encoder import SentenceEncoder
from spacy_treexp.engine.native import native_requested
from spacy_treexp.io.files import write_atomic
from spacy_treexp.pipeline import attributes
from spacy_treexp.pipeline.extensions import LIVE_WRITERS, PARSER_SCORES, score_writers
from spacy_treexp.pipeline.noun_chunks import install_for_ud_writers
from spacy_treexp.pipeline.score_sources import (
    PARSER_SCORES_SOURCE,
    Errors,
    ScoreSource,
    call_source,
    make_parser_scores,
    sentence_name,
    sentence_scores,
    source_name,
)

DEFAULT_CONFIG = {
    "scores": {"@misc": PARSER_SCORES_SOURCE},
    **DEFAULTS,
    "keep_scores": False,
    "calibration": None,
    "sentence_encoder": None,
    "out_of_domain_prior": 0.5,
}

#: Beside a stored map (``to_disk``): the name of the score writer whose scores it is for.
WRITER_FILE = "treexp_writer.json"
WRITER_KEY = "calibrated_for"


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
    mixture_marginals: bool,
    mixture_samples: int,
    device: str,
    batch_size: int,
    max_sentence_length: int,
    seed: Optional[int],
    risk_temperature: Optional[float],
    keep_scores: bool,
    calibration: Optional[Dict[str, Any]],
    sentence_encoder: Optional[str],
    out_of_domain_prior: float,
) -> TreeExpectations:
    """Create the ``tree_expectations`` component (see :class:`TreeExpectations`); a pipeline
    whose parser puts a UD tree on ``token.head`` gets the UD noun-chunk iterator
    (:func:`~spacy_treexp.pipeline.noun_chunks.install_for_ud_writers`)."""
    install_for_ud_writers(nlp, [nlp.get_pipe(name) for name in score_writers(nlp)])
    return TreeExpectations(
        nlp.vocab,
        name=name,
        scores=scores,
        single_root=single_root,
        n_samples=n_samples,
        sampler=sampler,
        without_replacement=without_replacement,
        top_k_heads=top_k_heads,
        mixture_marginals=mixture_marginals,
        mixture_samples=mixture_samples,
        device=device,
        batch_size=batch_size,
        max_sentence_length=max_sentence_length,
        seed=seed,
        risk_temperature=risk_temperature,
        keep_scores=keep_scores,
        calibration=calibration,
        sentence_encoder=sentence_encoder,
        out_of_domain_prior=out_of_domain_prior,
        parser_calibration=None if calibration is not None else parser_calibration(nlp),
        # by the name the parser has when this component is added (records carry its token too)
        writers={getattr(nlp.get_pipe(name), "name", name): nlp.get_pipe(name) for name in score_writers(nlp)},
    )


def word_rows(tensor: Any, record: Any, words: Sequence[Any]) -> Tuple[Any, int, int]:
    """``(tensor, start, end)``: the rows of the sentence ``record`` of a Doc whose token vectors
    are ``tensor``, for :func:`~spacy_treexp.calibration.novelty.spans_novelty` and the domain model;
    where ``words`` (its tokens less whitespace) are fewer than its tokens, a copy of their rows
    (none where ``tensor`` has no row for each token, as when no encoder ran)."""
    if len(words) == record.end - record.start:
        return tensor, record.start, record.end
    if numpy.ndim(tensor) != 2 or numpy.shape(tensor)[0] < record.end:
        return tensor, record.start, record.start  # no rows: novelty None
    return tensor[[t.i for t in words]], 0, len(words)


def parser_calibration(nlp: Language) -> Union[CalibrationMap, Path, None]:
    """The calibration map of the component of ``nlp`` that writes ``Doc._.parser_scores``
    last (the scores ``tree_expectations`` reads; an earlier writer's map was fitted on other
    scores): the one it carries (:func:`carried_calibration`), or else, for a writer that carries
    none by design, the :data:`CALIBRATION_FILE` in its folder when ``nlp`` was loaded from one. A mixture member
    (``biaffine_parser`` with ``mixture_member``) without a map leaves the earlier writer's
    scores as they are and only adds members: then the earlier writer's map, so that its
    tree's probabilities stay what they were without the member."""
    for name in reversed(score_writers(nlp)):
        component = nlp.get_pipe(name)
        carried = carried_calibration(component, nlp.vocab)
        if carried is not None:
            return carried
        # a biaffine_parser reads the map in its folder itself, and leaves out one fitted on other
        # scores (from_disk): only another writer's file is read here
        carries = hasattr(component, "calibration_map")
        path = None if nlp.path is None or carries else Path(nlp.path) / name / CALIBRATION_FILE
        if path is not None and path.is_file():
            return path
        if not getattr(component, "mixture_member", False):
            return None
    return None


def last_annotator(nlp: Language) -> Optional[str]:
    """The name of ``nlp``'s last ``tree_expectations`` component, found by its factory (so
    also under another name), or None."""
    annotators = [name for name in nlp.pipe_names if nlp.get_pipe_meta(name).factory == "tree_expectations"]
    return annotators[-1] if annotators else None


def pipeline_calibration(nlp: Language) -> Optional[CalibrationMap]:
    """The calibration map ``nlp`` applies to its parser's scores: its ``tree_expectations``
    component's, else the one its last parser carries (or stores in its folder)
    (:func:`parser_calibration`), else None. ``spacy-treexp audit`` and ``evaluate`` score
    with it, as the pipeline's users read ``token._.head_prob``."""
    annotator = last_annotator(nlp)
    if annotator is not None:
        return getattr(nlp.get_pipe(annotator), "calibration", None)
    return read_map(parser_calibration(nlp))


def carried_calibration(component: Any, vocab: Any) -> Optional[CalibrationMap]:
    """The map a score writer carries (``biaffine_parser.calibration_map``) as it applies in
    a pipeline of ``vocab``, or None. A parser sourced from another pipeline (its vocabulary
    is not ``vocab``) brings its map without the novelty reference: that was fitted on its own
    pipeline's ``doc.tensor``, not the host's; except a parser that joins an earlier parser
    (``product`` or ``mixture_member`` set), whose map can only have been fitted in a pipeline
    that holds the other parser (this one)."""
    carried = getattr(component, "calibration_map", None)
    if not isinstance(carried, CalibrationMap):
        return None
    hosted = getattr(component, "vocab", vocab) is not vocab
    if hosted and getattr(component, "joining", None) is None:
        return dataclasses.replace(carried, novelty=None)
    return carried


def store_calibration(nlp: Language, calibration: CalibrationMap, name: str = "tree_expectations") -> None:
    """Put ``calibration`` into the config of ``nlp``'s component ``name`` (a
    ``tree_expectations``; ``nlp.to_disk`` keeps it) and, when that component reads the
    parser's own ``Doc._.parser_scores``, beside the parser that writes them last
    (``biaffine_parser.calibration_map``): the map then goes with the parser when it is
    sourced into another pipeline (:func:`parser_calibration`). A ``sentence_encoder`` the map
    has no model for (``novelty.encoder_domain``) is unset, as the component would refuse the
    map (TXE027)."""
    config = dict(nlp.get_pipe_config(name))
    config.pop("factory", None)
    config["calibration"] = calibration.to_dict()
    if calibration.novelty is None or calibration.novelty.encoder_domain is None:
        config["sentence_encoder"] = None
    nlp.replace_pipe(name, "tree_expectations", config=config)
    if config.get("scores", DEFAULT_CONFIG["scores"]) != DEFAULT_CONFIG["scores"]:
        return
    writers = score_writers(nlp)
    if writers and hasattr(nlp.get_pipe(writers[-1]), "calibration_map"):
        setattr(nlp.get_pipe(writers[-1]), "calibration_map", calibration)


class TreeExpectations(Pipe):
    """Marginals, entropy, MBR tree and sampled trees from a parser's arc scores.

    Settings: ``scores``, the score source (``Doc -> list of per-sentence records``); the
    others are the core's :class:`~spacy_treexp.annotate.AnnotateOptions` (``single_root``,
    ``n_samples``, ``sampler``, ``without_replacement``, ``top_k_heads``, ``device``,
    ``batch_size`` -- the most sentences per engine call, while ``pipe``'s own
    ``batch_size`` is the number of Docs gathered per call, as elsewhere in spaCy -- and
    ``seed``: a sentence's samples come from a generator seeded by ``seed``, the sentence's
    token offset and its text, so they do not depend on batching or worker processes), and
    ``keep_scores``: keep ``Doc._.parser_scores`` after annotating (default False: they are
    set to None, as they are many times larger than the annotations; set it when something
    downstream reads the raw scores, or to run the component on the same Doc again).

    Every sentence's scores are held to the contract of
    :mod:`spacy_treexp.pipeline.score_sources`; a breach, or an exception of the score
    source itself, reaches the error handler as a ``ScoreSourceError`` (``ValueError``)
    naming the component, the score source and the sentence.
    """

    def __init__(
        self,
        vocab: Any,
        name: str = "tree_expectations",
        *,
        scores: Optional[ScoreSource] = None,
        keep_scores: bool = False,
        calibration: Any = None,
        sentence_encoder: Optional[Union[str, Path]] = None,
        out_of_domain_prior: float = 0.5,
        parser_calibration: Union[CalibrationMap, Path, None] = None,
        writers: Optional[Dict[str, Any]] = None,
        **options: Any,
    ) -> None:
        self.options = AnnotateOptions.from_config(options, prefix=f"{name}: ")
        if scores is not None and not callable(scores):
            raise ValueError(Errors.TXE019.format(name=name, default=PARSER_SCORES_SOURCE, got=scores))
        if not isinstance(keep_scores, bool):
            raise ValueError(Errors.TXE020.format(name=name, got=keep_scores))
        self.vocab = vocab
        self.name = name
        self.score_source = scores if scores is not None else make_parser_scores()
        self.keep_scores = keep_scores
        try:
            #: The :class:`~spacy_treexp.calibration.CalibrationMap` applied first, or None.
            self.calibration = read_map(calibration, f"{name}: calibration")
            if self.calibration is None and parser_calibration is not None:
                self.calibration = read_map(parser_calibration, f"{name}: calibration")
        except CalibrationError as e:
            raise ValueError(str(e)) from e
        #: Whether the map is part of the config (else ``to_disk`` carries it).
        self.calibration_in_config = calibration is not None
        try:
            #: The prior probability of out-of-domain text that ``sent._.out_of_domain`` is under.
            self.out_of_domain_prior = check_prior(out_of_domain_prior, f"{name}: out_of_domain_prior")
        except CalibrationError as e:
            raise ValueError(str(e)) from e
        #: The opt-in sentence encoder (``sentence_encoder``: its directory), or None.
        self.sentence_encoder: Optional[SentenceEncoder] = None
        if sentence_encoder is not None:
            try:
                self.sentence_encoder = SentenceEncoder(sentence_encoder)
            except CalibrationError as e:
                raise ValueError(f"{name}: {e}") from e
            if self.calibration is not None:
                self._encoder_domain(self.calibration)  # a map without the encoder's model: said now
        #: The pipeline's score writers when the component was added, by name (records name
        #: their ``writer``); ``calibration`` is the map for the scores of the last of them.
        self._writers = dict(writers or {})
        self._calibrated_for = list(self._writers)[-1] if self._writers else None
        #: Per writer token, the known writer it is or is a twin of (``_twin``), or None.
        self._twins: Dict[str, Any] = {}
        #: Writers whose scores were read without their map (warned about once each).
        self._warned: set = set()
        #: How messages name the component and its score source.
        self.where = f"{name}: score source {source_name(self.score_source)}"
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

    def to_bytes(self, *, exclude: Sequence[str] = tuple()) -> bytes:
        """The calibration map that is not in the config (see the module doc) with the writer
        it is for, or nothing."""
        if self.calibration is None or self.calibration_in_config:
            return b""
        return json.dumps({WRITER_KEY: self._calibrated_for, "map": self.calibration.to_dict()}).encode("utf8")

    def from_bytes(self, data: bytes, *, exclude: Sequence[str] = tuple()) -> TreeExpectations:
        if data and not self.calibration_in_config:
            stored = json.loads(data)
            if WRITER_KEY in stored:
                self._take_stored(CalibrationMap.from_dict(stored["map"]), stored[WRITER_KEY])
            else:  # bytes of an earlier version: the map alone
                self.calibration = CalibrationMap.from_dict(stored)
        return self

    def to_disk(self, path: Any, *, exclude: Sequence[str] = tuple()) -> None:
        """Write the calibration map that is not in the config as ``treexp_calibration.json``,
        and the name of the writer it is for as ``treexp_writer.json``."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        if self.calibration is not None and not self.calibration_in_config:
            self.calibration.to_disk(path / CALIBRATION_FILE)
            write_atomic(path / WRITER_FILE, json.dumps({WRITER_KEY: self._calibrated_for}) + "\n")

    def from_disk(self, path: Any, *, exclude: Sequence[str] = tuple()) -> TreeExpectations:
        stored = Path(path) / CALIBRATION_FILE
        if stored.is_file() and not self.calibration_in_config:
            writer_file = Path(path) / WRITER_FILE
            written = json.loads(writer_file.read_text(encoding="utf8")) if writer_file.is_file() else {}
            self._take_stored(CalibrationMap.from_disk(stored), written.get(WRITER_KEY, self._calibrated_for))
        return self

    def _take_stored(self, calibration: CalibrationMap, writer: Optional[str]) -> None:
        """Take a stored map fitted for ``writer``'s scores, unless the pipeline's last writer is
        now another (an ensemble loaded with its second parser excluded): the map of the sum
        would then describe one parser's scores, so that writer's own map stays, and a warning
        says so."""
        if writer is None or writer == self._calibrated_for or self._calibrated_for is None:
            self.calibration = calibration
            return
        # spaCy loads the components in order: the writer has read its own map by now
        self.calibration = carried_calibration(self._writers[self._calibrated_for], self.vocab)
        warnings.warn(
            f"{self.name}: its stored calibration map was fitted for the scores of {writer!r}, which this pipeline "
            f"does not run; it applies the map of {self._calibrated_for!r}, whose scores it reads",
            stacklevel=2,
        )

    # --- the work -----------------------------------------------------------------

    def annotate(self, docs: Sequence[Doc]) -> None:
        """Compute and store the annotations of every sentence of ``docs``, then drop the
        parser's scores unless ``keep_scores``. Each Doc's scores get the calibration map of
        the parser that wrote them (:meth:`calibration_for`)."""
        native = native_requested()  # read once per batch
        records = [[] if len(doc) == 0 else call_source(self.score_source, doc, self.where) for doc in docs]
        maps = [self.calibration_for(doc_records) for doc_records in records]
        per_doc: List[List[SentenceScores]] = [
            [] if len(doc) == 0 else self._checked(doc, doc_records, native) for doc, doc_records in zip(docs, records)
        ]
        for calibration in {id(m): m for m in maps}.values():
            group = [i for i, m in enumerate(maps) if m is calibration]
            self._annotate_group([docs[i] for i in group], [per_doc[i] for i in group], calibration)

    def calibration_for(self, records: Sequence[Any]) -> Optional[CalibrationMap]:
        """The calibration map for a Doc's score records: ``calibration`` when they name no
        writer (``"writer"``, as ``biaffine_parser`` does) or the writer it was taken for, else
        the map that writer carries (an ensemble's second parser disabled, so the first wrote
        the scores). The writer is the live component whose ``"writer_token"`` the records
        carry (so a renamed parser is still itself, and another parser put in under its name
        is not), or a twin of it: a writer of this pipeline with its name, kind and map (the
        same model loaded twice, a copy); else the known writer of that name (records written
        in another process). Raises ``ValueError`` where no right map is known: the writer is
        not this pipeline's, or the map in the config was fitted for another writer. Without
        a parser in the pipeline, the writer's own map where it is alive in this process, else
        ``calibration`` with a warning (once per writer) when that is none."""
        record = next((r for r in records if isinstance(r, Mapping)), None)
        if record is None or record.get("writer") is None:
            return self.calibration
        writer = record["writer"]
        token = record.get("writer_token") or ""
        live = LIVE_WRITERS.get(token)
        if self._calibrated_for is None:  # no parser in the pipeline when this component was added
            if self.calibration is None and live is not None:
                return carried_calibration(live, self.vocab)
            if self.calibration is None and writer not in self._warned:
                self._warned.add(writer)
                warnings.warn(
                    f"{self.name}: these scores were written by {writer!r}, whose calibration map this component "
                    "does not have (no parser in its pipeline, and the writer is not loaded): its probabilities "
                    "are the raw scores'. Add tree_expectations to the parser's pipeline, or give it the map "
                    "(calibration setting).",
                    stacklevel=3,
                )
            return self.calibration
        component = self._writers.get(writer) if live is None else self._twin(token, live, writer)
        calibrated = self._writers[self._calibrated_for]
        if component is calibrated:
            return self.calibration
        fitted = getattr(calibrated, "name", self._calibrated_for)  # its name now
        hint = None
        if component is None:
            hint = (
                f"{writer!r} was not in the pipeline when {self.name!r} was added (it was added later, or it is "
                f"another pipeline's): add {self.name!r} after the last parser (nlp.remove_pipe({self.name!r}), "
                "then nlp.add_pipe('tree_expectations'))."
            )
        elif self.calibration_in_config:
            hint = (
                f"The map is in {self.name!r}'s config: enable {fitted!r} again, or fit a map for {writer!r}'s "
                "scores (spacy-treexp calibrate)."
            )
        if hint is not None:
            raise ValueError(Errors.TXE026.format(name=self.name, writer=writer, fitted=fitted, hint=hint))
        return carried_calibration(component, self.vocab)

    def _twin(self, token: str, live: Any, writer: str) -> Any:
        """The known writer that is ``live`` or does what it does (its name when this component
        was added, its class and its map), or None; decided once per token."""
        if token not in self._twins:
            known = next((c for c in self._writers.values() if c is live), None)
            if known is None:
                other = self._writers.get(writer)
                same = (
                    other is not None
                    and type(other) is type(live)
                    and getattr(other, "calibration_map", None) == getattr(live, "calibration_map", None)
                )
                known = other if same else None
            self._twins[token] = known
        return self._twins[token]

    def _checked(self, doc: Doc, records: Sequence[Any], native: bool) -> List[SentenceScores]:
        return sentence_scores(doc, records, self.where, single_root=self.options.single_root, native=native)

    def _annotate_group(
        self, docs: Sequence[Doc], per_doc: Sequence[List[SentenceScores]], calibration: Optional[CalibrationMap]
    ) -> None:
        """Annotate Docs whose scores take the same calibration map."""
        sentences = [s for doc_scores in per_doc for s in doc_scores]

        def name(i: int) -> str:  # sentence i of the group, named as the score contract names it
            for doc, doc_scores in zip(docs, per_doc):
                if i < len(doc_scores):
                    return sentence_name(self.where, doc, i)
                i -= len(doc_scores)
            raise IndexError(i)

        # sentence_scores held every record to the contract (SentenceScores.check included)
        annotations = annotate_sentences(sentences, self.options, calibration, checked=True, names=name)
        novelty = None if calibration is None else calibration.novelty
        # the opt-in model, checked once per group: refused here, not a silent None, where the map has none
        encoder_domain = None if self.sentence_encoder is None else self._encoder_domain(calibration)
        if novelty is not None:  # sent._.novelty: the map's reference against doc.tensor, one product per batch
            docs_of = [doc for doc, doc_scores in zip(docs, per_doc) for _ in doc_scores]
            tensors = {id(doc): to_numpy(doc.tensor) for doc in docs}  # a CuPy array on a GPU
            # whitespace tokens (line breaks, runs of spaces) are no words of the sentence: left out
            words_of = [[t for t in doc[r.start : r.end] if not t.is_space] for doc, r in zip(docs_of, annotations)]
            spans = [
                word_rows(tensors[id(doc)], record, words) for doc, record, words in zip(docs_of, annotations, words_of)
            ]
            for record, value in zip(annotations, spans_novelty(novelty, spans)):
                record.novelty = value
            domain = novelty.domain
            embeddings: List[Any] = [None] * len(annotations)
            if self.sentence_encoder is not None:  # the opt-in model, on each sentence's embedding
                domain = encoder_domain
                texts = [doc[record.start : record.end].text for doc, record in zip(docs_of, annotations)]
                embeddings = list(self.sentence_encoder.embed(texts))
            if domain is not None:  # sent._.out_of_domain: the domain model on the sentence's words
                for record, words, (tensor, start, end), embedding in zip(annotations, words_of, spans, embeddings):
                    entropy = record.entropy  # a whitespace token's head is pinned: it adds none
                    record.out_of_domain = domain.sentence_probability(
                        [t.text for t in words],
                        [t.pos_ for t in words],
                        record.novelty,
                        None if entropy is None or not words else entropy / len(words),
                        tensor[start:end] if record.novelty is not None else None,
                        embedding,
                        self.out_of_domain_prior,
                    )
        offset = 0
        for doc, doc_scores in zip(docs, per_doc):
            records = annotations[offset : offset + len(doc_scores)]
            attributes.mark_tokens(doc, records)
            doc._.set(attributes.STORE, records)
            offset += len(doc_scores)
            if not self.keep_scores:
                doc._.set(PARSER_SCORES, None)

    def _encoder_domain(self, calibration: Optional[CalibrationMap]) -> DomainModel:
        """The map's out-of-domain model that reads the sentence encoder's embeddings; a
        ValueError where the map has none or it was fitted on embeddings of another width."""
        assert self.sentence_encoder is not None
        novelty = None if calibration is None else calibration.novelty
        domain = None if novelty is None else novelty.encoder_domain
        path = self.sentence_encoder.path
        if domain is None:
            raise ValueError(Errors.TXE027.format(name=self.name, path=path))
        if domain.embedding_width != self.sentence_encoder.width:
            raise ValueError(
                Errors.TXE028.format(
                    name=self.name, path=path, got=self.sentence_encoder.width, expected=domain.embedding_width
                )
            )
        fingerprint = domain.embedding_fingerprint
        if fingerprint is not None and not self.sentence_encoder.is_fitted_encoder(fingerprint):
            raise ValueError(Errors.TXE030.format(name=self.name, path=path))
        return domain

    def sentence_scores(self, doc: Doc, *, native: Optional[bool] = None) -> List[SentenceScores]:
        """The core's records of ``doc``'s sentences from the score source, checked
        (``native``: see :func:`~spacy_treexp.pipeline.score_sources.sentence_scores`)."""
        records = call_source(self.score_source, doc, self.where)
        return self._checked(doc, records, native_requested() if native is None else native)
