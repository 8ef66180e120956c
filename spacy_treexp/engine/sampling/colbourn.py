"""Colbourn's ancestral sampler: the tree distribution as an autoregressive model over heads.

Colbourn, Myrvold & Neufeld (1996); Stanojević (2022). Words are visited in order
m = 1..n; word m's head is drawn from its marginal *conditioned on the heads already
chosen*; fixing it replaces column m of Koo et al.'s matrix L-hat by the column of a
single arc of weight 1, a rank-one change, so L-hat^{-1} follows by one Sherman-Morrison
update in O(n^2) per word and O(n^3) per tree.

Accuracy: the inverse and every update are kept in float64 whatever the input dtype
(Sherman-Morrison drifts in float32); the first word's conditional is the engine's stable
marginal column. Every later conditional is checked (it must sum to 1); a sentence whose
L-hat is singular in float64 or whose updates drift is refactorised: its conditionals come
from the engine's marginals of the conditioned scores (see :data:`SUM_TOLERANCE`).
Two kinds of zero-probability heads are removed exactly, by structure, rather than by the
sign of a rounding error: heads closing a cycle with the heads already chosen, and
(single-root) a second ROOT child.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch
from torch import Tensor

from spacy_treexp.engine.laplacian import closed_form_marginals, fast_accepted, fast_inverse, shifted_weights
from spacy_treexp.engine.sampling.streams import Randomness, block_seeds, per_sentence, sample_block_uniforms
from spacy_treexp.engine.sampling.wilson import draw_categorical

#: Sherman-Morrison's conditionals of a word must sum to 1 within this (a residual check of
#: row j of L-hat^{-1} against column j of L-hat); a row that does not, or whose L-hat is
#: singular in float64, is *refactorised*: its conditionals come from the engine's exact
#: marginals of the conditioned scores (stable path where needed), O(n^3) per word.
SUM_TOLERANCE = 1e-6


@dataclass
class Prepared:
    """What Colbourn's sampler needs per sentence, computed once per distribution.

    weights_by_dep (N+1, B, N+1): the engine's column-shifted arc weights in float64,
    [m, b] = column m of sentence b (the heads of word m), contiguous per word;
    inverse (B, N, N): L-hat^{-1} in float64 (NaN where L-hat is singular in float64);
    first (B, N+1): word 1's head marginals in float64, >= +0, as the engine computes them for
    the float64 scores (also for lower-precision inputs, so that no tree whose probability is
    representable in float64 is lost to float32 underflow): from the same LU as ``inverse``
    where its error estimate is within the engine's tolerance, else the engine's stable path;
    update_columns (N+1, N+1, 2), update_coefficients (N+1, N+1): the table of
    :func:`_update_columns`.
    """

    weights_by_dep: Tensor
    inverse: Tensor
    first: Tensor
    update_columns: Tensor
    update_coefficients: Tensor

    @classmethod
    def of(cls, dist) -> Prepared:
        scores = dist.scores.detach()
        weights, _ = shifted_weights(scores.double(), dist.arc_mask)
        log_det, inverse, error = fast_inverse(weights, dist.lengths, dist.single_root)
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
            untrusted = ~fast_accepted(log_det, error, torch.float64)
            if bool(untrusted.any()):
                index = untrusted.nonzero().squeeze(-1)
                engine = type(dist)(scores.double()[index], dist.lengths[index], single_root=dist.single_root)
                first = first.index_put((index,), engine.marginals[:, :, 1])
        columns, coefficients = _update_columns(weights.shape[-1], dist.single_root)
        return cls(
            weights.permute(2, 0, 1).contiguous(),
            inverse,
            torch.where(first > 0, first, 0.0),
            columns.to(weights.device),
            coefficients.to(weights.device),
        )


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
    runs over long contiguous rows. An inverse that is not trusted (L-hat singular in
    float64, or its updates drifted) holds NaN, so that its conditionals fail the sum check
    and are *refactorised* at every later word (see :data:`SUM_TOLERANCE`).

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
        self.sentence = sentence
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

    def _per_row(self, values: Tensor) -> Tensor:
        """Per-sentence ``values`` (B, ...) for every row: (K, ...), or, with a ``layout``, a
        view that broadcasts against the rows seen as (*row_shape, ...)."""
        if self.layout is None:
            return values.index_select(0, self.sentence)
        return values.unsqueeze(1 if self.layout == "by_sentence" else 0)

    def branch(self, parent: Tensor) -> Tensor:
        """New partial trees: tree i continues row ``parent[i]`` (K,), a row of its own sentence.

        Returns the row each new tree takes (K,). The first tree of a parent stays in the
        parent's row; a parent's further trees take the rows of the parents that were
        dropped, and only into those rows is the parent's state copied. (A beam search
        mostly keeps its beams: after a few words, little is copied.) The rows of a sentence
        stay its rows: duplicates and free rows pair up in order, sentence by sentence.
        """
        kept = torch.zeros_like(parent, dtype=torch.bool).index_fill_(0, parent, True)
        if bool(kept.all()):  # every parent once (the common case after a few words)
            return parent
        order = torch.argsort(parent, stable=True)
        ordered = parent[order]
        repeated = torch.zeros_like(ordered, dtype=torch.bool)
        repeated[1:] = ordered[1:] == ordered[:-1]
        duplicates = order[repeated]
        free = (~kept).nonzero().squeeze(-1)  # as many as duplicates, in the same sentences
        source = parent.index_select(0, duplicates)
        for state in (self.inverse, self.heads, self.chain_end, self.root_free, self._unblocked):
            if state is not None:
                state.index_copy_(0, free, state.index_select(0, source))
        return parent.index_put((duplicates,), free)

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
            self.inverse[rows] = torch.nan  # refactorise these rows from now on
        return probs

    def _engine_conditionals(self, m: int, rows: Tensor) -> Tensor:
        """Word m's head marginals under the scores conditioned on the fixed heads (R, N+1).

        Each fixed word keeps only the arc from its chosen head; the engine's marginals of
        that distribution are the exact conditionals (refactorisation instead of updates).
        """
        scores = self.dist.scores.detach().double()[self.sentence[rows]]
        heads = self.heads[rows]
        fixed = heads >= 0  # (R, N+1)
        chosen = torch.zeros_like(scores).scatter_(1, heads.clamp_min(0).unsqueeze(1), 1.0) > 0
        scores = torch.where(fixed.unsqueeze(1) & ~chosen, torch.full_like(scores, -torch.inf), scores)
        scores = torch.where(fixed.unsqueeze(1) & chosen, torch.zeros_like(scores), scores)
        conditioned = type(self.dist)(scores, self.lengths[rows], single_root=self.single_root)
        possible = torch.isfinite(conditioned.log_partition)  # False: the prefix has no tree
        if not bool(possible.all()):
            marginals = torch.zeros_like(scores[:, :, m])
            marginals[possible] = (
                type(self.dist)(scores[possible], self.lengths[rows][possible], single_root=self.single_root)
                .marginals[:, :, m]
                .detach()
                .double()
            )
            return marginals
        return conditioned.marginals[:, :, m].detach().double()

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


def colbourn_sample(dist, num_samples: int, generator: Randomness = None) -> tuple[Tensor, Tensor]:
    """Colbourn's ancestral sampler: heads (S, B, N+1) and their float64 log-probabilities.

    The log-probability is the sum of the log conditionals along the draw; it equals
    ``dist.log_prob(heads)`` up to rounding (a check of the sampler's accuracy). O(S n^3),
    vectorised over samples and sentences, one step per word position; samples are drawn
    in chunks of at most :data:`CHUNK_ENTRIES` inverse entries. With one generator per
    sentence (see :mod:`.streams`), sentence b's uniforms come in blocks of samples seeded
    from its own generator (:func:`.streams.block_seeds`), so no chunk boundary moves them.
    """
    batch, size = dist.scores.shape[0], dist.scores.shape[-1]
    prepared = Prepared.of(dist)
    seeds = None
    if per_sentence(generator):
        seeds, generator = block_seeds(generator, num_samples), None
    lengths = dist.lengths.tolist()
    per_chunk = max(1, CHUNK_ENTRIES // (batch * (size - 1) ** 2))
    parts = []
    for start in range(0, num_samples, per_chunk):
        stop = min(start + per_chunk, num_samples)
        uniforms = None
        if seeds is not None:
            uniforms = sample_block_uniforms(seeds, lengths, num_samples, start, stop, size - 1, prepared.inverse)
        parts.append(_colbourn_chunk(dist, prepared, stop - start, generator, uniforms))
    heads = torch.cat([part[0] for part in parts])
    log_prob = torch.cat([part[1] for part in parts])
    return heads.reshape(num_samples, batch, size), log_prob.reshape(num_samples, batch)


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
        probs = state.probs(m)
        uniform = None if uniforms is None else uniforms[:, :, m - 1].T.reshape(-1)  # row s * B + b
        head, possible = draw_positive(probs, generator, uniform)
        dead = active & ~possible
        if dead.any():
            stuck = sorted(set(sentence[dead].tolist()))
            raise ValueError(
                f"Colbourn's sampler found no possible head for word {m} of sentence(s) "
                f"{stuck[:10]} (the tree distribution has no tree there)."
            )
        chosen = probs.gather(1, head.unsqueeze(-1)).squeeze(-1) / probs.sum(-1)
        log_prob = log_prob + torch.where(active, chosen.log(), torch.zeros_like(chosen))
        state.fix(m, head, None if m <= state.shortest else active)
    return state.heads, log_prob
