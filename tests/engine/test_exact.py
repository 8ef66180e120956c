"""Exact inference of TreeDistribution against brute-force enumeration (float64, 1e-8)."""

from __future__ import annotations

import warnings

import pytest
import torch
from helpers.enumerate_trees import tree_log_probs
from torch.distributions import kl_divergence

from spacy_treexp import TreeDistribution

TOL = 1e-8
PATHS = [False, True]  # stable=False: fast determinant path; True: GTH path


def _scores(n, seed, scale=2.0, labels=None):
    gen = torch.Generator().manual_seed(seed)
    shape = (n + 1, n + 1) if labels is None else (n + 1, n + 1, labels)
    return torch.randn(shape, generator=gen, dtype=torch.float64) * scale


def _brute(scores, n, single_root):
    trees, log_p = tree_log_probs(scores, n, single_root)
    p = log_p.exp()
    deps = torch.arange(1, n + 1)
    mu = torch.zeros(n + 1, n + 1, dtype=torch.float64)
    for m in range(1, n + 1):
        mu[:, m].index_add_(0, trees[:, m], p)
    tree_scores = scores[: n + 1, : n + 1][trees[:, 1:], deps].sum(-1)
    return trees, log_p, p, mu, torch.logsumexp(tree_scores, 0), tree_scores


CASES = [(n, single) for n in range(1, 7) for single in (True, False)]


@pytest.mark.parametrize("n,single_root", CASES)
@pytest.mark.parametrize("stable", PATHS)
def test_partition_marginals_entropy_logprob(n, single_root, stable):
    scores = _scores(n, seed=10 * n + single_root)
    trees, log_p, p, mu, log_z, _ = _brute(scores, n, single_root)
    dist = TreeDistribution(scores, single_root=single_root, stable=stable)
    assert abs(dist.log_partition.item() - log_z.item()) < TOL
    assert torch.allclose(dist.marginals, mu, atol=TOL, rtol=0)
    assert abs(dist.entropy().item() + (p * log_p).sum().item()) < TOL
    assert torch.allclose(dist.log_prob(trees), log_p, atol=TOL, rtol=0)


@pytest.mark.parametrize("n,single_root", CASES)
def test_mode_mbr_expected_attachment(n, single_root):
    scores = _scores(n, seed=100 + n, scale=3.0)
    trees, _, p, mu, _, tree_scores = _brute(scores, n, single_root)
    dist = TreeDistribution(scores, single_root=single_root)
    assert torch.equal(dist.mode, trees[tree_scores.argmax()])
    deps = torch.arange(1, n + 1)
    expected = mu[trees[:, 1:], deps].sum(-1)  # expected attachment of every tree
    assert torch.allclose(dist.expected_attachment(trees), expected, atol=TOL, rtol=0)
    mbr = dist.mbr()
    assert abs(dist.expected_attachment(mbr).item() - expected.max().item()) < TOL


def test_mode_with_positive_scores_respects_single_root():
    # All-positive scores: every extra ROOT child adds weight, yet exactly one is allowed.
    n = 5
    scores = _scores(n, seed=3).abs() + 50.0
    scores[0, 1:] += 100.0
    trees, _, _, _, _, tree_scores = _brute(scores, n, True)
    dist = TreeDistribution(scores)
    assert torch.equal(dist.mode, trees[tree_scores.argmax()])
    assert int((dist.mode == 0).sum()) == 1


@pytest.mark.parametrize("n,single_root", [(3, True), (4, False), (5, True), (6, True)])
@pytest.mark.parametrize("stable", PATHS)
def test_cross_entropy_kl_renyi(n, single_root, stable):
    s_p, s_q = _scores(n, seed=7), _scores(n, seed=8)
    _, log_p, p, _, _, _ = _brute(s_p, n, single_root)
    _, log_q, _, _, _, _ = _brute(s_q, n, single_root)
    P = TreeDistribution(s_p, single_root=single_root, stable=stable)
    Q = TreeDistribution(s_q, single_root=single_root, stable=stable)
    assert abs(P.cross_entropy(Q).item() + (p * log_q).sum().item()) < TOL
    assert abs(kl_divergence(P, Q).item() - (p * (log_p - log_q)).sum().item()) < TOL
    for alpha in (0.0, 0.5, 2.0, 3.0):
        if alpha == 0.0:
            expected = torch.log(torch.tensor(float(len(p)), dtype=torch.float64))
        else:
            expected = torch.logsumexp(alpha * log_p, 0) / (1 - alpha)
        assert abs(P.renyi_entropy(alpha).item() - expected.item()) < TOL, alpha
    assert abs(P.renyi_entropy(float("inf")).item() + log_p.max().item()) < TOL
    assert abs(P.renyi_entropy(1.0).item() - P.entropy().item()) < TOL
    near_one = P.renyi_entropy(1.0 + 1e-5).item()
    assert abs(near_one - P.entropy().item()) < 1e-3


