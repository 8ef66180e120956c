"""The score-source contract of the tree_expectations component (pipeline/score_sources.py):
what a record may hold, what is refused and with which message, and how custom sources
that fail are reported."""

from __future__ import annotations

import math
import pickle
import re

import numpy
import pytest
import spacy
import torch
from helpers.scorer import LABELS, random_scores, score_doc
from spacy.tokens import Doc, DocBin

from spacy_treexp.annotate import AnnotateOptions, annotate_sentences
from spacy_treexp.pipeline import score_sources
from spacy_treexp.pipeline.score_sources import ScoreSourceError
from spacy_treexp.pipeline.tree_expectations import TreeExpectations

DEFAULT_SOURCE = "'spacy_treexp.parser_scores.v1'"


@pytest.fixture(autouse=True, params=["1", "0"], ids=["scan", "numpy"])
def check_path(request, monkeypatch):
    """Every case runs with the one-pass scan of the usual case (annotate/scan.py) and with
    the numpy checks alone: same results, same messages."""
    monkeypatch.setenv("SPACY_TREEXP_NATIVE", request.param)


def blank_doc(words, sent_starts=None):
    vocab = spacy.blank("en").vocab
    if sent_starts is None:
        sent_starts = [True] + [False] * (len(words) - 1)
    return Doc(vocab, words=words, sent_starts=sent_starts)


def component(**config):
    return spacy.blank("en").add_pipe("tree_expectations", config=config)


def doc_with(arc, rel=None, labels=None, words=None):
    """A one-sentence Doc whose parser_scores record holds ``arc``, ``rel`` and ``labels``."""
    n = numpy.shape(arc)[0] - 1
    doc = blank_doc(words or [f"w{i}" for i in range(1, n + 1)])
    doc._.parser_scores = [{"start": 0, "end": n, "arc": arc, "rel": rel, "labels": labels}]
    return doc


def labelled_doc(n=4, seed=0):
    """A parsed one-sentence Doc with random arc scores and normalised relation scores."""
    return score_doc(blank_doc([f"w{i}" for i in range(1, n + 1)]), seed=seed)


def with_rel(doc, rel):
    record = dict(doc._.parser_scores[0], rel=rel)
    doc._.parser_scores = [record]
    return doc


def expected_dep_prob(doc, rel):
    """μ(h, d)·softmax(rel[h, d])[label] of every token, from the annotation's marginals."""
    mu = doc._.tree_expectations[0].marginals
    out = []
    for m, token in enumerate(doc, start=1):
        h = 0 if token.head.i == token.i else token.head.i + 1
        logits = numpy.asarray(rel[h, m], dtype=numpy.float64)
        p = numpy.exp(logits - logits.max())
        out.append(mu[h, m] * p[LABELS.index(token.dep_)] / p.sum())
    return out


# --- relation scores ------------------------------------------------------------------


@pytest.mark.parametrize("value", [numpy.nan, numpy.inf])
def test_non_finite_relation_scores_are_refused(value):
    doc = labelled_doc()
    rel = doc._.parser_scores[0]["rel"].copy()
    rel[2, 3, 1] = value
    with pytest.raises(ScoreSourceError) as info:
        component()(with_rel(doc, rel))
    message = str(info.value)
    assert DEFAULT_SOURCE in message and "sentence 0 (tokens 0-4, 'w1 w2 w3 w4')" in message
    assert f"hold {value} for label 1 ('nsubj') of the arc (head 2, dependent 3)" in message


def test_non_finite_relation_scores_outside_the_sentence_arcs_are_ignored():
    # ROOT's column and the diagonal are not arcs: the engine never reads them
    doc = labelled_doc()
    rel = doc._.parser_scores[0]["rel"].copy()
    rel[2, 2, :] = numpy.nan
    rel[3, 0, :] = numpy.inf
    component()(with_rel(doc, rel))
    assert all(0.0 <= t._.dep_prob <= t._.head_prob + 1e-6 for t in doc)


