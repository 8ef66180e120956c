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
(Stanojević 2022). The values are stored per sentence as one record of numpy / plain
Python values (keys as in the spaCy component's records, without token offsets, plus
the captured scores ``arc`` and ``rel``) and read through ``Sentence`` and ``Word``
properties registered once (:data:`SENTENCE_PROPERTIES`, :data:`WORD_PROPERTIES`).

Options (``tree_expectations_<name>=...`` in ``stanza.Pipeline``), as in the spaCy
component: ``single_root`` (True), ``n_samples`` (0), ``sampler`` (None: ``colbourn``,
``sbs`` without replacement), ``without_replacement`` (False),
``top_k_heads`` (3), ``device`` (``cpu`` | ``cuda`` | ``auto``), ``batch_size`` (256
sentences per engine call) and ``seed`` (0; samples of a sentence come from a generator
seeded by the seed, the sentence's position in its document and its words, so they do not
depend on batching; None: fresh samples every call).
"""
from __future__ import annotations

import hashlib
import math
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy
import torch
from stanza.models.common.doc import Document, Sentence, Word
from stanza.pipeline.processor import Processor

from spacy_treexp.engine import TreeDistribution
from spacy_treexp.options import check_options
from spacy_treexp.sentence_stats import batch_distribution, sample_fields, sentence_statistics
from spacy_treexp.stanza.capture import SCORES_ATTR, DepparseScoreCapture, SentenceScores

NAME = "tree_expectations"
#: Attribute holding a sentence's record (read by the properties).
RECORD_ATTR = "_tree_expectations"

def parse_options(config: Dict[str, Any]) -> Dict[str, Any]:
    """Validate the processor's options (see :func:`spacy_treexp.options.check_options`)."""
    return check_options(config, prefix=NAME + "_")


class TreeExpectationsProcessor(Processor):
    """Stanza processor ``tree_expectations`` (requires ``depparse``); see the module doc."""

    PROVIDES_DEFAULT = {NAME}
    REQUIRES_DEFAULT = {"depparse"}

    def __init__(self, config: Dict[str, Any], pipeline: Any, device: Any) -> None:
        super().__init__(config, pipeline, device)
        # Stanza splits option names at the first "_", so "tree_expectations_x" reaches no
        # processor config; read them from the pipeline's own config instead.
        prefix = NAME + "_"
        # Stanza itself adds "<processor>_model_path" (and similar paths) for every processor
        options = {
            k[len(prefix):]: v
            for k, v in pipeline.config.items()
            if k.startswith(prefix) and not k.endswith("_path")
        }
        self.options = parse_options(options)
        depparse = pipeline.processors.get("depparse")
        if depparse is None:
            raise ValueError("tree_expectations needs the depparse processor in the same pipeline.")
        self.capture = DepparseScoreCapture.attach(depparse)

    def process(self, doc: Document) -> Document:
        """Annotate every sentence of one document."""
        annotate_sentences(_numbered_sentences([doc]), self.options)
        return doc

    def bulk_process(self, docs: List[Document]) -> List[Document]:
        """Annotate the sentences of many documents in shared engine batches."""
        annotate_sentences(_numbered_sentences(docs), self.options)
        return docs


def _numbered_sentences(docs: Sequence[Document]) -> List[Tuple[int, Sentence]]:
    return [(i, sentence) for doc in docs for i, sentence in enumerate(doc.sentences)]


# --- the computation ------------------------------------------------------------------


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError("tree_expectations: device 'cuda' requested but CUDA is not available.")
    return torch.device(name)


def _scores_of(sentence: Sentence) -> SentenceScores:
    scores = getattr(sentence, SCORES_ATTR, None)
    if scores is None:
        raise ValueError(
            "tree_expectations: a sentence has no captured depparse scores "
            f"({' '.join(w.text for w in sentence.words)[:60]!r}); run it in the same "
            "pipeline right after Stanza's graph-based depparse."
        )
    return scores


