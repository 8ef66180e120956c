"""The numba kernel of Colbourn's trapped-word steps (phase 1 of
:class:`.colbourn.TrappedModel`), settled and unsettled states alike, so that no row leaves
the kernel for torch (but one with no possible head, which torch then names), and the
stochastic beam search over the same steps (:func:`trapped_beams`). Imported by
:mod:`.fused` on first use only: importing this module needs numba. Each function mirrors
its torch twin, named in its docstring: the same steps and sums up to rounding, skipping
the terms whose exp is 0 in float64."""

from __future__ import annotations

import math

import numpy as np

from spacy_treexp.engine.jit import jit
from spacy_treexp.engine.sampling.fused_kernels import (
    exact_conditionals,
    head_row,
    log_add,
    softplus,
    strong_sets,
    uniform,
)


@jit
def log_sum(values, first, last):
    """log sum_x exp(values[x]) for x in first..last-1, as torch.logsumexp (shifted by the
    largest; -inf where every term is -inf)."""
    top = -np.inf
    for x in range(first, last):
        if values[x] > top:
            top = values[x]
    if not top > -np.inf:
        return top
    total = 0.0
    for x in range(first, last):
        gap = values[x] - top
        if gap > -746.0:
            total += math.exp(gap)
    return top + math.log(total)


