# ruff: noqa  (user code as people write it: %-formatting, lambdas bound to names, unused names)
"""Containers keyed by sizes, shape tuples, torch.Size methods, unpacking, type checks."""

import collections
import math

import torch

from harness import T, S1, S2, prog

SCALES = {(2, 3): 2.0, (3, 4): 3.0, (1, 1): -1.0}


@prog(*S2)
def dict_keyed_by_shape(x):
    return x * SCALES.get(tuple(x.shape), 1.0)


@prog(*S2)
def dict_keyed_by_shape_index(x):
    try:
        return x * SCALES[x.shape]
    except KeyError:
        return x


@prog(*[(T(*s),) for s in ((2, 2), (2, 3), (3, 3, 3), (1,), (0, 0), (2, 2), (4, 1))])
def set_of_sizes_square(x):
    if len({*x.shape}) == 1:
        return x * 2
    return x


FS = {frozenset({2, 3}), frozenset({4})}


@prog(*S2)
def frozenset_membership(x):
    return x + 1 if frozenset(x.shape) in FS else x - 1


@prog(*[(T(*s),) for s in ((2, 3, 4), (4, 3, 2), (3, 2, 4), (2, 2, 2), (1, 0, 5), (2, 3, 4))])
def sorted_permute(x):
    order = sorted(range(x.dim()), key=lambda i: x.shape[i])
    return x.permute(order), order


@prog(*[(T(*s),) for s in ((2, 3, 4), (4, 3, 2), (1, 3, 1), (2, 2, 2), (0, 5, 1), (2, 3, 4))])
def sorted_sizes_reverse(x):
    return sorted(x.shape, reverse=True), sorted(x.shape), max(x.shape), min(x.shape)


@prog(*[(T(*s),) for s in ((2, 1, 3), (1, 2, 1), (2, 3), (1,), (1, 1), (2, 1, 3))])
def enumerate_squeeze_dims(x):
    dims = [i for i, s in enumerate(x.shape) if s == 1]
    return (x.sum(dims) if dims else x), dims


@prog(
    *[
        (T(*a), T(*b))
        for a, b in (((2, 3), (3,)), ((2, 3), (1, 3)), ((2, 3), (2,)), ((4, 1), (3,)), ((2, 3), (3,)), ((0, 3), (1,)))
    ]
)
def zip_broadcast_check(x, y):
    ok = all(a == b or a == 1 or b == 1 for a, b in zip(x.shape[::-1], y.shape[::-1]))
    return (x + y) if ok else x


@prog(*[(T(*s),) for s in ((2, 3, 4), (5, 3, 4), (3, 4), (2, 4, 3), (3, 5), (2, 3, 4))])
def shape_tail_equals(x):
    if x.shape[-2:] == (3, 4):
        return x.sum(0) if x.dim() == 3 else x * 2
    return x.sum(-1)


@prog(
    *[
        (T(*a), T(*b))
        for a, b in (((2, 3), (2, 3)), ((2, 3), (3, 2)), ((1, 3), (1, 3)), ((0,), (0,)), ((2, 3), (2, 3)), ((4,), (5,)))
    ]
)
def shape_equals_shape(x, y):
    if x.shape == y.shape:
        return x + y
    return torch.cat([x.reshape(-1), y.reshape(-1)])


@prog(*[(T(*s),) for s in ((2, 3), (1, 1), (3, 1, 1), (0, 2), (2, 3), (1, 4, 1))])
def size_methods(x):
    s = x.shape
    return s.numel(), s.count(1), s.index(max(s)), len(s), s[::-1], s + (1,), type(s[1:]).__name__


@prog(*S2)
def list_shape_modify(x):
    s = list(x.shape)
    s[-1] = -1
    s.append(1)
    return x.reshape(s), s[:-2]


@prog(*S2)
def size_vs_shape(x):
    return x.size(0) * x.size(-1), x.size() == torch.Size([2, 3]), x.size(), x.shape[1], x.size()[0]


@prog(*[(T(*s),) for s in ((2, 3, 4), (2, 12), (5,), (1, 1, 1, 1), (0, 3), (2, 3, 4))])
def star_unpack(x):
    b, *rest = x.shape
    *lead, d = x.shape
    return x.reshape(b, -1), len(rest), math.prod(lead), d, rest


