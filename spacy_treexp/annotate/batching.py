"""Sentences grouped into engine batches by length, and padded into one score tensor."""

from __future__ import annotations

from typing import Iterator, List, Optional, Sequence

import numpy
import torch

from spacy_treexp.engine import TreeDistribution

#: Sentences whose lengths differ by at most this factor (plus a small slack) share an engine
#: batch: padding never changes a sentence's results, it only costs O(N^3) time.
GROWTH = 1.25
SLACK = 2


def length_buckets(
    lengths: Sequence[int], max_batch: int, *, max_cells: Optional[int] = None, cells_per_entry: int = 1
) -> Iterator[List[int]]:
    """Indices of ``lengths`` sorted by length (stable), in groups of at most ``max_batch``
    whose longest is at most ``GROWTH`` times their shortest plus ``SLACK`` words; with
    ``max_cells``, also at most ``max_cells`` entries of ``cells_per_entry · B · (N+1)²``."""
    order = numpy.argsort(numpy.asarray(lengths, dtype=numpy.int64), kind="stable").tolist()
    bucket: List[int] = []
    for index in order:
        n = lengths[index]
        if bucket and (
            len(bucket) >= max_batch
            or n > GROWTH * lengths[bucket[0]] + SLACK
            or (max_cells is not None and (len(bucket) + 1) * (n + 1) ** 2 * cells_per_entry > max_cells)
        ):
            yield bucket
            bucket = []
        bucket.append(index)
    if bucket:
        yield bucket


def pad_scores(arcs: Sequence[numpy.ndarray], temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """float64 ``(B, N+1, N+1)`` arc scores of sentences' ``(n+1, n+1)`` matrices (divided
    by ``temperature``), zero-padded to the longest, and their lengths ``(B,)``."""
    size = max(arc.shape[-1] for arc in arcs)
    scores = numpy.zeros((len(arcs), size, size), dtype=numpy.float64)
    for b, arc in enumerate(arcs):
        scores[b, : arc.shape[0], : arc.shape[1]] = arc
    if temperature != 1.0:
        scores /= temperature
    lengths = torch.tensor([arc.shape[-1] - 1 for arc in arcs], dtype=torch.long)
    return torch.from_numpy(scores), lengths


def batch_distribution(
    arcs: Sequence[numpy.ndarray], single_root: bool, device: torch.device, temperature: float = 1.0
) -> TreeDistribution:
    """The engine's distribution over a batch of sentences' arc scores (see :func:`pad_scores`)."""
    scores, lengths = pad_scores(arcs, temperature)
    return TreeDistribution(scores.to(device), lengths.to(device), single_root=single_root)
