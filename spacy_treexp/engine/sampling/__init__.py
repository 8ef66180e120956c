"""Unbiased sampling of dependency trees, with and without replacement (Stanojević 2022).

Public functions (``TreeDistribution.sample`` and ``.sample_without_replacement`` delegate
here):

* :func:`sample` -- independent draws. Single-root distributions: ``"colbourn"`` (the
  default, :data:`DEFAULT_METHOD`: ancestral, Sherman-Morrison), ``"wilson_marginal"`` (ROOT
  child from its marginal, then Wilson's walks), ``"wilson_reject"`` (multi-root Wilson
  until one ROOT child). Multi-root distributions: ``"colbourn"`` and ``"wilson"``
  (``"wilson_marginal"`` means ``"wilson"`` there). Both kinds: ``"auto"``, each sentence by
  Wilson's walks (Wilson-Marginal / Wilson) or Colbourn's sampler, whichever :mod:`.auto`'s
  measured cost model predicts faster from its scores (never from a draw: the mix is exact).
* :func:`sample_without_replacement` -- k distinct trees with exact log-probabilities:
  ``"sbs"`` (the default, :data:`DEFAULT_WITHOUT_REPLACEMENT`: stochastic beam search) or
  ``"trie"`` (incremental, Shi et al. 2020).
* :func:`iter_without_replacement` -- the trie sampler as an iterator, one new tree per
  sentence per step.
* :func:`wilson_reject_acceptance` -- Wilson-Reject's exact acceptance rate
  Z_single / Z_multi per sentence (expected tries = its inverse);
  :func:`spacy_treexp.engine.sampling.wilson.wilson_reject` also returns the tries of each draw,
  and :func:`spacy_treexp.engine.sampling.wilson.expected_walk_steps` each method's expected
  number of head draws per tree.

Heads are ``(..., B, N+1)`` long tensors with -1 at ROOT (index 0) and at padding. The same
seeded ``torch.Generator`` gives the same trees on the same device. ``"colbourn"``, ``"sbs"``
and ``"auto"`` also take a sequence of B generators, one per sentence: each sentence's trees
then depend on its own generator only, not on the batch it is in (see :mod:`.streams`).

Cost: a function of n (the longest sentence's words), k (samples, or trees, per sentence) and B
(sentences) alone, whatever the scale of the scores. Counted by :mod:`.work` and checked on
scores x1 to x1e4 by ``tests/engine/test_sampling_peaked.py`` (the engine's own inference,
log Z and marginals, is not counted):

* ``"colbourn"``: one L-hat LU per sentence, O(n^3), then per tree n rank-one updates of the
  rows of L-hat^{-1} still needed, about n^3 / 2 float64 multiply-adds: O(B k n^3). A sentence
  whose L-hat Sherman-Morrison cannot follow (peaked scores: words trapped in strongly bound
  sets, :mod:`.trapped`) adds an O(n^3) setup per distinct (sentence, root child) pair drawn
  (at most B min(k, n); usually one or two per sentence) and one LU per distinct sentence
  conditioned on its trapped words' heads (at most B k): at most B + B n + 2 B k LU
  factorisations in all, so O(B k n^3) with a constant about twice as large; its trapped
  words cost O(n) per tree each, and O(u e n) when u of them took a later one as head (e
  trapped words; O(n^4) per tree in the worst case, B k n^3 node updates in all our tests).
  The engine's refactorisation of a word's conditionals (O(n^3) in log space) is left for
  Sherman-Morrison updates that still drift: none in our tests, at most one per row and word,
  after which the row's inverse is refactorised by one LU.
* ``"sbs"``, ``"trie"``: the same per tree (the trie: per candidate, at most 8 per tree
  found). On peaked scores their beams also hold prefixes of negligible probability, some of
  whose conditioned L-hat stays ill-conditioned: those take the engine's refactorisation, at
  most once per prefix and word (B k n of them).
* Wilson's methods: a sentence walks only if the expected number of heads its walks draw per
  tree (exact, O(n^3): :func:`.wilson.expected_walk_steps`) is at most
  :data:`.wilson.WALK_BUDGET` n = 8 n (Wilson-Marginal: given the ROOT child drawn, so that an
  unlikely ROOT child with a long walk cannot stall a call); a round of cycle popping costs
  O(n log n) per sample, so the walks cost O(B k n^2 log n) in expectation. The other
  sentences (draws) are sampled by ``"colbourn"``; the choice depends on the scores (and the
  ROOT child) only, never on a walk, so the mixture is exact. Random and parser-like scores
  draw O(n) heads per tree; from scores x10 on, strongly bound cycles make the expected draws
  grow like e^(score gap), and those sentences cost what Colbourn's sampler costs.

On the CPU with numba installed, ``"colbourn"`` and ``"sbs"`` run their well-conditioned
sentences through fused kernels (:mod:`.fused`; ``SPACY_TREEXP_NATIVE=0`` turns them off):
the same operations per tree, each sample's (or sentence's beams') inverse kept in cache,
about 8x and 3x faster at n = 30 (``--section targets``). Their peaked sentences run in
kernels too (:mod:`.trapped_kernels`, the set-up's kernels in :mod:`.fused`), the torch code
above staying the reference.

Measured (``benchmarks/bench_sampling.py --section scale --methods colbourn --threads 1
--cpu-time``, 100 samples per sentence, on the CPU with numba): Colbourn at scores x30, x100
and x1000 within 2x its time at x1 for n = 30, B = 64 (1.5-1.9x); 1.7-2.9x at n = 60, B = 64;
2.1-6.9x at B = 1 (a fixed per-call set-up); 14.1x at n = 200, B = 4, x100, where rows whose
conditioned L-hat stays ill-conditioned take exact conditionals at every word. The searches
(``"sbs"``, ``"trie"``) stay within the bounds above but not within 2x at peaked scales.
"""

