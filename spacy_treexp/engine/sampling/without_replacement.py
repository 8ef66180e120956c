"""Sampling dependency trees without replacement over Colbourn's autoregressive form.

Colbourn's sampler (see :mod:`.colbourn`) writes p(tree) = prod_m p(head_m | head_<m), so
sequence-model techniques for sampling without replacement apply (Stanojević 2022):

* ``sbs``: stochastic beam search (Kool, van Hoof & Welling 2019): Gumbel-perturbed
  log-probabilities of prefixes, each child's Gumbel conditioned on its parent's
  (a truncated Gumbel, computed in exponential keys: see :func:`_child_gumbels`), top-k
  per word.
  The k trees are distributed as k draws without replacement, in draw order (the first is
  a sample of p). All beams advance together: O(k n^3).
* ``trie``: incremental sampling without replacement (Shi, Bieber & Sutton 2020,
  "UniqueRandomizer"): ancestral draws renormalised by the probability mass already drawn
  below every prefix, kept in a trie of the drawn prefixes. Ours draws in rounds of several
  i.i.d. candidates and keeps each new tree's first occurrence (exact: see
  :func:`trie_draws`), so that a round's candidates advance together. A trie lookup per
  word, never a pass over earlier draws: O(n^3) per tree amortised (the first round's
  candidates, then at most two per tree found), and it can stop at any time.

Unlike the paper's trie, which subtracts each drawn tree's mass from its prefixes, ours keeps
the *remaining* mass of each prefix as a sum of positive terms (never "total minus drawn"),
so an exhausted subtree has exactly zero mass and a drawn tree can never come back through
rounding, however peaked the distribution.
"""

from __future__ import annotations

import copy
import itertools
from typing import Iterator

import torch
from torch import Tensor

from spacy_treexp.engine.native import native_enabled
from spacy_treexp.engine.sampling import fused, work
from spacy_treexp.engine.sampling.colbourn import (
    CHUNK_ENTRIES,
    CONDITIONED_ERROR,
    SETTLED_LEAK,
    SUM_TOLERANCE,
    Conditioner,
    Prepared,
    TrappedModel,
    TrappedSetup,
    draw_positive,
)
from spacy_treexp.engine.sampling.streams import Randomness, per_sentence, per_sentence_uniforms


def _child_gumbels(
    parent: Tensor, parent_log_p: Tensor, probs: Tensor, uniforms: Tensor, out: Tensor | None = None
) -> Tensor:
    """Gumbels of all children (beam, head), conditioned on their maximum being the beam's.

    parent (B, k) truncated Gumbels T of the beams (-inf: dead), parent_log_p (B, k) their
    log P(prefix) = l, probs (B, k, C) the heads' conditionals q (>= +0, never NaN), uniforms
    (B, k, C) (or broadcastable to it) one U[0, 1) draw per child. A child's Gumbel is
    G_i = l + log q_i - log E_i with E_i ~ Exp(1); conditioned on max_i G_i = T it is
    G~_i = -log(e^-T - e^-Z + e^-G_i), Z = max_i G_i (Kool, van Hoof & Welling 2019, eq. 23).
    In exponential keys K = e^-G (the exponential race: K_i = E_i / (P q_i)) that is
    e^-G~_i = e^-T (1 + r_i - min_j r_j) with r_i = K_i e^T = E_i e^(T - l) / q_i, so
    G~_i = T - log1p(r_i - min_j r_j): one uniform and two logarithms per child, and no
    difference of nearly equal logarithms. e^(T - l) <= e^(G - l), the parent's own Gumbel
    noise, so it cannot overflow. The largest child gets exactly T; an impossible child
    (q = 0) and every child of a dead beam get -inf. An r_i that overflows (q_i below
    ~1e-290) also gives -inf here, where its exact value is below T - 709: see
    :func:`_restore_overflowed`. ``out`` (like ``probs``): where to compute (a buffer reused
    word after word stays in cache); a new tensor if None.
    """
    alive = parent > -torch.inf
    # e^(T - l) per beam; 1 for a dead beam, whose children are -inf through T anyway
    rho = torch.where(alive, parent - parent_log_p, 0.0).exp_().unsqueeze(-1)
    # r_i = E_i e^(T - l) / q_i with E_i = -log U_i; +inf for an impossible child (q = +0)
    ratio = torch.log(uniforms.expand_as(probs), out=torch.empty_like(probs) if out is None else out)
    ratio.mul_(rho.neg()).div_(probs)
    if bool((rho == 0).any()):  # e^(T - l) underflowed: an impossible child is 0/0 there
        ratio.nan_to_num_(nan=torch.inf, posinf=torch.inf)
    smallest = ratio.amin(-1, keepdim=True).nan_to_num_(posinf=0.0)  # no child: all -inf below
    shifted = ratio.sub_(smallest).log1p_()  # >= 0
    return torch.sub(parent.unsqueeze(-1), shifted, out=shifted)


#: A child whose key r overflows has G~ = T - log1p(r - min r) < T - 709.78 (log of the
#: largest float64); below its parent's Gumbel by more than this, it cannot be ranked.
OVERFLOW_GAP = 709.0


def _restore_overflowed(
    children: Tensor, parent: Tensor, parent_log_p: Tensor, probs: Tensor, uniforms: Tensor
) -> bool:
    """Give the children whose keys overflowed in :func:`_child_gumbels` (-inf there, though
    possible) their exact Gumbel, in place: G~ = T - log(E e^(T - l) / q), the limit of
    T - log1p(r - min r) for r beyond the float64 range (min r is at most ~1e3 e^(T - l):
    some conditional is >= 1/C). ``uniforms`` (B, beams, C): the children of the first
    ``beams`` beams were drawn. Returns whether any child changed."""
    beams = uniforms.shape[1]
    drawn = children[:, :beams]
    possible = (probs[:, :beams] > 0).logical_and_((parent[:, :beams] > -torch.inf).unsqueeze(-1))
    overflow = (drawn == -torch.inf).logical_and_(possible)
    if not bool(overflow.any()):
        return False
    T, log_rho = parent[:, :beams].unsqueeze(-1), (parent - parent_log_p)[:, :beams].unsqueeze(-1)
    exact = T - ((-torch.log(uniforms)).log() + log_rho - probs[:, :beams].log())
    drawn.copy_(torch.where(overflow, exact, drawn))
    return True


