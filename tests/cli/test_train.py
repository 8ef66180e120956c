"""``spacy-treexp train``: from a CoNLL-U pair to a calibrated, loadable pipeline (a tiny
config trained for a few steps on the toy treebank), and its one-line user errors."""

from __future__ import annotations

import json
import sys

import numpy
import pytest
import spacy
import torch
from helpers.paths import FIXTURES

TOY = FIXTURES / "toy_treebank.conllu"

# The template shrunk to seconds of training: narrow layers, no warm-up, a high rate.
TINY = [
    "--max-steps",
    "30",
    "--set",
    "training.eval_frequency=10",
    "--set",
    "training.optimizer.learn_rate.warmup_steps=1",
    "--set",
    "training.optimizer.learn_rate.initial_rate=0.01",
    "--set",
    "components.tok2vec.model.encode.width=32",
    "--set",
    "components.tok2vec.model.encode.depth=1",
    "--set",
    "components.tok2vec.model.embed.rows=[200,50,100,100]",
    "--set",
    "components.senter.model.tok2vec.embed.width=16",
    "--set",
    "components.senter.model.tok2vec.encode.width=16",
    "--set",
    "components.senter.model.tok2vec.encode.depth=1",
    "--set",
    "components.senter.model.tok2vec.embed.rows=[200,50,100,100]",
    "--set",
    "components.biaffine_parser.model.arc_width=32",
    "--set",
    "components.biaffine_parser.model.rel_width=16",
    "--set",
    "components.biaffine_parser.model.lstm_width=16",
    "--set",
    "components.biaffine_parser.model.dropout=0.0",
]


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def test_train_calibrate_evaluate_package(run_cli, tmp_path):
    out = tmp_path / "out"
    status, _, err = run_cli("train", str(TOY), str(TOY), "-o", str(out), "--lang", "en", *TINY)
    assert status == 0, err
    assert "5/5 packaged" in err
    # a loadable pipeline that applies its calibration map
    nlp = spacy.load(out / "model")
    assert nlp.pipe_names[-2:] == ["biaffine_parser", "tree_expectations"]
    calibration = nlp.get_pipe_config("tree_expectations")["calibration"]
    assert calibration["kind"] == "distance"
    doc = nlp("The cat sat on the mat . A dog barked .")
    for sent in doc.sents:
        marginals = sent._.arc_marginals
        numpy.testing.assert_allclose(marginals[:, 1:].sum(axis=0), 1.0, atol=1e-5)
        assert sum(token.head == token for token in sent) == 1
    # it learnt: the toy treebank is parsed far better than by chance (about 1/n)
    summary = json.loads((out / "summary.json").read_text(encoding="utf8"))
    assert summary["evaluation"]["after"]["uas"] > 0.5
    assert summary["evaluation"]["after"]["gold_head_nll"] <= summary["evaluation"]["before"]["gold_head_nll"] + 1e-6
    meta = json.loads((out / "model" / "meta.json").read_text(encoding="utf8"))
    assert meta["lang"] == "en" and meta["name"] == "treexp_parser"
    assert meta["performance"]["treexp_uas"] == summary["evaluation"]["after"]["uas"]
    assert any(r.startswith("spacy-treexp") for r in meta["requirements"])
    # the filled-in config repeats the run with `spacy train`
    config = spacy.util.load_config(out / "config.cfg", interpolate=False)
    assert config["paths"]["train"] == str(out / "corpus" / "train.spacy")
    assert config["nlp"]["lang"] == "en"


@pytest.mark.parametrize(
    "args, message",
    [
        (["missing.conllu", str(TOY)], "TRAIN missing.conllu: no such file"),
        ([str(TOY), str(TOY), "--lang", "qq"], "--lang qq: spaCy has no such language"),
        (
            [str(TOY), str(TOY), "--set", "training.nonsense=1"],
            "--set training.nonsense: the parser.cfg template has no such",
        ),
        ([str(TOY), str(TOY), "--set", "training.max_steps=[1"], "--set: "),
        ([str(TOY), str(TOY), "--set", "dropout"], "--set dropout: expected SECTION.KEY=VALUE"),
        ([str(TOY), str(TOY), "--max-seconds", "0"], "--max-seconds 0: expected a positive number"),
        ([str(TOY), str(TOY), "--vectors", "no/such/vectors"], "--vectors no/such/vectors: neither a folder"),
        ([str(TOY), str(TOY), "--vectors", "x", "--transformer", "y"], "--vectors and --transformer: give one"),
    ],
)
def test_user_errors(user_error, tmp_path, args, message):
    out = tmp_path / "out"
    assert message in user_error("train", *args, "-o", str(out))
    assert not out.exists()  # nothing written


def test_malformed_treebank_is_named_with_its_line(user_error, tmp_path):
    bad = tmp_path / "bad.conllu"
    bad.write_text("1\tA\ta\tDET\tDT\t_\t2\tdet\t_\t_\n2\tcat\n\n", encoding="utf8")
    message = user_error("train", str(bad), str(TOY), "-o", str(tmp_path / "out"))
    assert "bad.conllu:2: expected 10 tab-separated columns" in message


def test_non_empty_output_is_refused(user_error, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("x", encoding="utf8")
    assert "not an empty folder; give --force" in user_error("train", str(TOY), str(TOY), "-o", str(tmp_path / "out"))


def test_transformer_without_spacy_transformers(user_error, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "spacy_transformers", None)  # import fails as if not installed
    message = user_error("train", str(TOY), str(TOY), "-o", str(tmp_path / "out"), "--transformer", "bert-base-cased")
    assert "pip install 'spacy-treexp[transformers]'" in message


def test_output_in_a_missing_folder(user_error, tmp_path):
    message = user_error("train", str(TOY), str(TOY), "-o", str(tmp_path / "no" / "out"))
    assert "does not exist" in message
