"""Prologues: check order, constants, pytrees, defaults, default dtype, explanations."""

from __future__ import annotations

import pytest
import torch
from helpers import counts, guards, run_both

import specengine


def test_check_order_in_static_mode():
    def f(a, b):
        return a + b

    cfn = specengine.compile(f, dynamic=False)
    cfn(torch.randn(2, 3), torch.randn(3))
    src = str(specengine.last_prologue(cfn))
    assert src.startswith("# Constructed by Prologue generation\ndef f(a, b):")
    order = ["type(a) is not _Tensor", "a.dtype is not _float32", "not a.is_cpu", "a.ndim != 2", "a.requires_grad",
             "type(b) is not _Tensor", "b.requires_grad", "a_shape = a.shape", "a_shape[0] != 2", "b_shape[0] != 3",
             "not _is_grad_enabled()"]  # fmt: skip
    positions = [src.index(x) for x in order]
    assert positions == sorted(positions)
    assert guards(cfn) == ["a.shape[0] == 2", "a.shape[1] == 3", "b.shape[0] == 3"]


def test_default_dtype_is_guarded_only_when_the_trace_depends_on_it():
    def uses(x):
        return x * 0.5

    def ignores(x):
        return x * 2

    cu, ci = specengine.compile(uses, dynamic=True), specengine.compile(ignores, dynamic=True)
    x = torch.arange(4)
    run_both(uses, cu, [x])
    run_both(ignores, ci, [x])
    assert "get_default_dtype" in str(specengine.last_prologue(cu))
    assert "get_default_dtype" not in str(specengine.last_prologue(ci))
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        out = run_both(uses, cu, [x])
        assert out.dtype is torch.float64
        run_both(ignores, ci, [x])
    finally:
        torch.set_default_dtype(old)
    assert counts(cu) == (2, 0) and counts(ci) == (1, 1)
    assert specengine.recompile_reasons(cu) == [
        "torch.get_default_dtype() is torch.float32 failed: torch.get_default_dtype() = torch.float64"
    ]


def test_python_constants_are_guarded_by_value():
    def f(x, scale, mode, flag, nothing):
        y = x * scale if mode == "mul" else x + scale
        return y if flag and nothing is None else -y

    cfn = specengine.compile(f, dynamic=False)  # floats are constants here; see the next test for dynamic=True
    x = torch.randn(3)
    calls = [
        [x, 0.5, "mul", True, None],
        [x, 0.5, "mul", True, None],
        [x, 1.5, "mul", True, None],
        [x, 0.5, "add", True, None],
        [x, 0.5, "mul", False, None],
        [x, 0.5, "mul", True, 3],
    ]
    for call in calls:
        run_both(f, cfn, call)
    assert counts(cfn) == (5, 1)
    reasons = specengine.recompile_reasons(cfn)
    assert reasons[0] == "scale == 0.5 failed: scale = 1.5"
    assert reasons[1].startswith("mode == 'mul' failed: mode = 'add'")


def test_floats_are_symbolic_under_dynamic_true_with_predicate_guards():
    # Thunder's scenario: its "symbolic values" cache returns wrong results here; two entries are needed.
    def f(x, s):
        return x * 2 if s > 0 else x * s

    cfn = specengine.compile(f, dynamic=True)
    for s in (1.5, 2.0, 1.5, -0.3):
        run_both(f, cfn, [torch.randn(3), s])
    assert counts(cfn) == (2, 2)
    assert guards(cfn) == ["not (s > 0)"]  # not "s <= 0": NaN fails s > 0 and s <= 0 alike
    assert "torch.mul(x, s)" in str(specengine.last_traces(cfn)[-1])  # s is an input of the computation
    run_both(f, cfn, [torch.randn(3), 2])  # an int where a float was traced: an entry of its own
    assert counts(cfn) == (3, 2)


def test_float_arithmetic_is_computed_at_run_time():
    def f(x, s):
        return x * (s * 2 + x.shape[0]) + s / 3

    cfn = specengine.compile(f, dynamic=True)
    for s, n in ((1.5, 3), (-2.25, 5), (0.0, 0)):
        run_both(f, cfn, [torch.randn(n), s])
    assert counts(cfn) == (1, 2)
    assert guards(cfn) == []


