"""``spacy-treexp train``: from a CoNLL-U pair to a calibrated, loadable pipeline (a tiny
config trained for a few steps on a slice of the toy treebank), installed from its
``--package`` archive, trained on a tiny transformer built offline, and its one-line user
errors."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import numpy
import pytest
import spacy
from helpers.paths import FIXTURES, SHARED_DATA
from helpers.threads import one_torch_thread  # noqa: F401  (autouse)

TOY = FIXTURES / "toy_treebank.conllu"
EWT = SHARED_DATA / "ud_en_ewt"


def write_slice(path: Path, first: int = 0, last: int = 8) -> Path:
    """Sentences ``first..last`` of the toy treebank written to ``path`` (a CoNLL-U file)."""
    sentences = TOY.read_text(encoding="utf8").strip().split("\n\n")[first:last]
    path.write_text("\n\n".join(sentences) + "\n\n", encoding="utf8")
    return path


def check_parses(nlp) -> None:
    """One root per sentence, and each word's head marginals sum to one."""
    doc = nlp("The cat sat on the mat . A dog barked .")
    for sent in doc.sents:
        marginals = sent._.arc_marginals
        numpy.testing.assert_allclose(marginals[:, 1:].sum(axis=0), 1.0, atol=1e-5)
        assert sum(token.head == token for token in sent) == 1


def settings(*values: str) -> list[str]:
    """``--set VALUE`` for each value."""
    return [arg for value in values for arg in ("--set", value)]


# No warm-up, a high rate, a narrow parser: seconds of training on either template.
FAST = (
    "training.optimizer.learn_rate.warmup_steps=1",
    "training.optimizer.learn_rate.initial_rate=0.01",
    "components.biaffine_parser.model.arc_width=32",
    "components.biaffine_parser.model.rel_width=16",
    "components.biaffine_parser.model.lstm_width=16",
    "components.biaffine_parser.model.dropout=0.0",
)
# The parser template shrunk: narrow tok2vec layers too.
TINY = [
    "--max-steps",
    "30",
    *settings(
        "training.eval_frequency=10",
        *FAST,
        "components.tok2vec.model.encode.width=32",
        "components.tok2vec.model.encode.depth=1",
        "components.tok2vec.model.embed.rows=[200,50,100,100]",
        "components.senter.model.tok2vec.embed.width=16",
        "components.senter.model.tok2vec.encode.width=16",
        "components.senter.model.tok2vec.encode.depth=1",
        "components.senter.model.tok2vec.embed.rows=[200,50,100,100]",
    ),
]
# The transformer template (the transformer itself is tiny).
TRANSFORMER = settings(*FAST)


def _builds_wheels_offline() -> bool:
    """Whether pip can build the package's sdist without fetching build tools: setuptools
    70.1 or later has bdist_wheel, older ones need the wheel package."""
    try:
        metadata.version("wheel")
        return True
    except metadata.PackageNotFoundError:
        major, minor = (int(part) for part in metadata.version("setuptools").split(".")[:2])
        return (major, minor) >= (70, 1)


