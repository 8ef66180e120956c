"""Engine speed: ours vs baselines implemented here, measured in one run.

    python benchmarks/bench_engine.py            # CPU, 2 threads (the issue's setting)
    python benchmarks/bench_engine.py --device cuda

Reports medians over repeated calls (after warm-up):
1. log Z + marginals, batch 64, float32, n = 30 and 60: ours vs the common "autograd through
   logdet" baseline (unshifted Laplacian, marginals = d log Z / d scores).
2. entropy / marginals and stable path / fast path ratios.
3. second_order with R = S = 1 at n = 30.
4. Zmigrod et al. (2021) Table 1 shape: entropy by T1 (O(n³)) vs the O(n⁴) method that
   calls the matrix-tree theorem once per word (E[s(head(m), m)] = det(L̂ with column m
   weighted by s) / Z, since det is linear in each column), at mean lengths 9..36.
5. The GE objective's gradient (§6.4): ours (T1 plus reverse mode, O(n³ + n²F)) vs the
   O(n⁴F)-style covariance method that materialises Cov(1_e, 1_e') for all arc pairs.
"""

from __future__ import annotations

import argparse
import statistics
import time

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
    weights = scores.exp() * (1 - torch.eye(n + 1, dtype=scores.dtype))
    words = weights[:, 1:, 1:]
    lap = torch.diag_embed(words.sum(1)) - words
    lap = torch.cat([weights[:, 0:1, 1:], lap[:, 1:]], dim=1)
    log_z = torch.logdet(lap)
    (marginals,) = torch.autograd.grad(log_z.sum(), scores)
    return log_z, marginals


def entropy_per_word_mtt(scores: torch.Tensor) -> torch.Tensor:
    """Baseline O(n⁴) entropy: one matrix-tree determinant per word (single-root).

    H = log Z − Σ_m E[s(head(m), m)], and E[s(head(m), m)] = det(L̂_m^s) / det(L̂) where L̂_m^s
    is L̂ with column m rebuilt from the weights w(h, m)·s(h, m) (det is linear in a column).
    """
    n = scores.shape[-1] - 1
    lengths = torch.full((scores.shape[0],), n, dtype=torch.long)
    mask = arc_mask(lengths, n)
    weights, shift = laplacian.shifted_weights(scores, mask)
    lap = laplacian.laplacian_matrix(weights, lengths, True)
    log_z = torch.logdet(lap) + shift.sum(-1)
    total = torch.zeros_like(log_z)
    values = torch.where(mask, scores, torch.zeros_like(scores))
    for m in range(1, n + 1):
        weighted = weights.clone()
        weighted[:, :, m] = weights[:, :, m] * values[:, :, m]
        lap_m = laplacian.laplacian_matrix(weighted, lengths, True)
        # column m of lap_m is linear in the s-weighted arcs into m; other columns unchanged
        mixed = lap.clone()
        mixed[:, :, m - 1] = lap_m[:, :, m - 1]
        total = total + torch.linalg.det(mixed) / torch.linalg.det(lap)
    return log_z - total


