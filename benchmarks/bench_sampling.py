"""Speed of the tree samplers against a plain per-sample Wilson loop in Python.

    python benchmarks/bench_sampling.py            # CPU, 2 threads, about 2-3 minutes
    python benchmarks/bench_sampling.py --quick    # smaller, for a smoke test
    python benchmarks/bench_sampling.py --section swor   # one table (throughput, swor, acceptance, cuda, scale)
    python benchmarks/bench_sampling.py --section scale --threads 1   # cost against the score scale
    python benchmarks/bench_sampling.py --section scale --threads 1 --cpu-time --methods sbs colbourn

On a shared, busy machine spinning OpenMP threads that compete for cores make every
2-thread timing several times slower; there ``--threads 1 --cpu-time`` measures the
process's CPU time instead of wall time (what one idle core would take), which other jobs
on the machine disturb much less. (OMP_WAIT_POLICY=PASSIVE also avoids the spinning, but
on an idle machine it makes every small kernel several times slower.)

Prints these tables:
1. trees per second at n = 10, 30, 60 (batch 64, 100 trees per sentence) for every method
   (sbs / trie: k = 100 distinct trees), and the ratio to the baseline: Wilson-Marginal
   written as a plain Python loop, one sample, one word and one step at a time (the way
   public samplers are written);
2. sampling without replacement, k = 20, batch 64, n = 30, in milliseconds (2b: the spread
   of that figure over 41 calls);
3. the same as k grows to 1000 (time per tree should stay flat: O(k n^3)); beside SBS, the
   time of its unavoidable kernels alone (see :func:`sbs_kernel_floor`);
4. Wilson-Reject's expected tries Z_multi / Z_single (exact) and measured, against the
   (1 + 1/n)^(n-1) <= e bound of Stanojević (2022), for random scores and for
   "parser-like" scores (a random gold tree's arcs +10 over N(0, 2^2) noise);
5. on CUDA (if present), SBS at n = 100;
6. (``--section scale``, not in ``all``) every sampler's time per call at scores x1, x30, x100
   and x1000 of the same N(0, 1) draw (float64), and its ratio to x1: n = 30 and 60 with B = 64
   (100 samples, 20 trees without replacement per sentence) and B = 1 (100), and Colbourn at
   n = 200, B = 4 (100). The
   engine's inference (log Z, marginals) is computed before timing: it is the engine's cost,
   not the sampler's. Beside the ratios, the sampler's counted work at x1000
   (:mod:`spacy_treexp.engine.sampling.work`): L-hat factorisations and engine refactorisations.
   ``--methods sbs colbourn``: those samplers only (B = 64 and B = 1 at n = 30 and 60);
   ``--float32``: the same draw in float32.
7. (``--section auto``, not in ``all``) ``sampler="auto"`` against Colbourn and Wilson-Marginal
   at n = 10, 30, 60, 100 on random, parser-like and peaked (x3, x10) float32 scores; run it
   with ``--threads 1 --cpu-time``. With ``--conllu FILE`` (e.g. UD EWT dev), 7b: the same on
   the shipped EWT parser's arc scores, by length range (needs spaCy and the shipped model).
7c. (``--section fit-walks``, not in ``all``) what :mod:`spacy_treexp.engine.sampling.auto`'s walk
   constants are fitted on: microseconds per tree of Wilson-Marginal and Colbourn on
   parser-like scores, B = 64, 100 trees, n = 10..100, beside the cost model's predictions;
8. (``--section targets``) the issue's sampling targets in one run, fused CPU kernels against
   the pure-torch samplers (``SPACY_TREEXP_NATIVE=0``) on the same batch (64, n = 30).
The fused kernels run wherever numba is installed (``SPACY_TREEXP_NATIVE=0`` turns them off);
they use ``--threads`` threads too.
Scores are i.i.d. N(0, 1) log-potentials (fixed seed) unless said otherwise.
"""

from __future__ import annotations

import argparse
import bisect
import random
import statistics
import time

import torch

