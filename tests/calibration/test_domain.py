"""The out-of-domain model: features checked by hand, the piecewise-linear basis against
numpy.interp, the fit against its optimality conditions, the dict form, and the component."""

import base64
import json
import math

import numpy
import pytest
import torch

from spacy_treexp.calibration import CalibrationError
from spacy_treexp.calibration.domain import (
    BASE_FEATURES,
    FEATURES,
    DomainModel,
    fit_domain,
    hat_basis,
    interpolate,
    lexicon_counts,
    sentence_features,
)
from spacy_treexp.calibration.language_model import WordLanguageModel
from spacy_treexp.calibration.novelty import NoveltyReference


def test_features_of_a_sentence_by_hand():
    lexicon = lexicon_counts([["The", "cat", "sat"], ["the", "cat"], ["the"]])
    assert lexicon == {"the": 3, "cat": 2, "sat": 1}
    words = ["The", "Cat", "ate", "42", "fish", "!!", "NOW"]
    pos = ["DET", "NOUN", "VERB", "NUM", "NOUN", "PUNCT", "ADV"]
    got = sentence_features(words, pos, 0.25, 0.5, lexicon)
    assert list(got) == list(BASE_FEATURES)  # no language model: no word_surprisal
    expected = {
        "novelty": 0.25,
        "entropy_per_word": 0.5,
        "log_length": math.log(7),
        "unseen": 5 / 7,  # ate 42 fish !! NOW
        "rare": 6 / 7,  # all but "The" (cat: 2 < 3)
        "capitalised": 2 / 6,  # Cat, NOW
        "lower_start": 0.0,
        "final_punct": 0.0,  # "!!" is not one of . ! ?
        "word_length": (3 + 3 + 3 + 2 + 4 + 2 + 3) / 7,
        "digits": 1 / 7,
        "symbols": 1 / 7,
        "all_caps": 1 / 7,  # NOW ("42" has no cased letter)
        "pronouns": 0.0,
        "verbs": 1 / 7,
        "nouns": 2 / 7,
        "determiners": 1 / 7,
        "no_verb": 0.0,
    }
    for name in BASE_FEATURES:
        assert got[name] == pytest.approx(expected[name]), name
    one = sentence_features(["hi"], [], 0.1, 0.0, lexicon)  # no tags: none of the UPOS shares
    assert one["capitalised"] == 0.0 and one["lower_start"] == 1.0 and one["no_verb"] == 1.0
    assert sentence_features([], [], 0.1, 0.0, lexicon) is None
    assert sentence_features(["hi"], ["INTJ"], None, 0.0, lexicon) is None


def test_hat_basis_interpolates_and_is_constant_beyond_the_knots():
    rng = numpy.random.default_rng(0)
    knots = numpy.array([-1.0, 0.0, 0.5, 2.0])
    values = rng.normal(size=4)
    x = numpy.r_[rng.uniform(-3, 4, 50), knots]
    basis = hat_basis(x, knots)
    numpy.testing.assert_allclose(basis.sum(1), 1.0)
    assert (basis >= 0).all() and ((basis > 0).sum(1) <= 2).all()
    numpy.testing.assert_allclose(basis @ values, numpy.interp(x, knots, values), atol=1e-12)
    numpy.testing.assert_allclose(hat_basis(numpy.array([-9.0, 9.0]), knots) @ values, values[[0, -1]])
    numpy.testing.assert_allclose(hat_basis(numpy.array([3.0]), numpy.array([1.0])), [[1.0]])


def test_interpolate_is_numpy_interp_for_one_value():
    """The model's f_j (plain Python, one value at a time) against numpy.interp: between, at and
    beyond the knots, one knot, NaN."""
    rng = numpy.random.default_rng(1)
    for size in (1, 2, 5):
        knots = numpy.sort(rng.normal(size=size)) + numpy.arange(size)
        values = rng.normal(size=size)
        xs = numpy.r_[rng.uniform(-4, 8, 200), knots, knots[0] - 1, knots[-1] + 1]
        for x in xs:
            got = interpolate(float(x), tuple(knots.tolist()), tuple(values.tolist()))
            assert got == pytest.approx(float(numpy.interp(x, knots, values)), abs=1e-14)
    assert math.isnan(interpolate(float("nan"), (0.0, 1.0), (1.0, 2.0)))


