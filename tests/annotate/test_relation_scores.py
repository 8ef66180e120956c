"""Factored biaffine relation scores read exactly like the dense array they stand for."""

import pickle

import numpy
import pytest
import srsly

from spacy_treexp.annotate.relation_scores import BiaffineRelationScores


def dense_reference(head_part, dep_part, temperature, fixed):
    logits = numpy.einsum("hlj,mj->hml", head_part.astype(numpy.float64), dep_part.astype(numpy.float64))
    logits /= temperature
    log_p = (
        logits
        - numpy.log(numpy.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
        - logits.max(-1, keepdims=True)
    )
    for m, label in fixed.items():
        log_p[:, m, :] = -numpy.inf
        log_p[:, m, label] = 0.0
    return log_p


@pytest.fixture
def scores():
    rng = numpy.random.default_rng(0)
    n, labels, width = 7, 5, 4
    rel = BiaffineRelationScores(
        rng.standard_normal((n + 1, labels, width)).astype(numpy.float32),
        rng.standard_normal((n + 1, width)).astype(numpy.float32),
        temperature=1.7,
    )
    rel.fix_label(numpy.array([3]), 2)
    return rel, dense_reference(rel.head_part, rel.dep_part, 1.7, {3: 2})


def test_every_index_form_matches_the_dense_array(scores):
    rel, dense = scores
    assert rel.shape == dense.shape
    numpy.testing.assert_allclose(numpy.asarray(rel), dense, atol=1e-5)
    heads = numpy.array([2, 0, 1, 5, 4, 1, 3])
    words = numpy.arange(1, 8)
    numpy.testing.assert_allclose(rel[heads, words], dense[heads, words], atol=1e-5)
    sampled = numpy.stack([heads, numpy.roll(heads, 1)])
    numpy.testing.assert_allclose(rel[sampled, words], dense[sampled, words], atol=1e-5)
    assert rel[2, 1, 4] == pytest.approx(dense[2, 1, 4], abs=1e-5)
    labels = numpy.array([0, 1, 2, 3, 4, 0, 1])
    numpy.testing.assert_allclose(rel[heads, words, labels], dense[heads, words, labels], atol=1e-5)
    numpy.testing.assert_allclose(rel[:, 2], dense[:, 2], atol=1e-5)
    assert rel[0, 3, 2] == 0.0 and rel[5, 3, 1] == -numpy.inf  # the fixed label


def test_sampled_trees_read_each_distinct_arc_once_with_the_same_values(scores):
    """k sampled trees ask for mostly the same arcs: computed once each, the values are those
    of the arcs read one tree at a time (and of the dense array), fixed labels included."""
    rel, dense = scores
    n = rel.shape[0] - 1
    rng = numpy.random.default_rng(1)
    tree = rng.integers(0, n + 1, size=n)
    sampled = numpy.tile(tree, (12, 1))
    sampled[::3, 2] = (tree[2] + 1) % (n + 1)  # a few arcs differ between the trees
    dependents = numpy.arange(1, n + 1)
    together = rel[sampled, dependents]
    one_by_one = numpy.stack([rel[row, dependents] for row in sampled])
    assert together.shape == (12, n, rel.shape[2])
    assert numpy.array_equal(together, one_by_one)
    numpy.testing.assert_allclose(together, dense[sampled, dependents], rtol=1e-5, atol=1e-5)
    assert numpy.array_equal(rel[sampled, dependents, 2], one_by_one[..., 2])


def test_round_trips_through_msgpack_and_pickle(scores):
    rel, _ = scores
    for copy in (srsly.msgpack_loads(srsly.msgpack_dumps({"rel": rel}))["rel"], pickle.loads(pickle.dumps(rel))):
        assert isinstance(copy, BiaffineRelationScores)
        numpy.testing.assert_array_equal(numpy.asarray(copy), numpy.asarray(rel))


def test_long_sentences_keep_factors_short_ones_stay_dense():
    from spacy.tokens import Doc

    import spacy_treexp

    nlp = spacy_treexp.load()
    for n, lazy in ((12, False), (150, True)):
        words = ["word"] * n
        doc = Doc(nlp.vocab, words=words, sent_starts=[True] + [False] * (n - 1))
        with nlp.select_pipes(disable=["senter"]):
            doc = nlp(doc)
        rel = doc._.parser_scores[0]["rel"]
        assert isinstance(rel, BiaffineRelationScores) == lazy
        assert rel.shape == (n + 1, n + 1, len(nlp.get_pipe("biaffine_parser").labels))
        heads = numpy.array([0 if t.head.i == t.i else t.head.i + 1 for t in doc])
        best = numpy.asarray(rel[heads, numpy.arange(1, n + 1)]).argmax(-1)
        assert [t.dep_ for t in doc] == [nlp.get_pipe("biaffine_parser").labels[i] for i in best]
        assert rel.nbytes < 200 * 1024 * n  # linear in n, not quadratic


def test_the_parser_refuses_sentences_over_its_limit_by_name():
    from spacy.tokens import Doc

    import spacy_treexp

    nlp = spacy_treexp.load()
    nlp.get_pipe("biaffine_parser").max_sentence_length = 10
    doc = Doc(nlp.vocab, words=["word"] * 12, sent_starts=[True] + [False] * 11)
    with (
        nlp.select_pipes(disable=["senter"]),
        pytest.raises(ValueError, match="has 12 words, more than max_sentence_length = 10"),
    ):
        nlp(doc)
