"""``biaffine_parser``'s ``encoder_precision``: "bfloat16" runs the BiLSTM at bfloat16 in
prediction only (training and everything after the BiLSTM stay float32), close to the
float32 scores, for the parser's own pass and its full MC-dropout members; bad values are
refused by name; without native bfloat16 the parser warns once and runs float32."""

from __future__ import annotations

import warnings

import numpy
import pytest
import torch

import spacy_treexp
from spacy_treexp.pipeline import biaffine_parser as parser_module
from spacy_treexp.pipeline.architectures import BiaffineScorer

TEXTS = ["The old man saw the dog with the telescope.", "She sold the car to her brother last week."]
BFLOAT16 = {"components.biaffine_parser.encoder_precision": "bfloat16"}


def _bfloat16_lstm_runs() -> bool:
    """Whether torch runs a bfloat16 LSTM under autocast here: emulated on a CPU with AVX-512
    but no bfloat16 instructions (slower, same numbers), not at all with AVX2 alone."""
    lstm = torch.nn.LSTM(2, 2)
    try:
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            lstm(torch.zeros(1, 1, 2))
    except RuntimeError:
        return False
    return True


NATIVE_CPU_BFLOAT16 = parser_module._native_cpu_bfloat16
needs_bfloat16 = pytest.mark.skipif(not _bfloat16_lstm_runs(), reason="no bfloat16 LSTM on this CPU")


def _scorer() -> BiaffineScorer:
    torch.manual_seed(0)
    scorer = BiaffineScorer(6, arc_width=5, rel_width=3, lstm_depth=2, lstm_width=8, dropout=0.3)
    with torch.no_grad():
        for parameter in scorer.parameters():
            parameter.normal_(0.0, 0.5)
    return scorer


@needs_bfloat16
def test_encode_at_bfloat16_in_prediction_only():
    scorer = _scorer()
    lengths = torch.tensor([3, 1, 7])
    X = torch.randn(3, 8, 6)
    scorer.eval()
    with torch.no_grad():
        full = scorer.encode(X, lengths)
        scorer.encoder_precision = "bfloat16"
        low = scorer.encode(X, lengths)
    assert full.dtype == low.dtype == torch.float32 and low.shape == full.shape == (3, 8, 16)
    difference = (low - full).abs()
    assert 0 < float(difference.max()) < 0.05  # bfloat16's 8-bit significand, float32 accumulation
    for b, n in enumerate(lengths.tolist()):  # padding stays zero
        assert not low[b, n + 1 :].any()
    # in training the precision is ignored: the float32 pass, bit for bit
    scorer.train()
    scorer.lstm.dropout = 0.0  # type: ignore[union-attr]
    torch.manual_seed(1)
    trained = scorer.encode(X, lengths)
    scorer.encoder_precision = "float32"
    torch.manual_seed(1)
    assert torch.equal(trained, scorer.encode(X, lengths))


@pytest.fixture
def native_bfloat16(monkeypatch):
    """The parser takes this CPU for one with native bfloat16, so that the tests of that
    route run wherever torch can emulate it."""
    monkeypatch.setattr(parser_module, "_native_cpu_bfloat16", lambda: True)


@pytest.fixture(scope="module")
def pipelines():
    return spacy_treexp.load(), spacy_treexp.load(config=BFLOAT16)


@needs_bfloat16
def test_bfloat16_parser_is_close_to_float32(native_bfloat16, pipelines):
    full, low = pipelines
    assert low.get_pipe("biaffine_parser").encoder_precision == "bfloat16"
    assert low.config["components"]["biaffine_parser"]["encoder_precision"] == "bfloat16"
    full_docs, low_docs = list(full.pipe(TEXTS)), list(low.pipe(TEXTS))
    largest = 0.0
    for a, b in zip(full_docs, low_docs):
        assert [t.head.i for t in a] == [t.head.i for t in b]
        assert [t.dep_ for t in a] == [t.dep_ for t in b]
        for x, y in zip(a._.parser_scores, b._.parser_scores):
            for key in ("arc", "members"):
                largest = max(largest, float(numpy.abs(x[key] - y[key]).max()))
                numpy.testing.assert_allclose(x[key], y[key], atol=0.5)
    assert largest > 0  # the switch took effect
    scorer = parser_module.get_scorer_module(low.get_pipe("biaffine_parser").model)
    assert scorer.encoder_precision == "float32"  # restored after each prediction


@needs_bfloat16
def test_full_members_run_the_encoder_at_the_precision(native_bfloat16):
    config = {"components.biaffine_parser.member_kind": "full"}
    full = spacy_treexp.load(config=config)
    low = spacy_treexp.load(config={**config, **BFLOAT16})
    a, b = full(TEXTS[0])._.parser_scores[0]["members"], low(TEXTS[0])._.parser_scores[0]["members"]
    numpy.testing.assert_allclose(a, b, atol=0.5)
    assert float(numpy.abs(a - b).max()) > 0


@pytest.mark.parametrize("value", ["fp16", "float64", 16, None])
def test_bad_precision_is_refused_by_name(value):
    with pytest.raises(ValueError, match="encoder_precision"):
        spacy_treexp.load(config={"components.biaffine_parser.encoder_precision": value})


@pytest.mark.parametrize("native", [False, pytest.param(True, marks=needs_bfloat16)])
def test_without_native_bfloat16_one_warning_and_float32(monkeypatch, native):
    """Emulated bfloat16 is slower than float32 and oneDNN has no bfloat16 LSTM for CPUs with
    AVX2 alone: without native support the parser warns once and runs float32, bit for bit."""
    monkeypatch.setattr(parser_module, "_native_cpu_bfloat16", lambda: native)
    full = spacy_treexp.load()
    nlp = spacy_treexp.load(config=BFLOAT16)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        docs = [nlp(text) for text in TEXTS]
    slower = [w for w in caught if "native bfloat16" in str(w.message)]
    assert len(slower) == (0 if native else 1)
    for doc, text in zip(docs, TEXTS):
        same = numpy.array_equal(doc._.parser_scores[0]["arc"], full(text)._.parser_scores[0]["arc"])
        assert same is not native


@pytest.mark.parametrize(
    "limit, native", [("AVX2", False), ("avx512_core", False), ("AVX512_CORE_BF16", True), ("ALL", True)]
)
def test_a_onednn_isa_limit_below_bfloat16_counts_as_no_native_support(monkeypatch, limit, native):
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", limit)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    assert NATIVE_CPU_BFLOAT16() is native
