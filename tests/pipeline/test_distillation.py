"""Soft arc targets (knowledge distillation): ``biaffine_parser`` minimises the expected
negative log-likelihood of a tree drawn from the targets, checked by enumeration (float64),
and ``configs/distill_targets.py`` writes targets the parser reads."""

import importlib.util
import sys

import numpy
import pytest
import spacy
from helpers.enumerate_trees import all_trees
from helpers.paths import FIXTURES, REPO
from helpers.toy_pipelines import TINY_CONFIG, train_toy
from spacy.tokens import DocBin
from spacy.training import Example
from spacy.training.converters import conllu_to_docs

from spacy_treexp.pipeline.biaffine_parser import ARC_TARGETS
from spacy_treexp.pipeline.readers import gold_tokens_doc


@pytest.fixture(scope="module")
def toy():
    nlp, _, _ = train_toy(TINY_CONFIG, 3)
    return nlp


def tree_marginals(trees, weights, n):
    marginals = numpy.zeros((n + 1, n + 1))
    for tree, weight in zip(trees, weights):
        marginals[tree[1:], numpy.arange(1, n + 1)] += weight
    return marginals


def batch(arc, heads, targets):
    n = arc.shape[-1] - 1
    labels = numpy.full((1, n + 1), -1, dtype="int64")
    gold = {"sentences": [[(0, n)]], "heads": heads[None], "labels": labels, "complete": numpy.array([True])}
    gold["targets"] = {} if targets is None else {0: targets.astype("float32")}
    rel = numpy.zeros((1, n + 1, 3), dtype="float32")  # at the gold heads
    return (arc[None].astype("float32"), rel, numpy.array([n])), gold


def test_soft_targets_give_the_expected_tree_nll_and_its_gradient(toy):
    parser = toy.get_pipe("biaffine_parser")
    rng = numpy.random.default_rng(0)
    n = 4
    arc = rng.standard_normal((n + 1, n + 1)) * 2
    trees = all_trees(n, single_root=True).numpy()
    words = numpy.arange(1, n + 1)
    totals = numpy.array([arc[tree[1:], words].sum() for tree in trees])
    log_p = totals - numpy.logaddexp.reduce(totals)
    q = rng.dirichlet(numpy.ones(len(trees)) * 0.3)  # any distribution over trees
    targets = tree_marginals(trees, q, n)
    heads = trees[int(numpy.argmax(q))].copy()
    scores, gold = batch(arc, heads, targets)
    loss, (d_arc, _) = parser._loss(scores, gold)
    assert loss == pytest.approx(float(-(q * log_p).sum()), rel=1e-4)
    expected = tree_marginals(trees, numpy.exp(log_p), n) - targets
    numpy.testing.assert_allclose(d_arc[0][:, 1:], expected[:, 1:], atol=1e-4)


def test_one_hot_targets_are_the_gold_tree_loss(toy):
    parser = toy.get_pipe("biaffine_parser")
    rng = numpy.random.default_rng(1)
    n = 5
    arc = rng.standard_normal((n + 1, n + 1))
    heads = numpy.array([-1, 2, 0, 2, 5, 3])
    onehot = numpy.zeros((n + 1, n + 1))
    onehot[heads[1:], numpy.arange(1, n + 1)] = 1.0
    with_targets = parser._loss(*batch(arc, heads, onehot))
    without = parser._loss(*batch(arc, heads, None))
    assert with_targets[0] == pytest.approx(without[0], rel=1e-5)
    numpy.testing.assert_allclose(with_targets[1][0], without[1][0], atol=1e-5)


def test_targets_are_read_per_sentence_and_ignored_where_they_do_not_fit(toy):
    parser = toy.get_pipe("biaffine_parser")
    text = (FIXTURES / "toy_treebank.conllu").read_text(encoding="utf8")
    reference = next(iter(conllu_to_docs(text, n_sents=2, no_print=True)))
    sizes = [len(s) + 1 for s in reference.sents]
    assert len(sizes) == 2
    reference.user_data[ARC_TARGETS] = [numpy.eye(sizes[0]), numpy.eye(sizes[1] + 1)]  # the second: wrong size
    gold = parser._gold([Example(gold_tokens_doc(reference, toy.vocab), reference)])
    assert list(gold["targets"]) == [0]
    numpy.testing.assert_allclose(gold["targets"][0], numpy.eye(sizes[0]))


