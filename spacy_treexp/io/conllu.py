"""Lossless CoNLL-U: one reader, one writer, one sentence record.

A :class:`ConlluSentence` keeps every line of its block verbatim: the ``#`` comments
before the first token line, and every token line split into its 10 columns, words
(``7``), multiword-token ranges (``4-5``) and empty nodes (``8.1``) alike, in file order.
Everything else (forms, heads, spaces, ...) is derived from those rows on access.

Round trip: for a file whose sentences are separated by exactly one empty line and that
ends with an empty line, ``write_conllu(read_conllu(path), out)`` writes the same bytes.
Outside that contract the reader normalises, and says so here:

* line endings: ``\\r\\n`` is read as ``\\n`` and the writer writes ``\\n`` only (UD's
  validator rejects ``\\r\\n``); a UTF-8 byte-order mark at the start is dropped; a file whose
  lines end with ``\\r`` alone is one line, and its error says so;
* a line of spaces/tabs only counts as blank; several blank lines between sentences, or
  blank lines at the start, become the writer's single empty line after each sentence.

:func:`read_conllu` checks the *format* only (10 tab-separated columns, word ids 1..n,
well-formed ``a-b`` and ``a.b`` ids in their places, a FORM in every word line, comments
before token lines, at least one word, UTF-8) and raises :class:`ConlluError` naming path and line, or reports the bad
sentence to ``on_error`` and goes on; a skipped sentence's ``# newdoc`` / ``# newpar`` go to
the next sentence read (unless it starts a document or paragraph itself), so the documents
around it do not merge. Whether the gold heads form a tree is a separate
question: :meth:`ConlluSentence.tree_problem`.

Why not the PyPI package ``conllu`` (6.0.0), measured by ``benchmarks/bench_conllu.py`` on
UD English-EWT (2 cores, other work running): reading is about 10x slower (train: 3.32 s vs
0.36 s), read -> serialize is not the identity (a MISC value containing ``=`` is cut), and it
silently accepts format errors we must report with their line (9 columns, a gap in word
ids, a comment after token lines, a sentence without words).
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import IO, Union

import numpy

#: The ten CoNLL-U columns, in order.
COLUMNS = ("id", "form", "lemma", "upos", "xpos", "feats", "head", "deprel", "deps", "misc")
_ID, _FORM, _HEAD, _DEPREL, _MISC = 0, 1, 6, 7, 9

_RANGE = re.compile(r"([1-9][0-9]*)-([1-9][0-9]*)")
_EMPTY = re.compile(r"(0|[1-9][0-9]*)\.([1-9][0-9]*)")
_INTEGER = re.compile(r"-?[0-9]+")

#: One token line's 10 columns, verbatim. Tuples, not lists: the garbage collector stops
#: tracking them, which halved the time to load EWT train into memory (0.67 s -> 0.33 s).
Row = tuple[str, ...]

Source = Union[str, "os.PathLike[str]", IO[str], IO[bytes]]
Target = Union[str, "os.PathLike[str]", IO[str]]


class ConlluError(ValueError):
    """A CoNLL-U format error at ``path`` (None for an unnamed stream), line ``line`` (1-based)."""

    def __init__(self, path: str | None, line: int, message: str) -> None:
        super().__init__(path, line, message)
        self.path = path
        self.line = line
        self.message = message

    def __str__(self) -> str:
        return f"{self.path if self.path is not None else '<input>'}:{self.line}: {self.message}"


@dataclass
class ConlluSentence:
    """One CoNLL-U sentence, kept verbatim.

    ``comments`` are the ``#`` lines before the first token line; ``rows`` are every token
    line in file order (words, ``4-5`` ranges, ``8.1`` empty nodes), each a tuple of its 10
    columns; ``line`` is the block's first line number (0 for a sentence built in code).
    Treat a sentence as a value: the ``with_*`` helpers return a new sentence and leave
    this one unchanged. Derived properties are computed from ``rows`` on each access, so
    keep the result (``heads = s.heads``) in loops. Word ids are 1-based everywhere, as in
    the file and in ``heads``.
    """

    comments: list[str]
    rows: list[Row]
    line: int = 0

    # --- derived views --------------------------------------------------------------

    @property
    def words(self) -> list[Row]:
        """The rows of the syntactic words 1..n (no ranges, no empty nodes)."""
        return [row for row in self.rows if row[_ID].isdigit()]

    @property
    def n(self) -> int:
        """Number of words."""
        return len(self.words)

    @property
    def forms(self) -> list[str]:
        return [row[_FORM] for row in self.words]

    @property
    def lemmas(self) -> list[str]:
        return [row[2] for row in self.words]

    @property
    def upos(self) -> list[str]:
        return [row[3] for row in self.words]

    @property
    def xpos(self) -> list[str]:
        return [row[4] for row in self.words]

    @property
    def feats(self) -> list[str]:
        return [row[5] for row in self.words]

    @property
    def deprels(self) -> list[str]:
        return [row[_DEPREL] for row in self.words]

    @property
    def misc(self) -> list[str]:
        """Each word's MISC column, verbatim (``_`` when empty)."""
        return [row[_MISC] for row in self.words]

    @property
    def heads(self) -> numpy.ndarray:
        """Gold heads in the engine's convention: int64, length n+1, ``heads[0] = -1``,
        ``heads[m]`` the head of word m (0 = ROOT). Values are not range-checked
        (see :meth:`tree_problem`); a head that is not an integer raises ConlluError."""
        heads = [-1]
        for index, row in enumerate(self.rows):
            if row[_ID].isdigit():
                if not _INTEGER.fullmatch(row[_HEAD]):
                    raise ConlluError(
                        None, self._row_line(index), f"word {row[_ID]}: head {row[_HEAD]!r} is not an integer"
                    )
                heads.append(int(row[_HEAD]))
        return numpy.array(heads, dtype=numpy.int64)

    @property
    def spaces(self) -> list[bool]:
        """Whether a space follows each word: not when MISC has ``SpaceAfter=No``. Inside a
        multiword token there is none between its words; its last word takes the token
        line's ``SpaceAfter``."""
        spaces = [not _has_no_space(row[_MISC]) for row in self.words]
        for first, row in self.ranges.items():
            last = int(row[_ID].partition("-")[2])
            for m in range(first, last):
                spaces[m - 1] = False
            spaces[last - 1] = not _has_no_space(row[_MISC])
        return spaces

    @property
    def ranges(self) -> dict[int, Row]:
        """Multiword tokens: first word id -> the range row (``4-5 ...``)."""
        return {int(row[_ID].partition("-")[0]): row for row in self.rows if "-" in row[_ID]}

    @property
    def empty_nodes(self) -> list[Row]:
        """The empty-node rows (``8.1 ...``) of the enhanced graph, in file order."""
        return [row for row in self.rows if "." in row[_ID]]

    @property
    def sent_id(self) -> str | None:
        """``# sent_id = ...``, or None."""
        return self.comment("sent_id") or None

    @property
    def text(self) -> str | None:
        """``# text = ...``, or None."""
        return self.comment("text")

    def comment(self, key: str) -> str | None:
        """The value of the first ``# key = value`` comment ("" for a bare ``# key``),
        or None when there is none."""
        for line in self.comments:
            name, _, value = line[1:].partition("=")
            if name.strip() == key:
                return value.strip()
        return None

    def misc_items(self, word_id: int) -> dict[str, str]:
        """Word ``word_id``'s MISC as ``{key: value}`` (an item without ``=`` maps to "")."""
        return parse_misc(self.rows[self._row_index(word_id)][_MISC])

    def to_text(self) -> str:
        """The block as CoNLL-U text: comments, then rows; every line ends with ``\\n``;
        no blank line after it (the writer adds one)."""
        return "\n".join(self.comments + ["\t".join(row) for row in self.rows]) + "\n"

    # --- the gold tree --------------------------------------------------------------

    def tree_problem(self) -> str | None:
        """None if the heads form a single-root tree over words 1..n, else why not: a head
        that is not a number, out of range or a self-loop, no root or several roots, or
        a cycle (naming its words). Never raises for bad heads."""
        words = self.words
        n = len(words)
        heads = [-1]
        for m, row in enumerate(words, start=1):
            if not _INTEGER.fullmatch(row[_HEAD]):
                return f"word {m} ({row[_FORM]!r}) has head {row[_HEAD]!r}, not a number"
            heads.append(int(row[_HEAD]))
        for m in range(1, n + 1):
            if not 0 <= heads[m] <= n:
                return f"word {m} ({words[m - 1][_FORM]!r}) has head {heads[m]}, outside 0..{n}"
            if heads[m] == m:
                return f"word {m} ({words[m - 1][_FORM]!r}) is its own head"
        roots = [m for m in range(1, n + 1) if heads[m] == 0]
        if not roots:
            return "no root: no word has head 0"
        if len(roots) > 1:
            return f"{len(roots)} roots (words {', '.join(map(str, roots))}); a tree has one"
        cycle = _find_cycle(heads)
        if cycle:
            return "cycle: " + " -> ".join(f"{m} ({words[m - 1][_FORM]!r})" for m in cycle + cycle[:1])
        return None

    # --- building and editing -------------------------------------------------------

    @classmethod
    def from_words(
        cls,
        forms: Sequence[str],
        *,
        heads: Sequence[int] | numpy.ndarray | None = None,
        deprels: Sequence[str] | None = None,
        spaces: Sequence[bool] | None = None,
        comments: Sequence[str] = (),
        **columns: Sequence[str],
    ) -> ConlluSentence:
        """A new sentence of words only; missing columns are ``_``.

        ``heads`` is in the engine's convention, like :attr:`heads`: length n+1,
        ``heads[0]`` ignored, a negative head written as ``_``. ``spaces[m - 1] = False``
        puts ``SpaceAfter=No`` in word m's MISC. ``columns`` gives other columns by name
        (``lemma``, ``upos``, ``xpos``, ``feats``, ``deps``, ``misc``), one value a word.
        """
        n = len(forms)
        if n == 0:
            raise ValueError("a CoNLL-U sentence needs at least one word")
        values: dict[str, Sequence[str]] = {"form": forms, **columns}
        if heads is not None:
            if len(heads) != n + 1:
                raise ValueError(f"heads must have length n+1 = {n + 1} (heads[0] is ROOT's), got {len(heads)}")
            values["head"] = ["_" if int(h) < 0 else str(int(h)) for h in heads[1:]]
        if deprels is not None:
            values["deprel"] = deprels
        for name, column in values.items():
            if name not in COLUMNS[1:]:
                raise ValueError(f"unknown CoNLL-U column {name!r}; expected one of {COLUMNS[1:]}")
            if len(column) != n:
                raise ValueError(f"{name} has {len(column)} values for {n} words")
        if spaces is not None and len(spaces) != n:
            raise ValueError(f"spaces has {len(spaces)} values for {n} words")
        rows = []
        for i in range(n):
            row = [str(i + 1)] + [_field(name, values[name][i]) if name in values else "_" for name in COLUMNS[1:]]
            if spaces is not None:
                row[_MISC] = format_misc(row[_MISC], {"SpaceAfter": None if spaces[i] else "No"})
            rows.append(tuple(row))
        for line in comments:
            if not line.startswith("#") or "\n" in line or "\r" in line:
                raise ValueError(f"a comment is one line starting with '#', got {line!r}")
        return cls(list(comments), rows)

    def with_comment(self, key: str, value: str | None) -> ConlluSentence:
        """A copy with ``# key = value`` replacing the comments of that key (in the first
        one's place) or appended after the others; ``value=None`` removes them."""
        if not key or "=" in key or key != key.strip() or "\n" in key:
            raise ValueError(f"bad comment key {key!r}")
        new = None if value is None else f"# {key} = {_field(key, value)}"
        comments = []
        for line in self.comments:
            if line[1:].partition("=")[0].strip() == key:
                if new is not None:
                    comments.append(new)
                    new = None
            else:
                comments.append(line)
        if new is not None:
            comments.append(new)
        return replace(self, comments=comments)

    def with_misc(self, word_id: int, items: Mapping[str, str | None]) -> ConlluSentence:
        """A copy where word ``word_id``'s MISC has ``key=value`` for each item (replacing
        that key in place, appending it otherwise; None removes the key); other items
        keep their order."""
        row = self.rows[self._row_index(word_id)]
        return self.with_word(word_id, misc=format_misc(row[_MISC], items))

    def with_word(self, word_id: int, **columns: str | int) -> ConlluSentence:
        """A copy with some columns of word ``word_id`` replaced, by name
        (``with_word(3, head=2, deprel="nsubj")``)."""
        index = self._row_index(word_id)
        row = list(self.rows[index])
        for name, value in columns.items():
            if name not in COLUMNS[1:]:
                raise ValueError(f"unknown CoNLL-U column {name!r}; expected one of {COLUMNS[1:]}")
            row[COLUMNS.index(name)] = _field(name, str(value))
        rows = list(self.rows)
        rows[index] = tuple(row)
        return replace(self, rows=rows)

    def _row_index(self, word_id: int) -> int:
        key = str(word_id)
        for index, row in enumerate(self.rows):
            if row[_ID] == key:
                return index
        raise IndexError(f"no word {word_id!r} in a sentence of {self.n} words (word ids are 1-based)")

    def _row_line(self, index: int) -> int:
        return self.line + len(self.comments) + index if self.line else 0


