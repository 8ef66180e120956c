"""Peak memory and time of one long sentence through the shipped pipeline + tree_expectations.

Each length runs in a fresh process (peak RSS is per process), on one torch thread:

    python benchmarks/bench_long_sentences.py --lengths 250 500 1000 2000 3000 [--samples 0]

A sentence is ``n`` words drawn from a fixed list, with no punctuation, given to the pipeline
as one sentence (its ``senter`` disabled) so that the length is exactly ``n``. The figures
are the process's peak resident memory (``ru_maxrss``), the parse time and the
tree_expectations time.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

WORDS = (
    "the old man saw a dog with his telescope near the river while children played in green fields "
    "and birds sang over quiet houses where people read long books about distant cities"
).split()

CHILD = """
import json, resource, sys, time
import torch
torch.set_num_threads(1)
import spacy_treexp
from spacy.tokens import Doc
n, samples, words = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].split()
nlp = spacy_treexp.load()
nlp.add_pipe("tree_expectations", config={"n_samples": samples})
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
doc = Doc(nlp.vocab, words=[words[i % len(words)] for i in range(n)], sent_starts=[True] + [False] * (n - 1))
t0 = time.perf_counter()
with nlp.select_pipes(disable=["senter", "tree_expectations"]):
    doc = nlp(doc)
t1 = time.perf_counter()
doc = nlp.get_pipe("tree_expectations")(doc)
t2 = time.perf_counter()
assert len(list(doc.sents)) == 1 and doc[0]._.head_prob is not None
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"words": n, "parse_s": round(t1 - t0, 2), "tree_expectations_s": round(t2 - t1, 2),
                  "peak_rss_mb": round(peak / 1024), "model_loaded_rss_mb": round(base / 1024)}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[250, 500, 1000, 2000, 3000])
    parser.add_argument("--samples", type=int, default=0)
    parser.add_argument("--timeout", type=int, default=600)
    args = parser.parse_args()
    for n in args.lengths:
        command = [sys.executable, "-c", CHILD, str(n), str(args.samples), " ".join(WORDS)]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            print(json.dumps({"words": n, "error": f"timeout after {args.timeout} s"}), flush=True)
            continue
        if result.returncode != 0:
            last = (result.stderr.strip().splitlines() or ["?"])[-1]
            print(json.dumps({"words": n, "error": f"exit {result.returncode}: {last}"}), flush=True)
            continue
        print(result.stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
