"""Epistemic uncertainty in the Stanza processor: an ``EnsembleGraphParser``'s members give
``word.head_mutual_information`` (equal to enumeration over every tree of every member),
``sentence.mutual_information`` and ``sentence.expected_entropy``; a single model gives
None; the sentence risk properties are there for both."""

from __future__ import annotations

import math

import numpy
import pytest

stanza = pytest.importorskip("stanza")

from helpers.mixture import mixture_by_enumeration  # noqa: E402
from helpers.paths import FIXTURES  # noqa: E402

import spacy_treexp.stanza as treexp_stanza  # noqa: E402
from spacy_treexp.stanza.capture import SCORES_ATTR  # noqa: E402

KINDS = FIXTURES / "stanza" / "kinds"
POS = FIXTURES / "stanza" / "tiny" / "pos.pt"
SHORT = ["She ran .", "The dog slept .", "Mary saw the cat .", "John liked the old book ."]


def parse(kind: str, **extra):
    nlp = treexp_stanza.pipeline_from_dir(
        str(KINDS / kind), pos_model_path=str(POS), logging_level="WARN", depparse_batch_size=1000, **extra
    )
    return nlp("\n".join(SHORT))


def test_ensemble_members_give_mutual_information():
    doc = parse("ensemble", tree_expectations_mixture_marginals=True)
    for sentence in doc.sentences:
        members = getattr(sentence, SCORES_ATTR).members
        exact = mixture_by_enumeration(members)
        got = [word.head_mutual_information for word in sentence.words]
        numpy.testing.assert_allclose(got, exact.head_mutual_information.numpy(), atol=1e-5)
        assert sentence.expected_entropy == pytest.approx(exact.expected_entropy, abs=1e-5)
        numpy.testing.assert_allclose(sentence.mixture_arc_marginals, exact.marginals.numpy(), atol=1e-5)
        heads = numpy.array([word.head for word in sentence.words])
        mixture_head = exact.marginals.numpy()[heads, numpy.arange(1, len(heads) + 1)]
        numpy.testing.assert_allclose([word.mixture_head_prob for word in sentence.words], mixture_head, atol=1e-5)
        assert 1 - sentence.mixture_error_probability <= mixture_head.min() + 1e-6  # p(tree) <= p(any arc)
        assert sentence.mixture_sampled_heads is None or sentence.mixture_sampled_heads.shape[1] == len(sentence.words)
        # an unbiased estimate; each of its terms lies in (-inf, log K]
        assert sentence.mutual_information <= math.log(len(members)) + 1e-9
        assert abs(sentence.mutual_information - exact.mutual_information) < math.log(len(members))
        assert 0.0 <= sentence.error_probability <= 1.0
        assert sentence.expected_errors == pytest.approx(len(sentence.words) * (1 - sentence.expected_attachment))


def test_single_model_has_no_mutual_information():
    doc = parse("pretrain", tree_expectations_mixture_marginals=True, tree_expectations_mixture_samples=3)
    for sentence in doc.sentences:
        assert sentence.mutual_information is None and sentence.expected_entropy is None
        assert sentence.mixture_arc_marginals is None and sentence.mixture_sampled_heads is None
        assert all(word.head_mutual_information is None for word in sentence.words)
        assert sentence.mixture_error_probability is None
        assert all(word.mixture_head_prob is None for word in sentence.words)
        assert sentence.parse_log_prob <= 0.0


