"""One test per engine bug found by the fuzzer (tests/test_fuzz.py, bench/fuzz.py) or the reliability tests."""

from __future__ import annotations

import collections
import gc
import linecache

import pytest
import torch
from helpers import counts, guards, run_both

import specengine


def test_matmul_of_mixed_dtypes_with_an_empty_result_returns_like_eager():
    # Eager's bmm path returns early (in b's dtype) when the result or the contraction is empty; the engine used to
    # raise for every pair of dtypes (fuzzer, ltorch.py:_mixed_dtypes).
    def f(a, b):
        return a @ b

    cfn = specengine.compile(f, dynamic=True)
    f32, f64 = torch.float32, torch.float64
    for sa, sb in [((0, 2, 3), (0, 3, 4)), ((2, 2, 0), (2, 0, 3)), ((2, 3), (2, 3, 0)), ((2, 2, 3), (2, 3, 4))]:
        out = run_both(f, cfn, [torch.randn(*sa, dtype=f32), torch.randn(*sb, dtype=f64)])
        if isinstance(out, torch.Tensor):
            assert out.dtype is f64
    run_both(f, cfn, [torch.randn(0, 2, 3, dtype=f32), torch.randn(3, 4, dtype=f64)])  # the folded path raises


def test_an_implicit_pin_pins_every_member_of_the_class():
    # `s1 == s0`, then `s0 <= 2` and `s0 > 1` pin s0 to 2 through z3; s1 stayed "equal to s0" while s0 was no longer
    # read by the prologue: NameError at the first call (fuzzer, solver.py:Solver._solve).
    def f(x):
        y = x @ x
        if y.shape[1] <= 2:
            y = y.abs()
        if x.shape[0] <= 1:
            return y.tanh(), 5 // y.numel()
        return y - 1.5, 5 // y.numel()

    cfn = specengine.compile(f, dynamic=True)
    run_both(f, cfn, [torch.randn(2, 2)])
    assert guards(cfn) == ["x.shape[0] == 2", "x.shape[1] == 2"]
    run_both(f, cfn, [torch.randn(3, 3)])
    assert counts(cfn) == (2, 0)


def test_an_unused_broadcast_still_raises_like_eager():
    # Broadcasts are unguarded (the op raises at run time), but dead-code elimination dropped an unused one, so the
    # compiled function returned where eager raised (fuzzer, passes.py:dce, context.py:TraceState.may_raise).
    def f(x, y):
        unused = x + y  # noqa: F841 - eager raises here for sizes that do not broadcast
        return x * 2, (x + y).shape[0]

    cfn = specengine.compile(f, dynamic=True)
    for a, b in [(3, 3), (3, 2), (2, 1), (4, 4), (0, 5)]:
        run_both(f, cfn, [torch.randn(a), torch.randn(b)])
    assert counts(cfn) == (1, 4)
    assert "torch.add(x, y)" in str(specengine.last_traces(cfn)[-1])


def test_inplace_op_on_a_closed_over_tensor_runs_on_every_call():
    # It crashed with AttributeError ('Tensor' object has no attribute 'dims'); then it was refused. A tensor closed
    # over from outside is now an input (prologue/state.py), so the in-place op runs on every call, as in eager.
    buf = torch.zeros(3)

    def f(a):
        buf.add_(a)
        return a * 2

    def g(a):
        buf.zero_()
        return a * 2

    for fn in (f, g):
        cfn = specengine.compile(fn, dynamic=True)
        for _ in range(2):
            torch.testing.assert_close(cfn(torch.ones(3)), torch.ones(3) * 2)
        assert counts(cfn) == (1, 1)
        expected = torch.full((3,), 2.0) if fn is f else torch.zeros(3)
        torch.testing.assert_close(buf, expected)


@pytest.mark.parametrize(
    ("fn", "what"),
    [
        (lambda a: (a * i for i in range(2)), "returning a generator"),
        (lambda a: {1, 2}, "returning a set"),
        (lambda a: (a, type("Made", (), {})), "returning a type"),  # (a class the call made; a named one is returned)
    ],
)
def test_unsupported_outputs_are_rejected_clearly(fn, what):
    # They raised TypeError("cannot print ... in a trace") from the trace printer (interpreter.py:_check_output).
    cfn = specengine.compile(fn, dynamic=True)
    with pytest.raises(specengine.UnsupportedOpError, match=what):
        cfn(torch.ones(3))
    assert counts(cfn) == (0, 0)


def test_a_generator_function_is_rejected_clearly():
    # It raised TypeError("cannot print generator value ...") (interpreter.py:_check_function).
    def gen(a):
        yield a * 2

    cfn = specengine.compile(gen, dynamic=True)
    with pytest.raises(specengine.UnsupportedOpError, match=r"a generator function .*test_regressions.py:\d+"):
        cfn(torch.ones(3))
    assert counts(cfn) == (0, 0)


