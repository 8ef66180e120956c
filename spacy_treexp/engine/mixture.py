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
* exact samples: a member k ~ w, then a tree ~ p_k (only the chosen member is sampled);
* unbiased estimate of the sentence's I(T; K) and H(p) (no closed form: log p(t) is a
  log-sum of K tree probabilities): from S trees t_s of the mixture, each scored under every
  member exactly (log p(t) = logsumexp_j (log w_j + log p_j(t))),

      Î = (1/S) Σ_s KL(π(· | t_s) ‖ w),   π_k(t) = w_k p_k(t) / p(t),   t_s ~ p,

  the divergence of the member's posterior given the tree from its prior (I(T; K) read as
  H(K) − H(K | T)), whose expectation is E_p[Σ_k π_k(t) log(p_k(t) / p(t))]
  = Σ_k w_k KL(p_k ‖ p) = I(T; K); and Ĥ(p) = Σ_k w_k H(p_k) + Î. It is the plain estimate
  log p_k(t) − log p(t) of a joint draw (k ~ w, t ~ p_k) with the member integrated out given
  the tree (Rao-Blackwell: never a larger variance). Each term lies in
  [0, −log min_k w_k], so the estimate is never negative; where the members agree
  (p_k(t) = p(t)(1 + ε_k)) a term is of order Σ_k w_k ε_k², and so is its spread, where the
  plain terms spread by order ε.
