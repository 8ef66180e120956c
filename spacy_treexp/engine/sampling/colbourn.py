"""Colbourn's ancestral sampler: the tree distribution as an autoregressive model over heads.

Colbourn, Myrvold & Neufeld (1996); Stanojević (2022). Words are visited in order
m = 1..n; word m's head is drawn from its marginal *conditioned on the heads already
chosen*; fixing it replaces column m of Koo et al.'s matrix L-hat by the column of a
single arc of weight 1, a rank-one change, so L-hat^{-1} follows by one Sherman-Morrison
update in O(n^2) per word and O(n^3) per tree.

Accuracy: the inverse and every update are kept in float64 whatever the input dtype
(Sherman-Morrison drifts in float32); the first word's conditional is the engine's stable
marginal column. A sentence whose L-hat's LU error estimate exceeds :data:`TRAPPED_ERROR`
(peaked scores) is sampled through :class:`TrappedModel` (:mod:`.trapped`): the words trapped in
strongly bound sets first, exactly, in log space, then Sherman-Morrison on the rest, whose
L-hat is well conditioned. Every conditional is checked (it must sum to 1); a row whose
updates drift gets that word's conditionals from the engine's marginals of the conditioned
scores, and its inverse is then refactorised (see :data:`SUM_TOLERANCE`).
Two kinds of zero-probability heads are removed exactly, by structure, rather than by the
sign of a rounding error: heads closing a cycle with the heads already chosen, and
(single-root) a second ROOT child.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import torch
from torch import Tensor

from spacy_treexp.engine.laplacian import closed_form_marginals, fast_accepted, fast_inverse, shifted_weights
from spacy_treexp.engine.native import native_enabled
from spacy_treexp.engine.sampling import fused, work
from spacy_treexp.engine.sampling.streams import Randomness, block_seeds, per_sentence, sample_block_uniforms
from spacy_treexp.engine.sampling.trapped import NEG_INF, Groups, StrongSets, unsettled_conditionals, word_depths
from spacy_treexp.engine.sampling.wilson import draw_categorical

#: Sherman-Morrison's conditionals of a word must sum to 1 within this (a residual check of
#: row j of L-hat^{-1} against column j of L-hat); a row that does not is *refactorised*: that
#: word's conditionals come from the engine's exact marginals of the conditioned scores
#: (O(n^3), stable path where needed; multi-root on the CPU with numba, the kernel's exact
#: log-space reduction), and the row's inverse is computed anew by one LU
#: (:meth:`Conditioner._refactorise`).
SUM_TOLERANCE = 1e-6

#: L-hat's LU error estimate (eps n max_k scale_k / |U_kk|, :func:`.laplacian.fast_inverse`)
#: above which a sentence is sampled through :class:`TrappedModel`: its words first fixed
#: where a walk would be trapped, then Sherman-Morrison on a well-conditioned L-hat. Below it,
#: Sherman-Morrison's conditionals stay within :data:`SUM_TOLERANCE` word after word.
TRAPPED_ERROR = 1e-9

#: The same bound for phase 2 of :class:`TrappedModel` (a sentence conditioned on its trapped
#: words' heads): no strongly bound set is left there, and conditionals this far from exact
#: stay well within :data:`SUM_TOLERANCE` (measured: no drift at x1..x1000).
CONDITIONED_ERROR = 1e-7

#: A fixed trapped word counts as settled (:func:`.trapped._settled_conditionals`) when its
#: next step reaches ROOT or earlier trapped words with all but at most this probability: the
#: conditionals it is then given are off by at most this relative amount (a walk that meets a
#: settled word leaks away at most this much each time, and meets one again only after not
#: leaking), far below float64's resolution of a uniform (2^-53).
SETTLED_LEAK = 1e-20


@dataclass
class Prepared:
    """What Colbourn's sampler needs per sentence, computed once per distribution.

    weights_by_dep (N+1, B, N+1): the engine's column-shifted arc weights in float64,
    [m, b] = column m of sentence b (the heads of word m), contiguous per word;
    inverse (B, N, N): L-hat^{-1} in float64 (NaN where L-hat is singular in float64);
    first (B, N+1): word 1's head marginals in float64, >= +0, as the engine computes them for
    the float64 scores (also for lower-precision inputs, so that no tree whose probability is
    representable in float64 is lost to float32 underflow): from the same LU as ``inverse``
    where its error estimate is within ``tolerance`` (the engine's for float64 by default),
    else the engine's stable path (multi-root on the CPU with numba: the same marginals by the
    kernel's exact log-space reduction, :func:`.fused.exact_conditionals`; by default not for
    the sentences :meth:`trapped` sends to :class:`TrappedModel`, which never read it; with
    ``engine=False`` and a ``tolerance``, NaN where the LU is not trusted: the caller computes
    those itself);
    error (B,): the LU's error estimate (:func:`.laplacian.fast_inverse`; inf where singular);
    update_columns (N+1, N+1, 2), update_coefficients (N+1, N+1): the table of
    :func:`_update_columns`.
    """

    weights_by_dep: Tensor
    inverse: Tensor
    first: Tensor
    error: Tensor
    update_columns: Tensor
    update_coefficients: Tensor
    #: :meth:`by_sentence`'s copy, made on its first call
    _by_sentence: Tensor | None = field(default=None, init=False, repr=False)

    @classmethod
    def of(cls, dist, tolerance: float | None = None, engine: bool = True) -> Prepared:
        scores = dist.scores.detach()
        weights, _ = shifted_weights(scores.double(), dist.arc_mask)
        log_det, inverse, error = fast_inverse(weights, dist.lengths, dist.single_root)
        work.add("factorisations", scores.shape[0])
        # NaN where L-hat is singular (or its determinant not positive) in float64; row-major,
        # as rows are read and updated
        inverse = torch.where(torch.isinf(error)[:, None, None], torch.nan, inverse).contiguous()
        if scores.dtype == torch.float64 and (dist.marginals_computed or dist.stable):
            first = dist.marginals[:, :, 1].detach()
        elif dist.stable:
            exact = type(dist)(scores.double(), dist.lengths, single_root=dist.single_root, stable=True)
            first = exact.marginals[:, :, 1]
        else:
            # what the engine computes for float64 scores: its fast path from this same LU where
            # it accepts it, the engine itself (its stable path) elsewhere
            first = closed_form_marginals(weights, inverse, dist.single_root)[:, :, 1]
            if tolerance is None:  # (trapped sentences do not read ``first``)
                untrusted = ~fast_accepted(log_det, error, torch.float64) & (error <= TRAPPED_ERROR)
            else:
                untrusted = ~((error <= tolerance) & torch.isfinite(log_det))
            if bool(untrusted.any()) and not engine:  # (the caller computes them exactly)
                first = first.masked_fill(untrusted.unsqueeze(-1), torch.nan)
            elif bool(untrusted.any()):
                index = untrusted.nonzero().squeeze(-1)
                if not dist.single_root and native_enabled(scores):  # the kernel's exact reduction
                    log_weights = scores.double().masked_fill(~dist.arc_mask, -torch.inf)
                    size = scores.shape[-1]
                    alone = torch.arange(size, dtype=torch.int32).masked_fill(torch.arange(size) == 0, size)
                    ends = alone.expand(index.numel(), size)  # no head fixed (ROOT's entry: N+1)
                    exact = fused.exact_conditionals(log_weights, index, ends, 1, dist.lengths[index])
                else:
                    exact = engine_marginals(dist, scores.double()[index], dist.lengths[index])[:, :, 1]
                first = first.index_put((index,), exact)
                work.add("refactorisations", index.numel())
        columns, coefficients = _update_columns(weights.shape[-1], dist.single_root)
        return cls(
            weights.permute(2, 0, 1).contiguous(),
            inverse,
            torch.where((first > 0) | first.isnan(), first, 0.0),  # (NaN: see ``engine``)
            error,
            columns.to(weights.device),
            coefficients.to(weights.device),
        )

    def by_sentence(self) -> Tensor:
        """``weights_by_dep`` as (B, N+1, N+1) [b, m, h], contiguous per sentence, for the fused
        kernels (copied once, on first use)."""
        if self._by_sentence is None:
            self._by_sentence = self.weights_by_dep.transpose(0, 1).contiguous()
        return self._by_sentence

    def select(self, index: Tensor) -> Prepared:
        """The same for the sentences ``index`` only."""
        return Prepared(
            self.weights_by_dep.index_select(1, index),
            self.inverse.index_select(0, index),
            self.first.index_select(0, index),
            self.error.index_select(0, index),
            self.update_columns,
            self.update_coefficients,
        )

    def trapped(self) -> Tensor:
        """(B,) the sentences whose L-hat Sherman-Morrison cannot follow (error estimate above
        :data:`TRAPPED_ERROR`): they are sampled through :class:`TrappedModel`."""
        return ~(self.error <= TRAPPED_ERROR)


@lru_cache(maxsize=64)  # depends on the size alone; read, never written
def _update_columns(size: int, single_root: bool) -> tuple[Tensor, Tensor]:
    """Per word m and head h, which two columns of L-hat^{-1} make L-hat^{-1} c, and with what
    coefficient, for the new column c of word m (the single arc h -> m of weight 1):
    ``columns[m, h]`` (2,) int64 and ``coefficients[m, h]`` float64, so that
    L-hat^{-1} c = column[0] + coefficients * column[1], j = m - 1:
    multi-root c = e_j - [h >= 1] e_{h-1}; single-root c = e_0 for h = 0, else
    [m != 1] e_j - [h != 1] e_{h-1} (row 0 of L-hat holds the ROOT weights), so word 1's
    c = -e_{h-1} is e_{h-1} - 2 e_{h-1} (exact in floating point)."""
    words = torch.arange(size).view(-1, 1).expand(size, size)  # m
    heads = torch.arange(size).view(1, -1).expand(size, size)  # h
    j, word_head = words - 1, (heads - 1).clamp_min(0)
    first = j.clamp_min(0).clone()
    second = word_head.clone()
    coefficients = torch.where(heads >= 1, -1.0, 0.0).double()
    if single_root:
        root = heads == 0
        first[root], second[root] = 0, 0  # c = e_0
        coefficients[heads == 1] = 0.0  # c = e_j
        word_one = (words == 1) & ~root  # c = -e_{h-1}
        first[word_one], coefficients[word_one] = word_head[word_one], -2.0
    return torch.stack([first, second], -1), coefficients


def engine_marginals(dist, scores: Tensor, lengths: Tensor) -> Tensor:
    """The engine's exact marginals (float64) of float64 ``scores`` (R, N+1, N+1) with
    ``dist``'s kind of trees; zero for a sentence with no tree (a dead end of a search)."""
    engine = type(dist)(scores, lengths, single_root=dist.single_root)
    possible = torch.isfinite(engine.log_partition)
    if bool(possible.all()):
        return engine.marginals.detach().double()
    marginals = torch.zeros_like(scores)
    if bool(possible.any()):
        index = possible.nonzero().squeeze(-1)
        exact = type(dist)(scores[index], lengths[index], single_root=dist.single_root)
        marginals[index] = exact.marginals.detach().double()
    return marginals


