"""spacy_treexp.evaluation.epistemic: the risk temperature is recovered from data generated
at a known one; parse log-probabilities match enumeration; the local baselines match a
direct softmax; the AUROC table separates what it should."""

from __future__ import annotations

import numpy
import pytest
import torch
from helpers.enumerate_trees import tree_log_probs

from spacy_treexp import TreeDistribution
from spacy_treexp.annotate import pad_scores
from spacy_treexp.evaluation.epistemic import auroc_table, fit_risk_temperature, local_scores, parse_log_probs


def random_sentences(count: int, seed: int):
    rng = numpy.random.default_rng(seed)
    return [rng.normal(scale=2.0, size=(n + 1, n + 1)) for n in rng.integers(2, 6, size=count)]


def test_parse_log_probs_match_enumeration():
    arcs = random_sentences(5, 0)
    heads = [TreeDistribution(torch.from_numpy(a)).mode[1:].numpy() for a in arcs]
    got = parse_log_probs(arcs, heads, 0.7)
    for arc, h, value in zip(arcs, heads, got):
        n = arc.shape[0] - 1
        trees, lp = tree_log_probs(torch.from_numpy(arc / 0.7), n, True)
        index = (trees[:, 1:] == torch.from_numpy(h)).all(-1)
        assert value == pytest.approx(float(lp[index][0]), abs=1e-9)


def test_fit_recovers_the_temperature_that_generated_the_errors():
    arcs = random_sentences(400, 1)
    scores, lengths = pad_scores(arcs)
    parse = TreeDistribution(scores, lengths).mode
    gold = TreeDistribution(scores / 0.5, lengths).sample((1,), generator=torch.Generator().manual_seed(2))[0]
    heads = [parse[b, 1 : n + 1].numpy() for b, n in enumerate(lengths.tolist())]
    wrong = [bool((gold[b] != parse[b]).any()) for b in range(len(arcs))]
    fit = fit_risk_temperature(arcs, heads, numpy.array(wrong), grid=numpy.round(numpy.arange(0.2, 1.41, 0.1), 2))
    assert abs(fit["risk_temperature"] - 0.5) <= 0.15
    assert fit["log_loss"] < fit["log_loss_at_1"]
    assert not fit["at_edge"]


def test_a_flat_log_loss_keeps_the_risk_temperature_at_1_and_an_edge_is_flagged():
    """Scores that cannot tell parses apart (all equal) give the same log-loss at every T: the
    fit returned the grid's first T, 0.3, which a map then carried to every later sentence
    (one dev sentence parsed right gave 0.30 too). Errors beyond the grid's reach are flagged."""
    ties = [numpy.zeros((4, 4)) for _ in range(20)]
    heads = [numpy.array([0, 1, 1]) for _ in ties]
    flat = fit_risk_temperature(ties, heads, numpy.array([True, False] * 10))
    assert flat["risk_temperature"] == 1.0 and not flat["at_edge"]
    arcs = random_sentences(200, 2)
    scores, lengths = pad_scores(arcs)
    parse = TreeDistribution(scores, lengths).mode
    heads = [parse[b, 1 : n + 1].numpy() for b, n in enumerate(lengths.tolist())]
    always_wrong = fit_risk_temperature(arcs, heads, numpy.ones(len(arcs), dtype=bool))
    assert always_wrong["risk_temperature"] == 1.5 and always_wrong["at_edge"]


def test_local_scores_are_a_per_word_softmax():
    arc = numpy.array([[0.0, 1.0, 0.5], [0.0, 0.0, 2.0], [0.0, -1.0, 0.0]])
    column1 = numpy.exp([1.0, -1.0]) / numpy.exp([1.0, -1.0]).sum()  # heads 0, 2 of word 1
    column2 = numpy.exp([0.5, 2.0]) / numpy.exp([0.5, 2.0]).sum()  # heads 0, 1 of word 2
    entropy = -(column1 * numpy.log(column1)).sum() - (column2 * numpy.log(column2)).sum()
    got = local_scores(arc, numpy.array([0, 1]))
    assert got["local_head_entropy"] == pytest.approx(entropy / 2)
    assert got["local_expected_errors"] == pytest.approx((1 - column1[0]) + (1 - column2[1]))


def test_auroc_table():
    positive = numpy.array([0, 0, 1, 1, 0, 1], dtype=bool)
    table = auroc_table({"perfect": positive.astype(float), "reversed": -positive.astype(float)}, positive, n_boot=50)
    assert table["perfect"]["auroc"] == 1.0 and table["reversed"]["auroc"] == 0.0
    assert table["perfect"]["low"] <= 1.0 <= table["perfect"]["high"] + 1e-12


class _Gold:
    def __init__(self, heads):
        self.heads, self.deprels = heads, []


