"""End to end: the biaffine parser (trained in seconds on the toy treebank) followed by
tree_expectations, in process, from disk in a fresh process, and through the CLI."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy
import pytest
import torch
from helpers.paths import FIXTURES
from helpers.toy_pipelines import TEXTS, TINY_CONFIG, train_toy

import spacy_treexp
from spacy_treexp import TreeDistribution
from spacy_treexp.pipeline.default_model import MODEL_PATH


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    nlp, _, _ = train_toy(TINY_CONFIG, 60)
    torch.set_num_threads(previous)
    nlp.add_pipe("tree_expectations", config={"n_samples": 3, "keep_scores": True})
    path = tmp_path_factory.mktemp("e2e") / "pipeline"
    nlp.to_disk(path)
    return nlp, path


def test_parser_scores_feed_the_component(pipeline):
    nlp, _ = pipeline
    doc = nlp(TEXTS[2])
    assert nlp.analyze_pipes()["problems"]["tree_expectations"] == []
    for sent, scores, record in zip(doc.sents, doc._.parser_scores, doc._.tree_expectations):
        dist = TreeDistribution(torch.from_numpy(scores["arc"]).double().unsqueeze(0))
        numpy.testing.assert_allclose(sent._.arc_marginals, dist.marginals[0].numpy(), atol=1e-5)
        heads = [0 if t.head.i == t.i else t.head.i - sent.start + 1 for t in sent]
        assert list(record.heads) == heads
        assert [t._.head_prob for t in sent] == pytest.approx(
            [dist.marginals[0, h, m].item() for m, h in enumerate(heads, start=1)], abs=1e-5
        )
        # relation scores exist, so the labelled probability is there and below head_prob
        assert all(t._.dep_prob is not None and t._.dep_prob <= t._.head_prob + 1e-6 for t in sent)
    # trained to fit the toy treebank: confident on its own sentences
    assert numpy.mean([t._.head_prob for t in doc]) > 0.8


def test_pipe_matches_one_doc_at_a_time(pipeline):
    nlp, _ = pipeline
    alone = [nlp(t)._.tree_expectations for t in TEXTS]
    piped = [d._.tree_expectations for d in nlp.pipe(TEXTS, batch_size=2)]
    for a, b in zip(alone, piped):
        for ra, rb in zip(a, b):
            numpy.testing.assert_allclose(ra.marginals, rb.marginals, atol=1e-5)
            assert ra.sampled_heads.tolist() == rb.sampled_heads.tolist()


def test_fresh_process_loads_from_disk_without_imports(pipeline):
    nlp, path = pipeline
    code = (
        "import sys, json, spacy\n"
        "nlp = spacy.load(sys.argv[1])\n"
        "doc = nlp(sys.argv[2])\n"
        "print(json.dumps([t._.head_prob for t in doc]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(path), TEXTS[1]], capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout) == pytest.approx([t._.head_prob for t in nlp(TEXTS[1])], abs=1e-6)


def test_cli_annotates_conllu_in_a_fresh_process(pipeline, tmp_path):
    _, path = pipeline
    target = tmp_path / "out.conllu"
    command = [
        sys.executable,
        "-m",
        "spacy_treexp",
        "annotate",
        str(FIXTURES / "toy_treebank.conllu"),
        "-o",
        str(target),
        "--model",
        str(path),
        "--quiet",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-3000:]
    gold = (FIXTURES / "toy_treebank.conllu").read_text().strip().split("\n\n")
    out = target.read_text().strip().split("\n\n")
    assert len(out) == len(gold)
    for g, o in zip(gold, out):
        g_words = [line.split("\t")[1] for line in g.splitlines() if not line.startswith("#")]
        o_rows = [line.split("\t") for line in o.splitlines() if not line.startswith("#")]
        assert [r[1] for r in o_rows] == g_words
        assert all("HeadProb=" in r[9] and "HeadEntropy=" in r[9] for r in o_rows)


@pytest.mark.skipif(not (MODEL_PATH / "config.cfg").exists(), reason="shipped model not built")
def test_shipped_model_smoke():
    nlp = spacy_treexp.load()
    if "tree_expectations" not in nlp.pipe_names:
        nlp.add_pipe("tree_expectations", config={"n_samples": 2})
    doc = nlp("The quick brown fox jumps over the lazy dog. It was not amused.")
    assert len(list(doc.sents)) >= 1
    for sent in doc.sents:
        assert sent._.tree_entropy >= 0 and 0 <= sent._.expected_attachment <= 1
        assert all(0 < t._.head_prob <= 1 for t in sent)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_shipped_pipeline_on_a_gpu_matches_the_cpu():
    """With ``spacy.require_gpu()`` thinc runs on CuPy, so ``doc.tensor`` (read for
    ``sent._.novelty``) is a CuPy array: numpy refuses to convert it implicitly, and the
    first Doc crashed before (benchmarks/cuda_check.py)."""
    import spacy
    from thinc.api import require_cpu

    def annotate():
        nlp = spacy_treexp.load()
        nlp.add_pipe("tree_expectations", config={"n_samples": 2})
        return list(nlp.pipe(TEXTS))

    cpu = annotate()
    spacy.require_gpu()
    try:
        gpu = annotate()
    finally:
        require_cpu()
    for a, b in zip(cpu, gpu):
        assert [t.head.i for t in a] == [t.head.i for t in b]
        numpy.testing.assert_allclose([t._.head_prob for t in a], [t._.head_prob for t in b], atol=1e-3)
        assert [s._.novelty is None for s in a.sents] == [s._.novelty is None for s in b.sents]
        numpy.testing.assert_allclose(
            [s._.novelty or 0 for s in a.sents], [s._.novelty or 0 for s in b.sents], atol=1e-3
        )
