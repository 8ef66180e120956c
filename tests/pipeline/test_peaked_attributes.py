"""Every float attribute the component sets stays finite on peaked scores (arc scores up to
x3000): rounding in the engine (marginals of about -1e-15) must not surface as NaN."""

from __future__ import annotations

import math

import numpy
import pytest
import spacy
from helpers.scorer import score_doc
from spacy.tokens import Doc


def _floats(value):
    if isinstance(value, float):
        return [value]
    if isinstance(value, numpy.ndarray) and value.dtype.kind == "f":
        return value.ravel().tolist()
    return []


@pytest.mark.parametrize("native", ["1", "0"])
@pytest.mark.parametrize("scale", [30.0, 300.0, 3000.0])
def test_every_float_attribute_is_finite_on_peaked_scores(scale, native, monkeypatch):
    monkeypatch.setenv("SPACY_TREEXP_NATIVE", native)
    nlp = spacy.blank("en")
    component = nlp.add_pipe("tree_expectations", config={"n_samples": 3})
    checked = set()
    for seed in range(6):
        n = 4 + 3 * seed
        doc = Doc(nlp.vocab, words=[f"w{i}" for i in range(n)], sent_starts=[True] + [False] * (n - 1))
        doc = component(score_doc(doc, seed=seed, scale=scale))
        places = [(token._, "token") for token in doc] + [(sent._, "sent") for sent in doc.sents]
        for underscore, kind in places:
            for name in dir(underscore):
                if name.startswith("_") or name in ("get", "set", "has"):
                    continue
                for value in _floats(getattr(underscore, name)):
                    checked.add((kind, name))
                    assert not math.isnan(value), f"{kind}._.{name} is NaN (seed {seed}, scale {scale})"
    assert ("token", "head_entropy") in checked and ("sent", "tree_entropy") in checked
