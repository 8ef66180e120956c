"""Maximum spanning arborescences: the MAP tree and the minimum-Bayes-risk tree.

Chu–Liu–Edmonds (Chu & Liu 1965; Edmonds 1967) on each sentence, in float64, in Tarjan's
(1977) dense-graph form: O(n²) time and memory, whatever the size or spread of the scores.
The single-root constraint is imposed exactly by swapping ROOT arcs out of the greedy tree
one at a time, cheapest first (Gabow & Tarjan 1984; Zmigrod, Vieira & Cotterell 2020,
"Please Mind the Root"), which needs no penalty constant and so no score-dependent rounding.
On the CPU with numba (:func:`.native.native_enabled`) the same algorithm runs as a kernel
(:mod:`.decoding_kernels`: the same trees, ties included, about 10x faster at n = 30); the
Python code here stays the reference and the path on other devices.
"""

from __future__ import annotations

import math
from typing import Tuple

import numpy as np
import torch
from torch import Tensor

from spacy_treexp.engine.checks import is_tree, word_mask
from spacy_treexp.engine.native import native_enabled

NEG_INF = float("-inf")


class NoTreeError(ValueError):
    """The arc weights admit no spanning arborescence."""


def max_spanning_trees(weights: Tensor, lengths: Tensor, single_root: bool) -> Tensor:
    """Best tree per sentence for additive arc ``weights`` ``(B, N+1, N+1)`` [head, dep].

    ``-inf`` marks an arc that may not be used. Returns heads ``(B, N+1)`` (long, on the
    weights' device) with -1 at ROOT and padding. Raises :class:`NoTreeError` naming the
    sentence when no tree exists.
    """
    return _best_trees(weights, lengths, single_root, strict=True)[0]


def _best_trees(weights: Tensor, lengths: Tensor, single_root: bool, strict: bool) -> Tuple[Tensor, Tensor]:
    """``(heads (B, N+1), exists (B,))``: :func:`max_spanning_trees`, where a sentence with no
    tree raises (``strict``) or gets ``exists`` False and heads -1."""
    weights = weights.detach()
    greedy, done = _greedy_trees(weights, lengths, single_root)
    exists = torch.ones_like(done)
    if bool(done.all()):
        return greedy, exists
    on_cpu = weights.cpu()  # each sentence is copied to float64 by _best_tree
    if on_cpu.dtype not in (torch.float32, torch.float64):
        on_cpu = on_cpu.to(torch.float64)  # numpy has no bfloat16
    values = on_cpu.numpy()
    heads = greedy.cpu().numpy().copy()
    todo = ~done.cpu()
    if native_enabled(weights):  # the same trees by the kernel; what it leaves, by _best_tree
        todo = _kernel_trees(on_cpu.to(torch.float64).contiguous().numpy(), lengths, todo.numpy(), single_root, heads)
    for b in todo.nonzero().squeeze(-1).tolist():
        n = int(lengths[b])
        try:
            heads[b, : n + 1] = _best_tree(values[b, : n + 1, : n + 1], single_root)
        except NoTreeError as error:
            if strict:
                raise NoTreeError(f"sentence {b}: {error}") from None
            heads[b] = -1
            exists[b] = False
    return torch.from_numpy(heads).to(weights.device), exists


def _kernel_trees(
    values: np.ndarray, lengths: Tensor, todo: np.ndarray, single_root: bool, heads: np.ndarray
) -> Tensor:
    """:func:`_best_tree` of the sentences ``todo`` (B,) of float64 ``values`` (B, N+1, N+1) by
    the numba kernel (:mod:`.decoding_kernels`), into ``heads`` (B, N+1) in place; returns (B,)
    the sentences it left to :func:`_best_tree` (no tree, or a NaN or +inf weight)."""
    from spacy_treexp.engine import decoding_kernels

    status = np.zeros(todo.shape[0], dtype=np.int64)
    sizes = np.ascontiguousarray(lengths.cpu().numpy(), dtype=np.int64)
    decoding_kernels.best_trees(values, sizes, np.ascontiguousarray(todo), bool(single_root), heads, status)
    return torch.from_numpy(todo & (status != decoding_kernels.OK))