def test_train_calibrate_evaluate_package(run_cli, tmp_path, monkeypatch):
    out = tmp_path / "out"
    data = write_slice(tmp_path / "toy.conllu")
    meta_args = ("--name", "tiny", "--model-version", "1.2.3", "--package")
    status, _, err = run_cli("train", str(data), str(data), "-o", str(out), "--lang", "en", *TINY, *meta_args)
    assert status == 0, err
    assert "5/5 packaged" in err
    # a loadable pipeline that applies its calibration map, readable by others as any output folder
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE((out / "model").stat().st_mode) == 0o777 & ~mask
    nlp = spacy.load(out / "model")
    assert nlp.pipe_names[-3:] == ["biaffine_parser", "space_tags", "tree_expectations"]
    calibration = nlp.get_pipe_config("tree_expectations")["calibration"]
    assert calibration["kind"] == "distance"
    assert calibration["risk_temperature"] > 0  # the sentence risk's, fitted with the map
    assert nlp.get_pipe("biaffine_parser").calibration_map.to_dict() == calibration  # it travels with the parser
    check_parses(nlp)
    # it learnt: the toy treebank is parsed far better than by chance (about 1/n)
    summary = json.loads((out / "summary.json").read_text(encoding="utf8"))
    assert summary["evaluation"]["after"]["uas"] > 0.5
    assert summary["evaluation"]["after"]["gold_head_nll"] <= summary["evaluation"]["before"]["gold_head_nll"] + 1e-6
    meta = json.loads((out / "model" / "meta.json").read_text(encoding="utf8"))
    assert meta["lang"] == "en" and meta["name"] == "tiny" and meta["version"] == "1.2.3"
    assert meta["performance"]["treexp_uas"] == summary["evaluation"]["after"]["uas"]
    assert any(r.startswith("spacy-treexp") for r in meta["requirements"])
    # the filled-in config repeats the run with `spacy train`
    config = spacy.util.load_config(out / "config.cfg", interpolate=False)
    assert config["paths"]["train"] == str(out / "corpus" / "train.spacy")
    assert config["nlp"]["lang"] == "en"
    # what a user does next with --package: pip install the archive, spacy.load it by name
    (sdist,) = (out / "package").glob("*/dist/en_tiny-1.2.3.tar.gz")
    assert f"package: {sdist} (pip install it" in err  # said where it is
    if not _builds_wheels_offline():
        pytest.skip("installing the sdist offline needs setuptools>=70.1 or wheel (the test extra has wheel)")
    target = tmp_path / "site"
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-build-isolation"]
    installed = subprocess.run([*pip, "--target", str(target), str(sdist)], capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr
    monkeypatch.syspath_prepend(str(target))
    installed_nlp = spacy.load("en_tiny")
    assert installed_nlp.meta["version"] == "1.2.3" and installed_nlp.pipe_names == nlp.pipe_names
    assert installed_nlp.get_pipe_config("tree_expectations") == nlp.get_pipe_config("tree_expectations")
    check_parses(installed_nlp)


def test_the_meta_scores_are_those_of_the_weights_it_ships(run_cli, tmp_path):
    """spaCy evaluates every eval_frequency steps and put its last evaluation in model-last's
    meta: stopped at step 15, the packaged meta gave the scores of step 10 (a helper's run: those
    of the untrained model, dep_uas 28.27 for a model at 40.30). They are now spaCy's own scores
    of the chosen checkpoint on the dev corpus."""
    from spacy_treexp.training.recipe import spacy_performance

    out = tmp_path / "out"
    data = write_slice(tmp_path / "toy.conllu")
    status, _, err = run_cli(
        "train", str(data), str(data), "-o", str(out), "--lang", "en", *TINY[2:], "--max-steps", "15"
    )
    assert status == 0, err
    meta = json.loads((out / "model" / "meta.json").read_text(encoding="utf8"))
    config = spacy.util.load_config(out / "config.cfg", interpolate=False)
    assert config["training"]["max_steps"] == 15 and config["training"]["eval_frequency"] == 10
    expected = spacy_performance(spacy.load(out / "model"), config)
    assert set(expected) == set(config["training"]["score_weights"])
    assert {key: meta["performance"][key] for key in expected} == expected
    assert not any(key.endswith("_loss") for key in meta["performance"])


def ewt_slice(folder: Path, split: str, count: int) -> Path:
    """The first ``count`` sentences of UD English-EWT's ``split``, written under ``folder``
    with the UD file name (which gives the language); skips without the shared data."""
    source = EWT / f"en_ewt-ud-{split}.conllu"
    if not source.is_file():
        pytest.skip(f"UD English-EWT not found at {source}")
    blocks = source.read_text(encoding="utf8").strip().split("\n\n")[:count]
    path = folder / source.name
    path.write_text("\n\n".join(blocks) + "\n\n", encoding="utf8")
    return path


def test_train_on_an_ewt_slice(run_cli, tmp_path):
    """The one command on real data (60 train and 20 dev sentences of UD English-EWT, with
    its multiword tokens, empty nodes and features): the language comes from the file name,
    the packaged pipeline loads, parses raw text with its calibration map, and the summary's
    figures are numbers in their range."""
    train, dev = ewt_slice(tmp_path, "train", 60), ewt_slice(tmp_path, "dev", 20)
    out = tmp_path / "out"
    status, _, err = run_cli("train", str(train), str(dev), "-o", str(out), *TINY, "--max-seconds", "60", "--package")
    assert status == 0, err
    assert "1/5 convert: 60 training and 20 dev sentences (en)" in err and "5/5 packaged" in err
    assert list((out / "package").glob("*/dist/en_treexp_parser-*.tar.gz"))
    nlp = spacy.load(out / "model")
    assert nlp.lang == "en" and "morphologizer" in nlp.pipe_names  # EWT has UPOS and features
    assert nlp.pipe_names[-3:] == ["biaffine_parser", "space_tags", "tree_expectations"]
    calibration = nlp.get_pipe_config("tree_expectations")["calibration"]
    assert calibration["kind"] == "distance" and calibration["risk_temperature"] > 0
    assert nlp.get_pipe("biaffine_parser").calibration_map.to_dict() == calibration
    check_parses(nlp)
    doc = nlp("What if Google morphed into GoogleOS? I don't know, they'd say.")
    for sent in doc.sents:
        assert 0.0 <= sent._.error_probability <= 1.0 and sent._.tree_entropy >= 0.0
    summary = json.loads((out / "summary.json").read_text(encoding="utf8"))
    dev_words = sum(1 for line in dev.read_text(encoding="utf8").splitlines() if line.split("\t", 1)[0].isdigit())
    for when in ("before", "after"):
        figures = summary["evaluation"][when]
        assert figures["n_words"] == dev_words
        for name in ("uas", "las", "arc_ece", "labeled_ece", "auroc", "mean_confidence"):
            assert 0.0 <= figures[name] <= 1.0, (when, name, figures[name])
        assert figures["las"] <= figures["uas"] and numpy.isfinite(figures["gold_head_nll"])
    # the map is fitted on dev by the likelihood of its gold heads: it cannot make them less likely there
    after, before = summary["evaluation"]["after"], summary["evaluation"]["before"]
    assert after["gold_head_nll"] <= before["gold_head_nll"] + 1e-6
    assert after["uas"] == before["uas"]  # the map changes probabilities, not the parser's tree
    meta = json.loads((out / "model" / "meta.json").read_text(encoding="utf8"))
    assert meta["performance"]["treexp_uas"] == after["uas"]


def tiny_transformer(path: Path, treebank: Path) -> Path:
    """A BERT of one layer 16 wide (random weights) with a word-level vocabulary of the
    treebank's forms, saved in the model hub's format to a local folder: no download."""
    transformers = pytest.importorskip("transformers")
    path.mkdir()
    forms = {
        line.split("\t")[1].lower() for line in treebank.read_text(encoding="utf8").splitlines() if line[:1].isdigit()
    }
    (path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(forms)]) + "\n")
    transformers.BertTokenizerFast(vocab_file=str(path / "vocab.txt"), do_lower_case=True).save_pretrained(path)
    config = transformers.BertConfig(
        vocab_size=5 + len(forms),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=512,
    )
    transformers.BertModel(config).save_pretrained(path)
    return path