def ge_gradient_ours(scores: torch.Tensor, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """∇_scores ‖E[f] − f̃‖² by T1 and reverse mode: O(n³ + n²F) (Zmigrod et al. 2021, §6.4)."""
    scores = scores.detach().requires_grad_(True)
    expected = TreeDistribution(scores, stable=False).expectation(features)  # (B, F)
    objective = ((expected - target) ** 2).sum()
    (grad,) = torch.autograd.grad(objective, scores)
    return grad


def ge_gradient_covariance(scores: torch.Tensor, features: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Baseline: materialise Cov(1_e, 1_e') for all arc pairs (n⁴ entries), then contract.

    ∂E[f_i]/∂θ_e = Σ_e' Cov(1_e, 1_e') f_i(e'); Cov from the pairwise formula
    −w_e w_e' X[m_e', e] X[m_e, e'] + δ_ee' μ_e with X[j, e] = (L̂⁻¹ a_e)_j (single-root).
    """
    n = scores.shape[-1] - 1
    batch = scores.shape[0]
    lengths = torch.full((batch,), n, dtype=torch.long)
    mask = arc_mask(lengths, n)
    dist = TreeDistribution(scores, stable=False)
    mu = dist.marginals
    weights, _ = laplacian.shifted_weights(scores, mask)
    inverse = torch.linalg.inv(laplacian.laplacian_matrix(weights, lengths, True))
    # X[b, j, h, m] for arcs h -> m (ROOT h = 0), words 0-based in j.
    gate = torch.ones(n, dtype=scores.dtype)
    gate[0] = 0
    dep_part = inverse * gate  # A[j, m'] [m' != 0]
    x_words = dep_part.unsqueeze(2) - (inverse * gate).unsqueeze(3)  # (B, j, h', m')
    x_root = inverse[:, :, 0:1].expand(batch, n, n).unsqueeze(2)  # (B, j, 1, m')
    x = torch.cat([x_root, x_words], dim=2)  # (B, j, h, m')
    x = torch.cat([torch.zeros_like(x[..., :1]), x], dim=-1)  # dependent index m = m' + 1
    w = weights * mask
    # cov[b, (h, m), (h2, m2)] = -w(h,m) w(h2,m2) X[m2-1, (h,m)] X[m-1, (h2,m2)]
    x_at_dep = x[:, :, :, 1:]  # (B, j, h, m')
    first = x_at_dep.permute(0, 2, 3, 1)  # (B, h, m', j) = X[j, (h, m)]
    cov = -torch.einsum("bhm,bgk,bhmk,bgkm->bhmgk", w[:, :, 1:], w[:, :, 1:], first, first)
    diag = mu[:, :, 1:]
    cov = cov + torch.diag_embed(diag.reshape(batch, -1)).reshape(cov.shape)
    expected = dist.expectation(features)
    direction = 2 * (expected - target)  # (B, F)
    projected = torch.einsum("bgkf,bf->bgk", features[:, :, 1:], direction)
    grad = torch.zeros_like(scores)
    grad[:, :, 1:] = torch.einsum("bhmgk,bgk->bhm", cov, projected)
    return grad * mask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = args.device
    gen = torch.Generator().manual_seed(0)
    print(f"device={device} threads={torch.get_num_threads()} torch={torch.__version__}")

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

    print("\n4. entropy: T1 O(n^3) vs one MTT per word O(n^4), batch 64, float64 (Zmigrod et al. Table 1 shape)")
    print(f"{'n':>4} {'T1 (ms)':>9} {'O(n^4) (ms)':>12} {'speed-up':>9}")
    for n in (9, 12, 18, 25, 36):
        scores = (torch.randn(64, n + 1, n + 1, generator=gen, dtype=torch.float64) * 2).to(device)
        reference = entropy_per_word_mtt(scores)
        assert torch.allclose(TreeDistribution(scores).entropy(), reference, atol=1e-6), "baseline disagrees"
        ours = median_ms(lambda: TreeDistribution(scores, stable=False).entropy(), args.repeats, device=device)
        base = median_ms(lambda: entropy_per_word_mtt(scores), max(3, args.repeats // 3), device=device)
        print(f"{n:>4} {ours:>9.3f} {base:>12.3f} {base / ours:>8.1f}x")

    print("\n5. GE objective gradient, F = 20 features, batch 16, float64")
    print(f"{'n':>4} {'ours (ms)':>10} {'covariance (ms)':>16} {'speed-up':>9}")
    for n in (10, 20, 30):
        scores = (torch.randn(16, n + 1, n + 1, generator=gen, dtype=torch.float64) * 2).to(device)
        features = torch.randn(16, n + 1, n + 1, 20, generator=gen, dtype=torch.float64).to(device)
        target = torch.randn(16, 20, generator=gen, dtype=torch.float64).to(device)
        g1 = ge_gradient_ours(scores, features, target)
        g2 = ge_gradient_covariance(scores, features, target)
        assert torch.allclose(g1, g2, atol=1e-7), "baseline disagrees"
        ours = median_ms(lambda: ge_gradient_ours(scores, features, target), args.repeats, device=device)
        base = median_ms(
            lambda: ge_gradient_covariance(scores, features, target), max(3, args.repeats // 3), device=device
        )
        print(f"{n:>4} {ours:>10.3f} {base:>16.3f} {base / ours:>8.1f}x")


if __name__ == "__main__":
    main()
