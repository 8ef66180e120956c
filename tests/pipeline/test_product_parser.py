"""``biaffine_parser`` with ``product = true``: two parsers as one tree distribution.

The second parser's records must be the first's and its own scores multiplied (arc scores
summed, relations renormalised, members paired), its tree the MAP tree of the sum, the
annotations the brute-force product of the two parsers' tree distributions, and the map the
second parser carries the one ``tree_expectations`` applies."""

import copy
import pickle

import numpy
import pytest
import spacy
import torch
from helpers.enumerate_trees import all_trees
from helpers.toy_pipelines import TEXTS, two_toy_parsers

from spacy_treexp.annotate.product import label_order
from spacy_treexp.calibration.map import CalibrationMap
from spacy_treexp.engine import TreeDistribution
from spacy_treexp.pipeline.tree_expectations import parser_calibration, store_calibration

TEXT = "The old man saw a bird . She reads books ."


def temperature_map(log_scale):
    return CalibrationMap("temperature", (log_scale,), (0.0,))


@pytest.fixture(scope="module")
def parsers(tmp_path_factory):
    """Two toy pipelines of different sizes; the second saved, to be loaded with ``product``."""
    return two_toy_parsers(tmp_path_factory.mktemp("second") / "pipeline")


@pytest.fixture
def combined(parsers):
    host, _, folder = parsers
    source = spacy.load(folder, config={"components.biaffine_parser.product": True})
    host.add_pipe("biaffine_parser", name="second", source=source, after="biaffine_parser")
    yield host
    host.remove_pipe("second")


def records_of(doc):
    return [dict(record) for record in doc._.parser_scores]


def test_the_second_parser_multiplies_its_scores_with_the_first(parsers, combined):
    _, second_alone, _ = parsers
    with combined.select_pipes(disable=["second"]):
        first_records = records_of(combined(TEXT))
    second_records = records_of(second_alone(TEXT))
    doc = combined(TEXT)
    product = records_of(doc)
    assert [(r["start"], r["end"]) for r in product] == [(r["start"], r["end"]) for r in first_records]
    for got, a, b in zip(product, first_records, second_records):
        numpy.testing.assert_allclose(got["arc"], a["arc"] + b["arc"], atol=1e-5)
        order = label_order(got["labels"], b["labels"])
        summed = numpy.asarray(a["rel"], dtype=numpy.float64)[..., label_order(got["labels"], a["labels"])]
        summed = summed + numpy.asarray(b["rel"], dtype=numpy.float64)[..., order]
        expected = summed - numpy.logaddexp.reduce(summed, axis=-1, keepdims=True)
        numpy.testing.assert_allclose(numpy.asarray(got["rel"]), expected, atol=1e-4)
        numpy.testing.assert_allclose(got["members"], a["members"] + b["members"], atol=1e-5)
        # The Doc's tree is the MAP tree of the summed scores.
        n = got["end"] - got["start"]
        mode = TreeDistribution(torch.from_numpy(got["arc"]), single_root=True).mode.numpy()
        heads = [0 if t.head.i == t.i else t.head.i - got["start"] + 1 for t in doc[got["start"] : got["end"]]]
        assert heads == list(mode[1 : n + 1])


def test_the_annotations_are_the_product_of_the_two_tree_distributions(parsers, combined):
    """By enumeration over every tree of a 6-word sentence, in float64."""
    _, second_alone, _ = parsers
    text = "She reads old books in gardens"
    combined.add_pipe("tree_expectations", config={"calibration": temperature_map(0.0).to_dict()})
    try:
        with combined.select_pipes(disable=["second", "tree_expectations"]):
            [a] = records_of(combined(text))
        [b] = records_of(second_alone(text))
        [annotation] = combined(text)._.tree_expectations
    finally:
        combined.remove_pipe("tree_expectations")
    n = a["end"] - a["start"]
    trees = all_trees(n, single_root=True).numpy()
    words = numpy.arange(1, n + 1)

    def log_probs(arc):
        arc = numpy.asarray(arc, dtype=numpy.float64)
        totals = numpy.array([arc[tree[1:], words].sum() for tree in trees])
        return totals - numpy.logaddexp.reduce(totals)

    log_p = log_probs(a["arc"]) + log_probs(b["arc"])
    p = numpy.exp(log_p - numpy.logaddexp.reduce(log_p))
    marginals = numpy.zeros((n + 1, n + 1))
    for tree, weight in zip(trees, p):
        marginals[tree[1:], words] += weight
    numpy.testing.assert_allclose(numpy.asarray(annotation.marginals)[:, 1:], marginals[:, 1:], atol=5e-5)


