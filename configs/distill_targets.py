"""Write a training corpus whose reference Docs carry soft arc targets (knowledge distillation).

Every sentence of ``TRAIN`` (a ``.spacy`` corpus, gold tokens and sentences) is parsed by a
teacher pipeline (default: ``en_treexp_ewt_ensemble``, the shipped parser times the head),
and its calibrated arc marginals ``mu`` are mixed with the gold tree:
``target = weight * mu + (1 - weight) * gold`` (a convex mix of the marginals of two tree
distributions: the marginals of their mixture). ``biaffine_parser`` trains on such a
corpus by the expected negative log-likelihood of a tree drawn from the targets
(``ARC_TARGETS``), so a student learns the teacher's distribution, not only its best tree
(Hinton et al. 2015; Kuncoro et al. 2016 for dependency parsers).

    python configs/distill_targets.py corpus/en_ewt-ud-train.spacy corpus/en_ewt-ud-train-distill.spacy
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy
import torch
from spacy.tokens import Doc, DocBin

from spacy_treexp.pipeline.biaffine_parser import ARC_TARGETS
from spacy_treexp.pipeline.default_model import ENSEMBLE_NAME, load_named
from spacy_treexp.pipeline.extensions import score_writers


def gold_tree(sentence) -> numpy.ndarray:
    """The one-hot ``(n+1, n+1)`` ``[head, dependent]`` of a sentence Span's gold tree."""
    n = len(sentence)
    onehot = numpy.zeros((n + 1, n + 1), dtype="float32")
    for m, token in enumerate(sentence, start=1):
        onehot[0 if token.head.i == token.i else token.head.i - sentence.start + 1, m] = 1.0
    return onehot


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("train", type=Path, help="the .spacy training corpus (gold trees)")
    parser.add_argument("out", type=Path, help="the .spacy corpus to write")
    parser.add_argument("--teacher", default=ENSEMBLE_NAME, help="a pipeline with a parser and its map")
    parser.add_argument("--weight", type=float, default=0.5, help="the teacher's share of each target")
    args = parser.parse_args()
    if not args.train.is_file():
        print(f"distill_targets: no such file: {args.train}", file=sys.stderr)
        return 2
    if args.out.resolve() == args.train.resolve():
        print(
            f"distill_targets: {args.out} is the training corpus itself: write the targets elsewhere", file=sys.stderr
        )
        return 2
    torch.set_num_threads(1)
    start = time.perf_counter()
    nlp = load_named(args.teacher)
    if "tree_expectations" not in nlp.pipe_names:  # one that spacy-treexp train wrote holds its map
        nlp.add_pipe("tree_expectations")
    keep = set(score_writers(nlp)) | {"tree_expectations"}
    upstream = {name for name in nlp.pipe_names if nlp.get_pipe_meta(name).factory in ("tok2vec", "transformer")}
    disabled = [name for name in nlp.pipe_names if name not in keep | upstream]
    references = list(DocBin().from_disk(args.train).get_docs(nlp.vocab))
    out = DocBin(store_user_data=True)
    words = 0
    with nlp.select_pipes(disable=disabled):
        inputs = (
            Doc(
                nlp.vocab,
                words=[t.text for t in r],
                spaces=[bool(t.whitespace_) for t in r],
                sent_starts=[t.is_sent_start for t in r],
            )
            for r in references
        )
        for reference, doc in zip(references, nlp.pipe(inputs, batch_size=16)):
            targets = []
            for sentence, annotation in zip(reference.sents, doc._.tree_expectations):
                teacher = numpy.asarray(annotation.marginals, dtype="float32")
                targets.append((args.weight * teacher + (1.0 - args.weight) * gold_tree(sentence)).astype("float16"))
            reference.user_data[ARC_TARGETS] = targets
            out.add(reference)
            words += len(reference)
    partial = args.out.with_name(args.out.name + ".partial")
    out.to_disk(partial)
    partial.replace(args.out)
    print(
        f"wrote {args.out}: {len(references)} Docs, {words} words, teacher {args.teacher}, weight {args.weight}, {time.perf_counter() - start:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
