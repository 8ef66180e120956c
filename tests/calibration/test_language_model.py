"""The word n-gram model of the out-of-domain feature ``word_surprisal``: probabilities by hand,
normalisation over the vocabulary at every order and history (pruned too), the stored form, and
the domain model that reads it."""

import json
import math

import numpy
import pytest

from spacy_treexp.calibration import CalibrationError
from spacy_treexp.calibration.domain import BASE_FEATURES, FEATURES, DomainModel, fit_domain, sentence_features
from spacy_treexp.calibration.language_model import END, START, WordLanguageModel, normal_form

CORPUS = [
    ["The", "cat", "sat", "."],
    ["the", "cat", "ate", "."],
    ["A", "dog", "sat", "on", "the", "cat", "."],
    ["The", "dog", "ate", "42", "fish", "."],
    ["the", "cat", "sat", "."],
]


def test_probabilities_by_hand():
    model = WordLanguageModel.fit([["a", "b"], ["a", "c"]], order=2, min_count=1)
    # unigrams predicted: a a b c </s> </s>: c = 6, T = 4 distinct, vocabulary 4 + 1 unknown
    p_b = (1 + 4 * (1 / 5)) / (6 + 4)
    assert model.probability([], "b") == pytest.approx(p_b)
    assert model.probability([], "zzz") == pytest.approx(4 * (1 / 5) / 10)
    # after "a": a b, a c: c = 2, T = 2
    assert model.probability(["a"], "b") == pytest.approx((1 + 2 * p_b) / 4)
    # a history never seen ("b" is never followed by a word, only by </s>; "zzz" never seen)
    p_end = (2 + 4 / 5) / 10
    assert model.probability(["b"], END) == pytest.approx((1 + 1 * p_end) / 2)
    assert model.probability(["zzz"], "b") == pytest.approx(p_b)
    p_a = (2 + 4 / 5) / 10
    by_hand = [-math.log((2 + 1 * p_a) / 3), -math.log((1 + 2 * p_b) / 4), -math.log((1 + p_end) / 2)]
    assert model.surprisals(["a", "b"]) == pytest.approx(by_hand)
    assert model.surprisal(["a", "b"]) == pytest.approx(sum(by_hand) / 3)


def test_trigram_probabilities_by_hand():
    model = WordLanguageModel.fit([["a", "b", "c"], ["a", "b", "d"], ["x", "b", "c"]], order=3, min_count=1)
    # unigrams predicted: a b c </s> a b d </s> x b c </s>: c = 12, T = 6, vocabulary 6 + 1 unknown
    p_c, p_a = (2 + 6 / 7) / 18, (2 + 6 / 7) / 18
    p_c_b = (2 + 2 * p_c) / (3 + 2)  # after b: c, d, c
    assert model.probability(["a", "b"], "c") == pytest.approx((1 + 2 * p_c_b) / (2 + 2))  # after a b: c, d
    assert model.probability(["zzz", "b"], "c") == pytest.approx(p_c_b)  # "zzz b" never seen
    p_a_start = (2 + 2 * p_a) / (3 + 2)  # after <s>: a, a, x
    assert model.probability([START, START], "a") == pytest.approx((2 + 2 * p_a_start) / (3 + 2))


def test_a_word_that_reads_as_a_marker_stays_a_word():
    assert normal_form("<S> ") == "<s>" and normal_form(" </S>") == "</s>" and normal_form(" x ") == " x "
    model = WordLanguageModel.fit([["<S> ", "x"], ["a", " </s>"], ["a"]], order=3, min_count=1)
    vocabulary = {gram[0]: n for gram, n in model.counts.items() if len(gram) == 1}
    assert START not in vocabulary and vocabulary[END] == 3 and vocabulary["</s>"] == 1
    assert model.surprisal(["a", " </s>"]) == model.surprisal(["a", "</s>"]) != model.surprisal(["a"])


@pytest.mark.parametrize("order, min_count", [(1, 1), (2, 1), (3, 1), (3, 2), (4, 2)])
def test_each_history_is_a_distribution_over_the_vocabulary(order, min_count):
    model = WordLanguageModel.fit(CORPUS, order=order, min_count=min_count)
    vocabulary = sorted({gram[0] for gram in model.counts if len(gram) == 1})
    assert START not in vocabulary and END in vocabulary
    histories = [[], ["the"], ["the", "cat"], [START, START], [START, "the"], ["cat", "sat"], ["fish", "zzz"], ["zzz"]]
    for history in histories:
        # every word outside the vocabulary has the same probability: count one of them
        total = sum(model.probability(history, w) for w in vocabulary) + model.probability(history, "unknown!")
        assert total == pytest.approx(1.0, abs=1e-12), history
    assert model.probability(["a", "b"], "zzz") == model.probability([], "zzz")