@jit
def unsettled_row(g, fixed, j, exits, trace, scores, order, count, meets, log_leak, out, work):
    """trapped.unsettled_conditionals (the reference) for one state: trapped word j's head
    distribution (N+1,) into ``out``, given the heads ``fixed`` (>= j-1,) of trapped words
    1..j-1 of group ``g``; ``meets``: the groups' first meetings for this j (G, P+1, j+1);
    ``log_leak``: log of the leak below which a step is left out. ``work``: scratch (at
    least (P+1)^2 + 2 (P+3)^2 + 5 (P+3) floats). Returns the small chain's node updates
    (unsettled words x (P+1) x (j+1), as the reference counts them)."""
    nodes = exits.shape[2]
    fixed_words = j - 1
    width = nodes + 2
    # scratch views
    columns = work[: fixed_words * nodes].reshape((fixed_words, nodes))
    rest = work[fixed_words * nodes :]
    small = rest[: width * width].reshape((width, width))
    steps = rest[width * width : 2 * width * width].reshape((width, width))
    line = rest[2 * width * width : 2 * width * width + width]
    solved = rest[2 * width * width + width : 2 * width * width + 2 * width]
    near = rest[2 * width * width + 2 * width : 2 * width * width + 3 * width]
    reach = rest[2 * width * width + 3 * width : 2 * width * width + 4 * width]
    meet = rest[2 * width * width + 4 * width : 2 * width * width + 5 * width]
    support = np.zeros((fixed_words, nodes), dtype=np.bool_)
    stand = np.empty(j + 1, dtype=np.int64)
    jumped = np.empty(j + 1, dtype=np.int64)
    # each fixed word's next step (its own slot left out), and where it may go (above the leak)
    for i in range(fixed_words):
        for x in range(nodes):
            columns[i, x] = -np.inf if x == i + 1 else exits[g, fixed[i], x]
        least = log_sum(columns[i], 0, nodes) + log_leak
        found, first = 0, -1
        for x in range(nodes):
            if columns[i, x] > least:
                support[i, x] = True
                found += 1
                if first < 0:
                    first = x
        # a word that surely steps to one node of ROOT, 1..j stands for it
        stand[i + 1] = first if found == 1 and first <= j else i + 1
    stand[0], stand[j] = 0, j
    for _ in range(max(1, math.ceil(math.log2(j + 1)))):
        for x in range(j + 1):
            jumped[x] = stand[stand[x]]
        stand[:] = jumped
    # unsettled: a word standing for itself whose next step may reach j, a later word, or a
    # word that stands for j or for an unsettled word
    itself = np.empty(fixed_words, dtype=np.bool_)
    unsettled = np.empty(fixed_words, dtype=np.bool_)
    spread = np.empty(fixed_words, dtype=np.bool_)
    for i in range(fixed_words):
        itself[i] = stand[i + 1] == i + 1
        far = False
        for x in range(j + 1, nodes):
            far |= support[i, x]
        for x in range(j + 1):
            far |= support[i, x] and stand[x] == j
        unsettled[i] = itself[i] and far
    for _ in range(j - 1):
        changed = False
        for i in range(fixed_words):
            spread[i] = unsettled[i]
            if itself[i] and not unsettled[i]:
                for x in range(j + 1):
                    if support[i, x] and 1 <= stand[x] < j and unsettled[stand[x] - 1]:
                        spread[i] = True
                        changed = True
                        break
        unsettled[:] = spread
        if not changed:
            break
    # the small chain: 0 ROOT (and what reaches it surely), 1 word j, 2.. the unsettled words
    which = np.empty(fixed_words, dtype=np.int64)
    node = np.zeros(j + 1, dtype=np.int64)
    most = 0
    for i in range(fixed_words):
        if unsettled[i]:
            which[most] = i
            node[i + 1] = 2 + most
            most += 1
    node[j] = 1
    place = np.empty(j + 1, dtype=np.int64)
    for x in range(j + 1):
        place[x] = node[stand[x]]
    # the unsettled words' next steps carried through the free words onto ROOT and 1..j
    # (log_matmul with the identity on 0..j and ``meets`` below), gathered by chain node
    for c in range(most + 2):
        for k in range(most):
            small[c, k] = -np.inf
    onto = np.empty(j + 1)
    for k in range(most):
        row = columns[which[k]]
        for y in range(j + 1):
            top = row[y]
            for x in range(j + 1, nodes):
                value = row[x] + meets[g, x, y]
                if value > top:
                    top = value
            if not top > -np.inf:
                onto[y] = top
                continue
            total = 0.0
            gap = row[y] - top
            if gap > -746.0:
                total += math.exp(gap)
            for x in range(j + 1, nodes):
                gap = row[x] + meets[g, x, y] - top
                if gap > -746.0:
                    total += math.exp(gap)
            onto[y] = top + math.log(total)
        for c in range(most + 2):  # trapped._log_scatter: each bucket shifted by its largest
            top = -np.inf
            for y in range(j + 1):
                if place[y] == c and onto[y] > top:
                    top = onto[y]
            shift = top if abs(top) < np.inf else 0.0
            total = 0.0
            for y in range(j + 1):
                if place[y] == c:
                    total += math.exp(onto[y] - shift)
            small[c, k] = math.log(total) + shift if total > 0.0 else -np.inf
        small[2 + k, k] = -np.inf
    # GTH: eliminate the unsettled words in turn, then P(ROOT before j) backwards
    for u in range(most):
        for c in range(most + 2):
            line[c] = small[c, u] if c != u + 2 and (c < 2 or c - 2 >= u) else -np.inf
        pivot = log_sum(line, 0, most + 2)
        shift = pivot if abs(pivot) < np.inf else 0.0
        for c in range(most + 2):
            steps[u, c] = line[c] - shift
        for c in range(most + 2):
            for v in range(most):
                small[c, v] = log_add(small[c, v], steps[u, c] + small[u + 2, v])
    solved[0] = 0.0
    for c in range(1, most + 2):
        solved[c] = -np.inf
    for u in range(most - 1, -1, -1):
        for c in range(most + 2):
            line[c] = steps[u, c] + solved[c]
        solved[u + 2] = log_sum(line, 0, most + 2)
    for x in range(j + 1):
        near[x] = solved[place[x]]
        reach[x] = near[x]
    for x in range(j + 1, nodes):
        reach[x] = -np.inf
        if x <= count[g]:
            for y in range(j + 1):
                line[y] = meets[g, x, y] + near[y]
            reach[x] = log_sum(line, 0, j + 1)
    head_row(scores[g, :, order[g, j - 1]], exits[g], trace[g, :, j], reach[:nodes], meet[:nodes], out)
    return most * nodes * (j + 1)


