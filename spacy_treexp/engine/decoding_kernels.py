"""The numba kernel of :mod:`.decoding`: :class:`.decoding._Arborescence` (Tarjan's dense
Chu–Liu–Edmonds with the single-root swaps) step for step, for a batch of sentences in one
call. Imported by :mod:`.decoding` on first use only: importing this module needs numba.
Same float64 arithmetic, same comparisons, same tie-breaking (the first maximum in slot or
cycle order, ROOT first), so the same trees as the Python reference; a sentence it does not
decode (no tree, or a NaN or +inf weight) is left to the reference, which names the problem."""

from __future__ import annotations

import math

import numpy as np

from spacy_treexp.engine.jit import jit

#: ``status`` of a sentence: decoded; no tree (the reference raises its message); a NaN or
#: +inf weight (left to the reference)
OK, NO_TREE, NOT_HERE = 0, 1, 2

_NEW, _ON_PATH, _DONE = 0, 1, 2


@jit
def best_trees(weights, lengths, todo, single_root, heads, status):
    """For each sentence b with ``todo[b]``: the best tree of ``weights[b, :n+1, :n+1]``
    [head, dep] (float64, -inf: no arc) into ``heads[b, :n+1]`` (-1 at ROOT; the rest of the
    row untouched) and ``status[b]``. ``lengths`` (B,) int64, ``todo`` (B,) bool, ``heads``
    (B, N+1) int64, ``status`` (B,) int64."""
    for b in range(todo.shape[0]):
        if todo[b]:
            status[b] = _best_tree(weights[b], lengths[b], single_root, heads[b])


@jit
def _best_tree(weights, n, single_root, out):
    """:func:`.decoding._best_tree` on ``weights[:n+1, :n+1]``; returns the status."""
    size = n + 1
    incoming = np.empty((size, size))  # [dependent, head]: a node's row
    top, bottom = -np.inf, np.inf
    for v in range(size):
        for u in range(size):
            value = weights[u, v]
            if value != value or value == np.inf:
                return NOT_HERE
            if v == 0 or u == v:
                value = -np.inf
            incoming[v, u] = value
            if value != -np.inf:
                top = max(top, value)
                bottom = min(bottom, value)
    if size == 1:
        out[0] = -1
        return OK
    any_root = False
    for v in range(size):
        if incoming[v, 0] != -np.inf:
            any_root = True
    if not any_root:
        return NO_TREE
    # as the reference: scale by a power of two where nested differences could overflow
    magnitude = max(-bottom if bottom != np.inf else -np.inf, top)
    limit = 2.0**1000 / (4.0 * size)
    if magnitude > limit:
        factor = 2.0 ** (math.frexp(limit)[1] - math.frexp(magnitude)[1])
        for v in range(size):
            for u in range(size):
                incoming[v, u] *= factor
    return _solve(incoming, single_root, out)


@jit
def _find(slot_of, slot):
    while slot_of[slot] != slot:
        slot_of[slot] = slot_of[slot_of[slot]]
        slot = slot_of[slot]
    return slot


@jit
def _choose(slot, from_word, incoming, head, dep, best, best_arc, cost, single_root):
    """The reference's ``_choose``; False where the slot has no possible head."""
    size = incoming.shape[0]
    first = 1 if from_word else 0
    source = first
    for u in range(first + 1, size):
        if incoming[slot, u] > incoming[slot, source]:
            source = u
    value = incoming[slot, source]
    if value == -np.inf:
        return False
    best[slot] = value
    best_arc[slot, 0] = head[slot, source]
    best_arc[slot, 1] = dep[slot, source]
    if single_root and not from_word:
        word_best = incoming[slot, 1]
        for u in range(2, size):
            word_best = max(word_best, incoming[slot, u])
        cost[slot] = value - word_best
    return True


