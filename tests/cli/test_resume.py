"""``annotate`` killed in a real process (SIGKILL, SIGTERM), then finished by the same command
with ``--resume``: the result is what an uninterrupted run writes (byte for byte for .jsonl
and .conllu with the test scorer, whose scores do not depend on batching; the same Docs for
.spacy), with no duplicate and no gap.

Each input format goes to one output format (.txt -> .jsonl, .conllu -> .conllu,
.jsonl -> .spacy), so the three ways of numbering input positions are covered too; each
input has documents the pipeline refuses, before and after the point of the kill. Every
run is a process of its own with the same settings, as a user's reruns are (the engine's
last float bits may differ between a fresh process and one that ran other tests)."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import spacy
from helpers.paths import TESTS

from spacy_treexp.cli.outputs import read_docbin

DOCS = 150
SCRIPT = "import helpers.scorer; from spacy_treexp.cli import main; raise SystemExit(main())"
CASES = {"jsonl": ("txt", []), "conllu": ("conllu", []), "spacy": ("jsonl", ["--shard-size", "4"])}


def _text(i: int) -> str:
    return "FAIL here." if i in (2, DOCS - 20) else f"Document {i} is here. It has {i % 5} more words."


def _conllu(i: int) -> str:
    rows = [
        f"{m}\t{word}\t_\t_\t_\t_\t{0 if m == 1 else 1}\t{'root' if m == 1 else 'dep'}\t_\t_"
        for m, word in enumerate(_text(i).replace(".", " .").split(), start=1)
    ]
    return f"# sent_id = s{i}\n" + "\n".join(rows) + "\n\n"


def write_input(path: Path, fmt: str) -> Path:
    if fmt == "txt":
        path.write_text("".join(f"{_text(i)}\n" for i in range(DOCS)))
    elif fmt == "jsonl":
        path.write_text("".join(f'{{"text": "{_text(i)}", "n": {i}}}\n' for i in range(DOCS)))
    else:
        path.write_text("".join(_conllu(i) for i in range(DOCS)))
    return path


def contents(path: Path, fmt: str):
    """What two outputs must share: the bytes, or for .spacy those of every Doc (its
    annotations included), whatever the shards."""
    if fmt != "spacy":
        return path.read_bytes()
    return [doc.to_bytes() for doc in read_docbin(path, spacy.blank("en").vocab)]


def command(source: Path, target: Path, model: str, fmt: str) -> list[str]:
    """The command every run of a case uses; --batch-size 1 keeps a run slow enough to stop."""
    args = ["annotate", str(source), "-o", str(target), "--model", model, "--samples", "1"]
    return [sys.executable, "-c", SCRIPT, *args, "--batch-size", "1", "--quiet", *CASES[fmt][1]]


def environment() -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    env["OMP_NUM_THREADS"] = "1"  # the test scorer's torch calls: one thread is much faster here
    return env


def run(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=environment(), capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def uninterrupted(model, tmp_path_factory):
    """``uninterrupted(fmt)`` -> (input, the output of an uninterrupted run), made once."""
    folder = tmp_path_factory.mktemp("uninterrupted")
    made = {}

    def make(fmt: str):
        if fmt not in made:
            source = write_input(folder / f"in.{CASES[fmt][0]}", CASES[fmt][0])
            target = folder / f"out.{fmt}"
            result = run(command(source, target, model, fmt))
            assert result.returncode == 0, result.stderr[-2000:]
            made[fmt] = (source, contents(target, fmt))
        return made[fmt]

    return make


def run_until(args: list[str], manifest: Path, entries: int, sig: signal.Signals) -> subprocess.CompletedProcess:
    """Run ``args``; once the manifest lists ``entries`` records (or shards), send ``sig``."""
    process = subprocess.Popen(args, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    try:
        while not (manifest.exists() and manifest.read_bytes().count(b"\n") > entries):
            assert process.poll() is None, f"the run ended before it was stopped: {process.communicate()[1][-2000:]}"
            assert time.monotonic() < deadline, "no progress"
            time.sleep(0.005)
        process.send_signal(sig)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


@pytest.mark.parametrize("fmt", ["jsonl", "conllu", "spacy"])
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_stopped_run_resumed_equals_an_uninterrupted_one(fmt, sig, model, uninterrupted, tmp_path):
    source, expected = uninterrupted(fmt)
    target = tmp_path / f"out.{fmt}"
    partial, manifest = tmp_path / f"out.{fmt}.partial", tmp_path / f"out.{fmt}.partial.manifest"
    args = command(source, target, model, fmt)
    stopped = run_until(args, manifest, 2 if fmt == "spacy" else 5, sig)

    assert not target.exists() and partial.exists()
    if sig == signal.SIGKILL:
        assert stopped.returncode == -signal.SIGKILL
    else:
        assert stopped.returncode == 130, stopped.stderr[-2000:]
        assert f"written to {partial}; run the same command with --resume" in stopped.stderr
        listed = manifest.read_text().splitlines()[1:]
        if fmt == "spacy":  # the documents held were written as one more shard
            assert sorted(p.name for p in partial.iterdir()) == [f"{k:05d}.spacy" for k in range(len(listed))]
        else:  # exactly the listed records, all whole
            assert partial.stat().st_size == json.loads(listed[-1])["end"]
    resumed = run(args + ["--resume"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming: " in resumed.stderr
    assert not partial.exists() and not manifest.exists()
    assert contents(target, fmt) == expected
    # the refused documents are reported once, by the run that reached them
    refused = [line for line in (stopped.stderr + resumed.stderr).splitlines() if "test scorer refuses" in line]
    assert len(refused) == 2, refused


def wait_for_documents(process: subprocess.Popen, manifest: Path, count: int = 5) -> None:
    """Until the run has listed more than ``count`` documents in its manifest (it must not end first)."""
    deadline = time.monotonic() + 120
    while not (manifest.exists() and manifest.read_bytes().count(b"\n") > count):
        assert process.poll() is None, f"the run ended before it was stopped: {process.communicate()[1][-2000:]}"
        assert time.monotonic() < deadline, "no progress"
        time.sleep(0.005)


def test_ctrl_c_with_worker_processes_stops_them_cleanly_and_resumes(model, uninterrupted, tmp_path):
    """Ctrl-C reaches the whole process group: the workers print no traceback of their own
    (nor spaCy its W127), the run stops with 130 and no worker left behind, and the resumed
    output is the uninterrupted one."""
    source, expected = uninterrupted("jsonl")
    target = tmp_path / "out.jsonl"
    manifest = tmp_path / "out.jsonl.partial.manifest"
    args = command(source, target, model, "jsonl") + ["--n-process", "2"]
    process = subprocess.Popen(
        args, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        wait_for_documents(process, manifest)
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, err[-2000:]
    assert "Traceback" not in err and "W127" not in err
    with pytest.raises(ProcessLookupError):  # nothing of the group is left
        os.killpg(process.pid, 0)
    resumed = run(args + ["--resume"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert contents(target, "jsonl") == expected


@pytest.mark.parametrize("fmt", ["conllu", "spacy"])
def test_a_full_disk_is_one_line_and_the_run_resumes(fmt, model, uninterrupted, tmp_path):
    """A write that fails (a full disk, here a file size limit) ends the run with one line
    and exit status 1, the partial cut to the records listed; --resume then finishes it."""
    source, expected = uninterrupted(fmt)
    target = tmp_path / f"out.{fmt}"
    args = command(source, target, model, fmt)
    limit = 2048 if fmt == "spacy" else 2 * 4096 + 100  # bytes of one file: a shard, or the partial

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    result = subprocess.run(
        args, env=environment(), capture_output=True, text=True, timeout=300, preexec_fn=small_files
    )
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "File too large" in result.stderr
    resumed = run(args + ["--resume"])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert contents(target, fmt) == expected


def test_a_signal_to_the_parent_alone_ends_a_run_with_workers(model, tmp_path):
    """A service manager signals the parent only, with many batches queued for the workers:
    the run printed "interrupted" and never exited (the queues' feeder threads, blocked on a
    pipe no one read, held the exit-time join)."""
    source = tmp_path / "in.txt"
    words = " ".join(f"w{k}" for k in range(60))  # long lines: batches of them fill the pipes to the workers
    source.write_text("".join(f"Line {i} {words} .\n" for i in range(3000)))
    target = tmp_path / "out.jsonl"
    manifest = tmp_path / "out.jsonl.partial.manifest"
    args = command(source, target, model, "jsonl") + ["--n-process", "2", "--batch-size", "64"]
    process = subprocess.Popen(args, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_documents(process, manifest)
        process.send_signal(signal.SIGTERM)  # Ctrl-C takes the same handler
        _, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            for worker in subprocess.run(
                ["pgrep", "-P", str(process.pid)], capture_output=True, text=True
            ).stdout.split():
                os.kill(int(worker), signal.SIGKILL)
            process.wait()
    assert process.returncode == 130, err[-2000:]
    assert "interrupted:" in err and "Traceback" not in err
