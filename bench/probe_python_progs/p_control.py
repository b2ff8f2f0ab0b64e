# ruff: noqa  (user code as people write it: %-formatting, lambdas bound to names, unused names)
"""Exceptions, generators, closures, dataclasses, functools, itertools, control flow, numpy, creation, floats."""

import dataclasses
import functools
import itertools
import math
import operator
from typing import NamedTuple

import numpy as np
import torch

from harness import T, S1, S2, prog


@prog(*[(T(n),) for n in (6, 7, 9, 0, 3, 6, 7)])
def try_reshape(x):
    try:
        return x.reshape(-1, 3)
    except RuntimeError:
        return x


@prog(*[(T(*s),) for s in ((2, 3), (1, 3), (3, 1), (1, 1), (0, 2), (2, 3))])
def try_view_transpose(x):
    try:
        return x.t().view(-1)
    except RuntimeError:
        return x.t().reshape(-1) * 2


@prog(
    *[
        (T(*a), T(*b))
        for a, b in (((2, 3), (3,)), ((2, 3), (2,)), ((2, 1), (4,)), ((2, 3), (1,)), ((2, 3), (3,)), ((2, 3), (2,)))
    ]
)
def try_broadcast(x, y):
    try:
        return x + y
    except RuntimeError:
        return x


@prog(*[(T(n),) for n in (6, 5, 2, 0, 6, 5)])
def try_index_oob(x):
    try:
        return x[5]
    except IndexError:
        return x.new_zeros(())


@prog(*[(torch.tensor(v),) for v in (2.5, -1.5, 3.0, 0.0, 2.5)])
def int_of_item(t):
    return torch.arange(int(t.item()) + 3 if t.item() > 0 else 1)


@prog(*[(torch.tensor(v),) for v in (2.5, -1.5, 3.0, 0.0, 2.5)])
def item_float_math(t):
    v = t.item()
    return t * v, t / (v + 10)


@prog(*[(T(n),) for n in (3, 0, 1, 3)])
def assert_nonempty(x):
    assert x.shape[0] > 0, "empty"
    return x * 2


@prog(*[(T(*a), T(*b)) for a, b in (((2, 3), (3, 4)), ((2, 3), (2, 4)), ((1, 1), (1, 5)), ((2, 3), (3, 4)))])
def assert_matmul_shapes(x, y):
    assert x.shape[-1] == y.shape[0], f"bad {x.shape} @ {y.shape}"
    return x @ y


@prog(*S2)
def generator_sum_filter(x):
    return sum(s for s in x.shape if s > 1), sum(x.shape, 10), sum(x.shape) / len(x.shape)


@prog(*S2)
def listcomp_tensor(x):
    return torch.tensor([s * 2 for s in x.shape]) + torch.tensor(x.shape)


@prog(*S2)
def lambda_closure(x):
    n = x.shape[0]
    scale = lambda t: t / (n + 1)  # noqa: E731

    def inner(t):
        return t * x.shape[1] + n

    return scale(inner(x))


@dataclasses.dataclass
class Batch:
    x: torch.Tensor
    k: int
    scale: float = 1.0


@dataclasses.dataclass
class Out:
    y: torch.Tensor
    n: int


@prog(
    *[
        (Batch(T(n), k, s),)
        for n, k, s in ((3, 1, 2.0), (4, 2, 2.0), (3, 1, -0.0), (3, 0, float("nan")), (0, 1, 1.0), (3, 1, 2.0))
    ]
)
def dataclass_io(b):
    return Out(b.x[: b.k] * b.scale, b.x.shape[0] + b.k)


class Pair(NamedTuple):
    a: torch.Tensor
    n: int


@prog(*[(Pair(T(n), k),) for n, k in ((3, 2), (4, 2), (3, 5), (3, -1), (3, 2))])
def namedtuple_io(p):
    return Pair(p.a.repeat(max(p.n, 0)), p.n * 2)


def _helper(x, n, scale):
    return x[:n] * scale


@prog(*[(T(n), k) for n, k in ((4, 2), (4, 3), (2, 3), (0, 0), (4, 2))])
def partial_helper(x, k):
    f = functools.partial(_helper, n=k, scale=x.shape[0])
    return f(x)


@functools.lru_cache(maxsize=None)
def _cached_len(n):
    return n * 2 + 1


@prog(*[(T(n),) for n in (3, 4, 3, 5, 0, 4, 3)])
def lru_cache_on_size(x):
    return x.new_ones(_cached_len(x.shape[0]))


@functools.lru_cache(maxsize=8)
def _positions(n):
    return torch.arange(n)


@prog(*[(T(n),) for n in (3, 4, 3, 5, 0, 4, 3)])
def lru_cache_tensor(x):
    return x + _positions(x.shape[0])


@functools.cache
def _tbl(shape):
    return {"numel": math.prod(shape), "last": shape[-1]}


