"""The calibration map: an exact tree distribution (checked by brute force), its record
forms, its single point of application in the core, and its fit by gold-tree likelihood."""

import copy
import dataclasses
import math

import numpy
import pytest
import torch
from helpers.enumerate_trees import tree_log_probs

from spacy_treexp.annotate import AnnotateOptions, SentenceScores, annotate_sentences
from spacy_treexp.calibration import CalibrationError, CalibrationMap, calibrate_sentences, fit_calibration
from spacy_treexp.engine import TreeDistribution


def rich_map(rel_temperature=1.0):
    rng = numpy.random.default_rng(3)
    groups = 1 + 2 * 3
    return CalibrationMap(
        "distance",
        tuple(rng.normal(0, 0.4, groups)),
        tuple(rng.normal(0, 0.5, groups)),
        (1, 2, 4),
        (0.1, 0.5),
        (0.7, -0.4),
        ("nsubj", "obj"),
        (0.6, -0.5),
        rel_temperature=rel_temperature,
        dependent_features=("entropy",),
        feature_scale=(0.7,),
        relation_bias=((0.3, -0.4, 0.5), (-0.6, 0.2, 0.1)),
        relation_direction_scale=((0.2, -0.5, 0.4), (0.3, 0.6, -0.3)),
        head_relation_bias=((0.8, -0.3), (-0.4, 0.9)),
        head_relation_scale=((-0.3, 0.4), (0.5, -0.2)),
    )


RELATIONS = ["nsubj", "obj", "det", "obj", "nsubj", "amod"]


def reference_map(arc, calibration, relations=None):
    """s'(h, m) written out by hand, float64 (the test's own reading of the module doc)."""
    n = arc.shape[0] - 1
    gamma = dict(zip(calibration.relations, calibration.relation_scale))
    beta = dict(zip(calibration.relations, calibration.relation_bias))
    sigma = dict(zip(calibration.relations, calibration.relation_direction_scale))
    eta = dict(zip(calibration.relations, calibration.head_relation_bias))
    tau = dict(zip(calibration.relations, calibration.head_relation_scale))
    weight = dict(zip(calibration.dependent_features, calibration.feature_scale)).get("entropy", 0.0)
    out = numpy.zeros_like(arc, dtype=numpy.float64)
    edges = list(calibration.edges)
    for m in range(1, n + 1):
        heads = [h for h in range(n + 1) if h != m]
        column = numpy.array([arc[h, m] for h in heads], dtype=numpy.float64)
        log_norm = numpy.log(numpy.exp(column - column.max()).sum()) + column.max()
        entropy = -sum(math.exp(s - log_norm) * (s - log_norm) for s in column)
        relation = relations[m - 1] if relations else None
        for h in heads:
            local = arc[h, m] - log_norm
            if calibration.kind == "temperature" or h == 0:
                group = 0
            else:
                bucket = max(k for k, edge in enumerate(edges) if abs(h - m) >= edge)
                group = 1 + bucket if h < m else 1 + len(edges) + bucket
            direction = 0 if h == 0 else (1 if h < m else 2)
            log_column = gamma.get(relation, 0.0) + weight * entropy + sigma.get(relation, (0.0,) * 3)[direction]
            if h > 0 and relations:
                log_column += tau.get(relations[h - 1], (0.0, 0.0))[direction - 1]
            value = math.exp(calibration.log_scale[group] + log_column) * local + calibration.bias[group]
            value += beta.get(relation, (0.0, 0.0, 0.0))[direction]
            if h > 0 and relations:  # the head's own relation, by the side its dependent is on
                value += eta.get(relations[h - 1], (0.0, 0.0))[direction - 1]
            for p, c in zip(calibration.knots, calibration.hinge):
                value += c * max(0.0, local - math.log(p))
            out[h, m] = value
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_recalibrated_marginals_match_brute_force(n):
    rng = numpy.random.default_rng(n)
    arc = rng.normal(0, 2.5, (n + 1, n + 1))
    calibration = rich_map()
    relations = RELATIONS[:n]
    mapped = reference_map(arc, calibration, relations)
    trees, log_probs = tree_log_probs(torch.from_numpy(mapped), n, single_root=True)
    expected = numpy.zeros((n + 1, n + 1))
    for tree, log_p in zip(trees.numpy(), log_probs.numpy()):
        expected[tree[1:], numpy.arange(1, n + 1)] += math.exp(log_p)
    assert expected[:, 1:].sum(0) == pytest.approx(numpy.ones(n))
    # the map's own output and the core's annotation of the calibrated sentence
    mu = TreeDistribution(torch.from_numpy(calibration.apply_arc(arc, relations)).unsqueeze(0)).marginals[0].numpy()
    numpy.testing.assert_allclose(mu[:, 1:], expected[:, 1:], atol=1e-10)
    sentence = SentenceScores(arc=arc, deprels=relations)
    [annotation] = annotate_sentences([sentence], AnnotateOptions(), calibration)
    numpy.testing.assert_allclose(annotation.marginals[:, 1:], expected[:, 1:], atol=1e-6)
    if n > 1:  # one word has one tree: nothing to change
        [plain] = annotate_sentences([sentence], AnnotateOptions())
        assert not numpy.allclose(plain.marginals, annotation.marginals, atol=1e-3)