def dominant_trees(weights: Tensor, lengths: Tensor, single_root: bool) -> Tuple[Tensor, Tensor]:
    """The best tree of each sentence ``(B, N+1)`` and whether it certainly carries all the
    probability of p(d) ∝ exp(Σ weights) that float64 can represent ``(B,)``.

    It does when it beats every other tree by more than 760 + log(number of trees) nats
    after the rounding of the tree scores is taken off (:func:`_runner_up_margin`): then
    p(best) rounds to 1, every other tree's probability and the entropy to 0, even summed
    over all trees. Costs up to n + 1 Chu–Liu–Edmonds runs per sentence; meant for the
    sentences whose scores are too large for the partition function to resolve their trees.
    """
    best = max_spanning_trees(weights, lengths, single_root)
    certain = torch.zeros(lengths.shape, dtype=torch.bool, device=lengths.device)
    for b in range(lengths.shape[0]):
        n = int(lengths[b])
        needed = 760.0 + (n - 1) * math.log(n + 1)  # (n + 1)^(n - 1) trees at most
        certain[b] = _runner_up_margin(weights[b, : n + 1, : n + 1], best[b, : n + 1], single_root, needed) > needed
    return best, certain


def _runner_up_margin(weights: Tensor, best: Tensor, single_root: bool, needed: float) -> float:
    """A lower bound on s(best) − s(any other tree) for one sentence ``(n+1, n+1)``, less a
    bound on the rounding of the sums and of the decoder's comparisons; exact (up to that
    rounding) where it is at most ``needed``; +inf where no other tree exists.

    Any other tree gives some word m another head than best[m], so the runner-up is the best
    of the n trees with the arc best[m] -> m forbidden, one word m at a time. Each of them
    scores at most the best head of every other word plus the best other head of m; only the
    words where that bound does not already clear ``needed`` are decoded.
    """
    n = weights.shape[-1] - 1
    values = weights.detach().to("cpu", torch.float64)
    deps = torch.arange(1, n + 1)
    heads = best[1:].cpu()
    finite = values[torch.isfinite(values)]
    magnitude = float(finite.abs().max()) if finite.numel() else 0.0
    # n-term sums, and up to n nested contractions that each subtract scores: a generous
    # bound on what rounding moves
    rounding = 4.0 * (n + 1) ** 3 * float(torch.finfo(torch.float64).eps) * magnitude
    top = float(values[heads, deps].sum())
    others = values[:, 1:].clone()
    others[heads, deps - 1] = NEG_INF
    column_best = values[:, 1:].amax(0)
    bounds = column_best.sum() - column_best + others.amax(0)  # (n,): head of m other than best[m]
    runner_up = torch.where(torch.isnan(bounds), NEG_INF, bounds)  # nan: -inf - -inf, no other head
    open_words = (top - runner_up - rounding <= needed).nonzero().squeeze(-1)
    if open_words.numel():
        copies = values.expand(open_words.numel(), n + 1, n + 1).clone()
        copies[torch.arange(open_words.numel()), heads[open_words], open_words + 1] = NEG_INF
        trees, exists = _best_trees(copies, torch.full(open_words.shape, n), single_root, strict=False)
        picked = copies[torch.arange(open_words.numel()).unsqueeze(-1), trees[:, 1:].clamp(min=0), deps].sum(-1)
        runner_up[open_words] = torch.where(exists, picked, NEG_INF)
    return top - float(runner_up.max()) - rounding


def _greedy_trees(weights: Tensor, lengths: Tensor, single_root: bool):
    """Every word's best head, for the whole batch, and which sentences that solves.

    The best head of every word bounds every tree's score from above, so where those heads
    form an admissible tree (one ROOT child when required) it is the best tree; trained
    parsers usually give such scores, and only the other sentences need Chu–Liu–Edmonds.
    """
    n_max = weights.shape[-1] - 1
    positions = torch.arange(n_max + 1, device=weights.device)
    words = word_mask(lengths, n_max)
    allowed = weights.masked_fill(positions.unsqueeze(-1) == positions, NEG_INF)
    best, heads = allowed.max(dim=-2)
    heads = torch.where(words, heads, torch.full_like(heads, -1))
    done = (torch.isfinite(best) | ~words).all(-1) & is_tree(heads, lengths, single_root)
    return heads, done


def _best_tree(weights: np.ndarray, single_root: bool) -> np.ndarray:
    """Heads ``(n+1,)`` of the best tree of one sentence ``weights[h, m]`` (-inf: no arc)."""
    incoming = np.array(weights.T, dtype=np.float64, order="C")  # [dependent, head]: a node's row
    np.fill_diagonal(incoming, NEG_INF)
    incoming[0] = NEG_INF
    if incoming.shape[0] == 1:
        return np.full(1, -1, dtype=np.int64)
    if not np.isfinite(incoming[:, 0]).any():
        raise NoTreeError("no arc from ROOT is allowed")
    finite = np.isfinite(incoming)
    magnitude = max(
        -float(np.min(incoming, initial=np.inf, where=finite)), float(np.max(incoming, initial=-np.inf, where=finite))
    )
    # contracted scores are differences nested up to n deep: where they could overflow,
    # scale by a power of two, which changes no comparison
    limit = 2.0**1000 / (4.0 * incoming.shape[0])
    if magnitude > limit:
        incoming *= 2.0 ** (math.frexp(limit)[1] - math.frexp(magnitude)[1])
    return _Arborescence(incoming, single_root).solve()


