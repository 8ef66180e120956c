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
