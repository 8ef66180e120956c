"""Line breaks in the text: the ``paragraph_breaks`` component and the parser's handling of
whitespace tokens (fixed head, never a head, probability 1)."""

import numpy
import pytest
import spacy
import torch
from helpers.toy_pipelines import sentence_heads, tiny_parser_config, train_toy
from spacy.tokens import Doc

from spacy_treexp import TreeDistribution
from spacy_treexp.pipeline.biaffine_parser import _attach_whitespace
from spacy_treexp.pipeline.default_model import MODEL_PATH


@pytest.fixture(scope="module")
def blank():
    nlp = spacy.blank("en")
    nlp.add_pipe("paragraph_breaks")  # found through the package's entry point
    return nlp


def starts(doc):
    return [token.is_sent_start for token in doc]


def test_blank_line_starts_a_sentence_and_whitespace_ends_one(blank):
    doc = blank("It rained .\n\nWe stayed in")
    assert [t.text for t in doc] == ["It", "rained", ".", "\n\n", "We", "stayed", "in"]
    assert starts(doc) == [True, None, None, False, True, None, None]


def test_single_line_break_is_left_to_the_senter(blank):
    doc = blank("Best regards\nJohn")
    assert starts(doc) == [True, None, False, None]
    eager = spacy.blank("en")
    eager.add_pipe("paragraph_breaks", config={"min_newlines": 1})
    assert starts(eager("Best regards\nJohn")) == [True, None, False, True]


def test_newlines_of_a_whitespace_run_add_up(blank):
    # "\n \n" is one token here; "a \n" + "\n" style runs span several tokens.
    doc = Doc(blank.vocab, words=["a", "\n", " ", "\n", "b"], spaces=[False] * 5)
    assert starts(blank(doc)) == [True, False, False, False, True]


def test_a_boundary_set_on_whitespace_moves_to_the_next_word(blank):
    words = ["Hello", ".", "\n", "world", "."]
    doc = Doc(blank.vocab, words=words, spaces=[False] * 5, sent_starts=[True, False, True, False, False])
    assert starts(blank(doc)) == [True, False, False, True, False]
    unset = Doc(blank.vocab, words=words, spaces=[False] * 5)
    assert starts(blank(unset)) == [True, None, False, None, None]  # one line break alone: left to the senter


def test_leading_whitespace_joins_the_first_sentence_and_plain_text_is_untouched(blank):
    doc = blank("\n\nHello there")
    assert starts(doc) == [True, False, None]
    doc = blank("No line breaks here .")
    assert starts(doc) == [True, None, None, None, None]
    assert len(blank("")) == 0  # an empty Doc passes through


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "2"])
def test_bad_min_newlines(value):
    nlp = spacy.blank("en")
    with pytest.raises(ValueError, match="min_newlines"):
        nlp.add_pipe("paragraph_breaks", config={"min_newlines": value})


def test_attach_whitespace_scores():
    """The helper leaves one allowed head per whitespace token and forbids it as a head."""
    rng = numpy.random.default_rng(0)
    doc = Doc(spacy.blank("en").vocab, words=["\n", "a", "b", "\n\n", "c", "\n", " ", "\n", " "], spaces=[False] * 9)
    sentences = [(0, 6), (6, 9)]  # the second sentence is whitespace only
    arc = rng.normal(size=(2, 7, 7))
    rel = [rng.normal(size=(7, 7, 3)), rng.normal(size=(4, 4, 3))]
    before = arc.copy()
    _attach_whitespace(arc, rel, [doc], [sentences], dep_label=2)
    first, second = arc[0], arc[1]
    # Sentence 1 positions: 1 "\n" (-> 2 "a", the next word), 4 "\n\n" (-> 3 "b"), 6 "\n" (-> 5 "c").
    for dep, head in [(1, 2), (4, 3), (6, 5)]:
        allowed = numpy.flatnonzero(numpy.isfinite(first[:, dep]))
        assert allowed.tolist() == [head] and first[head, dep] == before[0, head, dep]
        assert numpy.isneginf(first[dep, :]).all()
        assert numpy.isneginf(rel[0][:, dep, :2]).all() and (rel[0][:, dep, 2] == 0).all()
    for dep in (2, 3, 5):  # words keep all their non-whitespace heads
        assert numpy.array_equal(first[[0, 2, 3, 5], dep], before[0][[0, 2, 3, 5], dep])
    # Whitespace-only sentence: 1 is the root, 2 and 3 hang from it; the root keeps its labels.
    assert numpy.flatnonzero(numpy.isfinite(second[:4, 1])).tolist() == [0]
    assert numpy.flatnonzero(numpy.isfinite(second[:4, 2])).tolist() == [1]
    assert numpy.flatnonzero(numpy.isfinite(second[:4, 3])).tolist() == [1]
    assert numpy.isfinite(rel[1][:, 1, :]).all()
    dist = TreeDistribution(torch.from_numpy(arc), torch.tensor([6, 3]))
    marginals = dist.marginals
    assert torch.allclose(marginals[0, [2, 3, 5], [1, 4, 6]], torch.ones(3, dtype=marginals.dtype))
    assert torch.allclose(marginals[1, [0, 1, 1], [1, 2, 3]], torch.ones(3, dtype=marginals.dtype))


