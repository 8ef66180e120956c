"""Epistemic uncertainty of an ensemble by brute force: every single-root tree of every
member's distribution enumerated in float64 (the reference of the spaCy component's and
the Stanza processor's mutual-information attributes)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy
import torch
from torch import Tensor

from helpers.enumerate_trees import tree_log_probs


@dataclass(frozen=True)
class MixtureReference:
    """Exact figures of an equal-weight mixture of K members' tree distributions.

    ``head_mutual_information`` (n,): per word, the entropy of the mean head marginals
    minus the mean entropy of each member's; ``expected_entropy``: the members' mean tree
    entropy; ``mutual_information``: the mixture's tree entropy minus ``expected_entropy``;
    ``marginals`` (n+1, n+1): the mixture's arc marginals, the mean of the members'."""

    head_mutual_information: Tensor
    expected_entropy: float
    mutual_information: float
    marginals: Tensor


def _head_entropy(mu: Tensor) -> Tensor:
    return -torch.special.xlogy(mu, mu).sum(-2)


def mixture_by_enumeration(member_scores: numpy.ndarray) -> MixtureReference:
    """The figures of the members' arc scores ``member_scores`` (K, n+1, n+1) by
    enumeration (n <= 6)."""
    n = member_scores.shape[-1] - 1
    marginals, log_probs = [], []
    for scores in member_scores:
        trees, lp = tree_log_probs(torch.from_numpy(scores.astype(numpy.float64)), n, True)
        mu = torch.zeros(n + 1, n + 1, dtype=torch.float64)
        for m in range(1, n + 1):
            mu[:, m].index_add_(0, trees[:, m], lp.exp())
        marginals.append(mu)
        log_probs.append(lp)
    mu_k, lp_k = torch.stack(marginals), torch.stack(log_probs)
    head_mi = _head_entropy(mu_k.mean(0)) - _head_entropy(mu_k).mean(0)
    member_entropy = -(lp_k.exp() * lp_k).sum(-1)
    mixture = torch.logsumexp(lp_k, 0) - math.log(len(member_scores))
    return MixtureReference(
        head_mutual_information=head_mi[1:],
        expected_entropy=float(member_entropy.mean()),
        mutual_information=float(-(mixture.exp() * mixture).sum() - member_entropy.mean()),
        marginals=mu_k.mean(0),
    )
