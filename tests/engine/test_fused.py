"""The fused CPU kernel (engine/fused.py) against the torch path and brute-force enumeration."""

from __future__ import annotations

import pytest
import torch
from helpers.enumerate_trees import tree_log_probs

pytest.importorskip("numba")

from spacy_treexp import TreeDistribution  # noqa: E402
from spacy_treexp.engine import fused, laplacian  # noqa: E402
from spacy_treexp.engine.checks import prepare_scores, score_limit  # noqa: E402
from spacy_treexp.engine.native import NATIVE_ENV  # noqa: E402

TOL = 1e-8


@pytest.fixture
def kernel_calls(monkeypatch):
    """Counts the fused kernel's calls (so a test knows which path ran); native on."""
    monkeypatch.setenv(NATIVE_ENV, "1")
    calls = []
    original = fused.native_fast_pass

    def counted(*args, **kwargs):
        calls.append(args[0].shape[0])
        return original(*args, **kwargs)

    monkeypatch.setattr(fused, "native_fast_pass", counted)
    return calls


def _infer(scores, lengths, single_root, native, monkeypatch, **kwargs):
    monkeypatch.setenv(NATIVE_ENV, "1" if native else "0")
    dist = TreeDistribution(scores, lengths, single_root=single_root, **kwargs)
    return dist.log_partition, dist.marginals, dist.used_stable_path


def _brute(scores, n, single_root):
    """log Z and marginals of one sentence (its first n+1 rows/columns) by enumeration."""
    trees, log_p = tree_log_probs(scores, n, single_root)
    s = scores[: n + 1, : n + 1].to(torch.float64)
    log_z = torch.logsumexp(s[trees[:, 1:], torch.arange(1, n + 1)].sum(-1), 0)
    mu = torch.zeros(scores.shape[-1], scores.shape[-1], dtype=torch.float64)
    for m in range(1, n + 1):
        mu[:, m].index_add_(0, trees[:, m], log_p.exp())
    return log_z, mu


def _ragged(seed, scale=2.0, dtype=torch.float64):
    """Sentences of 1..6 words padded to 6, garbage past each length, some arcs forbidden."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([1, 2, 3, 4, 5, 6, 6, 3])
    scores = torch.randn(len(lengths), 7, 7, generator=gen, dtype=torch.float64) * scale
    scores[3, 2, 3] = float("-inf")  # word 2 may not head word 3
    scores[6, 0, 1:4] = float("-inf")  # words 1-3 may not be the root
    scores[7, 1, 2] = scores[7, 3, 2] = float("-inf")  # word 2 must hang from ROOT
    return scores.to(dtype), lengths


@pytest.mark.parametrize("single_root", [True, False])
def test_brute_force_ragged_masked(single_root, kernel_calls, monkeypatch):
    scores, lengths = _ragged(seed=1 + single_root)
    log_z, mu, stable = _infer(scores, lengths, single_root, True, monkeypatch)
    assert kernel_calls and not stable.any()
    for b, n in enumerate(lengths.tolist()):
        want_z, want_mu = _brute(scores[b], n, single_root)
        assert abs(log_z[b].item() - want_z.item()) < TOL
        assert torch.allclose(mu[b], want_mu, atol=TOL, rtol=0)
    torch_z, torch_mu, _ = _infer(scores, lengths, single_root, False, monkeypatch)
    assert torch.allclose(log_z, torch_z, atol=1e-12, rtol=0)
    assert torch.allclose(mu, torch_mu, atol=1e-12, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("single_root", [True, False])
def test_same_outputs_as_torch_fast_path(dtype, single_root):
    """Every output of the kernel, including the certificate, is the torch path's."""
    scores, lengths = _ragged(seed=3, dtype=dtype)
    scores, lengths, _, _, mask = prepare_scores(scores, lengths)
    tolerance, normalisation = laplacian.fast_tolerance(dtype), laplacian.normalisation_tolerance(dtype)
    out = fused.native_fast_pass(scores, lengths, single_root, tolerance, normalisation)
    want_log_weights, want_shift = laplacian.shifted_log_weights(scores, mask)
    want_det, want_mu, want_error = laplacian.fast_partition_and_marginals(
        torch.exp(want_log_weights), lengths, single_root
    )
    eps = torch.finfo(dtype).eps
    assert torch.equal(out.shift, want_shift)
    assert torch.allclose(out.log_det, want_det.to(torch.float64), atol=100 * eps, rtol=0)
    assert torch.allclose(out.marginals, want_mu, atol=100 * eps, rtol=0)
    assert torch.allclose(out.error, want_error.to(torch.float64), rtol=100 * eps, atol=0)
    want_normalised = laplacian.marginals_normalised(want_mu, lengths, single_root, dtype)
    assert torch.equal(out.deviation <= normalisation, want_normalised)
    assert out.deviation.max() < 100 * eps
    want_accepted = laplacian.fast_accepted(want_det, want_error, dtype) & want_normalised
    assert torch.equal(out.accepted, want_accepted) and out.all_accepted == bool(want_accepted.all())
    assert torch.allclose(out.shift_total, want_shift.to(torch.float64).sum(-1), rtol=1e-14, atol=0)
    # the entropy's terms: Σ μ s' over the allowed arcs, and log Z' − it (at least 0)
    want_expected = (want_mu.double() * want_log_weights.double()).nan_to_num(nan=0.0).sum((1, 2))
    assert torch.allclose(out.expected, want_expected, atol=1e3 * eps, rtol=0)
    want_entropy = (want_det.double() - want_expected).clamp(min=0.0)
    assert torch.allclose(out.entropy, want_entropy, atol=1e3 * eps, rtol=0)


