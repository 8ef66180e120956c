"""A sharded output directory whose shards are committed exactly once.

Layout. A run writes the directory ``OUTPUT.partial``: one file per shard,
``part-FFFFF-CCCCCC.EXT`` (input file F, its shard C; :mod:`spacy_treexp.scale.plan`),
and ``_manifest.jsonl`` (a leading ``_`` keeps Parquet readers from taking it for data).
The manifest's first line is a header of what the output is made from (:func:`header`),
then one line per committed shard. When every shard is committed the manifest is
rewritten in shard order with a last line ``{"complete": true, ...}`` and the directory
renamed to OUTPUT.

Commit. A worker writes each shard file under a temporary name starting with ``.``
(unique per attempt) and renames it into place; only then does the driver append the
shard's manifest line (flushed). A shard's name and contents depend only on the inputs,
the shard size and the options, so a shard written twice -- a worker restarted by Ray, a
driver killed after the rename and before the manifest line -- is the same file under
the same name: never a duplicate.

Resume. ``--resume`` keeps the shards the manifest lists (a torn last line is dropped),
deletes every other file of the directory (unlisted shards, temporary files) and runs the
rest; the header must match the command. One driver at a time: the driver holds an
exclusive lock on ``_manifest.jsonl`` (released by the system when it dies).
"""

from __future__ import annotations

import fcntl
import json
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Optional

from spacy_treexp import __version__
from spacy_treexp.cli.common import UserError

LAYOUT = 1
PARTIAL = ".partial"
MANIFEST = "_manifest.jsonl"
#: Header fields a resumed run must match.
CHECKED = ("format", "inputs", "shard_size", "model", "samples", "version")


def header(
    *, fmt: str, inputs: list[tuple[Path, str]], shard_size: int, model: Optional[str], samples: int
) -> dict[str, Any]:
    """The manifest's first line: the output format, each input file with its format and
    size, the shard size, the model and the samples (whatever else, such as the number of
    workers or the batch size, does not change a shard)."""
    where = None if model is None else (str(Path(model).resolve()) if Path(model).exists() else model)
    return {
        "treexp_shards": LAYOUT,
        "format": fmt,
        "inputs": [[str(path), kind, path.stat().st_size] for path, kind in inputs],
        "shard_size": shard_size,
        "model": where,
        "samples": samples,
        "version": __version__,
    }


@dataclass(frozen=True)
class Paths:
    target: Path
    partial: Path

    @classmethod
    def of(cls, output: Path) -> Paths:
        return cls(output, output.with_name(output.name + PARTIAL))

    @property
    def manifest(self) -> Path:
        return self.partial / MANIFEST


def is_complete(paths: Paths) -> bool:
    """OUTPUT holds a finished run's manifest and no partial is there."""
    if paths.partial.exists():
        return False
    try:
        lines = (paths.target / MANIFEST).read_text(encoding="utf-8").splitlines()
        return bool(lines) and json.loads(lines[-1]).get("complete") is True
    except (OSError, ValueError, AttributeError):
        return False


def read(path: Path) -> tuple[Optional[dict[str, Any]], list[dict[str, Any]], int]:
    """A manifest's header (None if unreadable), its complete shard lines and the byte
    length they span (a torn line and all after it are left out)."""
    lines = path.read_bytes().split(b"\n")[:-1]
    try:
        head = json.loads(lines[0]) if lines else None
    except ValueError:
        head = None
    if not isinstance(head, dict) or head.get("treexp_shards") != LAYOUT:
        return None, [], 0
    entries, end = [], len(lines[0]) + 1
    for line in lines[1:]:
        try:
            entry = json.loads(line)
        except ValueError:
            break
        if not isinstance(entry, dict) or not isinstance(entry.get("shard"), str):
            break
        entries.append(entry)
        end += len(line) + 1
    return head, entries, end


def _busy(paths: Paths) -> UserError:
    """The refusal of an output folder whose manifest another live run holds locked."""
    return UserError(f"--output {paths.target}: another run is writing {paths.partial}")