def test_tree_expectations_applies_the_map_of_the_product_not_the_first_parsers(combined):
    first_map, product_map = temperature_map(0.3), temperature_map(-0.2)
    combined.get_pipe("biaffine_parser").calibration_map = first_map
    try:
        assert parser_calibration(combined) is None  # the product has none: not the first parser's
        combined.get_pipe("second").calibration_map = product_map
        assert parser_calibration(combined) == product_map
        assert combined.add_pipe("tree_expectations").calibration == product_map
        fitted = temperature_map(0.1)
        store_calibration(combined, fitted)
        assert combined.get_pipe("second").calibration_map == fitted
        assert combined.get_pipe("biaffine_parser").calibration_map == first_map
    finally:
        combined.get_pipe("biaffine_parser").calibration_map = None
        if "tree_expectations" in combined.pipe_names:
            combined.remove_pipe("tree_expectations")


def _annotation_under(nlp, calibration, text=TEXT):
    """What tree_expectations gives with ``calibration`` forced (an explicit map in its config)."""
    nlp.add_pipe("tree_expectations", name="forced", config={"calibration": calibration.to_dict()})
    try:
        return [a.marginals for a in nlp(text)._.tree_expectations]
    finally:
        nlp.remove_pipe("forced")


def test_the_map_follows_the_parser_that_wrote_the_scores(combined):
    """With the second parser disabled, the first parser's own map applies, not the product's
    (which would be wrong by the product's scale on scores of another size)."""
    first_map, product_map = temperature_map(0.7), temperature_map(-0.5)
    combined.get_pipe("biaffine_parser").calibration_map = first_map
    combined.get_pipe("second").calibration_map = product_map
    try:
        component = combined.add_pipe("tree_expectations")
        assert component.calibration == product_map
        got = [a.marginals for a in combined(TEXT)._.tree_expectations]
        with combined.select_pipes(disable=["tree_expectations"]):
            expected = _annotation_under(combined, product_map)
        for a, b in zip(got, expected):
            numpy.testing.assert_allclose(a, b, atol=1e-6)
        with combined.select_pipes(disable=["second"]):
            alone = [a.marginals for a in combined(TEXT)._.tree_expectations]
        with combined.select_pipes(disable=["second", "tree_expectations"]):
            expected = _annotation_under(combined, first_map)
            wrong = _annotation_under(combined, product_map)
        for a, b, c in zip(alone, expected, wrong):
            numpy.testing.assert_allclose(a, b, atol=1e-6)
            assert numpy.abs(numpy.asarray(a) - numpy.asarray(c)).max() > 1e-3
    finally:
        combined.get_pipe("biaffine_parser").calibration_map = None
        combined.get_pipe("second").calibration_map = None
        if "tree_expectations" in combined.pipe_names:
            combined.remove_pipe("tree_expectations")


def test_scores_of_a_parser_added_later_or_another_than_the_configs_map_are_refused(parsers):
    host, _, folder = parsers
    host.add_pipe("tree_expectations", config={"calibration": temperature_map(0.2).to_dict()})
    try:
        with host.select_pipes(disable=["tree_expectations"]):
            host.add_pipe(
                "biaffine_parser",
                name="second",
                source=spacy.load(folder, config={"components.biaffine_parser.product": True}),
                after="biaffine_parser",
            )
        with pytest.raises(
            ValueError, match="TXE026.*written by 'second'.*was not in the pipeline when 'tree_expectations' was added"
        ):
            host(TEXT)
        host.remove_pipe("tree_expectations")
        host.add_pipe("tree_expectations", config={"calibration": temperature_map(0.2).to_dict()})
        assert len(host(TEXT)._.tree_expectations) == 2
        with host.select_pipes(disable=["second"]):
            with pytest.raises(
                ValueError, match="TXE026.*written by 'biaffine_parser'.*in 'tree_expectations'.s config"
            ):
                host(TEXT)
    finally:
        for name in ("tree_expectations", "second"):
            if name in host.pipe_names:
                host.remove_pipe(name)