def branch_plan(parent: Tensor) -> tuple[Tensor, Tensor, Tensor] | None:
    """How rows continue as new partial trees: tree i continues row ``parent[i]`` (K,), a row of
    its own sentence. None where every parent continues once (each tree stays in its row);
    else ``(rows, free, source)``: the row each tree takes, and the rows ``free`` into which the
    state of rows ``source`` is copied. The first tree of a parent stays in the parent's row; a
    parent's further trees take the rows of the parents that were dropped (a beam search
    mostly keeps its beams: after a few words, little is copied). The rows of a sentence stay
    its rows: duplicates and free rows pair up in order, sentence by sentence.
    """
    kept = torch.zeros_like(parent, dtype=torch.bool).index_fill_(0, parent, True)
    if bool(kept.all()):  # every parent once (the common case after a few words)
        return None
    order = torch.argsort(parent, stable=True)
    ordered = parent[order]
    repeated = torch.zeros_like(ordered, dtype=torch.bool)
    repeated[1:] = ordered[1:] == ordered[:-1]
    duplicates = order[repeated]
    free = (~kept).nonzero().squeeze(-1)  # as many as duplicates, in the same sentences
    return parent.index_put((duplicates,), free), free, parent.index_select(0, duplicates)


class Conditioner:
    """Colbourn's state for K partial trees; row i belongs to sentence ``sentence[i]``.

    ``probs(m)`` gives the conditional head distribution of word m (K, N+1) float64 given the
    heads fixed so far (>= +0, never NaN); ``fix(m, head, active)`` conditions on word m's
    head. Words are visited in order m = 1, 2, ..., each ``probs(m)`` followed by
    ``fix(m, ...)``. ``branch(parent)`` continues rows as new partial trees within their
    sentences (beam search). A prefix that admits no tree gets all-zero conditionals.

    Only the rows of L-hat^{-1} that later words read are kept: before word m, rows
    m-1..N-1, so the state shrinks as words are fixed: ``self.inverse[:, r, c]`` is entry
    (m-1+r, c) (None before word 1 with a ``layout``: the sentences' own inverses are read).
    Each partial tree's rows stay one contiguous block, so the rank-one update of all of them
    runs over long contiguous rows. Conditionals that fail the sum check (the updates
    drifted) come from the engine for that word, and the row's inverse is then computed anew
    (:meth:`_refactorise`); an inverse that is not trusted holds NaN, so that its conditionals
    keep coming from the engine (see :data:`SUM_TOLERANCE`).

    Heads of probability zero are ruled out by structure. ``chain_end`` (K, N+1) int32: for
    a word v, the word where the chain of fixed heads from v ends (v itself while v has no
    head), or N+1 where the chain reaches ROOT; N+1 for ROOT. Head h would close a cycle
    for word m iff ``chain_end[h] == m`` (every entry is >= m before word m: unfixed words
    are themselves, fixed words' chains end at unfixed words or ROOT). ``probs(m)`` keeps
    that test for ``fix(m)`` (so ``fix(m)`` needs ``probs(m)`` first). ``root_free`` (K,)
    (single-root): ROOT has no child yet. A row that ``fix`` does not condition at word m
    (a finished sentence, a dead beam) counts m as a child of ROOT in ``chain_end``, so
    that nothing is ruled out for it later.
    """

    def __init__(self, dist, sentence: Tensor, prepared: Prepared | None = None, layout: str | None = None):
        prepared = Prepared.of(dist) if prepared is None else prepared
        self.dist = dist
        self.single_root = dist.single_root
        self.prepared = prepared
        self.sentence = sentence.clone()  # (copied with its row by ``branch``)
        self.lengths = dist.lengths[sentence]
        self.shortest = int(self.lengths.min()) if sentence.numel() else 0  # every row has words 1..shortest
        size = prepared.inverse.shape[-1] + 1
        device = prepared.inverse.device
        # layout "by_sentence": row b * c + i is copy i of sentence b; "by_copy": row i * B + b
        # is (``sentence`` must say the same). Per-sentence tensors then broadcast over the
        # rows seen as ``row_shape`` (see _per_row), and the inverses are not copied per row
        # before word 1: its update reads the sentences' own.
        batch, rows = prepared.inverse.shape[0], sentence.numel()
        copies = rows // max(batch, 1)
        self.row_shape = {None: (rows,), "by_sentence": (batch, copies), "by_copy": (copies, batch)}[layout]
        self.layout = layout
        self.inverse = None if layout else prepared.inverse.index_select(0, sentence)  # (K, N, N) [k, row, column]
        self.heads = torch.full((sentence.numel(), size), -1, dtype=torch.long, device=device)
        self.chain_end = torch.arange(size, device=device, dtype=torch.int32).repeat(sentence.numel(), 1)
        self.chain_end[:, 0] = size
        self.root_free = torch.ones(sentence.numel(), dtype=torch.bool, device=device) if self.single_root else None
        self._unblocked: Tensor | None = None  # set by probs(m): chain_end != m
        self._refresh: Tensor | None = None  # set by probs(m): rows whose updates drifted

    def _per_row(self, values: Tensor) -> Tensor:
        """Per-sentence ``values`` (B, ...) for every row: (K, ...), or, with a ``layout``, a
        view that broadcasts against the rows seen as (*row_shape, ...)."""
        if self.layout is None:
            return values.index_select(0, self.sentence)
        return values.unsqueeze(1 if self.layout == "by_sentence" else 0)

    def branch(self, parent: Tensor) -> Tensor:
        """New partial trees: tree i continues row ``parent[i]`` (K,), a row of its own sentence.

        Returns the row each new tree takes (K,) (see :func:`branch_plan`); only into the rows
        of dropped parents is a parent's state copied.
        """
        plan = branch_plan(parent)
        if plan is None:
            return parent
        rows, free, source = plan
        for state in (
            self.inverse,
            self.heads,
            self.chain_end,
            self.root_free,
            self._unblocked,
            self.sentence,
            self.lengths,
        ):
            if state is not None:
                state.index_copy_(0, free, state.index_select(0, source))
        return rows

    #: The steps of :meth:`probs` and :meth:`fix` are the words: ``range(first_step, steps)``.
    first_step = 1

    @property
    def steps(self) -> int:
        return self.heads.shape[-1]

    @property
    def choices(self) -> int:
        """N + 1: the heads a step chooses among."""
        return self.heads.shape[-1]

    def active(self, m: int) -> Tensor:
        """(K,) the rows that have a word m."""
        return self.lengths >= m

    def finished(self, m: int) -> Tensor:
        """(K,) the rows whose tree is complete before word m."""
        return self.lengths < m

    def probs(self, m: int) -> Tensor:
        """(K, N+1) conditional probabilities of each head of word m (Koo et al. 2007)."""
        # heads whose fixed heads lead up to m would close a cycle (every entry is >= m here);
        # kept for fix(m), which moves those words below m's new head
        self._unblocked = self.chain_end != m
        if m == 1:  # nothing fixed yet: the engine's (stable) marginals
            return self.prepared.first.index_select(0, self.sentence)
        j = m - 1
        assert self.inverse is not None  # None only before word 1 (set by fix(1))
        row = self.inverse[:, 0, :]  # (K, N): row j of L-hat^{-1}
        diagonal = row[:, j : j + 1]
        probs = row.new_empty(row.shape[0], row.shape[1] + 1)
        torch.sub(diagonal, row, out=probs[:, 1:])  # head h >= 1: A[j, j] - A[j, h-1]
        if self.root_free is not None:  # single-root: row 0 of L-hat holds the ROOT weights (a 2nd ROOT child: 0) ...
            probs[:, 0] = torch.where(self.root_free, row[:, 0], 0.0)
            probs[:, 1] = diagonal[:, 0]  # ... so head = word 1 has no A[j, 0] term
        else:
            probs[:, 0] = diagonal[:, 0]
        probs.view(*self.row_shape, -1).mul_(self._per_row(self.prepared.weights_by_dep[m]))  # column m
        # a negative value is a rounding error of an impossible head; NaN (an untrusted
        # inverse) becomes 0 too, so that the row fails the sum check below
        probs = torch.where(self._unblocked & (probs > 0), probs, 0.0)
        total = probs.sum(-1)
        if m > self.shortest:  # a finished sentence's rows are not checked
            total.masked_fill_(self.lengths < m, 1.0)
        low, high = total.aminmax()
        if not (bool(low >= 1.0 - SUM_TOLERANCE) and bool(high <= 1.0 + SUM_TOLERANCE)):
            rows = (total.sub(1.0).abs_() > SUM_TOLERANCE).nonzero().squeeze(-1)
            exact = self._engine_conditionals(m, rows)
            keep = self._unblocked[rows] & (exact > 0)
            if self.root_free is not None:  # single-root
                keep[:, 0] &= self.root_free[rows]
            probs[rows] = torch.where(keep, exact, 0.0)
            self._refresh = rows  # by fix(m): their inverse anew
        return probs

    def _engine_conditionals(self, m: int, rows: Tensor) -> Tensor:
        """Word m's head marginals under the scores conditioned on the fixed heads (R, N+1).

        Each fixed word keeps only the arc from its chosen head; the engine's marginals of
        that distribution are the exact conditionals (refactorisation instead of updates).
        Multi-root on the CPU with numba (the conditioned sentences of :class:`TrappedModel`):
        the same conditionals by the kernel's exact log-space reduction
        (:func:`.trapped_kernels.exact_rows`, O(n^3) per row, as stochastic beam search's kernel
        takes them) instead of the engine's stable path.
        """
        work.add("refactorisations", rows.numel())
        if not self.single_root and native_enabled(self.chain_end):
            return fused.exact_conditionals(
                self.dist.scores.detach().double().masked_fill(~self.dist.arc_mask, -torch.inf),
                self.sentence[rows],
                self.chain_end[rows],
                m,
                self.lengths[rows],
            )
        scores = self.dist.scores.detach().double()[self.sentence[rows]]
        heads = self.heads[rows]
        fixed = heads >= 0  # (R, N+1)
        chosen = torch.zeros_like(scores).scatter_(1, heads.clamp_min(0).unsqueeze(1), 1.0) > 0
        scores = torch.where(fixed.unsqueeze(1) & ~chosen, torch.full_like(scores, -torch.inf), scores)
        scores = torch.where(fixed.unsqueeze(1) & chosen, torch.zeros_like(scores), scores)
        return engine_marginals(self.dist, scores, self.lengths[rows])[:, :, m]

    def fix(self, m: int, head: Tensor, active: Tensor | None = None) -> None:
        """Condition word m on ``head`` (K,) where ``active`` (K,) (None: every row): the
        Sherman-Morrison update.

        The new column c of L-hat is that of the single arc head -> m with weight 1. With
        x = L^{-1} c - e_j and denominator e_j^T L^{-1} c (= det ratio, > 0 for a possible
        head): L^{-1} <- L^{-1} - x (e_j^T L^{-1}) / (e_j^T L^{-1} c), j = m - 1.
        L^{-1} c combines two columns of L^{-1} (see :func:`_update_columns`).
        """
        inv = self.inverse  # [k, rows j..N-1, column]
        safe_head = head if active is None else torch.where(active, head, 0)
        columns = self.prepared.update_columns[m].index_select(0, safe_head)  # (K, 2)
        factor = self.prepared.update_coefficients[m].index_select(0, safe_head).unsqueeze(-1)  # of column[1]
        if inv is None:  # word 1 with a layout: the rows still share their sentence's inverse
            shared = self.prepared.inverse
            first, second = shared[self.sentence.unsqueeze(-1), :, columns].unbind(1)
            row = shared[self.sentence, 0, :]
        else:
            first, second = inv.gather(2, columns.unsqueeze(1).expand(-1, inv.shape[1], 2)).unbind(-1)
            row = inv[:, 0, :]
        lc = torch.addcmul(first, second, factor)  # rows j.. of L^{-1} c
        coefficient = lc[:, 0].reciprocal()
        if active is not None:  # a row not conditioned here is not updated
            coefficient = torch.where(active, coefficient, 0.0)
        x, y = lc[:, 1:].unsqueeze(-1), (row * coefficient.unsqueeze(-1)).unsqueeze(-2)
        if inv is None:  # row j is not read again: drop it
            x, y = x.view(*self.row_shape, *x.shape[1:]), y.view(*self.row_shape, *y.shape[1:])
            later = torch.addcmul(self._per_row(shared[:, 1:, :]), x, y, value=-1.0)
            self.inverse = later.view(self.sentence.numel(), *later.shape[-2:])
        else:
            self.inverse = inv[:, 1:, :].addcmul_(x, y, value=-1.0)
        # structure: word m now hangs below head's chain. A row not conditioned here takes
        # head 0 in the chain table (ROOT's entry is N+1: nothing is ruled out for it).
        new_end = self.chain_end.gather(1, safe_head.unsqueeze(-1))
        assert self._unblocked is not None  # set by probs(m)
        self.chain_end = torch.where(self._unblocked, self.chain_end, new_end)
        if self.root_free is not None:  # single-root: ROOT has a child now, a second one is impossible
            self.root_free.logical_and_(safe_head != 0 if active is None else (head != 0) | ~active)
        self.heads[:, m] = head if active is None else torch.where(active, head, self.heads[:, m])
        if self._refresh is not None:
            self._refactorise(m, self._refresh)
            self._refresh = None

    def _refactorise(self, m: int, rows: Tensor) -> None:
        """The L-hat^{-1} rows of the words after m, anew, for ``rows`` whose Sherman-Morrison
        updates drifted: one LU of L-hat conditioned on the heads fixed so far, with the arcs
        that would close a cycle with them removed (they are in no tree; their weight is what
        made L-hat ill-conditioned) and ROOT's arcs gone once ROOT has its child. The columns
        keep their scale, so the weights of :class:`Prepared` still apply. NaN where this LU is
        not trusted either: those rows' conditionals then come from the engine."""
        size = self.heads.shape[-1]
        positions = torch.arange(size, device=rows.device)
        weights = self.prepared.weights_by_dep[:, self.sentence[rows], :].permute(1, 2, 0)  # (R, heads, words)
        heads = self.heads[rows]
        fixed = heads >= 0
        one_arc = (positions.view(1, -1, 1) == heads.unsqueeze(1)).to(weights.dtype)
        weights = torch.where(fixed.unsqueeze(1), one_arc, weights)
        closing = (self.chain_end[rows].unsqueeze(-1) == positions) & ~fixed.unsqueeze(1)  # [x, y]
        weights = weights.masked_fill(closing, 0.0)
        if self.root_free is not None:
            weights[:, 0, :] = torch.where(self.root_free[rows].unsqueeze(-1) | fixed, weights[:, 0, :], 0.0)
        log_det, inverse, error = fast_inverse(weights, self.lengths[rows], self.single_root)
        work.add("factorisations", rows.numel())
        trusted = (error <= CONDITIONED_ERROR) & torch.isfinite(log_det)
        assert self.inverse is not None  # (set by fix(1))
        self.inverse[rows] = torch.where(trusted.view(-1, 1, 1), inverse, torch.nan)[:, m:, :].contiguous()


