"""Auditing a treebank in chunks, cross-fitted folds with an injected trainer, and the
JSONL / CSV / HTML outputs."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy
import pytest

from spacy_treexp.annotate import SentenceScores
from spacy_treexp.audit import ARC_FIELDS
from spacy_treexp.audit.report import arcs_csv, arcs_jsonl, audit_html, flagged_sentences
from spacy_treexp.audit.run import audit_cross_fitted, audit_treebank, fold_slices
from spacy_treexp.io import ConlluSentence, read_conllu

LABELS = ["ROOT", "nsubj", "obj", "det"]


def make_sentence(i: int, heads: list) -> ConlluSentence:
    rows = [
        (str(m), f"w{i}_{m}", "_", "X", "_", "_", str(h), "root" if h == 0 else "nsubj", "_", "_")
        for m, h in enumerate(heads, start=1)
    ]
    return ConlluSentence([f"# sent_id = s{i}"], rows, 10 * i + 1)


TREEBANK = [
    make_sentence(0, [2, 0, 2]),
    make_sentence(1, [0, 1, 1, 3]),
    make_sentence(2, [2, 0, 0]),  # two roots
    make_sentence(3, [0, 3, 2]),  # cycle
    make_sentence(4, [0, 9]),  # out of range
    make_sentence(5, [3, 3, 0, 3, 4]),
]


def random_scorer(seed: int = 0, calls: list | None = None):
    def score(sentences):
        if calls is not None:
            calls.append([s.sent_id for s in sentences])
        out = []
        for s in sentences:
            rng = numpy.random.default_rng([seed, int(s.sent_id[1:])])
            logits = rng.standard_normal((s.n + 1, s.n + 1, len(LABELS)))
            rel = logits - numpy.log(numpy.exp(logits).sum(-1, keepdims=True))
            out.append(SentenceScores(arc=2 * rng.standard_normal((s.n + 1, s.n + 1)), rel=rel, labels=LABELS))
        return out

    return score


def test_audit_treebank_streams_in_chunks_and_ranks_every_arc():
    calls: list = []
    done: list = []
    result = audit_treebank(iter(TREEBANK), random_scorer(calls=calls), chunk_size=4, progress=done.append)
    assert calls == [["s0", "s1", "s2", "s3"], ["s4", "s5"]] and done == [4, 2]
    assert [s.sent_id for s in result.sentences] == [f"s{i}" for i in range(6)]
    assert len(result.ranked) == sum(s.n for s in TREEBANK)
    assert [a.rank for a in result.ranked] == list(range(1, len(result.ranked) + 1))
    scores = [a.score for a in result.ranked]
    assert scores == sorted(scores, reverse=True)
    problems = {s.sent_id: s.tree_problem for s in result.sentences}
    assert problems["s0"] is None and "2 roots" in problems["s2"] and "cycle" in problems["s3"]
    assert result.ranked[0].sent_id == "s4" and result.ranked[0].id == 2  # head 9: probability 0


def test_a_sentence_the_scorer_fails_on_is_reported_and_left_out():
    inner = random_scorer()

    def scorer(sentences):
        if any(s.sent_id == "s3" for s in sentences):
            raise ValueError("cannot parse s3")
        return inner(sentences)

    failed: list = []
    result = audit_treebank(TREEBANK, scorer, chunk_size=4, on_error=lambda s, e: failed.append((s.sent_id, str(e))))
    assert failed == [("s3", "cannot parse s3")]
    assert [s.sent_id for s in result.sentences] == ["s0", "s1", "s2", "s4", "s5"]
    with pytest.raises(ValueError, match="cannot parse s3"):
        audit_treebank(TREEBANK, scorer, chunk_size=4)


def test_fold_slices_cover_everything_once():
    slices = fold_slices(10, 3)
    assert [list(s) for s in slices] == [[0, 1, 2], [3, 4, 5, 6], [7, 8, 9]]
    with pytest.raises(ValueError, match="at least 2 folds"):
        fold_slices(10, 1)
    with pytest.raises(ValueError, match="cannot be cut"):
        fold_slices(2, 3)


def test_cross_fitted_audits_each_fold_with_a_model_that_never_saw_it(tmp_path, capsys):
    trained: dict = {}

    def trainer(train: Path, dev: Path, output: Path) -> str:
        print("a training log line")  # goes to stderr: stdout may carry the audit's output
        ids = [s.sent_id for s in read_conllu(train)] + [s.sent_id for s in read_conllu(dev)]
        trained[str(output)] = ids  # dev picks the checkpoint and fits the map: seen too
        return str(output)

    scored_by: dict = {}

    def scorer_for(model: str):
        scorer = random_scorer()

        def score(sentences):
            for s in sentences:
                scored_by[s.sent_id] = model
            return scorer(sentences)

        return score

    result = audit_cross_fitted(TREEBANK, 3, trainer, scorer_for, workdir=tmp_path)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("a training log line") == 3
    assert len(trained) == 3 and result.folds == 3 and len(result.train_seconds) == 3
    assert [s.sent_id for s in result.sentences] == [f"s{i}" for i in range(6)]
    valid = {s.sent_id for s in TREEBANK if s.tree_problem() is None}
    for sent_id, model in scored_by.items():
        assert sent_id not in trained[model]  # never trained on the sentence it audits
    for ids in trained.values():
        assert set(ids) <= valid  # invalid trees are not trained on
    assert set(scored_by) == {s.sent_id for s in TREEBANK}
    # the same numbers as a plain audit with the same scores
    plain = audit_treebank(TREEBANK, random_scorer())
    assert [(a.sent_id, a.id, a.score) for a in result.ranked] == [(a.sent_id, a.id, a.score) for a in plain.ranked]


def test_the_dev_set_of_a_fold_is_a_tenth_of_its_training_sentences():
    from spacy_treexp.audit.run import split_dev

    valid = TREEBANK * 5
    train, dev = split_dev(valid)
    assert len(dev) == len(valid) // 10 and train + dev == valid
    assert split_dev(TREEBANK[:1]) == (TREEBANK[:1], TREEBANK[:1])  # one sentence: both


def test_the_audit_reads_the_pipelines_calibrated_probabilities():
    """Its marginals are the ones the pipeline's tree_expectations gives (the shipped map applied)."""
    import spacy
    from spacy.tokens import Doc

    import spacy_treexp
    from spacy_treexp.audit.scoring import spacy_scorer
    from spacy_treexp.pipeline.tree_expectations import pipeline_calibration

    nlp = spacy_treexp.load()
    assert pipeline_calibration(nlp) is not None
    sentence = ConlluSentence(
        ["# sent_id = t1"],
        [
            ("1", "She", "_", "_", "_", "_", "2", "nsubj", "_", "_"),
            ("2", "reads", "_", "_", "_", "_", "0", "root", "_", "_"),
            ("3", "old", "_", "_", "_", "_", "4", "amod", "_", "_"),
            ("4", "books", "_", "_", "_", "_", "2", "obj", "_", "_"),
        ],
    )
    [audited] = audit_treebank([sentence], spacy_scorer(nlp)).sentences
    annotated = spacy.load(spacy_treexp.pipeline.default_model.MODEL_PATH)
    annotated.add_pipe("tree_expectations")
    doc = annotated(
        Doc(annotated.vocab, words=["She", "reads", "old", "books"], sent_starts=[True, False, False, False])
    )
    marginals = doc._.arc_marginals[0]
    for arc in audited.arcs:
        assert arc.head_prob == pytest.approx(float(marginals[arc.head, arc.id]), abs=1e-4)


