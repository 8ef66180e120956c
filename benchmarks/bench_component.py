"""Cost of the tree_expectations component over the parser alone, and docs/s.

On N sentences of UD English-EWT test (gold tokens and sentences), measures:

* the pipeline up to the parser (tok2vec, tagger, biaffine_parser; no senter);
* ``tree_expectations`` on the parsed Docs with ``n_samples=0`` and ``n_samples=10``
  (seeded: one generator per sentence; unseeded: torch's global one); overhead = its time
  / the parser's time, best of interleaved repeats (the machine's load drifts);
* docs/s and words/s of the whole pipeline (with its senter) on the raw sentence texts.

Usage (2 CPU cores here; pass --threads to pin torch's threads):

    nice -n 19 python benchmarks/bench_component.py --data ../shared/data/ud_en_ewt/en_ewt-ud-test.conllu [--model PATH] [--n 2000]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import spacy
import torch
from spacy.tokens import Doc

import spacy_treexp
from spacy_treexp.io import read_conllu


def load(model):
    nlp = spacy_treexp.load() if model is None else spacy.load(model)
    if "tree_expectations" in nlp.pipe_names:
        nlp.remove_pipe("tree_expectations")
    return nlp


def timed(function):
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="spaCy pipeline (default: the shipped model)")
    parser.add_argument("--data", required=True, help="a CoNLL-U file (e.g. EWT test)")
    parser.add_argument("--n", type=int, default=2000, help="sentences")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    nlp = load(args.model)
    items = []
    for sentence in read_conllu(Path(args.data)):
        items.append((sentence.forms, sentence.spaces))
        if len(items) == args.n:
            break
    words = sum(len(item[0]) for item in items)
    senters = [n for n in nlp.pipe_names if nlp.get_pipe_meta(n).factory in ("senter", "sentencizer")]

    def gold_docs():
        return [Doc(nlp.vocab, words=w, spaces=sp, sent_starts=[True] + [False] * (len(w) - 1)) for w, sp in items]

    def run(pipeline, docs):
        with pipeline.select_pipes(disable=senters):
            return list(pipeline.pipe(docs, batch_size=args.batch_size))

    run(nlp, gold_docs()[:50])  # warm up
    results = {"sentences": len(items), "words": words, "torch_threads": torch.get_num_threads()}
    settings = {
        "samples_0": {"n_samples": 0},
        "samples_10_seeded": {"n_samples": 10, "seed": 0},
        "samples_10_unseeded": {"n_samples": 10, "seed": None},
    }
    components = {
        name: spacy.blank("en").add_pipe("tree_expectations", config=config) for name, config in settings.items()
    }
    # Interleaved repeats (best of each): the machine's load drifts between runs.
    best = {"parser": float("inf"), **{name: float("inf") for name in settings}}
    for _ in range(args.repeats):
        seconds, parsed = timed(lambda: run(nlp, gold_docs()))
        best["parser"] = min(best["parser"], seconds)
        blobs = [d.to_bytes() for d in parsed]
        for name, component in components.items():
            docs = [Doc(nlp.vocab).from_bytes(b) for b in blobs]
            seconds, _ = timed(lambda: list(component.pipe(docs, batch_size=args.batch_size)))
            best[name] = min(best[name], seconds)
    results["parser_s"] = best["parser"]
    for name in settings:
        results[name] = {"component_s": best[name], "overhead_vs_parser": best[name] / best["parser"]}
    full = load(args.model)
    full.add_pipe("tree_expectations")
    texts = [" ".join(item[0]) for item in items]
    list(full.pipe(texts[:50]))
    seconds = timed(lambda: list(full.pipe(texts, batch_size=args.batch_size)))[0]
    results["full_pipeline_raw_text"] = {"docs_per_s": len(texts) / seconds, "words_per_s": words / seconds}
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
