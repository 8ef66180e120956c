"""High-precision reference for log Z and marginals (mpmath, test-only).

Koo et al. (2007)'s determinant and inverse evaluated with `dps` decimal digits, enough to
absorb the cancellation that float64 elimination suffers on peaked scores.
"""

from __future__ import annotations

import mpmath
import torch
from torch import Tensor


def reference(scores: Tensor, n: int, single_root: bool, dps: int = 120):
    """``(log Z (float), marginals (n+1, n+1) float64 tensor)`` for one sentence."""
    s = scores[: n + 1, : n + 1].detach().to(torch.float64).tolist()
    with mpmath.workdps(dps):
        shift = [max(s[h][m] for h in range(n + 1) if h != m) if m else 0 for m in range(n + 1)]
        w = [
            [
                mpmath.e ** (mpmath.mpf(s[h][m]) - shift[m]) if (h != m and m > 0) else mpmath.mpf(0)
                for m in range(n + 1)
            ]
            for h in range(n + 1)
        ]
        lap = mpmath.zeros(n, n)
        for m in range(1, n + 1):
            for h in range(1, n + 1):
                if h != m:
                    lap[h - 1, m - 1] = -w[h][m]
                    lap[m - 1, m - 1] += w[h][m]
            if not single_root:
                lap[m - 1, m - 1] += w[0][m]
        if single_root:
            for m in range(1, n + 1):
                lap[0, m - 1] = w[0][m]
        det = mpmath.det(lap)
        inv = lap**-1
        mu = [[0.0] * (n + 1) for _ in range(n + 1)]
        for m in range(1, n + 1):
            i = m - 1
            for h in range(1, n + 1):
                if h == m:
                    continue
                j = h - 1
                if single_root:
                    val = w[h][m] * ((inv[i, i] if i != 0 else 0) - (inv[i, j] if j != 0 else 0))
                else:
                    val = w[h][m] * (inv[i, i] - inv[i, j])
                mu[h][m] = float(val)
            mu[0][m] = float(w[0][m] * (inv[i, 0] if single_root else inv[i, i]))
        log_z = float(mpmath.log(det) + sum(shift))
    return log_z, torch.tensor(mu, dtype=torch.float64)
