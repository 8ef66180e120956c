"""A sharded run without Ray (shards run in this process by the same worker code): the
shards put end to end are a local run's output byte for byte; an interrupted run, with a
torn manifest line, a shard written but not committed and a temporary file left behind,
is finished by --resume with every document once; Parquet shards follow the schema and
hold the JSONL values; mistakes are one-line user errors."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from spacy_treexp.cli.common import UserError
from spacy_treexp.scale import manifest
from spacy_treexp.scale.backend import annotate_sharded, inline_executor
from spacy_treexp.scale.schema import DOCUMENT

N = 23
OPTIONS = {"samples": 2, "batch_size": 1}


def run(source: Path, output: Path, model: str, fmt: str = "jsonl", resume: bool = False, executor=None, **kw):
    executor = executor or inline_executor(model=model, fmt=fmt, **OPTIONS)
    options = {"input_format": None, "shard_size": 4, "strict": False, "quiet": True, **kw}
    return annotate_sharded(
        input=str(source),
        output=output,
        fmt=fmt,
        model=model,
        resume=resume,
        executor=executor,
        samples=OPTIONS["samples"],
        batch_size=OPTIONS["batch_size"],
        **options,
    )


def joined(folder: Path, suffix: str = "jsonl") -> bytes:
    return b"".join(path.read_bytes() for path in sorted(folder.glob(f"part-*.{suffix}")))


@pytest.fixture(scope="module")
def reference(toy_model, write_txt, tmp_path_factory):
    """(input, the JSONL of a local run of it)."""
    from spacy_treexp.cli import main

    folder = tmp_path_factory.mktemp("reference")
    source = write_txt(folder / "in.txt", N, blank_at=(3, 10))
    target = folder / "local.jsonl"
    args = ["annotate", str(source), "-o", str(target), "--model", toy_model, "--samples", "2", "--quiet"]
    assert main([*args, "--batch-size", "1"]) == 0
    return source, target.read_bytes()


def test_shards_end_to_end_are_the_local_output(toy_model, reference, tmp_path: Path) -> None:
    source, local = reference
    assert run(source, tmp_path / "out", toy_model) == 0
    out = tmp_path / "out"
    assert joined(out) == local
    lines = [json.loads(line) for line in (out / manifest.MANIFEST).read_text().splitlines()]
    assert lines[0]["treexp_shards"] == manifest.LAYOUT and lines[0]["shard_size"] == 4
    assert [entry["shard"] for entry in lines[1:-1]] == [f"part-00000-{k:06d}" for k in range(6)]
    sentences = sum(len(json.loads(line)["sentences"]) for line in local.splitlines())
    assert lines[-1] == {"complete": True, "shards": 6, "docs": N, "sentences": sentences, "bad": 0}
    assert not (tmp_path / "out.partial").exists()


def test_interrupted_then_resumed_gives_every_document_once(toy_model, reference, tmp_path: Path) -> None:
    source, local = reference
    out = tmp_path / "out"
    inline = inline_executor(model=toy_model, fmt="jsonl", **OPTIONS)

    def interrupted(shards, folder):
        for k, result in enumerate(inline(shards, folder)):
            if k == 3:  # the fourth shard is written but never committed
                raise KeyboardInterrupt
            yield result

    assert run(source, out, toy_model, executor=interrupted) == 130
    partial = tmp_path / "out.partial"
    assert {p.name for p in partial.glob("part-*")} == {f"part-00000-{k:06d}.jsonl" for k in range(4)}
    (partial / ".part-00000-000004.jsonl.dead.tmp").write_text("half")  # a worker killed mid-write
    (partial / "part-00000-000005.jsonl").write_text('{"a duplicate": 1}\n')  # written, never committed
    with (partial / manifest.MANIFEST).open("a") as file:
        file.write('{"shard": "part-00000-0000')  # the driver killed mid-line
    with pytest.raises(UserError, match="add --resume"):
        run(source, out, toy_model)
    with pytest.raises(UserError, match="samples"):
        _resume_other_samples(source, out, toy_model)
    assert run(source, out, toy_model, resume=True) == 0
    assert joined(out) == local
    records = [json.loads(line) for line in joined(out).splitlines()]
    assert sorted(r["line"] for r in records) == sorted(set(r["line"] for r in records))
    assert len(records) == N
    assert sorted(p.name for p in out.iterdir()) == [manifest.MANIFEST] + [
        f"part-00000-{k:06d}.jsonl" for k in range(6)
    ]
    assert run(source, out, toy_model, resume=True) == 0  # complete: nothing to do


def _resume_other_samples(source: Path, out: Path, model: str) -> int:
    return annotate_sharded(
        input=str(source),
        output=out,
        fmt="jsonl",
        model=model,
        resume=True,
        samples=3,
        batch_size=1,
        input_format=None,
        shard_size=4,
        strict=False,
        quiet=True,
        executor=inline_executor(model=model, fmt="jsonl", samples=3, batch_size=1),
    )


def test_parquet_shards_follow_the_schema(toy_model, reference, tmp_path: Path) -> None:
    source, local = reference
    assert run(source, tmp_path / "out", toy_model, fmt="parquet") == 0
    table = pq.read_table(tmp_path / "out")  # _manifest.jsonl is not taken for data
    assert table.schema.remove_metadata() == DOCUMENT
    rows = sorted(table.to_pylist(), key=lambda row: row["line"])
    expected = [json.loads(line) for line in local.splitlines()]
    assert len(rows) == len(expected) == N
    for row, record in zip(rows, expected):
        assert (row["source"], row["line"], row["text"]) == (str(source.resolve()), record["line"], record["text"])
        assert row["meta"] is None and row["error"] is None
        assert row["tree_entropy"] == record["tree_entropy"]
        assert row["n_sentences"] == len(record["sentences"])
        assert row["n_tokens"] == sum(len(s["tokens"]) for s in record["sentences"])
        for sentence in record["sentences"]:
            for token in sentence["tokens"]:
                token["head_distribution"] = [{"head": h, "prob": p} for h, p in token["head_distribution"]]
        assert row["sentences"] == record["sentences"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--backend", "ray", "-", "--input-format", "txt"], "not '-'"),
        (["--output-format", "parquet"], "--output-format parquet needs --backend ray"),
        (["--workers", "2"], "--workers needs --backend ray"),
        (["--backend", "ray", "--n-process", "2"], "give --workers, not --n-process"),
        (["--backend", "ray", "--gpu", "0"], "give --worker-gpus"),
    ],
)
def test_command_line_mistakes(run_cli, toy_model, reference, tmp_path: Path, args, message) -> None:
    source, _ = reference
    inputs = [] if "-" in args else [str(source)]
    status, out, err = run_cli("annotate", *inputs, "-o", str(tmp_path / "out"), "--model", toy_model, *args)
    assert status == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err


def test_output_in_the_way_is_refused(run_cli, toy_model, reference, tmp_path: Path) -> None:
    source, _ = reference
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "mine.txt").write_text("keep me")
    status, _, err = run_cli(
        "annotate", str(source), "-o", str(tmp_path / "out"), "--backend", "ray", "--model", toy_model
    )
    assert status == 2 and "exists and is not an empty directory" in err
    status, _, err = run_cli("annotate", str(tmp_path / "nothing*.txt"), "-o", str(tmp_path / "o2"), "--backend", "ray")
    assert status == 2 and "no .txt, .jsonl or .conllu file there" in err
    status, _, err = run_cli("annotate", str(source.parent), "-o", str(source.parent / "o3"), "--backend", "ray")
    assert status == 2 and "is inside the input folder" in err


def test_a_run_whose_every_input_is_bad_fails_as_locally(toy_model, tmp_path: Path, capsys) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text("a,b\n1,2\n", encoding="utf-8")  # a CSV named .jsonl: every line is a bad line
    assert run(source, tmp_path / "out", toy_model) == 1
    err = capsys.readouterr().err
    assert "2 bad input(s) skipped; 0 documents written" in err and "no input could be annotated" in err
    assert manifest.is_complete(manifest.Paths.of(tmp_path / "out"))  # the run itself is complete


def test_a_glob_that_matches_the_output_resumes(toy_model, tmp_path: Path) -> None:
    """A glob such as ROOT/**/*.jsonl with the output under ROOT matched, on --resume, the
    run's own shards and manifest: every resume was refused as "made with other inputs"."""
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "a.jsonl").write_text(
        "".join(json.dumps({"text": f"Word {i} here."}) + "\n" for i in range(6))
    )

    def interrupted(shards, folder):  # commits the first shard, then Ctrl-C
        first = inline_executor(model=toy_model, fmt="jsonl", **OPTIONS)(shards[:1], folder)
        yield from first
        raise KeyboardInterrupt

    source, out = tmp_path / "**" / "*.jsonl", tmp_path / "annotated"
    assert run(source, out, toy_model, shard_size=2, executor=interrupted) == 130
    assert run(source, out, toy_model, resume=True, shard_size=2) == 0
    assert len(joined(out).splitlines()) == 6  # every input document once, nothing of the output read as input