@pytest.mark.parametrize("n,single_root", [(2, True), (4, True), (5, False), (6, False)])
def test_first_and_second_order_expectations(n, single_root):
    scores = _scores(n, seed=21)
    trees, _, p, _, _, _ = _brute(scores, n, single_root)
    gen = torch.Generator().manual_seed(5)
    r = torch.randn(1, n + 1, n + 1, 2, generator=gen, dtype=torch.float64)
    s = torch.randn(1, n + 1, n + 1, 3, generator=gen, dtype=torch.float64)
    deps = torch.arange(1, n + 1)
    r_tree = r[0][trees[:, 1:], deps].sum(1)  # (T, 2)
    s_tree = s[0][trees[:, 1:], deps].sum(1)  # (T, 3)
    dist = TreeDistribution(scores.unsqueeze(0), single_root=single_root)
    assert torch.allclose(dist.expectation(r)[0], (p[:, None] * r_tree).sum(0), atol=TOL, rtol=0)
    second = (p[:, None, None] * r_tree[:, :, None] * s_tree[:, None, :]).sum(0)
    assert torch.allclose(dist.second_order(r, s)[0], second, atol=TOL, rtol=0)
    mean_r, mean_s = (p[:, None] * r_tree).sum(0), (p[:, None] * s_tree).sum(0)
    covariance = second - mean_r[:, None] * mean_s[None, :]
    assert torch.allclose(dist.covariance(r, s)[0], covariance, atol=TOL, rtol=0)
    # Unvectorised r and s give the scalar forms.
    assert torch.allclose(dist.covariance(r[..., 0], s[..., 0])[0], covariance[0, 0], atol=TOL, rtol=0)


@pytest.mark.parametrize("scale,root_only_to_first", [(10.0, True), (30.0, False), (100.0, True), (300.0, False)])
@pytest.mark.parametrize("single_root", [True, False])
def test_second_order_on_the_stable_path(scale, root_only_to_first, single_root):
    """Peaked scores (and ROOT allowed to head word 1 only) send a sentence to the stable path,
    where L̂ is too badly conditioned for its inverse (a variance of −0.23 against 0.015, or
    a LinAlgError): the covariance and T2 still equal enumeration."""
    n = 4
    for seed in range(6):
        gen = torch.Generator().manual_seed(seed)
        scores = torch.randn(n + 1, n + 1, generator=gen, dtype=torch.float64) * scale
        if root_only_to_first:
            scores[0, 2:] = float("-inf")
        r = torch.randn(1, n + 1, n + 1, 2, generator=gen, dtype=torch.float64)
        trees, _, p, _, _, _ = _brute(scores, n, single_root)
        r_tree = r[0][trees[:, 1:], torch.arange(1, n + 1)].sum(1)  # (T, 2)
        mean = (p[:, None] * r_tree).sum(0)
        second = (p[:, None, None] * r_tree[:, :, None] * r_tree[:, None, :]).sum(0)
        covariance = second - mean[:, None] * mean[None, :]
        dist = TreeDistribution(scores.unsqueeze(0), single_root=single_root)
        assert torch.allclose(dist.covariance(r, r)[0], covariance, atol=1e-9, rtol=1e-6), seed
        assert torch.allclose(dist.second_order(r, r)[0], second, atol=1e-9, rtol=1e-6), seed


