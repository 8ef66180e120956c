"""The test scorer and its brute-force enumerator are themselves right."""

import numpy
import spacy
from helpers.scorer import enumerate_trees


def test_enumerate_trees_counts_match_cayley():
    # (n+1)^(n-1) rooted forests, n^(n-1) single-root trees (Cayley).
    assert len(enumerate_trees(3, single_root=False)) == 4**2
    assert len(enumerate_trees(3)) == 3**2
    assert len(enumerate_trees(4)) == 4**3


def test_scorer_sets_the_map_tree_of_its_scores():
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("treexp_test_scorer")
    doc = nlp("One two three four. Five six.")
    for sent, record in zip(doc.sents, doc._.parser_scores):
        arc = record["arc"].astype(numpy.float64)
        best = max(
            enumerate_trees(len(sent)),
            key=lambda heads: sum(arc[h, m] for m, h in enumerate(heads, start=1)),
        )
        got = [0 if t.head.i == t.i else t.head.i - sent.start + 1 for t in sent]
        assert got == list(best)
