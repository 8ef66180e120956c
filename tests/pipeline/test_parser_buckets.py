"""biaffine_parser sends sentences to its model in groups of similar length: the same trees
and scores as one padded batch (float rounding apart)."""

import numpy
import pytest
from thinc.api import Model

import spacy_treexp
import spacy_treexp.pipeline.biaffine_parser as biaffine_parser

TEXTS = [
    "Yes.",
    "The old man saw the dog with the telescope in the park near the river on a cold morning.",
    "I can't believe it.  She left early, and nobody noticed until the meeting had already started.",
    "Send it to me\nThanks",
    "Apple is looking at buying a U.K. startup for $1 billion, people familiar with the plans said on Monday.",
]


@pytest.fixture(scope="module")
def nlp():
    return spacy_treexp.load()


def parse(nlp, monkeypatch, bucket_words):
    """The Docs, and the number of Docs in each call of the parser's model."""
    monkeypatch.setattr(biaffine_parser, "BUCKET_WORDS", bucket_words)
    model = nlp.get_pipe("biaffine_parser").model
    calls = []
    predict = Model.predict

    def counting(self, X):
        if self is model:
            calls.append(len(X[0]))
        return predict(self, X)

    monkeypatch.setattr(Model, "predict", counting)
    docs = list(nlp.pipe(TEXTS, batch_size=len(TEXTS)))
    monkeypatch.setattr(Model, "predict", predict)
    return docs, calls


def test_groups_give_the_trees_and_scores_of_one_batch(nlp, monkeypatch):
    grouped, calls = parse(nlp, monkeypatch, 40)
    assert len(calls) > 1, "small groups: several model calls"
    whole, calls = parse(nlp, monkeypatch, 10**9)
    assert len(calls) == 1
    for a, b in zip(grouped, whole):
        assert [(t.head.i, t.dep_) for t in a] == [(t.head.i, t.dep_) for t in b]
        for ra, rb in zip(a._.parser_scores, b._.parser_scores):
            numpy.testing.assert_allclose(ra["arc"], rb["arc"], atol=1e-4)
            if ra.get("members") is not None:
                numpy.testing.assert_allclose(ra["members"], rb["members"], atol=1e-4)
