"""Footguns: ordinary Python on traced values, in the spirit of tinygrad's test_jit_footguns.

One test per construct of docs/python-semantics.md. Each call sequence offers an entry compiled for one call an
input that it must not serve; every call is compared with eager and the exact number of compiles is asserted.
Sections belong to the classes of issue 11; helpers add their own sections.
"""

from __future__ import annotations

import contextlib
import functools
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from helpers import counts, sweep

import specengine
from specengine import UnsupportedOpError

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


def test_iterating_a_tensor_pins_its_length():
    def f(x):
        return torch.stack([row * i for i, row in enumerate(x)])

    _check(f, [(_t(2, 3),), (_t(2, 4),), (_t(3, 3),), (_t(1, 3),)], misses=3, hits=1)


def test_copies_of_numbers_and_shapes_are_themselves():
    import copy

    def f(x):
        return x * copy.copy(x.shape[0]) + copy.deepcopy(x.shape)[-1], copy.deepcopy(x.shape)

    _check(f, [(_t(2, 3),), (_t(4, 1),), (_t(0, 2),)], misses=1)


_DATA_DEPENDENT = {
    "repr": lambda x: repr(x),
    "deepcopy": lambda x: __import__("copy").deepcopy(x),
    "copy": lambda x: __import__("copy").copy(x),
    "int": lambda x: int(x.sum()),
    "float": lambda x: float(x.sum()),
    "index": lambda x: [1, 2][x.sum().int()],
    "in": lambda x: 0.5 in x,
    "numpy": lambda x: __import__("numpy").asarray(x),
}


@pytest.mark.parametrize("construct", sorted(_DATA_DEPENDENT))
def test_data_dependent_tensor_protocols_are_refused(construct):
    def f(x):
        return x * 2, _DATA_DEPENDENT[construct](x)

    cfn = specengine.compile(f, dynamic=True)
    with pytest.raises(specengine.UnsupportedOpError, match=r"is not supported by specengine \(at "):
        cfn(_t(2))
    assert counts(cfn) == (0, 0)


# ---------------------------------------------------------------------------------------------------------------
# Python state, modules and containers (identity and aliasing, outside state, modules, containers)
# ---------------------------------------------------------------------------------------------------------------


def _as_eager(cfn, fn, *args, **kwargs):
    torch.testing.assert_close(cfn(*args, **kwargs), fn(*args, **kwargs))


def test_aliased_arguments_get_their_own_entry():
    def f(a, b):
        return a * 2 if a is b else a * 3

    cfn = specengine.compile(f, dynamic=True)
    for n in (0, 1, 2):
        x, y = torch.randn(n), torch.randn(n)
        _as_eager(cfn, f, x, y)
        _as_eager(cfn, f, x, x)
    assert counts(cfn) == (2, 4)
    assert "x is the same tensor" not in specengine.recompile_reasons(cfn)[0]
    assert specengine.recompile_reasons(cfn)[0] == "a is not b failed: a is b = True"


def test_three_arguments_two_aliased():
    def f(a, b, c):
        return (a + b) * (2 if b is c else 3)

    cfn = specengine.compile(f, dynamic=True)
    x, y, z = torch.randn(2), torch.randn(2), torch.randn(2)
    for args in ((x, y, z), (x, y, y), (x, y, z), (x, z, z)):
        _as_eager(cfn, f, *args)
    assert counts(cfn) == (2, 2)


def test_bound_method_self_attributes_are_guarded():
    class Scaler:
        def __init__(self):
            self.k = 2

        def apply(self, x):
            return x * self.k

    s = Scaler()
    cfn = specengine.compile(s.apply, dynamic=True)
    for n in (0, 1, 2):
        _as_eager(cfn, s.apply, torch.randn(n))
    s.k = 3
    _as_eager(cfn, s.apply, torch.randn(2))
    s.k = 2
    _as_eager(cfn, s.apply, torch.randn(1))
    assert counts(cfn) == (2, 3)
    assert specengine.recompile_reasons(cfn)[0] == "self.k == 2 failed: self.k = 3"


def test_class_attribute_used_as_configuration_is_guarded():
    class Cfg:
        scale = 2

        def run(self, x):
            return x * self.scale

    c = Cfg()
    cfn = specengine.compile(c.run, dynamic=True)
    _as_eager(cfn, c.run, torch.randn(2))
    Cfg.scale = 5
    _as_eager(cfn, c.run, torch.randn(2))
    c.scale = 7  # an instance attribute now shadows the class attribute
    _as_eager(cfn, c.run, torch.randn(2))
    assert counts(cfn) == (3, 0)


