# ruff: noqa  (user code as people write it: %-formatting, lambdas bound to names, unused names)
"""Third batch: more stdlib on sizes, exceptions around ops, arguments of odd values."""

import bisect
import contextlib
import heapq
import json
import math
import operator
import statistics

import numpy as np
import torch
import torch.nn.functional as F

from harness import T, S1, S2, prog

NAN, INF = float("nan"), float("inf")


@prog(*S2)
def int_methods_through_class(x):
    n = x.shape[0]
    return int.__add__(n, 1), int.bit_length(n), float.is_integer(n / 2)


@prog(*S2)
def nested_format_width(x):
    n, w = x.shape
    return "{0:0{1}d}".format(n, w + 1), f"{n:{w}}|", "{:>{}}".format("a", w)


@prog(*S1)
def range_ops(x):
    n = x.shape[0]
    r = range(n)
    return len(r), (r[-1] if n else -1), list(reversed(r)), n in range(1, 5), 3 in r


@prog(*S2)
def map_filter_sizes(x):
    return list(map(lambda s: s * 2, x.shape)), list(filter(lambda s: s > 2, x.shape)), tuple(map(str, x.shape))


@prog(*[(T(*s),) for s in ((2, 3, 4), (2, 3, 1), (1, 1, 5), (2, 0, 3), (2, 3, 4))])
def view_star_rest(x):
    return x.view(-1, *x.shape[2:]), torch.Size(reversed(x.shape)), x.new_full(x.shape, x.shape[0])


