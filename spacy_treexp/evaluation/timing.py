"""The papers' table: entropy by T1 in O(n³) against an O(n⁴) baseline, by sentence length.

Zmigrod, Vieira & Cotterell (2021, Table 1) compare their O(n³) entropy with the O(n⁴)
method of Smith & Eisner (2007) per treebank. We bucket one treebank's sentences by length
instead. The baseline here, :func:`entropy_quartic`, computes the arc marginals one
dependent at a time: for each word m a fresh O(n³) solve with Koo et al.'s matrix L̂ gives
row m of L̂⁻¹ and so every μ(h → m) — n factorisations, O(n⁴) — then H = log Z − Σ μ s.
The engine's entropy (``TreeDistribution.entropy``: one factorisation, T1) gives the same
value; the table reports the largest difference as a check.
Times are per sentence, float64, on one torch thread, the best of ``repeats`` runs: one
sentence at a time (the complexity comparison; Python overhead dominates short sentences),
and batched (each bucket's sentences padded into one call, how the engine is used).
"""

from __future__ import annotations

import time
from typing import Dict, List, Optional, Sequence, Tuple

import numpy
import torch

from spacy_treexp.annotate import SentenceScores, torch_threads
from spacy_treexp.engine import TreeDistribution

#: Length buckets (inclusive bounds); the last is open-ended.
BUCKETS: Tuple[Tuple[int, int], ...] = ((1, 10), (11, 20), (21, 30), (31, 40), (41, 60), (61, 10_000))


