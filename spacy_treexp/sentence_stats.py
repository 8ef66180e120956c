"""Per-sentence uncertainty statistics from arc scores: the part the spaCy component and the
Stanza processor share (numpy at the boundary, the engine inside)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import numpy
import torch

from spacy_treexp.engine import TreeDistribution
from spacy_treexp.engine.sampling.streams import PER_SENTENCE_METHODS, Randomness


def batch_distribution(arcs: Sequence[numpy.ndarray], single_root: bool, device: torch.device) -> TreeDistribution:
    """The engine's distribution over a batch of sentences' ``(n+1, n+1)`` [head, dep] arc
    scores, padded to the longest (padding never changes a sentence's results)."""
    size = max(arc.shape[-1] for arc in arcs)
    scores = numpy.zeros((len(arcs), size, size), dtype=numpy.float64)
    for b, arc in enumerate(arcs):
        scores[b, : arc.shape[0], : arc.shape[1]] = arc
    lengths = torch.tensor([arc.shape[-1] - 1 for arc in arcs], dtype=torch.long)
    return TreeDistribution(torch.from_numpy(scores).to(device), lengths.to(device), single_root=single_root)


def sentence_statistics(dist: TreeDistribution, heads: Sequence[numpy.ndarray]) -> List[Dict[str, Any]]:
    """For each sentence of ``dist`` and its tree ``heads`` (n,) (0 = ROOT, CoNLL-U numbering):
    ``marginals`` float32 (n+1, n+1), ``log_partition``, ``entropy`` (nats),
    ``expected_attachment`` (fraction of words), ``heads`` int32, ``head_prob`` float32 (n,)
    = μ(head, word) and ``head_entropy`` float32 (n,) of each word's head distribution."""
    padded = numpy.full((len(heads), dist.n_max + 1), -1, dtype=numpy.int64)
    for b, sentence_heads in enumerate(heads):
        padded[b, 1 : len(sentence_heads) + 1] = sentence_heads
    marginals = dist.marginals
    # a certain head (p = 1, e.g. a whitespace token's) gives -0.0 or -1e-16 by rounding: 0
    head_entropy = ((-torch.special.xlogy(marginals, marginals).sum(dim=-2)).clamp_min(0.0) + 0.0).float().cpu().numpy()
    attachment = dist.expected_attachment(torch.from_numpy(padded).to(marginals.device)).cpu().numpy()
    marginals = marginals.float().cpu().numpy()
    log_partition = dist.log_partition.cpu().numpy()
    entropy = dist.entropy().cpu().numpy()
    statistics = []
    for b, sentence_heads in enumerate(heads):
        n = len(sentence_heads)
        mu = numpy.ascontiguousarray(marginals[b, : n + 1, : n + 1])
        statistics.append(
            {
                "marginals": mu,
                "log_partition": float(log_partition[b]),
                "entropy": float(entropy[b]),
                "expected_attachment": float(attachment[b]) / n,
                "heads": numpy.asarray(sentence_heads).astype(numpy.int32),
                "head_prob": mu[sentence_heads, numpy.arange(1, n + 1)].astype(numpy.float32),
                "head_entropy": numpy.ascontiguousarray(head_entropy[b, 1 : n + 1]),
            }
        )
    return statistics


def sample_fields(
    dist: TreeDistribution,
    arcs: Sequence[numpy.ndarray],
    rels: Sequence[Optional[numpy.ndarray]],
    k: int,
    sampler: str,
    without_replacement: bool,
    seeds: Optional[Sequence[int]],
) -> List[Dict[str, Any]]:
    """Draw k trees per sentence of ``dist`` (the batch of ``arcs``) and return each sentence's
    record fields: ``sampled_heads`` (k, n) int32 (rows of -1 where a sentence has fewer than
    k trees, without replacement), ``sample_log_probs`` (k,) float64 and, where its relation
    scores ``rels[b]`` (n+1, n+1, L) are given, ``sampled_labels`` (k, n): the best label of
    each sampled arc (-1 on padding rows).

    ``seeds``: one per sentence, whose trees then come from its own generator and do not
    depend on the batch (``colbourn`` and ``sbs`` take the generators in one call; the Wilson
    samplers, whose walks use a random number of uniforms, sample each sentence alone), or
    ``None`` for torch's global generator."""
    if seeds is None:
        return _draw_fields(dist, rels, k, sampler, without_replacement, None)
    device = dist.scores.device
    generators = [torch.Generator(device=device).manual_seed(seed) for seed in seeds]
    if sampler in PER_SENTENCE_METHODS:
        return _draw_fields(dist, rels, k, sampler, without_replacement, generators)
    return [
        _draw_fields(batch_distribution([arc], dist.single_root, device), [rel], k, sampler, without_replacement, g)[0]
        for arc, rel, g in zip(arcs, rels, generators)
    ]


def _draw_fields(
    dist: TreeDistribution,
    rels: Sequence[Optional[numpy.ndarray]],
    k: int,
    sampler: str,
    without_replacement: bool,
    generator: Randomness,
) -> List[Dict[str, Any]]:
    """One sampler call for the sentences of ``dist``: the fields of :func:`sample_fields`."""
    if without_replacement:
        heads, log_probs = dist.sample_without_replacement(k, method=sampler, generator=generator)
    else:
        heads = dist.sample((k,), method=sampler, generator=generator)
        log_probs = dist.log_prob(heads)
    heads = heads.cpu().numpy().astype(numpy.int32)
    log_probs = log_probs.cpu().numpy().astype(numpy.float64)
    fields = []
    for b, (n, rel) in enumerate(zip(dist.lengths.tolist(), rels)):
        sampled = numpy.ascontiguousarray(heads[:, b, 1 : n + 1])
        sentence = {"sampled_heads": sampled, "sample_log_probs": numpy.ascontiguousarray(log_probs[:, b])}
        if rel is not None:
            best = rel[numpy.maximum(sampled, 0), numpy.arange(1, n + 1)].argmax(axis=-1)
            sentence["sampled_labels"] = numpy.where(sampled >= 0, best, -1).astype(numpy.int32)
        fields.append(sentence)
    return fields
