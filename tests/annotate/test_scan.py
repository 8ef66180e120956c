"""The one-pass scan of a sentence's scores (annotate/scan.py) against the numpy checks it
stands in for: every flag it raises must be true of the arrays, on float32 and float64,
with NaN, +inf and -inf placed in cells that count and in cells that do not."""

from __future__ import annotations

import itertools

import numpy
import pytest

from spacy_treexp.annotate.scan import scan_sentence
from spacy_treexp.engine.native import native_requested

pytest.importorskip("numba")

TOLERANCE = 1e-3


def counted(n):
    cells = numpy.ones((n + 1, n + 1), dtype=bool)
    cells[:, 0] = False
    numpy.fill_diagonal(cells, False)
    return cells


def truth(arc, rel):
    """The flags from the numpy definitions (float64)."""
    cells = counted(arc.shape[0] - 1)
    arc64 = arc.astype(numpy.float64)
    clean = bool(((arc64 < numpy.inf) | ~cells).all())
    allowed = cells & (arc64 > -numpy.inf)
    normalised = rel is not None
    if rel is not None:
        rel64 = rel.astype(numpy.float64)
        clean &= bool(((rel64 < numpy.inf) | ~cells[..., None]).all())
        with numpy.errstate(over="ignore", invalid="ignore"):
            sums = numpy.exp(rel64).sum(-1)
        normalised = bool((numpy.abs(numpy.log(sums[allowed])) <= TOLERANCE).all())
    return clean, clean and bool(allowed.sum() == cells.sum()), normalised


def cases():
    rng = numpy.random.default_rng(0)
    for dtype, n, labels in itertools.product((numpy.float32, numpy.float64), (1, 2, 5), (None, 3)):
        arc = rng.normal(size=(n + 1, n + 1)) * 5
        rel = None
        if labels is not None:
            logits = rng.normal(size=(n + 1, n + 1, labels)) * 4
            rel = logits - numpy.log(numpy.exp(logits).sum(-1, keepdims=True))
        yield arc.astype(dtype), None if rel is None else rel.astype(dtype), True
        for where, value in itertools.product(
            ("counted", "root column", "diagonal"), (numpy.nan, numpy.inf, -numpy.inf)
        ):
            h, d = {"counted": (0, 1), "root column": (1, 0), "diagonal": (1, 1)}[where]
            bad_arc = arc.copy()
            bad_arc[h, d] = value
            yield bad_arc.astype(dtype), None if rel is None else rel.astype(dtype), True
            if rel is not None:
                bad_rel = rel.copy()
                bad_rel[h, d, 0] = value
                yield arc.astype(dtype), bad_rel.astype(dtype), True
        if rel is not None:
            yield arc.astype(dtype), (rel + 2e-3).astype(dtype), True  # just outside the tolerance
            yield arc.astype(dtype), (rel + 5e-4).astype(dtype), True  # just inside
            # logits whose exp overflows: the scan may leave them to numpy (not clean)
            yield arc.astype(dtype), (logits * 30).astype(dtype), False
            forbidden = arc.copy()
            forbidden[0, 1] = -numpy.inf
            shifted = rel.copy()
            shifted[0, 1] += 1.0  # unnormalised, but on a forbidden arc: does not count
            yield forbidden.astype(dtype), shifted.astype(dtype), True


@pytest.mark.parametrize("case", list(range(len(list(cases())))))
def test_every_flag_the_scan_raises_holds(case):
    """A raised flag is always true; on ordinary values (``exact``) the scan clears all
    that holds, so that numpy's checks run only where something is off."""
    arc, rel, exact = list(cases())[case]
    scan = scan_sentence(arc, rel, TOLERANCE)
    assert scan is not None
    clean, all_allowed, normalised = truth(arc, rel)
    assert scan.values_clean == clean if exact else scan.values_clean <= clean
    if scan.values_clean:
        assert scan.all_allowed == all_allowed
        assert scan.rel_normalised == normalised


def test_what_the_scan_cannot_read_is_left_to_numpy(monkeypatch):
    arc = numpy.zeros((3, 3), dtype=numpy.float32)
    assert scan_sentence(arc.astype(numpy.int64), None, TOLERANCE) is None  # another dtype
    assert scan_sentence(numpy.zeros((3, 4)), None, TOLERANCE) is None  # not square
    assert scan_sentence(arc, numpy.zeros((3, 3, 0), dtype=numpy.float32), TOLERANCE) is None  # no labels
    assert native_requested()
    monkeypatch.setenv("SPACY_TREEXP_NATIVE", "0")
    assert not native_requested()


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_dep_prob_in_one_kernel_call_equals_the_numpy_route(dtype, monkeypatch):
    """core.dep_prob through annotate.scan.dense_dep_prob and through numpy indexing and
    math.exp: the same float32 values, bit for bit."""
    from spacy_treexp.annotate.core import dep_prob
    from spacy_treexp.annotate.records import SentenceScores

    rng = numpy.random.default_rng(4)
    labels = ["a", "b", "c", "d"]
    for n in (1, 3, 9):
        logits = rng.normal(size=(n + 1, n + 1, len(labels))) * 3
        rel = (logits - numpy.log(numpy.exp(logits).sum(-1, keepdims=True))).astype(dtype)
        heads = numpy.array([0] + list(range(1, n)), dtype=numpy.int32)  # a chain
        head_prob = rng.uniform(size=n).astype(numpy.float32)
        sentence = SentenceScores(
            arc=numpy.zeros((n + 1, n + 1)), rel=rel, labels=labels, deprels=[labels[i % 4] for i in range(n)]
        )
        monkeypatch.setenv("SPACY_TREEXP_NATIVE", "1")
        fused = dep_prob(sentence, heads, head_prob)
        monkeypatch.setenv("SPACY_TREEXP_NATIVE", "0")
        reference = dep_prob(sentence, heads, head_prob)
        assert fused.dtype == reference.dtype == numpy.float32
        assert numpy.array_equal(fused, reference)


@pytest.mark.parametrize("seed", range(6))
def test_head_entropy_in_one_kernel_call_equals_the_torch_route(seed):
    """scan.head_entropy against engine.distribution.word_head_entropy (float32 out) on marginals
    with exact zeros, rounding below zero, certain heads and NaN: the same values, bit for bit."""
    import torch

    from spacy_treexp.annotate.scan import head_entropy
    from spacy_treexp.engine.distribution import word_head_entropy

    rng = numpy.random.default_rng(seed)
    batch, size = 5, int(rng.integers(2, 20))
    marginals = rng.dirichlet(numpy.full(size, 0.3), size=(batch, size)).transpose(0, 2, 1).copy()
    marginals[rng.random(marginals.shape) < 0.2] = 0.0
    marginals[rng.random(marginals.shape) < 0.05] = -1e-15
    marginals[0, :, 1] = 0.0
    marginals[0, 0, 1] = 1.0  # a certain head
    if seed % 2:
        marginals[1, 1, 1] = numpy.nan
    expected = word_head_entropy(torch.from_numpy(marginals)).float().numpy()
    got = head_entropy(marginals)
    numpy.testing.assert_array_equal(got, expected)
    assert not numpy.signbit(got[~numpy.isnan(got)]).any()  # no -0.0
