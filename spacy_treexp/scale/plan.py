"""Which documents a sharded run annotates, cut into shards, without spaCy or Ray.

INPUT is a file, a folder (every ``.txt``, ``.jsonl`` and ``.conllu`` file under it, at
any depth) or a glob (``data/*.jsonl``, ``corpus/**/*.conllu``); the files are taken in
sorted order. Each file is cut into shards of at most ``shard_size`` documents (a
``.txt`` / ``.jsonl`` document is a non-empty line, a CoNLL-U document one block of
non-blank lines: a sentence, or a bad block that the worker reports as a local run does) at
document boundaries, by one pass over its bytes that parses nothing. A shard is named by
its file's position and its own (``part-00002-000017``): the same inputs and shard size
always give the same shards, so a shard is the unit a run commits and a resumed run skips
(:mod:`spacy_treexp.scale.manifest`). A worker reads its shard's byte range itself
(:func:`read_shard`), through the same readers as a local run; inputs must therefore be on
a filesystem every worker sees (one machine, or a shared mount on a cluster).
"""

from __future__ import annotations

import glob
import io
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Optional

from spacy_treexp.io.inputs import SUFFIXES, Context, Item, OnBad, Reader, empty_line


class PlanError(ValueError):
    """INPUT names no readable input (the command line shows it as a user error)."""


@dataclass(frozen=True)
class Shard:
    """Documents of one input file: bytes ``[offset, offset + length)``, starting on line
    ``first_line`` (1-based); ``docs`` documents (bad lines included)."""

    name: str
    source: str
    format: str
    offset: int
    length: int
    first_line: int
    docs: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Shard:
        return cls(**{key: data[key] for key in cls.__dataclass_fields__})


def expand_inputs(pattern: str, input_format: Optional[str] = None) -> list[tuple[Path, str]]:
    """The input files INPUT names, sorted, each with its format (``input_format``, or
    its suffix). A file of unknown suffix is refused when named alone and skipped when
    a folder or a glob brings it in."""
    path = Path(pattern)
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in SUFFIXES)
    elif glob.has_magic(pattern):
        files = sorted(Path(p) for p in glob.glob(pattern, recursive=True) if Path(p).is_file())
        if input_format is None:
            files = [p for p in files if p.suffix.lower() in SUFFIXES]
    else:
        raise PlanError(f"INPUT {pattern}: no such file, folder or glob")
    if not files:
        raise PlanError(f"INPUT {pattern}: no .txt, .jsonl or .conllu file there")
    out = []
    for file in files:
        fmt = input_format or SUFFIXES.get(file.suffix.lower())
        if fmt is None:
            raise PlanError(f"INPUT {file}: expected a .txt, .jsonl or .conllu file (or give --input-format)")
        out.append((file.resolve(), fmt))
    return out


def plan_shards(files: list[tuple[Path, str]], shard_size: int) -> Iterator[Shard]:
    """The shards of ``files`` in input order (see the module doc)."""
    for number, (path, fmt) in enumerate(files):
        for chunk, (offset, length, first_line, docs) in enumerate(_cut(path, fmt, shard_size)):
            yield Shard(f"part-{number:05d}-{chunk:06d}", str(path), fmt, offset, length, first_line, docs)


def _cut(path: Path, fmt: str, shard_size: int) -> Iterator[tuple[int, int, int, int]]:
    """(offset, length, first line, documents) of each shard of a file."""
    start = position = 0
    first_line, docs, inside = 1, 0, False
    with path.open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            blank = not raw.strip()
            if fmt == "conllu":
                if blank and inside:  # a sentence ends; cut after its blank line
                    inside = False
                    docs += 1
                elif not blank:  # a block of comments only is a document too: a bad one, reported
                    inside = True
                ends_doc = blank and docs == shard_size
            else:
                docs += not empty_line(raw, number == 1)  # the reader's empty lines: Unicode spaces too
                ends_doc = docs == shard_size
            position += len(raw)
            if ends_doc:
                yield start, position - start, first_line, docs
                start, first_line, docs = position, number + 1, 0
        docs += inside
    if docs:
        yield start, position - start, first_line, docs


def read_shard(shard: Shard, on_bad: OnBad) -> Iterator[tuple[Item, Context]]:
    """The ``(item, context)`` pairs of a shard, numbered by their lines in the whole file,
    as a local run's :class:`~spacy_treexp.io.inputs.Reader` gives them."""
    with open(shard.source, "rb") as handle:
        handle.seek(shard.offset)
        data = handle.read(shard.length)
    # Line 1 of the stream is a blank line standing for the lines before the shard, so
    # that a byte-order mark is dropped only at the start of the file, as locally.
    shift = shard.first_line - 2
    if shard.first_line == 1:
        shift = 0
    else:
        data = b"\n" + data

    def report(line: int, message: str) -> None:
        on_bad(line + shift, message)

    for item, context in Reader(io.BytesIO(data), report, shard.format):
        context["line"] += shift
        if "sentence" in context:
            context["sentence"] = replace(context["sentence"], line=context["line"])
        yield item, context
