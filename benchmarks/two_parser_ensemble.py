"""Two parsers with different encoders as a product of experts: how much would it parse better?

Reads a gold CoNLL-U (gold tokens and sentences), scores every sentence with the shipped
pipeline's parser and with the head for en_core_web_sm (``STOCK_HEAD_PATH``; its own
tok2vec copy, so no en_core_web_sm is needed), each with its own calibration map, and
reports UAS and LAS of each parser's MAP tree and of the MAP tree of the summed arc scores
(the product of the two tree distributions, as Stanza's ensembles sum their members'
scores), whose relations are the best by the summed relation log-probabilities at the chosen
head (labels matched by name; ``ROOT`` is UD's ``root``). Nothing is fitted on the file read.
Also the sentence risk of the full parser's tree ("it has an attachment error"): AUROC of
1 − p(tree) under the full parser, under the head, and of their geometric mean (the two
parsers' log-probabilities summed), each at its map's ``risk_temperature``.

    OMP_NUM_THREADS=1 python benchmarks/two_parser_ensemble.py --conllu PATH/en_ewt-ud-test.conllu
"""

import argparse
import json
import sys
from pathlib import Path
from typing import Dict, List, Sequence

import numpy
import spacy
import torch

import spacy_treexp
from spacy_treexp.annotate.records import SentenceScores
from spacy_treexp.calibration.map import calibrate_sentences
from spacy_treexp.evaluation.conllu import GoldSentence, read_conllu
from spacy_treexp.evaluation.epistemic import map_trees, parse_log_probs
from spacy_treexp.evaluation.metrics import auroc
from spacy_treexp.evaluation.scores import component_scores
from spacy_treexp.pipeline.default_model import STOCK_HEAD_PATH


def calibrated_scores(nlp, gold: Sequence[GoldSentence]) -> List[SentenceScores]:
    """The parser's scores of every gold sentence with its pipeline's calibration map applied."""
    if "tree_expectations" not in nlp.pipe_names:
        nlp.add_pipe("tree_expectations")
    return calibrate_sentences(component_scores(nlp, gold), nlp.get_pipe("tree_expectations").calibration)


def relation(records: Sequence[SentenceScores], head: int, dependent: int) -> str:
    """The best relation of the arc by the records' summed log-probabilities (by name)."""
    totals: Dict[str, float] = {}
    for record in records:
        for label, value in zip(record.labels or [], numpy.asarray(record.rel[head, dependent])):
            totals[label] = totals.get(label, 0.0) + float(value)
    best = max(totals, key=lambda label: totals[label])
    return "root" if best == "ROOT" else best


def attachment(gold: Sequence[GoldSentence], trees, parsers: Sequence[Sequence[SentenceScores]]) -> Dict[str, float]:
    words = unlabelled = labelled = 0
    for i, (sentence, tree) in enumerate(zip(gold, trees)):
        for m, head in enumerate(tree, start=1):
            words += 1
            if int(head) != int(sentence.heads[m]):
                continue
            unlabelled += 1
            labelled += relation([p[i] for p in parsers], int(head), m) == sentence.deprels[m - 1]
    return {"uas": round(100 * unlabelled / words, 2), "las": round(100 * labelled / words, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conllu", required=True, type=Path, help="gold CoNLL-U (e.g. EWT test)")
    parser.add_argument("--head", type=Path, default=STOCK_HEAD_PATH, help="the second pipeline (default: the head)")
    args = parser.parse_args()
    if not args.conllu.is_file():
        print(f"two_parser_ensemble: no such file: {args.conllu}", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    gold = read_conllu(args.conllu)
    full_nlp, head_nlp = spacy_treexp.load(), spacy.load(args.head)
    full, head = calibrated_scores(full_nlp, gold), calibrated_scores(head_nlp, gold)
    trees = map_trees([s.arc for s in full])
    wrong = numpy.array([bool((t != numpy.asarray(g.heads)[1:]).any()) for t, g in zip(trees, gold)])
    log_p = {}
    for name, nlp, scores in (("full parser", full_nlp, full), ("head", head_nlp, head)):
        temperature = nlp.get_pipe("tree_expectations").calibration.risk_temperature or 1.0
        log_p[name] = parse_log_probs([s.arc for s in scores], trees, temperature)
    report = {
        "sentences": len(gold),
        "full parser": attachment(gold, map_trees([s.arc for s in full]), [full]),
        "head": attachment(gold, map_trees([s.arc for s in head]), [head]),
        "product of both": attachment(gold, map_trees([a.arc + b.arc for a, b in zip(full, head)]), [full, head]),
        "risk of the full parser's tree (AUROC)": {
            "sentences with an error": round(float(wrong.mean()), 4),
            "full parser": round(auroc(-log_p["full parser"], wrong), 4),
            "head": round(auroc(-log_p["head"], wrong), 4),
            "geometric mean": round(auroc(-(log_p["full parser"] + log_p["head"]), wrong), 4),
        },
    }
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
