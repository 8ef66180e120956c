"""The shipped pipeline's meta agrees with the package and with its measured scores, and the
pipeline fills what its meta promises (PTB tags, lemmas, noun chunks)."""

import json

import pytest
from helpers.paths import REPO

from spacy_treexp.pipeline.default_model import MODEL_PATH

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

META = json.loads((MODEL_PATH / "meta.json").read_text(encoding="utf8"))
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf8"))["project"]
EVAL = REPO / "docs" / "eval_ewt" / "shipped_pipeline.json"


def test_version_author_url_match_the_package():
    authors = PROJECT.get("authors") or [{}]
    urls = PROJECT.get("urls") or {}
    assert META["version"] == PROJECT["version"]
    assert META["author"] == authors[0].get("name", "")
    assert META["email"] == authors[0].get("email", "")
    assert META["url"] == (urls.get("Homepage") or urls.get("Repository") or next(iter(urls.values()), ""))
    assert META["name"] == "treexp_ewt" and MODEL_PATH.name == f"{META['lang']}_{META['name']}"


def test_sources_and_licence_are_named():
    assert META["license"] == "CC BY-SA 4.0"
    names = " ".join(source["name"] for source in META["sources"])
    assert "UD_English-EWT" in names and "GloVe" in names
    assert all(source["url"].startswith("https://") and source["license"] for source in META["sources"])


def test_meta_pipeline_is_the_config_pipeline():
    from thinc.api import Config

    config = Config().from_disk(MODEL_PATH / "config.cfg", interpolate=False)
    assert META["pipeline"] == config["nlp"]["pipeline"]
    assert {"tagger", "lemmatizer", "biaffine_parser", "morphologizer"} <= set(META["pipeline"])
    assert "ner" not in META["pipeline"]


def test_accuracy_is_the_measured_one():
    measured = json.loads(EVAL.read_text(encoding="utf8"))
    scores = {s["sentences"]: s for s in measured["scores"]}
    for key, meta_key in (
        ("predicted", "performance"),
        ("gold", "performance_gold_sentences"),
    ):
        performance, s = META[meta_key], scores[key]
        assert performance["tag_acc"] == pytest.approx(s["tag_acc"] / 100, abs=1e-4)
        assert performance["lemma_acc"] == pytest.approx(s["lemma_acc"] / 100, abs=1e-4)
        assert performance["pos_acc"] == pytest.approx(s["pos_acc"] / 100, abs=1e-4)
        assert performance["dep_uas"] == pytest.approx(s["uas"] / 100, abs=1e-4)
        assert performance["dep_las"] == pytest.approx(s["las"] / 100, abs=1e-4)
        assert performance["noun_chunks_f"] == pytest.approx(s["noun_chunks_f"], abs=1e-4)
    assert measured["pipeline"] == META["pipeline"]


@pytest.fixture(scope="module")
def doc():
    import spacy_treexp

    return spacy_treexp.load()("The children were playing with their dogs in the park.")


def test_tags_lemmas_and_chunks_are_filled(doc):
    assert all(token.tag_ for token in doc)
    assert all(token.lemma_ for token in doc)
    assert [t.lemma_ for t in doc if t.text in ("children", "were", "dogs")] == ["child", "be", "dog"]
    assert [t.tag_ for t in doc if t.text in ("children", "playing", "dogs")] == ["NNS", "VBG", "NNS"]
    assert [c.text for c in doc.noun_chunks] == ["The children", "their dogs", "the park"]


def test_the_tagger_lemmatizer_config_assembles_on_the_frozen_tok2vec():
    import spacy

    config = spacy.util.load_config(
        REPO / "configs" / "en_ewt_tagger_lemmatizer.cfg", overrides={"paths.base_model": str(MODEL_PATH)}
    )
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    assert nlp.pipe_names == ["tok2vec", "tagger_tok2vec", "tagger", "trainable_lemmatizer"]
    assert config["training"]["frozen_components"] == ["tok2vec"] == config["training"]["annotating_components"]
    shipped = nlp.get_pipe("tok2vec").model.get_ref("embed")
    assert shipped.get_dim("nO") == 128


def test_the_meta_requires_the_package_in_spacys_range():
    """``spacy package`` and a reader of the meta learn that the pipeline runs spacy-treexp's
    components, in the range spaCy gives a third-party package (the same minor version)."""
    from spacy.util import get_minor_version_range

    assert META["requirements"] == [f"{PROJECT['name']}{get_minor_version_range(PROJECT['version'])}"]


def test_the_name_only_package_pins_the_version_whose_weights_it_names():
    """packages/en_treexp_ewt holds no weights, only the name, and a copy of the meta: its
    version and meta are those of one spacy-treexp, so it requires that one (it required
    ``>=0.1.0``, so a later spacy-treexp would have loaded other weights under this meta)."""
    package = tomllib.loads((REPO / "packages" / "en_treexp_ewt" / "pyproject.toml").read_text(encoding="utf8"))
    assert package["project"]["version"] == PROJECT["version"] == META["version"]
    assert package["project"]["dependencies"] == [f"{PROJECT['name']}=={PROJECT['version']}"]
