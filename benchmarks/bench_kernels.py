"""log Z + marginals: the fused CPU kernel vs the torch path vs torch-struct, in one run.

    python benchmarks/bench_kernels.py                      # batch 64, n = 30 100 300, 1 and 2 threads
    python benchmarks/bench_kernels.py --sweep 20 40 60 80 120 160 200 300 400

Times ``TreeDistribution(scores, lengths)`` then ``.log_partition`` and ``.marginals``
(single root, float32 scores ~ N(0, 2²), full-length sentences) three ways:

* **native**: the fused numba kernel (``spacy_treexp/engine/fused.py``) at every length, also
  above the dispatch limit ``NATIVE_MAX_LENGTH`` (lifted here for the measurement);
* **torch**: the pure-torch path (``SPACY_TREEXP_NATIVE=0``: batched LAPACK LU and solve);
* **torch-struct**: ``NonProjectiveDependencyCRF(log_potentials, lengths)`` then ``.partition``
  and ``.marginals``, exactly as torch-struct 0.5 ships them (single root, its eps = 1e-5
  inside the Laplacian; ROOT scores on the diagonal, converted outside the timing). It is not
  a dependency of this package: ``pip install --no-deps torch-struct==0.5`` (the ``bench``
  extra; its declared dependencies pin an old torch, and it needs none beyond torch).

Calls are interleaved (every method once per round) so that the load of a shared machine
hits all alike; medians of wall-clock time and of this process's CPU time per call. The
``--sweep`` table gives native / torch at more lengths: the crossover where LAPACK's blocked
kernels start to win, which sets ``NATIVE_MAX_LENGTH``. Each table also prints how far
native and torch-struct are from the torch path (max |Δ log Z|, max |Δ μ|).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
import warnings
from typing import Callable, Dict, Iterator, List, Sequence, Tuple

import torch

from spacy_treexp import TreeDistribution
from spacy_treexp.engine import fused
from spacy_treexp.engine.native import NATIVE_ENV

Method = Callable[[], Tuple[torch.Tensor, torch.Tensor]]


@contextlib.contextmanager
def native(on: bool) -> Iterator[None]:
    """The fused kernel on (at every length) or off, for the block."""
    previous_env, previous_limit = os.environ.get(NATIVE_ENV), fused.NATIVE_MAX_LENGTH
    os.environ[NATIVE_ENV] = "1" if on else "0"
    fused.NATIVE_MAX_LENGTH = 1 << 30
    try:
        yield
    finally:
        fused.NATIVE_MAX_LENGTH = previous_limit
        if previous_env is None:
            del os.environ[NATIVE_ENV]
        else:
            os.environ[NATIVE_ENV] = previous_env


def ours(scores: torch.Tensor, lengths: torch.Tensor, use_native: bool) -> Method:
    def run() -> Tuple[torch.Tensor, torch.Tensor]:
        with native(use_native):
            dist = TreeDistribution(scores, lengths)
            return dist.log_partition, dist.marginals

    return run


def torch_struct(scores: torch.Tensor, lengths: torch.Tensor) -> Method:
    """torch-struct's call on its own layout; its marginals put back into ours for the checks."""
    from torch_struct import NonProjectiveDependencyCRF

    potentials = scores[:, 1:, 1:].clone()
    potentials.diagonal(dim1=-2, dim2=-1).copy_(scores[:, 0, 1:])  # ROOT -> m on the diagonal

    def run() -> Tuple[torch.Tensor, torch.Tensor]:
        dist = NonProjectiveDependencyCRF(potentials, lengths)
        return dist.partition, dist.marginals

    return run


def as_ours(marginals: torch.Tensor) -> torch.Tensor:
    """torch-struct's (B, N, N) marginals (ROOT on the diagonal) in our (B, N+1, N+1) layout."""
    batch, n, _ = marginals.shape
    out = torch.zeros(batch, n + 1, n + 1, dtype=marginals.dtype)
    out[:, 1:, 1:] = marginals
    out[:, 0, 1:] = marginals.diagonal(dim1=-2, dim2=-1)
    out[:, 1:, 1:].diagonal(dim1=-2, dim2=-1).zero_()
    return out


