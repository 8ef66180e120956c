"""On a local Ray cluster started here: the driver killed (SIGKILL) mid-run, then the run
finished with --resume while one of its workers is killed too; the output holds every
input document once, none twice, byte for byte a local run's (samples included). And
TreexpAnnotator on a Ray Dataset adds the columns a local pipeline gives."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="the ray extra is not installed")

from spacy_treexp.scale import manifest  # noqa: E402

N = 40
SCRIPT = "from spacy_treexp.cli import main; raise SystemExit(main())"


@pytest.fixture(scope="module")
def cluster():
    """A Ray instance on this machine (loopback only) for the module; its GCS address."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def _children(pid: int) -> list[int]:
    """Every process descending from ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        parent = frontier.pop()
        kids = [p for p, pp in parents.items() if pp == parent]
        found += kids
        frontier += kids
    return found


def _shard_workers() -> list[int]:
    """Our cluster's actors running ShardWorker (their process title says so)."""
    out = []
    for pid in _children(os.getpid()):
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"ShardWorker" in title:
            out.append(pid)
    return out


def _committed(path: Path) -> int:
    try:
        return len(path.read_text().splitlines()) - 1
    except OSError:
        return 0


def test_driver_and_worker_killed_then_resumed(cluster, toy_model, write_txt, tmp_path: Path) -> None:
    from spacy_treexp.cli import main

    source = write_txt(tmp_path / "in.txt", N, blank_at=(5,))
    local = tmp_path / "local.jsonl"
    common = ["--model", toy_model, "--samples", "2", "--batch-size", "1", "--quiet"]
    assert main(["annotate", str(source), "-o", str(local), *common]) == 0

    out = tmp_path / "out"
    args = ["annotate", str(source), "-o", str(out), "--backend", "ray", "--output-format", "jsonl", *common]
    args += ["--shard-size", "2", "--ray-address", cluster]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    driver = subprocess.Popen([sys.executable, "-c", SCRIPT, *args, "--workers", "1"], env=env)
    partial_manifest = tmp_path / "out.partial" / manifest.MANIFEST
    deadline = time.monotonic() + 240
    while _committed(partial_manifest) < 2 and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    kept = _committed(partial_manifest)
    assert 2 <= kept < N // 2, "the driver was not killed mid-run"

    killed: list[int] = []

    def kill_a_worker() -> None:  # once the resumed run has committed one more shard
        end = time.monotonic() + 240
        while time.monotonic() < end and not out.exists():
            workers = _shard_workers()
            if workers and _committed(partial_manifest) > kept:
                os.kill(workers[0], signal.SIGKILL)
                killed.append(workers[0])
                return
            time.sleep(0.05)

    killer = threading.Thread(target=kill_a_worker, daemon=True)
    killer.start()
    assert main([*args, "--resume", "--workers", "2"]) == 0
    killer.join()
    assert killed, "no worker was killed"

    records = [json.loads(line) for line in (out / manifest.MANIFEST).read_text().splitlines()]
    assert records[-1]["complete"] is True and records[-1]["docs"] == N
    shards = sorted(out.glob("part-*.jsonl"))
    assert len(shards) == N // 2
    text = b"".join(path.read_bytes() for path in shards)
    lines = [json.loads(line)["line"] for line in text.splitlines()]
    assert len(lines) == len(set(lines)) == N
    assert text == local.read_bytes()


def test_annotator_on_a_ray_dataset(cluster, toy_model) -> None:
    from ray.data import ActorPoolStrategy

    from spacy_treexp.cli.pipelines import load_pipeline
    from spacy_treexp.scale import TreexpAnnotator
    from spacy_treexp.scale.schema import ANNOTATION, annotation_row

    texts = ["The cat sat on the mat . A dog barked .", "She reads old books .", None, "Give me the red pen ."]
    dataset = ray.data.from_items([{"id": i, "text": t} for i, t in enumerate(texts)], override_num_blocks=2)
    annotated = dataset.map_batches(
        TreexpAnnotator,
        fn_constructor_kwargs={"model": toy_model, "samples": 3},
        batch_format="pyarrow",
        batch_size=2,
        compute=ActorPoolStrategy(size=1),
        num_cpus=1,
    )
    rows = sorted(annotated.take_all(), key=lambda row: row["id"])
    nlp = load_pipeline(toy_model, n_samples=3)
    assert [row["id"] for row in rows] == [0, 1, 2, 3]
    for row, text in zip(rows, texts):
        assert set(row) == {"id", "text", *ANNOTATION.names}
        if text is None:
            assert row["error"] == "text is not a string" and row["sentences"] is None
            continue
        expected = annotation_row(nlp(text))
        assert {key: row[key] for key in ANNOTATION.names} == expected


def test_code_reaches_the_workers(cluster, write_txt, tmp_path: Path) -> None:
    """A pipeline whose score source only --code registers: every actor died with E893
    ("could not find function") while the local backend ran."""
    import spacy
    from helpers.scorer import CODE_SCORE_SOURCE
    from spacy.util import import_file

    from spacy_treexp.cli import main

    code = tmp_path / "source.py"
    code.write_text(CODE_SCORE_SOURCE)
    import_file("treexp_test_ray_code", str(code))
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("tree_expectations", config={"scores": {"@misc": "test_code_scores.v1"}})
    nlp.to_disk(tmp_path / "pipeline")
    source = write_txt(tmp_path / "in.txt", 6)
    args = ["annotate", str(source), "--model", str(tmp_path / "pipeline"), "--code", str(code), "--quiet"]
    assert main([*args, "-o", str(tmp_path / "local.jsonl")]) == 0
    assert (
        main([*args, "-o", str(tmp_path / "out"), "--backend", "ray", "--workers", "1", "--output-format", "jsonl"])
        == 0
    )
    shards = sorted((tmp_path / "out").glob("part-*.jsonl"))
    assert b"".join(path.read_bytes() for path in shards) == (tmp_path / "local.jsonl").read_bytes()
