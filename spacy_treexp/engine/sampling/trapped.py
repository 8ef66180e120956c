"""Exact conditionals for sentences whose L-hat Sherman-Morrison cannot follow: peaked scores.

Colbourn's sampler (:mod:`.colbourn`) reads each word's conditional head distribution off
L-hat^{-1} and updates it by rank-one steps. Both are accurate while the walk of Wilson's
algorithm (word m steps to head h with probability w(h -> m) / sum_h' w(h' -> m)) leaves every
set of words quickly. Peaked scores bind sets of words: a cycle of each other's best heads
whose arcs from the rest of the sentence are e^-100 below its own arcs (a *strongly bound
set*). A walk entering it stays ~e^100 steps, and L-hat is singular in float64 (its column
sums cancel to the set's exit weight); at x1000 the exit weights are not even representable
beside the set's own arcs. Refactorising on the engine's stable path at every word, the old
remedy, cost O(n^3) log-space operations per word, O(n^4) per tree.

Here such a sentence is sampled in three phases, each an exact conditional distribution, so
their product is the tree distribution:

0. single-root: the child r of ROOT, from its exact marginal (the engine's stable marginals,
   computed once per sentence); the rest of the tree is then a tree rooted at r (ROOT's other
   arcs are impossible), a walk absorbed at ROOT through r. Multi-root sentences skip this.
1. the *trapped* words E: the words of the strongly bound sets (Chu-Liu-Edmonds cycles at any
   level of contraction whose walks return more than e^:data:`BOUND_NATS` times,
   :class:`StrongSets`), less the sets that contain r, visited top-down in the best tree.
   The other words K are eliminated once per (sentence, r) by GTH state reduction (sums of
   positive terms only; Grassmann, Taksar & Heyman 1985): that leaves the trace of the walk on
   E and ROOT and each K word's exit distribution onto them. Word t of E then takes head h
   with probability proportional to w(h -> t) P_h(the walk reaches ROOT before t) (Wilson
   1996: the last exit decomposition of the tree's arcs), those absorption probabilities
   computed on the small trace chain in log space, where nothing underflows; a fixed word's
   column becomes the law of its next step. A fixed word whose next step leads only to ROOT
   and to words fixed before is *settled*: it reaches ROOT surely, whatever its head. While
   every fixed word is settled (the usual case: heads are mostly taken top-down), word t's
   head distribution is the same in every state, read from a table made once per (sentence,
   r) (:func:`_settled_conditionals`, O(e^3 + n e^2)); otherwise only the u unsettled words
   enter a small chain (:func:`unsettled_conditionals`, O(u e n + u^3) per state; the full
   reduction :func:`trapped_conditionals`, O(e^3) per word, is the reference).
2. the remaining words, given r and E's heads: the sentence's arcs that would close a cycle
   with the fixed heads are removed and each column is rescaled; no strongly bound set is
   left, so L-hat is well conditioned again and Colbourn's Sherman-Morrison updates finish
   the tree (:class:`.colbourn.Conditioner`), from one LU factorisation per distinct
   (sentence, r, heads of E) in the batch. (Unlikely heads of E can bind new sets: a
   stochastic beam search meets them. Its fused kernel then gives such a beam exact
   log-space conditionals, :func:`.fused_kernels.exact_conditionals`; the torch code
   refactorises on the engine's stable path.)

:class:`TrappedModel` offers these phases to every sampler (Colbourn, stochastic beam search,
the trie) as a sequence of *steps*, each a categorical over N + 1 choices: step 0 the root
child, steps 1..N the words of E, steps N+1..2N the words 1..N (those of E and r then have
one possible head). A step a row does not take has the single choice 0 and probability 1.

With numba (:func:`spacy_treexp.engine.native.native_enabled`), the strongly bound sets, the
trace chains' columns, the settled tables and the unsettled states' carried walks and head
distributions run in fused kernels (:mod:`.fused`): the same sets, and the same sums up to
rounding, skipping the terms whose exp is 0 in float64 (most, on peaked scores). The numpy
and torch code here stays the reference (tests compare both).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from spacy_treexp.engine.decoding import max_spanning_trees
from spacy_treexp.engine.native import native_enabled
from spacy_treexp.engine.sampling import work

NEG_INF = float("-inf")

#: A set of words is strongly bound when a walk that enters it returns to its words more than
#: e^BOUND_NATS times (its binding, below): Sherman-Morrison's conditionals for them lose about
#: that factor of float64's precision. With such sets' words fixed first, L-hat's condition
#: number stays below about n e^BOUND_NATS, so the remaining conditionals are good to ~1e-9.
BOUND_NATS = math.log(1e6)


# ---------------------------------------------------------------- strongly bound sets
@dataclass
class StrongSets:
    """Strongly bound sets of each sentence (a laminar family: nested or disjoint).

    masks (B, M, N+1) bool: the set's words (padding: all False).
    """

    masks: Tensor

    @classmethod
    def of(cls, scores: Tensor, lengths: Tensor, with_root: bool) -> StrongSets:
        """``scores`` (B, N+1, N+1) float64 log-weights, -inf on the arcs that are not allowed;
        ``with_root``: whether ROOT heads words (multi-root), else the word-only graph."""
        values = scores.detach().to("cpu", torch.float64)
        if native_enabled(values):  # the same sets by the fused kernel, the batch in one call
            from spacy_treexp.engine.sampling import fused

            lengths_cpu = lengths.to("cpu", torch.int64)
            return cls(fused.strong_set_masks(values, lengths_cpu, with_root, BOUND_NATS).to(scores.device))
        found = [
            _strong_sets(values.numpy()[b, : n + 1, : n + 1], with_root, BOUND_NATS)
            for b, n in enumerate(lengths.tolist())
        ]
        batch, size = scores.shape[0], scores.shape[-1]
        masks = np.zeros((batch, max(1, max(len(sets) for sets in found)), size), dtype=bool)
        for b, sets in enumerate(found):
            for i, members in enumerate(sets):
                masks[b, i, : members.shape[0]] = members
        return cls(torch.from_numpy(masks).to(scores.device))

    def trapped(self, sentence: Tensor, root_child: Tensor | None) -> Tensor:
        """(G, N+1) bool: the trapped words of each (sentence, root child) pair: the words of
        the sets that do not contain the root child (None: multi-root, every set)."""
        masks = self.masks[sentence]
        if root_child is not None:
            index = root_child.view(-1, 1, 1).expand(-1, masks.shape[1], 1)
            masks = masks & ~masks.gather(2, index)
        return masks.any(1)


def _strong_sets(scores: np.ndarray, with_root: bool, bound: float) -> list[np.ndarray]:
    """The strongly bound sets of one sentence (n+1, n+1), as word masks (n+1,).

    Chu-Liu-Edmonds contraction (Chu & Liu 1965; Edmonds 1967) on sums instead of maxima:
    every node's best head; each cycle of best heads is contracted into one node whose
    entering arcs are summed relative to the cycle's own arcs (log-sum-exp of s(x -> c) -
    s(best(c) -> c)) and whose outgoing arcs are summed. The log of a cycle's entering weight
    is its *binding* (<= 0): a walk that enters it stays about e^-binding steps. Bindings add
    up through nested contractions (a walk trapped in a cycle of nodes that are themselves
    trapped cycles stays the product of the two times), so a set is strongly bound when its
    binding plus its most bound member's is below -bound. Repeated until no cycle is left: at
    most n levels, each O(n^2).
    """
    n = scores.shape[0] - 1
    s = scores.copy()
    s[:, 0] = NEG_INF
    np.fill_diagonal(s, NEG_INF)
    if not with_root:
        s[0, :] = NEG_INF
    members = np.eye(n + 1, dtype=bool)  # node i holds the words members[i]
    binding = np.zeros(n + 1)  # of each node: the sum along its most bound nesting (0: a word)
    found: list[np.ndarray] = []
    with np.errstate(invalid="ignore"):
        while True:
            size = s.shape[0]
            best = np.argmax(s, axis=0)
            has_head = np.isfinite(s[best, np.arange(size)])
            has_head[0] = False
            cycles = _cycles(best, has_head)
            if not cycles:
                return found
            adjusted = s.copy()
            keep = np.ones(size, dtype=bool)
            for cycle in cycles:
                adjusted[:, cycle] -= s[best[cycle], cycle]
            for cycle in cycles:
                first = cycle[0]
                adjusted[first, :] = np.logaddexp.reduce(adjusted[cycle, :], axis=0)
                adjusted[:, first] = np.logaddexp.reduce(adjusted[:, cycle], axis=1)
                adjusted[first, first] = NEG_INF
                keep[cycle[1:]] = False
                members[first] = members[cycle].any(0)
            for cycle in cycles:
                first = cycle[0]
                outside = keep.copy()
                outside[first] = False
                entering = adjusted[outside, first]
                own = np.logaddexp.reduce(entering) if entering.size else NEG_INF
                binding[first] = min(own, 0.0) + binding[cycle].min()
                if binding[first] < -bound:
                    found.append(members[first].copy())
            s = adjusted[np.ix_(keep, keep)]
            members = members[keep]
            binding = binding[keep]


def _cycles(best: np.ndarray, has_head: np.ndarray) -> list[np.ndarray]:
    """The cycles of the functional graph node -> best[node] (nodes without a head end paths)."""
    state = np.zeros(best.shape[0], dtype=np.int8)  # 0 unseen, 1 on the current path, 2 done
    cycles = []
    for start in range(1, best.shape[0]):
        path = []
        node = start
        while has_head[node] and state[node] == 0:
            state[node] = 1
            path.append(node)
            node = best[node]
        if has_head[node] and state[node] == 1:
            cycles.append(np.array(path[path.index(node) :]))
        state[path] = 2
    return cycles


# ---------------------------------------------------------------- (sentence, root child) groups
@dataclass
class Groups:
    """Phase 1's data for each (sentence, root child) pair ("group"); P = the most trapped words.

    scores (G, N+1, N+1) float64: the sentence's log-weights given the root child (ROOT's
    only arc is r -> ..., r's only head is ROOT; multi-root: the sentence's), -inf elsewhere;
    order (G, P): the trapped words in index order (0-padded); count (G,): how many;
    trapped (G, N+1) bool; exits (G, N+1, P+1): log of the probability that the walk from each
    node first meets ROOT (column 0) or trapped word i (column i) there, the other words
    eliminated (a one-hot row for ROOT and the trapped words themselves); trace (G, P+1, P+1):
    log-weights of the trace chain on ROOT and the trapped words [from, into]; root_child (G,):
    r (0: multi-root); settled (G, P, N+1): each trapped word's head distribution in the
    states whose fixed trapped words are settled (:func:`_settled_conditionals`); meets[j-1]
    (G, P+1, j+1): log, where the walk from each trapped word after j first meets ROOT or words
    1..j (the others eliminated).
    """

    scores: Tensor
    order: Tensor
    count: Tensor
    trapped: Tensor
    exits: Tensor
    trace: Tensor
    root_child: Tensor
    settled: Tensor
    meets: list[Tensor]

    def __len__(self) -> int:
        return self.scores.shape[0]

    def cat(self, other: Groups) -> Groups:
        """Both groups' data, in this order (the trapped-word axes padded to the larger)."""
        most = max(self.order.shape[1], other.order.shape[1])

        pad = torch.nn.functional.pad

        def padded(groups: Groups) -> tuple[Tensor, Tensor, Tensor, Tensor, list[Tensor]]:
            extra = most - groups.order.shape[1]
            order = pad(groups.order, (0, extra))
            exits = pad(groups.exits, (0, extra), value=NEG_INF)
            trace = pad(groups.trace, (0, extra, 0, extra), value=NEG_INF)
            settled = pad(groups.settled, (0, 0, 0, extra))
            meets = [pad(block, (0, 0, 0, extra), value=NEG_INF) for block in groups.meets]
            meets += [trace.new_full((len(groups), most + 1, j + 1), NEG_INF) for j in range(len(meets) + 1, most + 1)]
            return order, exits, trace, settled, meets

        (order_a, exits_a, trace_a, settled_a, meets_a) = padded(self)
        (order_b, exits_b, trace_b, settled_b, meets_b) = padded(other)
        return Groups(
            torch.cat([self.scores, other.scores]),
            torch.cat([order_a, order_b]),
            torch.cat([self.count, other.count]),
            torch.cat([self.trapped, other.trapped]),
            torch.cat([exits_a, exits_b]),
            torch.cat([trace_a, trace_b]),
            torch.cat([self.root_child, other.root_child]),
            torch.cat([settled_a, settled_b]),
            [torch.cat([a, b]) for a, b in zip(meets_a, meets_b)],
        )

    @classmethod
    def of(
        cls, scores: Tensor, lengths: Tensor, trapped: Tensor, root_child: Tensor, depth: Tensor | None = None
    ) -> Groups:
        """The groups of ``scores`` (G, N+1, N+1); ``depth`` (G, N+1): each word's depth in the
        tree that orders the trapped words (:func:`word_depths`; by default each group's own
        best tree). Any order gives the exact conditionals; top-down in a likely tree keeps the
        fixed words settled."""
        size = scores.shape[-1]
        positions = torch.arange(size, device=scores.device)
        words = (positions >= 1) & (positions <= lengths.unsqueeze(-1))
        count = trapped.sum(-1)
        most = max(1, int(count.max()))
        # the trapped words top-down in the best tree (then by index): a word's likely head is
        # then fixed before it (see :func:`_settled_conditionals`); the first ``count`` are E
        if depth is None:
            depth = word_depths(scores, lengths, single_root=False)
        key = torch.where(trapped, depth * size + positions, size * size + positions)
        order = torch.argsort(key, dim=-1, stable=True)[:, :most]
        order = torch.where(torch.arange(most, device=scores.device) < count.unsqueeze(-1), order, 0)
        targets = trapped.clone()
        targets[:, 0] = True
        slot = torch.arange(1, most + 1, device=scores.device).expand_as(order)
        used = slot <= count.unsqueeze(-1)
        compact = torch.full((scores.shape[0], size), -1, dtype=torch.long, device=scores.device)
        compact.scatter_(1, torch.where(used, order, 0), torch.where(used, slot, 0))
        compact[:, 0] = 0  # ROOT's slot (padded order entries also wrote there)
        native = native_enabled(scores)  # the fused kernels: the same results up to rounding
        if native:
            from spacy_treexp.engine.sampling import fused

            exits = fused.exit_distribution(scores, words & ~trapped, targets, compact, most)
        else:
            exits = _exit_distribution(scores, words & ~trapped, targets, compact, most)
        trace = torch.full((scores.shape[0], most + 1, most + 1), NEG_INF, dtype=scores.dtype, device=scores.device)
        if native:
            fused.trace_columns(scores, order, exits, trace)
        for t in range(0 if native else most):
            # into trapped word t+1: its direct arcs and the paths through the free words
            into = scores.gather(2, order[:, t].view(-1, 1, 1).expand(-1, size, 1))  # (G, N+1, 1)
            trace[:, :, t + 1] = torch.logsumexp(into + exits, dim=1)
        loops = torch.eye(most + 1, dtype=torch.bool, device=scores.device)
        unused = torch.arange(most + 1, device=scores.device) > count.view(-1, 1)
        trace = trace.masked_fill(loops | unused.unsqueeze(1) | unused.unsqueeze(2), NEG_INF)
        if native:
            settled, meets = fused.settled_tables(scores, order, count, exits, trace)
        else:
            settled, meets = _settled_conditionals(scores, order, count, exits, trace)
        work.add("setup_nodes", int(words.sum()) * size + int(count.sum()) * size * most)
        return cls(scores, order, count, trapped, exits, trace, root_child, settled, meets)