def _first_of_each(values: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The distinct ``values`` (U,), the position of each one's first occurrence (U,), and
    which distinct value each position holds (R,)."""
    distinct, which = torch.unique(values, return_inverse=True)
    positions = torch.arange(values.numel(), device=values.device)
    first = torch.full_like(distinct, values.numel()).scatter_reduce_(0, which, positions, "amin")
    return distinct, first, which


class TrappedSetup:
    """What :class:`TrappedModel` shares across its rows, for the sentences ``index`` of
    ``dist`` (see :mod:`.trapped`): their log-weights in float64 (-inf off the allowed arcs),
    lengths, strongly bound sets and (single-root) root child marginals in float64 (the
    engine's, cached, for float64 scores; for lower precision, those of the float64 scores, so
    that no tree representable in float64 is lost to underflow), and the
    :class:`.trapped.Groups` of the (sentence, root child) pairs met so far, computed when
    first needed.
    """

    def __init__(self, dist, index: Tensor):
        self.dist = dist
        self.single_root = dist.single_root
        self.scores = dist.scores.detach()[index].double().masked_fill(~dist.arc_mask[index], NEG_INF)
        self.lengths = dist.lengths[index]
        self.sets = StrongSets.of(self.scores, self.lengths, with_root=not dist.single_root)
        batch, size = self.scores.shape[0], self.scores.shape[-1]
        self.root: Tensor | None = None
        if self.single_root:
            if dist.scores.dtype == torch.float64:
                marginals = dist.marginals.index_select(0, index)
            else:
                exact = type(dist)(self.scores, self.lengths, single_root=True, stable=dist.stable)
                marginals = exact.marginals
            self.root = marginals[:, 0, :].detach().double().clamp_min(0.0)
        # the group of each (sentence, root child); multi-root: column 0
        self.index = torch.full((batch, size), -1, dtype=torch.long, device=self.scores.device)
        self.groups: Groups | None = None
        self.group_sentence = torch.zeros(0, dtype=torch.long, device=self.scores.device)
        self._depth: Tensor | None = None  # of the words in each sentence's best tree
        self._reach: tuple[Tensor, Tensor] | None = None

    def reach(self) -> tuple[Tensor, Tensor]:
        """(G, N+1) each, per group and head chosen for a trapped word: the last and the
        second-last slot of ``groups.exits`` (ROOT 0, trapped word i) that the word's next step
        reaches with more than :data:`SETTLED_LEAK` of its probability (0 where none): what
        :meth:`TrappedModel.fix` reads, computed once per set of groups."""
        groups = self.groups
        assert groups is not None
        if self._reach is None or self._reach[0].shape[0] != len(groups):
            exits = groups.exits
            slots = torch.arange(exits.shape[-1], device=exits.device)
            # where it may go, leaving out what is below SETTLED_LEAK of it (see SETTLED_LEAK)
            least = torch.logsumexp(exits, -1, keepdim=True) + math.log(SETTLED_LEAK)
            marked = torch.where(exits > least, slots, 0)
            top = marked.topk(min(2, marked.shape[-1]), -1).values
            second = top[..., 1] if top.shape[-1] > 1 else torch.zeros_like(top[..., 0])
            self._reach = (top[..., 0], second)
        return self._reach

    def group(self, sentence: Tensor, root_child: Tensor) -> Tensor:
        """(R,) the group of each (sentence, root child) pair (root child 0: multi-root)."""
        found = self.index[sentence, root_child]
        missing = found < 0
        if bool(missing.any()):
            size = self.scores.shape[-1]  # (one key per pair: unique(dim=0) is many times slower)
            pairs = torch.unique(sentence[missing] * size + root_child[missing])
            self._add(pairs.div(size, rounding_mode="floor"), pairs.remainder(size))
            found = self.index[sentence, root_child]
        return found

    def _add(self, sentence: Tensor, root_child: Tensor) -> None:
        scores = self.scores[sentence].clone()
        if self.single_root:  # ROOT's only arc is r's, r's only head is ROOT
            rows = torch.arange(sentence.numel(), device=scores.device)
            only = torch.zeros_like(scores[:, 0, :], dtype=torch.bool)
            only[rows, root_child] = True
            scores[:, 0, :] = scores[:, 0, :].masked_fill(~only, NEG_INF)
            scores[rows, :, root_child] = NEG_INF
            scores[rows, 0, root_child] = 0.0
        trapped = self.sets.trapped(sentence, root_child if self.single_root else None)
        if self._depth is None:  # the trapped words of every group top-down in its sentence's best tree
            self._depth = word_depths(self.scores, self.lengths, self.single_root)
        new = Groups.of(scores, self.lengths[sentence], trapped, root_child, self._depth[sentence])
        first = 0 if self.groups is None else len(self.groups)
        self.groups = new if self.groups is None else self.groups.cat(new)
        self.group_sentence = torch.cat([self.group_sentence, sentence])
        self.index[sentence, root_child] = torch.arange(first, first + sentence.numel(), device=scores.device)


class TrappedModel:
    """Exact conditionals for rows of sentences whose L-hat is ill-conditioned, step by step
    (:mod:`.trapped`): ``probs(t)`` (R, N+1) float64 >= +0 and ``fix(t, choice, active)`` for
    t in ``range(first_step, steps)``, ``branch(parent)`` as :meth:`Conditioner.branch`, and
    ``heads`` after the last step. Step 0: the root child (single-root); steps 1..N: the
    trapped words in order; steps N+1..2N: words 1..N, by a :class:`Conditioner` on the
    sentences conditioned on the root child and the trapped words' heads (built at step N+1).
    A row that does not take step t (``active(t)`` False) gets choice 0 with probability 1.
    Row i belongs to sentence ``sentence[i]`` of ``setup``.
    """

    first_step = 0

    def __init__(self, setup: TrappedSetup, sentence: Tensor):
        self.setup = setup
        self.sentence = sentence.clone()
        self.lengths = setup.lengths[sentence]
        rows, size = sentence.numel(), setup.scores.shape[-1]
        self.words = size - 1
        self.steps = 2 * self.words + 1
        self.choices = size  # the heads (the root child, at step 0) a step chooses among
        self.root_child = torch.zeros_like(self.sentence)
        self.group = torch.full_like(self.sentence, -1)
        if not setup.single_root:
            self.group = setup.group(self.sentence, self.root_child)
        self.fixed = torch.zeros(rows, self.words, dtype=torch.long, device=sentence.device)
        # rows with the same state (group and heads so far) share their computations; horizon:
        # the last trapped word that a fixed trapped word's next step may reach (settled states
        # are those whose horizon is before the current word: :func:`.trapped._settled_conditionals`)
        self.state = self.group.clone()
        self.reaches = torch.zeros_like(self.fixed)  # of each fixed trapped word
        self.horizon = torch.zeros_like(self.sentence)
        self.inner: Conditioner | None = None

    def active(self, t: int) -> Tensor:
        if t == 0:
            return torch.full_like(self.sentence, self.setup.single_root, dtype=torch.bool)
        if t <= self.words:
            assert self.setup.groups is not None  # made by step 0 or __init__
            return (self.group >= 0) & (self.setup.groups.count[self.group.clamp_min(0)] >= t)
        return self.lengths >= t - self.words

    def finished(self, t: int) -> Tensor:
        """(R,) the rows whose tree is complete before step t (only ever at the word steps)."""
        if t <= self.words:
            return torch.zeros_like(self.sentence, dtype=torch.bool)
        return self.lengths < t - self.words

    def probs(self, t: int, needed: Tensor | None = None) -> Tensor:
        """(R, N+1) step t's probabilities; ``needed`` (R,) bool: only those rows' are used (the
        other rows' unsettled states are not reduced: they may read the settled table)."""
        active = self.active(t)
        size = self.words + 1
        if t == 0:
            root = self.setup.root
            probs = (
                torch.zeros_like(self.fixed[:, :1].double().expand(-1, size)) if root is None else root[self.sentence]
            )
        elif t <= self.words:
            groups = self.setup.groups
            assert groups is not None
            group = self.group.clamp_min(0)
            probs = groups.settled[group, min(t, groups.settled.shape[1]) - 1]
            unsettled = active & (self.horizon >= t)
            index = (unsettled if needed is None else unsettled & needed).nonzero().squeeze(-1)
            if index.numel():  # the other states: their own reduction, once per state
                states, first, which = _first_of_each(self.state[index])
                rows = index[first]
                found = unsettled_conditionals(
                    groups, group[rows], self.fixed[rows], self.reaches[rows], t, SETTLED_LEAK
                )
                probs = probs.index_put((index,), found.index_select(0, which))
        else:
            if self.inner is None:
                self._start_words()
            assert self.inner is not None
            probs = self.inner.probs(t - self.words)
        idle = torch.zeros_like(probs)
        idle[:, 0] = 1.0
        return torch.where(active.unsqueeze(-1), probs, idle)

    def fix(self, t: int, choice: Tensor, active: Tensor | None = None) -> None:
        on = self.active(t) if active is None else active & self.active(t)
        if t == 0:
            self.root_child = torch.where(on, choice, self.root_child)
            index = on.nonzero().squeeze(-1)
            if index.numel():
                self.group[index] = self.setup.group(self.sentence[index], self.root_child[index])
            self.state = self.group.clone()
        elif t <= self.words:
            groups = self.setup.groups
            assert groups is not None
            self.fixed[:, t - 1] = torch.where(on, choice, self.fixed[:, t - 1])
            # the last trapped word (not t itself) the next step may reach (see SETTLED_LEAK)
            last, second = self.setup.reach()
            group = self.group.clamp_min(0)
            found = last[group, choice]
            reached = torch.where(found == t, second[group, choice], found)
            self.reaches[:, t - 1] = torch.where(on, reached, self.reaches[:, t - 1])
            self.horizon = torch.where(on, torch.maximum(self.horizon, reached), self.horizon)
            key = self.state * (self.words + 2) + torch.where(on, choice, self.words + 1)
            self.state = torch.unique(key, return_inverse=True)[1]
        else:
            assert self.inner is not None  # made by probs(t)
            self.inner.fix(t - self.words, choice, None if bool(on.all()) else on)

    def branch(self, parent: Tensor) -> Tensor:
        plan = branch_plan(parent)
        if plan is None:
            return parent
        rows, free, source = plan
        for state in (
            self.sentence,
            self.lengths,
            self.root_child,
            self.group,
            self.fixed,
            self.state,
            self.reaches,
            self.horizon,
        ):
            state.index_copy_(0, free, state.index_select(0, source))
        if self.inner is not None:
            self.inner.branch(parent)  # the same plan
        return rows

    @property
    def heads(self) -> Tensor:
        assert self.inner is not None  # every sentence has a word 1
        return self.inner.heads

    def _start_words(self) -> None:
        """Phase 2: Colbourn's conditioner on :meth:`conditioned`."""
        dist, prepared, which = self.conditioned()
        self.inner = Conditioner(dist, which, prepared)

    def conditioned(self, engine: bool = True) -> tuple[Any, Prepared, Tensor]:
        """One distribution per distinct (group, heads of the trapped words): the fixed words'
        columns hold their one arc, the arcs that would close a cycle with them are removed
        (they are in no tree of the conditioned distribution), and each column is shifted anew
        (by :func:`.laplacian.shifted_weights`). Returns those distributions, their
        :class:`Prepared` (``engine`` False: word 1's marginals NaN where the LU is not trusted,
        not the engine's: see :meth:`Prepared.of`), and the distribution of each row (R,)."""
        groups = self.setup.groups
        assert groups is not None
        _, first, which = _first_of_each(self.state)
        group = self.group.clamp_min(0)[first]
        fixed = self.fixed[first, : groups.order.shape[1]]
        scores = groups.scores.index_select(0, group).clone()
        count, order = groups.count[group], groups.order[group]
        size = scores.shape[-1]
        positions = torch.arange(size, device=scores.device)
        heads = torch.full((group.numel(), size), -1, dtype=torch.long, device=scores.device)
        used = torch.arange(order.shape[1], device=scores.device) < count.unsqueeze(-1)
        heads.scatter_(1, torch.where(used, order, 0), torch.where(used, fixed, -1))
        heads[:, 0] = -1
        if self.setup.single_root:
            heads.scatter_(1, groups.root_child[group].unsqueeze(-1), 0)
        fixed_word = heads >= 0
        one_arc = positions.view(1, -1, 1) == heads.unsqueeze(1)  # [h, m]: h is m's fixed head
        scores = torch.where(fixed_word.unsqueeze(1), torch.where(one_arc, 0.0, NEG_INF), scores)
        end = torch.where(fixed_word, heads, positions)  # where each chain of fixed heads ends
        for _ in range(max(1, math.ceil(math.log2(size)))):
            end = end.gather(1, end)
        closing = (end.unsqueeze(-1) == positions) & ~fixed_word.unsqueeze(1)  # [x, y]
        scores = scores.masked_fill(closing, NEG_INF)
        lengths = self.setup.lengths[self.setup.group_sentence[group]]
        dist = type(self.setup.dist)(scores, lengths, single_root=False)
        return dist, Prepared.of(dist, tolerance=CONDITIONED_ERROR, engine=engine), which


def draw_positive(
    weights: Tensor, generator: torch.Generator | None, uniform: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Draw an index per row of float64 ``weights`` (K, C) >= 0 proportionally to them.

    (The callers' weights are :meth:`Conditioner.probs`, already cleaned of rounding errors,
    or exponentials.) Returns the index (K,) (0 where nothing is possible) and whether the
    row had positive total weight (K,). ``uniform`` (K,): the rows' uniforms, drawn by the
    caller (see :func:`draw_categorical`).
    """
    cumulative = weights.cumsum(-1)
    possible = cumulative[:, -1] > 0
    index = draw_categorical(cumulative, generator, uniform)
    return torch.where(possible, index, torch.zeros_like(index)), possible


#: Most float64 entries of per-sample inverses held at once: Colbourn's sampler draws its
#: samples, and SBS searches its sentences, in chunks of this size (2^25 entries = 256 MiB).
CHUNK_ENTRIES = 2**25


def colbourn_sample(
    dist, num_samples: int, generator: Randomness = None, sentences: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Colbourn's ancestral sampler: heads (S, B, N+1) and their float64 log-probabilities.

    The log-probability is the sum of the log conditionals along the draw; it equals
    ``dist.log_prob(heads)`` up to rounding (a check of the sampler's accuracy). O(S n^3),
    vectorised over samples and sentences, one step per word position; samples are drawn
    in chunks of at most :data:`CHUNK_ENTRIES` inverse entries. Sentences whose L-hat is
    ill-conditioned (:meth:`Prepared.trapped`: peaked scores) are drawn through
    :class:`TrappedModel`, their trapped words first. With one generator per sentence (see
    :mod:`.streams`), sentence b's uniforms come in blocks of samples seeded from its own
    generator (:func:`.streams.block_seeds`), so no chunk boundary moves them.
    ``sentences`` (B',): only those sentences (the result's B axis is theirs; a per-sentence
    ``generator`` then has one generator per sentence of ``dist``).
    """
    batch, size = dist.scores.shape[0], dist.scores.shape[-1]
    prepared = Prepared.of(dist)
    chosen = torch.arange(batch, device=dist.scores.device) if sentences is None else sentences
    trapped = prepared.trapped().index_select(0, chosen)
    if sentences is None and not bool(trapped.any()):
        return _sample(dist, prepared, num_samples, generator)
    heads = torch.full((num_samples, chosen.numel(), size), -1, dtype=torch.long, device=dist.scores.device)
    log_prob = torch.zeros((num_samples, chosen.numel()), dtype=torch.float64, device=dist.scores.device)
    for hard in (False, True):
        where = (trapped == hard).nonzero().squeeze(-1)
        if where.numel() == 0:
            continue
        index = chosen.index_select(0, where)
        streams = [generator[i] for i in index.tolist()] if per_sentence(generator) else generator
        if hard:
            found = _sample_trapped(TrappedSetup(dist, index), num_samples, streams)
        else:
            scores = dist.scores.detach()[index]
            part = type(dist)(scores, dist.lengths[index], single_root=dist.single_root, stable=dist.stable)
            found = _sample(part, prepared.select(index), num_samples, streams)
        heads[:, where], log_prob[:, where] = found
    return heads, log_prob


def colbourn_given_root(dist, sentence: Tensor, root_child: Tensor, generator: torch.Generator | None) -> Tensor:
    """One tree per row, Colbourn's way, given its ROOT child: heads (R, N+1) for rows of
    sentences ``sentence`` (R,) of the single-root ``dist`` whose ROOT child is ``root_child``
    (R,) (drawn from its exact marginal by the caller). Through :class:`TrappedModel`, whose
    first step is that choice."""
    index, local = torch.unique(sentence, return_inverse=True)
    state = TrappedModel(TrappedSetup(dist, index), local)
    state.fix(0, root_child)
    for t in range(1, state.steps):
        active = state.active(t)
        if not bool(active.any()):
            continue
        head, possible = draw_positive(state.probs(t), generator)
        if bool((active & ~possible).any()):
            stuck = sorted(set(sentence[active & ~possible].tolist()))
            raise ValueError(
                f"Colbourn's sampler found no possible head at step {t} of sentence(s) {stuck[:10]} "
                "(the tree distribution has no tree there)."
            )
        state.fix(t, head, active)
    return state.heads


def _sample(dist, prepared: Prepared, num_samples: int, generator: Randomness) -> tuple[Tensor, Tensor]:
    """:func:`colbourn_sample` by Sherman-Morrison alone (the sentences' L-hat is well conditioned)."""
    batch, size = dist.scores.shape[0], dist.scores.shape[-1]
    seeds = None
    if per_sentence(generator):
        seeds, generator = block_seeds(generator, num_samples), None
    lengths = dist.lengths.tolist()
    native = native_enabled(prepared.inverse)
    # the fused kernel holds one inverse per thread, not per sample: larger chunks
    per_chunk = max(1, (CHUNK_ENTRIES // 4 if native else CHUNK_ENTRIES) // (batch * (size - 1) ** 2))
    if native:
        per_chunk = max(per_chunk, 1 + (num_samples - 1) // 4)
    parts = []
    for start in range(0, num_samples, per_chunk):
        stop = min(start + per_chunk, num_samples)
        uniforms = None
        if seeds is not None:
            uniforms = sample_block_uniforms(seeds, lengths, num_samples, start, stop, size - 1, prepared.inverse)
        if native:
            parts.append(_fused_chunk(dist, prepared, stop - start, generator, uniforms))
        else:
            parts.append(_colbourn_chunk(dist, prepared, stop - start, generator, uniforms))
    heads = torch.cat([part[0] for part in parts])
    log_prob = torch.cat([part[1] for part in parts])
    return heads.reshape(num_samples, batch, size), log_prob.reshape(num_samples, batch)


def _sample_trapped(setup: TrappedSetup, num_samples: int, generator: Randomness) -> tuple[Tensor, Tensor]:
    """:func:`colbourn_sample` through :class:`TrappedModel`. With per-sentence generators,
    sentence b's 2 n_b + 1 uniforms per sample serve step t <= N at index t (the root child,
    the trapped words) and word m at index n_b + m."""
    batch, size = setup.scores.shape[0], setup.scores.shape[-1]
    seeds = None
    if per_sentence(generator):
        seeds, generator = block_seeds(generator, num_samples), None
    widths = [2 * n + 1 for n in setup.lengths.tolist()]
    per_chunk = max(1, CHUNK_ENTRIES // (2 * batch * size * size))
    parts = []
    for start in range(0, num_samples, per_chunk):
        stop = min(start + per_chunk, num_samples)
        uniforms = None
        if seeds is not None:
            uniforms = sample_block_uniforms(seeds, widths, num_samples, start, stop, 2 * size - 1, setup.scores)
        parts.append(_trapped_chunk(setup, stop - start, generator, uniforms))
    heads = torch.cat([part[0] for part in parts])
    log_prob = torch.cat([part[1] for part in parts])
    return heads.reshape(num_samples, batch, size), log_prob.reshape(num_samples, batch)


def _trapped_chunk(setup: TrappedSetup, num_samples: int, generator: torch.Generator | None, uniforms: Tensor | None):
    """``num_samples`` draws per sentence through :class:`TrappedModel`: heads (S*B, N+1),
    log-probs (S*B,). ``uniforms`` (B, S, 2N+1) as :func:`_sample_trapped` lays them out."""
    batch = setup.scores.shape[0]
    sentence = torch.arange(batch, device=setup.scores.device).repeat(num_samples)  # row s * B + b
    state = TrappedModel(setup, sentence)
    log_prob = torch.zeros(sentence.numel(), dtype=torch.float64, device=sentence.device)
    native = native_enabled(setup.scores)
    for t in range(state.first_step, state.steps):
        if native and t == 1:  # the trapped words, then the words (phase 2) by the fused kernels
            log_prob = _fused_trapped_steps(state, generator, uniforms, log_prob)
            heads, words_log_prob = _fused_words(state, num_samples, generator, uniforms)
            return heads, log_prob + words_log_prob
        active = state.active(t)
        if not bool(active.any()):
            continue
        probs = state.probs(t)
        uniform = None
        if uniforms is not None:
            column = setup.lengths + (t - state.words) if t > state.words else torch.full_like(setup.lengths, t)
            picked = uniforms.gather(2, column.view(-1, 1, 1).expand(-1, uniforms.shape[1], 1)).squeeze(-1)
            uniform = picked.T.reshape(-1)  # row s * B + b
        log_prob = log_prob + _trapped_step(state, t, probs, active, generator, uniform)
    return state.heads, log_prob


def _trapped_step(
    state: TrappedModel,
    t: int,
    probs: Tensor,
    active: Tensor,
    generator: torch.Generator | None,
    uniform: Tensor | None,
) -> Tensor:
    """One torch step of :class:`TrappedModel`: each active row's head drawn from ``probs``
    (``uniform``: the draws to use, else from ``generator``) and fixed; returns the log-probability
    of each draw (0 for inactive rows). A row with no possible head is refused by name."""
    head, possible = draw_positive(probs, generator, uniform)
    dead = active & ~possible
    if dead.any():
        stuck = sorted(set(state.sentence[dead].tolist()))
        raise ValueError(
            f"Colbourn's sampler found no possible head at step {t} of sentence(s) {stuck[:10]} "
            "(the tree distribution has no tree there)."
        )
    chosen = probs.gather(1, head.unsqueeze(-1)).squeeze(-1) / probs.sum(-1)
    state.fix(t, head, active)
    return torch.where(active, chosen.log(), torch.zeros_like(chosen))


def _fused_trapped_steps(
    state: TrappedModel, generator: torch.Generator | None, uniforms: Tensor | None, log_prob: Tensor
) -> Tensor:
    """Phase 1 of :func:`_trapped_chunk` (steps 1..N: the trapped words) by the fused kernel
    (:func:`.fused.trapped_steps`: settled states from their tables, each other distinct state
    by its own reduction once per step), with the uniforms the torch steps would use (drawn
    here in their order when ``uniforms`` is None); a row from a step where it has no possible
    head by :class:`TrappedModel`'s torch steps, with the same uniforms (they name the
    sentence). Leaves ``state`` as the torch steps would (its ``state`` numbering too) and
    returns ``log_prob`` plus the trapped words' log-probabilities."""
    setup, words = state.setup, state.words
    groups = setup.groups
    assert groups is not None  # made by step 0 or TrappedModel's __init__
    rows = state.sentence.numel()
    count = torch.where(state.group >= 0, groups.count[state.group.clamp_min(0)], 0)
    steps = int(count.max()) if rows else 0
    if steps == 0:
        return log_prob
    if uniforms is None:  # draw_categorical's draws: (R, 1) at each step some row takes
        by_row = torch.cat([torch.rand((rows, 1), dtype=torch.float64, generator=generator) for _ in range(steps)], 1)
    else:  # (B, S, 2N+1): step t of sentence b at column t (see _sample_trapped)
        by_row = uniforms[:, :, 1 : steps + 1].to(torch.float64).transpose(0, 1).reshape(rows, steps)
    log_prob = log_prob.clone()
    numbered = state.state.clone()  # (the groups, as TrappedModel.fix(0) leaves them)
    start = fused.trapped_steps(
        groups,
        setup.reach(),
        SETTLED_LEAK,
        state.group,
        by_row,
        state.fixed,
        state.reaches,
        state.horizon,
        log_prob,
        numbered,
    )
    index = start.nonzero().squeeze(-1)
    if index.numel() == 0:  # every row done by the kernel, which numbered the states
        state.state = numbered
        return log_prob
    # from the step it stopped at, each row by the torch steps
    sub = TrappedModel(setup, state.sentence[index])
    for name in ("root_child", "group", "fixed", "reaches", "horizon"):
        setattr(sub, name, getattr(state, name)[index].clone())
    begin = start[index]
    key = torch.cat([sub.group.unsqueeze(-1), begin.unsqueeze(-1), sub.fixed], 1)
    sub.state = torch.unique(key, dim=0, return_inverse=True)[1]
    part = torch.zeros(index.numel(), dtype=torch.float64)
    for t in range(int(begin.min()), steps + 1):
        active = sub.active(t) & (begin <= t)
        if not bool(active.any()):
            continue
        part = part + _trapped_step(sub, t, sub.probs(t, active), active, None, by_row[index, t - 1])
    for name in ("fixed", "reaches", "horizon"):
        getattr(state, name)[index] = getattr(sub, name)
    log_prob[index] += part
    # the states numbered as the torch steps number them (see TrappedModel.fix)
    for t in range(1, steps + 1):
        key = state.state * (words + 2) + torch.where(count >= t, state.fixed[:, t - 1], words + 1)
        state.state = torch.unique(key, return_inverse=True)[1]
    return log_prob


def _fused_words(
    state: TrappedModel, num_samples: int, generator: torch.Generator | None, uniforms: Tensor | None
) -> tuple[Tensor, Tensor]:
    """Phase 2 of :func:`_trapped_chunk` (steps N+1..2N: words 1..N, Sherman-Morrison on the
    sentences conditioned on the root child and the trapped words' heads) by the fused kernel
    (:func:`.fused.colbourn_draws`), each row reading its conditioned distribution's inverse,
    with the uniforms the torch steps would use (drawn here in their order when ``uniforms`` is
    None). Rows whose draw missed the kernel's checks are redone by :class:`Conditioner`'s loop
    with the same uniforms (:func:`_conditioned_rows`). Returns heads (R, N+1) and the words'
    log-probabilities (R,)."""
    setup, words = state.setup, state.words
    dist, prepared, which = state.conditioned()
    rows = state.sentence.numel()
    lengths = state.lengths
    if uniforms is None:  # the torch loop's draws: (R, 1) at each word step some row takes
        longest = int(lengths.max()) if rows else 0
        drawn = [torch.rand((rows, 1), dtype=torch.float64, generator=generator) for _ in range(longest)]
        drawn.append(torch.zeros((rows, words - longest), dtype=torch.float64))
        by_row = torch.cat(drawn, 1)
    else:  # (B, S, 2N+1): word m of sentence b at column n_b + m (see _sample_trapped)
        column = (setup.lengths.view(-1, 1) + torch.arange(1, words + 1, device=lengths.device)).clamp_max(2 * words)
        picked = uniforms.to(torch.float64).gather(2, column.unsqueeze(1).expand(-1, num_samples, -1))
        by_row = picked.transpose(0, 1).reshape(rows, words)  # row s * B + b
    heads, log_prob, failed = fused.colbourn_draws(
        prepared.inverse,
        prepared.by_sentence(),
        prepared.first,
        lengths,
        by_row.unsqueeze(0),
        dist.single_root,
        SUM_TOLERANCE,
        which=which,
    )
    heads, log_prob, failed = heads[0], log_prob[0], failed[0]
    if bool(failed.any()):
        index = failed.nonzero().squeeze(-1)
        heads[index], log_prob[index] = _conditioned_rows(
            dist, prepared, which[index], by_row[index], state.sentence[index]
        )
    return heads, log_prob


def _conditioned_rows(dist, prepared: Prepared, which: Tensor, uniforms: Tensor, sentence: Tensor):
    """Colbourn's draws by :class:`Conditioner` for rows of distributions ``which`` (R,) of
    ``dist``, with their uniforms (R, N) per word; ``sentence`` (R,): the rows' sentences,
    for the error message. Returns heads (R, N+1) and log-probabilities (R,)."""
    state = Conditioner(dist, which, prepared)
    log_prob = torch.zeros(which.numel(), dtype=torch.float64, device=which.device)
    for m in range(1, state.steps):
        active = state.lengths >= m
        if not bool(active.any()):
            break
        log_prob = _draw_word(state, m, active, sentence, None, uniforms[:, m - 1], log_prob)
    return state.heads, log_prob


def _draw_word(
    state: Conditioner,
    m: int,
    active: Tensor,
    sentence: Tensor,
    generator: torch.Generator | None,
    uniform: Tensor | None,
    log_prob: Tensor,
) -> Tensor:
    """One step of Colbourn's draws: word m's head for every row of ``state`` from its
    conditionals (by ``uniform``, else ``generator``), fixed in ``state``; returns
    ``log_prob`` plus the active rows' log-probability of their draw. A row with no possible
    head is an error naming its sentence (``sentence``: each row's)."""
    probs = state.probs(m)
    head, possible = draw_positive(probs, generator, uniform)
    dead = active & ~possible
    if dead.any():
        stuck = sorted(set(sentence[dead].tolist()))
        raise ValueError(
            f"Colbourn's sampler found no possible head for word {m} of sentence(s) "
            f"{stuck[:10]} (the tree distribution has no tree there)."
        )
    chosen = probs.gather(1, head.unsqueeze(-1)).squeeze(-1) / probs.sum(-1)
    state.fix(m, head, None if m <= state.shortest else active)
    return log_prob + torch.where(active, chosen.log(), torch.zeros_like(chosen))


def _fused_chunk(
    dist, prepared: Prepared, num_samples: int, generator: torch.Generator | None, uniforms: Tensor | None
) -> tuple[Tensor, Tensor]:
    """:func:`_colbourn_chunk` by the fused CPU kernel (:func:`.fused.colbourn_draws`), with the
    same uniforms (drawn here in the torch loop's order and shapes when ``uniforms`` is None).
    The sentences where a draw missed the kernel's checks (Sherman-Morrison drift, no
    possible head) are redone whole by :func:`_colbourn_chunk` with the same uniforms."""
    batch, size = dist.scores.shape[0], dist.scores.shape[-1]
    if uniforms is None:  # what draw_categorical draws, word after word: (S*B, 1) each
        words = [torch.rand((num_samples * batch, 1), dtype=torch.float64, generator=generator) for _ in range(1, size)]
        drawn = torch.cat(words, 1) if words else torch.zeros((num_samples * batch, 0), dtype=torch.float64)
        by_sample = drawn.view(num_samples, batch, size - 1)
    else:
        by_sample = uniforms.to(torch.float64).transpose(0, 1)
    heads, log_prob, failed = fused.colbourn_draws(
        prepared.inverse,
        prepared.by_sentence(),
        prepared.first,
        dist.lengths,
        by_sample,
        dist.single_root,
        SUM_TOLERANCE,
    )
    if bool(failed.any()):  # those sentences by the reference loop, with the same uniforms
        index = failed.any(0).nonzero().squeeze(-1)
        scores = dist.scores.detach()[index]
        part = type(dist)(scores, dist.lengths[index], single_root=dist.single_root, stable=dist.stable)
        redone = _colbourn_chunk(part, prepared.select(index), num_samples, None, by_sample[:, index].transpose(0, 1))
        heads[:, index] = redone[0].view(num_samples, index.numel(), size)
        log_prob[:, index] = redone[1].view(num_samples, index.numel())
    return heads.view(-1, size), log_prob.view(-1)


def _colbourn_chunk(
    dist, prepared: Prepared, num_samples: int, generator: torch.Generator | None, uniforms: Tensor | None
):
    """``num_samples`` ancestral draws per sentence: heads (S*B, N+1), log-probs (S*B,).
    ``uniforms`` (B, S, N): each draw's uniform per word, or None to draw from ``generator``."""
    batch, size = dist.scores.shape[0], dist.scores.shape[-1]
    sentence = torch.arange(batch, device=dist.scores.device).repeat(num_samples)
    state = Conditioner(dist, sentence, prepared, layout="by_copy")
    log_prob = torch.zeros(sentence.numel(), dtype=torch.float64, device=sentence.device)
    for m in range(1, size):
        active = state.lengths >= m
        uniform = None if uniforms is None else uniforms[:, :, m - 1].T.reshape(-1)  # row s * B + b
        log_prob = _draw_word(state, m, active, sentence, generator, uniform, log_prob)
    return state.heads, log_prob