def test_map_ignores_per_dependent_offsets_and_padding():
    rng = numpy.random.default_rng(0)
    calibration = rich_map()
    arcs = [rng.normal(0, 2, (k + 1, k + 1)) for k in (3, 6)]
    shifted = arcs[0] + rng.normal(0, 5, (1, 4))  # a constant per dependent column
    dist = lambda a: TreeDistribution(torch.from_numpy(calibration.apply_arc(a)).unsqueeze(0)).marginals[0]  # noqa: E731
    torch.testing.assert_close(dist(arcs[0]), dist(shifted))
    # batched with a longer sentence: the same scores
    padded = torch.zeros((2, 7, 7), dtype=torch.float64)
    padded[0, :4, :4] = torch.from_numpy(arcs[0])
    padded[1] = torch.from_numpy(arcs[1])
    batch = calibration.apply_batch(padded, torch.tensor([3, 6]))
    numpy.testing.assert_allclose(batch[0, :4, 1:4].numpy(), calibration.apply_arc(arcs[0])[:, 1:])


def test_forbidden_arcs_stay_forbidden():
    arc = numpy.random.default_rng(1).normal(0, 1, (5, 5))
    arc[2, 3] = -numpy.inf
    mapped = rich_map().apply_arc(arc)
    assert mapped[2, 3] == -numpy.inf
    assert numpy.isfinite(mapped[[0, 1, 3], 3]).all()


def test_relation_temperature_renormalises():
    rng = numpy.random.default_rng(2)
    logits = rng.normal(0, 3, (4, 4, 6))
    rel = logits - numpy.log(numpy.exp(logits).sum(-1, keepdims=True))
    out = rich_map(rel_temperature=2.0).apply_rel(rel)
    expected = logits / 2.0 - numpy.log(numpy.exp(logits / 2.0).sum(-1, keepdims=True))
    numpy.testing.assert_allclose(out, expected, atol=1e-12)
    assert CalibrationMap.temperature(1.5).apply_rel(rel) is rel  # relation temperature 1


def test_calibrate_sentences_applies_to_ensemble_members():
    arc = numpy.random.default_rng(4).normal(0, 1, (4, 4))
    sentence = SentenceScores(arc=arc)
    if not hasattr(sentence, "members"):
        pytest.skip("SentenceScores has no members field in this version")
    sentence.members = numpy.stack([arc, 2 * arc])
    [out] = calibrate_sentences([sentence], rich_map())
    numpy.testing.assert_allclose(out.members[1], rich_map().apply_arc(2 * arc))


def test_calibrate_sentences_maps_a_ragged_batch_with_and_without_members():
    """The batched pass (sentences and members padded together) gives each matrix what
    mapping it alone gives, and keeps each sentence's members with it."""
    rng = numpy.random.default_rng(7)
    sentences = []
    for n, k in [(3, 2), (6, 0), (1, 3), (5, 1), (6, 2)]:
        sentence = SentenceScores(arc=rng.normal(0, 2, (n + 1, n + 1)))
        if k:
            sentence.members = rng.normal(0, 2, (k, n + 1, n + 1))
        sentences.append(sentence)
    calibration = rich_map()
    for sentence, out in zip(sentences, calibrate_sentences(sentences, calibration)):
        numpy.testing.assert_allclose(out.arc, calibration.apply_arc(sentence.arc), rtol=0, atol=1e-12)
        if sentence.members is None:
            assert out.members is None
            continue
        assert out.members.shape == sentence.members.shape
        for member, mapped in zip(sentence.members, out.members):
            numpy.testing.assert_allclose(mapped, calibration.apply_arc(member), rtol=0, atol=1e-12)