@pytest.mark.parametrize("map_temperature", [None, 2.0])
def test_the_maps_risk_temperature_is_fitted_on_top_of_the_map(map_temperature):
    """Gold trees drawn at risk temperature 0.5 of the *calibrated* scores: the fit with the
    map applied recovers 0.5 (with and without a map), the parse being each record's MAP tree."""
    from spacy_treexp.annotate import SentenceScores
    from spacy_treexp.calibration import CalibrationMap
    from spacy_treexp.evaluation.epistemic import fit_map_risk_temperature

    calibration = None if map_temperature is None else CalibrationMap.temperature(map_temperature)
    arcs = random_sentences(400, 3)
    calibrated = arcs if calibration is None else [calibration.apply_arc(a) for a in arcs]
    scores, lengths = pad_scores(calibrated)
    drawn = TreeDistribution(scores / 0.5, lengths).sample((1,), generator=torch.Generator().manual_seed(4))[0]
    gold = [_Gold(numpy.r_[-1, drawn[b, 1 : n + 1].numpy()]) for b, n in enumerate(lengths.tolist())]
    fit = fit_map_risk_temperature(calibration, gold, [SentenceScores(arc=a) for a in arcs])
    assert abs(fit["risk_temperature"] - 0.5) <= 0.15
    assert fit["log_loss"] < fit["log_loss_at_1"]
    assert not fit["at_edge"]


def test_the_annotation_core_takes_the_maps_risk_temperature_unless_one_is_set():
    import dataclasses

    from spacy_treexp.annotate import AnnotateOptions, SentenceScores, annotate_sentences
    from spacy_treexp.calibration import CalibrationMap

    sentences = [SentenceScores(arc=a) for a in random_sentences(6, 5)]
    plain = CalibrationMap.temperature(1.5)
    with_risk = dataclasses.replace(plain, risk_temperature=0.6)

    def risk(options, calibration):
        return [a.error_probability for a in annotate_sentences(sentences, options, calibration)]

    assert risk(AnnotateOptions(), with_risk) == pytest.approx(risk(AnnotateOptions(risk_temperature=0.6), plain))
    assert risk(AnnotateOptions(risk_temperature=1.0), with_risk) == pytest.approx(risk(AnnotateOptions(), plain))
    assert risk(AnnotateOptions(), with_risk) != pytest.approx(risk(AnnotateOptions(), plain))


def test_map_trees_are_the_most_probable_trees_by_enumeration():
    from spacy_treexp.evaluation.epistemic import map_trees

    arcs = random_sentences(6, 7)
    for arc, tree in zip(arcs, map_trees(arcs)):
        n = arc.shape[0] - 1
        trees, lp = tree_log_probs(torch.from_numpy(arc), n, True)
        assert (trees[int(lp.argmax())][1:].numpy() == tree).all()


def test_risk_section_scores_the_parses_as_the_pipeline_annotates_them():
    """Gold trees drawn from the calibrated distribution itself: the error probability under
    the map ranks the wrong parses well above chance, the report's AUROCs are the ones of the
    annotated records (map and risk temperature applied), per genre too, and the mixture's
    risk appears once the scores carry members."""
    import dataclasses

    from spacy_treexp.annotate import AnnotateOptions, SentenceScores, annotate_sentences
    from spacy_treexp.calibration import CalibrationMap
    from spacy_treexp.evaluation.epistemic import has_attachment_error, risk_section
    from spacy_treexp.evaluation.metrics import auroc

    calibration = dataclasses.replace(CalibrationMap.temperature(2.0), risk_temperature=0.8)
    arcs = random_sentences(300, 4)
    scores, lengths = pad_scores([calibration.apply_arc(a) for a in arcs])
    drawn = TreeDistribution(scores, lengths).sample((1,), generator=torch.Generator().manual_seed(7))[0]
    gold = [_Gold(numpy.r_[-1, drawn[b, 1 : n + 1].numpy()]) for b, n in enumerate(lengths.tolist())]
    rng = numpy.random.default_rng(3)
    sentences = [
        SentenceScores(arc=a, text=f"s{i}", members=numpy.stack([a, a + rng.normal(0, 1, a.shape)]))
        for i, a in enumerate(arcs)
    ]
    labels = ["weblog" if i % 2 else "email" for i in range(len(arcs))]
    section = risk_section(gold, sentences, calibration, labels, n_boot=50)
    records = annotate_sentences(sentences, AnnotateOptions(seed=0), calibration)
    wrong = has_attachment_error([r.heads for r in records], [g.heads[1:] for g in gold])
    assert section["all"]["with_error"] == pytest.approx(wrong.mean()) and 0.2 < wrong.mean() < 0.95
    expected = auroc(numpy.array([r.error_probability for r in records]), wrong)
    assert section["all"]["auroc"]["error_probability"]["auroc"] == pytest.approx(expected)
    assert expected > 0.7  # the map's own distribution: its risk is informative
    for name in ("mixture_error_probability", "local_expected_errors", "local_head_entropy", "length"):
        assert name in section["all"]["auroc"]
    assert "novelty" not in section["all"]["auroc"]  # no reference: left out, not NaN
    email = numpy.array(labels) == "email"
    assert section["genres"]["email"]["sentences"] == email.sum()
    in_email = auroc(numpy.array([r.error_probability for r in records])[email], wrong[email])
    assert section["genres"]["email"]["auroc"]["error_probability"]["auroc"] == pytest.approx(in_email)
    assert risk_section(gold, sentences, None, n_boot=10)["map"] is None


