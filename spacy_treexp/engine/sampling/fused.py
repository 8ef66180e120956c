"""Fused CPU kernels (numba) of the samplers' inner loops, where measurement shows they pay.

The pure-torch samplers stay the reference and the path for every other device; these run
where :func:`spacy_treexp.engine.native.native_enabled` says so. Each kernel does the same
arithmetic as its torch twin, sample by sample and sentence by sentence, so that its
working set (one n x n inverse) stays in cache instead of streaming (S B, n, n) tensors:

* :func:`colbourn_draws`: Colbourn's sampler on well-conditioned sentences (Sherman-Morrison
  rank-one updates of the rows of L-hat^{-1} still needed, :mod:`.colbourn`), and the words
  of peaked sentences once their trapped words are drawn (phase 2 of
  :class:`.colbourn.TrappedModel`, each row on its own conditioned distribution);
* :func:`beam_search`: stochastic beam search over those sentences (:mod:`.without_replacement`),
  and :func:`beam_search_from`: its word steps on peaked sentences once the trapped steps
  are searched, each beam on its conditioned distribution, a beam whose L-hat is not trusted
  on exact log-space conditionals (:func:`.fused_kernels.exact_conditionals`) instead of
  the engine;
* :func:`trapped_steps`: Colbourn's draws of the trapped words of peaked sentences (phase 1 of
  :class:`.colbourn.TrappedModel`), settled states from their tables and each other distinct
  state by its own reduction (:mod:`.trapped_kernels`), and :func:`exact_conditionals`: a
  conditioned row's exact conditionals where its Sherman-Morrison updates drift;
* :func:`strong_set_masks` (:func:`strong_sets` per sentence), :func:`exit_distribution`,
  :func:`trace_columns`, :func:`settled_tables`, :func:`log_matmul`, :func:`head_rows`: the
  set-up of peaked sentences (:mod:`.trapped`):
  their strongly bound sets (the same sets), walks' exits, trace chains, settled head
  distributions and the other states' (the same sums up to rounding; one thread, the caller's).

Randomness: Colbourn's kernel draws nothing (the beam search draws its keys from a stream
seeded per sentence: see :func:`beam_search`). Its callers draw the uniforms from the
caller's torch generator, in the order and shapes the torch code draws them, and pass them
in, so a seed gives the same trees on both paths (up to floating-point rounding: a tree differs only where
a uniform falls within rounding of a category boundary, or where the two paths' top-k
break an exact tie). A sample or sentence the kernel cannot finish by its own checks
(Sherman-Morrison's conditionals off :data:`.colbourn.SUM_TOLERANCE`, no possible head, a
key that overflows) is flagged and redone by the torch code with the same uniforms.

Threads: the kernels release the GIL; a batch's sentences are split over
``torch.get_num_threads()`` Python threads (what :func:`spacy_treexp.annotate.runtime.threads_for`
sets from ``cpu_threads()``: one in a forked worker). numba's own parallel threading is not
used. Compiled on first use and cached on disk (``cache=True``).
"""

from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

import numpy as np
import torch
from torch import Tensor

from spacy_treexp.engine.sampling import work

_KERNELS: dict[str, Any] = {}
_LOCK = threading.Lock()
_POOL: tuple[int, int, ThreadPoolExecutor] | None = None  # (pid, workers, pool)


def _kernels() -> dict[str, Any]:
    """The kernels (:mod:`.fused_kernels`), imported on first use; each compiles (or loads
    from numba's cache) at its first call."""
    with _LOCK:
        if not _KERNELS:
            from spacy_treexp.engine.sampling import fused_kernels

            _KERNELS.update(
                colbourn=fused_kernels.colbourn,
                beam=fused_kernels.beam,
                strong_sets=fused_kernels.strong_sets,
                trace_columns=fused_kernels.trace_columns,
                settled_tables=fused_kernels.settled_tables,
                log_matmul=fused_kernels.log_matmul,
                head_rows=fused_kernels.head_rows,
                exit_distribution=fused_kernels.exit_distribution,
            )
    return _KERNELS


def _pool(workers: int) -> ThreadPoolExecutor:
    """A thread pool of ``workers`` threads for this process (a forked child makes its own:
    the parent's threads do not exist there)."""
    global _POOL
    with _LOCK:
        if _POOL is None or _POOL[0] != os.getpid() or _POOL[1] != workers:
            _POOL = (os.getpid(), workers, ThreadPoolExecutor(max_workers=workers))
        return _POOL[2]


