"""Engine speed: ours vs baselines implemented here, measured in one run.

    python benchmarks/bench_engine.py            # CPU, 2 threads (the issue's setting)
    python benchmarks/bench_engine.py --device cuda

Reports medians over repeated calls (after warm-up):
1. log Z + marginals, batch 64, float32, n = 30 and 60: ours vs the common "autograd through
   logdet" baseline (unshifted Laplacian, marginals = d log Z / d scores).
2. entropy / marginals and stable path / fast path ratios.
3. second_order with R = S = 1 at n = 30.
4. Zmigrod et al. (2021) Table 1, by length bucket: entropy by T1 (O(n³)) vs Smith &
   Eisner (2007)'s O(n⁴) method, one matrix-tree determinant per word (E[s(head(m), m)] =
   det(L̂ with column m weighted by s) / Z, since det is linear in each column); ours is
   the engine (``TreeDistribution.entropy``, default settings) and, beside it, T1 alone
   from the same kernels as the baseline. Paper: 4.1x at mean length 9 to 15.1x at 36.
5. The GE objective's gradient (§6.4), by length bucket: ours (reverse mode through T1,
   which computes the T2 quantity Cov[r, 1_e], O(n³ + n²F)) vs Druck et al. (2009)'s
   covariance method that materialises Cov(1_e, 1_e') for all arc pairs. Paper: 9x.

6. (``--device cuda``) the dtype of the first pass for float32 scores: log Z + marginals with
   float32 first everywhere (the old rule) against float64 first from
   ``CUDA_FLOAT64_FROM_LENGTH`` words on (the engine's rule), beside the autograd baseline,
   with each rule's largest |μ − μ| against float64 on the CPU (README, "On a GPU").

Sections 4-5 run on the CPU in float64 (as the paper), each sentence alone (unbatched)
and each bucket in one padded call (batched), on random scores N(0, 2²); with
``--conllu`` the buckets hold real sentence lengths (the first ``--per-bucket`` of each),
otherwise lengths drawn uniformly within each bucket. Every function is checked against
the baseline before it is timed; timings are this process's CPU time (steadier than wall
time on a shared machine; with ``--threads 1`` the same thing on an idle one) and
interleave the contenders (median of ``--bucket-repeats``), so a ratio is measured in one run:

    python benchmarks/bench_engine.py --threads 1 --sections 4 5 --conllu EWT-test.conllu

Each timed call follows an untimed call of the same function (warm, as in a timing loop,
and the same for every contender), so that a contender is timed on its own and not on
what its neighbour in the rotation evicted from the caches. ``--cold`` times each call
right after the previous contender's instead: that charges each for its neighbour, and
unequally (the engine always followed the largest call, the per-word loop; the O(n⁴)
baseline followed T1, which shares its torch calls), most for the smallest working set:
the engine's batched 6-12 call takes 0.08 ms warm and 0.16 ms cold.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

import torch

from spacy_treexp import TreeDistribution
from spacy_treexp.engine import laplacian
from spacy_treexp.engine.checks import arc_mask


def median_ms(fn, repeats: int = 30, warmup: int = 3, device: str = "cpu") -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


# ------------------------------------------------------------------ baselines
def autograd_logdet_marginals(scores: torch.Tensor):
    """Baseline: single-root Koo matrix from unshifted exp(scores), log Z by logdet, autograd."""
    scores = scores.detach().requires_grad_(True)
    n = scores.shape[-1] - 1
    weights = scores.exp() * (1 - torch.eye(n + 1, dtype=scores.dtype, device=scores.device))
    words = weights[:, 1:, 1:]
    lap = torch.diag_embed(words.sum(1)) - words
    lap = torch.cat([weights[:, 0:1, 1:], lap[:, 1:]], dim=1)
    log_z = torch.logdet(lap)
    (marginals,) = torch.autograd.grad(log_z.sum(), scores)
    return log_z, marginals


def entropy_smith_eisner(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Baseline O(n⁴) entropy (Smith & Eisner 2007; the baseline of Zmigrod et al. 2021, §7).

    H = log Z − Σ_m E[s(head(m), m)], E[s(head(m), m)] = det(L̂_m) / det(L̂) where L̂_m is L̂
    with column m rebuilt from the weights w(h, m)·s(h, m) (det is linear in a column): one
    matrix-tree determinant per word. Implemented as well as we can: the n + 1 matrices of
    every sentence are built by one masked select and factorised in one batched LU call
    (slogdet), on the same column-shifted weights as ours.
    """
    n = scores.shape[-1] - 1
    mask = arc_mask(lengths, n)
    weights, shift = laplacian.shifted_weights(scores, mask)
    lap = laplacian.laplacian_matrix(weights, lengths, True)
    # the columns of L̂ built from w·s are the rebuilt columns of every L̂_m at once
    rebuilt = laplacian.laplacian_matrix(weights * torch.where(mask, scores, 0.0), lengths, True)
    column = torch.eye(n, dtype=torch.bool, device=scores.device).unsqueeze(-2)  # [m, 1, j]: j == m
    stack = torch.where(column, rebuilt.unsqueeze(1), lap.unsqueeze(1))  # (B, m, n, n)
    sign, log_abs = torch.linalg.slogdet(torch.cat([lap.unsqueeze(1), stack], dim=1))  # (B, n + 1)
    ratio = sign[:, 1:] * sign[:, :1] * torch.exp(log_abs[:, 1:] - log_abs[:, :1])
    words = torch.arange(n, device=scores.device) < lengths.unsqueeze(-1)  # padding columns give 1
    return log_abs[:, 0] + shift.sum(-1) - (ratio * words).sum(-1)


