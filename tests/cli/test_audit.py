"""``spacy-treexp audit``: ranked JSONL/CSV, the HTML report, invalid and malformed gold
sentences, cross-fitted folds (injected trainer) and one-line user errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

GOLD = """# sent_id = ok
1	The	the	DET	DT	_	2	det	_	_
2	cat	cat	NOUN	NN	_	3	nsubj	_	_
3	sat	sit	VERB	VBD	_	0	root	_	_

# sent_id = two-roots
1	Dogs	dog	NOUN	NNS	_	0	nsubj	_	_
2	bark	bark	VERB	VBP	_	0	root	_	_

# sent_id = cycle
1	I	I	PRON	PRP	_	2	nsubj	_	_
2	saw	see	VERB	VBD	_	0	root	_	_
3	him	he	PRON	PRP	_	4	obj	_	_
4	there	there	ADV	RB	_	3	advmod	_	_

# sent_id = malformed
1	Bad	bad	ADJ	JJ	_	0	root	_

# sent_id = fails
1	FAIL	fail	VERB	VB	_	0	root	_	_

# sent_id = out-of-range
1	Go	go	VERB	VB	_	0	root	_	_
2	now	now	ADV	RB	_	7	advmod	_	_

"""


@pytest.fixture
def gold(tmp_path: Path) -> Path:
    path = tmp_path / "gold.conllu"
    path.write_text(GOLD, encoding="utf-8")
    return path


def test_audit_writes_ranked_jsonl_csv_and_html(run_cli, model, gold, tmp_path):
    out, table, page = tmp_path / "arcs.jsonl", tmp_path / "arcs.csv", tmp_path / "report.html"
    status, _, err = run_cli("audit", str(gold), "--model", model, "-o", str(out), "--html", str(page))
    assert status == 0, err
    assert (
        "gold.conllu:17: expected 10 tab-separated columns" in err
        and "2 sentence(s) skipped (malformed or not parsed)" in err
    )
    assert "sentence fails: test scorer refuses 'FAIL' (skipped)" in err
    assert "3 invalid gold tree(s)" in err
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 3 + 2 + 4 + 2  # every word of every well-formed sentence
    assert [r["score"] for r in rows] == sorted((r["score"] for r in rows), reverse=True)
    worst = [(r["sent_id"], r["id"]) for r in rows if r["score"] == rows[0]["score"]]
    assert ("out-of-range", 2) in worst and rows[0]["score"] == 1.0  # head 7 of 2 words: probability 0
    problems = {r["sent_id"]: r["tree_problem"] for r in rows}
    assert problems["ok"] is None and "2 roots" in problems["two-roots"] and "cycle" in problems["cycle"]
    html = page.read_text(encoding="utf-8")
    for sent_id in ("two-roots", "cycle", "out-of-range"):
        assert f'data-sent-id="{sent_id}"' in html
    status, _, err = run_cli("audit", str(gold), "--model", model, "-o", str(table), "--quiet")
    assert status == 0, err
    with open(table, encoding="utf-8", newline="") as handle:
        records = list(csv.DictReader(handle))
    assert [(r["sent_id"], int(r["id"])) for r in records] == [(r["sent_id"], r["id"]) for r in rows]


def test_audit_prints_the_top_arcs_without_outputs(run_cli, model, gold):
    status, out, err = run_cli("audit", str(gold), "--model", model, "--top", "3", "--quiet")
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("rank\tsent_id") and len(lines) == 4
    scores = [float(line.split("\t")[6]) for line in lines[1:]]
    assert scores == sorted(scores, reverse=True) and scores[0] == 1.0


def test_the_top_table_shows_a_head_that_is_not_a_number_as_a_dash(run_cli, model, tmp_path):
    path = tmp_path / "nonnumeric.conllu"
    path.write_text(
        "# sent_id = nonnum\n1\tGo\tgo\tVERB\tVB\t_\tx\troot\t_\t_\n2\tnow\tnow\tADV\tRB\t_\t1\tadvmod\t_\t_\n\n",
        encoding="utf-8",
    )
    status, out, err = run_cli("audit", str(path), "--model", model, "--top", "5", "--quiet")
    assert status == 0, err
    rows = [line.split("\t") for line in out.splitlines()[1:]]
    assert [row[4] for row in rows if row[3] == "Go"] == ["-"] and "None" not in out


def test_audit_folds_trains_one_model_per_fold(run_cli, model, gold, tmp_path, monkeypatch):
    import spacy_treexp.audit.run as run_module

    trained: list = []

    def fake_trainer(max_steps=None, max_seconds=None):
        def train(train_conllu, dev_conllu, output):
            trained.append((train_conllu.read_text(encoding="utf-8"), (max_steps, max_seconds)))
            return model

        return train

    monkeypatch.setattr(run_module, "default_trainer", fake_trainer)
    out = tmp_path / "folds.jsonl"
    status, _, err = run_cli(
        "audit",
        str(gold),
        "--folds",
        "2",
        "--train-steps",
        "5",
        "--train-seconds",
        "9",
        "-o",
        str(out),
    )
    assert status == 0, err
    assert len(trained) == 2 and all(limits == (5, 9.0) for _, limits in trained)
    assert "2 folds" in err
    # only the valid tree 'ok' can be trained on, and only by the fold that does not audit it
    assert sum("# sent_id = ok" in text for text, _ in trained) == 1
    assert len(out.read_text(encoding="utf-8").splitlines()) == 11


@pytest.mark.parametrize(
    "args, message",
    [
        (["missing.conllu"], "GOLD missing.conllu: no such file"),
        (["{gold}", "-o", "{tmp}/x.txt"], "expected a .jsonl or .csv"),
        (["{gold}", "--html", "{gold}"], "is the input file"),
        (["{gold}", "--html", "{tmp}/nofolder/r.html"], "no such folder"),
        (["{gold}", "--folds", "1"], "at least 2 folds"),
        (["{gold}", "--train-steps", "3"], "--train-steps and --train-seconds need --folds"),
        (["{gold}", "--model", "no-such-model-xyz"], "no such spaCy pipeline"),
        (["{gold}", "--model", "x", "--folds", "2"], "leave out --model"),
        (["{tmp}/notes.conllu"], "no sentence could be read as CoNLL-U: {tmp}/notes.conllu:1: expected 10"),
    ],
)
def test_audit_user_errors_are_one_line(user_error, gold, tmp_path, args, message):
    (tmp_path / "notes.conllu").write_text("hello world\n", encoding="utf-8")
    line = user_error("audit", *[a.format(gold=gold, tmp=tmp_path) for a in args])
    assert message.format(tmp=tmp_path) in line


def test_audit_folds_without_a_valid_tree_to_train_on_is_a_user_error(user_error, tmp_path):
    valid, invalid = GOLD.split("\n\n")[0], GOLD.split("\n\n")[1]  # 'ok', then 'two-roots'
    path = tmp_path / "gold.conllu"
    path.write_text("\n\n".join([valid, valid, invalid, invalid]) + "\n\n", encoding="utf-8")
    line = user_error("audit", str(path), "--folds", "2")
    assert f"--folds 2: GOLD {path}: fold 1 of 2 (sentences 1-2) has no valid gold tree outside it" in line


def test_audit_of_a_stanza_folder_reads_the_processors_probabilities(run_cli, tmp_path):
    """--stanza audits with a Stanza pipeline folder: each gold head's probability is the
    marginal of the processor's own tree distribution, with the map stored beside its model
    applied, on the gold words."""
    pytest.importorskip("stanza")
    import shutil

    import numpy
    import torch
    from helpers.paths import FIXTURES

    from spacy_treexp import TreeDistribution
    from spacy_treexp.calibration import CalibrationMap
    from spacy_treexp.calibration.map import calibrate_sentences
    from spacy_treexp.evaluation import read_conllu
    from spacy_treexp.evaluation.scores import stanza_scores

    folder, dev = tmp_path / "tiny", FIXTURES / "stanza" / "tiny_en.dev.conllu"
    shutil.copytree(FIXTURES / "stanza" / "tiny", folder)
    calibration = CalibrationMap.temperature(1.7)
    calibration.to_disk(folder / "treexp_calibration.json")  # where the processor reads it
    out = tmp_path / "arcs.jsonl"
    status, _, err = run_cli("audit", str(dev), "--stanza", str(folder), "-o", str(out), "--quiet")
    assert status == 0, err
    rows = [json.loads(line) for line in out.read_text(encoding="utf8").splitlines()]
    gold = read_conllu(dev)
    assert len(rows) == sum(g.n for g in gold)
    scores = calibrate_sentences(stanza_scores(str(folder), gold[:3]), calibration)
    for sentence, sentence_scores in zip(gold[:3], scores):
        marginals = TreeDistribution(torch.from_numpy(sentence_scores.arc).double()).marginals.numpy()
        by_id = {row["id"]: row for row in rows if row["sent_id"] == sentence.sent_id}
        for m in range(1, sentence.n + 1):
            assert by_id[m]["head_prob"] == pytest.approx(marginals[sentence.heads[m], m], abs=2e-6)
    raw = calibrate_sentences(stanza_scores(str(folder), gold[:1]), None)[0]
    assert not numpy.allclose(raw.arc, scores[0].arc)  # the map did change the scores