def test_jsonl_and_csv_hold_every_field_in_rank_order():
    result = audit_treebank(TREEBANK, random_scorer())
    rows = [json.loads(line) for line in arcs_jsonl(result.ranked).splitlines()]
    assert len(rows) == len(result.ranked) and list(rows[0]) == list(ARC_FIELDS)
    assert [r["rank"] for r in rows] == list(range(1, len(rows) + 1))
    table = list(csv.DictReader(io.StringIO(arcs_csv(result.ranked))))
    assert [r["sent_id"] for r in table] == [r["sent_id"] for r in rows]
    for row, arc in zip(table, result.ranked):
        assert float(row["score"]) == pytest.approx(arc.score, abs=1e-6)
        assert row["head"] == ("" if arc.head is None else str(arc.head))
        assert row["conditional_head_prob"] == (
            "" if arc.conditional_head_prob is None else row["conditional_head_prob"]
        )


def test_html_shows_flagged_sentences_with_the_arc_highlighted():
    result = audit_treebank(TREEBANK, random_scorer())
    flagged = flagged_sentences(result.sentences, result.ranked, threshold=0.9, limit=100)
    for sentence, arcs in flagged:
        assert all(a.score >= 0.9 or a.in_problem for a in arcs)
    shown = {s.sent_id for s, _ in flagged}
    assert {"s2", "s3", "s4"} <= shown  # every invalid tree is flagged
    page = audit_html(result.sentences, result.ranked, threshold=0.9)
    assert page.startswith("<!DOCTYPE html>") and page.count('class="audit-sentence"') == len(flagged)
    assert "invalid tree: cycle" in page and "head 9?" in page
    top = result.ranked[0]
    assert f'data-sent-id="{top.sent_id}"' in page
    red = [a for a in result.ranked if a.score >= 0.9 and a.head is not None and 0 < a.head <= 5 and a.head != a.id]
    assert red
    for arc in red:  # drawn in red; a gold arc that is not flagged is grey
        assert f'data-head="{arc.head}" data-dep="{arc.id}" stroke="rgb(192,57,43)"' in page
    assert 'stroke="rgb(120,120,120)"' in page
    cut = audit_html(result.sentences, result.ranked, threshold=0.9, limit=1)
    assert cut.count('class="audit-sentence"') == 1
    # the page says the limit left flagged sentences out (it said "1 sentence(s) shown")
    assert f"1 of {len(flagged)} flagged sentence(s) shown (the limit)." in cut
    assert f"{len(flagged)} of {len(flagged)} flagged sentence(s) shown." in page


