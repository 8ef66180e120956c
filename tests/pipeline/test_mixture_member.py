"""``biaffine_parser`` with ``mixture_member = true``: a second parser joins the first's mixture
of members and leaves its tree and distribution alone.

The Doc's tree, labels and the first parser's scores must be what the first parser alone
gives; the records' members must be the first parser's (members or arc scores) followed by
the second's, each parser weighing the same; the mixture attributes must be the brute-force
values of that mixture; and the shipped ``load(ensemble="mixture")`` must keep the shipped
parser's annotations while adding them."""

import math

import numpy
import pytest
import spacy
import torch
from helpers.enumerate_trees import tree_log_probs
from helpers.toy_pipelines import two_toy_parsers

from spacy_treexp.calibration.map import CalibrationMap

TEXT = "The old man saw a bird . She reads books ."
IDENTITY = CalibrationMap("temperature", (0.0,), (0.0,))


@pytest.fixture(scope="module")
def parsers(tmp_path_factory):
    """Two toy pipelines of different sizes; the second saved, to be loaded as a member."""
    return two_toy_parsers(tmp_path_factory.mktemp("second") / "pipeline")


def member(folder, name="second", **settings):
    config = {"components.biaffine_parser.mixture_member": True, "components.biaffine_parser.members": 0}
    config.update({f"components.biaffine_parser.{k}": v for k, v in settings.items()})
    return spacy.load(folder, config=config), name


@pytest.fixture
def combined(parsers):
    host, _, folder = parsers
    source, name = member(folder)
    host.add_pipe("biaffine_parser", name=name, source=source, after="biaffine_parser")
    yield host
    for name in ("tree_expectations", "third", "second"):
        if name in host.pipe_names:
            host.remove_pipe(name)


def records_of(doc):
    return [dict(record) for record in doc._.parser_scores]


def test_the_member_leaves_the_first_parsers_tree_and_scores(parsers, combined):
    _, second_alone, _ = parsers
    with combined.select_pipes(disable=["second"]):
        alone = combined(TEXT)
    doc = combined(TEXT)
    assert [(t.head.i, t.dep_) for t in doc] == [(t.head.i, t.dep_) for t in alone]
    first_members = combined.get_pipe("biaffine_parser").members
    assert first_members >= 2  # the toy parser's default MC-dropout members
    for got, a, b in zip(records_of(doc), records_of(alone), records_of(second_alone(TEXT))):
        numpy.testing.assert_array_equal(got["arc"], a["arc"])
        numpy.testing.assert_array_equal(numpy.asarray(got["rel"]), numpy.asarray(a["rel"]))
        assert got["members"].shape[0] == first_members + 1  # the first's members, then the second's scores
        numpy.testing.assert_allclose(got["members"][:first_members], a["members"], atol=1e-6)
        numpy.testing.assert_allclose(got["members"][-1], b["arc"], atol=1e-5)
        expected = [0.5 / first_members] * first_members + [0.5]
        numpy.testing.assert_allclose(got["member_weights"], expected)
        assert got["writer"] == "second"  # tree_expectations applies the second parser's map


def test_the_member_scores_no_relations_and_still_fixes_whitespace_heads(parsers, combined, monkeypatch):
    """Nothing reads a member's relation scores, so its model computes none (only the first
    parser's pass calls the all-pairs relation scorer); its arc scores keep the whitespace
    rule (a line break's only head is the word before it), as when it parses alone."""
    from spacy_treexp.pipeline import architectures

    _, second_alone, _ = parsers
    text = "The old man saw a bird .\n\nShe reads books ."
    calls = []
    scorer = architectures._all_pairs_relations
    monkeypatch.setattr(architectures, "_all_pairs_relations", lambda *a: calls.append(1) or scorer(*a))
    doc = combined(text)
    assert len(calls) == 1  # the first parser's batch; the member's pass scored no relations
    with combined.select_pipes(disable=["second"]):
        before = combined(text)
    assert combined.get_pipe("second").predict([before])["rel"] == []
    alone = second_alone(text)
    assert any(t.is_space for t in doc)
    for got, own in zip(records_of(doc), records_of(alone)):
        numpy.testing.assert_allclose(got["members"][-1], own["arc"], atol=1e-5)  # -inf where forbidden too


def test_a_third_parser_joins_with_a_third_of_the_weight(parsers, combined):
    _, _, folder = parsers
    source, _ = member(folder, members=2)
    combined.add_pipe("biaffine_parser", name="third", source=source, after="second")
    [record] = records_of(combined("She reads old books ."))
    k = combined.get_pipe("biaffine_parser").members
    expected = [1 / (3 * k)] * k + [1 / 3] + [1 / 6, 1 / 6]  # its own 2 members share its third
    numpy.testing.assert_allclose(record["member_weights"], expected)
    assert record["members"].shape[0] == k + 3 and record["member_parsers"] == 3