# --- MISC ---------------------------------------------------------------------------


def parse_misc(misc: str) -> dict[str, str]:
    """``"SpaceAfter=No|HeadProb=0.98"`` -> ``{"SpaceAfter": "No", "HeadProb": "0.98"}``."""
    if misc == "_":
        return {}
    return {key: value for key, _, value in (item.partition("=") for item in misc.split("|"))}


def format_misc(misc: str, items: Mapping[str, str | None]) -> str:
    """``misc`` with ``key=value`` set for each item (in place if the key is there, else
    appended; None removes it); ``_`` when nothing is left."""
    for key, value in items.items():
        if not key or any(c in key for c in "=|\t\n\r "):
            raise ValueError(f"bad MISC key {key!r}")
        if value is not None and any(c in value for c in "|\t\n\r"):
            raise ValueError(f"bad MISC value {value!r} for {key}")
    out: list[str] = []
    done: set[str] = set()
    for item in [] if misc == "_" else misc.split("|"):
        key = item.partition("=")[0]
        if key not in items:
            out.append(item)
        elif key not in done:
            done.add(key)
            if items[key] is not None:
                out.append(f"{key}={items[key]}")
    out += [f"{key}={value}" for key, value in items.items() if key not in done and value is not None]
    return "|".join(out) or "_"