class Manifest:
    """The manifest of the run under way, locked; ``commit`` appends and flushes a line."""

    def __init__(self, paths: Paths, head: dict[str, Any], resume: bool) -> None:
        self.paths = paths
        self.committed: dict[str, dict[str, Any]] = {}
        start_over = f"delete {paths.partial} to start over"
        if paths.partial.is_dir():
            if not resume:
                if paths.manifest.is_file():  # a live run holds the lock: say so, not "delete it"
                    with paths.manifest.open("rb") as probe:
                        try:
                            fcntl.flock(probe.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                        except OSError:
                            raise _busy(paths) from None
                        fcntl.flock(probe.fileno(), fcntl.LOCK_UN)
                raise UserError(
                    f"--output {paths.target}: {paths.partial} holds an interrupted run; add --resume to finish "
                    f"it, or {start_over}"
                )
            if not paths.manifest.is_file():
                raise UserError(f"--resume: {paths.partial} has no manifest {MANIFEST}; {start_over}")
            self.file: IO[bytes] = paths.manifest.open("r+b")
            self._lock()
            found, entries, end = read(paths.manifest)
            if found is None:
                raise UserError(f"--resume: {paths.manifest} is not a manifest this version can read; {start_over}")
            for key in CHECKED:
                if found.get(key) != head.get(key):
                    raise UserError(
                        f"--resume: {paths.partial} was made with {key} {found.get(key)!r}, not {head.get(key)!r}; "
                        f"give the same INPUT and options, or {start_over}"
                    )
            self.file.truncate(end)
            self.file.seek(end)
            listed = {entry["shard"]: entry for entry in entries}
            self.committed = {
                name: entry
                for name, entry in listed.items()
                if all((paths.partial / file).is_file() for file in entry.get("files", []))
            }
            self._clear_unlisted()
        else:
            if paths.partial.exists():
                raise UserError(f"--output {paths.target}: {paths.partial} is in the way (not a directory); move it")
            paths.partial.mkdir()
            self.file = paths.manifest.open("wb")
            self._lock()
            self._append(head)
        self.head = head

    def _lock(self) -> None:
        try:
            fcntl.flock(self.file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.file.close()
            raise _busy(self.paths) from None

    def _clear_unlisted(self) -> None:
        keep = {MANIFEST} | {file for entry in self.committed.values() for file in entry.get("files", [])}
        for path in self.paths.partial.iterdir():
            if path.name not in keep and path.is_file():
                path.unlink()

    def _append(self, entry: dict[str, Any]) -> None:
        self.file.write((json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8"))
        self.file.flush()

    def commit(self, entry: dict[str, Any]) -> None:
        """List a shard whose files are in place; a shard listed already is not listed twice."""
        if entry["shard"] in self.committed:
            return
        self._append(entry)
        self.committed[entry["shard"]] = entry

    def finish(self) -> dict[str, Any]:
        """Rewrite the manifest in shard order with its completion line, then rename the
        directory to OUTPUT. Returns the completion line."""
        entries = [self.committed[name] for name in sorted(self.committed)]
        done = {
            "complete": True,
            "shards": len(entries),
            "docs": sum(int(e["docs"]) for e in entries),
            "sentences": sum(int(e["sentences"]) for e in entries),
            "bad": sum(int(e["bad"]) for e in entries),
        }
        lines = [self.head, *entries, done]
        write_file(self.paths.partial, MANIFEST, "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines))
        self.close()
        if self.paths.target.is_dir() and not any(self.paths.target.iterdir()):
            self.paths.target.rmdir()
        os.replace(self.paths.partial, self.paths.target)
        return done

    def close(self) -> None:
        if not self.file.closed:
            self.file.close()


def write_file(folder: Path, name: str, data: bytes | str) -> None:
    """Write ``folder/name`` whole or not at all: a temporary file (``.`` first, unique
    per call), flushed to disk, renamed into place."""
    temporary = folder / f".{name}.{uuid.uuid4().hex}.tmp"
    try:
        with temporary.open("wb") as file:
            file.write(data.encode("utf-8") if isinstance(data, str) else data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, folder / name)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
