"""``spacy_treexp.ProductOfTaggers.v1``: a tagger component whose scores are
log p_first + weight * log p_second (a product of experts), saved and loaded like any tagger,
at half precision when asked, and never trained."""

import numpy
import pytest
import spacy
from spacy.tokens import Doc
from spacy.training import Example
from thinc.api import Config

from spacy_treexp.pipeline.product_of_taggers import build_product_of_taggers

TAGS = ["DT", "NN", "VBZ", "JJ"]
TRAIN = [(["the", "dog", "runs"], ["DT", "NN", "VBZ"]), (["a", "red", "cat", "sits"], ["DT", "JJ", "NN", "VBZ"])]


def _member(normalize: bool, width: int) -> dict:
    return {
        "@architectures": "spacy.Tagger.v2",
        "nO": None,
        "normalize": normalize,
        "tok2vec": {
            "@architectures": "spacy.HashEmbedCNN.v2",
            "width": width,
            "depth": 1,
            "embed_size": 100,
            "window_size": 1,
            "maxout_pieces": 2,
            "subword_features": True,
            "pretrained_vectors": None,
        },
    }


def _pipeline(weight=0.7, storage="float32", first_normalizes=False):
    nlp = spacy.blank("en")
    model = {
        "@architectures": "spacy_treexp.ProductOfTaggers.v1",
        "weight": weight,
        "storage": storage,
        "first": _member(first_normalizes, 12),
        "second": _member(True, 8),
    }
    nlp.add_pipe("tagger", config={"model": Config(model)})
    examples = [Example.from_dict(nlp.make_doc(" ".join(words)), {"tags": tags}) for words, tags in TRAIN]
    nlp.initialize(lambda: examples)
    rng = numpy.random.default_rng(0)
    for node in nlp.get_pipe("tagger").model.walk():  # random weights (spaCy starts softmaxes at zero)
        for name in node.param_names:
            if node.has_param(name):
                node.set_param(name, rng.normal(size=node.get_param(name).shape).astype("float32"))
    return nlp


def _docs(nlp):
    return [nlp.make_doc(text) for text in ("the red dog sits", "a cat runs", "dog")]


def _log_softmax(x):
    x = x - x.max(axis=1, keepdims=True)
    return x - numpy.log(numpy.exp(x).sum(axis=1, keepdims=True))


@pytest.mark.parametrize("first_normalizes", [False, True])
def test_scores_are_the_weighted_sum_of_the_members_log_probabilities(first_normalizes):
    nlp = _pipeline(weight=0.7, first_normalizes=first_normalizes)
    product = nlp.get_pipe("tagger").model
    first, second = product.layers
    docs = _docs(nlp)
    for got, a, b in zip(product.predict(docs), first.predict(docs), second.predict(docs)):
        log_a = numpy.log(a) if first_normalizes else _log_softmax(a)
        numpy.testing.assert_allclose(got, log_a + 0.7 * numpy.log(b), rtol=1e-5, atol=1e-5)
        # a distribution up to a constant: normalised, each row's probabilities sum to one
        numpy.testing.assert_allclose(numpy.exp(_log_softmax(got)).sum(axis=1), 1.0, rtol=1e-6)


def test_the_component_tags_by_the_products_argmax_and_weight_zero_is_the_first_tagger():
    nlp = _pipeline(weight=0.0)
    tagger = nlp.get_pipe("tagger")
    first = tagger.model.layers[0]
    docs = list(nlp.pipe(_docs(nlp)))
    for doc, scores in zip(docs, first.predict(_docs(nlp))):
        assert [t.tag_ for t in doc] == [tagger.labels[i] for i in scores.argmax(axis=1)]
    weighted = _pipeline(weight=5.0)
    second = weighted.get_pipe("tagger").model.layers[1]
    for doc, a, b in zip(weighted.pipe(_docs(weighted)), first.predict(_docs(nlp)), second.predict(_docs(nlp))):
        expected = (_log_softmax(a) + 5.0 * numpy.log(b)).argmax(axis=1)
        assert [t.tag_ for t in doc] == [tagger.labels[i] for i in expected]


def test_weight_zero_does_not_run_the_second_tagger():
    nlp = _pipeline(weight=0.0)
    product = nlp.get_pipe("tagger").model
    first, second = product.layers
    calls = []
    original = second._func
    second._func = lambda model, X, is_train: calls.append(len(X)) or original(model, X, is_train)
    docs = _docs(nlp)
    for got, a in zip(product.predict(docs), first.predict(docs)):
        numpy.testing.assert_allclose(got, _log_softmax(a), rtol=1e-6, atol=1e-6)
    assert calls == []
    product.attrs["weight"] = 0.5
    product.predict(docs)
    assert calls == [len(docs)]


def test_a_saved_pipeline_loads_with_the_same_tags_and_scores(tmp_path):
    nlp = _pipeline()
    nlp.to_disk(tmp_path / "p")
    loaded = spacy.load(tmp_path / "p")
    docs = _docs(nlp)
    for a, b in zip(nlp.get_pipe("tagger").model.predict(docs), loaded.get_pipe("tagger").model.predict(docs)):
        numpy.testing.assert_array_equal(a, b)
    assert loaded.get_pipe("tagger").model.attrs["weight"] == 0.7


