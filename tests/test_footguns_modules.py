"""Footguns of modules and torch state found by an outside tester (issue 11, bench/probe_modules.py): tied
parameters untied after the compile, state of hook objects, hooks that see the call's arguments, compiled modules
called by compiled functions, modules read by helpers.

Each call sequence offers an entry compiled for one call an input or a state that it must not serve; every call is
compared with eager (sizes 0, 1 and 2 among them) and the exact numbers of compiles and hits are asserted.
"""

from __future__ import annotations

import torch
import torch.nn as nn
from helpers import counts

import specengine


def _same(cfn, model, *args, **kwargs):
    expected = model(*args, **kwargs)
    got = cfn(*args, **kwargs)
    torch.testing.assert_close(got, expected)
    return got


class _Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, idx):
        return self.head(self.emb(idx).tanh())


def test_untying_or_tying_parameters_is_a_structure_change():
    model = _Tied()
    cfn = specengine.compile(model, dynamic=True)
    for t in (3, 0, 1):
        _same(cfn, model, torch.randint(0, 10, (2, t)))
    model.head.weight = nn.Parameter(torch.zeros(10, 4))  # untied: the prologue read one tensor for both
    _same(cfn, model, torch.randint(0, 10, (2, 2)))
    model.head.weight = model.emb.weight  # tied again: the first entry serves
    _same(cfn, model, torch.randint(0, 10, (2, 2)))
    assert counts(cfn) == (2, 3)


def test_fields_of_a_hook_object_are_guarded():
    class Scaler:
        def __init__(self):
            self.k = 2.0

        def __call__(self, mod, args, out):
            return out * self.k

    class Recorder:
        def __init__(self):
            self.shift = 1.0

        def pre(self, mod, args):
            return (args[0] + self.shift,)

    scaler, rec = Scaler(), Recorder()
    model = nn.Linear(3, 3)
    model.register_forward_hook(scaler)
    model.register_forward_pre_hook(rec.pre)
    cfn = specengine.compile(model, dynamic=True)
    _same(cfn, model, torch.randn(2, 3))
    _same(cfn, model, torch.randn(0, 3))
    scaler.k = -1.0
    _same(cfn, model, torch.randn(1, 3))
    rec.shift = 5.0
    _same(cfn, model, torch.randn(2, 3))
    assert counts(cfn) == (3, 1)


class _Scaled(nn.Module):
    def forward(self, x, scale=1.0):
        return x * scale


def test_forward_hooks_see_the_arguments_as_passed():
    model = _Scaled()
    model.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))  # drops a positional `scale`
    cfn = specengine.compile(model, dynamic=True)
    x = torch.ones(2)
    _same(cfn, model, x, scale=3.0)  # a keyword stays a keyword: the hook keeps it
    _same(cfn, model, x, 3.0)
    _same(cfn, model, torch.ones(0), scale=3.0)
    with_len = _Scaled()
    with_len.register_forward_hook(lambda mod, args, out: out + len(args))
    cfn2 = specengine.compile(with_len, dynamic=True)
    _same(cfn2, with_len, torch.ones(1))
    _same(cfn2, with_len, torch.ones(2), 2.0)
    assert counts(cfn) == (2, 1) and counts(cfn2) == (2, 0)


def test_a_pre_hook_with_kwargs_gets_the_keywords():
    model = _Scaled()
    model.register_forward_pre_hook(lambda mod, args, kwargs: (args, {"scale": kwargs.get("scale", 1.0) * 2}),
                                    with_kwargs=True)  # fmt: skip
    cfn = specengine.compile(model, dynamic=True)
    _same(cfn, model, torch.randn(2), scale=3.0)
    _same(cfn, model, torch.randn(1), scale=0.5)
    _same(cfn, model, torch.randn(0))
    assert counts(cfn) == (2, 1)


def test_a_compiled_module_called_by_a_compiled_function():
    lin = nn.Linear(3, 2)
    inner = specengine.compile(lin, dynamic=True)

    def f(x):
        return inner(x) * 2 + inner(x * 0)

    cfn = specengine.compile(f, dynamic=True)
    for n in (2, 0, 1):
        torch.testing.assert_close(cfn(torch.ones(n, 3)), f(torch.ones(n, 3)))
    with torch.no_grad():
        lin.weight.fill_(1.0)  # the module's parameters are inputs of the outer entry too
    torch.testing.assert_close(cfn(torch.ones(2, 3)), f(torch.ones(2, 3)))
    assert counts(cfn) == (1, 3)


_LIN = nn.Linear(3, 2)


def _helper(x):
    return _LIN(x)


def test_a_module_read_by_a_helper_is_state():
    def f(x):
        return _helper(x) + 1

    cfn = specengine.compile(f, dynamic=True)
    for n in (2, 0, 1):
        torch.testing.assert_close(cfn(torch.ones(n, 3)), f(torch.ones(n, 3)))
    with torch.no_grad():
        _LIN.bias.fill_(3.0)
    torch.testing.assert_close(cfn(torch.ones(2, 3)), f(torch.ones(2, 3)))
    assert counts(cfn) == (1, 3)
