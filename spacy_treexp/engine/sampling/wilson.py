"""Wilson's algorithm for dependency trees: multi-root, Wilson-Marginal and Wilson-Reject.

Stanojević (2022), *Unbiased and Efficient Sampling of Dependency Trees*.

A word's walk moves from the word to a head h with probability w[h, m] / sum_h' w[h', m],
so the arborescence Wilson's algorithm returns has probability proportional to
prod_m w[heads[m], m]: exactly the tree distribution.

We run Wilson's algorithm in its *cycle-popping* form (Wilson 1996; Propp & Wilson 1998):
every free word points at a random head; while the pointers contain cycles, every
word on a cycle draws a fresh head. Cycles of a functional graph are disjoint, so popping
all of them at once is one admissible popping order and the final tree has the same law as
the loop-erased random walks. This lets all samples of all sentences advance together:
one round costs a few gathers over the words that are still on cycles.
"""

from __future__ import annotations

import math
import weakref

import torch
from torch import Tensor

from spacy_treexp.engine.laplacian import fast_inverse, shifted_weights
from spacy_treexp.engine.sampling import work

#: Wilson's walks run only where the expected number of heads they draw per tree
#: (:func:`expected_walk_steps`) is at most WALK_BUDGET * n for n words; the rest go to
#: Colbourn's sampler. A round of cycle popping costs O(n log n) per sample (finding the cycles
#: touches every word) and draws at least one head, so the walks then cost at most
#: O(WALK_BUDGET n^2 log n) per tree in expectation, below Colbourn's O(n^3). Random and
#: parser-like scores draw 1 to 2.5 n heads per tree (measured, n = 10 to 200); scores x10 and
#: beyond, whose walks circle strongly bound cycles e^(score gap) times, are the ones sent on.
#: The choice depends on the scores only (and, for Wilson-Marginal, on the ROOT child already
#: drawn from its exact marginal), never on a walk, so the mixture stays exact.
WALK_BUDGET = 8.0
#: Rounds of cycle popping allowed per WALK_BUDGET n (see :data:`MAX_ROUNDS`).
ROUNDS_PER_BUDGET = 128
#: The LU error estimate (:func:`.laplacian.fast_inverse`) above which the expected number of
#: draws is not trusted (taken as infinite: such a sentence's walks are slow anyway).
STEPS_TOLERANCE = 1e-6

#: Rounds of cycle popping after which we give up with an error instead of looping forever, at
#: least (the default is ROUNDS_PER_BUDGET times the budget, :func:`round_limit`): a safety net
#: only. A walk that is allowed to run draws at most WALK_BUDGET n heads in expectation from
#: any start (every start's expected walk is at most the sum over words of the expected
#: visits), so by Markov's inequality, restarted, it outlasts 128 times that with probability
#: below e^-47; each round draws at least one head. Colbourn has no such limit.
MAX_ROUNDS = 10_000
#: Multi-root draws per accepted tree after which Wilson-Reject gives up (its expected number
#: of tries is Z_multi / Z_single, at most e for random weights per Stanojević 2022). A
#: sentence whose expected tries exceed MAX_TRIES / 48 does not walk (:func:`walkable`): its
#: tries then exceed MAX_TRIES with probability below e^-47.
MAX_TRIES = 1_000
#: Most entries of the (samples, B, N+1, N+1) comparison of the first draws held at once.
CHUNK_ENTRIES = 2**25


def _cumulative_weights(dist, with_root: bool) -> Tensor:
    """(B, N+1, N+1) float64 cumulative walk weights ``cdf[b, m, h] = sum_{h' <= h} w[h', m]``.

    Weights are the engine's column-shifted exp(scores) (a column scale does not change
    the walk). ``with_root=False`` removes every ROOT arc (the walk of Wilson-Marginal
    after the ROOT child is fixed).
    """
    weights, _ = shifted_weights(dist.scores.detach().double(), dist.arc_mask)
    if not with_root:
        weights = weights.clone()
        weights[:, 0, :] = 0.0
    return weights.transpose(-1, -2).cumsum(-1)


