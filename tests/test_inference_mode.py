"""A compiled function called under `torch.inference_mode()`, `torch.no_grad()` and neither, in turn.

Generated: programs whose ops take each path of the engine (hand-written rules, torch's meta kernels through the
generic path and its memo, views, reductions, in-place updates, data-dependent sizes, modules with parameters and
buffers) x call sequences that alternate the three modes over sizes 2, 0, 1 and 2 again, so that an entry traced in
one mode is offered a call in another. Each call is compared with eager: values, and whether each output is an
inference tensor and requires grad. The counts are exact: for programs, one entry with grad on and one with it off
(times the entries its own sizes need, `SIZE_ENTRIES`); for modules, the literal counts of `MODULE_COUNTS`; every
other call a hit.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn.functional as F
from helpers import counts
from torch import nn

import specengine

PROGRAMS = {
    "mul": lambda x: x * 2,
    "pad": lambda x: F.pad(x, (1, 2)),
    "hardtanh": lambda x: F.hardtanh(x),
    "avg_pool1d": lambda x: F.avg_pool1d(x, 2, ceil_mode=True),
    "interpolate": lambda x: F.interpolate(x, scale_factor=2.0),
    "three_pads": lambda x: [F.pad(x, (1, 1)), F.pad(x[:, :1], (1, 1)), F.pad(x * 2, (1, 1))],
    "view_minus_one": lambda x: x.reshape(-1, 2).transpose(0, 1),
    "softmax_sum": lambda x: torch.softmax(x, -1).sum(1),
    "cat": lambda x: torch.cat([x, x * 2], dim=1),
    "inplace": lambda x: x.clone().add_(1).mul_(2),
    "masked": lambda x: x[x > 0] * 2,
}
MODULES = {
    "linear": lambda: nn.Linear(4, 3),
    "conv1d": lambda: nn.Conv1d(3, 2, 3, padding=1),
    "layer_norm": lambda: nn.LayerNorm(4),
    "batch_norm_eval": lambda: nn.BatchNorm1d(3).eval(),
    "attention": lambda: nn.MultiheadAttention(4, 2, batch_first=True),
}
SIZE_ENTRIES: dict[str, int] = {}  # programs whose sizes need more than one entry per mode (none today)
# modules: (misses, hits) per sequence. Linear, Conv1d and LayerNorm: grad on or off (2). BatchNorm1d also reads
# inference mode (3). MultiheadAttention takes its fast path where grad is off, and in it torch's decomposition of
# the native op decides empty and batch-1 inputs (4).
MODULE_COUNTS = {"linear": ((2, 5), (2, 3)), "conv1d": ((2, 5), (2, 3)), "layer_norm": ((2, 5), (2, 3)),
                 "batch_norm_eval": ((3, 4), (3, 2)), "attention": ((4, 3), (4, 1))}  # fmt: skip
MODES = {"inference": torch.inference_mode, "no_grad": torch.no_grad, "plain": contextlib.nullcontext}
SEQUENCES = {
    "inference_first": [("inference", 2), ("inference", 0), ("plain", 1), ("no_grad", 2), ("inference", 1),
                        ("plain", 2), ("no_grad", 0)],
    "plain_first": [("plain", 2), ("inference", 2), ("plain", 0), ("inference", 1), ("no_grad", 1)],
}  # fmt: skip


def _check(got, want) -> None:
    got, want = (list(v) if isinstance(v, (tuple, list)) else [v] for v in (got, want))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if not isinstance(w, torch.Tensor):
            continue
        torch.testing.assert_close(g, w, equal_nan=True)
        assert (g.is_inference(), g.requires_grad) == (w.is_inference(), w.requires_grad)


def _run(fn, cfn, sequence: list) -> None:
    torch.manual_seed(0)
    for mode, n in sequence:
        x = torch.randn(n, 3, 4)
        with MODES[mode]():
            _check(cfn(x), fn(x))


def _expected(name: str, sequence: list) -> tuple[int, int]:
    """The prologue checks grad mode (off under both no_grad and inference_mode); inference mode itself only where
    the trace reads it (these programs do not: the computation's torch ops make inference tensors themselves)."""
    modes = {mode == "plain" for mode, _ in sequence}
    misses = len(modes) * SIZE_ENTRIES.get(name, 1)
    return misses, len(sequence) - misses


@pytest.mark.parametrize("sequence", SEQUENCES)
@pytest.mark.parametrize("name", PROGRAMS)
def test_a_program_under_each_grad_mode_is_eagers(name: str, sequence: str) -> None:
    fn = PROGRAMS[name]
    cfn = specengine.compile(fn, dynamic=True)
    _run(fn, cfn, SEQUENCES[sequence])
    assert counts(cfn) == _expected(name, SEQUENCES[sequence])


@pytest.mark.parametrize("sequence", SEQUENCES)
@pytest.mark.parametrize("name", MODULES)
def test_a_module_under_each_grad_mode_is_eagers(name: str, sequence: str) -> None:
    torch.manual_seed(0)
    module = MODULES[name]()
    if name == "attention":

        def fn(x):
            return module(x[:, :, :4], x[:, :, :4], x[:, :, :4], need_weights=False)[0]
    elif name in ("linear", "layer_norm"):
        fn = module
    else:

        def fn(x):
            return module(x)

    cfn = specengine.compile(fn, dynamic=True)
    _run(fn, cfn, SEQUENCES[sequence])
    assert counts(cfn) == MODULE_COUNTS[name][list(SEQUENCES).index(sequence)]