@pytest.mark.parametrize("single_root", [True, False])
def test_peaked_scores_escalate_and_stay_exact(single_root, kernel_calls, monkeypatch):
    """Scores x1000: the kernel's certificate rejects them as the torch path's does, and the
    stable path's results match brute force."""
    scores, lengths = _ragged(seed=5, scale=2000.0)
    log_z, mu, stable = _infer(scores, lengths, single_root, True, monkeypatch)
    torch_z, torch_mu, torch_stable = _infer(scores, lengths, single_root, False, monkeypatch)
    assert kernel_calls and stable.any()
    assert torch.equal(stable, torch_stable)
    for b, n in enumerate(lengths.tolist()):
        want_z, want_mu = _brute(scores[b], n, single_root)
        assert abs(log_z[b].item() - want_z.item()) < TOL * max(1.0, abs(want_z.item()))
        assert torch.allclose(mu[b], want_mu, atol=TOL, rtol=0)
    assert torch.allclose(log_z, torch_z, atol=0, rtol=1e-12)
    assert torch.allclose(mu, torch_mu, atol=TOL, rtol=0)


def test_float32_agrees_at_30_words(kernel_calls, monkeypatch):
    gen = torch.Generator().manual_seed(7)
    scores = torch.randn(16, 31, 31, generator=gen, dtype=torch.float64) * 2
    lengths = torch.randint(20, 31, (16,), generator=gen)
    want_z, want_mu, _ = _infer(scores, lengths, True, False, monkeypatch)  # float64 reference
    for single_root in (True, False):
        log_z, mu, _ = _infer(scores.float(), lengths, single_root, True, monkeypatch)
        torch_z, torch_mu, _ = _infer(scores.float(), lengths, single_root, False, monkeypatch)
        if single_root:
            assert torch.allclose(log_z.double(), want_z, atol=0, rtol=1e-6)
            assert torch.allclose(mu.double(), want_mu, atol=1e-4, rtol=0)
        assert torch.allclose(log_z, torch_z, atol=0, rtol=1e-6)
        assert torch.allclose(mu, torch_mu, atol=1e-5, rtol=0)
    assert len(kernel_calls) >= 2


def test_no_tree_and_fast_only(kernel_calls, monkeypatch):
    """A sentence with every ROOT arc forbidden has no tree (zero pivot): log Z = -inf on both
    paths; stable=False keeps the kernel's finite results as they are."""
    scores, lengths = _ragged(seed=9)
    scores[4, 0, :] = float("-inf")
    log_z = TreeDistribution(scores, lengths).log_partition
    assert kernel_calls
    monkeypatch.setenv(NATIVE_ENV, "0")
    torch_z = TreeDistribution(scores, lengths).log_partition
    assert log_z[4] == torch_z[4] == float("-inf")
    finite = torch.arange(len(lengths)) != 4
    assert torch.allclose(log_z[finite], torch_z[finite], atol=1e-12, rtol=0)
    monkeypatch.setenv(NATIVE_ENV, "1")
    fast_z = TreeDistribution(scores, lengths, stable=False).log_partition
    assert torch.allclose(fast_z[finite], log_z[finite], atol=1e-12, rtol=0) and fast_z[4] == float("-inf")


