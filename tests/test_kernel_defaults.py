"""A size of 1 needs no entry of its own where torch's kernels ask `guard_or_false(s == 1)` (issue 25): the kernel
first runs answering each guard_or_false/true by its default, the general path (ir/kernel_decisions.defaults_first);
only where that path fails on the example is it run again deciding by the hint, with a guard.

A generator: programs whose torch kernels ask whether a size is 1 (batch norm's reference broadcasting its
statistics, in eval and train mode, 2d and 1d; interpolate; a convnet with adaptive pooling) x call sequences that
start at a batch and an image size of 1, then 2, 0 where eager allows it, and larger: equal to eager at one compile.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import counts
from torch import nn

import specengine

torch.manual_seed(0)
BN2 = nn.BatchNorm2d(4).eval()
BN1 = nn.BatchNorm1d(4).eval()
CONV = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                     nn.Flatten(), nn.Linear(4, 2)).eval()  # fmt: skip
RM, RV = torch.zeros(4), torch.ones(4)

PROGRAMS = {
    "batch_norm2d_eval": (BN2, "bchw"),
    "batch_norm2d_closed_over": (lambda x: BN2(x), "bchw"),  # (z3's first import inside its kernel: was refused)
    "batch_norm1d_eval": (BN1, "bct"),
    "batch_norm_fn_eval": (lambda x: F.batch_norm(x, RM, RV, training=False), "bchw"),
    "batch_norm_fn_train_stats": (lambda x: F.batch_norm(x, None, None, training=True), "bchw_nz"),
    "interpolate_nearest": (lambda x: F.interpolate(x, scale_factor=2.0, mode="nearest"), "bchw_nz"),
    "interpolate_bilinear": (lambda x: F.interpolate(x, size=(3, 5), mode="bilinear"), "bchw_nz"),
    "convnet": (CONV, "bchw_nz"),
}
# (batch, spatial) call sequences, starting at batch 1: the example that used to pin `== 1`. A batch of 0 is a
# second entry where F.batch_norm branches on `input.numel() == 0` itself (functional.py), the program's own test.
SIZES = {"bchw": [(1, 2), (2, 2), (1, 3), (2, 1), (3, 5), (0, 2)], "bct": [(1, 1), (2, 1), (2, 3), (3, 5), (0, 2)],
         "bchw_nz": [(1, 2), (2, 1), (1, 3), (2, 2), (3, 5)]}  # fmt: skip


def _input(kind: str, b: int, s: int) -> torch.Tensor:
    return torch.randn(b, 4, s) if kind == "bct" else torch.randn(b, 4, s, s)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_size_one_gets_no_entry_of_its_own(name):
    fn, kind = PROGRAMS[name]
    if name == "batch_norm_fn_train_stats":
        sizes = [(b, s) for b, s in SIZES[kind] if b * s * s > 1]  # eager: more than 1 value per channel
    else:
        sizes = SIZES[kind]
    cfn = specengine.compile(fn, dynamic=True)
    with torch.no_grad():
        for b, s in sizes:
            x = _input(kind, b, s)
            torch.testing.assert_close(cfn(x), fn(x))
    misses = 1 + any(b == 0 for b, _ in sizes)
    assert counts(cfn) == (misses, len(sizes) - misses), specengine.recompile_reasons(cfn)
    assert all("!= 0" in r for r in specengine.recompile_reasons(cfn))
    assert not any("== 1" in str(g) for e in specengine.cache_entries(cfn) for g in e.guards if "x.shape" in str(g))


E = 8
torch.manual_seed(0)
MHA = nn.MultiheadAttention(E, 2, batch_first=True).eval()


class _VitBlock(nn.Module):
    """A torchvision-style encoder block from torch.nn: class token, position embedding, attention, MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.cls, self.pos = nn.Parameter(torch.randn(1, 1, E)), nn.Parameter(torch.randn(1, 4, E))
        self.ln1, self.ln2, self.attn = nn.LayerNorm(E), nn.LayerNorm(E), nn.MultiheadAttention(E, 2, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(E, 16), nn.GELU(), nn.Linear(16, E))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        y = self.ln1(x)
        x = x + self.attn(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


# Kernels that view a transposed intermediate (MultiheadAttention with batch_first flattens (T, B, E) to (T*B, E)):
# with a batch of 1 the transposed tensor is contiguous, and torch's view algorithm asked `B*T == T` per dim pair.
VIEWING = {
    "mha_batch_first": (lambda x: MHA(x, x, x, need_weights=False)[0], 3),
    "mha_batch_first_weights": (lambda x: MHA(x, x, x)[1], 3),
    "mha_batch_first_padding_mask": (lambda x: MHA(x, x, x, key_padding_mask=x[..., 0] > 1, need_weights=False)[0], 3),
    "vit_block": (_VitBlock().eval(), 3),
}


@pytest.mark.parametrize("name", list(VIEWING))
def test_a_kernel_viewing_a_transposed_batch_compiles_once(name):
    fn, t = VIEWING[name]
    # (no batch of 0 with weights: eager's fast path, not taken under tracing, returns None weights for it)
    batches = [1, 2, 3, 1, 0] if name in ("mha_batch_first", "vit_block") else [1, 2, 3, 1]
    cfn = specengine.compile(fn, dynamic=True)
    with torch.no_grad():
        for b in batches:
            x = torch.randn(b, t, E)
            torch.testing.assert_close(cfn(x), fn(x), equal_nan=True)
    misses = 1 + (0 in batches)
    assert counts(cfn) == (misses, len(batches) - misses), specengine.recompile_reasons(cfn)
    assert not any("== 1" in str(g) for e in specengine.cache_entries(cfn) for g in e.guards if "x.shape[0]" in str(g))
