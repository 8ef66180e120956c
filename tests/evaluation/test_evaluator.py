"""The evaluator on synthetic scores with known answers (no spaCy pipeline, no ../shared)."""

import numpy
import pytest
import torch
from helpers.enumerate_trees import all_trees
from helpers.paths import FIXTURES

from spacy_treexp import TreeDistribution
from spacy_treexp.annotate import SentenceScores
from spacy_treexp.evaluation import (
    EvalOptions,
    GoldSentence,
    entropy_quartic,
    evaluate,
    fit_arc_temperature,
    fit_rel_temperature,
    read_conllu,
    timing_table,
)
from spacy_treexp.evaluation.conllu import ConlluError

FIXTURE = FIXTURES / "eval_20.conllu"
FAST = EvalOptions(ks=(1, 5), reject_draws=2)


def gold_sentence(heads, labels=None, sent_id="s"):
    heads = numpy.asarray([-1] + list(heads))
    n = len(heads) - 1
    return GoldSentence(sent_id, [f"w{i}" for i in range(n)], heads, labels or ["dep"] * n, [True] * n)


def brute_force(arc):
    """Exact marginals and the MAP / MBR trees by enumerating every single-root tree."""
    n = arc.shape[0] - 1
    trees = all_trees(n, True)
    words = torch.arange(1, n + 1)
    log_w = torch.tensor(arc, dtype=torch.float64)[trees[:, 1:], words].sum(-1)
    p = torch.softmax(log_w, 0)
    mu = torch.zeros(n + 1, n + 1, dtype=torch.float64)
    for tree, prob in zip(trees, p):
        mu[tree[1:], words] += prob
    gain = mu[trees[:, 1:], words].sum(-1)
    return mu.numpy(), trees[int(log_w.argmax())].numpy(), trees[int(gain.argmax())].numpy()


def test_map_mbr_and_marginals_against_enumeration():
    rng = numpy.random.default_rng(3)
    found_difference = False
    for seed in range(40):
        arc = (3 * rng.standard_normal((5, 5))).astype(numpy.float32)
        mu, best, mbr = brute_force(arc)
        if (best != mbr).any():
            found_difference = True
            break
    assert found_difference, "need a distribution whose MBR tree differs from its MAP tree"
    gold = [gold_sentence(mbr[1:])]
    report = evaluate(gold, [SentenceScores(arc)], options=FAST)
    assert report["attachment"]["uas_mbr"] == 1.0  # the evaluator's MBR tree is the brute-force one
    assert report["attachment"]["uas_map"] == pytest.approx(float((best[1:] == mbr[1:]).mean()))
    expected = mu[mbr[1:], numpy.arange(1, 5)].sum() / 4
    assert report["attachment"]["expected_uas_of_a_sample"] == pytest.approx(expected, abs=1e-6)
    head_prob = mu[best[1:], numpy.arange(1, 5)]
    assert report["calibration"]["arc"]["mean_confidence"] == pytest.approx(head_prob.mean(), abs=1e-6)


def test_the_parsers_own_tree_is_the_predicted_tree_where_the_scores_carry_it():
    """Scores with the parser's tree (``heads``, e.g. under a calibration map that moved the
    MAP tree): UAS and head_prob describe that tree, as the pipeline's annotations do."""
    rng = numpy.random.default_rng(5)
    arc = (3 * rng.standard_normal((5, 5))).astype(numpy.float32)
    mu, best, mbr = brute_force(arc)
    parser = numpy.array([0, 1, 2, 3])  # a chain from ROOT: not the MAP tree of these scores
    assert (parser != best[1:]).any()
    gold = [gold_sentence(parser)]
    report = evaluate(gold, [SentenceScores(arc, heads=parser)], options=FAST)
    assert report["attachment"]["uas_map"] == 1.0
    assert report["attachment"]["parser_heads_equal_engine_map"] == pytest.approx(float((parser == best[1:]).mean()))
    head_prob = mu[parser, numpy.arange(1, 5)]
    assert report["calibration"]["arc"]["mean_confidence"] == pytest.approx(head_prob.mean(), abs=1e-6)
    without = evaluate(gold, [SentenceScores(arc)], options=FAST)  # no tree given: the MAP tree
    assert without["attachment"]["uas_map"] == pytest.approx(float((best[1:] == parser).mean()))


