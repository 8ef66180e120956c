"""The ``tree_expectations`` spaCy component.

Reads each sentence's arc scores (from a registered, swappable score source; by default
``Doc._.parser_scores`` written by ``biaffine_parser``), builds the engine's
``TreeDistribution`` over dependency trees, and stores per sentence the exact arc
marginals and log Z (Koo et al. 2007, Prop. 1), the tree entropy (Zmigrod et al. 2021),
the expected attachment score of the predicted tree, and optionally
unbiased samples of alternative trees with their exact log-probabilities (Stanojević
2022), as numpy / plain Python values in ``doc._.tree_expectations`` (see
``attributes.py`` for the views on Doc, sentence Span and Token).

This module is an adapter: it converts numpy <-> torch at the boundary and calls the
engine; it has no inference algorithm of its own.
"""
from __future__ import annotations

import hashlib
import math
import os
from contextlib import contextmanager
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence

import numpy
import torch
from spacy.language import Language
from spacy.pipeline import Pipe
from spacy.tokens import Doc, Span
from spacy.util import minibatch

from spacy_treexp.engine import TreeDistribution
from spacy_treexp.options import DEFAULTS, check_options
from spacy_treexp.pipeline import attributes
from spacy_treexp.pipeline.score_sources import ScoreSource, make_parser_scores
from spacy_treexp.sentence_stats import batch_distribution, sample_fields, sentence_statistics

DEFAULT_CONFIG = {"scores": {"@misc": "spacy_treexp.parser_scores.v1"}, **DEFAULTS}

# Sentences whose lengths differ by at most this factor (plus a small slack) share an
# engine batch; padding never changes results, it only costs time.
_BUCKET_GROWTH = 1.25
_BUCKET_SLACK = 2

_fork_hook_installed = False


def _single_torch_thread() -> None:
    torch.set_num_threads(1)