from __future__ import annotations

import operator
from typing import Any, Iterator

import torch
from torch import Tensor

from spacy_treexp.engine.sampling import streams
from spacy_treexp.engine.sampling.auto import walk_or_not
from spacy_treexp.engine.sampling.colbourn import colbourn_given_root, colbourn_sample
from spacy_treexp.engine.sampling.streams import Randomness, per_sentence
from spacy_treexp.engine.sampling.wilson import (
    remembered_steps,
    rooted_walks,
    walkable,
    wilson_multi_root,
    wilson_reject,
)
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
SINGLE_ROOT_METHODS = ("wilson_marginal", "wilson_reject", "colbourn", "auto")
MULTI_ROOT_METHODS = ("wilson", "colbourn", "auto")
WITH_REPLACEMENT_METHODS = ("wilson_marginal", "wilson_reject", "colbourn", "wilson", "auto")
WITHOUT_REPLACEMENT_METHODS = ("sbs", "trie")
#: The default samplers everywhere (engine, spaCy component, Stanza processor, CLI): their
#: cost is O(n^3) per tree whatever the scores (see the module docstring). ``"auto"`` is
#: faster on most batches (``benchmarks/bench_sampling.py --section auto``) but not the
#: default: it needs the marginals, its choice rests on constants measured on one machine,
#: and where no sentence walks it adds its priced analysis (1-2% on EWT batches) to Colbourn's cost.
DEFAULT_METHOD = "colbourn"
DEFAULT_WITHOUT_REPLACEMENT = "sbs"


def sample_size(shape: Any) -> torch.Size:
    """``shape`` (an int k for ``(k,)``, or a sequence of ints, numpy and torch integers
    included) as a ``torch.Size``; ``ValueError`` naming it where it is none of these, holds a
    bool or a negative size."""
    try:
        if isinstance(shape, bool):
            raise TypeError
        sizes: tuple = (operator.index(shape),)
    except TypeError:
        try:
            if isinstance(shape, (str, bytes)) or any(isinstance(k, bool) for k in shape):
                raise TypeError
            sizes = tuple(operator.index(k) for k in shape)
        except TypeError:
            raise ValueError(f"sample_shape must be an int or a tuple of non-negative ints, got {shape!r}") from None
    if any(size < 0 for size in sizes):
        raise ValueError(f"sample_shape must be an int or a tuple of non-negative ints, got {sizes}")
    return torch.Size(sizes)


def sample(
    dist,
    sample_shape: int | torch.Size | list[int] | tuple[int, ...] = torch.Size(),
    method: str | None = None,
    generator: Randomness = None,
) -> Tensor:
    """Independent trees from ``dist``: heads (*sample_shape, B, N+1), -1 at ROOT and padding
    (an int ``k`` is the shape ``(k,)``, see :func:`sample_size`).

    ``method`` None is :data:`DEFAULT_METHOD`. A single unbatched sentence is treated as
    B = 1 (``TreeDistribution.sample`` drops that axis).
    """
    dist = dist.batched()
    method = DEFAULT_METHOD if method is None else method
    shape = sample_size(sample_shape)
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
    if method == "colbourn":
        heads, _ = colbourn_sample(dist, count, generator)
    elif method == "auto":
        heads = _auto(dist, count, generator)
    else:
        heads = _walk_or_colbourn(dist, count, method, streams.shared(generator))
    return heads.reshape(*shape, batch, size)