def test_without_replacement_enumerates_every_tree():
    # a 3-word sentence has 3^2 = 9 single-root trees: 20 draws without replacement find all
    rng = numpy.random.default_rng(0)
    arc = rng.standard_normal((4, 4)).astype(numpy.float32)
    gold = [gold_sentence([2, 0, 2])]
    report = evaluate(gold, [SentenceScores(arc)], options=EvalOptions(ks=(1, 20), reject_draws=0))
    samples = report["samples"]
    assert samples["without_replacement"]["distinct_trees_mean"]["20"] == 9
    assert samples["without_replacement"]["oracle_uas"]["20"] == 1.0
    assert samples["with_replacement"]["distinct_trees_mean"]["1"] == 1


def synthetic_corpus(count, n, scale, seed, sharpen=1.0):
    """Gold trees sampled from the distribution of random scores; scores returned × sharpen."""
    rng = numpy.random.default_rng(seed)
    arc = scale * rng.standard_normal((count, n + 1, n + 1))
    dist = TreeDistribution(torch.from_numpy(arc))
    heads = dist.sample(method="wilson_marginal", generator=torch.Generator().manual_seed(seed)).numpy()
    gold = [gold_sentence(h[1:], sent_id=f"s{i}") for i, h in enumerate(heads)]
    scores = [SentenceScores((sharpen * a).astype(numpy.float32)) for a in arc]
    return gold, scores


def test_true_model_is_calibrated_and_sharpened_model_is_not():
    gold, scores = synthetic_corpus(400, 8, 1.5, seed=1)
    report = evaluate(gold, scores, options=EvalOptions(samples=False, reject_draws=0))
    assert report["calibration"]["arc"]["ece"] < 0.05
    assert report["calibration"]["arc_all_candidates"]["ece"] < 0.02
    sharp = [SentenceScores(3 * s.arc) for s in scores]
    overconfident = evaluate(gold, sharp, options=EvalOptions(samples=False, reject_draws=0))
    assert overconfident["calibration"]["arc"]["ece"] > 0.1
    assert overconfident["attachment"]["uas_map"] == report["attachment"]["uas_map"]  # MAP is scale-free
    # error detection on a calibrated model beats chance clearly
    assert report["error_detection"]["auroc_one_minus_head_prob"] > 0.7
    assert report["error_detection"]["accuracy_most_certain"] > report["error_detection"]["accuracy_least_certain"]


def test_temperature_fit_recovers_the_sharpening():
    gold, scores = synthetic_corpus(200, 7, 1.5, seed=2, sharpen=2.5)
    fit = fit_arc_temperature(gold, scores)
    assert fit["status"] == "ok"
    assert fit["temperature"] == pytest.approx(2.5, rel=0.15)
    assert fit["nll_per_word_after"] < fit["nll_per_word_before"]
    calibrated = evaluate(
        gold, scores, arc_temperature=fit["temperature"], options=EvalOptions(samples=False, reject_draws=0)
    )
    raw = evaluate(gold, scores, options=EvalOptions(samples=False, reject_draws=0))
    assert calibrated["calibration"]["arc"]["ece"] < raw["calibration"]["arc"]["ece"]