def test_defaults_and_kwdefaults_are_guarded():
    def f(x, k=2, *, m=1):
        return x * k + m

    cfn = specengine.compile(f, dynamic=True)
    for n in (0, 1, 2):
        _as_eager(cfn, f, torch.randn(n))
    f.__defaults__ = (3,)
    _as_eager(cfn, f, torch.randn(2))
    f.__kwdefaults__["m"] = 5
    _as_eager(cfn, f, torch.randn(2))
    _as_eager(cfn, f, torch.randn(1), 4, m=0)  # explicit arguments are inputs
    assert counts(cfn) == (3, 3)


def test_functools_partial_compiles_and_guards_what_it_binds():
    def g(x, k, bias=0.0):
        return x * k + bias

    p = functools.partial(g, k=2)
    cfn = specengine.compile(p, dynamic=True)
    for n in (0, 1, 2):
        _as_eager(cfn, p, torch.randn(n))
    p.keywords["k"] = 3
    _as_eager(cfn, p, torch.randn(2))
    assert counts(cfn) == (2, 2)
    q = functools.partial(g, torch.ones(2), 5)
    cq = specengine.compile(q)
    _as_eager(cq, q)
    _as_eager(cq, q, bias=1.0)
    assert counts(cq) == (2, 0)


SCALE = 2


def _scaled(x):
    return x * SCALE


def test_a_global_flipping_between_two_values_keeps_both_entries():
    global SCALE
    cfn = specengine.compile(_scaled, dynamic=True)
    try:
        for v in (2, 3, 2, 3, 2):
            SCALE = v
            _as_eager(cfn, _scaled, torch.randn(2))
    finally:
        SCALE = 2
    assert counts(cfn) == (2, 3)


def test_a_closure_value_flipping_keeps_both_entries():
    dev = torch.device("cpu")
    mode = "double"

    def f(x):
        return (x * 2 if mode == "double" else x * 3).to(dev)

    cfn = specengine.compile(f, dynamic=True)
    for m in ("double", "triple", "double", "triple"):
        mode = m
        dev = torch.device("cpu")  # equal but not identical: served by value
        _as_eager(cfn, f, torch.randn(2))
    assert counts(cfn) == (2, 2)


@pytest.mark.parametrize(
    "make", [lambda: torch.device("cpu"), lambda: slice(1, 3), lambda: torch.Size([2, 3]), lambda: range(2)]
)
def test_equal_constants_are_compared_by_value(make):
    def f(x, c):
        return x[c] if isinstance(c, slice) else x.to(c) if isinstance(c, torch.device) else x + len(c)

    cfn = specengine.compile(f, dynamic=True)
    for _ in range(3):
        _as_eager(cfn, f, torch.randn(4), make())
    assert counts(cfn) == (1, 2)


def test_value_semantics_is_strict_about_types():
    def f(x, c):
        return x * c[0]

    cfn = specengine.compile(f, dynamic=False)
    _as_eager(cfn, f, torch.ones(2, dtype=torch.int64), torch.Size([2]))
    _as_eager(cfn, f, torch.ones(2, dtype=torch.int64), torch.Size([2]))
    assert counts(cfn) == (1, 1)
    from specengine.prologue.external import same_value

    assert not same_value((1, 2), (1, 2.0)) and not same_value(0.0, -0.0) and same_value(float("nan"), float("nan"))
    assert same_value(slice(1, 3), slice(1, 3)) and not same_value(slice(1, 3), slice(1, 3.0))


def test_list_append_on_an_input_is_reproduced():
    def f(xs):
        xs.append(xs[0] * 2)
        return xs[0] + 1

    cfn = specengine.compile(f, dynamic=True)
    for n in (0, 1, 2, 2):
        a = torch.randn(n)
        mine, theirs = [a], [a]
        torch.testing.assert_close(cfn(mine), f(theirs))
        assert len(mine) == len(theirs) == 2 and mine[0] is a and theirs[0] is a
        torch.testing.assert_close(mine[1], theirs[1])
    assert counts(cfn) == (1, 3)


def test_dict_setitem_and_del_on_an_input_are_reproduced():
    def f(d):
        d["k"] = d["a"] * 2
        del d["a"]
        d["inner"].append(1)
        return d["k"]

    cfn = specengine.compile(f, dynamic=True)
    for n in (0, 1, 2):
        t = torch.randn(n)
        mine, theirs = {"a": t, "inner": []}, {"a": t, "inner": []}
        torch.testing.assert_close(cfn(mine), f(theirs))
        assert list(mine) == list(theirs) == ["inner", "k"] and mine["inner"] == [1]
        torch.testing.assert_close(mine["k"], theirs["k"])
    assert counts(cfn) == (1, 2)


def test_a_failed_compile_leaves_input_containers_unchanged():
    def f(xs, d):
        xs.append(xs[0] + 1)
        d["k"] = xs[0]
        if xs[0].shape[0] == 2:
            raise ValueError("boom")
        return xs[0]

    cfn = specengine.compile(f)
    xs, d = [torch.ones(2)], {}
    with pytest.raises(ValueError):
        cfn(xs, d)
    assert len(xs) == 1 and d == {} and counts(cfn) == (0, 0)
    assert specengine.cache_entries(cfn) == []


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 3), nn.Tanh())
        self.head = nn.Linear(3, 2)

    def forward(self, x):
        return self.head(self.body(x))