@pytest.mark.parametrize("log_scale", [1e6, 709.0])
def test_a_map_whose_scales_overflow_is_named_not_taken_for_a_sentence_without_trees(log_scale):
    """exp(1e6) is inf, and exp(709) scales finite scores past float64: the map's fault, said so,
    where the engine would otherwise see log Z = -inf and call the sentence tree-less."""
    arc = numpy.random.default_rng(0).normal(0, 3.0, (5, 5))
    sentences = [SentenceScores(arc=arc.copy()), SentenceScores(arc=arc[:4, :4].copy())]
    broken = CalibrationMap(kind="temperature", log_scale=(log_scale,))
    with pytest.raises(CalibrationError, match=r"turns finite arc scores of sentence \d into infinities or nan"):
        calibrate_sentences(sentences, broken)
    assert all(numpy.isfinite(s.arc).all() for s in calibrate_sentences(sentences, CalibrationMap.temperature(0.5)))


def test_record_round_trips(tmp_path):
    calibration = rich_map(rel_temperature=1.7)
    assert CalibrationMap.from_dict(calibration.to_dict()) == calibration
    assert calibration.risk_temperature is None and "risk_temperature" not in calibration.to_dict()
    risky = dataclasses.replace(calibration, risk_temperature=0.8)
    assert CalibrationMap.from_dict(risky.to_dict()).risk_temperature == 0.8
    assert CalibrationMap.from_bytes(risky.to_bytes()) == risky
    assert CalibrationMap.from_bytes(calibration.to_bytes()) == calibration
    calibration.to_disk(tmp_path / "map.json")
    assert CalibrationMap.from_disk(tmp_path / "map.json") == calibration
    assert CalibrationMap.temperature(2.0).arc_temperature == pytest.approx(2.0)


def test_a_binary_file_is_not_a_map(tmp_path):
    """A model file given as the map (a Stanza processor's calibration_path, say) is a
    CalibrationError naming the file, not a UnicodeDecodeError."""
    (tmp_path / "depparse.pt").write_bytes(b"\x80\x02PK\x03\x04" + bytes(range(256)))
    with pytest.raises(CalibrationError, match="depparse.pt: calibration map: not UTF-8"):
        CalibrationMap.from_disk(tmp_path / "depparse.pt")
    with pytest.raises(CalibrationError, match="not UTF-8"):
        CalibrationMap.from_bytes(b"\xff\xfe")


@pytest.mark.parametrize(
    "change, message",
    [
        ({"kind": "spline"}, "kind"),
        ({"log_scale": [0.0]}, "groups"),
        ({"bias": [float("nan")] * 7}, "finite"),
        ({"knots": [1.5, 0.5]}, "probabilities"),
        ({"rel_temperature": 0}, "rel_temperature"),
        ({"risk_temperature": -1.0}, "risk_temperature"),
        ({"risk_temperature": float("nan")}, "risk_temperature"),
        ({"edges": [2, 3, 4]}, "edges"),
        ({"version": 9}, "version"),
        ({"colour": 1}, "unknown"),
        ({"dependent_features": ["entropy", "colour"], "feature_scale": [0.1, 0.2]}, "dependent_features"),
        ({"feature_scale": [0.1, 0.2]}, "feature_scale"),
        ({"relation_bias": [[0.0, 0.1, 0.2]]}, "relation_bias"),
        ({"relation_bias": [[0.0, 0.1], [0.0, 0.2]]}, "relation_bias"),
        ({"relation_bias": 3}, "relation_bias"),
        ({"relation_direction_scale": [[0.0, 0.1]] * 2}, "relation_direction_scale"),
        ({"head_relation_bias": [[0.0, 0.1, 0.2]] * 2}, "head_relation_bias"),
        ({"head_relation_scale": [[0.0, float("inf")]] * 2}, "finite"),
        ({"version": 1}, "unknown"),  # format 1 has no dependent features or relation biases
    ],
)
def test_bad_maps_are_named(change, message):
    data = {**rich_map().to_dict(), **change}
    with pytest.raises(CalibrationError, match=message):
        CalibrationMap.from_dict(data)