def test_operand_type_errors_name_python_types_not_proxies():
    # `None * a.size(0)` said "... 'NoneType' and 'NumberProxy'" (proxies.py:_number_binary).
    def f(a, b):
        return a * b.size(0)

    cfn = specengine.compile(f, dynamic=True)
    with pytest.raises(TypeError, match=r"(?m)unsupported operand type\(s\) for \*: 'NoneType' and 'int'$") as info:
        cfn(None, torch.ones(2))
    assert counts(cfn) == (0, 0)
    assert str(info.value) == "unsupported operand type(s) for *: 'NoneType' and 'int'"  # eager's message
    assert info.value.__notes__ == ["(specengine: raised while tracing, at test_regressions.py:115)"]  # the user's line


def test_a_failed_compile_does_not_mark_sizes_dynamic():
    # Under dynamic=None, a call whose compile failed still recorded its sizes as "changed", so a later recompile
    # made them symbolic: the failed compile changed the cache's state (api.py:CompiledFunction._compile).
    def f(x, n):
        return x.reshape(2, -1) * n

    cfn = specengine.compile(f)
    run_both(f, cfn, [torch.randn(2), 1])
    run_both(f, cfn, [torch.randn(3), 1])  # eager's RuntimeError; the compile fails
    run_both(f, cfn, [torch.randn(2), 2])  # n changed: it becomes symbolic; x.shape[0] did not change
    assert counts(cfn) == (2, 0)
    assert "x.shape[0] == 2" in guards(cfn)


def test_recursion_through_the_compiled_function_is_traced_through():
    # The recursive call hit the CompiledFunction while tracing, which started a nested compile on proxies and
    # crashed with KeyError (api.py:CompiledFunction._miss).
    @specengine.compile(dynamic=True)
    def power(a, n):
        return a if n <= 0 else power(a * 2, n - 1)

    x = torch.randn(3)
    torch.testing.assert_close(power(x, 3), x * 8)
    torch.testing.assert_close(power(torch.ones(5), 3), torch.full((5,), 8.0))
    torch.testing.assert_close(power(x, 2), x * 4)
    assert counts(power) == (2, 1)


def test_formatting_a_size_pins_it():
    # f"{a.shape[0]}" and str(n) gave '<NumberProxy s0: int s0>': a silently wrong result
    # (proxies.py:NumberProxy.__format__, __str__).
    def f(a, n):
        return a * 2, f"{a.shape[0]}:{n:>3}", str(n > 1)

    cfn = specengine.compile(f, dynamic=True)
    for size, n in [(3, 2), (3, 2), (4, 2), (3, 0)]:
        a = torch.randn(size)
        assert cfn(a, n)[1:] == f(a, n)[1:]
    assert counts(cfn) == (3, 1)


def test_formatting_a_tensor_is_rejected():
    cfn = specengine.compile(lambda a: (a, f"{a}"), dynamic=True)
    with pytest.raises(specengine.UnsupportedOpError, match=r"format\(Tensor\)"):
        cfn(torch.ones(2))


def test_a_namedtuple_output_keeps_its_type():
    # The trace printed it as a plain tuple (api.py:_with_output_types).
    Pair = collections.namedtuple("Pair", "first second")

    def f(a):
        return {"p": Pair(a * 2, a.shape[0])}

    cfn = specengine.compile(f, dynamic=True)
    for n in (2, 3):
        out = run_both(f, cfn, [torch.randn(n)])
        assert type(out["p"]) is Pair and out["p"].second == n


def test_generated_sources_leave_linecache_with_their_functions():
    # Every compile registered its generated sources in linecache for good: a leak in long-running processes
    # (codegen.py:exec_source).
    def f(a):
        return a + 1

    before = {k for k in linecache.cache if k.startswith("<specengine-")}
    cfn = specengine.compile(f, dynamic=False)
    for n in range(5):
        cfn(torch.randn(n))
    assert len({k for k in linecache.cache if k.startswith("<specengine-")} - before) >= 5
    del cfn
    gc.collect()
    assert {k for k in linecache.cache if k.startswith("<specengine-")} - before == set()


SCALE = 2


def _double(x):
    return x * 2


def _scaled(a):
    return _double(a) * SCALE


