"""Tests of the Stanza ``tree_expectations`` processor, its exports and ``to_spacy``.

They use real Stanza models (tagger + graph parser) trained offline on the tiny
hand-made treebank in tests/fixtures/stanza/ (see its README); no model hub is needed.
"""

from __future__ import annotations

import importlib
import json
import math

import numpy
import pytest
import torch

stanza = pytest.importorskip("stanza")

from helpers.paths import FIXTURES as TEST_FIXTURES  # noqa: E402

import spacy_treexp.stanza as treexp_stanza  # noqa: E402
from spacy_treexp import TreeDistribution  # noqa: E402
from spacy_treexp.stanza import processor as processor_module  # noqa: E402
from spacy_treexp.stanza.capture import SCORES_ATTR, DepparseScoreCapture  # noqa: E402

FIXTURES = TEST_FIXTURES / "stanza"
MODEL_DIR = FIXTURES / "tiny"

SHORT = "The dog saw a cat with the telescope ."
LONGER = [
    "Mary will find the old letter in the garden near the river behind the house , and the teacher laughed .",
    "These quiet students read the strange book on the table with every small child in London !",
    "She ran .",
    "The big red car that John painted arrived quickly from Paris , but the tall doctor waited under the window .",
]


def _has_sampling() -> bool:
    dist = TreeDistribution(torch.zeros(3, 3))
    try:
        dist.sample((1,))
    except (NotImplementedError, ImportError, AttributeError):
        return False
    return True


needs_sampling = pytest.mark.skipif(not _has_sampling(), reason="engine sampling not available")


def make_pipeline(**tree_options):
    return treexp_stanza.pipeline_from_dir(
        str(MODEL_DIR),
        tree_options=tree_options,
        depparse_resolve_head_constraints=False,
        logging_level="WARN",
    )


@pytest.fixture(scope="module")
def nlp():
    return make_pipeline()


@pytest.fixture(scope="module")
def parsed(nlp):
    return nlp("\n".join([SHORT] + LONGER))


def arc_scores(sentence):
    return torch.from_numpy(getattr(sentence, SCORES_ATTR).arc.astype(numpy.float64))


def heads_of(sentence):
    return [word.head for word in sentence.words]


def test_map_tree_under_captured_scores_is_stanzas_tree(parsed):
    for sentence in parsed.sentences:
        arc = arc_scores(sentence)
        n = len(sentence.words)
        assert arc.shape == (n + 1, n + 1)
        mode = TreeDistribution(arc).mode
        assert mode[1:].tolist() == heads_of(sentence)


def test_marginals_are_distributions_over_heads(parsed):
    for sentence in parsed.sentences:
        mu = sentence.arc_marginals
        n = len(sentence.words)
        assert mu.shape == (n + 1, n + 1)
        numpy.testing.assert_allclose(mu[:, 1:].sum(axis=0), 1.0, atol=1e-5)
        assert numpy.all(mu[:, 0] == 0) and numpy.all(numpy.diag(mu) == 0)
        # single root: the ROOT row sums to exactly one child in expectation
        assert mu[0, 1:].sum() == pytest.approx(1.0, abs=1e-5)
        for word in sentence.words:
            assert word.head_prob == pytest.approx(float(mu[word.head, word.id]), abs=1e-7)


def test_properties_on_every_sentence_and_word(parsed):
    for sentence in parsed.sentences:
        n = len(sentence.words)
        assert sentence.tree_entropy >= 0.0
        assert math.isfinite(sentence.log_partition)
        assert 0.0 <= sentence.expected_attachment <= 1.0
        expected = sum(w.head_prob for w in sentence.words) / n
        assert sentence.expected_attachment == pytest.approx(expected, abs=1e-5)
        assert sentence.entropy_per_word == pytest.approx(sentence.tree_entropy / n)
        # the MBR tree maximises the expected attachment, so it beats Stanza's tree
        mbr = sentence.mbr_heads
        assert len(mbr) == n and (mbr == 0).sum() == 1
        mu = sentence.arc_marginals
        mbr_score = sum(float(mu[h, m]) for m, h in enumerate(mbr, start=1))
        assert mbr_score >= sentence.expected_attachment * n - 1e-5
        assert sentence.sampled_heads.shape == (0, n)
        labels = sentence.deprel_labels
        label_mu = sentence.label_marginals
        assert label_mu.shape == (n + 1, n + 1, len(labels))
        numpy.testing.assert_allclose(label_mu.sum(-1), sentence.arc_marginals, atol=1e-5)
        for word in sentence.words:
            assert 0.0 < word.head_prob <= 1.0 + 1e-6
            assert 0.0 <= word.head_entropy <= math.log(n) + 1e-5
            distribution = word.head_distribution
            assert 1 <= len(distribution) <= 3
            probs = [p for _, p in distribution]
            assert probs == sorted(probs, reverse=True)
            # mu(h, m, l) of Stanza's own head and relation
            label = labels.index(word.deprel)
            assert word.dep_prob == pytest.approx(float(label_mu[word.head, word.id, label]), rel=1e-5)
            assert word.dep_prob <= word.head_prob + 1e-6


