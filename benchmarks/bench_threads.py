"""Torch threads for the shipped pipeline: each fixed setting against the default, idle and loaded.

    python benchmarks/bench_threads.py --conllu ../shared/data/ud_en_ewt/en_ewt-ud-dev.conllu

Runs, each in a fresh process, the shipped pipeline + ``tree_expectations`` on three
workloads -- tiny documents one at a time (``nlp.pipe(batch_size=1)``), EWT sentences in
batches of 64, and a handful of 200-word documents -- with ``SPACY_TREEXP_THREADS`` unset (the
default policy) and set to 1 and 2, on an idle machine and with a competing busy process per
other core (the "loaded" case), in the main process and in two worker processes
(``n_process=2``, fork and spawn). Prints seconds and each setting's ratio to the best.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CHILD = r"""
import json, os, sys, time
import multiprocessing
workload, n_process, start_method, conllu = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
if n_process > 1:
    multiprocessing.set_start_method(start_method, force=True)
import spacy_treexp
from spacy_treexp.io import read_conllu
nlp = spacy_treexp.load()
nlp.add_pipe("tree_expectations")
sentences = [" ".join(s.forms) for s in read_conllu(conllu)]
if workload == "tiny":
    texts, batch = [" ".join(s.split()[:4]) for s in sentences[:300]], 1
elif workload == "ewt":
    texts, batch = sentences[:600], 64
else:
    words = " ".join(sentences).split()
    texts, batch = [" ".join(words[i * 200:(i + 1) * 200]) for i in range(12)], 4
list(nlp.pipe(texts[:4], batch_size=batch))
start = time.perf_counter()
docs = list(nlp.pipe(texts, batch_size=batch, n_process=n_process))
assert len(docs) == len(texts)
print(json.dumps({"seconds": time.perf_counter() - start}))
"""

HOG = "while True:\n    pass\n"


def run(workload: str, threads: str, n_process: int, start_method: str, conllu: str) -> float:
    env = dict(os.environ)
    env.pop("SPACY_TREEXP_THREADS", None)
    if threads != "default":
        env["SPACY_TREEXP_THREADS"] = threads
    command = [sys.executable, "-c", CHILD, workload, str(n_process), start_method, conllu]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(result.stderr[-2000:])
    return json.loads(result.stdout.strip().splitlines()[-1])["seconds"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conllu", required=True, help="sentences to parse (e.g. EWT dev)")
    parser.add_argument("--workloads", nargs="+", default=["tiny", "ewt", "long"])
    parser.add_argument("--repeats", type=int, default=2, help="best of this many runs")
    args = parser.parse_args()
    if not Path(args.conllu).is_file():
        sys.exit(f"bench_threads: no such file: {args.conllu}")
    settings = ["default", "1", "2"]
    cases = [("main", 1, "fork"), ("workers-fork", 2, "fork"), ("workers-spawn", 2, "spawn")]
    rows = []
    for machine in ("idle", "loaded"):
        hogs = []
        if machine == "loaded":
            hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(max(1, (os.cpu_count() or 2) - 1))]
            time.sleep(1.0)
        try:
            for workload in args.workloads:
                for case, n_process, start_method in cases:
                    if n_process > 1 and (machine == "loaded" or workload != "ewt"):
                        continue  # workers: the EWT workload idle (on a loaded 2-core machine they measure the hog)
                    best = {}
                    for _ in range(args.repeats):
                        for setting in settings:  # interleaved: the machine's speed drifts
                            seconds = run(workload, setting, n_process, start_method, args.conllu)
                            best[setting] = min(best.get(setting, float("inf")), seconds)
                    fastest = min(best.values())
                    row = {"machine": machine, "workload": workload, "process": case}
                    row.update({f"threads={k}": round(v, 2) for k, v in best.items()})
                    row["default/best"] = round(best["default"] / fastest, 3)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        finally:
            for hog in hogs:
                hog.kill()
    worst = max(row["default/best"] for row in rows)
    print(json.dumps({"worst default/best": worst, "cpus": os.cpu_count()}))


if __name__ == "__main__":
    main()
