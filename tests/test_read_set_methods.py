"""The globals a module's methods read are guarded for the methods that ran, not for every method of its classes
(a method that did not run read nothing). Which methods the read set holds does not depend on the order of a set of
classes (ids: a run-to-run difference that made the persistent cache save an entry in one process and not in another)."""

from __future__ import annotations

import re

import torch
from helpers import counts, run_both

import specengine

SCALE = 2.0
UNUSED_0 = UNUSED_1 = UNUSED_2 = 1.0


class _Mixin(torch.nn.Module):
    def unused_0(self, x):
        return x * UNUSED_0

    def unused_1(self, x):
        return x * UNUSED_1


class _Base(_Mixin):
    def helper(self, x):
        return x * SCALE


def _make_class(i: int) -> type:
    def unused(self, x):
        return x * UNUSED_2 + i

    return type(f"Layer{i}", (_Base,), {"unused_2": unused, "forward": lambda self, x: self.helper(x)})


_CLASSES = [type(f"Leaf{i}", (_Base,), {"forward": lambda self, x: self.helper(x)}) for i in range(40)]


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(c() for c in _CLASSES)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x) / 2
        return x


def test_a_method_that_did_not_run_is_not_guarded_and_one_that_ran_is() -> None:
    global SCALE, UNUSED_0, UNUSED_1
    model = Model()
    cfn = specengine.compile(model, dynamic=True)
    for n in (0, 1, 2):
        run_both(model, cfn, [torch.randn(n, 3)])
    assert counts(cfn) == (1, 2)
    text = str(specengine.last_prologue(cfn))
    assert "SCALE" in text and "UNUSED_" not in text
    old = (SCALE, UNUSED_0, UNUSED_1)
    try:
        UNUSED_0 = UNUSED_1 = 5.0  # read by no method that ran: served
        run_both(model, cfn, [torch.randn(2, 3)])
        assert counts(cfn) == (1, 3)
        SCALE = 3.0  # read by `helper`, which every layer ran: a retrace, and the new value
        for n in (0, 1, 2):
            run_both(model, cfn, [torch.randn(n, 3)])
        assert counts(cfn) == (2, 5)
    finally:
        SCALE, UNUSED_0, UNUSED_1 = old


def test_the_read_set_is_the_same_whatever_the_order_of_the_classes() -> None:
    def reads(classes: list) -> list:
        model = Model()
        model.layers = torch.nn.ModuleList(c() for c in classes)
        cfn = specengine.compile(model, dynamic=True)
        for n in (0, 1, 2):
            run_both(model, cfn, [torch.randn(n, 3)])
        assert counts(cfn) == (1, 2)
        return re.findall(r"\.get\('(\w+)'", specengine.last_prologue(cfn).source)

    extra = [_make_class(i) for i in range(30)]  # classes whose unused methods read globals, made in another order
    first = reads(_CLASSES + extra)
    assert first == reads(extra[::-1] + _CLASSES[::-1]) and "SCALE" in first and not any("UNUSED" in r for r in first)
