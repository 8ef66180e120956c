"""``write_atomic``: a file is whole, old or new, never half written."""

from __future__ import annotations

import pytest

from spacy_treexp.io import files
from spacy_treexp.io.files import write_atomic


def test_text_and_bytes_replace_the_file_whole(tmp_path):
    path = tmp_path / "report.json"
    write_atomic(path, "{}\n")
    assert path.read_text(encoding="utf-8") == "{}\n"
    write_atomic(path, b"\x89PNG")
    assert path.read_bytes() == b"\x89PNG"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "summary.md"
    path.write_text("old", encoding="utf-8")

    def fail(*args):
        raise OSError("disk full")

    monkeypatch.setattr(files.os, "fsync", fail)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, "new")
    assert path.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.md"]
