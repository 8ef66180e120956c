"""numpy's BLAS for thinc layers (``spacy_treexp.pipeline.blas``): the same outputs as blis up
to float rounding, on the package's threads, and in every layer of the shipped pipeline."""

import numpy
import pytest
import spacy
from spacy.lang.en import English
from thinc.api import Config, Maxout, NumpyOps, chain

from spacy_treexp.pipeline.blas import NUMPY_BLAS_OPS, NumpyBlasOps, blas_threads, numpy_blas, use_numpy_blas

TAGGER_CONFIG = """
[nlp]
lang = "en"
pipeline = ["tok2vec", "tagger"]
after_pipeline_creation = {"@callbacks": "spacy_treexp.numpy_blas.v1"}

[components]

[components.tok2vec]
factory = "tok2vec"

[components.tok2vec.model]
@architectures = "spacy.HashEmbedCNN.v2"
width = 16
depth = 2
embed_size = 100
window_size = 1
maxout_pieces = 3
subword_features = true
pretrained_vectors = null

[components.tagger]
factory = "tagger"

[components.tagger.model]
@architectures = "spacy.Tagger.v2"

[components.tagger.model.tok2vec]
@architectures = "spacy.Tok2VecListener.v1"
width = 16
upstream = "tok2vec"
"""


def _blis_model():
    blis_ops = NumpyOps(use_blis=True)
    model = chain(Maxout(8, 5, nP=3), Maxout(4, 8, nP=2))
    for node in model.walk():
        node.ops = blis_ops
    X = numpy.random.default_rng(0).normal(size=(7, 5)).astype("float32")
    model.initialize(X=X)
    return model, blis_ops, X


def test_numpy_blas_runs_a_thinc_model_alike_and_restores_its_ops():
    """Inside the block every layer multiplies with numpy's BLAS, with blis's outputs up to
    rounding; afterwards (also after an error) each layer has its own ops again."""
    model, blis_ops, X = _blis_model()
    expected = model.predict(X)
    with numpy_blas(model):
        assert all(node.ops is NUMPY_BLAS_OPS for node in model.walk())
        got = model.predict(X)
    numpy.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert all(node.ops is blis_ops for node in model.walk())
    with pytest.raises(RuntimeError):
        with numpy_blas(model):
            raise RuntimeError("boom")
    assert all(node.ops is blis_ops for node in model.walk())


def test_products_run_on_the_package_threads(monkeypatch):
    """numpy's BLAS has ``cpu_threads()`` threads (SPACY_TREEXP_THREADS) inside
    ``blas_threads`` and in every product of ``NumpyBlasOps``, and the process's own setting
    again afterwards."""
    threadpoolctl = pytest.importorskip("threadpoolctl")

    def threads():
        return [info["num_threads"] for info in threadpoolctl.threadpool_info() if info["user_api"] == "blas"]

    before = threads()
    if not before:
        pytest.skip("numpy's BLAS is not visible to threadpoolctl")
    seen = []
    real_dot = numpy.dot

    def dot(*args, **kwargs):
        seen.append(threads())
        return real_dot(*args, **kwargs)

    for wanted in (1, 2):
        monkeypatch.setenv("SPACY_TREEXP_THREADS", str(wanted))
        with blas_threads():
            assert threads() == [wanted] * len(before)
        assert threads() == before
        seen.clear()
        with monkeypatch.context() as patch:
            patch.setattr(numpy, "dot", dot)
            out = NumpyBlasOps().gemm(numpy.ones((3, 4), "f"), numpy.ones((5, 4), "f"), trans2=True)
        numpy.testing.assert_array_equal(out, numpy.full((3, 5), 4.0, "f"))
        assert seen == [[wanted] * len(before)]
        assert threads() == before


def test_the_callback_gives_a_configured_pipeline_numpy_blas_alike():
    """``[nlp] after_pipeline_creation = spacy_treexp.numpy_blas.v1`` gives every layer of
    every component numpy's BLAS; the tagger's scores equal those with blis up to rounding."""
    config = Config().from_str(TAGGER_CONFIG)
    nlp = English.from_config(config)
    assert {type(node.ops) for _, pipe in nlp.pipeline for node in pipe.model.walk()} == {NumpyBlasOps}
    nlp.initialize(lambda: [spacy.training.Example.from_dict(nlp.make_doc("a b"), {"tags": ["X", "Y"]})])
    doc = nlp.make_doc("The tagger reads numpy products.")
    ours = nlp.get_pipe("tagger").model.predict([nlp.get_pipe("tok2vec")(doc)])[0]
    blis_ops = NumpyOps(use_blis=True)
    for _, pipe in nlp.pipeline:
        for node in pipe.model.walk():
            node.ops = blis_ops
    theirs = nlp.get_pipe("tagger").model.predict([nlp.get_pipe("tok2vec")(nlp.make_doc(doc.text))])[0]
    numpy.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    assert use_numpy_blas(nlp) is nlp
    assert {type(node.ops) for _, pipe in nlp.pipeline for node in pipe.model.walk()} == {NumpyBlasOps}


def test_the_shipped_pipeline_multiplies_with_numpy_blas():
    """Every thinc layer of the shipped pipeline (its config names the callback) runs on
    numpy's BLAS, through ``spacy_treexp.load()`` and ``spacy.load`` of its folder."""
    import spacy_treexp
    from spacy_treexp.pipeline.default_model import MODEL_PATH

    for nlp in (spacy_treexp.load(), spacy.load(MODEL_PATH)):
        kinds = {type(node.ops) for _, pipe in nlp.pipeline if hasattr(pipe, "model") for node in pipe.model.walk()}
        assert kinds == {NumpyBlasOps}
