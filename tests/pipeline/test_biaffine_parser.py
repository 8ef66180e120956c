"""Tests of the ``biaffine_parser`` component, trained in seconds on a toy treebank."""

import pickle
import subprocess
import sys

import numpy
import pytest
import spacy
import torch
from helpers.paths import REPO
from helpers.threads import one_torch_thread  # noqa: F401  (autouse)
from helpers.toy_pipelines import TEXTS, TINY_CONFIG, sentence_heads, toy_examples, train_toy
from spacy.tokens import Doc, DocBin
from spacy.training import Example
from thinc.api import Config, fix_random_seed

from spacy_treexp import TreeDistribution
from spacy_treexp.pipeline.default_model import MODEL_PATH


@pytest.fixture(scope="module")
def trained():
    nlp, examples, _ = train_toy(TINY_CONFIG, 100)
    return nlp, examples


def parse(nlp, text):
    """Parse pre-tokenized text (tokens separated by spaces)."""
    return nlp(Doc(nlp.vocab, words=text.split()))


def test_toy_treebank_reaches_full_uas(trained):
    nlp, examples = trained
    scores = nlp.evaluate(examples)
    assert scores["dep_uas"] == 1.0
    assert scores["dep_las"] == 1.0


def test_own_tok2vec_default_model_trains():
    config = TINY_CONFIG.replace('"tok2vec", ', "").split("[components.tok2vec]")[0]
    config += '[components.biaffine_parser]\nfactory = "biaffine_parser"\n'
    nlp, _, history = train_toy(config, 15)
    assert nlp.get_pipe("biaffine_parser").model.layers[0].name != "tok2vec-listener"
    assert history[-1] < 0.8 * history[0]


def test_a_listener_of_another_width_than_its_tok2vec_is_named_at_initialize():
    """A config whose listener says 64 for a tok2vec of 32 failed at the first update with
    'the parser was trained in another pipeline', which it was not."""
    config = TINY_CONFIG.replace("width = 32\nupstream", "width = 64\nupstream")
    nlp = spacy.util.load_model_from_config(Config().from_str(config), auto_fill=True)
    examples = toy_examples(nlp)
    message = r"its listener is 64 wide but 'tok2vec' gives 32 values per token: set .* \(or \$\{components.tok2vec.model.width\}\)"
    with pytest.raises(ValueError, match=message):
        nlp.initialize(lambda: examples)


def test_loss_gradient_is_marginals_minus_gold(trained):
    nlp, examples = trained
    parser = nlp.get_pipe("biaffine_parser")
    example = examples[0]
    gold = parser._gold([example])
    docs = [example.predicted]
    tok2vec = nlp.get_pipe("tok2vec")
    tok2vec.set_annotations(docs, tok2vec.predict(docs))  # the listener reads doc.tensor
    scores = parser.model.predict((docs, gold["sentences"], gold["heads"]))
    loss, (d_arc, _) = parser.get_loss([example], scores)
    arc, _, lengths = scores
    dist = TreeDistribution(torch.from_numpy(arc), torch.from_numpy(lengths))
    expected = dist.marginals.numpy().copy()
    for b, heads in enumerate(gold["heads"]):
        for m in range(1, int(lengths[b]) + 1):
            expected[b, heads[m], m] -= 1.0
    assert numpy.allclose(d_arc, expected, atol=1e-4)
    assert loss > 0


def test_predicted_trees_are_single_root_trees(trained):
    nlp, _ = trained
    for text in TEXTS + ["Dogs and cats sleep while birds sing loudly in old trees ."]:
        doc = parse(nlp, text)
        for sent in doc.sents:
            heads = sentence_heads(sent)
            assert heads.count(0) == 1
            for m in range(1, len(heads)):
                seen, node = set(), m
                while node != 0:
                    assert node not in seen, "cycle"
                    seen.add(node)
                    node = heads[node]


