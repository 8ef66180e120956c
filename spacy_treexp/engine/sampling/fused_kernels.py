"""The numba kernels of :mod:`.fused`, at module level so that numba's on-disk cache
(``cache=True``) finds them again in every process. Imported by :mod:`.fused` on first use
only: importing this module needs numba. Each function mirrors its torch twin (named in its
docstring); :mod:`.fused` documents the arguments."""

from __future__ import annotations

import math

import numpy as np

from spacy_treexp.engine.jit import jit


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
def uniform(state):
    """The next U[0, 1) of a SplitMix64 stream (Steele et al. 2014), 53 random bits."""
    state[0] += np.uint64(0x9E3779B97F4A7C15)
    z = state[0]
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return float(z >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@jit
def pivot(A, p, m, n, w, head, single_root, lc, y):
    """The rank-one factors of conditioning beam p's L-hat^{-1} ``A[p]`` on head -> m
    (Conditioner.fix), j = m - 1: lc[j..] = rows j.. of L^-1 c (as _update_columns) and
    y = row j / lc[j] over the ``w`` columns (the n columns and zero padding). (Whole arrays
    and indices, never views: a view costs two atomic reference counts.)"""
    j = m - 1
    if single_root and head == 0:
        for r in range(j, n):
            lc[r] = A[p, r, 0]
    elif single_root and m == 1:
        for r in range(j, n):
            lc[r] = -A[p, r, head - 1]
    elif head == 0 or (single_root and head == 1):
        for r in range(j, n):
            lc[r] = A[p, r, j]
    else:
        for r in range(j, n):
            lc[r] = A[p, r, j] - A[p, r, head - 1]
    coefficient = 1.0 / lc[j]
    for c in range(w):
        y[c] = A[p, j, c] * coefficient


@jit
def condition(A, p, m, n, w, head, single_root, lc, y):
    """Sherman-Morrison in place: rows j+1.. of beam p's L-hat^{-1} conditioned on head -> m.
    The rows run over ``w`` columns, a multiple of 8 (zero padding beyond n): whole SIMD
    vectors."""
    pivot(A, p, m, n, w, head, single_root, lc, y)
    for r in range(m, n):
        x = lc[r]
        for c in range(w):
            A[p, r, c] -= x * y[c]


@jit
def condition_into(A, p, target, m, n, w, head, single_root, lc, y):
    """:func:`condition` of beam p written into the rows of beam ``target`` (the copy and
    the update in one pass; beam p unchanged)."""
    pivot(A, p, m, n, w, head, single_root, lc, y)
    for r in range(m, n):
        x = lc[r]
        for c in range(w):
            A[target, r, c] = A[p, r, c] - x * y[c]


@jit
def scan(probs, p, n, threshold):
    """The first head h <= n of beam p whose running sum of ``probs[p]`` exceeds ``threshold``;
    the last possible head if rounding leaves none (-1 if none is possible)."""
    running = 0.0
    last = -1
    for h in range(n + 1):
        if probs[p, h] > 0.0:
            last = h
            running += probs[p, h]
            if running > threshold:
                return h
    return last


@jit
def draw_unseen(probs, p, total, seen, stamp, n, state):
    """A head h of beam p with seen[p, h] != stamp, drawn in proportion to probs[p, h]: by
    rejection from all heads (a few tries), then over the unseen heads directly (both exact)."""
    for _ in range(4):
        h = scan(probs, p, n, uniform(state) * total)
        if seen[p, h] != stamp:
            return h
    unseen = 0.0
    for h in range(n + 1):
        if seen[p, h] != stamp:
            unseen += probs[p, h]
    threshold = uniform(state) * unseen
    running = 0.0
    last = -1
    for h in range(n + 1):
        if seen[p, h] != stamp and probs[p, h] > 0.0:
            last = h
            running += probs[p, h]
            if running > threshold:
                break
    return last


@jit
def log1p(x):
    """log(1 + x) for x >= 0 to a few ulps, by one log (Goldberg 1991, Theorem 4): half the
    time of libm's log1p, called once per child."""
    u = 1.0 + x
    if u == 1.0 or x > 1e300:
        return x if u == 1.0 else math.log(x)
    return math.log(u) * (x / (u - 1.0))


@jit
def softplus(x):
    """log(1 + e^x) without overflow (0 at x = -inf)."""
    if x > 0.0:
        return x + math.log1p(math.exp(-x))
    return math.log1p(math.exp(x))


@jit
def exact_conditionals(scores, q, end, probs, p, m, n, size, chain, reach, leave):
    """Word m's head distribution (into probs[p]) under multi-root log-weights ``scores[q]``
    ([h, v]) given the heads of words 1..m-1 (the chains of beam p's ``end``), exactly and in
    log space: P(h) is proportional to w(h -> m) P_h(the walk reaches ROOT before m) (Wilson
    1996: the last exit from m of the loop-erased walk from m; :mod:`.trapped` uses the same
    decomposition), a fixed head's walk following its chain of fixed heads. The absorption
    probabilities come from GTH state reduction of the walk on the words after m (sums of
    positive terms only, in log space; Grassmann, Taksar & Heyman 1985), then back
    substitution: O((n - m)^3). Returns the distribution's sum (1 up to rounding; 0: no
    head possible)."""
    neg = -np.inf
    # the walk's log-weights between states: ROOT 0 (absorbing), m (absorbing), words m+1..n
    for u in range(m + 1, n + 1):
        for x in range(n + 1):
            chain[u, x] = neg
        for h in range(n + 1):
            s = scores[q, h, u]
            if s == neg or h == u:
                continue
            e = end[p, h]
            target = 0 if e == size else e
            if target != u:  # (else an arc closing a cycle with fixed heads: in no tree)
                chain[u, target] = log_add(chain[u, target], s)
    # eliminate words m+1..n in order; leave[u]: log of u's weight to the states left after it
    for u in range(m + 1, n + 1):
        out = log_add(chain[u, 0], chain[u, m])
        for x in range(u + 1, n + 1):
            out = log_add(out, chain[u, x])
        leave[u] = out
        if out == neg:
            continue  # (a state with no way out is never entered on a tree's walk)
        for a in range(u + 1, n + 1):
            into = chain[a, u]
            if into == neg:
                continue
            c = into - out
            chain[a, 0] = log_add(chain[a, 0], c + chain[u, 0])
            chain[a, m] = log_add(chain[a, m], c + chain[u, m])
            for x in range(u + 1, n + 1):
                if x != a and chain[u, x] > neg:
                    chain[a, x] = log_add(chain[a, x], c + chain[u, x])
    # back substitution: reach[x] = log P_x(the walk reaches ROOT before m)
    reach[0] = 0.0
    reach[m] = neg
    for u in range(n, m, -1):
        value = chain[u, 0]
        for x in range(u + 1, n + 1):
            if chain[u, x] > neg and reach[x] > neg:
                value = log_add(value, chain[u, x] + reach[x])
        reach[u] = value - leave[u] if leave[u] > neg else neg
    top = neg
    for h in range(n + 1):
        probs[p, h] = neg
        s = scores[q, h, m]
        if s == neg or h == m:
            continue
        e = end[p, h]
        target = 0 if e == size else e
        if target == m:  # closes a cycle with the fixed heads
            continue
        value = s + reach[target]
        probs[p, h] = value
        if value > top:
            top = value
    total = 0.0
    for h in range(n + 1):
        value = math.exp(probs[p, h] - top) if top > neg and probs[p, h] > neg else 0.0
        probs[p, h] = value
        total += value
    if not total > 0.0:
        return 0.0
    for h in range(n + 1):
        probs[p, h] /= total
    return 1.0


@jit
def beam(
    inverse,
    weights,
    first,
    scores,
    exact_dist,
    which,
    gumbel0,
    log_rho0,
    lengths,
    seeds,
    k,
    single_root,
    can_exact,
    tolerance,
    heads,
    failed,
    lo,
    hi,
):
    """Stochastic beam search for sentences lo..hi-1 (without_replacement._beam_search): at each
    word, the k best children of all beams by a k-way merge of the beams' exponential races
    (see fused.beam_search). Sentence b starts from the beams i with ``which[b, i] >= 0``
    (packed first, by decreasing Gumbel ``gumbel0[b, i]``, T - l ``log_rho0[b, i]``), beam i
    on distribution ``which[b, i]`` of ``inverse``, ``weights``, ``first``, ``scores``. A beam
    whose conditionals miss ``tolerance`` (or whose distribution has ``exact_dist``) takes
    them from :func:`exact_conditionals` for the rest of its tree when ``can_exact``
    (multi-root log-weights ``scores``), else its sentence fails. With ``can_exact`` the races
    run in log space (``rho``: log e^(T - l), ``elapsed``: log of the race time), where a
    beam's children may be far below it (exact conditionals of 1e-300); else in linear space
    (cheaper: a beam's keys stay in range on well-conditioned sentences)."""
    size = inverse.shape[1] + 1
    inf = np.inf
    state = np.zeros(1, dtype=np.uint64)
    # per row: L-hat^{-1} conditioned on its prefix (rows j.. live), columns padded to 8s
    A = np.zeros((k, size, ((size - 1 + 7) // 8) * 8))
    chosen = np.full((k, size), -1, dtype=np.int64)
    end = np.empty((k, size), dtype=np.int64)
    root_free = np.ones(k, dtype=np.bool_)
    gumbel = np.zeros(k)
    order = np.zeros(k, dtype=np.int64)  # live rows by decreasing Gumbel
    probs = np.empty((k, size))
    seen = np.zeros((k, size), dtype=np.int64)  # seen[p, h] == stamp: child h of p taken at this word
    stamp = 0
    started = np.zeros(k, dtype=np.bool_)  # the beam's race has begun at this word
    rho = np.ones(k)  # e^(T - l), T the beam's Gumbel, l its log-probability: its race's time scale
    elapsed = np.empty(k)  # race time since the beam's first child arrived
    unseen = np.empty(k)  # the conditionals' mass of the children not taken yet
    total_of = np.empty(k)
    heap_key = np.empty(k)  # max-heap of the beams by the Gumbel of their next child
    heap_row = np.empty(k, dtype=np.int64)
    new_gumbel = np.empty(k)
    new_rho = np.empty(k)
    new_elapsed = np.empty(k)
    new_parent = np.empty(k, dtype=np.int64)
    new_head = np.empty(k, dtype=np.int64)
    row_of = np.empty(k, dtype=np.int64)
    stays = np.zeros(k, dtype=np.bool_)  # the child continues its parent's row
    kept = np.zeros(k, dtype=np.bool_)
    claimed = np.zeros(k, dtype=np.bool_)
    lc = np.empty(size)
    y = np.empty(A.shape[2])
    dist_of = np.zeros(k, dtype=np.int64)  # each row's distribution
    exact = np.zeros(k, dtype=np.bool_)  # each row's conditionals by exact_conditionals
    chain = np.empty((size, size))  # exact_conditionals' work space
    reach = np.empty(size)
    leave = np.empty(size)
    for b in range(lo, hi):
        n = lengths[b]
        w = ((n + 7) // 8) * 8
        state[0] = np.uint64(seeds[b])
        live = 0
        for i in range(k):
            q = which[b, i]
            if q < 0:
                break
            dist_of[i] = q
            exact[i] = can_exact and exact_dist[q]
            if not exact[i]:
                for r in range(n):
                    for c in range(n):
                        A[i, r, c] = inverse[q, r, c]
                    for c in range(n, w):
                        A[i, r, c] = 0.0
            for v in range(n + 1):
                end[i, v] = v
                chosen[i, v] = -1
            end[i, 0] = size  # ROOT: its chain never ends at a word
            root_free[i] = True
            gumbel[i] = gumbel0[b, i]  # the empty prefix: 0 (a shift, not a bias)
            rho[i] = log_rho0[b, i] if can_exact else math.exp(log_rho0[b, i])  # the empty prefix's: 0
            order[i] = i
            live += 1
        bad = live == 0
        for m in range(1, n + 1):
            j = m - 1
            stamp += 1
            # the beams keyed by their first child's Gumbel, their own: ``order`` is a heap
            for i in range(live):
                p = order[i]
                heap_key[i] = gumbel[p]
                heap_row[i] = p
                started[p] = False
            heap = live
            count = 0
            while count < k and heap > 0:
                g, p = heap_key[0], heap_row[0]  # the best child not taken yet is p's next
                T = gumbel[p]
                if not started[p]:
                    # word m's conditionals (Conditioner.probs) and their sum
                    q = dist_of[p]
                    if exact[p]:
                        pass
                    elif m == 1:
                        for h in range(n + 1):
                            probs[p, h] = first[q, h]
                    else:
                        d = A[p, j, j]
                        if single_root:
                            probs[p, 0] = A[p, j, 0] if root_free[p] else 0.0
                            probs[p, 1] = d
                        else:
                            probs[p, 0] = d
                            probs[p, 1] = d - A[p, j, 0]
                        for c in range(1, n):  # head c + 1
                            probs[p, c + 1] = d - A[p, j, c]
                        for h in range(n + 1):
                            value = probs[p, h] * weights[q, m, h]
                            probs[p, h] = value if (value > 0.0 and end[p, h] != m) else 0.0
                    s0 = s1 = s2 = s3 = 0.0  # (four sums side by side: no chain of dependent adds)
                    for c in range(0, n + 1 - 3, 4):
                        s0 += probs[p, c]
                        s1 += probs[p, c + 1]
                        s2 += probs[p, c + 2]
                        s3 += probs[p, c + 3]
                    for h in range(n + 1 - (n + 1) % 4, n + 1):
                        s0 += probs[p, h]
                    total = (s0 + s1) + (s2 + s3)
                    if not exact[p] and ((m > 1 and abs(total - 1.0) > tolerance) or not total > 0.0):
                        exact[p] = can_exact  # drifted: exact from now on, or the sentence fails
                        if not can_exact:
                            bad = True
                            break
                    if exact[p]:
                        total = exact_conditionals(scores, q, end, probs, p, m, n, size, chain, reach, leave)
                        if not total > 0.0:
                            bad = True
                            break
                    if not ((rho[p] > -inf if can_exact else rho[p] > 0.0) and rho[p] < inf):
                        bad = True  # keys out of range (torch restores them)
                        break
                    started[p] = True
                    elapsed[p] = -inf if can_exact else 0.0
                    unseen[p] = total
                    total_of[p] = total
                    h = scan(probs, p, n, uniform(state) * total)
                else:
                    h = draw_unseen(probs, p, total_of[p], seen, stamp, n, state)
                new_gumbel[count] = g
                new_elapsed[count] = elapsed[p]
                new_parent[count] = p
                new_head[count] = h
                count += 1
                seen[p, h] = stamp
                if count == k:
                    break
                unseen[p] -= probs[p, h]
                if not unseen[p] > 1e-6 * total_of[p]:  # exact where the difference cancels
                    unseen[p] = 0.0
                    for c in range(n + 1):
                        if seen[p, c] != stamp:
                            unseen[p] += probs[p, c]
                if not unseen[p] > 0.0:  # every child of p taken: off the heap
                    heap -= 1
                    key, p = heap_key[heap], heap_row[heap]
                else:
                    # its next child arrives after an Exp(1) / (unseen mass / rho) wait
                    if can_exact:  # (in logs)
                        wait = math.log(-math.log(1.0 - uniform(state))) + rho[p] - math.log(unseen[p])
                        elapsed[p] = log_add(elapsed[p], wait)
                        key = T - softplus(elapsed[p])
                    else:
                        elapsed[p] += -math.log(1.0 - uniform(state)) * rho[p] / unseen[p]
                        key = T - log1p(elapsed[p])
                    if not key > -inf:
                        bad = True
                        break
                i = 0  # sift (key, p) down from the top
                while True:
                    c = 2 * i + 1
                    if c >= heap:
                        break
                    if c + 1 < heap and heap_key[c + 1] > heap_key[c]:
                        c += 1
                    if not heap_key[c] > key:
                        break
                    heap_key[i] = heap_key[c]
                    heap_row[i] = heap_row[c]
                    i = c
                if heap > 0:
                    heap_key[i] = key
                    heap_row[i] = p
            if bad or count == 0:
                bad = True
                break
            # rows (branch_plan): a parent's first child keeps its row, its others take the
            # rows of the beams without children, in order
            for i in range(k):
                kept[i] = False
                claimed[i] = False
            for i in range(count):
                kept[new_parent[i]] = True
            free = 0
            for i in range(count):
                p = new_parent[i]
                # e^(T - l) of the child: that of p / ((1 + its race time) q) (T - log1p(s) and l + log q)
                if can_exact:
                    new_rho[i] = rho[p] - softplus(new_elapsed[i]) - math.log(probs[p, new_head[i]])
                else:
                    new_rho[i] = rho[p] / ((1.0 + new_elapsed[i]) * probs[p, new_head[i]])
                if not claimed[p]:
                    claimed[p] = True
                    row_of[i] = p
                    stays[i] = True
                else:
                    while kept[free]:
                        free += 1
                    row_of[i] = free
                    free += 1
                    stays[i] = False
            # the children in new rows first (copy and update in one pass, from their
            # parent's state), then those that continue their parent's row (in place)
            for sweep in range(2):
                for i in range(count):
                    if stays[i] != (sweep == 1):
                        continue
                    p, r, h = new_parent[i], row_of[i], new_head[i]
                    if r != p:
                        for v in range(1, m):
                            chosen[r, v] = chosen[p, v]
                        for v in range(n + 1):
                            end[r, v] = end[p, v]
                        root_free[r] = root_free[p]
                        dist_of[r] = dist_of[p]
                        exact[r] = exact[p]
                    if exact[r]:
                        pass  # (its inverse is not read again)
                    elif m < n and r != p:
                        condition_into(A, p, r, m, n, w, h, single_root, lc, y)
                    elif m < n:
                        condition(A, r, m, n, w, h, single_root, lc, y)
                    new_end = end[r, h]  # the chains of fixed heads ending at m now end at h's end
                    for v in range(n + 1):
                        if end[r, v] == m:
                            end[r, v] = new_end
            for i in range(count):
                r, h = row_of[i], new_head[i]
                gumbel[r] = new_gumbel[i]
                rho[r] = new_rho[i]
                order[i] = r
                chosen[r, m] = h
                if h == 0:
                    root_free[r] = False
            live = count
        failed[b] = bad
        if not bad:
            for i in range(live):
                r = order[i]
                for v in range(n + 1):
                    heads[i, b, v] = chosen[r, v]


@jit
def strong_sets(scores, with_root, bound, found):
    """The strongly bound sets of one sentence (trapped._strong_sets, the reference, step for
    step: the same Chu-Liu-Edmonds contraction on sums, the same log-sum-exp order): fills
    ``found`` (>= n, n+1) bool with their word masks, returns how many."""
    size = scores.shape[0]
    s = scores.copy()
    for r in range(size):
        s[r, 0] = -np.inf
        s[r, r] = -np.inf
        if not with_root:
            s[0, r] = -np.inf
    members = np.zeros((size, scores.shape[0]), dtype=np.bool_)  # node i holds the words members[i]
    for i in range(size):
        members[i, i] = True
    binding = np.zeros(size)  # of each node: the sum along its most bound nesting (0: a word)
    count = 0
    words = scores.shape[0]
    while True:
        # every node's best head (the first maximum; NaN counts as the maximum, as np.argmax)
        best = np.zeros(size, dtype=np.int64)
        has_head = np.zeros(size, dtype=np.bool_)
        for c in range(size):
            top = 0
            for r in range(1, size):
                if np.isnan(s[top, c]):
                    break
                if s[r, c] > s[top, c] or np.isnan(s[r, c]):
                    top = r
            best[c] = top
            has_head[c] = np.isfinite(s[top, c])
        has_head[0] = False
        # the cycles of node -> best[node], each in path order (trapped._cycles)
        state = np.zeros(size, dtype=np.int8)
        path = np.empty(size, dtype=np.int64)
        flat = np.empty(size, dtype=np.int64)  # the cycles' nodes, one after another
        starts = np.zeros(size + 1, dtype=np.int64)
        cycles = 0
        for start in range(1, size):
            length = 0
            node = start
            while has_head[node] and state[node] == 0:
                state[node] = 1
                path[length] = node
                length += 1
                node = best[node]
            if has_head[node] and state[node] == 1:
                at = 0
                while path[at] != node:
                    at += 1
                for i in range(at, length):
                    flat[starts[cycles] + i - at] = path[i]
                starts[cycles + 1] = starts[cycles] + length - at
                cycles += 1
            for i in range(length):
                state[path[i]] = 2
        if cycles == 0:
            return count
        adjusted = s.copy()
        keep = np.ones(size, dtype=np.bool_)
        for q in range(cycles):
            for i in range(starts[q], starts[q + 1]):
                c = flat[i]
                shift = s[best[c], c]
                for r in range(size):
                    adjusted[r, c] -= shift
        row = np.empty(size)
        for q in range(cycles):
            first = flat[starts[q]]
            for x in range(size):
                acc = adjusted[first, x]
                for i in range(starts[q] + 1, starts[q + 1]):
                    acc = np.logaddexp(acc, adjusted[flat[i], x])
                row[x] = acc
            for x in range(size):
                adjusted[first, x] = row[x]
            for x in range(size):
                acc = adjusted[x, first]
                for i in range(starts[q] + 1, starts[q + 1]):
                    acc = np.logaddexp(acc, adjusted[x, flat[i]])
                row[x] = acc
            for x in range(size):
                adjusted[x, first] = row[x]
            adjusted[first, first] = -np.inf
            for i in range(starts[q] + 1, starts[q + 1]):
                keep[flat[i]] = False
                for v in range(words):
                    members[first, v] |= members[flat[i], v]
        for q in range(cycles):
            first = flat[starts[q]]
            own = -np.inf
            empty = True
            for x in range(size):
                if keep[x] and x != first:
                    own = adjusted[x, first] if empty else np.logaddexp(own, adjusted[x, first])
                    empty = False
            least = binding[flat[starts[q]]]
            for i in range(starts[q] + 1, starts[q + 1]):
                value = binding[flat[i]]
                if np.isnan(value) or value < least:
                    least = value
                if np.isnan(least):
                    break
            binding[first] = (0.0 if 0.0 < own else own) + least  # min(own, 0.0) as Python's
            if binding[first] < -bound:
                for v in range(words):
                    found[count, v] = members[first, v]
                count += 1
        kept = 0
        for x in range(size):
            kept += keep[x]
        s_next = np.empty((kept, kept))
        members_next = np.empty((kept, words), dtype=np.bool_)
        binding_next = np.empty(kept)
        a = 0
        for x in range(size):
            if not keep[x]:
                continue
            b = 0
            for y in range(size):
                if keep[y]:
                    s_next[a, b] = adjusted[x, y]
                    b += 1
            for v in range(words):
                members_next[a, v] = members[x, v]
            binding_next[a] = binding[x]
            a += 1
        s, members, binding, size = s_next, members_next, binding_next, kept


@jit
def trace_columns(scores, order, exits, trace):
    """The trace chain's columns (trapped.Groups.of): trace[g, s, t + 1] = log sum_h
    exp(scores[g, h, order[g, t]] + exits[g, h, s]) for every t, as torch.logsumexp over h
    (shifted by the largest term). A term more than 746 below the largest is skipped: its
    exp is exactly 0 in float64 (on peaked scores, most are)."""
    groups, size, nodes = exits.shape
    top = np.empty(nodes)
    total = np.empty(nodes)
    for g in range(groups):
        for t in range(order.shape[1]):
            word = order[g, t]
            for s in range(nodes):
                top[s] = -np.inf
                total[s] = 0.0
            for h in range(size):
                arc = scores[g, h, word]
                for s in range(nodes):
                    value = arc + exits[g, h, s]
                    if value > top[s]:
                        top[s] = value
            for h in range(size):
                arc = scores[g, h, word]
                if arc == -np.inf:
                    continue
                for s in range(nodes):
                    gap = arc + exits[g, h, s] - top[s]
                    if gap > -746.0:
                        total[s] += math.exp(gap)
            for s in range(nodes):
                trace[g, s, t + 1] = top[s] + math.log(total[s]) if top[s] > -np.inf else -np.inf


@jit
def log_add(a, b):
    """log(e^a + e^b) as torch.logaddexp; a term more than 50 below the other changes the
    larger by under 2e-22 (less than its rounding unless it is within 1e-6 of 0): skipped."""
    if a == b and a == -np.inf:
        return a
    top = a if a > b else b
    gap = -abs(a - b)
    if gap < -50.0:
        return top
    return top + math.log1p(math.exp(gap))


@jit
def settled_tables(scores, order, count, exits, trace, out, flat, offsets):
    """trapped._settled_conditionals (the reference) per group, in the same steps: GTH in
    log space on the trace chain from the last trapped word down, then the walks' first
    meetings pushed one word further for each j, and trapped word j's head distribution.
    ``out`` (G, P, N+1); ``flat``: the meetings of each j, (G, P+1, j+1) from ``offsets[j-1]``.
    Terms whose exp is exactly 0 in float64 (more than 746 below the largest) are skipped."""
    groups, size, nodes = exits.shape
    chain = np.empty((nodes, nodes))
    steps = np.empty((nodes, nodes))
    meets = np.empty((nodes, nodes))
    reach = np.empty(nodes)
    meet = np.empty(nodes)
    for g in range(groups):
        for x in range(nodes):
            for y in range(nodes):
                chain[x, y] = trace[g, x, y]
                steps[x, y] = -np.inf
                meets[x, y] = -np.inf
        for u in range(nodes - 1, 1, -1):  # the nodes left are ROOT and words 1..u-1
            if count[g] < u:
                continue
            top = -np.inf
            for x in range(u):
                if chain[x, u] > top:
                    top = chain[x, u]
            pivot = -np.inf
            if top > -np.inf:
                total = 0.0
                for x in range(u):
                    gap = chain[x, u] - top
                    if gap > -746.0:
                        total += math.exp(gap)
                pivot = top + math.log(total)
            shift = pivot if abs(pivot) < np.inf else 0.0
            for x in range(u):
                steps[u, x] = chain[x, u] - shift
            for x in range(u):
                for y in range(u):
                    chain[x, y] = log_add(chain[x, y], steps[u, x] + chain[u, y])
        for j in range(nodes - 1, 0, -1):
            if j + 1 < nodes:  # word j+1 joins the eliminated words: push the walks that met it
                for x in range(j + 2, nodes):
                    passing = meets[x, j + 1]
                    for y in range(j + 1):
                        meets[x, y] = log_add(meets[x, y], passing + steps[j + 1, y])
                    meets[x, j + 1] = -np.inf
                for y in range(j + 1):
                    meets[j + 1, y] = steps[j + 1, y]
            start = offsets[j - 1] + g * nodes * (j + 1)
            for x in range(nodes):
                for y in range(j + 1):
                    flat[start + x * (j + 1) + y] = meets[x, y]
            for x in range(nodes):  # words after j: ROOT or 1..j-1 before j; ROOT and 1..j-1: 0
                if x > count[g]:
                    reach[x] = -np.inf
                elif x < j:
                    reach[x] = 0.0
                elif x == j:
                    reach[x] = -np.inf
                else:
                    top = -np.inf
                    for y in range(j):
                        if meets[x, y] > top:
                            top = meets[x, y]
                    reach[x] = -np.inf
                    if top > -np.inf:
                        total = 0.0
                        for y in range(j):
                            gap = meets[x, y] - top
                            if gap > -746.0:
                                total += math.exp(gap)
                        reach[x] = top + math.log(total)
            head_row(scores[g, :, order[g, j - 1]], exits[g], trace[g, :, j], reach, meet, out[g, j - 1])


@jit
def log_matmul(a, b, out):
    """out[u, i, k] = log sum_x exp(a[u, i, x] + b[u, x, k]), as torch.logsumexp over x of the
    broadcast sum (shifted by the largest term; terms whose exp is 0 in float64 skipped)."""
    rows, inner, width = a.shape[0], a.shape[2], b.shape[2]
    for u in range(rows):
        for i in range(a.shape[1]):
            for k in range(width):
                top = -np.inf
                for x in range(inner):
                    value = a[u, i, x] + b[u, x, k]
                    if value > top:
                        top = value
                if not top > -np.inf:
                    out[u, i, k] = top if top == top else np.nan
                    continue
                total = 0.0
                for x in range(inner):
                    gap = a[u, i, x] + b[u, x, k] - top
                    if gap > -746.0:
                        total += math.exp(gap)
                out[u, i, k] = top + math.log(total)


@jit
def head_rows(scores, group, word, exits, into, reach, out):
    """trapped._head_distribution for rows u of groups ``group[u]`` (their scores read in place):
    :func:`head_row` of each."""
    meet = np.empty(exits.shape[2])
    for u in range(exits.shape[0]):
        head_row(scores[group[u], :, word[u]], exits[u], into[u], reach[u], meet, out[u])


@jit
def head_row(column, exits, into, reach, meet, out):
    """One row of trapped._head_distribution (the reference): out[h] ∝ w(h -> word) P_h(the
    walk reaches ROOT before the word), in two normalised stages: the trace node s met first
    (``meet``, a work buffer: into[s] + reach[s], normalised), then the head given it.
    ``column``: the word's scores (N+1,); ``exits`` (N+1, P+1); ``into``, ``reach`` (P+1,)."""
    nodes = into.shape[0]
    top = -np.inf
    for s in range(nodes):
        meet[s] = into[s] + reach[s]
        if meet[s] > top:
            top = meet[s]
    shift = top if abs(top) < np.inf else 0.0
    total = 0.0
    for s in range(nodes):
        gap = meet[s] - shift
        meet[s] = math.exp(gap) if gap > -746.0 else 0.0
        total += meet[s]
    if total > 0.0:
        for s in range(nodes):
            meet[s] /= total
    for h in range(column.shape[0]):
        out[h] = 0.0
    for s in range(nodes):
        known = into[s]
        if meet[s] == 0.0 or not abs(known) < np.inf:
            continue
        for h in range(column.shape[0]):
            gap = column[h] + exits[h, s] - known
            if gap > -746.0:
                out[h] += math.exp(gap) * meet[s]


@jit
def exit_distribution(scores, free, targets, compact, hits):
    """trapped._exit_distribution (the reference) per group, in the same steps, before its log:
    GTH elimination of the free words in index order in plain float64, then the exit
    distributions backwards; ``hits`` (G, N+1, P+1) zeros on entry."""
    groups, size = scores.shape[0], scores.shape[1]
    weights = np.empty((size, size))
    steps = np.zeros((size, size))
    remaining = np.empty(size, dtype=np.bool_)
    for g in range(groups):
        for m in range(size):  # each column shifted by its largest weight
            top = -np.inf
            for h in range(size):
                if scores[g, h, m] > top:
                    top = scores[g, h, m]
            shift = top if abs(top) < np.inf else 0.0
            for h in range(size):
                weights[h, m] = math.exp(scores[g, h, m] - shift)
        for x in range(size):
            remaining[x] = free[g, x] or targets[g, x]
            for y in range(size):
                steps[x, y] = 0.0
        for k in range(size):
            if not free[g, k]:
                continue
            pivot = 0.0
            for x in range(size):
                if remaining[x] and x != k:
                    pivot += weights[x, k]
            if not pivot > 0.0:
                pivot = 1.0
            for x in range(size):
                if remaining[x] and x != k:
                    steps[k, x] = weights[x, k] / pivot
            for x in range(size):
                step = steps[k, x]
                if step != 0.0:
                    for y in range(size):
                        weights[x, y] += step * weights[k, y]
            remaining[k] = False
        for x in range(size):
            if targets[g, x]:
                hits[g, x, compact[g, x]] = 1.0
        for k in range(size - 1, -1, -1):
            if not free[g, k]:
                continue
            for s in range(hits.shape[2]):
                total = 0.0
                for x in range(size):
                    total += steps[k, x] * hits[g, x, s]
                hits[g, k, s] = total
