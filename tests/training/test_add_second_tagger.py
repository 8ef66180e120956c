"""configs/add_second_tagger.py: the shipped tagger becomes the product of itself and a second
tagger, with the weight the dev corpus prefers; every other file is kept byte for byte."""

from __future__ import annotations

import filecmp
import importlib.util

import numpy
import pytest
import spacy
from helpers.paths import REPO
from spacy.tokens import DocBin
from spacy.training import Example
from thinc.api import Config

SPEC = importlib.util.spec_from_file_location("add_second_tagger", REPO / "configs" / "add_second_tagger.py")
assert SPEC is not None and SPEC.loader is not None
add = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(add)

SENTENCES = [
    (["the", "dog", "runs"], ["DT", "NN", "VBZ"]),
    (["a", "red", "cat", "sits"], ["DT", "JJ", "NN", "VBZ"]),
    (["the", "old", "man", "walks", "home"], ["DT", "JJ", "NN", "VBZ", "NN"]),
    (["dogs", "run"], ["NNS", "VBP"]),
]
EMBED = {
    "@architectures": "spacy.HashEmbedCNN.v2",
    "width": 16,
    "depth": 1,
    "embed_size": 200,
    "window_size": 1,
    "maxout_pieces": 2,
    "subword_features": True,
    "pretrained_vectors": None,
}


def _examples(nlp, sentences=SENTENCES):
    return [Example.from_dict(nlp.make_doc(" ".join(words)), {"tags": tags}) for words, tags in sentences]


def _train(nlp, steps, seed):
    spacy.util.fix_random_seed(seed)
    examples = _examples(nlp)
    optimizer = nlp.initialize(lambda: examples)
    for _ in range(steps):
        nlp.update(examples, sgd=optimizer)
    return nlp


def _shipped():
    """A tagger listening to its own tok2vec, with a sentencizer beside it."""
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("tok2vec", name="tagger_tok2vec", config={"model": Config({"m": EMBED})["m"]})
    listener = {"@architectures": "spacy.Tok2VecListener.v1", "width": 16, "upstream": "tagger_tok2vec"}
    nlp.add_pipe("tagger", config={"model": {"@architectures": "spacy.Tagger.v2", "nO": None, "tok2vec": listener}})
    return _train(nlp, 4, 0)


def _second(labels_reversed=False):
    nlp = spacy.blank("en")
    tagger = nlp.add_pipe(
        "tagger", name="tagger_sm", config={"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": dict(EMBED)}}
    )
    if labels_reversed:
        for label in sorted({tag for _, tags in SENTENCES for tag in tags}, reverse=True):
            tagger.add_label(label)
    return _train(nlp, 6, 1)


@pytest.fixture
def folders(tmp_path):
    shipped = _shipped()
    shipped.to_disk(tmp_path / "shipped")
    shipped.to_disk(tmp_path / "before")
    _second().to_disk(tmp_path / "second")
    dev = DocBin(store_user_data=False)
    for example in _examples(shipped):
        dev.add(example.reference)
    dev.to_disk(tmp_path / "dev.spacy")
    return tmp_path


def _log_softmax(x):
    x = x - x.max(axis=1, keepdims=True)
    return x - numpy.log(numpy.exp(x).sum(axis=1, keepdims=True))


def _file_names(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


def test_the_tagger_becomes_the_product_and_nothing_else_changes(folders):
    add.main(folders / "shipped", folders / "second", folders / "dev.spacy", weight=None)
    config = Config().from_disk(folders / "shipped" / "config.cfg", interpolate=False)
    model = config["components"]["tagger"]["model"]
    assert model["@architectures"] == "spacy_treexp.ProductOfTaggers.v1" and model["storage"] == "float16"
    assert model["weight"] in add.WEIGHTS
    assert model["first"]["tok2vec"]["upstream"] == "tagger_tok2vec"  # the shipped tagger's own section
    assert model["second"]["tok2vec"]["@architectures"] == "spacy.HashEmbedCNN.v2"
    assert _file_names(folders / "shipped") == _file_names(folders / "before")
    for name in _file_names(folders / "before"):
        if name not in ("config.cfg", "tagger/model"):
            assert filecmp.cmp(folders / "before" / name, folders / "shipped" / name, shallow=False), name

    loaded = spacy.load(folders / "shipped")
    product = loaded.get_pipe("tagger").model
    assert product.attrs["weight"] == model["weight"]
    before, second = spacy.load(folders / "before"), spacy.load(folders / "second")
    text = "the red dog walks home"
    first_scores = before.get_pipe("tagger").model.predict([before(text)])[0]
    second_scores = second.get_pipe("tagger_sm").model.predict([second.make_doc(text)])[0]
    expected = _log_softmax(first_scores) + model["weight"] * _log_softmax(second_scores)  # logits both
    labels = loaded.get_pipe("tagger").labels
    assert [t.tag_ for t in loaded(text)] == [labels[i] for i in expected.argmax(axis=1)]
    assert sorted(p.name for p in folders.iterdir()) == ["before", "dev.spacy", "second", "shipped"]


def test_the_weight_is_the_best_on_dev_and_a_rerun_replaces_the_second_tagger(folders, capsys):
    add.main(folders / "shipped", folders / "second", folders / "dev.spacy", weight=None)
    report = capsys.readouterr().out
    assert '"weight"' in report and "dev_tag_acc_by_weight" in report
    _second().to_disk(folders / "second2")
    add.main(folders / "shipped", folders / "second2", folders / "dev.spacy", weight=2.5)
    model = Config().from_disk(folders / "shipped" / "config.cfg", interpolate=False)["components"]["tagger"]["model"]
    assert model["weight"] == 2.5
    assert "first" not in model["first"]  # the shipped tagger, not the product of the first run
    assert spacy.load(folders / "shipped").get_pipe("tagger").model.layers[0].name != "spacy_treexp.product_of_taggers"


def test_choose_weight_scores_each_weight_and_prefers_the_smallest_of_the_best():
    first = numpy.log(numpy.array([[0.6, 0.4], [0.3, 0.7], [0.5, 0.5]]))
    second = numpy.log(numpy.array([[0.1, 0.9], [0.9, 0.1], [0.2, 0.8]]))
    gold = numpy.array([1, 0, 1])
    scores = add.choose_weight(first, second, gold, [0.0, 1.0, 5.0])
    assert scores == {0.0: pytest.approx(0.0), 1.0: pytest.approx(100.0), 5.0: pytest.approx(100.0)}


def test_a_second_tagger_of_other_labels_or_no_second_tagger_is_refused(folders):
    _second(labels_reversed=True).to_disk(folders / "reversed")
    with pytest.raises(SystemExit, match="other tags, or in another order"):
        add.main(folders / "shipped", folders / "reversed", folders / "dev.spacy", weight=None)
    with pytest.raises(SystemExit, match="has no 'tagger_sm'"):
        add.main(folders / "shipped", folders / "before", folders / "dev.spacy", weight=None)
    assert _file_names(folders / "shipped") == _file_names(folders / "before")
    assert filecmp.cmp(folders / "before" / "config.cfg", folders / "shipped" / "config.cfg", shallow=False)
