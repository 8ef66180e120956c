"""Cost of the tree_expectations component over the parser alone, and docs/s.

On N sentences of UD English-EWT test (gold tokens and sentences), measures:

* the pipeline up to the parser (tok2vec, tagger, biaffine_parser; no senter);
* ``tree_expectations`` (added to the loaded pipeline, so with the parser's calibration map)
  on the parsed Docs with ``n_samples=0`` and ``n_samples=10``
  (seeded: one generator per sentence; unseeded: torch's global one); overhead = its time
  / the parser's time, best of interleaved repeats (the machine's load drifts), in wall
  seconds and in this process's CPU seconds (``*_cpu``: steadier on a shared machine
  when torch runs one thread, ``--threads 1``);
* docs/s and words/s of the whole pipeline (with its senter) on the raw sentence texts
  (``--skip-full`` leaves it out).

``--members 0`` runs the parser without its MC-dropout members, and so the component
without the epistemic part (the mixture's exact head MI and its sampled I(tree; member)).

``--no-map`` runs the component on the parser's scores as they are (no calibration map, so
no ``sent._.novelty`` either): the bare annotation core, as the component was before the map.

``--profile FILE`` writes a cProfile of the component (``n_samples=10``, seeded, and
``n_samples=0``) on the parsed Docs instead of the comparison (read it with ``pstats``).

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


def load(model, members=None):
    config = {} if members is None else {"components.biaffine_parser.members": members}
    nlp = spacy_treexp.load(config=config) if model is None else spacy.load(model, config=config)
    if "tree_expectations" in nlp.pipe_names:
        nlp.remove_pipe("tree_expectations")
    return nlp


def timed(function):
    """(wall seconds, CPU seconds of this process, result) of ``function()``."""
    start, cpu = time.perf_counter(), time.process_time()
    result = function()
    return time.perf_counter() - start, time.process_time() - cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None, help="spaCy pipeline (default: the shipped model)")
    parser.add_argument("--data", required=True, help="a CoNLL-U file (e.g. EWT test)")
    parser.add_argument("--n", type=int, default=2000, help="sentences")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=5, help="best of this many interleaved runs")
    parser.add_argument("--skip-full", action="store_true", help="skip the whole-pipeline docs/s")
    parser.add_argument("--members", type=int, default=None, help="the parser's MC-dropout members (default: its own)")
    parser.add_argument("--no-map", action="store_true", help="the component without the parser's calibration map")
    parser.add_argument("--profile", default=None, help="write a cProfile of the component here instead")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    nlp = load(args.model, args.members)
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
    # added to a copy of the loaded pipeline, as a user would: the component then finds the
    # parser's calibration map (and its novelty reference) in the model folder
    host = load(args.model, args.members)
    components = {
        name: host.add_pipe("tree_expectations", name=name, config=config) for name, config in settings.items()
    }
    if args.no_map:
        for component in components.values():
            component.calibration = None
    results["calibration_map"] = not args.no_map
    if args.profile:
        profile(nlp, components, run(nlp, gold_docs()), args)
        return
    warm = [d.to_bytes() for d in run(nlp, gold_docs()[:50])]
    for component in components.values():  # first calls: numba's compiled kernels are loaded
        list(component.pipe([Doc(nlp.vocab).from_bytes(b) for b in warm]))
    # Interleaved repeats (best of each): the machine's load drifts between runs.
    best = {name: [float("inf"), float("inf")] for name in ["parser", *settings]}
    for _ in range(args.repeats):
        wall, cpu, parsed = timed(lambda: run(nlp, gold_docs()))
        best["parser"] = [min(best["parser"][0], wall), min(best["parser"][1], cpu)]
        blobs = [d.to_bytes() for d in parsed]
        for name, component in components.items():
            docs = [Doc(nlp.vocab).from_bytes(b) for b in blobs]
            wall, cpu, _ = timed(lambda: list(component.pipe(docs, batch_size=args.batch_size)))
            best[name] = [min(best[name][0], wall), min(best[name][1], cpu)]
    results["parser_s"], results["parser_cpu_s"] = best["parser"]
    for name in settings:
        results[name] = {
            "component_s": best[name][0],
            "overhead_vs_parser": best[name][0] / best["parser"][0],
            "component_cpu_s": best[name][1],
            "overhead_vs_parser_cpu": best[name][1] / best["parser"][1],
        }
    if not args.skip_full:
        full = load(args.model, args.members)
        full.add_pipe("tree_expectations")
        texts = [" ".join(item[0]) for item in items]
        list(full.pipe(texts[:50]))
        seconds = timed(lambda: list(full.pipe(texts, batch_size=args.batch_size)))[0]
        results["full_pipeline_raw_text"] = {"docs_per_s": len(texts) / seconds, "words_per_s": words / seconds}
    print(json.dumps(results, indent=2))


def profile(nlp, components, parsed, args) -> None:
    """cProfile the component with ``n_samples=10`` (seeded) and ``n_samples=0`` into ``args.profile``."""
    import cProfile
    import pstats

    blobs = [d.to_bytes() for d in parsed]
    for component in components.values():  # first calls (numba's kernels load) left out
        list(component.pipe([Doc(nlp.vocab).from_bytes(b) for b in blobs[:50]]))
    profiler = cProfile.Profile()
    for name in ("samples_10_seeded", "samples_0"):
        docs = [Doc(nlp.vocab).from_bytes(b) for b in blobs]
        profiler.enable()
        list(components[name].pipe(docs, batch_size=args.batch_size))
        profiler.disable()
    profiler.dump_stats(args.profile)
    pstats.Stats(args.profile).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
