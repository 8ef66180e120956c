"""Cost of the tree_expectations component over the parser alone, and docs/s.

On N sentences of UD English-EWT test (gold tokens and sentences), measures:

* the pipeline up to the parser (tok2vec, tagger, biaffine_parser; no senter);
* the same pipeline plus ``tree_expectations`` with ``n_samples=0`` and ``n_samples=10``
  (overhead = extra time / parser-only time), and the component alone on parsed Docs;
* docs/s and words/s of the whole pipeline (with its senter) on the raw sentence texts.

Usage (2 CPU cores here; pass --threads to pin torch's threads):

    nice -n 19 python benchmarks/bench_component.py [--model PATH] [--n 2000]
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
from spacy_treexp.cli import Reader, make_doc

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "ud_en_ewt" / "en_ewt-ud-test.conllu"


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
    parser.add_argument("--data", default=str(DEFAULT_DATA))
    parser.add_argument("--n", type=int, default=2000, help="sentences")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    nlp = load(args.model)
    items = []
    for item, _ in Reader(Path(args.data), on_bad=lambda line, message: None):
        items.append(item)
        if len(items) == args.n:
            break
    words = sum(len(item[0]) for item in items)
    senters = [n for n in nlp.pipe_names if nlp.get_pipe_meta(n).factory in ("senter", "sentencizer")]

    def gold_docs():
        return [make_doc(nlp, item) for item in items]

    def run(pipeline, docs):
        with pipeline.select_pipes(disable=senters):
            return list(pipeline.pipe(docs, batch_size=args.batch_size))

    run(nlp, gold_docs()[:50])  # warm up
    results = {"sentences": len(items), "words": words, "torch_threads": torch.get_num_threads()}
    parser_only = min(timed(lambda: run(nlp, gold_docs()))[0] for _ in range(args.repeats))
    results["parser_s"] = parser_only
    for n_samples in (0, 10):
        with_te = load(args.model)
        with_te.add_pipe("tree_expectations", config={"n_samples": n_samples})
        run(with_te, gold_docs()[:50])
        total = min(timed(lambda: run(with_te, gold_docs()))[0] for _ in range(args.repeats))
        parsed = run(nlp, gold_docs())
        component = with_te.get_pipe("tree_expectations")
        alone = min(
            timed(lambda: list(component.pipe([Doc(d.vocab).from_bytes(d.to_bytes()) for d in parsed], batch_size=args.batch_size)))[0]
            for _ in range(args.repeats)
        )
        # the component's own time, without the Doc copies made to rerun it
        copies = min(timed(lambda: [Doc(d.vocab).from_bytes(d.to_bytes()) for d in parsed])[0] for _ in range(args.repeats))
        results[f"samples_{n_samples}"] = {
            "pipeline_s": total,
            "overhead_vs_parser": (total - parser_only) / parser_only,
            "component_alone_s": alone - copies,
            "component_share_of_parser": (alone - copies) / parser_only,
        }
    full = load(args.model)
    full.add_pipe("tree_expectations")
    texts = [" ".join(item[0]) for item in items]
    list(full.pipe(texts[:50]))
    seconds = min(timed(lambda: list(full.pipe(texts, batch_size=args.batch_size)))[0] for _ in range(args.repeats))
    results["full_pipeline_raw_text"] = {"docs_per_s": len(texts) / seconds, "words_per_s": words / seconds}
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