@pytest.mark.parametrize("kind", ["shifted", "logits"])
def test_unnormalised_relation_scores_are_normalised_over_labels(kind):
    doc = labelled_doc()
    rel = doc._.parser_scores[0]["rel"]
    given = rel + 5.0 if kind == "shifted" else numpy.random.default_rng(1).normal(0, 3, rel.shape).astype("f4")
    reference = [t._.dep_prob for t in component()(labelled_doc())]
    component()(with_rel(doc, given))
    got = [t._.dep_prob for t in doc]
    assert all(0.0 <= p <= t._.head_prob + 1e-6 for p, t in zip(got, doc))
    assert got == pytest.approx(expected_dep_prob(doc, given), rel=1e-5)
    if kind == "shifted":  # log p + 5 are the same probabilities
        assert got == pytest.approx(reference, rel=1e-5)


def test_normalised_relation_scores_are_used_as_given():
    doc = labelled_doc()
    rel = doc._.parser_scores[0]["rel"]
    record = component(keep_scores=True)(doc)._.parser_scores[0]
    assert record["rel"] is rel
    for m, token in enumerate(doc, start=1):
        h = 0 if token.head.i == token.i else token.head.i + 1
        assert token._.dep_prob == pytest.approx(token._.head_prob * math.exp(rel[h, m, LABELS.index(token.dep_)]))


@pytest.mark.parametrize("offset, as_given", [(-5e-4, True), (5e-4, True), (-2e-3, False), (2e-3, False)])
def test_normalisation_tolerance_decides_whether_scores_are_used_as_given(offset, as_given):
    # log-sums within LOG_NORMALISED_TOLERANCE (1e-3) of 0 are log-probabilities; beyond, logits
    doc = labelled_doc()
    given = (doc._.parser_scores[0]["rel"].astype(numpy.float64) + offset).copy()
    component()(with_rel(doc, given))
    for m, token in enumerate(doc, start=1):
        h = 0 if token.head.i == token.i else token.head.i + 1
        value = given[h, m, LABELS.index(token.dep_)] - (0.0 if as_given else offset)
        assert token._.dep_prob == pytest.approx(token._.head_prob * math.exp(value), rel=1e-6)


@pytest.mark.parametrize("value", [numpy.nan, numpy.inf])
def test_relation_scores_said_normalised_are_still_checked_for_nan_and_inf(value):
    doc = labelled_doc()
    rel = doc._.parser_scores[0]["rel"].copy()
    rel[2, 3, 1] = value
    doc._.parser_scores = [dict(doc._.parser_scores[0], rel=rel, rel_normalised=True)]
    expected = f"hold {value} for label 1 ('nsubj') of the arc (head 2, dependent 3)"
    with pytest.raises(ScoreSourceError, match=re.escape(expected)):
        component()(doc)


def test_relation_scores_said_normalised_are_used_as_given():
    """``"rel_normalised": True``: the source's word is taken for the sums over labels (like
    relation scores computed when indexed), whichever path checks the record."""
    doc = labelled_doc()
    given = doc._.parser_scores[0]["rel"] + 0.5  # not normalised, said to be
    doc._.parser_scores = [dict(doc._.parser_scores[0], rel=given, rel_normalised=True)]
    component()(doc)
    for m, token in enumerate(doc, start=1):
        h = 0 if token.head.i == token.i else token.head.i + 1
        value = given[h, m, LABELS.index(token.dep_)]
        assert token._.dep_prob == pytest.approx(token._.head_prob * math.exp(value), rel=1e-6)