def entropy_quartic(scores: torch.Tensor, lengths: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Entropy of the single-root tree distribution in O(n⁴) per sentence.

    ``scores``: ``(n+1, n+1)`` or ``(B, N+1, N+1)`` float64 log-potentials [head, dep]
    (column 0 and the diagonal ignored; ``lengths`` (B,) for padded batches). Marginals
    (Koo et al. 2007, §3.3, single-root), with A = L̂⁻¹ over 0-based words j: μ(0 → j) =
    w(0, j) A[j, 0]; μ(h → j) = w(h, j) ([j ≠ 0] A[j, j] − [h ≠ 0] A[j, h]) for word heads h.
    Row j of A is solved for separately for each j: a fresh O(n³) factorisation each.
    """
    unbatched = scores.dim() == 2
    if unbatched:
        scores = scores.unsqueeze(0)
    batch, size = scores.shape[0], scores.shape[-1]
    n_max = size - 1
    if lengths is None:
        lengths = torch.full((batch,), n_max, dtype=torch.long)
    positions = torch.arange(size)
    words = (positions > 0) & (positions <= lengths.unsqueeze(-1))  # (B, N+1)
    allowed = (words | (positions == 0)).unsqueeze(-1) & words.unsqueeze(-2)
    allowed = allowed & ~torch.eye(size, dtype=torch.bool)
    masked = scores.masked_fill(~allowed, float("-inf"))
    shift = masked.amax(dim=-2)
    shift = torch.where(torch.isfinite(shift), shift, torch.zeros_like(shift))
    weights = torch.exp(masked - shift.unsqueeze(-2))  # column-shifted: Z scales by exp(Σ shift)
    word = weights[:, 1:, 1:]
    padding = (~words[:, 1:]).to(scores.dtype)
    lap = torch.diag_embed(word.sum(-2) + padding) - word
    lap[:, 0] = weights[:, 0, 1:]
    sign, log_det = torch.linalg.slogdet(lap)
    if (sign <= 0).any():
        raise ValueError("no tree: det(L̂) <= 0")
    log_z = log_det + shift.sum(-1)
    safe_scores = torch.where(allowed, masked, torch.zeros_like(masked))
    expected = torch.zeros(batch, dtype=scores.dtype)
    transposed = lap.transpose(-1, -2)
    for j in range(n_max):
        unit = torch.zeros(batch, n_max, dtype=scores.dtype)
        unit[:, j] = 1.0
        row = torch.linalg.solve(transposed, unit)  # A[j, :] — a fresh O(n³) factorisation
        diagonal = row[:, j] if j != 0 else torch.zeros(batch, dtype=scores.dtype)
        heads_part = diagonal.unsqueeze(-1) - row
        heads_part[:, 0] = diagonal  # word head 0 has [h != 0] false in the formula
        into = torch.cat([(weights[:, 0, j + 1] * row[:, 0]).unsqueeze(-1), word[:, :, j] * heads_part], dim=-1)
        into[:, j + 1] = 0.0
        contribution = (into * safe_scores[:, :, j + 1]).sum(-1)
        expected = expected + torch.where(words[:, j + 1], contribution, torch.zeros_like(contribution))
    entropy = log_z - expected
    return entropy.squeeze(0) if unbatched else entropy


def _best_time(function, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - start)
    return best


def timing_table(
    scores: Sequence[SentenceScores], repeats: int = 3, max_sentences_per_bucket: int = 0, seed: int = 0
) -> Dict[str, object]:
    """Per length bucket: sentences, mean length, entropy per word, ms per sentence of the
    engine (T1, O(n³)) and of the O(n⁴) baseline, the speed-up, and the largest |ΔH|.

    ``max_sentences_per_bucket`` > 0 times a seeded random subset of each bucket (the
    entropy columns still use all sentences).
    """
    rng = numpy.random.default_rng(seed)
    rows: List[Dict[str, object]] = []
    totals = {
        "engine": 0.0,
        "baseline": 0.0,
        "timed": 0,
        "words": 0,
        "entropy": 0.0,
        "sentences": 0,
        "max_diff": 0.0,
        "engine_batched": 0.0,
        "baseline_batched": 0.0,
    }
    with torch.no_grad(), torch_threads(1):
        for low, high in BUCKETS:
            members = [s for s in scores if low <= s.n <= high]
            if not members:
                continue
            tensors = [torch.from_numpy(s.arc.astype(numpy.float64)) for s in members]
            entropies = numpy.array([float(TreeDistribution(t).entropy()) for t in tensors])
            lengths = numpy.array([s.n for s in members])
            timed = list(range(len(members)))
            if max_sentences_per_bucket and len(timed) > max_sentences_per_bucket:
                timed = sorted(rng.choice(len(members), max_sentences_per_bucket, replace=False).tolist())
            engine = baseline = 0.0
            max_diff = 0.0
            for i in timed:
                t = tensors[i]
                engine += _best_time(lambda: TreeDistribution(t).entropy(), repeats)
                baseline += _best_time(lambda: entropy_quartic(t), repeats)
                max_diff = max(max_diff, abs(float(entropy_quartic(t)) - entropies[i]))
            batch = torch.zeros((len(members), int(lengths.max()) + 1, int(lengths.max()) + 1), dtype=torch.float64)
            for b, t in enumerate(tensors):
                batch[b, : t.shape[0], : t.shape[0]] = t
            batch_lengths = torch.from_numpy(lengths)
            engine_batched = _best_time(lambda: TreeDistribution(batch, batch_lengths).entropy(), repeats)
            baseline_batched = _best_time(lambda: entropy_quartic(batch, batch_lengths), repeats)
            rows.append(
                {
                    "lengths": f"{low}-{high}" if high < 10_000 else f"{low}+",
                    "sentences": len(members),
                    "timed_sentences": len(timed),
                    "mean_length": float(lengths.mean()),
                    "entropy_nats_per_word": float(entropies.sum() / lengths.sum()),
                    "engine_ms_per_sentence": 1000 * engine / len(timed),
                    "baseline_ms_per_sentence": 1000 * baseline / len(timed),
                    "speedup": baseline / engine if engine > 0 else float("nan"),
                    "max_abs_entropy_difference": max_diff,
                    "engine_batched_ms_per_sentence": 1000 * engine_batched / len(members),
                    "baseline_batched_ms_per_sentence": 1000 * baseline_batched / len(members),
                    "batched_speedup": baseline_batched / engine_batched if engine_batched > 0 else float("nan"),
                }
            )
            totals["engine_batched"] += engine_batched
            totals["baseline_batched"] += baseline_batched
            totals["engine"] += engine
            totals["baseline"] += baseline
            totals["timed"] += len(timed)
            totals["words"] += int(lengths.sum())
            totals["entropy"] += float(entropies.sum())
            totals["sentences"] += len(members)
            totals["max_diff"] = max(totals["max_diff"], max_diff)
    summary = {
        "lengths": "all",
        "sentences": totals["sentences"],
        "timed_sentences": totals["timed"],
        "mean_length": totals["words"] / max(totals["sentences"], 1),
        "entropy_nats_per_word": totals["entropy"] / max(totals["words"], 1),
        "engine_ms_per_sentence": 1000 * totals["engine"] / max(totals["timed"], 1),
        "baseline_ms_per_sentence": 1000 * totals["baseline"] / max(totals["timed"], 1),
        "speedup": totals["baseline"] / totals["engine"] if totals["engine"] > 0 else float("nan"),
        "max_abs_entropy_difference": totals["max_diff"],
        "engine_batched_ms_per_sentence": 1000 * totals["engine_batched"] / max(totals["sentences"], 1),
        "baseline_batched_ms_per_sentence": 1000 * totals["baseline_batched"] / max(totals["sentences"], 1),
        "batched_speedup": (
            totals["baseline_batched"] / totals["engine_batched"] if totals["engine_batched"] > 0 else float("nan")
        ),
    }
    return {
        "rows": rows,
        "all": summary,
        "repeats": repeats,
        "threads": 1,
        "baseline": "per-dependent MTT solves, O(n^4)",
        "engine": "TreeDistribution.entropy (T1, O(n^3))",
    }
