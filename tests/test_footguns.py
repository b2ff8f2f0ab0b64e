"""Footguns: ordinary Python on traced values, in the spirit of tinygrad's test_jit_footguns.

One test per construct of docs/python-semantics.md. Each call sequence offers an entry compiled for one call an
input that it must not serve; every call is compared with eager and the exact number of compiles is asserted.
Sections belong to the classes of issue 11; helpers add their own sections.
"""

from __future__ import annotations

import math

import pytest
import torch
from helpers import counts, sweep

import specengine

# ===============================================================================================================
# Numbers (issue 11, classes 1-4): floats, hashing and containers, int protocols, type queries
# ===============================================================================================================

NAN, INF = float("nan"), float("inf")


def _same(a, b) -> bool:
    """Equal values of equal types (tensors by value, NaN equal to NaN, -0.0 unlike 0.0, torch.Size unlike tuple)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.nan_to_num(), b.nan_to_num())
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return (a != a and b != b) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return a == b


def _check(fn, calls, misses, hits=None, dynamic=True):
    """Run every call eagerly and compiled; results (or exception types) must match; exact compile count."""
    cfn = specengine.compile(fn, dynamic=dynamic)
    for args in calls:
        try:
            expected = fn(*args)
        except Exception as e:  # noqa: BLE001 - eager's exception is the expectation
            with pytest.raises(type(e)):
                cfn(*args)
            continue
        got = cfn(*args)
        assert _same(got, expected), f"{args}: compiled {got!r}, eager {expected!r}"
    assert specengine.cache_misses(cfn) == misses
    if hits is not None:
        assert specengine.cache_hits(cfn) == hits
    return cfn


def _t(*shape, dtype=torch.float32):
    return torch.arange(math.prod(shape), dtype=dtype).reshape(shape) + 1


# Floats ---------------------------------------------------------------------------------------------------------


def test_nan_does_not_pass_a_guard_s_greater_than_0():
    def f(x, s):
        return x * 2 if s > 0 else x * 3  # the entry for s = 1 guards s > 0; NaN takes the else branch

    cfn = _check(f, [(_t(2), 1.0), (_t(2), NAN), (_t(2), -1.0), (_t(2), NAN), (_t(2), -0.0)], misses=2, hits=3)
    assert [str(g) for g in specengine.last_guards(cfn)] == ["not (s > 0)"]


def test_nan_takes_the_else_branch_of_a_negated_comparison_too():
    def f(x, s):
        return x * 2 if s <= 0 else x * 3

    _check(f, [(_t(2), -1.0), (_t(2), NAN), (_t(2), 1.0), (_t(2), 0.0)], misses=2, hits=2)


def test_a_pin_of_zero_does_not_serve_minus_zero():
    def f(x, s):
        return x * math.copysign(1.0, s)  # copysign reads the value: s is pinned, with its sign

    _check(f, [(_t(2), 0.0), (_t(2), -0.0), (_t(2), 0.0), (_t(2), -0.0), (_t(2), 1.0)], misses=3, hits=2)


def test_a_pin_of_nan_serves_nan():
    def f(x, s):
        return x + (1.0 if math.isnan(s) else 2.0)

    _check(f, [(_t(2), NAN), (_t(2), NAN), (_t(2), 1.0), (_t(2), INF)], misses=3, hits=1)


def test_infinities_print_as_valid_code_in_guards_and_computations():
    def f(x, s):
        y = x * (s - INF) if s < INF else x
        return y, s + INF, s > -INF

    calls = [(_t(2), 1.0), (_t(2), INF), (_t(2), 3.0), (_t(2), -INF), (_t(2), NAN)]
    cfn = _check(f, calls, misses=2, hits=3)
    for e in specengine.cache_entries(cfn):
        assert "float('inf')" in str(e.prologue)


def test_a_compile_whose_prologue_fails_keeps_no_entry(monkeypatch):
    import specengine.api as api

    real = api.compile_entry

    def broken(*args, **kwargs):
        entry = real(*args, **kwargs)
        entry.prologue.fn = lambda *a, **k: inf  # noqa: F821 - a NameError, as a bare `inf` in generated code was
        return entry

    cfn = specengine.compile(lambda x, s: x * s, dynamic=True)
    monkeypatch.setattr(api, "compile_entry", broken)
    with pytest.raises(NameError):
        cfn(_t(2), 1.0)
    assert specengine.cache_entries(cfn) == [] and counts(cfn) == (0, 0)
    monkeypatch.setattr(api, "compile_entry", real)
    assert _same(cfn(_t(2), INF), _t(2) * INF) and counts(cfn) == (1, 0)


# Hashing and containers -----------------------------------------------------------------------------------------


def test_a_set_of_sizes():
    def f(x):
        return x * len(set(x.shape))

    _check(f, [(_t(2, 2),), (_t(2, 3),), (_t(3, 3),), (_t(2, 3),), (_t(0, 1),)], misses=4, hits=1)


def test_a_size_in_a_set_of_ints():
    def f(x):
        return x * 2 if x.shape[0] in {2, 3} else x

    _check(f, [(_t(2),), (_t(3),), (_t(4),), (_t(2),), (_t(0),), (_t(1),)], misses=5, hits=1)


def test_dict_get_with_a_size():
    def f(x):
        return x * {2: 5}.get(x.shape[0], 7)

    _check(f, [(_t(2),), (_t(3),), (_t(2),), (_t(0),), (_t(1),)], misses=4, hits=1)


def test_a_table_keyed_by_the_shape():
    table = {(2, 3): 1.0, (3, 2): 2.0}

    def f(x):
        return x * table.get(tuple(x.shape), 0.5)

    _check(f, [(_t(2, 3),), (_t(3, 2),), (_t(2, 3),), (_t(1, 1),), (_t(0, 6),)], misses=4, hits=1)


def test_a_dict_keyed_by_an_expression_of_an_int():
    def f(x, n):
        return x * {0: 10, 1: 20}[n % 2]  # the hash pins n % 2, not n

    _check(f, [(_t(2), 1), (_t(2), 3), (_t(2), 2), (_t(2), -4), (_t(2), 0)], misses=2, hits=3)


def test_str_repr_and_format_of_sizes_pin_them():
    def f(x):
        return x + 1, str(x.shape), repr([x.shape[0], 2]), f"{x.shape[0]:>3}", f"{x.shape}", str(x.shape[1:])

    calls = [(_t(2, 1),), (_t(3, 1),), (_t(2, 1),), (_t(2, 0),)]
    cfn = _check(f, calls, misses=3, hits=1)
    assert cfn(_t(2, 1))[1:] == ("torch.Size([2, 1])", "[2, 2]", "  2", "torch.Size([2, 1])", "torch.Size([1])")


# Int protocols --------------------------------------------------------------------------------------------------


def test_bitwise_and_with_a_mask_is_bitwise_and_symbolic():
    def f(x, n):
        return x * (n & 1) + (n & 3) - (n & -4)  # n & 1 was n != 0

    _check(f, [(_t(2), 2), (_t(2), 3), (_t(2), 6), (_t(2), 0), (_t(2), -3), (_t(2), 1)], misses=1)


def test_bitwise_or_and_xor_pin_unless_trivial():
    def f(x, n):
        return x * (n | 4) + (n ^ 6) + (n | 0) + (n ^ 0) + (n & 0)

    _check(f, [(_t(2), 1), (_t(2), 1), (_t(2), 2), (_t(2), -1)], misses=3, hits=1)


def test_bitwise_ops_on_bools_stay_logical():
    def f(x, n):
        b = (n > 1) & (x.shape[0] > 1) | (n < -5)
        return x * 2 if b else x

    _check(f, [(_t(2), 2), (_t(3), 5), (_t(1), 2), (_t(2), -9), (_t(2), 0)], misses=2, hits=3)  # one predicate


def test_shifts_are_floor_division_and_multiplication():
    def f(x, n):
        return x * ((n >> 1) + (n << 2) + (n >> 0))

    _check(f, [(_t(2), 5), (_t(2), -5), (_t(2), 0), (_t(2), 1), (_t(2), -1)], misses=1)


def test_a_negative_shift_count_raises_as_eager():
    def f(x, n):
        return x * (n >> -1)

    _check(f, [(_t(2), 5)], misses=0)


def test_invert_divmod_and_modular_pow_are_symbolic():
    def f(x, n):
        q, r = divmod(n, 3)
        return x * (~n + q + r + pow(n, 2, 5) + pow(n, 3, -7))

    _check(f, [(_t(2), 7), (_t(2), -7), (_t(2), 0), (_t(2), 1), (_t(2), 2)], misses=1)


def test_divmod_by_a_symbolic_zero_raises_as_eager():
    def f(x, n, m):
        return x * divmod(n, m)[1]

    _check(f, [(_t(2), 7, 2), (_t(2), 7, 0), (_t(2), -7, 3)], misses=1, hits=1)


def test_int_attributes():
    def f(x, n):
        return x * (n.real + n.imag + n.numerator + n.denominator + n.conjugate()), n.bit_length()

    _check(f, [(_t(2), 1), (_t(2), 2), (_t(2), 1), (_t(2), 0), (_t(2), -1)], misses=4, hits=1)


def test_rounding_an_int_is_the_int():
    def f(x, n):
        return x * (math.floor(n) + math.ceil(n) + math.trunc(n) + round(n))

    _check(f, [(_t(2), 1), (_t(2), -2), (_t(2), 0)], misses=1)


def test_true_division_of_sizes_is_symbolic():
    def f(x, n):
        return x * (x.shape[0] / 2) + n / x.shape[0] if x.shape[0] else x

    cfn = _check(f, [(_t(2), 3), (_t(3), 3), (_t(4), -1), (_t(0), 1), (_t(1), 5)], misses=2, hits=3)
    assert sorted(str(g) for g in specengine.cache_entries(cfn)[0].guards) == ["x.shape[0] != 0"]


def test_division_by_a_symbolic_zero_raises_as_eager():
    def f(x, n):
        1 / n  # noqa: B018 - unused: eager raises all the same
        return x * 2

    _check(f, [(_t(2), 2), (_t(2), 0), (_t(2), 3)], misses=1, hits=1)


def test_comparisons_with_floats_are_int_predicates():
    def f(x):
        return x * 2 if x.shape[0] > 2.5 else x

    cfn = _check(f, [(_t(3),), (_t(4),), (_t(2),), (_t(1),), (_t(0),)], misses=2, hits=3)
    assert [str(g) for g in specengine.cache_entries(cfn)[0].guards] == ["x.shape[0] > 2"]


def test_comparisons_with_nan_and_inf_need_no_guard():
    def f(x, n):
        return x * ((n < INF) + (n > -INF) + (n == NAN) + (n != NAN) + (n < NAN))

    _check(f, [(_t(2), 1), (_t(2), -(2**40)), (_t(2), 0)], misses=1)


# Type queries (isinstance, torch.is_tensor, hasattr, torch.Size) ------------------------------------------------


def test_hasattr_of_a_missing_attribute_is_false():
    def f(x):
        if hasattr(x, "jax"):  # transformers' is_jax_jitting asks this of every tensor
            return x.jax()
        return x + 1 if hasattr(x, "shape") and hasattr(x, "add") else x

    cfn = sweep(f, [[(0,)], [(1,)], [(2,)]])
    assert counts(cfn) == (1, 2)


def test_getattr_with_a_default_of_a_missing_attribute():
    def f(x):
        return x * getattr(x, "scale_factor", 3)

    cfn = sweep(f, [[(2,)], [(1,)]])
    assert counts(cfn) == (1, 1)


def test_isinstance_of_a_symbolic_int_is_int():
    def f(x, k):  # transformers' causal LMs: logits_to_keep
        keep = slice(-k, None) if isinstance(k, int) else k
        return x[:, keep] * 2

    cfn = sweep(f, [[(2, 5), 1], [(2, 5), 2], [(2, 5), 0], [(2, 5), 3]])
    assert counts(cfn) == (2, 2)  # -0 keeps everything: k == 0 is its own entry


def test_isinstance_of_a_traced_tensor_and_of_a_symbolic_float():
    def f(x, s):
        if torch.is_tensor(x) and isinstance(x, torch.Tensor) and isinstance(s, float) and not isinstance(s, int):
            return x * s
        return x

    cfn = sweep(f, [[(2,), 1.5], [(0,), 2.5], [(1,), -0.0]])
    assert counts(cfn) == (1, 2)


def test_isinstance_of_a_bool_from_a_comparison():
    def f(x):
        b = x.shape[0] > 1
        return x * 2 if isinstance(b, bool) and isinstance(b, int) and b else x - 1

    cfn = sweep(f, [[(2,)], [(3,)], [(1,)], [(0,)]])
    assert counts(cfn) == (2, 2)


def test_the_shape_is_a_torch_size():
    def f(x):
        s = x.shape
        assert isinstance(s, torch.Size) and isinstance(x.size(), torch.Size) and isinstance(s[1:], torch.Size)
        assert s == tuple(s) and s[:1] + (1,) == (s[0], 1)
        return x.reshape(s.numel()) * 2, s, s[1:] + (3,), (1,) + s, x.size()

    out = _check(f, [(_t(2, 3),), (_t(0, 3),), (_t(1, 3),), (_t(4, 1),)], misses=1)(_t(2, 3))
    assert [type(o) for o in out[1:]] == [torch.Size] * 4


def test_broadcast_shapes_of_symbolic_shapes():
    def f(x, y):
        shape = torch.broadcast_shapes(x.shape, y.shape)
        return x.expand(shape) + y, shape

    calls = [(_t(2, 3), _t(1, 3)), (_t(4, 3), _t(1, 3)), (_t(1, 3), _t(5, 3)), (_t(2, 3), _t(2, 2)),
             (_t(2, 3), _t(3)), (_t(0, 3), _t(1, 3))]  # fmt: skip
    _check(f, calls, misses=3)


def test_element_size():
    def f(x):
        return x * x.element_size()

    _check(f, [(_t(2),), (_t(3, dtype=torch.float64),), (_t(0),)], misses=2, hits=1)


def test_a_torch_size_argument():
    def f(x, shape):
        return x.reshape(shape) * shape.numel(), shape[0]

    calls = [(_t(6), torch.Size([2, 3])), (_t(6), torch.Size([3, 2])), (_t(4), torch.Size([2, 2])), (_t(0), torch.Size([0, 5]))]  # fmt: skip
    _check(f, calls, misses=1)


def test_isinstance_of_a_parameter_and_a_buffer():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))
            self.register_buffer("b", torch.ones(3))

        def forward(self, x):
            w = self.w * 2 if isinstance(self.w, torch.nn.Parameter) else self.w
            b = self.b * 3 if isinstance(self.b, torch.nn.Parameter) else self.b
            return x * w + b + (1 if isinstance(x, torch.nn.Parameter) else 0)

    m = M()
    with torch.no_grad():
        _check(m, [(_t(3),), (_t(2, 3),), (_t(0, 3),)], misses=2)


def test_a_torch_size_built_from_sizes_is_returned_as_a_torch_size():
    def f(x):
        return x * 2, torch.Size([x.shape[0], 2]), torch.Size([2, 3])

    out = _check(f, [(_t(2),), (_t(2),), (_t(3),), (_t(0),)], misses=1)(_t(2))
    assert type(out[1]) is torch.Size and type(out[2]) is torch.Size