def _walk_or_colbourn(
    dist, count: int, method: str, generator: torch.Generator | None, root: Tensor | None = None
) -> Tensor:
    """Wilson's ``method`` where its walks are short enough (:func:`.wilson.walkable`, decided
    from the scores alone; Wilson-Marginal: from the scores and the ROOT child drawn),
    Colbourn's sampler elsewhere: heads (S, B, N+1). Both are exact, and which one a draw gets
    does not depend on any walk, so the mixture is exact too. ``root`` (B, N+1): the ROOT
    arcs' marginals when the caller has them (Wilson-Marginal)."""
    if method == "wilson_marginal":
        root = dist.marginals[:, 0, :] if root is None else root
        heads, root_child, walked = rooted_walks(dist, count, generator, root_marginals=root, decide=True)
        unwalked = (~walked).nonzero(as_tuple=True)  # (samples, sentences)
        if unwalked[0].numel():
            heads[unwalked] = colbourn_given_root(dist, unwalked[1], root_child[unwalked], generator)
        return heads
    walk = walkable(dist, method)
    heads = torch.full((count, *dist.scores.shape[:2]), -1, dtype=torch.long, device=dist.scores.device)
    index = walk.nonzero().squeeze(-1)
    if index.numel():
        part = dist
        if index.numel() < walk.numel():
            scores = dist.scores.detach()[index]
            part = type(dist)(scores, dist.lengths[index], single_root=dist.single_root, stable=dist.stable)
        if method == "wilson_reject":
            heads[:, index] = wilson_reject(part, count, generator)[0]
        else:
            heads[:, index] = wilson_multi_root(part, count, generator)
    rest = (~walk).nonzero().squeeze(-1)
    if rest.numel():
        heads[:, rest] = colbourn_sample(dist, count, generator, sentences=rest)[0]
    return heads


def _auto(dist, count: int, generator: Randomness) -> Tensor:
    """``"auto"``: each sentence by Wilson's walks or Colbourn's sampler, as
    :func:`.auto.walk_or_not` predicts faster from its scores (never from a draw, so the
    mixture is exact): heads (S, B, N+1). With one generator per sentence, the choice is made
    per sentence alone, Colbourn's sentences are drawn in one call and each walking sentence
    alone (its walks use a random number of uniforms), so no sentence's trees depend on the
    batch."""
    alone = per_sentence(generator)
    walk = walk_or_not(dist, count, alone=alone)
    method = "wilson_marginal" if dist.single_root else "wilson"
    if not alone and not bool(walk.any()):
        return colbourn_sample(dist, count, generator)[0]
    if not alone and bool(walk.all()):
        return _walk_or_colbourn(dist, count, method, streams.shared(generator))
    heads = torch.full((count, *dist.scores.shape[:2]), -1, dtype=torch.long, device=dist.scores.device)
    index = walk.nonzero().squeeze(-1)
    groups = [] if index.numel() == 0 else list(index.split(1)) if alone else [index]
    for group in groups:
        size = int(dist.lengths[group].max()) + 1  # the walking sentences' own padding
        scores = dist.scores.detach()[group, :size, :size]
        part = type(dist)(scores, dist.lengths[group], single_root=dist.single_root, stable=dist.stable)
        root = dist.marginals.detach()[group, 0, :size] if dist.single_root else None
        remembered_steps(dist, group, part)
        stream = generator[int(group)] if per_sentence(generator) else generator
        heads[:, group, :size] = _walk_or_colbourn(part, count, method, stream, root)
    rest = (~walk).nonzero().squeeze(-1)
    if rest.numel():  # Colbourn's sentences alone, in their own padding
        size = int(dist.lengths[rest].max()) + 1
        scores = dist.scores.detach()[rest, :size, :size]
        part = type(dist)(scores, dist.lengths[rest], single_root=dist.single_root, stable=dist.stable)
        streams_of_rest = [generator[i] for i in rest.tolist()] if per_sentence(generator) else generator
        heads[:, rest, :size] = colbourn_sample(part, count, streams_of_rest)[0]
    return heads


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
    and -inf log-probabilities. Both samplers work with conditional probabilities in float64,
    so a tree whose probability is below about e^-745 (the smallest float64) counts as absent:
    a sentence whose other trees are all that improbable (scores peaked by hundreds of nats,
    far beyond a calibrated parser's) gets padding rows although it has more trees. Cost
    O(k n^3) where the conditioned L-hat stays well conditioned; a beam whose L-hat does not
    (peaked scores with near ties, as a sentence of one word repeated gives) takes exact
    O(n^3) log-space conditionals at each word, so the worst case is O(k n^4), flat in the
    score magnitude (README, "Cost", the samplers: measured cases).
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