def test_entropy_matches_enumeration_free_identity(parsed):
    """H = log Z - sum mu * s (Zmigrod et al. 2021) recomputed from the captured scores."""
    sentence = parsed.sentences[0]
    arc = arc_scores(sentence)
    dist = TreeDistribution(arc)
    assert sentence.log_partition == pytest.approx(float(dist.log_partition), rel=1e-9)
    assert sentence.tree_entropy == pytest.approx(float(dist.entropy()), rel=1e-6, abs=1e-9)


def test_same_numbers_alone_and_in_bulk(nlp):
    alone = nlp(SHORT).sentences[0]
    docs = [stanza.Document([], text=t) for t in ["\n".join(LONGER[:2]), "\n".join([LONGER[2], SHORT]), LONGER[3]]]
    # pretokenized pipelines take Documents of text; bulk mode batches all sentences
    docs = nlp.bulk_process(docs)
    in_bulk = docs[1].sentences[1]
    assert [w.text for w in in_bulk.words] == [w.text for w in alone.words]
    assert heads_of(in_bulk) == heads_of(alone)
    a, b = getattr(alone, SCORES_ATTR), getattr(in_bulk, SCORES_ATTR)
    numpy.testing.assert_allclose(a.arc, b.arc, rtol=0, atol=1e-5)
    numpy.testing.assert_allclose(a.rel, b.rel, rtol=0, atol=1e-5)
    numpy.testing.assert_allclose(alone.arc_marginals, in_bulk.arc_marginals, atol=1e-5)
    assert alone.tree_entropy == pytest.approx(in_bulk.tree_entropy, abs=1e-5)
    assert alone.log_partition == pytest.approx(in_bulk.log_partition, abs=1e-4)
    for wa, wb in zip(alone.words, in_bulk.words):
        assert wa.head_prob == pytest.approx(wb.head_prob, abs=1e-5)
    # every sentence of every bulk document was annotated
    for doc in docs:
        for sentence in doc.sentences:
            assert sentence.tree_entropy is not None


def test_a_too_long_sentence_in_bulk_is_named_by_its_document():
    """bulk_process refuses a sentence over max_sentence_length naming its document and its
    place there, not its position among every document's sentences."""
    short = make_pipeline(max_sentence_length=5)
    docs = [stanza.Document([], text=t) for t in ["A b c.\nD e f.", "G h i.\n" + LONGER[0]]]
    with pytest.raises(ValueError, match=r"document 1, sentence 1 \('" + LONGER[0].split()[0]):
        short.bulk_process(docs)
    with pytest.raises(ValueError, match=r"^sentence 1 \("):  # one document: no document number
        short(docs[1].text)


def test_reversed_model_scores_map_back(nlp):
    depparse = nlp.processors["depparse"]
    try:
        depparse.trainer.args["reversed"] = True
        depparse._config["reversed"] = True
        doc = nlp("\n".join([SHORT] + LONGER))
    finally:
        depparse.trainer.args["reversed"] = False
        depparse._config["reversed"] = False
    for sentence in doc.sentences:
        arc = arc_scores(sentence)
        assert TreeDistribution(arc).mode[1:].tolist() == heads_of(sentence)
        numpy.testing.assert_allclose(sentence.arc_marginals[:, 1:].sum(0), 1.0, atol=1e-5)