def test_stored_scores_shapes_and_map_agree_with_heads(trained):
    nlp, _ = trained
    parser = nlp.get_pipe("biaffine_parser")
    doc = parse(nlp, TEXTS[2])
    records = doc._.parser_scores
    sents = list(doc.sents)
    assert len(records) == len(sents) == 2
    for record, sent in zip(records, sents):
        n = len(sent)
        assert (record["start"], record["end"]) == (sent.start, sent.end)
        assert record["arc"].shape == (n + 1, n + 1) and record["arc"].dtype == numpy.float32
        assert record["rel"].shape == (n + 1, n + 1, len(parser.labels))
        assert record["rel"].dtype == numpy.float32
        assert list(record["labels"]) == list(parser.labels)
        # said normalised (the component then checks values, not sums), and so they are
        assert record["rel_normalised"] is True
        assert numpy.allclose(numpy.logaddexp.reduce(record["rel"], axis=-1), 0.0, atol=1e-4)
        heads = sentence_heads(sent)
        mode = TreeDistribution(torch.from_numpy(record["arc"])).mode
        assert mode.reshape(-1).tolist() == heads
        for token, head in zip(sent, heads[1:]):
            best = record["rel"][head, token.i - sent.start + 1].argmax()
            assert token.dep_ == record["labels"][best]


def test_mbr_decoding_matches_engine(trained):
    nlp, _ = trained
    parser = nlp.get_pipe("biaffine_parser")
    parser.decoding = "mbr"
    try:
        doc = parse(nlp, TEXTS[4])
    finally:
        parser.decoding = "map"
    for record, sent in zip(doc._.parser_scores, doc.sents):
        mbr = TreeDistribution(torch.from_numpy(record["arc"])).mbr()
        assert mbr.reshape(-1).tolist() == sentence_heads(sent)


def test_temperatures_scale_the_stored_scores_not_the_tree(trained):
    nlp, _ = trained
    parser = nlp.get_pipe("biaffine_parser")
    plain = parse(nlp, TEXTS[4])
    parser.arc_temperature, parser.rel_temperature = 2.0, 3.0
    try:
        tempered = parse(nlp, TEXTS[4])
    finally:
        parser.arc_temperature, parser.rel_temperature = 1.0, 1.0
    assert [t.head.i for t in tempered] == [t.head.i for t in plain]
    assert [t.dep_ for t in tempered] == [t.dep_ for t in plain]
    for raw, scaled in zip(plain._.parser_scores, tempered._.parser_scores):
        finite = numpy.isfinite(raw["arc"])
        assert numpy.allclose(scaled["arc"][finite], raw["arc"][finite] / 2.0, atol=1e-5)
        expected = torch.log_softmax(torch.from_numpy(raw["rel"]).double() / 3.0, dim=-1).numpy()
        assert numpy.allclose(scaled["rel"], expected, atol=1e-4)
    with pytest.raises(ValueError, match="arc_temperature"):
        spacy.blank("en").add_pipe("biaffine_parser", config={"arc_temperature": 0.0})


def test_a_sentence_longer_than_max_sentence_length_is_refused_by_name(trained):
    nlp, _ = trained
    parser = nlp.get_pipe("biaffine_parser")
    longest, before = max(parse(nlp, TEXTS[4]).sents, key=len), parser.max_sentence_length
    parser.max_sentence_length = len(longest) - 1
    try:
        with pytest.raises(ValueError, match=f"sentence at token {longest.start} .*has {len(longest)} words"):
            parse(nlp, TEXTS[4])
        parser.max_sentence_length = len(longest)
        assert parse(nlp, TEXTS[4])._.parser_scores
    finally:
        parser.max_sentence_length = before


def test_bad_decoding_is_rejected():
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match="decoding"):
        nlp.add_pipe("biaffine_parser", config={"decoding": "greedy"})


def test_missing_sentence_boundaries_raise(trained):
    nlp, _ = trained
    parser = nlp.get_pipe("biaffine_parser")
    doc = Doc(nlp.vocab, words=["The", "cat", "sat", "."])
    nlp.get_pipe("tok2vec")(doc)
    with pytest.raises(ValueError, match="no sentence boundaries"):
        parser(doc)


