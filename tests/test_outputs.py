"""Outputs of their own type, keyword calls, plain objects (caches) as inputs, compiler detection and torch checks."""

from __future__ import annotations

import collections
import dataclasses
import functools

import pytest
import torch

import specengine
from specengine.errors import UnsupportedOpError
from specengine.ir.proxies import Proxy

Pair = collections.namedtuple("Pair", "a b")


class Record(dict):
    """A dict subclass that pytree does not know."""


@dataclasses.dataclass
class Result:
    x: torch.Tensor
    n: int


class OrderedOut(collections.OrderedDict):
    pass


def counts(cfn) -> tuple[int, int]:
    return specengine.cache_misses(cfn), specengine.cache_hits(cfn)


def test_outputs_keep_their_types():
    def f(x):
        r = Record(a=x + 1)
        r.tag = "t"
        return Pair(x * 2, r), Result(x.sum(0), 3), collections.OrderedDict(y=x - 1)

    cfn = specengine.compile(f, dynamic=True)
    for n in (0, 1, 2, 5):
        x = torch.randn(n, 3)
        (p, res, od), (ep, eres, eod) = cfn(x), f(x)
        assert type(p) is Pair and type(p.b) is Record and p.b.tag == "t" and type(res) is Result and res.n == 3
        assert type(od) is collections.OrderedDict and list(od) == ["y"]
        torch.testing.assert_close(p.a, ep.a)
        torch.testing.assert_close(p.b["a"], ep.b["a"])
        torch.testing.assert_close(res.x, eres.x)
        torch.testing.assert_close(od["y"], eod["y"])
    assert counts(cfn) == (1, 3)


def test_registered_output_is_rebuilt_outside_the_trace():
    """A registered container whose constructor validates its fields is built from real tensors only."""
    seen = []

    class Checked(collections.OrderedDict):
        def __init__(self, **kw):
            seen.extend(isinstance(v, Proxy) for v in kw.values())
            super().__init__(**kw)

    torch.utils._pytree.register_pytree_node(
        Checked, lambda d: (list(d.values()), list(d)), lambda v, c: Checked(**dict(zip(c, v)))
    )
    try:
        cfn = specengine.compile(lambda x: Checked(logits=x * 2), dynamic=True)
        for n in (1, 2, 3):
            out = cfn(torch.randn(n))
            assert type(out) is Checked and out["logits"].shape == (n,)
        assert seen.count(True) == 1  # the user's own call while tracing; no pass rebuilt it on proxies
        assert counts(cfn) == (1, 2)
    finally:
        torch.utils._pytree._deregister_pytree_node(Checked)