def _has_no_space(misc: str) -> bool:
    return "SpaceAfter=No" in misc.split("|")


def _field(name: str, value: str) -> str:
    if not value or any(c in value for c in "\t\n\r"):
        raise ValueError(f"bad CoNLL-U value for {name}: {value!r} (empty, or a tab or line break)")
    return value


def _find_cycle(heads: Sequence[int]) -> list[int]:
    """The words of one cycle, in head order ([] if every word reaches ROOT)."""
    state = [0] * len(heads)  # 0 unseen, 1 on the current path, 2 reaches ROOT
    state[0] = 2
    for start in range(1, len(heads)):
        path = []
        node = start
        while state[node] == 0:
            state[node] = 1
            path.append(node)
            node = heads[node]
        if state[node] == 1:
            return path[path.index(node) :]
        for visited in path:
            state[visited] = 2
    return []


# --- reading ------------------------------------------------------------------------


def read_conllu(source: Source, *, on_error: Callable[[ConlluError], None] | None = None) -> Iterator[ConlluSentence]:
    """Stream the sentences of a CoNLL-U file (a path, read as UTF-8, or an open file).

    A format error raises :class:`ConlluError`; with ``on_error`` the error is passed to
    it, the bad sentence skipped, and reading goes on. A missing path raises
    FileNotFoundError at the call. Heads are not checked here (see ``tree_problem``).
    Pass open text files with ``newline=""`` to keep a lone ``\\r`` inside a line.
    """
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise FileNotFoundError(errno.ENOENT, "no such CoNLL-U file", path)
        return _read_path(path, on_error)
    name = getattr(source, "name", None)
    return _sentences(_lines(source), name if isinstance(name, str) else None, on_error)


