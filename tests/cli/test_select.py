"""``spacy-treexp select``: the selection as JSONL within the budget, near-duplicates
skipped, strategies, and one-line user errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

CORPUS = """The cat sat on the mat. A dog barked at the moon.
the cat sat on the mat!
She reads old books in the garden every day.
My brother plays the guitar and sings.
Give me the red pen quickly, please.
"""


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "corpus.txt"
    path.write_text(CORPUS, encoding="utf-8")
    return path


def test_select_writes_the_best_sentences_within_the_word_budget(run_cli, model, corpus, tmp_path):
    out = tmp_path / "selection.jsonl"
    status, _, err = run_cli("select", str(corpus), "--model", model, "--budget", "1000", "-o", str(out))
    assert status == 0, err
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    texts = [r["text"] for r in rows]
    assert len(rows) == 5 and "1 near-duplicate(s) skipped" in err  # line 2 repeats a sentence of line 1
    assert ("The cat sat on the mat." in texts) != ("the cat sat on the mat!" in texts)
    scores = [r["score"] for r in rows]
    assert scores == sorted(scores, reverse=True)
    for r in rows:
        assert r["score"] == pytest.approx(r["expected_errors"] / r["words"])
        assert r["line"] in (1, 2, 3, 4, 5) and r["strategy"] == "expected_errors"
    assert [r["cumulative_words"] for r in rows] == [sum(r["words"] for r in rows[: k + 1]) for k in range(5)]
    status, small, err = run_cli("select", str(corpus), "--model", model, "--budget", "12", "--quiet")
    assert status == 0, err
    chosen = [json.loads(line) for line in small.splitlines()]
    assert chosen and sum(r["words"] for r in chosen) <= 12


def test_select_numbers_sentences_from_1_as_lines(run_cli, model, corpus):
    """A row's sentence is its 1-based place in the input line, as the line itself, parse's
    'Sentence 1' and annotate's sent_id 'line3-1' (it was 0-based beside a 1-based line)."""
    status, out, err = run_cli("select", str(corpus), "--model", model, "--budget", "1000", "--no-dedup", "--quiet")
    assert status == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    by_line: dict = {}
    for r in rows:
        by_line.setdefault(r["line"], []).append(r["sentence"])
    assert by_line and all(sorted(numbers) == list(range(1, len(numbers) + 1)) for numbers in by_line.values())


def test_select_by_entropy_sentences_and_random(run_cli, model, corpus):
    status, out, err = run_cli(
        "select", str(corpus), "--model", model, "--budget", "2", "--unit", "sentences", "--strategy", "entropy"
    )
    assert status == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 2 and all(r["score"] == pytest.approx(r["entropy"] / r["words"]) for r in rows)
    runs = [
        run_cli(
            "select",
            str(corpus),
            "--model",
            model,
            "--budget",
            "3",
            "--unit",
            "sentences",
            "--strategy",
            "random",
            "--seed",
            "5",
            "--no-dedup",
        )[1]
        for _ in range(2)
    ]
    assert runs[0] == runs[1] and len(runs[0].splitlines()) == 3


@pytest.mark.parametrize(
    "args, message",
    [
        (["{corpus}", "--budget", "10", "-o", "{tmp}/x.csv"], "expected a .jsonl path"),
        (["{corpus}", "--budget", "10", "--strategy", "mutual_information"], "needs an ensemble"),
        (["{tmp}/missing.txt", "--budget", "10"], "no such file"),
        (["{corpus}", "--budget", "10", "--dedup-threshold", "0"], "--no-dedup"),
    ],
)
def test_select_user_errors_are_one_line(user_error, model, corpus, tmp_path, args, message):
    line = user_error("select", *[a.format(corpus=corpus, tmp=tmp_path) for a in args], "--model", model)
    assert message in line


def test_select_fails_when_no_input_could_be_parsed(run_cli, model, tmp_path):
    source = tmp_path / "corpus.jsonl"
    source.write_text("a,b\n1,2\n", encoding="utf-8")  # a CSV named .jsonl: every line is a bad line
    out = tmp_path / "selection.jsonl"
    status, _, err = run_cli("select", str(source), "--model", model, "--budget", "10", "-o", str(out))
    assert status == 1
    assert "2 bad input(s) skipped" in err and "no input could be parsed" in err
    assert not out.exists()
    empty = tmp_path / "empty.txt"  # nothing to choose from is not a failure
    empty.write_text("", encoding="utf-8")
    status, text, err = run_cli("select", str(empty), "--model", model, "--budget", "10")
    assert status == 0 and text == "", err


def test_select_with_a_stanza_folder_ranks_by_the_processors_values(run_cli, tmp_path):
    """--stanza parses the corpus with a Stanza pipeline folder, as annotate --stanza does: each
    row's expected errors and entropy are the processor's values of that sentence."""
    pytest.importorskip("stanza")
    from helpers.paths import FIXTURES

    from spacy_treexp.stanza import pipeline_from_dir

    folder = FIXTURES / "stanza" / "tiny"
    lines = ["The dog barked at the cat.", "She reads books every day.", "Hello there."]
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(lines) + "\n", encoding="utf8")
    status, out, err = run_cli("select", str(corpus), "--budget", "100", "--stanza", str(folder), "--quiet")
    assert status == 0, err
    rows = [json.loads(line) for line in out.splitlines()]
    assert sorted(row["line"] for row in rows) == [1, 2, 3]
    nlp = pipeline_from_dir(str(folder), logging_level="WARN")
    for row in rows:
        sentence = nlp(lines[row["line"] - 1]).sentences[row["sentence"] - 1]
        assert row["expected_errors"] == pytest.approx(sentence.expected_errors, abs=1e-6)
        assert row["entropy"] == pytest.approx(sentence.tree_entropy, abs=1e-6)
    assert run_cli("select", str(corpus), "--budget", "5", "--stanza", str(folder), "--model", "x")[0] == 2