def test_falls_back_to_torch(kernel_calls, monkeypatch):
    """The kernel is skipped where autograd is asked for, above the length limit, and when the
    switch is off; half precision runs through it in float32."""
    scores, lengths = _ragged(seed=11)
    leaf = scores.clone().requires_grad_(True)
    dist = TreeDistribution(leaf, lengths)
    (gradient,) = torch.autograd.grad(dist.log_partition.sum(), leaf)
    assert not kernel_calls and torch.allclose(gradient, dist.marginals.detach(), atol=1e-12, rtol=0)
    monkeypatch.setattr(fused, "NATIVE_MAX_LENGTH", 5)
    TreeDistribution(scores, lengths).marginals
    assert not kernel_calls
    monkeypatch.setattr(fused, "NATIVE_MAX_LENGTH", 6)
    monkeypatch.setenv(NATIVE_ENV, "0")
    TreeDistribution(scores, lengths).marginals
    assert not kernel_calls
    monkeypatch.setenv(NATIVE_ENV, "1")
    half = TreeDistribution(scores.half(), lengths).marginals
    assert kernel_calls and half.dtype == torch.float16
    want = TreeDistribution(scores.half().double(), lengths).marginals
    assert torch.allclose(half.double(), want, atol=2e-3, rtol=0)


def _message(scores, lengths):
    """The ValueError message of building a distribution, or None where it builds."""
    try:
        TreeDistribution(scores, lengths)
    except ValueError as error:
        return str(error)
    return None


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_input_scan_same_masks_and_messages_as_torch_checks(dtype, monkeypatch):
    """The kernel's one-pass check of the input (fused.scan_scores) gives the torch checks'
    allowed arcs where all is well and leaves them to name every problem otherwise."""
    scores, lengths = _ragged(seed=13, dtype=dtype)
    scores[0, 3, 4] = float("nan")  # padding of sentence 0 (1 word): ignored
    scores[5, 6, 6] = float("inf")  # the diagonal: ignored
    limit = score_limit(dtype, 6)
    scores[1, 0, 2] = 1.5 * limit  # within the limit of a 2-word sentence, above that of 6 words
    cases = {"clean": (scores, lengths)}
    for name, (b, h, m, value) in {
        "nan": (4, 2, 3, float("nan")),
        "+inf": (6, 0, 5, float("inf")),
        "too large": (5, 1, 2, -2 * limit),
        "too large for its length": (6, 1, 2, 1.5 * limit),
    }.items():
        bad = scores.clone()
        bad[b, h, m] = value
        cases[name] = (bad, lengths)
    cases["length 0"] = (scores, torch.tensor([1, 2, 3, 0, 5, 6, 6, 3]))
    cases["length 7"] = (scores, torch.tensor([1, 2, 3, 4, 5, 6, 7, 3]))
    for name, (values, sizes) in cases.items():
        monkeypatch.setenv(NATIVE_ENV, "0")
        want = _message(values, sizes)
        monkeypatch.setenv(NATIVE_ENV, "1")
        assert _message(values, sizes) == want, name
        assert (want is None) == (name == "clean"), name
    monkeypatch.setenv(NATIVE_ENV, "1")
    assert fused.scan_scores(scores, lengths) is not None  # the kernel settled the clean case
    native = TreeDistribution(scores, lengths)
    monkeypatch.setenv(NATIVE_ENV, "0")
    reference = TreeDistribution(scores, lengths)
    assert torch.equal(native.arc_mask, reference.arc_mask) and not native.arc_mask[3, 2, 3]
    assert torch.allclose(native.entropy(), reference.entropy(), atol=1e-6 if dtype == torch.float32 else 1e-12)


@pytest.mark.parametrize("single_root", [True, False])
def test_entropy_from_the_kernel_matches_brute_force(single_root, kernel_calls, monkeypatch):
    """The entropy the fused pass forms (log Z' − Σ μ s') against enumeration and the torch path."""
    scores, lengths = _ragged(seed=17 + single_root)
    dist = TreeDistribution(scores, lengths, single_root=single_root)
    entropy = dist.entropy()
    assert kernel_calls and "entropy" in dist._cache
    for b, n in enumerate(lengths.tolist()):
        _, log_p = tree_log_probs(scores[b], n, single_root)
        want = -torch.special.xlogy(log_p.exp(), log_p.exp()).sum()
        assert abs(entropy[b].item() - want.item()) < TOL
    monkeypatch.setenv(NATIVE_ENV, "0")
    assert torch.allclose(entropy, TreeDistribution(scores, lengths, single_root=single_root).entropy(), atol=1e-12)