def test_relation_temperature_and_labels():
    rng = numpy.random.default_rng(5)
    labels = ["ROOT", "a", "b"]
    gold, scores = [], []
    for i in range(200):
        n = 4
        arc = rng.standard_normal((n + 1, n + 1)).astype(numpy.float32)
        logits = rng.standard_normal((n + 1, n + 1, 3)) * 1.0
        probs = numpy.exp(logits) / numpy.exp(logits).sum(-1, keepdims=True)
        heads = TreeDistribution(torch.from_numpy(arc).double()).mode.numpy()
        names = [["root", "a", "b"][rng.choice(3, p=probs[heads[m], m])] for m in range(1, n + 1)]
        gold.append(gold_sentence(heads[1:], names, f"s{i}"))
        log_p = 3.0 * logits  # overconfident relation scores: T should come out near 3
        log_p = log_p - numpy.log(numpy.exp(log_p).sum(-1, keepdims=True))
        scores.append(SentenceScores(arc, log_p.astype(numpy.float32), labels))
    fit = fit_rel_temperature(gold, scores)
    assert fit["temperature"] == pytest.approx(3.0, rel=0.2)
    report = evaluate(gold, scores, options=EvalOptions(samples=False, reject_draws=0))
    assert report["attachment"]["uas_map"] == 1.0  # gold heads are the MAP trees
    assert report["attachment"]["las_map"] == report["attachment"]["label_accuracy_map"]


def test_root_label_and_subtypes():
    # word 1 is the root, word 2 depends on it; the model's root label is spaCy's "ROOT"
    arc = numpy.full((3, 3), -5.0, dtype=numpy.float32)
    arc[0, 1] = arc[1, 2] = 5.0
    labels = ["ROOT", "nmod:poss", "nmod"]
    rel = numpy.log(numpy.full((3, 3, 3), 0.1, dtype=numpy.float32))
    rel[0, 1] = numpy.log([0.8, 0.1, 0.1])
    rel[1, 2] = numpy.log([0.1, 0.8, 0.1])
    scores = [SentenceScores(arc, rel, labels)]
    exact = evaluate([gold_sentence([0, 1], ["root", "nmod:poss"])], scores, options=FAST)["attachment"]
    assert exact["las_map"] == 1.0
    other = evaluate([gold_sentence([0, 1], ["root", "nmod"])], scores, options=FAST)["attachment"]
    assert other["las_map"] == 0.5 and other["las_map_universal_labels"] == 1.0


def test_reject_rate_and_samples_are_consistent():
    gold, scores = synthetic_corpus(60, 6, 1.0, seed=4)
    report = evaluate(gold, scores, options=EvalOptions(ks=(1, 5, 20), reject_draws=20))
    reject = report["wilson_reject"]
    assert reject["expected_tries_mean"] >= 1.0
    assert reject["sentences_not_sampled"] == 0
    assert reject["measured_tries_per_tree"] == pytest.approx(reject["expected_tries_mean_on_sampled"], rel=0.15)
    assert reject["expected_tries_mean_on_sampled"] == pytest.approx(reject["expected_tries_mean"])
    for mode in ("with_replacement", "without_replacement"):
        oracle = report["samples"][mode]["oracle_uas"]
        assert oracle["1"] <= oracle["5"] <= oracle["20"] <= 1.0
    # one sample's UAS estimates the exact expected UAS of a sample
    assert report["samples"]["with_replacement"]["oracle_uas"]["1"] == pytest.approx(
        report["attachment"]["expected_uas_of_a_sample"], abs=0.06
    )
    distinct = report["samples"]["without_replacement"]["distinct_trees_mean"]
    assert distinct["20"] == 20  # 6 words have 6^5 trees


def test_quartic_baseline_matches_engine_entropy():
    torch.manual_seed(0)
    scores = 2 * torch.randn(4, 10, 10, dtype=torch.float64)
    lengths = torch.tensor([9, 4, 1, 7])
    expected = TreeDistribution(scores, lengths).entropy()
    assert torch.allclose(entropy_quartic(scores, lengths), expected, atol=1e-9)
    assert torch.allclose(entropy_quartic(scores[1, :5, :5]), expected[1], atol=1e-9)
    table = timing_table(
        [SentenceScores(scores[b, : n + 1, : n + 1].float().numpy()) for b, n in enumerate(lengths.tolist())], repeats=1
    )
    assert table["all"]["sentences"] == 4 and table["all"]["max_abs_entropy_difference"] < 1e-5