@jit
def _contract(cycle, length, incoming, head, dep, best, best_arc, slot_of, node, forest, members):
    """The reference's ``_contract`` of ``cycle[:length]``; returns the slot merged into.
    ``forest`` (2 size + 1, 3): per node, its parent, its members' start and count in
    ``members``; ``forest[-1, 0]``: nodes so far, ``forest[-1, 1]``: members listed;
    ``members`` (2 size, 3): [i, 0] the i-th member listed, [x, 1:] node x's arc (head, dep)
    when it was contracted."""
    size = incoming.shape[0]
    into = cycle[0]
    in_score = np.empty(size)
    in_head = np.empty(size, dtype=np.int64)
    in_dep = np.empty(size, dtype=np.int64)
    out_score = np.empty(size)
    out_head = np.empty(size, dtype=np.int64)
    out_dep = np.empty(size, dtype=np.int64)
    for w in range(size):
        # entering the cycle at v instead of by its cycle arc gains incoming[v, w] - best[v]
        pick = cycle[0]
        gain = incoming[pick, w] - best[pick]
        for i in range(1, length):
            slot = cycle[i]
            other = incoming[slot, w] - best[slot]
            if other > gain:
                gain, pick = other, slot
        in_score[w], in_head[w], in_dep[w] = gain, head[pick, w], dep[pick, w]
        # leaving the cycle: the best arc from any member
        pick = cycle[0]
        score = incoming[w, pick]
        for i in range(1, length):
            slot = cycle[i]
            if incoming[w, slot] > score:
                score, pick = incoming[w, slot], slot
        out_score[w], out_head[w], out_dep[w] = score, head[w, pick], dep[w, pick]
    for i in range(length):
        slot = cycle[i]
        for w in range(size):
            incoming[slot, w] = -np.inf
            incoming[w, slot] = -np.inf
    for w in range(size):
        incoming[w, into], head[w, into], dep[w, into] = out_score[w], out_head[w], out_dep[w]
    for w in range(size):
        incoming[into, w], head[into, w], dep[into, w] = in_score[w], in_head[w], in_dep[w]
    for i in range(length):
        incoming[into, cycle[i]] = -np.inf
        incoming[cycle[i], into] = -np.inf
    new = forest[-1, 0]
    forest[-1, 0] = new + 1
    start = forest[-1, 1]
    forest[-1, 1] = start + length
    forest[new, 0], forest[new, 1], forest[new, 2] = -1, start, length
    for i in range(length):
        slot = cycle[i]
        member = node[slot]
        members[start + i, 0] = member
        forest[member, 0] = new
        members[member, 1], members[member, 2] = best_arc[slot, 0], best_arc[slot, 1]
        slot_of[slot] = into
    node[into] = new
    return into


@jit
def _solve(incoming, single_root, out):
    """The reference's ``_Arborescence(incoming, single_root).solve()``; returns the status."""
    size = incoming.shape[0]
    head = np.empty((size, size), dtype=np.int64)
    dep = np.empty((size, size), dtype=np.int64)
    for v in range(size):
        for u in range(size):
            head[v, u], dep[v, u] = u, v
    slot_of = np.arange(size)
    node = np.arange(size)
    nodes = 2 * size
    forest = np.zeros((nodes + 1, 3), dtype=np.int64)  # parent, members' start, count
    forest[:, 0] = -1
    forest[-1, 0], forest[-1, 1] = size, 0  # nodes so far, members used
    # members[i, 0]: the i-th member listed (by the cycles' starts); members[x, 1:]: node x's
    # in-arc when it was contracted
    members = np.full((nodes, 3), -1, dtype=np.int64)
    best = np.full(size, -np.inf)
    best_arc = np.full((size, 2), -1, dtype=np.int64)
    cost = np.full(size, np.inf)
    # grow paths of best incoming arcs; contract each cycle they close (Tarjan 1977)
    state = np.zeros(size, dtype=np.int64)
    state[0] = _DONE
    position = np.zeros(size, dtype=np.int64)
    path = np.empty(size + 1, dtype=np.int64)
    cycle = np.empty(size + 1, dtype=np.int64)
    for start in range(1, size):
        if state[start] != _NEW:
            continue
        path[0], length = start, 1
        state[start], position[start] = _ON_PATH, 0
        while length:
            slot = path[length - 1]
            if not _choose(slot, False, incoming, head, dep, best, best_arc, cost, single_root):
                return NO_TREE
            above = _find(slot_of, best_arc[slot, 0])
            if state[above] == _DONE:
                for i in range(length):
                    state[path[i]] = _DONE
                break
            if state[above] == _NEW:
                state[above], position[above] = _ON_PATH, length
                path[length] = above
                length += 1
                continue
            members_of = length - position[above]
            for i in range(members_of):
                cycle[i] = path[position[above] + i]
            length = position[above]
            merged = _contract(cycle, members_of, incoming, head, dep, best, best_arc, slot_of, node, forest, members)
            state[merged], position[merged] = _ON_PATH, length
            path[length] = merged
            length += 1
    if single_root and not _one_root_arc(
        incoming, head, dep, best, best_arc, cost, slot_of, node, forest, members, cycle
    ):
        return NO_TREE
    _expand(best_arc, slot_of, node, forest, members, out)
    return OK


