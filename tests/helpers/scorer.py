"""Test-only helpers for the tree_expectations tests: a scorer component that writes
random arc scores into ``Doc._.parser_scores`` (and the MAP parse), so the component's
tests do not depend on a trained parser, plus a brute-force tree enumerator used as an
independent oracle on tiny sentences."""

from __future__ import annotations

import itertools
import zlib
from typing import List, Optional

import numpy
import spacy
import torch
from spacy.attrs import DEP, HEAD
from spacy.language import Language
from spacy.tokens import Doc

import spacy_treexp.pipeline.extensions  # noqa: F401  (Doc._.parser_scores)
from spacy_treexp import TreeDistribution

LABELS = ["ROOT", "nsubj", "obj", "det"]


def random_scores(n: int, seed: int, scale: float = 2.0, n_labels: int = len(LABELS)):
    """Arc log-potentials (n+1, n+1) and relation log-probabilities (n+1, n+1, L)."""
    rng = numpy.random.default_rng(seed)
    arc = (scale * rng.standard_normal((n + 1, n + 1))).astype(numpy.float32)
    logits = rng.standard_normal((n + 1, n + 1, n_labels))
    rel = logits - numpy.log(numpy.exp(logits).sum(-1, keepdims=True))
    return arc, rel.astype(numpy.float32)


def score_doc(doc: Doc, seed: int = 0, scale: float = 2.0, set_parse: bool = True, members: int = 0) -> Doc:
    """Fill ``doc._.parser_scores`` per sentence; optionally set the MAP parse; ``members`` > 0:
    also that many ensemble members, the arc scores plus seeded noise of scale 1."""
    records = []
    heads = numpy.zeros(len(doc), dtype=numpy.int64)
    deps = numpy.zeros(len(doc), dtype=numpy.uint64)
    for sent in doc.sents:
        n = len(sent)
        arc, rel = random_scores(n, seed + zlib.crc32(sent.text.encode("utf8")), scale)
        record = {"start": sent.start, "end": sent.end, "arc": arc, "rel": rel, "labels": list(LABELS)}
        if members:
            noise = numpy.random.default_rng(seed + 1 + zlib.crc32(sent.text.encode("utf8")))
            record["members"] = (arc + noise.standard_normal((members, n + 1, n + 1))).astype(numpy.float32)
        records.append(record)
        mode = TreeDistribution(torch.from_numpy(arc).double()).mode.numpy().reshape(-1)
        for m in range(1, n + 1):
            h = int(mode[m])
            i = sent.start + m - 1
            heads[i] = 0 if h == 0 else (sent.start + h - 1) - i
            deps[i] = doc.vocab.strings.add(LABELS[int(rel[h, m].argmax())])
    doc._.parser_scores = records
    if set_parse and len(doc):
        doc.from_array([HEAD, DEP], numpy.stack([heads.astype(numpy.uint64), deps], axis=1))
    return doc


@Language.factory(
    "treexp_test_scorer",
    default_config={"seed": 0, "scale": 2.0, "set_parse": True, "fail_on": "", "members": 0},
    assigns=["doc._.parser_scores", "token.head", "token.dep"],
)
def make_test_scorer(nlp: Language, name: str, seed: int, scale: float, set_parse: bool, fail_on: str, members: int):
    return TestScorer(seed, scale, set_parse, fail_on, members)


class TestScorer:
    """Writes reproducible random scores (seeded by the sentence text); raises on a
    Doc containing ``fail_on`` (to test error reporting)."""

    __test__ = False  # not a pytest test class

    def __init__(self, seed: int, scale: float, set_parse: bool, fail_on: str = "", members: int = 0) -> None:
        self.seed, self.scale, self.set_parse, self.fail_on = seed, scale, set_parse, fail_on
        self.members = members

    def __call__(self, doc: Doc) -> Doc:
        if self.fail_on and self.fail_on in doc.text:
            raise ValueError(f"test scorer refuses {self.fail_on!r}")
        if len(doc) == 0:
            doc._.parser_scores = []
            return doc
        return score_doc(doc, self.seed, self.scale, self.set_parse, self.members)


TEXTS = [
    "The cat sat on the mat. It was happy.",
    "Dogs bark.",
    "A very long sentence with quite a few words in it goes here for the bucketing test.",
    "Yes.",
    "Colourless green ideas sleep furiously. Time flies like an arrow. Fruit flies like a banana.",
    "",
]


def make_nlp(te_config: Optional[dict] = None, scorer_config: Optional[dict] = None) -> Language:
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("treexp_test_scorer", config=scorer_config or {})
    nlp.add_pipe("tree_expectations", config=te_config or {})
    return nlp


def enumerate_trees(n: int, single_root: bool = True) -> List[numpy.ndarray]:
    """All dependency trees over n words as head vectors (n,), 0 = ROOT (brute force)."""
    trees = []
    for heads in itertools.product(range(n + 1), repeat=n):
        if any(h == m + 1 for m, h in enumerate(heads)):
            continue
        if single_root and sum(h == 0 for h in heads) != 1:
            continue
        ok = True
        for m in range(1, n + 1):
            seen, node = set(), m
            while node != 0 and ok:
                if node in seen:
                    ok = False
                seen.add(node)
                node = heads[node - 1]
        if ok:
            trees.append(numpy.array(heads))
    return trees


#: Two sentences with parts of speech: the out-of-domain tests' Docs (:func:`tagged_doc`).
TAGGED_WORDS = "The dog barks . a cat sleeps here".split()
TAGGED_STARTS = [True, False, False, False, True, False, False, False]
TAGGED_POS = ["DET", "NOUN", "VERB", "PUNCT", "DET", "NOUN", "VERB", "ADV"]


def tagged_doc(vocab, n_words: int, seed: int, width: int, scale: float) -> Doc:
    """The first ``n_words`` of :data:`TAGGED_WORDS` with their parts of speech, random arc scores
    (:func:`score_doc`) and a random ``doc.tensor`` ``(n_words, width)`` (normal, ``scale``, seeded):
    what the out-of-domain model reads."""
    doc = Doc(vocab, words=TAGGED_WORDS[:n_words], sent_starts=TAGGED_STARTS[:n_words])
    for token, tag in zip(doc, TAGGED_POS):
        token.pos_ = tag
    score_doc(doc)
    doc.tensor = numpy.random.default_rng(seed).normal(0, scale, (n_words, width)).astype(numpy.float32)
    return doc


#: A Python file for ``--code`` (spaCy's and ours): it registers a score source,
#: ``test_code_scores.v1``, that favours near heads, for a pipeline only that file makes loadable.
CODE_SCORE_SOURCE = """
import numpy, spacy


@spacy.registry.misc("test_code_scores.v1")
def make_scores():
    def get_scores(doc):
        out = []
        for sent in doc.sents:
            n = len(sent)
            distance = numpy.abs(numpy.arange(n + 1)[:, None] - numpy.arange(n + 1)[None, :])
            arc = (-0.7 * distance).astype("float32")
            arc[:, 0] = -numpy.inf
            numpy.fill_diagonal(arc, -numpy.inf)
            out.append({"start": sent.start, "end": sent.end, "arc": arc, "rel": None, "labels": None})
        return out

    return get_scores
"""
