# ruff: noqa  (user code as people write it: %-formatting, lambdas bound to names, unused names)
"""Second batch: outputs holding sizes in odd places, caches outliving a trace, more protocol corners."""

import collections
import dataclasses
import enum
import functools
import math

import torch

from harness import T, S1, S2, prog


@prog(*S2)
def out_dict_int_keys(x):
    return {x.shape[0]: x.sum(), "w": x.shape[1]}


@prog(*S2)
def out_dict_shape_key(x):
    return {tuple(x.shape): x * 2}


@prog(*S2)
def out_ordereddict_size_key(x):
    return collections.OrderedDict([(x.shape[1], x)])


@prog(*S1)
def out_slice_obj(x):
    n = x.shape[0]
    return slice(1, n), x[slice(1, n)]


@prog(*S1)
def out_frozenset(x):
    return frozenset(x.shape)


@prog(*S1)
def out_range(x):
    return range(x.shape[0]), list(range(0, x.shape[0], 2))


@dataclasses.dataclass(frozen=True)
class Cfg:
    n: int
    name: str


@prog(*S1)
def out_frozen_dataclass(x):
    return Cfg(x.shape[0], f"n{x.shape[0]}"), x


class Color(enum.IntEnum):
    RED = 2
    BLUE = 3


@prog(*[(T(n),) for n in (2, 3, 2, 5)])
def intenum_compare(x):
    n = x.shape[0]
    return (x * 2 if n == Color.RED else x), n in (Color.RED, Color.BLUE), Color(n) if n in (2, 3) else None


@prog(*S1)
def out_complex(x):
    return complex(x.shape[0], 1), x.shape[0] * 1j


@functools.lru_cache(maxsize=None)
def _helper2(a, b):
    return a * 10 + b


def _f_user_of_helper(x):
    return x.new_zeros(_helper2(x.shape[0], 1))


def _g_user_of_helper(a, b):
    return b.new_zeros(_helper2(b.shape[0], 1)), a.shape[0]


@prog(*[(T(n),) for n in (0, 1, 0, 2, 1, 0)])
def lru_two_args(x):
    return _f_user_of_helper(x)


@prog(*[(T(a), T(b)) for a, b in ((2, 0), (2, 1), (3, 0), (5, 0), (2, 1))])
def lru_shared_between_functions(a, b):
    return _g_user_of_helper(a, b)


@functools.cache
def _arange_plus(n):
    return torch.arange(n) + 1


@prog(*[(T(n, dtype=d),) for n, d in ((3, torch.float32), (3, torch.float64), (4, torch.float32), (3, torch.float32))])
def cache_tensor_dtype_change(x):
    return x + _arange_plus(x.shape[0])


class Memo:
    def __init__(self):
        self.d = {}

    def get(self, n):
        if n not in self.d:
            self.d[n] = n * n
        return self.d[n]


MEMO = Memo()


@prog(*[(T(n),) for n in (2, 3, 2, 4, 3)])
def object_memo_global(x):
    return x * MEMO.get(x.shape[0])


class Cached:
    @functools.lru_cache(maxsize=None)
    def width(self, n):
        return n + 1


CACHED = Cached()


@prog(*[(T(n, dtype=d),) for n, d in ((3, torch.float32), (3, torch.float64), (4, torch.float32), (3, torch.float32))])
def lru_method(x):
    return x.new_ones(CACHED.width(x.shape[0]))


@prog(*S1)
def size_in_exception_msg(x):
    try:
        if x.shape[0] > 4:
            raise ValueError(f"too long: {x.shape[0]}")
        return x, ""
    except ValueError as e:
        return x[:4], str(e)


@prog(*S1)
def getattr_default_int(x):
    n = x.shape[0]
    return getattr(n, "real", 0), getattr(n, "nope", -1), hasattr(n, "bit_length")


@prog(*S2)
def size_as_list_index(x):
    lst = [10, 20, 30, 40, 50]
    return lst[x.shape[0]] if x.shape[0] < 5 else -1, lst[-x.shape[1] :] if x.shape[1] <= 5 else []


@prog(*S2)
def str_multiply(x):
    return "ab" * x.shape[0], [None] * x.shape[1], (1, 2) * x.shape[0]