def interleaved(methods: Dict[str, Method], repeats: int) -> Dict[str, Tuple[float, float]]:
    """Median (wall ms, CPU ms) per call of each method, one call of each per round."""
    for method in methods.values():
        method()
    wall: Dict[str, List[float]] = {name: [] for name in methods}
    cpu: Dict[str, List[float]] = {name: [] for name in methods}
    for _ in range(repeats):
        for name, method in methods.items():
            start_wall, start_cpu = time.perf_counter(), time.process_time()
            method()
            wall[name].append(1e3 * (time.perf_counter() - start_wall))
            cpu[name].append(1e3 * (time.process_time() - start_cpu))
    return {name: (statistics.median(wall[name]), statistics.median(cpu[name])) for name in methods}


def inputs(batch: int, n: int, seed: int) -> Tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed + n)
    return torch.randn(batch, n + 1, n + 1, generator=gen) * 2, torch.full((batch,), n, dtype=torch.long)


def deviations(methods: Dict[str, Method], reference: str) -> Dict[str, Tuple[float, float]]:
    """max |Δ log Z| and max |Δ μ| of each method from ``reference``."""
    log_z, marginals = methods[reference]()
    out = {}
    for name, method in methods.items():
        other_z, other_mu = method()
        if other_mu.shape != marginals.shape:
            other_mu = as_ours(other_mu)
        out[name] = (float((other_z - log_z).abs().max()), float((other_mu - marginals).abs().max()))
    return out


def repeats_for(n: int, base: int) -> int:
    return max(3, base if n <= 100 else base // 4)


def main_table(args: argparse.Namespace) -> None:
    print(f"\nbatch {args.batch}, float32, single root; median of interleaved calls (ms per call)")
    print(
        f"{'threads':>7} {'n':>4} {'native':>9} {'torch':>9} {'t-struct':>9} "
        f"{'native/ts':>9} {'torch/ts':>8} {'native/torch':>12} {'(CPU) native/ts':>15} "
        f"{'|dlogZ| native':>14} {'|dmu| native':>12} {'|dlogZ| ts':>10} {'|dmu| ts':>9}"
    )
    for threads in args.threads:
        torch.set_num_threads(threads)
        for n in args.lengths:
            scores, lengths = inputs(args.batch, n, args.seed)
            methods = {
                "native": ours(scores, lengths, True),
                "torch": ours(scores, lengths, False),
                "ts": torch_struct(scores, lengths),
            }
            times = interleaved(methods, repeats_for(n, args.repeats))
            dev = deviations(methods, "torch")
            (nw, nc), (tw, _), (sw, sc) = times["native"], times["torch"], times["ts"]
            print(
                f"{threads:>7} {n:>4} {nw:>9.2f} {tw:>9.2f} {sw:>9.2f} {nw / sw:>9.2f} {tw / sw:>8.2f} "
                f"{nw / tw:>12.2f} {nc / sc:>15.2f} {dev['native'][0]:>14.1e} {dev['native'][1]:>12.1e} "
                f"{dev['ts'][0]:>10.1e} {dev['ts'][1]:>9.1e}",
                flush=True,
            )


def sweep_table(args: argparse.Namespace, lengths: Sequence[int]) -> None:
    print(f"\ncrossover sweep: batch {args.batch}, float32, native / torch (median ms per call)")
    print(f"{'threads':>7} {'n':>4} {'native':>10} {'torch':>10} {'native/torch':>12} {'(CPU) native/torch':>18}")
    for threads in args.threads:
        torch.set_num_threads(threads)
        for n in lengths:
            scores, lengths_ = inputs(args.batch, n, args.seed)
            times = interleaved(
                {"native": ours(scores, lengths_, True), "torch": ours(scores, lengths_, False)},
                repeats_for(n, args.repeats),
            )
            (nw, nc), (tw, tc) = times["native"], times["torch"]
            print(f"{threads:>7} {n:>4} {nw:>10.2f} {tw:>10.2f} {nw / tw:>12.2f} {nc / tc:>18.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lengths", type=int, nargs="+", default=[30, 100, 300])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch threads, one table row each")
    parser.add_argument("--repeats", type=int, default=20, help="rounds at n <= 100 (a quarter above, at least 3)")
    parser.add_argument("--sweep", type=int, nargs="*", default=None, help="lengths for the crossover table only")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message=".*arg_constraints.*")  # torch-struct's Distribution
    load = os.getloadavg()[0]
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load average {load:.1f} at the start")
    if args.sweep:
        sweep_table(args, args.sweep)
    else:
        main_table(args)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