def entropy_smith_eisner_loop(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """The same O(n⁴) baseline with one determinant call per word in a Python loop, as the
    paper's reference code runs it (the form its Table 1 timed)."""
    n = scores.shape[-1] - 1
    mask = arc_mask(lengths, n)
    weights, shift = laplacian.shifted_weights(scores, mask)
    lap = laplacian.laplacian_matrix(weights, lengths, True)
    rebuilt = laplacian.laplacian_matrix(weights * torch.where(mask, scores, 0.0), lengths, True)
    sign, log_abs = torch.linalg.slogdet(lap)
    total = torch.zeros_like(log_abs)
    for m in range(int(lengths.max())):
        mixed = lap.clone()
        mixed[:, :, m] = rebuilt[:, :, m]
        sign_m, log_abs_m = torch.linalg.slogdet(mixed)
        total = total + torch.where(m < lengths, sign_m * sign * torch.exp(log_abs_m - log_abs), 0.0)
    return log_abs + shift.sum(-1) - total


def entropy_t1_kernel(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """T1 alone (Zmigrod et al. 2021, §5.2), from the same building blocks as the baseline:
    one LU for log det L̂ and L̂⁻¹, the closed-form marginals, H = log Z − Σ μ s. The
    algorithm without the engine's checks (error estimate kept, escalation not run)."""
    n = scores.shape[-1] - 1
    mask = arc_mask(lengths, n)
    weights, shift = laplacian.shifted_weights(scores, mask)
    log_det, inverse, _ = laplacian.fast_inverse(weights, lengths, True)
    marginals = laplacian.closed_form_marginals(weights, inverse, True)
    return log_det + shift.sum(-1) - (marginals * torch.where(mask, scores, 0.0)).sum((1, 2))


def entropy_ours(scores: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Ours: the engine's entropy (T1 in O(n³), default settings: stable path where needed)."""
    return TreeDistribution(scores, lengths).entropy()


def ge_gradient_ours(
    scores: torch.Tensor, lengths: torch.Tensor, features: torch.Tensor, target: torch.Tensor
) -> torch.Tensor:
    """∇_scores ½‖E[f] − f̃‖² = Cov[r, 1_e] with r = Σ_i (E[f_i] − f̃_i) f_i (Zmigrod et al. 2021,
    §6.4: the gradient of a first-order expectation is a second-order one, T2 with one-hot
    s): by reverse mode through the engine's T1, O(n³ + n²F)."""
    scores = scores.detach().requires_grad_(True)
    expected = TreeDistribution(scores, lengths).expectation(features)  # (B, F)
    objective = 0.5 * ((expected - target) ** 2).sum()
    (grad,) = torch.autograd.grad(objective, scores)
    return grad


def ge_gradient_t2(
    scores: torch.Tensor, lengths: torch.Tensor, features: torch.Tensor, target: torch.Tensor
) -> torch.Tensor:
    """T2 alone for the GE gradient, from the baseline's kernels: Cov[r, 1_e] = μ_e r_e −
    w_e (R̂ A a_e)[m_e] with A = L̂⁻¹ and R̂ = A L̂(w·r) (the hat of eq. 32 for R = 1 and one-hot
    s), i.e. μ ⊙ r minus the closed-form marginals with A replaced by A L̂(w·r) A: one LU
    inverse and two matrix products, O(n³ + n²F)."""
    n = scores.shape[-1] - 1
    mask = arc_mask(lengths, n)
    weights, _ = laplacian.shifted_weights(scores, mask)
    inverse = torch.linalg.inv(laplacian.laplacian_matrix(weights, lengths, True))
    mu = laplacian.closed_form_marginals(weights, inverse, True)
    expected = torch.einsum("bhm,bhmf->bf", mu, features)
    r = torch.where(mask, torch.einsum("bhmf,bf->bhm", features, expected - target), 0.0)
    hat = inverse @ laplacian.laplacian_matrix(weights * r, lengths, True) @ inverse
    return mu * r - laplacian.closed_form_marginals(weights, hat, True)


def ge_gradient_covariance(
    scores: torch.Tensor, lengths: torch.Tensor, features: torch.Tensor, target: torch.Tensor
) -> torch.Tensor:
    """Baseline (Druck et al. 2009): materialise Cov(1_e, 1_e') for all arc pairs (n⁴ entries)
    of every sentence, then contract: ∂/∂θ_e = Σ_e' Cov(1_e, 1_e') r(e').

    Cov from the pairwise formula −w_e w_e' X[m_e', e] X[m_e, e'] + δ_ee' μ_e with
    X[j, e] = (L̂⁻¹ a_e)_j (single-root, ∂L̂/∂w_e = a_e b_eᵀ). Implemented as well as we can:
    one LU inverse shared with the marginals, F contracted first (r = f·(E[f] − f̃)), the
    n⁴ tensor formed by one broadcast product and contracted by one batched mat-vec.
    """
    n = scores.shape[-1] - 1
    batch = scores.shape[0]
    mask = arc_mask(lengths, n)
    weights, _ = laplacian.shifted_weights(scores, mask)
    inverse = torch.linalg.inv(laplacian.laplacian_matrix(weights, lengths, True))
    mu = laplacian.closed_form_marginals(weights, inverse, True)
    # X[b, j, h, m'] = (L̂⁻¹ a_{h -> m'+1})_j: A[j, m'][m' != 0] - A[j, h-1][h != 0], ROOT: A[j, 0]
    gate = torch.ones(n, dtype=scores.dtype, device=scores.device)
    gate[0] = 0
    gated = inverse * gate
    x_words = gated.unsqueeze(2) - gated.unsqueeze(3)  # (B, j, h', m')
    x_root = inverse[:, :, 0:1].expand(batch, n, n).unsqueeze(2)  # (B, j, 1, m')
    x = torch.cat([x_root, x_words], dim=2)  # (B, j, h, m')
    a = weights[:, :, 1:].unsqueeze(-1) * x.permute(0, 2, 3, 1)  # (B, h, m', j) = w_e X[j, e]
    # cov[b, h, m, g, k] = -a[b, h, m, k] a[b, g, k, m] (+ μ on the diagonal)
    cov = -(a.unsqueeze(3) * a.permute(0, 3, 1, 2).unsqueeze(1))
    expected = torch.einsum("bhm,bhmf->bf", mu, features)
    r = torch.einsum("bgkf,bf->bgk", features[:, :, 1:], expected - target)  # (B, h, m')
    size = (n + 1) * n
    grad = torch.bmm(cov.reshape(batch, size, size), r.reshape(batch, size, 1)).reshape(batch, n + 1, n)
    grad = grad + mu[:, :, 1:] * r
    return torch.cat([torch.zeros_like(grad[:, :, :1]), grad], dim=-1) * mask


# ------------------------------------------------------- the papers' tables by length
#: Length buckets (words): EWT test's 6-12 and 31-45 have mean lengths 8.6 and 36.4, the
#: paper's shortest and longest (Zmigrod et al. 2021, Table 1: 4.1x at 9, 15.1x at 36).
BUCKETS = ((2, 5), (6, 12), (13, 20), (21, 30), (31, 45), (46, 80))


def bucket_lengths(
    conllu: Optional[str], per_bucket: int, gen: torch.Generator
) -> List[Tuple[Tuple[int, int], List[int]]]:
    """Up to ``per_bucket`` sentence lengths per bucket: the first ones of the CoNLL-U file,
    or uniform within the bucket without one."""
    out = []
    if conllu:
        from spacy_treexp.io import read_conllu

        lengths = [len(sentence.forms) for sentence in read_conllu(Path(conllu))]
        for low, high in BUCKETS:
            chosen = [n for n in lengths if low <= n <= high][:per_bucket]
            if chosen:
                out.append(((low, high), chosen))
        return out
    for low, high in BUCKETS:
        out.append(((low, high), torch.randint(low, high + 1, (per_bucket,), generator=gen).tolist()))
    return out


def padded(lengths: Sequence[int], gen: torch.Generator, features: int = 0) -> Tuple[torch.Tensor, ...]:
    """Random float64 scores ~ N(0, 2²) (and features, and targets) padded to the longest."""
    size = max(lengths) + 1
    scores = torch.randn(len(lengths), size, size, generator=gen, dtype=torch.float64) * 2
    out: Tuple[torch.Tensor, ...] = (scores, torch.tensor(lengths, dtype=torch.long))
    if features:
        out += (
            torch.randn(len(lengths), size, size, features, generator=gen, dtype=torch.float64),
            torch.randn(len(lengths), features, generator=gen, dtype=torch.float64),
        )
    return out


def paired_medians(functions: Sequence[Callable[[], object]], repeats: int, warm: bool = True) -> List[float]:
    """Median CPU seconds of this process for each function, calls interleaved so that load
    drift hits all alike (CPU time: steadier than wall time on a shared machine; run with
    ``--threads 1`` so that it is also the time the call takes).

    ``warm``: each timed call follows an untimed call of the same function (see the module
    doc); otherwise (``--cold``) it follows the previous contender's."""
    for function in functions:
        function()
    times: List[List[float]] = [[] for _ in functions]
    for _ in range(repeats):
        for slot, function in zip(times, functions):
            if warm:
                function()
            start = time.process_time()
            function()
            slot.append(time.process_time() - start)
    return [statistics.median(slot) for slot in times]


def one_by_one(function: Callable[..., torch.Tensor], inputs: Sequence[Tuple[torch.Tensor, ...]]) -> Callable[[], None]:
    """A call of ``function`` on every sentence alone (unbatched)."""

    def run() -> None:
        for args in inputs:
            function(*args)

    return run


def singles(batch: Tuple[torch.Tensor, ...], lengths: Sequence[int]) -> List[Tuple[torch.Tensor, ...]]:
    """Each sentence of a padded batch alone, cut to its own length."""
    out = []
    for b, n in enumerate(lengths):
        one = [batch[0][b : b + 1, : n + 1, : n + 1], batch[1][b : b + 1]]
        if len(batch) > 2:
            one += [batch[2][b : b + 1, : n + 1, : n + 1], batch[3][b : b + 1]]
        out.append(tuple(one))
    return out


def entropy_table(buckets, repeats: int, warm: bool = True) -> None:
    """Section 4: entropy, ours and T1 alone vs Smith & Eisner's O(n⁴), by length bucket."""
    print("\n4. entropy: T1 O(n^3) vs one MTT determinant per word O(n^4) (Smith & Eisner 2007), float64,")
    print("   random scores N(0, 2^2); ms per sentence (unbatched) or per bucket (batched: one padded call).")
    print("   ours = the engine (TreeDistribution.entropy, default settings); T1 = the algorithm alone from the")
    print("   baseline's kernels; O(n^4) = the n determinants in one batched LU call; loop = one call per word")
    print("   (the paper's code). x = the faster O(n^4) form / ours, (T1) = the same / T1")
    contenders = (entropy_ours, entropy_t1_kernel, entropy_smith_eisner, entropy_smith_eisner_loop)
    for mode in ("unbatched", "batched"):
        print(
            f"{mode:>9} {'sents':>5} {'mean':>5} | {'ours':>7} {'T1':>7} {'O(n^4)':>7} {'loop':>7} |"
            f" {'x':>6} {'(T1)':>7}"
        )
        for (low, high), lengths in buckets:
            batch = padded(lengths, torch.Generator().manual_seed(low))
            reference = entropy_smith_eisner(*batch)
            for function in contenders:
                assert torch.allclose(function(*batch), reference, atol=1e-6), f"{function.__name__} disagrees"
            if mode == "unbatched":
                alone = singles(batch, lengths)
                times = [
                    1e3 * t / len(lengths)
                    for t in paired_medians([one_by_one(f, alone) for f in contenders], repeats, warm)
                ]
            else:
                times = [1e3 * t for t in paired_medians([lambda f=f: f(*batch) for f in contenders], repeats, warm)]
            ours, t1, base, loop = times
            best = min(base, loop)
            print(
                f"{low:>4}-{high:<4} {len(lengths):>5} {statistics.mean(lengths):>5.1f} |"
                f" {ours:>7.3f} {t1:>7.3f} {base:>7.3f} {loop:>7.3f} |"
                f" {best / ours:>5.1f}x ({best / t1:>4.1f}x)"
            )


def ge_table(buckets, repeats: int, features: int, max_cov_mb: float, warm: bool = True) -> None:
    """Section 5: the GE gradient, ours and T2 alone vs the covariance method, by length bucket."""
    print(f"\n5. GE objective gradient, F = {features}, float64, random scores and features; ms as in 4.")
    print("   ours = reverse mode through the engine's T1 (the T2 quantity Cov[r, 1_e], O(n^3 + n^2 F));")
    print("   T2 = the closed form alone from the baseline's kernels; cov. = the covariance method")
    print(f"   (n^4 pairwise covariances, Druck et al. 2009; batched in chunks of at most {max_cov_mb:g} MB)")
    print("   x = cov. / ours, (T2) = cov. / T2")
    contenders = (ge_gradient_ours, ge_gradient_t2, ge_gradient_covariance)
    for mode in ("unbatched", "batched"):
        print(f"{mode:>9} {'sents':>5} {'mean':>5} | {'ours':>7} {'T2':>7} {'cov.':>8} | {'x':>6} {'(T2)':>8}")
        for (low, high), lengths in buckets:
            size = max(lengths) + 1
            per_sentence = size**2 * (size - 1) ** 2 * 8 / 2**20
            if per_sentence > max_cov_mb:
                print(f"{low:>4}-{high:<4} skipped: one sentence's covariance tensor is {per_sentence:.0f} MB")
                continue
            chunk = max(1, int(max_cov_mb // per_sentence))
            batch = padded(lengths, torch.Generator().manual_seed(low), features)

            def covariance_chunked(batch=batch, chunk=chunk) -> torch.Tensor:
                parts = [
                    ge_gradient_covariance(*(t[i : i + chunk] for t in batch)) for i in range(0, len(batch[1]), chunk)
                ]
                return torch.cat(parts)

            reference = covariance_chunked()
            for function in (ge_gradient_ours, ge_gradient_t2):
                assert torch.allclose(function(*batch), reference, atol=1e-7), f"{function.__name__} disagrees"
            if mode == "unbatched":
                alone = singles(batch, lengths)
                times = [
                    1e3 * t / len(lengths)
                    for t in paired_medians([one_by_one(f, alone) for f in contenders], repeats, warm)
                ]
            else:
                calls = [lambda: ge_gradient_ours(*batch), lambda: ge_gradient_t2(*batch), covariance_chunked]
                times = [1e3 * t for t in paired_medians(calls, repeats, warm)]
            ours, t2, base = times
            print(
                f"{low:>4}-{high:<4} {len(lengths):>5} {statistics.mean(lengths):>5.1f} |"
                f" {ours:>7.3f} {t2:>7.3f} {base:>8.3f} | {base / ours:>5.1f}x ({base / t2:>5.1f}x)"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument(
        "--sections", type=int, nargs="+", default=[1, 2, 3, 4, 5], help="which sections to run (6: CUDA)"
    )
    parser.add_argument("--conllu", default=None, help="sections 4-5: sentence lengths from this CoNLL-U file")
    parser.add_argument("--per-bucket", type=int, default=32, help="sections 4-5: sentences per length bucket")
    parser.add_argument("--bucket-repeats", type=int, default=15, help="sections 4-5: median of this many runs")
    parser.add_argument(
        "--cold", action="store_true", help="sections 4-5: time each call right after the previous contender's"
    )
    parser.add_argument("--features", type=int, default=20, help="section 5: GE features F")
    parser.add_argument("--max-cov-mb", type=float, default=256.0, help="section 5: largest covariance chunk")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    print(f"device={args.device} threads={torch.get_num_threads()} torch={torch.__version__}")

    if {1, 2, 3} & set(args.sections):
        sections_1_to_3(args, gen)
    if 4 in args.sections or 5 in args.sections:
        buckets = bucket_lengths(args.conllu, args.per_bucket, gen)
        if 4 in args.sections:
            entropy_table(buckets, args.bucket_repeats, not args.cold)
        if 5 in args.sections:
            ge_table(buckets, args.bucket_repeats, args.features, args.max_cov_mb, not args.cold)
    if 6 in args.sections:
        first_pass_table(args.device, args.repeats, gen)


def first_pass_table(device: str, repeats: int, gen: torch.Generator) -> None:
    """Section 6: float32 first everywhere vs the engine's float64 first on long CUDA sentences."""
    if not device.startswith("cuda"):
        print("\n6. needs --device cuda (the rule applies to CUDA only)")
        return
    from spacy_treexp.engine import distribution

    rule = distribution.CUDA_FLOAT64_FROM_LENGTH
    print(f"\n6. first pass of float32 scores ~ N(0, 2): float32 always (old) vs float64 from n = {rule} (new), ms")
    print(f"{'batch':>5} {'n':>4} | {'old':>8} {'new':>8} {'baseline':>8} | max|dmu| old / new (8 sentences)")
    for batch in (64, 512):
        for n in (30, 60, 100, 120, 200):
            exact = torch.randn(batch, n + 1, n + 1, generator=gen, dtype=torch.float64) * 2
            scores = exact.float().to(device)
            reference = TreeDistribution(exact[:8]).marginals
            times, errors = [], []
            for limit in (10**9, rule):
                distribution.CUDA_FLOAT64_FROM_LENGTH = limit
                times.append(median_ms(lambda: TreeDistribution(scores).marginals, repeats, device="cuda"))
                got = TreeDistribution(scores[:8]).marginals.cpu().double()
                errors.append((got - reference).abs().max().item())
            distribution.CUDA_FLOAT64_FROM_LENGTH = rule
            base = median_ms(lambda: autograd_logdet_marginals(scores), repeats, device="cuda")
            print(
                f"{batch:>5} {n:>4} | {times[0]:>8.3f} {times[1]:>8.3f} {base:>8.3f} | "
                f"{errors[0]:.1e} / {errors[1]:.1e}"
            )


def sections_1_to_3(args: argparse.Namespace, gen: torch.Generator) -> None:
    """Sections 1-3 (see the module doc)."""
    device = args.device
    print("\n1-3. batch 64, float32, scores ~ N(0, 2)")
    print("(LAPACK floor: torch's lu_factor_ex + lu_solve for the inverse of 64 such matrices, which")
    print(" the fast path needs at least; stable = GTH path forced, fast = fast path forced)")
    print(
        f"{'n':>4} {'ours logZ+mu':>13} {'baseline':>9} {'speed-up':>8} {'LAPACK floor':>12} {'entropy/mu':>10} {'stable/fast':>11} {'T2 R=S=1':>9}"
    )
    for n in (30, 60):
        scores = (torch.randn(64, n + 1, n + 1, generator=gen) * 2).to(device)
        lap = torch.randn(64, n, n, generator=gen).to(device) + n * torch.eye(n, device=device)
        eye = torch.eye(n, device=device).expand_as(lap)
        floor = median_ms(
            lambda: torch.linalg.lu_solve(*torch.linalg.lu_factor_ex(lap)[:2], eye, left=False),
            args.repeats,
            device=device,
        )
        ours = median_ms(lambda: TreeDistribution(scores).marginals, args.repeats, device=device)
        base = median_ms(lambda: autograd_logdet_marginals(scores), args.repeats, device=device)
        ent = median_ms(lambda: TreeDistribution(scores).entropy(), args.repeats, device=device)
        fast = median_ms(lambda: TreeDistribution(scores, stable=False).marginals, args.repeats, device=device)
        stable = median_ms(
            lambda: TreeDistribution(scores, stable=True).marginals, max(3, args.repeats // 5), device=device
        )
        ones = torch.ones_like(scores)
        t2 = (
            median_ms(
                lambda: TreeDistribution(scores).second_order(ones, scores), max(3, args.repeats // 3), device=device
            )
            if n == 30
            else float("nan")
        )
        print(
            f"{n:>4} {ours:>10.3f} ms {base:>6.3f} ms {base / ours:>7.2f}x {floor:>9.3f} ms {ent / ours:>10.2f} {stable / fast:>11.2f} {t2:>6.2f} ms"
        )


if __name__ == "__main__":
    main()