def test_vectorised_exp_within_an_ulp_of_libm():
    """The kernel's exp (fused._exp_nonpositive) against numpy's on x <= 0: within 2 ulp where
    the result is normal, one subnormal step below, exactly 1 at 0 and 0 at -inf; written
    to float32 it is float64's exp rounded (within 1 float32 ulp)."""
    import numpy as np

    gen = np.random.default_rng(0)
    x = np.concatenate(
        [
            -np.linspace(0.0, 750.0, 200_001),
            -gen.random(10_000) * 1e-6,
            -np.exp(gen.standard_normal(10_000) * 4),
            [0.0, -0.0, -np.inf, -745.1, -745.2, -708.4, -708.3],
        ]
    )
    out = np.empty_like(x)
    fused._exp_nonpositive(x, out, np.empty_like(x))
    want = np.exp(x)
    normal = want >= np.finfo(np.float64).tiny
    assert np.all(np.abs(out - want)[normal] <= 2 * np.spacing(want[normal]))
    assert np.all(np.abs(out - want)[~normal] <= np.spacing(0.0))
    assert out[-7] == out[-6] == 1.0 and out[-5] == 0.0
    single = np.empty(x.shape, np.float32)
    fused._exp_nonpositive(x.astype(np.float32), single, np.empty_like(x))
    want32 = np.exp(x.astype(np.float32).astype(np.float64)).astype(np.float32)
    assert np.all(np.abs(single - want32) <= np.spacing(want32))


@pytest.mark.parametrize(
    ("single_root", "sizes"),
    [(True, [40, 9, 37, 31, 33, 1, 16, 8, 39]), (False, [40, 9, 37, 31, 33, 1, 16, 8, 39]), (True, [140, 129, 7])],
)
def test_long_ragged_batch_same_as_torch_fast_path(single_root, sizes, kernel_calls, monkeypatch):
    """Sentences of 1 to 140 words in one batch, longer ones before shorter ones (the kernel pads
    each row of L̂ to a multiple of 8 columns and must clear what the previous sentence left
    there; above fused._ROW_BY_ROW words it updates four rows at a time): log Z, marginals
    and entropy are the torch path's."""
    gen = torch.Generator().manual_seed(19)
    lengths = torch.tensor(sizes)
    size = max(sizes) + 1
    scores = torch.randn(len(lengths), size, size, generator=gen, dtype=torch.float64) * 2
    native = TreeDistribution(scores, lengths, single_root=single_root)
    entropy, log_z, mu = native.entropy(), native.log_partition, native.marginals
    assert kernel_calls == [len(lengths)]
    monkeypatch.setenv(NATIVE_ENV, "0")
    reference = TreeDistribution(scores, lengths, single_root=single_root)
    assert torch.allclose(log_z, reference.log_partition, atol=0, rtol=1e-13)
    assert torch.allclose(mu, reference.marginals, atol=1e-12, rtol=0)
    assert torch.allclose(entropy, reference.entropy(), atol=1e-11, rtol=0)


def test_entropy_alone_then_the_rest_from_one_pass(kernel_calls, monkeypatch):
    """entropy() reads the kernel's pass without forming log Z and the marginals; asked for
    afterwards, they come from the same pass (one kernel call), equal to the torch path's.
    Where autograd is asked for, the entropy is the general, differentiable form's."""
    scores, lengths = _ragged(seed=23)
    dist = TreeDistribution(scores, lengths)
    entropy = dist.entropy()
    assert kernel_calls == [len(lengths)] and not dist.marginals_computed
    log_z, mu = dist.log_partition, dist.marginals
    assert kernel_calls == [len(lengths)] and torch.equal(dist.entropy(), entropy)
    monkeypatch.setenv(NATIVE_ENV, "0")
    reference = TreeDistribution(scores, lengths)
    assert torch.allclose(entropy, reference.entropy(), atol=1e-12, rtol=0)
    assert torch.allclose(log_z, reference.log_partition, atol=0, rtol=1e-13)
    assert torch.allclose(mu, reference.marginals, atol=1e-12, rtol=0)
    monkeypatch.setenv(NATIVE_ENV, "1")
    leaf = scores.clone().requires_grad_(True)
    value = TreeDistribution(leaf, lengths).entropy()  # a graph asked for: not by the kernel
    (gradient,) = torch.autograd.grad(value.sum(), leaf)
    assert kernel_calls == [len(lengths)] and torch.allclose(value, entropy, atol=1e-12, rtol=0)
    monkeypatch.setenv(NATIVE_ENV, "0")
    (want,) = torch.autograd.grad(TreeDistribution(leaf, lengths).entropy().sum(), leaf)
    assert torch.allclose(gradient, want, atol=1e-12, rtol=0)


