# ruff: noqa  (user code as people write it: %-formatting, lambdas bound to names, unused names)
"""Fourth batch: hidden state (Python RNG, grad, strides), generators, class/dataclass helpers, itertools."""

import collections
import dataclasses
import itertools
import random
import typing

import numpy as np
import torch

from harness import T, S1, S2, prog


@prog(*[(T(4),) for _ in range(4)])
def python_random_flip(x):
    return x.flip(0) if random.random() < 0.5 else x


@prog(*[(T(4),) for _ in range(4)])
def python_random_randint(x):
    return x * random.randint(1, 100)


@prog(*[(T(4),) for _ in range(4)])
def numpy_random_scale(x):
    return x * float(np.random.rand())


def _strided(shape, t):
    a = T(*shape)
    return a.t() if t else a


@prog(*[(_strided((2, 3), t),) for t in (False, True, False, True)])
def stride_query(x):
    return x.stride(), x.is_contiguous(), x.storage_offset()


def _with_grad(g):
    a = T(3).requires_grad_()
    if g:
        a.grad = torch.ones(3)
    return a


@prog(*[(_with_grad(g),) for g in (False, True, False)])
def grad_attr_query(x):
    return x.detach() * 2 if x.grad is None else x.grad + 1


@prog(*[(T(3).requires_grad_(r),) for r in (False, True, False)])
def requires_grad_branch(x):
    return (x * 2, x.requires_grad, x.is_leaf) if x.requires_grad else (x * 3, x.requires_grad, x.is_leaf)


@prog(*S2)
def generator_next(x):
    gen = (s for s in x.shape)
    first = next(gen)
    return first, next(iter(x.shape)), list(enumerate(x.shape, start=1))


@prog(*S2)
def class_inside(x):
    class Cfg:
        width = x.shape[1]

        def doubled(self):
            return self.width * 2

    return x.new_zeros(Cfg().doubled())


@dataclasses.dataclass
class Spec:
    n: int
    m: int = 1


@prog(*S2)
def dataclass_helpers(x):
    s = Spec(*x.shape)
    t = dataclasses.replace(s, m=s.m + 1)
    return dataclasses.asdict(t), dataclasses.astuple(s), t == Spec(x.shape[0], x.shape[1] + 1)


P = collections.namedtuple("P", "a b")


class NT(typing.NamedTuple):
    n: int
    k: int = 3


@prog(*S2)
def namedtuple_helpers(x):
    p = P(*x.shape)
    q = p._replace(b=p.b * 2)
    return q._asdict(), tuple(q), NT(x.shape[0]), NT(*x.shape).k


@prog(*S1)
def deque_maxlen(x):
    d = collections.deque(maxlen=max(x.shape[0], 1))
    for i in range(5):
        d.append(i)
    return list(d)


@prog(*S2)
def itertools_misc(x):
    return (
        list(itertools.islice(x.shape, 1)),
        list(itertools.repeat(x.shape[0], 2)),
        list(itertools.chain(x.shape, (9,))),
        list(itertools.combinations(x.shape, 2)),
        list(itertools.zip_longest(x.shape, [1], fillvalue=x.shape[1])),
    )


@prog(*S2)
def reduce_with_max(x):
    import functools

    return functools.reduce(max, x.shape), functools.reduce(min, x.shape, 100), sorted(x.shape, key=lambda s: -s)


@prog(*[(T(*s),) for s in ((2, 3), (3,), (1, 1, 1), ())])
def dim_default(x):
    return x.shape[0] if x.dim() else 1, x.shape[-1] if x.ndim > 1 else None


@prog(*S1)
def string_join_sizes(x):
    return "x".join(str(s) for s in x.shape), ",".join(map(str, [x.shape[0], x.shape[0] + 1]))


@prog(*S1)
def nonlocal_counter(x):
    count = 0

    def bump(k):
        nonlocal count
        count += k

    for s in x.shape:
        bump(s)
    return count, x * count


@prog(*S2)
def tensor_shape_tensor_ops(x):
    s = torch.tensor(x.shape)
    return s.prod(), s.tolist(), x.reshape(s.tolist()), torch.as_tensor(x.shape[0])


@prog(*S2)
def size_eq_list_tuple(x):
    return x.shape == [2, 3], x.shape == torch.Size([2, 3]), list(x.shape) == (2, 3), tuple(x.shape) == x.shape


@prog(*[(T(*s),) for s in ((2, 3), (3, 2), (2, 3))])
def size_methods_more(x):
    s = x.shape
    return s.__contains__(3), s.count(2), s[-1:], s.__len__(), s.__getitem__(0), s.numel() == x.numel()


@prog(*S2)
def dict_from_zip(x):
    d = dict(zip(["h", "w"], x.shape))
    d2 = dict.fromkeys(x.shape, 0)
    return d, d2, sorted(d.values()), max(d, key=d.get)


@prog(*[(T(n),) for n in (7, 8, 6, 9, 8)])
def caught_error_message(x):
    try:
        return x.reshape(-1, 3), ""
    except RuntimeError as e:
        return x, str(e)


@prog(*[(T(a), T(b)) for a, b in ((2, 3), (4, 5), (2, 2), (4, 5))])
def caught_broadcast_message(x, y):
    try:
        return x + y, ""
    except RuntimeError as e:
        return x, str(e)


@prog(*[(T(2), op) for op in (max, min, max, min)])
def builtin_identity_arg(x, op):
    return x * 2 if op is max else x * 3


@prog(*[(T(1), s) for s in (0.0, -0.0, 0.0, -0.0, float("nan"), float("nan"))])
def float_const_sign(x, s):
    return (x * 2 if s == 0.0 else x), s


@prog(*[(T(n),) for n in (3, 1, 3)])
def comparison_is_true(x):
    big = x.shape[0] > 2
    return x * 2 if big is True else x


class _Counter:
    calls = 0


@prog(*[(T(3),), (T(3),), (T(3),)])
def class_attribute_counter(x):
    _Counter.calls += 1
    return x * _Counter.calls