def word_depths(scores: Tensor, lengths: Tensor, single_root: bool) -> Tensor:
    """(B, N+1) each word's depth in the best tree of ``scores`` (ROOT and padding: 0)."""
    positions = torch.arange(scores.shape[-1], device=scores.device)
    words = (positions >= 1) & (positions <= lengths.unsqueeze(-1))
    return _depths(max_spanning_trees(scores, lengths, single_root=single_root), words)


def _depths(heads: Tensor, words: Tensor) -> Tensor:
    """(G, N+1) each word's depth in the trees ``heads`` (ROOT and padding: 0), by pointer doubling."""
    size = heads.shape[-1]
    jump = torch.where(words, heads, 0)
    depth = words.long()
    for _ in range(max(1, math.ceil(math.log2(size)))):
        depth = depth + depth.gather(1, jump)
        jump = jump.gather(1, jump)
    return depth


def _settled_conditionals(
    scores: Tensor, order: Tensor, count: Tensor, exits: Tensor, trace: Tensor
) -> tuple[Tensor, list[Tensor]]:
    """(G, P, N+1): trapped word j's head distribution in every state whose fixed trapped words
    are *settled*: each one's next step (its head's exit distribution) leads only to ROOT or
    to trapped words fixed before j. Such a word then reaches ROOT whatever its head (the prefix
    has positive probability, so the fixed words form no closed cycle), like ROOT itself, so
    P_x(ROOT before j) no longer depends on the heads that were drawn.

    For every j at once: the trace chain's trapped words are eliminated from the last to the
    second (GTH in log space), and the walk from each word after j first meets ROOT or words
    1..j where ``reach`` says, pushed one word further for each j (sums of positive terms).
    O(P^3) per group, then O(N P) per trapped word. Also returns those first meetings for each
    j (``meets[j-1]`` (G, P+1, j+1): log, from the words after j), for the other states.
    """
    groups, nodes = trace.shape[0], trace.shape[-1]
    slots = torch.arange(nodes, device=trace.device)
    live = slots <= count.unsqueeze(-1)  # ROOT and the trapped words
    chain = trace.clone()
    steps = torch.full_like(trace, NEG_INF)  # [u, x]: word u's step law when eliminated (x < u)
    for u in range(nodes - 1, 1, -1):  # the nodes left are ROOT and words 1..u-1
        active = (count >= u).view(-1, 1)
        column = chain[:, :u, u]
        pivot = torch.logsumexp(column, -1, keepdim=True)
        step = column - torch.where(torch.isfinite(pivot), pivot, torch.zeros_like(pivot))
        steps[:, u, :u] = torch.where(active, step, NEG_INF)
        update = torch.logaddexp(chain[:, :u, :u], step.unsqueeze(-1) + chain[:, u, :u].unsqueeze(-2))
        chain[:, :u, :u] = torch.where(active.unsqueeze(-1), update, chain[:, :u, :u])
    size = scores.shape[-1]
    out = torch.zeros(groups, nodes - 1, size, dtype=scores.dtype, device=scores.device)
    meets = torch.full_like(trace, NEG_INF)  # [u, x]: where the walk from word u > j first meets {ROOT, 1..j}
    blocks: list[Tensor] = [meets] * (nodes - 1)
    for j in range(nodes - 1, 0, -1):
        if j + 1 < nodes:  # word j+1 joins the eliminated words: push the walks that met it
            passing = meets[:, j + 2 :, j + 1 : j + 2]
            meets[:, j + 2 :, : j + 1] = torch.logaddexp(
                meets[:, j + 2 :, : j + 1], passing + steps[:, j + 1, : j + 1].unsqueeze(1)
            )
            meets[:, j + 2 :, j + 1] = NEG_INF
            meets[:, j + 1, : j + 1] = steps[:, j + 1, : j + 1]
        blocks[j - 1] = meets[:, :, : j + 1].clone()
        reach = torch.logsumexp(meets[:, :, :j], -1)  # words after j: ROOT or 1..j-1 before j
        reach = torch.where(slots < j, 0.0, torch.where(slots > j, reach, NEG_INF))  # ROOT and 1..j-1: 0
        reach = torch.where(live, reach, NEG_INF)
        out[:, j - 1] = _head_distribution(scores, order[:, j - 1], exits, trace[:, :, j], reach)
    return out, blocks


