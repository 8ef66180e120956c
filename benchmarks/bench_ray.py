"""The Ray backend against a local run: throughput 1 -> 2 workers, overhead against local
``nlp.pipe`` with as many processes, memory per worker, and what 100 million sentences
would take on N nodes.

    OMP_NUM_THREADS=1 python benchmarks/bench_ray.py \
        --data ../shared/data/ud_en_ewt/en_ewt-ud-test.conllu --n 1000 --n-small 128

Each run is the real command, in a process of its own, on sentences of a CoNLL-U file as
a .txt input (one document per sentence): ``annotate IN -o OUT.jsonl --n-process K``
(local) and ``annotate IN -o DIR --backend ray --workers K`` (JSONL shards of
``--shard-size``; by default 64, the local batch size, so that both runs make the same
batches and so the same bytes, which is checked). One Ray instance is started first (its
start is reported apart: a cluster is started once for a corpus) and each Ray run joins
it with ``--ray-address``.

Per further sentence. Each setting runs on ``--n-small`` and on ``--n`` sentences; the
difference over the difference in sentences is what one more sentence costs once the run
is going (starting Python, Ray's driver and the pipeline in each worker cancel out; they
are reported apart as the start-up). Settings are interleaved; with ``--repeats`` the
least cost is kept.

CPU time. On a machine shared with other jobs, wall times say more about the others than
about us, so every process of a run is accounted for from /proc: the workers, the driver
(with the children it waited for) and, for Ray, Ray's own processes. The CPU seconds per
sentence give the overhead of Ray in work done, and the 1 -> 2 speed-up of a machine with
cores to spare (two cores doing the two-worker run's work per sentence against one doing
the one-worker run's). Only the totals count: Ray turns a prestarted idle worker (counted
as Ray's) into an actor, so the split between roles moves between runs. Memory: the peak
resident set of each worker process.

The 100-million-sentence table divides by the CPU seconds per further sentence of the
two-worker Ray run, for nodes of ``--node-cpus`` cores and ``--node-memory`` GiB at
``--node-price`` per hour (assumptions, printed with the table).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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


TICK = os.sysconf("SC_CLK_TCK")


def _processes() -> dict[int, tuple[int, float]]:
    """Every process: (parent, CPU seconds used so far, user + system)."""
    out = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK)
    return out


def _descendants(pid: int, table: dict[int, tuple[int, float]] | None = None) -> list[int]:
    table = _processes() if table is None else table
    parents = {p: parent for p, (parent, _) in table.items()}
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
    """Samples, every 100 ms, the resident memory of the worker processes and the CPU time
    of every process of the run: the workers, the driver (the command's process tree less
    its workers) and, for Ray, Ray's own processes (those of the instance started here)."""

    def __init__(self, backend: str, k: int, driver: int) -> None:
        super().__init__(daemon=True)
        self.backend, self.k, self.driver = backend, k, driver
        self.memory: dict[int, float] = {}
        self.stop = threading.Event()
        self.baseline = {pid: cpu for pid, (_, cpu) in _processes().items()}
        self.cpu: dict[int, tuple[str, float]] = {}

    def _sample(self) -> None:
        table = _processes()
        driver_tree = set(_descendants(self.driver, table)) | {self.driver}
        ray_tree: set[int] = set()
        if self.backend == "ray":
            ray_tree = set(_descendants(os.getpid(), table)) - driver_tree
            workers = {p for p in ray_tree if b"ShardWorker" in _cmdline(p)}
        elif self.k == 1:
            workers = {self.driver}
        else:  # nlp.pipe's worker processes
            workers = driver_tree - {self.driver}
        for pid in workers:
            self.memory[pid] = max(self.memory.get(pid, 0.0), _rss_mb(pid))
        for pid in driver_tree | ray_tree:
            if pid in table:
                role = "workers" if pid in workers else "driver" if pid in driver_tree else "ray"
                self.cpu[pid] = (role, table[pid][1] - self.baseline.get(pid, 0.0))

    def cpu_seconds(self) -> dict[str, float]:
        out = {"workers": 0.0, "driver": 0.0, "ray": 0.0}
        for role, seconds in self.cpu.values():
            out[role] += seconds
        return out

    def run(self) -> None:
        while not self.stop.is_set():
            self._sample()
            time.sleep(0.1)