def _read_path(path: str, on_error: Callable[[ConlluError], None] | None) -> Iterator[ConlluSentence]:
    with open(path, "rb") as handle:
        yield from _sentences(_lines(handle), path, on_error)


_Line = tuple[int, str, str | None]  # number, text without its line ending, decoding problem


def _lines(handle: Iterable[str | bytes]) -> Iterator[_Line]:
    for number, raw in enumerate(handle, start=1):
        problem = None
        if isinstance(raw, bytes):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                line, problem = (
                    raw.decode("utf-8", "replace"),
                    f"not valid UTF-8 ({e.reason} at byte {e.start})",
                )
        else:
            line = raw
        line = line.removesuffix("\n")
        line = line.removesuffix("\r")
        if number == 1 and line.startswith("\ufeff"):
            line = line[1:]
        yield number, line, problem


def _sentences(
    lines: Iterable[_Line], path: str | None, on_error: Callable[[ConlluError], None] | None
) -> Iterator[ConlluSentence]:
    block: list[_Line] = []
    markers: list[str] = []  # document and paragraph starts of skipped sentences
    for item in lines:
        if item[1].strip(" \t") or item[2]:
            block.append(item)
        elif block:
            yield from _checked(block, path, on_error, markers)
            block = []
    if block:
        yield from _checked(block, path, on_error, markers)


