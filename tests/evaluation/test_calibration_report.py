"""Equal-width ECE, the chance band, and the calibration block (tree vs local softmax, per
genre) on synthetic corpora whose gold trees are drawn from the scores' own distribution."""

import types

import numpy
import pytest
import torch

from spacy_treexp.annotate import AnnotateOptions, SentenceScores, annotate_sentences
from spacy_treexp.calibration import CalibrationMap
from spacy_treexp.engine import TreeDistribution
from spacy_treexp.evaluation import metrics
from spacy_treexp.evaluation.calibration_report import (
    calibration_section,
    fit_local_temperature,
    genre,
    predicted_heads,
    word_arrays,
)
from spacy_treexp.evaluation.conllu import GoldSentence


def test_equal_width_ece_known_answer():
    confidence = [0.05, 0.05, 0.95, 0.95]
    correct = [0, 1, 1, 1]
    # bin 0: |0.5 - 0.05| * 2; bin 14: |1 - 0.95| * 2; over 4 predictions
    assert metrics.equal_width_ece(confidence, correct, 15) == pytest.approx((0.9 + 0.1) / 4)
    assert metrics.equal_width_ece([1.0], [1], 15) == 0.0  # 1.0 falls in the last bin
    bins = metrics.equal_width_bins(confidence, correct, 15)
    assert [b["count"] for b in bins] == [2, 2] and bins[0]["accuracy"] == 0.5


def test_chance_band_covers_perfect_calibration_and_not_a_biased_model():
    rng = numpy.random.default_rng(0)
    confidence = rng.beta(5, 1, 3000)
    band = metrics.chance_ece_band(confidence, 15, replicates=400, seed=1)
    draws = [metrics.equal_width_ece(confidence, rng.random(3000) < confidence) for _ in range(200)]
    assert 0.90 <= numpy.mean(numpy.array(draws) < band) <= 0.99
    over_confident = rng.random(3000) < confidence - 0.08
    assert metrics.equal_width_ece(confidence, over_confident) > band


def _corpus(count, seed, temperature=1.0, with_tree=False):
    """Sentences with random scores; gold trees drawn at ``temperature``; two genres;
    ``with_tree``: the scores carry the parser's tree (their MAP tree)."""
    rng = numpy.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    gold, scores = [], []
    for i in range(count):
        n = int(rng.integers(2, 9))
        arc = rng.normal(0, 3.0, (n + 1, n + 1))
        dist = TreeDistribution(torch.from_numpy(arc / temperature).unsqueeze(0))
        heads = dist.sample((1,), method="colbourn", generator=generator)[0, 0].numpy()
        words = [f"w{k}" for k in range(n)]
        gold.append(GoldSentence(f"{'ab'[i % 2]}-{i}", words, heads, ["dep"] * n))
        tree = dist.mode[0, 1:].numpy() if with_tree else None
        scores.append(SentenceScores(arc=arc, heads=tree))
    return gold, scores


def test_word_arrays_agree_with_the_core_and_a_softmax():
    gold, scores = _corpus(6, seed=0)
    calibration = CalibrationMap.temperature(1.5)
    words = word_arrays(gold, scores, calibration, local_temperature=2.0)
    annotations = annotate_sentences(scores, AnnotateOptions(), calibration)
    offset = 0
    for sentence, score, annotation in zip(gold, scores, annotations):
        n = sentence.n
        predicted = annotation.heads  # the MAP tree of the raw scores: the map keeps it
        numpy.testing.assert_allclose(words["tree"][offset : offset + n], annotation.head_prob, atol=1e-6)
        for m in range(1, n + 1):
            column = numpy.array([score.arc[h, m] / 2.0 for h in range(n + 1) if h != m])
            p = numpy.exp(score.arc[predicted[m - 1], m] / 2.0) / numpy.exp(column).sum()
            assert words["local"][offset + m - 1] == pytest.approx(p)
        assert (words["head_ok"][offset : offset + n] == (predicted == sentence.heads[1:])).all()
        offset += n
    assert genre("weblog-juancole.com_x-0001") == "weblog" and genre("noprefix") == "all"