def _exit_distribution(scores: Tensor, free: Tensor, targets: Tensor, compact: Tensor, most: int) -> Tensor:
    """(G, N+1, P+1) log: where the walk from each node first meets ROOT or a trapped word.

    GTH state reduction eliminates the ``free`` words one by one in plain float64: word k's
    step distribution among the nodes not yet eliminated is its column of the reduced weights
    divided by their sum (the pivot), and the reduced weights gain the paths through k. The
    exit distributions then follow backwards, as sums of positive terms. The free words are
    not trapped, so the weights a column loses to the walk's returns are bounded and nothing
    that matters underflows.
    """
    groups, size = scores.shape[0], scores.shape[-1]
    top = scores.amax(1, keepdim=True)
    weights = torch.exp(scores - torch.where(torch.isfinite(top), top, torch.zeros_like(top)))
    positions = torch.arange(size, device=scores.device)
    remaining = free | targets
    steps = torch.zeros_like(weights)  # [k, x]: word k's step distribution when eliminated
    eliminated = free.any(0).nonzero().squeeze(-1).tolist()
    for k in eliminated:
        active = free[:, k]
        column = torch.where(remaining & (positions != k), weights[:, :, k], 0.0)
        pivot = column.sum(-1, keepdim=True)
        step = column / torch.where(pivot > 0, pivot, torch.ones_like(pivot))
        steps[:, k] = torch.where(active.unsqueeze(-1), step, 0.0)
        update = step.unsqueeze(-1) * weights[:, k, :].unsqueeze(-2)
        weights = torch.where(active.view(-1, 1, 1), weights + update, weights)
        remaining = remaining & ~(active.unsqueeze(-1) & (positions == k))
    hits = torch.zeros(groups, size, most + 1, dtype=scores.dtype, device=scores.device)
    hits.scatter_(2, compact.clamp_min(0).unsqueeze(-1), targets.unsqueeze(-1).to(scores.dtype))
    for k in reversed(eliminated):
        row = torch.bmm(steps[:, k].unsqueeze(1), hits).squeeze(1)
        hits[:, k] = torch.where(free[:, k].unsqueeze(-1), row, hits[:, k])
    work.add("setup_nodes", len(eliminated) * groups * size)
    return torch.log(hits)