def test_an_annotating_parser_without_an_annotating_senter_names_annotating_components(trained):
    """In training, a parser in annotating_components sees Docs that only the components listed
    there annotated: its message said to add a sentencizer, which the pipeline had."""
    nlp, examples = trained
    copies = [Example(Doc(nlp.vocab, words=[t.text for t in eg.reference]), eg.reference) for eg in examples[:2]]
    with pytest.raises(ValueError, match=r"no sentence boundaries.*annotating_components"):
        nlp.update(copies, annotates=["biaffine_parser"])


NO_SENTENCIZER = TINY_CONFIG.replace('"sentencizer", ', "").replace(
    '[components.sentencizer]\nfactory = "sentencizer"\n', ""
)


def _initialize(config, examples=None, annotating=None, disable=()):
    if annotating is not None:
        config += f"\n[training]\nannotating_components = {annotating}\n"
    nlp = spacy.util.load_model_from_config(Config().from_str(config), auto_fill=True)
    examples = examples(nlp) if examples else toy_examples(nlp)
    with nlp.select_pipes(disable=list(disable)):  # as spacy train disables its frozen components
        nlp.initialize(lambda: examples)
    return nlp


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_root_relation_goes_to_the_root_word_alone(seed):
    """An untrained parser's best relation at an arc could be the root's: every word of a
    short training run came out ROOT. The root relation is the root word's, and only its."""
    from thinc.api import fix_random_seed

    fix_random_seed(seed)
    nlp = _initialize(TINY_CONFIG)
    labels = nlp.get_pipe("biaffine_parser").labels
    root = next(name for name in ("ROOT", "root") if name in labels)
    texts = ["the dog saw a cat", "a cat saw the dog near the old house", "dogs bark"]
    for doc in nlp.pipe(
        Doc(nlp.vocab, words=text.split(), sent_starts=[True] + [False] * (len(text.split()) - 1)) for text in texts
    ):
        assert [token.dep_ == root for token in doc] == [token.head.i == token.i for token in doc]


def test_a_pipeline_without_sentence_boundaries_is_named_at_initialize():
    """spacy train without a senter or sentencizer before the parser trained (the gold Docs have
    sentences) and failed only at its first evaluation, on Docs without sentence boundaries: a
    warning at initialize (Docs that bring their own sentence starts still parse), and a refusal
    when the parser is annotating (its own updates would fail)."""
    with pytest.warns(UserWarning, match=r"'biaffine_parser': no component before it sets sentence boundaries"):
        nlp = _initialize(NO_SENTENCIZER)
    doc = nlp.make_doc(TEXTS[0])
    for token in doc:
        token.is_sent_start = token.i == 0
    assert len(list(nlp(doc).sents)) == 1  # initialised, it parses a Doc that carries its sentences
    with pytest.raises(ValueError, match=r"no component before it sets sentence boundaries"):
        _initialize(NO_SENTENCIZER, annotating='["biaffine_parser"]')
    message = r"in \[training\] annotating_components, but none of the components .*\(sentencizer\) is"
    with pytest.raises(ValueError, match=message):
        _initialize(TINY_CONFIG, annotating='["biaffine_parser"]')
    message = r"in \[training\] annotating_components, but none of the components .*\(sentencizer\) is"
    with pytest.raises(ValueError, match=message):
        _initialize(TINY_CONFIG, annotating='["biaffine_parser"]')