@prog(*[(T(*s),) for s in ((2, 3), (4, 6), (1, 1), (0, 2), (2, 3))])
def isinstance_sizes(x):
    n = x.shape[0]
    r = [
        isinstance(n, int),
        isinstance(n, bool),
        isinstance(n / 2, float),
        isinstance(x.shape, tuple),
        isinstance(x.shape, torch.Size),
        type(n) is int,
        type(n * 1.0) is float,
        isinstance(n > 1, bool),
    ]
    return r


@prog(*[(T(2), v) for v in (2, 2.0, 3, True, -1, 2.5)])
def isinstance_arg_type(x, v):
    if isinstance(v, bool):
        return x * 10
    if isinstance(v, int):
        return x * v
    return x + v


@prog(*[(T(2), v) for v in (2, 3, 0, -4, 2)])
def int_arg_as_dict_key(x, v):
    d = {0: "zero", 2: "two", -4: "neg"}
    return x * len(d.get(v, "other"))


@prog(*[(T(*s),) for s in ((2, 3), (3, 3), (1, 2), (0, 3), (2, 3))])
def counter_of_sizes(x):
    c = collections.Counter(x.shape)
    return c.most_common(1)[0], dict(c)


@prog(*[(T(*s),) for s in ((2, 3), (3, 3), (1, 2), (2, 3))])
def defaultdict_sizes(x):
    d = collections.defaultdict(list)
    for i, s in enumerate(x.shape):
        d[s % 2].append(i)
    return dict(d)


@prog(*[(T(*s),) for s in ((2, 3), (3, 2), (1, 1), (0, 4), (2, 3))])
def dict_comp_return(x):
    return {i: s for i, s in enumerate(x.shape)}, {f"d{i}": s * 2 for i, s in enumerate(x.shape)}


@prog(*[(T(*s),) for s in ((2, 3), (3, 4), (1, 1), (0, 5), (4, 2), (2, 3))])
def in_shape(x):
    return 3 in x.shape, x.shape.count(x.shape[0]), (x * 2 if 3 in x.shape else x)


@prog(*[(T(*s),) for s in ((2, 1), (1, 3), (2, 3), (1, 1), (2, 1))])
def size_index_try(x):
    try:
        k = x.shape.index(1)
    except ValueError:
        k = -1
    return k


@prog(*[(T(n),) for n in (2, 3, 4, 0, 2)])
def dict_index_keyerror(x):
    try:
        return {2: x * 2, 3: x * 3}[x.shape[0]]
    except KeyError:
        return x


@prog(*S2)
def torch_size_build_compare(x):
    n = x.shape[0]
    return torch.Size([n, 3]) == x.shape, torch.Size([n, 2 * n]), list(x.shape) * 2


@prog(*[(T(1, *s),) for s in ((3,), (4,), (0,), (1,), (3,))])
def expand_from_list(x):
    n = x.shape[-1]
    return x.expand(*([n] + list(x.shape[1:])))


@prog(*[(T(*s),) for s in ((2, 4), (2, 6), (2, 3), (3, 0), (2, 4))])
def view_odd_raises(x):
    return x.view(*x.shape[:-1], -1, 2)


@prog(*[(T(*s),) for s in ((2, 4), (2, 6), (2, 3), (3, 0), (2, 4))])
def unflatten_odd(x):
    return x.unflatten(-1, (2, -1))


@prog(*[(T(n),) for n in (6, 7, 5, 0, 1, 2, 6)])
def chunk_count(x):
    return len(x.chunk(3)), len(x.split(2)), [c.shape[0] for c in x.split(4)]


@prog(*S2)
def reversed_shape(x):
    return x.reshape(x.shape[::-1]), tuple(reversed(x.shape)), hash(x.shape) == hash(tuple(x.shape))


@prog(*[(T(*s),) for s in ((2, 3, 4), (4, 3, 2), (3, 3, 3), (2, 3, 4))])
def max_shape_key(x):
    i = max(range(x.dim()), key=lambda d: x.shape[d])
    return x.sum(i), i


@prog(*S2)
def sorted_pairs(x):
    return sorted([(s, i) for i, s in enumerate(x.shape)])


@prog(*[(T(*s),) for s in ((2, 3), (3, 2), (2, 3))])
def tuple_lt_shape(x):
    return x.shape < (3, 0), tuple(x.shape) >= (2, 3), list(x.shape) == [2, 3], x.shape != [2, 3]
