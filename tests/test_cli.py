"""The spacy-treexp command line, run in-process on a pipeline with a test scorer."""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import spacy

from spacy_treexp import cli
from test_tree_expectations_support import make_nlp  # noqa: F401  (registers the test scorer)

CONLLU = """# newdoc id = d1
# sent_id = s1
# text = Hello . World don't
1	Hello	hello	INTJ	UH	_	4	discourse	_	_
2	.	.	PUNCT	.	_	1	punct	_	_
3	World	world	NOUN	NN	_	4	nsubj	_	_
4-5	don't	_	_	_	_	_	_	_	SpaceAfter=No
4	do	do	AUX	VBP	_	0	root	_	_
5	n't	not	PART	RB	_	4	advmod	_	Gold=yes
6	!	!	PUNCT	.	_	4	punct	_	_

# sent_id = s2
# text = Yes.
1	Yes	yes	INTJ	UH	_	0	root	_	SpaceAfter=No
2	.	.	PUNCT	.	_	1	punct	_	_
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("treexp_test_scorer", config={"fail_on": "FAIL"})
    path = tmp_path_factory.mktemp("cli") / "pipeline"
    nlp.to_disk(path)
    return str(path)


def reference(model, text, n_samples=0):
    nlp = cli.load_pipeline(model, n_samples=n_samples)
    return nlp(text)


def test_parse_prints_a_table_per_sentence(model, capsys):
    assert cli.main(["parse", "The cat sat on the mat. It purred.", "--model", model, "--samples", "2"]) == 0
    out = capsys.readouterr().out
    doc = reference(model, "The cat sat on the mat. It purred.", n_samples=2)
    assert out.count("Sentence ") == 2 and out.count("sample ") == 4
    assert f"tree entropy {next(doc.sents)._.tree_entropy:.3f} nats" in out
    rows = [line.split() for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert [r[1] for r in rows] == [t.text for t in doc]
    assert [float(r[-2]) for r in rows] == [round(t._.head_prob, 3) for t in doc]
    assert [float(r[-1]) for r in rows] == [round(t._.head_entropy, 3) for t in doc]


def test_annotate_txt_to_jsonl_reports_bad_lines_and_goes_on(model, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_bytes(b"The cat sat. It purred.\n\nDogs bark.\nThis will FAIL.\n\xff\xfe\nLast one.\n")
    target = tmp_path / "out.jsonl"
    assert cli.main(["annotate", str(source), "-o", str(target), "--model", model, "--batch-size", "2"]) == 0
    err = capsys.readouterr().err
    assert f"{source}:4: ValueError: test scorer refuses 'FAIL'" in err
    assert f"{source}:5: not valid UTF-8" in err
    records = [json.loads(line) for line in target.read_text().splitlines()]
    assert [r["line"] for r in records] == [1, 3, 6]
    assert records[0] == dict(cli.doc_to_json(reference(model, "The cat sat. It purred.")), line=1)
    token = records[0]["sentences"][1]["tokens"][0]
    assert token["head_distribution"][0][1] >= token["head_distribution"][-1][1]


def test_annotate_strict_stops_at_the_first_bad_line_keeping_finished_documents(model, tmp_path, capsys):
    source = tmp_path / "in.jsonl"
    source.write_text('{"text": "One.", "id": 7}\n{"text": "Two."}\n{"txt": 3}\n{"text": "Four."}\n')
    target = tmp_path / "out.jsonl"
    with pytest.raises(SystemExit) as stop:
        cli.main(["annotate", str(source), "-o", str(target), "--model", model, "--strict", "--batch-size", "1"])
    assert stop.value.code == 1
    assert f'{source}:3: expected an object with a string "text" field' in capsys.readouterr().err
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert [r["text"] for r in lines] == ["One.", "Two."]
    assert lines[0]["id"] == 7


def test_annotate_writes_each_document_before_an_interrupt(model, tmp_path, monkeypatch, capsys):
    source = tmp_path / "in.txt"
    source.write_text("One.\nTwo.\nThree.\nFour.\n")
    target = tmp_path / "out.conllu"
    original = cli.ConlluWriter.write
    calls = []

    def write_then_interrupt(self, doc, context):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(doc.text)
        original(self, doc, context)

    monkeypatch.setattr(cli.ConlluWriter, "write", write_then_interrupt)
    assert cli.main(["annotate", str(source), "-o", str(target), "--model", model]) == 130
    assert "interrupted: 2 documents written" in capsys.readouterr().err
    text = target.read_text()
    assert text.count("# text = ") == 2 and text.endswith("\n\n")


def test_annotate_conllu_keeps_gold_tokens_and_sentences(model, tmp_path):
    source = tmp_path / "in.conllu"
    source.write_text(CONLLU)
    target = tmp_path / "out.conllu"
    assert cli.main(["annotate", str(source), "-o", str(target), "--model", model]) == 0
    blocks = [b.splitlines() for b in target.read_text().strip().split("\n\n")]
    assert len(blocks) == 2  # "Hello . World" stays one sentence
    first = blocks[0]
    assert first[:3] == ["# newdoc id = d1", "# sent_id = s1", "# text = Hello . World don't"]
    words = [line.split("\t") for line in first if not line.startswith("#") and "-" not in line.split("\t")[0]]
    assert [w[1] for w in words] == ["Hello", ".", "World", "do", "n't", "!"]
    assert "4-5\tdon't" in "\n".join(first)
    assert [w[2] for w in words] == ["hello", ".", "world", "do", "not", "!"]  # not predicted: kept
    heads = [int(w[6]) for w in words]
    assert heads.count(0) == 1 and all(0 <= h <= 6 for h in heads)
    misc = [dict(kv.split("=") for kv in w[9].split("|")) for w in words]
    assert misc[4]["Gold"] == "yes"
    assert all(0.0 <= float(m["HeadProb"]) <= 1.0 and float(m["HeadEntropy"]) >= 0.0 for m in misc)
    assert any(line.startswith("# tree_entropy = ") for line in first)


def test_annotate_to_docbin_shards(model, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("One two. Three.\nFour five six.\n")
    target = tmp_path / "out.spacy"
    assert cli.main(["annotate", str(source), "-o", str(target), "--model", model, "--samples", "2"]) == 0
    docs = list(cli.read_docbin(target, spacy.blank("en").vocab))
    expected = reference(model, "One two. Three.", n_samples=2)
    assert [d.text for d in docs] == ["One two. Three.", "Four five six."]
    assert docs[0]._.parser_scores is None  # raw scores are not written
    assert [t._.head_prob for t in docs[0]] == [t._.head_prob for t in expected]
    assert docs[0]._.sampled_doc(1).to_json()["tokens"] == expected._.sampled_doc(1).to_json()["tokens"]
    with pytest.raises(SystemExit, match="not an empty directory"):
        cli.main(["annotate", str(source), "-o", str(target), "--model", model])


def test_annotate_with_two_processes_matches_one(model, tmp_path, capsys):
    source = tmp_path / "in.txt"
    source.write_text("\n".join(f"Sentence number {i} is here. And more." for i in range(12)) + "\nFAIL me.\n")
    one, two = tmp_path / "one.jsonl", tmp_path / "two.jsonl"
    assert cli.main(["annotate", str(source), "-o", str(one), "--model", model, "--samples", "2"]) == 0
    args = ["annotate", str(source), "-o", str(two), "--model", model, "--samples", "2", "--n-process", "2", "--batch-size", "4"]
    assert cli.main(args) == 0
    assert capsys.readouterr().err.count(f"{source}:13: ValueError: test scorer refuses") == 2
    assert one.read_text() == two.read_text()
    assert len(one.read_text().splitlines()) == 12


def test_render_command_writes_a_page(model, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("The cat sat. It purred.\nDogs bark.\nThird doc.\n")
    page = tmp_path / "page.html"
    assert cli.main(["render", str(source), "-o", str(page), "--model", model, "--limit", "2"]) == 0
    html = page.read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count('class="treexp-sentence"') == 3


def test_bad_arguments(model, tmp_path):
    with pytest.raises(SystemExit, match="input must end"):
        cli.main(["annotate", str(tmp_path / "x.csv"), "-o", str(tmp_path / "y.jsonl"), "--model", model])
    (tmp_path / "x.txt").write_text("Hi.\n")
    with pytest.raises(SystemExit, match="output must end"):
        cli.main(["annotate", str(tmp_path / "x.txt"), "-o", str(tmp_path / "y.csv"), "--model", model])
    with pytest.raises(SystemExit, match="--samples must be"):
        cli.main(["parse", "Hi.", "--samples", "-1", "--model", model])


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="cupy is installed")
def test_gpu_without_cupy_is_a_clear_error(model):
    with pytest.raises(SystemExit, match="--gpu 0: .*cupy"):
        cli.main(["parse", "Hi there.", "--model", model, "--gpu", "0"])


def test_pipeline_without_arc_scores_fails_at_once(tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.to_disk(tmp_path / "no_parser")
    with pytest.raises(SystemExit, match="writes arc scores"):
        cli.main(["parse", "Hi there.", "--model", str(tmp_path / "no_parser")])


def test_module_and_console_script_entry_points():
    script = Path(sys.executable).parent / "spacy-treexp"  # installed by pip with the package
    for command in ([sys.executable, "-m", "spacy_treexp", "--help"], [str(script), "--help"]):
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0 and "annotate" in result.stdout and "render" in result.stdout


STANZA_DIR = Path(__file__).parent / "fixtures" / "stanza" / "tiny"


@pytest.mark.skipif(not (STANZA_DIR / "depparse.pt").exists(), reason="tiny Stanza fixture missing")
def test_annotate_with_a_stanza_pipeline_keeps_gold_sentences(tmp_path, capsys):
    source = tmp_path / "in.conllu"
    source.write_text(CONLLU)
    target = tmp_path / "out.jsonl"
    assert cli.main(["annotate", str(source), "-o", str(target), "--stanza", str(STANZA_DIR), "--samples", "2"]) == 0
    records = [json.loads(line) for line in target.read_text().splitlines()]
    assert [[t["text"] for s in r["sentences"] for t in s["tokens"]] for r in records] == [
        ["Hello", ".", "World", "do", "n't", "!"], ["Yes", "."]
    ]
    assert all(len(r["sentences"]) == 1 for r in records)
    for token in (t for r in records for s in r["sentences"] for t in s["tokens"]):
        assert 0.0 <= token["head_prob"] <= 1.0 and token["head_entropy"] >= 0.0
    assert all(len(s["samples"]) == 2 for r in records for s in r["sentences"])
    with pytest.raises(SystemExit, match="either --model or --stanza"):
        cli.main(["parse", "Hi .", "--stanza", str(STANZA_DIR), "--model", "x"])


def test_evaluate_subcommand_runs_the_evaluation(tmp_path, capsys):
    from spacy_treexp.cli import main as cli_main

    missing = tmp_path / "missing.conllu"
    assert cli_main(["evaluate", "--model", "x", "--conllu", str(missing), "--out", str(tmp_path)]) == 2
    assert "not found" in capsys.readouterr().err


def test_word_heads_drop_whitespace_tokens():
    # tokens: 1 a, 2 "\n", 3 b, 4 " ", 5 c; b hangs from the "\n" token, which hangs from a
    assert cli.word_heads([0, 1, 2, 3, 3], [False, True, False, True, False]) == [0, 1, 2]
    assert cli.word_heads([-1, -1, -1], [False, True, False]) == [-1, -1]  # padding rows stay -1
    assert cli.word_heads([0, 1], [True, False]) == [0]  # under a whitespace root: the root


def test_conllu_output_has_no_whitespace_tokens(tmp_path):
    """Line breaks, tabs and double spaces become SpacesAfter; the file stays valid CoNLL-U."""
    nlp = spacy.blank("en")
    nlp.add_pipe("paragraph_breaks")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("treexp_test_scorer")
    path = tmp_path / "pipeline"
    nlp.to_disk(path)
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps({"text": "The cat\tsat.\n\nA  dog|barked"}) + "\n")
    target = tmp_path / "out.conllu"
    assert cli.main(["annotate", str(source), "-o", str(target), "--model", str(path), "--samples", "3"]) == 0
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