def test_calibrate_and_evaluate_read_a_sentence_as_the_processor_does():
    """``stanza_scores`` (what ``calibrate`` fits a map on and ``evaluate`` scores) gives each
    sentence the processor's record: Stanza's own labels (an ensemble's head-constraint
    repair can pick another than the best captured label, so a map fitted on those would apply
    to other relations than at run time) and the ensemble's members."""
    from spacy_treexp.evaluation.conllu import read_conllu
    from spacy_treexp.evaluation.scores import stanza_scores
    from spacy_treexp.stanza.processor import sentence_scores

    gold = read_conllu(FIXTURES / "stanza" / "tiny_en.dev.conllu")[:40]
    fitted = stanza_scores(str(KINDS / "ensemble"), gold, gold_tags=True)
    nlp = stanza.Pipeline(
        "en",
        processors="depparse,tree_expectations",
        dir=str(KINDS / "ensemble"),
        download_method=None,
        allow_unknown_language=True,
        depparse_model_path=str(KINDS / "ensemble" / "depparse.pt"),
        depparse_pretagged=True,
        depparse_batch_size=5000,
        logging_level="WARN",
    )
    from stanza.models.common.doc import Document

    rows = [
        [
            {"id": i + 1, "text": w, "lemma": w, "upos": s.upos[i], "xpos": s.xpos[i], "feats": None}
            for i, w in enumerate(s.words)
        ]
        for s in gold
    ]
    parsed = nlp(Document(rows)).sentences
    for record, sentence in zip(fitted, parsed):
        assert record.deprels == [word.deprel for word in sentence.words]
        assert record.members is not None and record.members.shape[0] == 2
        numpy.testing.assert_array_equal(record.arc, sentence_scores(0, sentence).arc)


def test_mixture_values_survive_the_json_export():
    """from_dict gives the epistemic arrays back as arrays of their dtype, as the processor set
    them (they came back as nested lists)."""
    import json

    doc = parse("ensemble", tree_expectations_mixture_samples=3, tree_expectations_mixture_marginals=True)
    back = treexp_stanza.from_dict(json.loads(json.dumps(treexp_stanza.to_dict(doc))))
    for a, b in zip(doc.sentences, back.sentences):
        for name in ("mixture_arc_marginals", "mixture_sampled_heads"):
            assert isinstance(getattr(b, name), numpy.ndarray) and getattr(b, name).dtype == getattr(a, name).dtype
            numpy.testing.assert_array_equal(getattr(b, name), getattr(a, name))
        assert [w.head_mutual_information for w in b.words] == [w.head_mutual_information for w in a.words]
        assert [w.mixture_head_prob for w in b.words] == [w.mixture_head_prob for w in a.words]
        assert b.mixture_error_probability == a.mixture_error_probability is not None


def test_trees_of_the_ensembles_mixture():
    doc = parse("ensemble", tree_expectations_mixture_samples=30)
    for sentence in doc.sentences:
        drawn = sentence.mixture_sampled_heads
        n = len(sentence.words)
        assert drawn.shape == (30, n)
        for row in drawn:  # a tree: one root, every word reaches it
            assert (row == 0).sum() == 1
            for m in range(1, n + 1):
                seen, h = set(), m
                while h != 0:
                    assert h not in seen
                    seen.add(h)
                    h = int(row[h - 1])


def test_a_map_fitted_on_an_ensemble_calibrates_its_members_as_the_parsers_they_are():
    """The ensemble decodes the sum of its members' scores; each member is a parser trained
    alone. ``fit_calibration`` (what ``calibrate --stanza`` runs) gives the members a map of
    their own, fitted on each member's scores (the sum's would scale each member as it scales
    the sum); a single model's map has none."""
    from spacy_treexp.calibration import fit_calibration
    from spacy_treexp.calibration.fit import member_records
    from spacy_treexp.evaluation.conllu import read_conllu
    from spacy_treexp.evaluation.scores import stanza_scores

    gold = read_conllu(FIXTURES / "stanza" / "tiny_en.dev.conllu")[:40]
    scores = stanza_scores(str(KINDS / "ensemble"), gold, gold_tags=True)
    fitted = fit_calibration(gold, scores, "temperature")
    assert fitted.members is not None
    assert fitted.members == fit_calibration(*member_records(gold, scores), "temperature", relations=False)
    single = stanza_scores(str(KINDS / "pretrain"), gold, gold_tags=True)
    assert fit_calibration(gold, single, "temperature").members is None
