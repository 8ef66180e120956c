"""A sourced ``biaffine_parser`` reads the host's ``doc.tensor`` only when the host ran the
very tok2vec the parser was trained on (``BiaffineParser._reads_host_tensors``); otherwise
it runs its home tok2vec on copies of the Docs. Either way the scores are its own."""

import numpy
import pytest
from helpers.hosting import count_home_runs
from helpers.threads import one_torch_thread  # noqa: F401  (autouse)

import spacy_treexp

TEXT = "The old man saw the dog with the telescope. It barked twice at him."


@pytest.fixture(scope="module")
def source():
    return spacy_treexp.load()


def host_with(source, scale: float):
    """The shipped pipeline loaded again (another vocabulary), its tok2vec's first weight
    matrix scaled by ``scale``, the parser sourced from ``source`` where the tok2vec's output
    is still ``doc.tensor`` (before ``tagger_tok2vec`` replaces it)."""
    host = spacy_treexp.load(exclude=["tagger_tok2vec", "tagger", "lemmatizer", "lemma_table"])
    host.remove_pipe("biaffine_parser")
    if scale != 1.0:
        layer = next(node for node in host.get_pipe("tok2vec").model.walk() if node.has_param("W"))
        layer.set_param("W", layer.get_param("W") * scale)
    host.add_pipe("biaffine_parser", source=source)
    return host


@pytest.mark.parametrize("scale, reads_host", [(1.0, True), (0.5, False)])
def test_the_host_tensor_is_read_only_when_it_is_the_homes(source, monkeypatch, scale, reads_host):
    host = host_with(source, scale)
    calls = count_home_runs(monkeypatch)
    docs = list(host.pipe([TEXT, "Short one.", ""], batch_size=3))
    assert host.vocab is not source.vocab
    assert (calls == []) is reads_host
    own = list(source.pipe([TEXT, "Short one.", ""], batch_size=3))
    for doc, reference in zip(docs, own):
        assert [(t.head.i, t.dep_) for t in doc] == [(t.head.i, t.dep_) for t in reference]
        for record, expected in zip(doc._.parser_scores, reference._.parser_scores):
            numpy.testing.assert_allclose(record["arc"], expected["arc"], rtol=1e-4, atol=1e-4)


def test_a_host_tensor_of_another_width_gets_the_copies(source, monkeypatch):
    """After ``tagger_tok2vec`` (width 192) the tensor is not the tok2vec's (128)."""
    host = spacy_treexp.load()
    host.remove_pipe("biaffine_parser")
    host.add_pipe("biaffine_parser", source=source)
    calls = count_home_runs(monkeypatch)
    doc = host(TEXT)
    assert calls == [1]
    assert [(t.head.i, t.dep_) for t in doc] == [(t.head.i, t.dep_) for t in source(TEXT)]


def test_add_uncertainty_gives_a_blank_pipeline_sentence_boundaries(source):
    """spacy.blank has no component that splits sentences, which the parser needs."""
    import spacy

    nlp = spacy_treexp.add_uncertainty(spacy.blank("en"), source=source)
    assert nlp.pipe_names == ["sentencizer", "biaffine_parser", "tree_expectations"]
    doc = nlp(TEXT)
    assert len(list(doc.sents)) == 2
    alone = source(TEXT)
    assert [(t.head.i, t.dep_) for t in doc] == [(t.head.i, t.dep_) for t in alone]
    assert all(0.0 <= t._.head_prob <= 1.0 for t in doc)
