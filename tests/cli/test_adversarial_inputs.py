"""Inputs a user's own data brings: one clear line or a correct result, never a traceback,
a silently wrong count or a deleted input (found by an adversarial sweep of the CLI)."""

from __future__ import annotations

import io
import json
import os
import resource
import sys
import threading

from spacy.tokens import DocBin

GOLD = """# sent_id = s1
1	Dogs	dog	NOUN	NNS	_	2	nsubj	_	_
2	bark	bark	VERB	VBP	_	0	root	_	_

"""


def test_a_text_over_the_length_limit_is_reported_and_skipped(model, tmp_path, run_cli):
    source = tmp_path / "in.txt"
    source.write_text("One here.\n" + "word " * 220_000 + "\nThree here.\n", encoding="utf-8")
    target = tmp_path / "out.jsonl"
    status, _, err = run_cli("annotate", str(source), "-o", str(target), "--model", model, "--quiet")
    assert status == 0, err
    assert f"{source}:2: ValueError: [E088]" in err and "Traceback" not in err
    assert [json.loads(line)["line"] for line in target.read_text().splitlines()] == [1, 3]


def test_parse_names_invalid_utf8_on_stdin_and_an_int64_overflow(model, monkeypatch, user_error):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"caf\xe9 au lait\n")))
    assert "standard input is not valid UTF-8" in user_error("parse", "-", "--model", model)
    assert "--samples 18446744073709551616: too large" in user_error(
        "parse", "A text.", "--samples", str(2**64), "--model", model
    )
    assert f"{2**64}: too large" in user_error("parse", "A text.", "--batch-size", str(2**64), "--model", model)


def test_render_refuses_a_spacy_input_it_cannot_draw(tmp_path, user_error):
    garbage, plain, page = tmp_path / "garbage.spacy", tmp_path / "plain.spacy", tmp_path / "page.html"
    garbage.write_text("not a DocBin\n")
    assert "cannot read it as .spacy DocBin shards" in user_error("render", str(garbage), "-o", str(page))
    import spacy

    DocBin(docs=[spacy.blank("en")("No annotation here.")]).to_disk(plain)
    assert "no tree_expectations annotation" in user_error("render", str(plain), "-o", str(page))
    assert not page.exists()


def test_select_counts_words_not_whitespace_tokens(model, tmp_path, run_cli):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("The cat sat on the mat.\nThe  cat  sat  on  the  mat .\n", encoding="utf-8")
    status, out, err = run_cli("select", str(corpus), "--model", model, "--budget", "100", "--no-dedup", "--quiet")
    assert status == 0, err
    assert sorted(json.loads(line)["words"] for line in out.splitlines()) == [7, 7]


def test_force_never_replaces_a_folder_holding_an_input(model, tmp_path, user_error):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "dev.conllu").write_text(GOLD * 3, encoding="utf-8")
    (folder / "train.conllu").write_text(GOLD * 3, encoding="utf-8")
    dev = str(folder / "dev.conllu")
    line = user_error("calibrate", "--dev", dev, "--model", model, "--out", str(folder), "--force")
    assert "holds the input --dev" in line
    line = user_error("calibrate", "--dev", dev, "--model", model, "--out", str(tmp_path), "--force")
    assert "holds the input --dev" in line
    line = user_error("train", str(folder / "train.conllu"), dev, "-o", str(folder), "--force")
    assert "holds the input TRAIN" in line
    assert sorted(p.name for p in folder.iterdir()) == ["dev.conllu", "train.conllu"]


def test_calibrate_force_keeps_the_code_file_and_the_current_folder(
    model, conllu_file, tmp_path, monkeypatch, user_error
):
    folder = tmp_path / "work"
    (folder / "sub").mkdir(parents=True)
    code = folder / "my_scores.py"
    code.write_text("x = 1\n", encoding="utf-8")
    args = ["calibrate", "--dev", str(conllu_file), "--model", model, "--out", str(folder), "--force"]
    assert "holds the input --code" in user_error(*args, "--code", str(code))
    monkeypatch.chdir(folder / "sub")
    assert "holds the current folder, which replacing the folder would empty" in user_error(*args)
    assert sorted(p.name for p in folder.iterdir()) == ["my_scores.py", "sub"]


def test_calibrate_force_replaces_only_an_earlier_pipeline(model, conllu_file, tmp_path, user_error):
    """--out FOLDER --force emptied any folder (a typo could take a folder of notes); it
    replaces only a spaCy pipeline folder (its config.cfg), checked before the fit."""
    folder = tmp_path / "precious"
    folder.mkdir()
    (folder / "notes.txt").write_text("important", encoding="utf-8")
    args = ["calibrate", "--dev", str(conllu_file), "--model", model, "--out", str(folder), "--force"]
    assert "holds files but no spaCy pipeline (no config.cfg)" in user_error(*args)
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]