@pytest.mark.parametrize("single_root", [True, False])
def test_labeled_scores(single_root):
    n, n_labels = 4, 3
    labeled = _scores(n, seed=31, labels=n_labels)
    arc = torch.logsumexp(labeled, -1)
    trees, log_p, p, mu, _, _ = _brute(arc, n, single_root)
    dist = TreeDistribution(labeled.unsqueeze(0), single_root=single_root)
    assert torch.allclose(dist.marginals[0], mu, atol=TOL, rtol=0)
    label_mu = dist.label_marginals[0]
    expected = mu.unsqueeze(-1) * torch.softmax(labeled, -1)
    assert torch.allclose(label_mu[:, 1:], expected[:, 1:], atol=TOL, rtol=0)
    assert torch.allclose(label_mu.sum(-1), mu, atol=TOL, rtol=0)
    # A labeled tree's probability is its unlabeled probability times p(labels | arcs).
    tree = trees[p.argmax()]
    labels = torch.tensor([-1] + [1] * n)
    deps = torch.arange(1, n + 1)
    label_logp = torch.log_softmax(labeled, -1)[tree[1:], deps, 1].sum()
    got = dist.log_prob(tree.unsqueeze(0), labels.unsqueeze(0))
    assert abs(got.item() - (log_p[p.argmax()] + label_logp).item()) < TOL


def test_padding_never_changes_results():
    gen = torch.Generator().manual_seed(0)
    lengths = torch.tensor([3, 6, 1, 5])
    n_max = 6
    batch = torch.randn(4, n_max + 1, n_max + 1, generator=gen, dtype=torch.float64) * 3
    garbage = batch.clone()
    for b, n in enumerate(lengths.tolist()):
        garbage[b, n + 1 :, :] = float("nan")
        garbage[b, :, n + 1 :] = 1e6
    garbage[:, :, 0] = float("nan")  # ROOT column is ignored
    for stable in PATHS:
        together = TreeDistribution(garbage, lengths, stable=stable)
        for b, n in enumerate(lengths.tolist()):
            alone = TreeDistribution(batch[b, : n + 1, : n + 1], stable=stable)
            assert abs(together.log_partition[b].item() - alone.log_partition.item()) < 1e-10
            assert torch.allclose(together.marginals[b, : n + 1, : n + 1], alone.marginals, atol=1e-10, rtol=0)
            assert together.marginals[b, n + 1 :].abs().sum() == 0
            assert torch.equal(together.mode[b, : n + 1], alone.mode)
            assert (together.mode[b, n + 1 :] == -1).all()
            assert abs(together.entropy()[b].item() - alone.entropy().item()) < 1e-10