def test_the_mixture_attributes_are_the_brute_force_mixtures(combined):
    """Every tree of a 6-word sentence, in float64: p_mix(parse) and each head's marginal."""
    combined.get_pipe("second").calibration_map = IDENTITY
    try:
        combined.add_pipe("tree_expectations", config={"keep_scores": True})
        doc = combined("She reads old books in gardens")
    finally:
        combined.get_pipe("second").calibration_map = None
    [sent] = doc.sents
    [record] = records_of(doc)
    n = len(sent)
    heads = [0 if t.head.i == t.i else t.head.i + 1 for t in sent]
    weights = record["member_weights"]
    p_tree, p_head = 0.0, numpy.zeros(n)
    for w, scores in zip(weights, record["members"]):
        trees, log_probs = tree_log_probs(torch.from_numpy(scores.astype(numpy.float64)), n, True)
        p = log_probs.exp().numpy()
        p_tree += w * p[(trees[:, 1:] == torch.tensor(heads)).all(-1).numpy()].sum()
        p_head += w * numpy.array([p[(trees[:, m + 1] == heads[m]).numpy()].sum() for m in range(n)])
    assert sent._.mixture_error_probability == pytest.approx(1 - p_tree, abs=1e-5)
    numpy.testing.assert_allclose([t._.mixture_head_prob for t in sent], p_head, atol=2e-5)
    assert sent._.mutual_information is not None
    # the parser's own values are the first parser's distribution, not the mixture's
    trees, log_probs = tree_log_probs(torch.from_numpy(record["arc"].astype(numpy.float64)), n, True)
    own = float(log_probs.exp()[(trees[:, 1:] == torch.tensor(heads)).all(-1)].sum())
    assert sent._.error_probability == pytest.approx(1 - own, abs=1e-5)
    assert not math.isclose(own, p_tree, abs_tol=1e-3)


def test_the_member_carries_its_setting_and_map_through_saving(combined, tmp_path):
    combined.get_pipe("second").calibration_map = CalibrationMap("temperature", (0.3,), (0.0,))
    try:
        combined.to_disk(tmp_path / "both")
    finally:
        combined.get_pipe("second").calibration_map = None
    nlp = spacy.load(tmp_path / "both")
    second = nlp.get_pipe("second")
    assert second.mixture_member and not second.product
    assert second.calibration_map == CalibrationMap("temperature", (0.3,), (0.0,))


def test_a_map_fitted_on_the_parsers_own_scores_is_dropped(parsers, tmp_path):
    _, second_alone, _ = parsers
    second_alone.get_pipe("biaffine_parser").calibration_map = CalibrationMap("temperature", (0.4,), (0.0,))
    try:
        second_alone.to_disk(tmp_path / "solo")
    finally:
        second_alone.get_pipe("biaffine_parser").calibration_map = None
    with pytest.warns(UserWarning, match="not on a mixture with an earlier parser"):
        nlp = spacy.load(tmp_path / "solo", config={"components.biaffine_parser.mixture_member": True})
    assert nlp.get_pipe("biaffine_parser").calibration_map is None


def test_a_member_without_an_earlier_parser_or_with_product_says_so(parsers):
    _, _, folder = parsers
    alone, _ = member(folder)
    with pytest.raises(ValueError, match="mixture_member = true.*the Doc carries none"):
        alone(TEXT)
    with pytest.raises(ValueError, match="product and mixture_member are both true"):
        spacy.load(
            folder,
            config={"components.biaffine_parser.mixture_member": True, "components.biaffine_parser.product": True},
        )