def test_train_on_a_local_transformer(run_cli, tmp_path):
    """``--transformer DIR``: every component listens to the transformer, the parser takes
    its width (16) at initialisation, and the pipeline folder loads and parses without DIR
    (spacy-transformers stores the weights and tokenizer with the pipeline)."""
    pytest.importorskip("spacy_transformers")
    data = write_slice(tmp_path / "toy.conllu")
    bert = tiny_transformer(tmp_path / "bert", data)
    out = tmp_path / "out"
    args = ("--max-steps", "10", "--set", "training.eval_frequency=5", "--set", "training.dropout=0.0")
    status, _, err = run_cli(
        "train", str(data), str(data), "-o", str(out), "--lang", "en", "--transformer", str(bert), *TRANSFORMER, *args
    )
    assert status == 0, err
    assert "5/5 packaged" in err
    config = spacy.util.load_config(out / "config.cfg", interpolate=False)
    assert config["paths"]["transformer"] == str(bert)
    assert config["components"]["biaffine_parser"]["model"]["tok2vec"]["upstream"] == "transformer"
    shutil.rmtree(bert)
    nlp = spacy.load(out / "model")
    assert nlp.pipe_names == [
        "paragraph_breaks",
        "transformer",
        "senter",
        "morphologizer",
        "biaffine_parser",
        "space_tags",
        "tree_expectations",
    ]
    parser = nlp.get_pipe("biaffine_parser").model
    assert parser.layers[0].name.startswith("transformer-listener") and parser.get_dim("nI") == 16
    check_parses(nlp)
    assert (
        "spacy-transformers>=1.3"
        in json.loads((out / "model" / "meta.json").read_text(encoding="utf8"))["requirements"]
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["missing.conllu", str(TOY)], "TRAIN missing.conllu: no such file"),
        ([str(TOY), "{tmp}"], "DEV {tmp}: is a directory, not a file"),
        ([str(TOY), str(TOY), "--lang", "qq"], "--lang qq: spaCy has no such language"),
        (
            [str(TOY), str(TOY), "--set", "training.nonsense=1"],
            "--set training.nonsense: the parser.cfg template has no such",
        ),
        ([str(TOY), str(TOY), "--set", "training.max_steps=[1"], "--set: "),
        # the setting and what is wrong with it, not the resolved section's reprs
        (
            [str(TOY), str(TOY), "--set", "training.dropout=abc"],
            "--set: Config validation error: dropout: Input should",
        ),
        ([str(TOY), str(TOY), "--set", "dropout"], "--set dropout: expected SECTION.KEY=VALUE"),
        ([str(TOY), str(TOY), "--set", "nlp.lang=qq"], "--set nlp.lang: give the language as --lang"),
        ([str(TOY), str(TOY), "--max-seconds", "0"], "--max-seconds 0: expected a positive number"),
        ([str(TOY), str(TOY), "--vectors", "no/such/vectors"], "--vectors no/such/vectors: neither a folder"),
        ([str(TOY), str(TOY), "--vectors", "x", "--transformer", "y"], "--vectors and --transformer: give one"),
        ([str(TOY), str(TOY), "--vectors", "{tmp}/vectors.txt"], "not a spaCy pipeline folder with vectors"),
        ([str(TOY), str(TOY), "--vectors", "{tmp}"], "not a spaCy pipeline folder with vectors"),
        ([str(TOY), str(TOY), "--lang", "en", "--vectors", "{tmp}/de_vectors"], "made for language 'de'"),
        ([str(TOY), str(TOY), "--transformer", "/no/such/model"], "--transformer /no/such/model: no such model folder"),
        ([str(TOY), str(TOY), "--name", "my-parser"], "--name my-parser: a pipeline name is letters"),
        ([str(TOY), str(TOY), "--model-version", "1.0 beta"], "--model-version 1.0 beta: not a package version"),
        ([str(TOY), str(TOY), "--set", "training.eval_frequency=0"], "training.eval_frequency=0: expected a positive"),
        ([str(TOY), str(TOY), "--set", "training.max_steps=0"], "spaCy's training would never end"),
        (
            [str(TOY), str(TOY), "--set", "training.max_steps=0", "--set", "training.max_epochs=-1"],
            "max_epochs = -1 and patience = 0: spaCy's training would never end",
        ),
    ],
)
def test_user_errors(user_error, tmp_path, args, message):
    out = tmp_path / "out"
    (tmp_path / "vectors.txt").write_text("1 2\nword 0.1 0.2\n", encoding="utf8")  # word2vec text, not spaCy's
    german = spacy.blank("de")
    german.vocab.set_vector("wort", numpy.ones(3, dtype="float32"))
    german.to_disk(tmp_path / "de_vectors")
    assert message.format(tmp=tmp_path) in user_error("train", *[a.format(tmp=tmp_path) for a in args], "-o", str(out))
    assert not out.exists()  # nothing written


