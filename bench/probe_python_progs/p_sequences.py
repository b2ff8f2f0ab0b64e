# ruff: noqa  (user code as people write it: %-formatting, lambdas bound to names, unused names)
"""Fifth batch: sequences indexed and changed by sizes, strings and bytes, float arguments in containers."""

import math

import torch
import torch.nn.functional as F

from harness import S1, S2, T, prog

NAN, INF = float("nan"), float("inf")


@prog(*S1)
def list_mutation_by_size(x):
    n = x.shape[0]
    lst = [10, 20, 30, 40, 50, 60]
    lst.insert(n % 4, -1)
    popped = lst.pop(n % 3)
    del lst[n % 2]
    lst[n % 3 : n % 3 + 1] = [7, 7]
    return lst, popped, lst.count(7), (lst.index(40) if 40 in lst else -1)


@prog(*S1)
def list_remove_and_membership(x):
    n = x.shape[0]
    lst = [1, 2, 3, 4, 5]
    if n in lst:
        lst.remove(n)
    return lst, any(n == k for k in (1, 2)), [k for k in lst if k < n]


@prog(*S1)
def string_indexing_by_size(x):
    n = x.shape[0]
    s = "abcdefghij"
    return s[n] if n < 10 else "", s[:n], s[-n:] if n else "", "c" in s[:n], s.find("e", n), b"abcdefghij"[n:]


@prog(*S1)
def sum_list_mult(x):
    n = x.shape[0]
    return sum([x] * n) if n else x, [x.sum()] * 2


@prog(*[(T(3), s) for s in (0.0, -0.0, 1.0, NAN, 2.0, 0.0, NAN)])
def float_in_containers(x, s):
    d = {0.0: "zero", 1.0: "one"}
    return d.get(s, "none"), s in (0.0, 1.0), s in [0.5], sorted([s, 1.0, -1.0]) if s == s else [], {s: 1}.get(0.0)


@prog(*[(T(3), s, t) for s, t in ((1.0, 2.0), (NAN, 1.0), (1.0, NAN), (-0.0, 0.0), (0.0, -0.0), (1.0, 2.0))])
def float_max_order(x, s, t):
    return max(s, t), min(s, t), max([s, t]), sorted([t, s])[0] if s == s and t == t else 0.0


@prog(*[(T(3), s) for s in (2.5, NAN, INF, -INF, -2.5, 1e300, 2.5)])
def float_to_int_errors(x, s):
    try:
        return int(s), round(s), math.floor(s)
    except (ValueError, OverflowError) as e:
        return type(e).__name__


@prog(*[(T(n), k) for n, k in ((6, 2), (6, 4), (5, 2), (0, 3), (6, 2), (1, 1))])
def split_chunk_int_arg(x, k):
    return (
        [t.shape[0] for t in x.split(k)],
        len(x.chunk(k)),
        x.unfold(0, min(k, x.shape[0]), 1).shape if x.shape[0] else (),
    )


@prog(*[(T(n),) for n in (4, 5, 1, 2, 4)])
def list_index_with_sizes(x):
    n = x.shape[0]
    return (
        x[[0, n - 1]],
        x[torch.tensor([0, n - 1])],
        x.index_select(0, torch.arange(n)),
        x[..., : n - 1],
        x[None, n - 1],
    )


@prog(*[(T(1, 1, n),) for n in (4, 5, 1, 2, 4)])
def interpolate_by_size(x):
    n = x.shape[-1]
    return F.interpolate(x, size=(n * 2,)), F.pad(x, [n, n]), x.expand(2, -1, n)


@prog(*[(T(n), k) for n, k in ((4, 2), (4, 5), (4, -1), (0, 2), (4, 2))])
def int_arg_in_tensor_ops(x, k):
    return (
        x.clamp(min=k),
        torch.where(x > k, x, k),
        x.masked_fill(x > k, k),
        torch.arange(0, max(k, 0), 2),
        torch.arange(k, 0, -1) if k > 0 else x,
    )


@prog(*[(T(3), s) for s in (0.5, 2.0, -1.5, 0.5)])
def float_arg_in_factories(x, s):
    return (
        torch.arange(0, 3, s) if s > 0 else x,
        torch.linspace(0, s, 4),
        x.new_full((2,), s),
        torch.full((2,), s).dtype,
    )


@prog(*S1)
def pow_edge_cases(x):
    n = x.shape[0]
    return n**0, 0**n, (-1) ** n, n**-1 if n else 0.0, 2**-n, (n * 1.0) ** 0.5
