"""The Ray backend against a local run: throughput 1 -> 2 workers, overhead against local
``nlp.pipe`` with as many processes, memory per worker, and what 100 million sentences
would take on N nodes.

    OMP_NUM_THREADS=1 python benchmarks/bench_ray.py \
        --data ../shared/data/ud_en_ewt/en_ewt-ud-test.conllu --n 2000 --repeats 2

Each run is the real command, in a process of its own, on the sentences of a CoNLL-U file as a
.txt input (one document per sentence): ``annotate IN -o OUT.jsonl --n-process K``
(local) and ``annotate IN -o DIR --backend ray --workers K`` (JSONL shards of
``--shard-size``; by default 64, the local batch size, so that both runs make the same
batches and the same bytes, which is checked). One Ray instance is started first (its
start is reported apart, as a cluster is started once for a corpus) and each Ray run
joins it with ``--ray-address``; a run's time includes starting Python and loading the
pipeline (in each actor for Ray). Runs are interleaved and the best of
``--repeats`` is kept. "Steady" rates leave out the start of a run: documents written
between the first and the last manifest line, over the time between them. Memory: the
peak resident set of each Ray actor (and of local worker processes), from /proc.

The 100-million-sentence table extrapolates the steady per-worker rate with the measured
1 -> 2 scaling efficiency to nodes of ``--node-cpus`` cores and ``--node-memory`` GiB at
``--node-price`` per hour (assumptions, printed with the table).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _descendants(pid: int) -> list[int]:
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = [], [pid]
    while frontier:
        kids = [p for p, parent in parents.items() if parent == frontier[-1]]
        frontier.pop()
        found += kids
        frontier += kids
    return found


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


class Watch(threading.Thread):
    """Samples, every 50 ms, the lines of a manifest (time of each new count) and the
    resident memory of the worker processes."""

    def __init__(self, manifest: Path, backend: str, k: int, driver: int) -> None:
        super().__init__(daemon=True)
        self.manifest, self.backend, self.k, self.driver = manifest, backend, k, driver
        self.counts: list[tuple[float, int]] = []
        self.memory: dict[int, float] = {}
        self.stop = threading.Event()

    def _workers(self) -> list[int]:
        if self.backend == "ray":  # the actors are processes of the Ray instance started here
            return [p for p in _descendants(os.getpid()) if b"ShardWorker" in _cmdline(p)]
        if self.k == 1:
            return [self.driver]
        me = _cmdline(self.driver)  # nlp.pipe's forked workers
        return [p for p in _descendants(self.driver) if _cmdline(p) == me]

    def run(self) -> None:
        tick = 0
        while not self.stop.is_set():
            try:
                count = len(self.manifest.read_bytes().splitlines())
            except OSError:
                count = 0
            if not self.counts or count != self.counts[-1][1]:
                self.counts.append((time.perf_counter(), count))
            if tick % 4 == 0:
                for pid in self._workers():
                    self.memory[pid] = max(self.memory.get(pid, 0.0), _rss_mb(pid))
            tick += 1
            time.sleep(0.05)


def run_once(
    backend: str, k: int, source: Path, folder: Path, address: str, args: argparse.Namespace
) -> dict[str, Any]:
    common = ["--quiet", "--batch-size", str(args.batch_size), "--samples", str(args.samples)]
    if backend == "local":
        target = folder / f"local{k}.jsonl"
        command = ["annotate", str(source), "-o", str(target), "--n-process", str(k), *common]
        watched, per_line = folder / f"local{k}.jsonl.partial.manifest", 1
    else:
        target = folder / f"ray{k}"
        command = ["annotate", str(source), "-o", str(target), "--backend", "ray", "--workers", str(k)]
        command += ["--output-format", "jsonl", "--shard-size", str(args.shard_size), "--ray-address", address]
        command += common
        watched, per_line = target.with_name(target.name + ".partial") / "_manifest.jsonl", args.shard_size
    start = time.perf_counter()
    driver = subprocess.Popen([sys.executable, "-m", "spacy_treexp", *command])
    watch = Watch(watched, backend, k, driver.pid)
    watch.start()
    status = driver.wait()
    seconds = time.perf_counter() - start
    watch.stop.set()
    watch.join()
    if status != 0:
        raise SystemExit(f"{backend} x{k} failed with status {status}")
    if backend == "local":
        data = target.read_bytes()
    else:
        data = b"".join(p.read_bytes() for p in sorted(target.glob("part-*.jsonl")))
    sentences = sum(len(json.loads(line)["sentences"]) for line in data.splitlines())
    steady = None
    points = [(t, c) for t, c in watch.counts if c >= 2]  # line 1 is the header
    if len(points) >= 2 and points[-1][1] > points[0][1]:
        steady = (points[-1][1] - points[0][1]) * per_line / (points[-1][0] - points[0][0])
    return {
        "backend": backend,
        "workers": k,
        "seconds": seconds,
        "docs": len(data.splitlines()),
        "sentences": sentences,
        "sentences_per_s": sentences / seconds,
        "steady_docs_per_s": steady,
        "worker_rss_mb": sorted(watch.memory.values()),
        "bytes": data,
    }


def compare(one: bytes, other: bytes) -> dict[str, Any]:
    """Whether two JSONL outputs are the same bytes; if not, whether all but floats agree,
    and the largest float difference."""
    worst, same_rest = 0.0, True

    def walk(x: Any, y: Any) -> None:
        nonlocal worst, same_rest
        if isinstance(x, dict) and isinstance(y, dict) and x.keys() == y.keys():
            for key in x:
                walk(x[key], y[key])
        elif isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
            for u, v in zip(x, y):
                walk(u, v)
        elif isinstance(x, float) and isinstance(y, float):
            worst = max(worst, abs(x - y))
        elif x != y:
            same_rest = False

    a, b = one.splitlines(), other.splitlines()
    walk([json.loads(line) for line in a], [json.loads(line) for line in b])
    return {"same_bytes": one == other, "same_but_floats": same_rest, "max_float_difference": worst}


def table_100m(best: dict[tuple[str, int], dict[str, Any]], args: argparse.Namespace) -> str:
    one, two = best[("ray", 1)], best[("ray", 2)]
    docs_per_sentence = one["docs"] / one["sentences"]
    rate = (one["steady_docs_per_s"] or one["docs"] / one["seconds"]) / docs_per_sentence  # sentences/s/worker
    efficiency = min(1.0, two["sentences_per_s"] / (2 * one["sentences_per_s"]))
    rss = max(one["worker_rss_mb"] + two["worker_rss_mb"] or [1000.0]) / 1024
    per_node = max(1, min(args.node_cpus - 1, int(0.8 * args.node_memory / rss)))
    lines = [
        f"Assumptions: {rate:.0f} sentences/s per worker (steady, measured), 1 -> 2 scaling efficiency "
        f"{efficiency:.2f} (measured) applied to every worker; {per_node} workers per node of "
        f"{args.node_cpus} cores / {args.node_memory} GiB (one core left to Ray; {rss:.2f} GiB per worker measured); "
        f"${args.node_price:.2f} per node-hour (assumed on-demand price, not measured); "
        f"{args.startup:.0f} s to start the cluster and load the pipeline (assumed); inputs and outputs on "
        "storage every node reads and writes at the needed rate (not measured).",
        "",
        "| nodes | workers | sentences/s | time | cost |",
        "|---:|---:|---:|---:|---:|",
    ]
    for nodes in args.nodes:
        workers = nodes * per_node
        throughput = workers * rate * efficiency
        seconds = 1e8 / throughput + args.startup
        cost = nodes * args.node_price * seconds / 3600
        lines.append(f"| {nodes} | {workers} | {throughput:,.0f} | {_duration(seconds)} | ${cost:,.0f} |")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.0f} min"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="a CoNLL-U file (its sentences are the documents)")
    parser.add_argument("--n", type=int, default=2000, help="sentences")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--shard-size", type=int, default=64)
    parser.add_argument("--samples", type=int, default=0)
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the Ray instance started here")
    parser.add_argument("--nodes", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--node-cpus", type=int, default=16)
    parser.add_argument("--node-memory", type=float, default=64.0, help="GiB")
    parser.add_argument("--node-price", type=float, default=0.68, help="USD per node-hour (assumed)")
    parser.add_argument("--startup", type=float, default=120.0, help="seconds (assumed)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()

    import ray

    from spacy_treexp.io.conllu import read_conllu

    texts = [s.text or " ".join(s.forms) for s in read_conllu(args.data)][: args.n]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        source = folder / "in.txt"
        source.write_text("".join(" ".join(t.split()) + "\n" for t in texts), encoding="utf-8")
        start = time.perf_counter()
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
        ray_start = time.perf_counter() - start
        address = ray.get_runtime_context().gcs_address
        print(f"Ray started in {ray_start:.1f} s; {len(texts)} documents; load average {os.getloadavg()}", flush=True)
        best: dict[tuple[str, int], dict[str, Any]] = {}
        runs = []
        order = [("local", 1), ("ray", 1), ("local", 2), ("ray", 2)]
        for repeat in range(args.repeats):
            for backend, k in order if repeat % 2 == 0 else order[::-1]:
                for leftover in folder.glob(f"{backend}{k}*"):
                    if leftover.is_dir():
                        for f in leftover.iterdir():
                            f.unlink()
                        leftover.rmdir()
                    else:
                        leftover.unlink()
                result = run_once(backend, k, source, folder, address, args)
                print(
                    f"{backend:5} x{k}: {result['seconds']:.1f} s, {result['sentences_per_s']:.1f} sentences/s, "
                    f"steady {result['steady_docs_per_s'] or 0:.1f} docs/s, worker RSS {result['worker_rss_mb']} MB, "
                    f"load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
                runs.append({key: value for key, value in result.items() if key != "bytes"})
                if (backend, k) not in best or result["seconds"] < best[(backend, k)]["seconds"]:
                    best[(backend, k)] = result
        ray.shutdown()
    same = {k: compare(best[("ray", k)]["bytes"], best[("local", k)]["bytes"]) for k in (1, 2)}
    report = {
        "ray_start_s": ray_start,
        "same_output": same,
        "scaling_ray": best[("ray", 2)]["sentences_per_s"] / best[("ray", 1)]["sentences_per_s"],
        "scaling_local": best[("local", 2)]["sentences_per_s"] / best[("local", 1)]["sentences_per_s"],
        "overhead_1": best[("local", 1)]["sentences_per_s"] / best[("ray", 1)]["sentences_per_s"] - 1,
        "overhead_2": best[("local", 2)]["sentences_per_s"] / best[("ray", 2)]["sentences_per_s"] - 1,
        "runs": runs,
    }
    steady = {key: best[key]["steady_docs_per_s"] for key in best}
    if all(steady.values()):
        report["steady_scaling_ray"] = steady[("ray", 2)] / steady[("ray", 1)]
        report["steady_overhead_1"] = steady[("local", 1)] / steady[("ray", 1)] - 1
        report["steady_overhead_2"] = steady[("local", 2)] / steady[("ray", 2)] - 1
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=1))
    print()
    print(table_100m(best, args))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(main())
