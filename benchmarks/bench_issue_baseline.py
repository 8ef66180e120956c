"""Words/s of today's pipelines against the pipeline as an issue found it: that commit's own code and model.

``bench_shipped_pipeline.py`` compares the pipeline with itself minus the components added since
(today's code throughout). That is a proxy, and a strict one: it credits none of the speed that
today's code gained on the way (batched decoding, length-grouped BiLSTM batches, BLAS products).
This script measures the goal as a user would: it checks out the commit the issue was filed
against in a ``git worktree`` with a virtual environment of its own (``pip install -c
constraints.txt -e WORKTREE``; the package index only), and times that commit's ``spacy_treexp.load()``
beside today's pipelines, each in its own process, the processes alternating run by run.

Each process: one torch thread, Docs of 10 UD English-EWT sentences with gold tokens and no
sentence boundaries (as ``bench_shipped_pipeline.py``'s speed), ``nlp.pipe`` with batches of 64,
best of ``--repeats`` passes in wall time and in the process's CPU time (robust on a loaded
machine), after a warm-up on 5 Docs. The ratio of a run is a pipeline's words/s over the issue's
pipeline's in the same run; the summary gives each ratio's median over the runs.

    OMP_NUM_THREADS=1 python benchmarks/bench_issue_baseline.py --conllu PATH/en_ewt-ud-test.conllu \
        --ref 954dd24 --pipelines shipped ensemble mixture --runs 3 \
        --output docs/eval_ewt/issue20_baseline_speed.json

``--ref 954dd24`` is the last commit before the first commit of issue 20 (the shipped pipeline
then: paragraph breaks, tok2vec, senter, morphologizer and the parser). The worktree and its
venv stay under ``--workdir`` (``build/`` is ignored by git) for the next run; ``git worktree
remove build/issue_baseline/REF/tree`` and deleting the folder undo them.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

#: Today's pipelines by name, as ``spacy_treexp.load`` builds them.
PIPELINES = {"shipped": {}, "ensemble": {"ensemble": True}, "mixture": {"ensemble": "mixture"}}
#: The issue's pipeline: ``spacy_treexp.load()`` of the checked-out commit.
AS_FOUND = "as_found"
REPO = Path(__file__).resolve().parent.parent


def time_pipeline(kind: str, conllu: Path, repeats: int) -> Dict[str, object]:
    """Best-of-``repeats`` words/s of one pipeline in this process. Uses nothing but ``spacy`` and
    ``spacy_treexp.load``, so that an old checkout of the package runs it as well."""
    import torch
    from spacy.tokens import Doc
    from spacy.training.converters import conllu_to_docs

    import spacy_treexp

    torch.set_num_threads(1)
    nlp = spacy_treexp.load(**PIPELINES.get(kind, {}))
    references = list(conllu_to_docs(conllu.read_text(encoding="utf8"), n_sents=10, no_print=True))
    words = [[t.text for t in r] for r in references]
    spaces = [[bool(t.whitespace_) for t in r] for r in references]
    n_words = sum(map(len, words))
    list(nlp.pipe([Doc(nlp.vocab, words=w, spaces=s) for w, s in zip(words[:5], spaces[:5])]))
    best = best_cpu = float("inf")
    for _ in range(repeats):
        docs = [Doc(nlp.vocab, words=w, spaces=s) for w, s in zip(words, spaces)]
        start, start_cpu = time.perf_counter(), time.process_time()
        for _doc in nlp.pipe(docs, batch_size=64):
            pass
        best = min(best, time.perf_counter() - start)
        best_cpu = min(best_cpu, time.process_time() - start_cpu)
    return {
        "pipeline": nlp.pipe_names,
        "words": n_words,
        "words_per_second": round(n_words / best),
        "words_per_cpu_second": round(n_words / best_cpu),
    }


def checkout(ref: str, workdir: Path) -> Path:
    """The Python of a virtual environment holding ``ref`` of this repository, installed as its
    README said (``-c constraints.txt``); built once under ``workdir`` and reused."""
    tree, venv = workdir / "tree", workdir / "venv"
    python = venv / "bin" / "python"
    if python.is_file() and (tree / ".installed").is_file():
        return python
    if not tree.is_dir():
        subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), ref], check=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "-q", "-c", str(tree / "constraints.txt"), "-e", str(tree)]
    subprocess.run(pip, check=True)
    (tree / ".installed").write_text(ref + "\n", encoding="utf8")
    return python


def run_child(python: Path, kind: str, conllu: Path, repeats: int) -> Dict[str, object]:
    """``time_pipeline`` in a fresh process of ``python``, one torch/BLAS thread."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    command = [str(python), str(Path(__file__).resolve()), "--child", kind, "--conllu", str(conllu)]
    command += ["--repeats", str(repeats)]
    done = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(
    conllu: Path, ref: str, pipelines: Sequence[str], runs: int, repeats: int, workdir: Path, output: Optional[Path]
) -> Dict[str, object]:
    old_python = checkout(ref, workdir)
    per_run: List[Dict[str, Dict[str, object]]] = []
    for run in range(runs):
        timings = {AS_FOUND: run_child(old_python, AS_FOUND, conllu, repeats)}
        for kind in pipelines:
            timings[kind] = run_child(Path(sys.executable), kind, conllu, repeats)
        for kind in pipelines:
            for key in ("words_per_second", "words_per_cpu_second"):
                ratio = float(timings[kind][key]) / float(timings[AS_FOUND][key])  # type: ignore[arg-type]
                timings[kind][key.replace("words_per", "ratio")] = round(ratio, 3)
        per_run.append(timings)
        print(json.dumps({"run": run, **{k: v["words_per_second"] for k, v in timings.items()}}), flush=True)
    summary = {
        kind: {
            key: round(statistics.median(float(t[kind][key]) for t in per_run), 3)  # type: ignore[arg-type]
            for key in ("words_per_second", "words_per_cpu_second", "ratio_second", "ratio_cpu_second")
            if kind != AS_FOUND or key.startswith("words")
        }
        for kind in (AS_FOUND, *pipelines)
    }
    result = {
        "data": conllu.name,
        "ref": ref,
        "torch_threads": 1,
        "load_average_at_start": os.getloadavg()[0],
        "runs": per_run,
        "median": summary,
    }
    if output is not None:
        partial = output.with_suffix(output.suffix + ".partial")
        partial.write_text(json.dumps(result, indent=2) + "\n", encoding="utf8")
        partial.replace(output)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conllu", type=Path, required=True, help="UD English-EWT test (CoNLL-U)")
    parser.add_argument("--ref", default="954dd24", help="the commit the issue was filed against")
    parser.add_argument("--pipelines", nargs="+", default=["shipped", "ensemble"], choices=sorted(PIPELINES))
    parser.add_argument("--runs", type=int, default=3, help="alternating runs (one process per pipeline each)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per process")
    parser.add_argument(
        "--workdir", type=Path, default=REPO / "build" / "issue_baseline", help="worktree and venv (built once)"
    )
    parser.add_argument("--output", type=Path, default=None, help="also write the JSON here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(time_pipeline(args.child, args.conllu.resolve(), args.repeats)))
    else:
        workdir = args.workdir / args.ref
        outcome = main(
            args.conllu.resolve(), args.ref, args.pipelines, args.runs, args.repeats, workdir.resolve(), args.output
        )
        print(json.dumps(outcome["median"], indent=2))