#: A word trigram model for the synthetic rows' word_surprisal (drawn like the other features).
LANGUAGE_MODEL = WordLanguageModel.fit([["The", "dog", "barks", "."], ["a", "cat", "sleeps", "here"]])


def synthetic(seed, n_in=300, n_out=60):
    """Feature rows where out-of-domain sentences have higher novelty and more unseen words."""
    rng = numpy.random.default_rng(seed)

    def rows(n, shift):
        out = []
        for _ in range(n):
            row = {name: float(rng.uniform(0, 1)) for name in FEATURES}
            row["novelty"] = float(rng.normal(0.3 + shift, 0.1))
            row["unseen"] = float(numpy.clip(rng.normal(0.1 + shift / 2, 0.1), 0, 1))
            row["lower_start"] = float(rng.integers(0, 2))
            out.append(row)
        return out

    return rows(n_in, 0.0), rows(n_out, 0.3)


def penalised_loss(model, inside, outside, l2):
    """What fit_domain minimises, from the model's own knots and values (float64)."""
    rows = list(inside) + list(outside)
    y = numpy.r_[numpy.zeros(len(inside)), numpy.ones(len(outside))]
    w = numpy.where(y > 0, len(y) / (2 * len(outside)), len(y) / (2 * len(inside)))
    logits = numpy.array([model.logit(row) for row in rows])
    nll = numpy.logaddexp(0, logits) - y * logits
    return float((w * nll).sum() + 0.5 * l2 * sum(v**2 for values in model.values for v in values))


def test_fit_separates_and_is_a_minimum_of_its_objective():
    inside, outside = synthetic(1)
    model = fit_domain(inside, outside, {"the": 3}, knots=4, l2=1.0, features=BASE_FEATURES)
    for knots in model.knots:
        assert 1 <= len(knots) <= 4 and all(b > a for a, b in zip(knots, knots[1:]))
    assert len(model.knots[BASE_FEATURES.index("lower_start")]) == 2  # a 0/1 feature: its two values
    test_in, test_out = synthetic(2)
    p_in = numpy.array([model.probability(r) for r in test_in])
    p_out = numpy.array([model.probability(r) for r in test_out])
    assert (p_in[:, None] < p_out[None, :]).mean() > 0.95  # AUROC on fresh draws
    # novelty's function rises: more novel, more likely out of domain
    assert model.values[0][-1] > model.values[0][0]
    best = penalised_loss(model, inside, outside, 1.0)
    rng = numpy.random.default_rng(3)
    for _ in range(20):  # a convex objective at its minimum: no small step lowers it
        step = [tuple(v + 1e-3 * rng.normal() for v in values) for values in model.values]
        moved = DomainModel(model.lexicon, model.knots, tuple(step), model.bias + 1e-3 * rng.normal())
        assert penalised_loss(moved, inside, outside, 1.0) >= best - 1e-9
    # balanced classes and the ridge: the mean prediction sits near 1/2 on the fitting data
    p_fit = [model.probability(r) for r in inside + outside]
    weights = numpy.r_[numpy.full(len(inside), 0.5 / len(inside)), numpy.full(len(outside), 0.5 / len(outside))]
    assert float(numpy.dot(weights, p_fit)) == pytest.approx(0.5, abs=1e-4)  # the bias's optimality


