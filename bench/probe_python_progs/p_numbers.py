# ruff: noqa  (user code as people write it: %-formatting, lambdas bound to names, unused names)
"""Numbers from shapes: math module, builtins, int/float/bool, index, slicing, formatting."""

import math
import operator

import torch
import torch.nn.functional as F

from harness import S1, S2, T, prog


@prog(*S1)
def math_ceil_div(x):
    k = math.ceil(x.shape[0] / 4)
    return x.new_zeros(k) + k


@prog(*S1)
def math_floor_slice(x):
    return x[: math.floor(x.shape[0] / 3)] * 2


@prog(*[(T(n),) for n in (1, 2, 4, 8, 3, 5, 16, 2)])
def math_log2_levels(x):
    lv = int(math.log2(x.shape[0]))
    return x.reshape(-1)[: 2**lv] + lv


@prog(*[(T(n),) for n in (8, 16, 4, 12, 0, 1, 8)])
def math_log2_nonint(x):
    return x * math.log2(x.shape[0] + 1)


@prog(*S2)
def math_gcd_reshape(x):
    g = math.gcd(x.shape[0], x.shape[1])
    return x.reshape(g, -1) if g else x


@prog(*[(T(*s),) for s in ((2, 3, 4), (2, 1, 5), (3, 0, 2), (1, 2, 2), (2, 3, 4), (4, 4, 4))])
def math_prod_flatten(x):
    return x.reshape(x.shape[0], math.prod(x.shape[1:])).sum(-1)


@prog(*[(T(n),) for n in (4, 9, 10, 0, 1, 2, 16, 15, 4)])
def math_isqrt_square(x):
    s = math.isqrt(x.shape[0])
    return x[: s * s].reshape(s, s)


@prog(*[(T(n),) for n in (3, 4, 5, 0, 1, 2, 7, 3)])
def round_div(x):
    r = round(x.shape[0] / 2)  # banker's rounding: 2.5 -> 2, 1.5 -> 2, 0.5 -> 0
    return x[:r], r


@prog(*[(T(n), T(m)) for n, m in ((3, 5), (5, 3), (4, 4), (0, 2), (1, 0), (3, 5))])
def abs_diff_zeros(x, y):
    d = abs(x.shape[0] - y.shape[0])
    return torch.zeros(d) + d


@prog(*S1)
def max_with_float(x):
    m = max(x.shape[0] * 0.5, 1.5)
    return x * m, m


@prog(*S1)
def min_int_float_type(x):
    m = min(x.shape[0], 3.5)  # int when n <= 3, else float 3.5
    return m, type(m).__name__


@prog(*S1)
def int_of_fraction(x):
    k = int(x.shape[0] * 0.75)
    return x[:k]


@prog(*[(T(n, d),) for n, d in ((2, 4), (2, 16), (3, 9), (1, 1), (2, 4), (0, 64))])
def float_rsqrt_scale(x):
    return x * float(x.shape[-1]) ** -0.5


@prog(*S1)
def bool_of_size(x):
    if bool(x.shape[0]):
        return x.sum()
    return torch.tensor(-1.0)


@prog(*S1)
def operator_index_range(x):
    n = operator.index(x.shape[0])
    return torch.stack([x[i] * i for i in range(n)]) if n else x


@prog(*[(T(n),) for n in (3, 0, 1, 2, 3, 4)])
def list_mult(x):
    z = [0] * x.shape[0]
    z[-1:] = [7]
    return torch.tensor(z, dtype=torch.float32) + x


@prog(*S1)
def slice_symbolic_bounds(x):
    n = x.shape[0]
    return x[n // 2 : n - 1], x[-n:], x[n:], x[: -n or None]


@prog(*[(T(n),) for n in (3, 12, 5, 123, 0, 3)])
def fstring_format_spec(x):
    n = x.shape[0]
    return f"{n:04d}|{n:>5}|{n:x}|{n / 3:.2f}|{n!r}|{n:,}"


TABLE = {"2x3": 1.5, "3x4": 2.5, "1x1": -1.0}


@prog(*S2)
def string_key_from_sizes(x):
    h, w = x.shape
    return x * TABLE.get(f"{h}x{w}", 0.5)


@prog(*S2)
def percent_format(x):
    return "%d-%d" % tuple(x.shape), "{}/{}".format(*x.shape), str(x.shape), repr(list(x.shape))


@prog(*[(T(n),) for n in (5, 6, 7, 0, 1, 255, 5)])
def format_binary(x):
    n = x.shape[0]
    return format(n, "b"), bin(n).count("1"), n.bit_length(), hex(n), oct(n)


@prog(*[(T(n), k) for n, k in ((6, 4), (6, -4), (7, 3), (0, 5), (5, -2), (6, 4), (-1 + 2, 1))])
def int_arg_arith(x, k):
    return x[: abs(k)], k // 3, k % 3, -k >> 1, k & 0xF, k ^ 5, ~k, divmod(k, 3), divmod(k, -3)


@prog(*[(T(n), k) for n, k in ((6, 2), (6, 0), (6, -2), (6, 7), (6, -7), (1, 0), (0, 0), (6, 2))])
def int_arg_slices(x, k):
    return x[k:], x[-k:], x[:k], x[k : k + 2], x[::-1][:k] if k >= 0 else x


@prog(*[(T(n), k) for n, k in ((6, 2), (6, 0), (6, -2), (6, 4), (6, 5), (6, 2))])
def narrow_int_arg(x, k):
    return x.narrow(0, k, 2)


@prog(*[(T(n), k) for n, k in ((3, 2), (3, 0), (3, -1), (3, 2))])
def new_zeros_negative(x, k):
    return x.new_zeros(k) + 1


@prog(*[(T(n), k) for n, k in ((3, 1), (4, -1), (4, 0), (4, 7), (4, -9), (3, 1))])
def roll_int_arg(x, k):
    return x.roll(k)


@prog(*[(T(n),) for n in (5, 6, 7, 8, 0, 1, 2, 13, 5)])
def pad_to_multiple(x):
    n = x.shape[0]
    return F.pad(x, (0, (-n) % 4)), -(-n // 4), (n + 3) // 4 * 4


@prog(*[(T(n),) for n in (5, 6, 7, 8, 1, 2, 13, 5)])
def next_pow2_pad(x):
    n = x.shape[0]
    p = 1 << (n - 1).bit_length()
    return F.pad(x, (0, p - n))


@prog(*S1)
def divmod_split(x):
    q, r = divmod(x.shape[0], 3)
    return x[: q * 3].reshape(q, 3) if q else x, r


@prog(*S1)
def pow_forms(x):
    n = x.shape[0]
    return pow(n, 2), pow(2, n), pow(n, 3, 5), n**2 / 3, 2**-n if n < 3 else 0


@prog(*S1)
def int_sqrt(x):
    return x[: int(math.sqrt(x.shape[0]))]


@prog(*S1)
def math_log1p_scale(x):
    return x * math.log(x.shape[0] + 1), math.exp(-x.shape[0])


@prog(*S1)
def round_ndigits(x):
    return round(x.shape[0] * 0.1, 2), round(x.shape[0] / 3, 1)


@prog(*S1)
def float_is_integer(x):
    h = x.shape[0] / 2
    return x * 2 if h.is_integer() else x


@prog(*S1)
def floordiv_negative_divisor(x):
    n = x.shape[0]
    return n // -2, n % -3, -n // 2, (-n) % 3