@jit
def trapped_walk(
    tables,
    group,
    uniforms,
    fixed,
    reaches,
    horizon,
    log_prob,
    start,
    state,
):
    """The trapped-word steps of :class:`.colbourn.TrappedModel` (phase 1, steps t = 1..most
    count) for every row, step after step: :meth:`TrappedModel.probs` (a settled state reads
    ``settled``; each other distinct state its :func:`unsettled_row`, once per step) drawn as
    :func:`.colbourn.draw_positive` draws (the first head whose running sum exceeds
    ``uniforms[r, t-1]`` times the total), then :meth:`TrappedModel.fix`: ``fixed``,
    ``reaches``, ``horizon`` updated and ``state`` (R,) (each row's group on entry) numbered
    as torch.unique numbers the keys state * (N+2) + choice (N+1 for a row not at step t).
    ``meets``: the groups' first meetings for each j (G, P+1, j+1), flat, from ``offsets[j-1]``
    (as :meth:`.trapped.Groups.meets` holds them). A row with no possible
    head stops: ``start[r]`` is that step (0: every step done). Returns the node updates of
    the unsettled states' small chains (see :func:`unsettled_row`)."""
    settled, count, last, second, exits, trace, scores, order, meets, offsets, log_leak = tables  # group_tables
    rows, width, size = group.shape[0], settled.shape[1], settled.shape[2]
    groups, nodes = exits.shape[0], exits.shape[2]
    words = size - 1
    steps = 0
    for r in range(rows):
        start[r] = 0
        if group[r] >= 0 and count[group[r]] > steps:
            steps = count[group[r]]
    lowest = 0  # (a row of no group, -1, numbers below the others: shifting keeps the order)
    for r in range(rows):
        lowest = min(lowest, state[r])
    states = 1
    for r in range(rows):
        state[r] -= lowest
        states = max(states, state[r] + 1)
    capacity = max(states, rows)
    probs = np.empty((capacity, size))
    stamp = np.zeros(capacity, dtype=np.int64)  # the step at which a state's probs were made
    marks = np.zeros(capacity * (words + 2), dtype=np.int64)
    keys = np.empty(rows, dtype=np.int64)
    work = np.empty(nodes * nodes + 2 * (nodes + 2) ** 2 + 5 * (nodes + 2))
    made = 0
    for t in range(1, steps + 1):
        block = meets[offsets[t - 1] : offsets[t - 1] + groups * nodes * (t + 1)].reshape((groups, nodes, t + 1))
        for r in range(rows):
            g = group[r]
            choice = words + 1
            if g >= 0 and count[g] >= t and start[r] == 0:
                if horizon[r] >= t:  # an unsettled state: its own reduction, once per state
                    s = state[r]
                    if stamp[s] != t:
                        made += unsettled_row(
                            g, fixed[r], t, exits, trace, scores, order, count, block, log_leak, probs[s], work
                        )
                        stamp[s] = t
                    row = probs[s]
                else:
                    row = settled[g, min(t, width) - 1]
                total = 0.0
                for x in range(size):
                    total += row[x]
                if not total > 0.0:
                    start[r] = t
                else:
                    target = uniforms[r, t - 1] * total
                    head = size - 1
                    running = 0.0
                    for x in range(size):
                        running += row[x]
                        if running > target:
                            head = x
                            break
                    log_prob[r] += math.log(row[head] / total)
                    fixed[r, t - 1] = head
                    found = last[g, head]
                    reached = second[g, head] if found == t else found
                    reaches[r, t - 1] = reached
                    if reached > horizon[r]:
                        horizon[r] = reached
                    choice = head
            keys[r] = state[r] * (words + 2) + choice
        # the new states, numbered in the order of their keys (as torch.unique)
        span = states * (words + 2)
        for r in range(rows):
            marks[keys[r]] = 1
        states = 0
        for key in range(span):
            if marks[key]:
                marks[key] = states + 1
                states += 1
        for r in range(rows):
            state[r] = marks[keys[r]] - 1
        for key in range(span):
            marks[key] = 0
    return made


@jit
def exact_rows(scores, sentence, end, m, lengths, probs):
    """:func:`.fused_kernels.exact_conditionals` for each row r: word m's head distribution
    (N+1,) into ``probs[r]`` under the multi-root log-weights ``scores[sentence[r]]`` given the
    heads fixed so far (``end[r]``: where each word's chain of fixed heads ends, N+1 at ROOT,
    as :class:`.colbourn.Conditioner` keeps it), for a row of ``lengths[r]`` words."""
    size = scores.shape[-1]
    chain = np.empty((size, size))
    reach = np.empty(size)
    leave = np.empty(size)
    for r in range(sentence.shape[0]):
        exact_conditionals(scores, sentence[r], end, probs, r, m, lengths[r], size, chain, reach, leave)