def test_dict_form_round_trips_through_json():
    inside, outside = synthetic(4, 80, 20)
    model = fit_domain(inside, outside, {"cat": 2, "the": 3}, language_model=LANGUAGE_MODEL)
    assert "word_surprisal" in model.features and model.language_model is LANGUAGE_MODEL
    back = DomainModel.from_dict(json.loads(json.dumps(model.to_dict())))
    assert back == model
    reference = NoveltyReference(numpy.zeros(3), numpy.eye(3), model)
    again = NoveltyReference.from_dict(json.loads(json.dumps(reference.to_dict())))
    assert again.domain == model
    assert NoveltyReference.from_dict(NoveltyReference(numpy.zeros(3), numpy.eye(3)).to_dict()).domain is None


def test_a_lexicon_of_any_words_survives_a_spacy_config():
    """``spacy-treexp calibrate`` stores the map, out-of-domain model included, in a spaCy
    config: words such as "3:29", "a=b", "[", "${x}" or a URL must come back as they were (as
    dict keys they were config options, and "${" is a config variable: a crash or a silently
    wrong lexicon). Lexicons stored as a dict or as pairs (maps written before) still read."""
    from thinc.api import Config

    lexicon = {"3:29": 1, "3:30": 2, "a=b": 1, "[": 3, "]": 1, "==": 1, ":)": 2, "http://x.org/?a=1": 1, "the": 4}
    lexicon.update({"${x}": 1, "a${paths.train}": 2, "$$": 1, "ü": 3})
    inside, outside = synthetic(6, 60, 15)
    model = fit_domain(inside, outside, lexicon, language_model=LANGUAGE_MODEL)
    text = Config({"component": {"domain": model.to_dict()}}).to_str()
    back = DomainModel.from_dict(Config().from_str(text)["component"]["domain"])
    assert back == model and dict(back.lexicon) == lexicon
    stored = model.to_dict()
    packed = stored.pop("lexicon_zlib_base64")
    assert len(packed) < len(json.dumps(sorted(lexicon.items())))  # compressed
    plain = base64.b64encode(json.dumps(sorted(lexicon.items())).encode("utf8")).decode("ascii")
    assert DomainModel.from_dict(dict(stored, lexicon_base64=plain)) == model  # the form written before
    for older in (dict(lexicon), [[word, count] for word, count in lexicon.items()]):  # forms written before
        assert DomainModel.from_dict(dict(stored, lexicon=older)) == model
    with pytest.raises(CalibrationError, match="not a new word"):
        DomainModel.from_dict(dict(stored, lexicon=[["the", 1], ["the", 2]]))


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda d: d.update(features=["novelty"]), "knots and values for the 1 features"),
        (lambda d: d["features"].__setitem__(1, "surprise"), "distinct names of"),
        (lambda d: d["features"].__setitem__(1, "novelty"), "distinct names of"),
        (lambda d: d.update(features=[], knots=[], values=[]), "at least one"),
        (lambda d: d.update(rare=5), "made for rare = 5"),
        (lambda d: d.pop("lexicon_zlib_base64"), "cannot read"),
        (lambda d: d.update(lexicon_zlib_base64="not base64!"), "cannot read"),
        (lambda d: d.update(lexicon_zlib_base64="bm90IHpsaWI="), "cannot read"),
        (lambda d: d["knots"][0].reverse(), "knots must increase"),
        (lambda d: d["values"][0].append(1.0), "match its values"),
        (lambda d: d.update(bias=float("nan")), "bias must be finite"),
        (lambda d: d["knots"].pop(), "knots and values for the 17 features"),
    ],
)
def test_bad_dicts_are_named(change, message):
    inside, outside = synthetic(5, 40, 10)
    data = fit_domain(inside, outside, {}, knots=5, features=BASE_FEATURES).to_dict()
    change(data)
    with pytest.raises(CalibrationError, match=message):
        DomainModel.from_dict(data)


def test_fit_needs_both_classes_and_sound_settings():
    inside, outside = synthetic(6, 10, 2)
    with pytest.raises(CalibrationError, match="both classes"):
        fit_domain(inside, [], {})
    with pytest.raises(CalibrationError, match="distinct names of"):
        fit_domain(inside, outside, {}, features=["novelty", "surprise"])
    with pytest.raises(CalibrationError, match="knots must be >= 2"):
        fit_domain(inside, outside, {}, knots=1)