def test_a_product_parser_saves_and_loads_with_its_setting_and_map(combined, tmp_path):
    combined.get_pipe("second").calibration_map = temperature_map(-0.2)
    expected = records_of(combined(TEXT))
    combined.to_disk(tmp_path / "both")
    loaded = spacy.load(tmp_path / "both")
    assert loaded.get_pipe("second").product is True
    assert loaded.get_pipe("second").calibration_map == temperature_map(-0.2)
    for got, want in zip(records_of(loaded(TEXT)), expected):
        numpy.testing.assert_allclose(got["arc"], want["arc"], atol=1e-5)


def test_a_saved_product_loaded_without_its_second_parser_takes_the_first_parsers_map(combined, tmp_path):
    """tree_expectations stores the map of the scores it reads (the product's) with the writer
    it is for: loaded with the second parser excluded, it applied the product's map to the
    first parser's scores alone (the shipped ensemble: tree entropy 3.06 against 0.507)."""
    combined.get_pipe("biaffine_parser").calibration_map = temperature_map(0.3)
    combined.get_pipe("second").calibration_map = temperature_map(-0.2)
    combined.add_pipe("tree_expectations")
    try:
        combined.to_disk(tmp_path / "both")
    finally:
        combined.remove_pipe("tree_expectations")
        combined.get_pipe("biaffine_parser").calibration_map = None
    assert spacy.load(tmp_path / "both").get_pipe("tree_expectations").calibration == temperature_map(-0.2)
    with pytest.warns(UserWarning, match="fitted for the scores of 'second', which this pipeline does not run"):
        alone = spacy.load(tmp_path / "both", exclude=["second"])
    assert alone.get_pipe("tree_expectations").calibration == temperature_map(0.3)
    doc = alone(TEXT)
    first = spacy.load(tmp_path / "both", exclude=["second", "tree_expectations"])
    first.get_pipe("biaffine_parser").calibration_map = temperature_map(0.3)
    first.add_pipe("tree_expectations")
    want = first(TEXT)
    assert [t._.head_prob for t in doc] == pytest.approx([t._.head_prob for t in want], abs=1e-6)


def test_a_product_parser_without_an_earlier_parser_says_so(parsers):
    _, _, folder = parsers
    alone = spacy.load(folder, config={"components.biaffine_parser.product": True})
    with pytest.raises(ValueError, match="product = true.*carries none"):
        alone(TEXTS[0])
    with pytest.raises(ValueError, match="product.*'yes' is not"):  # spaCy's config check
        spacy.load(folder, config={"components.biaffine_parser.product": "yes"})


def test_a_product_parser_with_another_number_of_members_names_both_parsers(parsers):
    """A saved two-parser pipeline loaded with ``members`` overridden on one parser only: the
    message names the two components (it said "the two parsers have 3 and 2 members", the
    second parser's count first, naming neither)."""
    host, _, folder = parsers
    source = spacy.load(
        folder, config={"components.biaffine_parser.product": True, "components.biaffine_parser.members": 3}
    )
    host.add_pipe("biaffine_parser", name="second", source=source, after="biaffine_parser")
    try:
        with pytest.raises(
            ValueError,
            match=r"'second' has product = true.*'biaffine_parser'.*this parser has 3 members and the earlier one 2",
        ):
            host(TEXT)
    finally:
        host.remove_pipe("second")