def _stanza_heads(sentence: Sentence) -> numpy.ndarray:
    heads = numpy.array([word.head for word in sentence.words], dtype=numpy.int64)
    if (heads < 0).any() or (heads > len(heads)).any():
        raise ValueError(f"tree_expectations: sentence has heads outside it: {heads.tolist()}.")
    return heads


def _buckets(items: List[Dict[str, Any]], batch_size: int) -> Iterator[List[Dict[str, Any]]]:
    """Sentences sorted by length, in groups of at most ``batch_size`` whose longest is at
    most 1.25 times (plus 2 words) their shortest: padding costs O(N³) per sentence."""
    bucket: List[Dict[str, Any]] = []
    for item in sorted(items, key=lambda item: item["n"]):
        if bucket and (len(bucket) >= batch_size or item["n"] > 1.25 * bucket[0]["n"] + 2):
            yield bucket
            bucket = []
        bucket.append(item)
    if bucket:
        yield bucket


def annotate_sentences(numbered: Sequence[Tuple[int, Sentence]], options: Dict[str, Any]) -> None:
    """Compute and attach the record of every ``(position in doc, sentence)`` pair."""
    items = []
    for position, sentence in numbered:
        scores = _scores_of(sentence)
        n = len(sentence.words)
        if scores.arc.shape != (n + 1, n + 1):
            raise ValueError(
                f"tree_expectations: captured scores of shape {tuple(scores.arc.shape)} for a "
                f"sentence of {n} words."
            )
        items.append({"sentence": sentence, "position": position, "n": n, "scores": scores})
    device = _device(options["device"])
    with torch.no_grad():
        for bucket in _buckets(items, options["batch_size"]):
            dist = batch_distribution([item["scores"].arc for item in bucket], options["single_root"], device)
            _infer(bucket, dist, options)
            if options["n_samples"] > 0:
                _sample(bucket, dist, options)
    for item in items:
        setattr(item["sentence"], RECORD_ATTR, item["record"])


def _infer(bucket: List[Dict[str, Any]], dist: TreeDistribution, options: Dict[str, Any]) -> None:
    """Exact inference for one engine batch (Koo et al. 2007; Zmigrod et al. 2021)."""
    for item in bucket:
        item["heads"] = _stanza_heads(item["sentence"])
    statistics = sentence_statistics(dist, [item["heads"] for item in bucket])
    for item, stats in zip(bucket, statistics):
        n = item["n"]
        scores_b: SentenceScores = item["scores"]
        item["record"] = {
            **stats,
            "dep_prob": _dep_prob(item["sentence"], scores_b, item["heads"], stats["head_prob"]),
            "sampled_heads": numpy.zeros((0, n), dtype=numpy.int32),
            "sample_log_probs": numpy.zeros((0,), dtype=numpy.float64),
            "sampled_labels": None,
            "labels": scores_b.labels,
            "top_k_heads": options["top_k_heads"],
            "single_root": options["single_root"],
            "arc": scores_b.arc,
            "rel": scores_b.rel,
        }


def _dep_prob(
    sentence: Sentence, scores: SentenceScores, heads: numpy.ndarray, head_prob: numpy.ndarray
) -> numpy.ndarray:
    """μ(h, m)·p(l | h, m) of each word's own head and relation (NaN for a relation the
    parser does not score)."""
    index = {label: i for i, label in enumerate(scores.labels)}
    out = numpy.full(len(heads), numpy.nan, dtype=numpy.float32)
    for m, word in enumerate(sentence.words, start=1):
        label = index.get(word.deprel)
        if label is not None:
            out[m - 1] = head_prob[m - 1] * math.exp(float(scores.rel[heads[m - 1], m, label]))
    return out


def _sentence_seed(seed: int, position: int, sentence: Sentence) -> int:
    """A per-sentence seed independent of batching, process and PYTHONHASHSEED."""
    words = "\x01".join(word.text for word in sentence.words)
    key = f"{seed}\x00{position}\x00{words}".encode("utf8")
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


