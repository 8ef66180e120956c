"""Parsing speed (words/s) of the shipped pipeline on UD English-EWT test, gold tokens.

Runs the whole pipeline (tok2vec, senter, morphologizer, biaffine_parser, which also stores
all arc scores and relation log-probabilities) on the gold-tokenized test Docs, once per
torch thread count, after a warm-up batch; reports the best of ``--repeats`` runs, in wall
time and in the process's CPU time (``*_cpu``: robust on a machine loaded by other work).
With ``--encoder-precision float32 bfloat16`` the parser's BiLSTM precisions are timed
interleaved in one run (``biaffine_parser``'s ``encoder_precision``).

    nice -n 19 python benchmarks/bench_parser_speed.py [--model PATH] [--threads 1 2] [--encoder-precision float32 bfloat16]
"""

import argparse
import json
import time
from pathlib import Path
from typing import List, Optional

import spacy
import torch
from spacy.tokens import Doc
from spacy.training.converters import conllu_to_docs

import spacy_treexp


def main(model: Optional[Path], data: Path, threads: List[int], repeats: int, precisions: List[str]) -> None:
    pipelines = {}
    for precision in precisions:
        config = {"components.biaffine_parser.encoder_precision": precision}
        pipelines[precision] = spacy_treexp.load(config=config) if model is None else spacy.load(model, config=config)
    gold = conllu_to_docs(data.read_text(encoding="utf8"), n_sents=10, no_print=True)
    words = [[token.text for token in doc] for doc in gold]
    n_words = sum(len(w) for w in words)
    results = []
    for n_threads in threads:
        torch.set_num_threads(n_threads)
        best = {precision: float("inf") for precision in pipelines}
        best_cpu = dict(best)
        for nlp in pipelines.values():
            list(nlp.pipe([Doc(nlp.vocab, words=w) for w in words[:5]]))
        for _ in range(repeats):  # the precisions interleaved
            for precision, nlp in pipelines.items():
                docs = [Doc(nlp.vocab, words=w) for w in words]
                start, start_cpu = time.perf_counter(), time.process_time()
                for _ in nlp.pipe(docs, batch_size=64):
                    pass
                best[precision] = min(best[precision], time.perf_counter() - start)
                best_cpu[precision] = min(best_cpu[precision], time.process_time() - start_cpu)
        for precision in pipelines:
            results.append(
                {
                    "torch_threads": n_threads,
                    "encoder_precision": precision,
                    "words": n_words,
                    "seconds": round(best[precision], 2),
                    "words_per_second": round(n_words / best[precision]),
                    "cpu_seconds": round(best_cpu[precision], 2),
                    "words_per_second_cpu": round(n_words / best_cpu[precision]),
                }
            )
    pipe_names = next(iter(pipelines.values())).pipe_names
    print(json.dumps({"pipeline": pipe_names, "results": results}, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None, help="default: the shipped model")
    parser.add_argument("--data", type=Path, required=True, help="a CoNLL-U file (e.g. EWT test)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--encoder-precision",
        nargs="+",
        default=["float32"],
        choices=["float32", "bfloat16"],
        help="the parser's encoder_precision; several: timed interleaved in one run",
    )
    args = parser.parse_args()
    main(args.model, args.data, args.threads, args.repeats, args.encoder_precision)
