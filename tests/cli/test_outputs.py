"""The writers of ``annotate``: CoNLL-U from text, with whitespace tokens."""

from __future__ import annotations

import json

from spacy_treexp.cli.outputs import word_heads


def test_word_heads_drop_whitespace_tokens():
    # tokens: 1 a, 2 "\n", 3 b, 4 " ", 5 c; b hangs from the "\n" token, which hangs from a
    assert word_heads([0, 1, 2, 3, 3], [False, True, False, True, False]) == [0, 1, 2]
    assert word_heads([-1, -1, -1], [False, True, False]) == [-1, -1]  # padding rows stay -1
    assert word_heads([0, 1], [True, False]) == [0]  # under a whitespace root: the root


def test_conllu_output_has_no_whitespace_tokens(paragraph_model, tmp_path, run_cli):
    """Line breaks, tabs and double spaces become SpacesAfter; the file stays valid CoNLL-U."""
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"text": "The cat\tsat.\n\nA  dog|barked"}) + "\n")
    target = tmp_path / "out.conllu"
    args = ["annotate", str(source), "-o", str(target), "--model", paragraph_model, "--samples", "3"]
    assert run_cli(*args)[0] == 0
    blocks = [b.splitlines() for b in target.read_text().strip().split("\n\n")]
    assert len(blocks) == 2
    assert "# text = The cat\tsat." in blocks[0] and "# text = A  dog|barked" in blocks[1]
    for block in blocks:
        rows = [line.split("\t") for line in block if not line.startswith("#")]
        assert all(len(row) == 10 and row[1].strip() == row[1] != "" for row in rows)
        n = len(rows)
        assert [int(row[0]) for row in rows] == list(range(1, n + 1))
        assert all(0 <= int(row[6]) <= n for row in rows)
        for line in block:
            if line.startswith("# sample_"):
                assert len(line.split("heads ")[1].split()) == n
    first = [row.split("\t") for row in blocks[0] if not row.startswith("#")]
    second = [row.split("\t") for row in blocks[1] if not row.startswith("#")]
    assert [row[1] for row in first] == ["The", "cat", "sat", "."]
    assert "SpacesAfter=\\t" in first[1][9] and "SpacesAfter=\\n\\n" in first[3][9]
    assert "SpaceAfter=No" in first[2][9]
    assert [row[1] for row in second] == ["A", "dog|barked"]
    assert "SpacesAfter=\\s\\s" in second[0][9]
