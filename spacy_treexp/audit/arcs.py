"""How unlikely a parser finds each arc and label of a gold treebank (``spacy-treexp audit``).

:func:`audit_sentence` is a pure function of one gold sentence and the parser's scores of its
words (on the gold tokens): nothing else is read, so it can run in any process, in any order
(a Ray task, a ``multiprocessing`` worker). For each gold word m with gold head g and gold
relation l it gives, from the tree distribution p(t) ∝ Π exp(s[h, m]) over single-root trees:

* ``head_prob`` μ(g, m), the exact marginal of the gold arc (Koo et al. 2007, Prop. 1);
* ``label_prob`` p(l | g, m), the parser's relation probability given the gold head;
* ``best_head`` argmax_h μ(h, m) and its marginal, and the best relation given the gold head;
* ``conditional_head_prob`` p(h_m = g | every other gold arc), the tree model's exact
  conditional: with the other gold arcs fixed, word m can take any head outside its own
  gold subtree (ROOT only if it is the gold root), so this is the softmax of s[·, m] over
  those heads (defined for valid gold trees only);
* ``local_head_prob``: the softmax of s[·, m] over every head, the *local* baseline that
  ignores the tree constraint.

Scores (higher = more suspicious, each a probability that the annotation is wrong under
the model): ``head_score`` 1 − p(g | the other gold arcs) (1 − μ(g, m) on an invalid tree,
where the conditional is not defined); ``label_score`` 1 − p(l | g, m); ``score`` 1 − p(g | ·)
p(l | g, m), the probability that the gold labelled arc is wrong given the rest of the
annotation. A relation the parser does not know has p(l | g, m) = 0; a DEPREL of ``_`` (UD's
"no value") is not scored: ``label_prob`` and ``label_score`` None, ``score`` 1 − p(g | ·). The conditional ranks planted head errors better than the marginal, which also
doubts a correct arc when the *parser* is unsure about its neighbours: precision of the top
2% on EWT dev with 2% of its heads moved, 0.75-0.78 against 0.71-0.74
(``benchmarks/audit_corruption.py``). Per sentence: log p(gold tree), how many nats it is below the model's best
tree, the expected number of gold heads a tree from the model disagrees with
(Σ_m 1 − μ(g_m, m)), and the tree entropy (Zmigrod et al. 2021).

Invalid gold trees (a head that is not a number, out of range or the word itself, several
roots or none, cycles) are audited too: ``tree_problem`` gives the reason, the words that
cause it are marked ``in_problem``, arcs to heads outside the sentence get probability 0,
and the tree-level values that need a tree are None.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import numpy
import torch

from spacy_treexp.annotate import SentenceScores
from spacy_treexp.engine import TreeDistribution
from spacy_treexp.io import ConlluSentence
from spacy_treexp.io.conllu import sentence_id

#: The columns of an arc record, in output order (JSONL keys, CSV header).
ARC_FIELDS = (
    "rank",
    "sent_id",
    "id",
    "form",
    "head",
    "deprel",
    "score",
    "head_score",
    "label_score",
    "head_prob",
    "label_prob",
    "conditional_head_prob",
    "local_head_prob",
    "best_head",
    "best_head_form",
    "best_head_prob",
    "best_label",
    "best_label_prob",
    "tree_problem",
    "in_problem",
    "gold_tree_log_prob",
    "nats_below_best",
    "expected_errors",
    "line",
)


@dataclass
class ArcAudit:
    """One gold word's arc and relation as the model sees them (see the module doc).

    ``head`` is the gold head as written (0 = ROOT), None where it is not a number;
    probabilities the model cannot give are None (no relation scores; a conditional on an
    invalid tree). ``rank`` is filled in by :func:`rank_arcs`."""

    sent_id: str
    id: int
    form: str
    head: Optional[int]
    deprel: str
    score: float
    head_score: float
    label_score: Optional[float]
    head_prob: float
    label_prob: Optional[float]
    conditional_head_prob: Optional[float]
    local_head_prob: float
    best_head: int
    best_head_form: str
    best_head_prob: float
    best_label: Optional[str]
    best_label_prob: Optional[float]
    tree_problem: Optional[str]
    in_problem: bool
    gold_tree_log_prob: Optional[float]
    nats_below_best: Optional[float]
    expected_errors: float
    line: int
    rank: int = 0

    def to_dict(self) -> Dict[str, Any]:
        """The record as a dict in :data:`ARC_FIELDS` order."""
        values = asdict(self)
        return {name: values[name] for name in ARC_FIELDS}


@dataclass
class SentenceAudit:
    """One gold sentence's audit: its words, gold tree, tree-level evidence and arcs."""

    sent_id: str
    line: int
    forms: List[str]
    heads: List[Optional[int]]
    deprels: List[str]
    tree_problem: Optional[str]
    problem_words: List[int]
    gold_tree_log_prob: Optional[float]
    nats_below_best: Optional[float]
    expected_errors: float
    entropy: float
    arcs: List[ArcAudit] = field(default_factory=list)

    @property
    def n(self) -> int:
        """Number of words."""
        return len(self.forms)


