"""``spacy_treexp.ConcatTok2Vec.v1`` and ``spacy_treexp.FrozenTok2Vec.v1``: a biaffine_parser
that reads its own pipeline's tok2vec beside a frozen copy of another pipeline's, whose
weights ``spacy_treexp.copy_tok2vec.v1`` copies in when training starts and no update changes."""

import numpy
import pytest
import spacy
from helpers.threads import one_torch_thread  # noqa: F401  (autouse)
from helpers.toy_pipelines import TINY_CONFIG, toy_examples
from spacy.util import registry
from thinc.api import Adam, Config, Model, fix_random_seed, set_dropout_rate

from spacy_treexp.pipeline.encoders import FROZEN_TOK2VEC, build_concat_tok2vec, build_frozen_tok2vec
from spacy_treexp.training.callbacks import copy_tok2vec


def _hash_cnn(width: int) -> str:
    """A small spaCy tok2vec, as the body of a config section."""
    return f"""@architectures = "spacy.HashEmbedCNN.v2"
pretrained_vectors = null
width = {width}
depth = 1
embed_size = 300
window_size = 1
maxout_pieces = 2
subword_features = true
"""


# the parser listens to the pipeline's tok2vec (32 wide) and reads a frozen 16-wide one
_FROZEN_STOCK = """
[components.biaffine_parser.model.tok2vec]
@architectures = "spacy_treexp.ConcatTok2Vec.v1"

[components.biaffine_parser.model.tok2vec.*.own]
@architectures = "spacy.Tok2VecListener.v1"
width = 32
upstream = "tok2vec"

[components.biaffine_parser.model.tok2vec.*.stock]
@architectures = "spacy_treexp.FrozenTok2Vec.v1"

[components.biaffine_parser.model.tok2vec.*.stock.tok2vec]
""" + _hash_cnn(16)
TWO_ENCODER_CONFIG = TINY_CONFIG.replace(
    '[components.biaffine_parser.model.tok2vec]\n@architectures = "spacy.Tok2VecListener.v1"\nwidth = 32\nupstream = "tok2vec"\n',
    _FROZEN_STOCK,
)

# the "stock" pipeline: a tok2vec built like the frozen layer
_STOCK_CONFIG = """
[nlp]
lang = "en"
pipeline = ["tok2vec"]

[components]

[components.tok2vec]
factory = "tok2vec"

[components.tok2vec.model]
""" + _hash_cnn(16)


def _tok2vec(width: int, seed: int) -> Model:
    fix_random_seed(seed)
    spacy.blank("en")  # registers spaCy's architectures
    return registry.resolve(Config().from_str("[model]\n" + _hash_cnn(width)))["model"]


@pytest.fixture
def docs():
    nlp = spacy.blank("en")
    return [nlp("The cat sat on the mat ."), nlp("Dogs bark"), nlp("")]


@pytest.fixture
def stock_path(tmp_path):
    fix_random_seed(3)
    stock = spacy.util.load_model_from_config(Config().from_str(_STOCK_CONFIG), auto_fill=True)
    stock.initialize()
    stock.to_disk(tmp_path / "stock")
    return tmp_path / "stock"


def test_the_vectors_are_each_layers_side_by_side(docs):
    first, second = _tok2vec(8, 0), _tok2vec(4, 1)
    both = build_concat_tok2vec(first, second)
    both.initialize(X=docs)
    assert both.get_dim("nO") == 12
    joined = both.predict(docs)
    for doc, vectors, a, b in zip(docs, joined, first.predict(docs), second.predict(docs)):
        assert vectors.shape == (len(doc), 12)
        numpy.testing.assert_array_equal(vectors, numpy.hstack([a, b]))


def test_each_layer_gets_the_gradient_of_its_own_columns(docs):
    received = []

    def recording(width):
        def forward(model, X, is_train):
            def backprop(dY):
                received.append((width, [d.copy() for d in dY]))
                return []

            return [model.ops.alloc2f(len(doc), width) for doc in X], backprop

        return Model(f"recording{width}", forward, dims={"nO": width})

    both = build_concat_tok2vec(recording(2), recording(3))
    outputs, backprop = both.begin_update(docs)
    gradient = [numpy.arange(d.size, dtype="f").reshape(d.shape) + 1 for d in outputs]
    backprop(gradient)
    (w1, d1), (w2, d2) = received
    assert (w1, w2) == (2, 3)
    for full, left, right in zip(gradient, d1, d2):
        numpy.testing.assert_array_equal(left, full[:, :2])
        numpy.testing.assert_array_equal(right, full[:, 2:])


def test_one_layer_is_refused():
    with pytest.raises(ValueError, match="at least two"):
        build_concat_tok2vec(_tok2vec(4, 0))


def test_a_frozen_layer_predicts_in_training_and_passes_no_gradient(docs):
    inner = _tok2vec(8, 0)
    frozen = build_frozen_tok2vec(inner)
    frozen.initialize(X=docs)
    set_dropout_rate(frozen, 0.5)  # dropout would change the training outputs
    before = _params(inner)
    with pytest.warns(UserWarning, match="no pipeline's tok2vec was copied into"):
        outputs, backprop = frozen.begin_update(docs)
    for got, expected in zip(outputs, inner.predict(docs)):
        numpy.testing.assert_array_equal(got, expected)
    assert backprop([numpy.ones_like(y) for y in outputs]) == []
    frozen.finish_update(Adam(0.1))
    assert _params(inner) == before


