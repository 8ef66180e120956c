"""The calibration map's ``label_entropy`` dependent feature: each word's column scaled by
exp(w · H^rel_m), H^rel_m the entropy of its relation distribution at its head in the
parser's own tree. Checked against brute-force enumeration (n <= 6, float64), its record
forms, the fit that recovers it, and the evaluation report that applies it."""

import math

import numpy
import pytest
import torch
from helpers.enumerate_trees import tree_log_probs

from spacy_treexp.annotate import AnnotateOptions, SentenceScores, annotate_sentences
from spacy_treexp.calibration import CalibrationMap, calibrate_sentences, fit_calibration
from spacy_treexp.calibration.map import dependent_label_entropy, label_entropies
from spacy_treexp.engine import TreeDistribution

LABELS = ["nsubj", "obj", "det", "root"]


def label_map(weights=(0.4, -0.9)):
    rng = numpy.random.default_rng(11)
    groups = 1 + 2 * 2
    return CalibrationMap(
        "distance",
        tuple(rng.normal(0, 0.3, groups)),
        tuple(rng.normal(0, 0.4, groups)),
        (1, 3),
        (0.2, 0.6),
        (0.5, -0.3),
        ("nsubj", "obj"),
        (0.3, -0.4),
        dependent_features=("entropy", "label_entropy"),
        feature_scale=tuple(weights),
        relation_bias=((0.2, -0.3, 0.4), (-0.5, 0.1, 0.2)),
        relation_direction_scale=((0.1, -0.4, 0.3), (0.2, 0.5, -0.2)),
        head_relation_bias=((0.6, -0.2), (-0.3, 0.7)),
        head_relation_scale=((-0.2, 0.3), (0.4, -0.1)),
    )


def random_sentence(n, rng, spread=2.0):
    """Arc scores, relation log-probabilities (n+1, n+1, 4) and a parser tree of n words."""
    arc = rng.normal(0, 2.5, (n + 1, n + 1))
    logits = rng.normal(0, spread, (n + 1, n + 1, len(LABELS)))
    rel = logits - numpy.log(numpy.exp(logits).sum(-1, keepdims=True))
    heads = numpy.array([0] + [int(rng.integers(1, m)) for m in range(2, n + 1)])  # rooted at word 1
    return arc, rel, heads


def reference(arc, calibration, relations, label_entropy):
    """s'(h, m) written out by hand from the module doc, float64."""
    n = arc.shape[0] - 1
    table = {name: k for k, name in enumerate(calibration.relations)}
    weights = dict(zip(calibration.dependent_features, calibration.feature_scale))
    out = numpy.zeros_like(arc, dtype=numpy.float64)
    for m in range(1, n + 1):
        heads = [h for h in range(n + 1) if h != m]
        column = numpy.array([arc[h, m] for h in heads])
        log_norm = math.log(numpy.exp(column - column.max()).sum()) + column.max()
        entropy = -sum(math.exp(s - log_norm) * (s - log_norm) for s in column)
        r = table.get(relations[m - 1])
        for h in heads:
            local = arc[h, m] - log_norm
            if h == 0:
                group = 0
            else:
                bucket = max(k for k, edge in enumerate(calibration.edges) if abs(h - m) >= edge)
                group = 1 + bucket if h < m else 1 + len(calibration.edges) + bucket
            direction = 0 if h == 0 else (1 if h < m else 2)
            log_column = (
                weights.get("entropy", 0.0) * entropy + weights.get("label_entropy", 0.0) * label_entropy[m - 1]
            )
            bias = calibration.bias[group]
            if r is not None:
                log_column += calibration.relation_scale[r] + calibration.relation_direction_scale[r][direction]
                bias += calibration.relation_bias[r][direction]
            q = table.get(relations[h - 1]) if h > 0 else None
            if q is not None:
                log_column += calibration.head_relation_scale[q][direction - 1]
                bias += calibration.head_relation_bias[q][direction - 1]
            value = math.exp(calibration.log_scale[group] + log_column) * local + bias
            for p, c in zip(calibration.knots, calibration.hinge):
                value += c * max(0.0, local - math.log(p))
            out[h, m] = value
    return out


