"""The annotation core: a batch of sentences' scores in, their annotations out.

Every adapter (the spaCy component, the Stanza processor, the command line) converts its
own objects to :class:`~spacy_treexp.annotate.records.SentenceScores`, calls
:func:`annotate_sentences` and attaches the :class:`~spacy_treexp.annotate.records.SentenceAnnotation`
it gets back. Batching by length, seeds, device and threads are decided here, once. The
quantities are the engine's: exact arc marginals and log Z (Koo et al. 2007, Prop. 1), tree
entropy (Zmigrod et al. 2021, §5), the expected attachment score of the parser's tree, and
unbiased samples with their exact log-probabilities (Stanojević 2022).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import re
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy
import torch

from spacy_treexp.annotate.batching import batch_distribution, length_buckets
from spacy_treexp.annotate.options import AnnotateOptions
from spacy_treexp.annotate.records import SentenceAnnotation, SentenceScores
from spacy_treexp.annotate.runtime import resolve_device, threads_for
from spacy_treexp.annotate.scan import dense_dep_prob
from spacy_treexp.annotate.scan import head_entropy as scan_head_entropy
from spacy_treexp.engine import TreeDistribution, TreeMixture
from spacy_treexp.engine.distribution import word_head_entropy
from spacy_treexp.engine.native import native_requested
from spacy_treexp.engine.sampling.streams import PER_SENTENCE_METHODS

if TYPE_CHECKING:
    from spacy_treexp.calibration import CalibrationMap


def _shown(text: str) -> str:
    """A sentence's text for a message: its start, Stanza's word separators as spaces."""
    return text.replace("\x01", " ")[:40]


def annotate_sentences(
    sentences: Sequence[SentenceScores],
    options: Optional[AnnotateOptions] = None,
    calibration: Optional[CalibrationMap] = None,
    *,
    checked: bool = False,
    names: Optional[Callable[[int], str]] = None,
) -> List[SentenceAnnotation]:
    """The annotation of every sentence, in input order (see the module doc).

    Sentences are grouped by length into engine batches of at most ``options.batch_size``;
    padding never changes a result, and seeded samples of a sentence depend only on the
    seed, its ``start`` and its ``text``. ``calibration``: a
    :class:`~spacy_treexp.calibration.CalibrationMap` applied to every sentence's scores
    first (the one place a map is applied, whatever the adapter). ``checked``: the adapter
    has already run :meth:`SentenceScores.check` on every record (the spaCy component's
    score-source contract does), so it is not run twice. ``names``: how a message names
    sentence i (default: "sentence i" and the start of its text; the Stanza processor names
    the document too)."""
    options = options or AnnotateOptions()
    name = names if names is not None else functools.partial(_default_name, sentences)
    for i, sentence in enumerate(sentences):
        where = functools.partial(name, i)
        if not checked:
            sentence.check(where())
        check_length(sentence.n, options.max_sentence_length, where)
        for option in ("n_samples", "mixture_samples"):
            check_sample_size(sentence.n, getattr(options, option), where, option)
    if calibration is not None:
        from spacy_treexp.calibration.map import calibrate_sentences  # the map's package imports this one

        sentences = calibrate_sentences(sentences, calibration)
    if options.risk_temperature is None:  # the map's own, fitted with it (AnnotateOptions)
        fitted = None if calibration is None else calibration.risk_temperature
        options = dataclasses.replace(options, risk_temperature=1.0 if fitted is None else fitted)
    device = resolve_device(options.device)
    out: List[Optional[SentenceAnnotation]] = [None] * len(sentences)
    with torch.no_grad(), threads_for(device):
        for index in length_buckets([s.n for s in sentences], options.batch_size):
            bucket = [sentences[i] for i in index]
            try:
                dist = batch_distribution([s.arc for s in bucket], options.single_root, device)
                annotations = _infer(bucket, dist, options)
                _epistemic(bucket, annotations, options, device)
                if options.n_samples > 0:
                    _sample(bucket, dist, annotations, options)
            except ValueError as error:  # the engine names a sentence by its place in the batch
                raise _named(error, index, name) from error
            for i, annotation in zip(index, annotations):
                out[i] = annotation
    return [annotation for annotation in out if annotation is not None]


def _default_name(sentences: Sequence[SentenceScores], i: int) -> str:
    return f"sentence {i} ({_shown(sentences[i].text)!r})"


#: How the engine names a sentence of its batch in a message: "sentence 3", "sentence 3 (member 1)".
_BATCH_SENTENCE = re.compile(r"\bsentence (\d+)\b")


def _named(error: ValueError, index: Sequence[int], name: Callable[[int], str]) -> ValueError:
    """``error`` (an engine message about sentence k of a length bucket) naming the input
    sentence ``index[k]`` instead, of the same type where it can be rebuilt."""
    message = str(error)
    found = _BATCH_SENTENCE.search(message)
    if found is None or int(found.group(1)) >= len(index):
        return error
    renamed = message[: found.start()] + name(index[int(found.group(1))]) + message[found.end() :]
    try:
        return type(error)(renamed)
    except Exception:  # an exception type with another signature
        return ValueError(renamed)


def check_length(n: int, limit: int, where: Callable[[], str]) -> None:
    """Raise ``ValueError`` when a sentence of ``n`` words is longer than ``limit`` (0: none);
    ``where()`` names the sentence in the message (built only then: callers check every
    sentence of a batch)."""
    if limit and n > limit:
        raise ValueError(
            f"{where()} has {n} words, more than max_sentence_length = {limit}: exact inference costs "
            "O(n^2) memory and O(n^3) time. Split the text into shorter sentences, or raise "
            "max_sentence_length (0: no limit)."
        )


#: The most sampled heads (``n_samples`` x words) one sentence may ask for: 2**27, so that a
#: huge ``n_samples`` is refused by name instead of exhausting memory (the peak grows with
#: ``n_samples`` x words; measured in the README, Settings).
MAX_SAMPLED_HEADS = 2**27


def check_sample_size(n: int, n_samples: int, where: Callable[[], str], option: str = "n_samples") -> None:
    """Raise ``ValueError`` when ``n_samples`` trees of a sentence of ``n`` words exceed
    :data:`MAX_SAMPLED_HEADS`; ``where()`` names the sentence, ``option`` the setting."""
    if n_samples * n > MAX_SAMPLED_HEADS:
        raise ValueError(
            f"{where()}: {option} = {n_samples} trees of its {n} words are {n_samples * n} sampled heads, "
            f"more than {MAX_SAMPLED_HEADS} (memory grows with {option} x words): lower {option} "
            f"(at most {MAX_SAMPLED_HEADS // max(n, 1)} for this sentence)."
        )


def _infer(
    bucket: Sequence[SentenceScores], dist: TreeDistribution, options: AnnotateOptions
) -> List[SentenceAnnotation]:
    """Exact inference for one engine batch of similar-length sentences."""
    given = [s.heads for s in bucket]
    heads = [h for h in given if h is not None]
    if len(heads) < len(given):  # the engine's best tree where a sentence has no heads
        mode = dist.mode.cpu().numpy()
        heads = [mode[b, 1 : s.n + 1] if h is None else h for b, (s, h) in enumerate(zip(bucket, given))]
    padded = numpy.full((len(bucket), dist.n_max + 1), -1, dtype=numpy.int64)
    for b, sentence_heads in enumerate(heads):
        padded[b, 1 : len(sentence_heads) + 1] = sentence_heads
    marginals = dist.marginals
    native = native_requested()  # read once per batch
    head_entropy = _head_entropy(marginals, native)
    attachment = dist.expected_attachment(torch.from_numpy(padded).to(marginals.device)).cpu().numpy()
    marginals_np = marginals.float().cpu().numpy()
    log_partition = dist.log_partition.cpu().numpy()
    risk = dist
    if options.risk_temperature not in (None, 1.0):  # the sentence risk's own scale (AnnotateOptions)
        scaled = dist.scores / float(options.risk_temperature)
        overflow = torch.isinf(scaled) & torch.isfinite(dist.scores)
        if bool(overflow.any()):
            b = int(overflow.nonzero()[0, 0])
            raise ValueError(
                f"sentence {b}: its scores divided by risk_temperature = {options.risk_temperature:g} overflow "
                f"{dist.scores.dtype} (|score| up to {float(dist.scores[b][torch.isfinite(dist.scores[b])].abs().max()):.3g}); "
                "give a larger risk_temperature"
            )
        risk = TreeDistribution(scaled, dist.lengths, single_root=dist.single_root)
    parse_log_prob = risk.log_prob(torch.from_numpy(padded).to(marginals.device)).double().cpu().numpy()
    entropy = dist.entropy().cpu().numpy()
    annotations = []
    for b, (sentence, sentence_heads) in enumerate(zip(bucket, heads)):
        n = sentence.n
        tree = numpy.asarray(sentence_heads).astype(numpy.int32)
        mu = numpy.ascontiguousarray(marginals_np[b, : n + 1, : n + 1])
        head_prob = mu[tree, numpy.arange(1, n + 1)].astype(numpy.float32)
        annotations.append(
            SentenceAnnotation(
                start=sentence.start,
                end=sentence.start + n,
                heads=tree,
                marginals=mu,
                log_partition=float(log_partition[b]),
                entropy=float(entropy[b]),
                expected_attachment=float(attachment[b]) / n,
                head_prob=head_prob,
                head_entropy=numpy.ascontiguousarray(head_entropy[b, 1 : n + 1]),
                dep_prob=dep_prob(sentence, tree, head_prob, native=native),
                sampled_heads=numpy.zeros((0, n), dtype=numpy.int32),
                labels=None if sentence.labels is None else list(sentence.labels),
                single_root=options.single_root,
                top_k_heads=options.top_k_heads,
                parse_log_prob=float(parse_log_prob[b]),
            )
        )
    return annotations


#: Trees drawn from the members' mixture per sentence for the estimate of I(tree; member).
MEMBER_SAMPLES = 1


def _epistemic(
    bucket: Sequence[SentenceScores],
    annotations: Sequence[SentenceAnnotation],
    options: AnnotateOptions,
    device: torch.device,
) -> None:
    """The epistemic uncertainty of the sentences of a batch that carry ensemble members
    (``SentenceScores.members``), from the mixture of their tree distributions
    (:class:`~spacy_treexp.engine.TreeMixture`): exact per-word head mutual information and
    mean member entropy, the mixture's marginal of each word's head in the sentence's tree and
    the tree's log-probability log Σ_k w_k p_k(tree) (exact), with ``mixture_marginals`` the mixture's arc marginals Σ_k w_k μ_k
    (exact), with ``mixture_samples`` trees drawn from the mixture (exact: a member ~ w, then a
    tree of it; seeded per sentence like the samples), and an unbiased estimate of the sentence's I(tree; member) from
    ``MEMBER_SAMPLES`` trees of the mixture (seeded per sentence like the samples; the
    member's posterior given the tree against its weights: ``TreeMixture.mutual_information``)."""
    by_size: dict = {}
    for b, sentence in enumerate(bucket):
        if sentence.members is not None:
            by_size.setdefault(int(numpy.shape(sentence.members)[0]), []).append(b)
    for k, index in by_size.items():
        size = max(bucket[b].n for b in index) + 1
        # float32: the members' entropies and marginals to the engine's float32 accuracy
        # (entropy within 1e-3 max(1, H), marginals 1e-4) at about half the cost; the parse's
        # log-probability from the float64 scores (1 - p(parse) of a confident parse is below
        # float32's resolution of scores about 10 to 100)
        exact = numpy.zeros((len(index), k, size, size), dtype=numpy.float64)
        weights = numpy.ones((len(index), k), dtype=numpy.float64)
        for i, b in enumerate(index):
            n = bucket[b].n
            exact[i, :, : n + 1, : n + 1] = bucket[b].members
            if bucket[b].member_weights is not None:
                weights[i] = bucket[b].member_weights
        scores = exact.astype(numpy.float32)
        lengths = torch.tensor([bucket[b].n for b in index], dtype=torch.long, device=device)
        mixture = TreeMixture(
            torch.from_numpy(scores).to(device),
            torch.from_numpy(weights).to(device),
            lengths,
            single_root=options.single_root,
        )
        generators = _generators(options.seed, [bucket[b] for b in index], "members", device)
        mutual_information, _ = mixture.mutual_information(MEMBER_SAMPLES, generator=generators)
        head_mi = mixture.head_mutual_information().float().cpu().numpy()
        expected = mixture.expected_entropy().cpu().numpy()
        all_marginals = mixture.marginals
        parse = numpy.zeros((len(index), size), dtype=numpy.int64)
        for i, b in enumerate(index):
            parse[i, 1 : bucket[b].n + 1] = annotations[b].heads
        exact_mixture = TreeMixture(
            torch.from_numpy(exact).to(device),
            torch.from_numpy(weights).to(device),
            lengths,
            single_root=options.single_root,
        )
        parse_log_prob = exact_mixture.log_prob(torch.from_numpy(parse).to(device)).cpu().numpy()
        head_prob = torch.gather(all_marginals, -2, torch.from_numpy(parse).to(device).unsqueeze(-2)).squeeze(-2)
        head_prob_np = head_prob.float().cpu().numpy()
        marginals = all_marginals.float().cpu().numpy() if options.mixture_marginals else None
        trees = None
        if options.mixture_samples > 0:
            streams = _generators(options.seed, [bucket[b] for b in index], "mixture", device)
            trees = _mixture_trees(mixture, scores, weights, options, streams, device)
        for i, b in enumerate(index):
            annotation, n = annotations[b], bucket[b].n
            annotation.head_mutual_information = numpy.ascontiguousarray(head_mi[i, 1 : n + 1])
            annotation.mutual_information = float(mutual_information[i])
            annotation.expected_entropy = float(expected[i])
            annotation.mixture_parse_log_prob = float(parse_log_prob[i])
            annotation.mixture_head_prob = numpy.ascontiguousarray(head_prob_np[i, 1 : n + 1])
            if marginals is not None:
                annotation.mixture_marginals = numpy.ascontiguousarray(marginals[i, : n + 1, : n + 1])
            if trees is not None:
                annotation.mixture_sampled_heads = numpy.ascontiguousarray(trees[:, i, 1 : n + 1])


def _generators(
    seed: Optional[int], sentences: Sequence[SentenceScores], salt: str, device: torch.device
) -> Optional[List[torch.Generator]]:
    """One generator per sentence, seeded by :func:`sentence_seed` with ``salt`` before its
    text (the members' draws apart from the samples'), or None without a seed."""
    if seed is None:
        return None
    seeds = [sentence_seed(seed, s.start, f"{salt}\x00{s.text}") for s in sentences]
    return [torch.Generator(device=device).manual_seed(value) for value in seeds]


def _mixture_trees(
    mixture: TreeMixture,
    scores: numpy.ndarray,
    weights: numpy.ndarray,
    options: AnnotateOptions,
    generators: Optional[List[torch.Generator]],
    device: torch.device,
) -> numpy.ndarray:
    """``mixture_samples`` trees per sentence of ``mixture`` (built on ``scores`` ``(B, K, N+1,
    N+1)`` and ``weights``), int32 ``(S, B, N+1)``. A batch whose draws would hold more than
    :data:`MAX_SAMPLED_HEADS` heads at once is drawn a few sentences at a time, as
    :func:`draw_samples` does; with one generator per sentence, the same trees."""
    k, batch, size = options.mixture_samples, scores.shape[0], scores.shape[-1]
    rows = max(1, MAX_SAMPLED_HEADS // (k * size))  # sentences per draw
    if rows >= batch:
        return mixture.sample(k, generator=generators).to(torch.int32).cpu().numpy()
    parts = []
    for begin in range(0, batch, rows):
        part = slice(begin, begin + rows)
        sub = TreeMixture(
            torch.from_numpy(scores[part]).to(device),
            torch.from_numpy(weights[part]).to(device),
            mixture.lengths[part],
            single_root=options.single_root,
        )
        parts.append(sub.sample(k, generator=None if generators is None else generators[part]).to(torch.int32))
    return torch.cat(parts, dim=1).cpu().numpy()


def _head_entropy(marginals: torch.Tensor, native: bool) -> numpy.ndarray:
    """:func:`word_head_entropy` of a batch's marginals as float32 numpy ``(B, N+1)``: on the
    CPU with ``native``, in one kernel call (:func:`.scan.head_entropy`)."""
    if native and marginals.device.type == "cpu":
        fused = scan_head_entropy(marginals.detach().numpy())
        if fused is not None:
            return fused
    return word_head_entropy(marginals).float().cpu().numpy()


def dep_prob(
    sentence: SentenceScores, heads: numpy.ndarray, head_prob: numpy.ndarray, *, native: Optional[bool] = None
) -> Optional[numpy.ndarray]:
    """μ(h, m)·p(l | h, m) of each word's head h and relation l (``sentence.deprels``), float32
    ``(n,)``; NaN where the parser does not score that relation; None without relation
    scores or relations. ``native``: whether the kernel may run (default:
    :func:`~spacy_treexp.engine.native.native_requested`)."""
    if native is None:
        native = native_requested()
    if sentence.rel is None or sentence.labels is None or sentence.deprels is None:
        return None
    index = _label_index_of(sentence.labels)
    label = [index.get(relation, -1) for relation in sentence.deprels]
    if -1 not in label:  # the usual case: every word's value in one read
        if native and isinstance(sentence.rel, numpy.ndarray):  # one kernel call
            fused = dense_dep_prob(sentence.rel, heads, label, head_prob)
            if fused is not None:
                return fused
        dependents = numpy.arange(1, sentence.n + 1)
        if isinstance(sentence.rel, numpy.ndarray):
            values = sentence.rel[heads, dependents, label].tolist()
        else:  # scores computed when indexed (e.g. a calibration map's ScaledRelationScores):
            # each word's row in one read, the same values as arc by arc (row-wise computations)
            rows = numpy.asarray(sentence.rel[heads, dependents])
            values = rows[dependents - 1, label].tolist()
        # math.exp of each value, and the product in float32, as word by word before
        return head_prob * numpy.fromiter(map(math.exp, values), numpy.float64, len(values)).astype(numpy.float32)
    out = numpy.full(sentence.n, numpy.nan, dtype=numpy.float32)
    words = [m for m, known in enumerate(label) if known >= 0]  # 0-based: word m + 1
    if words:
        # scores computed when indexed (or with unknown relations): arc by arc, as always read
        values = [float(sentence.rel[heads[m], m + 1, label[m]]) for m in words]
        out[words] = head_prob[words] * numpy.array([math.exp(v) for v in values]).astype(numpy.float32)
    return out


def _label_index_of(labels: List[str]) -> Dict[str, int]:
    """:func:`_label_index` of ``labels``, the previous sentence's dict when the list is equal
    to its (a list compares element by element, the same strings by identity)."""
    if labels != _LAST_LABEL_INDEX[0]:
        _LAST_LABEL_INDEX[:] = [list(labels), _label_index(tuple(labels))]
    return _LAST_LABEL_INDEX[1]


#: The last label list :func:`_label_index_of` was asked for, and its dict.
_LAST_LABEL_INDEX: list = [None, {}]


@functools.lru_cache(maxsize=64)
def _label_index(labels: Tuple[str, ...]) -> Dict[str, int]:
    """Each relation name's position on the ``rel`` axis (one dict per label set)."""
    return {label: i for i, label in enumerate(labels)}


def sentence_seed(seed: int, start: int, text: str) -> int:
    """A sentence's seed: stable across batching, processes and ``PYTHONHASHSEED``
    (blake2b of the seed, the sentence's offset in its document and its text)."""
    key = f"{seed}\x00{start}\x00{text}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


def _sample(
    bucket: Sequence[SentenceScores],
    dist: TreeDistribution,
    annotations: Sequence[SentenceAnnotation],
    options: AnnotateOptions,
) -> None:
    """Draw ``n_samples`` trees per sentence of a batch into its annotations."""
    seeds = None if options.seed is None else [sentence_seed(options.seed, s.start, s.text) for s in bucket]
    fields = draw_samples(
        dist, [s.rel for s in bucket], options.n_samples, options.sampler or "", options.without_replacement, seeds
    )
    for annotation, (heads, log_probs, labels) in zip(annotations, fields):
        annotation.sampled_heads, annotation.sample_log_probs, annotation.sampled_labels = heads, log_probs, labels


#: One sentence's draws: sampled heads (k, n) int32, their log-probabilities (k,) float64 and
#: the best label of each sampled arc (k, n) int32, or None without relation scores.
Samples = Tuple[numpy.ndarray, numpy.ndarray, Optional[numpy.ndarray]]


def draw_samples(
    dist: TreeDistribution,
    rels: Sequence[Optional[numpy.ndarray]],
    k: int,
    sampler: str,
    without_replacement: bool,
    seeds: Optional[Sequence[int]],
) -> List[Samples]:
    """k trees per sentence of ``dist`` with their exact log-probabilities, and, where the
    sentence's relation scores ``rels[b]`` ``(n+1, n+1, L)`` are given, the best label of
    each sampled arc (-1 on padding rows).

    ``seeds``: one per sentence, whose trees then come from its own generator and do not
    depend on the batch (``colbourn`` and ``sbs`` take the generators in one call; the
    Wilson samplers, whose walks use a random number of uniforms, sample each sentence
    alone), or None for torch's global generator. A batch whose draws would hold more than
    :data:`MAX_SAMPLED_HEADS` heads at once is drawn in parts (the same trees with seeds)."""
    rows = max(1, MAX_SAMPLED_HEADS // max(1, k * dist.scores.shape[-1]))  # sentences per draw
    if dist.scores.shape[0] > rows:  # a batch's draws hold k x B x (N+1) heads at once: bounded too
        out = []
        for begin in range(0, dist.scores.shape[0], rows):
            part = slice(begin, begin + rows)
            sub = TreeDistribution(dist.scores[part], dist.lengths[part], single_root=dist.single_root)
            out.extend(draw_samples(sub, rels[part], k, sampler, without_replacement, seeds and seeds[part]))
        return out
    if seeds is None:
        return _draw(dist, rels, k, sampler, without_replacement, None)
    device = dist.scores.device
    generators = [torch.Generator(device=device).manual_seed(seed) for seed in seeds]
    if sampler in PER_SENTENCE_METHODS:
        return _draw(dist, rels, k, sampler, without_replacement, generators)
    out = []
    for b, (rel, generator) in enumerate(zip(rels, generators)):
        n = int(dist.lengths[b])
        alone = TreeDistribution(dist.scores[b : b + 1, : n + 1, : n + 1], single_root=dist.single_root)
        out.extend(_draw(alone, [rel], k, sampler, without_replacement, generator))
    return out


def _draw(
    dist: TreeDistribution,
    rels: Sequence[Optional[numpy.ndarray]],
    k: int,
    sampler: str,
    without_replacement: bool,
    generator: object,
) -> List[Samples]:
    """One sampler call for the sentences of ``dist`` (see :func:`draw_samples`)."""
    if without_replacement:
        heads, log_probs = dist.sample_without_replacement(k, method=sampler, generator=generator)  # type: ignore[arg-type]
    else:
        heads = dist.sample((k,), method=sampler, generator=generator)  # type: ignore[arg-type]
        log_probs = dist.log_prob(heads)
    heads_np = heads.cpu().numpy().astype(numpy.int32)
    log_probs_np = log_probs.cpu().numpy().astype(numpy.float64)
    out: List[Samples] = []
    for b, (n, rel) in enumerate(zip(dist.lengths.tolist(), rels)):
        sampled = numpy.ascontiguousarray(heads_np[:, b, 1 : n + 1])
        labels = None
        if rel is not None:
            labels = numpy.where(sampled >= 0, _best_labels(rel, numpy.maximum(sampled, 0)), -1).astype(numpy.int32)
        out.append((sampled, numpy.ascontiguousarray(log_probs_np[:, b]), labels))
    return out


def _best_labels(rel: Any, heads: numpy.ndarray) -> numpy.ndarray:
    """The best label of every sampled arc, ``heads`` ``(k, n)`` -> ``(k, n)``, reading the
    relation scores of each distinct arc once: at most min(k n, (n+1) n) rows of L scores
    (gathering a row per sampled arc, (k, n, L), asked 30 GB for 10**7 trees of 8 words; the
    whole (n+1, n, L) block would cost a long sentence's factored scores their savings)."""
    n = heads.shape[-1]
    arcs = heads * n + numpy.arange(n, dtype=heads.dtype)  # arc (h, m + 1) as one index into (n+1) x n
    used = numpy.zeros((n + 1) * n, dtype=bool)
    used[arcs] = True
    distinct = numpy.flatnonzero(used)
    best = numpy.asarray(rel[distinct // n, distinct % n + 1]).argmax(axis=-1).astype(heads.dtype)
    return best[(numpy.cumsum(used, dtype=heads.dtype) - 1)[arcs]]


def mbr_heads(annotation: SentenceAnnotation) -> Optional[numpy.ndarray]:
    """Heads ``(n,)`` of the minimum-Bayes-risk tree (maximum expected attachment), 0 = ROOT,
    computed from the stored marginals on first use and cached in the annotation.

    The engine's best tree under arc scores μ(h, m) maximises Σ_m μ(h_m, m), the expected
    attachment score. Lazy because the spanning-tree search costs more than every other
    value together."""
    if annotation.mbr_heads is None and annotation.marginals is not None:
        marginals = torch.from_numpy(numpy.asarray(annotation.marginals, dtype=numpy.float64))
        best = TreeDistribution(marginals.unsqueeze(0), single_root=annotation.single_root).mode
        annotation.mbr_heads = best[0, 1:].numpy().astype(numpy.int32)
    return annotation.mbr_heads


def label_marginals(annotation: SentenceAnnotation, rel: Optional[numpy.ndarray]) -> Optional[numpy.ndarray]:
    """μ(h, m, l) = μ(h, m)·p(l | h, m), float32 ``(n+1, n+1, L)``, from the annotation's
    marginals and the relation log-probabilities ``rel``."""
    if rel is None or annotation.marginals is None:
        return None
    return (annotation.marginals[:, :, None] * numpy.exp(rel)).astype(numpy.float32)