def draw_categorical(cdf: Tensor, generator: torch.Generator | None, uniform: Tensor | None = None) -> Tensor:
    """Draw one index per row from non-negative cumulative weights ``cdf`` (M, C), float64.

    Inverse-CDF sampling: the first index whose cumulative weight exceeds u * total,
    u ~ U[0, 1) (u * total < total in float64). Zero-weight categories can never be drawn;
    no weight is floored. The one categorical sampler of this package. ``uniform`` (M,):
    the u of each row, drawn by the caller (then ``generator`` is not used).
    """
    if uniform is None:
        u = torch.rand(cdf.shape[:-1] + (1,), dtype=cdf.dtype, device=cdf.device, generator=generator)
    else:
        u = uniform.to(cdf.dtype).unsqueeze(-1)
    return torch.searchsorted(cdf, u * cdf[..., -1:], right=True).squeeze(-1)


def cycle_nodes(nxt: Tensor) -> Tensor:
    """(K, N+1) bool: which nodes lie on a cycle of the functional graph ``nxt`` (K, N+1).

    Node 0 (ROOT, a fixed point) is excluded. By pointer doubling, nxt^(2^t) with
    2^t >= N+1 maps every node onto a cycle, and its image is exactly the set of cycle nodes.
    """
    size = nxt.shape[-1]
    jump = nxt
    for _ in range(max(1, math.ceil(math.log2(size)))):
        jump = jump.gather(-1, jump)
    on_cycle = torch.zeros_like(nxt, dtype=torch.bool).scatter_(-1, jump, True)
    on_cycle[:, 0] = False
    return on_cycle


def _pop_cycles(
    nxt: Tensor,
    free: Tensor,
    cdf: Tensor,
    sentence: Tensor,
    generator: torch.Generator | None,
    max_rounds: int,
) -> Tensor:
    """Wilson's algorithm by cycle popping, in place on ``nxt`` (K, N+1).

    ``nxt`` holds the first pointers (:func:`_first_pointers`); ``free`` (K, N+1) marks the
    words that draw heads, every other node points at 0 (ROOT, fixed words, padding).
    Row i belongs to sentence ``sentence[i]`` of ``cdf``.
    """
    active = torch.arange(nxt.shape[0], device=nxt.device)
    for _ in range(max_rounds):
        on_cycle = cycle_nodes(nxt[active])
        has_cycle = on_cycle.any(-1)
        active, on_cycle = active[has_cycle], on_cycle[has_cycle]
        if active.numel() == 0:
            return nxt
        _redraw(nxt, active, on_cycle, cdf, sentence, generator)
    stuck = sorted(set(sentence[active].tolist()))
    raise ValueError(
        f"Wilson's walk did not reach ROOT after {max_rounds} rounds of cycle popping in "
        f"sentence(s) {stuck[:10]}: some words form a cycle whose arcs out of it have "
        "(almost) zero weight, so the walk's hitting time is astronomical or infinite; use "
        "method='colbourn' for these sentences."
    )


def _redraw(
    nxt: Tensor, rows: Tensor, nodes: Tensor, cdf: Tensor, sentence: Tensor, generator: torch.Generator | None
) -> None:
    """Draw fresh heads, in place, for the ``nodes`` (R, N+1) bool of rows ``rows`` (R,) of nxt."""
    local, words = nodes.nonzero(as_tuple=True)
    work.add("walk_steps", words.numel())
    chosen = rows[local]
    nxt[chosen, words] = draw_categorical(cdf[sentence[chosen], words], generator)


def _start(dist, num_samples: int) -> tuple[Tensor, Tensor]:
    """The free words mask (S*B, N+1) and each row's sentence (row = sample * B + b)."""
    batch, size = dist.scores.shape[0], dist.scores.shape[-1]
    device = dist.scores.device
    positions = torch.arange(size, device=device)
    words = (positions >= 1) & (positions[None, :] <= dist.lengths[:, None])  # (B, N+1)
    free = words.expand(num_samples, batch, size).reshape(-1, size).clone()
    sentence = torch.arange(batch, device=device).repeat(num_samples)
    return free, sentence