def _check_module(cfn, model, n):
    x = torch.randn(n, 3)
    with torch.no_grad():
        torch.testing.assert_close(cfn(x), model(x))


@pytest.mark.parametrize("where", ["root", "submodule", "pre-hook", "global"])
def test_a_hook_registered_after_the_first_call_is_noticed(where):
    model = _Net()
    cfn = specengine.compile(model, dynamic=True)
    for n in (0, 1, 2):
        _check_module(cfn, model, n)
    if where == "root":
        handle = model.register_forward_hook(lambda m, args, out: out * 10)
    elif where == "submodule":
        handle = model.body[0].register_forward_hook(lambda m, args, out: out + 1)
    elif where == "pre-hook":
        handle = model.head.register_forward_pre_hook(lambda m, args: (args[0] * 0,))
    else:
        handle = torch.nn.modules.module.register_module_forward_hook(lambda m, args, out: out * 2)
    try:
        for n in (1, 2):
            _check_module(cfn, model, n)
    finally:
        handle.remove()
    _check_module(cfn, model, 2)  # the first entry serves again
    assert counts(cfn) == (2, 4)


def test_sequential_append_and_modulelist_append_and_del_are_noticed():
    class Stack(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(3, 3)])
            self.seq = nn.Sequential(nn.Identity())

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return self.seq(x)

    model = Stack()
    cfn = specengine.compile(model, dynamic=True)
    _check_module(cfn, model, 2)
    model.seq.append(nn.ReLU())
    _check_module(cfn, model, 2)
    model.layers.append(nn.Linear(3, 3))
    _check_module(cfn, model, 1)
    del model.layers[0]
    _check_module(cfn, model, 0)
    model.layers.insert(0, nn.Linear(3, 3))
    _check_module(cfn, model, 2)
    assert counts(cfn) == (5, 0)


def test_a_submodule_replaced_by_one_of_another_class_is_noticed():
    model = _Net()
    cfn = specengine.compile(model, dynamic=True)
    _check_module(cfn, model, 2)
    model.body[1] = nn.ReLU()
    _check_module(cfn, model, 2)
    model.body[1] = nn.Tanh()  # a new object: its own entry (modules are guarded by identity)
    _check_module(cfn, model, 1)
    assert counts(cfn) == (3, 0)
    assert "self.body: submodules is unchanged failed" in specengine.recompile_reasons(cfn)[0]


def test_tuple_list_and_callable_attributes_that_change_are_noticed():
    class Cfg(nn.Module):
        def __init__(self):
            super().__init__()
            self.scales = (1.0, 2.0)
            self.order = [0, 1]
            self.act = torch.tanh

        def forward(self, x):
            return self.act(x * self.scales[1]).permute(*self.order)

    model = Cfg()
    cfn = specengine.compile(model, dynamic=True)
    for n in (0, 1, 2):
        _as_eager(cfn, model, torch.randn(n, 2))
    model.scales = (1.0, 3.0)
    _as_eager(cfn, model, torch.randn(2, 2))
    model.order = [1, 0]
    _as_eager(cfn, model, torch.randn(2, 2))
    model.act = torch.sigmoid
    _as_eager(cfn, model, torch.randn(2, 2))
    model.scales = (1.0, 3.0)  # an equal tuple: served by value
    _as_eager(cfn, model, torch.randn(1, 2))
    assert counts(cfn) == (4, 3)


def test_a_plain_tensor_attribute_is_an_input():
    class WithTensor(nn.Module):
        def __init__(self):
            super().__init__()
            self.offset = torch.ones(3)

        def forward(self, x):
            return x + self.offset

    model = WithTensor()
    cfn = specengine.compile(model, dynamic=True)
    for n in (0, 1, 2):
        _as_eager(cfn, model, torch.randn(n, 3))
    model.offset.mul_(5)  # in place: read on every call
    _as_eager(cfn, model, torch.randn(2, 3))
    model.offset = torch.zeros(1)  # another shape: a new entry
    _as_eager(cfn, model, torch.randn(2, 3))
    assert counts(cfn) == (2, 3)


def test_a_module_closed_over_by_a_plain_function():
    lin = nn.Linear(3, 2)

    def f(x):
        return lin(x).relu()

    cfn = specengine.compile(f, dynamic=True)
    for n in (0, 1, 2):
        _as_eager(cfn, f, torch.randn(n, 3))
    with torch.no_grad():
        lin.weight.add_(1)  # parameters are inputs
    _as_eager(cfn, f, torch.randn(2, 3))
    lin.register_forward_hook(lambda m, args, out: -out)
    _as_eager(cfn, f, torch.randn(2, 3))
    assert counts(cfn) == (2, 3)


