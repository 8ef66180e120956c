"""configs/replace_parser.py: a parser trained on a pipeline's own frozen tok2vec takes the
old parser's place; every other component is kept byte for byte."""

from __future__ import annotations

import filecmp
import importlib.util

import pytest
import spacy
from helpers.paths import REPO
from helpers.toy_pipelines import TINY_CONFIG, tiny_parser_config, train_toy
from thinc.api import Config

SPEC = importlib.util.spec_from_file_location("replace_parser", REPO / "configs" / "replace_parser.py")
assert SPEC is not None and SPEC.loader is not None
replace = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(replace)


def _retrained_parser(home_folder, folder, examples):
    """The pipeline in ``home_folder`` with a parser of another size trained on its tok2vec,
    which is not updated (as ``configs/en_ewt_dual.cfg`` trains with it frozen)."""
    nlp = spacy.load(home_folder)
    nlp.remove_pipe("biaffine_parser")
    settings = Config().from_str(tiny_parser_config(arc_width=32))["components"]["biaffine_parser"]
    parser = nlp.add_pipe("biaffine_parser", config={"model": settings["model"]})
    parser.initialize(lambda: examples, nlp=nlp)
    optimizer = nlp.create_optimizer()
    for _ in range(3):
        nlp.update(examples, sgd=optimizer, exclude=["tok2vec"], annotates=["tok2vec"])
    nlp.to_disk(folder)
    return nlp


def test_the_parser_is_replaced_and_nothing_else(tmp_path):
    home, examples, _ = train_toy(TINY_CONFIG, 3)
    home.meta["performance"] = {"dep_uas": 0.9, "dep_las": 0.8, "noun_chunks_f": 0.7, "pos_acc": 0.6}
    home.to_disk(tmp_path / "shipped")
    home.to_disk(tmp_path / "before")
    trained = _retrained_parser(tmp_path / "shipped", tmp_path / "trained", examples)
    replace.main(tmp_path / "shipped", tmp_path / "trained", arc_temperature=1.5, rel_temperature=1.25)

    loaded = spacy.load(tmp_path / "shipped")
    config = Config().from_disk(tmp_path / "shipped" / "config.cfg", interpolate=False)
    parser = config["components"]["biaffine_parser"]
    assert (parser["arc_temperature"], parser["rel_temperature"]) == (1.5, 1.25)
    assert parser["model"]["arc_width"] == 32
    assert "members" not in parser  # left to the factory's default
    assert loaded.meta["performance"] == {"pos_acc": pytest.approx(0.6)}  # the old parser's scores are left out
    for name in ("tok2vec", "sentencizer", "vocab", "tokenizer"):
        path = tmp_path / "before" / name
        if path.is_dir():
            assert not filecmp.dircmp(path, tmp_path / "shipped" / name).diff_files
        elif path.exists():
            assert filecmp.cmp(path, tmp_path / "shipped" / name, shallow=False)
    text = "The cat sat on the mat ."
    assert [t.head.i for t in loaded(text)] == [t.head.i for t in trained(text)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["before", "shipped", "trained"]


def test_a_parser_trained_on_another_tok2vec_is_refused(tmp_path):
    home, _, _ = train_toy(TINY_CONFIG, 3)
    home.to_disk(tmp_path / "shipped")
    other, _, _ = train_toy(TINY_CONFIG, 4)
    other.to_disk(tmp_path / "other")
    with pytest.raises(SystemExit, match="tok2vec is not"):
        replace.main(tmp_path / "shipped", tmp_path / "other", arc_temperature=1.0, rel_temperature=1.0)
    other.remove_pipe("tok2vec")
    other.to_disk(tmp_path / "own_encoder")
    with pytest.raises(SystemExit, match="has no tok2vec"):
        replace.main(tmp_path / "shipped", tmp_path / "own_encoder", arc_temperature=1.0, rel_temperature=1.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other", "own_encoder", "shipped"]