@jit
def _one_root_arc(incoming, head, dep, best, best_arc, cost, slot_of, node, forest, members, cycle):
    """The reference's ``_keep_one_root_arc``; False where no single-root tree exists."""
    size = incoming.shape[0]
    top = np.arange(size)
    live = np.zeros(size, dtype=np.bool_)
    for slot in range(1, size):
        if _find(slot_of, slot) == slot:
            live[slot] = True
            above = _find(slot_of, best_arc[slot, 0])
            top[slot] = slot if above == 0 else above
    while True:  # pointer jumping
        changed = False
        jumped = np.empty(size, dtype=np.int64)
        for slot in range(size):
            jumped[slot] = top[top[slot]]
            changed |= jumped[slot] != top[slot]
        top = jumped
        if not changed:
            break
    root_child = np.zeros(size, dtype=np.bool_)
    children = 0
    for slot in range(size):
        if live[slot] and top[slot] == slot:
            root_child[slot] = True
            children += 1
    while children > 1:
        slot = -1
        for other in range(size):  # the cheapest, the first of equals
            if root_child[other] and (slot < 0 or cost[other] < cost[slot]):
                slot = other
        root_child[slot] = False
        children -= 1
        if not _choose(slot, True, incoming, head, dep, best, best_arc, cost, True):
            return False
        while True:
            above = _find(slot_of, best_arc[slot, 0])
            if above == 0:
                root_child[slot] = True
                children += 1
                break
            if top[above] != slot:
                replace = top[above]
                for other in range(size):
                    if top[other] == slot:
                        top[other] = replace
                break
            cycle[0], length = slot, 1
            while above != slot:
                cycle[length] = above
                length += 1
                above = _find(slot_of, best_arc[above, 0])
            merged = _contract(cycle, length, incoming, head, dep, best, best_arc, slot_of, node, forest, members)
            if not _choose(merged, False, incoming, head, dep, best, best_arc, cost, True):
                return False
            for other in range(size):
                if top[other] == slot:
                    top[other] = merged
            slot = merged
    return True


@jit
def _expand(best_arc, slot_of, node, forest, members, out):
    """The reference's ``_expand`` (Camerini et al. 1979) into ``out`` (n+1,)."""
    size = best_arc.shape[0]
    out[:size] = -1
    stack = np.empty((2 * size + 1, 3), dtype=np.int64)  # node, arc head, arc dep
    depth = 0
    for slot in range(1, size):
        if _find(slot_of, slot) == slot:
            stack[depth, 0], stack[depth, 1], stack[depth, 2] = node[slot], best_arc[slot, 0], best_arc[slot, 1]
            depth += 1
    while depth:
        depth -= 1
        top, arc_head, word = stack[depth, 0], stack[depth, 1], stack[depth, 2]
        out[word] = arc_head
        below = word
        while below != top:
            cycle = forest[below, 0]
            start, count = forest[cycle, 1], forest[cycle, 2]
            for i in range(count):
                member = members[start + i, 0]
                if member != below:
                    stack[depth, 0], stack[depth, 1], stack[depth, 2] = member, members[member, 1], members[member, 2]
                    depth += 1
            below = cycle
