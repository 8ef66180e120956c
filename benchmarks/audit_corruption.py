"""How well ``spacy-treexp audit`` finds annotation errors planted in a gold treebank.

Corrupts ``--rate`` (default 2%) of the gold heads and, on other words, 2% of the gold
relations of a CoNLL-U file (UD English-EWT dev), parses its words once with the shipped
model (``spacy_treexp.load()``), audits the corrupted file and reports, for heads and for
labels, the precision of the top-k flagged words (k = the number of corruptions) and the
recall at 2k, for each ranking:

* heads: ``conditional`` 1 − p(g | the other gold arcs), the tree model's exact conditional
  (1 − μ on invalid trees; the audit's ``head_score``), ``marginal`` 1 − μ(g, m),
  ``local_softmax`` 1 − softmax_h s[h, m] at g (the baseline without the tree), ``random``;
* labels: ``given_gold_head`` 1 − p(l | g, m) (the audit's ``label_score``), ``tree_marginal``
  1 − Σ_h μ(h, m) p(l | h, m) (the relation's marginal over heads), ``local_softmax``
  1 − p(l | argmax_h s[h, m], m) (the relation at the local classifier's own head), ``random``.

A corrupted head is drawn uniformly from plausible alternatives a human might pick: the gold
grandparent (ROOT when the head is the root: two roots), a gold sibling, or a word within
two positions; a word among its own descendants makes a cycle, so some corrupted trees are
invalid, as in real treebanks. A corrupted relation is drawn from the relations the file
gives words of the same UPOS, by frequency.

    python benchmarks/audit_corruption.py --conllu ../shared/data/ud_en_ewt/en_ewt-ud-dev.conllu

(``--cache FILE`` keeps the parsed scores between runs: the words do not change.)
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import random
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Dict, List, Sequence, Set, Tuple

import numpy

from spacy_treexp.audit import audit_sentence
from spacy_treexp.audit.scoring import spacy_scorer
from spacy_treexp.io import ConlluSentence, read_conllu


def corrupt(
    sentences: Sequence[ConlluSentence], rate: float, seed: int
) -> Tuple[List[ConlluSentence], Set[Tuple[int, int]], Set[Tuple[int, int]]]:
    """The sentences with ``rate`` of the words' heads and, on other words, ``rate`` of their
    relations changed; the (sentence index, word id) of each changed head and relation."""
    rng = random.Random(seed)
    words = [(i, m) for i, s in enumerate(sentences) for m in range(1, s.n + 1)]
    k = round(rate * len(words))
    chosen = rng.sample(words, 2 * k)
    by_upos: Dict[str, Counter] = defaultdict(Counter)
    for s in sentences:
        for upos, deprel in zip(s.upos, s.deprels):
            by_upos[upos][deprel] += 1
    out = list(sentences)
    heads_changed: Set[Tuple[int, int]] = set()
    labels_changed: Set[Tuple[int, int]] = set()
    for i, m in chosen[:k]:
        s = out[i]
        heads = s.heads
        n = s.n
        g = int(heads[m])
        candidates = set()
        if g == 0:
            continue_from = None
        else:
            continue_from = int(heads[g])  # grandparent (0: ROOT)
            candidates.add(continue_from)
        candidates.update(d for d in range(1, n + 1) if d != m and int(heads[d]) == g and g != 0)
        candidates.update(d for d in range(m - 2, m + 3) if 1 <= d <= n)
        candidates.discard(m)
        candidates.discard(g)
        if not candidates:
            continue
        new = rng.choice(sorted(candidates))
        out[i] = s.with_word(m, head=new)
        heads_changed.add((i, m))
    for i, m in chosen[k:]:
        s = out[i]
        old = s.deprels[m - 1]
        options = [(label, count) for label, count in by_upos[s.upos[m - 1]].items() if label != old]
        if not options:
            options = [(label, 1) for label in {d for c in by_upos.values() for d in c} if label != old]
        labels, weights = zip(*sorted(options))
        out[i] = s.with_word(m, deprel=rng.choices(labels, weights=weights)[0])
        labels_changed.add((i, m))
    return out, heads_changed, labels_changed


def precision_recall(order: Sequence[Tuple[int, int]], positives: Set[Tuple[int, int]]) -> Dict[str, float]:
    """Precision of the first k and recall of the first 2k items (k = len(positives))."""
    k = len(positives)
    return {
        "precision_at_k": sum(item in positives for item in order[:k]) / k,
        "recall_at_2k": sum(item in positives for item in order[: 2 * k]) / k,
    }


def ranking(keys: Dict[Tuple[int, int], float]) -> List[Tuple[int, int]]:
    """Items by decreasing key (ties in item order)."""
    return sorted(keys, key=lambda item: (-keys[item], item))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conllu", required=True, type=Path)
    parser.add_argument("--rate", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, default=3, help="corruption draws (seed, seed+1, ...)")
    parser.add_argument("--cache", type=Path, help="pickle of the parsed scores (written if missing)")
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    sentences = list(read_conllu(args.conllu))
    started = time.perf_counter()
    if args.cache is not None and args.cache.exists():
        with open(args.cache, "rb") as handle:
            scores = pickle.load(handle)
    else:
        import spacy_treexp

        scores = spacy_scorer(spacy_treexp.load())(sentences)
        for s in scores:  # dense relation scores, for the pickle
            s.rel = None if s.rel is None else numpy.asarray(s.rel, dtype=numpy.float32)
        if args.cache is not None:
            with open(args.cache, "wb") as handle:
                pickle.dump(scores, handle)
    parse_seconds = time.perf_counter() - started
    results = []
    for seed in range(args.seed, args.seed + args.seeds):
        results.append(run_once(sentences, scores, args.rate, seed))
    summary = {
        "file": os.path.relpath(args.conllu),
        "words": sum(s.n for s in sentences),
        "sentences": len(sentences),
        "rate": args.rate,
        "parse_seconds": round(parse_seconds, 1),
        "runs": results,
        "mean": {
            task: {
                name: {metric: float(numpy.mean([r[task][name][metric] for r in results])) for metric in values}
                for name, values in results[0][task].items()
            }
            for task in ("heads", "labels")
        },
    }
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")


def run_once(sentences: Sequence[ConlluSentence], scores: Sequence, rate: float, seed: int) -> Dict:
    corrupted, heads_changed, labels_changed = corrupt(sentences, rate, seed)
    started = time.perf_counter()
    audits = [audit_sentence(s, sc) for s, sc in zip(corrupted, scores)]
    audit_seconds = time.perf_counter() - started
    head_keys: Dict[str, Dict[Tuple[int, int], float]] = defaultdict(dict)
    label_keys: Dict[str, Dict[Tuple[int, int], float]] = defaultdict(dict)
    rng = numpy.random.default_rng(seed)
    for i, (audit, sc) in enumerate(zip(audits, scores)):
        arc = numpy.asarray(sc.arc, dtype=numpy.float64)
        n = audit.n
        mu = None
        for a in audit.arcs:
            item = (i, a.id)
            head_keys["conditional"][item] = a.head_score
            head_keys["marginal"][item] = 1.0 - a.head_prob
            head_keys["local_softmax"][item] = 1.0 - a.local_head_prob
            head_keys["random"][item] = float(rng.random())
            label_keys["given_gold_head"][item] = a.label_score if a.label_score is not None else 1.0
            label_keys["random"][item] = float(rng.random())
            if sc.rel is not None:
                if mu is None:
                    mu = _marginals(arc)
                column = arc[:, a.id].copy()
                column[a.id] = -numpy.inf
                local_head = int(numpy.argmax(column))
                label = _label(sc.labels, audit.deprels[a.id - 1])
                rel = numpy.asarray(sc.rel[:, a.id], dtype=numpy.float64)  # (n+1, L)
                if label is None:
                    label_keys["tree_marginal"][item] = label_keys["local_softmax"][item] = 1.0
                else:
                    label_keys["tree_marginal"][item] = 1.0 - float((mu[:, a.id] * numpy.exp(rel[:, label])).sum())
                    label_keys["local_softmax"][item] = 1.0 - float(numpy.exp(rel[local_head, label]))
        del n
    invalid = sum(a.tree_problem is not None for a in audits)
    return {
        "seed": seed,
        "head_corruptions": len(heads_changed),
        "label_corruptions": len(labels_changed),
        "invalid_trees": invalid,
        "audit_seconds": round(audit_seconds, 1),
        "heads": {name: precision_recall(ranking(keys), heads_changed) for name, keys in head_keys.items()},
        "labels": {name: precision_recall(ranking(keys), labels_changed) for name, keys in label_keys.items()},
    }


def _marginals(arc: numpy.ndarray) -> numpy.ndarray:
    import torch

    from spacy_treexp.engine import TreeDistribution

    with torch.no_grad():
        return TreeDistribution(torch.from_numpy(arc).unsqueeze(0)).marginals[0].numpy()


def _label(labels: Sequence[str], deprel: str):
    for i, label in enumerate(labels):
        if label == deprel or (label.lower() == "root" and deprel.lower() == "root"):
            return i
    return None


if __name__ == "__main__":
    sys.exit(main())
