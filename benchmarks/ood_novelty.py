"""Out-of-domain detection by encoder novelty (issue 21, part 4): how unfamiliar a sentence
is to the parser, as the distance of its tok2vec vectors from the training data's
(``spacy_treexp.calibration.novelty``), beside the tree entropy per word.

Nothing is fitted on the evaluation sets: the novelty reference is fitted on the tok2vec
vectors of ``--train`` (its first ``--train-sentences``, default all) (unlabelled text; the
parser's own training data); the logistic combination of novelty and entropy per word is
fitted on ``--dev`` (in domain) against ``benchmarks/data/ood_dev_sentences.tsv`` (160
out-of-domain sentences we wrote, 22 styles, none shared with the evaluation set); the AUROC
is then measured on ``--test`` against ``benchmarks/data/ood_sentences.tsv`` (130 sentences,
12 styles). Every side goes through the pipeline's tokenizer, one sentence per Doc.

    OMP_NUM_THREADS=1 python benchmarks/ood_novelty.py --train .../en_ewt-ud-train.conllu \
        --dev .../en_ewt-ud-dev.conllu --test .../en_ewt-ud-test.conllu \
        [--write-map spacy_treexp/models/en_treexp_ewt/biaffine_parser/treexp_calibration.json]

The token vectors are ``doc.tensor`` once the whole pipeline has run (what
``tree_expectations`` reads for ``sent._.novelty``; in the shipped pipeline the tagger's
tok2vec writes it last), or with ``--encoder NAME`` that component's output. ``--write-map``
adds the fitted reference to a calibration map file (the shipped one: ``sent._.novelty``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy
import torch

import spacy_treexp
from spacy_treexp.calibration import CalibrationMap
from spacy_treexp.calibration.novelty import fit_novelty
from spacy_treexp.evaluation.epistemic import auroc_table
from spacy_treexp.io import read_conllu

DATA = Path(__file__).parent / "data"


def read_tsv(path: Path) -> List[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.split("\t", 1)[1].strip() for line in lines if line.strip() and not line.startswith("#")]


def one_sentence(doc):
    for i, token in enumerate(doc):
        token.is_sent_start = i == 0
    return doc


def run(nlp, texts: Sequence[str], encoder: Optional[str]) -> Tuple[List[numpy.ndarray], numpy.ndarray]:
    """Each text's token vectors and tree entropy per word, one sentence per Doc: the vectors
    in ``doc.tensor`` once the whole pipeline has run (what ``tree_expectations`` reads), or
    the output of the component ``encoder``."""
    senters = [n for n in nlp.pipe_names if nlp.get_pipe_meta(n).factory in ("senter", "sentencizer")]
    docs = [one_sentence(nlp.make_doc(text)) for text in texts]
    tensors, entropy = [], []
    with nlp.select_pipes(disable=senters):
        for doc in nlp.pipe(docs, batch_size=128):
            tensors.append(doc.tensor.astype(numpy.float32))
            entropy.append(doc._.tree_expectations[0].entropy_per_word)
    if encoder:
        with nlp.select_pipes(enable=[encoder]):
            tensors = [doc.tensor.astype(numpy.float32) for doc in nlp.pipe(texts, batch_size=128)]
    return tensors, numpy.array(entropy)


def fit_logistic(features: numpy.ndarray, positive: numpy.ndarray, l2: float = 1e-3) -> numpy.ndarray:
    """Weights (bias last) of a logistic regression on standardised features, classes weighted
    equally (L-BFGS, ridge ``l2``); returns the weights for the raw features."""
    mean, scale = features.mean(0), features.std(0) + 1e-12
    x = torch.from_numpy((features - mean) / scale)
    y = torch.from_numpy(positive.astype(numpy.float64))
    weight = torch.where(y > 0, 0.5 / y.mean(), 0.5 / (1 - y.mean()))
    w = torch.zeros(x.shape[1] + 1, dtype=torch.float64, requires_grad=True)
    optimiser = torch.optim.LBFGS([w], max_iter=200, line_search_fn="strong_wolfe")

    def closure():
        optimiser.zero_grad()
        logits = x @ w[:-1] + w[-1]
        loss = (weight * torch.nn.functional.binary_cross_entropy_with_logits(logits, y, reduction="none")).mean()
        loss = loss + 0.5 * l2 * (w[:-1] ** 2).sum()
        loss.backward()
        return loss

    optimiser.step(closure)
    coef = w.detach().numpy()
    raw = coef[:-1] / scale
    return numpy.r_[raw, coef[-1] - (raw * mean).sum()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--train", required=True, help="in-domain text to fit the reference on (CoNLL-U)")
    parser.add_argument("--dev", required=True, help="in-domain CoNLL-U to fit the combination on")
    parser.add_argument("--test", required=True, help="in-domain CoNLL-U to evaluate on")
    parser.add_argument("--ood-dev", default=str(DATA / "ood_dev_sentences.tsv"))
    parser.add_argument("--ood", default=str(DATA / "ood_sentences.tsv"))
    parser.add_argument("--train-sentences", type=int, default=0, help="first N sentences of --train (0: all)")
    parser.add_argument("--size", type=int, default=2048, help="reference directions")
    parser.add_argument(
        "--encoder",
        default=None,
        help="read this component's doc.tensor (default: the pipeline's last, as the component does)",
    )
    parser.add_argument("--write-map", default=None, help="add the reference to the calibration map in this JSON file")
    args = parser.parse_args()
    torch.set_num_threads(1)
    start = time.process_time()
    nlp = spacy_treexp.load(config={"components.biaffine_parser.members": 0})
    nlp.add_pipe("tree_expectations")
    texts = {
        "train": [s.text or " ".join(s.forms) for s in read_conllu(args.train)][: args.train_sentences or None],
        "dev": [s.text or " ".join(s.forms) for s in read_conllu(args.dev)],
        "test": [s.text or " ".join(s.forms) for s in read_conllu(args.test)],
        "ood_dev": read_tsv(Path(args.ood_dev)),
        "ood": read_tsv(Path(args.ood)),
    }
    runs = {name: run(nlp, values, args.encoder) for name, values in texts.items()}
    vecs = {name: tensors for name, (tensors, _) in runs.items()}
    reference = fit_novelty(numpy.concatenate(vecs["train"]), size=args.size)
    report: Dict = {
        "reference": {
            "tokens": int(sum(len(v) for v in vecs["train"])),
            "size": args.size,
            "width": reference.width,
            "encoder": args.encoder or "doc.tensor after the pipeline",
        }
    }
    features = {}
    for name in ("dev", "test", "ood_dev", "ood"):
        novelty = numpy.array([reference.sentence_novelty(v) for v in vecs[name]])
        features[name] = numpy.c_[novelty, runs[name][1]]
    fit_x = numpy.r_[features["dev"], features["ood_dev"]]
    fit_y = numpy.r_[numpy.zeros(len(features["dev"]), bool), numpy.ones(len(features["ood_dev"]), bool)]
    coef = fit_logistic(fit_x, fit_y)
    report["combination"] = {"novelty": coef[0], "entropy_per_word": coef[1], "bias": coef[2]}
    for label, (inside, outside) in {
        "fit (dev vs ood_dev)": ("dev", "ood_dev"),
        "eval (test vs ood)": ("test", "ood"),
    }.items():
        x = numpy.r_[features[inside], features[outside]]
        y = numpy.r_[numpy.zeros(len(features[inside]), bool), numpy.ones(len(features[outside]), bool)]
        scores = {"novelty": x[:, 0], "entropy_per_word": x[:, 1], "combination": x @ coef[:2] + coef[2]}
        table = auroc_table(scores, y)
        report[label] = {k: {m: round(v, 4) for m, v in row.items()} for k, row in table.items()}
    report["cpu_seconds"] = round(time.process_time() - start, 1)
    if args.write_map:
        calibration = CalibrationMap.from_disk(args.write_map)
        fit = dict(calibration.fit)
        fit["novelty"] = {
            "data": f"{len(texts['train'])} sentences of {Path(args.train).name} (text only)",
            "command": "python benchmarks/ood_novelty.py --train TRAIN --dev DEV --test TEST --write-map MAP",
            **report["reference"],
        }
        dataclasses.replace(calibration, novelty=reference, fit=fit).to_disk(args.write_map)
        report["wrote"] = args.write_map
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