def test_attribute_writes_in_forward_are_reproduced_on_every_call():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.steps = 0
            self.register_buffer("total", torch.zeros(3))

        def forward(self, x):
            self.steps += 1
            y = self.lin(x) * self.steps
            self.last = y
            self.total = self.total + y.sum(0)
            return y

    model, ref = Counter(), Counter()
    ref.load_state_dict(model.state_dict())
    cfn = specengine.compile(model)
    for n in (1, 2, 2, 0, 2):
        x = torch.randn(n, 3)
        torch.testing.assert_close(cfn(x), ref(x))
        assert model.steps == ref.steps and type(model.last) is torch.Tensor
        torch.testing.assert_close(model.last, ref.last)
        torch.testing.assert_close(model.total, ref.total)
    # `self.last` first appears after call 1 (a new attribute: one recompile); sizes 0, 1 and 2 are static
    assert specengine.cache_misses(cfn) == 4 and specengine.cache_hits(cfn) == 1
    assert "total" in model._buffers and "total" not in vars(model)


def test_refused_attribute_writes_leave_the_module_unchanged():
    other = nn.Linear(2, 2)

    class Bad(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x):
            self.last = x * 2
            self.lin = other
            return x

    model = Bad()
    lin = model.lin
    cfn = specengine.compile(model)
    with pytest.raises(specengine.UnsupportedOpError, match="assigning Bad.lin"):
        cfn(torch.ones(2))
    assert model.lin is lin and "last" not in vars(model) and counts(cfn) == (0, 0)
    assert specengine.cache_entries(cfn) == []


def test_a_failed_compile_leaves_no_proxy_in_the_module():
    class Fails(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)
            self.t = torch.ones(2)

        def forward(self, x):
            self.last = self.lin(x)
            self.t = self.t + 1
            raise ValueError("boom")

    model = Fails()
    weight, t = model.lin.weight, model.t
    cfn = specengine.compile(model)
    with pytest.raises(ValueError, match="boom"):
        cfn(torch.ones(2))
    assert model.lin.weight is weight and model.t is t and "last" not in vars(model)
    assert specengine.cache_entries(cfn) == []


def test_the_structure_is_walked_only_after_a_change(monkeypatch):
    from specengine.prologue import structure

    model = _Net()
    cfn = specengine.compile(model, dynamic=True)
    _check_module(cfn, model, 2)
    walks = []
    original = structure.fingerprint
    monkeypatch.setattr(structure, "fingerprint", lambda *a: walks.append(1) or original(*a))
    for n in (0, 1, 2):
        _check_module(cfn, model, n)
    assert walks == []
    nn.Linear(2, 2)  # a module outside the compiled tree changes nothing
    _check_module(cfn, model, 1)
    assert walks == []
    model.eval()  # sets `training` on every submodule: walks (and a recompile) once, then none
    _check_module(cfn, model, 1)
    after = len(walks)
    for n in (0, 1, 2):
        _check_module(cfn, model, n)
    assert len(walks) == after and counts(cfn) == (2, 7)


def test_attribute_writes_on_a_plain_self_are_refused_and_undone():
    class Plain:
        def __init__(self):
            self.n = 0
            self.t = torch.ones(2)

        def step(self, x):
            self.n += 1
            return x * self.t

    p = Plain()
    t = p.t
    cfn = specengine.compile(p.step)
    with pytest.raises(specengine.UnsupportedOpError, match=r"assigning self.n in .*Plain.step"):
        cfn(torch.ones(2))
    assert vars(p) == {"n": 0, "t": t} and specengine.cache_entries(cfn) == []


def test_tensor_and_module_attributes_of_a_bound_self_are_inputs():
    class Holder:
        def __init__(self):
            self.t = torch.ones(3)
            self.lin = nn.Linear(3, 3)

        def run(self, x):
            return self.lin(x) + self.t

    h = Holder()
    cfn = specengine.compile(h.run, dynamic=True)
    for n in (0, 1, 2):
        _as_eager(cfn, h.run, torch.randn(n, 3))
    h.t.add_(1)
    with torch.no_grad():
        h.lin.bias.add_(1)
    _as_eager(cfn, h.run, torch.randn(2, 3))
    h.lin = nn.Linear(3, 3)  # another module: a new entry
    _as_eager(cfn, h.run, torch.randn(2, 3))
    assert counts(cfn) == (2, 3)