def test_sentence_cut_from_a_padded_batch_read_in_place(kernel_calls):
    """A sentence sliced out of a padded batch (not contiguous) gives the results of its
    contiguous copy, without being copied for the kernel."""
    gen = torch.Generator().manual_seed(29)
    batch = torch.randn(3, 46, 46, generator=gen, dtype=torch.float64) * 2
    for n in (6, 35, 44):
        view = batch[1:2, : n + 1, : n + 1]
        copy = view.contiguous()
        assert not view.is_contiguous()
        lengths = torch.tensor([n])
        strided, dense = TreeDistribution(view, lengths), TreeDistribution(copy, lengths)
        assert torch.allclose(strided.entropy(), dense.entropy(), atol=1e-13, rtol=0)
        assert torch.allclose(strided.marginals, dense.marginals, atol=1e-14, rtol=0)
        assert torch.allclose(strided.log_partition, dense.log_partition, atol=0, rtol=1e-15)
    assert len(kernel_calls) == 6


@pytest.mark.parametrize("single_root", [True, False])
def test_tree_check_kernel_agrees_with_the_torch_reference(single_root, monkeypatch):
    """checks.is_tree through fused.trees and through the torch pointer jumping: random
    head vectors (out of range, loops, cycles, forests, padding junk), trees from the
    sampler, leading sample dimensions, int32 and int64."""
    from spacy_treexp.engine.checks import is_tree

    generator = torch.Generator().manual_seed(3)
    lengths = torch.tensor([1, 2, 5, 9, 9, 3])
    size = 10
    noise = torch.randint(-1, size + 1, (40, len(lengths), size), generator=generator)
    chains = torch.arange(size).expand(40, len(lengths), size) - 1  # word m -> m - 1: a tree
    cyclic = chains.clone()
    cyclic[:, :, 1] = 2  # 1 -> 2 -> 1
    scores = torch.randn(len(lengths), size, size, generator=generator, dtype=torch.float64)
    sampled = TreeDistribution(scores, lengths, single_root=single_root).sample((20,), generator=generator)
    for heads in (noise, chains, cyclic, sampled, sampled[0]):
        for dtype in (torch.int64, torch.int32):
            monkeypatch.setenv("SPACY_TREEXP_NATIVE", "1")
            kernel = is_tree(heads.to(dtype), lengths, single_root)
            monkeypatch.setenv("SPACY_TREEXP_NATIVE", "0")
            reference = is_tree(heads.to(dtype), lengths, single_root)
            assert torch.equal(kernel, reference)
    assert is_tree(sampled, lengths, single_root).all()
    assert not is_tree(cyclic, lengths, single_root)[:, lengths >= 2].any()


@pytest.mark.parametrize("single_root", [True, False])
def test_sums_at_heads_kernel_agrees_with_the_torch_reference(single_root, monkeypatch):
    """log_prob and expected_attachment through fused.sums_at_heads and through the torch
    gathers: sampled trees with sample dimensions, the mode, forbidden arcs (-inf scores)."""
    generator = torch.Generator().manual_seed(5)
    lengths = torch.tensor([1, 4, 7, 7, 3])
    scores = torch.randn(5, 8, 8, generator=generator, dtype=torch.float64) * 3
    scores[2, 3, 4] = float("-inf")
    dist = TreeDistribution(scores, lengths, single_root=single_root)
    sampled = dist.sample((6,), generator=generator)
    forced = dist.mode.clone()
    forced[2, 4] = 3  # through the forbidden arc: log p = -inf
    values = {}
    for native in ("1", "0"):
        monkeypatch.setenv(NATIVE_ENV, native)
        fresh = TreeDistribution(scores, lengths, single_root=single_root)
        fresh._validate_trees = False  # forced is not a tree of the allowed arcs
        values[native] = [
            fresh.log_prob(sampled),
            fresh.expected_attachment(sampled),
            fresh.log_prob(forced),
            fresh.expected_attachment(dist.mode),
        ]
    for fast, reference in zip(values["1"], values["0"]):
        assert fast.shape == reference.shape
        assert torch.allclose(fast, reference, rtol=1e-12, atol=1e-12)
    assert values["1"][2][2] == float("-inf")