def trapped_conditionals(groups: Groups, group: Tensor, fixed: Tensor, j: int) -> Tensor:
    """(U, N+1) float64: the head distribution of trapped word j (1-based, in ``groups.order``)
    of each state, given the heads ``fixed`` (U, >= j-1) of its trapped words 1..j-1.

    The trace chain on ROOT and the trapped words, with the fixed words' columns replaced by
    the law of their next step (their head's exit distribution), is reduced by GTH with word
    j kept last: log P_x(the walk reaches ROOT before j) follows backwards for every node x of
    the trace, and for the other words through their exit distributions. All in log space:
    sums of positive terms, no underflow. A state with no possible head gets zeros.
    """
    states = group.shape[0]
    exits = groups.exits[group]  # (U, N+1, P+1)
    chain = groups.trace[group].clone()  # (U, P+1, P+1) [from, into]
    chain_into = chain[:, :, j].clone()  # word j's own column (it is never fixed or updated)
    nodes = chain.shape[-1]
    slots = torch.arange(nodes, device=chain.device)
    if j > 1:
        heads = fixed[:, : j - 1]
        columns = exits.gather(1, heads.unsqueeze(-1).expand(-1, -1, nodes))  # (U, j-1, P+1)
        own = slots[1:j].unsqueeze(-1) == slots  # a word's own slot: a step that loops back
        chain[:, :, 1:j] = columns.masked_fill(own, NEG_INF).transpose(1, 2)
    count = groups.count[group]
    remaining = slots <= count.unsqueeze(-1)
    order = []
    steps = []
    for u in range(1, int(count.max()) + 1):
        if u == j:
            continue
        active = count >= u
        column = torch.where(remaining & (slots != u), chain[:, :, u], NEG_INF)
        pivot = torch.logsumexp(column, -1, keepdim=True)
        step = column - torch.where(torch.isfinite(pivot), pivot, torch.zeros_like(pivot))
        update = torch.logaddexp(chain, step.unsqueeze(-1) + chain[:, u, :].unsqueeze(-2))
        chain = torch.where(active.view(-1, 1, 1), update, chain)
        remaining = remaining & ~(active.unsqueeze(-1) & (slots == u))
        order.append((u, active))
        steps.append(step)
    reach = torch.full((states, nodes), NEG_INF, dtype=chain.dtype, device=chain.device)
    reach[:, 0] = 0.0  # ROOT: reached; word j: never (-inf)
    for (u, active), step in zip(reversed(order), reversed(steps)):
        reach[:, u] = torch.where(active, torch.logsumexp(step + reach, -1), reach[:, u])
    work.add("trapped_nodes", states * len(order) * nodes * nodes)
    return _head_distribution(groups.scores[group], groups.order[group, j - 1], exits, chain_into, reach)


