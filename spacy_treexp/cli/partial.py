"""Outputs that appear whole or not at all, and what ``annotate --resume`` starts from.

Layout. ``annotate`` never writes OUTPUT itself. A ``.jsonl`` or ``.conllu`` OUTPUT is
written as the file ``OUTPUT.partial``, a ``.spacy`` OUTPUT as the directory
``OUTPUT.partial`` of DocBin shards, and beside it ``OUTPUT.partial.manifest`` records the
run in JSON lines: first a header with what the run was made from (:func:`run_header`),
then, for a file, one line per finished document, ``{"line": L, "end": B}`` (the document
that starts on input line L ends at byte B of the partial), and for a ``.spacy`` directory
one line per shard, ``{"shard": "00003.spacy", "docs": N, "line": L}`` (L: the input line
of its last document). A record or shard is flushed before its manifest line is written,
so the manifest never lists what is not there. When the run completes, ``OUTPUT.partial``
is renamed to OUTPUT (``os.replace``: an existing OUTPUT is replaced whole, never
truncated or half overwritten) and the manifest is removed. ``render`` writes its page to
a temporary file beside the target and renames it the same way (:func:`spacy_treexp.io.files.write_atomic`).

Interrupted runs. After Ctrl-C or SIGTERM (or an error, or ``--strict``) the partial
holds exactly the records the manifest lists (a ``.spacy`` run first writes the documents
it holds as one more shard; :func:`settle`). After SIGKILL or a crash the partial may end
in a torn or unlisted record and the manifest in a torn line; a resumed run drops them
(:func:`read_manifest`) and makes those documents again.

Resume rule. ``--resume`` checks that the header matches the command (format, input file,
its size and SHA-256, input format, model, Stanza folder, samples, package version; anything else,
such as ``--batch-size`` or ``--n-process``, changes a result only by float32 rounding),
keeps what the manifest lists, skips the input documents that start on or before the last
listed line (an input position -- a .txt/.jsonl line, the first line of a CoNLL-U sentence
-- never a text), and appends the rest: the documents, trees, relations and samples an
uninterrupted run writes (samples are seeded per sentence), in the same order, with no gap
or duplicate. The probabilities agree to about 1e-5, not always to the last printed digit:
the parser's float32 matrix products round differently when the documents after the resume
point are batched differently (measured on 44 EWT dev texts: ``--batch-size`` 1, 7 and 64
differ by at most 4e-6, trees identical; a tree or sample could differ only where two
choices are that close). For ``.spacy`` the same Docs (shard sizes may differ). Without a
partial, ``--resume`` simply runs; with a complete OUTPUT and no partial, it says so and
does nothing. Without ``--resume``, an existing partial is never
overwritten: the command refuses and says how to resume or start over. A run that reads
standard input or a pipe cannot be resumed (nothing can check that a second run reads the same
input): ``--resume`` refuses it, and the interrupted run says to start over.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Callable, Optional

from spacy_treexp import __version__
from spacy_treexp.cli.common import UserError, is_stdio, warn

LAYOUT = 1
PARTIAL = ".partial"
MANIFEST = ".partial.manifest"
_SHARD_FILE = re.compile(r"[0-9]{5}\.spacy(\.tmp)?")

#: Header fields a resumed run must match, and how a message names each.
CHECKED = {
    "format": "--output-format",
    "input": "INPUT",
    "input_format": "--input-format",
    "input_size": "INPUT size",
    "input_sha256": "INPUT content",
    "model": "--model",
    "stanza": "--stanza",
    "samples": "--samples",
    "version": "spacy-treexp",
}


@dataclass(frozen=True)
class OutputPaths:
    """Where a run writes: ``target`` (OUTPUT, or the file a symlink OUTPUT points at),
    ``partial`` (the output under way) and ``manifest``."""

    target: Path
    partial: Path
    manifest: Path

    @classmethod
    def of(cls, output: Path) -> OutputPaths:
        target = Path(os.path.realpath(output)) if output.is_symlink() else output
        return cls(target, target.with_name(target.name + PARTIAL), target.with_name(target.name + MANIFEST))


@dataclass
class Kept:
    """What an interrupted run left and a resumed one keeps: the documents starting on
    input lines up to ``line``; ``end`` bytes of a partial file (or ``shards`` of a
    directory) and ``manifest_end`` bytes of the manifest."""

    line: int = 0
    docs: int = 0
    end: int = 0
    manifest_end: int = 0
    shards: list[str] = field(default_factory=list)


def _where(value: Optional[Any]) -> Optional[str]:
    """A --model or --stanza value as the header stores it: an absolute path when it
    names one, so that a resumed run from another folder still matches."""
    if value is None:
        return None
    path = Path(value)
    return str(path.resolve()) if path.exists() else str(value)


def run_header(
    *, fmt: str, input: Path, input_format: str, model: Optional[str], stanza: Optional[Path], samples: int
) -> dict[str, Any]:
    """The manifest's first line: what the output is made from."""
    stdin = is_stdio(input)
    return {
        "treexp_partial": LAYOUT,
        "format": fmt,
        "input": "-" if stdin else str(input.resolve()),
        "input_format": input_format,
        "input_size": None if stdin else input.stat().st_size,
        "input_sha256": None if stdin else input_digest(input),
        "model": _where(model),
        "stanza": _where(stanza),
        "samples": samples,
        "version": __version__,
    }


