"""Trace IR: printing, runnable source, CSE and DCE of shape queries, flattening, linecache."""

from __future__ import annotations

import linecache
import traceback

import pytest
import torch

import specengine
from specengine.ir import passes


def _count(trace, name: str) -> int:
    return sum(1 for b in trace.bsyms if b.sym.print_name == name)


def flat_view(a):
    return a.view(a.shape[0] * a.shape[1], a.size(2) * a.size(3))


def test_repeated_shape_queries_collapse_under_cse():
    cfn = specengine.compile(flat_view, dynamic=True)
    a = torch.randn(2, 3, 4, 5)
    torch.testing.assert_close(cfn(a), flat_view(a))
    traced, cleaned = specengine.last_traces(cfn)[:2]
    assert _count(traced, "prims.shape") == 4
    assert _count(cleaned, "prims.shape") == 1
    assert "(s0, s1, s2, s3) = prims.shape(a)" in str(cleaned)
    assert _count(traced, "prims.sym_mul") == 2


def test_cse_merges_equal_symbolic_values_from_different_queries():
    def f(a):
        x = a.shape[0] * a.shape[1]
        y = a.size(0) * a.size(1)
        return a.reshape(x) + a.reshape(y)

    cfn = specengine.compile(f, dynamic=True)
    a = torch.randn(3, 4)
    torch.testing.assert_close(cfn(a), f(a))
    traced, cleaned = specengine.last_traces(cfn)[:2]
    assert _count(traced, "prims.sym_mul") == 2 and _count(cleaned, "prims.sym_mul") == 1
    assert _count(traced, "ltorch.reshape") == 2 and _count(cleaned, "ltorch.reshape") == 1


def test_unused_shape_queries_disappear_under_dce():
    def f(a):
        _ = a.shape
        _ = a.size(0)
        return a + 1

    cfn = specengine.compile(f, dynamic=True)
    cfn(torch.randn(3))
    traced, cleaned = specengine.last_traces(cfn)[:2]
    assert _count(traced, "prims.shape") == 2
    assert _count(cleaned, "prims.shape") == 0
    assert cleaned.provenance == "Dead Code Elimination"


def test_passes_are_pure():
    cfn = specengine.compile(flat_view, dynamic=True)
    cfn(torch.randn(2, 3, 4, 5))
    traced = specengine.last_traces(cfn)[0]
    before = str(traced)
    bsyms = traced.bsyms
    passes.dce(passes.cse(traced))
    passes.flatten(traced)
    assert str(traced) == before and traced.bsyms is bsyms


def test_type_comments_and_source_lines():
    def f(a, b):
        return a + b

    cfn = specengine.compile(f, dynamic=True)
    cfn(torch.randn(3, 4), torch.randn(4))
    text = str(specengine.last_traces(cfn)[0])
    assert '# a: "cpu f32[s0, s1]"' in text
    assert '# b: "cpu f32[s2]"' in text
    assert "test_trace.py:" in text and "return a + b" in text
    assert "# Constructed by Tracing" in text
    assert text.index("return a + b") < text.index("ltorch.add(a, b)")


@pytest.mark.parametrize("stage", [0, 1])
def test_every_printed_trace_runs(stage):
    def f(x, w, n):
        h = (x @ w).tanh()
        return h[:n].sum(0) * h.shape[1] - x.mean()

    cfn = specengine.compile(f, dynamic=True)
    x, w = torch.randn(5, 3), torch.randn(3, 4)
    out = cfn(x, w, 2)
    torch.testing.assert_close(out, f(x, w, 2))
    ns: dict = {}
    exec(str(specengine.last_traces(cfn)[stage]), ns)
    torch.testing.assert_close(ns["computation"](x, w, 2), out)


def test_flattened_trace_runs_with_prims_only():
    def f(a, b):
        return ((a + b).relu() * 2).sum(1, keepdim=True) / a.shape[0]

    cfn = specengine.compile(f, dynamic=True)
    a, b = torch.randn(3, 4), torch.randn(1, 4)
    out = cfn(a, b)
    specialized = next(t for t in specengine.last_traces(cfn) if t.provenance.startswith("Specialization"))
    flat = passes.flatten(specialized)  # prims take sizes as expressions over the prologue's symbols
    assert all(b.sym.is_prim for b in flat.bsyms)
    assert "prims.broadcast_in_dim(b, ((s2 if s0 == 1 else s0), (s3 if s1 == 1 else s1)), (0, 1))" in str(flat)
    assert [p.name for p in flat.params] == ["a", "b", "s0", "s1", "s2", "s3"]
    torch.testing.assert_close(flat.python_callable()(a, b, 3, 4, 1, 4), out)


def test_generated_code_shows_in_tracebacks():
    def f(a, b):
        return a @ b

    cfn = specengine.compile(f, dynamic=True)
    cfn(torch.randn(2, 3), torch.randn(3, 2))
    computation = specengine.cache_entries(cfn)[0].computation
    filename = computation.__code__.co_filename
    assert filename.startswith("<specengine-computation")
    assert "torch.matmul(a, b)" in "".join(linecache.getlines(filename))
    with pytest.raises(RuntimeError) as info:
        computation(torch.randn(2, 3), torch.randn(4, 2))
    assert "torch.matmul(a, b)" in "".join(traceback.format_tb(info.tb))
    prologue = specengine.last_prologue(cfn)
    assert "".join(linecache.getlines(prologue.fn.__code__.co_filename)) == str(prologue)


def test_bound_symbols_keep_decomposition_as_subsymbols():
    def f(a, b):
        return a * b

    cfn = specengine.compile(f, dynamic=True)
    cfn(torch.randn(3, 1), torch.randn(4))
    (mul,) = [b for b in specengine.last_traces(cfn)[0].bsyms if b.sym.print_name == "ltorch.mul"]
    assert [s.sym.print_name for s in mul.subsymbols] == [
        "prims.broadcast_in_dim",
        "prims.broadcast_in_dim",
        "prims.mul",
    ]
