"""The foundation scenarios: every output against eager, with exact hit and miss counts."""

from __future__ import annotations

import pytest
import torch
from helpers import counts, guards, run_both, sweep

import specengine


def seed(a, b):
    return a * b.size(0)


def test_seed_one_miss_and_trace_shows_shape_query():
    calls = [[(2, 2), (1, 2)]] + [[(n, 2), (n, 2)] for n in range(3, 7)]
    cfn = sweep(seed, calls)
    assert counts(cfn) == (1, 4)
    first = str(specengine.last_traces(cfn)[0])
    assert "(s2, _) = prims.shape(b)" in first
    assert "t0 = ltorch.mul(a, s2)" in first
    assert "return a * b.size(0)" in first  # the user's source line
    prologue = str(specengine.last_prologue(cfn))
    assert "b_shape = b.shape" in prologue and "s2 = b_shape[0]" in prologue
    assert guards(cfn) == []


def test_seed_trace_is_runnable_python():
    cfn = specengine.compile(seed, dynamic=True)
    a, b = torch.randn(2, 2), torch.randn(1, 2)
    out = cfn(a, b)
    for trace in specengine.last_traces(cfn)[:2]:
        namespace: dict = {}
        exec(str(trace), namespace)
        torch.testing.assert_close(namespace["computation"](a, b), out)
    final = specengine.last_traces(cfn)[-1]
    namespace = {}
    exec(str(final), namespace)
    torch.testing.assert_close(namespace["computation"](a, b, 1), out)
    torch.testing.assert_close(final.python_callable()(*specengine.last_prologue(cfn).fn(a, b)), out)


def branch(a):
    return a * 2 if a.shape[0] > 2 else a * 3


def test_branch_guard_is_the_predicate():
    cfn = specengine.compile(branch, dynamic=True)
    seen = []
    for n in (4, 5, 1, 2, 7):
        run_both(branch, cfn, [torch.randn(n)])
        seen.append(guards(cfn))
    assert counts(cfn) == (2, 3)
    assert seen[0] == ["a.shape[0] > 2"]
    assert seen[2] == ["not a.shape[0] > 2"] or seen[2] == ["a.shape[0] <= 2"]
    assert all("4" not in g for g in seen[0])


def test_int_input_is_symbolic():
    def f(x, n):
        return x * n

    cfn = sweep(f, [[(3,), 2], [(3,), 3], [(3,), 4]])
    assert counts(cfn) == (1, 2)
    assert guards(cfn) == []


def test_loop_over_symbolic_int_is_correct():
    def f(x, n):
        for i in range(n):
            x = x + i
        return x

    cfn = sweep(f, [[(3,), 2], [(3,), 3], [(3,), 2]])
    assert counts(cfn) == (2, 1)
    assert guards(cfn) == ["n == 2"]


def test_view_with_shape_products_has_no_numel_guard():
    def f(a):
        return a.view(a.shape[0] * a.shape[1], a.shape[2] * a.shape[3])

    cfn = sweep(f, [[(2, 3, 4, 5)], [(1, 2, 3, 4)], [(3, 3, 1, 2)]])
    assert counts(cfn) == (1, 2)
    assert guards(cfn) == []


def test_reshape_minus_one_then_eager_error_then_hits():
    def f(a):
        return a.reshape(-1, 4)

    cfn = sweep(f, [[(2, 8)], [(3, 8)], [(5, 4)], [(0, 8)], [(1, 4)], [(2, 2)]])
    assert counts(cfn) == (1, 5)
    assert guards(cfn) == ["a.shape[0]*a.shape[1]%4 == 0"]  # the divisibility is the only guard
    with pytest.raises(RuntimeError, match=r"shape '\[-1, 4\]' is invalid for input of size 6"):
        cfn(torch.randn(3, 2))
    assert counts(cfn) == (1, 5)  # the failed compile left the cache as it was
    assert len(specengine.cache_entries(cfn)) == 1
    sweep_calls = [[(2, 8)], [(3, 8)]]
    for call in sweep_calls:
        run_both(f, cfn, [torch.randn(*call[0])])
    assert counts(cfn) == (1, 7)


def test_matmul_inner_dims_become_one_class():
    def f(a, b):
        return a @ b

    cfn = sweep(f, [[(2, 3), (3, 4)], [(5, 6), (6, 7)], [(1, 0), (0, 2)]])
    assert counts(cfn) == (1, 2)
    assert guards(cfn) == ["b.shape[0] == a.shape[1]"]
    final = str(specengine.last_traces(cfn)[-1])
    assert 'b: "cpu f32[s1, s3]"' in final  # the class representative replaces s2 everywhere