def test_a_subset_of_features_reads_only_them_and_is_the_fit_of_that_subset():
    inside, outside = synthetic(9, 200, 50)
    subset = ("novelty", "unseen")
    model = fit_domain(inside, outside, {"the": 3}, knots=2, l2=10.0, features=subset)
    assert model.features == subset and len(model.knots) == len(model.values) == 2
    # the other features do not matter: change them all, the probability stays
    row = dict(inside[0])
    changed = {name: (value if name in subset else value + 7.0) for name, value in row.items()}
    assert model.probability(changed) == model.probability(row)
    # knots 2: a linear term between the two extreme values of each feature in the fitting data
    values = [r["novelty"] for r in inside + outside]
    assert model.knots[0] == (min(values), max(values))
    assert model.logit(row) == pytest.approx(
        model.bias + sum(numpy.interp(row[n], k, v) for n, k, v in zip(subset, model.knots, model.values))
    )
    # a minimum of its own objective (the ridge 10, only the subset's values)
    best = penalised_loss(model, inside, outside, 10.0)
    rng = numpy.random.default_rng(4)
    for _ in range(10):
        step = tuple(tuple(v + 1e-3 * rng.normal() for v in values) for values in model.values)
        moved = DomainModel(model.lexicon, model.knots, step, model.bias + 1e-3 * rng.normal(), subset)
        assert penalised_loss(moved, inside, outside, 10.0) >= best - 1e-9
    # a stronger ridge shrinks the values
    weak = fit_domain(inside, outside, {}, knots=2, l2=0.1, features=subset)
    assert sum(v * v for vs in model.values for v in vs) < sum(v * v for vs in weak.values for v in vs)
    back = DomainModel.from_dict(json.loads(json.dumps(model.to_dict())))
    assert back == model and back.features == subset


def test_an_extreme_logit_is_a_probability_not_an_overflow():
    for value in (-800.0, -30.0, 0.0, 30.0, 800.0):
        model = DomainModel({}, ((0.0, 1.0),), ((value, value),), 0.0, features=("novelty",))
        expected = float(torch.sigmoid(torch.tensor(value, dtype=torch.float64)))
        assert model.probability({"novelty": 0.5}) == pytest.approx(expected, rel=1e-12)


def test_a_stored_model_of_all_17_features_still_reads():
    inside, outside = synthetic(10, 60, 15)
    model = fit_domain(inside, outside, {}, knots=3, l2=1.0, features=BASE_FEATURES)
    data = model.to_dict()
    assert data["features"] == list(BASE_FEATURES) and "language_model" not in data
    back = DomainModel.from_dict(json.loads(json.dumps(data)))
    assert back.features == BASE_FEATURES and back == model and back.language_model is None
    # the positional form of before (no features: all of them)
    assert DomainModel(model.lexicon, model.knots, model.values, model.bias) == model