def test_local_temperature_recovers_a_known_local_temperature():
    rng = numpy.random.default_rng(1)
    gold, scores = [], []
    for i in range(300):  # heads drawn per word from the softmax at T = 2 (no tree constraint)
        n = 6
        arc = rng.normal(0, 3.0, (n + 1, n + 1))
        heads = [-1]
        for m in range(1, n + 1):
            candidates = [h for h in range(n + 1) if h != m]
            p = numpy.exp(arc[candidates, m] / 2.0)
            heads.append(candidates[rng.choice(len(candidates), p=p / p.sum())])
        gold.append(GoldSentence(str(i), ["w"] * n, numpy.array(heads), ["dep"] * n))
        scores.append(SentenceScores(arc=arc))
    assert fit_local_temperature(gold, scores) == pytest.approx(2.0, rel=0.1)


def test_word_arrays_read_the_tree_the_core_annotates_when_the_source_gives_none():
    gold, scores = _corpus(12, seed=4)  # scores without the parser's tree
    rng = numpy.random.default_rng(4)
    identity = CalibrationMap.identity("distance")
    biases = tuple(float(b) for b in rng.normal(0, 4.0, len(identity.bias)))
    calibration = CalibrationMap("distance", identity.log_scale, biases, identity.edges)
    annotations = annotate_sentences(scores, AnnotateOptions(), calibration)
    raw = annotate_sentences(scores, AnnotateOptions())
    assert any((a.heads != r.heads).any() for a, r in zip(annotations, raw))  # the map moved some MAP trees
    words = word_arrays(gold, scores, calibration)
    numpy.testing.assert_allclose(words["tree"], numpy.concatenate([a.head_prob for a in annotations]), atol=1e-6)
    right = numpy.concatenate([a.heads == g.heads[1:] for a, g in zip(annotations, gold)])
    assert (words["head_ok"] == right).all()


def test_predicted_heads_are_the_parsers_tree_else_the_map_tree():
    """Sentences with and without the parser's tree, in order, in the engine's layout."""
    rng = numpy.random.default_rng(7)
    arcs = [rng.normal(0, 3, (n + 1, n + 1)).astype(numpy.float32) for n in (4, 3, 5)]
    given = numpy.array([0, 1, 2])  # a chain from ROOT for the 3-word sentence
    scores = [SentenceScores(arcs[0]), SentenceScores(arcs[1], heads=given), SentenceScores(arcs[2])]
    heads = predicted_heads(scores)
    assert [h.tolist() for h in heads[1:2]] == [[-1, 0, 1, 2]]
    for i in (0, 2):
        mode = TreeDistribution(torch.as_tensor(arcs[i])[None], torch.tensor([len(arcs[i]) - 1]), single_root=True).mode
        assert heads[i].tolist() == mode[0].tolist()


def test_calibration_section_per_genre_with_targets():
    dev_gold, dev_scores = _corpus(160, seed=2, temperature=2.0, with_tree=True)
    gold, scores = _corpus(160, seed=3, temperature=2.0, with_tree=True)
    section = calibration_section(gold, scores, dev_gold, dev_scores, bootstrap_replicates=20)
    test = section["test"]
    assert set(test) == {
        "tree, raw",
        "local softmax, raw",
        "tree, temperature (dev)",
        "tree, distance map (dev)",
        "local softmax, temperature (dev)",
    }
    assert set(test["tree, raw"]["genres"]) == {"a", "b"}
    assert CalibrationMap.from_dict(section["maps"]["temperature"]).arc_temperature == pytest.approx(2.0, rel=0.15)
    raw, scaled = test["tree, raw"]["overall"], test["tree, temperature (dev)"]["overall"]
    assert scaled["gold_head_nll"] < raw["gold_head_nll"]  # scores drawn at T = 2: T = 1 is too sharp
    assert scaled["uas"] == raw["uas"] and section["targets"]["uas_unchanged"]
    low, high = raw["bootstrap_95"]["arc_ece"]
    assert low <= high
    for block in test["tree, raw"]["genres"].values():  # each genre's own interval, from its sentences
        low, high = block["bootstrap_95"]["auroc"]
        assert low < high
    from spacy_treexp.evaluation.report import calibration_lines

    text = "\n".join(calibration_lines(section))
    genre_a = test["tree, raw"]["genres"]["a"]["bootstrap_95"]["arc_ece"]
    assert f"[{genre_a[0]:.4f}, {genre_a[1]:.4f}]" in text
    assert set(section["targets"]["arc_ece_below_chance_band_per_genre"]) == {"a", "b"}