def gold_heads(sentence: ConlluSentence) -> List[Optional[int]]:
    """Each word's gold head as written, None where it is not an integer (never raises)."""
    out: List[Optional[int]] = []
    for row in sentence.words:
        try:
            out.append(int(row[6]))
        except ValueError:
            out.append(None)
    return out


def problem_words(heads: Sequence[Optional[int]]) -> List[int]:
    """The words (1-based) that keep ``heads`` from being a single-root tree: heads that are
    not numbers, outside 0..n or the word itself; every root when there are several; every
    word on a cycle. Empty for a tree."""
    n = len(heads)
    bad = {m for m, h in enumerate(heads, start=1) if h is None or not 0 <= h <= n or h == m}
    roots = [m for m, h in enumerate(heads, start=1) if h == 0]
    if len(roots) > 1:
        bad.update(roots)
    parent = [-1] + [h if h is not None and 0 <= h <= n and h != m else 0 for m, h in enumerate(heads, start=1)]
    state = [0] * (n + 1)  # 0 unseen, 1 on the current path, 2 done
    state[0] = 2
    for start in range(1, n + 1):
        path = []
        node = start
        while state[node] == 0:
            state[node] = 1
            path.append(node)
            node = parent[node]
        if state[node] == 1:
            bad.update(path[path.index(node) :])
        for visited in path:
            state[visited] = 2
    return sorted(bad)


def _descendants(heads: Sequence[int], n: int) -> List[set]:
    """For a valid tree ``heads`` (length n+1, 0 = ROOT): each word's set of descendants
    including itself (index 0 unused)."""
    below: List[set] = [set() for _ in range(n + 1)]
    for m in range(1, n + 1):
        node = m
        while node != 0:
            below[node].add(m)
            node = heads[node]
    return below


def _log_softmax(values: numpy.ndarray) -> numpy.ndarray:
    finite = values[numpy.isfinite(values)]
    if finite.size == 0:
        return numpy.full_like(values, -numpy.inf)
    top = finite.max()
    return values - (top + math.log(float(numpy.exp(finite - top).sum())))


def _label_index(labels: Sequence[str]) -> Dict[str, int]:
    """Label name -> index, with ``ROOT`` (spaCy) and ``root`` (UD) the same relation."""
    index = {label: i for i, label in enumerate(labels)}
    for i, label in enumerate(labels):
        if label.lower() == "root":
            index.setdefault("root", i)
            index.setdefault("ROOT", i)
    return index