def stochastic_beam_search(dist, k: int, generator: Randomness = None) -> tuple[Tensor, Tensor]:
    """k trees per sentence without replacement by stochastic beam search.

    Returns heads (k, B, N+1) in draw order and ``dist.log_prob`` of each (k, B); where a
    sentence has fewer than k trees the extra rows are -1 heads with -inf log-probability.
    Sentences are searched in chunks of at most :data:`.colbourn.CHUNK_ENTRIES` inverse
    entries, k N^2 per sentence (one sentence is never split: its beams compete with each
    other; a per-sentence generator keeps each sentence's draws whatever the chunks). The
    sentences whose L-hat is ill-conditioned are searched over :class:`.colbourn.TrappedModel`'s
    steps (root child, trapped words, then the words: :func:`_trapped_search`), apart from the
    others.
    """
    batch, size = dist.scores.shape[0], dist.scores.shape[-1]
    prepared = Prepared.of(dist)
    trapped = prepared.trapped()
    per_chunk = max(1, CHUNK_ENTRIES // (k * (size - 1) ** 2))
    if batch <= per_chunk and not bool(trapped.any()):
        heads = _search(dist, k, prepared, generator)
        return heads, dist.log_prob(heads)
    heads = torch.full((k, batch, size), -1, dtype=torch.long, device=dist.scores.device)
    for hard in (False, True):
        index = (trapped == hard).nonzero().squeeze(-1)
        step = max(1, per_chunk // 2) if hard else per_chunk
        for start in range(0, index.numel(), step):
            chunk = index[start : start + step]
            streams = [generator[i] for i in chunk.tolist()] if per_sentence(generator) else generator
            if hard:
                heads[:, chunk] = _trapped_search(dist, chunk, k, streams)
            elif chunk.numel() == batch:
                heads[:, chunk] = _search(dist, k, prepared, streams)
            else:
                scores = dist.scores.detach()[chunk]
                part = type(dist)(scores, dist.lengths[chunk], single_root=dist.single_root, stable=dist.stable)
                heads[:, chunk] = _search(part, k, prepared.select(chunk), streams)
    return heads, dist.log_prob(heads)  # -inf for the -1 rows (not trees)


def _search(dist, k: int, prepared: Prepared, generator: Randomness) -> Tensor:
    """SBS over sentences whose L-hat is well conditioned: heads (k, B, N+1). By the fused
    CPU kernel (:func:`.fused.beam_search`: a word's top k children by a k-way merge of the
    beams' exponential races) where :func:`.native.native_enabled` says so: its uniforms
    come from the kernel's SplitMix64 stream, seeded per sentence by one draw from the
    caller's generator (or from sentence b's own generator), so a seed gives the same trees
    on every run and thread count, but not the torch search's trees (nor the trees of the
    kernel before the merge of races, which drew a key per child). The sentences the kernel flags are
    searched again by :func:`_beam_search`, each from a generator seeded with its seed."""
    if not native_enabled(prepared.inverse):
        return _beam_search(_conditioner(dist, k, prepared), dist.lengths, k, generator)
    batch = dist.scores.shape[0]
    if per_sentence(generator):
        seeds = torch.cat([torch.randint(2**32, (1,), generator=stream) for stream in generator])
    else:
        seeds = torch.randint(2**32, (batch,), generator=generator)
    heads, failed = fused.beam_search(
        prepared.inverse,
        prepared.by_sentence(),
        prepared.first,
        dist.lengths,
        seeds,
        k,
        dist.single_root,
        SUM_TOLERANCE,
    )
    if bool(failed.any()):
        index = failed.nonzero().squeeze(-1)
        scores = dist.scores.detach()[index]
        part = type(dist)(scores, dist.lengths[index], single_root=dist.single_root, stable=dist.stable)
        state = _conditioner(part, k, prepared.select(index))
        streams = [torch.Generator().manual_seed(int(seeds[i])) for i in index.tolist()]
        heads[:, index] = _beam_search(state, part.lengths, k, streams)
    return heads


def _trapped_search(dist, index: Tensor, k: int, generator: Randomness) -> Tensor:
    """SBS over the sentences ``index`` of ``dist`` whose L-hat is ill-conditioned: heads (k, B',
    N+1), over :class:`.colbourn.TrappedModel`'s steps (root child, trapped words, words).
    Where :func:`.native.native_enabled` says so, the trapped words run in one kernel
    (:func:`_trapped_beams`), single-root sentences root child by root child
    (:func:`_trapped_rounds`: only the root children whose subtree can hold one of the k best
    are set up), and the word steps (phase 2) in the fused
    kernel (:func:`.fused.beam_search_from`): each beam continues on its own conditioned
    distribution, and a beam whose L-hat is not trusted or whose Sherman-Morrison
    conditionals drift takes exact log-space conditionals instead of the engine's
    refactorisations. Its keys come from a stream seeded per sentence by one draw from the
    caller's generator after the trapped steps (as :func:`_search`); the sentences the kernel
    flags are searched again whole by the torch steps from a generator seeded with their seed."""
    lengths = dist.lengths[index]
    batch = index.numel()
    rows = torch.arange(batch, device=index.device).repeat_interleave(k)
    state = TrappedModel(TrappedSetup(dist, index), rows)
    if not native_enabled(dist.scores):
        return _beam_search(state, lengths, k, generator)
    if dist.single_root:  # the root child, then the trapped words, subtree by subtree
        (scores, inverse, weights, first, error, which), gumbel, log_p = _trapped_rounds(
            state.setup, lengths, k, generator
        )
    else:  # the trapped words
        start = torch.full((batch, k), -torch.inf, dtype=torch.float64)
        start[:, 0] = 0.0  # the empty prefix (Gumbel 0: a shift, not a bias) in row 0
        gumbel, log_p = _trapped_beams(state, k, generator, start, start)
        scores, inverse, weights, first, error, which = _conditioned(state)
    exact = ~(error <= CONDITIONED_ERROR) | torch.isnan(first).any(-1)
    gumbel, order = gumbel.sort(dim=-1, descending=True, stable=True)
    alive = gumbel > -torch.inf
    log_p = log_p.gather(1, order)
    log_rho = torch.where(alive, gumbel - torch.where(alive, log_p, 0.0), 0.0)
    beams = torch.where(alive, which.view(batch, k).gather(1, order), -1)
    if per_sentence(generator):
        seeds = torch.cat([torch.randint(2**32, (1,), generator=stream) for stream in generator])
    else:
        seeds = torch.randint(2**32, (batch,), generator=generator)
    heads, failed = fused.beam_search_from(
        inverse,
        weights,
        first.nan_to_num(0.0),
        scores,
        exact,
        beams,
        gumbel,
        log_rho,
        lengths,
        seeds,
        k,
        SUM_TOLERANCE,
    )
    if bool(failed.any()):
        again = failed.nonzero().squeeze(-1)
        streams = [torch.Generator().manual_seed(int(seeds[i])) for i in again.tolist()]
        rows = torch.arange(again.numel(), device=index.device).repeat_interleave(k)
        state = TrappedModel(TrappedSetup(dist, index[again]), rows)
        heads[:, again] = _beam_search(state, lengths[again], k, streams)
    return heads


def _conditioned(state: TrappedModel) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """:meth:`.colbourn.TrappedModel.conditioned` (``engine=False``) as the fused word steps
    read it: the conditioned distributions' log-weights, L-hat^{-1}, weights by sentence, word-1
    marginals and LU error (D, ...), and each row's distribution (R,)."""
    dist, prepared, which = state.conditioned(engine=False)
    return dist.scores.detach(), prepared.inverse, prepared.by_sentence(), prepared.first, prepared.error, which


def _rows_of(state: TrappedModel, rows: Tensor) -> TrappedModel:
    """The rows ``rows`` of ``state`` after the trapped words, as a state of their own (the
    same setup; rows with the same group and heads share a state number)."""
    part = TrappedModel(state.setup, state.sentence[rows])
    for name in ("root_child", "group", "fixed", "reaches", "horizon"):
        setattr(part, name, getattr(state, name).index_select(0, rows))
    part.state = torch.unique(torch.cat([part.group.unsqueeze(-1), part.fixed], 1), dim=0, return_inverse=True)[1]
    return part


def _own_groups(setup: TrappedSetup) -> TrappedSetup:
    """A shallow copy of ``setup`` with no groups yet (its own, set up as met), sharing the
    sentences' scores, sets, root marginals and word depths: a second round's groups then
    need no copy of the first's (Groups.cat copies every table)."""
    fresh = copy.copy(setup)
    fresh.index = torch.full_like(setup.index, -1)
    fresh.groups = None
    fresh.group_sentence = setup.group_sentence[:0]
    fresh._reach = None
    return fresh


def _trapped_beams(
    state: TrappedModel, k: int, generator: Randomness, gumbel: Tensor, log_p: Tensor, floor: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """The trapped-word steps (1..N) of stochastic beam search over ``state`` (sentence b in rows
    b * k ..) by the kernel (:func:`.trapped_kernels.trapped_beams`), from the beams' Gumbels
    and log-probabilities ``gumbel``, ``log_p`` (B, k) by row (-inf: none; each live row in its
    own state, set by step 0); ``state`` is updated in place (its ``state`` numbering too).
    Its uniforms come from a stream seeded per sentence by one draw from the caller's
    generator (or sentence b's own). ``floor`` (B,): prefixes whose Gumbel is not above it are
    dropped (the caller holds k better ones); None: none. Returns the new beams' Gumbels and
    log-probabilities (B, k), sorted, by row."""
    from spacy_treexp.engine.sampling import trapped_kernels

    batch = gumbel.shape[0]
    if per_sentence(generator):
        seeds = torch.cat([torch.randint(2**32, (1,), generator=stream) for stream in generator])
    else:
        seeds = torch.randint(2**32, (batch,), generator=generator)
    setup = state.setup
    groups = setup.groups
    gumbel, log_p = gumbel.double().contiguous().clone(), log_p.double().contiguous().clone()
    if groups is not None:
        nodes = trapped_kernels.trapped_beams(
            fused.group_tables(groups, setup.reach(), SETTLED_LEAK),
            state.group.numpy(),
            state.fixed.numpy(),
            state.reaches.numpy(),
            state.horizon.numpy(),
            gumbel.numpy(),
            log_p.numpy(),
            seeds.to(torch.int64).numpy(),
            (torch.full((batch,), -torch.inf, dtype=torch.float64) if floor is None else floor.double())
            .contiguous()
            .numpy(),
        )
        work.add("trapped_nodes", int(nodes))
        if setup.single_root:  # a beam's root child is its group's
            state.root_child = torch.where(state.group >= 0, groups.root_child[state.group.clamp_min(0)], 0)
    state.state = torch.unique(torch.cat([state.group.unsqueeze(-1), state.fixed], 1), dim=0, return_inverse=True)[1]
    return gumbel, log_p


def _root_beams(setup: TrappedSetup, lengths: Tensor, k: int, generator: Randomness) -> tuple[Tensor, Tensor, Tensor]:
    """Step 0 of :class:`.colbourn.TrappedModel` (the root child) as :func:`_beam_steps` takes
    it, with the same uniforms: the k best root children of each sentence (B, k), sorted, their
    Gumbels and log-probabilities (-inf: no beam)."""
    assert setup.root is not None  # single-root
    probs = setup.root.unsqueeze(1)  # (B, 1, N+1)
    batch, size = probs.shape[0], probs.shape[-1]
    if per_sentence(generator):
        sizes = [(1, n + 1) for n in lengths.tolist()]
        uniforms = per_sentence_uniforms(generator, sizes, (1, size), probs)
    else:
        uniforms = torch.rand((batch, 1, size), dtype=probs.dtype, device=probs.device, generator=generator)
    parent = torch.zeros((batch, 1), dtype=torch.float64, device=probs.device)
    children = torch.full((batch, k, size), -torch.inf, dtype=torch.float64, device=probs.device)
    children[:, :1] = _child_gumbels(parent, parent, probs, uniforms)
    best, index = children.view(batch, k * size).topk(k, dim=-1)
    if not bool((best[:, -1] > -OVERFLOW_GAP).all()) and _restore_overflowed(children, parent, parent, probs, uniforms):
        best, index = children.view(batch, k * size).topk(k, dim=-1)
    root = index.remainder(size)
    log_p = torch.where(best > -torch.inf, probs.squeeze(1).gather(1, root).log(), -torch.inf)
    return best, log_p, root


def _trapped_rounds(
    setup: TrappedSetup, lengths: Tensor, k: int, generator: Randomness
) -> tuple[tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor], Tensor, Tensor]:
    """Steps 0..N of :class:`.colbourn.TrappedModel` (the root child, the trapped words) for
    single-root sentences, without setting up the (sentence, root child) groups that cannot
    reach the k best prefixes: returns :func:`_conditioned` of the k best prefixes after step N
    (sentence b in rows b * k ..), their Gumbels and log-probabilities (B, k), sorted.

    The search is split by root child, exactly: a beam's Gumbel T is the largest Gumbel of its
    subtree's prefixes (its best child keeps T, Kool et al. 2019), so the k best prefixes of
    a depth are the k best of the union of each root child's k best, and a root child whose T
    is below the k-th best prefix already found has none among them. Round 1 searches each
    sentence's best root child; each later round the next root children (1, 2, 4, ... of
    them) whose T is above the k-th best prefix of the rounds before, dropping every prefix
    below it (on peaked scores most sentences stop after a round or two: a group's set-up
    costs O(n^3), and k of them were set up before), and merges its k best."""
    device = lengths.device
    top, root_log_p, root = _root_beams(setup, lengths, k, generator)

    def searched(
        setup: TrappedSetup,
        index: Tensor,
        gumbel: Tensor,
        log_p: Tensor,
        child: Tensor,
        streams: Randomness,
        on: Tensor,
        floor: Tensor | None,
    ):
        state = TrappedModel(setup, index.repeat_interleave(k))
        state.fix(0, child.reshape(-1), on.reshape(-1))
        found = _trapped_beams(state, k, streams, gumbel, log_p, floor)
        return state, *found

    # round r searches the root children lo..hi-1 (1, 1, 2, 4, ... of them: few rounds where
    # many are needed) whose T is above the k-th best prefix of the rounds before, one beam
    # each in rows 0..; the k best kept in ``pool``
    none = torch.full_like(top, -torch.inf)
    slots = torch.arange(k, device=device)
    models: list[TrappedModel] = []
    pool_gumbel, pool_log_p = none.clone(), none.clone()
    pool_model = torch.zeros_like(root)
    pool_row = torch.zeros_like(root)
    lo, hi = 0, 1
    while lo < k:
        floor = pool_gumbel.amin(-1)
        need = (top[:, lo] > floor).nonzero().squeeze(-1)
        if need.numel() == 0:
            break  # (T is sorted: no later root child can enter either)
        width = hi - lo
        above = (top[need, lo:hi] > floor[need].unsqueeze(-1)).logical_and_(top[need, lo:hi] > -torch.inf)
        on = torch.nn.functional.pad(above, (0, k - width))
        streams = [generator[b] for b in need.tolist()] if per_sentence(generator) else generator
        model, gumbel, log_p = searched(
            _own_groups(setup) if lo else setup,
            need,
            torch.where(on, torch.nn.functional.pad(top[need, lo:hi], (0, k - width)), -torch.inf),
            torch.where(on, torch.nn.functional.pad(root_log_p[need, lo:hi], (0, k - width)), -torch.inf),
            torch.nn.functional.pad(root[need, lo:hi], (0, k - width)),
            streams,
            on,
            floor[need] if lo else None,  # k prefixes of the rounds before are above it
        )
        round_number = len(models)
        models.append(model)
        own = torch.arange(need.numel(), device=device).unsqueeze(-1) * k + slots
        candidates = torch.cat([pool_gumbel[need], gumbel], 1)
        best, order = candidates.topk(k, dim=-1)
        pool_gumbel[need] = best
        pool_log_p[need] = torch.cat([pool_log_p[need], log_p], 1).gather(1, order)
        pool_model[need] = torch.cat([pool_model[need], torch.full_like(own, round_number)], 1).gather(1, order)
        pool_row[need] = torch.cat([pool_row[need], own], 1).gather(1, order)
        lo, hi = hi, min(k, 2 * hi)
    # the conditioned distributions of each round's chosen rows, side by side
    source, row = pool_model.view(-1), pool_row.view(-1)
    which = torch.empty_like(source)
    parts = []
    offset = 0
    for i, model in enumerate(models):
        mine = source == i
        if not bool(mine.any()):
            continue
        part = _conditioned(_rows_of(model, row[mine]))
        which[mine] = part[5] + offset
        offset += part[0].shape[0]
        parts.append(part[:5])
    scores, inverse, weights, first_marginals, error = (torch.cat(tensors) for tensors in zip(*parts))
    return (scores, inverse, weights, first_marginals, error, which), pool_gumbel, pool_log_p


def _search_uniforms(lengths: Tensor, k: int, size: int, generator: Randomness) -> Tensor:
    """(B, N, k, N+1) the uniforms :func:`_beam_search` draws at words 1..N, in its order: one
    (B, beams, N+1) draw per word from a shared generator (beams = 1 at word 1, then k), or
    per sentence (:func:`.streams.per_sentence_uniforms`) a (beams, n_b + 1) draw at each of
    its words. Unused entries are 1/2 (never read)."""
    batch = lengths.shape[0]
    out = torch.full((batch, size - 1, k, size), 0.5, dtype=torch.float64)
    if per_sentence(generator):
        for b, (stream, n) in enumerate(zip(generator, lengths.tolist())):
            for m in range(1, n + 1):
                beams = 1 if m == 1 else k
                out[b, m - 1, :beams, : n + 1] = torch.rand((beams, n + 1), dtype=torch.float64, generator=stream)
        return out
    for m in range(1, size):
        beams = 1 if m == 1 else k
        out[:, m - 1, :beams] = torch.rand((batch, beams, size), dtype=torch.float64, generator=generator)
    return out


def _conditioner(dist, k: int, prepared: Prepared) -> Conditioner:
    """Colbourn's state for k beams per sentence, sentence b in rows b * k .. b * k + k - 1."""
    rows = torch.arange(dist.scores.shape[0], device=dist.scores.device).repeat_interleave(k)
    return Conditioner(dist, rows, prepared, "by_sentence")


def _beam_search(
    state: Conditioner | TrappedModel, lengths: Tensor, k: int, generator: Randomness, drawn: Tensor | None = None
) -> Tensor:
    """Stochastic beam search over all sentences of ``state`` at once: heads (k, B, N+1) (the
    steps of :func:`_beam_steps`, then the beams in draw order)."""
    batch, size = lengths.shape[0], state.choices
    gumbel, _ = _beam_steps(state, lengths, k, generator, state.steps, drawn)
    gumbel, order = gumbel.sort(dim=-1, descending=True, stable=True)  # draw order
    heads = state.heads.view(batch, k, size).gather(1, order.unsqueeze(-1).expand(-1, -1, size)).transpose(0, 1)
    return torch.where((gumbel > -torch.inf).T.unsqueeze(-1), heads, -1)


def _beam_steps(
    state: Conditioner | TrappedModel,
    lengths: Tensor,
    k: int,
    generator: Randomness,
    stop: int,
    drawn: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """The steps ``state.first_step .. stop - 1`` of stochastic beam search over all sentences
    of ``state`` at once; returns each row's beam Gumbel and log-probability (B, k).

    Sentence b owns the state rows b * k .. b * k + k - 1 throughout (see
    :meth:`Conditioner.branch`), so every per-step tensor is a view (B, k, N+1) and the
    top-k runs over each sentence's k (N+1) children without a copy; a beam's Gumbel and
    log-probability live in its row. Before the first step only row 0 (the empty prefix) is
    alive. The steps are ``state``'s (the words, or :class:`.colbourn.TrappedModel`'s); a beam
    whose row does not take a step keeps itself as its only child. With one generator per
    sentence (see :mod:`.streams`), sentence b draws a (beams, n_b + 1) block of uniforms at
    each step one of its beams takes (beams = 1 at the first step, then k). ``drawn`` (B, N, k,
    N+1): the uniforms of every word given instead (:func:`_search_uniforms`; word steps only).
    """
    batch = lengths.shape[0]
    size = state.choices
    device = lengths.device
    sentence_lengths = lengths.tolist()
    # by row: the empty prefix (Gumbel 0: a shift, not a bias) in row 0, no prefix elsewhere
    gumbel = torch.full((batch, k), -torch.inf, dtype=torch.float64, device=device)
    gumbel[:, 0] = 0.0
    log_p = gumbel.clone()
    first_row = torch.arange(0, batch * k, k, device=device).unsqueeze(1)
    top = torch.zeros(batch, dtype=torch.float64, device=device)  # each sentence's best beam Gumbel
    first = True
    children = torch.empty(0)
    for t in range(state.first_step, stop):
        active = state.active(t).view(batch, k)
        if not bool(active.any()):
            continue
        beams = 1 if first else k  # beams with children (before the first step, only row 0 is alive)
        probs = state.probs(t).view(batch, k, size)
        if drawn is not None:
            uniforms = drawn[:, t - 1, :beams]
        elif per_sentence(generator):
            takes = active.any(-1).tolist()
            sizes = [(beams, n + 1) if on else (0,) for n, on in zip(sentence_lengths, takes)]
            uniforms = per_sentence_uniforms(generator, sizes, (beams, size), probs)
        else:
            uniforms = torch.rand((batch, beams, size), dtype=probs.dtype, device=device, generator=generator)
        if beams == 1:  # the first step: only row 0 has children
            children = torch.full_like(probs, -torch.inf)
            children[:, :1] = _child_gumbels(gumbel[:, :1], log_p[:, :1], probs[:, :1], uniforms)
        else:
            children = _child_gumbels(gumbel, log_p, probs, uniforms, out=children)
        partial = not bool(active.all())  # some beam does not take this step (a finished sentence)
        if partial:  # such a beam keeps itself as its only child
            children[..., 0] = torch.where(active, children[..., 0], gumbel)
        best, index = children.view(batch, k * size).topk(k, dim=-1)  # (B, k) new beams, sorted
        # an overflowed child (-inf, exactly below its parent's Gumbel by > OVERFLOW_GAP) can
        # be among the top k only where the k-th best is that far below every beam; where it
        # is not, every new beam is alive too
        close = bool((best[:, -1] > top - OVERFLOW_GAP).all())
        if not close and _restore_overflowed(children, gumbel, log_p, probs, uniforms):
            best, index = children.view(batch, k * size).topk(k, dim=-1)
        top = best[:, 0]
        parent = index.div(size, rounding_mode="floor")
        head = index.remainder(size)
        step = probs.view(batch, k * size).gather(1, index).log_()
        if partial:
            took = active.gather(1, parent)
            step = torch.where(took, step, 0.0)
        beam_log_p = log_p.gather(1, parent).add_(step)  # (a dead beam's is never read)
        if close and not partial:
            conditioned = None  # every beam
        else:
            alive = best > -torch.inf  # False: no prefix (the sentence has fewer trees)
            if partial:
                conditioned = alive & took
            else:  # (top-k is sorted: the last beam is the weakest)
                conditioned = None if bool(alive[:, -1].all()) else alive
        if first:  # every row of a sentence still holds the same state: beam i takes row i
            rows = (first_row + torch.arange(k, device=device)).view(-1)
            first = False
        else:
            rows = state.branch((first_row + parent).view(-1))
        gumbel = _by_row(rows, best)
        log_p = _by_row(rows, beam_log_p)
        state.fix(t, _by_row(rows, head).view(-1), None if conditioned is None else _by_row(rows, conditioned).view(-1))
    return gumbel, log_p


def _by_row(rows: Tensor, values: Tensor) -> Tensor:
    """(B, k) per-beam values arranged by the state row each beam took (``rows`` (B*k,))."""
    return torch.empty_like(values).view(-1).index_copy_(0, rows, values.view(-1)).view(values.shape)


class _Trie:
    """Trie of drawn prefixes for all sentences in one node pool (node b = root of sentence b).

    child[node, h] (int32: half the memory of the largest table): the node of prefix + h, or
    -1 while no drawn tree went there.
    log_remaining[node]: log of the probability mass of the trees below the node that are
    not drawn yet (-inf: exhausted).
    """

    def __init__(self, batch: int, size: int, device: torch.device):
        self.size = size
        self.count = batch
        capacity = max(batch * size, 16)
        self.child = torch.full((capacity, size), -1, dtype=torch.int32, device=device)
        self.log_remaining = torch.zeros(capacity, dtype=torch.float64, device=device)

    def allocate(self, number: int) -> Tensor:
        """Ids of ``number`` new nodes (the pool doubles when full: amortised O(1) per node)."""
        needed = self.count + number
        capacity = self.child.shape[0]
        if needed > capacity:
            extra = max(capacity, needed - capacity)
            self.child = torch.cat([self.child, self.child.new_full((extra, self.size), -1)])
            self.log_remaining = torch.cat([self.log_remaining, self.log_remaining.new_zeros(extra)])
        ids = torch.arange(self.count, needed, device=self.child.device)
        self.count = needed
        return ids

    def update(self, path: Tensor, path_log_p: Tensor, path_probs: Tensor) -> Tensor:
        """Remove a drawn tree's mass from every prefix on its path, bottom-up; returns each
        path's leaf (B,), the node of its tree (or of its dead end).

        The remaining mass of a node is a sum of positive terms, never a difference:
        P(node) * (sum of q(h) over children not in the trie) + sum of the children's
        remaining masses. A drawn leaf has none, so exhaustion is exact (log mass -inf).
        path (B, N+1) nodes by depth from the sentence's root node (-1 past the leaf),
        path_log_p (B, N+1) log P(prefix), path_probs (B, N+1, N+1) the conditionals of word
        d at the node of depth d-1.
        """
        leaf = path.gather(1, ((path >= 0).sum(-1) - 1).unsqueeze(-1)).squeeze(-1)
        self.log_remaining[leaf] = -torch.inf
        for d in range(path.shape[1] - 1, 0, -1):
            below = path[:, d] >= 0
            node = torch.where(below, path[:, d - 1], torch.zeros_like(path[:, d - 1]))
            children = self.child[node]
            probs = path_probs[:, d]
            unseen = torch.where(children < 0, probs, 0.0).sum(-1)
            seen = torch.where(
                children >= 0,
                self.log_remaining[children.clamp_min(0)],
                torch.full_like(probs, -torch.inf),
            )
            log_remaining = torch.logaddexp(path_log_p[:, d - 1] + unseen.log(), torch.logsumexp(seen, -1))
            self.log_remaining[node[below]] = log_remaining[below]
        return leaf


#: Most candidates a trie round draws per tree it still needs (where earlier rounds' candidates
#: mostly repeated): more would mostly repeat too, fewer call more rounds.
MAX_CANDIDATES_PER_TREE = 8.0

#: Dead ends (prefixes whose computed conditionals leave no possible head, reached through a
#: rounding-error probability) a trie step may prune before it gives up with an error.
MAX_DEAD_ENDS = 10_000


class _Sentences:
    """The trie's view of a batch: Colbourn's state for any rows, :class:`.colbourn.TrappedModel`
    for the rows of sentences whose L-hat is ill-conditioned (set up once, shared by every
    round), a :class:`.colbourn.Conditioner` for the others."""

    def __init__(self, dist):
        self.dist = dist
        self.prepared = Prepared.of(dist)
        self.trapped = self.prepared.trapped()
        self.setup: TrappedSetup | None = None
        if bool(self.trapped.any()):
            index = self.trapped.nonzero().squeeze(-1)
            self.setup = TrappedSetup(dist, index)
            self.local = torch.full_like(self.trapped, -1, dtype=torch.long)
            self.local[index] = torch.arange(index.numel(), device=index.device)

    def descend(self, trie: _Trie, rows: Tensor, generator: torch.Generator | None):
        """:func:`_descend` for ``rows`` of either kind, merged in row order (the paths of the
        shorter kind padded with -1)."""
        hard = self.trapped[rows]
        if self.setup is None or not bool(hard.any()):
            return _descend(Conditioner(self.dist, rows, self.prepared), trie, rows, generator)
        if bool(hard.all()):
            return _descend(TrappedModel(self.setup, self.local[rows]), trie, rows, generator)
        parts = []
        for easy in (True, False):
            index = (hard != easy).nonzero().squeeze(-1)
            sub = rows[index]
            state = Conditioner(self.dist, sub, self.prepared) if easy else TrappedModel(self.setup, self.local[sub])
            parts.append((index, _descend(state, trie, sub, generator)))
        depth = max(part[1][1].shape[1] for part in parts)
        out = None
        for index, (heads, path, path_log_p, path_probs, dead) in parts:
            extra = depth - path.shape[1]
            found = (
                heads,
                torch.nn.functional.pad(path, (0, extra), value=-1),
                torch.nn.functional.pad(path_log_p, (0, extra)),
                torch.nn.functional.pad(path_probs, (0, 0, 0, extra)),
                dead,
            )
            if out is None:
                out = [
                    torch.zeros((rows.numel(), *value.shape[1:]), dtype=value.dtype, device=value.device)
                    for value in found
                ]
            for target, value in zip(out, found):
                target[index] = value
        assert out is not None
        return tuple(out)


def _descend(state: Conditioner | TrappedModel, trie: _Trie, rows: Tensor, generator: torch.Generator | None):
    """One ancestral draw per row of ``state`` (sentence ``rows`` (R,)), renormalised by the
    trie's masses, over the state's steps (a trie level per step).

    At each step, child h of the current prefix has weight q(h) P(prefix) if no tree was drawn
    below it yet, else its remaining mass; weights are compared in log space (no underflow).
    A row moves down the trie until its tree is complete (``state.finished``); a step it does
    not take has the single child 0. Returns heads (R, N+1), path (R, D+1) of trie nodes by
    depth, log P of each prefix and the conditionals at each node (for :meth:`_Trie.update`),
    and which rows hit a dead end.
    """
    size = state.choices
    depth = state.steps - state.first_step
    count = rows.numel()
    device = rows.device
    node = rows.clone()  # node b is the root of sentence b
    log_p = torch.zeros(count, dtype=torch.float64, device=device)
    path = torch.full((count, depth + 1), -1, dtype=torch.long, device=device)
    path[:, 0] = node
    path_log_p = torch.zeros(count, depth + 1, dtype=torch.float64, device=device)
    path_probs = torch.zeros(count, depth + 1, size, dtype=torch.float64, device=device)
    dead = torch.zeros(count, dtype=torch.bool, device=device)
    for d, t in enumerate(range(state.first_step, state.steps), start=1):
        active = ~dead & ~state.finished(t)
        probs = state.probs(t)
        children = trie.child[node]
        seen = children >= 0
        unseen_log_mass = log_p.unsqueeze(-1) + probs.log()
        log_mass = torch.where(seen, trie.log_remaining[children.clamp_min(0)], unseen_log_mass)
        top = log_mass.max(-1, keepdim=True).values
        weights = torch.exp(log_mass - torch.where(top > -torch.inf, top, torch.zeros_like(top)))
        head, possible = draw_positive(weights, generator)
        dead = dead | (active & ~possible)
        active = active & possible
        chosen = children.gather(1, head.unsqueeze(-1)).squeeze(-1).long()
        new = active & (chosen < 0)
        if bool(new.any()):  # rows leaving one node by the same head share the new node
            keys, shared = torch.unique(node[new] * size + head[new], return_inverse=True)
            new_ids = trie.allocate(keys.numel())
            chosen[new] = new_ids[shared]
            trie.child[keys // size, keys % size] = new_ids.to(trie.child.dtype)
        path_probs[:, d] = probs
        path_log_p[:, d - 1] = log_p
        step_log_p = probs.gather(1, head.unsqueeze(-1)).squeeze(-1).log()
        log_p = torch.where(active, log_p + step_log_p, log_p)
        node = torch.where(active, chosen, node)
        path[:, d] = torch.where(active, node, torch.full_like(node, -1))
        state.fix(t, head, active)
    return state.heads, path, path_log_p, path_probs, dead


def trie_draws(
    dist, generator: torch.Generator | None = None, wanted: int | None = None
) -> Iterator[tuple[Tensor, Tensor]]:
    """Yield one new tree per sentence per step, without replacement (Shi et al. 2020).

    Each item is (heads (B, N+1), log_probs (B,)) with ``log_probs = dist.log_prob(heads)``;
    a sentence whose trees are all drawn yields -1 heads and -inf. Stops when every sentence
    is exhausted.

    Trees are drawn in *rounds*: a round draws c_b candidates for each sentence b at once,
    i.i.d. from p restricted to the trees not drawn yet (one ancestral descent per candidate,
    renormalised by the trie's masses, all rows together), and keeps the first occurrence of
    each tree, in order. This is exact: a candidate that differs from the round's earlier
    ones is distributed as p restricted to the trees drawn by neither, so the kept trees are
    the next draws without replacement. A round's trees are queued and yielded one per step.
    A round comes when some sentence's queue is empty; it tops up every sentence to as many
    trees ahead as were yielded so far (to all ``wanted`` when the caller says how many it
    will take), asking each for that many trees times its last round's candidates per new
    tree (repeats: a peaked distribution). A candidate that reaches a dead end (a prefix with
    no tree, entered through a rounding-error probability) prunes that prefix; a step whose
    rounds leave some sentence with nothing queued draws again, at most
    :data:`MAX_DEAD_ENDS` times.
    """
    batch, size = dist.scores.shape[0], dist.scores.shape[-1]
    device = dist.scores.device
    sentences = torch.arange(batch, device=device)
    views = _Sentences(dist)
    trie = _Trie(batch, size, device)
    # most candidates in one round: its inverses and conditionals stay within CHUNK_ENTRIES
    most = max(1, CHUNK_ENTRIES // (2 * batch * size * size))
    queue = _Queue(batch, size, device)
    per_tree = torch.ones(batch, dtype=torch.float64, device=device)  # candidates per new tree
    for step in itertools.count():
        for _ in range(MAX_DEAD_ENDS):
            live = trie.log_remaining[sentences] > -torch.inf
            if not bool((live & (queue.ahead() == 0)).any()):  # every live sentence has a tree ready
                break
            # trees every live sentence should have ahead: the rest of ``wanted``, else as many
            # as were yielded so far (rounds at steps 0, 1, 2, 4, 8, ...: about twice the
            # trees a caller takes). All sentences short of it are topped up in the same round
            # (a round costs little more for more rows), so that they stay in step.
            short = (max(1, wanted - step if wanted is not None else step) - queue.ahead()).clamp_min(0)
            pending = sentences[live & (short > 0)]
            width = (short * per_tree).ceil().long().clamp(1, most)
            trees, owner = _round(views, trie, pending, width[pending], generator)
            found = queue.extend(trees, owner)
            # repeated candidates (a peaked distribution) ask for more candidates per tree
            rate = (width / found.clamp_min(1)).clamp(1.0, MAX_CANDIDATES_PER_TREE)
            per_tree[pending] = rate[pending].double()
        else:
            raise ValueError(
                f"sampling without replacement met {MAX_DEAD_ENDS} dead ends in one step in "
                f"sentence(s) {pending.tolist()[:10]}"
            )
        heads, ready = queue.pop()
        if not bool(ready.any()):  # every sentence exhausted
            return
        yield heads, dist.log_prob(heads)  # -inf for the -1 rows (not trees)


class _Queue:
    """Every tree :func:`trie_draws` found, per sentence in draw order, and how many of them it
    yielded."""

    def __init__(self, batch: int, size: int, device: torch.device):
        self.trees = torch.full((batch, 0, size), -1, dtype=torch.long, device=device)
        self.found = torch.zeros(batch, dtype=torch.long, device=device)
        self.taken = torch.zeros(batch, dtype=torch.long, device=device)

    def ahead(self) -> Tensor:
        """(B,) trees found and not yielded yet."""
        return self.found - self.taken

    def extend(self, trees: Tensor, owner: Tensor) -> Tensor:
        """Append ``trees`` (T, N+1), grouped by their sentences ``owner`` (T,) in ascending
        order; returns how many each sentence got (B,)."""
        batch = self.found.numel()
        count = torch.bincount(owner, minlength=batch)
        if trees.shape[0]:
            start = torch.cumsum(count, 0) - count  # each sentence's first tree among ``trees``
            slot = self.found[owner] + torch.arange(trees.shape[0], device=trees.device) - start[owner]
            needed = int((self.found + count).max())
            if needed > self.trees.shape[1]:
                extra = self.trees.new_full((batch, needed - self.trees.shape[1], self.trees.shape[2]), -1)
                self.trees = torch.cat([self.trees, extra], 1)
            self.trees[owner, slot] = trees
        self.found += count
        return count

    def pop(self) -> tuple[Tensor, Tensor]:
        """Each sentence's next tree (B, N+1), -1 heads where none is left, and where one was
        (B,)."""
        ready = self.taken < self.found
        rows = torch.arange(self.found.numel(), device=self.found.device)
        next_tree = self.trees[rows, self.taken.clamp_max(max(self.trees.shape[1] - 1, 0))]
        self.taken += ready.long()
        return torch.where(ready.unsqueeze(-1), next_tree, -1), ready


def _round(
    sentences: _Sentences, trie: _Trie, pending: Tensor, width: Tensor, generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    """One round of :func:`trie_draws`: ``width[i]`` candidates for sentence ``pending[i]``,
    their masses removed from the trie. Returns the new trees (T, N+1), first occurrences in
    candidate order grouped by sentence, and each one's sentence (T,)."""
    rows = pending.repeat_interleave(width)
    drawn, path, path_log_p, path_probs, dead = sentences.descend(trie, rows, generator)
    leaf = trie.update(path, path_log_p, path_probs)  # a dead end is pruned like a drawn leaf
    alive = (~dead).nonzero().squeeze(-1)
    leaf = leaf[alive]  # a tree's leaf is its own
    distinct, which = torch.unique(leaf, return_inverse=True)
    first = torch.full_like(distinct, rows.numel()).scatter_reduce_(0, which, alive, "amin")
    kept = first.sort().values  # candidates in order: sentence by sentence (rows are)
    return drawn[kept], rows[kept]


def trie_without_replacement(dist, k: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """The first k draws of :func:`trie_draws`, padded with -1 / -inf."""
    batch, size = dist.scores.shape[0], dist.scores.shape[-1]
    heads = torch.full((k, batch, size), -1, dtype=torch.long, device=dist.scores.device)
    log_probs = torch.full((k, batch), -torch.inf, dtype=dist.scores.dtype, device=dist.scores.device)
    for i, (tree, log_prob) in zip(range(k), trie_draws(dist, generator, wanted=k)):
        heads[i], log_probs[i] = tree, log_prob
    return heads, log_probs