def test_dependent_label_entropy_by_hand():
    rng = numpy.random.default_rng(1)
    arc, rel, heads = random_sentence(5, rng)
    sentence = SentenceScores(arc=arc, rel=rel, labels=LABELS, heads=heads)
    expected = [-(numpy.exp(rel[heads[m - 1], m]) * rel[heads[m - 1], m]).sum() for m in range(1, 6)]
    numpy.testing.assert_allclose(dependent_label_entropy(sentence), expected, atol=1e-12)
    # impossible labels (-inf) add nothing; float32 scores give float32 entropies
    rel[heads[0], 1, 0] = -numpy.inf
    rel[heads[0], 1] -= numpy.logaddexp.reduce(rel[heads[0], 1])
    row = rel[heads[0], 1]
    expected[0] = -(numpy.exp(row[1:]) * row[1:]).sum()
    numpy.testing.assert_allclose(dependent_label_entropy(sentence), expected, atol=1e-12)
    single = SentenceScores(arc=arc, rel=rel.astype(numpy.float32), labels=LABELS, heads=heads)
    assert dependent_label_entropy(single).dtype == numpy.float32
    numpy.testing.assert_allclose(dependent_label_entropy(single), expected, atol=1e-5)
    # a batch of sentences, some without relation scores, as one at a time
    batch = [sentence, SentenceScores(arc=arc, heads=heads), single]
    for one, many in zip(batch, label_entropies(batch)):
        if one.rel is None:
            assert many is None
        else:
            numpy.testing.assert_allclose(many, dependent_label_entropy(one), atol=0)
    assert dependent_label_entropy(SentenceScores(arc=arc, heads=heads)) is None
    assert dependent_label_entropy(SentenceScores(arc=arc, rel=rel, labels=LABELS)) is None


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_label_entropy_marginals_match_brute_force(n):
    rng = numpy.random.default_rng(100 + n)
    arc, rel, heads = random_sentence(n, rng)
    relations = (["nsubj", "obj", "det", "obj", "nsubj", "amod"])[:n]
    sentence = SentenceScores(arc=arc, rel=rel, labels=LABELS, heads=heads, deprels=relations)
    calibration = label_map()
    entropy = [-(numpy.exp(rel[heads[m - 1], m]) * rel[heads[m - 1], m]).sum() for m in range(1, n + 1)]
    mapped = reference(arc, calibration, relations, entropy)
    trees, log_probs = tree_log_probs(torch.from_numpy(mapped), n, single_root=True)
    expected = numpy.zeros((n + 1, n + 1))
    for tree, log_p in zip(trees.numpy(), log_probs.numpy()):
        expected[tree[1:], numpy.arange(1, n + 1)] += math.exp(log_p)
    [calibrated] = calibrate_sentences([sentence], calibration)
    mu = TreeDistribution(torch.from_numpy(calibrated.arc).unsqueeze(0)).marginals[0].numpy()
    numpy.testing.assert_allclose(mu[:, 1:], expected[:, 1:], atol=1e-10)
    [annotation] = annotate_sentences([sentence], AnnotateOptions(), calibration)
    numpy.testing.assert_allclose(annotation.marginals[:, 1:], expected[:, 1:], atol=1e-6)
    if n > 1:  # the term changes the distribution: the same map without it differs
        without = label_map(weights=(0.4, 0.0))
        [plain] = annotate_sentences([sentence], AnnotateOptions(), without)
        assert not numpy.allclose(plain.marginals, annotation.marginals, atol=1e-3)


def test_label_entropy_is_zero_without_relation_scores():
    """Scores without relation scores (or without a parser tree) get the term at 0."""
    rng = numpy.random.default_rng(2)
    arc, rel, heads = random_sentence(4, rng)
    relations = ["nsubj", "obj", "det", "obj"]
    [out] = calibrate_sentences([SentenceScores(arc=arc, heads=heads, deprels=relations)], label_map())
    expected = reference(arc, label_map(), relations, [0.0] * 4)
    numpy.testing.assert_allclose(out.arc[:, 1:], expected[:, 1:], atol=1e-12)


def test_record_round_trip_and_format_2_maps_without_it(tmp_path):
    calibration = label_map()
    assert CalibrationMap.from_json(calibration.to_json()) == calibration
    calibration.to_disk(tmp_path / "map.json")
    assert CalibrationMap.from_disk(tmp_path / "map.json") == calibration
    # a format-2 map written before this feature reads and applies as before
    old = calibration.to_dict()
    old["dependent_features"], old["feature_scale"] = ["entropy"], [0.4]
    earlier = CalibrationMap.from_dict(old)
    assert not earlier.reads_label_entropy
    rng = numpy.random.default_rng(3)
    arc, rel, heads = random_sentence(5, rng)
    relations = ["nsubj", "obj", "det", "obj", "nsubj"]
    [out] = calibrate_sentences(
        [SentenceScores(arc=arc, rel=rel, labels=LABELS, heads=heads, deprels=relations)], earlier
    )
    numpy.testing.assert_allclose(out.arc[:, 1:], reference(arc, earlier, relations, [9.0] * 5)[:, 1:], atol=1e-12)


