# ruff: noqa  (user code as people write it: %-formatting, lambdas bound to names, unused names)
"""Sixth batch: signatures (defaults, *args, **kwargs, keyword-only), sizes and predicates as outputs."""

import math

import torch

from harness import S1, S2, T, prog

NAN = float("nan")


@prog(*[(T(n),) for n in (3, 4, 0, 3)])
def returns_predicates(x):
    n = x.shape[0]
    return n > 2, n == 4, not n, n != 0 and n < 4, bool(n % 2), (n > 1) + (n > 2)


@prog(*S1)
def returns_derived_numbers(x):
    n = x.shape[0]
    return n / 3, n * 0.5, -n, n // 2, n % 3, float(n) if n < 0 else n * 1.0, math.sqrt(n)


@prog(*S2)
def returns_shapes(x):
    return x.shape, x.shape[1:], x.shape + (1,), torch.Size([x.shape[0], 2]), tuple(x.shape), list(x.shape), x.size()


@prog(*[(T(3, dtype=d),) for d in (torch.float32, torch.int64, torch.float32)])
def returns_static_facts(x):
    return x.dtype, x.device, x.layout, None, x.dim(), x.is_floating_point(), ..., str(x.dtype)


def _kw(x, k=2, *, scale=1.5, **extra):
    return x[:k] * scale + sum(extra.values())


@prog(*[(T(4),), (T(4),), (T(5),)])
def defaults_and_kwonly(x):
    return _kw(x), _kw(x, 3), _kw(x, scale=2.0), _kw(x, 1, bias=x.shape[0])


@prog(*[(T(4), 1), (T(4), 2), (T(5), 2), (T(4), 1)])
def star_args(x, *sizes):
    return x.reshape(-1, *sizes) if x.numel() % math.prod(sizes) == 0 else x, len(sizes)


@prog(*[(T(4), torch.Size([2, 2])), (T(6), torch.Size([2, 3])), (T(6), torch.Size([3, 2])), (T(4), torch.Size([2, 2]))])
def size_argument(x, shape):
    return x.reshape(shape), shape.numel(), shape[0] * 10 + shape[1], shape == x.reshape(shape).shape


@prog(*[(T(4), (2, 2)), (T(6), (2, 3)), (T(6), (3, 2)), (T(4), (2, 2)), (T(4), (4,))])
def tuple_shape_argument(x, shape):
    return x.reshape(shape), x.reshape(shape).shape == shape, len(shape)


@prog(*[([T(2), T(3), T(4)], 1), ([T(2), T(3), T(4)], 2), ([T(2), T(3)], 1), ([T(2), T(3), T(4)], -1)])
def list_of_tensors_indexed(xs, k):
    return xs[k] * 2, len(xs), [t.shape[0] for t in xs]


@prog(*[({"a": T(2), "b": T(3)},), ({"a": T(4), "b": T(3)},), ({"a": T(2)},)])
def dict_of_tensors(d):
    return {k: v.sum() for k, v in d.items()}, sorted(d), sum(v.shape[0] for v in d.values())


@prog(*[(T(4), 2), (T(4), 2.0), (T(4), True), (T(4), 3), (T(4), 2)])
def int_float_bool_arg_type(x, k):
    return x * k, type(k).__name__, k == 2, isinstance(k, int)


@prog(*[(T(3), NAN), (T(3), 0.0), (T(3), NAN), (T(3), -0.0)])
def nan_arg_branches(x, s):
    if s != s:
        return x * 0, "nan"
    return x * s, "num"


@prog(*[(T(3), 5), (T(3), -5), (T(3), 0), (T(3), 5)])
def sign_of_int_arg(x, k):
    sign = (k > 0) - (k < 0)
    return x * sign, sign, math.copysign(1, k), abs(k) // max(abs(k), 1)


@prog(*S2)
def size_arithmetic_types(x):
    s = x.shape
    return s * 2, 2 * s, s + s, s[::-1], s[:0], list(s) + [1], s + [1] if False else s, torch.Size([]) == x.sum().shape


@prog(*[(T(*s),) for s in ((2, 3), (3,), (), (1, 1, 1), (2, 3))])
def size_of_scalar_and_eq(x):
    return x.shape == (), x.shape == torch.Size(), len(x.shape) == 0, x.shape[0:1], x.dim() == len(x.shape)


@prog(*S2)
def size_hash_and_set_ops(x):
    s = x.shape
    return hash(s) == hash(tuple(s)), {s: 1}[tuple(s)], s in {(2, 3), (3, 4)}, set(s) | {9}, s.count(s[0])