def test_registering_twice_runs_once(monkeypatch):
    from stanza.pipeline.registry import PIPELINE_NAMES

    treexp_stanza.register_processor()
    treexp_stanza.register_properties()
    importlib.reload(processor_module)
    processor_module.register_processor()
    assert PIPELINE_NAMES.count("tree_expectations") == 1
    calls = []
    original = processor_module.annotate_sentences

    def counting(numbered, options, *rest, **named):
        calls.append(len(numbered))
        return original(numbered, options, *rest, **named)

    monkeypatch.setattr(processor_module, "annotate_sentences", counting)
    nlp = make_pipeline()
    doc = nlp(SHORT + "\n" + LONGER[2])
    assert calls == [2]
    assert doc.sentences[0].tree_entropy is not None


def test_dict_export_round_trips_through_json(parsed):
    data = json.loads(json.dumps(treexp_stanza.to_dict(parsed, include_scores=True)))
    back = treexp_stanza.from_dict(data)
    assert len(back.sentences) == len(parsed.sentences)
    for a, b in zip(parsed.sentences, back.sentences):
        assert [w.text for w in a.words] == [w.text for w in b.words]
        assert heads_of(a) == heads_of(b)
        for name in treexp_stanza.SENTENCE_PROPERTIES:
            va, vb = getattr(a, name), getattr(b, name)
            if isinstance(va, numpy.ndarray):
                assert va.dtype == vb.dtype and va.shape == vb.shape
                numpy.testing.assert_array_equal(va, vb)
            else:
                assert va == vb, name
        for wa, wb in zip(a.words, b.words):
            for name in treexp_stanza.WORD_PROPERTIES:
                assert getattr(wa, name) == getattr(wb, name), name
    # without scores the export is smaller and still restores the marginals
    small = treexp_stanza.from_dict(json.loads(json.dumps(treexp_stanza.to_dict(parsed))))
    assert small.sentences[0].arc_scores is None
    numpy.testing.assert_array_equal(small.sentences[0].arc_marginals, parsed.sentences[0].arc_marginals)


def test_conllu_export_round_trips(parsed):
    text = treexp_stanza.to_conllu(parsed, digits=4)
    assert "HeadProb=" in text and "HeadEntropy=" in text and "# tree_entropy = " in text
    # the document itself is unchanged
    assert all("HeadProb" not in (w.misc or "") for s in parsed.sentences for w in s.words)
    back = treexp_stanza.from_conllu(text)
    assert treexp_stanza.to_conllu(back, digits=4) == text
    for a, b in zip(parsed.sentences, back.sentences):
        assert heads_of(a) == heads_of(b)
        assert b.tree_entropy == pytest.approx(a.tree_entropy, abs=5e-5)
        assert b.log_partition == pytest.approx(a.log_partition, abs=5e-5)
        for wa, wb in zip(a.words, b.words):
            assert wb.head_prob == pytest.approx(wa.head_prob, abs=5e-5)
            assert wb.head_entropy == pytest.approx(wa.head_entropy, abs=5e-5)
            assert wb.dep_prob == pytest.approx(wa.dep_prob, abs=5e-5)


def test_exports_of_an_empty_document_and_of_what_is_not_one(nlp, parsed):
    """An empty text's Document reads back from its CoNLL-U (it was Stanza's AssertionError),
    and a list of Documents (``bulk_process``'s result) is refused by name (AttributeError)."""
    empty = nlp("")
    assert treexp_stanza.to_conllu(empty) == ""
    assert treexp_stanza.from_conllu(treexp_stanza.to_conllu(empty)).sentences == []
    for export in (treexp_stanza.to_dict, treexp_stanza.to_conllu):
        with pytest.raises(ValueError, match="stanza Document"):
            export([parsed])


def test_bad_options_are_clear_errors():
    with pytest.raises(ValueError, match="n_samples"):
        make_pipeline(n_samples=-1)
    with pytest.raises(ValueError, match="unknown tree_expectations option"):
        make_pipeline(n_sample=3)
    with pytest.raises(ValueError, match="cannot sample without"):
        make_pipeline(n_samples=2, without_replacement=True, sampler="wilson_marginal")


def test_a_misspelt_calibration_path_is_an_error_not_the_raw_scores(tmp_path):
    """Every other unknown option is refused; a ``*_path`` one was dropped unread."""
    with pytest.raises(ValueError, match="calibraton_path"):
        make_pipeline(calibraton_path=str(tmp_path / "map.json"))