#: Comments that mark where a document or a paragraph starts (UD: ``# newdoc [id = ...]``, ``# newpar``).
_STRUCTURE = ("# newdoc", "# newpar")


def _checked(
    block: list[_Line], path: str | None, on_error: Callable[[ConlluError], None] | None, markers: list[str]
) -> Iterator[ConlluSentence]:
    """The block's sentence, or nothing after reporting its error to ``on_error``; a skipped
    sentence's ``# newdoc`` / ``# newpar`` wait in ``markers`` for the next sentence read."""
    try:
        sentence = _parse_block(block, path)
    except ConlluError as error:
        if on_error is None:
            raise
        on_error(error)
        markers.extend(line.rstrip() for _, line, _ in block if line.startswith(_STRUCTURE))
        return
    if markers:
        sentence = _with_markers(sentence, markers)
        markers.clear()
    yield sentence


def _with_markers(sentence: ConlluSentence, markers: list[str]) -> ConlluSentence:
    """``sentence`` with the first ``# newdoc`` and the first ``# newpar`` of the skipped
    sentences before it, less what its own comments already start (a document starts a
    paragraph too)."""
    own = " ".join(line for line in sentence.comments if line.startswith(_STRUCTURE))
    starts = {"# newdoc": "# newdoc" in own, "# newpar": "# newdoc" in own or "# newpar" in own}
    carried = []
    for kind in _STRUCTURE:
        first = next((m for m in markers if m.startswith(kind)), None)
        if first is not None and not starts[kind]:
            carried.append(first)
    return ConlluSentence(carried + list(sentence.comments), sentence.rows, sentence.line)