class _Arborescence:
    """Chu–Liu–Edmonds on one dense graph in O(n²) time and memory, whatever the scores.

    Tarjan's (1977) dense version, with the corrections of Camerini, Fratta & Maffioli (1979):
    every live node, a word or a contracted cycle, keeps one row of incoming and one column of
    outgoing scores (``incoming[v, u]``: the arc u -> v, in the slot of one of its words), with
    the original arc behind each entry (``head``, ``dep``). A path of best incoming arcs is
    grown from each word; a cycle that closes on the path is contracted by merging its rows
    and columns, O(n) per member, and the path goes on from the new node.

    The greedy graph of the nodes left is then a tree. For a single root, while it has
    several ROOT children, the child whose ROOT arc costs least to give up (its best score
    less its best score from a word) takes its best arc from a word instead (the "constrain"
    step of Zmigrod, Vieira & Cotterell 2020, after Gabow & Tarjan 1984). Its ROOT arc stays
    in its row: a cycle that the swap closes is contracted, and the new node is a ROOT child
    again (entering the cycle by that ROOT arc gains the swap's cost, >= 0, over the cycle's
    arcs; any other entry gains <= 0, every member being at its best). Each swap costs O(n) and removes a ROOT child or a node:
    at most 2n swaps. Finally the contractions are undone from the outermost in, each node
    once (Camerini et al.'s expansion).

    Ties go to the first maximum in slot (or cycle) order, ROOT first: the tree is a function
    of the scores alone.
    """

    def __init__(self, incoming: np.ndarray, single_root: bool) -> None:
        size = incoming.shape[0]
        self.size = size
        self.single_root = single_root
        self.incoming = incoming  # [to slot, from slot]; -inf: no arc, or the slot is gone
        index = np.arange(size, dtype=np.int16 if size <= np.iinfo(np.int16).max else np.int32)
        self.head = np.repeat(index[None, :], size, axis=0)  # the original arc
        self.dep = np.repeat(index[:, None], size, axis=1)  # behind each entry
        self.slot_of = list(range(size))  # union-find: a slot merged into a cycle points inside it
        self.node = list(range(size))  # slot -> node of the contraction forest (words: 0..n)
        self.parent = [-1] * size  # forest: node -> the cycle node it was contracted into
        self.members: list = [[] for _ in range(size)]  # cycle node -> its nodes
        self.in_arc = [(-1, -1)] * size  # node -> its best incoming arc when it was contracted
        self.best = np.full(size, NEG_INF)  # each live slot's best incoming score,
        self.best_arc = [(-1, -1)] * size  # the original arc behind it,
        self.cost = np.full(size, np.inf)  # and best less the best from a word (single root)

    def solve(self) -> np.ndarray:
        self._contract_greedy_cycles()
        if self.single_root:
            try:
                self._keep_one_root_arc()
            except NoTreeError:
                raise NoTreeError("no tree with exactly one child of ROOT exists") from None
        return self._expand()

    def _find(self, slot: int) -> int:
        slot_of = self.slot_of
        while slot_of[slot] != slot:
            slot_of[slot] = slot_of[slot_of[slot]]
            slot = slot_of[slot]
        return slot

    def _head_slot(self, slot: int) -> int:
        """The live slot holding the head of ``slot``'s best incoming arc."""
        return self._find(self.best_arc[slot][0])

    def _choose(self, slot: int, from_word: bool = False) -> None:
        """Take the best incoming arc of ``slot``, or its best from a word (and, single-root,
        its cost)."""
        row = self.incoming[slot]
        source = int(row[1:].argmax()) + 1 if from_word else int(row.argmax())
        value = row[source]
        if value == NEG_INF:
            raise NoTreeError(self._no_head(slot))
        self.best[slot] = value
        self.best_arc[slot] = (int(self.head[slot, source]), int(self.dep[slot, source]))
        if self.single_root and not from_word:
            self.cost[slot] = value - row[1:].max()  # +inf: no head but ROOT

    def _no_head(self, slot: int) -> str:
        words = sorted(self._words(self.node[slot]))
        if len(words) == 1:
            return f"node {words[0]} has no allowed head"
        return f"words {words} can only be headed by one another"

    def _words(self, node: int) -> list:
        stack, words = [node], []
        while stack:
            node = stack.pop()
            if node < self.size:
                words.append(node)
            else:
                stack.extend(self.members[node])
        return words

    def _contract_greedy_cycles(self) -> None:
        """Grow paths of best incoming arcs; contract each cycle they close (Tarjan 1977)."""
        new, on_path, done = 0, 1, 2
        state = [new] * self.size
        state[0] = done
        position = [0] * self.size
        for start in range(1, self.size):
            if state[start] != new:
                continue
            path = [start]
            state[start], position[start] = on_path, 0
            while path:
                slot = path[-1]
                self._choose(slot)
                head = self._head_slot(slot)
                if state[head] == done:
                    for member in path:
                        state[member] = done
                    break
                if state[head] == new:
                    state[head], position[head] = on_path, len(path)
                    path.append(head)
                    continue
                cycle = path[position[head] :]
                del path[position[head] :]
                merged = self._contract(cycle)
                state[merged], position[merged] = on_path, len(path)
                path.append(merged)

    def _contract(self, cycle: list) -> int:
        """Merge the slots of ``cycle`` (each at its best arc) into its first; O(n · len(cycle))."""
        slots = np.asarray(cycle)
        into = cycle[0]
        every = np.arange(self.size)
        # entering the cycle at v instead of by its cycle arc gains incoming[v, u] - best[v]
        gains = self.incoming[slots] - self.best[slots, None]
        pick = slots[gains.argmax(axis=0)]
        in_score = gains.max(axis=0)
        in_head, in_dep = self.head[pick, every], self.dep[pick, every]
        # leaving the cycle: the best arc from any member, per target
        leaving = self.incoming[:, slots]
        pick = leaving.argmax(axis=1)
        out_score = leaving[every, pick]
        out_head, out_dep = self.head[every, slots[pick]], self.dep[every, slots[pick]]
        self.incoming[slots] = NEG_INF
        self.incoming[:, slots] = NEG_INF
        self.incoming[:, into], self.head[:, into], self.dep[:, into] = out_score, out_head, out_dep
        self.incoming[into], self.head[into], self.dep[into] = in_score, in_head, in_dep
        self.incoming[into, slots] = NEG_INF
        self.incoming[slots, into] = NEG_INF
        node = len(self.parent)
        self.parent.append(-1)
        self.members.append([self.node[slot] for slot in cycle])
        self.in_arc.append((-1, -1))
        for slot in cycle:
            self.parent[self.node[slot]] = node
            self.in_arc[self.node[slot]] = self.best_arc[slot]
            self.slot_of[slot] = into
        self.node[into] = node
        return into

    def _keep_one_root_arc(self) -> None:
        """Swap the cheapest ROOT arc of the greedy tree for its node's best arc from a word
        while the tree has several (Zmigrod et al. 2020); ``top[s]``: the ROOT child above
        live slot ``s``, to tell in O(1) whether a swap closes a cycle."""
        live = np.array([slot for slot in range(1, self.size) if self._find(slot) == slot], dtype=np.int64)
        up = np.arange(self.size)
        for slot in live.tolist():
            head = self._head_slot(slot)
            up[slot] = slot if head == 0 else head
        while True:  # pointer jumping: O(n log n)
            jumped = up[up]
            if np.array_equal(jumped, up):
                break
            up = jumped
        top = up
        root_child = np.zeros(self.size, dtype=bool)
        root_child[live[top[live] == live]] = True
        while int(root_child.sum()) > 1:
            children = np.flatnonzero(root_child)
            slot = int(children[self.cost[children].argmin()])
            root_child[slot] = False
            self._choose(slot, from_word=True)  # NoTreeError: a single ROOT child is impossible
            while True:
                head = self._head_slot(slot)
                if head == 0:
                    root_child[slot] = True
                    break
                if top[head] != slot:
                    top[top == slot] = top[head]
                    break
                cycle = [slot]
                while head != slot:
                    cycle.append(head)
                    head = self._head_slot(head)
                merged = self._contract(cycle)
                self._choose(merged)
                top[top == slot] = merged
                slot = merged

    def _expand(self) -> np.ndarray:
        """Undo the contractions (Camerini et al. 1979): a node's arc goes to the word it
        enters; on the way down to that word, every other member of each cycle passed keeps
        the arc it had when contracted."""
        heads = np.full(self.size, -1, dtype=np.int64)
        stack = [(self.node[slot], self.best_arc[slot]) for slot in range(1, self.size) if self._find(slot) == slot]
        while stack:
            node, (head, word) = stack.pop()
            heads[word] = head
            below = word
            while below != node:
                cycle = self.parent[below]
                stack.extend((member, self.in_arc[member]) for member in self.members[cycle] if member != below)
                below = cycle
        return heads
