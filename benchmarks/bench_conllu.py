"""CoNLL-U reading: ``spacy_treexp.io`` vs the PyPI package ``conllu``, speed and fidelity.

    python benchmarks/bench_conllu.py ../shared/data/ud_en_ewt/en_ewt-ud-{train,dev,test}.conllu

``conllu`` is not a dependency: ``pip install conllu`` to compare (without it only our
module is measured). For each file, best of ``--repeats`` runs:

* read: every sentence into a list (ours: ``list(read_conllu(path))``; conllu:
  ``list(parse_incr(open(path)))``), as evaluation does;
* read+write: streamed, each sentence written as it is read, into one string
  (``write_conllu(read_conllu(path), StringIO())``; ``"".join(s.serialize() ...)``), as
  a converting command does;
* fidelity: whether read -> write gives the file's text back, and how many sentences
  differ from their block in the file.

Measured with the command above, ``--repeats 5`` (2 CPU cores, load average about 1.5
from other work at the time; Python 3.11; conllu 6.0.0); seconds, best of 5:

    file        sentences  read: ours  conllu  ratio   read+write: ours  conllu  ratio   conllu read->write
    EWT train       12544        0.36    3.32   9.4x               0.26    3.01  11.7x   1 sentence differs
    EWT dev          2001        0.04    0.40  10.7x               0.03    0.38  12.0x   identical
    EWT test         2077        0.04    0.40  10.4x               0.03    0.38  11.9x   identical

Ours gives every file back byte for byte. conllu's one difference (train, line 118191,
sentence ``newsgroup-groups.google.com_alt.animals.bears_..._171100-0041``) is a MISC value
containing ``=``: ``Cxn=free=rc-obj`` is written back as ``Cxn=free``. conllu also
accepts, silently, what our reader reports with its line: a line of 9 columns, a gap in
word ids, a comment after token lines (dropped), a block of comments only (an empty
sentence).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import io
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from spacy_treexp.io import read_conllu, write_conllu


def best_seconds(fn: Callable[[Path], Any], path: Path, repeats: int) -> float:
    """Fastest of ``repeats`` wall-clock timings of ``fn(path)`` (load only adds time)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(path)
        times.append(time.perf_counter() - start)
    return min(times)


def file_blocks(text: str) -> list[str]:
    """The file's sentence blocks as the writers produce them (text + one empty line)."""
    return [block + "\n\n" for block in text.split("\n\n") if block.strip()]


def ours_read(path: Path) -> list[Any]:
    return list(read_conllu(path))


def ours_read_write(path: Path) -> str:
    out = io.StringIO()
    write_conllu(read_conllu(path), out)
    return out.getvalue()


def conllu_read(path: Path) -> list[Any]:
    import conllu

    with path.open(encoding="utf-8") as handle:
        return list(conllu.parse_incr(handle))


def conllu_read_write(path: Path) -> str:
    import conllu

    with path.open(encoding="utf-8") as handle:
        return "".join(sentence.serialize() for sentence in conllu.parse_incr(handle))


#: name -> (read every sentence into a list, one sentence's text, streamed read+write of a file)
LIBRARIES: dict[str, tuple[Callable[[Path], list[Any]], Callable[[Any], str], Callable[[Path], str]]] = {
    "ours": (ours_read, lambda sentence: sentence.to_text() + "\n", ours_read_write),
    "conllu": (conllu_read, lambda sentence: sentence.serialize(), conllu_read_write),
}


def measure(name: str, path: Path, text: str, repeats: int) -> tuple[float, float]:
    """Print one library's timings and fidelity on ``path``; returns them (read, read+write)."""
    read, serialize, read_write = LIBRARIES[name]
    blocks = file_blocks(text)
    written = [serialize(sentence) for sentence in read(path)]
    if len(written) != len(blocks):
        differ = f"{len(written)} sentences for {len(blocks)} blocks"
    else:
        differ = f"{sum(a != b for a, b in zip(blocks, written))} sentences differ"
    identical = "identical" if read_write(path) == text else "DIFFERS"
    seconds = best_seconds(read, path, repeats)
    streamed = best_seconds(read_write, path, repeats)
    print(f"  {name:7} read {seconds:6.2f} s   read+write {streamed:6.2f} s   read->write {identical}, {differ}")
    for block, sentence in zip(blocks, written):
        if block != sentence:
            pairs = list(zip(block.splitlines() + [""], sentence.splitlines() + [""]))
            before, after = next(pair for pair in pairs if pair[0] != pair[1])
            print(f"          first difference: {before!r}\n                         -> {after!r}")
            break
    return seconds, streamed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("files", nargs="+", type=Path, help="CoNLL-U files, e.g. UD English-EWT train/dev/test")
    parser.add_argument("--repeats", type=int, default=3, help="timing runs per measure (the best is kept)")
    args = parser.parse_args()
    missing = [str(path) for path in args.files if not path.is_file()]
    if missing:
        print(f"bench_conllu: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    names = ["ours"]
    if importlib.util.find_spec("conllu") is None:
        print("bench_conllu: 'conllu' is not installed (pip install conllu): our module only", file=sys.stderr)
    else:
        names.append("conllu")
        print(f"conllu {importlib.metadata.version('conllu')}; best of {args.repeats}")
    for path in args.files:
        text = path.read_text(encoding="utf-8")
        print(f"\n{path.name}: {len(file_blocks(text))} sentences, {text.count(chr(10))} lines")
        seconds = {name: measure(name, path, text, args.repeats) for name in names}
        if "conllu" in seconds:
            (read, both), (their_read, their_both) = seconds["ours"], seconds["conllu"]
            print(f"  conllu / ours: read {their_read / read:.1f}x, read+write {their_both / both:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