def _first_pointers(
    cdf: Tensor, free: Tensor, num_samples: int, generator: torch.Generator | None, allowed: Tensor | None = None
) -> Tensor:
    """A head for every free word of S*B rows, 0 elsewhere: (S*B, N+1) long.

    Raises ValueError if a free word has no possible head at all: none allowed (no tree), or
    (``allowed`` (B, N+1): which words have an allowed head for this walk) all of weight 0 in
    float64.

    Inverse-CDF draws by broadcasting u * total against the sentence's cumulative weights:
    the count of cumulative weights <= u * total is the drawn index (as in
    :func:`draw_categorical`), without copying a weight row per draw.
    """
    batch, size = cdf.shape[0], cdf.shape[-1]
    headless = free & (cdf[..., -1] == 0).repeat(num_samples, 1)
    if headless.any():
        stuck = sorted(set((headless.any(-1).nonzero().squeeze(-1) % batch).tolist()))
        if allowed is not None and bool(allowed.repeat(num_samples, 1)[headless].all()):
            raise ValueError(
                f"Wilson's walk met a word in sentence(s) {stuck[:10]} whose allowed heads all have weight 0 "
                "in float64 (scores more than ~745 nats below the word's best head, here ROOT, which this walk "
                "may not take): the sentence has trees, but its walks cannot finish; sample it with "
                "method='colbourn' (sample() does so by itself for sentences whose expected walk is too long)."
            )
        raise ValueError(
            f"Wilson's walk found a word with no possible head in sentence(s) {stuck[:10]} "
            "(no arc into it is allowed: the tree distribution has no tree there)."
        )
    work.add("walk_steps", int(free.sum()))
    per_chunk = max(1, CHUNK_ENTRIES // (batch * size * size))  # bounds the comparison's memory
    chunks = []
    for start in range(0, num_samples, per_chunk):
        count = min(per_chunk, num_samples - start)
        u = torch.rand((count, batch, size, 1), dtype=cdf.dtype, device=cdf.device, generator=generator)
        below = cdf.unsqueeze(0) <= u * cdf[..., -1:].unsqueeze(0)
        chunks.append(below.sum(-1, dtype=torch.int32).reshape(-1, size))  # int32: a cheap count
    first = torch.cat(chunks).long()
    return torch.where(free, first, torch.zeros_like(first))


def _to_heads(nxt: Tensor, free_or_fixed: Tensor, num_samples: int, batch: int) -> Tensor:
    """Pointers -> heads (S, B, N+1) with -1 at ROOT and padding."""
    heads = torch.where(free_or_fixed, nxt, torch.full_like(nxt, -1))
    return heads.reshape(num_samples, batch, -1)


def round_limit(dist) -> int:
    """The default limit on rounds of cycle popping for ``dist`` (see :data:`MAX_ROUNDS`)."""
    return max(MAX_ROUNDS, ROUNDS_PER_BUDGET * math.ceil(WALK_BUDGET * dist.n_max))


def wilson_multi_root(
    dist, num_samples: int, generator: torch.Generator | None = None, max_rounds: int | None = None
) -> Tensor:
    """Multi-root trees by Wilson's algorithm (Stanojević 2022): (S, B, N+1) heads."""
    max_rounds = round_limit(dist) if max_rounds is None else max_rounds
    cdf = _cumulative_weights(dist, with_root=True)
    free, sentence = _start(dist, num_samples)
    nxt = _first_pointers(cdf, free, num_samples, generator, dist.arc_mask.any(1))
    _pop_cycles(nxt, free, cdf, sentence, generator, max_rounds)
    return _to_heads(nxt, free, num_samples, dist.scores.shape[0])


def wilson_marginal(
    dist,
    num_samples: int,
    generator: torch.Generator | None = None,
    max_rounds: int | None = None,
    root_marginals: Tensor | None = None,
) -> Tensor:
    """Single-root trees by Wilson-Marginal (Stanojević 2022): (S, B, N+1) heads.

    The ROOT child r is drawn from its exact marginal mu[0, r] (the engine's stable
    marginals, computed once for all samples, or ``root_marginals`` (B, N+1) when the caller
    has them); the other words then run Wilson's walks on the graph without ROOT arcs, with r
    as the root. O(n^3 + S * walk length).
    """
    return rooted_walks(dist, num_samples, generator, max_rounds, root_marginals)[0]


def rooted_walks(
    dist,
    num_samples: int,
    generator: torch.Generator | None = None,
    max_rounds: int | None = None,
    root_marginals: Tensor | None = None,
    decide: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`wilson_marginal`; with ``decide``, each draw walks only if its walks are short
    enough given the sentence and the ROOT child drawn (:func:`walkable_given_root`): heads
    (S, B, N+1), the ROOT child of each draw (S, B), and which draws walked (S, B). A draw that
    did not walk has only its ROOT child."""
    batch = dist.scores.shape[0]
    max_rounds = round_limit(dist) if max_rounds is None else max_rounds
    if root_marginals is None:
        root_marginals = dist.marginals[:, 0, :]
    root_cdf = root_marginals.detach().double().cumsum(-1)  # (B, N+1), zero at 0 and padding
    free, sentence = _start(dist, num_samples)
    root_child = draw_categorical(root_cdf[sentence], generator)  # (S*B,)
    rows = torch.arange(free.shape[0], device=free.device)
    words = free.clone()
    free[rows, root_child] = False  # r keeps pointing at ROOT
    walked = walkable_given_root(dist, sentence, root_child) if decide else torch.ones_like(words[:, 0])
    free &= walked.unsqueeze(-1)
    cdf = _cumulative_weights(dist, with_root=False)
    allowed = dist.arc_mask[:, 1:, :].any(1)  # a head other than ROOT is allowed
    nxt = _first_pointers(cdf, free, num_samples, generator, allowed)
    _pop_cycles(nxt, free, cdf, sentence, generator, max_rounds)
    root_only = torch.arange(words.shape[-1], device=rows.device) == root_child.unsqueeze(-1)
    heads = _to_heads(nxt, words & (walked.unsqueeze(-1) | root_only), num_samples, batch)
    return heads, root_child.view(num_samples, batch), walked.view(num_samples, batch)


def wilson_reject(
    dist,
    num_samples: int,
    generator: torch.Generator | None = None,
    max_rounds: int | None = None,
    max_tries: int = MAX_TRIES,
) -> tuple[Tensor, Tensor]:
    """Single-root trees by Wilson-Reject (Stanojević 2022).

    Draws multi-root trees with Wilson's algorithm until a draw has exactly one ROOT child;
    accepted draws are exact single-root samples. Returns heads (S, B, N+1) and the number
    of tries of each draw (S, B), whose mean is Z_multi / Z_single
    (see :func:`wilson_reject_acceptance`). Gives up after ``max_tries`` tries.
    """
    batch, size = dist.scores.shape[0], dist.scores.shape[-1]
    max_rounds = round_limit(dist) if max_rounds is None else max_rounds
    cdf = _cumulative_weights(dist, with_root=True)
    free, sentence = _start(dist, num_samples)
    nxt = _first_pointers(cdf, free, num_samples, generator, dist.arc_mask.any(1))
    tries = torch.ones(free.shape[0], dtype=torch.long, device=free.device)
    rounds = torch.zeros_like(tries)  # rounds of cycle popping in the current try
    active = torch.arange(free.shape[0], device=free.device)
    # One cycle-popping loop for all tries: a row whose draw is a tree but has several ROOT
    # children starts a fresh try at once (each try is an independent Wilson run). Every
    # round raises a row's try count or its round count, so the loop is bounded.
    for _ in range(max_tries * max_rounds):
        on_cycle = cycle_nodes(nxt[active])
        has_cycle = on_cycle.any(-1)
        finished = active[~has_cycle]
        single = ((nxt[finished] == 0) & free[finished]).sum(-1) == 1
        rejected = finished[~single]
        tries[rejected] += 1
        rounds[rejected] = 0
        popping = active[has_cycle]
        rounds[popping] += 1
        if (tries[rejected] > max_tries).any() or (rounds[popping] > max_rounds).any():
            break
        _redraw(nxt, rejected, free[rejected], cdf, sentence, generator)
        _redraw(nxt, popping, on_cycle[has_cycle], cdf, sentence, generator)
        active = torch.cat([popping, rejected])
        if active.numel() == 0:
            heads = torch.where(free, nxt, torch.full_like(nxt, -1))
            return heads.reshape(num_samples, batch, size), tries.reshape(num_samples, batch)
    if (tries > max_tries).any():
        stuck = sorted(set(sentence[tries > max_tries].tolist()))
        raise ValueError(
            f"Wilson-Reject drew no single-root tree in {max_tries} tries for sentence(s) "
            f"{stuck[:10]}: its acceptance rate Z_single / Z_multi is too small "
            "(see wilson_reject_acceptance); use method='wilson_marginal' or 'colbourn'."
        )
    stuck = sorted(set(sentence[rounds > max_rounds].tolist()))
    raise ValueError(
        f"Wilson-Reject's walks did not reach ROOT after {max_rounds} rounds of cycle popping in "
        f"sentence(s) {stuck[:10]}: some words form a cycle whose arcs out of it have (almost) "
        "zero weight, so the walk's hitting time is astronomical or infinite; use "
        "method='colbourn' for these sentences."
    )


def expected_walk_steps(dist, method: str) -> Tensor:
    """(B,) float64: the expected number of heads Wilson's walks draw per tree of ``method``
    (``"wilson"``, ``"wilson_marginal"``, ``"wilson_reject"``), exactly (Wilson 1996: cycle
    popping draws what the loop-erased walks draw, sum_v E[visits to v]); inf where it cannot
    be computed reliably in float64 (the walks are then long anyway).

    * ``"wilson"``: the walk killed at ROOT visits v G[v, v] times, G = (I - P)^{-1} over the
      words; with L-hat = (I - P^T) D (multi-root, D the column sums), G[v, v] = D[v] L-hat^{-1}
      [v, v]: one LU, O(n^3).
    * ``"wilson_reject"``: that, times the expected number of tries Z_multi / Z_single.
    * ``"wilson_marginal"``: the ROOT child r (probability mu(ROOT -> r)) is the walk's root, and
      the walk uses word heads only: sum_r mu(r) tr(G_r), each from one LU of the multi-root
      L-hat whose only ROOT arc is r's (:func:`rooted_walk_steps`): O(n^4) for all r.
    """
    scores = dist.scores.detach().double()
    weights, shift = shifted_weights(scores, dist.arc_mask)
    positions = torch.arange(scores.shape[-1], device=scores.device)
    words = (positions >= 1) & (positions <= dist.lengths.unsqueeze(-1))
    if method == "wilson_marginal":
        mu = dist.marginals[:, 0, :].detach().double()
        sentence, root_child = (mu > 0).nonzero(as_tuple=True)
        per_root = torch.zeros_like(mu).index_put((sentence, root_child), rooted_walk_steps(dist, sentence, root_child))
        return (mu * per_root).sum(-1) / mu.sum(-1)  # (inf where some possible ROOT child's is)
    log_det, inverse, error = fast_inverse(weights, dist.lengths, single_root=False)
    visits = weights.sum(1)[:, 1:] * inverse.diagonal(dim1=-2, dim2=-1)  # G[v, v], words 1..N
    steps = torch.where(words[:, 1:], visits, 0.0).sum(-1)
    trusted = (error <= STEPS_TOLERANCE) & torch.isfinite(steps) & (steps > 0)
    if method == "wilson_reject":
        log_tries = log_det + shift.sum(-1) - dist.log_partition.detach().double()  # log Z_multi / Z_single
        steps = steps * torch.exp(log_tries)
        trusted &= torch.isfinite(steps)
    return torch.where(trusted, steps, torch.inf)


def rooted_walk_steps(dist, sentence: Tensor, root_child: Tensor, with_peak: bool = False):
    """(P,) float64: the expected number of heads Wilson-Marginal's walks draw per tree of
    sentence ``sentence`` (P,) given its ROOT child ``root_child`` (P,) (inf where float64
    cannot tell): tr(G_r) over the other words, from one LU of the multi-root L-hat whose only
    ROOT arc is r's and whose r has ROOT as only head (r is the walk's root). ``with_peak``:
    also (P,) the largest expected number of visits to one word, max_v G_r[v, v] (inf where
    not trusted)."""
    weights, _ = shifted_weights(dist.scores.detach().double()[sentence], dist.arc_mask[sentence])
    pairs = torch.arange(sentence.numel(), device=sentence.device)
    root = torch.zeros_like(weights[:, 0, :])
    root[pairs, root_child] = 1.0
    weights[:, 0, :] = root
    weights[pairs, 1:, root_child] = 0.0
    lengths = dist.lengths[sentence]
    _, inverse, error = fast_inverse(weights, lengths, single_root=False)
    visits = weights.sum(1)[:, 1:] * inverse.diagonal(dim1=-2, dim2=-1)  # G[v, v], words 1..N
    positions = torch.arange(1, weights.shape[-1], device=sentence.device)
    others = (positions <= lengths.unsqueeze(-1)) & (positions != root_child.unsqueeze(-1))
    steps = torch.where(others, visits, 0.0).sum(-1)
    trusted = (error <= STEPS_TOLERANCE) & torch.isfinite(steps) & (steps >= 0)
    steps = torch.where(trusted, steps, torch.inf)
    if with_peak:
        peak = torch.where(others, visits, 0.0).amax(-1) if visits.shape[-1] else torch.zeros_like(steps)
        return steps, torch.where(trusted, peak, torch.inf)
    return steps


#: :func:`walkable`'s answers, per distribution object (a function of its scores, like the
#: engine's cached inference): a distribution sampled again is not analysed again.
_WALKABLE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def walkable(dist, method: str) -> Tensor:
    """(B,) bool: the sentences whose expected draws per tree (:func:`expected_walk_steps`)
    are within :data:`WALK_BUDGET` n (Wilson-Reject: and whose expected tries are within
    MAX_TRIES / 48); the others are sampled by Colbourn's sampler. (``"wilson_marginal"``
    decides per ROOT child drawn: :func:`walkable_given_root`; here, for every possible one.)"""
    known = _WALKABLE.setdefault(dist, {})
    if method not in known:
        budget = WALK_BUDGET * dist.lengths.double()
        fine = expected_walk_steps(dist, method) <= budget
        if method == "wilson_reject":
            fine &= 1 / _acceptance(dist) <= MAX_TRIES / 48
        known[method] = fine
    return known[method]


def walkable_given_root(dist, sentence: Tensor, root_child: Tensor) -> Tensor:
    """(R,) bool: whether Wilson-Marginal's draws of sentences ``sentence`` (R,) with ROOT
    children ``root_child`` (R,) walk: their expected draws (:func:`rooted_walk_steps`) within
    :data:`WALK_BUDGET` n. Each (sentence, root child) pair is analysed once per distribution."""
    budget = WALK_BUDGET * dist.lengths.double()
    return rooted_steps(dist, sentence, root_child) <= budget[sentence]


def rooted_steps(dist, sentence: Tensor, root_child: Tensor) -> Tensor:
    """(R,) :func:`rooted_walk_steps` of the pairs (``sentence``, ``root_child``), each pair
    computed once per distribution (shared by :func:`walkable_given_root` and the ``"auto"``
    sampler's cost model)."""
    known = _WALKABLE.setdefault(dist, {})
    if "given_root" not in known:
        known["given_root"] = torch.full(dist.scores.shape[:2], torch.nan, dtype=torch.float64, device=sentence.device)
    steps = known["given_root"]
    unknown = torch.isnan(steps[sentence, root_child])
    if bool(unknown.any()):
        pairs = torch.unique(torch.stack([sentence[unknown], root_child[unknown]]), dim=1)
        steps[pairs[0], pairs[1]] = rooted_walk_steps(dist, pairs[0], pairs[1])
    return steps[sentence, root_child]


def remember_steps(dist, sentence: Tensor, root_child: Tensor, steps: Tensor) -> None:
    """Store :func:`rooted_walk_steps` of pairs computed elsewhere (see :func:`rooted_steps`)."""
    known = _WALKABLE.setdefault(dist, {})
    if "given_root" not in known:
        known["given_root"] = torch.full(dist.scores.shape[:2], torch.nan, dtype=torch.float64, device=sentence.device)
    known["given_root"][sentence, root_child] = steps


def remembered_steps(dist, index: Tensor, part) -> None:
    """Give ``part`` (the sentences ``index`` of ``dist``, padded to its own size) the ROOT-child walks
    already analysed for ``dist``, so that they are not analysed again."""
    known = _WALKABLE.get(dist, {})
    if "given_root" in known:
        size = part.scores.shape[-1]
        _WALKABLE.setdefault(part, {})["given_root"] = known["given_root"][index, :size].clone()


def _acceptance(dist) -> Tensor:
    """Wilson-Reject's acceptance Z_single / Z_multi (B,), from one LU of the multi-root L-hat
    (0 where it is not trusted)."""
    weights, shift = shifted_weights(dist.scores.detach().double(), dist.arc_mask)
    log_det, _, error = fast_inverse(weights, dist.lengths, single_root=False)
    ratio = torch.exp(dist.log_partition.detach().double() - log_det - shift.sum(-1))
    return torch.where((error <= STEPS_TOLERANCE) & torch.isfinite(ratio), ratio, 0.0)
