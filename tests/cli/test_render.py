"""``spacy-treexp render``: the HTML view of a file's parses."""

from __future__ import annotations


def test_writes_a_page(model, tmp_path, run_cli):
    source = tmp_path / "in.txt"
    source.write_text("The cat sat. It purred.\nDogs bark.\nThird doc.\n")
    page = tmp_path / "page.html"
    status, _, err = run_cli("render", str(source), "-o", str(page), "--model", model, "--limit", "2")
    assert status == 0 and "wrote 2 document(s)" in err
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count('class="treexp-sentence"') == 3


def test_renders_annotated_docbin_to_stdout(model, tmp_path, run_cli):
    source = tmp_path / "in.txt"
    source.write_text("The cat sat. It purred.\nDogs bark.\n")
    shards = tmp_path / "out.spacy"
    assert run_cli("annotate", str(source), "-o", str(shards), "--model", model)[0] == 0
    status, out, _ = run_cli("render", str(shards), "-o", "-")
    assert status == 0
    assert out.startswith("<!DOCTYPE html>") and out.count('class="treexp-sentence"') == 3
    renamed = shards.rename(tmp_path / "annotated")  # as --backend ray names its folder: no .spacy suffix
    status, again, _ = run_cli("render", str(renamed), "-o", "-")
    assert status == 0 and again == out


def test_user_errors(model, tmp_path, user_error):
    source = tmp_path / "in.txt"
    source.write_text("Hi.\n")
    assert "is the input file" in user_error("render", str(source), "-o", str(source), "--model", model)
    assert "--limit" in user_error("render", str(source), "-o", str(tmp_path / "p.html"), "--limit", "0")
    assert "no such folder" in user_error("render", str(source), "-o", str(tmp_path / "x" / "p.html"))
    assert "missing.spacy" in user_error("render", str(tmp_path / "missing.spacy"), "-o", str(tmp_path / "p.html"))


def test_fails_when_no_input_could_be_parsed(model, tmp_path, run_cli):
    source = tmp_path / "in.conllu"
    source.write_text("# a comment only\n", encoding="utf-8")  # one block, and not a sentence
    page = tmp_path / "page.html"
    status, _, err = run_cli("render", str(source), "-o", str(page), "--model", model)
    assert status == 1
    assert "1 bad input(s) skipped" in err and "no input could be parsed" in err
    assert not page.exists()