def test_a_language_whose_tokenizer_needs_a_missing_package_is_refused_before_force_deletes(
    user_error, tmp_path, monkeypatch
):
    import spacy

    def missing(lang, *args, **kwargs):
        raise ImportError("Japanese support requires SudachiPy")

    monkeypatch.setattr(spacy, "blank", missing)
    out = tmp_path / "out"
    out.mkdir()
    (out / "old_results.txt").write_text("keep", encoding="utf8")
    assert "--lang ja: spaCy's 'ja' needs a package that is missing" in user_error(
        "train", str(TOY), str(TOY), "--lang", "ja", "-o", str(out), "--force"
    )
    assert (out / "old_results.txt").read_text(encoding="utf8") == "keep"


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


def test_a_local_transformer_without_its_tokenizer_is_refused_before_any_work(user_error, tmp_path):
    """A folder with the model's config.json but no tokenizer files was a TypeError traceback
    from the tokenizer, after the corpus was written."""
    pytest.importorskip("spacy_transformers")
    transformers = pytest.importorskip("transformers")
    folder = tmp_path / "bert"
    transformers.BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2).save_pretrained(folder)
    out = tmp_path / "out"
    message = user_error("train", str(TOY), str(TOY), "-o", str(out), "--transformer", str(folder))
    assert f"--transformer {folder}: its tokenizer does not load" in message
    assert not out.exists()