def test_a_pipeline_without_depparse_gets_stanzas_own_requirement_error():
    """Stanza marks every processor inactive before it says what is missing; ours had no
    ``mark_inactive`` (only Stanza's UDProcessor has one): an AttributeError instead."""
    from stanza.pipeline.core import PipelineRequirementsException

    model = TEST_FIXTURES / "stanza" / "tiny"
    with pytest.raises(PipelineRequirementsException, match="depparse"):
        stanza.Pipeline(
            "en",
            dir=str(model),
            download_method=None,
            processors="tokenize,pos,tree_expectations",
            tokenize_pretokenized=True,
            pos_model_path=str(model / "pos.pt"),
            allow_unknown_language=True,
            logging_level="WARN",
        )


def test_non_graph_parser_is_a_clear_error():
    class FakeTrainer:
        model = torch.nn.Linear(2, 2)
        args = {}

    class FakeProcessor:
        trainer = FakeTrainer()

        def process(self, doc):
            return doc

    with pytest.raises(ValueError, match="graph-based"):
        DepparseScoreCapture(FakeProcessor())
    FakeTrainer.model = None  # Stanza's placeholder when depparse could not be built
    with pytest.raises(ValueError, match="no model loaded.*missing requirement"):
        DepparseScoreCapture(FakeProcessor())


def test_sentence_without_scores_is_a_clear_error():
    doc = stanza.Document([[{"id": 1, "text": "Hi", "head": 0, "deprel": "root"}]])
    with pytest.raises(ValueError, match="no captured depparse scores"):
        processor_module.annotate_documents([doc], processor_module.parse_options({}))


@needs_sampling
def test_samples_are_trees_with_exact_log_probs(nlp):
    sampler_nlp = make_pipeline(n_samples=6, seed=3)
    doc = sampler_nlp("\n".join([SHORT] + LONGER[:2]))
    for sentence in doc.sentences:
        n = len(sentence.words)
        heads = sentence.sampled_heads
        assert heads.shape == (6, n)
        assert ((heads >= 0) & (heads <= n)).all()
        assert ((heads == 0).sum(axis=1) == 1).all()
        arc = arc_scores(sentence)
        dist = TreeDistribution(arc)
        full = torch.cat([torch.full((6, 1), -1), torch.from_numpy(heads).long()], dim=1)
        numpy.testing.assert_allclose(sentence.sample_log_probs, dist.log_prob(full).numpy(), atol=1e-6)
        labels = sentence.deprel_labels
        assert sentence.sampled_deprel_ids.shape == (6, n)
        assert all(0 <= i < len(labels) for i in sentence.sampled_deprel_ids.ravel())
    # seeded per sentence: the same samples alone and in a batch
    alone = sampler_nlp(SHORT).sentences[0]
    numpy.testing.assert_array_equal(alone.sampled_heads, doc.sentences[0].sampled_heads)


@needs_sampling
def test_samples_without_replacement_are_distinct():
    doc = make_pipeline(n_samples=4, without_replacement=True)(SHORT)
    sentence = doc.sentences[0]
    rows = {tuple(row) for row in sentence.sampled_heads.tolist()}
    assert len(rows) == 4
    assert numpy.all(numpy.diff(sentence.sample_log_probs) <= 1e-9) or len(rows) == 4


def test_to_spacy_carries_parse_scores_and_annotations(parsed):
    spacy = pytest.importorskip("spacy")
    vocab = spacy.blank("en").vocab
    assert treexp_stanza.to_spacy(parsed, vocab)._.parser_scores is None  # dropped by default
    doc = treexp_stanza.to_spacy(parsed, vocab, keep_scores=True)
    sentences = list(doc.sents)
    assert len(sentences) == len(parsed.sentences)
    records = doc._.parser_scores
    for span, sentence, record in zip(sentences, parsed.sentences, records):
        assert [t.text for t in span] == [w.text for w in sentence.words]
        assert (record["start"], record["end"]) == (span.start, span.end)
        assert record["arc"].dtype == numpy.float32
        numpy.testing.assert_array_equal(record["arc"], getattr(sentence, SCORES_ATTR).arc)
        assert record["labels"] == sentence.deprel_labels
        for token, word in zip(span, sentence.words):
            expected_head = token if word.head == 0 else span[word.head - 1]
            assert token.head == expected_head
            assert token.dep_ == word.deprel
            assert token._.head_prob == pytest.approx(word.head_prob, abs=1e-6)
            assert token._.head_entropy == pytest.approx(word.head_entropy, abs=1e-6)
            assert token._.dep_prob == pytest.approx(word.dep_prob, abs=1e-6)
        assert span._.tree_entropy == pytest.approx(sentence.tree_entropy, abs=1e-9)
        assert span._.expected_attachment == pytest.approx(sentence.expected_attachment, abs=1e-9)