@pytest.fixture(scope="module")
def paragraph_parser():
    nlp, _, _ = train_toy(tiny_parser_config(), 60)
    nlp.add_pipe("paragraph_breaks", first=True)
    nlp.add_pipe("tree_expectations", config={"n_samples": 4, "seed": 0, "keep_scores": True})
    return nlp


def test_parser_attaches_whitespace_tokens(paragraph_parser):
    nlp = paragraph_parser
    words = ["\n", "The", "cat", "sat", "\n\n", "A", "dog", "barked", ".", "\n", "\n"]
    doc = nlp(Doc(nlp.vocab, words=words, spaces=[False] * len(words)))
    sents = list(doc.sents)
    assert [(s.start, s.end) for s in sents] == [(0, 5), (5, 11)]
    expected_heads = {0: 1, 4: 3, 9: 8, 10: 8}
    for token in doc:
        if token.is_space:
            assert token.head.i == expected_heads[token.i]
            assert token._.head_prob == pytest.approx(1.0, abs=1e-6)
            assert token._.head_entropy == pytest.approx(0.0, abs=1e-6)
            assert not numpy.signbit(token._.head_entropy)  # printed as 0.000, not -0.000
        assert not token.head.is_space
    for record, sent in zip(doc._.parser_scores, sents):
        mode = TreeDistribution(torch.from_numpy(record["arc"])).mode
        assert mode.reshape(-1).tolist() == sentence_heads(sent)
        labels = list(record["labels"])
        for token, head in zip(sent, sentence_heads(sent)[1:]):
            # the best relation the arc may have: ROOT is the root word's, and only its
            rows = numpy.array(record["rel"][head, token.i - sent.start + 1], dtype="float64")
            if "ROOT" in labels:
                rows[labels.index("ROOT")] = numpy.inf if head == 0 else -numpy.inf
            assert token.dep_ == labels[rows.argmax()]
    for sent in sents:
        for sample in sent._.sampled_heads:
            for token in sent:
                if token.is_space:
                    assert sample[token.i - sent.start] == expected_heads[token.i] - sent.start + 1


def test_whitespace_only_doc_parses(paragraph_parser):
    nlp = paragraph_parser
    doc = nlp(Doc(nlp.vocab, words=["\n\n", " "], spaces=[False, False]))
    assert [token.head.i for token in doc] == [0, 0]
    assert doc[1]._.head_prob == pytest.approx(1.0, abs=1e-6)


@pytest.mark.skipif(not (MODEL_PATH / "config.cfg").exists(), reason="shipped model files absent")
def test_shipped_model_splits_paragraphs():
    import spacy_treexp

    nlp = spacy_treexp.load()
    assert nlp.pipe_names[0] == "paragraph_breaks"
    doc = nlp("thanks for the help\n\nwe will call you tomorrow about the car")
    sents = [sent.text for sent in doc.sents]
    assert sents == ["thanks for the help\n\n", "we will call you tomorrow about the car"]
    assert doc[4].is_space and doc[4].head.i == 3 and doc[4].dep_ == "dep"