def test_pipelines_that_give_sentence_boundaries_are_not_refused(recwarn):
    """A frozen senter (disabled while spaCy initialises), an annotating one, a component that
    declares nothing (it may set them), or training Docs that come with them."""

    @spacy.Language.component("treexp_test_sentence_starts")
    def sentence_starts(doc):
        for token in doc:
            token.is_sent_start = token.i == 0 or doc[token.i - 1].text in ".?!"
        return doc

    _initialize(TINY_CONFIG, disable=["sentencizer"])
    _initialize(TINY_CONFIG, annotating='["sentencizer", "biaffine_parser"]')
    custom = NO_SENTENCIZER.replace('"tok2vec", ', '"tok2vec", "starts", ') + (
        '\n[components.starts]\nfactory = "treexp_test_sentence_starts"\n'
    )
    nlp = _initialize(custom)
    assert len(list(parse(nlp, TEXTS[0]).sents)) == 2

    def with_starts(nlp):
        return [
            Example(
                Doc(
                    nlp.vocab, words=[t.text for t in eg.reference], sent_starts=[t.is_sent_start for t in eg.reference]
                ),
                eg.reference,
            )
            for eg in toy_examples(nlp)
        ]

    _initialize(NO_SENTENCIZER, examples=with_starts)
    assert not [w for w in recwarn if "sets sentence boundaries" in str(w.message)]  # not even warned


def test_training_data_without_a_single_arc_is_refused_at_initialize():
    """A CoNLL-U file with HEAD '_' converts to Docs whose tokens are all their own heads (one-word
    sentences): the parser trained with a loss of 0 and saved a model that had learnt nothing."""
    nlp = spacy.util.load_model_from_config(Config().from_str(TINY_CONFIG), auto_fill=True)
    examples = []
    for eg in toy_examples(nlp):
        words = [t.text for t in eg.reference]
        rootless = Doc(nlp.vocab, words=words, heads=list(range(len(words))), deps=["_"] * len(words))
        examples.append(Example(eg.predicted, rootless))
    with pytest.raises(ValueError, match="no training example has a dependency arc"):
        nlp.initialize(lambda: examples)


def test_empty_doc(trained):
    nlp, _ = trained
    doc = nlp(Doc(nlp.vocab, words=[]))
    assert doc._.parser_scores == []


def assert_same_parse(doc, other):
    assert [(t.head.i, t.dep_) for t in doc] == [(t.head.i, t.dep_) for t in other]
    assert len(doc._.parser_scores) == len(other._.parser_scores)
    for record, copy in zip(doc._.parser_scores, other._.parser_scores):
        assert (record["start"], record["end"]) == (copy["start"], copy["end"])
        assert numpy.allclose(record["arc"], copy["arc"], atol=1e-5)
        assert numpy.allclose(record["rel"], copy["rel"], atol=1e-5)
        assert list(record["labels"]) == list(copy["labels"])


def test_to_disk_from_disk_and_fresh_process(trained, tmp_path):
    nlp, _ = trained
    nlp.to_disk(tmp_path / "toy")
    loaded = spacy.load(tmp_path / "toy")
    assert loaded.get_pipe("biaffine_parser").labels == nlp.get_pipe("biaffine_parser").labels
    assert_same_parse(parse(nlp, TEXTS[0]), parse(loaded, TEXTS[0]))
    # A fresh interpreter that never imports spacy_treexp: found through entry points.
    code = (
        "import sys, spacy; nlp = spacy.load(sys.argv[1]); doc = nlp('The cat sat on the mat.');"
        "print(len(doc._.parser_scores), [t.head.i for t in doc])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "toy")], capture_output=True, text=True, check=True
    )
    assert result.stdout.startswith("1 [")


def test_docbin_and_pickle_round_trips(trained):
    nlp, _ = trained
    docs = [parse(nlp, text) for text in TEXTS]
    doc_bin = DocBin(store_user_data=True, docs=docs)
    restored = list(DocBin().from_bytes(doc_bin.to_bytes()).get_docs(nlp.vocab))
    for doc, copy in zip(docs, restored):
        assert_same_parse(doc, copy)
    for doc in docs:
        assert_same_parse(doc, pickle.loads(pickle.dumps(doc)))
        assert_same_parse(doc, Doc(nlp.vocab).from_bytes(doc.to_bytes()))


def test_pipe_with_two_processes(trained):
    nlp, _ = trained
    docs = [Doc(nlp.vocab, words=text.split()) for text in TEXTS]
    single = list(nlp.pipe([d.copy() for d in docs]))
    multi = list(nlp.pipe([d.copy() for d in docs], n_process=2, batch_size=2))
    for doc, other in zip(single, multi):
        assert_same_parse(doc, other)