def test_the_shipped_ensemble_multiplies_the_shipped_parser_and_the_head():
    import spacy_treexp
    from spacy_treexp.pipeline import default_model
    from spacy_treexp.pipeline.default_model import ENSEMBLE_CALIBRATION, ENSEMBLE_PARSER

    nlp = spacy_treexp.load(ensemble=True)
    names = nlp.pipe_names
    assert names.index(ENSEMBLE_PARSER) == names.index("biaffine_parser") + 1
    parser = nlp.get_pipe(ENSEMBLE_PARSER)
    assert parser.product is True and parser.hosted  # nlp.to_bytes carries its home copy
    shipped_map = CalibrationMap.from_disk(ENSEMBLE_CALIBRATION)
    assert parser.calibration_map == shipped_map
    assert nlp.add_pipe("tree_expectations").calibration == shipped_map  # novelty reference kept
    text = "The old man saw the dog with the telescope."
    with nlp.select_pipes(disable=[ENSEMBLE_PARSER, "tree_expectations"]):
        [a] = records_of(nlp(text))
    host = spacy_treexp.load()  # the head on the copy of en_core_web_sm's tok2vec the tagger holds
    frozen = default_model.frozen_stock_weights(host)
    head = default_model._assemble_head(default_model.STOCK_HEAD_PATH, host, frozen, exclude=["tree_expectations"])
    [b] = records_of(head(text))
    with nlp.select_pipes(disable=["tree_expectations"]):
        [both] = records_of(nlp(text))
    numpy.testing.assert_allclose(both["arc"], a["arc"] + b["arc"], atol=1e-4)
    doc = nlp(text)
    assert doc._.tree_expectations and all(0.0 <= t._.head_prob <= 1.0 for t in doc)


def test_the_shipped_ensemble_needs_no_installed_en_core_web_sm(monkeypatch):
    """The shipped tagger carries en_core_web_sm's tok2vec, frozen and stored at float16: the
    head of ``load(ensemble=...)`` runs on that copy, with no en_core_web_sm installed (a fresh
    clone's environment without the ``ensemble`` extra). That the product sums the two parsers'
    scores: ``test_the_shipped_ensemble_multiplies_the_shipped_parser_and_the_head``."""
    import spacy_treexp
    from spacy_treexp.pipeline import default_model

    monkeypatch.setattr(default_model.util, "is_package", lambda name: False)  # nothing installed
    with pytest.raises(ValueError, match="not installed"):
        default_model.load_stock_head()
    host = spacy_treexp.load()
    frozen = default_model.frozen_stock_weights(host)
    assert frozen is not None
    assert default_model.weights_digest(frozen) == default_model.stock_tok2vec_record()["float16_sha256"]
    text = "The old man saw the dog with the telescope."
    for kind in ("product", "mixture"):
        nlp = spacy_treexp.load(ensemble=kind)
        second = nlp.get_pipe(default_model.ENSEMBLE_PARSER)
        assert second._home_upstreams["tok2vec"].model.to_bytes() == frozen  # its home encoder
        [record] = records_of(nlp(text))
        assert record["writer"] == default_model.ENSEMBLE_PARSER  # the head ran and wrote (or joined) the scores
        assert kind == "product" or record["member_parsers"] == 2


def test_a_frozen_copy_of_other_weights_is_not_taken_for_en_core_web_sms():
    import spacy_treexp
    from spacy_treexp.pipeline.default_model import frozen_stock_weights
    from spacy_treexp.pipeline.encoders import FROZEN_TOK2VEC

    host = spacy_treexp.load()
    frozen = next(node for node in host.get_pipe("tagger").model.walk() if node.name == FROZEN_TOK2VEC)
    layer = next(node for node in frozen.walk() if node.has_param("W"))
    layer.set_param("W", layer.get_param("W") * 0.5)
    assert frozen_stock_weights(host) is None
    assert frozen_stock_weights(spacy.blank("en")) is None


def test_calibrate_fits_the_product_and_stores_the_map_with_the_second_parser(combined, tmp_path, capsys):
    """``spacy-treexp calibrate`` on a saved two-parser pipeline: the map is fitted on the
    product's scores and goes to the parser that writes them last, not to the first one."""
    from dataclasses import replace

    from helpers.paths import FIXTURES

    from spacy_treexp.calibration.novelty import NoveltyReference
    from spacy_treexp.cli import main

    # the first parser's map carries a novelty reference, which the product's new map will not
    first_map = replace(temperature_map(0.3), novelty=NoveltyReference(numpy.zeros(3), numpy.eye(3)))
    combined.get_pipe("biaffine_parser").calibration_map = first_map
    try:
        combined.to_disk(tmp_path / "both")
    finally:
        combined.get_pipe("biaffine_parser").calibration_map = None
    argv = ["calibrate", "--model", str(tmp_path / "both"), "--dev", str(FIXTURES / "eval_20.conllu")]
    assert main(argv + ["--out", str(tmp_path / "calibrated"), "--kind", "temperature"]) == 0
    assert "sent._.novelty and sent._.out_of_domain will be None" in capsys.readouterr().err  # said, not silent
    nlp = spacy.load(tmp_path / "calibrated")
    fitted = nlp.get_pipe("tree_expectations").calibration
    assert nlp.get_pipe("second").calibration_map.to_dict() == fitted.to_dict()
    assert nlp.get_pipe("biaffine_parser").calibration_map == first_map
    assert fitted.fit["n_sentences"] == 16  # 20 sentences, a fifth held out


