"""``space_tags``: whitespace tokens get spaCy's ``_SP`` / ``SPACE``, no features, their text as lemma."""

import spacy
from spacy.tokens import Doc

import spacy_treexp


def test_whitespace_tokens_get_spacys_space_annotations_and_words_keep_theirs():
    nlp = spacy.blank("en")
    component = nlp.add_pipe("space_tags")
    doc = Doc(nlp.vocab, words=["Hi", "\n\n", "there", "  ", "."], spaces=[False, False, False, False, False])
    for token, (tag, pos) in zip(doc, [("UH", "INTJ"), ("NNS", "NOUN"), ("RB", "ADV"), ("CD", "VERB"), (".", "PUNCT")]):
        token.tag_, token.pos_, token.lemma_ = tag, pos, token.text.lower()
        token.set_morph("Number=Plur" if pos == "NOUN" else None)
    component(doc)
    assert [(t.tag_, t.pos_, t.lemma_, str(t.morph)) for t in doc] == [
        ("UH", "INTJ", "hi", ""),
        ("_SP", "SPACE", "\n\n", ""),
        ("RB", "ADV", "there", ""),
        ("_SP", "SPACE", "  ", ""),
        (".", "PUNCT", ".", ""),
    ]
    untagged = component(Doc(nlp.vocab, words=["Hi", "\n", "there"], spaces=[False, False, False]))
    assert [t.tag_ for t in untagged] == ["", "", ""] and untagged[1].pos_ == "SPACE"


def test_the_shipped_pipeline_ends_with_it():
    """EWT has no whitespace tokens: the shipped tagger gave a paragraph break NNS / NOUN."""
    nlp = spacy_treexp.load()
    assert nlp.pipe_names[-1] == "space_tags"
    doc = nlp("Hello there.\n\nHow are you?  Fine.")
    spaces = [(t.text, t.tag_, t.pos_, t.lemma_) for t in doc if t.is_space]
    assert spaces == [("\n\n", "_SP", "SPACE", "\n\n"), (" ", "_SP", "SPACE", " ")]
    assert all(t.tag_ != "_SP" and t.pos_ != "SPACE" for t in doc if not t.is_space)