def test_the_configs_weight_wins_over_the_saved_one(tmp_path):
    """``spacy.load(path, config={"components.tagger.model.weight": 0})``: the first tagger
    alone, although the saved model holds the weight it was saved with."""
    nlp = _pipeline(weight=3.0)
    nlp.to_disk(tmp_path / "p")
    first_only = spacy.load(tmp_path / "p", config={"components.tagger.model.weight": 0.0})
    assert first_only.get_pipe("tagger").model.attrs["weight"] == 0.0
    docs = _docs(nlp)
    first = nlp.get_pipe("tagger").model.layers[0]
    for got, a in zip(first_only.get_pipe("tagger").model.predict(docs), first.predict(docs)):
        numpy.testing.assert_allclose(got, _log_softmax(a), rtol=1e-5, atol=1e-5)
    assert spacy.load(tmp_path / "p").get_pipe("tagger").model.attrs["weight"] == 3.0


def test_half_precision_storage_halves_the_file_and_loads_float32_weights_within_rounding(tmp_path):
    full, half = _pipeline(storage="float32"), _pipeline(storage="float16")
    full.to_disk(tmp_path / "full")
    half.to_disk(tmp_path / "half")
    size = {name: (tmp_path / name / "tagger" / "model").stat().st_size for name in ("full", "half")}
    assert size["half"] < 0.6 * size["full"]
    loaded = spacy.load(tmp_path / "half")
    pairs = zip(half.get_pipe("tagger").model.walk(), loaded.get_pipe("tagger").model.walk())
    compared = 0
    for before, after in pairs:
        for name in before.param_names:
            if before.has_param(name):
                value = after.get_param(name)
                assert value.dtype == numpy.float32
                numpy.testing.assert_allclose(value, before.get_param(name), rtol=1e-3, atol=1e-4)
                compared += 1
    assert compared >= 8
    docs = _docs(half)
    for a, b in zip(half.get_pipe("tagger").model.predict(docs), loaded.get_pipe("tagger").model.predict(docs)):
        numpy.testing.assert_allclose(a, b, rtol=1e-2, atol=1e-2)
    # saving the loaded pipeline again gives the same bytes (half precision is a fixed point)
    loaded.to_disk(tmp_path / "again")
    assert (tmp_path / "again" / "tagger" / "model").read_bytes() == (
        tmp_path / "half" / "tagger" / "model"
    ).read_bytes()


def test_half_precision_storage_covers_a_pytorch_member(tmp_path):
    """A member with a PyTorch layer (the packed BiLSTM): its state is saved in float16 and
    read back into the float32 LSTM."""
    nlp = spacy.blank("en")
    second = _member(True, 8)
    second["tok2vec"] = {
        "@architectures": "spacy.Tok2Vec.v2",
        "embed": {
            "@architectures": "spacy.MultiHashEmbed.v2",
            "width": 8,
            "attrs": ["NORM", "SHAPE"],
            "rows": [50, 20],
            "include_static_vectors": False,
        },
        "encode": {"@architectures": "spacy_treexp.PackedBiLSTMEncoder.v1", "width": 8, "depth": 1, "dropout": 0.0},
    }
    model = {
        "@architectures": "spacy_treexp.ProductOfTaggers.v1",
        "storage": "float16",
        "first": _member(False, 12),
        "second": second,
    }
    nlp.add_pipe("tagger", config={"model": Config(model)})
    examples = [Example.from_dict(nlp.make_doc(" ".join(words)), {"tags": tags}) for words, tags in TRAIN]
    nlp.initialize(lambda: examples)
    nlp.to_disk(tmp_path / "p")
    loaded = spacy.load(tmp_path / "p")
    docs = _docs(nlp)
    for a, b in zip(nlp.get_pipe("tagger").model.predict(docs), loaded.get_pipe("tagger").model.predict(docs)):
        numpy.testing.assert_allclose(a, b, rtol=1e-2, atol=1e-2)
    [lstm] = [shim._model for node in loaded.get_pipe("tagger").model.walk() for shim in node.shims]
    assert all(p.dtype.is_floating_point and str(p.dtype) == "torch.float32" for p in lstm.parameters())


def test_the_product_refuses_training():
    nlp = _pipeline()
    example = Example.from_dict(nlp.make_doc("the dog runs"), {"tags": ["DT", "NN", "VBZ"]})
    with pytest.raises(ValueError, match="frozen_components"):
        nlp.update([example])
    # frozen, as the message asks, the pipeline trains around it
    losses = nlp.update([example], exclude=["tagger"])
    assert "tagger" not in losses


def test_bad_settings_are_refused_by_name():
    spacy.blank("en")
    first = spacy.registry.resolve(Config({"m": _member(False, 12)}))["m"]
    second = spacy.registry.resolve(Config({"m": _member(True, 8)}))["m"]
    with pytest.raises(ValueError, match="weight"):
        build_product_of_taggers(first, second, weight=-1.0)
    with pytest.raises(ValueError, match="storage"):
        build_product_of_taggers(first, second, storage="int8")
    first.set_dim("nO", 4)
    second.set_dim("nO", 5)
    with pytest.raises(ValueError, match="different numbers of tags"):
        build_product_of_taggers(first, second)


def test_an_empty_doc_gets_no_tags():
    nlp = _pipeline()
    assert len(nlp(Doc(nlp.vocab, words=[]))) == 0
