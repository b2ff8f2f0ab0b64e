"""Proxies: symbolic arithmetic on NumberProxies, decisions recorded as constraints, tensor queries."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import counts, guards, run_both, sweep

import specengine


def test_arithmetic_builds_symbolic_expressions_without_guards():
    def f(x, n):
        m = (x.shape[0] + 2) * n - x.size(1) // 2 + x.shape[1] % 3 - (-n)
        return x.reshape(-1) * m

    cfn = sweep(f, [[(2, 3), 4], [(5, 1), 0], [(0, 7), -3], [(1, 2), 1]])
    assert counts(cfn) == (1, 3)
    assert guards(cfn) == []
    final = str(specengine.last_traces(cfn)[-1])
    assert "torch.mul(t0, 3*n + n*s0 - s1//2 + s1%3)" in final  # canonical form, computed from symbols


def test_comparisons_decide_once_and_record_the_predicate_with_provenance():
    def f(x, n):
        if n >= x.shape[0] and x.shape[0] != 0:
            return x * n
        return x - n

    cfn = sweep(f, [[(3,), 5], [(3,), 4], [(3,), 2], [(0,), 2]])
    entries = specengine.cache_entries(cfn)
    assert counts(cfn) == (3, 1)
    assert [sorted(str(g) for g in e.guards) for e in entries] == [
        ["n >= x.shape[0]", "x.shape[0] != 0"],
        ["n < x.shape[0]"],
        ["n >= 0", "x.shape[0] == 0"],  # n >= x.shape[0] with x.shape[0] == 0, minimized
    ]
    first = entries[0].guards
    assert all(g.provenance.where.startswith("test_proxies.py:") and g.provenance.reason == "branch" for g in first)


def test_int_and_index_pin_with_an_equality_guard():
    def f(x):
        k = int(x.shape[0])
        return x + k

    cfn = sweep(f, [[(3,)], [(3,)], [(4,)]])
    assert counts(cfn) == (2, 1)
    assert guards(cfn) == ["x.shape[0] == 4"]


def test_true_division_square_roots_and_float_powers_of_sizes_stay_symbolic():
    def f(x):
        return x / math.sqrt(x.shape[-1]) + x.shape[0] / 2 + x.shape[1] ** -0.5

    cfn = sweep(f, [[(2, 4)], [(2, 4)], [(3, 4)], [(3, 5)], [(3, 1)]])
    assert counts(cfn) == (1, 4)
    assert sorted(guards(cfn)) == ["x.shape[1] != 0"]  # 0 ** -0.5 raises ZeroDivisionError
    assert "math.sqrt((s1))" in str(specengine.last_traces(cfn)[-1])

    def g(x):
        return x * math.log(x.shape[0])  # other math functions need a real float: the size is pinned

    cfn = sweep(g, [[(2,)], [(3,)], [(3,)]])
    assert counts(cfn) == (2, 1)
    assert guards(cfn) == ["x.shape[0] == 3"]


def test_integer_power_stays_symbolic():
    def f(x):
        return x.reshape(-1)[: x.shape[0] ** 2]

    cfn = sweep(f, [[(2, 3)], [(3, 3)], [(4, 4)]])
    assert counts(cfn) == (1, 2)


def test_python_builtins_on_numbers():
    def f(x, n):
        return x[: max(n, 1)] * min(x.shape[0], 3) + abs(n - 5)

    cfn = sweep(f, [[(6,), 2], [(6,), 4], [(6,), 0], [(2,), 9]])
    assert counts(cfn) == (1, 3)  # max/min/abs of ints stay symbolic (sym_max, sym_min): no guard
    assert [sorted(str(g) for g in e.guards) for e in specengine.cache_entries(cfn)] == [[]]


def test_floordiv_by_symbolic_zero_raises_like_python():
    def f(x, n):
        return x * (x.shape[0] // n)

    cfn = specengine.compile(f, dynamic=True)
    run_both(f, cfn, [torch.randn(4), 2])
    run_both(f, cfn, [torch.randn(4), 3])
    with pytest.raises(ZeroDivisionError):
        cfn(torch.randn(4), 0)
    assert counts(cfn) == (1, 1)


def test_tensor_queries_go_through_the_shape_prim():
    def f(x):
        return x * (x.dim() + x.numel() + len(x.shape))

    cfn = sweep(f, [[(2, 3)], [(4, 5)], [(0, 3)]])
    assert counts(cfn) == (1, 2)
    traced = str(specengine.last_traces(cfn)[0])
    assert traced.count("prims.shape(x)") == 3
    assert guards(cfn) == []


def test_len_of_tensor_is_its_first_size():
    """`len(x)` is `x.shape[0]` (symbolic); where Python needs a real int (`range`), that pins it."""

    def f(x):
        return x * len(x), x.new_zeros(len(x), 2)

    cfn = sweep(f, [[(2, 3)], [(2, 5)], [(3, 3)], [(0, 3)], [(1, 1)]])
    assert counts(cfn) == (1, 4)
    assert guards(cfn) == []

    def g(x):
        return sum(x[i] for i in range(len(x)))

    cfn = sweep(g, [[(2, 3)], [(2, 5)], [(3, 3)], [(1, 3)]])
    assert counts(cfn) == (3, 1)
    assert guards(cfn) == ["x.shape[0] == 1"]


def test_data_dependent_ops_raise_unsupported_with_the_user_line():
    def f(x):
        x = x + torch.rand_like(x)  # a draw before the branch: it cannot be taken by speculation
        return x * 2 if x.sum().item() > 0 else x  # a branch on a value of .item() (the value itself is symbolic)

    cfn = specengine.compile(f, dynamic=True)
    with pytest.raises(specengine.UnsupportedOpError, match=r"data-dependent u0 .*test_proxies.py:\d+.*torch.where"):
        cfn(torch.randn(3))
    assert counts(cfn) == (0, 0)

    def g(x):
        return x if x > 0 else -x  # eager's error for more than one element

    with pytest.raises(RuntimeError, match="Boolean value of Tensor with more than one value is ambiguous"):
        specengine.compile(g, dynamic=True)(torch.randn(3))


def test_unknown_torch_op_raises_unsupported():
    def f(x):
        return torch.geqrf(x)  # (no meta kernel, no decomposition)

    with pytest.raises(specengine.UnsupportedOpError, match=r"torch.geqrf .*test_proxies.py"):
        specengine.compile(f, dynamic=True)(torch.randn(3, 3))
