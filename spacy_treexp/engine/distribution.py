"""``TreeDistribution``: a torch distribution over non-projective dependency trees.

p(d) ∝ Π_{(h→m) ∈ d} exp(scores[h, m]), over single-root trees (exactly one child of ROOT,
as Universal Dependencies requires) or multi-root trees. Every quantity is exact and, where
it is a function of the scores, differentiable with respect to them.
"""

from __future__ import annotations

import sys
import warnings
from types import FrameType, ModuleType
from typing import TYPE_CHECKING, List, NamedTuple, Optional, Tuple, Union

import torch
from torch import Tensor
from torch.distributions import Distribution, register_kl

from spacy_treexp.engine import laplacian
from spacy_treexp.engine.checks import check_heads, integer_tensor, prepare_scores, word_mask
from spacy_treexp.engine.decoding import dominant_trees, max_spanning_trees
from spacy_treexp.engine.native import native_enabled

if TYPE_CHECKING:
    from spacy_treexp.engine.fused import FusedPass
    from spacy_treexp.engine.sampling.streams import Randomness

NEG_INF = float("-inf")


class _Pass(NamedTuple):
    """One fast-path pass (:meth:`TreeDistribution._fast_pass`), per sentence ``(B,)`` unless noted."""

    log_z_shifted: Tensor  #: log Z' = log det L̂ in float64
    shift_total: Tensor  #: Σ_m shift[m] in float64
    marginals: Tensor  #: ``(B, N+1, N+1)`` in the pass's dtype
    accepted: Tensor  #: bool: the result is kept
    shift: Tensor  #: ``(B, N+1)``
    log_weights: Optional[Tensor]  #: ``(B, N+1, N+1)`` s', -inf off the arcs (the torch path's)
    entropy: Optional[Tensor] = None  #: log Z' − Σ μ s', at least 0, in float64 (the fused kernel's)
    all_accepted: Optional[bool] = None  #: every sentence accepted (the fused kernel's)
    log_z: Optional[Tensor] = None  #: log Z' + Σ shift in float64 (the fused kernel's)


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

    Range and accuracy. Each word's scores are shifted by their maximum (every tree has one
    head per word, so no probability changes) and log Z' = log Z − Σ shifts is kept apart
    from the shifts: the entropy (log Z' − Σ μ s'), cross-entropy, KL, Rényi entropies and
    log-probabilities are formed from it in float64 and never cancel the shifts, whatever
    the scores' magnitude. Results:

    * Scores above :func:`~spacy_treexp.engine.checks.score_limit` (about 1.8e308 / 4(n+1)
      in float64 and 65504 / 2(n+1) in float16, where sums of n scores could overflow)
      raise ``ValueError`` naming the sentence.
    * Where float64 resolves a sentence's trees (its rounding error on log Z',
      eps · (n+1) · |log Z'|, is at most 1e-6; |log Z'| is about what the best tree gives up
      against every word's best head, so this holds for |scores| up to about 1e6, and
      beyond where the best heads form few cycles), results carry at most that error:
      against mpmath, float64 log Z to 1e-15 relative, marginals and entropy to 1e-9 for
      |scores| up to 1e4 and 1e-7 up to 1e8. float32 scores (and half precision, before the
      results are rounded to it) give an entropy within 1e-3 · max(1, H), marginals within
      1e-4 and log Z within 1e-6 relative of float64 on the same scores, at any scale: a
      sentence the float32 fast path does not take is computed, and keeps its marginals, in
      float64. The entropy is ≥ 0.
    * Beyond that (|scores| around 1e7 and up, e.g. 1e200): a sentence whose best tree beats
      every other by more than 760 + log(number of trees) nats, after rounding, is that tree
      exactly in float64 (checked by n + 1 Chu–Liu–Edmonds runs): marginals 1 on its arcs
      and 0 elsewhere, entropy, Rényi entropies (α > 0) and its ``log_prob`` 0, log Z its
      score. Any other such sentence (trees within a few hundred nats of each other, which
      float64 cannot tell apart at that scale) has its finite log Z and its best tree, but
      its marginals, entropy, log-probabilities, samples and the quantities made of them
      raise ``ValueError`` naming it and the magnitude: rescale such scores.

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
        # Copies, not the caller's tensors: results are computed lazily and cached, so a caller
        # changing its tensors in place (an optimiser step, a reused buffer) would otherwise get
        # results mixing the old scores with the new (a Rényi entropy above log #trees).
        self.scores = arc_scores.clone() if label_scores is None else arc_scores
        self.label_scores = None if label_scores is None else label_scores.clone()
        self.lengths = lengths.clone()
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
        """Raise ``ValueError`` for a sentence with no tree, or whose trees float64 cannot
        resolve (:meth:`_require_resolved`)."""
        self._inference()
        if self._cache.get("settled"):  # the first fast pass kept every sentence: none can fail
            return
        empty = ~torch.isfinite(self._log_partition().detach())
        if empty.any():
            b = int(empty.nonzero()[0, 0])
            raise ValueError(f"sentence {b} admits no dependency tree (log Z = -inf), so it has no {what}")
        self._require_resolved(what)

    def _require_resolved(self, what: str) -> None:
        """Raise ``ValueError`` for a sentence whose scores are too large for float64 to tell
        its best trees apart while no single tree carries all the probability."""
        self._inference()
        unresolved = self._cache.get("unresolved")
        if unresolved is not None and bool(unresolved.any()):
            b = int(unresolved.nonzero()[0, 0])
            scores = self.scores[b].detach().masked_fill(~self.arc_mask[b], 0.0)
            error = float(_rounding(self._cache["log_z_shifted"][b], self.lengths[b]))
            raise ValueError(
                f"sentence {b}: its scores (magnitude up to {float(scores.abs().max()):.3g}) are too large for "
                f"float64 to resolve the differences between its best trees (log Z carries a rounding error of "
                f"about {error:.2g} nats) and no single tree carries all the probability: its {what} cannot be "
                "computed accurately; rescale the scores (e.g. divide them by a temperature)"
            )

    # --------------------------------------------------------- exact inference
    def _inference(self) -> Tuple[Tensor, Tensor]:
        """Compute (log Z, marginals) once, escalating per sentence until accurate.

        The fast path runs in the scores' dtype; sentences whose error estimate exceeds the
        dtype's tolerance, or whose marginals fail to sum to 1, are recomputed by the fast
        path in float64, and those still above float64's tolerance (or with no tree) by the
        stable path. ``stable=True`` goes to the stable path directly, ``stable=False`` keeps
        the first fast result. A sentence whose log Z' (see :meth:`_log_z_shifted`) is so
        large that float64 cannot resolve its trees is settled by :meth:`_certify`.
        """
        if "log_z" in self._cache:
            return self._cache["log_z"], self._cache["marginals"]
        scores, mask, lengths = self.scores, self.arc_mask, self.lengths
        inner = _first_pass_dtype(scores)
        pending = self._cache.pop("fused_pass", None)  # the pass :meth:`_fused_entropy` ran
        if pending is not None:
            fused_first = _from_fused(pending)
            first: Optional[_Pass] = self._keep_finite(fused_first, inner) if self.stable is False else fused_first
        else:
            first = None if self.stable else self._fast_pass(scores, mask, lengths, inner)
        total = None
        if first is not None and (first.all_accepted if first.all_accepted is not None else bool(first.accepted.all())):
            # the common case: one pass, no copies; every sentence has a finite, resolved log Z
            shifted, shift_total, marginals, total = (
                first.log_z_shifted,
                first.shift_total,
                first.marginals,
                first.log_z,
            )
            # the column maxima (the same in any dtype) and s' (-inf off the arcs), for the entropy
            self._cache.update(shift=first.shift, log_weights=first.log_weights, settled=True)
            if first.entropy is not None and "entropy" not in self._cache:
                self._cache["entropy"] = first.entropy
        else:
            shifted, shift_total, marginals = self._escalate(first)
        if total is None:
            total = shift_total + shifted
        log_z = _log_partition_with_gradient(
            scores, total if total.dtype == scores.dtype else total.to(scores.dtype), marginals
        )
        self._cache.update(log_z=log_z, marginals_inner=marginals, log_z_shifted=shifted)
        self._cache["marginals"] = marginals if marginals.dtype == scores.dtype else marginals.to(scores.dtype)
        return log_z, self._cache["marginals"]

    def _fast_pass(self, scores: Tensor, mask: Tensor, lengths: Tensor, dtype: torch.dtype) -> _Pass:
        """One fast-path pass in ``dtype``; by the fused CPU kernel (:mod:`.fused`) where it runs.
        With ``stable=False`` every finite result is kept (:meth:`_keep_finite`)."""
        if _use_fused_kernel(scores):
            result = _from_fused(self._native_pass(scores, lengths, dtype))
        else:
            log_weights, shift = laplacian.shifted_log_weights(scores.to(dtype), mask)
            log_det, marginals, error = laplacian.fast_partition_and_marginals(
                torch.exp(log_weights), lengths, self.single_root
            )
            accepted = laplacian.fast_accepted(log_det, error, dtype) & laplacian.marginals_normalised(
                marginals, lengths, self.single_root, dtype
            )
            total = shift.to(torch.float64).sum(-1)
            result = _Pass(log_det.to(torch.float64), total, marginals, accepted, shift, log_weights)
        return self._keep_finite(result, dtype) if self.stable is False else result

    @staticmethod
    def _keep_finite(result: _Pass, dtype: torch.dtype) -> _Pass:
        """``stable=False``: keep the fast result of every sentence with a finite log Z', and
        warn (``RuntimeWarning``) naming those whose error estimate or marginal sums are
        outside ``dtype``'s tolerance, which the default would recompute (their numbers may be
        wrong: peaked scores cancel in the determinant)."""
        finite = torch.isfinite(result.log_z_shifted)
        doubtful = (finite & ~result.accepted).nonzero().squeeze(-1).tolist()
        if doubtful:
            shown = ", ".join(str(b) for b in doubtful[:10]) + (", ..." if len(doubtful) > 10 else "")
            warnings.warn(
                f"TreeDistribution(stable=False): the fast path's {dtype} result is outside its error "
                f"tolerance for {len(doubtful)} sentence(s) [{shown}] (peaked scores): their log Z, "
                "marginals and entropy may be wrong; stable=None (the default) recomputes them",
                RuntimeWarning,
                stacklevel=_caller_level(),
            )
        return result._replace(accepted=finite, all_accepted=bool(finite.all()))

    def _native_pass(self, scores: Tensor, lengths: Tensor, dtype: torch.dtype) -> FusedPass:
        """The fused CPU kernel's fast pass in ``dtype`` (where :func:`_use_fused_kernel` holds;
        the allowed arcs are :attr:`arc_mask`'s, which the kernel tells from the scores)."""
        return _fused().native_fast_pass(
            scores if scores.dtype == dtype else scores.to(dtype),
            lengths,
            self.single_root,
            laplacian.fast_tolerance(dtype),
            laplacian.normalisation_tolerance(dtype),
        )

    def _fused_entropy(self) -> Optional[Tensor]:
        """The entropy of every sentence straight from the fused kernel's first pass, where it
        runs and settles them all (the common case), else ``None``. The pass is kept for
        :meth:`_inference`, which makes the tensors of log Z and the marginals only if asked:
        the entropy alone reads one row of the kernel's output (Zmigrod et al. 2021, T1)."""
        if self.stable or "log_z" in self._cache or not _use_fused_kernel(self.scores):
            return None
        result = self._cache.get("fused_pass")
        if result is None:
            result = self._native_pass(self.scores, self.lengths, _inner_dtype(self.scores.dtype))
            self._cache["fused_pass"] = result
        if not result.all_accepted:
            return None
        self._cache["entropy"] = entropy = result.entropy
        return entropy

    def _escalate(self, first: Optional[_Pass]) -> Tuple[Tensor, Tensor, Tensor]:
        """``(log Z', Σ shift, marginals)`` where the first fast pass (if any) did not settle every
        sentence: float64 fast pass, stable path, and the sentences float64 cannot resolve.

        The marginals are kept in float64 (the scores' dtype is for the caller): the sentences
        that get here may have scores so peaked that rounding μ to float32 would move Σ μ s'
        (the entropy) by more than its own size."""
        scores, mask, lengths = self.scores, self.arc_mask, self.lengths
        shifted = torch.zeros(lengths.shape, dtype=torch.float64, device=scores.device)
        shift_total = torch.zeros_like(shifted)
        parts = []  # (sentences, their marginals), put together at the end
        todo = torch.ones_like(lengths, dtype=torch.bool)
        passes: List[Optional[_Pass]] = [] if first is None else [first]
        if first is not None and self.stable is None and first.marginals.dtype != torch.float64:
            passes.append(None)  # the float64 pass, on the sentences the first one left
        for result in passes:
            index = todo.nonzero().squeeze(-1)
            if index.numel() == 0:
                break
            if result is None:
                result = self._fast_pass(scores[index], mask[index], lengths[index], torch.float64)
            sub_shifted, sub_total, sub_marginals, accepted = (
                result.log_z_shifted,
                result.shift_total,
                result.marginals,
                result.accepted,
            )
            keep = index[accepted]
            shifted = shifted.index_put((keep,), sub_shifted[accepted].detach())
            shift_total = shift_total.index_put((keep,), sub_total[accepted])
            if sub_marginals.requires_grad and keep.numel():
                # The rejected sentences' inverse may hold inf: even a zero gradient through it
                # is NaN, so the kept ones are computed again on their own.
                sub_marginals = self._fast_pass(scores[keep], mask[keep], lengths[keep], sub_marginals.dtype).marginals
                parts.append((keep, sub_marginals))
            elif keep.numel():
                parts.append((keep, sub_marginals[accepted]))
            todo = todo.index_put((keep,), torch.zeros_like(keep, dtype=torch.bool))
        stable = todo.nonzero().squeeze(-1)
        stable_marginals = None
        if stable.numel():
            sub_shifted, sub_total, stable_marginals = _stable_inference(
                scores[stable], mask[stable], lengths[stable], self.single_root
            )
            shifted = shifted.index_put((stable,), sub_shifted.to(torch.float64))
            shift_total = shift_total.index_put((stable,), sub_total.to(torch.float64))
        self._cache["used_stable"] = todo
        # Only the stable path reaches sentences whose trees float64 may not resolve: the
        # fast path rejects any whose determinant is far below its columns' scale.
        unresolved = todo & torch.isfinite(shifted) & (_rounding(shifted, lengths) > _RESOLUTION)
        if bool(unresolved.any()):
            dominant = self._certify(unresolved)
            if bool(dominant.any()):
                index = dominant.nonzero().squeeze(-1)
                best = self._cache["best"]
                parts.append((index, _tree_arcs(best[index], lengths[index], self.n_max)))
                shifted = shifted.index_put((index,), self._tree_score(best)[index].detach())
                if stable_marginals is not None and stable_marginals.requires_grad:
                    # A one-tree sentence's marginals are constants; the second derivatives of
                    # its elimination may be NaN, and a zero gradient does not stop a NaN.
                    stable = (todo & ~dominant).nonzero().squeeze(-1)
                    stable_marginals = None
                    if stable.numel():
                        sub_scores = scores[stable]
                        stable_marginals = _stable_inference(
                            sub_scores, mask[stable], lengths[stable], self.single_root
                        )[2]
            self._cache["unresolved"] = unresolved & ~dominant
        if stable_marginals is not None:
            parts.append((stable, stable_marginals))
        marginals = torch.zeros_like(scores, dtype=torch.float64)
        for index, values in parts:
            marginals = marginals.index_put((index,), values.to(torch.float64))
        return shifted, shift_total, marginals

    def _certify(self, which: Tensor) -> Tensor:
        """Whether the best tree of each sentence in ``which`` certainly carries all of its
        probability that float64 can represent (:func:`decoding.dominant_trees`), ``(B,)``.

        For the sentences whose log Z' is too large to resolve their trees; the best trees
        and the answers are cached (``best``, ``dominant``).
        """
        weights = self.scores[which].detach().to(torch.float64).masked_fill(~self.arc_mask[which], NEG_INF)
        best, dominant = dominant_trees(weights, self.lengths[which], self.single_root)
        self._cache["best"] = torch.full(self.scores.shape[:2], -1, dtype=torch.long, device=self.scores.device)
        self._cache["best"][which] = best
        self._cache["dominant"] = torch.zeros_like(which).index_put((which.nonzero().squeeze(-1),), dominant)
        return self._cache["dominant"]

    def _dominant(self) -> Optional[Tensor]:
        """``(B,)`` the sentences known to be one tree (:meth:`_certify`), None if none was checked."""
        return self._cache.get("dominant")

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
        return self._out(self._stable_sentences())

    def _stable_sentences(self) -> Tensor:
        """:attr:`used_stable_path` with its batch axis."""
        self._inference()
        used = self._cache.get("used_stable")  # not set where the first fast pass settled every sentence
        return torch.zeros_like(self.lengths, dtype=torch.bool) if used is None else used

    def _log_z_shifted(self) -> Tensor:
        """log Z' = log Z − Σ_m shift[m] in float64, ``(B,)``, differentiable (its gradient is μ).

        The column shifts (:func:`laplacian.shifted_log_weights`) leave every tree's
        probability unchanged, and with them log Z' and the shifted tree scores stay small
        wherever the distribution does not hinge on trees of huge score differences: the
        entropy and log-probabilities are formed from them without cancelling the shifts.
        """
        self._inference()
        return _log_partition_with_gradient(self.scores, self._cache["log_z_shifted"], self._cache["marginals_inner"])

    def _shifted_scores(self) -> Tuple[Tensor, Tensor]:
        """``(s' (B, N+1, N+1), shift (B, N+1))`` in float64: s' = score − shift of its column
        (≤ 0, the best arc into each word at 0), 0 on arcs that are not allowed."""
        if "shifted_scores" not in self._cache:
            scores = self.scores.to(torch.float64)
            if "shift" in self._cache:
                shift = self._cache["shift"].to(torch.float64)
            else:
                shift = laplacian.shifted_log_weights(scores, self.arc_mask)[1]
            if torch.is_grad_enabled() and scores.requires_grad:
                values = torch.where(self.arc_mask, scores - shift.unsqueeze(-2), 0.0)
            else:  # one new tensor, not three
                values = scores.detach().clone() if scores is self.scores else scores
                values.sub_(shift.unsqueeze(-2)).masked_fill_(~self.arc_mask, 0.0)
            self._cache["shifted_scores"] = (values, shift)
        return self._cache["shifted_scores"]

    def _marginals(self) -> Tensor:
        self._require_trees("marginals")
        return self._inference()[1]

    def _marginals_inner(self, what: str = "marginals") -> Tensor:
        """The marginals as computed: float32 or float64 for half-precision or float32 scores."""
        self._require_trees(what)
        self._inference()
        return self._cache["marginals_inner"]

    @property
    def marginals(self) -> Tensor:
        """Arc marginals μ[b, h, m] = p(h -> m ∈ d), ``(B, N+1, N+1)``; 0 off the sentence.
        Held to [0, 1]: on peaked scores rounding can leave it by one ulp (1 + 2e-16, -1e-74)."""
        return self._out(self._marginals().clamp(0.0, 1.0))

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
        heads = self._expand_input(integer_tensor(heads, "heads", self.scores.device), 1)
        valid = check_heads(heads, self.lengths, self.n_max, self.single_root)
        score = self._tree_score(heads, labels)
        allowed = torch.isfinite(score)
        if self._validate_trees and not bool((valid & allowed).all()):
            position = (~(valid & allowed)).nonzero()[0].tolist()
            raise ValueError(
                f"heads at index {tuple(position)} (sample..., sentence) are not a "
                f"{'single-root ' if self.single_root else ''}tree of the sentence's allowed arcs"
            )
        value = self._tree_log_prob(heads, score, valid & allowed)
        return self._out(value.to(self.scores.dtype), batch_dim=-1)

    def _tree_log_prob(self, heads: Tensor, score: Tensor, trees: Tensor) -> Tensor:
        """log p = shifted tree score − log Z' in float64 ``(..., B)``, -inf where not ``trees``;
        exactly 0 for a tree that carries all the probability, and never above 0."""
        self._require_resolved("log-probabilities")
        value = torch.where(trees, score - self._log_z_shifted(), torch.full_like(score, NEG_INF)).clamp(max=0.0)
        dominant = self._dominant()
        if dominant is not None and bool(dominant.any()):
            sole = dominant & (heads == self._cache["best"]).all(-1)
            value = torch.where(sole, torch.zeros_like(value), value)
        return value

    def _sum_at_heads(self, matrix: Tensor, heads: Tensor) -> Tensor:
        """Σ_m matrix[heads[m], m] over the words of each sentence, ``(..., B)``.

        ``matrix`` is ``(B, N+1, N+1)`` [head, dep]; ``heads`` is ``(..., B, N+1)``.
        """
        fast = self._native_sums(matrix, heads, None)
        if fast is not None:
            return fast[0]
        words = word_mask(self.lengths, self.n_max)
        safe_heads = torch.where(words, heads, torch.zeros_like(heads)).clamp(0, self.n_max)
        expanded = matrix.expand(heads.shape[:-2] + matrix.shape)
        picked = torch.gather(expanded, -2, safe_heads.unsqueeze(-2)).squeeze(-2)
        return torch.where(words, picked, torch.zeros_like(picked)).sum(-1)

    def _native_sums(self, matrix: Tensor, heads: Tensor, allowed: Optional[Tensor]) -> Optional[Tuple[Tensor, Tensor]]:
        """:func:`.fused.sums_at_heads` where it applies (a float64 CPU matrix with numba and no
        gradient to carry, integer heads), else None: the torch code below is the reference."""
        if (
            matrix.dtype != torch.float64
            or heads.dtype not in (torch.int64, torch.int32)
            or heads.numel() == 0  # the kernel's reshape cannot size an empty batch
            or (torch.is_grad_enabled() and matrix.requires_grad)
            or not native_enabled(matrix)
        ):
            return None
        from spacy_treexp.engine import fused

        return fused.sums_at_heads(matrix, heads, self.lengths, allowed)

    def _tree_score(self, heads: Tensor, labels: Optional[Tensor] = None) -> Tensor:
        """The shifted score of each tree in float64, ``(..., B)``: Σ_m s'(heads[m], m) with
        s' = score − shift[m] (:meth:`_shifted_scores`), so that log p = it − log Z'; with
        ``labels``, Σ_m (label_scores[heads[m], m, labels[m]] − shift[m]). -inf where a word's
        arc is not allowed."""
        shifted, shift = self._shifted_scores()
        fast = None if labels is not None else self._native_sums(shifted, heads, self.arc_mask)
        if fast is not None:
            return fast[0].masked_fill(fast[1], NEG_INF)
        words = word_mask(self.lengths, self.n_max)
        safe_heads = torch.where(words, heads, torch.zeros_like(heads)).clamp(0, self.n_max)
        allowed = torch.gather(
            self.arc_mask.expand(heads.shape[:-2] + self.arc_mask.shape), -2, safe_heads.unsqueeze(-2)
        ).squeeze(-2)
        forbidden = (words & ~allowed).any(-1)
        if labels is None:
            score = self._sum_at_heads(shifted, heads)
            return score.masked_fill(forbidden, NEG_INF)
        if self.label_scores is None:
            raise ValueError("labels were given but the scores are unlabeled")
        labels = self._expand_input(integer_tensor(labels, "labels", self.scores.device), 1)
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
        arc = torch.gather(per_head, -1, safe_labels.unsqueeze(-1)).squeeze(-1).to(torch.float64) - shift
        return torch.where(words, arc, torch.zeros_like(arc)).sum(-1).masked_fill(forbidden, NEG_INF)

    def expected_attachment(self, heads: Tensor) -> Tensor:
        """Expected number of correct heads of the given head vectors, Σ_m μ(heads[m], m),
        ``(..., B)``; they need not be trees, and a head outside the sentence (-1 for an
        unknown head, say) is never correct: it counts 0."""
        heads = self._expand_input(integer_tensor(heads, "heads", self.scores.device), 1)
        check_heads(heads, self.lengths, self.n_max)
        # μ(m, m) = 0: a head outside 0..N reads the diagonal (one beyond n reads a 0 already)
        positions = torch.arange(self.n_max + 1, device=heads.device)
        heads = torch.where((heads < 0) | (heads > self.n_max), positions, heads)
        return self._out(self._sum_at_heads(self._marginals(), heads), batch_dim=-1)

    # --------------------------------------------------------------- decoding
    @property
    def mode(self) -> Tensor:
        """The highest-scoring tree under the root constraint, heads ``(B, N+1)``."""
        weights = self.scores.masked_fill(~self.arc_mask, NEG_INF)
        return self._out(max_spanning_trees(weights, self.lengths, self.single_root))

    def mbr(self) -> Tensor:
        """The tree with the highest expected attachment score Σ_m μ(h_m, m), ``(B, N+1)``."""
        self._require_trees("MBR tree")
        marginals = self._marginals().detach()
        weights = marginals.masked_fill(~self.arc_mask, NEG_INF)
        return self._out(max_spanning_trees(weights, self.lengths, self.single_root))

    # ------------------------------------------------------------ expectations
    def entropy(self) -> Tensor:
        """Shannon entropy H(p) = log Z − Σ μ(h, m) s(h, m), in O(n³) (Zmigrod et al. 2021).

        Formed as log Z' − Σ μ s' from the column-shifted scores, in float64, so that the
        shifts never cancel; ≥ 0, and exactly 0 for a sentence found to be a single tree
        (see the class docstring).
        """
        entropy = self._entropy()
        return self._out(entropy if entropy.dtype == self.scores.dtype else entropy.to(self.scores.dtype))

    def _entropy(self) -> Tensor:
        """H(p) in float64, ``(B,)``."""
        fused = self._cache.get("entropy")
        if fused is None:
            fused = self._fused_entropy()
        if fused is not None and not (torch.is_grad_enabled() and self.scores.requires_grad):
            # the fused kernel's log Z' − Σ μ s' (it settled every sentence): what the general
            # form below gives, without its dozen tensor calls
            return fused
        value = _non_negative(self._cross_entropy(self, "entropy"))  # below 0: rounding
        dominant = self._dominant()
        return value if dominant is None else torch.where(dominant, torch.zeros_like(value), value)

    def cross_entropy(self, other: TreeDistribution) -> Tensor:
        """H(p, q) = −E_p[log q(d)] = log Z_q − Σ μ_p(h, m) s_q(h, m); +inf if q forbids a tree of p.

        Formed as log Z_q' − Σ μ_p s_q' from q's column-shifted scores, in float64 (see
        :meth:`entropy`)."""
        self._check_compatible(other)
        return self._out(self._cross_entropy(other).to(self.scores.dtype))

    def _cross_entropy(self, other: TreeDistribution, what: str = "cross-entropy") -> Tensor:
        """H(p, q) in float64, ``(B,)``."""
        marginals = self._marginals_inner(what)
        other._require_trees(what)
        log_weights = self._cache.get("log_weights")
        if other is self and log_weights is not None and not (torch.is_grad_enabled() and log_weights.requires_grad):
            # the fast path's s', -inf off the allowed arcs where μ = w · (...) is 0: 0 · -inf is
            # the only NaN, and no copy of the scores is made
            expected = (marginals * log_weights).nan_to_num_(nan=0.0).sum((1, 2), dtype=torch.float64)
        else:
            shifted, _ = other._shifted_scores()
            expected = (marginals * shifted).sum((1, 2))  # both are 0 off the allowed arcs
        value = other._log_z_shifted() - expected
        sole = self._dominant()
        if sole is not None and bool(sole.any()):  # p is one tree: −log q(it), 0 if q is the same one
            best = self._cache["best"]
            value = torch.where(sole, -other._tree_log_prob(best, other._tree_score(best), sole), value)
        if other.arc_mask is self.arc_mask:
            return value
        escapes = ((marginals > 0) & self.arc_mask & ~other.arc_mask).any(-1).any(-1)
        return torch.where(escapes, torch.full_like(value, float("inf")), value)

    def _check_compatible(self, other: TreeDistribution) -> None:
        if not isinstance(other, TreeDistribution):
            raise TypeError(f"expected a TreeDistribution, got {type(other).__name__}")
        if other.scores.shape != self.scores.shape:
            raise ValueError(
                "the two distributions must have the same scores shape and lengths; got "
                f"{tuple(self.scores.shape)} / {tuple(other.scores.shape)}"
            )
        if not torch.equal(other.lengths, self.lengths):
            b = int((other.lengths != self.lengths).nonzero()[0, 0])
            raise ValueError(
                "the two distributions must have the same scores shape and lengths; sentence "
                f"{b} has {int(self.lengths[b])} / {int(other.lengths[b])} words"
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
            value = -self._tree_log_prob(best, self._tree_score(best), torch.ones_like(self.lengths, dtype=torch.bool))
            return self._out(_non_negative(value).to(self.scores.dtype))
        # Z(α s) = exp(α Σ shift) Z(α s'): the shifts drop out of the difference exactly.
        shifted, _ = self._shifted_scores()
        tilted = alpha * shifted
        if bool((torch.isinf(tilted) & self.arc_mask).any()):
            raise ValueError(f"alpha = {alpha} times the scores overflows float64")
        tilted = torch.where(self.arc_mask, tilted, torch.full_like(tilted, NEG_INF))
        other = TreeDistribution(tilted, self.lengths, single_root=self.single_root, stable=self.stable)
        other._require_trees("Rényi entropy")
        value = (other._log_z_shifted() - alpha * self._log_z_shifted()) / (1.0 - alpha)
        mine, theirs = self._dominant(), other._dominant()
        if alpha > 0 and mine is not None and theirs is not None:  # one tree each, the same one
            value = torch.where(mine & theirs, torch.zeros_like(value), value)
        return self._out(_non_negative(value).to(self.scores.dtype))

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
        from L̂⁻¹ in float64. A sentence the stable path computed (:attr:`used_stable_path`:
        forbidden arcs, or weights below exp(−300) of their column's best) may have an L̂ too
        badly conditioned for its inverse (a variance of −0.23 against 0.015 at scores ×10 with
        ROOT restricted): there Cov[r, s] is rᵀ H s with H = ∇² log Z, the covariance of the
        arc indicators, formed by S Hessian-vector products through the stable path's log Z
        (O(S n³), its constant). Unvectorised r (B, N+1, N+1) or s drop their axis of the result.
        """
        return self._second_moment(r, s, centred=True)

    def second_order(self, r: Tensor, s: Tensor) -> Tensor:
        """T2: E_p[r(d) s(d)ᵀ] = Cov[r, s] + E[r] E[s]ᵀ, ``(B, R, S)`` (Zmigrod et al. 2021, eq. 32)."""
        return self._second_moment(r, s, centred=False)

    def _second_moment(self, r: Tensor, s: Tensor, centred: bool) -> Tensor:
        """Cov[r, s] (``centred``) or E[r sᵀ], with r and s vectorised internally. With s the
        same tensor as r, the diagonal (variances, E[r_k²]) is at least 0: rounding left
        values near zero at about −1e-15."""
        same = r is s
        r = self._arc_values(r, "r")
        s = self._arc_values(s, "s")
        r_vec = r if r.dim() == 4 else r.unsqueeze(-1)
        s_vec = s if s.dim() == 4 else s.unsqueeze(-1)
        self._require_trees("covariance")
        work = torch.float64 if self.scores.dtype != torch.float64 else self.scores.dtype
        weights, _ = laplacian.shifted_weights(self.scores.to(work), self.arc_mask)
        lap = laplacian.laplacian_matrix(weights, self.lengths, self.single_root)
        inverse, singular = torch.linalg.inv_ex(lap)  # singular: the Hessian route below, as on the stable path
        marginals = self._marginals().to(work)
        mask = self.arc_mask.unsqueeze(-1)
        r_vec = torch.where(mask, r_vec.to(work), torch.zeros_like(r_vec, dtype=work))
        s_vec = torch.where(mask, s_vec.to(work), torch.zeros_like(s_vec, dtype=work))
        diagonal = torch.einsum("bhm,bhmr,bhms->brs", marginals, r_vec, s_vec)
        r_hat = self._hat(weights, inverse, r_vec)
        s_hat = self._hat(weights, inverse, s_vec)
        value = diagonal - torch.einsum("bjkr,bkjs->brs", r_hat, s_hat)
        by_hessian = self._stable_sentences() | (singular != 0)
        if bool(by_hessian.any()):
            index = by_hessian.nonzero().squeeze(-1)
            value = value.index_put((index,), self._covariance_by_hessian(index, r_vec, s_vec))
        if not centred:
            r_mean = torch.einsum("bhm,bhmr->br", marginals, r_vec)
            s_mean = torch.einsum("bhm,bhms->bs", marginals, s_vec)
            value = value + r_mean.unsqueeze(-1) * s_mean.unsqueeze(-2)
        if same:
            torch.diagonal(value, dim1=-2, dim2=-1).clamp_(min=0.0)
        value = value.to(self.scores.dtype)
        if r.dim() == 3:
            value = value.squeeze(-2)
        if s.dim() == 3:
            value = value.squeeze(-1)
        return self._out(value)

    def _covariance_by_hessian(self, index: Tensor, r_vec: Tensor, s_vec: Tensor) -> Tensor:
        """Cov[r, s] ``(len(index), R, S)`` of the sentences ``index`` as rᵀ (∇² log Z) s: the
        gradient of Σ μ · s_j for each column j of ``s_vec``, the marginals μ = ∇ log Z taken
        on the stable path with their graph (``r_vec``, ``s_vec``: float64, zero outside the
        arcs)."""
        mask = self.arc_mask[index]
        r_sub, s_sub = r_vec[index], s_vec[index]
        keep_graph = self.scores.requires_grad
        with torch.enable_grad():
            x = self.scores[index].to(torch.float64)
            if not keep_graph:
                x = x.detach().requires_grad_(True)
            sub = TreeDistribution(x, self.lengths[index], single_root=self.single_root, stable=True)
            (mu,) = torch.autograd.grad(sub.log_partition.sum(), x, create_graph=True)
            columns = []
            for j in range(s_sub.shape[-1]):
                weighted = torch.where(mask, mu * s_sub[..., j], torch.zeros_like(mu)).sum()
                (product,) = torch.autograd.grad(weighted, x, retain_graph=True, create_graph=keep_graph)
                product = torch.where(mask, product, torch.zeros_like(product))
                columns.append(torch.einsum("bhmr,bhm->br", r_sub, product))
        return torch.stack(columns, dim=-1)

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
        sample_shape: Union[int, torch.Size, List[int], Tuple[int, ...]] = torch.Size(),
        method: Optional[str] = None,
        generator: Randomness = None,
    ) -> Tensor:
        """Independent trees ``(*sample_shape, B, N+1)`` (see :mod:`spacy_treexp.engine.sampling`;
        ``method`` None: its ``DEFAULT_METHOD``, ``colbourn``). An int ``k`` is the shape ``(k,)``.

        ``generator``: a ``torch.Generator``, or (``colbourn``) one per sentence, so that each
        sentence's trees do not depend on the batch it is in."""
        from spacy_treexp.engine import sampling

        self._require_trees("samples")
        heads = sampling.sample(self.batched(), sample_shape, method=method, generator=generator)
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


#: Largest rounding error (nats) of the stable path's log Z' under which a sentence's results
#: are taken as they are; above it (|log Z'| beyond about 1e8 for 80 words, from scores
#: around 1e7 and up) only a tree that carries all the probability is a defined answer.
_RESOLUTION = 1e-6


def _caller_level() -> int:
    """The ``stacklevel`` of the first frame outside this package's engine: a warning names the
    caller's line, whichever method reached it (and is shown once per caller's line)."""
    frame: Optional[FrameType] = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith("spacy_treexp.engine"):
        frame, level = frame.f_back, level + 1
    return level


def word_head_entropy(marginals: Tensor) -> Tensor:
    """Each word's head entropy −Σ_h μ(h, m) log μ(h, m), the entropy of column m of the
    marginals ``(..., N+1, N+1)`` [head, dep], in float64 ``(..., N+1)``. A marginal that
    rounding left below 0 (about −1e-15 on peaked scores; −1e-9 in float32) counts as 0, and a
    certain head's −0 or −1e-16 as 0."""
    mu = marginals.to(torch.float64).clamp_min(0.0)
    return (-torch.special.xlogy(mu, mu).sum(dim=-2)).clamp_min(0.0) + 0.0


def _from_fused(result: FusedPass) -> _Pass:
    """The fused kernel's pass as a :class:`_Pass` (each tensor made here)."""
    return _Pass(
        result.log_det,
        result.shift_total,
        result.marginals,
        result.accepted,
        result.shift,
        None,  # s' stays in the kernel: the entropy comes with the pass, other uses form it
        result.entropy,
        result.all_accepted,
        result.log_z,
    )


def _rounding(log_z_shifted: Tensor, lengths: Tensor) -> Tensor:
    """What float64 rounding may move log Z' (and what is computed from it) by: the stable
    path sums n log-pivots, each accurate to eps relative to |log Z'|."""
    return torch.finfo(torch.float64).eps * (lengths + 1) * log_z_shifted.abs()


def _non_negative(value: Tensor) -> Tensor:
    """``value`` with what rounding left below 0 (or -0.0) set to 0."""
    return value.clamp(min=0.0) + 0.0


def _use_fused_kernel(scores: Tensor) -> bool:
    """Whether the fast path runs on the fused CPU kernel: where :func:`.native.native_enabled`
    holds, no autograd graph is asked for (the kernel's marginals carry none), and the
    sentences are short enough for it to beat LAPACK (:data:`.fused.NATIVE_MAX_LENGTH`)."""
    if not native_enabled(scores) or (torch.is_grad_enabled() and scores.requires_grad):
        return False
    return scores.shape[-1] - 1 <= _fused().NATIVE_MAX_LENGTH


def _fused() -> ModuleType:
    """:mod:`.fused`, imported on first use (it imports numba)."""
    global _FUSED
    if _FUSED is None:
        from spacy_treexp.engine import fused

        _FUSED = fused
    return _FUSED


_FUSED: Optional[ModuleType] = None


def _inner_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype inference runs and keeps its marginals in: half precision has no LU kernels."""
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


#: On CUDA, float32 scores of sentences this long (padded length) start in float64: there the
#: float32 pass fails its error check for nearly every sentence and all of them were computed
#: twice (n = 120, scores ~ N(0, 2), H100: 7.8 ms against 3.5 ms for one pass, README
#: "On a GPU"), while a launch-bound GPU runs the float64 pass in about the float32 time.
CUDA_FLOAT64_FROM_LENGTH = 80


def _first_pass_dtype(scores: Tensor) -> torch.dtype:
    """The dtype of the first fast pass: :func:`_inner_dtype`, but float64 for long float32
    sentences on CUDA (:data:`CUDA_FLOAT64_FROM_LENGTH`); the result keeps the scores' dtype."""
    inner = _inner_dtype(scores.dtype)
    long = scores.shape[-1] - 1 >= CUDA_FLOAT64_FROM_LENGTH
    return torch.float64 if inner == torch.float32 and scores.is_cuda and long else inner


def _tree_arcs(heads: Tensor, lengths: Tensor, n_max: int) -> Tensor:
    """``(B, N+1, N+1)`` float64 indicator of the arcs heads[m] -> m of the words."""
    words = word_mask(lengths, n_max)
    safe_heads = torch.where(words, heads, torch.zeros_like(heads))
    arcs = torch.zeros(heads.shape + (n_max + 1,), dtype=torch.float64, device=heads.device)
    arcs.scatter_(-2, safe_heads.unsqueeze(-2), words.unsqueeze(-2).to(torch.float64))
    return arcs


def _stable_inference(
    scores: Tensor, mask: Tensor, lengths: Tensor, single_root: bool
) -> Tuple[Tensor, Tensor, Tensor]:
    """``(log Z', Σ shift, marginals)`` by GTH state reduction, the marginals as the gradient
    of log Z' (differentiable: by autograd through the elimination, so that second
    derivatives flow through μ)."""
    if not (torch.is_grad_enabled() and scores.requires_grad):
        return laplacian.stable_partition_and_marginals(scores, mask, lengths, single_root)
    shifted, shift_total = laplacian.stable_log_partition(scores, mask, lengths, single_root)
    finite = torch.isfinite(shifted)
    objective = torch.where(finite, shifted, torch.zeros_like(shifted)).sum()
    (marginals,) = torch.autograd.grad(objective, scores, create_graph=True)
    marginals = torch.where(mask & finite.view(-1, 1, 1), marginals, torch.zeros_like(marginals))
    return shifted.detach(), shift_total, marginals


class _PartitionGradient(torch.autograd.Function):
    """Identity on log Z whose gradient with respect to the scores is the given marginals.

    ∂ log Z / ∂ s(h, m) = μ(h, m): backpropagating log Z costs one multiplication instead of a
    second pass through the factorisation. μ keeps its own graph, so second derivatives
    (e.g. of the entropy) still flow through it.
    """

    @staticmethod
    def forward(ctx, scores: Tensor, log_z: Tensor, marginals: Tensor) -> Tensor:
        ctx.save_for_backward(marginals)
        ctx.scores_dtype = scores.dtype
        return log_z.clone()

    @staticmethod
    def backward(ctx, grad: Tensor):
        (marginals,) = ctx.saved_tensors
        return (grad.unsqueeze(-1).unsqueeze(-1) * marginals).to(ctx.scores_dtype), None, None


def _log_partition_with_gradient(scores: Tensor, log_z: Tensor, marginals: Tensor) -> Tensor:
    """log Z (its value detached from how it was computed) with gradient μ w.r.t. ``scores``."""
    if not (torch.is_grad_enabled() and scores.requires_grad):
        return log_z.detach()
    return _PartitionGradient.apply(scores, log_z.detach(), marginals)


@register_kl(TreeDistribution, TreeDistribution)
def _kl_tree_tree(p: TreeDistribution, q: TreeDistribution) -> Tensor:
    """KL(p ‖ q) = H(p, q) − H(p) ≥ 0, in O(n³) (Zmigrod et al. 2021, §6.3), in float64."""
    p._check_compatible(q)
    return p._out(_non_negative(p._cross_entropy(q, "KL divergence") - p._entropy()).to(p.scores.dtype))
