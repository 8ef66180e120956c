"""Documents to annotate, read from .txt, .jsonl or .conllu, without spaCy.

A :class:`Reader` yields ``(item, context)`` pairs in file order. ``item`` is the raw text
of a document (.txt: one document per non-empty line; .jsonl: an object's ``"text"``), or
``(words, spaces)`` for a CoNLL-U sentence, whose gold tokens and sentence are kept.
``context`` carries what a writer needs to put the document back: ``"line"`` (the line
it starts on), ``"meta"`` (.jsonl: the object's other fields) and ``"sentence"`` (.conllu:
the :class:`~spacy_treexp.io.conllu.ConlluSentence`, verbatim). A line that cannot be read
is reported to ``on_bad(line, message)`` and skipped; ``on_bad`` may raise to stop.

``start_after`` (a resumed run, see ``annotate --resume``) skips, without reporting them,
the documents and bad lines that start on that line or before: documents are identified
by the input line they start on, never by their text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO, Any, Union

from spacy_treexp.io.conllu import ConlluError, read_conllu

#: Input formats, and the file suffix of each.
FORMATS = ("txt", "jsonl", "conllu")
SUFFIXES = {f".{name}": name for name in FORMATS}

#: A document: raw text, or (words, spaces) of one CoNLL-U sentence.
Item = Union[str, tuple[list[str], list[bool]]]
Context = dict[str, Any]
OnBad = Callable[[int, str], None]


def format_of(path: Union[str, Path]) -> str | None:
    """The input format a file name implies by its suffix (None if none does)."""
    return SUFFIXES.get(Path(path).suffix.lower())


class Reader:
    """``(item, context)`` pairs of a file or of a binary stream (e.g. ``sys.stdin.buffer``).

    ``fmt`` is one of :data:`FORMATS`; None takes it from the path's suffix (a stream needs
    it). A missing file raises FileNotFoundError, an unknown format ValueError, both here.
    Documents and bad lines that start on line ``start_after`` or before are skipped
    unreported.
    """

    def __init__(
        self, source: Union[str, Path, IO[bytes]], on_bad: OnBad, fmt: str | None = None, start_after: int = 0
    ) -> None:
        self.path: Path | None = None
        self.stream: IO[bytes] | None = None
        if isinstance(source, (str, Path)):
            self.path = Path(source)
            fmt = fmt or format_of(source)
            if fmt is not None and not self.path.is_file():
                raise FileNotFoundError(f"no such input file: {source}")
            self.name = str(source)
        else:
            self.stream = source
            self.name = getattr(source, "name", None) or "<stdin>"
        if fmt not in FORMATS:
            raise ValueError(f"input must be one of {', '.join(FORMATS)}, got {fmt or self.name!r}")
        self.format = fmt
        self.on_bad = on_bad
        self.start_after = start_after

    @property
    def gold_sentences(self) -> bool:
        """Whether each item is one gold sentence (CoNLL-U) that must not be re-split."""
        return self.format == "conllu"

    def count(self) -> int | None:
        """Number of documents, by one cheap pass over the file (None for a stream)."""
        if self.path is None:
            return None
        with self.path.open("rb") as handle:
            if self.format != "conllu":
                return sum(1 for number, line in enumerate(handle) if not empty_line(line, number == 0))
            total, inside = 0, False
            for line in handle:
                blank = not line.strip()
                if not blank and not line.startswith(b"#") and not inside:
                    total, inside = total + 1, True
                elif blank:
                    inside = False
            return total

    def __iter__(self) -> Iterator[tuple[Item, Context]]:
        if self.path is None:
            assert self.stream is not None
            yield from self._read(self.stream)
            return
        with self.path.open("rb") as handle:
            yield from self._read(handle)

    def _read(self, handle: IO[bytes]) -> Iterator[tuple[Item, Context]]:
        start_after = self.start_after

        def on_bad(line: int, message: str) -> None:
            if line > start_after:
                self.on_bad(line, message)

        if self.format == "conllu":
            items = read_conllu_items(handle, on_bad)
        elif self.format == "jsonl":
            items = read_jsonl_items(_after(handle, start_after), on_bad)
        else:
            items = read_txt_items(_after(handle, start_after), on_bad)
        return (pair for pair in items if pair[1]["line"] > start_after)


def _after(handle: Iterable[bytes], start_after: int) -> Iterator[bytes]:
    """The lines of ``handle``, those up to ``start_after`` replaced by empty ones (line
    numbers stay; a skipped line is neither decoded nor parsed)."""
    for number, raw in enumerate(handle, start=1):
        yield raw if number > start_after else b""


def empty_line(raw: bytes, first: bool = False) -> bool:
    """Whether :func:`_lines` skips this raw line of a .txt or .jsonl file as empty: nothing
    but Unicode whitespace (a no-break space too), or a first line's BOM. A line that is not
    UTF-8 is not empty: it is an input, reported as bad. Counters of documents use this, so
    that their totals are the reader's."""
    if not raw.strip():
        return True
    if raw.isascii():
        return False
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return not (text.removeprefix("\ufeff") if first else text).strip()


def _lines(handle: Iterable[bytes], on_bad: OnBad) -> Iterator[tuple[int, str]]:
    """Numbered non-empty lines decoded as UTF-8, without their line ending."""
    for number, raw in enumerate(handle, start=1):
        try:
            line = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError as e:
            on_bad(number, f"not valid UTF-8 ({e.reason})")
            continue
        if number == 1:
            line = line.removeprefix("\ufeff")
        if line.strip():
            yield number, line


def read_txt_items(handle: Iterable[bytes], on_bad: OnBad) -> Iterator[tuple[Item, Context]]:
    """One document per non-empty line."""
    for number, line in _lines(handle, on_bad):
        yield line, {"line": number}


#: Fields of a JSONL output record that ``annotate`` writes itself: an input object holding
#: one is refused rather than have its value overwritten.
RESERVED_FIELDS = ("line", "tree_entropy", "sentences")


def read_jsonl_items(handle: Iterable[bytes], on_bad: OnBad) -> Iterator[tuple[Item, Context]]:
    """One ``{"text": ...}`` object per non-empty line; its other fields go to ``meta``
    (none of :data:`RESERVED_FIELDS`)."""
    for number, line in _lines(handle, on_bad):
        try:
            record = json.loads(line, parse_constant=_not_json)
        except json.JSONDecodeError as e:
            on_bad(number, f"invalid JSON ({e.msg})")
            continue
        except ValueError as e:
            on_bad(number, f"invalid JSON ({e})")
            continue
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            on_bad(number, 'expected an object with a string "text" field')
            continue
        clash = [key for key in RESERVED_FIELDS if key in record]
        if clash:
            on_bad(number, f'field "{clash[0]}" is one annotate writes ({", ".join(RESERVED_FIELDS)}): rename it')
            continue
        meta = {key: value for key, value in record.items() if key != "text"}
        yield record["text"], {"line": number, "meta": meta}


def _not_json(name: str) -> Any:
    """NaN and Infinity, which Python's json reads but JSON has not: kept, they would make
    every output record invalid JSON for other readers."""
    raise ValueError(f"{name} is not a JSON value")


def read_conllu_items(handle: IO[bytes], on_bad: OnBad) -> Iterator[tuple[Item, Context]]:
    """One document per CoNLL-U sentence: its words and spaces, and the sentence itself."""

    def report(error: ConlluError) -> None:
        on_bad(error.line, error.message)

    for sentence in read_conllu(handle, on_error=report):
        yield (sentence.forms, sentence.spaces), {"line": sentence.line, "sentence": sentence}
