"""A score record's own tree (``"heads"``, ``"deps"``): what the annotations describe when the
Doc carries another parse (``biaffine_parser`` with ``overwrite = false``)."""

import numpy
import pytest
import spacy
from spacy.tokens import Doc

from spacy_treexp.annotate import annotate_sentences
from spacy_treexp.annotate.options import AnnotateOptions
from spacy_treexp.pipeline.score_sources import ScoreSourceError, sentence_scores


def parsed_doc() -> Doc:
    """Three words; the Doc's own parse: b heads a and c (CoNLL-U heads [2, 0, 2])."""
    vocab = spacy.blank("en").vocab
    return Doc(vocab, words=["a", "b", "c"], heads=[1, 1, 1], deps=["x", "ROOT", "y"], sent_starts=[1, 0, 0])


def record(**extra):
    arc = numpy.random.default_rng(0).normal(size=(4, 4)).astype("float32")
    return {"start": 0, "end": 3, "arc": arc, "rel": None, "labels": None, **extra}


def test_without_an_own_tree_the_docs_parse_is_described():
    (scores,) = sentence_scores(parsed_doc(), [record()])
    assert scores.heads.tolist() == [2, 0, 2]


def test_an_own_tree_replaces_the_docs_parse():
    (scores,) = sentence_scores(
        parsed_doc(), [record(heads=numpy.array([0, 1, 2], dtype="int32"), deps=["root", "obj", "obj"])]
    )
    assert scores.heads.tolist() == [0, 1, 2]
    assert scores.deprels == ["root", "obj", "obj"]
    (annotation,) = annotate_sentences([scores], AnnotateOptions())
    marginals = annotation.marginals
    assert annotation.head_prob.tolist() == pytest.approx([marginals[0, 1], marginals[1, 2], marginals[2, 3]], abs=1e-6)


@pytest.mark.parametrize(
    "extra",
    [
        {"heads": numpy.array([0, 1])},  # too short
        {"heads": numpy.array([0, 1, 4])},  # outside the sentence
        {"heads": numpy.array([0.0, 1.0, 2.0])},  # not integers
        {"heads": numpy.array([0, 1, 2]), "deps": ["root"]},  # one relation for three words
    ],
)
def test_a_bad_own_tree_is_refused_by_name(extra):
    with pytest.raises(ScoreSourceError, match=r"TXE025.*own tree"):
        sentence_scores(parsed_doc(), [record(**extra)])


def test_a_doc_without_a_parse_gives_no_relations_to_fit():
    """A score source on an unparsed Doc: no tree and no relations (``deprels`` None, not ""
    for every word, which a calibration map fitted as a relation of its own, so that the
    command and ``fit_calibration`` on records built as documented gave different maps)."""
    from spacy_treexp.annotate import SentenceScores
    from spacy_treexp.calibration import fit_calibration
    from spacy_treexp.calibration.map import dependent_relations

    vocab = spacy.blank("en").vocab
    doc = Doc(vocab, words=["a", "b", "c"], sent_starts=[True, False, False])
    labels = ["root", "obj", "nsubj"]
    rel = numpy.log(numpy.full((4, 4, 3), 1 / 3, dtype="float32"))
    (scores,) = sentence_scores(doc, [record(rel=rel, labels=labels)])
    assert scores.heads is None and scores.deprels is None and dependent_relations(scores) is None

    class Gold:  # gold tree: b heads a and c (heads (n+1,), -1 at ROOT)
        heads, deprels = numpy.array([-1, 2, 0, 2]), ["nsubj", "root", "obj"]

    rng = numpy.random.default_rng(1)
    read, built = [], []
    for _ in range(40):
        arc = rng.normal(size=(4, 4)).astype("float32")
        (one,) = sentence_scores(doc, [{"start": 0, "end": 3, "arc": arc, "rel": rel, "labels": labels}])
        read.append(one)
        built.append(SentenceScores(arc=arc, rel=rel, labels=labels))
    via_pipeline = fit_calibration([Gold()] * 40, read).to_dict()
    as_documented = fit_calibration([Gold()] * 40, built).to_dict()
    via_pipeline.pop("fit", None), as_documented.pop("fit", None)
    assert via_pipeline == as_documented
