"""Alternative parses of an ambiguous sentence: samples, distinct k-best by sampling without
replacement, and drawing until the parses cover 90% of the probability.

    python examples/sampling.py

The arc scores here are written by hand (a parser's scores plug in the same way: any
``(n+1, n+1)`` matrix of log-potentials, ``scores[h, m]`` for the arc h -> m, 0 = ROOT).
"""

from __future__ import annotations

from collections import Counter

import torch

from spacy_treexp import TreeDistribution
from spacy_treexp.engine.sampling import iter_without_replacement, wilson_reject_acceptance

WORDS = ["ROOT", "I", "saw", "the", "man", "with", "a", "telescope"]
# Prepositional-phrase attachment is ambiguous: "with" -> "saw" or "with" -> "man".
ARCS = {
    (0, 2): 6.0,
    (2, 1): 5.0,
    (4, 3): 5.0,
    (2, 4): 5.0,
    (7, 6): 5.0,
    (5, 7): 5.0,
    (2, 5): 3.2,
    (4, 5): 2.8,  # the ambiguity
    (0, 4): 1.0,
    (2, 7): 1.5,
    (4, 1): 0.5,
    (7, 5): 1.0,
}


def scores() -> torch.Tensor:
    n = len(WORDS) - 1
    matrix = torch.full((n + 1, n + 1), -2.0)  # every other arc is possible but unlikely
    for (head, dep), value in ARCS.items():
        matrix[head, dep] = value
    return matrix


def show(heads: list[int]) -> str:
    return " ".join(f"{WORDS[m]}<-{WORDS[h]}" for m, h in enumerate(heads) if m > 0)


def main() -> None:
    dist = TreeDistribution(scores())
    generator = torch.Generator().manual_seed(0)

    print("1. 5000 independent samples (Wilson-Marginal): the most frequent parses")
    samples = dist.sample((5000,), generator=generator)
    counts = Counter(tuple(tree) for tree in samples.tolist())
    for tree, count in counts.most_common(3):
        exact = dist.log_prob(torch.tensor(tree)).exp().item()
        print(f"   {count / 5000:6.3f} sampled, {exact:6.3f} exact  {show(list(tree))}")

    print("\n2. Four distinct parses by stochastic beam search, with exact probabilities")
    heads, log_probs = dist.sample_without_replacement(4, method="sbs", generator=generator)
    for tree, log_prob in zip(heads.tolist(), log_probs.tolist()):
        print(f"   {torch.tensor(log_prob).exp().item():6.3f}  {show(tree)}")

    print("\n3. Draw distinct parses until they cover 90% of the probability")
    covered, drawn = 0.0, 0
    for tree, log_prob in iter_without_replacement(dist, generator):  # batched: B = 1
        covered += log_prob.exp().item()
        drawn += 1
        if covered >= 0.9:
            break
    print(f"   {drawn} parses cover {covered:.3f} of the probability mass")

    print(
        f"\n4. Wilson-Reject would need {1 / wilson_reject_acceptance(dist).item():.2f} "
        "multi-root draws per single-root tree on average"
    )


if __name__ == "__main__":
    main()