@prog(*S1)
def even_check(x):
    n = x.shape[0]
    return (x.reshape(2, -1) if n // 2 * 2 == n and n else x), math.isfinite(n / max(n, 1))


@prog(*S2)
def statistics_on_sizes(x):
    return statistics.mean(x.shape), statistics.median(x.shape)


@prog(*S2)
def numpy_zeros_shape(x):
    a = np.zeros(x.shape)
    return x + torch.from_numpy(a).float()


@prog(*S2)
def json_of_sizes(x):
    return json.dumps({"n": x.shape[0], "shape": list(x.shape)})


BUCKETS = [1, 2, 4, 8]


@prog(*[(T(n),) for n in (3, 1, 8, 9, 0, 2, 3)])
def bisect_buckets(x):
    i = bisect.bisect_left(BUCKETS, x.shape[0])
    target = BUCKETS[i] if i < len(BUCKETS) else x.shape[0]
    return F.pad(x, (0, target - x.shape[0])), i


@prog(*[(T(*s),) for s in ((2, 5, 3), (5, 2, 3), (1, 1, 1), (2, 5, 3))])
def heapq_sizes(x):
    return heapq.nsmallest(2, x.shape), heapq.nlargest(1, enumerate(x.shape), key=lambda p: p[1])


@prog(*[(T(*a), T(*b)) for a, b in (((2, 3), (2, 3)), ((2, 3), (3, 3)), ((2, 4), (2, 3)), ((2, 3), (2, 3)))])
def zip_star_shapes(x, y):
    return [a == b for a, b in zip(*[x.shape, y.shape])], all(a <= b for a, b in zip(x.shape, x.shape[1:]))


@prog(*[(T(4), n) for n in (2, 4, 5, -1, -5, 0, 2)])
def try_index_int_arg(x, n):
    try:
        return x[n]
    except IndexError:
        return x.sum()


@prog(*[(T(6), n) for n in (2, 3, 4, 0, -1, 6, 2)])
def try_reshape_int_arg(x, n):
    try:
        return x.reshape(n, -1)
    except RuntimeError:
        return x


@prog(
    *[
        (T(*a), T(*b))
        for a, b in (((2, 3), (2, 3)), ((2, 3), (2, 4)), ((2, 3), (3, 3)), ((2, 3), (2, 3)), ((2, 3), (2, 4)))
    ]
)
def try_cat_mismatch(x, y):
    try:
        return torch.cat([x, y])
    except RuntimeError:
        return torch.cat([x.flatten(), y.flatten()])


@prog(*[(T(*a), T(*b)) for a, b in (((2, 3), (2, 3)), ((2, 3), (2, 4)), ((2, 3), (3, 3)), ((2, 3), (2, 3)))])
def try_stack_mismatch(x, y):
    try:
        return torch.stack([x, y])
    except RuntimeError:
        return x.sum() + y.sum()


@prog(*[(T(1, n), k) for n, k in ((3, 4), (3, 2), (1, 5), (3, 3), (3, 4))])
def try_expand(x, k):
    try:
        return x.expand(k, k)
    except RuntimeError:
        return x


@prog(*[(T(*s),) for s in ((2, 3), (2,), (2, 3, 4), (2, 3))])
def try_squeeze_dim(x):
    try:
        return x.squeeze(2)
    except IndexError:
        return x * 2


@prog(*[(T(n),) for n in (6, 7, 5, 6, 0)])
def try_split_sizes(x):
    try:
        return x.split([2, 4])
    except RuntimeError:
        return (x,)


@prog(*[(T(*a), T(*b)) for a, b in (((2, 3), (3, 4)), ((2, 3), (2, 4)), ((2, 3), (3, 5)), ((2, 3), (2, 4)))])
def try_matmul(x, y):
    try:
        return x @ y
    except RuntimeError:
        return x.sum() * y.sum()


@prog(*[(T(n),) for n in (4, 2, 3, 4, 1)])
def suppress_index(x):
    y = x[:1]
    with contextlib.suppress(IndexError):
        y = x[3:4] * x[3]
    return y


@prog(*[(T(*s),) for s in ((4, 3), (2, 3), (4, 3), (4, 2))])
def try_finally_sizes(x):
    out = []
    try:
        if x.shape[0] > 3:
            return x[:3], out
        out.append(x.shape[0])
    finally:
        out.append(-1)
    return x, out


class ShapeError(Exception):
    pass


@prog(*[(T(*s),) for s in ((2, 3), (3, 3), (2, 2), (2, 3))])
def custom_exception(x):
    if x.shape[0] == x.shape[1]:
        raise ShapeError(f"square {tuple(x.shape)}")
    return x


@prog(*[(T(*s),) for s in ((2, 3), (3, 3), (2, 2), (2, 3))])
def caught_custom_exception(x):
    try:
        if x.shape[0] == x.shape[1]:
            raise ShapeError(f"square {tuple(x.shape)}")
        return x, ""
    except ShapeError as e:
        return x.T, e.args[0]


@prog(*[(T(3), s) for s in (2.0, -2.0, 0.25, -0.0, NAN, INF, 2.0)])
def float_pow_forms(x, s):
    return s**0.5, math.pow(abs(s), 2), s // 1, s % 1, divmod(s, 1.5) if s == s and abs(s) != INF else 0


@prog(*[(T(3), s) for s in (2.0, -2.0, 0.25, -0.0, NAN, INF, 1e-7, 2.0)])
def float_str_forms(x, s):
    return f"{s:.3f}", str(s), repr(s), f"{s:e}", s.hex(), f"{s:g}", "%.2f" % s


@prog(*[(T(3), n) for n in (2**40, 2**62, 2**63 - 1, 2**63, 2**64, -(2**63), 3)])
def big_int_args(x, n):
    return x + n, torch.full((2,), n), n // 3


@prog(*[(T(3), b) for b in (True, False, True)])
def bool_arg_arith(x, b):
    return b + 1, b * x, int(b), f"{b}", isinstance(b, int), -b, b & True, b ^ True, str(b)


@prog(*[(T(3), n) for n in (None, 2, 0, None, 5)])
def optional_int_arg(x, n):
    n = n or 3
    return x[:n] if n is not None else x


@prog(*[(T(3), n) for n in (None, 2, 0, None, 5)])
def optional_int_is_none(x, n):
    if n is None:
        return x
    return x * n


@prog(*[(T(3), s) for s in ("a", "bb", "", "a")])
def str_arg(x, s):
    return x * len(s), s.upper(), f"{s}!{x.shape[0]}"


@prog(*[(T(3), t) for t in ((1, 2), (2, 1), (1, 2, 3), (), (1, 2))])
def tuple_arg(x, t):
    return x.repeat(*t) if t else x, sum(t), len(t)


@prog(*[(T(3), lst) for lst in ([1, 2], [2, 1], [0], [1, 2])])
def list_arg(x, lst):
    return x[lst], sorted(lst), max(lst)


@prog(*[(T(4), d) for d in ({"k": 2}, {"k": 3}, {"k": 2, "j": 1}, {"k": 2})])
def dict_arg(x, d):
    return x[: d["k"]] * len(d), d.get("j", 0)


@prog(*[(T(4), sl) for sl in (slice(1, 3), slice(0, 4, 2), slice(None, -1), slice(1, 3), slice(5, 9))])
def slice_arg(x, sl):
    return x[sl], sl.start


@prog(
    *[
        (T(4, dtype=d), dt)
        for d, dt in (
            (torch.float32, torch.float64),
            (torch.float32, torch.int64),
            (torch.int64, torch.float32),
            (torch.float32, torch.float64),
        )
    ]
)
def dtype_arg(x, dt):
    return x.to(dt), torch.zeros(2, dtype=dt), dt.is_floating_point, x.dtype == dt


@prog(*[(T(4), op) for op in (operator.add, operator.mul, operator.add, max)])
def callable_arg(x, op):
    return op(x, x) if op is not max else x.max()
