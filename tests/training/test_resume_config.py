"""configs/resume_config.py: a config that goes on training a saved pipeline (a new cycle)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import numpy
import spacy
from helpers.paths import REPO
from helpers.toy_pipelines import TEXTS, TINY_CONFIG, toy_examples, train_toy
from thinc.api import Config

SPEC = importlib.util.spec_from_file_location("resume_config", REPO / "configs" / "resume_config.py")
assert SPEC is not None and SPEC.loader is not None
resume = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(resume)


def test_every_component_resumes_from_the_saved_pipeline(tmp_path):
    nlp, _, _ = train_toy(TINY_CONFIG, 3)
    nlp.to_disk(tmp_path / "first")
    text = resume.resume_config(tmp_path / "first", steps=7, rate=3e-4, warmup=2)
    config = Config().from_str(text, interpolate=False)
    assert all(config["components"][name] == {"source": str(tmp_path / "first")} for name in nlp.pipe_names)
    assert config["training"]["max_steps"] == 7
    assert config["training"]["optimizer"]["learn_rate"]["initial_rate"] == 3e-4
    assert config["initialize"]["vectors"] is None  # the toy pipeline has none to read again

    resumed = spacy.util.load_model_from_config(config, auto_fill=True)
    # the sourced components are the saved ones: same scores before any update
    for a, b in zip(nlp.pipe(TEXTS), resumed.pipe(TEXTS)):
        numpy.testing.assert_allclose(a._.parser_scores[0]["arc"], b._.parser_scores[0]["arc"], atol=1e-6)
    optimizer = resumed.resume_training()
    losses = resumed.update(toy_examples(resumed), sgd=optimizer, losses={})
    assert losses["biaffine_parser"] > 0


def test_vectors_come_from_the_saved_pipeline(tmp_path):
    nlp, _, _ = train_toy(TINY_CONFIG, 1)
    nlp.vocab.set_vector("cat", numpy.ones(4, dtype="float32"))
    nlp.to_disk(tmp_path / "with_vectors")
    config = Config().from_str(resume.resume_config(tmp_path / "with_vectors", 5, 1e-4, 1), interpolate=False)
    assert config["initialize"]["vectors"] == str(tmp_path / "with_vectors")


def test_the_saved_pipelines_own_config_is_never_overwritten(tmp_path):
    nlp, _, _ = train_toy(TINY_CONFIG, 1)
    nlp.to_disk(tmp_path / "saved")
    before = (tmp_path / "saved" / "config.cfg").read_bytes()
    script = REPO / "configs" / "resume_config.py"
    run = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "saved"), str(tmp_path / "saved" / "config.cfg")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2 and "own config" in run.stderr and "Traceback" not in run.stderr
    assert (tmp_path / "saved" / "config.cfg").read_bytes() == before