def is_complete(paths: OutputPaths, folder: bool) -> bool:
    """OUTPUT is there and no partial is: a finished run (a ``.spacy`` OUTPUT must hold something)."""
    if paths.partial.exists() or not paths.target.exists():
        return False
    return not (folder and paths.target.is_dir() and not any(paths.target.iterdir()))


def prepare(paths: OutputPaths, header: dict[str, Any], *, resume: bool, folder: bool) -> Optional[Kept]:
    """What a run starts from, read (not written) before anything is: None for a new
    output, or what the partial keeps for ``--resume``. A partial without ``--resume``,
    or one that does not match ``header``, is a UserError: nothing is overwritten. An empty
    partial beside a manifest without a complete first line (a run killed before it wrote
    anything) is removed with it, and the run starts over."""
    if not paths.partial.exists() and not paths.partial.is_symlink():
        return None
    kind = "directory" if folder else "file"
    if paths.partial.is_symlink() or paths.partial.is_dir() != folder:
        raise UserError(f"--output {paths.target}: {paths.partial} is in the way (not a {kind}); move it away")
    if not resume:
        raise UserError(
            f"--output {paths.target}: {paths.partial} holds an interrupted run; add --resume to finish it, "
            f"or delete {paths.partial} and {paths.manifest} to start over"
        )
    start_over = f"delete {paths.partial} and {paths.manifest} to start over"
    if not paths.manifest.is_file():
        raise UserError(f"--resume: {paths.partial} has no manifest {paths.manifest}; {start_over}")
    found, kept = read_manifest(paths, folder)
    if found is None and _holds_nothing(paths):
        # stopped between creating the two and writing the header: nothing was kept to resume
        warn(f"--resume: {paths.partial} is empty and {paths.manifest} has no header; starting over")
        paths.partial.rmdir() if paths.partial.is_dir() else paths.partial.unlink()
        paths.manifest.unlink()
        return None
    if found is None:
        raise UserError(f"--resume: {paths.manifest} is not a manifest this version can read; {start_over}")
    _check_header(found, header, paths.partial, start_over)
    return kept


def _holds_nothing(paths: OutputPaths) -> bool:
    """The partial is empty and the manifest has no complete line."""
    if b"\n" in paths.manifest.read_bytes():
        return False
    return not any(paths.partial.iterdir()) if paths.partial.is_dir() else paths.partial.stat().st_size == 0


