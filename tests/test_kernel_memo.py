"""Memoized kernel runs (ops/kernel_memo.py) change nothing but time: a trace that runs an op's meta kernel once
and replays it for later calls of the same shape pattern records the same trace, the same guards and the same
entries as one that runs the kernel every time.

A generator: ops that take the generic path (unary activations, pooling, padding, interpolation, batch norm, and
broadcasting binary and ternary ops) x programs calling the op on three inputs of one pattern in one trace x call
sequences whose sizes include 0, 1 and 2, where the answers the kernel's questions get differ between the calls of
one trace (a broadcast size of 1 against a larger one, an empty input) and between calls (an entry is offered an
input it must not serve). Each call is compared with eager, and the memo's trace, guards, hits and misses with
those of a run without it.
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F
from helpers import counts
from torch import nn

import specengine
from specengine.constraints import expr as E
from specengine.constraints.decide import Decider
from specengine.ops import kernel_memo

UNARY = {
    "hardtanh": F.hardtanh,
    "relu6": F.relu6,
    "elu": F.elu,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.1),
    "flip": lambda x: torch.flip(x, [0, -1]),
    "avg_pool1d": lambda x: F.avg_pool1d(x, 2, ceil_mode=True),
    "max_pool1d": lambda x: F.max_pool1d(x, 2),
    "pad": lambda x: F.pad(x, (1, 2)),
    "interpolate": lambda x: F.interpolate(x, scale_factor=2.0),
    "batch_norm": lambda x: F.batch_norm(x, None, None, training=True),
}
BINARY = {
    "hypot": torch.hypot,
    "fmax": torch.fmax,
    "logaddexp": torch.logaddexp,
    "addcmul": lambda x, y: torch.addcmul(x, y, x, value=0.5),
    "cdist": torch.cdist,
}
# three inputs of rank 3 (batch, channels, length); per call, the (batch, length) of each
UNARY_CALLS = [
    [(2, 3), (1, 5), (3, 2)],
    [(1, 1), (2, 2), (0, 2)],
    [(2, 2), (2, 2), (2, 2)],
    [(3, 5), (1, 2), (2, 1)],
]
# broadcasting: x and z against y, whose batch is 1 or x's
BINARY_CALLS = [
    [(2, 3), (1, 3), (2, 3)],
    [(2, 3), (2, 3), (1, 3)],
    [(1, 2), (1, 2), (1, 2)],
    [(0, 2), (1, 2), (3, 2)],
    [(3, 1), (3, 1), (1, 1)],
]


def _program(op, arity):
    if arity == 1:
        return lambda x, y, z: [op(x), op(y), op(z)]
    return lambda x, y, z: [op(x, y), op(z, y), op(y, y)]


def _inputs(call, channels=4):
    return [torch.randn(b, channels, t) for b, t in call]


def _eager(fn, args):
    try:
        return fn(*args), None
    except Exception as e:  # noqa: BLE001 - compared with the compiled call's
        return None, type(e)


def _run(fn, calls, memo: bool, monkeypatch):
    monkeypatch.setattr(kernel_memo, "ENABLED", memo)
    cfn = specengine.compile(fn, dynamic=True)
    for call in calls:
        args = _inputs(call)
        expected, error = _eager(fn, args)
        if error is not None:
            with pytest.raises(error):
                cfn(*args)
        else:
            torch.testing.assert_close(cfn(*args), expected, equal_nan=True)
    text = re.sub(r"compile [\d.]+ ms \([^)]*\), \d+ z3 queries", "", specengine.explain(cfn))  # (times, and
    # z3 queries: a replay asks fewer questions)
    traces = [(str(e.prologue), *map(str, e.traces)) for e in specengine.cache_entries(cfn)]
    return counts(cfn), text, traces


CASES = [(n, 1, c) for n in UNARY for c in ("all", "rev")] + [(n, 2, c) for n in BINARY for c in ("all", "rev")]


@pytest.mark.parametrize("name,arity,order", CASES)
def test_memo_changes_nothing_but_time(name, arity, order, monkeypatch):
    op = UNARY[name] if arity == 1 else BINARY[name]
    calls = UNARY_CALLS if arity == 1 else BINARY_CALLS
    calls = calls if order == "all" else calls[::-1]
    fn = _program(op, arity)
    torch.manual_seed(0)
    before = kernel_memo.STATS["replayed"] + kernel_memo.STATS["differed"]
    with_memo = _run(fn, calls, True, monkeypatch)
    tried = kernel_memo.STATS["replayed"] + kernel_memo.STATS["differed"] - before
    torch.manual_seed(0)
    without = _run(fn, calls, False, monkeypatch)
    assert with_memo == without
    assert tried > 0  # (the memo was offered calls of these traces: it replayed them, or found an answer differ)


def _convnet(widths):
    layers = []
    for cin, cout in zip(widths, widths[1:]):
        layers += [nn.Conv2d(cin, cout, 3, stride=2, padding=1), nn.BatchNorm2d(cout), nn.Hardtanh(0, 6)]
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten()).eval()


def test_convnet_replays_its_repeated_kernels(monkeypatch):
    """Blocks of one width share their batch norm's and activation's patterns across spatial sizes: the kernels
    run once per width and are replayed for the other blocks; the entries are those of a run without the memo."""
    torch.manual_seed(0)
    model = _convnet([3, 8, 8, 8, 8])
    calls = [(2, 16), (1, 9), (2, 1), (3, 33), (0, 16)]

    def run(memo):
        monkeypatch.setattr(kernel_memo, "ENABLED", memo)
        cfn = specengine.compile(model, dynamic=True)
        with torch.no_grad():
            for b, s in calls:
                x = torch.randn(b, 3, s, s)
                torch.testing.assert_close(cfn(x), model(x))
        text = re.sub(r"compile [\d.]+ ms \([^)]*\), \d+ z3 queries", "", specengine.explain(cfn))
        return counts(cfn), text, [tuple(map(str, e.traces)) for e in specengine.cache_entries(cfn)]

    before = kernel_memo.STATS["replayed"]
    with_memo = run(True)
    assert with_memo[0] == (2, 3)  # the empty batch is its own entry (F.batch_norm's own `numel() == 0` test)
    assert kernel_memo.STATS["replayed"] - before >= 6  # (the 2nd to 4th blocks' batch norm and hardtanh)
    assert with_memo == run(False)


def test_restore_forgets_the_facts_of_forgotten_constraints():
    """A replay whose answers differ, or a kernel's first try that fails, is restored: a constraint it recorded
    must not stay in the facts that cheap proofs read (it once did, and a later decision was taken as implied)."""
    s0 = E.sym("s0")
    decider = Decider({"s0": 5}, {"s0": (0, None)})
    saved = decider.checkpoint()
    assert decider.decide(E.ge(s0, 3), "test") is True
    assert decider.implied(E.ge(s0, 2), True)  # (from the facts, built now)
    decider.restore(saved)
    assert not decider.implied(E.ge(s0, 2), True)
    assert decider.constraints == []