@prog(*S2)
def functools_cache_shape_tuple(x):
    t = _tbl(tuple(x.shape))
    return x.reshape(-1)[: t["last"]], t["numel"]


@prog(*[(T(*s),) for s in ((2, 3, 4), (1, 5), (3,), (0, 2), (2, 3, 4))])
def functools_reduce(x):
    return functools.reduce(operator.mul, x.shape, 1), functools.reduce(lambda a, b: a * 10 + b, x.shape)


@prog(*[(T(*s),) for s in ((2, 3), (1, 2), (2, 2), (0, 3), (2, 3))])
def itertools_product(x):
    out = x.clone()
    for i, j in itertools.product(range(x.shape[0]), range(x.shape[1])):
        if (i + j) % 2 == 0:
            out[i, j] = 0
    return out


@prog(*[(T(n),) for n in (6, 10, 3, 1, 6)])
def itertools_accumulate_split(x):
    n = x.shape[0]
    sizes = [n // 3, n // 3, n - 2 * (n // 3)]
    offs = list(itertools.accumulate(sizes, initial=0))
    return [x[a:b].sum() for a, b in itertools.pairwise(offs)], offs


def _halve(x):
    return x if x.shape[0] <= 1 else _halve(x[: x.shape[0] // 2]) + 1


@prog(*[(T(n),) for n in (8, 9, 16, 1, 2, 3, 8)])
def recursion_sizes(x):
    return _halve(x)


@prog(*[(T(n),) for n in (8, 9, 16, 1, 2, 3, 0, 8)])
def while_loop_sizes(x):
    n, k = x.shape[0], 0
    while n > 1:
        n //= 2
        k += 1
    return x * k, k


@prog(*S1)
def walrus(x):
    if (n := x.shape[0]) > 3:
        return x[: n - 3]
    return x * n


@prog(*[(T(*s),) for s in ((4, 3), (3, 3), (2, 5), (7,), (2, 3, 4), (0, 3), (4, 3), (5, 5))])
def match_shape(x):
    match x.shape:
        case (n, 3):
            return x.sum(1) * n
        case (n, m) if n == m:
            return x.diagonal()
        case (n,):
            return x * 2
        case (_, _, last):
            return x.sum(-1) + last
        case _:
            return x


@prog(*[(T(*s),) for s in ((3,), (2, 3), (2, 2, 2), (4,), ())])
def match_dim(x):
    match x.dim():
        case 0:
            return x + 1
        case 1:
            return x.flip(0)
        case 2:
            return x.T
        case _:
            return x.flatten()


@prog(*[(T(*s), k) for s, k in (((3,), 2), ((3,), 3), ((3,), "a"), ((3,), 2.0), ((3,), None), ((3,), 2))])
def match_value(x, k):
    match k:
        case 2:
            return x * 2
        case int(v):
            return x + v
        case str():
            return x - 1
        case float(f):
            return x / f
        case None:
            return x


@prog(*S1)
def or_default(x):
    n = x.shape[0] or 1
    return x.new_ones(n), x.shape[0] and 5


@prog(*S1)
def chained_cmp(x):
    return x * 2 if 0 < x.shape[0] <= 4 else x


@prog(*[(T(*s),) for s in ((2, 3), (1, 3), (2, 0), (4, 4), (2, 3))])
def any_all_shapes(x):
    return any(s == 1 for s in x.shape), all(s > 1 for s in x.shape), any(x.shape), all(x.shape)


@prog(*[(T(*s),) for s in ((2, 3, 4), (1, 5), (3,), (0, 2), (2, 3, 4))])
def numpy_prod(x):
    n = np.prod(x.shape)
    return x.reshape(int(n)), int(np.sum(x.shape))


@prog(*S2)
def numpy_array_of_shape(x):
    a = np.array(x.shape)
    return int(a[0] * a[1]), a.tolist()


@prog(*S1)
def tensor_creation_from_sizes(x):
    n = x.shape[0]
    return (
        torch.arange(n),
        torch.full((n,), n),
        torch.tensor(x.shape),
        torch.tensor([n, 2 * n]),
        torch.full((2,), n / 2),
    )


@prog(*S1)
def creation_more(x):
    n = x.shape[0]
    return (
        torch.linspace(0, 1, n),
        torch.eye(n),
        x.repeat(n),
        torch.tensor(n, dtype=torch.float32),
        torch.zeros(n, n + 1),
    )


@prog(*[(T(n),) for n in (3, 0, 1, 4, 3)])
def tolist_results(x):
    lst = x.tolist()
    return lst, len(lst), sum(lst)


@prog(*[(torch.tensor([3, 1, 2]),), (torch.tensor([0, 5, 1]),), (torch.tensor([2, 2, 2]),)])
def tolist_int_arith(t):
    a, b, c = t.tolist()
    return torch.arange(a + b), a * c
