"""``TreeMixture``: a weighted mixture of K tree distributions, and the epistemic
uncertainty it carries.

p(t) = Σ_k w_k p_k(t), each p_k a :class:`~spacy_treexp.engine.TreeDistribution` over the
same sentence (the members of an ensemble, checkpoints, or MC-dropout passes of a parser;
Gal & Ghahramani 2016, Lakshminarayanan et al. 2017). The total uncertainty H(p) splits into
the members' mean uncertainty Σ_k w_k H(p_k) and the mutual information I(T; K) between the
tree and the member (Depeweg et al. 2018, eq. 4; Malinin & Gales 2021, eq. 6 for sequences):

    I(T; K) = H(Σ_k w_k p_k) − Σ_k w_k H(p_k) = Σ_k w_k KL(p_k ‖ p).

* exact: the mixture's arc marginals Σ_k w_k μ_k, each member's tree entropy, and per word
  the mutual information between its head and the member,
  I(h_m; K) = H(Σ_k w_k μ_k(·, m)) − Σ_k w_k H(μ_k(·, m)) (both terms are functions of the
  marginals, so this is exact);
* exact samples: a member k ~ w, then a tree ~ p_k;
* unbiased estimate of the sentence's I(T; K) and H(p) (no closed form: log p(t) is a
  log-sum of K tree probabilities): from S trees drawn from every member, each scored under
  every member exactly (log p(t) = logsumexp_j (log w_j + log p_j(t))),

      Î = Σ_k w_k (1/S) Σ_s [log p_k(t_ks) − log p(t_ks)],   t_ks ~ p_k,

  stratified by member, whose expectation is Σ_k w_k KL(p_k ‖ p) = I(T; K); and
  Ĥ(p) = Σ_k w_k H(p_k) + Î, which is the plain Monte Carlo estimate
  Σ_k w_k mean_s[−log p(t_ks)] with the control variate log p_k(t_ks) + H(p_k) (mean 0, known
  exactly) removed. Each term of Î lies in (−∞, −log w_k], so its variance stays small where
  H(p) itself varies by many nats between trees.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
from torch import Tensor

from spacy_treexp.engine.distribution import TreeDistribution
from spacy_treexp.engine.sampling.streams import Randomness


class TreeMixture:
    """A mixture Σ_k w_k p_k of K tree distributions over each sentence of a batch.

    Args:
        scores: ``(B, K, N+1, N+1)`` (or ``(K, N+1, N+1)`` for one sentence) arc
            log-potentials of the K members, in :class:`TreeDistribution`'s convention.
        weights: ``(K,)`` or ``(B, K)`` non-negative weights (normalised here), or None for
            equal weights.
        lengths: ``(B,)`` words per sentence (default: N for all).
        single_root: as for :class:`TreeDistribution`.

    Results have a leading batch axis ``(B,)`` (dropped for an unbatched input).
    """

    def __init__(
        self,
        scores: Tensor,
        weights: Optional[Tensor] = None,
        lengths: Optional[Tensor] = None,
        *,
        single_root: bool = True,
    ) -> None:
        scores = torch.as_tensor(scores)
        self._unbatched = scores.dim() == 3
        if self._unbatched:
            scores = scores.unsqueeze(0)
        if scores.dim() != 4 or scores.shape[-1] != scores.shape[-2] or scores.shape[1] < 1:
            raise ValueError(f"member scores must be (B, K, N+1, N+1) with K >= 1, got shape {tuple(scores.shape)}")
        batch, k, n1 = scores.shape[0], scores.shape[1], scores.shape[-1]
        self.k = k
        self.batch = batch
        if lengths is None:
            lengths = torch.full((batch,), n1 - 1, dtype=torch.long, device=scores.device)
        lengths = torch.as_tensor(lengths, device=scores.device).reshape(-1)
        if lengths.shape != (batch,):
            raise ValueError(f"{tuple(lengths.shape)} lengths for {batch} sentences")
        self.lengths = lengths
        #: the K B members as one batch, member k of sentence b at index b K + k
        self.members = TreeDistribution(
            scores.reshape(batch * k, n1, n1), lengths.repeat_interleave(k), single_root=single_root
        )
        self.single_root = single_root
        self.weights = _normalised(weights, batch, k, scores.device)

    # ---------------------------------------------------------------- helpers
    @property
    def n_max(self) -> int:
        """N, the padded number of words."""
        return self.members.n_max

    def _out(self, value: Tensor) -> Tensor:
        return value.squeeze(0) if self._unbatched else value

    def _per_member(self, value: Tensor) -> Tensor:
        """``(B K, ...)`` → ``(B, K, ...)``."""
        return value.reshape((self.batch, self.k) + tuple(value.shape[1:]))

    def _weighted(self, value: Tensor) -> Tensor:
        """Σ_k w_k value[b, k, ...] of a ``(B, K, ...)`` tensor; members of weight 0 add 0."""
        w = self.weights.to(value.dtype)
        w = w.reshape(w.shape + (1,) * (value.dim() - 2))
        return torch.where(w > 0, w * value, torch.zeros_like(value)).sum(1)

    # ------------------------------------------------------------------ exact
    @property
    def member_marginals(self) -> Tensor:
        """μ_k(h, m) of every member, ``(B, K, N+1, N+1)``."""
        return self._out(self._per_member(self.members.marginals))

    @property
    def marginals(self) -> Tensor:
        """The mixture's arc marginals Σ_k w_k μ_k(h, m), ``(B, N+1, N+1)`` (exact)."""
        return self._out(self._weighted(self._per_member(self.members.marginals)))

    def member_entropy(self) -> Tensor:
        """Each member's tree entropy H(p_k), ``(B, K)`` (exact)."""
        return self._out(self._per_member(self.members.entropy()))

    def expected_entropy(self) -> Tensor:
        """Σ_k w_k H(p_k), the aleatoric part of the mixture's entropy, ``(B,)`` (exact)."""
        return self._out(self._weighted(self._per_member(self.members.entropy())))

    def head_entropy(self) -> Tensor:
        """Entropy of each word's head under the mixture, H(Σ_k w_k μ_k(·, m)), ``(B, N+1)``
        (0 at ROOT and padding)."""
        mixed = self._weighted(self._per_member(self.members.marginals))
        return self._out(_column_entropy(mixed))

    def head_mutual_information(self) -> Tensor:
        """I(h_m; K) = H(Σ_k w_k μ_k(·, m)) − Σ_k w_k H(μ_k(·, m)) per word, ``(B, N+1)``
        (exact; 0 at ROOT and padding; ≥ 0 up to rounding, clamped at 0)."""
        member = self._per_member(self.members.marginals)
        mixed = _column_entropy(self._weighted(member))
        mean = self._weighted(_column_entropy(member))
        return self._out((mixed - mean).clamp_min(0.0) + 0.0)

    # -------------------------------------------------------------- sampling
    def sample(self, num_samples: int, method: Optional[str] = None, generator: Randomness = None) -> Tensor:
        """``num_samples`` independent trees per sentence from the mixture, ``(S, B, N+1)``
        (exact: the member of each draw ~ w, then its tree ~ that member; draws
        ``num_samples`` trees of every member and keeps the chosen one's).

        ``generator``: a ``torch.Generator`` or (``colbourn``) one per sentence, whose
        trees then do not depend on the batch."""
        trees = self._member_trees(num_samples, method, generator)
        weights = self.weights.to(torch.float64)
        if generator is None or isinstance(generator, torch.Generator):
            choice = torch.multinomial(weights, num_samples, replacement=True, generator=generator)
        else:
            choice = torch.stack(
                [
                    torch.multinomial(weights[b].to(g.device), num_samples, replacement=True, generator=g)
                    for b, g in enumerate(generator)
                ]
            )
        index = choice.t().to(trees.device)[..., None, None].expand(num_samples, self.batch, 1, trees.shape[-1])
        picked = torch.gather(trees, 2, index).squeeze(2)
        return picked.squeeze(1) if self._unbatched else picked

    def log_prob(self, heads: Tensor) -> Tensor:
        """log p(t) = log Σ_k w_k p_k(t) of head vectors ``(..., B, N+1)`` → ``(..., B)``
        (exact; -inf for a non-tree)."""
        heads = torch.as_tensor(heads, device=self.members.scores.device)
        if self._unbatched:
            heads = heads.unsqueeze(-2)
        value = self._log_probs_all(heads)[1]
        return value.squeeze(-1) if self._unbatched else value

    def _log_probs_all(self, heads: Tensor) -> Tuple[Tensor, Tensor]:
        """(log p_j(t) ``(..., B, K)``, log p(t) ``(..., B)``) of trees ``(..., B, N+1)``."""
        lead = heads.shape[:-2]
        expanded = heads.unsqueeze(-2).expand(lead + (self.batch, self.k, heads.shape[-1]))
        member = self.members.log_prob(expanded.reshape(lead + (self.batch * self.k, heads.shape[-1])))
        member = member.to(torch.float64).reshape(lead + (self.batch, self.k))
        log_w = self.weights.to(torch.float64).log()
        return member, torch.logsumexp(member + log_w, dim=-1)

    def _member_trees(self, num_samples: int, method: Optional[str], generator: Randomness) -> Tensor:
        """``num_samples`` trees from every member, ``(S, B, K, N+1)``."""
        if num_samples < 1:
            raise ValueError(f"num_samples must be at least 1, got {num_samples}")
        generators = _per_member_generators(generator, self.k)
        heads = self.members.sample((num_samples,), method=method, generator=generators)
        return heads.reshape(num_samples, self.batch, self.k, heads.shape[-1])

    def mutual_information(
        self, num_samples: int = 8, method: Optional[str] = None, generator: Randomness = None
    ) -> Tuple[Tensor, Tensor]:
        """Unbiased estimates of (I(T; K), H(p)) per sentence, ``(B,)`` each, in float64, from
        ``num_samples`` trees of every member scored exactly under every member (see the module
        doc: Î = Σ_k w_k mean_s[log p_k(t_ks) − log p(t_ks)], Ĥ = Σ_k w_k H(p_k) + Î).

        ``generator``: a ``torch.Generator``, or (``colbourn``) one per sentence, whose
        draws then do not depend on the batch."""
        trees = self._member_trees(num_samples, method, generator)
        # each tree under every member: (S, K_from, B, N+1) → log-probs (S, K_from, B, K_under)
        under = self._log_probs_all(trees.permute(0, 2, 1, 3))[0].permute(0, 2, 1, 3)
        log_w = self.weights.to(torch.float64).log()
        log_mix = torch.logsumexp(under + log_w[None, :, None, :], dim=-1)  # (S, B, K_from)
        own = torch.diagonal(under, dim1=-2, dim2=-1)  # log p_k(t_ks), (S, B, K)
        kl = (own - log_mix).mean(0)  # (B, K)
        mi = self._weighted(kl)
        entropy = self._weighted(self._per_member(self.members.entropy().to(torch.float64))) + mi
        return self._out(mi), self._out(entropy)


