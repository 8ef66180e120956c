"""What the commands share: the user-error type, the common options, path checks."""

from __future__ import annotations

import math
import os
import signal
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional, TypeVar

import typer

from spacy_treexp.io import inputs
from spacy_treexp.io.files import held_input, held_workplace, within, write_atomic
from spacy_treexp.io.inputs import OnBad, Reader

PROG = "spacy-treexp"
STDIO = "-"

T = TypeVar("T")


class UserError(Exception):
    """A mistake in the command line or its files: shown as one line, exit status 2."""


class StopRun(BaseException):
    """Ends a command with exit status ``code`` from inside a callback (``--strict``).

    A BaseException, so that no ``except Exception`` between the callback and the command
    (a pipeline's error handler, say) takes it for a failed document."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


# Options of every command that runs a pipeline.
Model = Annotated[
    Optional[str],
    typer.Option(
        "--model",
        help=(
            "spaCy pipeline name or path (default: the shipped model; en_treexp_ewt_ensemble: it with a second "
            "parser, their product; en_treexp_ewt_mixture: with the second parser as a mixture member)."
        ),
    ),
]


def _import_code(path: Optional[Path]) -> Optional[Path]:
    """``--code``: import the Python file (registered functions, such as a custom score
    source named in the pipeline's config) while the command line is read, before any
    pipeline is loaded, as spaCy's own ``--code``."""
    if path is not None:
        if not path.is_file():
            raise typer.BadParameter(f"{path}: no such file", param_hint="--code")
        from spacy.util import import_file

        try:  # spaCy's import_code prints its own two lines and exits 1
            import_file("python_code", path)
        except Exception as e:
            message = " ".join(f"{type(e).__name__}: {e}".split())
            raise typer.BadParameter(f"{path}: cannot import it ({message})", param_hint="--code") from e
    return path


Code = Annotated[
    Optional[Path],
    typer.Option(
        "--code",
        metavar="FILE",
        callback=_import_code,
        help="A Python file to import first (registered functions the pipeline's config names, e.g. a score source).",
    ),
]
Stanza = Annotated[
    Optional[Path],
    typer.Option("--stanza", metavar="DIR", help="A Stanza pipeline directory instead of a spaCy pipeline."),
]


def _not_huge(value: int) -> int:
    """An int option no larger than what ``itertools.islice`` and numpy take, or a usage error."""
    if value > sys.maxsize:
        raise typer.BadParameter(f"{value}: too large (at most {sys.maxsize})")
    return value


def bounded_float(low: float, high: Optional[float] = None) -> Callable[[str], float]:
    """The parser of a float option: a finite number from ``low`` to ``high``, or a usage error
    naming it (typer's own ``min`` / ``max`` check lets ``nan`` through to a message about the
    bound, "should be less than or equal to 1")."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise typer.BadParameter(f"{text!r} is not a number") from None
        if not math.isfinite(value) or value < low or (high is not None and value > high):
            bound = f">= {low:g}" if high is None else f"from {low:g} to {high:g}"
            raise typer.BadParameter(f"{text}: expected a finite number {bound}")
        return value

    return parse


BatchSize = Annotated[int, typer.Option("--batch-size", min=1, callback=_not_huge, help="Documents per batch.")]
Gpu = Annotated[int, typer.Option("--gpu", min=-1, help="GPU id (-1: CPU).")]
Quiet = Annotated[bool, typer.Option("--quiet", help="No progress bar.")]


class CalibrationKind(str, Enum):
    """The calibration maps (:mod:`spacy_treexp.calibration`): ``calibrate --kind`` and
    ``train --calibration``."""

    distance = "distance"
    temperature = "temperature"


class StanzaTags(str, Enum):
    """The POS tags a Stanza depparse reads in ``evaluate``, ``calibrate`` and ``audit``: the CoNLL-U
    file's gold tags, the folder's tagger, or ``auto`` (gold when it has no ``pos.pt``)."""

    auto = "auto"
    gold = "gold"
    predicted = "predicted"

    @property
    def gold_tags(self) -> Optional[bool]:
        """True (the file's gold tags), False (the folder's tagger) or None (auto)."""
        return {"auto": None, "gold": True, "predicted": False}[self.value]


StanzaTagsOption = Annotated[
    StanzaTags,
    typer.Option(
        "--stanza-tags",
        help="POS tags for Stanza's depparse: the CoNLL-U file's gold tags or the folder's tagger "
        "(auto: gold when the folder has no pos.pt).",
    ),
]


class InputFormat(str, Enum):
    txt = "txt"
    jsonl = "jsonl"
    conllu = "conllu"


InputFormatOption = Annotated[
    Optional[InputFormat],
    typer.Option("--input-format", help="Format of INPUT (default: from its suffix; needed for '-')."),
]


def is_stdio(path: Path) -> bool:
    return str(path) == STDIO


def check_input_file(path: Path, what: str) -> None:
    """An input file that exists and is a file, or a UserError naming it."""
    if not path.exists():
        raise UserError(f"{what} {path}: no such file")
    if path.is_dir():
        raise UserError(f"{what} {path}: is a directory, not a file")
    if not path.is_file():  # a pipe or a device: this command reads its input more than once
        raise UserError(f"{what} {path}: not a regular file (a pipe or a device); save it to a file first")


def check_output_path(path: Path, sources: Iterable[Path], what: str = "--output", folder: bool = False) -> None:
    """An output path in an existing, writable folder that is none of ``sources`` (a
    symlink, a hard link or another spelling of an input is refused too); checked before
    anything is written, so a mistake never clobbers a file. ``folder``: the output is a
    directory the command makes, else a file."""
    if not folder and path.is_dir():
        raise UserError(f"{what} {path}: is a directory; give a file path")
    if folder and path.exists() and not path.is_dir():
        raise UserError(f"{what} {path}: is a file; give a directory path")
    parent = path.parent
    if not parent.is_dir():
        above = next((p for p in parent.parents if p.exists() or p.is_symlink()), None)
        if parent.exists() or (above is not None and not above.is_dir()):
            raise UserError(f"{what} {path}: {parent if parent.exists() else above} is a file, not a folder")
        raise UserError(f"{what} {path}: no such folder {parent}")
    for source in sources:
        if same_file(path, source):
            raise UserError(f"{what} {path} is the input file; write to another path")
    for folder_written in (parent, path) if folder and path.is_dir() else (parent,):
        if not os.access(folder_written, os.W_OK | os.X_OK):
            raise UserError(f"{what} {path}: folder {folder_written} is not writable")
        try:  # os.access says yes to root on /proc, /sys or a root-squashed share: a file made there says
            with tempfile.TemporaryFile(dir=folder_written):
                pass
        except OSError as e:
            raise UserError(f"{what} {path}: cannot write in folder {folder_written} ({e.strerror or e})") from e


def check_not_holding(folder: Path, sources: Iterable[tuple[str, Optional[Path]]], what: str = "--out") -> None:
    """An output folder that a command replaces whole (``--force``) must be none of the
    inputs and hold none of them, nor the current or the home folder: replacing it would delete
    them. ``sources``: (option, path)."""
    if not folder.is_dir():
        return
    workplace = held_workplace(folder)
    if workplace is not None:
        raise UserError(
            f"{what} {folder}: holds {workplace}, which replacing the folder would empty; write to another folder"
        )
    held = held_input(
        folder, [(option, source) for option, source in sources if source is None or not is_stdio(source)]
    )
    if held is not None:
        raise UserError(
            f"{what} {folder}: holds the input {held[0]} {held[1]}, which replacing the folder would "
            "delete; write to another folder"
        )


def check_not_inside(path: Path, folder: Optional[Path], option: str, what: str = "--out") -> None:
    """An output that a command writes must not lie inside the input folder ``folder`` (a
    pipeline's): written there, it would replace a part of that input (a component's folder
    with a whole pipeline, say). ``option`` names the input in the message."""
    if folder is not None and folder.is_dir() and within(path, folder):
        raise UserError(
            f"{what} {path}: inside the input {option} {folder}, which writing there would change; "
            "write to a folder outside it"
        )


def same_file(path: Path, source: Path) -> bool:
    """Whether ``path`` names the existing input ``source``: the same path once symlinks,
    ``.`` and ``..`` are resolved, or another link (hard or symbolic) to the same file."""
    if is_stdio(source) or is_stdio(path) or not source.exists():
        return False
    if path.resolve() == source.resolve():
        return True
    try:
        return os.path.samefile(path, source)
    except OSError:  # path does not exist (yet)
        return False


def write_output(path: Path, data: str, what: str = "--output") -> None:
    """A command's output file written whole (:func:`~spacy_treexp.io.files.write_atomic`);
    a write that fails (a full disk) ends the run with exit status 1, as any failed run, in
    one line naming the path, and the old file stays."""
    try:
        write_atomic(path, data)
    except OSError as e:
        warn(f"{PROG}: {what} {path}: cannot write ({e.strerror or e}); the file is as it was")
        raise StopRun(1) from e


def open_reader(path: Path, fmt: Optional[InputFormat], on_bad: OnBad) -> Reader:
    """The reader of INPUT (``-``: stdin; a pipe or a device is read as a stream), once its format and
    existence are checked."""
    if is_stdio(path):
        if fmt is None:
            raise UserError("INPUT -: reading stdin needs --input-format (txt, jsonl or conllu)")
        return Reader(sys.stdin.buffer, on_bad, fmt.value)
    name = fmt.value if fmt is not None else inputs.format_of(path)
    if name is None and path.is_dir():
        check_input_file(path, "INPUT")  # says it is a directory: no suffix would make it readable
    if name is None:
        raise UserError(f"INPUT {path}: expected a .txt, .jsonl or .conllu file (or give --input-format)")
    if path.exists() and not path.is_file() and not path.is_dir():
        # a pipe (``<(zcat in.txt.gz)``) or /dev/stdin: read once, as a stream, like '-'
        return Reader(path.open("rb"), on_bad, name)
    check_input_file(path, "INPUT")
    return Reader(path, on_bad, name)


def take(iterable: Iterable[T], limit: int) -> Iterator[T]:
    """The first ``limit`` values."""
    for k, value in enumerate(iterable):
        if k >= limit:
            return
        yield value


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt meanwhile, so a killed run ends like Ctrl-C."""
    try:
        previous = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread: signals cannot be handled here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def warn(message: str) -> None:
    """A line on stderr (progress, bad input lines)."""
    print(message, file=sys.stderr, flush=True)


class Skipped:
    """Counts the bad inputs a command skips (unreadable lines, documents the pipeline fails
    on), warning of each: ``skipped(message)``. The one rule of a run's end: a run that skipped
    inputs and parsed none failed (exit status 1): :meth:`nothing_parsed`, and for
    ``annotate`` (here or on Ray, whose shards report ``count``) :meth:`annotate_status`."""

    def __init__(self, count: int = 0) -> None:
        self.count = count

    def __call__(self, message: str) -> None:
        self.count += 1
        warn(message)

    def failed(self, parsed: int) -> bool:
        """Whether inputs were skipped and ``parsed`` is 0: a failed run."""
        return bool(self.count) and not parsed

    def nothing_parsed(self, parsed: int) -> bool:
        """True, after saying so, when the run failed (:meth:`failed`)."""
        if self.failed(parsed):
            warn(f"{self.count} bad input(s) skipped; no input could be parsed, nothing written (exit status 1)")
            return True
        return False

    def annotate_status(self, docs: int, where: object, annotated: int) -> int:
        """``annotate``'s exit status, after saying how many inputs were skipped beside the
        ``docs`` documents in ``where``: 1 when the run failed (:meth:`failed`) with
        ``annotated`` documents of its own."""
        if self.count:
            warn(f"{self.count} bad input(s) skipped; {docs} documents written to {where}.")
        if self.failed(annotated):
            warn("no input could be annotated (exit status 1)")
            return 1
        return 0
