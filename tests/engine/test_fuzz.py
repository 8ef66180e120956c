"""Property-based fuzzing of the engine: any length, scale, dtype, padding and forbidden arcs.

Every example is a padded batch of sentences (1..80 words, most of them short) whose scores
are N(0, scale²) with a log-uniform scale in [1e-3, 1e6], in float16, bfloat16, float32 or
float64, with garbage (NaN, ±inf, huge values) in the padding, ROOT's column and the
diagonal, and some arcs forbidden (-inf) around a tree that stays allowed. The reference for
each sentence is float64 on the same (rounded) scores, and brute-force enumeration for up
to 6 words. Deterministic (``derandomize``); about 10 s of CPU on a 2-core machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List

import pytest
import torch
from helpers.enumerate_trees import tree_log_probs
from hypothesis import given, settings
from hypothesis import strategies as st

from spacy_treexp import TreeDistribution
from spacy_treexp.engine.checks import is_tree, score_limit

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Many small kernels: on a shared 2-core machine a second thread only spins (see README)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@dataclass
class Batch:
    scores: torch.Tensor  # (B, N+1, N+1) in ``dtype``, garbage outside the sentences
    lengths: torch.Tensor
    single_root: bool
    dtype: torch.dtype
    scale: float

    def sentence(self, b: int) -> torch.Tensor:
        n = int(self.lengths[b])
        return self.scores[b, : n + 1, : n + 1]


def _random_tree(n: int, single_root: bool, gen: torch.Generator) -> List[int]:
    """Heads (index 0 unused) of a random tree: each word, in a random order, takes a head
    among the words placed before it (or ROOT; single-root: only the first word)."""
    order = (torch.randperm(n, generator=gen) + 1).tolist()
    heads = [-1] * (n + 1)
    for i, word in enumerate(order):
        choices = order[:i] if (single_root and i > 0) else [0] + order[:i]
        heads[word] = choices[int(torch.randint(len(choices), (1,), generator=gen))]
    return heads


def _length(draw) -> int:
    size = draw(st.sampled_from(["short"] * 6 + ["medium"] * 3 + ["long"]))
    bounds = {"short": (1, 8), "medium": (9, 30), "long": (31, 80)}[size]
    return draw(st.integers(*bounds))


@st.composite
def batches(draw, max_length: int = 80, max_batch: int = 3) -> Batch:
    dtype = draw(st.sampled_from(DTYPES))
    single_root = draw(st.booleans())
    lengths = [min(_length(draw), max_length) for _ in range(draw(st.integers(1, max_batch)))]
    n_max = max(lengths) + draw(st.integers(0, 2))
    # |N(0, 1)| stays below 6 in these sizes; half precision caps the scale (see score_limit)
    scale = min(10 ** draw(st.floats(-3, 6)), score_limit(dtype, n_max) / 8)
    forbid = draw(st.sampled_from([0.0, 0.0, 0.1, 0.5]))
    gen = torch.Generator().manual_seed(draw(st.integers(0, 2**31 - 1)))
    scores = torch.randn(len(lengths), n_max + 1, n_max + 1, generator=gen, dtype=torch.float64) * scale
    garbage = torch.tensor([float("nan"), float("inf"), float("-inf"), 1e30, -1e30])
    for b, n in enumerate(lengths):
        pick = torch.randint(len(garbage), (n_max + 1, n_max + 1), generator=gen)
        outside = torch.ones(n_max + 1, n_max + 1, dtype=torch.bool)
        outside[: n + 1, 1 : n + 1] = False
        outside.fill_diagonal_(True)
        scores[b] = torch.where(outside, garbage[pick], scores[b])
        if forbid:
            heads = _random_tree(n, single_root, gen)
            keep = torch.zeros(n + 1, n + 1, dtype=torch.bool)
            keep[heads[1:], torch.arange(1, n + 1)] = True
            drop = (torch.rand(n + 1, n + 1, generator=gen) < forbid) & ~keep
            scores[b, : n + 1, : n + 1] = scores[b, : n + 1, : n + 1].masked_fill(drop, float("-inf"))
    return Batch(scores.to(dtype), torch.tensor(lengths), single_root, dtype, scale)


def _tolerances(dtype: torch.dtype) -> dict:
    """How far each result may be from float64 on the same scores (absolute, and relative to
    max(1, |value|) for log Z and the entropy)."""
    if dtype == torch.float64:
        return {"mu": 1e-7, "sum": 1e-9, "log_z": 1e-9, "entropy": 1e-6}
    if dtype == torch.float32:
        return {"mu": 1e-4, "sum": 1e-4, "log_z": 1e-6, "entropy": 1e-3}
    # half precision: the results are rounded to the dtype (relative eps / 2)
    eps = torch.finfo(dtype).eps
    return {"mu": eps, "sum": eps, "log_z": eps, "entropy": eps}


def _log_trees(n: int, single_root: bool) -> float:
    """log of the number of trees over n words (Cayley: n^(n-1), (n+1)^(n-1))."""
    return (n - 1) * math.log(n if single_root else n + 1)


def _close(value: float, reference: float, tolerance: float) -> bool:
    return abs(value - reference) <= tolerance * max(1.0, abs(reference))


@settings(derandomize=True, deadline=None, max_examples=250)
@given(batches())
def test_batch_properties(batch):
    dist = TreeDistribution(batch.scores, batch.lengths, single_root=batch.single_root)
    tol = _tolerances(batch.dtype)
    mu = dist.marginals
    entropy = dist.entropy()
    log_z = dist.log_partition
    mode = dist.mode
    log_prob = dist.log_prob(mode)
    assert mu.dtype == entropy.dtype == log_z.dtype == batch.dtype
    for b, n in enumerate(batch.lengths.tolist()):
        reference = TreeDistribution(batch.sentence(b).double(), single_root=batch.single_root)
        m = mu[b].double()
        assert torch.isfinite(m).all() and m.min() >= -tol["sum"] and m.max() <= 1 + tol["sum"]
        assert m[n + 1 :].abs().sum() == 0 and m[:, n + 1 :].abs().sum() == 0
        columns = m[:, 1 : n + 1].sum(0)
        assert torch.allclose(columns, torch.ones_like(columns), atol=tol["sum"] * max(1, n) ** 0.5, rtol=0)
        if batch.single_root:
            assert abs(m[0].sum().item() - 1) <= tol["sum"] * max(1, n) ** 0.5
        assert (m[: n + 1, : n + 1] - reference.marginals).abs().max() <= tol["mu"]
        h = entropy[b].item()
        bound = _log_trees(n, batch.single_root)
        assert math.isfinite(h) and 0 <= h <= bound + tol["entropy"] * max(1.0, bound)
        assert _close(h, reference.entropy().item(), tol["entropy"])
        assert _close(log_z[b].item(), reference.log_partition.item(), tol["log_z"])
        # the MAP tree: the best score, log p <= 0 and = score - log Z
        best = mode[b, : n + 1]
        assert bool(is_tree(best.unsqueeze(0), torch.tensor([n]), batch.single_root))
        sentence = batch.sentence(b).double()
        score = sentence[best[1:], torch.arange(1, n + 1)].sum().item()
        assert _close(score, sentence[reference.mode[1:], torch.arange(1, n + 1)].sum().item(), 1e-12)
        assert log_prob[b].item() <= 0
        expected = reference.log_prob(best).item()
        assert abs(log_prob[b].item() - expected) <= tol["entropy"] * max(1.0, abs(score), abs(expected))
        # the sentence alone: the same results as in the padded batch
        alone = TreeDistribution(batch.sentence(b), single_root=batch.single_root)
        assert _close(alone.log_partition.item(), log_z[b].item(), tol["log_z"])
        assert (alone.marginals.double() - m[: n + 1, : n + 1]).abs().max() <= tol["mu"]
        assert _close(alone.entropy().item(), h, tol["entropy"])


@settings(derandomize=True, deadline=None, max_examples=150)
@given(batches(max_length=6, max_batch=2))
def test_small_sentences_against_enumeration(batch):
    dist = TreeDistribution(batch.scores, batch.lengths, single_root=batch.single_root)
    tol = _tolerances(batch.dtype)
    for b, n in enumerate(batch.lengths.tolist()):
        scores = batch.sentence(b).double()
        trees, log_p = tree_log_probs(scores, n, batch.single_root)
        possible = torch.isfinite(log_p)
        trees, log_p = trees[possible], log_p[possible]
        p = log_p.exp()
        mu = torch.zeros(n + 1, n + 1, dtype=torch.float64)
        for m in range(1, n + 1):
            mu[:, m].index_add_(0, trees[:, m], p)
        tree_scores = scores[trees[:, 1:], torch.arange(1, n + 1)].sum(-1)
        log_z = torch.logsumexp(tree_scores, 0).item()
        entropy = -(p * log_p).sum().item()
        assert _close(dist.log_partition[b].item(), log_z, tol["log_z"])
        assert (dist.marginals[b, : n + 1, : n + 1].double() - mu).abs().max() <= tol["mu"]
        assert _close(dist.entropy()[b].item(), entropy, tol["entropy"])
        assert torch.equal(tree_scores.max(), tree_scores[(trees == dist.mode[b, : n + 1]).all(-1)].max())
        heads = torch.full((len(trees), len(batch.lengths), batch.scores.shape[-1]), -1)
        heads[:, b, : n + 1] = trees
        computed = dist.log_prob(heads)[:, b].double()
        assert (computed <= 0).all()
        atol = tol["entropy"] * max(1.0, tree_scores.abs().max().item())
        assert torch.allclose(computed, log_p, atol=atol, rtol=tol["entropy"])


@settings(derandomize=True, deadline=None, max_examples=40)
@given(batches(max_length=30))
def test_samples_are_trees_of_the_sentence(batch):
    dist = TreeDistribution(batch.scores, batch.lengths, single_root=batch.single_root)
    samples = dist.sample((3,), method="colbourn", generator=torch.Generator().manual_seed(0))
    assert samples.shape == (3,) + batch.scores.shape[:2]
    assert is_tree(samples, batch.lengths, batch.single_root).all()
    assert torch.isfinite(dist.log_prob(samples)).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_scores_beyond_the_dtype_limit_are_refused(dtype):
    n = 10
    scores = torch.zeros(n + 1, n + 1, dtype=dtype)
    scores[3, 4] = min(2 * score_limit(dtype, n), torch.finfo(dtype).max)
    with pytest.raises(ValueError, match=r"sentence 0 reach magnitude .* rescale the scores"):
        TreeDistribution(scores)