def unsettled_conditionals(
    groups: Groups, group: Tensor, fixed: Tensor, reaches: Tensor, j: int, leak: float
) -> Tensor:
    """(U, N+1): :func:`trapped_conditionals` for states whose fixed trapped words are settled
    but for a few (``reaches`` (U, >= j-1): the last trapped word each one's next step may reach,
    leaving out probabilities below ``leak``).

    A fixed word whose next step surely goes to one node x among ROOT and words 1..j stands
    for x (its P(ROOT before j) is x's; chains of such words are followed by pointer doubling).
    The other fixed words are *unsettled* if their next step may reach word j or a later word,
    or an unsettled word; the rest reach ROOT surely and stand for ROOT. An unsettled word's
    next step is carried through the free words by ``groups.meets`` onto ROOT and words 1..j,
    GTH on the small chain of the unsettled words (log space) gives their P(ROOT before j),
    and ``meets`` the free words'. O(u P j + u^3 + j^2) per state for u unsettled words,
    instead of O(P^3); usually u = 1 (a trapped word that took a later one as head).
    """
    states, nodes = group.shape[0], groups.trace.shape[-1]
    device = group.device
    exits = groups.exits[group]  # (U, N+1, P+1)
    meets = groups.meets[j - 1][group]  # (U, P+1, j+1): words after j -> {ROOT, 1..j}
    slots = torch.arange(nodes, device=device)
    before = slots[: j + 1]
    # each fixed word's next step, and where it may go (above ``leak``)
    columns = exits.gather(1, fixed[:, : j - 1].unsqueeze(-1).expand(-1, -1, nodes))  # (U, j-1, P+1)
    own = (slots[1:j].unsqueeze(-1) == slots).unsqueeze(0)  # a step back onto the word itself
    columns = columns.masked_fill(own, NEG_INF)
    least = torch.logsumexp(columns, -1, keepdim=True) + math.log(leak)
    support = columns > least
    # a word that surely steps to one node of ROOT, 1..j stands for it
    single = (support.sum(-1) == 1) & (support.long().argmax(-1) <= j)
    stand = torch.where(single, support.long().argmax(-1), slots[1:j])  # (U, j-1): ROOT 0, words 1..j
    stand = torch.cat([torch.zeros_like(stand[:, :1]), stand, torch.full_like(stand[:, :1], j)], 1)  # over 0..j
    for _ in range(max(1, math.ceil(math.log2(j + 1)))):
        stand = stand.gather(1, stand)
    # unsettled: a word standing for itself whose next step may reach j, a later word, or a word
    # that stands for j or for an unsettled word
    itself = stand[:, 1:j] == slots[1:j]  # (U, j-1) over the fixed words
    to_j = support[:, :, : j + 1] & (stand == j).unsqueeze(1)
    unsettled = itself & (support[:, :, j + 1 :].any(-1) | to_j.any(-1))
    inner = (stand >= 1) & (stand < j)  # (U, j+1): stands for a fixed word
    for _ in range(j - 1):
        flagged = inner & unsettled.gather(1, (stand - 1).clamp(0, max(j - 2, 0)))  # (U, j+1)
        spread = unsettled | (itself & (support[:, :, : j + 1] & flagged.unsqueeze(1)).any(-1))
        if bool((spread == unsettled).all()):
            break
        unsettled = spread
    most = max(1, int(unsettled.sum(-1).max()))
    rank = unsettled.long().cumsum(-1) - 1
    which = torch.zeros(states, most + 1, dtype=torch.long, device=device)
    which = which.scatter_(1, torch.where(unsettled, rank, most), torch.where(unsettled, slots[1:j], 0))[:, :most]
    taken = torch.arange(most, device=device) < unsettled.sum(-1, keepdim=True)
    # the small chain's node of each of 0..j: 0 ROOT (and what reaches it surely), 1 word j,
    # 2.. the unsettled words (and what stands for them)
    node = torch.zeros(states, j + 1, dtype=torch.long, device=device)
    node[:, 1:j] = torch.where(unsettled, 2 + rank, 0)
    node[:, j] = 1
    place = node.gather(1, stand)
    # the unsettled words' next steps carried onto 0..j, then gathered by small-chain node
    carry = torch.cat([torch.full_like(meets[:, : j + 1], NEG_INF), meets[:, j + 1 :]], 1)  # (U, P+1, j+1)
    carry[:, : j + 1] = torch.where(before.unsqueeze(-1) == before, 0.0, NEG_INF)
    steps_u = columns.gather(1, (which - 1).clamp_min(0).unsqueeze(-1).expand(-1, -1, nodes))  # (U, u, P+1)
    native = native_enabled(exits)
    if native:  # the same sums by the fused kernel
        from spacy_treexp.engine.sampling import fused

        onto = fused.log_matmul(steps_u, carry)  # (U, u, j+1)
    else:
        onto = torch.logsumexp(steps_u.unsqueeze(-1) + carry.unsqueeze(1), 2)  # (U, u, j+1)
    small = _log_scatter(onto, place, most + 2).transpose(1, 2)  # (U, from u+2, into u)
    small[:, 2:] = small[:, 2:].masked_fill(torch.eye(most, dtype=torch.bool, device=device), NEG_INF)
    small = small.masked_fill(~taken.unsqueeze(1), NEG_INF)
    # GTH: eliminate the unsettled words in turn, then P(ROOT before j) backwards
    remaining = torch.ones(states, most + 2, dtype=torch.bool, device=device)
    positions = torch.arange(most + 2, device=device)
    steps = []
    for u in range(most):
        column = torch.where(remaining & (positions != u + 2), small[:, :, u], NEG_INF)
        pivot = torch.logsumexp(column, -1, keepdim=True)
        step = column - torch.where(torch.isfinite(pivot), pivot, torch.zeros_like(pivot))
        small = torch.logaddexp(small, step.unsqueeze(-1) + small[:, u + 2, :].unsqueeze(1))
        remaining[:, u + 2] = False
        steps.append(step)
    solved = torch.full((states, most + 2), NEG_INF, dtype=exits.dtype, device=device)
    solved[:, 0] = 0.0
    for u in range(most - 1, -1, -1):
        solved[:, u + 2] = torch.where(taken[:, u], torch.logsumexp(steps[u] + solved, -1), NEG_INF)
    near = solved.gather(1, place)  # (U, j+1)
    reach = torch.full((states, nodes), NEG_INF, dtype=exits.dtype, device=device)
    reach[:, : j + 1] = near
    far = torch.logsumexp(meets + near.unsqueeze(1), -1)  # (U, P+1)
    count = groups.count[group]
    reach = torch.where((slots > j) & (slots <= count.unsqueeze(-1)), far, reach)
    work.add("trapped_nodes", states * most * nodes * (j + 1))
    if native:
        return fused.head_rows(
            groups.scores, group, groups.order[group, j - 1], exits, groups.trace[group, :, j], reach
        )
    return _head_distribution(groups.scores[group], groups.order[group, j - 1], exits, groups.trace[group, :, j], reach)


