"""The two shipped parsers as mixture members (``spacy_treexp.load(ensemble="mixture")``,
``--model en_treexp_ewt_mixture``) against the shipped pipeline as it loads (issue 21, parts
2-4), through the pipelines themselves.

Both pipelines give the same tree (checked, word by word); the mixture pipeline adds the
members' mixture values of that tree. Measured on each CoNLL-U file (gold tokens and
sentences, one sentence per Doc):

1. **Sentence risk**: AUROC for "the parser's tree has a wrong head" of the shipped
   pipeline's ``sent._.error_probability`` and of the mixture pipeline's
   ``sent._.mixture_error_probability`` (and of the shipped pipeline's own MC-dropout
   mixture), 95% bootstrap intervals over sentences, and the paired difference.
2. **Per word**: AUROC of 1 − ``token._.head_prob`` and 1 − ``token._.mixture_head_prob``
   for "this word's head is wrong"; the arc ECE (15 equal-width bins, the confidence of the
   parser's head) of each, beside the 95th percentile of the ECE a perfectly calibrated model
   with those confidences shows by chance (``chance_ece_band``), overall and per genre.
3. **Cost**: CPU seconds of both whole pipelines (``tree_expectations`` included) on the raw
   texts of the first ``--timing-sentences`` sentences of the first file (one torch thread;
   best of ``--repeats`` interleaved runs) and their ratio.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/mixture_of_parsers.py \
        --conllu .../en_ewt-ud-dev.conllu .../en_ewt-ud-test.conllu \
        > docs/eval_ewt/mixture_of_parsers.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence

import numpy
import torch
from epistemic import annotate, gold_docs, rounded
from members_which_pays import commit, paired

from spacy_treexp.evaluation.calibration_report import genres
from spacy_treexp.evaluation.epistemic import auroc_table, has_attachment_error
from spacy_treexp.evaluation.metrics import chance_ece_band, equal_width_ece
from spacy_treexp.evaluation.run import machine
from spacy_treexp.evaluation.scores import text_docs
from spacy_treexp.io import read_conllu
from spacy_treexp.pipeline.default_model import MIXTURE_NAME, load_named

RISK_PAIRS = (
    ("mixture: mixture_error_probability", "shipped: error_probability"),
    ("mixture: mixture_error_probability", "shipped: mixture_error_probability (2 MC-dropout members)"),
)
WORD_PAIRS = (("mixture: 1 - mixture_head_prob", "shipped: 1 - head_prob"),)


def pipelines() -> Dict[str, object]:
    """The shipped pipeline as ``spacy_treexp.load()`` gives it and the mixture pipeline,
    each with a default ``tree_expectations`` that keeps the scores."""
    out = {}
    for name, model in (("shipped", None), ("mixture", MIXTURE_NAME)):
        nlp = load_named(model)
        nlp.add_pipe("tree_expectations", config={"keep_scores": True})  # epistemic.annotate reads them
        out[name] = nlp
    return out


def calibration(confidence: numpy.ndarray, correct: numpy.ndarray, groups: Sequence[str]) -> Dict:
    """Arc ECE [chance band] overall and per genre."""
    out = {}
    labels = numpy.asarray(groups)
    for group in ["all"] + sorted(set(groups) - {"all"}):
        mask = numpy.ones(len(labels), bool) if group == "all" else labels == group
        ece, band = equal_width_ece(confidence[mask], correct[mask]), chance_ece_band(confidence[mask])
        out[group] = {"ece": round(ece, 4), "band": round(band, 4), "below_band": bool(ece < band)}
    return out


def on_file(pipes: Dict, path: Path, limit: int) -> Dict:
    sentences = list(read_conllu(path))[: limit or None]
    records = {name: annotate(nlp, gold_docs(nlp, sentences))[0] for name, nlp in pipes.items()}
    shipped, mixture = records["shipped"], records["mixture"]
    same = sum(numpy.array_equal(a.heads, b.heads) for a, b in zip(shipped, mixture))
    gold = [numpy.asarray(s.heads[1:]) for s in sentences]
    heads = [r.heads for r in shipped]
    wrong = has_attachment_error(heads, gold)
    sentence_scores = {
        "shipped: error_probability": numpy.array([r.error_probability for r in shipped]),
        "shipped: mixture_error_probability (2 MC-dropout members)": numpy.array(
            [r.mixture_error_probability for r in shipped]
        ),
        "mixture: error_probability": numpy.array([r.error_probability for r in mixture]),
        "mixture: mixture_error_probability": numpy.array([r.mixture_error_probability for r in mixture]),
    }
    word_wrong = numpy.concatenate([h != g for h, g in zip(heads, gold)])
    head_prob = numpy.concatenate([r.head_prob for r in shipped]).astype(numpy.float64)
    mixture_head_prob = numpy.concatenate([r.mixture_head_prob for r in mixture]).astype(numpy.float64)
    word_scores = {"shipped: 1 - head_prob": 1 - head_prob, "mixture: 1 - mixture_head_prob": 1 - mixture_head_prob}
    word_genres: List[str] = [g for g, s in zip(genres([s.sent_id for s in sentences]), sentences) for _ in range(s.n)]
    return {
        "file": path.name,
        "sentences": len(sentences),
        "words": int(word_wrong.size),
        "same_tree": f"{same}/{len(sentences)}",
        "uas": round(100 * float((~word_wrong).mean()), 2),
        "with_error": round(float(wrong.mean()), 4),
        "risk_auroc": rounded(auroc_table(sentence_scores, wrong)),
        "risk_paired": paired(sentence_scores, RISK_PAIRS, wrong),
        "word_auroc": rounded(auroc_table(word_scores, word_wrong)),
        "word_paired": paired(word_scores, WORD_PAIRS, word_wrong),
        "arc_ece": {
            "shipped: head_prob": calibration(head_prob, ~word_wrong, word_genres),
            "mixture: mixture_head_prob": calibration(mixture_head_prob, ~word_wrong, word_genres),
        },
    }


def speed(pipes: Dict, texts: Sequence[str], repeats: int) -> Dict:
    words = sum(len(doc) for doc in text_docs(pipes["shipped"], texts))
    for nlp in pipes.values():
        list(nlp.pipe(texts[:20]))  # warm up
    best = {name: float("inf") for name in pipes}
    for _ in range(repeats):  # interleaved: the machine's load drifts
        for name, nlp in pipes.items():
            start = time.process_time()
            list(nlp.pipe(texts, batch_size=256))
            best[name] = min(best[name], time.process_time() - start)
    return {
        "sentences": len(texts),
        "words": words,
        "cpu_seconds": {k: round(v, 3) for k, v in best.items()},
        "ratio_mixture_to_shipped": round(best["mixture"] / best["shipped"], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conllu", nargs="+", required=True, help="CoNLL-U files with gold trees (e.g. EWT dev, test)")
    parser.add_argument("--limit", type=int, default=0, help="first N sentences of each file (0: all)")
    parser.add_argument("--timing-sentences", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    paths = [Path(p) for p in args.conllu]
    for path in paths:
        if not path.is_file():
            sys.exit(f"no such file: {path}")
    torch.set_num_threads(1)
    pipes = pipelines()
    report: Dict = {
        "machine": machine(),
        "pipelines": {
            "shipped": "spacy_treexp.load() + tree_expectations (its 2 MC-dropout head members)",
            "mixture": f"{MIXTURE_NAME}: the same + the head for en_core_web_sm as a mixture member (equal weights, "
            "both under the shipped parser's map), no MC-dropout members",
        },
        "commit": commit(),
        "files": [on_file(pipes, path, args.limit) for path in paths],
    }
    print(json.dumps(report, indent=1), file=sys.stderr, flush=True)
    first = [s.text or " ".join(s.forms) for s in read_conllu(paths[0])]
    report["speed"] = speed(pipes, first[: args.timing_sentences], args.repeats)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