def test_pruning_keeps_every_word_and_drops_rare_ngrams():
    full = WordLanguageModel.fit(CORPUS, order=3, min_count=1)
    pruned = WordLanguageModel.fit(CORPUS, order=3, min_count=2)
    assert {g for g in full.counts if len(g) == 1} == {g for g in pruned.counts if len(g) == 1}
    assert all(n >= 2 for g, n in pruned.counts.items() if len(g) > 1)
    assert ("the", "cat", "sat") in pruned.counts and ("dog", "ate") not in pruned.counts
    # a seen continuation is more likely than the same word after an unrelated history
    assert pruned.probability(["the", "cat"], "sat") > pruned.probability(["fish", "."], "sat")


def test_normal_forms_and_familiar_order():
    assert normal_form("The") == normal_form("THE") == "the" and normal_form("A42b7") == "a00b0"
    model = WordLanguageModel.fit(CORPUS, order=3, min_count=1)
    assert model.surprisal(["THE", "Cat", "SAT", "."]) == model.surprisal(["the", "cat", "sat", "."])
    assert model.surprisal(["The", "dog", "ate", "17", "fish", "."]) == model.surprisal(CORPUS[3])
    # the same words in an order never seen are more surprising
    assert model.surprisal([".", "sat", "cat", "the"]) > model.surprisal(["the", "cat", "sat", "."]) + 1.0


def test_stored_form_round_trips_through_json_and_a_spacy_config():
    from thinc.api import Config

    odd = [["3:29", "a=b", "${x}", "[", "ü"], ["a=b", "${x}", "$$"]]
    model = WordLanguageModel.fit(CORPUS + odd, order=3, min_count=1)
    back = WordLanguageModel.from_dict(json.loads(json.dumps(model.to_dict())))
    assert back == model and back.surprisal(odd[0]) == model.surprisal(odd[0])
    text = Config({"lm": model.to_dict()}).to_str()
    assert WordLanguageModel.from_dict(Config().from_str(text)["lm"]) == model


def _stored(pairs, order=2):
    import base64

    return {"order": order, "counts_base64": base64.b64encode(json.dumps(pairs).encode()).decode()}


@pytest.mark.parametrize(
    "data, message",
    [
        ({"order": 2}, "cannot read"),
        ({"order": 2, "counts_base64": "not base64!"}, "cannot read"),
        (_stored([[["a"], 1], [["a"], 2]]), "twice"),
        (_stored([[["a"], 0]]), "count >= 1"),
        (_stored([[["a", "b", "c"], 1]]), "1 to 2 words"),
        (_stored([[["a", "b"], 1]]), "no words"),
        (_stored([[["a"], 1]], order=0), "order must be"),
        (_stored([[["a"], 1]], order=2.7), "order must be"),
        (_stored([[["a"], 2.7]]), "count >= 1"),
        (_stored([[["a"], True]]), "count >= 1"),
        (_stored([["ab", 1]]), "not a list of words"),
        (_stored([[["a", 3], 1]]), "not a list of words"),
    ],
)
def test_bad_stored_forms_are_named(data, message):
    with pytest.raises(CalibrationError, match=message):
        WordLanguageModel.from_dict(data)
    with pytest.raises(CalibrationError, match="order >= 1"):
        WordLanguageModel.fit(CORPUS, order=0)


def _rows(model, sentences, shift, seed):
    rng = numpy.random.default_rng(seed)
    return [
        sentence_features(words, ["NOUN"] * len(words), float(rng.normal(0.3 + shift, 0.1)), 0.2, {}, model)
        for words in sentences
    ]


def test_domain_model_reads_word_surprisal_with_its_language_model():
    lm = WordLanguageModel.fit(CORPUS, order=3, min_count=1)
    inside = _rows(lm, CORPUS * 8, 0.0, 1)
    shuffled = [list(reversed(words)) for words in CORPUS]
    outside = _rows(lm, shuffled * 4, 0.0, 2)  # the same words and novelty: only the order differs
    assert list(inside[0]) == list(FEATURES)
    assert inside[0]["word_surprisal"] == lm.surprisal(CORPUS[0])
    with pytest.raises(CalibrationError, match="needs a language_model"):
        fit_domain(inside, outside, {}, features=FEATURES)
    model = fit_domain(inside, outside, {}, knots=2, l2=1.0, features=("novelty", "word_surprisal"), language_model=lm)
    assert model.language_model is lm
    words = ["the", "cat", "sat", "."]
    assert model.sentence_probability(words, ["NOUN"] * 4, 0.3, 0.2) == model.probability(
        sentence_features(words, ["NOUN"] * 4, 0.3, 0.2, {}, lm)
    )
    assert model.sentence_probability(words[::-1], ["NOUN"] * 4, 0.3, 0.2) > model.sentence_probability(
        words, ["NOUN"] * 4, 0.3, 0.2
    )
    back = DomainModel.from_dict(json.loads(json.dumps(model.to_dict())))
    assert back == model and back.language_model == lm
    stored = model.to_dict()
    stored.pop("language_model")
    with pytest.raises(CalibrationError, match="word_surprisal needs its language_model"):
        DomainModel.from_dict(stored)
    # a model without the feature keeps no language model, even when one is given
    plain = fit_domain(inside, outside, {}, features=BASE_FEATURES, language_model=lm)
    assert plain.language_model is None and "language_model" not in plain.to_dict()