def test_component_gives_out_of_domain_from_the_sentence_and_batches_like_one_doc():
    import spacy
    from helpers.scorer import tagged_doc

    from spacy_treexp.calibration import CalibrationMap, fit_novelty

    width = 5
    rng = numpy.random.default_rng(7)
    inside, outside = synthetic(8, 60, 15)
    model = fit_domain(inside, outside, {"the": 3, "dog": 1}, language_model=LANGUAGE_MODEL)
    reference = fit_novelty(rng.normal(size=(40, width)), size=4)
    reference = NoveltyReference(reference.centre, reference.rows, model)
    config = CalibrationMap.identity().to_dict() | {"novelty": reference.to_dict()}
    nlp = spacy.blank("en")
    component = nlp.add_pipe("tree_expectations", config={"calibration": config})
    stored = CalibrationMap.from_dict(json.loads(json.dumps(config))).novelty

    def doc_of(n_words, seed):
        return tagged_doc(nlp.vocab, n_words, seed, width, 2.0)

    docs = [doc_of(8, 1), doc_of(4, 2)]
    one_by_one = [component(doc_of(8, 1)), component(doc_of(4, 2))]
    batched = list(component.pipe(docs, batch_size=8))
    for doc, single in zip(batched, one_by_one):
        for sent, same in zip(doc.sents, single.sents):
            novelty = stored.sentence_novelty(doc.tensor[sent.start : sent.end])
            features = sentence_features(
                [t.text for t in sent],
                [t.pos_ for t in sent],
                novelty,
                sent._.entropy_per_word,
                model.lexicon,
                LANGUAGE_MODEL,
            )
            assert features["word_surprisal"] == LANGUAGE_MODEL.surprisal([t.text for t in sent])
            expected = 1.0 / (1.0 + math.exp(-model.logit(features)))
            assert sent._.out_of_domain == pytest.approx(expected, abs=1e-6)
            assert sent._.novelty == pytest.approx(same._.novelty, abs=1e-6)
            assert sent._.out_of_domain == pytest.approx(same._.out_of_domain, abs=1e-9)


def with_vectors(rows, seed, width=6, shift=0.0):
    """One sentence's token vectors per row ``(n, width)``: n from 1 to 5, the first two columns
    shifted by ``shift`` (what tells the classes apart beside the features)."""
    rng = numpy.random.default_rng(seed)
    out = []
    for _ in rows:
        tokens = rng.normal(0, 1, (int(rng.integers(1, 6)), width))
        tokens[:, :2] += shift
        out.append(tokens)
    return out


def vector_loss(model, inside, outside, l2, vector_l2, means, scale):
    """What fit_domain minimises with the vector term: the penalty on the weights of the
    standardised mean vector, w = u * scale."""
    u = numpy.asarray(model.vector_weights)
    rows = list(inside) + list(outside)
    y = numpy.r_[numpy.zeros(len(inside)), numpy.ones(len(outside))]
    w = numpy.where(y > 0, len(y) / (2 * len(outside)), len(y) / (2 * len(inside)))
    logits = numpy.array([model.logit(row, mean) for row, mean in zip(rows, means)])
    nll = numpy.logaddexp(0, logits) - y * logits
    spline = sum(v**2 for values in model.values for v in values)
    return float((w * nll).sum() + 0.5 * l2 * spline + 0.5 * vector_l2 * ((u * scale) ** 2).sum())