def test_to_spacy_refuses_what_is_not_a_vocab(parsed):
    """spaCy's Doc accepts ``None`` as its vocab and then crashes the process."""
    spacy = pytest.importorskip("spacy")
    for vocab in (None, spacy.blank("en"), "en"):
        with pytest.raises(ValueError, match="spaCy Vocab"):
            treexp_stanza.to_spacy(parsed, vocab)


def test_to_spacy_from_a_json_export_with_scores(parsed):
    spacy = pytest.importorskip("spacy")
    vocab = spacy.blank("en").vocab
    restored = treexp_stanza.from_dict(json.loads(json.dumps(treexp_stanza.to_dict(parsed, include_scores=True))))
    direct = treexp_stanza.to_spacy(parsed, vocab)
    with pytest.warns(UserWarning, match="options and calibration map are unknown"):  # a map would be lost silently
        via_json = treexp_stanza.to_spacy(restored, vocab)
    assert [t.head.i for t in direct] == [t.head.i for t in via_json]
    assert [t._.head_prob for t in direct] == [t._.head_prob for t in via_json]
    without_scores = treexp_stanza.from_dict(json.loads(json.dumps(treexp_stanza.to_dict(parsed))))
    with pytest.raises(ValueError, match="depparse scores"):
        treexp_stanza.to_spacy(without_scores, vocab)


def test_to_spacy_annotates_with_the_processors_options_and_map(tmp_path):
    """The same numbers on both sides: the processor's options (here not the defaults) and
    the map beside its depparse model (as ``spacy-treexp calibrate --stanza`` stores it)."""
    import shutil

    spacy = pytest.importorskip("spacy")
    from spacy_treexp.calibration import CalibrationMap

    folder = tmp_path / "calibrated"
    shutil.copytree(MODEL_DIR, folder)
    CalibrationMap.temperature(2.5).to_disk(folder / "treexp_calibration.json")
    options = {"single_root": False, "risk_temperature": 3.0, "top_k_heads": 1}
    calibrated = treexp_stanza.pipeline_from_dir(
        str(folder), tree_options=options, depparse_resolve_head_constraints=False, logging_level="WARN"
    )
    parsed = calibrated("\n".join([SHORT] + LONGER))
    vocab = spacy.blank("en").vocab
    doc = treexp_stanza.to_spacy(parsed, vocab)
    for sentence, span in zip(parsed.sentences, doc.sents):
        assert span._.tree_entropy == pytest.approx(sentence.tree_entropy, abs=1e-6)
        assert span._.error_probability == pytest.approx(sentence.error_probability, abs=1e-6)
        assert [t._.head_prob for t in span] == pytest.approx([w.head_prob for w in sentence.words], abs=1e-6)
        assert all(len(t._.head_distribution) == 1 for t in span)
    raw = treexp_stanza.to_spacy(parsed, vocab, calibration=None)  # an explicit option wins
    assert list(raw.sents)[0]._.tree_entropy != pytest.approx(parsed.sentences[0].tree_entropy, abs=1e-3)


def test_tree_values_are_refused_once_the_heads_change(nlp):
    """An edited (or re-parsed) sentence: head_prob and the tree's risk would describe the old
    tree; the distribution's own values (entropy, marginals) still hold."""
    sentence = nlp(SHORT).sentences[0]
    assert sentence.words[2].head_prob is not None
    word = next(w for w in sentence.words if w.head != 0 and w.head != w.id - 1 and w.id > 1)
    word.head = word.id - 1
    for read in (lambda: word.head_prob, lambda: sentence.expected_attachment, lambda: sentence.error_probability):
        with pytest.raises(ValueError, match="heads changed after tree_expectations"):
            read()
    assert sentence.tree_entropy >= 0 and sentence.words[0].head_entropy is not None


