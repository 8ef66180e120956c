"""The numba decoder (engine/decoding_kernels.py) gives the Python reference's trees exactly.

Same trees on random, tied (small integers: many equal trees, so the tie-breaking is
compared), -inf-masked and huge (x 2^1000) scores, in padded batches of mixed lengths; the
same NoTreeError messages; and the best score against brute force on n <= 6 in float64.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.enumerate_trees import all_trees

from spacy_treexp.engine.decoding import NoTreeError, max_spanning_trees
from spacy_treexp.engine.native import NATIVE_ENV

pytest.importorskip("numba")

NEG_INF = float("-inf")


def _decode(monkeypatch, native: bool, weights: torch.Tensor, lengths: torch.Tensor, single_root: bool):
    monkeypatch.setenv(NATIVE_ENV, "1" if native else "0")
    try:
        return max_spanning_trees(weights, lengths, single_root)
    except NoTreeError as error:
        return str(error)


def _batch(rng: np.random.Generator, kind: str, batch: int, most: int) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = rng.integers(1, most + 1, size=batch)
    shape = (batch, most + 1, most + 1)
    if kind == "random":
        weights = rng.normal(size=shape) * 5.0
    elif kind == "tied":
        weights = rng.integers(-2, 3, size=shape).astype(np.float64)
    elif kind == "masked":
        weights = rng.integers(-1, 2, size=shape).astype(np.float64)
        weights[rng.random(shape) < 0.3] = NEG_INF
    else:  # huge: integer scores x 2^1000 (the reference rescales them by a power of two)
        weights = rng.integers(-2, 3, size=shape).astype(np.float64) * 2.0**1000
    return torch.from_numpy(weights), torch.from_numpy(lengths)


@pytest.mark.parametrize("single_root", [True, False])
@pytest.mark.parametrize("kind", ["random", "tied", "masked", "huge"])
def test_kernel_trees_equal_the_reference(monkeypatch, kind, single_root):
    rng = np.random.default_rng(["random", "tied", "masked", "huge"].index(kind) * 2 + single_root)
    compared = 0
    for _ in range(15):
        weights, lengths = _batch(rng, kind, 5, 20)
        for b in range(weights.shape[0]):  # one sentence at a time too: a batch with no tree raises
            one = (weights[b : b + 1], lengths[b : b + 1])
            native = _decode(monkeypatch, True, *one, single_root)
            reference = _decode(monkeypatch, False, *one, single_root)
            if isinstance(reference, str):
                assert native == reference
            else:
                assert isinstance(native, torch.Tensor) and torch.equal(native, reference)
                compared += 1
        if kind != "masked":  # whole padded batches
            native = _decode(monkeypatch, True, weights, lengths, single_root)
            reference = _decode(monkeypatch, False, weights, lengths, single_root)
            assert isinstance(native, torch.Tensor) and torch.equal(native, reference)
    assert compared > 40


@pytest.mark.parametrize("single_root", [True, False])
def test_kernel_trees_are_best_by_brute_force(monkeypatch, single_root):
    monkeypatch.setenv(NATIVE_ENV, "1")
    gen = torch.Generator().manual_seed(5 + single_root)
    for _ in range(80):
        n = int(torch.randint(1, 7, (1,), generator=gen))
        weights = torch.randint(-2, 3, (n + 1, n + 1), generator=gen).to(torch.float64)
        weights[torch.rand(n + 1, n + 1, generator=gen) < 0.2] = NEG_INF
        trees = all_trees(n, single_root)
        scores = weights[trees[:, 1:], torch.arange(1, n + 1)].sum(-1)
        best = float(scores.max())
        if best == NEG_INF:
            with pytest.raises(NoTreeError):
                max_spanning_trees(weights[None], torch.tensor([n]), single_root)
            continue
        heads = max_spanning_trees(weights[None], torch.tensor([n]), single_root)[0]
        assert float(weights[heads[1:], torch.arange(1, n + 1)].sum()) == best


def test_float32_and_deep_nesting_equal_the_reference(monkeypatch):
    """float32 input (copied to float64 by both), and scores that nest cycles deeply and give
    ROOT many children (many single-root swaps)."""
    rng = np.random.default_rng(3)
    n = 80
    positions = np.arange(n + 1, dtype=np.float64)
    patterns = [
        np.add.outer(positions, np.zeros(n + 1)) + 0.01 * rng.normal(size=(n + 1, n + 1)),
        -np.abs(np.subtract.outer(positions, positions)) + 0.01 * rng.normal(size=(n + 1, n + 1)),
        rng.normal(size=(n + 1, n + 1)) + np.where(np.arange(n + 1)[:, None] == 0, 4.0, 0.0),
    ]
    for weights in patterns:
        for dtype in (torch.float64, torch.float32):
            tensor = torch.from_numpy(weights).to(dtype)[None]
            for single_root in (True, False):
                native = _decode(monkeypatch, True, tensor, torch.tensor([n]), single_root)
                reference = _decode(monkeypatch, False, tensor, torch.tensor([n]), single_root)
                assert torch.equal(native, reference)