"""

from __future__ import annotations

import operator
import re
from contextlib import contextmanager
from typing import Iterator, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from spacy_treexp.engine import sampling
from spacy_treexp.engine.distribution import TreeDistribution, word_head_entropy
from spacy_treexp.engine.sampling.streams import Randomness

#: The most score cells (rows x (N+1)^2) the mixture's draws copy at once: each draw samples
#: from a copy of its member's scores, and 10^5 draws of a 30-word sentence at once peaked at
#: 4.2 GB; at most 2^22 cells a part (about 0.2 GB at that rate).
DRAW_CELLS = 2**22


class TreeMixture:
    """A mixture Σ_k w_k p_k of K tree distributions over each sentence of a batch.

    Args:
        scores: ``(B, K, N+1, N+1)`` (or ``(K, N+1, N+1)`` for one sentence) arc
            log-potentials of the K members, in :class:`TreeDistribution`'s convention.
        weights: ``(K,)`` or ``(B, K)`` non-negative weights (normalised here), or None for
            equal weights. A member of weight 0 is no part of the mixture: its scores are not
            read (they may admit no tree), and its own ``member_*`` values are those of
            uniform scores.
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
        self.weights = _normalised(weights, batch, k, scores.device)
        absent = self.weights == 0
        if bool(absent.any()):  # not part of the mixture: never read, so never refused (no tree, NaN)
            scores = torch.where(absent[:, :, None, None], torch.zeros_like(scores), scores)
        #: the K B members as one batch, member k of sentence b at index b K + k
        with _naming_members(k):
            self.members = TreeDistribution(
                scores.reshape(batch * k, n1, n1), lengths.repeat_interleave(k), single_root=single_root
            )
        self.single_root = single_root
        self._member_entropy: Optional[Tensor] = None

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
        return self._out(self._per_member(self._member_marginals()))

    def _member_marginals(self) -> Tensor:
        """The members' marginals ``(B K, N+1, N+1)``; an error names the sentence and member."""
        with _naming_members(self.k):
            return self.members.marginals

    @property
    def marginals(self) -> Tensor:
        """The mixture's arc marginals Σ_k w_k μ_k(h, m), ``(B, N+1, N+1)`` (exact)."""
        return self._out(self._weighted(self._per_member(self._member_marginals())))

    def _entropies(self) -> Tensor:
        """H(p_k) ``(B, K)`` in the members' dtype, computed once."""
        if self._member_entropy is None:
            with _naming_members(self.k):
                self._member_entropy = self._per_member(self.members.entropy())
        return self._member_entropy

    def member_entropy(self) -> Tensor:
        """Each member's tree entropy H(p_k), ``(B, K)`` (exact)."""
        return self._out(self._entropies())

    def expected_entropy(self) -> Tensor:
        """Σ_k w_k H(p_k), the aleatoric part of the mixture's entropy, ``(B,)`` (exact)."""
        return self._out(self._weighted(self._entropies()))

    def head_entropy(self) -> Tensor:
        """Entropy of each word's head under the mixture, H(Σ_k w_k μ_k(·, m)), ``(B, N+1)``
        (0 at ROOT and padding)."""
        mixed = self._weighted(self._per_member(self._member_marginals()))
        return self._out(word_head_entropy(mixed))

    def head_mutual_information(self) -> Tensor:
        """I(h_m; K) = H(Σ_k w_k μ_k(·, m)) − Σ_k w_k H(μ_k(·, m)) per word, ``(B, N+1)``
        (exact; 0 at ROOT and padding; ≥ 0 up to rounding, clamped at 0)."""
        member = self._per_member(self._member_marginals())
        mixed = word_head_entropy(self._weighted(member))
        mean = self._weighted(word_head_entropy(member))
        return self._out((mixed - mean).clamp_min(0.0) + 0.0)

    # -------------------------------------------------------------- sampling
    def sample(self, num_samples: int, method: Optional[str] = None, generator: Randomness = None) -> Tensor:
        """``num_samples`` independent trees per sentence from the mixture, ``(S, B, N+1)``
        (exact: the member of each draw ~ w, then its tree ~ that member).

        ``generator``: a ``torch.Generator`` or (``colbourn``) one per sentence, whose
        trees then do not depend on the batch."""
        picked = self._mixture_trees(num_samples, method, generator)
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
        with _naming_members(self.k):
            member = self.members.log_prob(expanded.reshape(lead + (self.batch * self.k, heads.shape[-1])))
        member = member.to(torch.float64).reshape(lead + (self.batch, self.k))
        log_w = self.weights.to(torch.float64).log()
        return member, torch.logsumexp(member + log_w, dim=-1)

    def _mixture_trees(self, num_samples: int, method: Optional[str], generator: Randomness) -> Tensor:
        """``num_samples`` trees per sentence from the mixture, ``(S, B, N+1)``: each draw's
        member ~ w, then one tree of that member (the chosen members' rows alone are sampled,
        as one batch, draw s of sentence b at row s B + b).

        With one generator per sentence, sentence b's generator first draws its S members
        (S uniforms against the cumulative weights), then serves its tree itself (S = 1) or
        seeds one generator per draw (S > 1). The rows are sampled :data:`DRAW_CELLS` score
        cells at a time (each row is a copy of its member's scores): with one generator per
        sentence the same trees, with one shared generator the same distribution."""
        num_samples = _positive_count(num_samples)
        self._member_marginals()  # a sentence without a tree is named here (cached)
        device = self.members.scores.device
        weights = self.weights.to(torch.float64)
        streams: Randomness = generator
        seeds: Optional[List[int]] = None  # per draw, its generator made when its rows are sampled
        if generator is None or isinstance(generator, torch.Generator):
            choice = torch.multinomial(weights, num_samples, replacement=True, generator=generator).to(device)
        else:
            if len(generator) != self.batch:
                raise ValueError(f"got {len(generator)} per-sentence generators for a batch of {self.batch} sentences")
            choice = _choose_members(weights, num_samples, generator).to(device)
            streams = list(generator)
            if num_samples > 1:
                seeds, seed_device = _per_draw_seeds(generator, num_samples), generator[0].device
        rows = (torch.arange(self.batch, device=device).unsqueeze(-1) * self.k + choice).t().reshape(-1)
        lengths = self.lengths.repeat(num_samples)
        scores = self.members.scores.detach()
        step = max(1, DRAW_CELLS // scores.shape[-1] ** 2)  # each draw copies its member's scores
        parts = []
        for begin in range(0, rows.numel(), step):
            part = slice(begin, begin + step)
            chosen = TreeDistribution(scores.index_select(0, rows[part]), lengths[part], single_root=self.single_root)
            if seeds is not None:  # a few thousand generators at a time, not one per draw at once
                per_row: Randomness = [torch.Generator(device=seed_device).manual_seed(seed) for seed in seeds[part]]
            else:
                per_row = streams[part] if isinstance(streams, list) else streams
            parts.append(sampling.sample(chosen, (1,), method=method, generator=per_row)[0])
        heads = torch.cat(parts)
        return heads.reshape(num_samples, self.batch, heads.shape[-1])

    def mutual_information(
        self, num_samples: int = 8, method: Optional[str] = None, generator: Randomness = None
    ) -> Tuple[Tensor, Tensor]:
        """Unbiased estimates of (I(T; K), H(p)) per sentence, ``(B,)`` each, in float64, from
        ``num_samples`` trees of the mixture per sentence, each scored exactly under every
        member (see the module doc: Î = mean_s KL(π(· | t_s) ‖ w) ≥ 0, Ĥ = Σ_k w_k H(p_k) + Î).

        ``generator``: a ``torch.Generator``, or (``colbourn``) one per sentence, whose
        draws then do not depend on the batch."""
        trees = self._mixture_trees(num_samples, method, generator)
        member, mixture = self._log_probs_all(trees)  # (S, B, K), (S, B)
        log_ratio = member - mixture.unsqueeze(-1)  # log p_k(t) − log p(t) = log π_k(t) − log w_k
        posterior = torch.exp(self.weights.to(torch.float64).log() + log_ratio)  # π_k(t): 0 for w_k = 0
        terms = torch.where(posterior > 0, posterior * log_ratio, torch.zeros_like(posterior))
        mi = terms.sum(-1).clamp_min(0.0).mean(0)  # KL(π ‖ w) ≥ 0 (below 0 only by rounding)
        entropy = self._weighted(self._entropies().to(torch.float64)) + mi
        return self._out(mi), self._out(entropy)


def _positive_count(value) -> int:
    """``num_samples`` as an int (numpy and torch integers included); ``ValueError`` naming it
    where it is not an integer of at least 1."""
    if not isinstance(value, bool):
        try:
            count = operator.index(value)
        except TypeError:
            pass
        else:
            if count >= 1:
                return count
    raise ValueError(f"num_samples must be an integer of at least 1, got {value!r}")


@contextmanager
def _naming_members(k: int) -> Iterator[None]:
    """Re-raise a member batch's ``ValueError`` naming the sentence and member: the members of
    sentence b are rows b K .. b K + K - 1 of one :class:`TreeDistribution`, whose messages
    name the row (``sentence 7``, ``lengths[7]``)."""
    try:
        yield
    except ValueError as error:
        text = str(error)
        message = re.sub(r"\bsentence (\d+)", lambda m: f"sentence {int(m[1]) // k} (member {int(m[1]) % k})", text)
        message = re.sub(r"\blengths\[(\d+)\]", lambda m: f"lengths[{int(m[1]) // k}]", message)
        if message == text:
            raise
        raise type(error)(message) from error


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


def _choose_members(weights: Tensor, num_samples: int, generators: Sequence[torch.Generator]) -> Tensor:
    """``(B, S)`` members, draw s of sentence b ~ weights[b] by one uniform of its own
    generator (never a member of weight 0)."""
    uniforms = torch.empty((len(generators), num_samples), dtype=torch.float64, device=weights.device)
    for row, generator in zip(uniforms, generators):  # (the same values as torch.rand, in one buffer)
        row.uniform_(generator=generator)
    cumulative = weights.cumsum(-1)
    choice = (uniforms.unsqueeze(-1) * cumulative[:, -1:].unsqueeze(1) >= cumulative.unsqueeze(1)).sum(-1)
    last = weights.shape[-1] - 1 - (weights.flip(-1) > 0).to(torch.long).argmax(-1)  # the last member of weight > 0
    return torch.minimum(choice, last.unsqueeze(-1))


def _per_draw_seeds(generators: Sequence[torch.Generator], num_samples: int) -> List[int]:
    """One generator per sentence → the seed of one per (draw s, sentence b) at s B + b, drawn
    from the sentence's (the generators themselves are made a part at a time: 10^5 of them at
    once took 0.9 GB)."""
    seeds = [torch.randint(0, 2**62, (num_samples,), generator=g, device=g.device).tolist() for g in generators]
    return [int(seed[s]) for s in range(num_samples) for seed in seeds]