def read_manifest(paths: OutputPaths, folder: bool) -> tuple[Optional[dict[str, Any]], Kept]:
    """The manifest's header (None if unreadable) and what its complete lines list that
    the partial holds: a torn last line, an entry past the end of the partial file or
    naming a missing shard, and all after it, are left out."""
    lines = paths.manifest.read_bytes().split(b"\n")[:-1]  # a torn last line has no b"\n"
    try:
        header = json.loads(lines[0]) if lines else None
    except ValueError:
        header = None
    if not isinstance(header, dict) or header.get("treexp_partial") != LAYOUT:
        return None, Kept()
    entries, offset = [], len(lines[0]) + 1
    ends = [offset]
    for line in lines[1:]:
        try:
            entries.append(json.loads(line))
        except ValueError:
            break
        offset += len(line) + 1
        ends.append(offset)
    keep = _kept_shards(paths.partial, entries) if folder else _kept_records(paths.partial, entries)
    kept = entries[:keep]
    return header, Kept(
        line=int(kept[-1]["line"]) if kept else 0,
        docs=sum(int(e.get("docs", 1)) for e in kept),
        end=int(kept[-1]["end"]) if kept and not folder else 0,
        manifest_end=ends[keep],
        shards=[str(e["shard"]) for e in kept] if folder else [],
    )


def settle(paths: OutputPaths, folder: bool) -> Optional[Kept]:
    """After an interrupt or an error: cut the partial and the manifest to what the
    manifest lists (a record or shard written when the run stopped, but not listed, is
    dropped), so that the partial holds complete records only. None if it cannot."""
    try:
        _, kept = read_manifest(paths, folder)
        with paths.manifest.open("r+b") as file:
            file.truncate(kept.manifest_end)
        if folder:
            clear_unlisted_shards(paths.partial, kept)
        else:
            with paths.partial.open("r+b") as file:
                file.truncate(kept.end)
    except OSError:  # the next --resume does the same
        return None
    return kept


def input_digest(path: Path) -> Optional[str]:
    """The SHA-256 of a regular file's bytes (read once, in blocks: about a second per GB), or
    None for a pipe or device, which reading would consume and which no resumed run can check."""
    if not path.is_file():
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def can_resume(header: dict[str, Any]) -> bool:
    """Whether a run from this header can be resumed: its input is a file whose content a
    resumed run can check (not standard input or a pipe)."""
    return header.get("input_sha256") is not None


def _check_header(found: dict[str, Any], expected: dict[str, Any], partial: Path, start_over: str) -> None:
    if not can_resume(expected):
        raise UserError(
            f"--resume: INPUT {expected['input']} is standard input or a pipe, whose content cannot be checked "
            f"against what {partial} was made from (a resumed run would join two inputs); {start_over}, or save "
            "the input to a file and give that"
        )
    for key, label in CHECKED.items():
        old, new = found.get(key), expected.get(key)
        if old == new or (key == "input_sha256" and key not in found):  # a partial made before the digest
            continue
        if key == "input_sha256":
            raise UserError(
                f"--resume: INPUT {expected['input']} changed since {partial} was made (same size, other "
                f"content); {start_over}"
            )
        if key == "input_size":
            raise UserError(
                f"--resume: INPUT {expected['input']} changed since {partial} was made "
                f"({old} bytes then, {new} now); {start_over}"
            )
        raise UserError(
            f"--resume: {partial} was made with {_shown(label, old)}, not {_shown(label, new)}; "
            f"give the same options, or {start_over}"
        )


def _shown(label: str, value: Any) -> str:
    return f"no {label}" if value is None else f"{label} {value}"


def _kept_records(partial: Path, entries: list[Any]) -> int:
    """How many leading entries name bytes the partial file holds."""
    size = partial.stat().st_size
    keep = 0
    for entry in entries:
        if not (isinstance(entry, dict) and isinstance(entry.get("line"), int) and isinstance(entry.get("end"), int)):
            break
        if not 0 <= entry["end"] <= size:
            break
        keep += 1
    return keep


def _kept_shards(partial: Path, entries: list[Any]) -> int:
    """How many leading entries name shards the partial directory holds."""
    keep = 0
    for k, entry in enumerate(entries):
        if not (isinstance(entry, dict) and entry.get("shard") == f"{k:05d}.spacy"):
            break
        if not (isinstance(entry.get("line"), int) and isinstance(entry.get("docs"), int)):
            break
        if not (partial / str(entry["shard"])).is_file():
            break
        keep += 1
    return keep


