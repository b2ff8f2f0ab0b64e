"""The needs-constant protocol: executors name values that must be constants; the solver pins the least."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import counts, guards, run_both

import specengine
from specengine.executors import Claim
from specengine.ir.symbol import Symbol


class NumelExecutor:
    """Runs reshape, but only with the input's element count known at compile time."""

    name = "numel"

    def __init__(self):
        self.claimed = 0

    def claim(self, bsym):
        if bsym.sym.print_name != "ltorch.reshape":
            return None
        self.claimed += 1
        numel = math.prod(bsym.args[0].dims)
        return Claim(Symbol("reshape", "numel_ex", impl=torch.Tensor.reshape), needs_constant=(numel,))


def flat(a):
    return a.reshape(-1) * 2


def test_request_on_a_product_pins_the_product_not_the_factors():
    ex = NumelExecutor()
    cfn = specengine.compile(flat, dynamic=True, executors=[ex, "torch"])
    for shape in [(3, 4), (4, 3), (2, 6)]:
        run_both(flat, cfn, [torch.randn(*shape)])
    assert counts(cfn) == (1, 2)
    assert guards(cfn) == ["a.shape[0]*a.shape[1] == 12"]
    (guard,) = specengine.last_guards(cfn)
    assert guard.provenance.reason == "the numel executor needs a constant"
    assert guard.provenance.op == "reshape"
    run_both(flat, cfn, [torch.randn(5, 5)])
    assert counts(cfn) == (2, 2)
    assert specengine.recompile_reasons(cfn) == [
        f"a.shape[0]*a.shape[1] == 12 (test_needs_constant.py:{guard.provenance.lineno}, reshape, the numel "
        "executor needs a constant) failed: a.shape[0] = 5, a.shape[1] = 5"
    ]
    final = str(specengine.cache_entries(cfn)[0].traces[-1])
    assert "numel_ex.reshape(a, -1)" in final
    assert 't0: "cpu f32[12]"' in final  # the pinned product is folded into the shapes


def test_without_the_executor_nothing_is_pinned():
    cfn = specengine.compile(flat, dynamic=True)
    for shape in [(3, 4), (5, 5), (0, 2)]:
        run_both(flat, cfn, [torch.randn(*shape)])
    assert counts(cfn) == (1, 2)
    assert guards(cfn) == []


def test_request_on_a_symbol_pins_it_and_folds_shape_arithmetic():
    class DimExecutor:
        name = "dim"

        def claim(self, bsym):
            if bsym.sym.print_name != "ltorch.sum":
                return None
            return Claim(Symbol("sum", "dim_ex", impl=torch.sum), needs_constant=(bsym.args[0].dims[1],))

    def f(x):
        return (x * x.shape[1]).sum(1) + x.shape[0] * x.shape[1]

    cfn = specengine.compile(f, dynamic=True, executors=[DimExecutor()])
    for shape in [(2, 3), (5, 3), (0, 3), (2, 4)]:
        run_both(f, cfn, [torch.randn(*shape)])
    assert counts(cfn) == (2, 2)
    assert guards(cfn) == ["x.shape[1] == 4"]
    final = str(specengine.last_traces(cfn)[-1])
    assert "torch.mul(x, 4)" in final and "4*s0" in final


def test_requests_in_static_mode_add_nothing():
    ex = NumelExecutor()
    cfn = specengine.compile(flat, dynamic=False, executors=[ex])
    run_both(flat, cfn, [torch.randn(3, 4)])
    assert guards(cfn) == ["a.shape[0] == 3", "a.shape[1] == 4"]
    assert specengine.cache_entries(cfn)[0].stats["z3_calls"] == 0


def test_unknown_executor_name_is_rejected():
    with pytest.raises(ValueError, match="unknown executor 'nope'"):
        specengine.compile(flat, executors=["nope"])
