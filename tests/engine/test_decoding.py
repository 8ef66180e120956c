"""The MAP / MBR tree decoder (engine/decoding.py) against brute force and the previous decoder.

Brute force: every tree of n <= 6 words in float64, on random, tied and -inf-masked scores,
through the public batched interface (padded batches). Reference: the previous O(n³)
Chu–Liu–Edmonds (tests/helpers/reference_decoding.py) on random sentences up to 200 words.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.enumerate_trees import all_trees
from helpers.reference_decoding import ReferenceNoTree, reference_best_tree

from spacy_treexp import TreeDistribution
from spacy_treexp.engine.checks import is_tree
from spacy_treexp.engine.decoding import NoTreeError, max_spanning_trees

NEG_INF = float("-inf")


def _tree_score(weights: torch.Tensor, heads: torch.Tensor) -> float:
    n = heads.shape[-1] - 1
    return float(weights[heads[1:], torch.arange(1, n + 1)].sum())


def _graphs(kind: str, count: int, seed: int):
    """``count`` weight matrices ``(n+1, n+1)`` of n in 1..6 of one kind."""
    gen = torch.Generator().manual_seed(seed)
    for _ in range(count):
        n = int(torch.randint(1, 7, (1,), generator=gen))
        if kind == "random":
            weights = torch.randn(n + 1, n + 1, generator=gen, dtype=torch.float64) * 3.0
        elif kind == "tied":  # small integers: many equal trees, sums exact
            weights = torch.randint(-2, 3, (n + 1, n + 1), generator=gen).to(torch.float64)
        else:  # masked: 40% of the arcs forbidden, often no (single-root) tree at all
            weights = torch.randn(n + 1, n + 1, generator=gen, dtype=torch.float64)
            weights[torch.rand(n + 1, n + 1, generator=gen) < 0.4] = NEG_INF
        yield n, weights


def _pad(graphs):
    """A padded batch ``(B, N+1, N+1)`` (padding: random junk) and its lengths."""
    n_max = max(n for n, _ in graphs)
    batch = torch.randn(len(graphs), n_max + 1, n_max + 1, dtype=torch.float64)
    for b, (n, weights) in enumerate(graphs):
        batch[b, : n + 1, : n + 1] = weights
    return batch, torch.tensor([n for n, _ in graphs])


@pytest.mark.parametrize("single_root", [True, False])
@pytest.mark.parametrize("kind", ["random", "tied", "masked"])
def test_best_tree_equals_brute_force(kind, single_root):
    graphs = list(_graphs(kind, 120, seed=["random", "tied", "masked"].index(kind) * 2 + single_root))
    for start in range(0, len(graphs), 8):  # batches of 8 sentences of mixed lengths
        chunk = graphs[start : start + 8]
        exists = []
        for n, weights in chunk:
            trees = all_trees(n, single_root)
            scores = weights[trees[:, 1:], torch.arange(1, n + 1)].sum(-1)
            exists.append(bool(torch.isfinite(scores.max())))
        solvable = [graph for graph, ok in zip(chunk, exists) if ok]
        for (n, weights), ok in zip(chunk, exists):
            if not ok:
                with pytest.raises(NoTreeError, match="sentence 0"):
                    max_spanning_trees(weights.unsqueeze(0), torch.tensor([n]), single_root)
        if not solvable:
            continue
        batch, lengths = _pad(solvable)
        heads = max_spanning_trees(batch, lengths, single_root)
        assert bool(is_tree(heads, lengths, single_root).all())
        for b, (n, weights) in enumerate(solvable):
            assert (heads[b, n + 1 :] == -1).all()
            trees = all_trees(n, single_root)
            best = weights[trees[:, 1:], torch.arange(1, n + 1)].sum(-1).max().item()
            got = _tree_score(weights, heads[b, : n + 1])
            if kind == "tied":
                assert got == best  # integer sums are exact
            else:
                assert abs(got - best) <= 1e-12 * max(1.0, abs(best))
            if kind == "random":  # the best tree is unique
                assert torch.equal(
                    heads[b, : n + 1], trees[weights[trees[:, 1:], torch.arange(1, n + 1)].sum(-1).argmax()]
                )


@pytest.mark.parametrize("single_root", [True, False])
def test_ties_are_broken_deterministically(single_root):
    weights = torch.zeros(1, 41, 41, dtype=torch.float64)  # every tree is best
    first = max_spanning_trees(weights, torch.tensor([40]), single_root)
    assert bool(is_tree(first, torch.tensor([40]), single_root).all())
    for _ in range(3):
        assert torch.equal(max_spanning_trees(weights.clone(), torch.tensor([40]), single_root), first)


@pytest.mark.parametrize("single_root", [True, False])
def test_equals_the_previous_decoder_up_to_200_words(single_root):
    rng = np.random.default_rng(7 + single_root)
    for n in [7, 10, 25, 60, 120, 200]:
        for trial in range(4):
            weights = rng.normal(size=(n + 1, n + 1)) * (1.0 if trial % 2 else 5.0)
            if trial == 3:
                weights[rng.random((n + 1, n + 1)) < 0.5] = NEG_INF
            try:
                expected = reference_best_tree(weights, single_root)
            except ReferenceNoTree:
                with pytest.raises(NoTreeError):
                    max_spanning_trees(torch.from_numpy(weights)[None], torch.tensor([n]), single_root)
                continue
            heads = max_spanning_trees(torch.from_numpy(weights)[None], torch.tensor([n]), single_root)[0]
            assert np.array_equal(heads.numpy(), expected), (n, trial)


def test_nested_cycles_and_root_swaps_equal_the_previous_decoder():
    """Scores made to nest cycles deeply (every word prefers a later word, or its neighbour)
    and to give ROOT many children, where the single-root step has to swap many times."""
    rng = np.random.default_rng(3)
    n = 150
    positions = np.arange(n + 1, dtype=np.float64)
    patterns = [
        np.add.outer(positions, np.zeros(n + 1)) + 0.01 * rng.normal(size=(n + 1, n + 1)),
        -np.abs(np.subtract.outer(positions, positions)) + 0.01 * rng.normal(size=(n + 1, n + 1)),
        rng.normal(size=(n + 1, n + 1)),
    ]
    patterns[2][0] += 4.0  # ROOT is every word's favourite head
    for weights in patterns:
        for single_root in (True, False):
            heads = max_spanning_trees(torch.from_numpy(weights)[None], torch.tensor([n]), single_root)[0]
            assert np.array_equal(heads.numpy(), reference_best_tree(weights, single_root))


def test_huge_scores_are_decoded_exactly():
    """Integer scores times 2^1000: the tree sums stay exact, and the old ROOT penalty would
    have overflowed; the best tree is the brute-force one."""
    gen = torch.Generator().manual_seed(11)
    for _ in range(30):
        n = int(torch.randint(2, 7, (1,), generator=gen))
        small = torch.randint(-2, 3, (n + 1, n + 1), generator=gen).to(torch.float64)
        weights = small * 2.0**1000
        for single_root in (True, False):
            heads = max_spanning_trees(weights[None], torch.tensor([n]), single_root)[0]
            trees = all_trees(n, single_root)
            best = small[trees[:, 1:], torch.arange(1, n + 1)].sum(-1).max().item()
            assert _tree_score(small, heads) == best


def test_no_single_root_tree_is_reported():
    weights = torch.full((1, 4, 4), NEG_INF, dtype=torch.float64)
    weights[0, 0, 1] = weights[0, 0, 2] = weights[0, 1, 3] = 0.0  # 1 and 2 can only hang from ROOT
    with pytest.raises(NoTreeError, match="sentence 0: no tree with exactly one child of ROOT"):
        max_spanning_trees(weights, torch.tensor([3]), True)
    assert int((max_spanning_trees(weights, torch.tensor([3]), False) == 0).sum()) == 2
    weights[0, 0] = NEG_INF
    with pytest.raises(NoTreeError, match="no arc from ROOT is allowed"):
        max_spanning_trees(weights, torch.tensor([3]), False)


def test_word_with_no_head_is_named():
    weights = torch.zeros(1, 4, 4, dtype=torch.float64)
    weights[0, :, 2] = NEG_INF
    weights[0, 0, 1] = weights[0, 3, 1] = NEG_INF  # 1 can only hang from 2, which has no head
    with pytest.raises(NoTreeError, match="sentence 0: node 2 has no allowed head"):
        max_spanning_trees(weights, torch.tensor([3]), True)
    weights = torch.full((1, 4, 4), NEG_INF, dtype=torch.float64)
    weights[0, 0, 3] = weights[0, 1, 2] = weights[0, 2, 1] = 0.0  # 1 and 2 only head each other
    with pytest.raises(NoTreeError, match=r"words \[1, 2\] can only be headed by one another"):
        max_spanning_trees(weights, torch.tensor([3]), False)


@pytest.mark.parametrize("single_root", [True, False])
def test_mbr_decodes_the_marginals(single_root):
    """MBR is the same decoder on the arc marginals: the reference decoder on the same
    marginals gives the same tree, and it is a tree with the highest expected attachment
    among a brute-force enumeration at n = 6."""
    gen = torch.Generator().manual_seed(5)
    scores = torch.randn(2, 41, 41, generator=gen, dtype=torch.float64)
    lengths = torch.tensor([40, 6])
    dist = TreeDistribution(scores, lengths, single_root=single_root)
    mbr = dist.mbr()
    marginals = dist.marginals.detach()
    expected = reference_best_tree(marginals[0].numpy(), single_root)
    assert np.array_equal(mbr[0].numpy(), expected)
    trees = all_trees(6, single_root)
    attachment = marginals[1][trees[:, 1:], torch.arange(1, 7)].sum(-1)
    assert abs(_tree_score(marginals[1], mbr[1, :7]) - attachment.max().item()) < 1e-12


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_input_decodes_its_values_exactly(dtype):
    """Scores of any float dtype are decoded as the float64 numbers they hold."""
    gen = torch.Generator().manual_seed(2)
    scores = (torch.randn(3, 31, 31, generator=gen) * 4).to(dtype)
    lengths = torch.tensor([30, 17, 5])
    for single_root in (True, False):
        heads = max_spanning_trees(scores, lengths, single_root)
        assert torch.equal(heads, max_spanning_trees(scores.to(torch.float64), lengths, single_root))
