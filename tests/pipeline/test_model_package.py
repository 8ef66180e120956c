"""``spacy.load("en_treexp_ewt")`` through the name-only package in packages/en_treexp_ewt
(installed by the README's install command; the tests skip where it is not installed)."""

import importlib.util
from pathlib import Path

import pytest
import spacy

import spacy_treexp
from spacy_treexp.pipeline.default_model import MODEL_PATH

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("en_treexp_ewt") is None, reason="packages/en_treexp_ewt is not installed"
)


def test_spacy_loads_the_shipped_pipeline_by_name():
    nlp = spacy.load("en_treexp_ewt")
    shipped = spacy_treexp.load()
    assert nlp.pipe_names == shipped.pipe_names
    assert nlp.meta["name"] == shipped.meta["name"] and nlp.meta["version"] == shipped.meta["version"]
    text = "The old man saw the dog with the telescope."
    assert [(t.head.i, t.dep_) for t in nlp(text)] == [(t.head.i, t.dep_) for t in shipped(text)]


def test_spacy_load_options_reach_the_pipeline():
    nlp = spacy.load("en_treexp_ewt", disable=["senter"], config={"components.biaffine_parser.decoding": "mbr"})
    assert nlp.disabled == ["senter"]
    assert nlp.get_pipe("biaffine_parser").decoding == "mbr"


def test_the_package_holds_no_copy_of_the_weights():
    import en_treexp_ewt

    assert en_treexp_ewt.get_model_path() == MODEL_PATH
    package = Path(en_treexp_ewt.__file__).parent
    assert not [p for p in package.rglob("*") if p.is_file() and p.suffix not in (".py", ".pyc", ".json")]


def test_spacy_info_reads_the_packages_meta_a_copy_of_the_pipelines():
    """``spacy info en_treexp_ewt`` reads meta.json beside the package's module: a copy of the
    pipeline's (configs/write_model_meta.py writes both)."""
    import json

    import en_treexp_ewt

    package_meta = Path(en_treexp_ewt.__file__).parent / "meta.json"
    assert json.loads(package_meta.read_text(encoding="utf8")) == json.loads(
        (MODEL_PATH / "meta.json").read_text(encoding="utf8")
    )
    info = spacy.info("en_treexp_ewt")
    assert info["name"] == "treexp_ewt" and info["version"] == spacy_treexp.__version__


def test_the_pipelines_meta_is_valid_for_spacy_package():
    """``spacy package`` validates meta.json against spaCy's schema: the lemmatizer's tree ids
    (ints) as labels made it refuse the shipped folder."""
    import json

    from spacy.schemas import ModelMetaSchema, validate

    meta = json.loads((MODEL_PATH / "meta.json").read_text(encoding="utf8"))
    assert validate(ModelMetaSchema, meta) == []
