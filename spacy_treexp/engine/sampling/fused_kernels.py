"""The numba kernels of :mod:`.fused`, at module level so that numba's on-disk cache
(``cache=True``) finds them again in every process. Imported by :mod:`.fused` on first use
only: importing this module needs numba. Each function mirrors its torch twin (named in its
docstring); :mod:`.fused` documents the arguments."""

from __future__ import annotations

import math

import numba
import numpy as np

jit = numba.njit(cache=True, nogil=True, fastmath=False, error_model="numpy")


@jit
def colbourn(
    inverse, weights, first, which, lengths, uniforms, single_root, tolerance, heads, log_prob, failed, lo, hi
):
    """Colbourn's draws for sentences lo..hi-1, sample by sample (colbourn._colbourn_chunk);
    sentence b reads the inverse, weights and first marginals of distribution ``which[b]``.
    Its per-word steps are :func:`conditionals` and :func:`condition` written out in place:
    calling them (even with numba's ``inline="always"``) made it 10-20% slower
    (``bench_sampling.py --section targets --threads 1 --cpu-time``, interleaved runs:
    170,000 against 152,000 trees/s)."""
    samples = uniforms.shape[0]
    size = uniforms.shape[2] + 1
    A = np.empty((size, size))
    probs = np.empty(size)
    lc = np.empty(size)
    y = np.empty(size)
    end = np.empty(size, dtype=np.int64)
    for b in range(lo, hi):
        n = lengths[b]
        q = which[b]
        for s in range(samples):
            for r in range(n):
                for c in range(n):
                    A[r, c] = inverse[q, r, c]
            for v in range(n + 1):
                end[v] = v
            end[0] = size  # ROOT: its chain never ends at a word
            root_free = True
            total_log = 0.0
            bad = False
            for m in range(1, n + 1):
                j = m - 1
                # word m's conditionals (Conditioner.probs)
                if m == 1:
                    for h in range(n + 1):
                        probs[h] = first[q, h]
                else:
                    d = A[j, j]
                    if single_root:
                        probs[0] = A[j, 0] if root_free else 0.0
                        probs[1] = d
                    else:
                        probs[0] = d
                        probs[1] = d - A[j, 0]
                    for h in range(2, n + 1):
                        probs[h] = d - A[j, h - 1]
                    for h in range(n + 1):
                        p = probs[h] * weights[q, m, h]
                        probs[h] = p if (p > 0.0 and end[h] != m) else 0.0
                total = 0.0
                for h in range(n + 1):
                    total += probs[h]
                    lc[h] = total  # the running sum (the CDF), reused below
                if m > 1 and abs(total - 1.0) > tolerance:
                    bad = True
                    break
                if not total > 0.0:
                    bad = True
                    break
                # inverse-CDF draw: first h whose running sum exceeds u * total
                threshold = uniforms[s, b, j] * lc[n]
                head = n
                for h in range(n + 1):
                    if lc[h] > threshold:
                        head = h
                        break
                total_log += math.log(probs[head] / total)
                heads[s, b, m] = head
                # Sherman-Morrison: L^-1 c for the single arc head -> m (_update_columns)
                if single_root and head == 0:
                    for r in range(j, n):
                        lc[r] = A[r, 0]
                elif single_root and m == 1:
                    for r in range(j, n):
                        lc[r] = -A[r, head - 1]
                elif head == 0 or (single_root and head == 1):
                    for r in range(j, n):
                        lc[r] = A[r, j]
                else:
                    for r in range(j, n):
                        lc[r] = A[r, j] - A[r, head - 1]
                coefficient = 1.0 / lc[j]
                for c in range(n):
                    y[c] = A[j, c] * coefficient
                for r in range(j + 1, n):
                    x = lc[r]
                    for c in range(n):
                        A[r, c] -= x * y[c]
                # the chains of fixed heads: those ending at m now end where head's does
                new_end = end[head]
                for v in range(n + 1):
                    if end[v] == m:
                        end[v] = new_end
                if head == 0:
                    root_free = False
            log_prob[s, b] = total_log
            failed[s, b] = bad


@jit
def conditionals(A, w, first, m, n, end, root_free, single_root, probs):
    """Word m's conditional head probabilities for one state (Conditioner.probs); returns
    their total."""
    j = m - 1
    if m == 1:
        for h in range(n + 1):
            probs[h] = first[h]
    else:
        d = A[j, j]
        if single_root:
            probs[0] = A[j, 0] if root_free else 0.0
            probs[1] = d
        else:
            probs[0] = d
            probs[1] = d - A[j, 0]
        for h in range(2, n + 1):
            probs[h] = d - A[j, h - 1]
        for h in range(n + 1):
            p = probs[h] * w[m, h]
            probs[h] = p if (p > 0.0 and end[h] != m) else 0.0
    total = 0.0
    for h in range(n + 1):
        total += probs[h]
    return total


