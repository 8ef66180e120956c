"""The audit of one gold sentence against brute-force enumeration of every tree (n <= 5),
and its behaviour on invalid gold trees."""

from __future__ import annotations

import math

import numpy
import pytest
import torch
from helpers.enumerate_trees import tree_log_probs

from spacy_treexp.annotate import SentenceScores
from spacy_treexp.audit import audit_sentence, problem_words, rank_arcs
from spacy_treexp.io import ConlluSentence

LABELS = ["ROOT", "nsubj", "obj", "det"]


def scores_for(n: int, seed: int, scale: float = 2.0) -> SentenceScores:
    rng = numpy.random.default_rng(seed)
    arc = scale * rng.standard_normal((n + 1, n + 1))
    logits = rng.standard_normal((n + 1, n + 1, len(LABELS)))
    rel = logits - numpy.log(numpy.exp(logits).sum(-1, keepdims=True))
    return SentenceScores(arc=arc, rel=rel, labels=list(LABELS))


def sentence(heads: list, deprels: list | None = None) -> ConlluSentence:
    n = len(heads)
    rows = [
        (str(m), f"w{m}", "_", "X", "_", "_", str(h), (deprels or ["nsubj"] * n)[m - 1], "_", "_")
        for m, h in enumerate(heads, start=1)
    ]
    return ConlluSentence(["# sent_id = s"], rows, 1)


def brute_force(scores: SentenceScores, gold: list):
    """Marginals, log p of every tree, and each word's conditional given the other gold arcs."""
    n = len(gold)
    trees, log_probs = tree_log_probs(torch.from_numpy(scores.arc), n, single_root=True)
    probs = log_probs.exp()
    mu = numpy.zeros((n + 1, n + 1))
    for tree, p in zip(trees.tolist(), probs.tolist()):
        for m in range(1, n + 1):
            mu[tree[m], m] += p
    full = [-1] + gold
    conditional = []
    for m in range(1, n + 1):
        same_rest = [
            (tree, p)
            for tree, p in zip(trees.tolist(), probs.tolist())
            if all(tree[d] == full[d] for d in range(1, n + 1) if d != m)
        ]
        total = sum(p for _, p in same_rest)
        conditional.append(sum(p for tree, p in same_rest if tree[m] == full[m]) / total)
    gold_index = [i for i, tree in enumerate(trees.tolist()) if tree == full]
    return mu, log_probs.numpy(), conditional, gold_index[0]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("gold", [[0], [2, 0], [0, 1, 2], [2, 0, 2, 3], [3, 3, 0, 5, 3]])
def test_values_match_brute_force(gold, seed):
    n = len(gold)
    scores = scores_for(n, seed + 10 * n)
    deprels = [LABELS[(m + seed) % len(LABELS)] for m in range(n)]
    audit = audit_sentence(sentence(gold, deprels), scores)
    mu, log_probs, conditional, gold_index = brute_force(scores, gold)
    assert audit.tree_problem is None and audit.problem_words == []
    assert audit.gold_tree_log_prob == pytest.approx(log_probs[gold_index], abs=1e-9)
    assert audit.nats_below_best == pytest.approx(log_probs.max() - log_probs[gold_index], abs=1e-9)
    assert audit.expected_errors == pytest.approx(sum(1 - mu[h, m] for m, h in enumerate(gold, start=1)), abs=1e-9)
    for arc, h, label in zip(audit.arcs, gold, deprels):
        m = arc.id
        assert arc.head_prob == pytest.approx(mu[h, m], abs=1e-9)
        assert arc.conditional_head_prob == pytest.approx(conditional[m - 1], abs=1e-9)
        column = numpy.array([scores.arc[k, m] if k != m else -numpy.inf for k in range(n + 1)])
        assert arc.local_head_prob == pytest.approx(math.exp(column[h]) / numpy.exp(column).sum(), abs=1e-9)
        p_label = math.exp(scores.rel[h, m, LABELS.index(label)])
        assert arc.label_prob == pytest.approx(p_label, abs=1e-9)
        assert arc.head_score == pytest.approx(1 - conditional[m - 1], abs=1e-9)
        assert arc.score == pytest.approx(1 - conditional[m - 1] * p_label, abs=1e-9)
        assert arc.best_head_prob == pytest.approx(mu[:, m].max(), abs=1e-9)
        assert mu[arc.best_head, m] == pytest.approx(mu[:, m].max(), abs=1e-12)
        assert arc.best_label == LABELS[int(numpy.argmax(scores.rel[h, m]))]