class Gold:
    """A gold tree as fitting reads it: heads, no relations."""

    def __init__(self, heads):
        self.heads, self.deprels = heads, []


def _sample_corpus(true_map, count, seed):
    """Sentences with random scores and gold trees drawn from the recalibrated distribution."""
    rng = numpy.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    gold, scores = [], []
    for _ in range(count):
        n = int(rng.integers(2, 9))
        arc = rng.normal(0, 3.0, (n + 1, n + 1))
        mapped = torch.from_numpy(true_map.apply_arc(arc)).unsqueeze(0)
        heads = TreeDistribution(mapped).sample((1,), method="colbourn", generator=generator)[0, 0].numpy()
        gold.append(Gold(heads))
        scores.append(SentenceScores(arc=arc))
    return gold, scores


def test_fit_recovers_a_known_temperature():
    gold, scores = _sample_corpus(CalibrationMap.temperature(2.0), 400, seed=0)
    fitted = fit_calibration(gold, scores, "temperature")
    assert fitted.arc_temperature == pytest.approx(2.0, rel=0.08)
    assert fitted.fit["tree_nll_per_word_after"] < fitted.fit["tree_nll_per_word_before"]
    # data drawn at temperature 1 give a temperature near 1
    gold, scores = _sample_corpus(CalibrationMap.temperature(1.0), 400, seed=1)
    assert fit_calibration(gold, scores, "temperature").arc_temperature == pytest.approx(1.0, rel=0.08)


def test_distance_fit_recovers_a_known_map():
    edges = (1, 2)
    truth = CalibrationMap("distance", (0.0, -0.7, 0.4, 0.3, -0.2), (0.0, 0.5, -0.5, 0.0, 0.3), edges)
    gold, scores = _sample_corpus(truth, 600, seed=2)
    fitted = fit_calibration(gold, scores, "distance", edges=edges, knots=(), l2=0.0)
    scale_error = numpy.abs(numpy.subtract(fitted.log_scale, truth.log_scale))
    assert scale_error.max() < 0.25
    # the ROOT bias is not identified (one ROOT arc per tree); the others are
    assert numpy.abs(numpy.subtract(fitted.bias, truth.bias))[1:].max() < 0.3


def test_fit_refuses_bad_input():
    gold, scores = _sample_corpus(CalibrationMap.temperature(1.0), 3, seed=3)
    with pytest.raises(CalibrationError, match="gold trees"):
        fit_calibration(gold[:2], scores, "temperature")
    with pytest.raises(CalibrationError, match="kind"):
        fit_calibration(gold, scores, "isotonic")
    scores[1].arc[gold[1].heads[1], 1] = -numpy.inf
    with pytest.raises(CalibrationError, match=r"sentence 1 \(counted from 0\): the scores forbid"):
        fit_calibration(gold, scores, "temperature")
    named = [copy.copy(tree) for tree in gold]
    for i, tree in enumerate(named):
        tree.sent_id = f"doc-{i}"  # as a sentence read from CoNLL-U has
    with pytest.raises(CalibrationError, match=r"sentence 1 \(sent_id doc-1\): the scores forbid"):
        fit_calibration(named, scores, "temperature")


def test_dependent_relations_from_the_best_label_at_the_parser_head():
    from spacy_treexp.calibration.map import dependent_relations

    rng = numpy.random.default_rng(5)
    rel = numpy.log(rng.dirichlet(numpy.ones(3), (4, 4)))
    heads = numpy.array([2, 0, 2])
    sentence = SentenceScores(arc=rng.normal(0, 1, (4, 4)), rel=rel, labels=["nsubj", "ROOT", "obj"], heads=heads)
    expected = [["nsubj", "root", "obj"][int(rel[heads[m - 1], m].argmax())] for m in (1, 2, 3)]
    assert dependent_relations(sentence) == expected
    sentence.deprels = ["obj", "ROOT", "det"]
    assert dependent_relations(sentence) == ["obj", "root", "det"]
    calibration = rich_map()
    [out] = calibrate_sentences([sentence], calibration)
    numpy.testing.assert_allclose(out.arc[:, 1:], calibration.apply_arc(sentence.arc, ["obj", "root", "det"])[:, 1:])