def test_risk_section_leaves_out_a_score_some_sentences_lack_everywhere_and_says_so():
    """Members on some sentences only (a custom score source, a Stanza folder): the
    members' scores are left out overall and in every genre alike (a genre whose sentences
    all have members reported them alone, and summary.md, whose rows follow the overall
    column, dropped them silently), and the report names them with how many sentences lack
    them. A file whose parses are all right gets a line, not an empty table."""
    from spacy_treexp.annotate import SentenceScores, annotate_sentences
    from spacy_treexp.evaluation.epistemic import risk_section
    from spacy_treexp.evaluation.report import risk_lines

    arcs = random_sentences(120, 5)
    scores, lengths = pad_scores(arcs)
    drawn = TreeDistribution(scores, lengths).sample((1,), generator=torch.Generator().manual_seed(2))[0]
    gold = [_Gold(numpy.r_[-1, drawn[b, 1 : n + 1].numpy()]) for b, n in enumerate(lengths.tolist())]
    rng = numpy.random.default_rng(4)
    with_members = [i % 3 != 0 for i in range(len(arcs))]
    sentences = [
        SentenceScores(arc=a, text=f"s{i}", members=numpy.stack([a, a + rng.normal(0, 1, a.shape)]) if has else None)
        for i, (a, has) in enumerate(zip(arcs, with_members))
    ]
    labels = ["email" if has else "weblog" for has in with_members]  # email: every sentence has members
    section = risk_section(gold, sentences, None, labels, n_boot=20)
    assert "mutual_information" not in section["all"]["auroc"]
    assert all("mutual_information" not in block["auroc"] for block in section["genres"].values())
    assert section["left_out"]["mixture_error_probability"] == 40 and "novelty" not in section["left_out"]
    text = "\n".join(risk_lines(section))
    assert "`mixture_error_probability` (40 of 120)" in text
    right = [_Gold(numpy.r_[-1, r.heads]) for r in annotate_sentences(sentences[:5])]
    lines = risk_lines(risk_section(right, sentences[:5], None, n_boot=5))
    assert "No AUROC: every parse is right." in lines and not any(line.startswith("| score") for line in lines)


def test_risk_section_takes_the_risk_temperature_the_pipeline_sets():
    """evaluate reads the risk temperature of the pipeline's tree_expectations, not only the
    map's: the report's error_probability is then the one the pipeline writes."""
    import spacy

    from spacy_treexp.annotate import AnnotateOptions, SentenceScores, annotate_sentences
    from spacy_treexp.evaluation.epistemic import has_attachment_error, risk_section
    from spacy_treexp.evaluation.metrics import auroc
    from spacy_treexp.evaluation.run import _annotator_risk_temperature

    arcs = random_sentences(200, 9)
    sentences = [SentenceScores(arc=a, text=f"s{i}") for i, a in enumerate(arcs)]
    scores, lengths = pad_scores(arcs)
    drawn = TreeDistribution(scores, lengths).sample((1,), generator=torch.Generator().manual_seed(2))[0]
    gold = [_Gold(numpy.r_[-1, drawn[b, 1 : n + 1].numpy()]) for b, n in enumerate(lengths.tolist())]
    expected = []
    for temperature in (0.3, 3.0):
        records = annotate_sentences(sentences, AnnotateOptions(risk_temperature=temperature))
        wrong = has_attachment_error([r.heads for r in records], [g.heads[1:] for g in gold])
        expected.append(auroc(numpy.array([r.error_probability for r in records]), wrong))
        got = risk_section(gold, sentences, n_boot=10, risk_temperature=temperature)["all"]["auroc"]
        assert got["error_probability"]["auroc"] == pytest.approx(expected[-1])
    assert abs(expected[0] - expected[1]) > 1e-3  # the temperature changes the ranking: a test that can fail
    nlp = spacy.blank("en")
    assert _annotator_risk_temperature(nlp) is None
    nlp.add_pipe("tree_expectations", config={"risk_temperature": 0.7})
    assert _annotator_risk_temperature(nlp) == 0.7