def _normalised(weights: Optional[Tensor], batch: int, k: int, device: torch.device) -> Tensor:
    """``(B, K)`` float64 weights summing to 1 per sentence."""
    if weights is None:
        return torch.full((batch, k), 1.0 / k, dtype=torch.float64, device=device)
    w = torch.as_tensor(weights, dtype=torch.float64, device=device)
    if w.shape == (k,):
        w = w.expand(batch, k)
    if w.shape != (batch, k):
        raise ValueError(f"weights must be (K,) or (B, K) = ({batch}, {k}), got shape {tuple(w.shape)}")
    if not bool(torch.isfinite(w).all()) or bool((w < 0).any()) or not bool((w.sum(-1) > 0).all()):
        raise ValueError(f"weights must be finite, non-negative and not all 0, got {w.tolist()}")
    return w / w.sum(-1, keepdim=True)


def _column_entropy(marginals: Tensor) -> Tensor:
    """−Σ_h μ(h, m) log μ(h, m) of each column of ``(..., N+1, N+1)`` in float64, ``(..., N+1)``."""
    mu = marginals.to(torch.float64).clamp_min(0.0)  # float32 rounding can leave -1e-9
    return (-torch.special.xlogy(mu, mu).sum(dim=-2)).clamp_min(0.0)


def _per_member_generators(generator: Randomness, k: int) -> Randomness:
    """One generator per sentence → one per (sentence, member), seeded from the sentence's."""
    if generator is None or isinstance(generator, torch.Generator):
        return generator
    out: List[torch.Generator] = []
    for g in generator:
        seeds = torch.randint(0, 2**62, (k,), generator=g, device=g.device).tolist()
        out.extend(torch.Generator(device=g.device).manual_seed(int(s)) for s in seeds)
    return out
