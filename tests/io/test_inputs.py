"""``spacy_treexp.io.inputs``: documents from .txt, .jsonl and .conllu, bad lines reported.

(Mirrors spacy_treexp/io/inputs.py; it lives here until tests/io/ takes it.)"""

from __future__ import annotations

import io

import pytest

from spacy_treexp.io.inputs import Reader, format_of


def read(data: bytes, fmt: str):
    bad = []
    items = list(Reader(io.BytesIO(data), lambda line, message: bad.append((line, message)), fmt))
    return items, bad


def test_txt_one_document_per_non_empty_line():
    items, bad = read(b"\xef\xbb\xbfOne.\r\n\n  \nTwo.\n\xff\nThree.", "txt")
    assert items == [("One.", {"line": 1}), ("Two.", {"line": 4}), ("Three.", {"line": 6})]
    assert [line for line, _ in bad] == [5] and "not valid UTF-8" in bad[0][1]


def test_jsonl_keeps_metadata_and_reports_bad_lines():
    items, bad = read(b'{"text": "A", "id": 3}\n[1]\n{"text": 2}\nnot json\n', "jsonl")
    assert items == [("A", {"line": 1, "meta": {"id": 3}})]
    assert [line for line, _ in bad] == [2, 3, 4] and bad[2][1].startswith("invalid JSON")


def test_jsonl_refuses_nan_and_infinity_which_json_has_not():
    items, bad = read(b'{"text": "A", "score": NaN}\n{"text": "B", "x": [-Infinity]}\n{"text": "C"}\n', "jsonl")
    assert [text for text, _ in items] == ["C"]
    assert bad == [(1, "invalid JSON (NaN is not a JSON value)"), (2, "invalid JSON (-Infinity is not a JSON value)")]


def test_jsonl_refuses_fields_the_output_record_would_overwrite():
    items, bad = read(
        b'{"text": "A", "line": 99}\n{"text": "B", "sentences": []}\n{"text": "C", "lines": 1}\n', "jsonl"
    )
    assert items == [("C", {"line": 3, "meta": {"lines": 1}})]
    assert [line for line, _ in bad] == [1, 2] and 'field "line" is one annotate writes' in bad[0][1]


def test_conllu_gives_gold_words_spaces_and_the_sentence():
    text = (
        "# sent_id = a\n1\tI\t_\t_\t_\t_\t2\tnsubj\t_\t_\n2-3\tdon't\t_\t_\t_\t_\t_\t_\t_\t_\n"
        "2\tdo\t_\t_\t_\t_\t0\troot\t_\t_\n3\tn't\t_\t_\t_\t_\t2\tadvmod\t_\tSpaceAfter=No\n"
        "3.1\tx\t_\t_\t_\t_\t_\t_\t_\t_\n\n1\tbroken\n\n"
    )
    items, bad = read(text.encode("utf-8"), "conllu")
    [((words, spaces), context)] = items
    assert words == ["I", "do", "n't"] and spaces == [True, False, True]
    assert context["line"] == 1 and context["sentence"].comments == ["# sent_id = a"]
    assert len(context["sentence"].rows) == 5  # range and empty node kept
    assert bad == [(8, "expected 10 tab-separated columns, got 2")]


def test_files_formats_and_counts(tmp_path):
    path = tmp_path / "in.conllu"
    path.write_text("# c\n1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n\n1\tb\t_\t_\t_\t_\t0\troot\t_\t_\n")
    reader = Reader(path, lambda line, message: None)
    assert reader.format == "conllu" and reader.gold_sentences and reader.count() == 2
    assert [item[0] for item, _ in reader] == [["a"], ["b"]]
    assert format_of("x.JSONL") == "jsonl" and format_of("x.csv") is None
    with pytest.raises(ValueError, match="x.csv"):
        Reader(tmp_path / "x.csv", lambda line, message: None)
    with pytest.raises(FileNotFoundError):
        Reader(tmp_path / "missing.txt", lambda line, message: None)
    assert Reader(io.BytesIO(b"a\n"), lambda line, message: None, "txt").count() is None
