"""``TreeDistribution``: a torch distribution over non-projective dependency trees.

p(d) ∝ Π_{(h→m) ∈ d} exp(scores[h, m]), over single-root trees (exactly one child of ROOT,
as Universal Dependencies requires) or multi-root trees. Every quantity is exact and, where
it is a function of the scores, differentiable with respect to them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional, Tuple, Union

import torch
from torch import Tensor
from torch.distributions import Distribution, register_kl

from spacy_treexp.engine import laplacian
from spacy_treexp.engine.checks import check_heads, prepare_scores, word_mask
from spacy_treexp.engine.decoding import max_spanning_trees

if TYPE_CHECKING:
    from spacy_treexp.engine.sampling.streams import Randomness

NEG_INF = float("-inf")


class TreeDistribution(Distribution):
    """Distribution over dependency trees defined by arc log-potentials.

    Args:
        scores: ``(B, N+1, N+1)`` or ``(N+1, N+1)`` log-potentials ``scores[..., h, m]`` of
            the arc h -> m; index 0 is ROOT; column 0 and the diagonal are ignored; ``-inf``
            forbids an arc. Labeled scores ``(B, N+1, N+1, L)`` are reduced by logsumexp over
            labels (Koo et al. 2007, §3.4).
        lengths: ``(B,)`` words per sentence (default: N for all). Values stored past a
            sentence's length never change its results.
        single_root: trees with exactly one child of ROOT (default) or any number.
        stable: ``None`` (default) uses the fast determinant path and recomputes on the
            subtraction-free GTH path the sentences whose error estimate is too large;
            ``True`` always uses the stable path; ``False`` never does.
        validate_args: ``True`` makes ``log_prob`` raise ``ValueError`` for a head vector
            that is not a tree of its sentence; ``None`` / ``False`` give it ``-inf``. (The
            scores and lengths are always validated.)

    A sentence that admits no tree (e.g. every ROOT arc forbidden) has ``log_partition``
    ``-inf`` and ``log_prob`` ``-inf``; asking it for marginals, entropy, samples or the
    best tree raises ``ValueError`` naming the sentence.

    Batch shape is ``(B,)`` (``()`` for a single ``(N+1, N+1)`` sentence); an event is a
    head vector of shape ``(N+1,)`` with -1 at ROOT and padding.

    The samplers (:mod:`spacy_treexp.engine.sampling`) use only this public surface:
    ``scores``, ``lengths``, ``single_root``, ``stable``, ``n_max``, ``arc_mask``,
    ``batched()``, ``marginals_computed``, ``marginals`` and ``log_prob``.
    """

    arg_constraints: dict = {}
    has_rsample = False

    def __init__(
        self,
        scores: Tensor,
        lengths: Optional[Tensor] = None,
        *,
        single_root: bool = True,
        stable: Optional[bool] = None,
        validate_args: Optional[bool] = None,
    ) -> None:
        arc_scores, lengths, label_scores, unbatched, allowed = prepare_scores(scores, lengths)
        self.scores = arc_scores
        self.label_scores = label_scores
        self.lengths = lengths
        if not isinstance(single_root, bool):
            raise TypeError(f"single_root must be True or False, got {single_root!r}")
        if stable is not None and not isinstance(stable, bool):
            raise TypeError(f"stable must be None, True or False, got {stable!r}")
        self.single_root = single_root
        self.stable = stable
        self._unbatched = unbatched
        n_max = arc_scores.shape[-1] - 1
        #: ``(B, N+1, N+1)`` bool: the arcs h -> m inside each sentence whose score is not -inf.
        self.arc_mask = allowed
        self._validate_trees = bool(validate_args)
        self._cache: dict = {}
        batch_shape = torch.Size() if unbatched else torch.Size([arc_scores.shape[0]])
        super().__init__(batch_shape, torch.Size([n_max + 1]), validate_args=False)

    # ------------------------------------------------------------------ helpers
    @property
    def n_max(self) -> int:
        """N, the padded number of words."""
        return self.scores.shape[-1] - 1

    def _out(self, value: Tensor, batch_dim: int = 0) -> Tensor:
        """Drop the batch axis for a single unbatched sentence."""
        return value.squeeze(batch_dim) if self._unbatched else value

    def batched(self) -> TreeDistribution:
        """The same distribution with an explicit batch axis ``(B,)`` (B = 1 for a single
        ``(N+1, N+1)`` sentence); it shares every cached result."""
        if not self._unbatched:
            return self
        view = object.__new__(TreeDistribution)
        view.__dict__.update(self.__dict__)
        view._unbatched = False
        Distribution.__init__(view, torch.Size([1]), self.event_shape, validate_args=False)
        return view

    def _expand_input(self, value: Tensor, event_dims: int) -> Tensor:
        """Insert the batch axis into a per-sentence input of an unbatched distribution."""
        if self._unbatched:
            return value.unsqueeze(-event_dims - 1)
        return value

    def _require_trees(self, what: str) -> None:
        empty = ~torch.isfinite(self._log_partition().detach())
        if empty.any():
            b = int(empty.nonzero()[0, 0])
            raise ValueError(f"sentence {b} admits no dependency tree (log Z = -inf): its {what} is undefined")

    # --------------------------------------------------------- exact inference
    def _inference(self) -> Tuple[Tensor, Tensor]:
        """Compute (log Z, marginals) once, escalating per sentence until accurate.

        The fast path runs in the scores' dtype; sentences whose error estimate exceeds the
        dtype's tolerance are recomputed by the fast path in float64, and those still above
        float64's tolerance (or with no tree) by the stable path. ``stable=True`` goes to the
        stable path directly, ``stable=False`` keeps the first fast result.
        """
        if "log_z" in self._cache:
            return self._cache["log_z"], self._cache["marginals"]
        scores, mask, lengths = self.scores, self.arc_mask, self.lengths
        log_z = marginals = None  # per sentence, once a pass leaves some sentences to the next
        todo = torch.ones_like(lengths, dtype=torch.bool)
        if not self.stable:
            # Half precision has no LU kernels: its fast path runs in float32.
            first = scores.dtype if scores.dtype in (torch.float32, torch.float64) else torch.float32
            dtypes = [first] if (self.stable is False or first == torch.float64) else [first, torch.float64]
            for dtype in dtypes:
                everything = log_z is None  # the first pass takes every sentence
                index = None if everything else todo.nonzero().squeeze(-1)
                if index is not None and index.numel() == 0:
                    break
                sub = (scores if everything else scores[index]).to(dtype)
                sub_mask, sub_lengths = (mask, lengths) if everything else (mask[index], lengths[index])
                weights, shift = laplacian.shifted_weights(sub, sub_mask)
                log_det, sub_marginals, error = laplacian.fast_partition_and_marginals(
                    weights, sub_lengths, self.single_root
                )
                sub_log_z = _log_partition_with_gradient(sub, log_det + shift.sum(-1), sub_marginals)
                sub_log_z, sub_marginals = sub_log_z.to(scores.dtype), sub_marginals.to(scores.dtype)
                if self.stable is False:
                    accepted = torch.isfinite(log_det)
                else:
                    accepted = laplacian.fast_accepted(log_det, error, dtype)
                if everything:
                    if bool(accepted.all()):
                        log_z, marginals = sub_log_z, sub_marginals
                        todo = torch.zeros_like(todo)
                        break
                    index = torch.arange(lengths.shape[0], device=lengths.device)
                    log_z = torch.zeros(lengths.shape, dtype=scores.dtype, device=scores.device)
                    marginals = torch.zeros_like(scores)
                # set by the first pass (index: above, or the sentences still to do)
                assert index is not None and log_z is not None and marginals is not None
                keep = index[accepted]
                log_z = log_z.index_put((keep,), sub_log_z[accepted])
                marginals = marginals.index_put((keep,), sub_marginals[accepted])
                todo = todo.index_put((keep,), torch.zeros_like(keep, dtype=torch.bool))
        use_stable = todo
        if bool(use_stable.all()):
            log_z, marginals = _stable_inference(scores, mask, lengths, self.single_root)
            log_z, marginals = log_z.to(scores.dtype), marginals.to(scores.dtype)
        else:
            assert log_z is not None and marginals is not None  # the fast path took some sentences
            if use_stable.any():
                index = use_stable.nonzero().squeeze(-1)
                stable_log_z, stable_marginals = _stable_inference(
                    scores[index], mask[index], lengths[index], self.single_root
                )
                log_z = log_z.index_put((index,), stable_log_z.to(log_z.dtype))
                marginals = marginals.index_put((index,), stable_marginals.to(marginals.dtype))
        self._cache["log_z"], self._cache["marginals"] = log_z, marginals
        self._cache["used_stable"] = use_stable
        return log_z, marginals

    def _log_partition(self) -> Tensor:
        return self._inference()[0]

    @property
    def marginals_computed(self) -> bool:
        """Whether log Z and the marginals have been computed (and are cached)."""
        return "log_z" in self._cache

    @property
    def log_partition(self) -> Tensor:
        """log Z, the log of the total weight of all trees, ``(B,)``."""
        return self._out(self._log_partition())

    @property
    def used_stable_path(self) -> Tensor:
        """Which sentences were computed on the subtraction-free path, ``(B,)`` bool."""
        self._inference()
        return self._out(self._cache["used_stable"])

    def _marginals(self) -> Tensor:
        self._require_trees("marginals")
        return self._inference()[1]

    @property
    def marginals(self) -> Tensor:
        """Arc marginals μ[b, h, m] = p(h -> m ∈ d), ``(B, N+1, N+1)``; 0 off the sentence."""
        return self._out(self._marginals())

    @property
    def label_marginals(self) -> Tensor:
        """μ(h, m, l) = μ(h, m) · softmax_l(label_scores[h, m]), ``(B, N+1, N+1, L)``."""
        if self.label_scores is None:
            raise ValueError("label_marginals needs labeled scores of shape (B, N+1, N+1, L)")
        label_given_arc = torch.softmax(self.label_scores.masked_fill(~self.arc_mask.unsqueeze(-1), 0.0), dim=-1)
        value = self._marginals().unsqueeze(-1) * label_given_arc * self.arc_mask.unsqueeze(-1)
        return self._out(value)

    def _arc_sum(self, values: Tensor) -> Tensor:
        """Σ over the sentence's allowed arcs of ``values (B, N+1, N+1, ...)``."""
        mask = self.arc_mask
        while mask.dim() < values.dim():
            mask = mask.unsqueeze(-1)
        return torch.where(mask, values, torch.zeros_like(values)).sum(dim=(1, 2))

    # ------------------------------------------------------- tree probabilities
    def log_prob(self, heads: Tensor, labels: Optional[Tensor] = None) -> Tensor:
        """log p(d) of head vectors ``(..., B, N+1)`` → ``(..., B)``; -inf for non-trees.

        With labeled scores and ``labels (..., B, N+1)``, the labeled tree's log-probability;
        without labels, that of the unlabeled tree (labels summed out).
        """
        heads = self._expand_input(torch.as_tensor(heads, device=self.scores.device), 1)
        valid = check_heads(heads, self.lengths, self.n_max, self.single_root)
        score = self._tree_score(heads, labels)
        log_z = self._log_partition()
        allowed = torch.isfinite(score)
        if self._validate_trees and not bool((valid & allowed).all()):
            position = (~(valid & allowed)).nonzero()[0].tolist()
            raise ValueError(
                f"heads at index {tuple(position)} (sample..., sentence) are not a "
                f"{'single-root ' if self.single_root else ''}tree of the sentence's allowed arcs"
            )
        value = torch.where(valid & allowed, score - log_z, torch.full_like(score, NEG_INF))
        return self._out(value, batch_dim=-1)

    def _sum_at_heads(self, matrix: Tensor, heads: Tensor) -> Tensor:
        """Σ_m matrix[heads[m], m] over the words of each sentence, ``(..., B)``.

        ``matrix`` is ``(B, N+1, N+1)`` [head, dep]; ``heads`` is ``(..., B, N+1)``.
        """
        words = word_mask(self.lengths, self.n_max)
        safe_heads = torch.where(words, heads, torch.zeros_like(heads)).clamp(0, self.n_max)
        expanded = matrix.expand(heads.shape[:-2] + matrix.shape)
        picked = torch.gather(expanded, -2, safe_heads.unsqueeze(-2)).squeeze(-2)
        return torch.where(words, picked, torch.zeros_like(picked)).sum(-1)

    def _tree_score(self, heads: Tensor, labels: Optional[Tensor] = None) -> Tensor:
        """Σ_m scores[heads[m], m], or with ``labels`` Σ_m label_scores[heads[m], m, labels[m]], ``(..., B)``."""
        if labels is None:
            return self._sum_at_heads(self.scores, heads)
        words = word_mask(self.lengths, self.n_max)
        safe_heads = torch.where(words, heads, torch.zeros_like(heads)).clamp(0, self.n_max)
        if self.label_scores is None:
            raise ValueError("labels were given but the scores are unlabeled")
        labels = self._expand_input(torch.as_tensor(labels, device=self.scores.device), 1)
        if labels.shape != heads.shape:
            raise ValueError(f"labels {tuple(labels.shape)} must match heads {tuple(heads.shape)}")
        n_labels = self.label_scores.shape[-1]
        if ((labels < 0) | (labels >= n_labels))[..., 1:].logical_and(words[..., 1:]).any():
            raise ValueError(f"labels must be in [0, {n_labels}) for every word")
        label_expanded = self.label_scores.expand(heads.shape[:-2] + self.label_scores.shape)
        safe_labels = torch.where(words, labels, torch.zeros_like(labels)).clamp(0, n_labels - 1)
        per_head = torch.gather(
            label_expanded, -3, safe_heads[..., None, :, None].expand(heads.shape[:-1] + (1, self.n_max + 1, n_labels))
        ).squeeze(-3)
        arc = torch.gather(per_head, -1, safe_labels.unsqueeze(-1)).squeeze(-1)
        return torch.where(words, arc, torch.zeros_like(arc)).sum(-1)

    def expected_attachment(self, heads: Tensor) -> Tensor:
        """Expected number of correct heads of the given trees, Σ_m μ(heads[m], m), ``(..., B)``."""
        heads = self._expand_input(torch.as_tensor(heads, device=self.scores.device), 1)
        check_heads(heads, self.lengths, self.n_max)
        return self._out(self._sum_at_heads(self._marginals(), heads), batch_dim=-1)

    # --------------------------------------------------------------- decoding
    @property
    def mode(self) -> Tensor:
        """The highest-scoring tree under the root constraint, heads ``(B, N+1)``."""
        weights = self.scores.masked_fill(~self.arc_mask, NEG_INF)
        return self._out(max_spanning_trees(weights, self.lengths, self.single_root))

    def mbr(self) -> Tensor:
        """The tree with the highest expected attachment score Σ_m μ(h_m, m), ``(B, N+1)``."""
        marginals = self._marginals().detach()
        weights = marginals.masked_fill(~self.arc_mask, NEG_INF)
        return self._out(max_spanning_trees(weights, self.lengths, self.single_root))

    # ------------------------------------------------------------ expectations
    def entropy(self) -> Tensor:
        """Shannon entropy H(p) = log Z − Σ μ(h, m) s(h, m), in O(n³) (Zmigrod et al. 2021)."""
        marginals = self._marginals()
        return self._out(self._log_partition() - self._arc_sum(marginals * self.scores))

    def cross_entropy(self, other: TreeDistribution) -> Tensor:
        """H(p, q) = −E_p[log q(d)] = log Z_q − Σ μ_p(h, m) s_q(h, m); +inf if q forbids a tree of p."""
        self._check_compatible(other)
        marginals = self._marginals()
        other_scores = torch.where(other.arc_mask, other.scores, torch.zeros_like(other.scores))
        expected = self._arc_sum(marginals * other_scores)
        escapes = ((marginals > 0) & self.arc_mask & ~other.arc_mask).any(-1).any(-1)
        value = other._log_partition() - expected
        return self._out(torch.where(escapes, torch.full_like(value, float("inf")), value))

    def _check_compatible(self, other: TreeDistribution) -> None:
        if not isinstance(other, TreeDistribution):
            raise TypeError(f"expected a TreeDistribution, got {type(other).__name__}")
        if other.scores.shape != self.scores.shape or not torch.equal(other.lengths, self.lengths):
            raise ValueError(
                "the two distributions must have the same scores shape and lengths; got "
                f"{tuple(self.scores.shape)} / {tuple(other.scores.shape)}"
            )
        if other.single_root != self.single_root:
            raise ValueError("the two distributions must have the same root constraint")

    def renyi_entropy(self, alpha: float) -> Tensor:
        """Rényi entropy H_α = log(Σ_d p(d)^α) / (1 − α) = (log Z(α s) − α log Z(s)) / (1 − α).

        α = 1 gives the Shannon entropy (the limit), α = 0 the log number of trees with
        positive probability, α = inf the min-entropy −log p(mode) (Zmigrod et al. 2021, §6.2).
        The formula loses digits as α → 1 (a difference divided by 1 − α).
        """
        alpha = float(alpha)
        if alpha < 0 or alpha != alpha:
            raise ValueError(f"alpha must be >= 0, got {alpha}")
        self._require_trees("Rényi entropy")
        if alpha == 1.0:
            return self.entropy()
        if alpha == float("inf"):
            best = self.batched().mode
            return self._out(self._log_partition() - self._tree_score(best))
        if alpha == 0.0:
            tilted = torch.where(self.arc_mask, torch.zeros_like(self.scores), torch.full_like(self.scores, NEG_INF))
        else:
            tilted = torch.where(self.arc_mask, alpha * self.scores, torch.full_like(self.scores, NEG_INF))
        log_z_alpha = TreeDistribution(
            tilted, self.lengths, single_root=self.single_root, stable=self.stable
        )._log_partition()
        return self._out((log_z_alpha - alpha * self._log_partition()) / (1.0 - alpha))

    def expectation(self, values: Tensor) -> Tensor:
        """T1: E_p[Σ_{(h→m)∈d} r(h, m)] = Σ μ(h, m) r(h, m) for additively decomposable r.

        ``values``: ``(B, N+1, N+1)`` → ``(B,)`` or ``(B, N+1, N+1, R)`` → ``(B, R)``
        (Zmigrod et al. 2021, T1: O(n³ + n²R)).
        """
        values = self._arc_values(values, "values")
        marginals = self._marginals()
        if values.dim() == 4:
            return self._out(self._arc_sum(marginals.unsqueeze(-1) * values))
        return self._out(self._arc_sum(marginals * values))

    def _arc_values(self, values: Tensor, name: str) -> Tensor:
        values = torch.as_tensor(values, device=self.scores.device)
        if self._unbatched:
            values = values.unsqueeze(0)
        expected = self.scores.shape
        if values.shape[:3] != expected or values.dim() not in (3, 4):
            raise ValueError(
                f"{name} must have shape (B, N+1, N+1) or (B, N+1, N+1, R) matching scores "
                f"{tuple(expected)}; got {tuple(values.shape)}"
            )
        if not values.is_floating_point():
            values = values.to(self.scores.dtype)
        return values

    def covariance(self, r: Tensor, s: Tensor) -> Tensor:
        """Cov_p[r(d), s(d)] for additively decomposable r, s, ``(B, R, S)``.

        Cov = Σ_e μ_e r_e s_eᵀ − Σ_{j,k} r̂_{jk} ŝ_{kj}ᵀ with r̂_{jk} = Σ_{e into k} w_e
        (L̂⁻¹ a_e)_j r_e, where ∂L̂/∂w_e = a_e b_eᵀ: the second-order term of Zmigrod et al.
        (2021), eq. 32, in O(n³(R + S) + n²RS) without forming the Hessian of Z. Computed
        from L̂⁻¹ in float64; for badly conditioned sentences its accuracy follows L̂'s.
        Unvectorised r (B, N+1, N+1) or s drop their axis of the result.
        """
        return self._second_moment(r, s, centred=True)

    def second_order(self, r: Tensor, s: Tensor) -> Tensor:
        """T2: E_p[r(d) s(d)ᵀ] = Cov[r, s] + E[r] E[s]ᵀ, ``(B, R, S)`` (Zmigrod et al. 2021, eq. 32)."""
        return self._second_moment(r, s, centred=False)

    def _second_moment(self, r: Tensor, s: Tensor, centred: bool) -> Tensor:
        """Cov[r, s] (``centred``) or E[r sᵀ], with r and s vectorised internally."""
        r = self._arc_values(r, "r")
        s = self._arc_values(s, "s")
        r_vec = r if r.dim() == 4 else r.unsqueeze(-1)
        s_vec = s if s.dim() == 4 else s.unsqueeze(-1)
        self._require_trees("covariance")
        work = torch.float64 if self.scores.dtype != torch.float64 else self.scores.dtype
        weights, _ = laplacian.shifted_weights(self.scores.to(work), self.arc_mask)
        lap = laplacian.laplacian_matrix(weights, self.lengths, self.single_root)
        inverse = torch.linalg.inv(lap)
        marginals = self._marginals().to(work)
        mask = self.arc_mask.unsqueeze(-1)
        r_vec = torch.where(mask, r_vec.to(work), torch.zeros_like(r_vec, dtype=work))
        s_vec = torch.where(mask, s_vec.to(work), torch.zeros_like(s_vec, dtype=work))
        diagonal = torch.einsum("bhm,bhmr,bhms->brs", marginals, r_vec, s_vec)
        r_hat = self._hat(weights, inverse, r_vec)
        s_hat = self._hat(weights, inverse, s_vec)
        value = diagonal - torch.einsum("bjkr,bkjs->brs", r_hat, s_hat)
        if not centred:
            r_mean = torch.einsum("bhm,bhmr->br", marginals, r_vec)
            s_mean = torch.einsum("bhm,bhms->bs", marginals, s_vec)
            value = value + r_mean.unsqueeze(-1) * s_mean.unsqueeze(-2)
        value = value.to(self.scores.dtype)
        if r.dim() == 3:
            value = value.squeeze(-2)
        if s.dim() == 3:
            value = value.squeeze(-1)
        return self._out(value)

    def _hat(self, weights: Tensor, inverse: Tensor, values: Tensor) -> Tensor:
        """r̂[b, j, k] = Σ_h w(h → k) (L̂⁻¹ a_{h→k})_j r(h → k), words 0-based, ``(B, N, N, R)``."""
        weighted = weights.unsqueeze(-1) * values  # (B, N+1, N+1, R)
        words = weighted[:, 1:, 1:]  # heads and dependents among words
        root = weighted[:, 0, 1:]  # (B, N, R)
        n_max = inverse.shape[-1]
        gate = torch.ones(n_max, dtype=inverse.dtype, device=inverse.device)
        if self.single_root:
            gate[0] = 0
        into = words.sum(1)  # Σ_h over word heads: (B, N(dep k), R)
        part_dep = inverse.unsqueeze(-1) * (gate.unsqueeze(-1) * into).unsqueeze(1)  # A[j,k] gate_k Σ_h
        part_head = torch.einsum("bjh,bhkr->bjkr", inverse * gate, words)
        if self.single_root:
            part_root = inverse[:, :, 0, None, None] * root.unsqueeze(1)
        else:
            part_root = inverse.unsqueeze(-1) * root.unsqueeze(1)
        return part_dep - part_head + part_root

    # --------------------------------------------------------------- sampling
    def sample(
        self,
        sample_shape: Union[torch.Size, List[int], Tuple[int, ...]] = torch.Size(),
        method: Optional[str] = None,
        generator: Randomness = None,
    ) -> Tensor:
        """Independent trees ``(*sample_shape, B, N+1)`` (see :mod:`spacy_treexp.engine.sampling`;
        ``method`` None: its ``DEFAULT_METHOD``, ``colbourn``).

        ``generator``: a ``torch.Generator``, or (``colbourn``) one per sentence, so that each
        sentence's trees do not depend on the batch it is in."""
        from spacy_treexp.engine import sampling

        self._require_trees("samples")
        heads = sampling.sample(self.batched(), torch.Size(sample_shape), method=method, generator=generator)
        return self._out(heads, batch_dim=-2)

    def sample_without_replacement(
        self, k: int, method: Optional[str] = None, generator: Randomness = None
    ) -> Tuple[Tensor, Tensor]:
        """k distinct trees per sentence with their exact log-probabilities: ``(k, B, N+1), (k, B)``.

        ``generator``: a ``torch.Generator``, or (``sbs``) one per sentence (see ``sample``)."""
        from spacy_treexp.engine import sampling

        self._require_trees("samples")
        heads, log_probs = sampling.sample_without_replacement(self.batched(), k, method=method, generator=generator)
        return self._out(heads, batch_dim=-2), self._out(log_probs, batch_dim=-1)