def test_keywords_stay_keywords():
    def defaults(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            kwargs.setdefault("scale", 3)  # as transformers' config defaults do: fails if `scale` came positionally
            return fn(*args, **kwargs)

        return wrapper

    @defaults
    def f(x, scale=1, shift=0):
        return x * scale + shift

    cfn = specengine.compile(f, dynamic=True)
    x = torch.randn(4)
    torch.testing.assert_close(cfn(x), x * 3)
    torch.testing.assert_close(cfn(x=x), x * 3)
    torch.testing.assert_close(cfn(x, shift=1), x * 3 + 1)
    torch.testing.assert_close(cfn(x, scale=2), x * 2)
    torch.testing.assert_close(cfn(torch.randn(7), scale=2).shape, (7,))
    assert counts(cfn) == (4, 1)  # one entry per call pattern; sizes are symbolic


class Cache:
    def __init__(self):
        self.keys = None
        self.ready = False

    def update(self, k):
        if not self.ready:
            self.keys = torch.zeros(k.shape[0], 0)
            self.ready = True
        self.keys = torch.cat([self.keys, k], dim=1)
        return self.keys


def step(x, cache):
    return cache.update(x).sum(1), cache


def test_plain_object_is_updated_like_eager():
    cfn = specengine.compile(step, dynamic=True)
    mine, ref = Cache(), Cache()
    for t in (3, 1, 1, 2):
        x = torch.randn(2, t)
        (y, c), (ey, _) = cfn(x, mine), step(x, ref)
        assert c is mine and mine.ready and type(mine.keys) is torch.Tensor
        torch.testing.assert_close(y, ey)
        torch.testing.assert_close(mine.keys, ref.keys)
    assert counts(cfn) == (2, 2)  # empty cache, then one entry for a cache of any length


def test_failed_compile_leaves_no_proxy_in_inputs():
    def bad(x, cache, xs):
        cache.update(x)
        xs.append(x * 2)
        return x.tolist()

    cache, xs = Cache(), [torch.ones(1)]
    with pytest.raises(UnsupportedOpError):
        specengine.compile(bad, dynamic=True)(torch.randn(2, 3), cache, xs)
    assert cache.keys is None and not cache.ready and len(xs) == 1 and type(xs[0]) is torch.Tensor


def test_list_input_appended_in_place():
    def f(x, acc):
        acc.append(x * 2)
        return x + 1

    cfn = specengine.compile(f, dynamic=True)
    acc = []
    cfn(torch.ones(2), acc)
    assert len(acc) == 1 and type(acc[0]) is torch.Tensor
    torch.testing.assert_close(acc[0], torch.full((2,), 2.0))


def test_is_compiling_while_tracing():
    def f(x):
        return x * 2 if torch.compiler.is_compiling() else x * 3

    cfn = specengine.compile(f, dynamic=True)
    torch.testing.assert_close(cfn(torch.ones(2)), torch.full((2,), 2.0))
    assert not torch.compiler.is_compiling()


def test_torch_check_on_sizes_is_a_guard():
    def f(x):
        torch._check(x.shape[0] > 1, lambda: "need two rows")
        return x + 1

    cfn = specengine.compile(f, dynamic=True)
    for n in (2, 3, 9):
        cfn(torch.randn(n))
    assert counts(cfn) == (1, 2) and [str(g) for g in specengine.last_guards(cfn)] == ["x.shape[0] > 1"]
    with pytest.raises(RuntimeError, match="need two rows"):
        cfn(torch.randn(1))
    assert counts(cfn) == (1, 2)


def test_tensor_checks_run_at_run_time():
    def f(x, m):
        torch._check_tensor_all(m, lambda: "mask must hold")
        torch._assert_async(m.any())
        return x * 2

    cfn = specengine.compile(f, dynamic=True)
    ok = torch.ones(3, dtype=torch.bool)
    for n in (0, 1, 2):
        x = torch.randn(n)
        torch.testing.assert_close(cfn(x, ok), x * 2)
    with pytest.raises(RuntimeError, match="mask must hold"):
        cfn(torch.randn(2), torch.tensor([True, False]))
    with pytest.raises(RuntimeError):
        cfn(torch.randn(2), torch.zeros(0, dtype=torch.bool))  # `any` of nothing is False
    assert counts(cfn) == (1, 4)


def test_bound_method_of_module_uses_module_state():
    lin = torch.nn.Linear(3, 2)
    cfn = specengine.compile(lin.forward, dynamic=True)
    x = torch.randn(4, 3)
    torch.testing.assert_close(cfn(x), lin(x))
    with torch.no_grad():
        lin.weight.add_(1.0)  # parameters are inputs: an update is seen without recompiling
    torch.testing.assert_close(cfn(x), lin(x))
    assert counts(cfn) == (1, 1)


class Slotted:
    __slots__ = ("keys", "__dict__")

    def __init__(self):
        self.keys = None
        self.note = "empty"


def test_changing_an_object_that_is_not_plain_is_refused_and_undone():
    def f(x, box):
        box.note = x * 2  # `box` is not a plain object (slots): a constant, which tracing must not change
        return x + 1

    box = Slotted()
    with pytest.raises(UnsupportedOpError, match="box.note"):
        specengine.compile(f, dynamic=True)(torch.ones(2), box)
    assert box.note == "empty"
