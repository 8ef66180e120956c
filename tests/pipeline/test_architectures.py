"""``spacy_treexp.BiaffineParser.v1`` on a token-vector layer whose width is only known once
the pipeline is initialised (a ``TransformerListener``): the width is read from a sample."""

import numpy
import pytest
import spacy
import torch
from helpers.threads import one_torch_thread  # noqa: F401  (autouse)
from helpers.toy_pipelines import TINY_CONFIG, toy_examples, train_toy
from spacy.tokens import Doc
from thinc.api import Config, Model, chain, fix_random_seed
from thinc.layers import noop

from spacy_treexp.pipeline.architectures import build_biaffine_parser, get_scorer_module

UNSIZED = "spacy_treexp_tests.UnsizedTok2Vec.v1"


@spacy.registry.architectures(UNSIZED)
def unsized_tok2vec(width: int) -> Model:
    """A tok2vec whose ``nO`` stays unset, like ``spacy-transformers.TransformerListener.v1``."""
    inner = spacy.registry.architectures.get("spacy.HashEmbedCNN.v2")(
        width=width,
        depth=1,
        embed_size=300,
        window_size=1,
        maxout_pieces=2,
        subword_features=True,
        pretrained_vectors=None,
    )

    def forward(model, docs, is_train):
        return model.layers[0](docs, is_train)

    def init(model, X=None, Y=None):
        model.layers[0].initialize(X=X)

    return Model("unsized-tok2vec", forward, init=init, layers=[inner], dims={"nO": None})


# The parser's own unsized tok2vec, 24 wide (the listener-based TINY_CONFIG is 32 wide).
UNSIZED_CONFIG = (
    TINY_CONFIG.replace('"tok2vec", ', "").split("[components.tok2vec]")[0]
    + f"""
[components.biaffine_parser]
factory = "biaffine_parser"

[components.biaffine_parser.model]
@architectures = "spacy_treexp.BiaffineParser.v1"
arc_width = 32
rel_width = 16
lstm_depth = 1
lstm_width = 16
dropout = 0.0

[components.biaffine_parser.model.tok2vec]
@architectures = "{UNSIZED}"
width = 24
"""
)


def _scores(nlp, words):
    doc = nlp(Doc(nlp.vocab, words=words))
    return doc._.parser_scores[0]["arc"]


def test_width_is_read_from_the_sample_at_initialize():
    nlp, _, history = train_toy(UNSIZED_CONFIG, 20)
    model = nlp.get_pipe("biaffine_parser").model
    assert model.layers[0].has_dim("nO") is None  # the layer itself never learnt its width
    assert model.get_dim("nI") == 24
    assert get_scorer_module(model).root.shape == (24,)
    assert history[-1] < 0.9 * history[0]  # it trains


def test_unsized_parser_round_trips_through_disk(tmp_path):
    nlp, examples, _ = train_toy(UNSIZED_CONFIG, 5)
    words = [t.text for t in examples[0].reference]
    before = _scores(nlp, words)
    nlp.to_disk(tmp_path / "model")
    loaded = spacy.load(tmp_path / "model")  # built from the config: the width is unknown until loaded
    assert loaded.get_pipe("biaffine_parser").model.get_dim("nI") == 24
    numpy.testing.assert_allclose(_scores(loaded, words), before, rtol=1e-5, atol=1e-5)


def test_unsized_parser_round_trips_through_bytes():
    nlp, examples, _ = train_toy(UNSIZED_CONFIG, 3)
    words = [t.text for t in examples[0].reference]
    fresh = spacy.util.load_model_from_config(Config().from_str(UNSIZED_CONFIG), auto_fill=True)
    fresh.from_bytes(nlp.to_bytes())
    numpy.testing.assert_allclose(_scores(fresh, words), _scores(nlp, words), rtol=1e-5, atol=1e-5)


def test_unknown_width_without_a_sample_is_refused():
    model = build_biaffine_parser(chain(unsized_tok2vec(8), noop()))
    assert model.has_dim("nI") is None
    with pytest.raises(ValueError, match="width of the tok2vec layer is unknown"):
        model.initialize()


