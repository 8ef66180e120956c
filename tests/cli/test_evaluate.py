"""``spacy-treexp evaluate``: options to one EvalConfig, files checked first, errors as one line.

The evaluation itself runs end to end in tests/test_evaluation_command.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import spacy_treexp.evaluation


@pytest.fixture
def gold(tmp_path: Path) -> Path:
    path = tmp_path / "gold.conllu"
    path.write_text("1\tHi\t_\t_\t_\t_\t0\troot\t_\t_\n\n")
    return path


@pytest.fixture
def calls(monkeypatch):
    """The configs ``run`` is called with (nothing is evaluated)."""
    seen = []

    def run(config, log=print):
        seen.append(config)
        return None

    monkeypatch.setattr(spacy_treexp.evaluation, "run", run)
    return seen


def test_options_become_one_config(gold, model, tmp_path, calls, run_cli):
    out = tmp_path / "out"
    args = ["evaluate", "--conllu", str(gold), "--out", str(out), "--model", model, "--ks", "1,5"]
    args += ["--no-samples", "--sampler", "wilson_marginal", "--no-timing", "--no-plots", "--limit", "3"]
    status, _, err = run_cli(*args)
    assert status == 0, err
    [config] = calls
    assert (Path(config.conllu), Path(config.out_dir), config.model) == (gold, out, model)
    assert config.dev is None and config.stanza_dir is None and config.stanza_gold_tags is None
    assert tuple(config.ks) == (1, 5) and config.samples is False and config.sampler == "wilson_marginal"
    assert (config.timing, config.plots, config.limit, config.threads) == (False, False, 3, 1)
    assert config.command.startswith("spacy-treexp evaluate --conllu ")


def test_defaults(gold, tmp_path, calls, run_cli):
    assert run_cli("evaluate", "--conllu", str(gold), "--out", str(tmp_path / "out"))[0] == 0
    [config] = calls
    defaults = {f.name: f.default for f in dataclasses.fields(spacy_treexp.evaluation.EvalConfig)}
    for name in ("ks", "samples", "sampler", "reject_draws", "timing", "timing_repeats", "limit", "seed"):
        assert getattr(config, name) == defaults[name], name
    assert config.model is None and config.dev is None


def test_missing_files_and_bad_options_are_user_errors(gold, tmp_path, calls, user_error):
    out = str(tmp_path / "out")
    assert "no such file" in user_error("evaluate", "--conllu", str(tmp_path / "missing.conllu"), "--out", out)
    assert "--dev" in user_error("evaluate", "--conllu", str(gold), "--out", out, "--dev", str(tmp_path))
    assert "is a directory" in user_error("evaluate", "--conllu", str(tmp_path), "--out", out)
    assert "--conllu" in user_error("evaluate", "--out", out)
    assert "--dev" in user_error("evaluate", "--conllu", str(gold), "--out", out, "--dev", str(tmp_path / "no"))
    assert "--ks" in user_error("evaluate", "--conllu", str(gold), "--out", out, "--ks", "0,5")
    assert "--sampler" in user_error("evaluate", "--conllu", str(gold), "--out", out, "--sampler", "nope")
    assert "--out" in user_error("evaluate", "--conllu", str(gold), "--out", str(gold))
    assert "--model or --stanza" in user_error(
        "evaluate", "--conllu", str(gold), "--out", out, "--model", "m", "--stanza", str(tmp_path)
    )
    assert calls == []


def test_model_and_stanza_together_are_named_before_the_input_files(tmp_path, calls, user_error):
    """'not both' came after the input checks, so a missing --conllu was named first; a bad
    --model alone still comes after the inputs (tests/evaluation: test_command_reports_bad_input)."""
    missing, out = str(tmp_path / "missing.conllu"), str(tmp_path / "out")
    both = ["--model", "m", "--stanza", str(tmp_path)]
    assert "use either --model or --stanza, not both" in user_error(
        "evaluate", "--conllu", missing, "--out", out, *both
    )
    assert "missing.conllu: no such file" in user_error("evaluate", "--conllu", missing, "--out", out, "--model", "m")
    assert calls == []


def test_a_failed_run_is_one_line_with_status_1(gold, tmp_path, monkeypatch, run_cli):
    def run(config, log=print):
        raise ValueError("the model has no parser\nsecond line")

    monkeypatch.setattr(spacy_treexp.evaluation, "run", run)
    status, _, err = run_cli("evaluate", "--conllu", str(gold), "--out", str(tmp_path / "out"))
    assert status == 1
    assert err == "spacy-treexp: evaluate: the model has no parser second line\n"


def test_a_treebank_that_is_not_conllu_is_a_user_error(gold, tmp_path, monkeypatch, user_error):
    """A --conllu or --dev file that is not CoNLL-U is a mistake in the command's files:
    one line naming the file and line, exit status 2 (as ``audit`` and ``calibrate``)."""
    from spacy_treexp.io import ConlluError

    text = tmp_path / "notes.txt"
    text.write_text("just some words\n")

    def run(config, log=print):
        raise ConlluError(str(text), 1, "expected 10 tab-separated columns, got 1")

    monkeypatch.setattr(spacy_treexp.evaluation, "run", run)
    message = user_error("evaluate", "--conllu", str(text), "--out", str(tmp_path / "out"))
    assert "notes.txt:1" in message and "tab-separated" in message


def test_a_bad_treebank_leaves_no_output_folder(tmp_path, user_error):
    """The output folder is made only once there is a report to write."""
    text = tmp_path / "notes.conllu"
    text.write_text("just some words\n")
    out = tmp_path / "out"
    assert "notes.conllu:1" in user_error("evaluate", "--conllu", str(text), "--out", str(out))
    assert not out.exists()


def test_a_dev_that_is_the_test_file_is_said_to_be_in_sample(gold, model, tmp_path, run_cli):
    """Fitted on the sentences they are measured on, the calibrated columns are no held-out
    figures: a warning says so (also through a link), and the report's meta records it."""
    link, copy = tmp_path / "link.conllu", tmp_path / "copy.conllu"
    link.symlink_to(gold)
    copy.write_text(gold.read_text())  # the same sentences in another file: not told apart
    for dev, same in ((gold, True), (link, True), (copy, False)):
        out = tmp_path / f"out_{dev.stem}"
        args = ["evaluate", "--conllu", str(gold), "--dev", str(dev), "--out", str(out), "--model", model]
        status, _, err = run_cli(*args, "--no-timing", "--no-plots", "--no-samples")
        assert status == 0, err
        assert (f"--dev {dev} is the --conllu file" in err) == same
        assert json.loads((out / "report.json").read_text())["meta"]["dev_is_test"] is same


def test_an_empty_treebank_is_a_user_error(gold, model, tmp_path, user_error):
    """Exit status 2, as calibrate gives for an empty --dev: a mistake in the command's files."""
    empty = tmp_path / "empty.conllu"
    empty.write_text("")
    out = str(tmp_path / "out")
    assert "--conllu" in user_error("evaluate", "--conllu", str(empty), "--out", out, "--model", model)
    assert "no sentences" in user_error("evaluate", "--conllu", str(empty), "--out", out, "--model", model)
    message = user_error("evaluate", "--conllu", str(gold), "--dev", str(empty), "--out", out, "--model", model)
    assert f"--dev {empty}: no sentences" in message