def test_calibrate_refuses_an_infinite_ridge(model, conllu_file, tmp_path, user_error):
    out = str(tmp_path / "o")
    line = user_error("calibrate", "--dev", str(conllu_file), "--model", model, "--out", out, "--l2", "inf")
    assert "--l2 inf: expected a finite number >= 0" in line


def test_audit_html_dash_is_standard_output(model, conllu_file, tmp_path, monkeypatch, run_cli, user_error):
    monkeypatch.chdir(tmp_path)
    status, out, err = run_cli("audit", str(conllu_file), "--model", model, "--html", "-", "--quiet")
    assert status == 0, err
    assert out.startswith("<!DOCTYPE html>") and not (tmp_path / "-").exists()
    assert "only one of them" in user_error("audit", str(conllu_file), "--model", model, "--html", "-", "-o", "-")


def test_a_pipe_is_read_as_a_stream_or_named(model, conllu_file, tmp_path, run_cli, user_error):
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)

    def feed(data: bytes) -> threading.Thread:
        def write() -> None:
            with open(pipe, "wb") as handle:
                handle.write(data)

        thread = threading.Thread(target=write, daemon=True)
        thread.start()
        return thread

    text = b"The cat sat.\nDogs bark.\n"
    (tmp_path / "in.txt").write_bytes(text)
    expected = tmp_path / "file.jsonl"
    assert run_cli("annotate", str(tmp_path / "in.txt"), "-o", str(expected), "--model", model, "--quiet")[0] == 0
    target = tmp_path / "pipe.jsonl"
    writer = feed(text)
    status, _, err = run_cli(
        "annotate", str(pipe), "--input-format", "txt", "-o", str(target), "--model", model, "--quiet"
    )
    writer.join(5)
    assert status == 0, err
    assert target.read_text() == expected.read_text()
    assert "not a regular file (a pipe or a device)" in user_error("audit", str(pipe), "--model", model)


def test_a_write_that_fails_is_one_line_and_leaves_the_old_output(model, conllu_file, tmp_path, run_cli):
    """A full disk is no mistake in the command: exit status 1 (as annotate gives), one line."""
    text = tmp_path / "in.txt"
    text.write_text("The cat sat on the mat.\nDogs bark.\n" * 20, encoding="utf-8")
    old = "an older output\n"
    outputs = {name: tmp_path / name for name in ("arcs.jsonl", "page.html", "chosen.jsonl", "view.html")}
    for path in outputs.values():
        path.write_text(old)
    commands = [
        ("audit", str(conllu_file), "-o", str(outputs["arcs.jsonl"]), "--model", model, "--quiet"),
        ("audit", str(conllu_file), "--html", str(outputs["page.html"]), "--model", model, "--quiet"),
        ("select", str(text), "--budget", "100", "-o", str(outputs["chosen.jsonl"]), "--model", model, "--quiet"),
        ("render", str(text), "-o", str(outputs["view.html"]), "--model", model),
    ]
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    messages = []
    try:
        resource.setrlimit(resource.RLIMIT_FSIZE, (len(old), hard))  # a full disk
        for args in commands:
            status, _, err = run_cli(*args)
            assert status == 1 and err.startswith("spacy-treexp: ") and err.count("\n") == 1, err
            messages.append(err)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert ["cannot write (File too large); the file is as it was" in m for m in messages] == [True] * 4, messages
    assert all(path.read_text() == old for path in outputs.values())
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["in.txt", "in.conllu", *outputs])


def test_a_code_file_that_does_not_import_is_one_line(model, tmp_path, user_error):
    broken = tmp_path / "broken.py"
    broken.write_text("def (:\n")
    assert f"--code: {broken}: cannot import it (SyntaxError" in user_error(
        "parse", "A text.", "--code", str(broken), "--model", model
    )


def test_float_options_name_nan_and_out_of_range_values(conllu_file, tmp_path, user_error):
    """typer's own bounds let nan through to "should be less than or equal to 1"; each bounded
    float option says what the value is and what it takes."""
    cases = [
        (["audit", str(conllu_file), "--threshold"], "from 0 to 1"),
        (["audit", str(conllu_file), "--train-seconds"], ">= 1"),
        (["render", "Hi", "--alt-threshold"], "from 0 to 1"),
        (["annotate", str(conllu_file), "-o", str(tmp_path / "o.jsonl"), "--worker-cpus"], ">= 0.01"),
        (["annotate", str(conllu_file), "-o", str(tmp_path / "o.jsonl"), "--worker-gpus"], ">= 0"),
    ]
    for args, bound in cases:
        for value in ("nan", "inf", "-2"):
            assert f"{value}: expected a finite number {bound}" in user_error(*args, value), (args, value)
        assert "'x' is not a number" in user_error(*args, "x")