@jit
def strong_sets_batch(values, lengths, with_root, bound, found, counts):
    """:func:`.fused_kernels.strong_sets` of every sentence b (its first ``lengths[b]`` + 1 rows
    and columns of ``values``) in one call: its sets' word masks into ``found[b]``
    (N+1, N+1) bool, zeros on entry, and their number into ``counts[b]``."""
    for b in range(values.shape[0]):
        n = lengths[b]
        counts[b] = strong_sets(values[b, : n + 1, : n + 1], with_root, bound, found[b])


@jit
def log_expm1(x):
    """log(e^x - 1) for x > 0, without overflow (x + log1p(-e^-x) above 1)."""
    if x > 1.0:
        return x + math.log1p(-math.exp(-x))
    return math.log(math.expm1(x))


@jit
def trapped_beams(
    tables,
    group,
    fixed,
    reaches,
    horizon,
    gumbel,
    log_p,
    seeds,
    floor,
):
    """Stochastic beam search over the trapped-word steps (1..N) of :class:`.colbourn.TrappedModel`
    (without_replacement._beam_steps over them, the reference), sentence after sentence: sentence
    b's beams are the rows b * k .. b * k + k - 1 (k = ``gumbel.shape[1]``) with a Gumbel
    ``gumbel[b, i]`` > -inf, each in its own state (``group``, ``fixed``, ``reaches``,
    ``horizon``, as TrappedModel keeps them). At step t a beam whose group has fewer than t
    trapped words keeps itself as its only child; another's children are the heads of its
    conditionals (a settled state reads ``settled``, another its :func:`unsettled_row`), with
    truncated Gumbels (Kool et al. 2019, eq. 23, in log space: G = T - softplus(m +
    log(e^(a - m) - 1)), a = log(E e^(T - l) / q), m the beam's smallest a; no overflow, however
    small q). The k best children of all beams are kept (a beam whose T is below the k-th best
    child found so far is not reduced: all its children are below T); the new beams take the
    rows in decreasing Gumbel, their states updated as TrappedModel.fix updates them (a row of
    no beam gets group -1 and Gumbel -inf). Uniforms from a SplitMix64 stream seeded with
    ``seeds[b]``. A child whose Gumbel is not above ``floor[b]`` is dropped (the caller holds k
    better prefixes). Updates every state array, ``gumbel`` and ``log_p`` (B, k) in place; returns
    the node updates of the unsettled states' small chains (see :func:`unsettled_row`)."""
    settled, count, last, second, exits, trace, scores, order, meets, offsets, log_leak = tables  # group_tables
    batch, k = gumbel.shape
    width, size = settled.shape[1], settled.shape[2]
    groups, nodes = exits.shape[0], exits.shape[2]
    made = 0
    rng = np.zeros(1, dtype=np.uint64)
    probs = np.empty(size)
    work = np.empty(nodes * nodes + 2 * (nodes + 2) ** 2 + 5 * (nodes + 2))
    beam_order = np.empty(k, dtype=np.int64)
    best_value = np.empty(k)
    best_beam = np.empty(k, dtype=np.int64)
    best_head = np.empty(k, dtype=np.int64)
    best_step = np.empty(k)
    keys = np.empty(size)
    old_group = np.empty(k, dtype=np.int64)
    old_fixed = np.empty((k, fixed.shape[1]), dtype=np.int64)
    old_reaches = np.empty((k, fixed.shape[1]), dtype=np.int64)
    old_horizon = np.empty(k, dtype=np.int64)
    old_gumbel = np.empty(k)
    old_log_p = np.empty(k)
    for b in range(batch):
        rng[0] = np.uint64(seeds[b])
        base = b * k
        steps = 0
        for i in range(k):
            g = group[base + i]
            if gumbel[b, i] > -np.inf and g >= 0 and count[g] > steps:
                steps = count[g]
        for t in range(1, steps + 1):
            block = meets[offsets[t - 1] : offsets[t - 1] + groups * nodes * (t + 1)].reshape((groups, nodes, t + 1))
            # the live beams by decreasing Gumbel
            live = 0
            for i in range(k):
                if gumbel[b, i] > -np.inf:
                    at = live
                    while at > 0 and gumbel[b, beam_order[at - 1]] < gumbel[b, i]:
                        beam_order[at] = beam_order[at - 1]
                        at -= 1
                    beam_order[at] = i
                    live += 1
            found = 0  # candidates kept, best_value[:found] (unsorted), its smallest at ``low``
            low = 0
            for o in range(live):
                i = beam_order[o]
                r = base + i
                T = gumbel[b, i]
                if not T > floor[b] or (found == k and not T > best_value[low]):
                    break  # this beam's children and every later beam's are below the k kept
                g = group[r]
                candidates = 0
                total = 1.0
                if g < 0 or count[g] < t:  # keeps itself
                    keys[0] = T
                    probs[0] = 1.0
                    candidates = -1
                else:
                    if horizon[r] >= t:
                        made += unsettled_row(
                            g, fixed[r], t, exits, trace, scores, order, count, block, log_leak, probs, work
                        )
                    else:
                        probs[:] = settled[g, min(t, width) - 1]
                    total = 0.0
                    for h in range(size):
                        total += probs[h]
                    if not total > 0.0:
                        continue  # no possible head: the beam has no child
                    rho = T - log_p[b, i] + math.log(total)  # a = log E + rho - log q (q unnormalised)
                    smallest = np.inf
                    for h in range(size):
                        if probs[h] > 0.0:
                            u = uniform(rng)
                            while u == 0.0:
                                u = uniform(rng)
                            keys[h] = math.log(-math.log(u)) + rho - math.log(probs[h])
                            if keys[h] < smallest:
                                smallest = keys[h]
                        else:
                            keys[h] = np.inf
                    # a child enters the k kept only if G > V, the smallest kept: a - m < limit
                    limit = np.inf
                    least = max(floor[b], best_value[low]) if found == k else floor[b]
                    if least > -np.inf:
                        limit = softplus(log_expm1(T - least) - smallest)
                        limit += 1e-9 * (abs(limit) + 1.0)  # (never skip one that rounding lets in)
                    for h in range(size):
                        gap = keys[h] - smallest
                        if keys[h] < np.inf and gap < limit:
                            keys[h] = T if gap == 0.0 else T - softplus(smallest + log_expm1(gap))
                        else:
                            keys[h] = -np.inf
                    candidates = size
                for h in range(max(candidates, 1)):
                    value = keys[h]
                    if not value > floor[b]:
                        continue
                    if found < k:
                        best_value[found] = value
                        best_beam[found] = i
                        best_head[found] = h if candidates > 0 else -1
                        best_step[found] = math.log(probs[h] / total) if candidates > 0 else 0.0
                        found += 1
                    elif value > best_value[low]:
                        best_value[low] = value
                        best_beam[low] = i
                        best_head[low] = h if candidates > 0 else -1
                        best_step[low] = math.log(probs[h] / total) if candidates > 0 else 0.0
                    else:
                        continue
                    if found == k:
                        low = 0
                        for x in range(1, k):
                            if best_value[x] < best_value[low]:
                                low = x
            # the new beams in decreasing Gumbel, each in row base + j
            for x in range(1, found):
                at = x
                while at > 0 and best_value[at - 1] < best_value[at]:
                    best_value[at - 1], best_value[at] = best_value[at], best_value[at - 1]
                    best_beam[at - 1], best_beam[at] = best_beam[at], best_beam[at - 1]
                    best_head[at - 1], best_head[at] = best_head[at], best_head[at - 1]
                    best_step[at - 1], best_step[at] = best_step[at], best_step[at - 1]
                    at -= 1
            for i in range(k):
                r = base + i
                old_group[i] = group[r]
                old_fixed[i] = fixed[r]
                old_reaches[i] = reaches[r]
                old_horizon[i] = horizon[r]
                old_gumbel[i] = gumbel[b, i]
                old_log_p[i] = log_p[b, i]
            for j in range(k):
                r = base + j
                if j >= found:
                    group[r] = -1
                    gumbel[b, j] = -np.inf
                    log_p[b, j] = -np.inf
                    continue
                i = best_beam[j]
                g = old_group[i]
                group[r] = g
                fixed[r] = old_fixed[i]
                reaches[r] = old_reaches[i]
                horizon[r] = old_horizon[i]
                gumbel[b, j] = best_value[j]
                log_p[b, j] = old_log_p[i] + best_step[j]
                head = best_head[j]
                if head >= 0:  # TrappedModel.fix at step t
                    fixed[r, t - 1] = head
                    reached = last[g, head]
                    if reached == t:
                        reached = second[g, head]
                    reaches[r, t - 1] = reached
                    if reached > horizon[r]:
                        horizon[r] = reached
    return made