def test_spacy_trainer_converts_the_folds_and_runs_spacy_train(tmp_path, monkeypatch):
    import subprocess
    import sys

    from spacy.tokens import DocBin

    import spacy_treexp.audit.run as run_module
    from spacy_treexp.io import write_conllu

    commands: list = []

    def fake_run(command, **kwargs):
        commands.append(command)
        output = Path(command[command.index("--output") + 1])
        (output / "model-best").mkdir(parents=True)
        return subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(run_module.subprocess, "run", fake_run)
    train, dev = tmp_path / "train.conllu", tmp_path / "dev.conllu"
    write_conllu([s for s in TREEBANK if s.tree_problem() is None], train)
    write_conllu(TREEBANK[:1], dev)
    monkeypatch.setitem(sys.modules, "spacy_treexp.training.recipe", None)  # the project's trainer absent
    model = run_module.default_trainer(max_steps=7)(train, dev, tmp_path / "out")
    assert model == str(tmp_path / "out" / "model-best")
    (command,) = commands
    assert command[1:4] == ["-m", "spacy", "train"] and command[4] == str(run_module.shipped_config())
    assert command[command.index("--training.max_steps") + 1] == "7"
    assert command[command.index("--paths.vectors") + 1] == str(run_module.shipped_config().parent)
    import spacy

    docs = list(DocBin().from_disk(command[command.index("--paths.train") + 1]).get_docs(spacy.blank("en").vocab))
    assert sum(len(list(doc.sents)) for doc in docs) == 3  # the valid trees only


def test_a_failing_training_names_the_fold(tmp_path, monkeypatch):
    import subprocess

    import spacy_treexp.audit.run as run_module
    from spacy_treexp.io import write_conllu

    monkeypatch.setattr(
        run_module.subprocess, "run", lambda command, **kwargs: subprocess.CompletedProcess(command, 1, "", "boom\n")
    )
    write_conllu(TREEBANK[:2], tmp_path / "train.conllu")
    with pytest.raises(RuntimeError, match="spacy train failed .*boom"):
        run_module.spacy_trainer()(tmp_path / "train.conllu", tmp_path / "train.conllu", tmp_path / "out")


def test_a_fold_with_no_valid_tree_outside_it_is_refused_before_any_training():
    from spacy_treexp.audit.run import fold_training

    treebank = [TREEBANK[0], TREEBANK[1], TREEBANK[2], TREEBANK[3]]  # two valid trees, then two invalid
    trained: list = []

    def trainer(train: Path, dev: Path, output: Path) -> str:
        trained.append(train)
        return str(output)

    with pytest.raises(ValueError, match=r"fold 1 of 2 \(sentences 1-2\) has no valid gold tree outside it"):
        audit_cross_fitted(treebank, 2, trainer, lambda model: random_scorer())
    assert trained == []  # the first fold was not trained before the second one failed
    folds = fold_training(TREEBANK, 3)  # folds s0-s1, s2-s3, s4-s5; s2, s3 and s4 are invalid
    assert [[s.sent_id for s in train] for train in folds] == [["s5"], ["s0", "s1", "s5"], ["s0", "s1"]]