def test_known_width_builds_the_scorer_at_once():
    model = build_biaffine_parser(spacy.registry.architectures.get("spacy.Tok2VecListener.v1")(width=40))
    assert model.get_dim("nI") == 40
    assert get_scorer_module(model).input_width == 40


def _tiny_bert(path, words):
    """A 1-layer, 16-wide BERT with a word-level vocabulary, saved in the hub's format."""
    transformers = pytest.importorskip("transformers")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted({w.lower() for w in words})
    path.mkdir()
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf8")
    transformers.BertTokenizerFast(vocab_file=str(path / "vocab.txt")).save_pretrained(str(path))
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=64,
    )
    transformers.BertModel(config).save_pretrained(str(path))


def test_transformer_listener(tmp_path):
    pytest.importorskip("spacy_transformers")
    probe = spacy.blank("en")
    words = [t.text for eg in toy_examples(probe) for t in eg.reference]
    _tiny_bert(tmp_path / "bert", words)
    config = f"""
[nlp]
lang = "en"
pipeline = ["transformer", "sentencizer", "biaffine_parser"]

[components]

[components.sentencizer]
factory = "sentencizer"

[components.transformer]
factory = "transformer"

[components.transformer.model]
@architectures = "spacy-transformers.TransformerModel.v3"
name = "{tmp_path / "bert"}"

[components.transformer.model.get_spans]
@span_getters = "spacy-transformers.strided_spans.v1"
window = 32
stride = 24

[components.biaffine_parser]
factory = "biaffine_parser"

[components.biaffine_parser.model]
@architectures = "spacy_treexp.BiaffineParser.v1"
arc_width = 16
rel_width = 8
lstm_depth = 0
dropout = 0.0

[components.biaffine_parser.model.tok2vec]
@architectures = "spacy-transformers.TransformerListener.v1"
upstream = "transformer"
pooling = {{"@layers":"reduce_mean.v1"}}
"""
    fix_random_seed(0)
    nlp, examples, history = train_toy(config, 8)
    assert nlp.get_pipe("biaffine_parser").model.get_dim("nI") == 16
    assert history[-1] < history[0]
    words = [t.text for t in examples[0].reference]
    before = _scores(nlp, words)
    nlp.to_disk(tmp_path / "model")
    numpy.testing.assert_allclose(_scores(spacy.load(tmp_path / "model"), words), before, rtol=1e-4, atol=1e-4)


def brute_force_relations(head, dep, weight, temperature):
    """log_softmax over labels of [r_h; 1]^T U_l [r_m; 1] / T for every pair, float64 loops."""
    head, dep, weight = (numpy.asarray(x, dtype=numpy.float64) for x in (head, dep, weight))
    n1, n_labels = head.shape[0], weight.shape[0]
    logits = numpy.zeros((n1, n1, n_labels))
    for h in range(n1):
        for m in range(n1):
            for label in range(n_labels):
                logits[h, m, label] = head[h] @ weight[label] @ dep[m] / temperature
    top = logits.max(axis=-1, keepdims=True)
    return logits - top - numpy.log(numpy.exp(logits - top).sum(axis=-1, keepdims=True))