def test_a_transformer_the_hub_cannot_give_is_named(run_cli, tmp_path, monkeypatch):
    """A model hub id that cannot be loaded (offline, or no such model) is one message naming
    ``--transformer``, not Hugging Face's traceback."""
    layers = pytest.importorskip("spacy_transformers.layers.transformer_model")

    def unreachable(name, *args, **kwargs):
        raise OSError(f"We couldn't connect to 'https://huggingface.co' to load the files of {name}.")

    monkeypatch.setattr(layers, "huggingface_from_pretrained", unreachable)
    out = tmp_path / "out"
    status, _, err = run_cli(
        "train", str(TOY), str(TOY), "-o", str(out), "--lang", "en", "--transformer", "org/no-model"
    )
    assert status == 2 and "Traceback" not in err  # after the progress lines, one message
    assert err.splitlines()[-1].startswith(
        "spacy-treexp: initialising the pipeline on --transformer org/no-model: We couldn't connect"
    )


def test_a_gpu_that_is_not_there_is_refused_before_force_deletes(user_error, tmp_path):
    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("CuPy is installed: --gpu 0 may work here")
    out = tmp_path / "out"
    out.mkdir()
    (out / "old_results.txt").write_text("keep", encoding="utf8")
    assert "--gpu 0:" in user_error("train", str(TOY), str(TOY), "-o", str(out), "--force", "--gpu", "0")
    assert (out / "old_results.txt").read_text(encoding="utf8") == "keep"


def test_force_replaces_what_a_linked_output_folder_holds(run_cli, tmp_path):
    """-o LINK --force (a link to a folder on another disk, say) was shutil.rmtree's 'Cannot
    call rmtree on a symbolic link' traceback; a link inside the folder is removed, not followed."""
    data = write_slice(tmp_path / "toy.conllu", last=2)
    target, elsewhere = tmp_path / "target", tmp_path / "elsewhere"
    target.mkdir()
    (target / "old_results.txt").write_text("x", encoding="utf8")
    (target / "config.cfg").write_text("", encoding="utf8")  # an earlier run's folder, which --force replaces
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("x", encoding="utf8")
    (target / "link").symlink_to(elsewhere)
    (tmp_path / "out").symlink_to(target)
    args = ("-o", str(tmp_path / "out"), "--force", "--lang", "en", *TINY, "--max-steps", "1")
    status, _, err = run_cli("train", str(data), str(data), *args)
    assert status == 0, err
    assert (tmp_path / "out").is_symlink() and sorted(p.name for p in target.iterdir()) == [
        "config.cfg",
        "corpus",
        "model",
        "summary.json",
        "training",
    ]
    assert (elsewhere / "keep.txt").is_file()