from spacy_treexp import TreeDistribution
from spacy_treexp.engine.sampling import sample, sample_without_replacement, wilson_reject_acceptance, work
from spacy_treexp.engine.sampling.wilson import wilson_reject


def python_wilson_marginal(dist: TreeDistribution, samples: int, rng: random.Random) -> list[list[int]]:
    """Baseline: Wilson-Marginal as a per-sample, per-word Python loop (loop-erased walks)."""
    weights = dist.scores.double().masked_fill(~dist.arc_mask, float("-inf")).exp().tolist()
    root_marginals = dist.marginals[:, 0, :].double().tolist()
    trees = []
    for b, n in enumerate(dist.lengths.tolist()):
        words = list(range(1, n + 1))
        cumulative = {}
        for m in words:  # walk from m to a word head (ROOT arcs removed)
            total, running = 0.0, []
            for h in words:
                total += weights[b][h][m]
                running.append(total)
            cumulative[m] = running
        root_cdf, total = [], 0.0
        for m in words:
            total += root_marginals[b][m]
            root_cdf.append(total)
        for _ in range(samples):
            root_child = words[bisect.bisect_right(root_cdf, rng.random() * root_cdf[-1])]
            heads = [-1] * (n + 1)
            heads[root_child] = 0
            in_tree = [False] * (n + 1)
            in_tree[0] = in_tree[root_child] = True
            for start in words:
                node = start
                while not in_tree[node]:
                    running = cumulative[node]
                    heads[node] = words[bisect.bisect_right(running, rng.random() * running[-1])]
                    node = heads[node]
                node = start
                while not in_tree[node]:
                    in_tree[node] = True
                    node = heads[node]
            trees.append(heads)
    return trees


CLOCK = time.perf_counter  # or time.process_time with --cpu-time


def timed(function, repeats: int) -> float:
    """Median time in seconds of ``function()`` after one warm-up call; a call over 2 s is
    timed once more, warm, and the faster of the two counts (the first call pays for
    fresh memory: hundreds of MB of per-beam inverses at k = 1000)."""
    start = CLOCK()
    function()
    first = CLOCK() - start
    if first > 2.0:
        start = CLOCK()
        function()
        return min(first, CLOCK() - start)
    times = []
    for _ in range(repeats):
        start = CLOCK()
        function()
        times.append(CLOCK() - start)
    return statistics.median(times)


def random_dist(batch: int, n: int, seed: int, single_root: bool = True, device: str = "cpu") -> TreeDistribution:
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, n + 1, n + 1, generator=gen).to(device)
    return TreeDistribution(scores, single_root=single_root)