def test_sizes_zero_and_one_are_not_specialized():
    def f(x):
        return (x * 2).sum(0)

    cfn = sweep(f, [[(5,)], [(1,)], [(0,)], [(7,)]])
    assert counts(cfn) == (1, 3)
    assert guards(cfn) == []


def test_static_mode_pins_every_size():
    def f(x):
        return (x * 2).sum(0)

    cfn = sweep(f, [[(2,)], [(3,)], [(2,)], [(3,)]], dynamic=False)
    assert counts(cfn) == (2, 2)
    assert guards(cfn) == ["x.shape[0] == 3"]
    assert "sum" in str(specengine.last_traces(cfn)[-1])


def test_wrong_arity_raises_type_error_like_python():
    cfn = specengine.compile(seed, dynamic=True)
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'b'"):
        cfn(torch.randn(2, 2))
    cfn(torch.randn(2, 2), torch.randn(1, 2))
    with pytest.raises(TypeError, match="takes 2 positional arguments but 3 were given"):
        cfn(torch.randn(2, 2), torch.randn(1, 2), 3)
    assert counts(cfn) == (1, 0)


def test_non_tensor_where_a_tensor_was_traced():
    cfn = specengine.compile(seed, dynamic=True)
    cfn(torch.randn(2, 2), torch.randn(1, 2))
    run_both(seed, cfn, [None, torch.randn(1, 2)])
    assert counts(cfn) == (1, 0)  # eager's TypeError; nothing cached
    run_both(seed, cfn, [[1, 2], torch.randn(1, 2)])  # list repetition: a program of its own
    assert counts(cfn) == (2, 0)
    assert specengine.recompile_reasons(cfn) == ["type(a) is Tensor failed: type(a) = list"]


def test_dtype_and_requires_grad_changes_get_new_entries():
    cfn = specengine.compile(seed, dynamic=True)
    a, b = torch.randn(2, 2), torch.randn(1, 2)
    run_both(seed, cfn, [a, b])
    run_both(seed, cfn, [a.double(), b])
    run_both(seed, cfn, [a.clone().requires_grad_(), b])
    run_both(seed, cfn, [a, b])
    assert counts(cfn) == (3, 1)
    reasons = specengine.recompile_reasons(cfn)
    assert reasons[0] == "a.dtype is torch.float32 failed: a.dtype = torch.float64"
    assert "a.requires_grad is False failed: a.requires_grad = True" in reasons[1]


def test_grad_mode_change_gets_a_new_entry():
    cfn = specengine.compile(seed, dynamic=True)
    a, b = torch.randn(2, 2, requires_grad=True), torch.randn(1, 2)
    out = cfn(a, b)
    assert out.requires_grad
    with torch.no_grad():
        out = run_both(seed, cfn, [a, b])
        assert not out.requires_grad
    assert counts(cfn) == (2, 0)
    assert "torch.is_grad_enabled() is True failed" in specengine.recompile_reasons(cfn)[0]


def test_gradients_match_eager():
    def f(x, w):
        return ((x @ w).tanh() * x.shape[0]).sum()

    cfn = specengine.compile(f, dynamic=True)
    for n in (1, 3):
        x, w = torch.randn(n, 4, requires_grad=True), torch.randn(4, 2, requires_grad=True)
        cfn(x, w).backward()
        gx, gw = x.grad, w.grad
        x.grad = w.grad = None
        f(x, w).backward()
        torch.testing.assert_close(gx, x.grad)
        torch.testing.assert_close(gw, w.grad)
    assert counts(cfn) == (1, 1)


def test_recompile_reason_names_guard_source_and_values():
    cfn = specengine.compile(branch, dynamic=True)
    cfn(torch.randn(4))
    cfn(torch.randn(1))
    (reason,) = specengine.recompile_reasons(cfn)
    assert reason.startswith("a.shape[0] > 2 (test_scenarios.py:")
    assert reason.endswith("failed: a.shape[0] = 1")


def test_decorator_forms():
    @specengine.compile
    def f(x):
        return x + 1

    @specengine.compile(dynamic=False)
    def g(x):
        return x + 1

    x = torch.randn(3)
    torch.testing.assert_close(f(x), x + 1)
    torch.testing.assert_close(g(x), x + 1)
    assert counts(f) == (1, 0) and counts(g) == (1, 0)
