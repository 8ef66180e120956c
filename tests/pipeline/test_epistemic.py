"""Epistemic uncertainty in the spaCy component: the shipped pipeline's MC-dropout members
reach ``token._.head_mutual_information`` (checked against enumeration of every tree of
every member), ``sent._.mutual_information`` and the sentence risk attributes; the
members are reproducible and do not depend on the batch; a custom score source's members
and weights are used."""

from __future__ import annotations

import math

import numpy
import pytest
import spacy
import torch
from helpers.enumerate_trees import tree_log_probs
from helpers.mixture import mixture_by_enumeration

import spacy_treexp
from spacy_treexp.pipeline.members import DEFAULT_MEMBERS


@pytest.fixture(scope="module")
def nlp():
    pipeline = spacy_treexp.load()
    # the identity map: the annotations then come from the recorded scores as they are
    identity = {"kind": "temperature", "log_scale": [0.0], "bias": [0.0]}
    pipeline.add_pipe("tree_expectations", config={"keep_scores": True, "calibration": identity})
    return pipeline


def test_attributes_match_enumeration(nlp):
    doc = nlp("Old dogs bark loudly.")
    (sent,) = doc.sents
    members = doc._.parser_scores[0]["members"]
    assert members.shape == (DEFAULT_MEMBERS, 6, 6)
    assert not numpy.allclose(members[0], members[1])  # the members differ
    exact = mixture_by_enumeration(members)
    got = [token._.head_mutual_information for token in sent]
    numpy.testing.assert_allclose(got, exact.head_mutual_information.numpy(), atol=2e-5)
    exact_mi = exact.mutual_information
    assert sent._.expected_entropy == pytest.approx(exact.expected_entropy, abs=1e-4)
    assert sent._.mixture_arc_marginals is None  # asked for with mixture_marginals (its size)
    assert sent._.mixture_sampled_heads is None  # mixture_samples = 0: no trees drawn
    # an unbiased estimate from 2 trees per member; each term is at most log K
    assert abs(sent._.mutual_information - exact_mi) < math.log(len(members))
    assert sent._.mutual_information >= -1e-9 or exact_mi < 0.5
    # sentence risk: the parse's exact probability under the parser's own tree distribution
    arc = torch.from_numpy(doc._.parser_scores[0]["arc"].astype(numpy.float64))
    trees, lp = tree_log_probs(arc, 5, True)
    heads = torch.tensor([-1] + [0 if t.head.i == t.i else t.head.i + 1 for t in sent])
    exact = float(lp[(trees == heads).all(-1)][0])
    assert sent._.parse_log_prob == pytest.approx(exact, abs=1e-5)
    assert sent._.error_probability == pytest.approx(-math.expm1(exact), abs=1e-5)
    assert sent._.expected_errors == pytest.approx(5 * (1 - sent._.expected_attachment))
    # the same risk under the members' mixture (equal weights): p_mix(parse) and each head's marginal
    member_p = [
        float(m_lp[(m_trees == heads).all(-1)][0].exp())
        for m_trees, m_lp in (tree_log_probs(torch.from_numpy(m.astype(numpy.float64)), 5, True) for m in members)
    ]
    assert sent._.mixture_error_probability == pytest.approx(1 - numpy.mean(member_p), abs=1e-5)
    columns = numpy.arange(1, 6)
    mixture_marginals = mixture_by_enumeration(members).marginals.numpy()
    numpy.testing.assert_allclose(
        [t._.mixture_head_prob for t in sent], mixture_marginals[heads[1:].numpy(), columns], atol=2e-5
    )


def test_trees_of_the_members_mixture():
    pipeline = spacy_treexp.load()
    identity = {"kind": "temperature", "log_scale": [0.0], "bias": [0.0]}
    config = {"mixture_samples": 40, "mixture_marginals": True, "keep_scores": True, "calibration": identity}
    pipeline.add_pipe("tree_expectations", config=config)
    (sent,) = pipeline("Old dogs bark loudly.").sents
    drawn = sent._.mixture_sampled_heads
    assert drawn.shape == (40, 5)
    trees, _ = tree_log_probs(torch.zeros(6, 6, dtype=torch.float64), 5, True)  # every tree of 5 words
    assert all((trees[:, 1:] == torch.from_numpy(row.astype(numpy.int64))).all(-1).any() for row in drawn)
    exact = mixture_by_enumeration(sent.doc._.parser_scores[0]["members"])
    numpy.testing.assert_allclose(sent._.mixture_arc_marginals, exact.marginals.numpy(), atol=2e-5)


