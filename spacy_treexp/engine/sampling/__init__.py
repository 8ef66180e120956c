"""Unbiased sampling of dependency trees, with and without replacement (Stanojević 2022).

Public functions (``TreeDistribution.sample`` and ``.sample_without_replacement`` delegate
here):

* :func:`sample` -- independent draws. Single-root distributions: ``"colbourn"`` (the
  default, :data:`DEFAULT_METHOD`: ancestral, Sherman-Morrison), ``"wilson_marginal"`` (ROOT
  child from its marginal, then Wilson's walks), ``"wilson_reject"`` (multi-root Wilson
  until one ROOT child). Multi-root distributions: ``"colbourn"`` and ``"wilson"``
  (``"wilson_marginal"`` means ``"wilson"`` there).
* :func:`sample_without_replacement` -- k distinct trees with exact log-probabilities:
  ``"sbs"`` (the default, :data:`DEFAULT_WITHOUT_REPLACEMENT`: stochastic beam search) or
  ``"trie"`` (incremental, Shi et al. 2020).
* :func:`iter_without_replacement` -- the trie sampler as an iterator, one new tree per
  sentence per step.
* :func:`wilson_reject_acceptance` -- Wilson-Reject's exact acceptance rate
  Z_single / Z_multi per sentence (expected tries = its inverse);
  :func:`spacy_treexp.engine.sampling.wilson.wilson_reject` also returns the tries of each draw.

Heads are ``(..., B, N+1)`` long tensors with -1 at ROOT (index 0) and at padding. The same
seeded ``torch.Generator`` gives the same trees on the same device. ``"colbourn"`` and
``"sbs"`` also take a sequence of B generators, one per sentence: each sentence's trees then
depend on its own generator only, not on the batch it is in (see :mod:`.streams`).

Run time: Wilson's methods take the walks' hitting time, short for random and for confident
(parser-like) scores, but growing like exp(score gap) when some words form a strongly scored
cycle with weak exits; they raise ``ValueError`` naming the sentence after
``wilson.MAX_ROUNDS`` rounds of cycle popping (Wilson-Reject also after ``wilson.MAX_TRIES``
tries). ``"colbourn"``, ``"sbs"`` and ``"trie"`` always take O(n^3) per tree.
"""

from __future__ import annotations

import operator
from typing import Iterator

import torch
from torch import Tensor

from spacy_treexp.engine.sampling import streams
from spacy_treexp.engine.sampling.colbourn import colbourn_sample
from spacy_treexp.engine.sampling.streams import Randomness
from spacy_treexp.engine.sampling.wilson import wilson_marginal, wilson_multi_root, wilson_reject
from spacy_treexp.engine.sampling.without_replacement import (
    stochastic_beam_search,
    trie_draws,
    trie_without_replacement,
)

__all__ = [
    "sample",
    "sample_without_replacement",
    "iter_without_replacement",
    "wilson_reject_acceptance",
    "DEFAULT_METHOD",
    "DEFAULT_WITHOUT_REPLACEMENT",
    "SINGLE_ROOT_METHODS",
    "MULTI_ROOT_METHODS",
    "WITH_REPLACEMENT_METHODS",
    "WITHOUT_REPLACEMENT_METHODS",
]

#: The sampler names, the one place they are listed.
SINGLE_ROOT_METHODS = ("wilson_marginal", "wilson_reject", "colbourn")
MULTI_ROOT_METHODS = ("wilson", "colbourn")
WITH_REPLACEMENT_METHODS = ("wilson_marginal", "wilson_reject", "colbourn", "wilson")
WITHOUT_REPLACEMENT_METHODS = ("sbs", "trie")
#: The default samplers everywhere (engine, spaCy component, Stanza processor, CLI): their
#: cost is O(n^3) per tree whatever the scores, while Wilson's walks can stall on peaked ones.
DEFAULT_METHOD = "colbourn"
DEFAULT_WITHOUT_REPLACEMENT = "sbs"