def test_a_changed_global_or_closure_variable_gets_a_new_entry():
    # A global (or closure variable) that the trace read was baked in: after `SCALE = 3` the cached entry still
    # multiplied by 2, a silently wrong result (effects.py:captured_values, build.py:_captured_checks).
    global SCALE, _double
    cfn = specengine.compile(_scaled, dynamic=True)
    x = torch.ones(2)
    old_scale, old_double = SCALE, _double
    try:
        torch.testing.assert_close(cfn(x), x * 4)
        SCALE = 3
        torch.testing.assert_close(cfn(x), x * 6)
        _double = lambda v: v * 5  # noqa: E731 - rebinding a helper function
        torch.testing.assert_close(cfn(x), x * 15)
        SCALE, _double = old_scale, old_double
        torch.testing.assert_close(cfn(x), x * 4)
    finally:
        SCALE, _double = old_scale, old_double
    assert (specengine.cache_misses(cfn), specengine.cache_hits(cfn)) == (3, 1)  # the first entry serves again
    assert specengine.recompile_reasons(cfn)[0] == "global SCALE == 2 failed: global SCALE = 3"

    def make(k):
        def g(a):
            return a * k

        def set_k(v):
            nonlocal k
            k = v

        return g, set_k

    g, set_k = make(4)
    cg = specengine.compile(g, dynamic=True)
    torch.testing.assert_close(cg(x), x * 4)
    set_k(7)
    torch.testing.assert_close(cg(x), x * 7)
    assert counts(cg) == (2, 0)


def test_cse_does_not_merge_a_tensor_that_is_mutated_later():
    # `v1 = x.tanh(); v2 = x.tanh(); v1.sub_(2)`: CSE made v2 the same tensor as v1, so the in-place op changed v2
    # too (fuzzer, program 8551 of seed 0; passes.py:cse, _maybe_mutated).
    def f(x):
        v1 = x.tanh()
        v2 = x.tanh()
        v3 = v1.reshape(-1)
        v1.sub_(2)
        return v3 @ v3, v2

    for dynamic in (True, False, None):
        cfn = specengine.compile(f, dynamic=dynamic)
        for shape in [(), (3,), (0,)]:
            run_both(f, cfn, [torch.randn(shape)])


def test_a_guard_that_divides_rejects_a_zero_divisor_instead_of_raising():
    # The solver dropped `s0*s2 != 0` as implied by a guard dividing by s0*s2 (z3 leaves x // 0 unspecified), so the
    # prologue raised ZeroDivisionError where eager raises its reshape error (fuzzer, programs 5401, 6817 and 8352
    # of seed 0; build.py:_fail_source, expr.py:divisors).
    def f(x):
        v = x.reshape(x.shape[0] * x.shape[-1], -1)
        return v.sum(0) if v.numel() != 3 else v.mean(0)

    cfn = specengine.compile(f, dynamic=True)
    for shape in [(1, 1, 3), (7, 7, 0), (1, 1, 3), (2, 2, 2)]:
        run_both(f, cfn, [torch.randn(shape)])
    assert counts(cfn) == (2, 1)  # (the -1 is s0*s1*s2 // (s0*s2), exactly s1 since issue 25: no guard divides)
    assert "%" not in str(specengine.cache_entries(cfn)[0].prologue)

    def g(x):  # a divisor that is no factor of numel: the guard divides
        v = x.reshape(x.shape[0] + x.shape[-1], -1)
        return v.sum(0) if v.numel() != 3 else v.mean(0)

    cfn = specengine.compile(g, dynamic=True)
    for shape in [(1, 4, 3), (0, 5, 0), (1, 4, 3), (2, 3, 2)]:
        run_both(g, cfn, [torch.randn(shape)])
    assert counts(cfn) == (1, 2)
    assert "s0 + s2 == 0 or " in str(specengine.cache_entries(cfn)[0].prologue)


def test_unused_op_checked_on_example_sizes_still_raises_like_eager():
    # narrow's bounds are checked on the example sizes (no guard): the op must survive dead-code elimination
    # so that for other sizes the torch op raises eager's error.
    def f(a, b):
        torch.narrow(a, 0, 0, b.shape[0])
        return a * 2

    cfn = specengine.compile(f, dynamic=True)
    a, b = torch.randn(5), torch.randn(3)
    torch.testing.assert_close(cfn(a, b), f(a, b))
    with pytest.raises(RuntimeError):
        f(torch.randn(2), torch.randn(3))
    with pytest.raises(RuntimeError):
        cfn(torch.randn(2), torch.randn(3))
    assert specengine.cache_misses(cfn) == 1


@pytest.mark.parametrize("n", [0, 1, 2])
def test_an_op_keeps_the_list_it_was_given_as_it_was(n):
    """A list passed to an op and changed afterwards (DenseNet appends to the `features` it concatenates; here an
    element is also replaced): the op ran on the list as it was then. The bound symbol held the list itself, so the
    trace printed its later members: a crash where they did not exist yet, a wrong result where they did."""

    def f(a, b):
        xs = [a]
        y = torch.cat(xs, 0)
        xs.append(b)
        z = torch.cat(xs, 0)
        xs[0] = b
        w = torch.stack(xs)
        return y, z, w

    cfn = specengine.compile(f, dynamic=True)
    for k in (n, n + 2):
        a, b = torch.randn(k, 3), torch.randn(k, 3)
        torch.testing.assert_close(cfn(a, b), f(a, b))
    assert (specengine.cache_misses(cfn), specengine.cache_hits(cfn)) == (1, 1)