class Gold:
    def __init__(self, heads, deprels=()):
        self.heads, self.deprels = heads, list(deprels)


def _corpus(truth, count, seed, with_rel=True):
    rng = numpy.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    gold, scores = [], []
    for _ in range(count):
        n = int(rng.integers(2, 8))
        arc, rel, heads = random_sentence(n, rng, spread=float(rng.choice([0.3, 3.0])))
        sentence = SentenceScores(
            arc=arc, rel=rel if with_rel else None, labels=LABELS if with_rel else None, heads=heads
        )
        [calibrated] = calibrate_sentences([sentence], truth)
        mapped = torch.from_numpy(calibrated.arc).unsqueeze(0)
        tree = TreeDistribution(mapped).sample((1,), method="colbourn", generator=generator)[0, 0].numpy()
        gold.append(Gold(tree))
        scores.append(sentence)
    return gold, scores


def test_fit_recovers_the_label_entropy_weight():
    truth = CalibrationMap("distance", (0.0,) * 3, (0.0,) * 3, (1,), dependent_features=("label_entropy",),
                           feature_scale=(-0.9,))  # fmt: skip
    gold, scores = _corpus(truth, 500, seed=4)
    fitted = fit_calibration(
        gold, scores, "distance", edges=(1,), knots=(), features=("label_entropy",), by_relation=False, l2=0.0,
        relations=False,
    )  # fmt: skip
    assert fitted.dependent_features == ("label_entropy",)
    assert fitted.feature_scale[0] == pytest.approx(-0.9, abs=0.25)
    # the stored scales are those of the uncentred feature, as the truth's (all 0)
    numpy.testing.assert_allclose(fitted.log_scale, truth.log_scale, atol=0.3)
    assert fitted.fit["tree_nll_per_word_after"] < fitted.fit["tree_nll_per_word_before"]
    # without relation scores the feature cannot be read: the fit leaves it out
    gold, scores = _corpus(CalibrationMap.identity("distance", (1,)), 20, seed=5, with_rel=False)
    plain = fit_calibration(gold, scores, "distance", edges=(1,), features=("entropy", "label_entropy"))
    assert plain.dependent_features == ("entropy",)


def test_report_applies_the_label_entropy():
    """The evaluation report's confidences are the marginals of the calibrated sentences."""
    from spacy_treexp.evaluation.calibration_report import word_arrays

    rng = numpy.random.default_rng(6)
    scores, gold = [], []
    for n in (3, 5, 6):
        arc, rel, heads = random_sentence(n, rng)
        scores.append(SentenceScores(arc=arc, rel=rel, labels=LABELS, heads=heads))
        gold.append(type("G", (), dict(heads=numpy.concatenate([[-1], heads]), n=n, sent_id=f"s{n}",
                                       deprels=["nsubj"] * n))())  # fmt: skip
    calibration = label_map()
    words = word_arrays(gold, scores, calibration)
    expected = []
    for out, sentence in zip(calibrate_sentences(scores, calibration), scores):
        mu = TreeDistribution(torch.from_numpy(out.arc).unsqueeze(0)).marginals[0].numpy()
        predicted = numpy.asarray(sentence.heads)
        expected.append(mu[predicted, numpy.arange(1, sentence.n + 1)])
    numpy.testing.assert_allclose(words["tree"], numpy.concatenate(expected), atol=1e-9)


def test_a_feature_that_does_not_vary_leaves_the_fit_as_without_it():
    """Uniform relation scores give every word the same label entropy (log 4): the term is then
    one factor on every column, which the group scales already hold, so the fit (features
    centred on their means) gives the map fitted without it."""
    truth = CalibrationMap.temperature(0.5)
    gold, scores = _corpus(truth, 120, seed=8)
    for sentence in scores:
        sentence.rel = numpy.full_like(sentence.rel, -math.log(len(LABELS)))
    kwargs = dict(edges=(1,), knots=(), by_relation=False, relations=False)
    with_it = fit_calibration(gold, scores, "distance", features=("entropy", "label_entropy"), **kwargs)
    without = fit_calibration(gold, scores, "distance", features=("entropy",), **kwargs)
    assert with_it.feature_scale[1] == pytest.approx(0.0, abs=1e-3)
    assert with_it.feature_scale[0] == pytest.approx(without.feature_scale[0], abs=1e-3)
    numpy.testing.assert_allclose(with_it.log_scale, without.log_scale, atol=1e-3)
