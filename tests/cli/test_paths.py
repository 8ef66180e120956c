"""Output paths and ``--model`` checked by every command before anything is written: one line
``spacy-treexp: ...`` naming the path and the problem, exit status 2, no traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import TESTS

CONLLU = "1\tHi\t_\t_\t_\t_\t0\troot\t_\t_\n\n"


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """An input of each kind and a plain file to put outputs under."""
    (tmp_path / "in.txt").write_text("Hi there.\n")
    (tmp_path / "in.jsonl").write_text('{"text": "Hi there."}\n')
    (tmp_path / "gold.conllu").write_text(CONLLU)
    (tmp_path / "plain").write_text("not a folder\n")
    return {"txt": tmp_path / "in.txt", "jsonl": tmp_path / "in.jsonl", "conllu": tmp_path / "gold.conllu"}


def commands(files: dict[str, Path], output: Path, model: str) -> dict[str, list[str]]:
    """Each command that writes, with ``output`` as its output."""
    return {
        "annotate": ["annotate", str(files["txt"]), "-o", str(output), "--model", model],
        "annotate .spacy": ["annotate", str(files["txt"]), "-o", str(output.with_suffix(".spacy")), "--model", model],
        "render": ["render", str(files["txt"]), "-o", str(output.with_suffix(".html")), "--model", model],
        "evaluate": [
            "evaluate",
            "--conllu",
            str(files["conllu"]),
            "--out",
            str(output.with_suffix("")),
            "--model",
            model,
        ],
    }


def listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_missing_folder_or_a_file_on_the_way(model, files, tmp_path, user_error):
    before = listing(tmp_path)
    missing = tmp_path / "no_folder" / "out.jsonl"
    for name, args in commands(files, missing, model).items():
        assert f"no such folder {missing.parent}" in user_error(*args), name
    for under in (tmp_path / "plain" / "out.jsonl", tmp_path / "plain" / "deeper" / "out.jsonl"):
        for name, args in commands(files, under, model).items():
            assert f"{tmp_path / 'plain'} is a file, not a folder" in user_error(*args), name
    assert listing(tmp_path) == before


def test_an_output_that_is_the_input_by_any_name(model, files, tmp_path, monkeypatch, user_error):
    source = files["jsonl"]
    (tmp_path / "sub").mkdir()
    (tmp_path / "link.jsonl").symlink_to(source)
    os.link(source, tmp_path / "hard.jsonl")
    monkeypatch.chdir(tmp_path)
    names = ["in.jsonl", "./in.jsonl", str(source), "sub/../in.jsonl", "link.jsonl", "hard.jsonl"]
    for name in names:
        for command in ("annotate", "render"):
            assert "is the input file" in user_error(command, "in.jsonl", "-o", name, "--model", model), name
        assert "is the input file" in user_error("annotate", "./in.jsonl", "-o", name, "--model", model), name
    assert source.read_text() == '{"text": "Hi there."}\n'
    assert not any(p.name.endswith((".partial", ".manifest", ".tmp")) for p in tmp_path.iterdir())


def test_a_missing_model_is_named_by_every_command(files, tmp_path, user_error):
    for model in ("no_such_pipeline_package", str(tmp_path / "no" / "pipeline")):
        assert f"--model {model}: no such spaCy pipeline" in user_error("parse", "Hi.", "--model", model)
        for name, args in commands(files, tmp_path / "out.jsonl", model).items():
            assert f"--model {model}: no such spaCy pipeline" in user_error(*args), name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gold.conllu", "in.jsonl", "in.txt", "plain"]


def test_an_empty_model_name_is_named_not_read_as_the_current_folder(user_error, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert "--model is empty" in user_error("parse", "Hi.", "--model", "")


@pytest.mark.skipif(os.geteuid() == 0, reason="as root, folder permissions do not stop writing")
def test_an_unwritable_folder(model, files, tmp_path, user_error):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        for name, args in commands(files, locked / "out.jsonl", model).items():
            assert f"folder {locked} is not writable" in user_error(*args), name
    finally:
        locked.chmod(0o700)


READ_ONLY_SCRIPT = """
import sys
from spacy_treexp.cli import main
for args in eval(sys.argv[1]):
    print(main(args), file=sys.stderr, flush=True)
"""


def _read_only_bind_available() -> bool:
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not _read_only_bind_available(), reason="needs root and unshare to bind a folder read-only")
def test_a_read_only_folder(model, files, tmp_path):
    """As root, folder permissions do not bite: a read-only bind mount (in a mount namespace
    of its own, gone with the process) makes a folder that root cannot write to either."""
    locked = tmp_path / "locked"
    locked.mkdir()
    runs = list(commands(files, locked / "out.jsonl", model).values())
    mount = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" "$0" && exec "$@"'
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    command = ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, str(locked)]
    command += [sys.executable, "-c", READ_ONLY_SCRIPT, repr(runs)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    lines = result.stderr.splitlines()
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert len(lines) == 2 * len(runs), result.stderr
    for message, status in zip(lines[::2], lines[1::2]):
        assert status == "2" and message == f"spacy-treexp: {message.split(': ', 1)[1]}"
        assert f"folder {locked} is not writable" in message, message
    assert listing(locked) == []
