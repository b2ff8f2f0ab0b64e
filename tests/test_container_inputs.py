"""User containers registered with torch.utils._pytree, passed as inputs (transformers' `ModelOutput` is one).

The engine rebuilds such an input around proxies from the object's own state (its dict items and attributes): the
class's `__init__`/`__post_init__` never runs on proxies, as eager never runs it on the caller's object. The pytree
context (which fields are set) is checked by the prologue: a different set of fields is a new entry.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools

import pytest
import torch
from torch.utils import _pytree as pytree

import specengine

INITS = collections.Counter()


@dataclasses.dataclass
class Out(collections.OrderedDict):
    """ModelOutput's shape: dataclass fields, the non-None ones also items; `__post_init__` iterates a field."""

    a: torch.Tensor | None = None
    b: torch.Tensor | None = None

    def __post_init__(self):
        INITS["Out"] += 1
        for k in ("a", "b"):
            v = getattr(self, k)
            if v is not None:
                assert len(list(iter(v))) >= 0  # what ModelOutput does with its first field
                self[k] = v


pytree.register_pytree_node(
    Out,
    lambda o: (list(o.values()), list(o.keys())),
    lambda vs, ks: Out(**dict(zip(ks, vs))),
    flatten_with_keys_fn=lambda o: ([(pytree.MappingKey(k), v) for k, v in o.items()], list(o.keys())),
)


class Pair:
    """A plain class whose `__init__` checks its arguments (a proxy has no data to check)."""

    def __init__(self, x, y):
        INITS["Pair"] += 1
        if isinstance(x, torch.Tensor) and x.numel() and not torch.isfinite(x).all():
            raise ValueError("not finite")
        self.x, self.y = x, y


pytree.register_pytree_node(
    Pair,
    lambda p: ([p.x, p.y], None),
    lambda vs, _: Pair(*vs),
    flatten_with_keys_fn=lambda p: ([(pytree.GetAttrKey("x"), p.x), (pytree.GetAttrKey("y"), p.y)], None),
)

KINDS = {
    "out_ab": lambda n: Out(a=torch.randn(n, 3), b=torch.randn(n)),
    "out_a": lambda n: Out(a=torch.randn(n, 3)),
    "pair": lambda n: Pair(torch.randn(n, 3), torch.randn(n)),
}

SOURCES = {"out_ab": {"a", "b"}, "out_a": {"a"}, "pair": {"x", "y"}}  # the sizes each kind's entry reads


def _fn(o):
    if isinstance(o, Pair):
        return o.x.sum(1) + o.y
    return o.a.sum(1) * 2 if o.b is None else o.a.sum(1) + o["b"]


@pytest.mark.parametrize("dynamic", [None, True, False])
@pytest.mark.parametrize("first,second", list(itertools.product(KINDS, repeat=2)))
def test_container_inputs_hit_and_miss(first, second, dynamic):
    cfn = specengine.compile(_fn, dynamic=dynamic)
    calls = [(first, n) for n in (2, 1, 0)] + [(second, n) for n in (2, 1)]
    for kind, n in calls:
        value = KINDS[kind](n)
        before = INITS.copy()
        out = cfn(value)
        assert INITS == before  # the class's own code never ran on proxies (or at all)
        torch.testing.assert_close(out, _fn(value))
    kinds = {first, second}
    if dynamic is False:  # every size its own entry
        assert specengine.cache_misses(cfn) == len({(k, n) for k, n in calls})
    elif dynamic is None:  # automatic: a size that changed is symbolic from then on, by its source
        later = 0 if first == second else 1 if SOURCES[second] <= SOURCES[first] else 2
        assert specengine.cache_misses(cfn) == 2 + later
    else:
        assert specengine.cache_misses(cfn) == len(kinds)
    assert specengine.cache_hits(cfn) == len(calls) - specengine.cache_misses(cfn)