def test_read_conllu_fixture_and_errors(tmp_path):
    gold = read_conllu(FIXTURE)
    assert len(gold) == 20
    we_dont = gold[4]
    assert we_dont.words[:3] == ["We", "do", "n't"]  # the multiword token "don't" is split
    assert we_dont.spaces[:3] == [True, False, True]
    assert we_dont.heads.tolist() == [-1, 4, 4, 4, 0, 6, 4, 4]
    bad = tmp_path / "bad.conllu"
    bad.write_text("1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n2\tb\t_\t_\t_\t_\t0\troot\t_\t_\n", encoding="utf8")
    with pytest.raises(ConlluError, match="2 roots"):
        read_conllu(bad)
    bad.write_text(
        "1\ta\t_\t_\t_\t_\t2\tdep\t_\t_\n2\tb\t_\t_\t_\t_\t1\tdep\t_\t_\n3\tc\t_\t_\t_\t_\t0\troot\t_\t_\n",
        encoding="utf8",
    )
    with pytest.raises(ConlluError, match="cycle"):
        read_conllu(bad)
    with pytest.raises(FileNotFoundError):
        read_conllu(tmp_path / "missing.conllu")


def test_mismatched_inputs_are_rejected():
    gold = [gold_sentence([0, 1])]
    with pytest.raises(ValueError, match="arc scores of shape"):
        evaluate(gold, [SentenceScores(numpy.zeros((4, 4), dtype=numpy.float32))], options=FAST)
    with pytest.raises(ValueError, match="1 gold sentences but 0"):
        evaluate(gold, [], options=FAST)


def test_wilson_marginal_sampler_option_and_bad_sampler():
    gold, scores = synthetic_corpus(20, 5, 1.0, seed=6)
    report = evaluate(gold, scores, options=EvalOptions(ks=(1, 5), reject_draws=0, sampler="wilson_marginal"))
    samples = report["samples"]["with_replacement"]
    assert samples["sampler"] == "wilson_marginal" and samples["sentences_sampled_by_colbourn_fallback"] == 0
    assert samples["oracle_uas"]["1"] <= samples["oracle_uas"]["5"]
    with pytest.raises(ValueError, match="unknown sampler"):
        evaluate(gold, scores, options=EvalOptions(ks=(1,), reject_draws=0, sampler="gibbs"))


def test_bootstrap_intervals_contain_the_point_estimates():
    gold, scores = synthetic_corpus(80, 6, 1.5, seed=7)
    report = evaluate(gold, scores, options=EvalOptions(samples=False, reject_draws=0, bootstrap=100))
    boot = report["bootstrap"]
    low, high = boot["auroc_one_minus_head_prob"]
    assert low <= report["error_detection"]["auroc_one_minus_head_prob"] <= high
    low, high = boot["uas_mbr_minus_uas_map"]
    assert low <= boot["uas_mbr_minus_uas_map_point"] <= high
    assert boot["arc_ece"][0] <= boot["arc_ece"][1]


def test_mbr_map_disagreement_counts():
    rng = numpy.random.default_rng(3)
    for seed in range(40):
        arc = (3 * rng.standard_normal((5, 5))).astype(numpy.float32)
        mu, best, mbr = brute_force(arc)
        if (best != mbr).any():
            break
    report = evaluate([gold_sentence(mbr[1:])], [SentenceScores(arc)], options=FAST)["attachment"]
    differs = best[1:] != mbr[1:]
    assert report["words_where_mbr_differs_from_map"] == int(differs.sum())
    assert report["mbr_correct_where_they_differ"] == int(differs.sum())  # gold = MBR tree
    assert report["map_correct_where_they_differ"] == 0
    words = numpy.arange(1, 5)[differs]
    assert report["mbr_expected_correct_where_they_differ"] == pytest.approx(mu[mbr[words], words].sum(), abs=1e-6)
