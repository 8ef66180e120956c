"""Files written whole or not at all, and where a path lies."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator, Optional, Tuple, Union


def write_atomic(path: Path, data: Union[str, bytes]) -> None:
    """Write ``data`` (text as UTF-8) to a temporary file beside ``path`` (or the file a symlink
    ``path`` points at), then rename it into place: ``path`` is whole, old or new."""
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    handle, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data.encode("utf-8") if isinstance(data, str) else data)
            file.flush()
            os.fsync(file.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(name, 0o666 & ~umask)
        os.replace(name, target)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise


@contextmanager
def folder_replacement(folder: Path) -> Iterator[Path]:
    """A copy of ``folder`` (``<name>.partial`` beside it) to change inside the block. Leaving
    the block renames the copy into ``folder``'s place and removes the old folder; leaving it
    by an exception (``SystemExit`` too) removes the copy and keeps ``folder`` as it was."""
    staged = folder.with_name(folder.name + ".partial")
    old = folder.with_name(folder.name + ".old")
    for path in (staged, old):
        shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(folder, staged)
    try:
        yield staged
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    folder.rename(old)
    staged.rename(folder)
    shutil.rmtree(old)


def config_without_sections(text: str, section: str) -> str:
    """A config's ``text`` without the section ``[section]`` and its subsections ``[section.…]``."""
    header = re.compile(rf"\[{re.escape(section)}[.\]]")
    out, keep = [], True
    for line in text.splitlines():
        if line.startswith("["):
            keep = not header.match(line)
        if keep:
            out.append(line)
    return "\n".join(out).rstrip("\n") + "\n"


def within(path: Path, folder: Path, itself: bool = False) -> bool:
    """Whether ``path`` lies inside ``folder`` (or is it, with ``itself``), as written or once
    symlinks are resolved: either spelling of either path."""
    places = {Path(os.path.abspath(folder)), folder.resolve()}
    candidates = {Path(os.path.abspath(path)), path.resolve()}
    return any((itself and c == p) or p in c.parents for c in candidates for p in places)


def home_folder() -> Optional[Path]:
    """The user's home folder, or None where it cannot be known (no HOME, no passwd entry)."""
    try:
        return Path.home()
    except RuntimeError:
        return None


def held_workplace(folder: Path) -> Optional[str]:
    """ "the current folder" or "your home folder" when ``folder`` is it or holds it (replacing
    ``folder`` would empty the place the user works in), else None."""
    for place, what in ((Path.cwd(), "the current folder"), (home_folder(), "your home folder")):
        if place is not None and within(place, folder, itself=True):
            return what
    return None


def held_input(folder: Path, sources: Iterable[Tuple[str, Optional[Path]]]) -> Optional[Tuple[str, Path]]:
    """The first ``(option, path)`` of ``sources`` whose path exists (or is a link) and is
    ``folder`` or lies in it (:func:`within`): an input that replacing ``folder`` would delete."""
    for option, path in sources:
        if path is not None and (path.exists() or path.is_symlink()) and within(path, folder, itself=True):
            return option, path
    return None
