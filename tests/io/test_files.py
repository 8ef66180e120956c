"""``write_atomic``: a file is whole, old or new, never half written; ``within``."""

from __future__ import annotations

from pathlib import Path

import pytest

from spacy_treexp.io import files
from spacy_treexp.io.files import held_input, within, write_atomic


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


def test_within_reads_either_spelling_of_either_path(tmp_path, monkeypatch):
    """A path inside a folder by its written or its resolved spelling: a link to the folder,
    a link inside it to elsewhere, a relative path, the folder itself only with ``itself``."""
    folder, elsewhere = tmp_path / "folder", tmp_path / "elsewhere"
    (folder / "sub").mkdir(parents=True)
    elsewhere.mkdir()
    (tmp_path / "link").symlink_to(folder)
    (folder / "out").symlink_to(elsewhere)
    monkeypatch.chdir(folder / "sub")
    assert within(folder / "sub" / "file", folder)
    assert within(tmp_path / "link" / "sub", folder) and within(folder / "sub", tmp_path / "link")
    assert within(folder / "out", folder) and within(elsewhere, folder / "out", itself=True)
    assert within(Path("."), Path("..")) and within(Path("."), folder / "sub", itself=True)
    assert not within(folder, folder) and within(folder, tmp_path / "link", itself=True)
    assert not within(elsewhere, folder) and not within(folder, folder / "sub", itself=True)


def test_held_input_names_the_first_existing_input_in_the_folder(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "train.conllu").write_text("x")
    (tmp_path / "dev.conllu").write_text("x")
    (out / "link").symlink_to(tmp_path / "nowhere")  # a dangling link is still deleted with the folder
    sources = [("DEV", tmp_path / "dev.conllu"), ("--test", None), ("--vectors", out / "missing")]
    assert held_input(out, sources) is None
    assert held_input(out, [*sources, ("TRAIN", out / "train.conllu")]) == ("TRAIN", out / "train.conllu")
    assert held_input(out, [("--vectors", out / "link")]) == ("--vectors", out / "link")
    assert held_input(out, [("-o", out)]) == ("-o", out)  # the folder itself


def test_folder_replacement_swaps_the_changed_copy_in_or_leaves_the_folder_as_it_was(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "a").write_text("old a")
    (folder / "b").write_text("old b")
    with files.folder_replacement(folder) as staged:
        assert staged != folder and (staged / "a").read_text() == "old a"
        (staged / "a").write_text("new a")
        assert (folder / "a").read_text() == "old a"  # not yet
    assert (folder / "a").read_text() == "new a" and (folder / "b").read_text() == "old b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    for failure in (ValueError("broken"), SystemExit("refused")):
        with pytest.raises(type(failure)):
            with files.folder_replacement(folder) as staged:
                (staged / "a").write_text("half-made")
                raise failure
        assert (folder / "a").read_text() == "new a"
        assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_config_without_sections_drops_a_section_and_its_subsections_only():
    text = (
        '[nlp]\npipeline = ["tagger"]\n\n[components.tagger]\nfactory = "tagger"\n\n'
        "[components.tagger.model]\nnO = null\n\n[components.tagger.model.tok2vec]\nwidth = 4\n\n"
        "[components.tagger_tok2vec.model]\nx = 1\n\n[components.tagger.scorer]\ny = 2\n"
    )
    out = files.config_without_sections(text, "components.tagger.model")
    assert "[components.tagger.model]" not in out and "width = 4" not in out and "nO = null" not in out
    for kept in ("[components.tagger]", "[components.tagger_tok2vec.model]", "x = 1", "[components.tagger.scorer]"):
        assert kept in out
    assert "[components.tagger" not in files.config_without_sections(text, "components.tagger").replace(
        "[components.tagger_tok2vec", ""
    )