def test_a_list_attribute_changed_in_place_is_noticed():
    class Perm(nn.Module):
        def __init__(self):
            super().__init__()
            self.order = [0, 1]
            self._offset = torch.zeros(2)  # a private tensor attribute: an input too

        def forward(self, x):
            return x.permute(*self.order) + self._offset[0]

    model = Perm()
    cfn = specengine.compile(model, dynamic=True)
    for n in (0, 1, 2):
        _as_eager(cfn, model, torch.randn(n, 2))
    model.order.reverse()  # in place: no attribute write
    _as_eager(cfn, model, torch.randn(2, 2))
    model._offset.fill_(1)
    _as_eager(cfn, model, torch.randn(2, 2))
    assert counts(cfn) == (2, 3)


def test_a_failed_compile_leaves_a_cache_object_unchanged():
    class Cache:
        def __init__(self):
            self.keys = []
            self.seen = 0

    def f(x, cache):
        cache.keys.append(x * 2)
        cache.seen = cache.seen + 1
        if x.shape[0] == 2:
            raise ValueError("boom")
        return x

    cfn = specengine.compile(f)
    cache = Cache()
    with pytest.raises(ValueError):
        cfn(torch.ones(2), cache)
    assert cache.keys == [] and cache.seen == 0 and specengine.cache_entries(cfn) == []
    torch.testing.assert_close(cfn(torch.ones(3), cache), torch.ones(3))
    assert len(cache.keys) == 1 and cache.seen == 1


FACTOR = 2


def _helper(x):
    return x * FACTOR


def _calls_helper(x):
    return _helper(x) + 1


def test_a_global_read_by_a_helper_function_is_guarded():
    global FACTOR
    cfn = specengine.compile(_calls_helper, dynamic=True)
    try:
        for v, n in ((2, 0), (2, 1), (5, 2), (2, 2), (5, 1)):
            FACTOR = v
            _as_eager(cfn, _calls_helper, torch.randn(n))
    finally:
        FACTOR = 2
    assert counts(cfn) == (2, 3)


class _Scaled(nn.Module):
    def forward(self, x):
        return x * FACTOR


def test_a_global_read_by_a_submodule_forward_is_guarded():
    global FACTOR
    model = nn.Sequential(_Scaled(), nn.Identity())
    cfn = specengine.compile(model, dynamic=True)
    try:
        for v, n in ((2, 0), (3, 1), (2, 2)):
            FACTOR = v
            _as_eager(cfn, model, torch.randn(n))
    finally:
        FACTOR = 2
    assert counts(cfn) == (2, 1)


class _WithHelperMethod(nn.Module):
    def scale(self, x):
        return x * FACTOR

    def forward(self, x):
        return self.scale(x) + 1


def test_a_global_read_by_a_module_method_is_guarded():
    global FACTOR
    model = _WithHelperMethod()
    cfn = specengine.compile(model, dynamic=True)
    try:
        for v, n in ((2, 0), (4, 1), (2, 2), (4, 2)):
            FACTOR = v
            _as_eager(cfn, model, torch.randn(n))
    finally:
        FACTOR = 2
    assert counts(cfn) == (2, 2)


def test_a_module_passed_as_an_argument():
    def f(x, m):
        return m(x) * 2

    a, b = nn.Linear(3, 2), nn.Linear(3, 2)
    cfn = specengine.compile(f, dynamic=True)
    for n in (0, 1, 2):
        _as_eager(cfn, f, torch.randn(n, 3), a)
    with torch.no_grad():
        a.weight.mul_(2)  # its parameters are inputs
    _as_eager(cfn, f, torch.randn(2, 3), a)
    _as_eager(cfn, f, torch.randn(2, 3), b)  # another module (by identity): a new entry
    _as_eager(cfn, f, torch.randn(1, 3), a)
    assert counts(cfn) == (2, 4)


def test_dtype_conversion_and_freezing_after_the_first_call():
    model = _Net()
    cfn = specengine.compile(model, dynamic=True)
    _check_module(cfn, model, 2)
    model.requires_grad_(False)  # parameters are read on every call: requires_grad is checked
    _check_module(cfn, model, 1)
    model.double()  # `param.data = ...`: no attribute write, but the dtype is checked
    x = torch.randn(2, 3, dtype=torch.float64)
    torch.testing.assert_close(cfn(x), model(x))
    assert counts(cfn) == (3, 0)


# ===============================================================================================================
# Torch state and exceptions (issue 11, classes 6 and 7): grad mode, autocast, random state, global settings read
# or changed inside the function; exceptions caught inside the function
# ===============================================================================================================


def _inputs(args: list, grad: bool) -> list:
    return [a.detach().clone().requires_grad_(grad and a.is_floating_point()) if isinstance(a, torch.Tensor) else a
            for a in args]  # fmt: skip