def test_pytree_inputs_lists_tuples_dicts():
    def f(xs, d):
        return xs[0] * d["w"] + xs[1].sum() * len(xs)

    cfn = specengine.compile(f, dynamic=True)
    for n in (2, 5, 1):
        run_both(f, cfn, [[torch.randn(n), torch.randn(3)], {"w": torch.randn(n)}])
    assert counts(cfn) == (1, 2)
    run_both(f, cfn, [[torch.randn(2), torch.randn(3), torch.randn(1)], {"w": torch.randn(2)}])
    run_both(f, cfn, [(torch.randn(2), torch.randn(3)), {"w": torch.randn(2)}])
    assert counts(cfn) == (3, 2)
    assert specengine.recompile_reasons(cfn) == [
        "len(xs) == 2 failed: len(xs) = 3",
        "type(xs) is list failed: type(xs) = tuple\ntype(xs) is list failed: type(xs) = tuple",  # one line per entry
    ]


def test_defaults_keywords_and_varargs():
    def f(x, scale=2, *rest, bias=None, **extra):
        y = x * scale
        for r in rest:
            y = y + r
        if bias is not None:
            y = y + bias
        return y * extra.get("gain", 1)

    cfn = specengine.compile(f, dynamic=True)
    x = torch.randn(3)
    run_both(f, cfn, [x])
    run_both(f, cfn, [x, 3])
    cfn(x, 3, bias=x)
    torch.testing.assert_close(cfn(x, 3, bias=x), f(x, 3, bias=x))
    torch.testing.assert_close(cfn(x, 4, x, x, gain=2), f(x, 4, x, x, gain=2))
    assert counts(cfn) == (3, 2)
    with pytest.raises(TypeError, match="got multiple values for argument 'x'"):
        cfn(x, x=x)


def test_explain_reports_first_failing_check_with_values():
    def f(a, b):
        return a @ b

    cfn = specengine.compile(f, dynamic=True)
    cfn(torch.randn(2, 3), torch.randn(3, 4))
    prologue = specengine.last_prologue(cfn)
    assert prologue.explain((torch.randn(5, 3), torch.randn(3, 1)), {}) is None
    msg = prologue.explain((torch.randn(2, 3), torch.randn(4, 4)), {})
    assert msg.startswith("b.shape[0] == a.shape[1] (test_prologue.py:")
    assert "matmul, inner dims must match) failed: a.shape[1] = 3, b.shape[0] = 4" in msg
    assert prologue.explain((torch.randn(2, 3, 1), torch.randn(3, 4)), {}) == "a.ndim == 2 failed: a.ndim = 3"


def test_autocast_state_is_guarded():
    def f(a, b):
        return a @ b

    cfn = specengine.compile(f, dynamic=True)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    run_both(f, cfn, [a, b])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = run_both(f, cfn, [a, b])
        assert out.dtype is torch.bfloat16
        run_both(f, cfn, [a, b])
    run_both(f, cfn, [a, b])
    assert counts(cfn) == (2, 2)
    assert specengine.recompile_reasons(cfn) == ["autocast is disabled failed: autocast enabled = True"]


def test_inputs_are_flattened_with_torch_pytree():
    import collections

    Pair = collections.namedtuple("Pair", "x y")

    def f(p, od, nothing):
        return p.x * od["w"] + p.y.sum() if nothing is None else p.x

    cfn = specengine.compile(f, dynamic=True)
    for n in (2, 5):
        run_both(f, cfn, [Pair(torch.randn(n), torch.randn(3)), collections.OrderedDict(w=torch.randn(n)), None])
    assert counts(cfn) == (1, 1)
    run_both(f, cfn, [Pair(torch.randn(2), torch.randn(3)), {"w": torch.randn(2)}, None])  # a dict, not an OrderedDict
    assert counts(cfn) == (2, 1)
    assert "p_x = p.x" in str(specengine.last_prologue(cfn)) and "od_w = od['w']" in str(specengine.last_prologue(cfn))