def _parse_block(block: list[_Line], path: str | None) -> ConlluSentence:
    comments: list[str] = []
    rows: list[Row] = []
    n = 0  # words so far
    next_id = "1"
    covered, range_line, range_id = 0, 0, ""  # last word inside a multiword token, and that token
    empty = (-1, 0)  # last empty node (word, index)
    for number, line, problem in block:
        if problem:
            raise ConlluError(path, number, problem)
        if line.startswith("#"):
            if rows:
                raise ConlluError(path, number, "comment after token lines (comments go before the first token)")
            comments.append(line)
            continue
        cols = tuple(line.split("\t"))
        if len(cols) != 10:
            raise ConlluError(path, number, f"expected 10 tab-separated columns, got {len(cols)}{_lone_cr(line)}")
        if cols[1] == "":  # UD: '_' is "no value"; a word without a form cannot be parsed
            raise ConlluError(path, number, "column 2 (FORM) is empty; write _ for no value")
        token_id = cols[0]
        if token_id == next_id:
            n += 1
            next_id = str(n + 1)
        elif match := _RANGE.fullmatch(token_id):
            first, last = int(match[1]), int(match[2])
            if first >= last:
                raise ConlluError(path, number, f"multiword token {token_id!r}: the first word must be before the last")
            if first != n + 1:
                raise ConlluError(path, number, f"multiword token {token_id!r} where word {n + 1} comes next")
            if first <= covered:
                raise ConlluError(path, number, f"multiword token {token_id!r} overlaps {range_id!r}")
            covered, range_line, range_id = last, number, token_id
        elif match := _EMPTY.fullmatch(token_id):
            word, index = int(match[1]), int(match[2])
            if word != n:
                raise ConlluError(path, number, f"empty node {token_id!r} after word {n} (it goes after word {word})")
            expected = empty[1] + 1 if empty[0] == word else 1
            if index != expected:
                raise ConlluError(path, number, f"empty node {token_id!r} where {word}.{expected} comes next")
            empty = (word, index)
        else:
            raise ConlluError(path, number, f"token id {token_id!r} where word {n + 1} comes next")
        rows.append(cols)
    if n == 0:
        raise ConlluError(path, block[0][0], "sentence without words" + _lone_cr("".join(item[1] for item in block)))
    if covered > n:
        raise ConlluError(path, range_line, f"multiword token {range_id!r} goes past the last word {n}")
    return ConlluSentence(comments, rows, block[0][0])


def _lone_cr(line: str) -> str:
    """Why a line holds a whole file: lines that end with ``\\r`` alone (classic Mac OS)."""
    if "\r" in line:
        return "; its lines end with a lone carriage return (\\r), not \\n: convert the line endings"
    return ""


# --- writing ------------------------------------------------------------------------


def write_conllu(sentences: Iterable[ConlluSentence], target: Target) -> int:
    """Write each sentence followed by one empty line (UTF-8, ``\\n`` line endings) to a
    path or an open text file; returns the number of sentences written."""
    if isinstance(target, (str, os.PathLike)):
        with open(target, "w", encoding="utf-8", newline="") as handle:
            return _write(sentences, handle)
    return _write(sentences, target)


def _write(sentences: Iterable[ConlluSentence], handle: IO[str]) -> int:
    count = 0
    for sentence in sentences:
        handle.write(sentence.to_text() + "\n")
        count += 1
    return count


#: The id of a sentence without ``# sent_id`` is this, a dash and the line it starts on.
UNNAMED_PREFIX = "line"


def sentence_id(sentence: ConlluSentence) -> str:
    """``# sent_id``, or ``line-N`` (:data:`UNNAMED_PREFIX`) when the sentence has none."""
    return sentence.sent_id or f"{UNNAMED_PREFIX}-{sentence.line}"
