# ruff: noqa  (user code as people write it: %-formatting, lambdas bound to names, unused names)
"""Float/int scalar arguments with special values, dtype-dependent programs."""

import math

import torch

from harness import T, prog

NAN, INF = float("nan"), float("inf")
FV = [1.0, 2.5, -0.0, 0.0, NAN, INF, -INF, -2.0, 1.0, NAN, -0.0]


@prog(*[(T(3), s) for s in FV])
def float_isnan_isinf(x, s):
    if math.isnan(s):
        return x * 0
    if math.isinf(s):
        return x * (1 if s > 0 else -1)
    return x * s


@prog(*[(T(3), s) for s in FV])
def float_copysign(x, s):
    return x * math.copysign(1.0, s), math.copysign(2.0, s)


@prog(*[(T(3), s) for s in FV])
def float_max_min(x, s):
    return max(s, 0.0), min(s, 1.0), max(0.0, s), min(1.0, s)


@prog(*[(T(3), s) for s in FV])
def float_bool_scale(x, s):
    return x * s if s else x


@prog(*[(T(3), s) for s in [2.7, -2.7, 0.5, -0.5, INF, NAN, 2.7, 1e20]])
def float_int_round(x, s):
    return int(s), round(s), math.floor(s), math.ceil(s), math.trunc(s)


@prog(*[(T(3), s) for s in [1.0, 1.0 + 1e-12, 0.5, NAN, 1.0]])
def float_isclose(x, s):
    return x * 2 if math.isclose(s, 1.0) else x


@prog(*[(T(3), s) for s in [2.0, 2.5, -3.0, INF, NAN, -0.0, 2.0]])
def float_is_integer_arg(x, s):
    return s.is_integer(), x * 2 if s.is_integer() else x


@prog(*[(T(n), s) for n, s in ((3, 2.0), (3, INF), (3, -1.0), (3, NAN), (3, 2.0))])
def inf_compare_size(x, s):
    return x.shape[0] < s, float("inf") > x.shape[0], x.shape[0] == s


@prog(*[(T(3), s) for s in FV])
def float_abs_neg(x, s):
    return abs(s), -s, s * 0.0, 0.0 * s, s - s, s**2


@prog(*[(T(3), s) for s in FV])
def float_eq_self(x, s):
    return s == s, s != s, s == 0.0, s < 0, s <= 0, not (s > 0)


@prog(*[(T(3), s) for s in [1.0, 2.0, 0.0, -0.0, -1.0, INF, NAN, 1.0]])
def float_division(x, s):
    return 1.0 / s, x / s


@prog(*[(T(3), s) for s in [1.0, 4.0, 0.0, -1.0, INF, NAN, 1.0]])
def float_sqrt_log(x, s):
    return math.sqrt(s), math.log(s) if s > 0 else -1


@prog(*[(T(3), s) for s in [2.0, 0.5, -0.0, NAN, 2.0]])
def float_in_tensor_ops(x, s):
    return torch.full((2,), s), x.clamp(max=s), torch.where(x > 1, x, s), x.masked_fill(x > 2, s)


@prog(*[(T(3), s) for s in [2.0, 3.0, 2.0, 0.0, NAN]])
def float_dict_key(x, s):
    d = {2.0: "two", 0.0: "zero"}
    return d.get(s, "none")


@prog(*[(T(3), n, s) for n, s in ((2, 2.0), (2, 2.5), (3, 3.0), (0, -0.0), (2, 2.0))])
def int_float_eq(x, n, s):
    return n == s, n < s, hash(n) == hash(s), {n, s}.__len__()


@prog(
    *[
        (T(3, dtype=d),)
        for d in (torch.float32, torch.float64, torch.int64, torch.bool, torch.float16, torch.float32, torch.int32)
    ]
)
def dtype_branches(x):
    if x.dtype == torch.float32:
        return x * 2
    if x.is_floating_point():
        return x * 3
    if x.dtype in (torch.int64, torch.int32):
        return x + 1
    return x


@prog(*[(T(3, dtype=d),) for d in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.float32)])
def finfo_eps(x):
    return x + torch.finfo(x.dtype).eps, torch.finfo(x.dtype).max > 1e10


@prog(*[(T(3, dtype=d),) for d in (torch.int64, torch.int32, torch.uint8, torch.int8, torch.int64)])
def iinfo_max(x):
    return x.clamp(max=torch.iinfo(x.dtype).max - 1), torch.iinfo(x.dtype).bits


@prog(
    *[
        (T(n, dtype=d),)
        for n, d in ((3, torch.float32), (3, torch.float64), (4, torch.int8), (0, torch.int64), (3, torch.float32))
    ]
)
def bytes_count(x):
    return x.dtype.itemsize * x.numel(), x.element_size() * x.nelement(), x.dtype.is_floating_point


@prog(*[(T(3, dtype=d),) for d in (torch.float32, torch.int64, torch.float64, torch.float32)])
def dtype_str(x):
    s = str(x.dtype)
    return s, "float" in s, s.split(".")[-1]


@prog(*[(T(3), b) for b in (True, False, True)])
def bool_arg_and(x, b):
    return x * 2 if b and x.shape[0] > 2 else x


@prog(*[(T(3), n) for n in (2, 3, -1, 0, 2)])
def int_arg_range_loop(x, n):
    acc = x
    for i in range(n):
        acc = acc + i
    return acc


@prog(*[(T(3), n) for n in (3, 255, 0, -5, 3)])
def int_arg_bit_ops(x, n):
    return n.bit_length(), n & 1, n | 8, n << 2, n >> 1, (n & 1) == 0


@prog(*[(T(3), n) for n in (3, 2, 0, -3, 3)])
def int_arg_to_float(x, n):
    return float(n), n / 2, n * 0.5, x * (n / 4), math.sqrt(abs(n))


@prog(*[(T(3), n) for n in (3, 2, 0, -3, 3)])
def int_arg_str(x, n):
    return f"n={n:+d}", str(n), repr(n), f"{n:03}", "%s" % n, str(n).zfill(4)


@prog(*[(T(3), n) for n in (3, 0, -3, 3)])
def tensor_from_int_arg(x, n):
    return torch.tensor([n, 2 * n]), torch.tensor(n), torch.full((3,), n), torch.tensor(float(n))


@prog(*[(T(3), s) for s in (2.0, 0.5, -0.0, NAN, INF, 2.0)])
def tensor_from_float_arg(x, s):
    return torch.tensor([s, 2 * s]), torch.tensor(s), torch.tensor([[s]])