def throughput_table(lengths: list[int], batch: int, samples: int, repeats: int) -> None:
    print(
        f"\n1. Trees per second (batch {batch}, {samples} trees per sentence, N(0,1) scores; ratio to the Python loop)"
    )
    methods = [
        ("wilson_marginal", True),
        ("wilson_reject", True),
        ("colbourn", True),
        ("wilson", False),
        ("colbourn", False),
        ("sbs", True),
        ("trie", True),
    ]
    names = [
        name + (" (multi)" if not single else "") + (" k" if name in ("sbs", "trie") else "")
        for name, single in methods
    ]
    print(f"{'n':>4} {'python loop':>12}" + "".join(f" {name:>22}" for name in names))
    for n in lengths:
        single = random_dist(batch, n, seed=n)
        single.marginals  # exact inference is shared by every method; time sampling only
        multi = random_dist(batch, n, seed=n, single_root=False)
        multi.marginals
        rng = random.Random(0)
        base_samples = max(1, samples // 20)
        base_time = timed(lambda: python_wilson_marginal(single, base_samples, rng), 1)
        base_rate = batch * base_samples / base_time
        row = f"{n:>4} {base_rate:>12,.0f}"
        for method, single_root in methods:
            dist = single if single_root else multi
            gen = torch.Generator().manual_seed(1)
            if method in ("sbs", "trie"):

                def run():
                    return sample_without_replacement(dist, samples, method=method, generator=gen)
            else:

                def run():
                    return sample(dist, (samples,), method=method, generator=gen)

            rate = batch * samples / timed(run, repeats)
            row += f" {rate:>13,.0f} ({rate / base_rate:>5.1f}x)"
        print(row, flush=True)


def sbs_kernel_floor(inverses: torch.Tensor, k: int, gen: torch.Generator) -> None:
    """The kernels any exact SBS over per-beam inverses runs, alone, at the same sizes:
    one copy of each sentence's inverse (B, n, n) per beam, then per word one float64
    uniform per child, a top-k over each sentence's k (n + 1) children, the two columns of
    each beam's inverse that its update needs (a gather) combined into one, and the rank-one
    update of the rows still to come. No setup, masks, bookkeeping, duplicate copies, drift checks or
    Gumbel arithmetic: a lower bound for this machine, not a sampler."""
    batch, n = inverses.shape[0], inverses.shape[-1]
    size, rows = n + 1, batch * k
    inverse = inverses.index_select(0, torch.arange(batch).repeat_interleave(k))
    for m in range(1, size):
        later = inverse[:, m - 1 :, :]
        uniforms = torch.rand(batch, k * size, dtype=torch.float64, generator=gen)
        _, index = uniforms.topk(k, dim=-1)
        columns = torch.stack([index % n, index // size % n], -1).view(rows, 1, 2).expand(-1, later.shape[1], 2)
        update = later.gather(2, columns).sum(-1)
        later[:, 1:, :].addcmul_(update[:, 1:].unsqueeze(-1), later[:, :1, :], value=-1e-6)


def swor_inputs(batch: int, n: int) -> tuple[TreeDistribution, torch.Tensor]:
    """The SWOR tables' scores (marginals already computed, as a caller's would be) and the
    random inverses their kernel floor runs on."""
    dist = random_dist(batch, n, seed=7)
    dist.marginals
    return dist, torch.randn(batch, n, n, dtype=torch.float64)


def swor_table(batch: int, n: int, ks: list[int], repeats: int) -> None:
    dist, inverses = swor_inputs(batch, n)
    print(
        f"\n2./3. Sampling without replacement (batch {batch}, n = {n}): time per call and per tree; "
        "'kernels ms': SBS's unavoidable kernels alone (a floor)"
    )
    print(f"{'k':>6} {'sbs ms':>10} {'sbs us/tree':>12} {'kernels ms':>11} {'trie ms':>10} {'trie us/tree':>13}")
    for k in ks:
        gen = torch.Generator().manual_seed(2)
        row = f"{k:>6}"
        for method in ("sbs", "trie"):

            def run():
                return sample_without_replacement(dist, k, method=method, generator=gen)

            seconds = timed(run, repeats if k <= 100 else 1)
            row += f" {seconds * 1e3:>10.1f} {seconds * 1e6 / (k * batch):>12.1f}"
            if method == "sbs":
                floor = timed(lambda: sbs_kernel_floor(inverses, k, gen), repeats if k <= 100 else 1)
                row += f" {floor * 1e3:>11.1f}"
        print(row, flush=True)


def swor_target(batch: int, n: int, k: int, calls: int) -> None:
    """The issue's SWOR target, timed over many calls: this machine's speed drifts between
    minutes (up to 1.7x on our shared 2-core VM), so the spread is part of the figure. Each
    SBS call is paired with a call of its kernel floor (:func:`sbs_kernel_floor`): the ratio
    of a pair is what the code costs above the machine's floor, whatever the minute."""
    dist, inverses = swor_inputs(batch, n)
    gen = torch.Generator().manual_seed(2)

    def sbs():
        return sample_without_replacement(dist, k, method="sbs", generator=gen)

    def floor():
        return sbs_kernel_floor(inverses, k, gen)

    sbs(), floor()
    times, floors = [], []
    for _ in range(calls):
        for function, into in ((sbs, times), (floor, floors)):
            start = CLOCK()
            function()
            into.append((CLOCK() - start) * 1e3)
    lower, median, upper = statistics.quantiles(times, n=4, method="inclusive")
    ratio = statistics.median(t / f for t, f in zip(times, floors))
    print(
        f"\n2b. SBS, k = {k}, batch {batch}, n = {n} (target <= 30 ms), {calls} calls: "
        f"min {min(times):.1f} ms, quartiles {lower:.1f} / {median:.1f} / {upper:.1f} ms, max {max(times):.1f} ms; "
        f"kernels alone median {statistics.median(floors):.1f} ms; SBS / kernels, median of pairs {ratio:.2f}"
    )


def parser_like_scores(batch: int, n: int, gen: torch.Generator, margin: float = 10.0) -> torch.Tensor:
    """N(0, 2^2) scores plus ``margin`` on the arcs of a random tree: a confident parser."""
    scores = torch.randn(batch, n + 1, n + 1, generator=gen) * 2
    for b in range(batch):
        order = torch.randperm(n, generator=gen) + 1
        scores[b, 0, order[0]] += margin
        for i in range(1, n):
            parent = order[torch.randint(0, i, (1,), generator=gen)]
            scores[b, parent, order[i]] += margin
    return scores


def acceptance_table(lengths: list[int], batch: int, samples: int) -> None:
    print(
        f"\n4. Wilson-Reject expected tries Z_multi / Z_single (batch {batch}): exact mean and max "
        "over sentences, measured mean tries"
    )
    print(f"{'n':>4} {'scores':>15} {'exact mean':>11} {'exact max':>10} {'measured':>9} {'(1+1/n)^(n-1)':>14}")
    for n in lengths:
        gen = torch.Generator().manual_seed(100 + n)
        kinds = {
            "N(0,1) scores": torch.randn(batch, n + 1, n + 1, generator=gen),
            "U(0,1) weights": torch.rand(batch, n + 1, n + 1, generator=gen).log(),
            "parser-like": parser_like_scores(batch, n, gen),
        }
        for kind, scores in kinds.items():
            dist = TreeDistribution(scores)
            expected = 1 / wilson_reject_acceptance(dist).double()
            _, tries = wilson_reject(dist, samples, torch.Generator().manual_seed(3))
            bound = (1 + 1 / n) ** (n - 1)
            print(
                f"{n:>4} {kind:>15} {expected.mean():>11.3f} {expected.max():>10.3f} "
                f"{tries.double().mean():>9.3f} {bound:>14.3f}",
                flush=True,
            )


def cuda_table(n: int, batch: int, k: int) -> None:
    if not torch.cuda.is_available():
        print("\n5. CUDA: no GPU on this machine; SBS at n = 100 on CUDA not measured")
        return
    dist = random_dist(batch, n, seed=9, device="cuda")
    dist.marginals
    gen = torch.Generator("cuda").manual_seed(4)

    def run():
        sample_without_replacement(dist, k, method="sbs", generator=gen)
        torch.cuda.synchronize()

    seconds = timed(run, 3)
    print(
        f"\n5. CUDA ({torch.cuda.get_device_name()}): SBS n = {n}, batch {batch}, k = {k}: "
        f"{seconds * 1e3:.1f} ms, {k * batch / seconds:,.0f} trees/s"
    )


def auto_kinds(batch: int, n: int, seed: int) -> dict[str, torch.Tensor]:
    """The score kinds of the ``auto`` table, float32: N(0, 1), parser-like, N(0, 1) x3 and x10."""
    gen = torch.Generator().manual_seed(seed)
    return {
        "random": torch.randn(batch, n + 1, n + 1, generator=gen),
        "parser": parser_like_scores(batch, n, gen),
        "x3": torch.randn(batch, n + 1, n + 1, generator=gen) * 3,
        "x10": torch.randn(batch, n + 1, n + 1, generator=gen) * 10,
    }


def auto_table(lengths: list[int], batch: int, samples: int, repeats: int) -> None:
    """``sampler="auto"`` against Colbourn and Wilson-Marginal: ms per call, the median of
    ``repeats`` rounds of the three methods in turn at every n (more for short calls:
    :func:`interleaved`; a single round at n > 60 let one slow call on a noisy machine move a
    ratio by 30%); a fresh distribution per call, its marginals computed before timing,
    so that no sampler reuses another call's analysis), the share of sentences auto walks,
    and auto / the better one."""
    from spacy_treexp.engine.sampling.auto import walk_or_not

    print(
        f"\n7. sampler='auto' (batch {batch}, {samples} trees per sentence, float32): ms per call; "
        "'walked': share of sentences auto sends to Wilson; ratio: auto / min(colbourn, wilson_marginal)"
    )
    print(f"{'n':>4} {'scores':>7} {'colbourn':>9} {'wilson_m':>9} {'auto':>9} {'walked':>7} {'ratio':>6}")
    for n in lengths:
        for kind, scores in auto_kinds(batch, n, seed=n).items():
            row = f"{n:>4} {kind:>7}"
            methods = ("colbourn", "wilson_marginal", "auto")
            times = interleaved(lambda: TreeDistribution(scores), methods, samples, repeats)
            found = {method: statistics.median(times[method]) for method in methods}
            row += "".join(f" {found[method] * 1e3:>9.1f}" for method in methods)
            dist = TreeDistribution(scores)
            share = float(walk_or_not(dist, samples).double().mean())
            ratio = found["auto"] / min(found["colbourn"], found["wilson_marginal"])
            print(row + f" {share:>7.2f} {ratio:>6.2f}", flush=True)


def interleaved(
    make, methods: tuple[str, ...], samples: int, repeats: int, least: float = 3.0
) -> dict[str, list[float]]:
    """Seconds per call of each of ``methods`` on a fresh distribution from ``make()`` (its
    marginals computed before timing), in interleaved rounds after one warm-up round: at least
    ``repeats`` rounds, more (up to 25) while they take under ``least`` seconds in all (short
    calls vary most on a loaded machine). Each round draws with a new seed (the walks' time
    depends on the draws, their rounds of cycle popping, not only on the scores) and starts
    with the next method (a call pays for what the one before left in memory)."""
    times: dict[str, list[float]] = {method: [] for method in methods}
    rounds, repeat, spent = repeats, 0, 0.0
    while repeat <= rounds:
        turn = repeat % len(methods)
        for method in methods[turn:] + methods[:turn]:
            dist = make()
            dist.marginals
            start = CLOCK()
            sample(dist, (samples,), method=method, generator=torch.Generator().manual_seed(1 + repeat))
            if repeat:  # the first round warms up
                times[method].append(CLOCK() - start)
            spent += CLOCK() - start
        if repeat == 0:
            rounds = max(repeats, min(25, int(least / max(spent, 1e-9))))
        repeat += 1
    return times


def fit_walks_table(lengths: list[int], batch: int, samples: int, repeats: int) -> None:
    """Microseconds per tree of Wilson-Marginal and Colbourn on parser-like scores (their walks
    draw about one head per word), the median of ``repeats`` interleaved rounds after one
    warm-up, beside :func:`.auto.walk_cost` and :func:`.auto.colbourn_cost`: the data that
    auto's WALK_FIXED and FIRST_N2 are fitted on (least squares, relative error)."""
    from spacy_treexp.engine.sampling.auto import colbourn_cost, root_children_walks, walk_cost

    print(
        f"\n7c. Walks on parser-like scores (batch {batch}, {samples} trees per sentence, float32): "
        "us per tree, measured and predicted; heads drawn per tree, ROOT children checked"
    )
    print(f"{'n':>4} {'colbourn':>9} {'model':>6} {'wilson_m':>9} {'model':>6} {'heads':>6} {'pairs':>6}")
    for n in lengths:
        scores = auto_kinds(batch, n, seed=n)["parser"]
        times: dict[str, list[float]] = {"colbourn": [], "wilson_marginal": []}
        for repeat in range(1 + repeats):
            for method in times:
                dist = TreeDistribution(scores)
                dist.marginals
                start = CLOCK()
                sample(dist, (samples,), method=method, generator=torch.Generator().manual_seed(1))
                if repeat:
                    times[method].append(CLOCK() - start)
        per_tree = {method: statistics.median(found) * 1e6 / (batch * samples) for method, found in times.items()}
        dist = TreeDistribution(scores)
        everyone = torch.arange(batch)
        walked, _, _ = root_children_walks(dist, everyone, samples)
        mu = dist.marginals[:, 0, :].detach().double()
        pairs = (1 - (1 - mu.clamp(0, 1)) ** samples).sum(-1)
        size = torch.full((batch,), n)
        walks = float(walk_cost(size, walked, pairs, samples).mean())
        print(
            f"{n:>4} {per_tree['colbourn']:>9.2f} {float(colbourn_cost(size)[0]):>6.2f} "
            f"{per_tree['wilson_marginal']:>9.2f} {walks:>6.2f} {float(walked.mean()):>6.1f} {float(pairs.mean()):>6.2f}",
            flush=True,
        )


def shipped_parser_scores(conllu: str, ranges, batch: int) -> dict[tuple[int, int], TreeDistribution]:
    """Arc scores of the shipped EWT parser (``spacy_treexp/models/en_treexp_ewt``) on the texts
    of ``conllu``: up to ``batch`` sentences per length range, padded into one batch each."""
    import spacy

    texts = [line[len("# text = ") :].strip() for line in open(conllu, encoding="utf8") if line.startswith("# text = ")]
    nlp = spacy.load("spacy_treexp/models/en_treexp_ewt")
    found: dict[tuple[int, int], list[torch.Tensor]] = {bounds: [] for bounds in ranges}
    with nlp.select_pipes(enable=[name for name in nlp.pipe_names if name in ("tok2vec", "senter", "biaffine_parser")]):
        for doc in nlp.pipe(texts, batch_size=64):
            for record in doc._.parser_scores or []:
                n = record["arc"].shape[0] - 1
                for (low, high), arcs in found.items():
                    if low <= n <= high and len(arcs) < batch:
                        arcs.append(torch.from_numpy(record["arc"]))
            if all(len(arcs) == batch for arcs in found.values()):
                break
    out = {}
    for bounds, arcs in found.items():
        size = max(arc.shape[0] for arc in arcs)
        scores = torch.full((len(arcs), size, size), -torch.inf)
        for i, arc in enumerate(arcs):
            scores[i, : arc.shape[0], : arc.shape[0]] = arc
        out[bounds] = TreeDistribution(scores, torch.tensor([arc.shape[0] - 1 for arc in arcs]))
    return out


def auto_parser_table(conllu: str, batch: int, samples: int, repeats: int) -> None:
    """Table 7 on a trained parser's scores (``--conllu``: any UD file, e.g. EWT dev)."""
    from spacy_treexp.engine.sampling.auto import walk_or_not

    print(
        f"\n7b. sampler='auto' on the shipped EWT parser's arc scores (batch <= {batch}, {samples} trees per sentence)"
    )
    print(f"{'words':>7} {'B':>3} {'colbourn':>9} {'wilson_m':>9} {'auto':>9} {'walked':>7} {'ratio':>6}")
    for (low, high), base in shipped_parser_scores(conllu, ((6, 14), (25, 35), (50, 80)), batch).items():
        methods = ("colbourn", "wilson_marginal", "auto")
        times = interleaved(lambda: TreeDistribution(base.scores, base.lengths), methods, samples, repeats)
        found = {method: statistics.median(times[method]) for method in methods}
        share = float(walk_or_not(TreeDistribution(base.scores, base.lengths), samples).double().mean())
        ratio = found["auto"] / min(found["colbourn"], found["wilson_marginal"])
        print(
            f"{low:>3}-{high:<3} {base.scores.shape[0]:>3}"
            + "".join(f" {found[method] * 1e3:>9.1f}" for method in methods)
            + f" {share:>7.2f} {ratio:>6.2f}",
            flush=True,
        )


def targets_table(batch: int, n: int, samples: int, k: int, rounds: int) -> None:
    """The issue's sampling targets in one run, the fused CPU kernels
    (:mod:`spacy_treexp.engine.sampling.fused`) against the pure-torch samplers
    (``SPACY_TREEXP_NATIVE=0``) on the same scores: trees per second of Colbourn's sampler
    (``samples`` per sentence) and Wilson-Marginal, SBS (k trees) in ms and against k Colbourn
    samples. Each figure is the median of ``rounds`` rounds that run every cell in turn."""
    import os

    from spacy_treexp.engine.native import NATIVE_ENV

    dist = random_dist(batch, n, seed=7)
    dist.marginals
    gen = torch.Generator().manual_seed(2)
    cells = {
        "colbourn": lambda: sample(dist, (samples,), method="colbourn", generator=gen),
        "wilson_marginal": lambda: sample(dist, (samples,), method="wilson_marginal", generator=gen),
        f"colbourn x{k}": lambda: sample(dist, (k,), method="colbourn", generator=gen),
        f"sbs k={k}": lambda: sample_without_replacement(dist, k, method="sbs", generator=gen),
    }
    times: dict[tuple[str, str], list[float]] = {}
    previous = os.environ.get(NATIVE_ENV)
    try:
        for repeat in range(1 + rounds):
            for native in ("0", "1"):
                os.environ[NATIVE_ENV] = native
                for name, function in cells.items():
                    start = CLOCK()
                    function()
                    if repeat:  # the first round warms up (and compiles)
                        times.setdefault((native, name), []).append(CLOCK() - start)
    finally:
        if previous is None:
            os.environ.pop(NATIVE_ENV, None)
        else:
            os.environ[NATIVE_ENV] = previous
    found = {key: statistics.median(values) for key, values in times.items()}
    print(f"\n8. Targets (batch {batch}, n = {n}, float32 N(0,1) scores): torch samplers | fused kernels")
    for native, label in (("0", "torch"), ("1", "fused")):
        rate = batch * samples / found[native, "colbourn"]
        walks = batch * samples / found[native, "wilson_marginal"]
        sbs, base = found[native, f"sbs k={k}"], found[native, f"colbourn x{k}"]
        print(
            f"{label:>6}: colbourn {rate:>9,.0f} trees/s, wilson_marginal {walks:>9,.0f} trees/s; "
            f"sbs k = {k} {sbs * 1e3:6.1f} ms, {k} colbourn samples {base * 1e3:6.1f} ms, ratio {sbs / base:5.2f}",
            flush=True,
        )


SCALES = (1.0, 30.0, 100.0, 1000.0)
#: (method, single-root) of every sampler; sbs / trie draw k distinct trees
SCALE_METHODS = (
    ("colbourn", True),
    ("sbs", True),
    ("trie", True),
    ("wilson_marginal", True),
    ("wilson_reject", True),
    ("wilson", False),
)


def scale_table(
    repeats: int,
    configs=((30, 64, 100, 20), (30, 1, 100, 100), (60, 64, 100, 20), (60, 1, 100, 100)),
    only: list[str] | None = None,
    dtype: torch.dtype = torch.float64,
) -> None:
    """Section 6; ``only``: these methods alone (e.g. ``sbs colbourn``); ``dtype``: of the scores
    (the same draw, rounded)."""
    print(
        "\n6. Cost against the score scale: ms per call at N(0,1) scores x1 / x30 / x100 / x1000 "
        "(ratio to x1); at x1000 the counted L-hat factorisations and engine refactorisations"
    )
    print(
        f"{'method':>16} {'n':>4} {'B':>3} {'S/k':>4} "
        + "".join(f" {'x' + format(scale, 'g'):>16}" for scale in SCALES)
        + f" {'LU':>6} {'engine':>7}"
    )
    methods = tuple(item for item in SCALE_METHODS if only is None or item[0] in only)
    runs = [(n, batch, samples, trees, methods) for n, batch, samples, trees in configs]
    if only is None or "colbourn" in only:
        runs.append((200, 4, 100, 100, (("colbourn", True),)))
    for n, batch, samples, trees, methods in runs:
        base = torch.randn(batch, n + 1, n + 1, generator=torch.Generator().manual_seed(n + batch), dtype=torch.float64)
        dists = {}
        for scale in SCALES:
            for single_root in {single for _, single in methods}:
                dist = TreeDistribution((base * scale).to(dtype), single_root=single_root)
                dist.marginals  # the engine's inference, shared by every sampler: not timed
                dists[scale, single_root] = dist
        for method, single_root in methods:
            count = trees if method in ("sbs", "trie") else samples
            row = f"{method + ('' if single_root else ' (multi)'):>16} {n:>4} {batch:>3} {count:>4}"
            reference = None
            counted: dict = {}
            for scale in SCALES:
                dist = dists[scale, single_root]
                gen = torch.Generator().manual_seed(3)
                if method in ("sbs", "trie"):

                    def run():
                        return sample_without_replacement(dist, count, method=method, generator=gen)
                else:

                    def run():
                        return sample(dist, (count,), method=method, generator=gen)

                seconds = timed(run, repeats)
                reference = reference or seconds
                row += f" {seconds * 1e3:>8.1f} ({seconds / reference:>4.1f}x)"
                if scale == SCALES[-1]:
                    with work.counting() as done:
                        run()
                    counted = dict(done)
            row += f" {counted.get('factorisations', 0):>6} {counted.get('refactorisations', 0):>7}"
            print(row, flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cpu-time", action="store_true", help="time by process CPU time (use with --threads 1)")
    parser.add_argument(
        "--section",
        choices=["all", "throughput", "swor", "acceptance", "cuda", "scale", "auto", "fit-walks", "targets"],
        default="all",
    )
    parser.add_argument("--methods", nargs="+", help="--section scale: only these methods (e.g. sbs colbourn)")
    parser.add_argument("--float32", action="store_true", help="--section scale: float32 scores (default float64)")
    parser.add_argument(
        "--conllu", help="--section auto: also time the shipped EWT parser's scores on this file's texts"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    global CLOCK
    CLOCK = time.process_time if args.cpu_time else time.perf_counter
    clock = "process CPU time" if args.cpu_time else "wall time"
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, {clock}")
    if args.quick:
        throughput_table([10], batch=8, samples=20, repeats=1)
        swor_table(batch=8, n=10, ks=[5, 20], repeats=1)
        acceptance_table([10], batch=8, samples=50)
        return
    sections = {
        "throughput": lambda: throughput_table([10, 30, 60], batch=64, samples=100, repeats=3),
        "swor": lambda: (
            swor_table(batch=64, n=30, ks=[20, 100, 300, 1000], repeats=5),
            swor_target(batch=64, n=30, k=20, calls=41),
        ),
        "acceptance": lambda: acceptance_table([10, 30, 60], batch=64, samples=200),
        "cuda": lambda: cuda_table(n=100, batch=64, k=100),
        "scale": lambda: scale_table(
            repeats=3, only=args.methods, dtype=torch.float32 if args.float32 else torch.float64
        ),
        "auto": lambda: (
            auto_table([10, 30, 60, 100], batch=64, samples=100, repeats=5),
            auto_parser_table(args.conllu, batch=64, samples=100, repeats=5) if args.conllu else None,
        ),
        "fit-walks": lambda: fit_walks_table([10, 20, 30, 40, 60, 80, 100], batch=64, samples=100, repeats=3),
        "targets": lambda: targets_table(batch=64, n=30, samples=100, k=20, rounds=7),
    }
    for name in (
        [name for name in sections if name not in ("scale", "auto", "fit-walks")]
        if args.section == "all"
        else [args.section]
    ):
        sections[name]()


if __name__ == "__main__":
    main()