@pytest.mark.parametrize("single_root", [True, False])
@pytest.mark.parametrize("stable", PATHS)
def test_gradcheck(single_root, stable):
    gen = torch.Generator().manual_seed(2)
    scores = torch.randn(2, 4, 4, generator=gen, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([3, 2])

    def quantities(x):
        dist = TreeDistribution(x, lengths, single_root=single_root, stable=stable)
        return dist.log_partition, dist.marginals, dist.entropy()

    assert torch.autograd.gradcheck(quantities, (scores,))
    # Second derivatives of log Z (its gradient is the marginals, which carry their own graph).
    assert torch.autograd.gradgradcheck(
        lambda x: TreeDistribution(x, lengths, single_root=single_root, stable=stable).log_partition, (scores,)
    )
    r = torch.randn(2, 4, 4, generator=gen, dtype=torch.float64)
    assert torch.autograd.gradcheck(
        lambda x: TreeDistribution(x, lengths, single_root=single_root, stable=stable).covariance(r, r), (scores,)
    )


def test_log_partition_gradient_is_marginals():
    scores = _scores(5, seed=4).requires_grad_(True)
    dist = TreeDistribution(scores)
    (grad,) = torch.autograd.grad(dist.log_partition, scores)
    assert torch.allclose(grad, dist.marginals.detach(), atol=1e-12, rtol=0)


def test_non_trees_get_minus_infinity():
    dist = TreeDistribution(_scores(3, seed=1))
    cycle = torch.tensor([-1, 2, 1, 0])  # 1 <-> 2
    two_roots = torch.tensor([-1, 0, 0, 1])
    self_loop = torch.tensor([-1, 1, 0, 2])
    assert torch.isinf(dist.log_prob(torch.stack([cycle, two_roots, self_loop]))).all()
    multi = TreeDistribution(_scores(3, seed=1), single_root=False)
    assert torch.isfinite(multi.log_prob(two_roots))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_in_half_precision_out(dtype):
    scores = _scores(4, seed=2)
    dist = TreeDistribution(scores.to(dtype))
    assert dist.marginals.dtype == dtype and dist.log_partition.dtype == dtype
    reference = TreeDistribution(scores.to(dtype).double())
    assert torch.allclose(dist.marginals.double(), reference.marginals, atol=1e-2)


def test_float32_in_float32_out():
    scores = _scores(5, seed=2).float()
    dist = TreeDistribution(scores)
    for value in (dist.log_partition, dist.marginals, dist.entropy()):
        assert value.dtype == torch.float32
    assert dist.mode.dtype == torch.long


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("stable", PATHS)
def test_cuda_matches_cpu(stable):
    scores = torch.randn(3, 8, 8, dtype=torch.float64) * 5
    lengths = torch.tensor([7, 4, 2])
    cpu = TreeDistribution(scores, lengths, stable=stable)
    gpu = TreeDistribution(scores.cuda(), lengths.cuda(), stable=stable)
    assert gpu.marginals.device.type == "cuda"
    assert torch.allclose(gpu.marginals.cpu(), cpu.marginals, atol=1e-10)
    assert torch.allclose(gpu.log_partition.cpu(), cpu.log_partition, atol=1e-10)
    assert torch.equal(gpu.mode.cpu(), cpu.mode)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("n", [30, 120])
def test_cuda_float32_matches_cpu_float64(n):
    """Short float32 sentences start in float32 on CUDA, long ones in float64
    (CUDA_FLOAT64_FROM_LENGTH); either way within float32 rounding of the float64 answer."""
    scores = torch.randn(4, n + 1, n + 1, dtype=torch.float64, generator=torch.Generator().manual_seed(n)) * 2
    lengths = torch.tensor([n, n - 1, n // 2, 2])
    cpu = TreeDistribution(scores, lengths)
    gpu = TreeDistribution(scores.float().cuda(), lengths.cuda())
    assert gpu.marginals.dtype == torch.float32
    assert torch.allclose(gpu.marginals.cpu().double(), cpu.marginals, atol=1e-4)
    assert torch.allclose(gpu.entropy().cpu().double(), cpu.entropy(), atol=1e-3, rtol=1e-4)
    assert torch.equal(gpu.mode.cpu(), cpu.mode)


def test_first_pass_dtype_on_cpu_keeps_the_scores_dtype():
    from spacy_treexp.engine.distribution import CUDA_FLOAT64_FROM_LENGTH, _first_pass_dtype

    long = torch.zeros(1, CUDA_FLOAT64_FROM_LENGTH + 1, CUDA_FLOAT64_FROM_LENGTH + 1)
    assert _first_pass_dtype(long) == torch.float32
    assert _first_pass_dtype(long.double()) == torch.float64
    assert _first_pass_dtype(long.half()) == torch.float32


@pytest.mark.parametrize("n,single_root", [(n, s) for n in range(3, 7) for s in (True, False)])
def test_log_space_gth_with_forbidden_arcs(n, single_root):
    # A forbidden arc sends the stable path to its log-space arithmetic.
    scores = _scores(n, seed=50 + n, scale=4.0)
    scores[1, 2] = float("-inf")
    scores[0, n] = float("-inf")
    trees, log_p = tree_log_probs(scores, n, single_root)
    p = log_p.exp()
    mu = torch.zeros(n + 1, n + 1, dtype=torch.float64)
    for m in range(1, n + 1):
        mu[:, m].index_add_(0, trees[:, m], p)
    tree_scores = scores[trees[:, 1:], torch.arange(1, n + 1)].sum(-1)
    for stable in PATHS:
        dist = TreeDistribution(scores, single_root=single_root, stable=stable)
        assert abs(dist.log_partition.item() - torch.logsumexp(tree_scores, 0).item()) < TOL
        assert torch.allclose(dist.marginals, mu, atol=TOL, rtol=0)
        assert dist.marginals[1, 2] == 0


@pytest.mark.parametrize("single_root", [True, False])
def test_stable_path_batch_mixing_plain_and_log_space_sentences(single_root):
    # One batch, stable path: sentence 0 has positive weights (plain arithmetic, marginals
    # by the hand-written reverse pass), sentence 1 a forbidden arc (log space, autograd),
    # sentence 2 a weight below exp(-300) of its column's best (log space), all padded.
    n_max = 5
    lengths = torch.tensor([5, 4, 3])
    scores = torch.randn(3, n_max + 1, n_max + 1, generator=torch.Generator().manual_seed(7), dtype=torch.float64) * 3
    scores[1, 2, 3] = float("-inf")
    scores[2, 1, 2] = -400.0
    dist = TreeDistribution(scores, lengths, single_root=single_root, stable=True)
    for b, n in enumerate(lengths.tolist()):
        _, _, _, mu, log_z, _ = _brute(scores[b], n, single_root)
        assert abs(dist.log_partition[b].item() - log_z.item()) < TOL
        assert torch.allclose(dist.marginals[b, : n + 1, : n + 1], mu, atol=TOL, rtol=0)
        assert dist.marginals[b, n + 1 :].abs().sum() == 0 and dist.marginals[b, :, n + 1 :].abs().sum() == 0


@pytest.mark.parametrize("native", ["1", "0"])
def test_stable_false_warns_where_its_numbers_may_be_wrong(native, monkeypatch):
    """``stable=False`` keeps the fast path's result, but a sentence whose determinant the
    peaked scores ruined (its error estimate above tolerance) is named in a RuntimeWarning;
    a well-conditioned batch gets no warning and the exact numbers (fused kernel and torch)."""
    from spacy_treexp.engine.native import NATIVE_ENV

    monkeypatch.setenv(NATIVE_ENV, native)
    n = 60
    calm = torch.stack([_scores(n, seed) for seed in range(2)])
    peaked = calm.clone()
    peaked[1] = _scores(n, 8, scale=100.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fast = TreeDistribution(calm, stable=False)
        assert torch.allclose(fast.log_partition, TreeDistribution(calm, stable=True).log_partition, rtol=1e-10)
    with pytest.warns(RuntimeWarning, match=r"stable=False.*1 sentence\(s\) \[1\]") as caught:
        doubtful = TreeDistribution(peaked, stable=False).marginals
    assert caught[0].filename == __file__  # the caller's line, not the engine's
    # the entropy first (the fused kernel's pass, kept for the marginals): the same, in any order
    with pytest.warns(RuntimeWarning, match=r"stable=False.*\[1\]"):
        entropy_first = TreeDistribution(peaked, stable=False)
        entropy_first.entropy()
    assert not bool(entropy_first.used_stable_path.any())
    assert torch.allclose(entropy_first.marginals, doubtful)
    exact = TreeDistribution(peaked).marginals
    assert torch.allclose(doubtful[0], exact[0], atol=1e-10)


@pytest.mark.parametrize("single_root", [True, False])
def test_log_space_elimination_drops_padding_in_any_batch(single_root):
    """The log-space elimination shrinks its matrix each step, dropping the eliminated word or,
    once a sentence is done, a padding state: sentences of 1 to 6 words in one padded batch,
    every one in log space (an arc below exp(-300) of its column's best), equal brute force."""
    lengths = torch.tensor([1, 6, 2, 4, 3])
    scores = torch.randn(5, 7, 7, generator=torch.Generator().manual_seed(11), dtype=torch.float64) * 4
    scores[:, 0, 1] = -500.0
    dist = TreeDistribution(scores, lengths, single_root=single_root, stable=True)
    for b, n in enumerate(lengths.tolist()):
        _, _, _, mu, log_z, _ = _brute(scores[b], n, single_root)
        assert abs(dist.log_partition[b].item() - log_z.item()) < TOL
        assert torch.allclose(dist.marginals[b, : n + 1, : n + 1], mu, atol=TOL, rtol=0)


def test_variances_are_never_below_zero():
    """Cov[r, r]'s diagonal is a variance: on peaked scores the arc indicators' variances
    are near 0, where rounding gave values down to about −9e-16; they now stay at 0 or above,
    and still equal enumeration."""
    n = 5
    indicators = torch.eye((n + 1) * (n + 1), dtype=torch.float64).reshape(1, n + 1, n + 1, -1)
    lowest = 0.0
    for seed in range(40):
        gen = torch.Generator().manual_seed(seed)
        scores = torch.randn(n + 1, n + 1, generator=gen, dtype=torch.float64) * (1 + seed)
        dist = TreeDistribution(scores.unsqueeze(0))
        variances = torch.diagonal(dist.covariance(indicators, indicators)[0])
        lowest = min(lowest, variances.min().item())
        mu = dist.marginals[0].reshape(-1)
        allowed = torch.isfinite(scores).reshape(-1) & (torch.arange(mu.numel()) % (n + 1) != 0)
        expected = mu * (1 - mu)  # an arc is in the tree or not
        assert torch.allclose(variances[allowed], expected[allowed], atol=1e-9, rtol=0), seed
    assert lowest >= 0.0