def test_impossible_labels_may_be_minus_infinity():
    doc = labelled_doc()
    rel = doc._.parser_scores[0]["rel"].astype(numpy.float64)
    head = [0 if t.head.i == t.i else t.head.i + 1 for t in doc]
    label = [LABELS.index(t.dep_) for t in doc]
    rel[head[0], 1, label[0]] = -numpy.inf  # the parse's own label of word 1 becomes impossible
    # the others renormalised, so the record stays log-probabilities
    rel[head[0], 1] -= numpy.logaddexp.reduce(rel[head[0], 1])
    component()(with_rel(doc, rel))
    assert doc[0]._.dep_prob == 0.0
    assert all(t._.dep_prob > 0 for t in doc[1:])


def test_an_allowed_arc_needs_a_possible_label():
    doc = labelled_doc()
    rel = doc._.parser_scores[0]["rel"].copy()
    rel[1, 2, :] = -numpy.inf
    with pytest.raises(ScoreSourceError, match=r"every label of the allowed arc \(head 1, dependent 2\) is -inf"):
        component()(with_rel(doc, rel))
    # a forbidden arc may have no label
    doc = labelled_doc()
    doc._.parser_scores[0]["arc"][1, 2] = -numpy.inf
    component()(with_rel(doc, rel))


class LazyRelationScores:
    """Relation scores read through numpy indexing only, never as a whole array."""

    def __init__(self, dense):
        self.dense = dense
        self.shape = dense.shape

    def __getitem__(self, key):
        return self.dense[key]

    def __array__(self, dtype=None, copy=None):
        raise AssertionError("the component built the dense relation scores")


def test_relation_scores_computed_when_indexed_are_checked_by_shape_only():
    doc = labelled_doc(5)
    rel = doc._.parser_scores[0]["rel"]
    dense = component(n_samples=3)(labelled_doc(5))
    component(n_samples=3)(with_rel(doc, LazyRelationScores(rel)))
    assert [t._.dep_prob for t in doc] == [t._.dep_prob for t in dense]
    assert doc._.tree_expectations[0].sampled_labels.tolist() == dense._.tree_expectations[0].sampled_labels.tolist()
    wrong = with_rel(labelled_doc(5), LazyRelationScores(rel[:, :, :2]))
    with pytest.raises(ScoreSourceError, match=r"relation scores of shape \(6, 6, 2\) do not match 5 words and 4"):
        component()(wrong)


# --- arc scores ---------------------------------------------------------------------


@pytest.mark.parametrize("value", [numpy.nan, numpy.inf])
def test_non_finite_arc_scores_are_refused_before_the_engine(value, monkeypatch):
    import spacy_treexp.pipeline.tree_expectations as module

    def engine_must_not_run(*args, **kwargs):
        raise AssertionError("the engine ran")

    monkeypatch.setattr(module, "annotate_sentences", engine_must_not_run)
    arc, _ = random_scores(3, 0)
    arc[2, 3] = value
    with pytest.raises(ScoreSourceError) as info:
        component()(doc_with(arc))
    message = str(info.value)
    assert message.startswith("[TXE016] tree_expectations: score source 'spacy_treexp.parser_scores.v1', sentence 0")
    assert f"arc scores hold {value} for the arc (head 2, dependent 3)" in message
    assert "-inf for a forbidden arc" in message


def test_member_weights_without_members_are_refused():
    """Weights of no members are a source that lost its members: named, not ignored."""
    arc, _ = random_scores(3, 0)
    doc = doc_with(arc)
    doc._.parser_scores[0]["member_weights"] = [0.5, 0.5]
    with pytest.raises(ScoreSourceError, match=r"\[TXE029\] .*'member_weights' but no 'members'"):
        component()(doc)


def test_forbidden_arcs_get_no_probability():
    arc, _ = random_scores(4, 0)
    arc[0, 2] = arc[3, 1] = -numpy.inf
    doc = doc_with(arc)
    component()(doc)
    mu = doc._.arc_marginals[0]
    assert mu[0, 2] == 0.0 and mu[3, 1] == 0.0
    numpy.testing.assert_allclose(mu[:, 1:].sum(axis=0), 1.0, atol=1e-5)