def test_root_word_is_certain_given_the_rest():
    """With every other gold arc fixed, the gold root's only possible head is ROOT."""
    audit = audit_sentence(sentence([2, 0, 2]), scores_for(3, 1))
    assert audit.arcs[1].conditional_head_prob == pytest.approx(1.0)


@pytest.mark.parametrize(
    "heads, bad, reason",
    [
        ([2, 3, 0, 9], [4], "outside 0..4"),
        ([2, 0, 0, 3], [2, 3], "2 roots"),
        ([2, 1, 0, 3], [1, 2], "cycle"),
        ([1, 0, 2], [1], "its own head"),
        ([2, 3, 1], [1, 2, 3], "no root"),
        (["x", 0, 2], [1], "not a number"),
    ],
)
def test_invalid_trees_are_audited_with_the_reason(heads, bad, reason):
    n = len(heads)
    audit = audit_sentence(sentence(heads), scores_for(n, 3))
    assert reason in audit.tree_problem
    assert audit.problem_words == bad
    assert problem_words([h if isinstance(h, int) else None for h in heads]) == bad
    assert audit.gold_tree_log_prob is None and audit.nats_below_best is None
    assert [a.in_problem for a in audit.arcs] == [m in bad for m in range(1, n + 1)]
    for arc, h in zip(audit.arcs, heads):
        assert arc.conditional_head_prob is None
        assert 0.0 <= arc.score <= 1.0 and 0.0 <= arc.head_prob <= 1.0
        if not isinstance(h, int) or not 0 <= h <= n or h == arc.id:
            assert arc.head_prob == 0.0 and arc.score == 1.0 and arc.label_prob == 0.0


def test_unknown_label_gets_probability_zero_and_root_matches_ROOT():
    audit = audit_sentence(sentence([0, 1], ["root", "nmod"]), scores_for(2, 4))
    assert audit.arcs[0].label_prob == pytest.approx(math.exp(scores_for(2, 4).rel[0, 1, 0]))
    assert audit.arcs[1].label_prob == 0.0 and audit.arcs[1].label_score == 1.0


def test_a_deprel_of_underscore_is_not_scored_as_a_wrong_label():
    """UD's "_" is no value, not a relation the parser doubts: label_prob None, and the arc's
    score is its head score (it was label_prob 0, score 1: the top of every ranking)."""
    audit = audit_sentence(sentence([0, 1, 1], ["root", "_", "_"]), scores_for(3, 4))
    assert audit.arcs[0].label_prob is not None
    for arc in audit.arcs[1:]:
        assert arc.label_prob is None and arc.label_score is None and arc.best_label is not None
        assert arc.score == arc.head_score < 1.0


def test_without_relation_scores_the_score_is_the_head_score():
    scores = scores_for(3, 5)
    scores.rel, scores.labels = None, None
    audit = audit_sentence(sentence([2, 0, 2]), scores)
    for arc in audit.arcs:
        assert arc.label_prob is None and arc.label_score is None and arc.best_label is None
        assert arc.score == arc.head_score


def test_length_mismatch_is_refused():
    with pytest.raises(ValueError, match="3 words"):
        audit_sentence(sentence([2, 0, 2]), scores_for(4, 0))


def test_rank_arcs_most_suspicious_first_ties_in_input_order():
    arcs = audit_sentence(sentence([2, 0, 2, 3]), scores_for(4, 6)).arcs
    arcs[1].score = arcs[2].score = 2.0  # a tie: input order kept
    ranked = rank_arcs(arcs)
    assert [a.id for a in ranked[:2]] == [2, 3]
    assert [a.rank for a in ranked] == [1, 2, 3, 4]
    assert all(x.score >= y.score for x, y in zip(ranked, ranked[1:]))
    by_label = rank_arcs(arcs, key="label_score")
    assert [a.label_score for a in by_label] == sorted((a.label_score for a in arcs), reverse=True)
    with pytest.raises(ValueError, match="cannot rank"):
        rank_arcs(arcs, key="form")