def _split(costs: np.ndarray, parts: int) -> list[tuple[int, int]]:
    """Contiguous ranges of sentences with about equal total ``costs``, at most ``parts``."""
    total = float(costs.sum())
    if parts <= 1 or costs.size <= 1 or total <= 0:
        return [(0, int(costs.size))]
    bounds: list[tuple[int, int]] = []
    start, running = 0, 0.0
    for i, cost in enumerate(costs.tolist()):
        running += cost
        if running >= total * (len(bounds) + 1) / parts and i + 1 < costs.size and len(bounds) < parts - 1:
            bounds.append((start, i + 1))
            start = i + 1
    bounds.append((start, int(costs.size)))
    return bounds


def _run(kernel: Callable[..., None], lengths: np.ndarray, work_per_sentence: np.ndarray, *args) -> None:
    """``kernel(*args, first, last)`` over ranges of sentences, on the torch thread count."""
    ranges = _split(work_per_sentence, min(torch.get_num_threads(), int(lengths.size)))
    if len(ranges) == 1:
        kernel(*args, 0, int(lengths.size))
        return
    futures = [_pool(len(ranges)).submit(kernel, *args, first, last) for first, last in ranges]
    for future in futures:
        future.result()


def colbourn_draws(
    inverse: Tensor,
    weights: Tensor,
    first: Tensor,
    lengths: Tensor,
    uniforms: Tensor,
    single_root: bool,
    tolerance: float,
    which: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Colbourn's sampler, the loop of :func:`.colbourn._colbourn_chunk` fused per sample.

    inverse (B, N, N) float64 L-hat^{-1}; weights (B, N+1, N+1) float64 [b, m, h]: the
    shifted weight of arc h -> m; first (B, N+1) word 1's head marginals; lengths (B,);
    uniforms (S, B, N) float64, [s, b, m - 1] for word m. Returns heads (S, B, N+1) (-1 at
    ROOT and padding), log-probabilities (S, B) float64, and failed (S, B) bool: the draws
    whose conditionals missed ``tolerance`` or had no possible head (to redo in torch).
    ``which`` (B,): sentence b is drawn from distribution ``which[b]`` of ``inverse``,
    ``weights`` and ``first`` (which then have one entry per distribution; ``lengths`` and
    ``uniforms`` stay per sentence): the rows of :class:`.colbourn.TrappedModel`'s conditioned
    distributions, without a copy per row. By default distribution b.
    """
    samples, batch, width = uniforms.shape
    size = width + 1
    heads = np.full((samples, batch, size), -1, dtype=np.int64)
    log_prob = np.zeros((samples, batch), dtype=np.float64)
    failed = np.zeros((samples, batch), dtype=np.bool_)
    lengths_np = lengths.to(torch.int64).contiguous().numpy()
    which_np = np.arange(batch, dtype=np.int64) if which is None else which.to(torch.int64).contiguous().numpy()
    cost = samples * lengths_np.astype(np.float64) ** 3
    _run(
        _kernels()["colbourn"],
        lengths_np,
        cost,
        inverse.contiguous().numpy(),
        weights.contiguous().numpy(),
        first.contiguous().numpy(),
        which_np,
        lengths_np,
        uniforms.contiguous().numpy(),
        bool(single_root),
        float(tolerance),
        heads,
        log_prob,
        failed,
    )
    return torch.from_numpy(heads), torch.from_numpy(log_prob), torch.from_numpy(failed)


def beam_search(
    inverse: Tensor,
    weights: Tensor,
    first: Tensor,
    lengths: Tensor,
    seeds: Tensor,
    k: int,
    single_root: bool,
    tolerance: float,
) -> tuple[Tensor, Tensor]:
    """Stochastic beam search, the loop of :func:`.without_replacement._beam_search` fused per
    sentence (its k beams' inverses stay in cache).

    inverse, weights, first, lengths as :func:`colbourn_draws`; the randomness comes from a
    SplitMix64 stream seeded with ``seeds[b]`` (B,) at the start of sentence b (a search
    draws its keys as it needs them: drawing them from torch would cost more than the
    search). The children of a beam are its heads with truncated Gumbels (Kool et al. 2019;
    the keys of :func:`.without_replacement._child_gumbels`): in exponential keys, a beam's
    children arrive as one Poisson process of rate (mass of the children not arrived yet) /
    e^(T - l), a child drawn by its conditional at each arrival; its Gumbel is
    T - log1p(time since the first arrival), so each beam yields its children in decreasing
    Gumbel, the first with the beam's own T. A word's k best children of all beams are a
    k-way merge of these races (a max-heap of the beams by their next child's Gumbel): k
    arrivals and k keys per word, conditionals only for the beams that have a child, and
    nothing to discard. The exact law of the top k, not an approximation (memorylessness:
    the wait for the next new child is Exp(1) / its rate). Returns heads (k, B, N+1) in
    draw order (-1 rows past a sentence's trees) and failed (B,): the sentences to search
    again in torch (Sherman-Morrison drift, no possible head, keys out of range).
    """
    batch = inverse.shape[0]
    which = torch.full((batch, k), -1, dtype=torch.long)
    which[:, 0] = torch.arange(batch)
    gumbel = torch.zeros((batch, k), dtype=torch.float64)  # the empty prefix: Gumbel 0 ...
    log_rho = torch.zeros((batch, k), dtype=torch.float64)  # ... and T - l = 0
    return _beam(inverse, weights, first, None, None, which, gumbel, log_rho, lengths, seeds, k, single_root, tolerance)


def beam_search_from(
    inverse: Tensor,
    weights: Tensor,
    first: Tensor,
    scores: Tensor,
    exact: Tensor,
    which: Tensor,
    gumbel: Tensor,
    log_rho: Tensor,
    lengths: Tensor,
    seeds: Tensor,
    k: int,
    tolerance: float,
) -> tuple[Tensor, Tensor]:
    """:func:`beam_search` continued from beams already searched (phase 2 of
    :class:`.colbourn.TrappedModel`: the words of peaked sentences, given each beam's root
    child and trapped words), over multi-root distributions: beam i of sentence b searches
    distribution ``which[b, i]`` (-1: no beam; the beams packed first by decreasing Gumbel
    ``gumbel[b, i]``, with T - l ``log_rho[b, i]``) of ``inverse``, ``weights``, ``first``
    (as :class:`.colbourn.Prepared`) and float64 log-weights ``scores`` (D, N+1, N+1).
    A beam on a distribution flagged ``exact`` (D,) (L-hat not trusted), or whose
    Sherman-Morrison conditionals miss ``tolerance``, takes its conditionals from the exact log-space
    reduction :func:`.fused_kernels.exact_conditionals` for the rest of its tree (O(n^3) per
    word, no engine call). Returns heads (k, B, N+1) in draw order and failed (B,)."""
    return _beam(inverse, weights, first, scores, exact, which, gumbel, log_rho, lengths, seeds, k, False, tolerance)


def _beam(inverse, weights, first, scores, exact, which, gumbel, log_rho, lengths, seeds, k, single_root, tolerance):
    """The beam kernel's call (:func:`beam_search`, :func:`beam_search_from`); ``scores`` None:
    no exact conditionals (a drifted beam fails its sentence)."""
    batch, size = lengths.shape[0], inverse.shape[-1] + 1
    heads = np.full((k, batch, size), -1, dtype=np.int64)
    failed = np.zeros(batch, dtype=np.bool_)
    lengths_np = lengths.to(torch.int64).contiguous().numpy()
    cost = k * lengths_np.astype(np.float64) ** 3
    can_exact = scores is not None
    _run(
        _kernels()["beam"],
        lengths_np,
        cost,
        inverse.contiguous().numpy(),
        weights.contiguous().numpy(),
        first.contiguous().numpy(),
        scores.contiguous().numpy() if scores is not None else np.zeros((1, 1, 1)),
        exact.contiguous().numpy() if exact is not None else np.zeros(1, dtype=np.bool_),
        which.to(torch.int64).contiguous().numpy(),
        gumbel.to(torch.float64).contiguous().numpy(),
        log_rho.to(torch.float64).contiguous().numpy(),
        lengths_np,
        seeds.to(torch.int64).contiguous().numpy(),
        int(k),
        bool(single_root),
        can_exact,
        float(tolerance),
        heads,
        failed,
    )
    return torch.from_numpy(heads), torch.from_numpy(failed)


def strong_sets(scores: np.ndarray, with_root: bool, bound: float) -> list[np.ndarray]:
    """:func:`.trapped._strong_sets` (the reference) by the kernel: the same sets, in the same
    order, for one sentence's float64 log-weights ``scores`` (n+1, n+1)."""
    found = np.zeros((scores.shape[0], scores.shape[0]), dtype=np.bool_)
    count = _kernels()["strong_sets"](np.ascontiguousarray(scores), bool(with_root), float(bound), found)
    return [found[i].copy() for i in range(count)]


def strong_set_masks(values: Tensor, lengths: Tensor, with_root: bool, bound: float) -> Tensor:
    """:meth:`.trapped.StrongSets.of`'s masks (B, M, N+1) bool for a whole batch of float64 CPU
    log-weights ``values`` (B, N+1, N+1) in one kernel call: :func:`strong_sets` of each
    sentence, the same sets in the same order."""
    from spacy_treexp.engine.sampling import trapped_kernels

    batch, size = values.shape[0], values.shape[-1]
    found = np.zeros((batch, size, size), dtype=np.bool_)
    counts = np.zeros(batch, dtype=np.int64)
    trapped_kernels.strong_sets_batch(
        values.contiguous().numpy(), lengths.contiguous().numpy(), bool(with_root), float(bound), found, counts
    )
    most = max(1, int(counts.max())) if batch else 1
    return torch.from_numpy(found[:, :most].copy())


def trace_columns(scores: Tensor, order: Tensor, exits: Tensor, trace: Tensor) -> None:
    """The trace chain's columns 1..P of :meth:`.trapped.Groups.of` into ``trace`` (G, P+1, P+1)
    float64 (CPU, contiguous), in place: trace[g, s, t+1] = logsumexp_h(scores[g, h,
    order[g, t]] + exits[g, h, s])."""
    _kernels()["trace_columns"](
        scores.contiguous().numpy(), order.contiguous().numpy(), exits.contiguous().numpy(), trace.numpy()
    )


def settled_tables(
    scores: Tensor, order: Tensor, count: Tensor, exits: Tensor, trace: Tensor
) -> tuple[Tensor, list[Tensor]]:
    """:func:`.trapped._settled_conditionals` (the reference) by the kernel, the same results up
    to rounding: (G, P, N+1) and the first meetings ``meets[j-1]`` (G, P+1, j+1) for each j."""
    groups, size, nodes = exits.shape
    sizes = [groups * nodes * (j + 1) for j in range(1, nodes)]
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    flat = np.empty(int(offsets[-1]), dtype=np.float64)
    out = np.zeros((groups, nodes - 1, size), dtype=np.float64)
    _kernels()["settled_tables"](
        scores.contiguous().numpy(),
        order.contiguous().numpy(),
        count.contiguous().numpy(),
        exits.contiguous().numpy(),
        trace.contiguous().numpy(),
        out,
        flat,
        offsets,
    )
    flat_tensor = torch.from_numpy(flat)
    blocks = [flat_tensor[int(offsets[j - 1]) : int(offsets[j])].view(groups, nodes, j + 1) for j in range(1, nodes)]
    return torch.from_numpy(out), blocks


def log_matmul(a: Tensor, b: Tensor) -> Tensor:
    """(U, I, K) log sum_x exp(a[u, i, x] + b[u, x, k]) of float64 CPU ``a`` (U, I, X) and
    ``b`` (U, X, K): torch.logsumexp((a.unsqueeze(-1) + b.unsqueeze(1)), 2) without the
    (U, I, X, K) sum, and without the exps that are 0 in float64."""
    out = np.empty((a.shape[0], a.shape[1], b.shape[2]), dtype=np.float64)
    _kernels()["log_matmul"](a.contiguous().numpy(), b.contiguous().numpy(), out)
    return torch.from_numpy(out)


def head_rows(scores: Tensor, group: Tensor, word: Tensor, exits: Tensor, into: Tensor, reach: Tensor) -> Tensor:
    """:func:`.trapped._head_distribution` of rows of groups ``group`` (U,), reading the
    groups' ``scores`` (G, N+1, N+1) in place: (U, N+1) float64."""
    out = np.empty((group.shape[0], scores.shape[-1]), dtype=np.float64)
    _kernels()["head_rows"](
        scores.contiguous().numpy(),
        group.contiguous().numpy(),
        word.contiguous().numpy(),
        exits.contiguous().numpy(),
        into.contiguous().numpy(),
        reach.contiguous().numpy(),
        out,
    )
    return torch.from_numpy(out)


def exit_distribution(scores: Tensor, free: Tensor, targets: Tensor, compact: Tensor, most: int) -> Tensor:
    """:func:`.trapped._exit_distribution` (the reference) by the kernel: (G, N+1, P+1) log,
    the same up to rounding."""
    hits = np.zeros((scores.shape[0], scores.shape[-1], most + 1), dtype=np.float64)
    _kernels()["exit_distribution"](
        scores.contiguous().numpy(),
        free.contiguous().numpy(),
        targets.contiguous().numpy(),
        compact.clamp_min(0).contiguous().numpy(),
        hits,
    )
    return torch.from_numpy(hits).log()


def trapped_steps(
    groups: Any,
    reach: tuple[Tensor, Tensor],
    leak: float,
    group: Tensor,
    uniforms: Tensor,
    fixed: Tensor,
    reaches: Tensor,
    horizon: Tensor,
    log_prob: Tensor,
    state: Tensor,
) -> Tensor:
    """The trapped-word steps of :class:`.colbourn.TrappedModel` by the kernel
    (:func:`.trapped_kernels.trapped_walk`), for rows of groups ``group`` (R,) (-1: none), step
    after step: a settled state reads the groups' ``settled`` tables (G, P, N+1), each other
    distinct state its own reduction (:func:`.trapped.unsettled_conditionals`, from
    ``groups``: :class:`.trapped.Groups`; ``leak``: its leak), with
    :meth:`.colbourn.TrappedSetup.reach` ``reach`` (see :func:`group_tables`), and each row's
    uniform per step ``uniforms`` (R, T >= its steps): the heads drawn into ``fixed`` (R, N),
    ``reaches`` (R, N), ``horizon`` (R,), their log-probabilities added to ``log_prob`` (R,)
    float64 and the rows' states numbered into ``state`` (R,) (each row's group on entry) as the
    torch steps number them, in place (contiguous CPU tensors). Returns (R,) the step at which
    a row found no possible head (for the torch steps, which name it), 0 where done."""
    from spacy_treexp.engine.sampling import trapped_kernels

    start = np.zeros(group.shape[0], dtype=np.int64)
    nodes = trapped_kernels.trapped_walk(
        group_tables(groups, reach, leak),
        group.contiguous().numpy(),
        uniforms.contiguous().numpy(),
        fixed.numpy(),
        reaches.numpy(),
        horizon.numpy(),
        log_prob.numpy(),
        start,
        state.numpy(),
    )
    work.add("trapped_nodes", int(nodes))
    return torch.from_numpy(start)


def group_tables(groups: Any, reach: tuple[Tensor, Tensor], leak: float) -> tuple[Any, ...]:
    """What the trapped-word kernels (:func:`.trapped_kernels.trapped_walk`,
    :func:`.trapped_kernels.trapped_beams`) read of the groups (:class:`.trapped.Groups`), as their
    first argument (``tables``, unpacked there in this order): ``settled``, ``count``, ``reach``
    (last, second), ``exits``, ``trace``, ``scores``, ``order``, the flat ``meets`` and their
    offsets, and log ``leak``."""
    last, second = reach
    meets, offsets = _flat_blocks(groups.meets)
    return (
        groups.settled.contiguous().numpy(),
        groups.count.contiguous().numpy(),
        last.contiguous().numpy(),
        second.contiguous().numpy(),
        groups.exits.contiguous().numpy(),
        groups.trace.contiguous().numpy(),
        groups.scores.contiguous().numpy(),
        groups.order.contiguous().numpy(),
        meets,
        offsets,
        math.log(leak),
    )


def _flat_blocks(blocks: list[Tensor]) -> tuple[np.ndarray, np.ndarray]:
    """float64 CPU ``blocks`` as one flat array and each block's start in it: the storage they
    are contiguous views of, as :func:`settled_tables` makes them (no copy), else a copy."""
    if not blocks:
        return np.zeros(0), np.zeros(1, dtype=np.int64)
    storage = blocks[0].untyped_storage()
    if all(block.is_contiguous() and block.untyped_storage().data_ptr() == storage.data_ptr() for block in blocks):
        flat = torch.empty(0, dtype=torch.float64).set_(storage).numpy()
        base = storage.data_ptr()
        starts = [(block.data_ptr() - base) // block.element_size() for block in blocks]
        return flat, np.asarray(starts, dtype=np.int64)
    sizes = [block.numel() for block in blocks]
    flat = torch.cat([block.reshape(-1) for block in blocks]).numpy()
    return flat, np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)


def exact_conditionals(scores: Tensor, sentence: Tensor, end: Tensor, m: int, lengths: Tensor) -> Tensor:
    """Word m's exact head distribution (R, N+1) float64 for rows of sentences ``sentence``
    (R,) of the multi-root float64 log-weights ``scores`` (B, N+1, N+1) (-inf: no arc), given the
    heads fixed so far as :class:`.colbourn.Conditioner` keeps them (``end`` (R, N+1): where each
    word's chain of fixed heads ends, N+1 at ROOT) (:func:`.trapped_kernels.exact_rows`; zeros
    where no head is possible)."""
    from spacy_treexp.engine.sampling import trapped_kernels

    probs = np.zeros((sentence.shape[0], scores.shape[-1]), dtype=np.float64)
    trapped_kernels.exact_rows(
        scores.contiguous().numpy(),
        sentence.contiguous().numpy(),
        end.contiguous().numpy(),
        int(m),
        lengths.contiguous().numpy(),
        probs,
    )
    return torch.from_numpy(probs)
