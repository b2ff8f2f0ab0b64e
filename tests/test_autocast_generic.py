"""Ops on torch's generic path (meta kernels) called inside `torch.autocast`: eager's output dtypes and values.

Generated: ops from autocast's CPU lists (lower precision: convolutions, transposed convolution, prelu, baddbmm;
float32: cdist, mse_loss; and ops autocast leaves alone: padding, pooling), as functions and inside modules x call
sequences that switch between bfloat16 autocast, float16 autocast and no autocast over sizes 2, 0 and 1, so that
an entry traced under one autocast state is offered a call under another. Each output is compared with eager's
(dtype exactly, values at the autocast dtype's precision); the counts are exact: one entry per autocast state,
and one more for an empty input where the op's own rules decide it (`EMPTY_ENTRY`).
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F
from helpers import counts
from torch import nn

import specengine

W = {"conv1d": (2, 3, 3), "conv2d": (2, 3, 3, 3), "conv_transpose1d": (3, 2, 3)}
OPS = {  # name -> (the program of x and its weights, the input's shape after the batch)
    "conv1d": (lambda x, w: F.conv1d(x, w["conv1d"], padding=1), (3, 8)),
    "conv2d": (lambda x, w: F.conv2d(x, w["conv2d"], stride=2), (3, 6, 6)),
    "conv_transpose1d": (lambda x, w: F.conv_transpose1d(x, w["conv_transpose1d"]), (3, 5)),
    "prelu": (lambda x, w: F.prelu(x, w["prelu"]), (3, 4)),
    "baddbmm": (lambda x, w: torch.baddbmm(x, x, x.transpose(1, 2)), (3, 3)),
    "cdist": (lambda x, w: torch.cdist(x, x), (3, 4)),
    "mse_loss": (lambda x, w: F.mse_loss(x, x * 2), (3, 4)),
    "pad_pool": (lambda x, w: F.avg_pool1d(F.pad(x, (1, 1)), 2), (3, 4)),
    "conv_then_pool": (lambda x, w: F.max_pool1d(F.conv1d(x, w["conv1d"], padding=1), 2), (3, 8)),
}
EMPTY_ENTRY = {"cdist"}  # an empty input is an entry of its own (torch's own rule decides it)
STATES = {"bf16": torch.bfloat16, "fp16": torch.float16, "off": None}
SEQUENCES = {
    "bf16_first": [("bf16", 2), ("bf16", 0), ("off", 1), ("fp16", 2), ("bf16", 1), ("off", 2), ("fp16", 0)],
    "off_first": [("off", 2), ("bf16", 2), ("off", 0), ("bf16", 1), ("fp16", 1)],
}


def _weights() -> dict:
    torch.manual_seed(0)
    return {**{k: torch.randn(*s) for k, s in W.items()}, "prelu": torch.rand(3)}


def _state(name: str):
    dtype = STATES[name]
    return contextlib.nullcontext() if dtype is None else torch.autocast("cpu", dtype=dtype)


def _check(got, want, state: str) -> None:
    assert got.dtype == want.dtype
    tol = 1e-5 if STATES[state] is None else 2e-2
    torch.testing.assert_close(got, want, atol=tol, rtol=tol, equal_nan=True)  # (the mean of an empty loss)


def _entries(sequence: list, empty_entry: bool) -> int:
    """One entry per autocast state called, and one more per state called with an empty input where that is an
    entry of its own."""
    states = {state for state, _ in sequence}
    return len(states) + (len({state for state, n in sequence if n == 0}) if empty_entry else 0)


@pytest.mark.parametrize("sequence", SEQUENCES)
@pytest.mark.parametrize("name", OPS)
def test_a_generic_op_under_autocast_has_eagers_dtypes(name: str, sequence: str) -> None:
    op, shape = OPS[name]
    w = _weights()

    def fn(x):
        return op(x, w)

    cfn = specengine.compile(fn, dynamic=True)
    for state, n in SEQUENCES[sequence]:
        x = torch.randn(n, *shape)
        with _state(state):
            _check(cfn(x), fn(x), state)
    misses = _entries(SEQUENCES[sequence], name in EMPTY_ENTRY)
    assert counts(cfn) == (misses, len(SEQUENCES[sequence]) - misses)


def test_a_convnet_called_under_autocast_is_eagers() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(4, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)).eval()  # fmt: skip
    cfn = specengine.compile(model, dynamic=True)
    for state, n in SEQUENCES["bf16_first"]:
        x = torch.randn(n, 3, 8, 8)
        with torch.no_grad(), _state(state):
            _check(cfn(x), model(x), state)
    # per autocast state, the empty batch is its own entry (F.batch_norm's own `numel() == 0` test)
    assert counts(cfn) == (_entries(SEQUENCES["bf16_first"], True), 2)
