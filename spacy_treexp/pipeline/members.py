"""Ensemble members for ``biaffine_parser``: Monte Carlo dropout passes of its arc scorer.

Each member is the arc scorer with its own dropout masks (Gal & Ghahramani 2016, MC
dropout), at the rate the parser was trained with; the K members' tree distributions form
the mixture whose mutual information is the parser's epistemic uncertainty
(``spacy_treexp.engine.TreeMixture``). Two kinds of member:

* ``"head"`` (the default, cheap): MC dropout on the last layer. The parser's own pass
  (encoder and arc MLPs, recorded by hooks) is shared by all members; each member drops
  units of every dependent's arc representation (the dep MLP's output, at the training
  rate) before the biaffine form: ``arc_k = [r_head; 1] U (r_dep ⊙ m_k)ᵀ``. Costs one
  (N+1)×(N+1) product per member and sentence (no BiLSTM, no MLP, no relation classifier).
* ``"full"`` (stronger, costlier): every member also drops units of the token vectors
  entering the BiLSTM and runs the BiLSTM itself: K passes of the whole arc scorer (the
  shared tok2vec runs once). Inter-layer dropout inside a multi-layer BiLSTM is not applied.

Masks come from one generator per sentence, seeded by the sentence's text, so a sentence's
members do not depend on the batch it is parsed in.
"""

from __future__ import annotations

import hashlib
from typing import Any, Optional, Sequence

import torch
from torch import Tensor

MEMBER_KINDS = ("head", "full")
#: Members of ``biaffine_parser`` by default (its ``members`` setting; 0: none).
DEFAULT_MEMBERS = 2


def sentence_generator(seed: int, text: str) -> torch.Generator:
    """A CPU generator seeded by ``seed`` and the sentence's text (stable across processes)."""
    key = f"{seed}\x00{text}".encode()
    value = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1
    return torch.Generator().manual_seed(value)


class ScorerCapture:
    """What the parser's arc scorer saw in its last forward pass: its token vectors ``X``
    ``(B, N, width)`` and ``lengths`` (for ``"full"`` members), the encoder's output, the arc
    MLPs' input ``H`` ``(B, N+1, hidden)``, and for ``"head"`` members the arc scorer's head
    side ``by_head`` ``[r_head; 1] U`` and its dependents ``dep`` ``r_dep`` (``(B, N+1, arc
    width)`` each), so that members cost no second encoder pass nor head product. Use as a context
    manager around the parser's prediction (the scorer must be in eval mode: no dropout);
    the scorer hands them over through its ``capture`` attribute (``record``). With
    ``enabled`` false it records nothing."""

    def __init__(self, scorer: Any, enabled: bool = True) -> None:
        self.scorer = scorer
        self.enabled = enabled
        self.X: Optional[Tensor] = None
        self.lengths: Optional[Tensor] = None
        self.H: Optional[Tensor] = None
        self.by_head: Optional[Tensor] = None
        self.dep: Optional[Tensor] = None

    def record(self, X: Tensor, lengths: Tensor, H: Tensor, by_head: Tensor, dep: Tensor) -> None:
        """Keep one pass's inputs, encoder output and arc scorer parts (called by the scorer)."""
        self.X, self.lengths, self.H = X.detach(), lengths.detach(), H.detach()
        self.by_head, self.dep = by_head.detach(), dep.detach()

    def __enter__(self) -> ScorerCapture:
        if self.enabled:
            self.scorer.capture = self
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.scorer.capture is self:
            self.scorer.capture = None


def _masks(widths: Sequence[int], lengths: Tensor, k: int, p: float, generators: Sequence[torch.Generator], device):
    """One dropout mask ``(K, B, N+1, width)`` per width, scaled by 1 / (1 - p), drawn per
    sentence from its generator in one call (positions past a sentence are 1)."""
    n1 = int(lengths.max()) + 1
    total = sum(widths)
    out = torch.ones((k, len(generators), n1, total))
    if p > 0:
        for b, generator in enumerate(generators):
            size = int(lengths[b]) + 1
            keep = torch.rand((k, size, total), generator=generator) >= p
            out[:, b, :size] = keep.float() / (1.0 - p)
    return [part.to(device) for part in out.split(list(widths), dim=-1)]


def arc_members(
    scorer: Any,
    capture: ScorerCapture,
    k: int,
    kind: str,
    generators: Sequence[torch.Generator],
) -> Tensor:
    """Arc scores ``(K, B, N+1, N+1)`` of K MC-dropout members of ``scorer``
    (``spacy_treexp.pipeline.architectures.BiaffineScorer``) for the sentences of its last
    pass, recorded by ``capture`` (see the module doc for ``kind``); ``generators``: one per
    sentence."""
    if kind not in MEMBER_KINDS:
        raise ValueError(f"member kind must be one of {MEMBER_KINDS}, got {kind!r}")
    if capture.X is None or capture.lengths is None or capture.H is None:
        raise ValueError("no pass of the arc scorer was recorded")
    p = float(scorer.dropout.p)
    lengths = capture.lengths
    batch, n_max, _ = capture.X.shape
    hidden = scorer.arc_head[0].out_features
    with torch.no_grad():
        if kind == "full":
            X = capture.X
            X = torch.cat([scorer.root.expand(batch, 1, -1).to(X.dtype), X], dim=1)
            widths = [X.shape[-1], capture.H.shape[-1], hidden, hidden]
            x_mask, h_mask, head_mask, dep_mask = _masks(widths, lengths, k, p, generators, X.device)
            X = (X.unsqueeze(0) * x_mask.to(X.dtype)).reshape(k * batch, n_max + 1, -1)
            # In eval mode: thinc leaves the module in train mode after a prediction, where the
            # BiLSTM would add its own unseeded inter-layer dropout.
            training = scorer.training
            scorer.eval()
            try:
                H = scorer.encode(X, lengths.repeat(k))
            finally:
                scorer.train(training)
        else:
            if capture.by_head is None or capture.dep is None:
                raise ValueError("no pass of the arc MLPs was recorded")
            by_head = capture.by_head  # (B, N+1, arc width), shared by the members
            (dep_mask,) = _masks([hidden], lengths, k, p, generators, by_head.device)
            dep = capture.dep.unsqueeze(0) * dep_mask.to(capture.dep.dtype)  # (K, B, N+1, arc width)
            return torch.matmul(by_head.unsqueeze(0), dep.transpose(-1, -2))
        H = H * h_mask.reshape(H.shape).to(H.dtype)
        head = _mlp(scorer.arc_head, H, head_mask)
        dep = _mlp(scorer.arc_dep, H, dep_mask)
        head = torch.cat([head, head.new_ones(head.shape[:-1] + (1,))], dim=-1)
        arc = torch.einsum("bhi,ij,bmj->bhm", head, scorer.arc_weight, dep)
    return arc.reshape(k, batch, n_max + 1, n_max + 1)


def _mlp(mlp: Any, H: Tensor, mask: Tensor) -> Tensor:
    """The scorer's ``Linear -> LeakyReLU -> Dropout`` with a member mask ``(K, B, N+1, width)``."""
    hidden = mlp[1](mlp[0](H))
    return hidden * mask.reshape(hidden.shape).to(hidden.dtype)