def test_a_refusal_before_any_shard_leaves_no_partial_folder(toy_model, reference, tmp_path: Path) -> None:
    """A cluster that cannot meet the request is refused once Ray is up, after the manifest
    is made: the corrected command must not then be told to --resume or delete it."""
    source, _ = reference

    def refused(shards, folder):
        raise UserError("--worker-cpus 8: the Ray cluster has 2 CPUs in all")
        yield  # a generator, as the Ray executor

    with pytest.raises(UserError, match="--worker-cpus 8"):
        run(source, tmp_path / "out", toy_model, executor=refused)
    assert not manifest.Paths.of(tmp_path / "out").partial.exists()
    assert run(source, tmp_path / "out", toy_model) == 0


def test_a_live_run_is_named_not_offered_for_deletion(tmp_path: Path) -> None:
    paths = manifest.Paths.of(tmp_path / "out")
    head = {"treexp_shards": 1}
    live = manifest.Manifest(paths, head, resume=False)
    with pytest.raises(UserError, match="another run is writing"):
        manifest.Manifest(paths, head, resume=False)  # was: "holds an interrupted run ... delete it"
    live.close()
    with pytest.raises(UserError, match="holds an interrupted run"):
        manifest.Manifest(paths, head, resume=False)


def test_ray_requests_that_cannot_be_met_are_refused_before_the_run(monkeypatch) -> None:
    """Ray waits forever for an actor no node can hold, and retries an address for minutes."""
    import os

    import torch

    from spacy_treexp.scale.backend import check_cluster, check_ray_target

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    cpus = os.cpu_count() or 1
    with pytest.raises(UserError, match=f"--worker-cpus {cpus + 1}"):
        check_ray_target(None, None, cpus + 1, 0)
    check_ray_target(None, 1, cpus + 1, 0)  # --workers sizes the local instance
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="--worker-gpus 1: .* 0 GPUs"):
            check_ray_target(None, None, 1, 1)
    with pytest.raises(UserError, match="cannot connect"):
        check_ray_target("127.0.0.1:1", None, 1, 0)
    with pytest.raises(UserError, match="expected HOST:PORT"):
        check_ray_target("a-cluster", None, 1, 0)
    with pytest.raises(UserError, match="--worker-gpus 0.5: the Ray cluster has 0 GPUs"):
        check_cluster({"CPU": 64.0}, 1, 0.5)
    check_cluster({"CPU": 64.0, "GPU": 1.0}, 4, 0.5)


def test_code_is_imported_where_the_pipeline_loads(tmp_path: Path) -> None:
    """--code reaches Ray's actors (ShardWorker, TreexpAnnotator), processes of their own."""
    import spacy

    from spacy_treexp.scale.worker import import_user_code

    name = "treexp_test_code_in_worker.v1"
    code = tmp_path / "mine.py"
    code.write_text(f"import spacy\n\n@spacy.registry.misc({name!r})\ndef make():\n    return 1\n")
    import_user_code(str(code))
    assert spacy.registry.misc.get(name)() == 1