def test_training_config_assembles():
    config = spacy.util.load_config(REPO / "configs" / "en_ewt.cfg")
    nlp = spacy.util.load_model_from_config(config, auto_fill=True, validate=True)
    assert nlp.pipe_names == ["paragraph_breaks", "tok2vec", "senter", "morphologizer", "biaffine_parser", "space_tags"]


@pytest.mark.skipif(not (MODEL_PATH / "config.cfg").exists(), reason="shipped model files absent")
def test_shipped_model_loads_and_parses():
    import spacy_treexp

    nlp = spacy_treexp.load()
    doc = nlp("The parser keeps its scores. Every sentence gets a tree.")
    sents = list(doc.sents)
    assert len(doc._.parser_scores) == len(sents) >= 1
    for record, sent in zip(doc._.parser_scores, sents):
        assert record["arc"].shape == (len(sent) + 1, len(sent) + 1)
        assert sentence_heads(sent).count(0) == 1
    assert all(token.pos_ for token in doc)
    with pytest.raises(ValueError, match="unknown option"):
        spacy_treexp.load(colour="red")
    with pytest.raises(ValueError, match="config must be a dict"):
        spacy_treexp.load(config="x")
    # the tagger's tok2vec (192 wide) wrote doc.tensor last: the parser alone names that, not a broadcast error
    parser = nlp.get_pipe("biaffine_parser")
    with pytest.raises(ValueError, match="width 192, expected 128.*another tok2vec"):
        parser(doc)
    assert [t.head.i for t in nlp(doc)] == [t.head.i for t in doc]
    # without its tok2vec the listener would read zeros: named, not parsed
    with nlp.select_pipes(disable=["tok2vec"]):
        with pytest.raises(ValueError, match="no token vectors.*'tok2vec'"):
            nlp("The parser keeps its scores.")


@pytest.mark.parametrize("text", ["Send it to me\nThanks.  Bye", "  Two  spaces.\n\nThen a break ", "x"])
def test_span_text_is_the_spans_text(text):
    """The sentence text that seeds the members' masks, sliced from ``doc.text``, is ``Span.text``."""
    from spacy_treexp.pipeline.biaffine_parser import _span_text

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    doc = nlp(text)
    spans = [(s.start, s.end) for s in doc.sents] + [
        (i, j) for i in range(len(doc)) for j in range(i + 1, len(doc) + 1)
    ]
    for start, end in spans:
        assert _span_text(doc, start, end) == doc[start:end].text
        assert _span_text(doc, start, end, doc.text) == doc[start:end].text


def test_the_parser_carries_its_calibration_map_through_disk(tmp_path):
    """The map beside the shipped parser is read with it and written with it."""
    import spacy_treexp
    from spacy_treexp.calibration.map import CALIBRATION_FILE

    parser = spacy_treexp.load().get_pipe("biaffine_parser")
    assert parser.calibration_map is not None
    parser.to_disk(tmp_path / "parser")
    assert (tmp_path / "parser" / CALIBRATION_FILE).is_file()
    other = spacy_treexp.load().get_pipe("biaffine_parser")
    other.calibration_map = None
    other.from_disk(tmp_path / "parser")
    assert other.calibration_map is not None
    assert other.calibration_map.to_dict() == parser.calibration_map.to_dict()
    (tmp_path / "parser" / CALIBRATION_FILE).unlink()
    assert other.from_disk(tmp_path / "parser").calibration_map is None