def test_label_factors_per_relation_dense_and_lazy():
    from spacy_treexp.annotate.relation_scores import BiaffineRelationScores

    rng = numpy.random.default_rng(6)
    n, labels, width = 4, 3, 5
    lazy = BiaffineRelationScores(
        rng.normal(0, 1, (n + 1, labels, width)).astype(numpy.float32),
        rng.normal(0, 1, (n + 1, width)).astype(numpy.float32),
        temperature=1.5,
    )
    dense = numpy.asarray(lazy)
    calibration = CalibrationMap(
        "distance", (0.0,) * 7, (0.0,) * 7, (1, 2, 4), relations=("nsubj", "obj"),
        relation_scale=(0.0, 0.0), label_scale=(0.5, -0.7), rel_temperature=1.2,
    )  # fmt: skip
    relations = ["obj", "det", "nsubj", "obj"]
    logits = dense * 1.5  # the classifier's logits, up to a constant per arc
    factor = numpy.array([1.0, math.exp(-0.7), 1.0, math.exp(0.5), math.exp(-0.7)]) / (1.5 * 1.2)
    scaled = logits * factor[None, :, None]
    expected = scaled - numpy.log(numpy.exp(scaled).sum(-1, keepdims=True))
    numpy.testing.assert_allclose(calibration.apply_rel(dense, relations), expected, atol=1e-5)
    numpy.testing.assert_allclose(numpy.asarray(calibration.apply_rel(lazy, relations)), expected, atol=1e-5)
    heads = numpy.array([2, 0, 2, 3])
    rows = calibration.apply_label_rows(dense[heads, numpy.arange(1, n + 1)], relations)
    numpy.testing.assert_allclose(rows, expected[heads, numpy.arange(1, n + 1)], atol=1e-5)
    # the dense array's stand-in computes what is read, as the core reads it
    scaled = calibration.apply_rel(dense, relations)
    assert scaled.shape == dense.shape
    numpy.testing.assert_allclose(scaled[2, 3], expected[2, 3], atol=1e-5)
    assert scaled[2, 3, 1] == pytest.approx(expected[2, 3, 1], abs=1e-5)
    sampled = numpy.array([[2, 0, 2, 3], [3, 0, 1, 1]])
    numpy.testing.assert_allclose(
        scaled[sampled, numpy.arange(1, n + 1)], expected[sampled, numpy.arange(1, n + 1)], atol=1e-5
    )
    numpy.testing.assert_allclose(scaled[:, 2], expected[:, 2], atol=1e-5)


def test_relation_fit_recovers_label_factors():
    from spacy_treexp.calibration import fit_rel_temperature

    rng = numpy.random.default_rng(7)
    true = {"nsubj": 0.6, "obj": -0.5}

    class Gold:
        def __init__(self, heads, deprels):
            self.heads, self.deprels = heads, deprels

    gold, scores, per_sentence = [], [], []
    names = ["nsubj", "obj", "det"]
    for _ in range(1500):
        n = 4
        logits = rng.normal(0, 5.0, (n + 1, n + 1, 3))
        rel = logits - numpy.log(numpy.exp(logits).sum(-1, keepdims=True))
        relations = [names[int(k)] for k in rng.integers(0, 3, n)]
        heads = numpy.array([-1, 0, 1, 1, 2])
        deprels = []
        for m in range(1, n + 1):
            z = logits[heads[m], m] * math.exp(true.get(relations[m - 1], 0.0)) / 2.0
            p = numpy.exp(z - z.max())
            deprels.append(names[rng.choice(3, p=p / p.sum())])
        gold.append(Gold(heads, deprels))
        scores.append(SentenceScores(arc=numpy.zeros((n + 1, n + 1)), rel=rel, labels=names))
        per_sentence.append(relations)
    temperature, rho, before, after = fit_rel_temperature(gold, scores, ["nsubj", "obj"], per_sentence, l2=0.0)
    assert temperature == pytest.approx(2.0, rel=0.1)
    assert rho == pytest.approx((0.6, -0.5), abs=0.12)
    assert after < before


