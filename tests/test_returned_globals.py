"""An output may hold a module, or a class or function that its module and qualified name find
(`capture/objects.py: named_global`): HF MiniMax returns a cache whose `layer_class_to_replicate` is a class.

By a generator: kinds of named objects (a module-level class, a nested class, a class with a metaclass, a function,
a builtin function, a module) x where the output holds them (directly, in a tuple, in a dict, as an attribute of an
object the function made) x the three dynamic modes, over sizes 2, 0, 1, 3: the outputs hold the very objects eager's
do, with exact counts; rebinding the global the program read retraces; a class or function made by the call
(`<locals>`) is still refused by name, and the failed compile keeps nothing."""

from __future__ import annotations

import abc
import math
import types

import pytest
import torch
from helpers import counts

import specengine
from specengine import UnsupportedOpError
from specengine.capture.objects import named_global


class Plain:
    pass


class Outer:
    class Inner:
        pass


class WithMeta(abc.ABC):  # noqa: B024 (only its type, abc.ABCMeta, matters: as transformers' cache layers)
    pass


def helper():
    return 1


class Made:
    pass


KINDS = {"class": "Plain", "nested class": "Outer.Inner", "metaclass": "WithMeta", "function": "helper",
         "builtin": "len", "module": "math"}  # fmt: skip
PLACES = {"direct": "{o}", "tuple": "({o}, 1)", "dict": "{{'k': {o}}}", "attribute": "_made({o})"}
MODES = (True, False, None)
SIZES = (2, 0, 1, 3)


def _made(o):
    m = Made()
    m.held = o
    return m


def _held(out):
    v = out[1]
    return v.held if isinstance(v, Made) else v[0] if isinstance(v, tuple) else v["k"] if isinstance(v, dict) else v


def _program(kind: str, place: str):
    src = f"def f(x):\n    return x * 2, {PLACES[place].format(o=KINDS[kind])}\n"
    glb = {**globals(), "__name__": __name__}
    exec(compile(src, "<returned-globals>", "exec"), glb)
    return glb["f"]


CASES = [(k, p, m) for k in KINDS for p in PLACES for m in MODES]


@pytest.mark.parametrize("kind,place,dynamic", CASES, ids=[f"{k}-{p}-{m}" for k, p, m in CASES])
def test_an_output_holds_a_named_global_as_eager_does(kind, place, dynamic):
    f = _program(kind, place)
    cfn = specengine.compile(f, dynamic=dynamic)
    for n in SIZES:
        x = torch.arange(float(n))
        got, want = cfn(x), f(x)
        torch.testing.assert_close(got[0], want[0])
        assert _held(got) is _held(want) is eval(KINDS[kind], globals())  # noqa: S307 - the test's own names
        assert type(got[1]) is type(want[1])
    misses, hits = counts(cfn)
    assert misses + hits == len(SIZES) and misses == {True: 1, False: 4, None: 2}[dynamic]


@pytest.mark.parametrize("dynamic", MODES)
def test_rebinding_the_global_an_output_holds_retraces(dynamic):
    glb = {"Plain": Plain, "__name__": __name__}
    exec(compile("def f(x):\n    return x + 1, Plain\n", "<returned-globals>", "exec"), glb)
    cfn = specengine.compile(glb["f"], dynamic=dynamic)
    x = torch.arange(2.0)
    assert cfn(x)[1] is Plain
    glb["Plain"] = Made
    assert cfn(x)[1] is Made
    glb["Plain"] = Plain
    assert cfn(x)[1] is Plain
    assert counts(cfn) == (2, 1)


def test_a_class_or_function_the_call_made_is_refused():
    def makes_class(x):
        class Local:
            pass

        return x, Local

    def makes_function(x):
        def local():
            return 1

        return x, local

    for fn in (makes_class, makes_function):
        cfn = specengine.compile(fn, dynamic=True)
        with pytest.raises(UnsupportedOpError, match="returning a"):
            cfn(torch.arange(2.0))
        assert counts(cfn) == (0, 0)


def test_the_predicate():
    assert all(named_global(v) for v in (Plain, Outer.Inner, WithMeta, helper, len, math, torch.nn.Linear))
    imposter = types.FunctionType(helper.__code__, {})  # the same qualname, another object
    assert not any(named_global(v) for v in (imposter, lambda: 1, types.ModuleType("not_imported"), 3, "s"))