def test_nan_outside_the_sentence_arcs_is_ignored():
    arc, _ = random_scores(3, 0)
    arc[2, 2] = arc[1, 0] = numpy.nan
    component()(doc_with(arc))


@pytest.mark.parametrize(
    "forbid, single_root, message",
    [
        ({(0, 1), (0, 2), (0, 3)}, True, "every ROOT arc is forbidden"),
        ({(0, 2), (1, 2), (3, 2)}, True, r"word 2 \('w2', token 1\) has no allowed head"),
        # words 1 and 2 only govern each other, and ROOT only governs 3, which governs nothing
        ({(0, 1), (0, 2), (3, 1), (3, 2)}, False, r"word 1 \('w1', token 0\) cannot be reached from ROOT"),
        # two words that may not govern each other: two children of ROOT, never one
        ({(1, 2), (2, 1)}, True, "no word that ROOT may govern reaches every other word"),
    ],
)
def test_scores_without_a_tree_are_refused(forbid, single_root, message):
    n = 2 if (1, 2) in forbid and (2, 1) in forbid else 3
    arc = numpy.zeros((n + 1, n + 1), dtype=numpy.float32)
    for h, d in forbid:
        arc[h, d] = -numpy.inf
    with pytest.raises(ScoreSourceError, match="admit no dependency tree: " + message) as info:
        component(single_root=single_root)(doc_with(arc))
    assert DEFAULT_SOURCE in str(info.value) and "-inf forbids an arc" in str(info.value)


def test_a_forest_is_enough_without_single_root():
    arc = numpy.zeros((3, 3), dtype=numpy.float32)
    arc[1, 2] = arc[2, 1] = -numpy.inf
    doc = doc_with(arc)
    component(single_root=False)(doc)
    assert doc._.tree_expectations[0].heads.tolist() == [0, 0]