def _log_scatter(values: Tensor, index: Tensor, size: int) -> Tensor:
    """log sum of exp(values[..., x]) over the x with index[:, x] == k, for each k < size:
    (U, u, X) values, (U, X) index -> (U, u, size), exact in log space (each bucket is shifted
    by its own largest term)."""
    expanded = index.unsqueeze(1).expand_as(values)
    top = torch.full((*values.shape[:-1], size), NEG_INF, dtype=values.dtype, device=values.device)
    top = top.scatter_reduce(-1, expanded, values, "amax")
    shift = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    total = torch.zeros_like(top).scatter_add_(-1, expanded, torch.exp(values - shift.gather(-1, expanded)))
    return torch.log(total) + shift


def _head_distribution(scores: Tensor, word: Tensor, exits: Tensor, into: Tensor, reach: Tensor) -> Tensor:
    """(U, N+1) the head distribution of trapped word ``word`` (U,): P(h) ∝ w(h -> word)
    P_h(the walk reaches ROOT before the word), with P_h = sum_s exits[h, s] exp(reach[s]).

    Computed in two stages, both normalised (so plain float64 products of probabilities
    suffice): the trace node s the walk from the head first meets, with probability
    ∝ exp(into[s] + reach[s]) (``into``: the word's trace column, log sum_h w(h -> word)
    exits[h, s]); then the head given s, exp(log w(h -> word) + exits[h, s] - into[s]).
    """
    size = exits.shape[1]
    first = into + reach
    top = first.amax(-1, keepdim=True)
    meet = torch.exp(first - torch.where(torch.isfinite(top), top, torch.zeros_like(top)))
    total = meet.sum(-1, keepdim=True)
    meet = meet / torch.where(total > 0, total, torch.ones_like(total))  # (U, P+1)
    arcs = scores.gather(2, word.view(-1, 1, 1).expand(-1, size, 1))  # (U, N+1, 1): log w(h -> word)
    given = torch.exp(arcs + exits - torch.where(torch.isfinite(into), into, torch.zeros_like(into)).unsqueeze(1))
    given = torch.where(torch.isfinite(into).unsqueeze(1), given, 0.0)  # (U, N+1, P+1)
    return torch.bmm(given, meet.unsqueeze(-1)).squeeze(-1)
