"""Shards: cut at document boundaries, read back by a worker exactly as a local run reads
the whole file (items, contexts and line numbers, bad lines included), for every format
and shard size; INPUT as a file, a folder or a glob."""

from __future__ import annotations

from pathlib import Path

import pytest

from spacy_treexp.io.inputs import Reader
from spacy_treexp.scale.plan import PlanError, expand_inputs, plan_shards, read_shard

TXT = "\ufeffFirst line here.\n\nSecond one.\n   \n".encode() + b"bad \xff byte\nThird.\n\xef\xbb\xbfA BOM kept.\nLast"
JSONL = b'{"text": "One.", "id": 1}\nnot json\n\n{"text": "Two.", "id": 2}\n{"id": 3}\n{"text": "Three.", "id": [4]}\n'
CONLLU = b"""# sent_id = a
# text = Hello world
1	Hello	_	_	_	_	0	root	_	_
2	world	_	_	_	_	1	dep	_	_

# sent_id = bad
1	Only	_	_	_	_	0	root	_	_
3	gap	_	_	_	_	1	dep	_	_


# sent_id = c
1-2	don't	_	_	_	_	_	_	_	_
1	do	_	_	_	_	0	root	_	_
2	n't	_	_	_	_	1	dep	_	_
2.1	x	_	_	_	_	_	_	_	_

1	Last	_	_	_	_	0	root	_	_
"""
FILES = {
    "txt": TXT,
    "jsonl": JSONL,
    "conllu": CONLLU,
    "comments.conllu": CONLLU + b"\n# a block of comments only, at the end\n",
    "only-comments.conllu": b"# no sentence\n\n# none at all\n",
}


def whole_file(path: Path, fmt: str):
    bad: list[tuple[int, str]] = []
    items = list(Reader(path, lambda line, message: bad.append((line, message)), fmt))
    return items, bad


@pytest.mark.parametrize("fmt", sorted(FILES))
@pytest.mark.parametrize("shard_size", [1, 2, 3, 100])
def test_shards_read_as_the_whole_file(tmp_path: Path, fmt: str, shard_size: int) -> None:
    path = tmp_path / f"in.{fmt}"
    path.write_bytes(FILES[fmt])
    fmt = fmt.rpartition(".")[2]
    expected_items, expected_bad = whole_file(path, fmt)
    shards = list(plan_shards([(path, fmt)], shard_size))
    items: list = []
    bad: list[tuple[int, str]] = []
    for shard in shards:
        assert 1 <= shard.docs <= shard_size
        items.extend(read_shard(shard, lambda line, message: bad.append((line, message))))
    assert items == expected_items
    assert bad == expected_bad
    assert len(expected_bad) >= 1  # the cases do exercise bad lines
    if fmt == "txt":  # a byte-order mark is dropped at the start of the file only
        texts = [item for item, _ in items]
        assert texts[0] == "First line here." and "\ufeffA BOM kept." in texts
    assert sum(shard.docs for shard in shards) == len(expected_items) + len(expected_bad)
    assert sum(shard.length for shard in shards) == path.stat().st_size
    assert [shard.name for shard in shards] == [f"part-00000-{k:06d}" for k in range(len(shards))]


def test_inputs_from_a_folder_or_a_glob(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    for name in ("b/2.txt", "a.jsonl", "b/1.conllu", "notes.md"):
        (tmp_path / name).write_text("x\n")
    found = expand_inputs(str(tmp_path))
    assert [(path.relative_to(tmp_path).as_posix(), fmt) for path, fmt in found] == [
        ("a.jsonl", "jsonl"),
        ("b/1.conllu", "conllu"),
        ("b/2.txt", "txt"),
    ]
    assert [p.name for p, _ in expand_inputs(str(tmp_path / "**" / "*.txt"))] == ["2.txt"]
    assert [fmt for _, fmt in expand_inputs(str(tmp_path / "notes.md"), "txt")] == ["txt"]
    shards = list(plan_shards(expand_inputs(str(tmp_path)), 10))
    assert [s.name for s in shards] == ["part-00000-000000", "part-00001-000000", "part-00002-000000"]


@pytest.mark.parametrize(
    "pattern, message",
    [
        ("missing.txt", "no such file, folder or glob"),
        ("empty", "no .txt, .jsonl or .conllu file there"),
        ("*.nothing", "no .txt, .jsonl or .conllu file there"),
        ("notes.md", "expected a .txt, .jsonl or .conllu file"),
    ],
)
def test_inputs_refused_by_name(tmp_path: Path, pattern: str, message: str) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.md").write_text("x\n")
    with pytest.raises(PlanError, match=message):
        expand_inputs(str(tmp_path / pattern))


def test_lines_of_unicode_spaces_are_no_documents_to_the_planner_or_the_counter(tmp_path: Path) -> None:
    """The reader skips a line of no-break spaces (Unicode whitespace); the planner and the
    progress counter counted it as a document, so totals and shard sizes were off."""
    path = tmp_path / "in.txt"
    path.write_bytes("\ufeff\n".encode() + "One.\n\u00a0\u00a0\n\u2003\nTwo.\n".encode() + b"\xff bad\n")
    shards = list(plan_shards([(path, "txt")], 10))
    assert sum(shard.docs for shard in shards) == 3  # One., Two. and the bad line (an input, reported)
    assert Reader(path, lambda line, message: None).count() == 3