def test_vector_term_reads_the_mean_token_vector_and_is_a_minimum_of_its_objective():
    inside, outside = synthetic(11, 120, 40)
    inside_tokens, outside_tokens = with_vectors(inside, 1), with_vectors(outside, 2, shift=1.0)
    means = [tokens.mean(axis=0) for tokens in inside_tokens + outside_tokens]
    subset = ("novelty", "unseen", "lower_start")
    model = fit_domain(
        inside, outside, {"the": 3}, knots=3, l2=1.0, features=subset,
        inside_vectors=means[: len(inside)], outside_vectors=means[len(inside) :], vector_l2=5.0,
    )  # fmt: skip
    assert model.vector_width == 6 and model.vector_weights is not None
    # the first two columns carry the signal: their weights are positive and the largest
    u = numpy.asarray(model.vector_weights)
    assert (u[:2] > 0).all() and numpy.abs(u[:2]).min() > numpy.abs(u[2:]).max()
    # the logit and probability against a direct computation: b + Σ interp + u · mean of the rows
    words, pos = ["The", "dog", "barks", "."], ["DET", "NOUN", "VERB", "PUNCT"]
    tokens = numpy.random.default_rng(5).normal(0, 1, (4, 6)).astype(numpy.float32)
    features = sentence_features(words, pos, 0.4, 0.3, model.lexicon)
    direct = model.bias + sum(numpy.interp(features[n], k, v) for n, k, v in zip(subset, model.knots, model.values))
    direct += float(numpy.dot(u, tokens.astype(numpy.float64).sum(axis=0) / 4))
    assert model.logit(features, tokens.astype(numpy.float64).mean(axis=0)) == pytest.approx(direct, abs=1e-10)
    expected = 1.0 / (1.0 + math.exp(-direct))
    assert model.sentence_probability(words, pos, 0.4, 0.3, tokens) == pytest.approx(expected, abs=1e-10)
    # no vectors, none of its width, no rows: no probability (never one without the term)
    assert model.sentence_probability(words, pos, 0.4, 0.3) is None
    assert model.sentence_probability(words, pos, 0.4, 0.3, tokens[:, :5]) is None
    assert model.sentence_probability(words, pos, 0.4, 0.3, numpy.zeros((0, 6))) is None
    with pytest.raises(CalibrationError, match="width 6"):
        model.logit(features, tokens[0, :5])
    # a minimum of its objective (ridge 1 on the values, 5 on the standardised vector's weights)
    scale = numpy.asarray(means).std(axis=0)
    best = vector_loss(model, inside, outside, 1.0, 5.0, means, scale)
    rng = numpy.random.default_rng(6)
    for _ in range(10):
        moved = DomainModel(
            model.lexicon, model.knots, model.values, model.bias + 1e-3 * rng.normal(), subset,
            vector_weights=tuple(u + 1e-3 * rng.normal(size=6) / scale),
        )  # fmt: skip
        assert vector_loss(moved, inside, outside, 1.0, 5.0, means, scale) >= best - 1e-9
    # a stronger ridge on the vector shrinks its weights, and leaves the model without it alone
    stiff = fit_domain(
        inside, outside, {"the": 3}, knots=3, l2=1.0, features=subset,
        inside_vectors=means[: len(inside)], outside_vectors=means[len(inside) :], vector_l2=500.0,
    )  # fmt: skip
    assert (numpy.asarray(stiff.vector_weights) ** 2).sum() < (u**2).sum()
    assert fit_domain(inside, outside, {"the": 3}, knots=3, l2=1.0, features=subset).vector_weights is None
    # the dict form, alone and in a novelty reference of the same width
    back = DomainModel.from_dict(json.loads(json.dumps(model.to_dict())))
    assert back == model and back.sentence_probability(words, pos, 0.4, 0.3, tokens) == pytest.approx(expected)
    reference = NoveltyReference(numpy.zeros(6), numpy.eye(6), model)
    assert NoveltyReference.from_dict(json.loads(json.dumps(reference.to_dict()))).domain == model
    with pytest.raises(CalibrationError, match="width 6"):
        NoveltyReference(numpy.zeros(5), numpy.eye(5), model)
    # a model stored before the term reads without it
    older = model.to_dict()
    del older["vector_weights"]
    assert DomainModel.from_dict(older).vector_weights is None


def test_fit_with_vectors_needs_one_finite_vector_per_sentence():
    inside, outside = synthetic(12, 20, 5)
    means_in, means_out = [numpy.ones(3)] * 20, [numpy.zeros(3)] * 5
    with pytest.raises(CalibrationError, match="one per sentence"):
        fit_domain(inside, outside, {}, features=BASE_FEATURES, inside_vectors=means_in)
    with pytest.raises(CalibrationError, match="one per sentence"):
        fit_domain(inside, outside, {}, features=BASE_FEATURES, inside_vectors=means_in[:-1], outside_vectors=means_out)
    with pytest.raises(CalibrationError, match="one width"):
        fit_domain(
            inside, outside, {}, features=BASE_FEATURES, inside_vectors=means_in, outside_vectors=[numpy.zeros(2)] * 5
        )
    with pytest.raises(CalibrationError, match="finite"):
        fit_domain(
            inside,
            outside,
            {},
            features=BASE_FEATURES,
            inside_vectors=means_in,
            outside_vectors=[numpy.full(3, numpy.nan)] * 5,
        )
    with pytest.raises(CalibrationError, match="vector_l2"):
        fit_domain(
            inside,
            outside,
            {},
            features=BASE_FEATURES,
            inside_vectors=means_in,
            outside_vectors=means_out,
            vector_l2=0.0,
        )
    with pytest.raises(CalibrationError, match="vector_weights"):
        DomainModel({}, ((0.0, 1.0),), ((0.0, 1.0),), 0.0, ("novelty",), vector_weights=(1.0, float("inf")))