def _install_fork_hook() -> None:
    """Make forked children (``nlp.pipe(n_process>1)``) run torch on one thread.

    A child forked after the parent used torch's OpenMP pool can hang in its first
    parallel region; one thread per worker avoids it (and the workers are the
    parallelism anyway).
    """
    global _fork_hook_installed
    if not _fork_hook_installed and hasattr(os, "register_at_fork"):
        os.register_at_fork(after_in_child=_single_torch_thread)
        _fork_hook_installed = True


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
) -> "TreeExpectations":
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

    Settings:
        scores: score source, ``Doc -> list of per-sentence records``.
        single_root: trees with exactly one child of ROOT (Universal Dependencies).
        n_samples: sampled trees per sentence (0: none).
        sampler: ``wilson_marginal`` | ``wilson_reject`` | ``colbourn`` (``wilson`` for
            multi-root), or with ``without_replacement`` ``sbs`` | ``trie``; ``None``
            picks ``colbourn`` (or ``sbs``): its cost does not depend on the scores,
            while Wilson's random walks need astronomically many steps on the peaked
            scores of a trained parser (they stopped with an error on a toy-trained
            parser's EWT sentences and on N(0, 30) random scores at n = 4).
        without_replacement: draw ``n_samples`` distinct trees (fewer when a sentence
            has fewer trees: the rest are padded with -1 heads and -inf log-probs).
        top_k_heads: candidate heads listed by ``token._.head_distribution``.
        device: ``cpu``, ``cuda`` or ``auto`` (cuda when available).
        batch_size: the most sentences per engine call (``pipe``'s own ``batch_size``
            is the number of Docs gathered per call, as elsewhere in spaCy).
        seed: samples of a sentence are drawn with a generator seeded from ``seed``,
            the sentence's offset and its text, so they do not depend on batching or
            worker processes (``colbourn`` and ``sbs`` take one generator per sentence
            in a batched call; the Wilson samplers make one call per sentence). ``None``
            draws fresh samples from torch's global generator (not reproducible).
    """

    def __init__(
        self,
        vocab: Any,
        name: str = "tree_expectations",
        *,
        scores: Optional[ScoreSource] = None,
        single_root: bool = True,
        n_samples: int = 0,
        sampler: Optional[str] = None,
        without_replacement: bool = False,
        top_k_heads: int = 3,
        device: str = "cpu",
        batch_size: int = 256,
        seed: Optional[int] = 0,
    ) -> None:
        options = check_options(
            {
                "single_root": bool(single_root),
                "n_samples": n_samples,
                "sampler": sampler,
                "without_replacement": bool(without_replacement),
                "top_k_heads": top_k_heads,
                "device": device,
                "batch_size": batch_size,
                "seed": seed,
            }
        )
        sampler = options["sampler"]
        self.vocab = vocab
        self.name = name
        self.score_source = scores if scores is not None else make_parser_scores()
        self.single_root = bool(single_root)
        self.n_samples = n_samples
        self.sampler = sampler
        self.without_replacement = bool(without_replacement)
        self.top_k_heads = top_k_heads
        self.device = device
        self.batch_size = batch_size
        self.seed = seed
        _install_fork_hook()

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
        """Compute and store the records of every sentence of ``docs``."""
        items: List[Dict[str, Any]] = []
        per_doc: List[List[Dict[str, Any]]] = []
        for doc in docs:
            doc_items = [] if len(doc) == 0 else self._sentence_items(doc)
            per_doc.append(doc_items)
            items.extend(doc_items)
        device = self._torch_device()
        with torch.no_grad(), _engine_threads(device):
            for bucket in _length_buckets(items, self.batch_size):
                dist = self._distribution(bucket, device)
                self._infer(bucket, dist, device)
                if self.n_samples > 0:
                    self._sample(bucket, dist)
        for doc, doc_items in zip(docs, per_doc):
            doc._.set(attributes.STORE, [item["record"] for item in doc_items])

    def _torch_device(self) -> torch.device:
        if self.device == "auto":
            return torch.device("cuda" if torch.cuda.is_available() else "cpu")
        if self.device == "cuda" and not torch.cuda.is_available():
            raise ValueError("tree_expectations: device 'cuda' requested but CUDA is not available.")
        return torch.device(self.device)

    def _sentence_items(self, doc: Doc) -> List[Dict[str, Any]]:
        """Validate the source's records against ``doc.sents``; one item per sentence."""
        records = list(self.score_source(doc))
        if not doc.has_annotation("SENT_START"):
            raise ValueError(
                "tree_expectations: the Doc has no sentence boundaries; add a 'senter' or "
                "'sentencizer' (and a parser writing arc scores) before it."
            )
        sents = list(doc.sents)
        if len(records) != len(sents):
            raise ValueError(
                f"tree_expectations: the score source gave {len(records)} sentence records "
                f"but the Doc has {len(sents)} sentences ({doc.text[:60]!r})."
            )
        has_parse = doc.has_annotation("DEP")
        return [
            self._sentence_item(doc, sent, record, has_parse)
            for sent, record in zip(sents, records)
        ]

    def _sentence_item(
        self, doc: Doc, sent: Span, record: Dict[str, Any], has_parse: bool
    ) -> Dict[str, Any]:
        n = len(sent)
        if record.get("start") != sent.start or record.get("end") != sent.end:
            raise ValueError(
                f"tree_expectations: score record ({record.get('start')}, {record.get('end')}) "
                f"does not match the sentence ({sent.start}, {sent.end}) {sent.text[:40]!r}."
            )
        arc = numpy.asarray(record["arc"], dtype=numpy.float64)
        if arc.shape != (n + 1, n + 1):
            raise ValueError(
                f"tree_expectations: arc scores of shape {arc.shape} for a sentence of {n} "
                f"words (expected {(n + 1, n + 1)}): {sent.text[:40]!r}."
            )
        rel = record.get("rel")
        labels = record.get("labels")
        if rel is not None:
            rel = numpy.asarray(rel, dtype=numpy.float64)
            if labels is None or rel.shape != (n + 1, n + 1, len(labels)):
                raise ValueError(
                    f"tree_expectations: relation scores of shape {rel.shape} do not match "
                    f"{n} words and {None if labels is None else len(labels)} labels: "
                    f"{sent.text[:40]!r}."
                )
            labels = list(labels)
        heads = None
        if has_parse:
            heads = numpy.empty(n, dtype=numpy.int64)
            for m, token in enumerate(sent, start=1):
                if token.head.i == token.i:
                    heads[m - 1] = 0
                elif sent.start <= token.head.i < sent.end:
                    heads[m - 1] = token.head.i - sent.start + 1
                else:
                    raise ValueError(
                        f"tree_expectations: token {token.i} ({token.text!r}) has its head "
                        "outside its sentence; sentence boundaries and parse disagree."
                    )
        return {
            "doc": doc,
            "sent": sent,
            "n": n,
            "arc": arc,
            "rel": rel,
            "labels": labels,
            "heads": heads,
        }

    def _distribution(self, bucket: List[Dict[str, Any]], device: torch.device) -> TreeDistribution:
        """The engine's distribution over the trees of a batch of sentences (padded)."""
        return batch_distribution([item["arc"] for item in bucket], self.single_root, device)

    def _infer(self, bucket: List[Dict[str, Any]], dist: TreeDistribution, device: torch.device) -> None:
        """Exact inference for one engine batch of similar-length sentences."""
        if any(item["heads"] is None for item in bucket):
            mode = dist.mode.cpu().numpy()
            for b, item in enumerate(bucket):
                if item["heads"] is None:
                    item["heads"] = mode[b, 1 : item["n"] + 1].astype(numpy.int64)
        statistics = sentence_statistics(dist, [item["heads"] for item in bucket])
        for item, stats in zip(bucket, statistics):
            n = item["n"]
            item["record"] = {
                "start": item["sent"].start,
                "end": item["sent"].end,
                **stats,
                "dep_prob": self._dep_prob(item, stats["head_prob"]),
                "single_root": self.single_root,
                "sampled_heads": numpy.zeros((0, n), dtype=numpy.int32),
                "sample_log_probs": numpy.zeros((0,), dtype=numpy.float64),
                "sampled_labels": None,
                "labels": item["labels"],
                "top_k_heads": self.top_k_heads,
            }

    def _dep_prob(self, item: Dict[str, Any], head_prob: numpy.ndarray) -> Optional[numpy.ndarray]:
        """μ(h, d)·p(label | h, d) for each word's head and label in the Doc (NaN when
        the Doc's label is not one the parser scores); None without relation scores."""
        if item["rel"] is None:
            return None
        index = {label: i for i, label in enumerate(item["labels"])}
        out = numpy.full(item["n"], numpy.nan, dtype=numpy.float32)
        for m, token in enumerate(item["sent"], start=1):
            label = index.get(token.dep_)
            if label is not None:
                h = item["heads"][m - 1]
                out[m - 1] = head_prob[m - 1] * math.exp(item["rel"][h, m, label])
        return out

    def _sample(self, bucket: List[Dict[str, Any]], dist: TreeDistribution) -> None:
        """Draw ``n_samples`` trees per sentence of a batch, with their log-probabilities."""
        seeds = None if self.seed is None else [_sentence_seed(self.seed, item["sent"]) for item in bucket]
        arcs, rels = [item["arc"] for item in bucket], [item["rel"] for item in bucket]
        fields = sample_fields(dist, arcs, rels, self.n_samples, self.sampler, self.without_replacement, seeds)
        for item, sentence in zip(bucket, fields):
            item["record"].update(sentence)


@contextmanager
def _engine_threads(device: torch.device) -> Iterator[None]:
    """Run the engine on one CPU thread, then restore torch's setting.

    Its batched matrices are tiny (n ~ 20): threads only add synchronisation, and on a
    busy machine torch's batched ``lu_solve`` measured 1.7 ms on one thread against
    417 ms on two (B = 256, n = 20, float64)."""
    previous = torch.get_num_threads()
    if device.type != "cpu" or previous == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _sentence_seed(seed: int, sent: Span) -> int:
    """A stable per-sentence seed: independent of batching, process and PYTHONHASHSEED."""
    key = f"{seed}\x00{sent.start}\x00{sent.text}".encode("utf8")
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


def _length_buckets(items: List[Dict[str, Any]], batch_size: int) -> Iterator[List[Dict[str, Any]]]:
    """Group sentences of similar length (at most ``batch_size`` per group)."""
    bucket: List[Dict[str, Any]] = []
    for item in sorted(items, key=lambda item: item["n"]):
        if bucket and (
            len(bucket) == batch_size
            or item["n"] > _BUCKET_GROWTH * bucket[0]["n"] + _BUCKET_SLACK
        ):
            yield bucket
            bucket = []
        bucket.append(item)
    if bucket:
        yield bucket