@jit
def condition(A, m, n, head, single_root, end, lc, y):
    """Sherman-Morrison: condition one state's rows j+1.. of L-hat^{-1} on head -> m
    (Conditioner.fix; L^-1 c as _update_columns), and its chains of fixed heads."""
    j = m - 1
    if single_root and head == 0:
        for r in range(j, n):
            lc[r] = A[r, 0]
    elif single_root and m == 1:
        for r in range(j, n):
            lc[r] = -A[r, head - 1]
    elif head == 0 or (single_root and head == 1):
        for r in range(j, n):
            lc[r] = A[r, j]
    else:
        for r in range(j, n):
            lc[r] = A[r, j] - A[r, head - 1]
    coefficient = 1.0 / lc[j]
    for c in range(n):
        y[c] = A[j, c] * coefficient
    for r in range(j + 1, n):
        x = lc[r]
        for c in range(n):
            A[r, c] -= x * y[c]
    new_end = end[head]
    for v in range(n + 1):
        if end[v] == m:
            end[v] = new_end


@jit
def uniform(state):
    """The next U[0, 1) of a SplitMix64 stream (Steele et al. 2014), 53 random bits."""
    state[0] += np.uint64(0x9E3779B97F4A7C15)
    z = state[0]
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return float(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@jit
def insert(best, best_parent, best_head, count, k, g, p, h):
    """Insert child h of beam p with Gumbel g into the sorted top-k (ties: the earlier
    first); returns the new count."""
    slot = count if count < k else k - 1
    while slot > 0 and best[slot - 1] < g:
        best[slot] = best[slot - 1]
        best_parent[slot] = best_parent[slot - 1]
        best_head[slot] = best_head[slot - 1]
        slot -= 1
    best[slot] = g
    best_parent[slot] = p
    best_head[slot] = h
    return count + 1 if count < k else k


@jit
def beam(inverse, weights, first, lengths, seeds, k, single_root, tolerance, heads, failed, lo, hi):
    """Stochastic beam search for sentences lo..hi-1 (without_replacement._beam_search)."""
    size = inverse.shape[1] + 1
    inf = np.inf
    seen = np.zeros(size, dtype=np.int64)  # seen[h] == stamp: child h of this race arrived
    stamp = 0
    state = np.zeros(1, dtype=np.uint64)
    A = np.empty((k, size, size))
    chosen = np.full((k, size), -1, dtype=np.int64)
    end = np.empty((k, size), dtype=np.int64)
    root_free = np.ones(k, dtype=np.bool_)
    gumbel = np.full(k, -inf)
    log_p = np.full(k, -inf)
    alive = np.zeros(k, dtype=np.bool_)
    order = np.zeros(k, dtype=np.int64)  # live rows by decreasing Gumbel
    probs = np.empty((k, size))
    ratio = np.empty(size)
    best = np.empty(k)
    best_parent = np.empty(k, dtype=np.int64)
    best_head = np.empty(k, dtype=np.int64)
    row_of = np.empty(k, dtype=np.int64)
    kept = np.zeros(k, dtype=np.bool_)
    new_gumbel = np.empty(k)
    new_log_p = np.empty(k)
    lc = np.empty(size)
    y = np.empty(size)
    for b in range(lo, hi):
        n = lengths[b]
        state[0] = np.uint64(seeds[b])
        for r in range(n):
            for c in range(n):
                A[0, r, c] = inverse[b, r, c]
        for v in range(n + 1):
            end[0, v] = v
        end[0, 0] = size
        for i in range(k):
            alive[i] = False
            for v in range(size):
                chosen[i, v] = -1
        root_free[0] = True
        gumbel[0] = 0.0
        log_p[0] = 0.0
        alive[0] = True
        order[0] = 0
        live = 1
        bad = False
        for m in range(1, n + 1):
            j = m - 1
            # children of every live beam, by decreasing parent Gumbel; keep the k largest
            count = 0
            for o in range(live):
                p = order[o]
                T = gumbel[p]
                if count == k and not T > best[k - 1]:
                    break  # no child of this beam or a later one can enter (G~ <= T)
                total = conditionals(A[p], weights[b], first[b], m, n, end[p], root_free[p], single_root, probs[p])
                if m > 1 and abs(total - 1.0) > tolerance or not total > 0.0:
                    bad = True
                    break
                rho = math.exp(T - log_p[p])
                # the race's expected arrivals before its Gumbels fall below the k-th best
                race = inf if count < k else total / rho * math.expm1(T - best[k - 1])
                if not race < 0.5 * (n + 1):
                    # every child's key r = E rho / q (E ~ Exp(1)); G~ = T - log1p(r - min r)
                    smallest = inf
                    overflow = False
                    for h in range(n + 1):
                        q = probs[p, h]
                        r = -math.log(1.0 - uniform(state)) * rho / q if q > 0.0 else inf
                        overflow |= q > 0.0 and r == inf
                        ratio[h] = r
                        if r < smallest:
                            smallest = r
                    if overflow or smallest == inf or not rho > 0.0:
                        bad = True  # keys out of range (torch restores them)
                        break
                    bound = inf  # r - smallest below it, or G~ cannot beat the k-th best
                    if count == k:
                        bound = math.expm1(T - best[k - 1]) * (1.0 + 1e-9) + 1e-300
                    for h in range(n + 1):
                        if ratio[h] - smallest < bound:
                            g = T - math.log1p(ratio[h] - smallest)
                            if count < k or g > best[k - 1]:
                                count = insert(best, best_parent, best_head, count, k, g, p, h)
                                if count == k:
                                    bound = math.expm1(T - best[k - 1]) * (1.0 + 1e-9) + 1e-300
                    continue
                # the keys' race as one Poisson process of rate total / rho: each arrival is
                # a child drawn by q, a child's key its first arrival; its G~ falls with the
                # time s since the first arrival, so the race stops at the k-th best
                scale = rho / total
                if not (scale > 0.0 and scale < inf):
                    bad = True
                    break
                cumulative = ratio  # (reused)
                running = 0.0
                for h in range(n + 1):
                    running += probs[p, h]
                    cumulative[h] = running
                stamp += 1
                elapsed = 0.0
                g = T
                arrivals = 0
                while g > best[k - 1]:
                    threshold = uniform(state) * cumulative[n]
                    lo_h, hi_h = 0, n
                    while lo_h < hi_h:  # the first h whose running sum exceeds the threshold
                        mid = (lo_h + hi_h) // 2
                        if cumulative[mid] > threshold:
                            hi_h = mid
                        else:
                            lo_h = mid + 1
                    if seen[lo_h] != stamp:
                        seen[lo_h] = stamp
                        count = insert(best, best_parent, best_head, count, k, g, p, lo_h)
                    elapsed += -math.log(1.0 - uniform(state)) * scale
                    g = T - math.log1p(elapsed)
                    arrivals += 1
                    if arrivals > 1_000_000:
                        bad = True
                        break
                if bad:
                    break
            if bad or count == 0:
                bad = True
                break
            # rows (branch_plan): a parent's first child keeps its row, the others take the
            # rows of dropped parents in order; at word 1 child i takes row i
            for i in range(k):
                kept[i] = False
            if m == 1:
                for i in range(count):
                    row_of[i] = i
            else:
                for i in range(count):
                    kept[best_parent[i]] = True
                free = 0
                for p in range(k):  # duplicates in order of parent, then of rank
                    taken = False
                    for i in range(count):
                        if best_parent[i] != p:
                            continue
                        if not taken:
                            row_of[i] = p
                            taken = True
                        else:
                            while kept[free]:
                                free += 1
                            row_of[i] = free
                            free += 1
            for i in range(count):
                p = best_parent[i]
                new_gumbel[i] = best[i]
                new_log_p[i] = log_p[p] + math.log(probs[p, best_head[i]])
            for i in range(count):  # copy the parents' states into the new rows
                p, r = best_parent[i], row_of[i]
                if r == p:
                    continue
                for a in range(j, n):
                    for c in range(n):
                        A[r, a, c] = A[p, a, c]
                for v in range(n + 1):
                    chosen[r, v] = chosen[p, v]
                    end[r, v] = end[p, v]
                root_free[r] = root_free[p]
            for i in range(k):
                alive[i] = False
            for i in range(count):
                r, h = row_of[i], best_head[i]
                alive[r] = True
                gumbel[r] = new_gumbel[i]
                log_p[r] = new_log_p[i]
                order[i] = r
                chosen[r, m] = h
                if m < n:
                    condition(A[r], m, n, h, single_root, end[r], lc, y)
                if h == 0:
                    root_free[r] = False
            live = count
        failed[b] = bad
        if not bad:
            for i in range(live):
                r = order[i]
                for v in range(n + 1):
                    heads[i, b, v] = chosen[r, v]