def test_arc_scores_as_lists_tuples_and_tensors():
    arc, rel = random_scores(3, 0)

    def parsed(arc, rel, labels):  # a parse on the Doc, so that dep_prob reads the relation scores
        doc = doc_with(arc, rel, labels)
        record = doc._.parser_scores
        doc = Doc(doc.vocab, words=[t.text for t in doc], heads=[1, 1, 1], deps=["nsubj", "ROOT", "obj"])
        doc._.parser_scores = record
        return doc

    reference = component()(parsed(arc, rel, LABELS))._.tree_expectations[0]
    assert numpy.isfinite(reference.dep_prob).all()
    for convert in (lambda a: a.tolist(), lambda a: tuple(map(tuple, a.tolist())), torch.from_numpy):
        doc = component()(parsed(convert(arc), convert(rel), tuple(LABELS)))
        numpy.testing.assert_allclose(doc._.tree_expectations[0].marginals, reference.marginals, atol=1e-6)
        numpy.testing.assert_allclose(doc._.tree_expectations[0].dep_prob, reference.dep_prob, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_tensors_are_read_as_their_values(dtype):
    """bfloat16 has no numpy dtype: its values are widened, not refused with a TypeError."""
    arc, rel = random_scores(3, 0)
    half_arc, half_rel = torch.from_numpy(arc).to(dtype), torch.from_numpy(rel).to(dtype)
    exact = component()(doc_with(half_arc.float().numpy(), half_rel.float().numpy(), LABELS))._.tree_expectations[0]
    got = component()(doc_with(half_arc, half_rel, LABELS))._.tree_expectations[0]
    numpy.testing.assert_allclose(got.marginals, exact.marginals, atol=1e-6)


def test_records_read_back_from_a_docbin():
    nlp = spacy.blank("en")
    doc = labelled_doc()
    docbin = DocBin(store_user_data=True, docs=[doc])
    copy = next(DocBin(store_user_data=True).from_bytes(docbin.to_bytes()).get_docs(nlp.vocab))
    component()(copy)
    component()(doc)
    assert [t._.dep_prob for t in copy] == [t._.dep_prob for t in doc]


# --- malformed records, whatever the source ----------------------------------------


@pytest.mark.parametrize(
    "record, message",
    [
        (
            {"start": 0, "end": 3, "arc": [["a", "b"], ["c", "d"]]},
            r"arc scores must be numbers, got an array of dtype <U1",
        ),
        ({"start": 0, "end": 3, "arc": [[0.0, 1.0], [0.0]]}, r"arc scores are not an array of numbers"),
        ({"start": 0, "end": 3, "arc": None}, r"arc scores must be numbers, got a NoneType"),
        ({"start": 0, "end": 3, "arc": numpy.zeros((3, 3))}, r"arc scores of shape \(3, 3\) for a sentence of 3 words"),
        ({"start": 0, "end": 3}, r"the record has no 'arc' \(its keys: \['end', 'start'\]\)"),
        ({"start": 1, "end": 3, "arc": numpy.zeros((4, 4))}, r"record spans tokens \(1, 3\), but the sentence spans"),
        ({"start": 0, "end": 3, "arc": numpy.zeros((4, 4)), "rel": numpy.zeros((4, 4, 2))}, "come without 'labels'"),
        (
            {
                "start": 0,
                "end": 3,
                "arc": numpy.zeros((4, 4)),
                "rel": numpy.zeros((4, 4, 2)),
                "labels": ["a", "b", "c"],
            },
            r"relation scores of shape \(4, 4, 2\) do not match 3 words and 3 labels \(expected \(4, 4, 3\)\)",
        ),
        (
            {"start": 0, "end": 3, "arc": numpy.zeros((4, 4)), "rel": numpy.zeros((4, 4, 2)), "labels": "ab"},
            "'labels' must be a list of strings, got a str",
        ),
        (
            {"start": 0, "end": 3, "arc": numpy.zeros((4, 4)), "rel": numpy.zeros((4, 4, 2)), "labels": [1, 2]},
            "'labels' must be a list of strings, got a list holding an int",
        ),
        (
            {"start": 0, "end": 3, "arc": numpy.zeros((4, 4)), "rel": numpy.zeros((4, 4, 2)), "labels": ["a", "a"]},
            "'labels' names 'a' twice",
        ),
        (
            {"start": 0, "end": 3, "arc": numpy.zeros((4, 4)), "rel": numpy.full((4, 4, 2), "x"), "labels": ["a", "b"]},
            "relation scores must be numbers, got an array of dtype <U1",
        ),
        (
            {"start": 0, "end": 3, "arc": numpy.zeros((4, 4)), "rel": "scores", "labels": ["a", "b"]},
            "relation scores must be an array of shape",
        ),
        (
            {"start": 0, "end": 3, "arc": numpy.zeros((4, 4)), "rel": numpy.zeros((4, 4, 0)), "labels": []},
            r"relation scores have no labels \(L = 0\)",
        ),
    ],
)
def test_malformed_records_are_named(record, message):
    doc = blank_doc(["a", "b", "c"])
    doc._.parser_scores = [record]
    with pytest.raises(ScoreSourceError, match=message) as info:
        component()(doc)
    assert str(info.value).startswith("[TXE")
    assert f"tree_expectations: score source {DEFAULT_SOURCE}, sentence 0 (tokens 0-3, 'a b c')" in str(info.value)


# --- custom score sources ------------------------------------------------------------


def _good_records(doc):
    records = []
    for sent in doc.sents:
        arc, rel = random_scores(len(sent), 0)
        records.append({"start": sent.start, "end": sent.end, "arc": arc, "rel": rel, "labels": list(LABELS)})
    return records


@spacy.registry.misc("test_score_contract.case.v1")
def make_case_source(case: str):
    def get_scores(doc):
        if case == "none":
            return None
        if case == "dict":
            return {"start": 0, "end": len(doc)}
        if case == "number":
            return 3
        if case == "lists":
            return [[sent.start, sent.end, None] for sent in doc.sents]
        if case == "key_error":
            return {"other": 1}["arc"]
        if case == "type_error":
            return len(None)
        if case == "strings":
            return [dict(record, arc=record["arc"].astype(str)) for record in _good_records(doc)]
        if case == "no_labels":
            return [dict(record, labels=None) for record in _good_records(doc)]
        if case == "too_few":
            return _good_records(doc)[:-1]
        if case == "generator":
            return (record for record in _good_records(doc))
        return _good_records(doc)

    return get_scores


def source_pipeline(case, **config):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe(
        "tree_expectations", config={"scores": {"@misc": "test_score_contract.case.v1", "case": case}, **config}
    )
    return nlp


@pytest.mark.parametrize(
    "case, message",
    [
        ("none", r"\[TXE001\] .*: the score source returned None; it must return a list"),
        ("dict", r"\[TXE002\] .*: the score source returned a dict .*; it must return a list"),
        ("number", r"\[TXE002\] .*: the score source returned an int \(3\)"),
        ("lists", r"\[TXE005\] .*, sentence 0 .*: the record is a list .*, not a dict"),
        ("key_error", r"\[TXE003\] .*: the score source failed with KeyError: 'arc'"),
        ("type_error", r"\[TXE003\] .*: the score source failed with TypeError: object of type 'NoneType'"),
        ("strings", r"\[TXE009\] .*, sentence 0 .*: arc scores must be numbers, got an array of dtype <U"),
        ("no_labels", r"\[TXE012\] .*, sentence 0 .*: relation scores come without 'labels'"),
        ("too_few", r"\[TXE004\] .*: the score source gave 1 sentence records, but the Doc has 2 sentences"),
    ],
)
def test_custom_source_failures_name_the_source(case, message):
    nlp = source_pipeline(case)
    with pytest.raises(ValueError, match=message) as info:
        nlp("Dogs bark. Cats sleep all day.")
    assert isinstance(info.value, ScoreSourceError)
    assert "tree_expectations: score source 'test_score_contract.case.v1'" in str(info.value)
    assert "E109" not in str(info.value) and "initialize" not in str(info.value)


def test_a_key_error_of_the_source_is_not_reported_as_e109():
    # spaCy's Language.__call__ turns any KeyError of a component into E109 ("did you forget
    # to call initialize()?"); the component reports the source's own error instead
    nlp = source_pipeline("key_error")
    with pytest.raises(ScoreSourceError) as info:
        nlp("Dogs bark.")
    assert isinstance(info.value.__cause__, KeyError)
    with pytest.raises(ScoreSourceError, match="KeyError"):
        list(nlp.pipe(["Dogs bark.", "Cats sleep."]))


def test_custom_sources_that_keep_the_contract_work():
    for case in ("good", "generator"):
        doc = source_pipeline(case)("Dogs bark. Cats sleep all day.")
        assert len(doc._.tree_expectations) == 2 and all(0 < t._.head_prob <= 1 for t in doc)


def test_an_unregistered_source_is_named_by_its_repr():
    def my_scores(doc):
        return None

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    te = TreeExpectations(nlp.vocab, scores=my_scores)
    with pytest.raises(ScoreSourceError, match="score source <function .*my_scores at 0x"):
        te(nlp("Dogs bark."))


def test_the_error_handler_sees_the_source_error():
    nlp = source_pipeline("key_error")
    seen = []
    nlp.get_pipe("tree_expectations").set_error_handler(lambda name, proc, docs, e: seen.append(e))
    doc = nlp("Dogs bark.")
    assert doc._.tree_expectations is None
    assert len(seen) == 1 and isinstance(seen[0], ScoreSourceError) and "KeyError" in str(seen[0])


def test_a_doc_without_sentence_boundaries_is_named():
    doc = Doc(spacy.blank("en").vocab, words=["a", "b"])
    arc, _ = random_scores(2, 0)
    doc._.parser_scores = [{"start": 0, "end": 2, "arc": arc}]
    with pytest.raises(ScoreSourceError, match=r"\[TXE023\] tree_expectations: score source .*no sentence boundaries"):
        component()(doc)


def test_a_head_outside_its_sentence_is_named():
    """Sentences from a ``sents`` hook that disagree with the parse: the token whose head
    lies in another sentence is named (the Doc's parse cannot describe the sentence's tree)."""
    doc = score_doc(blank_doc(["a", "b", "c", "d", "e"], sent_starts=[True, False, True, False, False]), seed=0)
    doc.user_hooks["sents"] = lambda d: iter([d[0:2], d[2:5]])
    records = doc._.parser_scores
    heads = doc.to_array("HEAD").view("int64").copy()
    heads[2] = -1  # token 2 ('c') now hangs from token 1 ('b'), in the first sentence
    doc.from_array(["HEAD"], heads.view("uint64")[:, None])
    doc._.parser_scores = records
    with pytest.raises(ValueError, match=r"TXE024.*sentence 1 \(tokens 2-5.*token 2 \('c'\)"):
        component()(doc)


def _two_sentence_doc():
    words = ["A", "b", ".", "C", "d", "e", "."]
    return score_doc(Doc(spacy.blank("en").vocab, words=words, sent_starts=[1, 0, 0, 1, 0, 0, 0]), seed=3)


def test_each_record_carries_its_sentence_text():
    """``SentenceScores.text`` (a seed of the sentence's samples) is ``sent.text``, built
    from the Doc when first read, and survives pickle."""
    doc = _two_sentence_doc()
    records = component().sentence_scores(doc)
    assert [r.text for r in records] == [s.text for s in doc.sents] == ["A b .", "C d e ."]
    assert pickle.loads(pickle.dumps(component().sentence_scores(doc)[1])).text == "C d e ."


@pytest.mark.parametrize("n_samples, builds", [(0, 0), (3, 1)])
def test_the_doc_text_is_built_only_for_seeded_samples(n_samples, builds, monkeypatch):
    """Without samples nothing reads a sentence's text, so ``Doc.text`` (a Token per word) is
    not built; with seeded samples it is built once per Doc, for all its sentences."""
    calls = []
    whole = score_sources._DocText.whole
    monkeypatch.setattr(score_sources._DocText, "whole", lambda self: calls.append(self.text is None) or whole(self))
    doc = component(n_samples=n_samples)(_two_sentence_doc())
    assert sum(calls) == builds  # Doc.text built
    if n_samples:  # the same samples as from records whose text is given up front
        records = component().sentence_scores(_two_sentence_doc())
        for record, sent in zip(records, doc.sents):
            record.text = sent.text
        expected = annotate_sentences(records, AnnotateOptions(n_samples=n_samples), checked=True)
        for annotation, sent in zip(expected, doc.sents):
            numpy.testing.assert_array_equal(sent._.sampled_heads, annotation.sampled_heads)


def test_the_size_limits_name_the_component_and_the_sentence():
    """max_sentence_length and the sample cap began "sentence 0 (...)": in a pipeline with a
    biaffine_parser, which has a length limit of its own, the message did not say who refused."""
    arc, _ = random_scores(6, 0)
    with pytest.raises(
        ValueError, match=r"^tree_expectations: score source .*, sentence 0 \(tokens 0-6, 'w1 w2"
    ) as info:
        component(max_sentence_length=5)(doc_with(arc))
    assert "has 6 words, more than max_sentence_length = 5" in str(info.value)
    short, _ = random_scores(2, 1)
    with pytest.raises(ValueError, match=r", sentence 0 \(tokens 0-6, 'w1 w2.* has 6 words"):  # the second Doc's
        list(component(max_sentence_length=5).pipe([doc_with(short), doc_with(arc)]))
    with pytest.raises(ValueError, match=r"^tree_expectations: score source .*n_samples = 100000000 trees of its 6"):
        component(n_samples=10**8)(doc_with(arc))