def test_scores_are_refused_once_another_parser_reparsed_the_document(nlp):
    """A pipeline whose depparse has no tree_expectations re-parses the Document: the scores
    captured with the first tree must not score the new one (to_spacy, the processor run
    again, the exports), and a relation changed alone is caught as well as a head."""
    spacy = pytest.importorskip("spacy")
    from spacy_treexp.stanza.convert import model_folder_kwargs

    other_model = FIXTURES / "kinds" / "pretrain"
    other = stanza.Pipeline(
        "en",
        processors="depparse",
        depparse_pretagged=True,
        download_method=None,
        dir=str(other_model),
        allow_unknown_language=True,
        logging_level="WARN",
        depparse_resolve_head_constraints=False,
        **model_folder_kwargs(str(other_model)),
    )
    doc = nlp(LONGER[0])
    before = heads_of(doc.sentences[0])
    other(doc)
    assert heads_of(doc.sentences[0]) != before  # the fixture's other parser attaches a word elsewhere
    vocab = spacy.blank("en").vocab
    reads = {
        "to_spacy": lambda: treexp_stanza.to_spacy(doc, vocab),
        "tree_expectations": lambda: nlp.processors["tree_expectations"].process(doc),
        "to_dict": lambda: treexp_stanza.to_dict(doc, include_scores=True),
        "to_conllu": lambda: treexp_stanza.to_conllu(doc),
    }
    for where, read in reads.items():
        with pytest.raises(ValueError, match=f"^{where}: the .*changed after"):
            read()
    sentence = nlp(SHORT).sentences[0]
    restored = treexp_stanza.from_dict(json.loads(json.dumps(treexp_stanza.to_dict(nlp(SHORT), include_scores=True))))
    for relabelled in (sentence, restored.sentences[0]):
        word = relabelled.words[0]
        word.deprel = "obj" if word.deprel != "obj" else "nsubj"
        with pytest.raises(ValueError, match="changed after its depparse scores were captured"):
            word.dep_prob
        with pytest.raises(ValueError, match="^to_spacy: the tree"):
            treexp_stanza.to_spacy(relabelled.doc, vocab)
        assert relabelled.tree_entropy >= 0  # the distribution's own values stay


def test_one_word_sentence_is_certain(nlp):
    sentence = nlp("Hello").sentences[0]
    assert sentence.tree_entropy == pytest.approx(0.0, abs=1e-9)
    assert sentence.words[0].head_prob == pytest.approx(1.0)
    assert sentence.mbr_heads.tolist() == [0]


def test_pipeline_from_dir_reports_bad_folders(tmp_path):
    with pytest.raises(ValueError, match="no resources.json"):
        treexp_stanza.pipeline_from_dir(str(tmp_path))
    (tmp_path / "resources.json").write_text("{}")
    with pytest.raises(ValueError, match="neither depparse.pt nor models"):
        treexp_stanza.pipeline_from_dir(str(tmp_path))
    (tmp_path / "depparse.pt").write_bytes((MODEL_DIR / "depparse.pt").read_bytes())
    with pytest.raises(ValueError, match="no pos.pt"):
        treexp_stanza.pipeline_from_dir(str(tmp_path))


def test_a_broken_model_file_is_a_value_error_naming_the_folder(tmp_path):
    """A depparse.pt cut short, or a tagger saved as depparse.pt: one ValueError naming the
    folder (Stanza raised EOFError / KeyError through torch.load), also on the gold-tags path
    of evaluate and calibrate."""
    from spacy_treexp.evaluation import read_conllu
    from spacy_treexp.evaluation.scores import stanza_scores

    (tmp_path / "resources.json").write_text("{}")
    (tmp_path / "pos.pt").write_bytes((MODEL_DIR / "pos.pt").read_bytes())
    for broken in ((MODEL_DIR / "depparse.pt").read_bytes()[:20000], (MODEL_DIR / "pos.pt").read_bytes()):
        (tmp_path / "depparse.pt").write_bytes(broken)
        with pytest.raises(ValueError, match="could not load a model of this folder"):
            treexp_stanza.pipeline_from_dir(str(tmp_path), logging_level="WARN")
        gold = read_conllu(FIXTURES / "tiny_en.dev.conllu")[:1]
        with pytest.raises(ValueError, match="could not load a model of this folder"):
            stanza_scores(str(tmp_path), gold, gold_tags=True)


