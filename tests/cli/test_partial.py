"""Outputs written as ``OUTPUT.partial`` and renamed when complete; ``--resume`` on what a
stopped run leaves (the torn tails of a killed one made by hand here, the real kills are in
test_resume.py), and what it refuses."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import spacy

import spacy_treexp.cli.render as render_command
from spacy_treexp.cli import outputs
from spacy_treexp.cli.outputs import doc_to_json, read_docbin

TEXTS = ["One is here.", "Two is there. And more.", "Three.", "Four and five.", "Six."]


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "in.txt"
    path.write_text("".join(f"{text}\n" for text in TEXTS))
    return path


def stop_after(monkeypatch, n: int, cls=outputs.RecordWriter) -> None:
    """The n+1-th document written raises KeyboardInterrupt, as Ctrl-C would."""
    original = cls.write
    calls = []

    def write(self, doc, context):
        if len(calls) == n:
            raise KeyboardInterrupt
        calls.append(doc.text)
        original(self, doc, context)

    monkeypatch.setattr(cls, "write", write)


def docs_of(path: Path):
    return [doc_to_json(doc) for doc in read_docbin(path, spacy.blank("en").vocab)]


def test_an_existing_output_is_replaced_only_when_the_new_one_is_complete(model, source, tmp_path, run_cli):
    expected = tmp_path / "expected.jsonl"
    assert run_cli("annotate", str(source), "-o", str(expected), "--model", model)[0] == 0
    target = tmp_path / "out.jsonl"
    target.write_text("an earlier result\n")
    with pytest.MonkeyPatch.context() as patch:
        stop_after(patch, 2)
        status, _, err = run_cli("annotate", str(source), "-o", str(target), "--model", model)
    assert status == 130 and "--resume" in err
    assert target.read_text() == "an earlier result\n"
    partial = tmp_path / "out.jsonl.partial"
    assert [json.loads(line)["line"] for line in partial.read_text().splitlines()] == [1, 2]
    status, _, err = run_cli("annotate", str(source), "-o", str(target), "--model", model, "--resume")
    assert status == 0 and "resuming: 2 documents kept, going on after input line 2" in err
    assert target.read_bytes() == expected.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["expected.jsonl", "in.txt", "out.jsonl"]


@pytest.mark.parametrize("fmt", ["jsonl", "conllu"])
def test_resume_drops_what_a_killed_run_left_half_done(fmt, model, source, tmp_path, monkeypatch, run_cli):
    """A record written but not listed, a torn record and a torn manifest line (what a
    SIGKILL can leave) are dropped: the record is made again, once."""
    expected = tmp_path / f"expected.{fmt}"
    assert run_cli("annotate", str(source), "-o", str(expected), "--model", model, "--samples", "2")[0] == 0
    target = tmp_path / f"out.{fmt}"
    args = ["annotate", str(source), "-o", str(target), "--model", model, "--samples", "2"]
    with pytest.MonkeyPatch.context() as patch:
        stop_after(patch, 2)
        assert run_cli(*args)[0] == 130
    partial, manifest = Path(f"{target}.partial"), Path(f"{target}.partial.manifest")
    kept = partial.read_bytes()
    assert kept == expected.read_bytes()[: len(kept)]
    third = expected.read_bytes()[len(kept) :]
    with partial.open("ab") as file:  # the third record in full, unlisted, then half the fourth
        file.write(third[: len(third) // 2 + 1])
    with manifest.open("a") as file:
        file.write('{"line": 3, "en')
    status, _, err = run_cli(*args, "--resume")
    assert status == 0, err
    assert target.read_bytes() == expected.read_bytes()


def test_spacy_resume_keeps_listed_shards_and_makes_the_rest_again(model, source, tmp_path, run_cli):
    expected = tmp_path / "expected.spacy"
    assert run_cli("annotate", str(source), "-o", str(expected), "--model", model, "--samples", "2")[0] == 0
    target = tmp_path / "out.spacy"
    args = ["annotate", str(source), "-o", str(target), "--model", model, "--samples", "2", "--shard-size", "2"]
    with pytest.MonkeyPatch.context() as patch:
        stop_after(patch, 3, outputs.DocBinWriter)
        status, _, err = run_cli(*args)
    assert status == 130 and "3 documents written" in err
    partial = tmp_path / "out.spacy.partial"
    assert sorted(p.name for p in partial.iterdir()) == ["00000.spacy", "00001.spacy"]  # 2 docs, then the 1 held
    assert [len(d) for d in [docs_of(partial / "00000.spacy"), docs_of(partial / "00001.spacy")]] == [2, 1]
    manifest = tmp_path / "out.spacy.partial.manifest"
    manifest.write_bytes(b"".join(manifest.read_bytes().splitlines(keepends=True)[:2]))  # shard 1 unlisted
    (partial / "00002.spacy.tmp").write_bytes(b"half a shard")
    status, _, err = run_cli(*args, "--resume")
    assert status == 0 and "resuming: 2 documents kept" in err, err
    assert docs_of(target) == docs_of(expected)
    assert sorted(p.name for p in target.iterdir()) == ["00000.spacy", "00001.spacy", "00002.spacy"]


def test_bad_lines_before_the_resume_point_are_not_reported_again(model, tmp_path, run_cli):
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "One."}\nnot json\n{"text": "Three."}\n{"text": "Four."}\n')
    expected = tmp_path / "expected.jsonl"
    assert run_cli("annotate", str(source), "-o", str(expected), "--model", model)[0] == 0
    target = tmp_path / "out.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        stop_after(patch, 2)
        status, _, err = run_cli("annotate", str(source), "-o", str(target), "--model", model)
    assert status == 130 and f"{source}:2: invalid JSON" in err
    status, _, err = run_cli("annotate", str(source), "-o", str(target), "--model", model, "--resume", "--strict")
    assert status == 0 and "invalid JSON" not in err
    assert target.read_bytes() == expected.read_bytes()


def test_resume_refuses_a_partial_made_otherwise(model, paragraph_model, source, tmp_path, run_cli, user_error):
    target = tmp_path / "out.data"
    args = ["annotate", str(source), "-o", str(target), "--output-format", "jsonl"]
    with pytest.MonkeyPatch.context() as patch:
        stop_after(patch, 1)
        assert run_cli(*args, "--model", model)[0] == 130
    partial = tmp_path / "out.data.partial"
    kept = partial.read_bytes()
    resume = [*args, "--resume"]
    assert "--samples 0, not --samples 2" in user_error(*resume, "--model", model, "--samples", "2")
    assert f"--model {Path(model).resolve()}, not --model {paragraph_model}" in user_error(
        *resume, "--model", paragraph_model
    )
    conllu = ["annotate", str(source), "-o", str(target), "--output-format", "conllu", "--resume", "--model", model]
    assert "--output-format jsonl, not --output-format conllu" in user_error(*conllu)
    text = source.read_text()
    source.write_text(text.swapcase())  # the same size, other content
    message = user_error(*resume, "--model", model)
    assert f"INPUT {source} changed since {partial} was made (same size, other content)" in message
    source.write_text(text + "Seven.\n")
    assert f"INPUT {source} changed since {partial} was made" in user_error(*resume, "--model", model)
    assert partial.read_bytes() == kept and not target.exists()


def test_a_run_on_standard_input_is_not_resumed(model, source, tmp_path, monkeypatch, run_cli, user_error):
    """Nothing can check that a second run reads the same standard input: resuming would join
    two inputs in one output, so the interrupted run says to start over and --resume refuses."""
    import io
    import sys

    target = tmp_path / "out.jsonl"
    args = ["annotate", "-", "-o", str(target), "--input-format", "txt", "--model", model]
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(source.read_bytes())))
    with pytest.MonkeyPatch.context() as patch:
        stop_after(patch, 1)
        status, _, err = run_cli(*args)
    assert status == 130 and "cannot be resumed: delete" in err and "--resume to finish" not in err
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"Another text altogether.\n")))
    assert "is standard input or a pipe, whose content cannot be checked" in user_error(*args, "--resume")


def test_a_partial_is_never_overwritten_without_resume(model, source, tmp_path, run_cli, user_error):
    target = tmp_path / "out.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        stop_after(patch, 1)
        assert run_cli("annotate", str(source), "-o", str(target), "--model", model)[0] == 130
    partial = tmp_path / "out.jsonl.partial"
    kept = partial.read_bytes()
    message = user_error("annotate", str(source), "-o", str(target), "--model", model)
    assert f"{partial} holds an interrupted run; add --resume to finish it, or delete {partial}" in message
    assert partial.read_bytes() == kept
    (tmp_path / "out.jsonl.partial.manifest").unlink()
    assert "has no manifest" in user_error("annotate", str(source), "-o", str(target), "--model", model, "--resume")
    assert "--resume: standard output" in user_error(
        "annotate", str(source), "-o", "-", "--output-format", "jsonl", "--model", model, "--resume"
    )
    assert partial.read_bytes() == kept


def test_resume_runs_when_there_is_nothing_to_resume_and_stops_when_done(model, source, tmp_path, run_cli):
    for fmt in ("jsonl", "spacy"):
        target = tmp_path / f"out.{fmt}"
        status, _, err = run_cli("annotate", str(source), "-o", str(target), "--model", model, "--resume")
        assert status == 0 and "resuming" not in err and target.exists()
        stamp = target.stat().st_mtime_ns
        status, _, err = run_cli("annotate", str(source), "-o", str(target), "--model", model, "--resume")
        assert status == 0 and f"--output {target} is complete (no {target}.partial to resume)" in err
        assert target.stat().st_mtime_ns == stamp


def test_a_symlinked_output_is_written_through(model, source, tmp_path, run_cli):
    (tmp_path / "real").mkdir()
    real = tmp_path / "real" / "annotated.jsonl"
    real.write_text("old\n")
    link = tmp_path / "out.jsonl"
    link.symlink_to(real)
    assert run_cli("annotate", str(source), "-o", str(link), "--model", model)[0] == 0
    assert link.is_symlink() and len(real.read_text().splitlines()) == len(TEXTS)
    assert sorted(p.name for p in (tmp_path / "real").iterdir()) == ["annotated.jsonl"]


def test_render_leaves_the_page_whole_when_stopped(model, source, tmp_path, monkeypatch, run_cli):
    page = tmp_path / "page.html"
    page.write_text("the earlier page")

    def stopped(docs, **options):
        raise KeyboardInterrupt

    monkeypatch.setattr(render_command, "render_html", stopped)
    assert run_cli("render", str(source), "-o", str(page), "--model", model)[0] == 130
    assert page.read_text() == "the earlier page"
    monkeypatch.undo()
    assert run_cli("render", str(source), "-o", str(page), "--model", model)[0] == 0
    assert page.read_text().startswith("<!DOCTYPE html>")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "page.html"]


def test_sigterm_restores_the_handler_of_every_command(model, source, tmp_path, run_cli):
    before = signal.getsignal(signal.SIGTERM)
    assert run_cli("render", str(source), "-o", str(tmp_path / "p.html"), "--model", model)[0] == 0
    assert signal.getsignal(signal.SIGTERM) == before


def test_replace_folder_puts_a_whole_folder_in_place_or_leaves_the_old_one(tmp_path):
    from spacy_treexp.cli.partial import replace_folder

    target = tmp_path / "model"
    target.mkdir()
    (target / "old.txt").write_text("old")

    def fails(folder):
        (folder / "half.txt").write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        replace_folder(target, fails)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    assert sorted(p.name for p in target.iterdir()) == ["old.txt"]
    replace_folder(target, lambda folder: (folder / "new.txt").write_text("new"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    assert sorted(p.name for p in target.iterdir()) == ["new.txt"]


@pytest.mark.parametrize("fmt", ["jsonl", "spacy"])
def test_resume_starts_over_after_a_kill_before_the_manifest_had_its_header(fmt, model, source, tmp_path, run_cli):
    """A run killed between creating its partial and writing the manifest's first line leaves
    both empty: nothing was kept, so --resume starts over (it said 'not a manifest this
    version can read; delete ... to start over')."""
    expected = tmp_path / f"expected.{fmt}"
    assert run_cli("annotate", str(source), "-o", str(expected), "--model", model)[0] == 0
    target = tmp_path / f"out.{fmt}"
    partial = tmp_path / f"out.{fmt}.partial"
    partial.mkdir() if fmt == "spacy" else partial.write_bytes(b"")
    (tmp_path / f"out.{fmt}.partial.manifest").write_bytes(b'{"treexp_partial": 1, "form')  # torn header
    status, _, err = run_cli("annotate", str(source), "-o", str(target), "--model", model, "--resume")
    assert status == 0 and "is empty" in err and "starting over" in err
    if fmt == "spacy":
        assert docs_of(target) == docs_of(expected)
    else:
        assert target.read_bytes() == expected.read_bytes()
    assert not partial.exists()


def test_resume_still_refuses_an_unreadable_manifest_beside_kept_output(model, source, tmp_path, run_cli, user_error):
    target = tmp_path / "out.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        stop_after(patch, 2)
        assert run_cli("annotate", str(source), "-o", str(target), "--model", model)[0] == 130
    (tmp_path / "out.jsonl.partial.manifest").write_bytes(b"")
    message = user_error("annotate", str(source), "-o", str(target), "--model", model, "--resume")
    assert "not a manifest this version can read" in message