def test_the_script_writes_targets_mixed_with_the_gold_tree(toy, tmp_path):
    text = (FIXTURES / "toy_treebank.conllu").read_text(encoding="utf8")
    train = DocBin(docs=list(conllu_to_docs(text, n_sents=2, no_print=True))[:3])
    train.to_disk(tmp_path / "train.spacy")
    toy.to_disk(tmp_path / "teacher")
    spec = importlib.util.spec_from_file_location("distill_targets", REPO / "configs" / "distill_targets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for weight in ("0", "0.5"):
        out = tmp_path / f"out{weight}.spacy"
        argv = ["distill_targets.py", str(tmp_path / "train.spacy"), str(out), "--teacher", str(tmp_path / "teacher")]
        sys_argv, sys.argv = sys.argv, argv + ["--weight", weight]
        try:
            assert module.main() == 0
        finally:
            sys.argv = sys_argv
        docs = list(DocBin().from_disk(out).get_docs(spacy.blank("en").vocab))
        assert len(docs) == 3
        for doc in docs:
            targets = doc.user_data[ARC_TARGETS]
            assert len(targets) == len(list(doc.sents))
            for sentence, target in zip(doc.sents, targets):
                target = numpy.asarray(target, dtype="float64")
                numpy.testing.assert_allclose(target[:, 1:].sum(0), 1.0, atol=2e-3)
                gold = module.gold_tree(sentence)
                if weight == "0":
                    numpy.testing.assert_array_equal(target, gold)
                else:
                    assert (target[gold > 0] >= 0.5 - 1e-3).all()


def test_a_teacher_with_its_tree_expectations_is_taken(toy, tmp_path):
    """A pipeline from spacy-treexp train carries tree_expectations (with its map): the
    script added a second one, spaCy's E007 traceback."""
    text = (FIXTURES / "toy_treebank.conllu").read_text(encoding="utf8")
    DocBin(docs=list(conllu_to_docs(text, n_sents=2, no_print=True))[:1]).to_disk(tmp_path / "train.spacy")
    toy.to_disk(tmp_path / "teacher")
    teacher = spacy.load(tmp_path / "teacher")
    teacher.add_pipe("tree_expectations")
    teacher.to_disk(tmp_path / "teacher")
    spec = importlib.util.spec_from_file_location("distill_targets", REPO / "configs" / "distill_targets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "out.spacy"
    argv = ["distill_targets.py", str(tmp_path / "train.spacy"), str(out), "--teacher", str(tmp_path / "teacher")]
    sys_argv, sys.argv = sys.argv, argv
    try:
        assert module.main() == 0
    finally:
        sys.argv = sys_argv
    (doc,) = DocBin().from_disk(out).get_docs(spacy.blank("en").vocab)
    assert len(doc.user_data[ARC_TARGETS]) == len(list(doc.sents))


def test_the_script_refuses_to_overwrite_its_input(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("distill_targets", REPO / "configs" / "distill_targets.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = (FIXTURES / "toy_treebank.conllu").read_text(encoding="utf8")
    DocBin(docs=list(conllu_to_docs(text, n_sents=2, no_print=True))[:1]).to_disk(tmp_path / "train.spacy")
    before = (tmp_path / "train.spacy").read_bytes()
    sys_argv, sys.argv = sys.argv, ["distill_targets.py", str(tmp_path / "train.spacy"), str(tmp_path / "train.spacy")]
    try:
        assert module.main() == 2
    finally:
        sys.argv = sys_argv
    assert "training corpus itself" in capsys.readouterr().err
    assert (tmp_path / "train.spacy").read_bytes() == before