@prog(*S1)
def bytes_and_bytearray(x):
    return bytes(x.shape[0]), len(bytearray(x.shape[0]))


@prog(*S1)
def size_as_tensor_index(x):
    n = x.shape[0]
    return x[n - 1] if n else x.sum(), x[-1:], x[n // 2 :: 2]


@prog(*[(T(*s), k) for s, k in (((3, 4), 1), ((3, 4), 0), ((3, 4), -1), ((3, 4), 2), ((3, 4), -3), ((3, 4), 1))])
def int_arg_as_dim(x, k):
    return x.sum(k), x.shape[k], x.size(k)


@prog(*[(T(n), k) for n, k in ((4, 2), (4, 0), (4, -1), (4, 4), (4, 5), (0, 0), (4, 2))])
def int_arg_index(x, k):
    return x[k]


@prog(*[(T(*s),) for s in ((2, 3), (3, 2), (1, 1), (2, 3))])
def math_funcs_shapes(x):
    h, w = x.shape
    return (
        math.hypot(h, w),
        math.atan2(h, w),
        math.comb(h + w, h),
        math.perm(h + w, 2),
        math.factorial(h),
        math.lcm(h, w),
    )


@prog(*[(T(*s),) for s in ((2, 3), (3, 2), (0, 1), (2, 3))])
def math_dist_fsum(x):
    return math.fsum([x.shape[0] * 0.1] * 3), math.dist(x.shape, (0, 0)), sum([0.1 * s for s in x.shape])


@prog(*S1)
def int_from_str_of_size(x):
    return int(str(x.shape[0]) + "0"), float(f"{x.shape[0]}.5")


@prog(*[(T(n), s) for n, s in ((3, 0.5), (3, 1.5), (4, 0.5), (3, -0.0), (3, float("nan")), (3, 0.5))])
def size_times_float_arg_int(x, s):
    k = int(x.shape[0] * s)
    return x[:k], k


@prog(*[(T(n), s) for n, s in ((3, 0.5), (3, 1.5), (4, 0.5), (3, 2.0), (3, 0.5))])
def size_times_float_arg_compare(x, s):
    return x * 2 if x.shape[0] * s > 2 else x


@prog(*[(T(n),) for n in (3, 4, 0, 1, 3)])
def torch_tensor_of_float_sizes(x):
    n = x.shape[0]
    return torch.tensor([n / 2, n**0.5, float(n)]), torch.tensor([n, 1]).float() / max(n, 1)


@prog(*[(T(*s),) for s in ((2, 3), (4, 3), (2, 5), (2, 3))])
def torch_zeros_from_size_obj(x):
    s = x.shape
    return torch.zeros(s), torch.zeros(s[1:]), torch.ones(*s), x.new_empty(s).fill_(1), torch.empty(0, s[1]).shape


@prog(*[(T(*s),) for s in ((2, 3), (4, 3), (1, 1), (2, 3))])
def torch_randn_like_shape(x):
    torch.manual_seed(0)
    return torch.randn(x.shape[0], 2), torch.rand_like(x)


@prog(*[(T(*s),) for s in ((2, 3), (4, 3), (1, 1), (2, 3))])
def numel_arith(x):
    return x.numel() // x.shape[0] if x.shape[0] else 0, x.numel() / 2, x.numel() % 2 == 0


@prog(*S1)
def bool_ops_on_sizes(x):
    n = x.shape[0]
    return (n > 2) + 1, (n > 2) * 5, True + (n == 4), sum(s > 1 for s in x.shape), int(n > 1)


@prog(*S2)
def max_min_mixed(x):
    h, w = x.shape
    return max(h, w, 2.5), min([h, w]), max((h, "a"), (w, "b")), min(h, w, key=lambda v: -v), max([], default=h)


@prog(*S1)
def iter_unpack_split_sizes(x):
    a, b = x.split([x.shape[0] // 2, x.shape[0] - x.shape[0] // 2])
    return a.shape, b.shape, a.sum() - b.sum()


@prog(*[(T(*s),) for s in ((2, 3), (4, 3), (1, 1), (2, 3))])
def tensor_size_compare_tensor(x):
    return x.shape[0] == torch.tensor(2), torch.tensor(x.shape) == 2, x.new_tensor(x.shape[0])
