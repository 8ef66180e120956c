"""Worked example: the gradient of a generalized-expectation (GE) objective (Zmigrod et al. 2021, §6.4).

GE criteria (Druck & Smith) train a parser so that the model's expected feature counts
E_θ[f(d)] match target values f̃: O(θ) = ‖E_θ[f] − f̃‖². Its gradient needs the covariance
between the features and every arc, ∂E[f_i]/∂θ_e = Cov(f_i, 1_e). The direct method forms
that n² × n² covariance (O(n⁴F)); with T1 it is one expectation and one reverse pass,
O(n³ + n²F), because ∇_θ O = ∇_θ E[gᵀf] with g = 2(E[f] − f̃) held fixed.

Here f counts two constructions of a toy sentence: "arcs pointing left" and "arcs of length 1".
We run plain gradient descent on the scores until the parser's expectations hit the targets.
"""

import torch

from spacy_treexp import TreeDistribution

torch.manual_seed(0)
n = 8
scores = torch.randn(1, n + 1, n + 1, dtype=torch.float64, requires_grad=True)
heads = torch.arange(n + 1).view(-1, 1)
deps = torch.arange(n + 1).view(1, -1)
features = torch.stack([(heads > deps), (heads - deps).abs() == 1], dim=-1).to(torch.float64)
features = features.unsqueeze(0)  # (1, n+1, n+1, F=2): per-arc feature values
target = torch.tensor([[2.0, 6.0]], dtype=torch.float64)  # want 2 left arcs, 6 adjacent arcs

optimizer = torch.optim.SGD([scores], lr=0.5)
for step in range(201):
    dist = TreeDistribution(scores)
    expected = dist.expectation(features)  # T1: Σ μ f, O(n³ + n²F)
    objective = ((expected - target) ** 2).sum()
    optimizer.zero_grad()
    objective.backward()  # reverse mode through the closed-form marginals
    optimizer.step()
    if step % 50 == 0:
        print(
            f"step {step:3d}  E[f] = {expected.detach().numpy().round(3).tolist()}  objective = {objective.item():.5f}"
        )

# The gradient equals the T2 covariance route: ∂O/∂θ_e = Cov(gᵀf, 1_e).
dist = TreeDistribution(scores.detach())
g = 2 * (dist.expectation(features) - target)  # (1, F)
weighted = (features * g.view(1, 1, 1, -1)).sum(-1)  # gᵀf per arc
indicators = torch.eye((n + 1) ** 2, dtype=torch.float64).view(1, n + 1, n + 1, -1)  # 1_e for every arc
via_t2 = dist.covariance(weighted, indicators).view(1, n + 1, n + 1)
x = scores.detach().clone().requires_grad_(True)
via_autograd = torch.autograd.grad(((TreeDistribution(x).expectation(features) - target) ** 2).sum(), x)[0]
mask = dist.arc_mask
print("T2 covariance and reverse-mode gradients agree:", torch.allclose(via_t2[mask], via_autograd[mask], atol=1e-9))
