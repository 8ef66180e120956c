"""``sampler="auto"``: per sentence, the exact sampler predicted to be faster on its scores.

Stanojević (2022, Sec. 7) ends wishing for one sampler with Wilson's speed on easy sentences
and Colbourn's predictable cost. Both samplers are exact; ``"auto"`` sends each sentence to
one of them by a cost model that reads the scores only (never a draw), so the mixture is
exact too:

* Colbourn's sampler (:mod:`.colbourn`) costs about :func:`colbourn_cost` per tree whatever the
  scores (O(n^3), measured overhead-bound at n <= 100: close to n^2).
* Wilson-Marginal (single-root; multi-root: Wilson) costs the first pointers (n^2 comparisons
  per tree), the heads its walks draw (:func:`.wilson.rooted_walk_steps`, exact: about n on
  parser-like scores, 2 n on random ones, e^(score gap) on peaked ones) and, per distinct
  (sentence, ROOT child) drawn, one LU that checks that child's walk
  (:func:`.wilson.walkable_given_root`). The model reads the walk of the sentence's most likely
  ROOT child (one LU per sentence, kept for the walks) and the expected number of distinct
  ROOT children among the draws, sum_r 1 - (1 - mu_r)^S. Its rounds of cycle popping are
  shared by a call and heavy-tailed: a parser's unlikely ROOT children walk long
  (:func:`expected_rounds`).
* The analysis itself (a quick estimate, then those LUs) is priced too, and skipped where
  the largest saving it could find is smaller (:func:`analysis_cost`).

The constants are CPU microseconds on one thread, fitted on this project's 2-core
development VM (Colbourn's: its torch loop and, where :func:`.native.native_enabled`, its
fused kernel, which is faster than the walks on most sentences) (``benchmarks/bench_sampling.py --section auto`` prints the table that checks
them). Only their ratios matter, so a faster machine keeps the choices.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from spacy_treexp.engine.laplacian import shifted_weights
from spacy_treexp.engine.native import native_enabled
from spacy_treexp.engine.sampling.wilson import WALK_BUDGET, expected_walk_steps, remember_steps, rooted_walk_steps

#: Colbourn's sampler, per tree: COLBOURN_N3 n^3 / (1 + n / COLBOURN_KNEE) microseconds (its
#: O(n^3) rank-one updates run at memory speed from about n = 15 on: measured 3.3, 50 and
#: 190 us at n = 10, 30, 60).
COLBOURN_N3 = 0.00541
COLBOURN_KNEE = 15.6
#: The LU that checks one (sentence, ROOT child)'s walk: as much as one Colbourn tree.
PAIR_N2 = 0.0525
PAIR_N3 = 1.0e-4
#: Wilson's walks per tree: WALK_FIXED + FIRST_N2 n^2 microseconds (bookkeeping, and the first
#: pointers: one head per word, n^2 comparisons). Fitted on parser-like scores (their walks
#: draw about one head per word: no redraws), B = 64, 100 trees, n = 10..100, one thread:
#: ``python benchmarks/bench_sampling.py --section fit-walks --threads 1 --cpu-time`` (measured
#: 2.3, 3.3, 4.2, 8.7, 14.4, 26.2, 39.0 us per tree at n = 10, 20, 30, 40, 60, 80, 100; the
#: per-head cost charged to every head before, 1.0 + 0.003 n^2 + ~0.13 n at n = 30, predicted
#: 8.0 there and kept parser-like n = 30 off the walks, 1.22x of the better sampler).
WALK_FIXED = 1.8
FIRST_N2 = 0.0030
#: Per head the walks' cycle popping redraws (heads beyond the first pointers' one per word; a
#: redraw also pays its round's cycle search): STEP_BASE + STEP_LOG log2(n + 1) microseconds
#: (``--section auto`` at n = 60 and 100, x3 and x10 scores: 0.03 + 0.02 log2(n + 1), fitted when
#: every head was charged, sent x10 sentences to walks that cost more, 1.30x at n = 100).
STEP_BASE = 0.09
STEP_LOG = 0.06
#: One Colbourn draw given its ROOT child costs GIVEN_ROOT_FACTOR Colbourn trees plus
#: GIVEN_ROOT_FIXED microseconds (measured: 15, 74, 250 and 800 us at n = 10, 30, 60, 100).
GIVEN_ROOT_FACTOR = 1.2
GIVEN_ROOT_FIXED = 10.0
#: The walks must be predicted cheaper than Colbourn's sampler by this share of their roughly
#: estimated part: the redraws of cycle popping and the draws given their ROOT child (peaked
#: scores); the first pointers and the ROOT-child checks are known (:func:`uncertain_cost`).
MARGIN = 0.15
#: ROOT children drawn fewer times than this in expectation are not analysed ahead, nor more
#: than ROOT_CHILDREN per sentence (the likeliest): the walks analyse the others they draw
#: (one LU each, costly from n = 60 on), and the ones analysed here are kept for them.
LIKELY = 1.0
ROOT_CHILDREN = 4
#: A call of Colbourn's sampler costs about this per word of its longest sentence (its
#: per-word loop of small kernels), saved where every sentence of a batch walks.
CALL_PER_WORD = 150.0
#: Per round of cycle popping (a batch-wide step): ROUND_BASE + ROUND_LOG log2(n + 1)
#: microseconds (its cycle search takes log2(n + 1) gathers; measured 75-100 us at n = 50-78
#: on the shipped EWT parser's scores, where most rounds run on a few rows). The rounds a
#: call takes (:func:`expected_rounds`) are about the largest expected visits to one word
#: (max_v G[v, v], geometric per draw) times ln(its draws), plus a tail from the unlikely ROOT
#: children (not analysed ahead; a parser's wrong ROOT children have long walks): TAIL
#: ln(1 + e) rounds, e the number of sentences likely to draw one (1 - exp(-their expected
#: draws) each). Measured on the 18 EWT test sentences of 50-78 words alone, 8 seeds each:
#: mean rounds 6 to 114, against 8 to 23 from the visits alone (about 18 more where such a
#: child is drawn: 16 more on random scores, n = 40); 68 for four of them in one call.
ROUND_BASE = 10.0
ROUND_LOG = 12.0
TAIL = 25.0
#: A call of Wilson's walks on a part of the batch costs about this much beyond its trees
#: (its distribution, cumulative weights, first draws: measured 0.6-0.8 ms at n = 5-78).
WALK_CALL = 600.0
#: The analysis is priced too, and skipped where the best saving it could find is smaller:
#: :func:`short_cycle_steps` costs about SHORT_FIXED + SHORT_N3 B N^3 microseconds (measured
#: 0.26, 0.6, 3.7 and 10 ms at n = 10, 30, 60, 100, B = 64, one thread, loaded VM), and a
#: sentence's ROOT-child LUs (:func:`root_children_walks`) cost what :func:`walk_cost` charges
#: per pair.
SHORT_FIXED = 200.0
SHORT_N3 = 1.6e-4


#: Colbourn's sampler by the fused CPU kernel (:func:`.fused.colbourn_draws`, where
#: :func:`.native.native_enabled`), per tree: NATIVE_N3 n^3 + NATIVE_N2 n^2 + NATIVE_FIXED
#: microseconds (measured 1.2, 3.2, 6.6, 26 and 99 us at n = 10, 20, 30, 60, 100, B = 64, 100
#: trees per sentence, preparation included), and NATIVE_CALL_PER_WORD per call and word.
NATIVE_N3 = 7.0e-5
NATIVE_N2 = 0.003
NATIVE_FIXED = 1.0
NATIVE_CALL_PER_WORD = 30.0


def colbourn_cost(lengths: Tensor, padded: Tensor | None = None) -> Tensor:
    """Predicted microseconds per tree of Colbourn's sampler for sentences of ``lengths`` words
    in a batch padded to ``padded`` (by default ``lengths``): the fused kernel's where it runs
    (each sentence runs to its own length: in ragged batches, pricing it at the padded size
    sent EWT sentences of 50-80 words to walks that cost 2.4x more), else the torch loop's
    (its loops and matrices run to the batch's longest sentence)."""
    if native_enabled(lengths):
        return _colbourn_tree(lengths.double(), native=True)
    return torch_colbourn_cost(lengths if padded is None else padded)


def torch_colbourn_cost(lengths: Tensor) -> Tensor:
    """Predicted microseconds per tree of Colbourn's torch loop (also what a draw given its
    ROOT child costs: :func:`given_root_cost`)."""
    return _colbourn_tree(lengths.double(), native=False)


def _colbourn_tree(n, native: bool):
    """Colbourn's predicted microseconds per tree at ``n`` words (a float or a float tensor)."""
    if native:
        return NATIVE_N3 * n**3 + NATIVE_N2 * n**2 + NATIVE_FIXED
    return COLBOURN_N3 * n**3 / (1 + n / COLBOURN_KNEE)


def call_per_word(lengths: Tensor) -> float:
    """Predicted microseconds per word of one call of Colbourn's sampler, beyond its trees."""
    return NATIVE_CALL_PER_WORD if native_enabled(lengths) else CALL_PER_WORD


def redraw_cost(lengths: Tensor, steps: Tensor, words: Tensor | None = None) -> Tensor:
    """Predicted microseconds per tree of cycle popping's redraws: the ``steps`` heads drawn per
    tree beyond the first pointers' one per word (``words``: the sentence's own, by default
    ``lengths``, the size the walks run on)."""
    n = lengths.double()
    first = n if words is None else words.double()
    return (STEP_BASE + STEP_LOG * torch.log2(n + 1)) * (steps - first).clamp_min(0.0)


def walk_cost(lengths: Tensor, steps: Tensor, pairs: Tensor, num_samples: int, words: Tensor | None = None) -> Tensor:
    """Predicted microseconds per tree of Wilson's walks, rounds left out (:func:`round_cost`):
    bookkeeping, first pointers, the redraws among ``steps`` heads drawn per tree
    (:func:`redraw_cost`), and ``pairs`` ROOT-child checks (LUs) shared by ``num_samples`` trees."""
    n = lengths.double()
    return WALK_FIXED + FIRST_N2 * n**2 + redraw_cost(lengths, steps, words) + pairs * pair_cost(lengths) / num_samples


def uncertain_cost(lengths: Tensor, steps: Tensor, words: Tensor, given_root: Tensor | float = 0.0) -> Tensor:
    """The part of a walk's predicted cost that :data:`MARGIN` covers: the redraws, and the
    draws given their ROOT child (``given_root``, microseconds per tree)."""
    return redraw_cost(lengths, steps, words) + given_root


def round_cost(lengths):
    """Predicted microseconds of one round of cycle popping on sentences padded to ``lengths``
    (a tensor, or a float)."""
    if isinstance(lengths, Tensor):
        return ROUND_BASE + ROUND_LOG * torch.log2(lengths.double() + 1)
    return ROUND_BASE + ROUND_LOG * math.log2(lengths + 1)


def expected_rounds(peak: Tensor, events: Tensor, num_samples: int) -> Tensor:
    """Predicted rounds of cycle popping of a call whose largest expected visits to one word are
    ``peak`` (in a sentence of ``num_samples`` draws), and whose sentences draw an unlikely
    ROOT child ``events`` times in expectation (:func:`rare_events`, summed; :data:`TAIL`)."""
    return 1 + peak * math.log1p(num_samples) + TAIL * torch.log1p(events)


def rare_events(mu: Tensor, num_samples: int) -> Tensor:
    """(B,) the probability that a sentence's ``num_samples`` draws take one of the ROOT children
    not analysed ahead (:func:`likely_children`; ``mu``: the ROOT arcs' marginals)."""
    rare = torch.where(likely_children(mu, num_samples), 0.0, mu).sum(-1) * num_samples
    return 1 - torch.exp(-rare)


def short_cycle_steps(dist, index: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """(B,) a quick estimate, O(n^3) in one batched float32 product, of the heads the walks draw
    per tree, and of the largest visits to one word: the word that most prefers ROOT is taken as
    the ROOT child (the walks' end); a word v whose walk comes back to it within 2 to 4 steps
    with probability r_v (sum_k (P^k)[v, v], P the walk over word heads) revisits it about
    1 / (1 - r_v) times. It filters out, before any LU, the sentences whose walks cannot be
    cheaper than Colbourn's sampler. (P^3 and P^4's diagonals are row sums of elementwise
    products with P^2: one matrix product instead of four, :data:`SHORT_N3`.) ``index``: for
    those sentences only, in their own padding (inf elsewhere)."""
    if index is not None:
        steps = torch.full(dist.lengths.shape, torch.inf, dtype=torch.float64, device=dist.lengths.device)
        most = steps.clone()
        if index.numel():
            size = int(dist.lengths[index].max()) + 1
            part = type(dist)(
                dist.scores.detach()[index, :size, :size], dist.lengths[index], single_root=dist.single_root
            )
            steps[index], most[index] = short_cycle_steps(part)
        return steps, most
    weights, _ = shifted_weights(dist.scores.detach().float(), dist.arc_mask)  # an estimate: float32
    tiny = torch.finfo(torch.float32).tiny
    root = (weights[:, 0, 1:] / weights[:, :, 1:].sum(1).clamp_min(tiny)).argmax(-1)  # (B,) in 0..N-1
    words = weights[:, 1:, 1:]  # word heads only (the walks of Wilson-Marginal)
    positions = torch.arange(words.shape[-1], device=words.device)
    ending = positions == root.unsqueeze(-1)  # (B, N): the walks end there
    # step[u, v] = P(v -> u), the transpose of the walk (diag((P^T)^k) = diag(P^k)); none from the end
    step = words * ((~ending).float() / words.sum(1).clamp_min(tiny)).unsqueeze(-2)
    two = step @ step
    back = two.diagonal(dim1=1, dim2=2) + (two * step.transpose(1, 2)).sum(-1) + (two * two.transpose(1, 2)).sum(-1)
    counted = (positions < dist.lengths.unsqueeze(-1)) & ~ending
    visits = torch.where(counted, 1 / (1 - back.double().clamp(max=1.0)), 0.0)
    return visits.sum(-1), visits.amax(-1) if visits.shape[-1] else visits.sum(-1)


def walk_features(dist, num_samples: int, index: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """(B,) per sentence: expected heads the walks draw per tree, the largest expected visits
    to one word, and the expected distinct ROOT children among ``num_samples`` draws.
    Single-root: the walk of the most likely ROOT child (its steps are kept for the walks,
    :func:`.wilson.remember_steps`), for the sentences ``index`` only (inf elsewhere);
    multi-root: the multi-root walk, whose steps also bound its largest visits."""
    if dist.single_root:
        mu = dist.marginals[:, 0, :].detach().double()
        pairs = (1 - (1 - mu.clamp(0, 1)) ** num_samples).sum(-1)
        steps = torch.full_like(pairs, torch.inf)
        peak = steps.clone()
        sentences = torch.arange(mu.shape[0], device=mu.device) if index is None else index
        if sentences.numel():
            top = mu[sentences].argmax(-1)
            found, largest = rooted_walk_steps(dist, sentences, top, with_peak=True)
            remember_steps(dist, sentences, top, found)
            steps[sentences], peak[sentences] = found, largest
        return steps, peak, pairs
    steps = expected_walk_steps(dist, "wilson")
    return steps, steps, torch.zeros_like(steps)


def given_root_cost(lengths: Tensor) -> Tensor:
    """Predicted microseconds of one Colbourn draw given its ROOT child (a Wilson-Marginal draw
    whose ROOT child's walk is too long: :func:`.colbourn.colbourn_given_root`)."""
    return GIVEN_ROOT_FACTOR * torch_colbourn_cost(lengths) + GIVEN_ROOT_FIXED


def root_children_walks(dist, index: Tensor, num_samples: int) -> tuple[Tensor, Tensor, Tensor]:
    """For the sentences ``index`` (single-root): the walks of the :data:`ROOT_CHILDREN`
    likeliest ROOT children drawn at least :data:`LIKELY` times in expectation among
    ``num_samples`` draws, each analysed once
    (:func:`.wilson.rooted_walk_steps`, kept for the walks). Returns per sentence the expected
    heads drawn per tree by the draws that walk, the largest expected visits to one word of
    those walks (of the children drawn at least once in expectation), and the probability that a draw's ROOT child does not walk (too long)."""
    mu = dist.marginals[index, 0, :].detach().double()
    likely = likely_children(mu, num_samples)
    local, child = likely.nonzero(as_tuple=True)
    sentence = index[local]
    steps, peak = rooted_walk_steps(dist, sentence, child, with_peak=True)
    remember_steps(dist, sentence, child, steps)
    ok = steps <= WALK_BUDGET * dist.lengths[sentence].double()
    weight = mu[local, child]
    zero = torch.zeros(index.numel(), dtype=torch.float64, device=index.device)
    walked = zero.index_add(0, local, torch.where(ok, weight * steps, 0.0))
    unwalked = zero.index_add(0, local, torch.where(ok, 0.0, weight))
    # the rounds follow the walks drawn: a child drawn less than once in expectation is left out
    # (the likeliest child always counts)
    drawn = (weight * num_samples >= 1) | (child == mu[local].argmax(-1))
    largest = zero.scatter_reduce(0, local, torch.where(ok & drawn, peak, 0.0), "amax")
    return walked, largest, unwalked


def pair_cost(lengths: Tensor) -> Tensor:
    """Predicted microseconds of the LU that checks one (sentence, ROOT child)'s walk."""
    n = lengths.double()
    return PAIR_N2 * n**2 + PAIR_N3 * n**3


def analysis_cost(batch: int, n: int) -> float:
    """Predicted microseconds of :func:`short_cycle_steps` on ``batch`` sentences padded to ``n`` words."""
    return SHORT_FIXED + SHORT_N3 * batch * n**3


def likely_children(mu: Tensor, num_samples: int) -> Tensor:
    """(B, N+1) bool: the ROOT children :func:`root_children_walks` analyses, of the ROOT arcs'
    marginals ``mu``: the :data:`ROOT_CHILDREN` likeliest drawn at least :data:`LIKELY` times
    in expectation among ``num_samples`` draws."""
    likely = mu * num_samples >= LIKELY
    if mu.shape[-1] > ROOT_CHILDREN:  # the ROOT_CHILDREN likeliest only
        likely &= mu >= mu.topk(ROOT_CHILDREN, dim=-1).values[:, -1:]
    return likely


def _may_walk(dist, num_samples: int) -> bool:
    """False where no sentence can walk: even at the batch's padded size, Colbourn's tree costs
    less than the walks' first pointers, or all sentences' savings together stay below the
    quick estimate's cost (a bound in a few scalar operations, for short sentences)."""
    n = dist.scores.shape[-1] - 1
    spared = _colbourn_tree(float(n), native_enabled(dist.lengths)) - WALK_FIXED - FIRST_N2 * n**2
    least = round_cost(float(n)) * (1 + math.log1p(num_samples)) + WALK_CALL
    return spared * num_samples * dist.scores.shape[0] > least + analysis_cost(1, n)


def walk_or_not(dist, num_samples: int, alone: bool = False) -> Tensor:
    """(B,) bool: the sentences ``"auto"`` samples by Wilson's walks (the others: Colbourn).

    The analysis is priced like the samplers: none where even the cheapest walks (one head per
    word, the fewest rounds) would save less than it costs (:func:`analysis_cost`; in a few
    scalar operations for short sentences, :func:`_may_walk`). Then, without any LU, the
    sentences whose walks cannot win (:func:`short_cycle_steps`, run on the others only) go to
    Colbourn. Eligible: walks within :data:`.wilson.WALK_BUDGET` n heads per tree and cheaper
    per tree than Colbourn's by :data:`MARGIN` (:func:`walk_cost`, :func:`colbourn_cost`;
    single-root: every likely ROOT child's walk, :func:`root_children_walks`). The rounds of
    cycle popping are shared by the batch (:func:`expected_rounds`, :func:`round_cost`, the
    unlikely ROOT children's tail included): of the eligible sentences, those whose largest
    visits are at most t walk, for the t that minimises the predicted total (one pass over the
    sorted visits). A function of the scores and ``num_samples`` only, never of a draw.
    ``alone``: each sentence walks by itself (one generator per sentence), so each pays its own
    rounds and its choice does not depend on the rest of the batch.
    """
    lengths = dist.lengths
    if not _may_walk(dist, num_samples):
        return torch.zeros_like(lengths, dtype=torch.bool)
    # both samplers work on the batch's padded size (a walking sentence alone: its own)
    padded = torch.full_like(lengths, dist.scores.shape[-1] - 1)
    size = lengths if alone else padded
    colbourn = colbourn_cost(lengths, padded)
    # single-root: each distinct ROOT child drawn costs its walk's check (an LU), known from
    # the marginals without one: random scores draw dozens, and their checks outweigh Colbourn
    pairs = torch.ones_like(lengths, dtype=torch.float64)
    rare = torch.zeros_like(pairs)  # P(the draws take a ROOT child not analysed ahead)
    likely = torch.zeros_like(pairs)  # the ROOT children the analysis would check
    if dist.single_root:
        mu = dist.marginals[:, 0, :].detach().double()
        pairs = (1 - (1 - mu.clamp(0, 1)) ** num_samples).sum(-1)
        rare = rare_events(mu, num_samples)
        likely = likely_children(mu, num_samples).sum(-1).double()
    # the best the analysis could find: every sentence's walks at one head per word, the fewest
    # rounds (largest visits 1); no analysis where that saves less than the analysis costs
    floor = walk_cost(size, lengths.double(), pairs, num_samples, lengths)
    fewest = round_cost(size) * expected_rounds(torch.ones_like(rare), rare, num_samples) + WALK_CALL
    possible = (colbourn - floor).clamp_min(0.0) * num_samples
    if alone:
        possible = possible - fewest
    candidates = (possible > 0).nonzero().squeeze(-1)  # the quick estimate runs on these only
    possible = possible.clamp_min(0.0).sum() - (0.0 if alone else float(fewest.min()))
    if candidates.numel() == 0 or float(possible) <= analysis_cost(candidates.numel(), int(lengths[candidates].max())):
        return torch.zeros_like(lengths, dtype=torch.bool)
    steps, most = short_cycle_steps(dist, candidates)
    quick = walk_cost(size, steps, pairs, num_samples, lengths)
    if alone:  # its own rounds (in a batch they are shared: priced below)
        quick = quick + (round_cost(size) * expected_rounds(most, rare, num_samples) + WALK_CALL) / num_samples
    spared = (colbourn - quick - MARGIN * uncertain_cost(size, steps, lengths)) * num_samples
    # quick includes the LUs of the ROOT children the walks would draw; the analysis pays them
    # ahead for the likely ones, wasted where the sentence then goes to Colbourn: beyond the
    # likeliest child (the walks' usual end, the one the quick estimate reads) they are priced
    # (measured, 16 seeds: scores x10 at n = 60 1.07 -> 1.04x, x3 at n = 100 1.07 -> 1.03x;
    # EWT test 50-80 words 0.96 -> 0.97x)
    hopeful = spared > pair_cost(size) * (likely - 1).clamp_min(0)
    if not bool(hopeful.any()):
        return torch.zeros_like(hopeful)
    if dist.single_root:  # the likeliest ROOT children's walks, for the hopeful sentences
        index = hopeful.nonzero().squeeze(-1)
        walked, largest, unwalked = root_children_walks(dist, index, num_samples)
        n, words = size[index], lengths[index]
        # walked: the steps of the draws that walk, (1 - unwalked) of them, each with its words
        walking = words.double() * (1 - unwalked)
        cost = walk_cost(n, walked, pairs[index], num_samples, walking) + unwalked * given_root_cost(n)
        rough = uncertain_cost(n, walked, walking, unwalked * given_root_cost(n))
        saving = torch.full_like(pairs, -torch.inf).index_put((index,), colbourn[index] - cost - MARGIN * rough)
        peak = torch.full_like(pairs, torch.inf).index_put((index,), largest.double())
        given_root = torch.zeros_like(pairs).index_put((index,), unwalked * num_samples)
    else:
        steps, peak, pairs = walk_features(dist, num_samples)
        fine = hopeful & (steps <= WALK_BUDGET * lengths.double()) & torch.isfinite(peak)
        steps = torch.where(fine, steps, 0.0)
        cost = walk_cost(size, steps, pairs, num_samples, lengths) + MARGIN * uncertain_cost(size, steps, lengths)
        saving = torch.where(fine, colbourn - cost, -torch.inf)
        given_root = torch.zeros_like(saving)
    # a call of Colbourn given the ROOT child (when a draw's child does not walk) has its own
    # per-step overhead, over the 2 n + 1 steps of the trapped-words model
    given_root_call = 2 * CALL_PER_WORD * size.double()
    eligible = saving > 0
    walk = torch.zeros_like(eligible)
    if not bool(eligible.any()):
        return walk
    if alone:
        rounds = round_cost(size) * expected_rounds(peak, rare, num_samples) + WALK_CALL
        return eligible & (saving * num_samples > rounds + (1 - torch.exp(-given_root)) * given_root_call)
    index = eligible.nonzero().squeeze(-1)
    order = torch.argsort(peak[index])
    index = index[order]
    saved = torch.cumsum(saving[index] * num_samples, 0)  # walking the first i + 1
    # the largest peak so far (sorted; its sentence's draws), the unlikely ROOT children so far
    rounds = expected_rounds(peak[index], torch.cumsum(rare[index], 0), num_samples)
    unwalked_draws = torch.cumsum(given_root[index], 0)  # expected draws given their ROOT child
    gain = saved - round_cost(size[index]) * rounds - WALK_CALL
    gain -= (1 - torch.exp(-unwalked_draws)) * given_root_call[index]
    if index.numel() == lengths.numel():  # all walk: no Colbourn call at all
        gain[-1] += call_per_word(lengths) * float(lengths.max())
    best = int(gain.argmax())
    if float(gain[best]) > 0:
        walk[index[: best + 1]] = True
    return walk


def predicted_costs(dist, num_samples: int) -> tuple[Tensor, Tensor]:
    """(B,) predicted microseconds per tree of Wilson's walks (their rounds left out) and of
    Colbourn's sampler: for benchmarks and tests."""
    steps, _, pairs = walk_features(dist, num_samples)
    padded = torch.full_like(dist.lengths, dist.scores.shape[-1] - 1)
    walks = walk_cost(padded, torch.where(torch.isfinite(steps), steps, torch.inf), pairs, num_samples)
    return walks, colbourn_cost(dist.lengths, padded)


__all__ = ["walk_or_not", "walk_features", "predicted_costs", "colbourn_cost", "walk_cost", "redraw_cost"]