def test_genres_come_from_ewt_style_ids_only():
    from spacy_treexp.evaluation.calibration_report import MAX_GENRES, genre, genres

    assert genre("weblog-blogspot.com_x-0001") == "weblog"
    assert genre("s1") == "all"
    assert genre("line-17") == "all"  # the id the reader gives a sentence without one
    assert genres(["email-1", "answers-2", "email-3"]) == ["email", "answers", "email"]
    many = [f"doc{k}-s1" for k in range(MAX_GENRES + 1)]
    assert genres(many) == ["all"] * len(many)


def test_sentences_without_a_genre_beside_others_are_not_named_all():
    """A treebank where some sentences have no ``sent_id`` (or one without a genre prefix):
    those sentences were the genre ``all``, so summary.md's per-genre tables showed them as a
    column ``all`` (read as the whole file), and the sentence-risk table had two ``all``
    columns, the whole file's and theirs."""
    from spacy_treexp.evaluation.calibration_report import NO_GENRE, genres
    from spacy_treexp.evaluation.epistemic import map_trees, risk_section
    from spacy_treexp.evaluation.report import risk_lines

    ids = ["email-1", "s2", "weblog-3", "line-4"] * 10
    assert genres(ids)[:4] == ["email", NO_GENRE, "weblog", NO_GENRE]
    assert genres(["s1", "line-2"]) == ["all", "all"]  # no genre anywhere: one column, as before
    rng = numpy.random.default_rng(0)
    sentences = [SentenceScores(arc=rng.normal(0, 2, (5, 5)), text=f"s{i}") for i in range(len(ids))]
    trees = map_trees([s.arc for s in sentences])
    gold = [types.SimpleNamespace(heads=numpy.r_[-1, t if i % 3 else t[::-1]]) for i, t in enumerate(trees)]
    lines = risk_lines(risk_section(gold, sentences, None, genres(ids), n_boot=5))
    header = next(line for line in lines if line.startswith("| score"))
    columns = [cell.strip() for cell in header.strip("|").split("|")][1:]
    assert sorted(columns) == sorted(["all", "email", "weblog", NO_GENRE])


def test_bootstrap_leaves_out_resamples_without_an_auroc():
    """A genre whose wrong heads sit in one sentence: resamples without that sentence have no
    AUROC and are left out of its interval (they made the whole interval nan)."""
    from spacy_treexp.evaluation.calibration_report import bootstrap

    rng = numpy.random.default_rng(0)
    sentence = numpy.repeat(numpy.arange(10), 3)
    head_ok = numpy.ones(30, dtype=bool)
    head_ok[[0, 1]] = False  # both wrong heads in sentence 0
    words = {"sentence": sentence, "head_prob": rng.uniform(0.3, 1.0, 30), "head_ok": head_ok}
    intervals = bootstrap(words, "head_prob", replicates=200, seed=0)
    low, high = intervals["auroc"]
    assert numpy.isfinite([low, high]).all() and 0.0 <= low <= high <= 1.0
    assert 0 < intervals["auroc_draws"] < 200  # (9/10)^10 of the resamples miss sentence 0
    assert numpy.isfinite(intervals["arc_ece"]).all()
    one = {key: value[sentence == 0] for key, value in words.items()}
    assert bootstrap(one, "head_prob", replicates=50, seed=0) == {}  # one sentence: no interval