def _same_eager(fn, cfn, *args, grad: bool = True):
    """Run eager and compiled on copies of `args`; compare outputs, dtypes, requires_grad and input gradients."""
    ea, ca = _inputs(list(args), grad), _inputs(list(args), grad)
    expected, got = fn(*ea), cfn(*ca)
    outs = list(zip(torch.utils._pytree.tree_leaves(expected), torch.utils._pytree.tree_leaves(got)))
    for e, g in outs:
        assert g.dtype == e.dtype and g.requires_grad == e.requires_grad, (g, e)
        torch.testing.assert_close(g, e, equal_nan=True)
    with torch.enable_grad():
        for which in (0, 1):
            losses = [o[which].float().sum() for o in outs if o[which].requires_grad]
            if losses:
                sum(losses).backward()
    for e, g in zip(ea, ca):
        if isinstance(e, torch.Tensor) and e.requires_grad:
            torch.testing.assert_close(g.grad, e.grad)
    return got


def test_no_grad_block_is_replayed():
    def f(x):
        with torch.no_grad():
            y = x * 2
        return y * x

    cfn = specengine.compile(f, dynamic=True)
    for n in (2, 0, 1):
        _same_eager(f, cfn, torch.randn(n))
    assert counts(cfn) == (1, 2)
    with torch.no_grad():  # the entry was traced with grad enabled at the call: it must not serve this
        _same_eager(f, cfn, torch.randn(2))
    assert counts(cfn) == (2, 2)
    assert torch.is_grad_enabled()


def test_enable_grad_inside_a_no_grad_call():
    def f(x):
        with torch.enable_grad():
            y = x * x
        return y, x + 1

    cfn = specengine.compile(f, dynamic=True)
    with torch.no_grad():
        _same_eager(f, cfn, torch.randn(2))
    _same_eager(f, cfn, torch.randn(1))  # grad enabled at the call: another entry
    with torch.no_grad():
        _same_eager(f, cfn, torch.randn(0))
    assert counts(cfn) == (2, 1)


def test_set_grad_enabled_flag_and_bare_call():
    def f(x, flag):
        with torch.set_grad_enabled(flag):
            y = x.sin()
        return y + x

    cfn = specengine.compile(f, dynamic=True)
    for n, flag in ((2, False), (1, True), (0, False), (2, True)):
        _same_eager(f, cfn, torch.randn(n), flag)
    assert counts(cfn) == (2, 2)

    def g(x):
        torch.set_grad_enabled(False)  # left disabled on return, as eager leaves it
        return x * 2

    cg = specengine.compile(g, dynamic=True)
    try:
        x = torch.randn(2, requires_grad=True)
        assert not cg(x).requires_grad and not torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(True)


def test_no_grad_decorator_on_the_compiled_function():
    @torch.no_grad()
    def f(x):
        return x * 3

    cfn = specengine.compile(f, dynamic=True)
    for n in (0, 1, 2):
        _same_eager(f, cfn, torch.randn(n))
    assert counts(cfn) == (1, 2)


def test_inference_mode_inside_is_refused_outside_works():
    def f(x):
        with torch.inference_mode():
            return x * 2

    cfn = specengine.compile(f, dynamic=True)
    with pytest.raises(UnsupportedOpError, match="inference_mode"):
        cfn(torch.randn(2))
    assert specengine.cache_entries(cfn) == []

    def g(x):
        return x * 2 if not torch.is_inference_mode_enabled() else x * 3

    cg = specengine.compile(g, dynamic=True)
    with torch.inference_mode():
        assert torch.equal(cg(torch.ones(2)), torch.full((2,), 3.0))
    assert torch.equal(cg(torch.ones(1)), torch.full((1,), 2.0))  # the read is guarded
    assert counts(cg) == (2, 0)


def test_grad_mode_restored_when_an_op_raises():
    def f(x, y):
        with torch.no_grad():
            z = x + y  # unguarded broadcast: raises at run time for sizes that do not broadcast
        return z

    cfn = specengine.compile(f, dynamic=True)
    cfn(torch.randn(2), torch.randn(2))
    with pytest.raises(RuntimeError, match="must match"):
        cfn(torch.randn(2), torch.randn(3))
    assert torch.is_grad_enabled()
    assert counts(cfn) == (1, 1)


def test_autocast_block_dtypes_and_grads():
    def f(x, w):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ w
            z = torch.softmax(y, -1) + y
        return z, z.float().sum(-1) + x.sum()

    cfn = specengine.compile(f, dynamic=True)
    for n in (2, 1, 0):
        _same_eager(f, cfn, torch.randn(n, 3), torch.randn(3, 4))
    assert counts(cfn) == (1, 2)
    assert not torch.is_autocast_enabled("cpu")


def test_autocast_at_the_call_and_inside_get_their_own_entries():
    def f(x, w):
        return F.linear(x, w).relu()

    cfn = specengine.compile(f, dynamic=True)
    _same_eager(f, cfn, torch.randn(2, 3), torch.randn(4, 3))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert _same_eager(f, cfn, torch.randn(1, 3), torch.randn(4, 3)).dtype == torch.bfloat16
        _same_eager(f, cfn, torch.randn(0, 3), torch.randn(4, 3))
    assert _same_eager(f, cfn, torch.randn(2, 3), torch.randn(4, 3)).dtype == torch.float32
    assert counts(cfn) == (2, 2)