def test_component_adds_the_vector_term_of_each_sentences_own_rows():
    """Two sentences in one Doc, two Docs in one batch: each sentence's out_of_domain reads
    the mean of its own rows of doc.tensor (checked against a direct computation)."""
    import spacy
    from helpers.scorer import tagged_doc

    from spacy_treexp.calibration import CalibrationMap, fit_novelty

    width = 5
    inside, outside = synthetic(13, 60, 15)
    model = fit_domain(
        inside, outside, {"the": 3}, language_model=LANGUAGE_MODEL,
        inside_vectors=[t.mean(0) for t in with_vectors(inside, 3, width)],
        outside_vectors=[t.mean(0) for t in with_vectors(outside, 4, width, shift=1.5)],
    )  # fmt: skip
    reference = fit_novelty(numpy.random.default_rng(7).normal(size=(40, width)), size=4)
    reference = NoveltyReference(reference.centre, reference.rows, model)
    config = CalibrationMap.identity().to_dict() | {"novelty": reference.to_dict()}
    nlp = spacy.blank("en")
    component = nlp.add_pipe("tree_expectations", config={"calibration": config})
    stored = CalibrationMap.from_dict(json.loads(json.dumps(config))).novelty
    assert stored.domain == model

    def doc_of(n_words, seed):
        return tagged_doc(nlp.vocab, n_words, seed, width, 2.0)

    docs = list(component.pipe([doc_of(8, 1), doc_of(4, 2)], batch_size=8))
    u = numpy.asarray(model.vector_weights)
    seen = 0
    for doc in docs:
        for sent in doc.sents:
            rows = doc.tensor[sent.start : sent.end].astype(numpy.float64)
            features = sentence_features(
                [t.text for t in sent], [t.pos_ for t in sent], stored.sentence_novelty(rows),
                sent._.entropy_per_word, model.lexicon, LANGUAGE_MODEL,
            )  # fmt: skip
            direct = model.bias + sum(
                numpy.interp(features[n], k, v) for n, k, v in zip(model.features, model.knots, model.values)
            )
            direct += float(u @ rows.mean(axis=0))
            assert sent._.out_of_domain == pytest.approx(1.0 / (1.0 + math.exp(-direct)), abs=1e-6)
            seen += 1
    assert seen == 3


def test_a_prior_moves_the_probability_by_bayes_rule_and_keeps_the_ranking():
    """Under prior π the odds are the fitted (even-odds) odds times π / (1 − π), computed
    here from the fitted probabilities; the order of sentences does not change."""
    inside, outside = synthetic(11, 40, 10)
    model = fit_domain(inside, outside, {}, knots=3, l2=1.0, features=BASE_FEATURES)
    fitted = [model.probability(x) for x in inside + outside]
    for prior in (0.01, 0.2, 0.5, 0.9):
        moved = [model.probability(x, prior=prior) for x in inside + outside]
        for p, q in zip(fitted, moved):
            odds = p / (1.0 - p) * prior / (1.0 - prior)
            assert q == pytest.approx(odds / (1.0 + odds), rel=1e-9)
        assert numpy.array_equal(numpy.argsort(moved, kind="stable"), numpy.argsort(fitted, kind="stable"))
    for bad in (0.0, 1.0, -0.1, 1.5, float("nan"), True, "0.1"):
        with pytest.raises(CalibrationError, match="strictly between 0 and 1"):
            model.probability(inside[0], prior=bad)


