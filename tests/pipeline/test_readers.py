"""The training reader that keeps the treebank's tokens (spacy_treexp.GoldTokensCorpus.v1)."""

import spacy
from spacy.tokens import Doc, DocBin
from spacy.util import registry


def test_gold_tokens_corpus_keeps_tokens_and_multi_sentence_docs(tmp_path):
    nlp = spacy.blank("en")
    words = ["The", "New", "York-based", "firm", "grew", ".", "It", "hired", "."]
    spaces = [True, True, True, True, False, True, True, False, False]
    heads = [3, 2, 3, 4, 4, 4, 7, 7, 7]
    deps = ["det", "compound", "amod", "nsubj", "ROOT", "punct", "nsubj", "ROOT", "punct"]
    reference = Doc(nlp.vocab, words=words, spaces=spaces, heads=heads, deps=deps)
    assert len(list(reference.sents)) == 2
    assert [t.text for t in nlp(reference.text)] != words  # spaCy splits "York-based"
    path = tmp_path / "train.spacy"
    DocBin(docs=[reference]).to_disk(path)

    read = registry.resolve({"c": {"@readers": "spacy_treexp.GoldTokensCorpus.v1", "path": str(path)}})["c"]
    examples = list(read(nlp))
    assert len(examples) == 1  # one Doc, not one Example per sentence
    example = examples[0]
    assert [t.text for t in example.predicted] == words
    assert [bool(t.whitespace_) for t in example.predicted] == spaces
    assert not example.predicted.has_annotation("SENT_START")
    assert not example.predicted.has_annotation("DEP")
    aligned_heads, aligned_deps = example.get_aligned_parse(projectivize=False)
    assert aligned_heads == heads and aligned_deps == deps  # every token aligns