def test_gold_tags_missing_from_the_conllu_file_are_named(tmp_path):
    """On gold tags (a folder without pos.pt, or --stanza-tags gold) a word without UPOS and
    XPOS is named with its sentence; Stanza said only 'POS not run before depparse!'."""
    from spacy_treexp.evaluation import read_conllu
    from spacy_treexp.evaluation.scores import stanza_scores

    rows = ["1\tThe\t_\t_\t_\t_\t2\tdet\t_\t_", "2\tdog\t_\tNOUN\tNN\t_\t0\troot\t_\t_"]
    (tmp_path / "untagged.conllu").write_text("# sent_id = untagged\n" + "\n".join(rows) + "\n\n")
    gold = read_conllu(tmp_path / "untagged.conllu")
    with pytest.raises(ValueError, match="sentence untagged: 'The' has no UPOS or XPOS"):
        stanza_scores(str(MODEL_DIR), gold, gold_tags=True)
    assert len(stanza_scores(str(MODEL_DIR), gold, gold_tags=False)) == 1  # the folder's tagger tags it


def test_unsupported_stanza_versions_are_named():
    from spacy_treexp.stanza.capture import check_stanza_version

    check_stanza_version(stanza.__version__)  # the installed one is supported
    check_stanza_version("1.15.3")
    for version in ("1.14.0", "1.16.0", "2.0"):
        with pytest.raises(RuntimeError, match=f"installed: stanza {version}"):
            check_stanza_version(version)


def test_to_spacy_draws_the_processors_samples_and_chunks_the_ud_tree():
    """Stanza seeded a sentence's samples by its position and its words joined by "\\x01", the
    spaCy component by its word offset and text: 5 of 12 sentences of an audit got other trees
    (and another MI estimate) from parse --stanza than from the processor. Both now seed by the
    key of the Doc to_spacy makes. And that Doc chunked its UD tree with spaCy's English iterator
    (ClearNLP labels): objects and obliques were dropped."""
    spacy = pytest.importorskip("spacy")
    sampling = make_pipeline(n_samples=4)
    parsed = sampling("\n".join([SHORT] + LONGER))
    doc = treexp_stanza.to_spacy(parsed, spacy.blank("en").vocab)
    for sentence, span in zip(parsed.sentences, doc.sents):
        assert span.text == processor_module.spacy_text(sentence)
        numpy.testing.assert_array_equal(span._.sampled_heads, sentence.sampled_heads)
        numpy.testing.assert_allclose(span._.sample_log_probs, sentence.sample_log_probs, atol=1e-5)
    assert len(parsed.sentences) > 1 and any(s.sampled_heads.std() > 0 for s in parsed.sentences)
    from spacy_treexp.pipeline.noun_chunks import chunk_spans

    expected = chunk_spans([t.head.i for t in doc], [t.dep_ for t in doc], [t.pos_ for t in doc], [t.tag_ for t in doc])
    assert [(c.start, c.end) for c in doc.noun_chunks] == expected
    assert [(c.start, c.end) for c in doc.copy().noun_chunks] == expected  # the vocabulary's iterator too


def test_an_empty_calibration_path_or_a_broken_map_beside_the_model_is_named(tmp_path):
    """calibration_path="" was taken as not given; a broken map beside the model was reported
    under tree_expectations_calibration_path, an option the user never passed."""
    import shutil

    with pytest.raises(ValueError, match="calibration_path must be a map's JSON file"):
        make_pipeline(calibration_path="")
    folder = tmp_path / "broken"
    shutil.copytree(MODEL_DIR, folder)
    (folder / "treexp_calibration.json").write_text("{not json", encoding="utf8")
    with pytest.raises(ValueError, match="the calibration map beside the depparse model") as error:
        treexp_stanza.pipeline_from_dir(str(folder), depparse_resolve_head_constraints=False, logging_level="WARN")
    assert "tree_expectations_calibration_path" not in str(error.value)
