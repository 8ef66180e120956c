"""The samplers' fused CPU kernels (:mod:`spacy_treexp.engine.sampling.fused`, numba) against
the exact distribution (enumeration, chi-square) and against the pure-torch samplers.

Colbourn's kernel reads the uniforms the torch loop draws, so both paths give the same trees
for a seed; the beam search's kernel draws its own keys (seeded from the caller's generator),
so it is checked by its law and its reproducibility. Every statistical test uses a fixed seed
and rejects at p < 1e-3.
"""

from __future__ import annotations

import pytest
import torch
from helpers.enumerate_trees import tree_log_probs
from helpers.goodness_of_fit import ALPHA, assert_first_two_draws_fit, assert_fits, chi_square_p, codes

from spacy_treexp import TreeDistribution
from spacy_treexp.engine.native import NATIVE_ENV
from spacy_treexp.engine.sampling import colbourn, sample, sample_without_replacement, without_replacement, work

pytest.importorskip("numba")

DRAWS = 20_000


def ragged_batch(seed: int, scale: float = 1.5) -> tuple[torch.Tensor, torch.Tensor]:
    """Three sentences, n = 4, 3 and 2 in one padding, N(0, scale^2) scores; one arc of the
    first sentence masked (-inf)."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(3, 5, 5, generator=gen, dtype=torch.float64) * scale
    scores[0, 2, 3] = -torch.inf
    return scores, torch.tensor([4, 3, 2])


def both_paths(monkeypatch, function):
    """``function()`` with the fused kernels off, then on."""
    monkeypatch.setenv(NATIVE_ENV, "0")
    reference = function()
    monkeypatch.setenv(NATIVE_ENV, "1")
    return reference, function()


@pytest.mark.parametrize("single_root", [True, False])
@pytest.mark.parametrize("scale", [1.5, 4.0])
def test_fused_colbourn_fits_and_gives_the_torch_trees(monkeypatch, single_root, scale):
    scores, lengths = ragged_batch(int(scale * 10) + single_root, scale)
    dist = TreeDistribution(scores, lengths, single_root=single_root)
    assert not bool(colbourn.Prepared.of(dist).trapped().any())  # every sentence by the kernel
    reference, fused = both_paths(
        monkeypatch, lambda: sample(dist, (DRAWS,), method="colbourn", generator=torch.Generator().manual_seed(3))
    )
    assert torch.equal(reference, fused)
    assert_fits(fused, scores, lengths, single_root)


def test_fused_colbourn_log_probs_and_per_sentence_generators(monkeypatch):
    gen = torch.Generator().manual_seed(8)
    scores = torch.randn(6, 13, 13, generator=gen)  # float32, n up to 12
    dist = TreeDistribution(scores, torch.tensor([12, 5, 1, 9, 12, 3]))

    def run():
        streams = [torch.Generator().manual_seed(100 + b) for b in range(6)]
        return colbourn.colbourn_sample(dist, 300, streams)

    (heads, log_probs), (fused_heads, fused_log_probs) = both_paths(monkeypatch, run)
    assert torch.equal(heads, fused_heads)
    assert torch.allclose(fused_log_probs, log_probs, rtol=0, atol=1e-9)
    assert torch.allclose(fused_log_probs, dist.log_prob(fused_heads).double(), rtol=0, atol=1e-4)


def test_fused_colbourn_hands_failed_draws_to_torch_with_their_uniforms(monkeypatch):
    """A kernel whose every check fails (tolerance -1) redoes every sentence in torch: the
    same trees as the torch path."""
    scores, lengths = ragged_batch(5)
    dist = TreeDistribution(scores, lengths)
    monkeypatch.setattr(colbourn, "SUM_TOLERANCE", -1.0)  # read by the kernel's caller only
    monkeypatch.setattr(colbourn, "_colbourn_chunk", _tolerant(colbourn._colbourn_chunk))
    reference, fused = both_paths(
        monkeypatch, lambda: sample(dist, (50,), method="colbourn", generator=torch.Generator().manual_seed(4))
    )
    assert torch.equal(reference, fused)


def _tolerant(chunk):
    """The torch loop with the usual drift check (the patched tolerance only fails the kernel)."""

    def run(*args, **kwargs):
        saved = colbourn.SUM_TOLERANCE
        colbourn.SUM_TOLERANCE = 1e-6
        try:
            return chunk(*args, **kwargs)
        finally:
            colbourn.SUM_TOLERANCE = saved

    return run


@pytest.mark.parametrize(
    "single_root,k,scale,per_sentence",
    [(True, 2, 1.0, False), (True, 6, 1.0, True), (False, 5, 1.0, False), (True, 5, 3.0, False)],
)
def test_fused_beam_search_has_the_without_replacement_law(monkeypatch, single_root, k, scale, per_sentence):
    """Copies of one sentence (n = 3) among a padded, masked batch: the first two of k draws
    have the law of two draws without replacement (k > 2 runs the beams' Poisson races)."""
    monkeypatch.setenv(NATIVE_ENV, "1")
    scores, lengths = ragged_batch(30 + k, scale)
    n, b = 3, 1
    batch = scores[b : b + 1].expand(DRAWS, -1, -1).clone()
    batch[::2] = scores[0]  # every other copy: the n = 4 sentence with a masked arc
    sizes = torch.where(torch.arange(DRAWS) % 2 == 0, 4, n)
    dist = TreeDistribution(batch, sizes, single_root=single_root)
    gen = [torch.Generator().manual_seed(i) for i in range(DRAWS)] if per_sentence else torch.Generator().manual_seed(k)
    heads, log_probs = sample_without_replacement(dist, k, method="sbs", generator=gen)
    assert_first_two_draws_fit(heads[:, 1::2], scores[b], n, single_root)
    assert_first_two_draws_fit(heads[:, ::2], scores[0], 4, single_root)
    alive = log_probs > -torch.inf
    assert torch.allclose(log_probs[alive], dist.log_prob(heads)[alive])


@pytest.mark.parametrize("single_root,k,scale", [(True, 3, 1.0), (True, 8, 4.0), (False, 20, 2.5)])
def test_fused_beam_search_first_three_draws_have_the_without_replacement_law(monkeypatch, single_root, k, scale):
    """The ordered first three of k draws of one sentence (n = 3): probability
    p(a) p(b) / (1 - p(a)) p(c) / (1 - p(a) - p(b)) (chi-square). k > 3 and peaked scores (a
    dominant head: the beams' races go on after their likely children, through the exact
    recount of the unseen mass) exercise the k-way merge of the races beyond two children."""
    monkeypatch.setenv(NATIVE_ENV, "1")
    scores, _ = ragged_batch(70 + k, scale)
    n = 3
    dist = TreeDistribution(scores[1:2].expand(DRAWS, -1, -1), torch.full((DRAWS,), n), single_root=single_root)
    assert not bool(colbourn.Prepared.of(dist).trapped().any())  # every sentence by the kernel
    heads, _ = sample_without_replacement(dist, k, method="sbs", generator=torch.Generator().manual_seed(k))
    trees, log_probs = tree_log_probs(scores[1], n, single_root)
    probs, tree_codes = log_probs.exp(), codes(trees, n)
    drawn = [codes(heads[i], n) for i in range(3)]
    assert ((drawn[0] != drawn[1]) & (drawn[1] != drawn[2]) & (drawn[0] != drawn[2])).all()
    a, b, c = probs[:, None, None], probs[None, :, None], probs[None, None, :]
    triple = a * b / (1 - a) * c / (1 - a - b).clamp_min(1e-300)
    size = tree_codes.numel()
    index = torch.arange(size)
    distinct = (index[:, None, None] != index[None, :, None]) & (index[:, None, None] != index[None, None, :])
    distinct &= index[None, :, None] != index[None, None, :]
    triple_codes = (tree_codes[:, None, None] * 10_000 + tree_codes[None, :, None]) * 10_000 + tree_codes[None, None, :]
    observed = (drawn[0] * 10_000 + drawn[1]) * 10_000 + drawn[2]
    assert chi_square_p(observed, triple_codes[distinct], triple[distinct]) > ALPHA


@pytest.mark.parametrize("single_root", [True, False])
def test_fused_beam_search_draws_every_tree_once_then_pads(monkeypatch, single_root):
    monkeypatch.setenv(NATIVE_ENV, "1")
    scores, lengths = ragged_batch(9)
    dist = TreeDistribution(scores, lengths, single_root=single_root)
    k = 130  # more than the 64 / 125 trees of n = 4
    heads, log_probs = sample_without_replacement(dist, k, generator=torch.Generator().manual_seed(9))
    for b, n in enumerate(lengths.tolist()):
        trees, exact = tree_log_probs(scores[b], n, single_root)
        trees, exact = trees[exact > -torch.inf], exact[exact > -torch.inf]  # (a masked arc)
        count = trees.shape[0]
        drawn = codes(heads[:count, b], n)
        assert sorted(drawn.tolist()) == sorted(codes(trees, n).tolist())
        assert (heads[count:, b] == -1).all() and (log_probs[count:, b] == -torch.inf).all()
        order = codes(trees, n).argsort()
        expected = exact[order][torch.searchsorted(codes(trees, n)[order], drawn)]
        assert torch.allclose(log_probs[:count, b].double(), expected, atol=1e-9)


def test_fused_beam_search_is_reproducible_across_threads_and_batches(monkeypatch):
    monkeypatch.setenv(NATIVE_ENV, "1")
    gen = torch.Generator().manual_seed(2)
    scores = torch.randn(8, 16, 16, generator=gen)
    lengths = torch.tensor([15, 3, 9, 15, 1, 12, 7, 15])
    dist = TreeDistribution(scores, lengths)
    threads = torch.get_num_threads()
    found = []
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            found.append(sample_without_replacement(dist, 20, generator=torch.Generator().manual_seed(5)))
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(found[0][0], found[1][0])
    streams = [torch.Generator().manual_seed(50 + b) for b in range(8)]
    whole = sample_without_replacement(dist, 20, generator=streams)[0]
    alone = TreeDistribution(scores[2:3], lengths[2:3])
    part = sample_without_replacement(alone, 20, generator=[torch.Generator().manual_seed(52)])[0]
    assert torch.equal(whole[:, 2], part[:, 0])
    heads = found[0][0]
    for b, n in enumerate(lengths.tolist()):
        drawn = {tuple(tree) for tree in heads[:, b, : n + 1].tolist() if tree[0] == -1 and -1 not in tree[1:]}
        assert len(drawn) == min(20, (n ** (n - 1)) if n > 0 else 1)


def test_fused_beam_search_hands_flagged_sentences_to_torch(monkeypatch):
    """A kernel whose every drift check fails (tolerance -1) leaves each sentence to the torch
    search, seeded from its seed: still k distinct trees with exact log-probabilities."""
    monkeypatch.setenv(NATIVE_ENV, "1")
    monkeypatch.setattr(without_replacement, "SUM_TOLERANCE", -1.0)
    scores, lengths = ragged_batch(11)
    dist = TreeDistribution(scores, lengths)
    heads, log_probs = sample_without_replacement(dist, 5, generator=torch.Generator().manual_seed(1))
    for b, n in enumerate(lengths.tolist()):
        count = min(5, n ** (n - 1))
        assert len(set(codes(heads[:count, b], n).tolist())) == count
    alive = log_probs > -torch.inf
    assert torch.allclose(log_probs[alive], dist.log_prob(heads)[alive])


# ---------------------------------------------------------------- peaked (trapped) sentences
def peaked_batch(scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Three sentences (n = 5, 5 and, padded, 4) of scale * integers 0..2 + N(0, 1): near-ties
    at the top and strongly bound cycles (L-hat singular in float64 for the first two: the
    trapped-words path; the graphs of tests/engine/test_sampling_peaked.py)."""
    scores = torch.zeros(3, 6, 6, dtype=torch.float64)
    for b, seed in enumerate((8, 19, 24)):
        gen = torch.Generator().manual_seed(seed)
        scores[b] = scale * torch.randint(0, 3, (6, 6), generator=gen).double()
        scores[b] += torch.randn(6, 6, generator=gen, dtype=torch.float64)
    return scores, torch.tensor([5, 5, 4])


def counting_kernel(monkeypatch, tolerance: float | None = None) -> list[int]:
    """Count the fused draws of conditioned (trapped) rows and their failures; with a
    ``tolerance``, the kernel checks those rows against it instead."""
    real, calls = colbourn.fused.colbourn_draws, [0, 0]

    def run(*args, which=None):
        if which is not None:
            calls[0] += 1
            if tolerance is not None:
                args = args[:6] + (tolerance,)
        found = real(*args, which=which)
        if which is not None:
            calls[1] += int(found[2].sum())
        return found

    monkeypatch.setattr(colbourn.fused, "colbourn_draws", run)
    return calls


@pytest.mark.parametrize("single_root", [True, False])
@pytest.mark.parametrize("scale", [100.0, 1000.0])
@pytest.mark.parametrize("per_sentence", [False, True])
def test_fused_trapped_sentences_fit_and_give_the_torch_trees(monkeypatch, single_root, scale, per_sentence):
    """Peaked sentences: the trapped words in torch, then the words by the kernel, each row
    reading its conditioned distribution; the same trees and log-probabilities as torch, and
    the tree distribution's law."""
    scores, lengths = peaked_batch(scale)
    dist = TreeDistribution(scores, lengths, single_root=single_root)
    assert bool(colbourn.Prepared.of(dist).trapped().any())
    calls = counting_kernel(monkeypatch)

    def run():
        generator = [torch.Generator().manual_seed(9 + b) for b in range(3)] if per_sentence else None
        return colbourn.colbourn_sample(dist, DRAWS, generator or torch.Generator().manual_seed(6))

    (heads, log_probs), (fused_heads, fused_log_probs) = both_paths(monkeypatch, run)
    assert calls[0] > 0
    assert torch.equal(heads, fused_heads)
    assert torch.allclose(fused_log_probs, log_probs, rtol=0, atol=1e-9)
    assert torch.allclose(fused_log_probs, dist.log_prob(fused_heads).double(), rtol=0, atol=1e-6)
    assert_fits(fused_heads, scores, lengths, single_root)


@pytest.mark.parametrize("single_root", [True, False])
def test_fused_trapped_rows_that_fail_go_to_torch_with_their_uniforms(monkeypatch, single_root):
    """A kernel whose every check fails (tolerance -1) on the conditioned rows: every row is
    redone by the Conditioner's loop, with the same trees as the torch path."""
    scores, lengths = peaked_batch(1000.0)
    dist = TreeDistribution(scores, lengths, single_root=single_root)
    trapped = int(colbourn.Prepared.of(dist).trapped().sum())
    calls = counting_kernel(monkeypatch, tolerance=-1.0)
    reference, fused = both_paths(
        monkeypatch, lambda: sample(dist, (300,), method="colbourn", generator=torch.Generator().manual_seed(2))
    )
    assert trapped > 0 and calls[1] == trapped * 300
    assert torch.equal(reference, fused)


@pytest.mark.parametrize("single_root", [True, False])
@pytest.mark.parametrize("scale", [100.0, 1000.0])
def test_fused_trapped_steps_are_the_torch_steps(monkeypatch, single_root, scale):
    """The trapped-word steps by the kernel (settled states from their tables, the other
    states by their own reduction) and by TrappedModel's torch steps (every step: a kernel
    stand-in that stops every row at its first step) on the same groups: the same trees,
    log-probabilities to rounding, the same state numbering; the kernel reduces unsettled
    states itself and hands no row to torch."""
    gen = torch.Generator().manual_seed(33)
    scores = torch.randn(12, 11, 11, generator=gen, dtype=torch.float64) * scale
    lengths = torch.tensor([10, 9, 10, 4, 10, 7, 10, 10, 8, 10, 3, 10])
    dist = TreeDistribution(scores, lengths, single_root=single_root)
    assert bool(colbourn.Prepared.of(dist).trapped().any())
    real, handed, numbered = colbourn.fused.trapped_steps, [], []
    real_words = colbourn._fused_words

    def kernel(groups, reach, leak, group, *rest):
        start = real(groups, reach, leak, group, *rest)
        handed.append(int((start > 0).sum()))
        return start

    def torch_steps(groups, reach, leak, group, *rest):  # every row's steps by the torch loop
        return torch.where((group >= 0) & (groups.count[group.clamp_min(0)] > 0), 1, 0)

    def words(state, *rest):  # the states phase 2 reads
        numbered.append(state.state.clone())
        return real_words(state, *rest)

    monkeypatch.setattr(colbourn, "_fused_words", words)
    found, nodes = [], []
    for stand_in in (kernel, torch_steps):
        monkeypatch.setattr(colbourn.fused, "trapped_steps", stand_in)
        with work.counting() as counted:
            found.append(colbourn.colbourn_sample(dist, 400, torch.Generator().manual_seed(5)))
        nodes.append(counted["trapped_nodes"])
    (heads, log_probs), (torch_heads, torch_log_probs) = found
    assert handed == [0] and nodes[0] > 0  # unsettled states met, and reduced by the kernel
    assert torch.equal(numbered[0], numbered[1])
    assert torch.equal(heads, torch_heads)
    assert torch.allclose(log_probs, torch_log_probs, rtol=0, atol=1e-12)
    assert torch.allclose(log_probs, dist.log_prob(heads).double(), rtol=0, atol=1e-6)


@pytest.mark.parametrize("single_root", [True, False])
@pytest.mark.parametrize("scale", [30.0, 100.0])
def test_kernel_unsettled_states_are_the_full_reduction(monkeypatch, single_root, scale):
    """The kernel's reduction of an unsettled state (trapped_kernels.unsettled_row) gives the
    conditionals of the full GTH reduction on the trace (trapped_conditionals, float64) and of
    the torch reduction (unsettled_conditionals), state by state along the torch steps' draws."""
    import math

    import numpy as np

    from spacy_treexp.engine.sampling import trapped_kernels
    from spacy_treexp.engine.sampling.trapped import trapped_conditionals, unsettled_conditionals

    monkeypatch.setenv(NATIVE_ENV, "0")
    gen = torch.Generator().manual_seed(41)
    scores = torch.randn(6, 13, 13, generator=gen, dtype=torch.float64) * scale
    dist = TreeDistribution(scores, torch.tensor([12, 12, 9, 12, 11, 12]), single_root=single_root)
    setup = colbourn.TrappedSetup(dist, torch.arange(6))
    state = colbourn.TrappedModel(setup, torch.arange(6).repeat(50))
    draws = torch.Generator().manual_seed(7)
    checked = 0
    for t in range(state.first_step, state.words + 1):
        active = state.active(t)
        if not bool(active.any()):
            continue
        probs = state.probs(t)
        rows = (active & (state.horizon >= t) & (t >= 2)).nonzero().squeeze(-1)  # the unsettled states
        if rows.numel():
            groups, group = setup.groups, state.group[rows]
            full = trapped_conditionals(groups, group, state.fixed[rows], t)
            fewer = unsettled_conditionals(groups, group, state.fixed[rows], state.reaches[rows], t, 1e-20)
            nodes = groups.exits.shape[-1]
            scratch = np.empty(nodes * nodes + 2 * (nodes + 2) ** 2 + 5 * (nodes + 2))
            kernel = np.zeros(tuple(full.shape))
            for i, (g, fixed) in enumerate(zip(group.tolist(), state.fixed[rows].numpy())):
                trapped_kernels.unsettled_row(
                    g,
                    fixed,
                    t,
                    groups.exits.numpy(),
                    groups.trace.numpy(),
                    groups.scores.numpy(),
                    groups.order.numpy(),
                    groups.count.numpy(),
                    groups.meets[t - 1].contiguous().numpy(),
                    math.log(colbourn.SETTLED_LEAK),
                    kernel[i],
                    scratch,
                )
            torch.testing.assert_close(torch.from_numpy(kernel), full, rtol=1e-9, atol=1e-12)
            torch.testing.assert_close(torch.from_numpy(kernel), fewer, rtol=1e-12, atol=1e-14)
            checked += rows.numel()
        head, _ = colbourn.draw_positive(probs, draws)
        state.fix(t, head, active)
    assert checked > 0


def test_exact_conditionals_kernel_equals_the_engine_on_drifting_rows(monkeypatch):
    """Multi-root rows whose Sherman-Morrison conditionals fail the check (here every row and
    word: tolerance 0) get exact conditionals from the kernel's log-space reduction instead of
    the engine's marginals of the conditioned scores: the same numbers word by word, on a
    ragged batch with a masked arc, and the tree distribution's law."""
    monkeypatch.setattr(colbourn, "SUM_TOLERANCE", 0.0)
    scores, lengths = ragged_batch(61, 2.0)
    dist = TreeDistribution(scores, lengths, single_root=False)
    sentence = torch.arange(3).repeat(40)
    draws = torch.Generator().manual_seed(4)
    state = colbourn.Conditioner(dist, sentence)
    for m in range(1, state.steps):
        rows = (state.lengths >= m).nonzero().squeeze(-1)
        found = []
        for native in ("0", "1"):
            monkeypatch.setenv(NATIVE_ENV, native)
            found.append(state._engine_conditionals(m, rows))
        torch.testing.assert_close(found[1], found[0], rtol=1e-9, atol=1e-12)
        assert torch.allclose(found[1].sum(-1), torch.ones(rows.numel(), dtype=torch.float64))
        probs = state.probs(m)  # (tolerance 0: from the kernel too)
        head, _ = colbourn.draw_positive(probs, draws)
        state.fix(m, head, state.lengths >= m)
    monkeypatch.setenv(NATIVE_ENV, "1")
    heads = sample(dist, (DRAWS,), method="colbourn", generator=torch.Generator().manual_seed(12))
    assert_fits(heads, scores, lengths, False)


def test_flat_blocks_read_views_in_place_and_copy_the_rest():
    """The first meetings reach the trapped-steps kernel as one flat array: the blocks
    settled_tables makes (views of one buffer) without a copy, separate blocks (after
    Groups.cat) copied; each block at its offset either way."""
    import numpy as np

    from spacy_treexp.engine.sampling import fused

    buffer = torch.arange(60, dtype=torch.float64)
    views = [buffer[0:6].view(1, 3, 2), buffer[6:15].view(1, 3, 3), buffer[15:27].view(1, 3, 4)]
    separate = [block.clone() for block in views]
    for blocks, in_place in ((views, True), (separate, False)):
        flat, offsets = fused._flat_blocks(blocks)
        assert np.shares_memory(flat, buffer.numpy()) == in_place
        for block, start in zip(blocks, offsets.tolist()):
            assert np.array_equal(flat[start : start + block.numel()], block.reshape(-1).numpy())


def test_untrusted_first_marginals_by_the_kernel_are_enumerated(monkeypatch):
    """Multi-root sentences whose L-hat LU is not trusted (peaked scores): word 1's head
    marginals from the kernel's exact reduction equal the engine's (native off) and
    brute-force enumeration in float64 (n <= 6, one arc masked)."""
    from helpers.enumerate_trees import all_trees

    gen = torch.Generator().manual_seed(77)
    scores = 30.0 * torch.randint(0, 3, (4, 7, 7), generator=gen).double()
    scores += torch.randn(4, 7, 7, generator=gen, dtype=torch.float64)
    scores[1, 0, 1] = -torch.inf
    lengths = torch.tensor([6, 5, 6, 4])
    dist = TreeDistribution(scores, lengths, single_root=False)
    found = []
    for native in ("0", "1"):
        monkeypatch.setenv(NATIVE_ENV, native)
        prepared = colbourn.Prepared.of(dist, tolerance=colbourn.CONDITIONED_ERROR)
        found.append(prepared.first)
    assert bool((prepared.error > colbourn.CONDITIONED_ERROR).any())  # some by the kernel
    torch.testing.assert_close(found[1], found[0], rtol=1e-9, atol=1e-12)
    for b, n in enumerate(lengths.tolist()):
        trees = all_trees(n, False)
        weights = scores[b, : n + 1, : n + 1][trees[:, 1:], torch.arange(1, n + 1)].sum(-1)
        probs = torch.softmax(weights, 0)
        expected = torch.zeros(n + 1, dtype=torch.float64).index_add_(0, trees[:, 1], probs)
        torch.testing.assert_close(found[1][b, : n + 1], expected, rtol=1e-9, atol=1e-12)


def test_fused_strong_sets_are_the_reference_sets():
    """The kernel's strongly bound sets (Chu-Liu-Edmonds on sums) are the numpy reference's,
    set for set and in order, on random, peaked and masked graphs of 2 to 30 words."""
    import numpy as np

    from spacy_treexp.engine.sampling import fused, trapped

    gen = np.random.default_rng(0)
    found = 0
    for trial in range(120):
        n = int(gen.integers(2, 31))
        scale = float(gen.choice([1.0, 10.0, 100.0, 1000.0]))
        scores = gen.normal(size=(n + 1, n + 1)) * scale
        if trial % 2:  # near-ties and strongly bound cycles (peaked_batch's kind)
            scores = scale * gen.integers(0, 3, size=(n + 1, n + 1)) + gen.normal(size=(n + 1, n + 1))
        if trial % 5 == 0:
            scores[gen.random((n + 1, n + 1)) < 0.2] = -np.inf
        for with_root in (True, False):
            reference = trapped._strong_sets(scores, with_root, trapped.BOUND_NATS)
            kernel = fused.strong_sets(scores, with_root, trapped.BOUND_NATS)
            assert len(kernel) == len(reference)
            assert all(np.array_equal(a, b) for a, b in zip(kernel, reference))
            found += len(reference)
    assert found > 100  # the graphs do have strongly bound sets


def test_batched_strong_sets_are_the_reference_sets(monkeypatch):
    """StrongSets.of by one kernel call for the batch (padded, mixed lengths, masked arcs)
    gives the numpy reference's masks, set for set and in order."""
    from spacy_treexp.engine.sampling.trapped import StrongSets

    gen = torch.Generator().manual_seed(12)
    for scale in (1.0, 30.0, 1000.0):
        scores = torch.randn(9, 17, 17, generator=gen, dtype=torch.float64) * scale
        scores[torch.rand(9, 17, 17, generator=gen) < 0.1] = -torch.inf
        lengths = torch.tensor([16, 3, 1, 9, 16, 12, 2, 16, 7])
        for with_root in (True, False):
            found = []
            for native in ("0", "1"):
                monkeypatch.setenv(NATIVE_ENV, native)
                found.append(StrongSets.of(scores, lengths, with_root).masks)
            assert torch.equal(found[0], found[1])
            assert scale == 1.0 or bool(found[1].any())


@pytest.mark.parametrize("scale", [30.0, 1000.0])
def test_fused_trace_chains_and_settled_tables_are_the_torch_ones(monkeypatch, scale):
    """The walks' exit distributions, the trapped words' trace chains, settled head
    distributions and first meetings (:class:`.trapped.Groups`) by the kernels and by torch
    agree to rounding, -inf for -inf, on peaked sentences."""
    gen = torch.Generator().manual_seed(94)
    scores = torch.randn(16, 21, 21, generator=gen, dtype=torch.float64) * scale
    dist = TreeDistribution(scores)
    index = torch.arange(16)
    traces, tables, exits = [], [], []
    for native in ("0", "1"):
        monkeypatch.setenv(NATIVE_ENV, native)
        setup = colbourn.TrappedSetup(dist, index)
        setup.group(index, setup.root.argmax(-1))
        traces.append(setup.groups.trace)
        tables.append((setup.groups.settled, setup.groups.meets))
        exits.append(setup.groups.exits)
    for reference, fused in (exits, traces):
        finite = torch.isfinite(reference)
        assert finite.any() and torch.equal(finite, torch.isfinite(fused))
        assert torch.allclose(fused[finite], reference[finite], rtol=1e-13, atol=1e-11)
    (settled, meets), (fused_settled, fused_meets) = tables
    assert torch.allclose(fused_settled, settled, rtol=1e-12, atol=1e-15)
    for block, fused_block in zip(meets, fused_meets, strict=True):
        finite = torch.isfinite(block)
        assert torch.equal(finite, torch.isfinite(fused_block))
        assert torch.allclose(fused_block[finite], block[finite], rtol=1e-12, atol=1e-12)
