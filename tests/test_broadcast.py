"""Symbolic broadcasting: no guard unless an executor needs the decision."""

from __future__ import annotations

import pytest
import torch
from helpers import counts, guards, run_both, sweep

import specengine
from specengine.constraints import expr as E
from specengine.executors import Claim
from specengine.ir.symbol import Symbol


def add_sum(a, b):
    return (a + b).sum(0)


def test_changing_broadcasts_share_one_entry():
    calls = [[(1, 3), (4, 3)], [(4, 3), (1, 3)], [(5, 3), (5, 3)], [(1, 3), (1, 3)]]
    cfn = sweep(add_sum, calls)
    assert counts(cfn) == (1, 3)
    assert guards(cfn) == []
    final = specengine.last_traces(cfn)[-1]
    assert 'f32[(s2 if s0 == 1 else s0), (s3 if s1 == 1 else s1)]"' in str(final)


def test_sizes_zero_one_two_broadcast_without_guards():
    cfn = sweep(add_sum, [[(0, 2), (1, 2)], [(1, 1), (2, 1)], [(2, 0), (2, 1)], [(2, 2), (2, 2)], [(1, 0), (0, 1)]])
    assert counts(cfn) == (1, 4)
    assert guards(cfn) == []


def test_incompatible_pair_raises_eagers_error_at_trace_and_at_run_time():
    cfn = specengine.compile(add_sum, dynamic=True)
    with pytest.raises(RuntimeError, match=r"The size of tensor a \(2\) must match the size of tensor b \(4\)"):
        cfn(torch.randn(2, 3), torch.randn(4, 3))
    assert counts(cfn) == (0, 0)
    run_both(add_sum, cfn, [torch.randn(1, 3), torch.randn(4, 3)])
    with pytest.raises(RuntimeError, match=r"The size of tensor a \(2\) must match the size of tensor b \(4\)"):
        cfn(torch.randn(2, 3), torch.randn(4, 3))  # served by the entry: the torch op raises
    assert counts(cfn) == (1, 1)  # a hit whose computation raised, as eager does


def test_chain_of_broadcasts_then_reshape():
    def f(a, b, c):
        return ((a * b) + c).reshape(-1).sum() + (a * b * c).reshape(a.shape[0], -1).mean(1).sum()

    calls = [
        [(2, 1, 3), (1, 4, 1), (2, 4, 3)],
        [(1, 1, 1), (3, 2, 1), (1, 1, 5)],
        [(2, 2, 2), (2, 2, 2), (2, 2, 2)],
        [(1, 0, 2), (3, 1, 1), (1, 1, 2)],
    ]
    cfn = sweep(f, calls)
    assert counts(cfn) == (1, 3)
    assert guards(cfn) == ["a.shape[0] != 0"]  # reshape(n, -1) is ambiguous for n == 0; nothing else


def test_deep_broadcast_guards_that_a_size_is_not_1():
    """Past two nested ifs a broadcast is decided by one guard: the deeper size is not 1 (the other may be 1 or
    equal: the op checks that at run time), so a size-1 operand later in the chain needs no recompile."""

    def f(x, a, b, c):
        return ((x + a) + b) + c

    calls = [[(2, 4)] * 4, [(3, 5), (3, 5), (3, 5), (3, 1)], [(3, 5), (1, 5), (3, 1), (1, 1)], [(0, 2)] * 4]
    cfn = sweep(f, calls + [[(1, 1), (1, 1), (1, 1), (2, 4)], [(2, 4), (2, 4), (2, 4), (3, 4)]])
    assert counts(cfn) == (2, 4)  # the last call raises eager's error in the first entry's computation
    first = [str(g) for g in specengine.cache_entries(cfn)[0].guards]
    assert len(first) == 2 and all(g.endswith(" != 1") and "c.shape" not in g for g in first)
    assert [str(g) for g in specengine.cache_entries(cfn)[1].guards] == ["c.shape[0] != 1", "c.shape[1] != 1"]


class BroadcastExecutor:
    """Runs elementwise adds only when it knows at compile time which dims broadcast."""

    name = "bcast"

    def claim(self, bsym):
        if bsym.sym.print_name != "ltorch.add":
            return None
        needs = tuple(E.eq(d, 1) for t in bsym.args if hasattr(t, "dims") for d in t.dims if not d.is_const)
        return Claim(Symbol("add", "bcast_ex", impl=torch.add), needs_constant=needs)


def test_an_executor_that_needs_the_decision_gets_guards():
    cfn = specengine.compile(add_sum, dynamic=True, executors=[BroadcastExecutor()])
    calls = [[(1, 3), (4, 3)], [(1, 5), (7, 5)], [(4, 3), (1, 3)], [(5, 3), (5, 3)], [(1, 3), (1, 3)]]
    for a, b in calls:
        run_both(add_sum, cfn, [torch.randn(*a), torch.randn(*b)])
    assert counts(cfn) == (4, 1)
    first = sorted(str(g) for g in specengine.cache_entries(cfn)[0].guards)
    assert first == ["a.shape[0] == 1", "a.shape[1] != 1", "b.shape[0] != 1", "b.shape[1] != 1"]
    final = str(specengine.cache_entries(cfn)[0].traces[-1])
    assert "if" not in final.split("def computation")[1]  # the decisions folded the If-dims away