class Manifest:
    """The manifest of a run under way: a new one with ``header``, or the kept part of an
    interrupted run's. ``append`` writes and flushes one line."""

    def __init__(self, path: Path, header: dict[str, Any], kept: Optional[Kept]) -> None:
        self.path = path
        if kept is None:
            self.file: IO[bytes] = path.open("wb")
            self.end = 0
            self.append(header)
        else:
            self.file = path.open("r+b")
            self.file.truncate(kept.manifest_end)
            self.file.seek(kept.manifest_end)
            self.end = kept.manifest_end

    def append(self, entry: dict[str, Any]) -> None:
        data = (json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8")
        self.file.write(data)
        self.file.flush()
        self.end += len(data)

    def close(self) -> None:
        if not self.file.closed:
            try:
                self.file.close()
            except OSError:  # a line cut short (a full disk): read_manifest drops a torn line
                pass

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)


class PartialFile:
    """``OUTPUT.partial`` of a ``.jsonl`` or ``.conllu`` run: ``add`` appends one
    document's record, flushed, and then its manifest line; ``finish`` renames the file to
    OUTPUT; ``close`` (after an interrupt or an error) leaves exactly the listed records."""

    def __init__(self, paths: OutputPaths, header: dict[str, Any], kept: Optional[Kept]) -> None:
        self.paths = paths
        self.manifest = Manifest(paths.manifest, header, kept)
        if kept is None:
            self.file: IO[bytes] = paths.partial.open("wb")
        else:
            self.file = paths.partial.open("r+b")
            self.file.truncate(kept.end)
            self.file.seek(kept.end)
        self.end = kept.end if kept else 0
        self.docs = kept.docs if kept else 0
        self.where = str(paths.partial)
        self.done = False

    def add(self, text: str, line: int) -> None:
        data = text.encode("utf-8")
        self.file.write(data)
        self.file.flush()
        self.end += len(data)
        self.manifest.append({"line": line, "end": self.end})
        self.docs += 1

    def finish(self) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        self.done = True
        os.replace(self.paths.partial, self.paths.target)
        self.manifest.remove()
        self.where = str(self.paths.target)

    def close(self) -> None:
        if self.done:
            return
        self.done = True
        try:
            self.file.close()
        except OSError:  # the record being written when the disk filled: settle drops it
            pass
        self.manifest.close()
        kept = settle(self.paths, folder=False)
        if kept is not None:
            self.docs = kept.docs


def discard_partial(output: Path) -> None:
    """Remove OUTPUT's partial (file or folder of shards) and its manifest: a run that
    wrote no document leaves nothing."""
    paths = OutputPaths.of(output)
    if paths.partial.is_dir():
        shutil.rmtree(paths.partial, ignore_errors=True)
    else:
        paths.partial.unlink(missing_ok=True)
    paths.manifest.unlink(missing_ok=True)


def clear_unlisted_shards(partial: Path, kept: Kept) -> None:
    """Remove the shard files of a partial directory its manifest does not list (written
    or half written when the run was killed): they are made again."""
    listed = set(kept.shards)
    for path in partial.iterdir():
        if _SHARD_FILE.fullmatch(path.name) and path.name not in listed:
            path.unlink()


def replace_folder(target: Path, write: Callable[[Path], None]) -> None:
    """Have ``write`` fill a temporary folder beside ``target``, then put it in ``target``'s
    place (an old ``target`` is moved aside first and removed last): ``target`` is whole, old
    or new, never half-written. A failed ``write`` leaves ``target`` as it was."""
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    old = staging.with_name(staging.name + ".old")
    try:
        write(staging)
        if target.exists():
            target.rename(old)
        try:
            staging.rename(target)
        except BaseException:
            if old.exists() and not target.exists():
                old.rename(target)
            raise
    finally:
        for leftover in (staging, old):
            if leftover.exists():
                shutil.rmtree(leftover)
