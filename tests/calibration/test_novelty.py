"""Encoder novelty: distances checked against a direct loop in float64, the spherical k-means
fit against its objective, and the record's JSON form."""

import json
import math

import numpy
import pytest

from spacy_treexp.calibration import CalibrationError
from spacy_treexp.calibration.novelty import NoveltyReference, fit_novelty


def direct_distances(reference, vectors):
    """1 − max_r cos(x − centre, c_r), one token and one row at a time (float64)."""
    out = []
    for x in numpy.asarray(vectors, dtype=numpy.float64):
        centred = x - reference.centre.astype(numpy.float64)
        best = -math.inf
        for row in reference.rows.astype(numpy.float64):
            cos = centred @ row / (numpy.linalg.norm(centred) * numpy.linalg.norm(row))
            best = max(best, cos)
        out.append(1.0 - best)
    return numpy.array(out)


def clustered(seed=0, per=40, width=6, clusters=5):
    rng = numpy.random.default_rng(seed)
    centres = rng.normal(0, 3, (clusters, width))
    return numpy.concatenate([c + rng.normal(0, 0.3, (per, width)) for c in centres]).astype(numpy.float32)


def objective(reference, vectors):
    """Σ_t max_r cos(x_t − centre, c_r): what spherical k-means maximises."""
    return float((1.0 - direct_distances(reference, vectors)).sum())


def test_distances_match_a_direct_computation():
    data = clustered()
    reference = fit_novelty(data, size=7, iterations=5, seed=1)
    queries = numpy.random.default_rng(2).normal(0, 3, (9, data.shape[1]))
    numpy.testing.assert_allclose(reference.token_distances(queries), direct_distances(reference, queries), atol=1e-6)
    assert reference.sentence_novelty(queries) == pytest.approx(direct_distances(reference, queries).mean(), abs=1e-6)
    assert math.isnan(reference.sentence_novelty(numpy.zeros((0, data.shape[1]))))


def test_rows_are_unit_and_the_fit_raises_the_objective():
    data = clustered(seed=3)
    start = fit_novelty(data, size=5, iterations=0, seed=4)  # the drawn tokens
    fitted = fit_novelty(data, size=5, iterations=10, seed=4)
    numpy.testing.assert_allclose(numpy.linalg.norm(fitted.rows, axis=1), 1.0, atol=1e-5)
    numpy.testing.assert_allclose(fitted.centre, data.mean(0), atol=1e-5)
    assert objective(fitted, data) >= objective(start, data) - 1e-6
    converged = fit_novelty(data, size=5, iterations=100, seed=4)
    nearest = (
        ((data - converged.centre) / numpy.linalg.norm(data - converged.centre, axis=1, keepdims=True))
        @ converged.rows.T
    ).argmax(1)
    for r in numpy.unique(nearest):  # Lloyd's fixed point: each row is its tokens' mean direction
        centred = data[nearest == r] - converged.centre
        mean = (centred / numpy.linalg.norm(centred, axis=1, keepdims=True)).sum(0)
        numpy.testing.assert_allclose(converged.rows[r], mean / numpy.linalg.norm(mean), atol=1e-4)


def test_training_tokens_are_familiar_and_far_points_are_not():
    data = clustered(seed=5)
    data[:, 4:] = 0.0  # the training tokens span the first four axes only
    reference = fit_novelty(data, size=len(data))  # every token a row
    assert reference.token_distances(data).max() < 1e-5
    orthogonal = reference.centre + numpy.array([[0, 0, 0, 0, 2.0, 0], [0, 0, 0, 0, 0, -5.0]])
    numpy.testing.assert_allclose(reference.token_distances(orthogonal), 1.0, atol=1e-6)


def test_dict_form_round_trips_through_json_in_float16():
    reference = fit_novelty(clustered(seed=6), size=8, seed=0)
    back = NoveltyReference.from_dict(json.loads(json.dumps(reference.to_dict())))
    numpy.testing.assert_allclose(back.rows, reference.rows, atol=1e-3)
    numpy.testing.assert_array_equal(back.centre, reference.centre)
    queries = clustered(seed=7)[:10]
    numpy.testing.assert_allclose(back.token_distances(queries), reference.token_distances(queries), atol=2e-3)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: fit_novelty(numpy.zeros((0, 3))), "T >= 1"),
        (lambda: fit_novelty(numpy.full((4, 3), numpy.nan)), "finite"),
        (lambda: fit_novelty(numpy.ones((4, 3)), size=0), "size must be"),
        (lambda: NoveltyReference(numpy.zeros(3), numpy.zeros((2, 4))), "rows must be"),
        (lambda: NoveltyReference.from_dict({"width": 3}), "cannot read"),
        (
            lambda: NoveltyReference.from_dict(
                {"width": 3, "size": 2, "centre": [0, 0, 0], "rows_float16_base64": "AAAAAAAA"}
            ),
            "3 numbers for 2 rows",
        ),
    ],
)
def test_bad_input_is_named(call, message):
    with pytest.raises(CalibrationError, match=message):
        call()


