"""The stable path's plain-arithmetic GTH elimination, run ``block`` steps at a time (forward
in place, backward by two matrix products per block), gives the log Z and gradient of the
step-by-step recurrence (``block = 1``), which the enumeration tests check at n <= 6."""

import pytest
import torch

from spacy_treexp.engine import laplacian
from spacy_treexp.engine.checks import arc_mask, word_mask


def weights(n: int, lengths, seed: int) -> torch.Tensor:
    """Positive column-shifted-like weights over several orders of magnitude, zero on
    padding, self-loops and arcs into ROOT."""
    generator = torch.Generator().manual_seed(seed)
    shape = (len(lengths), n + 1, n + 1)
    w = torch.rand(shape, generator=generator, dtype=torch.float64)
    w = w * torch.exp(3 * torch.randn(shape, generator=generator, dtype=torch.float64))
    for b, m in enumerate(lengths):
        w[b, m + 1 :, :] = 0.0
        w[b, :, m + 1 :] = 0.0
    diagonal = torch.arange(n + 1)
    w[:, diagonal, diagonal] = 0.0
    w[:, :, 0] = 0.0
    return w


@pytest.mark.parametrize("single_root", [True, False])
@pytest.mark.parametrize("n", [1, 2, 3, 6, 17, 41])
def test_blocks_give_the_step_by_step_log_z_and_gradient(single_root, n):
    lengths = [n, max(1, n - 2), max(1, n // 2)]
    w = weights(n, lengths, seed=n)
    lengths_t = torch.tensor(lengths)
    log_z, gradient = laplacian._gth_linear_with_gradient(w, lengths_t, single_root, block=1)
    assert torch.isfinite(log_z).all()
    for block in (2, 3, 7, 64):
        blocked_z, blocked_gradient = laplacian._gth_linear_with_gradient(w, lengths_t, single_root, block=block)
        torch.testing.assert_close(blocked_z, log_z, rtol=1e-13, atol=0)
        torch.testing.assert_close(blocked_gradient, gradient, rtol=1e-10, atol=1e-300)
        forward_z = laplacian._gth_linear_steps(w, lengths_t, single_root, keep_steps=False, block=block)[0]
        torch.testing.assert_close(forward_z, log_z, rtol=1e-13, atol=0)
    # the input is left as it was (the elimination works in place on a copy)
    assert torch.equal(w, weights(n, lengths, seed=n))


def test_with_an_autograd_graph_the_elimination_is_not_in_place():
    w = weights(9, [9, 4], seed=1).requires_grad_(True)
    log_z = laplacian._gth_linear(w, torch.tensor([9, 4]), True)
    (gradient,) = torch.autograd.grad(log_z.sum(), w)
    _, by_hand = laplacian._gth_linear_with_gradient(w.detach(), torch.tensor([9, 4]), True, block=3)
    torch.testing.assert_close(gradient, by_hand, rtol=1e-10, atol=1e-300)


@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_a_batch_over_the_threshold_is_blocked_and_gives_the_same_marginals(scale):
    """Weights of more than _GTH_BLOCKED_BYTES go in blocks by default; on peaked scores too
    their marginals are the step-by-step ones, each word's heads summing to 1."""
    generator = torch.Generator().manual_seed(int(scale))
    batch, n = 8, 300
    scores = scale * torch.randn(batch, n + 1, n + 1, generator=generator, dtype=torch.float64)
    lengths = torch.tensor([n, n - 7, n // 2, 250, 200, 100, 37, 5])
    mask = arc_mask(lengths, n)
    log_weights, _ = laplacian.shifted_log_weights(scores, mask)
    w = torch.exp(log_weights).masked_fill(~mask, 0.0)
    assert laplacian._gth_block(w) == laplacian._GTH_BLOCK
    step_z, step_gradient = laplacian._gth_linear_with_gradient(w, lengths, True, block=1)
    log_z, gradient = laplacian._gth_linear_with_gradient(w, lengths, True)
    torch.testing.assert_close(log_z, step_z, rtol=1e-13, atol=0)
    marginals = w * gradient
    torch.testing.assert_close(marginals, w * step_gradient, rtol=0, atol=1e-12)
    words = word_mask(lengths, n)
    column_sums = marginals.sum(1)
    torch.testing.assert_close(column_sums[words], torch.ones(int(words.sum()), dtype=torch.float64))