def _sample(bucket: List[Dict[str, Any]], dist: TreeDistribution, options: Dict[str, Any]) -> None:
    """Draw ``n_samples`` trees per sentence of a bucket (Stanojević 2022); with a seed, each
    sentence from its own generator, so that its trees do not depend on the bucket."""
    seeds = None
    if options["seed"] is not None:
        seeds = [_sentence_seed(options["seed"], item["position"], item["sentence"]) for item in bucket]
    arcs = [item["scores"].arc for item in bucket]
    rels = [item["record"]["rel"] for item in bucket]
    fields = sample_fields(
        dist, arcs, rels, options["n_samples"], options["sampler"], options["without_replacement"], seeds
    )
    for item, sentence in zip(bucket, fields):
        item["record"].update(sentence)


# --- properties -----------------------------------------------------------------------


def _record(sentence: Sentence) -> Optional[Dict[str, Any]]:
    return getattr(sentence, RECORD_ATTR, None)


def _sentence_value(key: str):
    def getter(sentence: Sentence) -> Any:
        record = _record(sentence)
        return None if record is None else record.get(key)

    getter.__name__ = f"get_{key}"
    return getter


def _word_value(key: str):
    def getter(word: Word) -> Optional[float]:
        record = _record(word.sent) if word.sent is not None else None
        if record is None or record.get(key) is None:
            return None
        value = float(record[key][word.id - 1])
        return None if math.isnan(value) else value

    getter.__name__ = f"get_{key}"
    return getter


def get_entropy_per_word(sentence: Sentence) -> Optional[float]:
    """Tree entropy divided by the number of words (nats per word)."""
    record = _record(sentence)
    if record is None or record.get("entropy") is None:
        return None
    return record["entropy"] / max(len(sentence.words), 1)


def get_mbr_heads(sentence: Sentence) -> Optional[numpy.ndarray]:
    """Heads (n,) of the minimum-Bayes-risk tree (max expected attachment), 0 = ROOT.

    Computed by the engine's ``mbr()`` on first access (it is a maximum spanning tree
    search, as costly as Stanza's own decoding) and cached in the record.
    """
    record = _record(sentence)
    if record is None:
        return None
    if record.get("mbr_heads") is None and record.get("arc") is not None:
        arc = torch.from_numpy(numpy.ascontiguousarray(record["arc"], dtype=numpy.float64))
        dist = TreeDistribution(arc, single_root=record.get("single_root", True))
        record["mbr_heads"] = dist.mbr()[1:].numpy().astype(numpy.int32)
    return record.get("mbr_heads")


def get_label_marginals(sentence: Sentence) -> Optional[numpy.ndarray]:
    """μ(h, m, l) = μ(h, m)·p(l | h, m), float32 ``(n+1, n+1, L)`` (axis 2: ``deprel_labels``)."""
    record = _record(sentence)
    if record is None or record.get("rel") is None or record.get("marginals") is None:
        return None
    return (record["marginals"][:, :, None] * numpy.exp(record["rel"])).astype(numpy.float32)


def get_head_distribution(word: Word) -> Optional[List[Tuple[int, float]]]:
    """The ``top_k_heads`` most probable heads of the word: ``[(head id, μ), ...]``, 0 = ROOT."""
    record = _record(word.sent) if word.sent is not None else None
    if record is None or record.get("marginals") is None:
        return None
    column = record["marginals"][:, word.id]
    order = numpy.argsort(-column, kind="stable")[: record["top_k_heads"]]
    return [(int(h), float(column[h])) for h in order if column[h] > 0]


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
    "arc_scores": _sentence_value("arc"),
    "rel_log_probs": _sentence_value("rel"),
    "entropy_per_word": get_entropy_per_word,
    "label_marginals": get_label_marginals,
}
#: Word properties: name -> getter.
WORD_PROPERTIES = {
    "head_prob": _word_value("head_prob"),
    "head_entropy": _word_value("head_entropy"),
    "dep_prob": _word_value("dep_prob"),
    "head_distribution": get_head_distribution,
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