@pytest.mark.parametrize("grad", [False, True], ids=["numpy-blas", "torch"])
@pytest.mark.parametrize("temperature", [1.0, 2.5])
def test_all_pairs_relations_match_brute_force(grad, temperature):
    """Both the no-grad CPU route (numpy's BLAS) and the torch route give the relation
    log-probabilities of every pair at the temperature, dense for short sentences and as
    factors (at temperature 1) for long ones."""
    from spacy_treexp.pipeline.architectures import _all_pairs_relations

    generator = torch.Generator().manual_seed(0)
    n_labels, d = 3, 4
    sizes = [1, 3, 6, 9]  # words + ROOT: dense up to (L + 1)(d + 1) / L = 6.67, then factors
    padded = max(sizes)
    dep = torch.randn(len(sizes), padded, d + 1, generator=generator)
    dep[..., -1] = 1.0
    head = torch.randn(sum(sizes), d + 1, generator=generator)
    head[:, -1] = 1.0
    weight = torch.randn(n_labels, d + 1, d + 1, generator=generator)
    with torch.set_grad_enabled(grad):
        rels = _all_pairs_relations(head, dep, weight, sizes, temperature)
    offsets = numpy.cumsum([0] + sizes)
    for b, (rel, size) in enumerate(zip(rels, sizes)):
        sentence_head, sentence_dep = head[offsets[b] : offsets[b + 1]], dep[b, :size]
        if size < 9:
            expected = brute_force_relations(sentence_head, sentence_dep, weight, temperature)
            numpy.testing.assert_allclose(rel.detach().numpy(), expected, atol=1e-5)
        else:
            head_part, dep_part = (x.detach().numpy().astype(numpy.float64) for x in rel)
            assert head_part.shape == (size, n_labels, d + 1)
            expected = brute_force_relations(sentence_head, sentence_dep, weight, 1.0)
            logits = numpy.einsum("hlj,mj->hml", head_part, dep_part)
            got = logits - numpy.log(numpy.exp(logits).sum(axis=-1, keepdims=True))
            numpy.testing.assert_allclose(got, expected, atol=1e-5)


def test_prediction_route_equals_the_module_route():
    """In prediction on the CPU (no gradient) the scorer runs its four MLPs as one product on
    the sentences' words only (``_prediction_parts``): the arc scores, the relation
    log-probabilities and what a ``ScorerCapture`` records equal those of the module route
    (training's, through each MLP), and the arc scores the float64 biaffine form of the MLPs'
    outputs."""
    from spacy_treexp.pipeline.architectures import BiaffineScorer
    from spacy_treexp.pipeline.members import ScorerCapture

    torch.manual_seed(0)
    scorer = BiaffineScorer(6, arc_width=5, rel_width=3, lstm_depth=2, lstm_width=4, dropout=0.3)
    scorer.set_n_labels(4)
    with torch.no_grad():
        for parameter in scorer.parameters():
            parameter.normal_(0.0, 0.5)
    scorer.eval()
    lengths = torch.tensor([3, 1, 7, 5])
    X = torch.randn(len(lengths), int(lengths.max()), 6)
    capture = ScorerCapture(scorer)
    with torch.no_grad(), capture:
        arc, rel = scorer(X, lengths)
    with torch.enable_grad():
        ref_arc, ref_rel = scorer(X, lengths)
    for b, n in enumerate(lengths.tolist()):
        numpy.testing.assert_allclose(arc[b, : n + 1, : n + 1], ref_arc[b, : n + 1, : n + 1].detach(), atol=1e-5)
        for got, want in zip(*(r if isinstance(r, tuple) else (r,) for r in (rel[b], ref_rel[b]))):
            numpy.testing.assert_allclose(got, want.detach(), atol=1e-5)  # dense, or the factors of a long one
        H = capture.H[b, : n + 1].double()
        head = torch.nn.functional.leaky_relu(
            H @ scorer.arc_head[0].weight.double().T + scorer.arc_head[0].bias.double(), 0.1
        )
        dep = torch.nn.functional.leaky_relu(
            H @ scorer.arc_dep[0].weight.double().T + scorer.arc_dep[0].bias.double(), 0.1
        )
        expected = torch.cat([head, torch.ones(n + 1, 1, dtype=torch.float64)], -1) @ scorer.arc_weight.double() @ dep.T
        numpy.testing.assert_allclose(arc[b, : n + 1, : n + 1], expected.detach(), atol=1e-5)
        numpy.testing.assert_allclose(capture.dep[b, : n + 1], dep.detach(), atol=1e-5)
        by_head = capture.by_head[b, : n + 1] @ capture.dep[b, : n + 1].T
        numpy.testing.assert_allclose(by_head, arc[b, : n + 1, : n + 1], atol=1e-5)
    assert scorer.capture is None  # the capture is released on exit