def test_the_head_of_the_ensemble_takes_the_first_parsers_member_settings():
    import spacy_treexp
    from spacy_treexp.pipeline.default_model import ENSEMBLE_PARSER

    # decoding too: in the product the second parser writes the tree (it kept "map" under "mbr")
    settings = {"members": 3, "member_kind": "full", "decoding": "mbr", "max_sentence_length": 40, "overwrite": False}
    nlp = spacy_treexp.load(ensemble=True, config={f"components.biaffine_parser.{k}": v for k, v in settings.items()})
    second = nlp.get_pipe(ENSEMBLE_PARSER)
    assert {key: getattr(second, key) for key in settings} == settings
    assert nlp.config["components"][ENSEMBLE_PARSER]["decoding"] == "mbr"  # saved with the pipeline
    [record] = records_of(nlp("Dogs bark at night."))
    assert record["members"].shape[0] == 3


def test_the_ensemble_warns_when_its_map_is_missing(monkeypatch, tmp_path):
    import spacy_treexp
    from spacy_treexp.pipeline import default_model

    monkeypatch.setattr(default_model, "ENSEMBLE_CALIBRATION", tmp_path / "missing.json")
    with pytest.warns(UserWarning, match="calibration map is missing"):
        nlp = spacy_treexp.load(ensemble=True)
    assert nlp.get_pipe(default_model.ENSEMBLE_PARSER).calibration_map is None


def test_a_parser_made_a_product_after_saving_drops_its_own_map(parsers, tmp_path):
    """The map beside a parser saved on its own was fitted on its own scores: with
    ``product`` set at load it would miscalibrate the product, so it is left out, with a warning."""
    _, second_alone, _ = parsers
    second_alone.get_pipe("biaffine_parser").calibration_map = temperature_map(0.4)
    try:
        second_alone.to_disk(tmp_path / "solo")
    finally:
        second_alone.get_pipe("biaffine_parser").calibration_map = None
    assert spacy.load(tmp_path / "solo").get_pipe("biaffine_parser").calibration_map == temperature_map(0.4)
    with pytest.warns(UserWarning, match="fitted on its own scores"):
        product = spacy.load(tmp_path / "solo", config={"components.biaffine_parser.product": True})
    assert product.get_pipe("biaffine_parser").calibration_map is None
    # nor does tree_expectations read it back from the parser's folder
    assert parser_calibration(product) is None
    assert product.add_pipe("tree_expectations").calibration is None


def test_an_earlier_source_without_relations_leaves_the_labels_to_the_product_parser(parsers):
    """Arc scores alone (a custom source's record, no ``rel``): the arcs multiply, the
    relations are this parser's own (a uniform factor changes nothing)."""
    _, second_alone, folder = parsers
    product = spacy.load(folder, config={"components.biaffine_parser.product": True})
    [own] = records_of(second_alone("Dogs bark at night ."))
    doc = product.make_doc("Dogs bark at night .")
    for name, proc in product.pipeline:
        if name == "biaffine_parser":
            n = len(doc)
            earlier = numpy.random.default_rng(5).standard_normal((n + 1, n + 1)).astype("float32")
            doc._.parser_scores = [{"start": 0, "end": n, "arc": earlier, "rel": None, "labels": None}]
        doc = proc(doc)
    [got] = records_of(doc)
    numpy.testing.assert_allclose(got["arc"], own["arc"] + earlier, atol=1e-5)
    numpy.testing.assert_allclose(numpy.asarray(got["rel"]), numpy.asarray(own["rel"]), atol=1e-6)


