"""Quickstart: exact marginals, entropy, MAP and MBR trees from random arc scores."""

import torch

from spacy_treexp import TreeDistribution

torch.manual_seed(0)
words = ["ROOT", "She", "saw", "the", "cat"]
scores = torch.randn(len(words), len(words)) * 2  # scores[h, m]: log-potential of h -> m
scores[0, 2] += 4.0  # make "saw" a likely root

dist = TreeDistribution(scores)
print(f"log Z = {dist.log_partition.item():.3f}, tree entropy = {dist.entropy().item():.3f} nats")
mode, mbr = dist.mode, dist.mbr()
for m in range(1, len(words)):
    h = int(mode[m])
    print(
        f"{words[m]:>5} <- {words[h]:<5} p(head) = {dist.marginals[h, m].item():.3f}   MBR head: {words[int(mbr[m])]}"
    )
