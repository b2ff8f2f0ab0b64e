"""Environment variables and class attributes (issue 11, Python state the function reads or changes): a read is
guarded, a change made while tracing is refused and put back. Each call sequence offers an entry compiled for
one state a state it must not serve; every call is compared with eager and exact counts are asserted."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn as nn
from helpers import counts

import specengine
from specengine import UnsupportedOpError

_VAR = "SPECENGINE_TEST_FLAG"


def _set(value):
    if value is None:
        os.environ.pop(_VAR, None)
    else:
        os.environ[_VAR] = value


def _by_get(x):
    return x * 2 if os.environ.get(_VAR) == "1" else x - 1


def _by_getenv(x):
    return x[: x.shape[0] // 2] if os.getenv(_VAR, "0") != "0" else x + 1


def _by_membership(x):
    return x * 3 if _VAR in os.environ else x


def _by_item(x):
    try:
        return x * int(os.environ[_VAR])
    except KeyError:
        return x


@pytest.mark.parametrize("fn", [_by_get, _by_getenv, _by_membership, _by_item])
def test_an_environment_variable_read_is_guarded(fn):
    cfn = specengine.compile(fn, dynamic=True)
    try:
        for value, n in (("0", 2), ("1", 0), ("0", 1), (None, 2), ("1", 2), (None, 1)):
            _set(value)
            x = torch.arange(float(n))
            torch.testing.assert_close(cfn(x), fn(x))
    finally:
        _set(None)
    assert counts(cfn) == (3, 3)  # "0", "1" and unset each once


def test_writing_the_environment_while_tracing_is_refused_and_changes_nothing():
    def f(x):
        os.environ[_VAR] = str(x.shape[0])
        return x + 1

    cfn = specengine.compile(f, dynamic=True)
    with pytest.raises(UnsupportedOpError, match=r"changing os.environ"):
        cfn(torch.ones(2))
    assert _VAR not in os.environ and counts(cfn) == (0, 0)


class _Counter:
    calls = 0


def test_a_class_attribute_written_while_tracing_is_refused_and_put_back():
    def f(x):
        _Counter.calls += 1
        return x * _Counter.calls

    cfn = specengine.compile(f, dynamic=True)
    for n in (2, 0):
        with pytest.raises(UnsupportedOpError, match=r"_Counter.calls while tracing"):
            cfn(torch.ones(n))
    assert _Counter.calls == 0 and "calls" in vars(_Counter) and counts(cfn) == (0, 0)


class _Steps(nn.Module):
    seen = 0

    def forward(self, x):
        type(self).seen += x.shape[0]
        return x + 1


def test_a_module_class_attribute_written_in_forward_is_refused():
    model = _Steps()
    cfn = specengine.compile(model, dynamic=True)
    with pytest.raises(UnsupportedOpError, match=r"_Steps.seen while tracing"):
        cfn(torch.ones(2))
    assert _Steps.seen == 0 and "seen" not in vars(model)


class _Scale:
    factor = 2.0


def test_a_class_attribute_read_is_guarded():
    def f(x):
        return x * _Scale.factor

    cfn = specengine.compile(f, dynamic=True)
    try:
        for factor, n in ((2.0, 2), (3.0, 1), (2.0, 0), (3.0, 2)):
            _Scale.factor = factor
            x = torch.ones(n)
            torch.testing.assert_close(cfn(x), f(x))
    finally:
        _Scale.factor = 2.0
    assert counts(cfn) == (2, 2)