def run_once(
    backend: str, k: int, source: Path, folder: Path, address: str, args: argparse.Namespace
) -> dict[str, Any]:
    common = ["--quiet", "--batch-size", str(args.batch_size), "--samples", str(args.samples)]
    if backend == "local":
        target = folder / f"local{k}.jsonl"
        command = ["annotate", str(source), "-o", str(target), "--n-process", str(k), *common]
    else:
        target = folder / f"ray{k}"
        command = ["annotate", str(source), "-o", str(target), "--backend", "ray", "--workers", str(k)]
        command += ["--output-format", "jsonl", "--shard-size", str(args.shard_size), "--ray-address", address]
        command += common
    start = time.perf_counter()
    driver = subprocess.Popen([sys.executable, "-m", "spacy_treexp", *command])
    watch = Watch(backend, k, driver.pid)
    watch.start()
    _, code, usage = os.wait4(driver.pid, 0)  # the driver's CPU and that of the children it waited for
    seconds = time.perf_counter() - start
    status = driver.returncode = os.waitstatus_to_exitcode(code)
    watch.stop.set()
    watch.join()
    cpu = watch.cpu_seconds()
    tree = usage.ru_utime + usage.ru_stime
    if backend == "local" and k == 1:
        cpu["workers"], cpu["driver"] = tree, 0.0
    elif backend == "local":
        cpu["workers"] = min(cpu["workers"], tree)
        cpu["driver"] = tree - cpu["workers"]
    else:
        cpu["driver"] = tree
    if status != 0:
        raise SystemExit(f"{backend} x{k} failed with status {status}")
    if backend == "local":
        data = target.read_bytes()
    else:
        data = b"".join(p.read_bytes() for p in sorted(target.glob("part-*.jsonl")))
    sentences = sum(len(json.loads(line)["sentences"]) for line in data.splitlines())
    return {
        "backend": backend,
        "workers": k,
        "seconds": seconds,
        "docs": len(data.splitlines()),
        "sentences": sentences,
        "sentences_per_s": sentences / seconds,
        "worker_rss_mb": sorted(watch.memory.values()),
        "cpu_s": cpu,
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


def table_100m(cpu_per_sentence: float, rss_gib: float, args: argparse.Namespace) -> str:
    """Time and cost of 100 million sentences on N nodes, from the CPU seconds per further
    sentence of the two-worker Ray run (the actors, the driver and Ray's processes)."""
    rate = 1 / cpu_per_sentence  # sentences per second per busy core
    per_node = max(1, min(args.node_cpus - 1, int(0.8 * args.node_memory / rss_gib)))
    lines = [
        f"Assumptions: {rate:.0f} sentences/s per worker on a core of its own (measured: CPU seconds per "
        "further sentence of the 2-worker Ray run, its actors, driver and Ray's processes together); workers "
        f"scale linearly across cores and nodes (measured only from 1 to 2); {per_node} workers per node of "
        f"{args.node_cpus} cores / {args.node_memory:.0f} GiB (one core left to Ray and the driver; "
        f"{rss_gib:.2f} GiB per worker measured); ${args.node_price:.2f} per node-hour (assumed on-demand "
        f"price of such a node, not measured); {args.startup:.0f} s to start the cluster and load the "
        "pipelines (assumed); inputs and outputs on storage that every node reads and writes at the needed "
        "rate (not measured); CPU only (no GPU measured).",
        "",
        "| nodes | workers | sentences/s | time | cost |",
        "|---:|---:|---:|---:|---:|",
    ]
    for nodes in args.nodes:
        workers = nodes * per_node
        throughput = workers * rate
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


def marginal(small: dict[str, Any], large: dict[str, Any]) -> dict[str, Any]:
    """Per sentence, between a small and a large run of one setting: what each further
    sentence costs once the run is going (start-up cancels out), and the start-up itself."""
    sentences = large["sentences"] - small["sentences"]
    wall = (large["seconds"] - small["seconds"]) / sentences
    cpu = {role: (large["cpu_s"][role] - small["cpu_s"][role]) / sentences for role in large["cpu_s"]}
    return {
        "wall": wall,
        "cpu": sum(cpu.values()),
        "cpu_workers": cpu["workers"],
        "cpu_roles": cpu,
        "startup_wall": small["seconds"] - wall * small["sentences"],
        "startup_cpu": sum(small["cpu_s"].values()) - sum(cpu.values()) * small["sentences"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="a CoNLL-U file (its sentences are the documents)")
    parser.add_argument("--n", type=int, default=1000, help="sentences of the large runs")
    parser.add_argument("--n-small", type=int, default=128, help="sentences of the small runs")
    parser.add_argument("--repeats", type=int, default=1)
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
    parser.add_argument("--keep", type=Path, help="keep each setting's last output in this folder")
    args = parser.parse_args()

    import ray

    from spacy_treexp.io.conllu import read_conllu

    texts = [" ".join((s.text or " ".join(s.forms)).split()) for s in read_conllu(args.data)][: args.n]
    settings = [("local", 1), ("ray", 1), ("local", 2), ("ray", 2)]
    runs: list[dict[str, Any]] = []
    pairs: dict[tuple[str, int], list[dict[str, Any]]] = {key: [] for key in settings}
    outputs: dict[tuple[str, int], bytes] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        inputs = {}
        for size, count in (("small", args.n_small), ("large", len(texts))):
            inputs[size] = folder / f"in_{size}.txt"
            inputs[size].write_text("".join(t + "\n" for t in texts[:count]), encoding="utf-8")
        start = time.perf_counter()
        ray.init(num_cpus=args.cpus, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
        ray_start = time.perf_counter() - start
        address = ray.get_runtime_context().gcs_address
        print(f"Ray started in {ray_start:.1f} s; {len(texts)} documents; load {os.getloadavg()}", flush=True)
        for repeat in range(args.repeats):
            for backend, k in settings if repeat % 2 == 0 else settings[::-1]:
                pair = {}
                for size in ("small", "large"):
                    work = folder / f"{backend}{k}_{size}"
                    work.mkdir()
                    result = run_once(backend, k, inputs[size], work, address, args)
                    shutil.rmtree(work)
                    print(
                        f"{backend:5} x{k} {size}: {result['seconds']:.1f} s, {result['sentences']} sentences, "
                        f"CPU s {json.dumps({key: round(v, 1) for key, v in result['cpu_s'].items()})}, "
                        f"worker RSS {[round(m) for m in result['worker_rss_mb']]} MB, "
                        f"load {os.getloadavg()[0]:.1f}",
                        flush=True,
                    )
                    outputs[(backend, k)] = result.pop("bytes")
                    if args.keep:
                        args.keep.mkdir(parents=True, exist_ok=True)
                        (args.keep / f"{backend}{k}_{size}.jsonl").write_bytes(outputs[(backend, k)])
                    runs.append({"repeat": repeat, "size": size, **result})
                    pair[size] = result
                pairs[(backend, k)].append({**marginal(pair["small"], pair["large"]), "large": pair["large"]})
        ray.shutdown()

    def least(key: tuple[str, int], field: str) -> float:
        return min(p[field] for p in pairs[key])

    wall = {key: least(key, "wall") for key in settings}
    cpu = {key: least(key, "cpu") for key in settings}
    workers = {key: least(key, "cpu_workers") for key in settings}

    report: dict[str, Any] = {
        "ray_start_s": ray_start,
        "load_average_at_end": os.getloadavg(),
        "same_output": {k: compare(outputs[("ray", k)], outputs[("local", k)]) for k in (1, 2)},
        "marginal_ms_per_sentence": {
            f"{b}{k}": {
                "wall": 1000 * wall[(b, k)],
                "cpu": 1000 * cpu[(b, k)],
                "cpu_workers": 1000 * workers[(b, k)],
                "roles": {r: 1000 * v for r, v in min(pairs[(b, k)], key=lambda p: p["cpu"])["cpu_roles"].items()},
            }
            for b, k in settings
        },
        "startup": {
            f"{b}{k}": {"wall_s": least((b, k), "startup_wall"), "cpu_s": least((b, k), "startup_cpu")}
            for b, k in settings
        },
        "wall_scaling_ray": wall[("ray", 1)] / wall[("ray", 2)],
        "wall_scaling_local": wall[("local", 1)] / wall[("local", 2)],
        "wall_overhead_1": wall[("ray", 1)] / wall[("local", 1)] - 1,
        "wall_overhead_2": wall[("ray", 2)] / wall[("local", 2)] - 1,
        "cpu_overhead_1": cpu[("ray", 1)] / cpu[("local", 1)] - 1,
        "cpu_overhead_2": cpu[("ray", 2)] / cpu[("local", 2)] - 1,
        # Two free cores doing the two-worker run's CPU work per sentence, against one core
        # doing the one-worker run's: the 1 -> 2 speed-up a machine with cores to spare gives.
        "scaling_ray_from_cpu": 2 * cpu[("ray", 1)] / cpu[("ray", 2)],
        "scaling_local_from_cpu": 2 * cpu[("local", 1)] / cpu[("local", 2)],
        "worker_rss_mb": {f"{b}{k}": pairs[(b, k)][-1]["large"]["worker_rss_mb"] for b, k in settings},
        "runs": runs,
    }
    print(json.dumps({k: v for k, v in report.items() if k != "runs"}, indent=1))
    print()
    rss = max(max(pairs[("ray", k)][-1]["large"]["worker_rss_mb"] or [1000.0]) for k in (1, 2)) / 1024
    print(table_100m(cpu[("ray", 2)], rss, args))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(main())