def test_format_1_maps_still_read():
    """A map written before format 2 (no dependent features, no relation biases) reads as
    the same map, applies the same scores, and is written back in the current format (3)."""
    old = {key: value for key, value in rich_map().to_dict().items()}
    for key in ("dependent_features", "feature_scale", "relation_bias", "relation_direction_scale"):
        del old[key]
    del old["head_relation_bias"], old["head_relation_scale"]
    old["version"] = 1
    calibration = CalibrationMap.from_dict(old)
    assert calibration.dependent_features == () and calibration.relation_bias == ()
    assert calibration.relation_direction_scale == () and calibration.head_relation_bias == ()
    assert calibration.head_relation_scale == ()
    arc = numpy.random.default_rng(8).normal(0, 2, (6, 6))
    relations = RELATIONS[:5]
    expected = reference_map(arc, calibration, relations)
    numpy.testing.assert_allclose(calibration.apply_arc(arc, relations)[:, 1:], expected[:, 1:], atol=1e-12)
    assert calibration.to_dict()["version"] == 3
    assert CalibrationMap.from_dict(calibration.to_dict()) == calibration


def test_fit_recovers_entropy_scale_and_relation_biases():
    """Gold trees drawn from a map with a dependent-entropy scale and relation biases: the
    gradient fit by tree likelihood finds them (the biases up to a constant per relation,
    which does not change the distribution)."""
    names = ("nsubj", "obj")
    truth = CalibrationMap(
        "distance", (0.0,) * 3, (0.0,) * 3, (1,), relations=names, relation_scale=(0.0, 0.0),
        dependent_features=("entropy",), feature_scale=(-0.8,), relation_bias=((0.0, 1.0, -1.0), (0.0, -1.0, 1.0)),
        relation_direction_scale=((0.0, 0.5, -0.4), (0.0, 0.0, 0.0)), head_relation_bias=((0.8, -0.6), (0.0, 0.0)),
        head_relation_scale=((0.0, 0.0), (-0.5, 0.4)),
    )  # fmt: skip
    rng = numpy.random.default_rng(9)
    generator = torch.Generator().manual_seed(9)

    class Gold:
        def __init__(self, heads):
            self.heads, self.deprels = heads, []

    gold, scores = [], []
    for _ in range(500):
        n = int(rng.integers(2, 8))
        arc = rng.normal(0, 2.0, (n + 1, n + 1))
        relations = [names[int(k)] for k in rng.integers(0, 2, n)]
        mapped = torch.from_numpy(truth.apply_arc(arc, relations)).unsqueeze(0)
        heads = TreeDistribution(mapped).sample((1,), method="colbourn", generator=generator)[0, 0].numpy()
        gold.append(Gold(heads))
        scores.append(SentenceScores(arc=arc, deprels=relations))
    fitted = fit_calibration(gold, scores, "distance", edges=(1,), knots=(), l2=0.0, min_relation_words=1)
    assert fitted.relations == names and fitted.dependent_features == ("entropy",)
    assert fitted.feature_scale[0] == pytest.approx(-0.8, abs=0.25)

    # every word has one of the two relations, so a shift of a direction's terms common to
    # both is the group's own scale or bias: compare the relations with each other
    def contrast(table):
        return numpy.subtract(*numpy.asarray(table))

    beta, true_beta = contrast(fitted.relation_bias), contrast(truth.relation_bias)
    assert beta[1] - beta[2] == pytest.approx(true_beta[1] - true_beta[2], abs=0.4)  # ROOT arcs are few
    numpy.testing.assert_allclose(contrast(fitted.relation_direction_scale), (0.0, 0.5, -0.4), atol=0.3)
    numpy.testing.assert_allclose(contrast(fitted.head_relation_bias), (0.8, -0.6), atol=0.3)
    numpy.testing.assert_allclose(contrast(fitted.head_relation_scale), (0.5, -0.4), atol=0.3)
    assert fitted.fit["tree_nll_per_word_after"] < fitted.fit["tree_nll_per_word_before"]
    # without the new terms the fit is the format-1 map
    plain = fit_calibration(gold, scores, "distance", edges=(1,), knots=(), features=(), relation_directions=False)
    assert plain.dependent_features == () and plain.relation_bias == () and plain.head_relation_bias == ()
    assert plain.fit["tree_nll_per_word_after"] > fitted.fit["tree_nll_per_word_after"]


