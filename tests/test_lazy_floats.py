"""Floats computed from symbolic sizes inside torch's kernels are lazy (ir/symnode.py): they pin the sizes they
came from only when the kernel reads them (a size, a branch), never when they only feed data (the divisor of a
mean, the scale of an upsample's index map). Generated: ops that compute floats from sizes x input ranks x
batch / spatial sizes that include 0, 1 and 2, against eager, with the number of compiles a person would call
optimal: 1 where the output size is a polynomial of the input sizes, one per value where it is floor(float).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import specengine

# name -> (fn, make input of spatial size n and batch b, compiles over SPATIAL x BATCHES when symbolic)
OPS = {
    "adaptive_avg_pool1d_1": (lambda x: F.adaptive_avg_pool1d(x, 1), 1),
    "adaptive_avg_pool2d_1": (lambda x: F.adaptive_avg_pool2d(x, 1), 2),
    "adaptive_avg_pool3d_1": (lambda x: F.adaptive_avg_pool3d(x, 1), 3),
    "adaptive_max_pool2d_1": (lambda x: F.adaptive_max_pool2d(x, 1), 2),
    "interpolate_x2": (lambda x: F.interpolate(x, scale_factor=2), 2),
    "interpolate_bilinear_x2": (lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), 2),
    "mean_hw": (lambda x: x.mean((-1, -2)), 2),
    "var_hw": (lambda x: x.var((-1, -2), unbiased=False), 2),
    "avg_pool2d_ceil": (lambda x: F.avg_pool2d(x, 2, ceil_mode=False), 2),
    "se_block": (lambda x: x * torch.sigmoid(F.adaptive_avg_pool2d(x, 1)), 2),
    "group_norm": (lambda x: F.group_norm(x, 1), 2),
    "layer_norm_hw": (lambda x: F.layer_norm(x, x.shape[-2:]), 2),
}
SPATIAL, BATCHES = (2, 3, 1, 5), (2, 1, 3)


def _input(rank: int, b: int, n: int) -> torch.Tensor:
    return torch.randn(b, 3, *([n + 1] * rank))  # spatial sizes 2, 3, 4, 6 (pooling needs one element)


@pytest.mark.parametrize("name", list(OPS))
def test_floats_from_sizes_pin_nothing(name):
    fn, rank = OPS[name]
    cfn = specengine.compile(fn, dynamic=True)
    calls = [(b, n) for n in SPATIAL for b in BATCHES]
    for b, n in calls:
        x = _input(rank, b, n)
        torch.testing.assert_close(cfn(x), fn(x))
    assert specengine.cache_misses(cfn) == 1, specengine.recompile_reasons(cfn)
    assert specengine.cache_hits(cfn) == len(calls) - 1


@pytest.mark.parametrize("scale", [1.5, 0.5, 2.5])
def test_floats_read_as_sizes_pin_them(scale):
    """floor(scale * n) is read as a size: each n is its own entry, and every entry is right."""
    fn = lambda x: F.interpolate(x, scale_factor=scale)  # noqa: E731
    cfn = specengine.compile(fn, dynamic=True)
    sizes = (2, 3, 2, 5, 3)
    for n in sizes:
        x = torch.randn(1, 2, n)
        torch.testing.assert_close(cfn(x), fn(x))
    assert specengine.cache_misses(cfn) == len(set(sizes))
    assert specengine.cache_hits(cfn) == len(sizes) - len(set(sizes))


def test_convnet_with_squeeze_excitation_compiles_once():
    """The MobileNet/EfficientNet/RegNet pattern: batch norm (eval), adaptive pooling, a gate; batch 1 included."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                      nn.Flatten(), nn.Linear(4, 2)).eval()  # fmt: skip
    cfn = specengine.compile(m, dynamic=True)
    calls = [(2, 8), (1, 8), (3, 9), (1, 5), (2, 16), (1, 1)]
    with torch.no_grad():
        for b, h in calls:
            x = torch.randn(b, 3, h, h)
            torch.testing.assert_close(cfn(x), m(x))
    assert specengine.cache_misses(cfn) == 1, specengine.recompile_reasons(cfn)
    assert specengine.cache_hits(cfn) == len(calls) - 1