def test_force_never_empties_the_current_folder(user_error, tmp_path, monkeypatch):
    """-o . --force (or a folder above it) emptied the folder the user works in."""
    data = write_slice(tmp_path / "elsewhere.conllu")
    work = tmp_path / "work"
    (work / "inner").mkdir(parents=True)
    (work / "notes.txt").write_text("keep", encoding="utf8")
    monkeypatch.chdir(work / "inner")
    for out in ("..", str(work)):
        message = user_error("train", str(data), str(data), "-o", out, "--force")
        assert "holds the current folder, which --force would empty" in message
    assert (work / "notes.txt").read_text(encoding="utf8") == "keep"


def test_an_output_that_is_a_file_is_named_as_such(user_error, tmp_path):
    (tmp_path / "out").write_text("x", encoding="utf8")
    assert "is a file, not a folder" in user_error("train", str(TOY), str(TOY), "-o", str(tmp_path / "out"), "--force")


def test_output_in_a_missing_folder(user_error, tmp_path):
    message = user_error("train", str(TOY), str(TOY), "-o", str(tmp_path / "no" / "out"))
    assert "does not exist" in message


def test_a_map_fitted_to_certainty_on_dev_is_warned_of(monkeypatch):
    """A dev set the map learns by heart (here the parser's own trees) gives a map whose every
    probability is 0 or 1: train says so instead of packaging it as calibrated in silence."""
    import torch

    from spacy_treexp.annotate import SentenceScores
    from spacy_treexp.engine import TreeDistribution
    from spacy_treexp.pipeline import tree_expectations
    from spacy_treexp.training import recipe

    rng = numpy.random.default_rng(0)
    scores = [SentenceScores(arc=rng.normal(0, 3.0, (n + 1, n + 1))) for n in (3, 5, 4, 6, 2, 5)]

    class Gold:
        def __init__(self, arc):
            self.heads, self.deprels = TreeDistribution(torch.from_numpy(arc).unsqueeze(0)).mode[0].numpy(), []
            self.n = len(self.heads) - 1

    stored = []
    monkeypatch.setattr(tree_expectations, "store_calibration", lambda nlp, calibration: stored.append(calibration))
    logged: list = []
    calibration = recipe.calibrate(None, scores, [Gold(s.arc) for s in scores], "temperature", logged.append)
    assert stored == [calibration]
    assert len(logged) == 1 and logged[0].startswith("warning: the temperature map makes the parser certain")


def test_a_treebank_of_one_word_sentences_is_refused_before_any_work(user_error, tmp_path):
    one = tmp_path / "one.conllu"
    one.write_text("1\tHallo\thallo\tINTJ\t_\t_\t0\troot\t_\t_\n\n" * 3, encoding="utf8")
    out = tmp_path / "out"
    assert "every sentence is one word long" in user_error("train", str(one), str(TOY), "-o", str(out))
    assert f"DEV {one}: every sentence is one word long" in user_error("train", str(TOY), str(one), "-o", str(out))
    assert not out.exists()


def test_an_interrupted_run_says_how_to_start_over_and_force_takes_its_folder(run_cli, tmp_path, monkeypatch):
    """Ctrl-C said only "interrupted", and the same command then refused the half-written -o.
    The folder holds its config.cfg from the start, so --force knows it for a run's."""
    from spacy_treexp.training import recipe

    data = write_slice(tmp_path / "toy.conllu", last=2)
    out = tmp_path / "out"

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(recipe, "train_model", interrupted)
    args = ("train", str(data), str(data), "-o", str(out), "--lang", "en", *TINY, "--max-steps", "1")
    status, _, err = run_cli(*args)
    assert status == 130 and "holds an unfinished run; run the same command with --force to start over" in err
    assert (out / "config.cfg").is_file()
    monkeypatch.undo()
    status, _, err = run_cli(*args, "--force")
    assert status == 0, err
    assert (out / "model" / "meta.json").is_file()