def audit_sentence(sentence: ConlluSentence, scores: SentenceScores, sent_id: Optional[str] = None) -> SentenceAudit:
    """Audit one gold sentence against the parser's ``scores`` of its words (see the module
    doc); ``sent_id`` defaults to the sentence's ``# sent_id`` or ``line-N``."""
    forms = sentence.forms
    n = len(forms)
    if scores.n != n:
        raise ValueError(f"arc scores of shape {scores.arc.shape} for a sentence of {n} words")
    sent_id = sent_id or sentence_id(sentence)
    heads = gold_heads(sentence)
    deprels = sentence.deprels
    problem = sentence.tree_problem()
    bad = problem_words(heads) if problem else []
    valid = problem is None
    arc = numpy.asarray(scores.arc, dtype=numpy.float64)
    with torch.no_grad():
        dist = TreeDistribution(torch.from_numpy(arc).unsqueeze(0), single_root=True)
        mu = dist.marginals[0].numpy()
        entropy = float(dist.entropy()[0])
        gold_log_prob = best_log_prob = None
        if valid:
            tree = torch.tensor([[-1] + [int(h) for h in heads if h is not None]])  # valid: every head an int
            gold_log_prob = float(dist.log_prob(tree)[0])
            best_log_prob = float(dist.log_prob(dist.mode)[0])
    in_range = [h if h is not None and 0 <= h <= n and h != m else None for m, h in enumerate(heads, start=1)]
    head_prob = numpy.array([0.0 if h is None else float(mu[h, m]) for m, h in enumerate(in_range, start=1)])
    expected_errors = float((1.0 - head_prob).sum())
    below = _descendants([-1] + [int(h) for h in heads if h is not None], n) if valid else None
    labels = scores.labels
    index = _label_index(labels) if labels is not None else {}
    nats_below = None if gold_log_prob is None or best_log_prob is None else max(0.0, best_log_prob - gold_log_prob)
    audit = SentenceAudit(
        sent_id=sent_id,
        line=sentence.line,
        forms=forms,
        heads=heads,
        deprels=deprels,
        tree_problem=problem,
        problem_words=bad,
        gold_tree_log_prob=gold_log_prob,
        nats_below_best=nats_below,
        expected_errors=expected_errors,
        entropy=entropy,
    )
    for m in range(1, n + 1):
        h = in_range[m - 1]
        column = arc[:, m].copy()
        column[m] = -numpy.inf
        local = float(numpy.exp(_log_softmax(column)[h])) if h is not None else 0.0
        conditional = None
        if below is not None and h is not None:
            allowed = numpy.ones(n + 1, dtype=bool)
            allowed[list(below[m])] = False
            allowed[0] = h == 0  # single root: only the gold root may hang from ROOT
            masked = numpy.where(allowed, arc[:, m], -numpy.inf)
            conditional = float(numpy.exp(_log_softmax(masked)[h]))
        best = int(numpy.argmax(mu[:, m]))
        label_prob = best_label = best_label_prob = None
        if scores.rel is not None and labels is not None and h is not None:
            rel = numpy.asarray(scores.rel[h, m], dtype=numpy.float64)
            gold_label = index.get(deprels[m - 1])
            if deprels[m - 1] != "_":  # UD's "no value": no gold relation to score (None)
                label_prob = 0.0 if gold_label is None else float(math.exp(rel[gold_label]))
            top = int(numpy.argmax(rel))
            best_label, best_label_prob = labels[top], float(math.exp(rel[top]))
        elif scores.rel is not None and labels is not None and deprels[m - 1] != "_":
            label_prob = 0.0  # no gold head in the sentence: no relation can be scored
        p_head = float(head_prob[m - 1])
        p_gold = p_head if conditional is None else conditional
        audit.arcs.append(
            ArcAudit(
                sent_id=sent_id,
                id=m,
                form=forms[m - 1],
                head=heads[m - 1],
                deprel=deprels[m - 1],
                score=1.0 - p_gold * (1.0 if label_prob is None else label_prob),
                head_score=1.0 - p_gold,
                label_score=None if label_prob is None else 1.0 - label_prob,
                head_prob=p_head,
                label_prob=label_prob,
                conditional_head_prob=conditional,
                local_head_prob=local,
                best_head=best,
                best_head_form="ROOT" if best == 0 else forms[best - 1],
                best_head_prob=float(mu[best, m]),
                best_label=best_label,
                best_label_prob=best_label_prob,
                tree_problem=problem,
                in_problem=m in bad,
                gold_tree_log_prob=gold_log_prob,
                nats_below_best=nats_below,
                expected_errors=expected_errors,
                line=sentence.line,
            )
        )
    return audit


def rank_arcs(arcs: Sequence[ArcAudit], key: str = "score") -> List[ArcAudit]:
    """The arcs most suspicious first by ``key`` (``score``, ``head_score`` or
    ``label_score``; None last), ties in input order; sets each arc's ``rank`` (1-based)."""
    if key not in ("score", "head_score", "label_score"):
        raise ValueError(f"cannot rank arcs by {key!r}")
    order = sorted(range(len(arcs)), key=lambda i: (getattr(arcs[i], key) is None, -(getattr(arcs[i], key) or 0.0), i))
    ranked = [arcs[i] for i in order]
    for rank, arc in enumerate(ranked, start=1):
        arc.rank = rank
    return ranked