def _stable_inference(scores: Tensor, mask: Tensor, lengths: Tensor, single_root: bool) -> Tuple[Tensor, Tensor]:
    """log Z by GTH state reduction and marginals as its gradient (differentiable: by
    autograd through the elimination, so that second derivatives flow through μ)."""
    if not (torch.is_grad_enabled() and scores.requires_grad):
        return laplacian.stable_partition_and_marginals(scores, mask, lengths, single_root)
    log_z = laplacian.stable_log_partition(scores, mask, lengths, single_root)
    finite = torch.isfinite(log_z)
    objective = torch.where(finite, log_z, torch.zeros_like(log_z)).sum()
    (marginals,) = torch.autograd.grad(objective, scores, create_graph=True)
    marginals = torch.where(mask & finite.view(-1, 1, 1), marginals, torch.zeros_like(marginals))
    return _log_partition_with_gradient(scores, log_z, marginals), marginals


class _PartitionGradient(torch.autograd.Function):
    """Identity on log Z whose gradient with respect to the scores is the given marginals.

    ∂ log Z / ∂ s(h, m) = μ(h, m): backpropagating log Z costs one multiplication instead of a
    second pass through the factorisation. μ keeps its own graph, so second derivatives
    (e.g. of the entropy) still flow through it.
    """

    @staticmethod
    def forward(ctx, scores: Tensor, log_z: Tensor, marginals: Tensor) -> Tensor:
        ctx.save_for_backward(marginals)
        return log_z.clone()

    @staticmethod
    def backward(ctx, grad: Tensor):
        (marginals,) = ctx.saved_tensors
        return grad.unsqueeze(-1).unsqueeze(-1) * marginals, None, None


def _log_partition_with_gradient(scores: Tensor, log_z: Tensor, marginals: Tensor) -> Tensor:
    """log Z (its value detached from how it was computed) with gradient μ w.r.t. ``scores``."""
    if not (torch.is_grad_enabled() and scores.requires_grad):
        return log_z.detach()
    return _PartitionGradient.apply(scores, log_z.detach(), marginals)


@register_kl(TreeDistribution, TreeDistribution)
def _kl_tree_tree(p: TreeDistribution, q: TreeDistribution) -> Tensor:
    """KL(p ‖ q) = H(p, q) − H(p), in O(n³) (Zmigrod et al. 2021, §6.3)."""
    return p.cross_entropy(q) - p.entropy()