def test_training_resumed_from_a_saved_pipeline_saves_and_loads(tmp_path):
    """spaCy's way to go on training a pipeline: every component ``source``d from its folder.
    With a listened component reading a ``[paths]`` variable (as the transformer config's
    ``name = ${paths.transformer}``), the parser took the resumed pipeline for a foreign host
    (spaCy writes a sourced component's settings interpolated) and saved beside itself a
    copy of its home whose config lacked that variable: spacy.load failed on the folder."""
    config = "[paths]\nwidth = 32\n" + TINY_CONFIG.replace(
        "pretrained_vectors = null\nwidth = 32", "pretrained_vectors = null\nwidth = ${paths.width}"
    )
    assert "${paths.width}" in config
    fix_random_seed(0)
    first = spacy.util.load_model_from_config(Config().from_str(config, interpolate=False), auto_fill=True)
    examples = toy_examples(first)
    optimizer = first.initialize(lambda: examples)
    for _ in range(3):
        first.update(examples, sgd=optimizer)
    first.to_disk(tmp_path / "first")

    resumed_config = Config().from_str(config, interpolate=False)
    for name in resumed_config["nlp"]["pipeline"]:
        resumed_config["components"][name] = {"source": str(tmp_path / "first")}
    resumed = spacy.util.load_model_from_config(resumed_config, auto_fill=True)
    optimizer = resumed.resume_training()
    for _ in range(2):
        resumed.update(examples, sgd=optimizer)
    resumed.to_disk(tmp_path / "second")
    assert not (tmp_path / "second" / "biaffine_parser" / "home").exists()  # the pipeline holds its tok2vec
    loaded = spacy.load(tmp_path / "second")
    for a, b in zip(resumed.pipe(TEXTS), loaded.pipe(TEXTS)):
        assert [t.head.i for t in a] == [t.head.i for t in b]
        numpy.testing.assert_allclose(a._.parser_scores[0]["arc"], b._.parser_scores[0]["arc"], atol=1e-5)


def test_a_sourced_parser_refuses_an_update_in_its_host():
    """Its listener would read the host's tok2vec (or nothing): with a host tok2vec of the
    same width it trained silently on other vectors than it predicts with."""
    home, _, _ = train_toy(TINY_CONFIG, 2)  # sourcing shares the parser: not the module's
    host_config = Config().from_str(TINY_CONFIG)
    host_config["nlp"]["pipeline"] = ["tok2vec", "sentencizer"]
    del host_config["components"]["biaffine_parser"]
    host = spacy.util.load_model_from_config(host_config, auto_fill=True)
    host.initialize()
    host.add_pipe("biaffine_parser", source=home)
    host(TEXTS[0])  # the parser now knows it is hosted (add_uncertainty says so at once)
    before = home.get_pipe("biaffine_parser").model.to_bytes()
    optimizer = host.resume_training()
    with pytest.raises(ValueError, match=r"another pipeline.*exclude=\['biaffine_parser'\]"):
        host.update(toy_examples(host), sgd=optimizer)
    assert home.get_pipe("biaffine_parser").model.to_bytes() == before
    host.update(toy_examples(host), sgd=optimizer, exclude=["biaffine_parser"])  # the way out the message gives


def test_a_home_copy_that_could_not_load_is_refused_by_name(tmp_path):
    """A parser made in this process from a config with a ``[paths]`` variable, sourced into
    another pipeline before its own was saved: spaCy's factory showed it no ``[paths]``
    values, so a home copy would not load; saving says so instead of writing it."""
    config = "[paths]\nwidth = 32\n" + TINY_CONFIG.replace(
        "pretrained_vectors = null\nwidth = 32", "pretrained_vectors = null\nwidth = ${paths.width}"
    )
    home = spacy.util.load_model_from_config(Config().from_str(config, interpolate=False), auto_fill=True)
    home.initialize(lambda: toy_examples(home))
    host = spacy.blank("en")
    host.add_pipe("sentencizer")
    host.add_pipe("biaffine_parser", source=home)
    with pytest.raises(ValueError, match=r"cannot save a copy of its home pipeline.*paths\.width"):
        host.to_disk(tmp_path / "host")
    home.to_disk(tmp_path / "home")  # the way out the message gives
    host = spacy.blank("en")
    host.add_pipe("sentencizer")
    host.add_pipe("biaffine_parser", source=spacy.load(tmp_path / "home"))
    host.to_disk(tmp_path / "host2")
    loaded = spacy.load(tmp_path / "host2")
    assert [t.head.i for t in loaded(TEXTS[0])] == [t.head.i for t in host(TEXTS[0])]