def test_members_reproducible_and_batch_independent(nlp):
    texts = ["The cat sat on the mat.", "Colorless green ideas sleep furiously near the old bridge today."]
    alone = nlp(texts[1])
    together = list(nlp.pipe(texts))[1]
    numpy.testing.assert_allclose(
        alone._.parser_scores[0]["members"], together._.parser_scores[0]["members"], atol=1e-4
    )
    again = nlp(texts[1])
    assert [t._.head_mutual_information for t in again] == [t._.head_mutual_information for t in alone]
    assert again.sents.__next__()._.mutual_information == next(alone.sents)._.mutual_information


def test_full_members_reproducible_and_batch_independent():
    """The "full" members run the BiLSTM again in eval mode: no unseeded inter-layer dropout
    (thinc leaves the module in train mode after its prediction)."""
    full = spacy_treexp.load(config={"components.biaffine_parser.member_kind": "full"})
    texts = ["The cat sat on the mat.", "Colorless green ideas sleep furiously near the old bridge today."]
    alone = full(texts[1])._.parser_scores[0]["members"]
    assert numpy.array_equal(alone, full(texts[1])._.parser_scores[0]["members"])
    together = list(full.pipe(texts))[1]._.parser_scores[0]["members"]
    numpy.testing.assert_allclose(alone, together, atol=1e-4)


def test_member_settings():
    plain = spacy_treexp.load()
    parser = plain.get_pipe("biaffine_parser")
    assert parser.members == DEFAULT_MEMBERS and parser.member_kind == "head"
    off = spacy_treexp.load(config={"components.biaffine_parser.members": 0})
    off.add_pipe("tree_expectations")
    doc = off("Dogs bark.")
    assert doc[0]._.head_mutual_information is None and next(doc.sents)._.mutual_information is None
    assert next(doc.sents)._.error_probability is not None
    full = spacy_treexp.load(config={"components.biaffine_parser.member_kind": "full"})
    full.add_pipe("tree_expectations")
    doc = full("Dogs bark at night.")
    assert all(t._.head_mutual_information >= 0 for t in doc)
    with pytest.raises(ValueError, match="members"):
        spacy_treexp.load(config={"components.biaffine_parser.members": 1})
    with pytest.raises(ValueError, match="member_kind"):
        spacy_treexp.load(config={"components.biaffine_parser.member_kind": "tails"})


@spacy.registry.misc("test_epistemic_members.v1")
def make_member_source():
    def get_scores(doc):
        out = []
        for sent in doc.sents:
            n = len(sent)
            generator = numpy.random.default_rng(n)
            members = generator.normal(size=(3, n + 1, n + 1))
            out.append(
                {
                    "start": sent.start,
                    "end": sent.end,
                    "arc": members.mean(0),
                    "members": members,
                    "member_weights": [0.5, 0.5, 0.0],
                }
            )
        return out

    return get_scores


def test_custom_source_members_and_weights():
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("tree_expectations", config={"scores": {"@misc": "test_epistemic_members.v1"}})
    doc = nlp("one two three four")
    members = numpy.random.default_rng(4).normal(size=(3, 5, 5))
    exact = mixture_by_enumeration(members[:2])  # the member of weight 0 does not count
    got = [t._.head_mutual_information for t in doc]
    numpy.testing.assert_allclose(got, exact.head_mutual_information.numpy(), atol=1e-5)


def test_risk_temperature_scales_the_parse_probability():
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe(
        "tree_expectations", config={"scores": {"@misc": "test_epistemic_members.v1"}, "risk_temperature": 0.5}
    )
    doc = nlp("one two three four")
    (sent,) = doc.sents
    arc = numpy.random.default_rng(4).normal(size=(3, 5, 5)).mean(0)
    trees, lp = tree_log_probs(torch.from_numpy(arc / 0.5), 4, True)
    heads = torch.from_numpy(numpy.r_[-1, doc._.tree_expectations[0].heads])
    exact = float(lp[(trees == heads).all(-1)][0])
    assert sent._.parse_log_prob == pytest.approx(exact, abs=1e-6)
    assert sent._.error_probability == pytest.approx(-math.expm1(exact), abs=1e-6)
    with pytest.raises(ValueError, match="risk_temperature"):
        nlp.add_pipe("tree_expectations", name="bad", config={"risk_temperature": 0})
