"""``lemma_table``: built from reference Docs, looked up by (tag, form), saved with the pipeline."""

import pytest
import spacy
from spacy.tokens import Doc
from spacy.training import Example


def reference(nlp, rows):
    words, tags, lemmas = zip(*rows)
    return Doc(nlp.vocab, words=list(words), tags=list(tags), lemmas=list(lemmas))


TRAIN = [
    [("He", "PRP", "he"), ("saw", "VBD", "see"), ("a", "DT", "a"), ("saw", "NN", "saw")],
    [("the", "DT", "the"), ("saw", "VBD", "see"), ("Apple", "NNP", "Apple"), ("'s", "VBZ", "be")],
    [("'s", "VBZ", "be"), ("'s", "VBZ", "have"), ("dogs", "NNS", "dog"), ("dogs", "NNS", "dogs")],
]


@pytest.fixture()
def nlp():
    nlp = spacy.blank("en")
    table = nlp.add_pipe("lemma_table")
    docs = [reference(nlp, rows) for rows in TRAIN]
    table.initialize(lambda: [Example(doc, doc) for doc in docs])
    return nlp


def predicted(nlp, rows):
    """A Doc with predicted tags and a prior lemma guess (as a trainable lemmatizer leaves it)."""
    words, tags, guesses = zip(*rows)
    return nlp(Doc(nlp.vocab, words=list(words), tags=list(tags), lemmas=list(guesses)))


def test_lookup_by_tag_and_form(nlp):
    doc = predicted(nlp, [("saw", "VBD", "x"), ("saw", "NN", "x"), ("'s", "VBZ", "x"), ("dogs", "NNS", "x")])
    # most frequent lemma wins; on a tie ("dogs": dog 1, dogs 1) the first seen
    assert [t.lemma_ for t in doc] == ["see", "saw", "be", "dog"]


def test_lower_case_fallback_except_proper_nouns(nlp):
    doc = predicted(nlp, [("The", "DT", "x"), ("SAW", "VBD", "x"), ("apple", "NNP", "guess"), ("APPLE", "NNP", "g")])
    assert [t.lemma_ for t in doc] == ["the", "see", "guess", "g"]


def test_unseen_pairs_keep_their_lemma(nlp):
    doc = predicted(nlp, [("saw", "VBP", "keep"), ("cats", "NNS", "cat"), ("He", "", "he?")])
    assert [t.lemma_ for t in doc] == ["keep", "cat", "he?"]


def test_round_trip(nlp, tmp_path):
    nlp.to_disk(tmp_path / "p")
    loaded = spacy.load(tmp_path / "p")
    assert loaded.get_pipe("lemma_table").table == nlp.get_pipe("lemma_table").table
    restored = spacy.blank("en").add_pipe("lemma_table").from_bytes(nlp.get_pipe("lemma_table").to_bytes())
    assert restored.table == nlp.get_pipe("lemma_table").table
    assert [t.lemma_ for t in predicted(loaded, [("saw", "VBD", "x")])] == ["see"]


def test_needs_tagged_lemmatized_examples():
    nlp = spacy.blank("en")
    table = nlp.add_pipe("lemma_table")
    doc = Doc(nlp.vocab, words=["a", "b"])
    with pytest.raises(ValueError, match="no tags and lemmas"):
        table.initialize(lambda: [Example(doc, doc)])