def sample(
    dist,
    sample_shape: torch.Size | tuple[int, ...] = torch.Size(),
    method: str | None = None,
    generator: Randomness = None,
) -> Tensor:
    """Independent trees from ``dist``: heads (*sample_shape, B, N+1), -1 at ROOT and padding.

    ``method`` None is :data:`DEFAULT_METHOD`. A single unbatched sentence is treated as
    B = 1 (``TreeDistribution.sample`` drops that axis).
    """
    dist = dist.batched()
    method = DEFAULT_METHOD if method is None else method
    try:
        shape = torch.Size(sample_shape)
    except TypeError as error:
        raise ValueError(f"sample_shape must be a tuple of non-negative ints, got {sample_shape!r}") from error
    if any(size < 0 for size in shape):
        raise ValueError(f"sample_shape must be a tuple of non-negative ints, got {tuple(shape)}")
    if not dist.single_root and method == "wilson_marginal":
        method = "wilson"
    allowed = SINGLE_ROOT_METHODS if dist.single_root else MULTI_ROOT_METHODS
    if method not in allowed:
        kind = "single-root" if dist.single_root else "multi-root"
        raise ValueError(f"method {method!r} does not sample {kind} trees; use one of {allowed}")
    streams.check(dist, generator, method)
    batch, size = dist.scores.shape[0], dist.scores.shape[-1]
    count = shape.numel()
    if count == 0 or batch == 0:
        return torch.full((*shape, batch, size), -1, dtype=torch.long, device=dist.scores.device)
    if method == "wilson_marginal":
        heads = wilson_marginal(dist, count, streams.shared(generator))
    elif method == "wilson_reject":
        heads, _ = wilson_reject(dist, count, streams.shared(generator))
    elif method == "wilson":
        heads = wilson_multi_root(dist, count, streams.shared(generator))
    else:
        heads, _ = colbourn_sample(dist, count, generator)
    return heads.reshape(*shape, batch, size)


def _check_k(k: int) -> int:
    if isinstance(k, bool):
        raise ValueError(f"k must be a positive integer, got {k!r}")
    try:
        k = operator.index(k)
    except TypeError as error:
        raise ValueError(f"k must be a positive integer, got {k!r}") from error
    if k <= 0:
        raise ValueError(f"k must be a positive integer, got {k}")
    return k


def sample_without_replacement(
    dist, k: int, method: str | None = None, generator: Randomness = None
) -> tuple[Tensor, Tensor]:
    """k distinct trees per sentence: heads (k, B, N+1) and log_probs (k, B) = dist.log_prob.

    ``"sbs"`` returns them in the order of a sequential draw (the first is a sample of p),
    ``"trie"`` in draw order too. A sentence with fewer than k trees is padded with -1 heads
    and -inf log-probabilities. Cost O(k n^3).
    """
    k = _check_k(k)
    dist = dist.batched()
    method = DEFAULT_WITHOUT_REPLACEMENT if method is None else method
    if method not in WITHOUT_REPLACEMENT_METHODS:
        raise ValueError(
            f"unknown method {method!r} for sampling without replacement; use one of {WITHOUT_REPLACEMENT_METHODS}"
        )
    streams.check(dist, generator, method)
    batch, size = dist.scores.shape[0], dist.scores.shape[-1]
    if batch == 0:
        device = dist.scores.device
        return (
            torch.full((k, 0, size), -1, dtype=torch.long, device=device),
            torch.full((k, 0), -torch.inf, dtype=dist.scores.dtype, device=device),
        )
    if method == "sbs":
        return stochastic_beam_search(dist, k, generator)
    return trie_without_replacement(dist, k, streams.shared(generator))


def iter_without_replacement(dist, generator: torch.Generator | None = None) -> Iterator[tuple[Tensor, Tensor]]:
    """Trees without replacement one at a time (the ``"trie"`` method, Shi et al. 2020).

    Each step yields (heads (B, N+1), log_probs (B,)): one new tree per sentence, with
    ``dist.log_prob``; an exhausted sentence yields -1 heads and -inf. Stops when every
    sentence is exhausted; stop earlier whenever the drawn trees suffice. O(n^3) per tree,
    amortised (trees come in rounds of candidates: see :func:`.without_replacement.trie_draws`).
    """
    dist = dist.batched()
    streams.check(dist, generator, "trie")
    return trie_draws(dist, generator)


def wilson_reject_acceptance(dist) -> Tensor:
    """(B,) Wilson-Reject's acceptance rate Z_single / Z_multi (Stanojević 2022).

    The expected number of multi-root draws per accepted tree is its inverse, at most
    (1 + 1/n)^(n-1) <= e in expectation over random weights per the paper.
    """
    if not dist.single_root:
        raise ValueError("wilson_reject_acceptance needs a single-root distribution")
    batched = dist.batched()
    multi = type(dist)(batched.scores, batched.lengths, single_root=False)
    acceptance = torch.exp(batched.log_partition - multi.log_partition)
    return acceptance.squeeze(0) if batched is not dist else acceptance