def test_vectors_of_the_wrong_width_are_refused():
    reference = fit_novelty(clustered(), size=3)
    with pytest.raises(ValueError, match="token vectors must be"):
        reference.token_distances(numpy.zeros((2, 4)))


def test_component_gives_sent_novelty_from_the_maps_reference_and_doc_tensor():
    import spacy
    from helpers.scorer import score_doc
    from spacy.tokens import Doc

    from spacy_treexp.calibration import CalibrationMap

    width = 6
    reference = fit_novelty(clustered(seed=8, width=width), size=4)
    with_reference = CalibrationMap.identity().to_dict() | {"novelty": reference.to_dict()}
    back = CalibrationMap.from_dict(json.loads(json.dumps(with_reference)))
    assert back.novelty is not None and back == CalibrationMap.identity()  # the reference changes no score
    nlp = spacy.blank("en")
    component = nlp.add_pipe("tree_expectations", config={"calibration": with_reference})
    words = "the dog barks . a cat sleeps here".split()
    doc = Doc(nlp.vocab, words=words, sent_starts=[True, False, False, False, True, False, False, False])
    score_doc(doc)
    doc.tensor = numpy.random.default_rng(9).normal(0, 3, (len(words), width)).astype(numpy.float32)
    component(doc)
    stored = NoveltyReference.from_dict(reference.to_dict())  # what the config holds (float16 rows)
    for sent in doc.sents:
        expected = direct_distances(stored, doc.tensor[sent.start : sent.end]).mean()
        assert sent._.novelty == pytest.approx(expected, abs=1e-6)
    # vectors of another width (another encoder), or a map without a reference: None
    other = Doc(nlp.vocab, words=words[:4], sent_starts=[True, False, False, False])
    score_doc(other)
    other.tensor = numpy.ones((4, width + 1), dtype=numpy.float32)
    component(other)
    assert [sent._.novelty for sent in other.sents] == [None]
    plain = nlp.add_pipe("tree_expectations", name="plain", config={"calibration": CalibrationMap.identity().to_dict()})
    again = Doc(nlp.vocab, words=words[:4], sent_starts=[True, False, False, False])
    score_doc(again)
    again.tensor = doc.tensor[:4]
    plain(again)
    assert [sent._.novelty for sent in again.sents] == [None]


def test_read_only_vectors_and_reference_give_no_warning():
    """doc.tensor and a reference read from bytes may be read-only arrays: torch warns on
    those, so the reference works on its own copies."""
    import warnings

    rows = numpy.eye(4, dtype=numpy.float32)
    rows.setflags(write=False)
    vectors = numpy.random.default_rng(0).normal(size=(3, 4)).astype(numpy.float32)
    vectors.setflags(write=False)
    reference = NoveltyReference(numpy.zeros(4, dtype=numpy.float32), rows)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        distances = reference.token_distances(vectors)
    unit = vectors / numpy.linalg.norm(vectors, axis=1, keepdims=True)
    numpy.testing.assert_allclose(distances, 1.0 - unit.max(axis=1), atol=1e-6)


def test_batched_spans_match_one_sentence_at_a_time():
    from spacy_treexp.calibration import novelty as module

    reference = fit_novelty(clustered(seed=8), size=6, seed=0)
    rng = numpy.random.default_rng(9)
    doc_a, doc_b = rng.normal(0, 3, (7, 6)), rng.normal(0, 3, (4, 6))
    spans = [(doc_a, 0, 3), (doc_a, 3, 7), (doc_b, 0, 4), (None, 0, 2), (doc_b[:, :5], 0, 2), (doc_b, 2, 9)]
    batched = module.spans_novelty(reference, spans)
    one_by_one = [module.span_novelty(reference, *span) for span in spans]
    assert batched[3:] == [None, None, None] == one_by_one[3:]  # no tensor, another width, too few rows
    for (tensor, start, end), got in zip(spans[:3], batched[:3]):
        assert got == pytest.approx(direct_distances(reference, tensor[start:end]).mean(), abs=1e-6)
    numpy.testing.assert_allclose(batched[:3], one_by_one[:3], atol=1e-6)
    assert module.spans_novelty(None, spans) == [None] * len(spans)
    old_chunk, module.CHUNK = module.CHUNK, 2  # products over several chunks give the same distances
    try:
        numpy.testing.assert_allclose(module.spans_novelty(reference, spans[:3]), batched[:3], atol=1e-7)
    finally:
        module.CHUNK = old_chunk
