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
  ROOT children among the draws, sum_r 1 - (1 - mu_r)^S.

The constants are CPU microseconds on one thread, fitted on this project's 2-core
development VM (``benchmarks/bench_sampling.py --section auto`` prints the table that checks
them). Only their ratios matter, so a faster machine keeps the choices.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from spacy_treexp.engine.sampling.wilson import WALK_BUDGET, expected_walk_steps, remember_steps, rooted_walk_steps

#: Colbourn's sampler, per tree: COLBOURN_N3 n^3 / (1 + n / COLBOURN_KNEE) microseconds (its
#: O(n^3) rank-one updates run at memory speed from about n = 15 on: measured 3.3, 50 and
#: 190 us at n = 10, 30, 60).
COLBOURN_N3 = 0.00541
COLBOURN_KNEE = 15.6
#: The LU that checks one (sentence, ROOT child)'s walk: as much as one Colbourn tree.
PAIR_N2 = 0.0525
PAIR_N3 = 1.0e-4
#: Wilson's walks per tree: WALK_FIXED + FIRST_N2 n^2 microseconds (bookkeeping, first pointers).
WALK_FIXED = 1.0
FIRST_N2 = 0.003
#: Per head drawn by the walks' cycle popping: STEP_BASE + STEP_LOG log2(n + 1) microseconds.
STEP_BASE = 0.03
STEP_LOG = 0.03
#: Per round of cycle popping (a batch-wide step): microseconds. The rounds a batch takes are
#: about the largest expected visits to one word (max_v G[v, v]) times ln(its draws).
ROUND = 60.0


def colbourn_cost(lengths: Tensor) -> Tensor:
    """Predicted microseconds per tree of Colbourn's sampler for sentences of ``lengths``."""
    n = lengths.double()
    return COLBOURN_N3 * n**3 / (1 + n / COLBOURN_KNEE)


def walk_cost(lengths: Tensor, steps: Tensor, pairs: Tensor, num_samples: int) -> Tensor:
    """Predicted microseconds per tree of Wilson's walks, rounds left out (:data:`ROUND`):
    bookkeeping, first pointers, ``steps`` heads drawn per tree, and ``pairs`` ROOT-child
    checks (LUs) shared by ``num_samples`` trees."""
    n = lengths.double()
    per_step = STEP_BASE + STEP_LOG * torch.log2(n + 1)
    pair = PAIR_N2 * n**2 + PAIR_N3 * n**3
    return WALK_FIXED + FIRST_N2 * n**2 + per_step * steps + pairs * pair / num_samples


def walk_features(dist, num_samples: int) -> tuple[Tensor, Tensor, Tensor]:
    """(B,) per sentence: expected heads the walks draw per tree, the largest expected visits
    to one word, and the expected distinct ROOT children among ``num_samples`` draws.
    Single-root: the walk of the most likely ROOT child (its steps are kept for the walks,
    :func:`.wilson.remember_steps`); multi-root: the multi-root walk, whose steps also bound
    its largest visits."""
    if dist.single_root:
        mu = dist.marginals[:, 0, :].detach().double()
        sentences = torch.arange(mu.shape[0], device=mu.device)
        top = mu.argmax(-1)
        steps, peak = rooted_walk_steps(dist, sentences, top, with_peak=True)
        remember_steps(dist, sentences, top, steps)
        pairs = (1 - (1 - mu.clamp(0, 1)) ** num_samples).sum(-1)
        return steps, peak, pairs
    steps = expected_walk_steps(dist, "wilson")
    return steps, steps, torch.zeros_like(steps)


def walk_or_not(dist, num_samples: int, alone: bool = False) -> Tensor:
    """(B,) bool: the sentences ``"auto"`` samples by Wilson's walks (the others: Colbourn).

    Eligible: walks within :data:`.wilson.WALK_BUDGET` n heads per tree and cheaper per tree
    than Colbourn's (:func:`walk_cost`, :func:`colbourn_cost`). The rounds of cycle popping are
    shared by the batch: of the eligible sentences, those whose largest visits are at most t
    walk, for the t that minimises the predicted total (one pass over the sorted visits). A
    function of the scores and ``num_samples`` only, never of a draw. ``alone``: each
    sentence walks by itself (one generator per sentence), so each pays its own rounds and
    its choice does not depend on the rest of the batch.
    """
    steps, peak, pairs = walk_features(dist, num_samples)
    lengths = dist.lengths
    fine = (steps <= WALK_BUDGET * lengths.double()) & torch.isfinite(peak)
    saving = colbourn_cost(lengths) - walk_cost(lengths, torch.where(fine, steps, 0.0), pairs, num_samples)
    eligible = fine & (saving > 0)
    walk = torch.zeros_like(eligible)
    if not bool(eligible.any()):
        return walk
    if alone:
        return eligible & (saving * num_samples > ROUND * (1 + peak * math.log(num_samples + 1)))
    index = eligible.nonzero().squeeze(-1)
    order = torch.argsort(peak[index])
    index = index[order]
    saved = torch.cumsum(saving[index] * num_samples, 0)  # walking the first i + 1
    count = torch.arange(1, index.numel() + 1, device=index.device, dtype=torch.float64)
    rounds = 1 + peak[index] * torch.log(count * num_samples + 1)
    gain = saved - ROUND * rounds
    best = int(gain.argmax())
    if float(gain[best]) > 0:
        walk[index[: best + 1]] = True
    return walk


def predicted_costs(dist, num_samples: int) -> tuple[Tensor, Tensor]:
    """(B,) predicted microseconds per tree of Wilson's walks (their rounds left out) and of
    Colbourn's sampler: for benchmarks and tests."""
    steps, _, pairs = walk_features(dist, num_samples)
    walks = walk_cost(dist.lengths, torch.where(torch.isfinite(steps), steps, torch.inf), pairs, num_samples)
    return walks, colbourn_cost(dist.lengths)


__all__ = ["walk_or_not", "walk_features", "predicted_costs", "colbourn_cost", "walk_cost"]
