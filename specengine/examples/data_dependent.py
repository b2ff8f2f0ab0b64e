"""Programs whose sizes depend on tensor data, for the tests and the benchmarks (issue 14).

Each one runs over a sweep of data at fixed shapes (masks of different densities, different routings); a
compiler that models data-dependent sizes compiles each once. `mask_sweep` and `routing_sweep` build the data.
"""

from __future__ import annotations

import torch
import torch.nn as nn


def masked_sum(x, mask):
    return x[mask].sum()


def masked_scale_reduce(x, mask):
    """Rows selected by a mask, scaled, then reduced over the (data-dependent) row dim."""
    return (x[mask] * 2).sum(0)


def nonzero_index_select(x, mask):
    rows = torch.nonzero(mask).squeeze(1)
    return x.index_select(0, rows) + 1


def arange_item(t):
    return torch.arange(t.item()) * 2


def unique_counts(x):
    values, counts = torch.unique(x, return_counts=True)
    return values, counts


class TopKRouting(nn.Module):
    """Mixture-of-experts routing: router logits -> top-k experts per token -> tokens per expert -> tokens
    gathered in expert order -> `torch.split` by the counts -> each expert (a Linear) on its tokens -> combined,
    weighted by the router's probabilities, back in token order."""

    def __init__(self, dim: int = 8, n_experts: int = 4, k: int = 2):
        super().__init__()
        self.router = nn.Linear(dim, n_experts)
        self.experts = nn.ModuleList(nn.Linear(dim, dim) for _ in range(n_experts))
        self.n_experts, self.k = n_experts, k

    def forward(self, x):
        probs = self.router(x).softmax(-1)
        weights, chosen = probs.topk(self.k, dim=-1)  # (T, k)
        flat = chosen.reshape(-1)  # (T*k,) expert of each (token, slot)
        order = flat.argsort(stable=True)
        token = order // self.k  # the token of each slot, in expert order
        counts = torch.bincount(flat, minlength=self.n_experts)[: self.n_experts]
        chunks = x[token].split(counts.tolist())
        y = torch.cat([expert(chunk) for expert, chunk in zip(self.experts, chunks)])
        y = y * weights.reshape(-1)[order].unsqueeze(-1)
        return torch.zeros_like(x).index_add(0, token, y)


# --- data ----------------------------------------------------------------------------------------------------


def mask_sweep(n: int, seed: int = 0) -> list[torch.Tensor]:
    """Masks of n elements: all False, all True, random (half), sparse (one in ten), one True."""
    g = torch.Generator().manual_seed(seed)
    one = torch.zeros(n, dtype=torch.bool)
    one[n // 2 :][:1] = True
    return [torch.zeros(n, dtype=torch.bool), torch.ones(n, dtype=torch.bool), torch.rand(n, generator=g) < 0.5,
            torch.rand(n, generator=g) < 0.1, one]  # fmt: skip


def routing_sweep(model: TopKRouting, tokens: int, seed: int = 0) -> list[torch.Tensor]:
    """Token batches of one shape that route differently: random, and all tokens sent to expert 0's side."""
    g = torch.Generator().manual_seed(seed)
    dim = model.router.in_features
    skew = model.router.weight.detach()[0] * 50  # every token's largest logit is expert 0's
    return [torch.randn(tokens, dim, generator=g), torch.randn(tokens, dim, generator=g) * 3,
            skew.expand(tokens, dim).clone(), torch.randn(tokens, dim, generator=g)]  # fmt: skip