def test_the_shipped_mixture_keeps_the_parsers_annotations_and_adds_the_mixtures():
    import spacy_treexp
    from spacy_treexp.pipeline.default_model import ENSEMBLE_PARSER, MIXTURE_NAME, load_named

    with pytest.raises(ValueError, match="ensemble must be True, False or one of"):
        spacy_treexp.load(ensemble="mix")
    single = spacy_treexp.load()
    single.add_pipe("tree_expectations")
    mixture = load_named(MIXTURE_NAME)
    mixture.add_pipe("tree_expectations", config={"keep_scores": True})
    second = mixture.get_pipe(ENSEMBLE_PARSER)
    assert second.mixture_member and second.calibration_map is mixture.get_pipe("biaffine_parser").calibration_map
    text = "The old man saw the dog with the telescope. Prices rose sharply in March."
    a, b = single(text), mixture(text)
    assert [(t.head.i, t.dep_, t.tag_) for t in a] == [(t.head.i, t.dep_, t.tag_) for t in b]
    for sa, sb in zip(a.sents, b.sents):
        assert sa._.error_probability == pytest.approx(sb._.error_probability, abs=1e-6)
        assert sa._.out_of_domain == pytest.approx(sb._.out_of_domain, abs=1e-9)  # novelty reference kept
        numpy.testing.assert_allclose([t._.head_prob for t in sa], [t._.head_prob for t in sb], atol=1e-6)
        assert 0.0 <= sb._.mixture_error_probability <= 1.0  # (the single's is its MC-dropout members')
        assert all(0.0 <= t._.mixture_head_prob <= 1.0 for t in sb)
    [record, _] = b._.parser_scores
    assert record["members"].shape[0] == 2  # the two parsers, no MC-dropout members
    numpy.testing.assert_allclose(record["member_weights"], [0.5, 0.5])


def test_calibrate_fits_the_first_parsers_scores_and_stores_the_map_with_the_member(combined, tmp_path, capsys):
    """``spacy-treexp calibrate`` on a saved pipeline with a mixture member: the map is fitted
    on the scores tree_expectations reads (the first parser's, unchanged by the member), so it
    is the map the first parser alone gets, and it goes to the member (the last writer)."""
    from helpers.paths import FIXTURES

    from spacy_treexp.cli import main

    combined.to_disk(tmp_path / "both")
    with combined.select_pipes(disable=["second"]):
        combined.to_disk(tmp_path / "first")
    dev = ["--dev", str(FIXTURES / "eval_20.conllu"), "--kind", "temperature"]
    for name in ("both", "first"):
        assert main(["calibrate", "--model", str(tmp_path / name), "--out", str(tmp_path / f"{name}_cal")] + dev) == 0
    capsys.readouterr()
    both, first = spacy.load(tmp_path / "both_cal"), spacy.load(tmp_path / "first_cal")
    fitted = both.get_pipe("tree_expectations").calibration
    assert both.get_pipe("second").calibration_map.to_dict() == fitted.to_dict()
    assert fitted.to_dict()["log_scale"] == first.get_pipe("tree_expectations").calibration.to_dict()["log_scale"]
    assert fitted.to_dict()["log_scale"] != [0.0]


def test_a_member_without_a_map_leaves_the_first_parsers_calibrated_values(combined, tmp_path):
    """A member that carries no map (sourced from a pipeline of its own, its map dropped) must
    not strip the first parser's map from the first parser's values: head_prob and
    error_probability stay what the first parser alone gives, saved and loaded too."""
    first = combined.get_pipe("biaffine_parser")
    first.calibration_map = CalibrationMap("temperature", (0.5,), (0.0,))
    try:
        with combined.select_pipes(disable=["second"]):
            combined.add_pipe("tree_expectations")
            alone = combined(TEXT)
            combined.remove_pipe("tree_expectations")
        assert combined.get_pipe("second").calibration_map is None
        combined.add_pipe("tree_expectations")
        combined.to_disk(tmp_path / "both")
        for nlp in (combined, spacy.load(tmp_path / "both")):
            doc = nlp(TEXT)
            numpy.testing.assert_allclose([t._.head_prob for t in doc], [t._.head_prob for t in alone], atol=1e-6)
            for a, b in zip(alone.sents, doc.sents):
                assert b._.error_probability == pytest.approx(a._.error_probability, abs=1e-6)
                assert b._.mixture_error_probability is not None
    finally:
        first.calibration_map = None


def test_a_product_parser_after_a_member_is_refused(parsers, combined):
    """A product after the member multiplied each joined member and dropped the mixture's
    weights (equal weights for 1/4, 1/4, 1/2): refused by name instead."""
    from spacy_treexp.annotate.product import ProductError

    _, _, folder = parsers
    source = spacy.load(folder, config={"components.biaffine_parser.product": True})
    combined.add_pipe("biaffine_parser", name="third", source=source, after="second")
    with pytest.raises(ProductError, match="members of 2 parsers joined by mixture_member"):
        combined(TEXT)


@pytest.mark.parametrize("ensemble", [1, 0.0, None, "Mixture"])
def test_load_names_an_ensemble_that_is_neither_a_bool_nor_a_kind(ensemble):
    """``ensemble=1`` passed the check (1 == True) and failed inside add_second_parser with
    its message; every value that is not a bool or a kind is named by load, before loading."""
    import spacy_treexp

    with pytest.raises(ValueError, match="spacy_treexp.load: ensemble must be True, False or one of"):
        spacy_treexp.load(ensemble=ensemble)