def _two_encoder_pipeline(seed=0):
    fix_random_seed(seed)
    return spacy.util.load_model_from_config(Config().from_str(TWO_ENCODER_CONFIG), auto_fill=True)


def _params(model):
    """Every parameter of ``model`` (a training step also sets its dropout rate attributes,
    which its predictions do not use)."""
    return [
        node.get_param(name).tobytes() for node in model.walk() for name in node.param_names if node.has_param(name)
    ]


def _frozen_layer(nlp):
    [frozen] = [node for node in nlp.get_pipe("biaffine_parser").model.walk() if node.name == FROZEN_TOK2VEC]
    return frozen.layers[0]


def test_training_copies_the_stock_weights_in_and_never_changes_them(stock_path, tmp_path):
    nlp = _two_encoder_pipeline()
    examples = toy_examples(nlp)
    nlp.initialize(lambda: examples)
    stock_weights = _params(spacy.load(stock_path).get_pipe("tok2vec").model)
    assert _params(_frozen_layer(nlp)) != stock_weights
    copy_tok2vec(str(stock_path))(nlp)
    assert _params(_frozen_layer(nlp)) == stock_weights

    own_before = nlp.get_pipe("tok2vec").model.to_bytes()
    optimizer = nlp.create_optimizer()
    losses: dict = {}
    for _ in range(3):
        nlp.update(examples, sgd=optimizer, losses=losses, drop=0.2)
    assert losses["biaffine_parser"] > 0
    assert nlp.get_pipe("tok2vec").model.to_bytes() != own_before  # the listener's upstream learns
    assert _params(_frozen_layer(nlp)) == stock_weights  # the frozen one does not

    # saved with the parser, so the pipeline loads without the stock pipeline
    nlp.to_disk(tmp_path / "trained")
    loaded = spacy.load(tmp_path / "trained")
    assert _params(_frozen_layer(loaded)) == stock_weights
    words = "The cat sat on the mat .".split()
    heads = [[t.head.i for t in nlp(" ".join(words))], [t.head.i for t in loaded(" ".join(words))]]
    assert heads[0] == heads[1]

    # the listener inside reads doc.tensor: a Doc the pipeline's tok2vec did not run on is refused
    doc = loaded.get_pipe("sentencizer")(loaded.make_doc(" ".join(words)))
    with pytest.raises(ValueError, match="no token vectors.*'tok2vec'"):
        loaded.get_pipe("biaffine_parser")(doc)


def test_copying_into_a_parser_without_a_frozen_layer_is_refused(stock_path):
    fix_random_seed(0)
    nlp = spacy.util.load_model_from_config(Config().from_str(TINY_CONFIG), auto_fill=True)
    nlp.initialize(lambda: toy_examples(nlp))
    with pytest.raises(ValueError, match="no spacy_treexp.FrozenTok2Vec.v1 layer"):
        copy_tok2vec(str(stock_path))(nlp)


def test_a_layer_no_weights_were_copied_into_is_warned_about_once(stock_path, recwarn):
    nlp = _two_encoder_pipeline()
    nlp.initialize(lambda: toy_examples(nlp))
    nlp("The cat sat .")
    nlp("The dog sat .")
    assert sum("no pipeline's tok2vec was copied into" in str(w.message) for w in recwarn) == 1
    copy_tok2vec(str(stock_path))(nlp)
    recwarn.clear()
    nlp("The cat sat .")
    assert not [w for w in recwarn if "copied into" in str(w.message)]


def test_a_frozen_layer_built_otherwise_than_the_stock_tok2vec_is_named(tmp_path):
    stock = spacy.util.load_model_from_config(
        Config().from_str(_STOCK_CONFIG.replace("width = 16", "width = 24")), auto_fill=True
    )
    stock.initialize()
    stock.to_disk(tmp_path / "wider")
    nlp = _two_encoder_pipeline()
    nlp.initialize(lambda: toy_examples(nlp))
    with pytest.raises(ValueError, match=r"not built like the tok2vec of .*'width': 24"):
        copy_tok2vec(str(tmp_path / "wider"))(nlp)


def test_a_stock_tok2vec_with_static_vectors_is_refused(tmp_path):
    from spacy.vectors import Vectors

    fix_random_seed(0)
    config = Config().from_str(_STOCK_CONFIG.replace("pretrained_vectors = null", "pretrained_vectors = true"))
    stock = spacy.util.load_model_from_config(config, auto_fill=True)
    stock.vocab.vectors = Vectors(strings=stock.vocab.strings, shape=(3, 4))
    for row, word in enumerate(["cat", "dog", "mat"]):
        stock.vocab.set_vector(word, numpy.full(4, row, dtype="f"))
    stock.initialize()
    stock.to_disk(tmp_path / "with_vectors")
    nlp = _two_encoder_pipeline()
    nlp.initialize(lambda: toy_examples(nlp))
    with pytest.raises(ValueError, match="reads static vectors"):
        copy_tok2vec(str(tmp_path / "with_vectors"))(nlp)


def test_a_listener_of_the_wrong_width_is_named_by_its_own_setting():
    config = Config().from_str(TWO_ENCODER_CONFIG.replace("width = 32\nupstream", "width = 30\nupstream"))
    nlp = spacy.util.load_model_from_config(config, auto_fill=True)
    with pytest.raises(ValueError, match=r"set components\.biaffine_parser\.model\.tok2vec\.\*\.own\.width = 32"):
        nlp.initialize(lambda: toy_examples(nlp))