def test_a_renamed_parser_keeps_its_map(parsers):
    """nlp.rename_pipe leaves the component's own name, which its records carry."""
    host, _, _ = parsers
    host.get_pipe("biaffine_parser").calibration_map = temperature_map(0.4)
    host.rename_pipe("biaffine_parser", "renamed")
    try:
        host.add_pipe("tree_expectations")
        got = [a.marginals for a in host(TEXT)._.tree_expectations]
        with host.select_pipes(disable=["tree_expectations"]):
            expected = _annotation_under(host, temperature_map(0.4))
        for a, b in zip(got, expected):
            numpy.testing.assert_allclose(a, b, atol=1e-6)
    finally:
        if "tree_expectations" in host.pipe_names:
            host.remove_pipe("tree_expectations")
        host.rename_pipe("renamed", "biaffine_parser")
        host.get_pipe("biaffine_parser").calibration_map = None


def test_a_renamed_parser_keeps_its_map_and_another_parser_under_its_name_is_refused(parsers):
    """``tree_expectations`` tells the writer of the scores by the token its records carry:
    after ``nlp.rename_pipe`` the parser is still the one whose map it applies; a different
    parser put in under the old name after it is not (TXE026, not the old parser's map)."""
    _, _, folder = parsers
    host = spacy.load(folder)
    host.get_pipe("biaffine_parser").calibration_map = temperature_map(0.3)
    host.add_pipe("tree_expectations")
    expected = [a.marginals for a in host(TEXT)._.tree_expectations]
    host.rename_pipe("biaffine_parser", "ud_parser")
    got = [a.marginals for a in host(TEXT)._.tree_expectations]
    for a, b in zip(got, expected):
        numpy.testing.assert_allclose(a, b, atol=1e-6)
    # a copy (pickle, deepcopy) is another pipeline whose parser is its own writer, the original alive beside it
    for copied in (pickle.loads(pickle.dumps(host)), copy.deepcopy(host)):
        assert copied.get_pipe("ud_parser").writer_token != host.get_pipe("ud_parser").writer_token
        for a, b in zip([a.marginals for a in copied(TEXT)._.tree_expectations], expected):
            numpy.testing.assert_allclose(a, b, atol=1e-6)
    host.remove_pipe("ud_parser")
    with host.select_pipes(disable=["tree_expectations"]):
        host.add_pipe("biaffine_parser", source=spacy.load(folder), before="tree_expectations")
    with pytest.raises(
        ValueError,
        match="TXE026.*written by 'biaffine_parser'.*was not in the pipeline when 'tree_expectations' was added",
    ):
        host(TEXT)


def test_scores_kept_by_one_instance_are_read_by_another_alike(parsers):
    """Docs whose scores one instance of a pipeline kept (keep_scores) are annotated by another
    instance of the same model (loaded twice, or a copy) exactly as by the first: its parser is
    a twin (name, class, map) of the writer. A writer with another map is refused (TXE026); a
    tree_expectations with no parser takes the live writer's map, and warns when it has none."""
    _, _, folder = parsers
    one, two = spacy.load(folder), spacy.load(folder)
    for nlp in (one, two):
        nlp.get_pipe("biaffine_parser").calibration_map = temperature_map(0.3)
        nlp.add_pipe("tree_expectations", config={"keep_scores": True})
    doc = one(TEXT)
    expected = [a.marginals for a in doc._.tree_expectations]
    again = two.get_pipe("tree_expectations")(doc)
    for a, b in zip([a.marginals for a in again._.tree_expectations], expected):
        numpy.testing.assert_allclose(a, b, atol=1e-6)
    bare = spacy.blank("en").add_pipe("tree_expectations", config={"keep_scores": True})
    for a, b in zip([a.marginals for a in bare(one(TEXT))._.tree_expectations], expected):
        numpy.testing.assert_allclose(a, b, atol=1e-6)  # the live writer's map
    other = spacy.load(folder)
    other.get_pipe("biaffine_parser").calibration_map = temperature_map(-0.3)
    with pytest.raises(ValueError, match="TXE026.*was not in the pipeline when 'tree_expectations' was added"):
        two.get_pipe("tree_expectations")(other(TEXT))
    unknown = one(TEXT)
    for record in unknown._.parser_scores:
        record["writer_token"] = "written-in-another-process"
    with pytest.warns(UserWarning, match="whose calibration map this component does not have"):
        bare(unknown)