def _learnt_by_heart(count, seed):
    """Sentences whose gold tree is the parser's own (the scores' MAP tree) on every word."""
    gold, scores = _sample_corpus(CalibrationMap.temperature(1.0), count, seed)
    for g, s in zip(gold, scores):
        g.heads = TreeDistribution(torch.from_numpy(s.arc).unsqueeze(0)).mode[0].numpy()
    return gold, scores


@pytest.mark.parametrize("kind", ["temperature", "distance"])
def test_a_map_that_learns_its_gold_trees_by_heart_is_named(kind):
    from spacy_treexp.calibration.fit import separation_warning

    # a parser right on every fitted word: the likelihood grows without end as the scale grows
    fitted = fit_calibration(*_learnt_by_heart(12, seed=4), kind)
    assert fitted.fit["tree_nll_per_word_after"] < 1e-3
    message = separation_warning(fitted)
    assert message is not None and "certain" in message and "12 fitted sentences" in message
    # trees drawn from the distribution itself: an honest map, no warning
    assert separation_warning(fit_calibration(*_sample_corpus(CalibrationMap.temperature(1.0), 40, 5), kind)) is None
    assert separation_warning(CalibrationMap.temperature(1.0)) is None  # a map with no fit record
    # one-word sentences: certain before any map, nothing was learnt
    one = dataclasses.replace(fitted, fit={**fitted.fit, "tree_nll_per_word_before": 0.0})
    assert separation_warning(one) is None


def _ensemble_corpus(count, seed):
    """An ensemble of two identical members whose sum is calibrated: gold trees drawn from
    p ∝ exp(Σ_k s_k), each member s_k half of that sum (a Stanza ensemble's shape)."""
    rng = numpy.random.default_rng(seed)
    generator = torch.Generator().manual_seed(seed)
    gold, scores = [], []
    for _ in range(count):
        n = int(rng.integers(3, 9))
        total = rng.normal(0, 3.0, (n + 1, n + 1))
        heads = TreeDistribution(torch.from_numpy(total)).sample((1,), method="colbourn", generator=generator)[0]
        gold.append(Gold(heads.numpy()))
        scores.append(SentenceScores(arc=total, members=numpy.stack([total / 2, total / 2])))
    return gold, scores


def test_members_that_add_up_to_the_scores_get_a_map_of_their_own():
    """A Stanza ensemble decodes the sum of its members: the map fitted on the sum leaves it as
    it is (T ≈ 1) and would leave each member, half the sum, twice too flat; the members' own
    map (fitted on each member's scores) doubles them (T ≈ 0.5), so identical members mix back
    into the sum's distribution."""
    from spacy_treexp.calibration.fit import members_add_up

    gold, scores = _ensemble_corpus(300, seed=11)
    assert members_add_up(scores)
    fitted = fit_calibration(gold, scores, "temperature")
    assert fitted.arc_temperature == pytest.approx(1.0, rel=0.1)
    assert fitted.members is not None and fitted.members.arc_temperature == pytest.approx(0.5, rel=0.1)
    (mapped,) = calibrate_sentences(scores[:1], fitted)
    numpy.testing.assert_allclose(mapped.arc, fitted.apply_arc(scores[0].arc))
    for member, raw in zip(mapped.members, scores[0].members):
        numpy.testing.assert_allclose(member, fitted.members.apply_arc(raw))
    # MC-dropout members (each on the scale of the scores) and a lone member do not add up
    mc = [s.replace(members=numpy.stack([s.arc, s.arc + 0.1])) for s in scores]
    assert not members_add_up(mc) and fit_calibration(gold, mc, "temperature").members is None
    assert not members_add_up([s.replace(members=s.arc[None]) for s in scores])
    assert not members_add_up([s.replace(members=None) for s in scores])


def test_a_map_with_a_members_map_round_trips_and_says_its_version():
    inner = CalibrationMap.temperature(0.5)
    outer = dataclasses.replace(CalibrationMap.temperature(2.0), members=inner)
    assert CalibrationMap.from_json(outer.to_json()) == outer
    assert outer.to_dict()["version"] == 4 and CalibrationMap.temperature(2.0).to_dict()["version"] == 3
    with pytest.raises(CalibrationError, match="unknown field"):  # a version-3 map has no members
        CalibrationMap.from_dict({**outer.to_dict(), "version": 3})
    with pytest.raises(CalibrationError, match="members must be a CalibrationMap without members"):
        dataclasses.replace(CalibrationMap.temperature(2.0), members=outer)