def test_the_component_gives_out_of_domain_under_its_prior_and_refuses_a_bad_one():
    import spacy
    from helpers.scorer import tagged_doc

    from spacy_treexp.calibration import CalibrationMap, fit_novelty

    width = 5
    inside, outside = synthetic(8, 60, 15)
    model = fit_domain(inside, outside, {"the": 3}, language_model=LANGUAGE_MODEL)
    reference = fit_novelty(numpy.random.default_rng(3).normal(size=(40, width)), size=4)
    config = CalibrationMap.identity().to_dict() | {
        "novelty": NoveltyReference(reference.centre, reference.rows, model).to_dict()
    }
    values = {}
    for prior in (0.5, 0.05):
        nlp = spacy.blank("en")
        component = nlp.add_pipe("tree_expectations", config={"calibration": config, "out_of_domain_prior": prior})
        doc = component(tagged_doc(nlp.vocab, 7, 4, width, 2.0))
        values[prior] = [sent._.out_of_domain for sent in doc.sents]
    for even, low in zip(values[0.5], values[0.05]):
        odds = even / (1.0 - even) * 0.05 / 0.95
        assert low == pytest.approx(odds / (1.0 + odds), rel=1e-9) and low < even
    with pytest.raises(ValueError, match="out_of_domain_prior must be a probability strictly between 0 and 1"):
        spacy.blank("en").add_pipe("tree_expectations", config={"out_of_domain_prior": 1.0})


def test_whitespace_tokens_are_no_words_of_the_sentence_for_novelty_and_out_of_domain():
    """A paragraph break stays at the end of the sentence before it: its token (random UPOS, no
    final punctuation after it, a vector of its own) raised out_of_domain from 0.15 to 0.58 for
    "I will call you tomorrow." The features, the novelty and the entropy per word now read the
    sentence's words only."""
    import spacy
    from helpers.scorer import score_doc
    from spacy.tokens import Doc

    from spacy_treexp.calibration import CalibrationMap, fit_novelty

    width = 5
    inside, outside = synthetic(8, 60, 15)
    model = fit_domain(inside, outside, {"the": 3, "dog": 1}, language_model=LANGUAGE_MODEL)
    reference = fit_novelty(numpy.random.default_rng(5).normal(size=(40, width)), size=4)
    config = CalibrationMap.identity().to_dict() | {
        "novelty": NoveltyReference(reference.centre, reference.rows, model).to_dict()
    }
    nlp = spacy.blank("en")
    component = nlp.add_pipe("tree_expectations", config={"calibration": config})
    stored = CalibrationMap.from_dict(json.loads(json.dumps(config))).novelty
    words = ["The", "dog", "barks", ".", "\n\n", "a", "cat", "sleeps", "here"]
    spaces = [True, True, False, False, False, True, True, True, False]
    doc = Doc(nlp.vocab, words=words, spaces=spaces, sent_starts=[i in (0, 5) for i in range(len(words))])
    for token, pos in zip(doc, ["DET", "NOUN", "VERB", "PUNCT", "NOUN", "DET", "NOUN", "VERB", "ADV"]):
        token.pos_ = pos  # the break's: a tagger's guess, as before space_tags
    score_doc(doc)
    doc.tensor = numpy.random.default_rng(2).normal(0, 2.0, (len(doc), width)).astype(numpy.float32)
    component(doc)
    first = list(doc.sents)[0]
    assert first[-1].is_space and len(first) == 5
    kept = [t for t in first if not t.is_space]
    novelty = stored.sentence_novelty(doc.tensor[[t.i for t in kept]])
    assert first._.novelty == pytest.approx(novelty, abs=1e-6)
    features = sentence_features(
        [t.text for t in kept], [t.pos_ for t in kept], novelty, first._.tree_entropy / 4, model.lexicon, LANGUAGE_MODEL
    )
    assert features["final_punct"] == 1.0
    assert first._.out_of_domain == pytest.approx(1.0 / (1.0 + math.exp(-model.logit(features))), abs=1e-6)
    whole = stored.sentence_novelty(doc.tensor[first.start : first.end])
    assert abs(whole - novelty) > 1e-3  # the whitespace row would have changed it