def test_autocast_restored_when_an_op_raises():
    def f(x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return (x @ x.T) + y

    cfn = specengine.compile(f, dynamic=True)
    cfn(torch.randn(2, 2), torch.randn(2))
    with pytest.raises(RuntimeError):
        cfn(torch.randn(2, 2), torch.randn(3))
    assert not torch.is_autocast_enabled("cpu")


def test_manual_seed_is_replayed():
    def f(x):
        torch.manual_seed(7)
        return F.dropout(x, 0.5)

    cfn = specengine.compile(f, dynamic=True)
    for n in (8, 1, 0, 8):
        x = torch.randn(n)
        expected = f(x)
        after_eager = torch.rand(3)
        got = cfn(x)
        assert torch.equal(got, expected) and torch.equal(torch.rand(3), after_eager)
    assert counts(cfn) == (1, 3)


def test_saved_and_restored_random_state_is_replayed():
    def f(x):
        saved = torch.get_rng_state()
        torch.manual_seed(42)
        y = F.dropout(x, 0.5)
        torch.set_rng_state(saved)
        return y

    cfn = specengine.compile(f, dynamic=True)
    for n in (6, 1, 0, 6):
        x = torch.randn(n)
        torch.manual_seed(n)
        expected, after_eager = f(x), torch.rand(2)
        torch.manual_seed(n)
        got, after = cfn(x), torch.rand(2)
        assert torch.equal(got, expected) and torch.equal(after, after_eager)
    assert counts(cfn) == (1, 3)


def test_random_draws_and_setting_changes_are_refused():
    # (a random factory with constant arguments, `x + torch.rand(3)`, is an op of the computation that draws on
    # every call: tests/test_outside.py)
    def seed_only(x):
        torch.seed()
        return x

    def set_dtype(x):
        torch.set_default_dtype(torch.float64)
        return x

    for fn in (seed_only, set_dtype):
        cfn = specengine.compile(fn, dynamic=True)
        with pytest.raises(UnsupportedOpError):
            cfn(torch.randn(3))
        assert specengine.cache_entries(cfn) == []
    assert torch.get_default_dtype() is torch.float32


def test_default_dtype_read_is_guarded():
    def f(x):
        return x.to(torch.get_default_dtype()) * 2

    cfn = specengine.compile(f, dynamic=True)
    _same_eager(f, cfn, torch.randn(2))
    try:
        torch.set_default_dtype(torch.float64)
        _same_eager(f, cfn, torch.randn(1))
    finally:
        torch.set_default_dtype(torch.float32)
    _same_eager(f, cfn, torch.randn(0))
    assert counts(cfn) == (2, 1)


@pytest.mark.parametrize(
    ("read", "set_on", "set_off"),
    [
        (torch.are_deterministic_algorithms_enabled, lambda: torch.use_deterministic_algorithms(True),
         lambda: torch.use_deterministic_algorithms(False)),
        (lambda: torch.get_float32_matmul_precision() == "high", lambda: torch.set_float32_matmul_precision("high"),
         lambda: torch.set_float32_matmul_precision("highest")),
    ],
    ids=["deterministic", "matmul-precision"],
)  # fmt: skip
def test_settings_reads_are_guarded(read, set_on, set_off):
    def f(x):
        return x + 1 if read() else x - 1

    cfn = specengine.compile(f, dynamic=True)
    for n, on in ((2, False), (1, True), (0, False), (2, True)):
        try:
            if on:
                set_on()
            _same_eager(f, cfn, torch.randn(n))
        finally:
            set_off()
    assert counts(cfn) == (2, 2)


def _broadcast_or(x, y):
    try:
        z = x + y
    except RuntimeError:
        z = x * 2
    return z.sum(0, keepdim=True) + 1


@pytest.mark.parametrize("first", [(2, 2), (2, 3)], ids=["broadcasts-first", "raises-first"])
def test_try_around_a_broadcast_guards_both_ways(first):
    cfn = specengine.compile(_broadcast_or, dynamic=True)
    calls = [first, (1, 2), (0, 1), (2, 0), (3, 2), (0, 0), (1, 1)]
    for n, m in calls:
        _same_eager(_broadcast_or, cfn, torch.randn(n), torch.randn(m))
    assert counts(cfn) == (2, 5)


def test_broadcast_outside_a_try_stays_unguarded():
    def f(x, y):
        with torch.no_grad():  # a with block is not a handler
            return x + y

    cfn = specengine.compile(f, dynamic=True)
    cfn(torch.randn(2), torch.randn(2))
    assert [str(g) for g in specengine.last_guards(cfn)] == []


def test_try_in_a_caller_frame_counts():
    def add(x, y):
        return x + y

    def f(x, y):
        try:
            return add(x, y)
        except RuntimeError:
            return x

    cfn = specengine.compile(f, dynamic=True)
    for n, m in ((2, 2), (2, 3), (1, 3), (0, 0)):
        _same_eager(f, cfn, torch.randn(n), torch.randn(m))
    assert counts(cfn) == (2, 2)


def test_try_around_narrow_and_index():
    def f(x, start, i):
        try:
            y = x.narrow(0, start, 2)
        except (IndexError, RuntimeError):
            y = x[:1]
        try:
            return y + x[i]
        except IndexError:
            return y

    cfn = specengine.compile(f, dynamic=True)
    for n, start, i in ((4, 1, 0), (2, 1, 5), (4, 1, 0), (3, 1, 2), (1, 0, 0)):
        _same_eager(f, cfn, torch.randn(n), start, i)
    assert counts(cfn) == (3, 2)  # the checks are guards (not pins): (3, 1, 2) reuses the entry of (4, 1, 0)


def test_try_around_view():
    def f(x):
        try:
            return x.view(-1, 2)
        except RuntimeError:
            return x.reshape(1, -1)

    cfn = specengine.compile(f, dynamic=True)
    for n, m in ((2, 2), (1, 2), (0, 2), (3, 3), (1, 3)):
        _same_eager(f, cfn, torch.randn(n, m))
    assert counts(cfn) == (2, 3)
    with pytest.raises(UnsupportedOpError, match="view inside try"):  # whether it views depends on strides
        cfn(torch.randn(2, 4).t())


def test_contextlib_suppress_counts_as_a_handler():
    def f(x, y):
        z = x
        with contextlib.suppress(RuntimeError):
            z = x + y
        return z

    cfn = specengine.compile(f, dynamic=True)
    for n, m in ((2, 2), (2, 3), (1, 2), (0, 1)):
        _same_eager(f, cfn, torch.randn(n), torch.randn(m))
    assert counts(cfn) == (2, 2)


def test_caught_unsupported_op_is_refused():
    def f(x):
        try:
            return x * len(x.reshape(1, -1).tolist())  # (2-D: unsupported)
        except Exception:  # noqa: BLE001 - eager does not raise; the trace must not take this path
            return x

    cfn = specengine.compile(f, dynamic=True)
    with pytest.raises(UnsupportedOpError):
        cfn(torch.randn(2))
    assert specengine.cache_entries(cfn) == []


def test_fusion_regions_do_not_span_a_grad_mode_change():
    from specengine.executors.nvfuser import NvFuserExecutor

    def f(x):
        a = x * 2
        with torch.no_grad():
            b = a + 1
        return (a * b).relu()

    cfn = specengine.compile(f, dynamic=True, executors=[NvFuserExecutor("reference"), "torch"])
    for n in (3, 0, 1):
        _same_eager(f, cfn, torch.randn(n), grad=False)  # (nvFuser declines ops that record autograd)
    assert counts(cfn) == (1, 2)
    names = [b.sym.print_name for b in specengine.last_traces(cfn)[-1].bsyms if b.sym.name != "del"]
    assert names == ["nvfuser.fusion0", "tex.set_grad_enabled", "nvfuser.fusion1", "tex.set_grad_enabled",
                     "nvfuser.fusion2"]  # fmt: skip


def _finally_only(x, y):
    try:
        z = x + y
    finally:
        x = None
    return z


def _finally_inside_except(x, y):
    try:
        try:
            z = x + y
        finally:
            x = x * 1
    except RuntimeError:
        z = x
    return z


def _inside_an_except_body(x, y):
    try:
        raise KeyError
    except KeyError:
        try:
            z = x + y
        except RuntimeError:
            z = x
    return z


def _finally_returns(x, y):
    z = x
    try:
        z = x + y
    finally:
        return z  # noqa: B012 - swallows the error


@pytest.mark.parametrize(
    ("fn", "observed"),
    [(_finally_only, False), (_finally_inside_except, True), (_inside_an_except_body, True), (_finally_returns, True)],
    ids=lambda v: getattr(v, "__name__", str(v)),
)
def test_which_handlers_observe_an_error(fn, observed):
    cfn = specengine.compile(fn, dynamic=True)
    _same_eager(fn, cfn, torch.randn(2), torch.randn(2), grad=False)
    assert bool(specengine.last_guards(cfn)) == observed
    if observed:
        _same_eager(fn, cfn, torch.randn(2), torch.randn(3), grad=False)
    else:  # eager raises for sizes that do not broadcast, and so does the computation
        for f in (fn, cfn):
            with pytest.raises(RuntimeError, match="must match"):
                f(torch.randn(2), torch.randn(3))
    assert counts(cfn) == ((1, 1) if not observed else (2, 0)), counts(cfn)
