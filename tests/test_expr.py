"""Tests for specengine.constraints.expr: canonical, hash-consed symbolic expressions."""

from __future__ import annotations

import copy
import gc
import math
import operator
import pickle
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest
import z3
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specengine.constraints.expr import (
    FALSE,
    TRUE,
    Expr,
    add,
    and_,
    as_expr,
    const,
    eq,
    exact_quotient,
    floordiv,
    ge,
    gt,
    ite,
    le,
    lt,
    maximum,
    minimum,
    mod,
    mul,
    ne,
    neg,
    normalize,
    not_,
    or_,
    sub,
    sym,
)
from specengine.constraints.intervals import bounds, decide_by_bounds  # noqa: E402
from specengine.constraints.z3expr import to_z3  # noqa: E402

SYMS = ("s0", "s1", "s2")
s0, s1, s2 = (sym(n) for n in SYMS)

FAST = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------------------------------------
# Random recipes: each builds an Expr and, independently, a reference function over plain Python ints.


class Recipe(NamedTuple):
    expr: Expr
    ref: Callable[[dict[str, int]], Any]


_ARITH: dict[str, tuple[Callable, Callable]] = {
    "+": (operator.add, operator.add),  # the Expr side goes through Expr's dunders
    "-": (operator.sub, operator.sub),
    "*": (operator.mul, operator.mul),
    "//": (operator.floordiv, operator.floordiv),
    "%": (operator.mod, operator.mod),
    "min": (min, minimum),
    "max": (max, maximum),
}
_REL: dict[str, tuple[Callable, Callable]] = {
    "==": (operator.eq, eq),
    "!=": (operator.ne, ne),
    "<": (operator.lt, lt),
    "<=": (operator.le, le),
    ">": (operator.gt, gt),
    ">=": (operator.ge, ge),
}


def _const(v: int) -> Recipe:
    return Recipe(const(v), lambda env: v)


def _sym(n: str) -> Recipe:
    return Recipe(sym(n), lambda env: env[n])


def _binary(op: str, a: Recipe, b: Recipe) -> Recipe:
    py, mk = _ARITH[op]
    return Recipe(mk(a.expr, b.expr), lambda env: py(a.ref(env), b.ref(env)))


def _int_left(op: str, k: int, b: Recipe) -> Recipe:
    py, mk = _ARITH[op]
    return Recipe(mk(k, b.expr), lambda env: py(k, b.ref(env)))  # exercises the reflected dunders


def _neg(a: Recipe) -> Recipe:
    return Recipe(-a.expr, lambda env: -a.ref(env))


def _ite(c: Recipe, a: Recipe, b: Recipe) -> Recipe:
    return Recipe(ite(c.expr, a.expr, b.expr), lambda env: a.ref(env) if c.ref(env) else b.ref(env))


def _rel(op: str, a: Recipe, b: Recipe) -> Recipe:
    py, mk = _REL[op]
    return Recipe(mk(a.expr, b.expr), lambda env: py(a.ref(env), b.ref(env)))


def _not(a: Recipe) -> Recipe:
    return Recipe(not_(a.expr), lambda env: not a.ref(env))


def _junction(op: str, a: Recipe, b: Recipe) -> Recipe:
    # The reference is eager: where it succeeds every operand is defined, whatever order Expr uses.
    if op == "and":
        return Recipe(and_(a.expr, b.expr), lambda env: all([a.ref(env), b.ref(env)]))
    return Recipe(or_(a.expr, b.expr), lambda env: any([a.ref(env), b.ref(env)]))


LEAVES = st.one_of(st.integers(-4, 4).map(_const), st.sampled_from(SYMS).map(_sym))
NONZERO = st.sampled_from([-3, -2, -1, 1, 2, 3, 4]).map(_const)


@st.composite
def int_recipes(draw: st.DrawFn, depth: int = 4) -> Recipe:
    """A random int recipe: consts, syms, + - *, // and % (by consts, syms or subtrees), min, max, ite."""
    kinds = ["leaf", "arith", "arith", "div", "int_left", "neg", "ite"] if depth else ["leaf"]
    kind = draw(st.sampled_from(kinds))
    sub = int_recipes(depth - 1)
    if kind == "leaf":
        return draw(LEAVES)
    if kind == "arith":
        return _binary(draw(st.sampled_from(["+", "-", "*", "min", "max"])), draw(sub), draw(sub))
    if kind == "div":
        divisor = draw(st.one_of(NONZERO, st.sampled_from(SYMS).map(_sym), sub))
        return _binary(draw(st.sampled_from(["//", "%"])), draw(sub), divisor)
    if kind == "int_left":
        op = draw(st.sampled_from(["+", "-", "*", "//", "%"]))
        return _int_left(op, draw(st.integers(-3, 3)), draw(sub))
    if kind == "neg":
        return _neg(draw(sub))
    return _ite(draw(bool_recipes(depth - 1)), draw(sub), draw(sub))


@st.composite
def bool_recipes(draw: st.DrawFn, depth: int = 3) -> Recipe:
    """A random boolean recipe: relations between int recipes, not, and, or."""
    kind = draw(st.sampled_from(["rel", "rel", "not", "junction"] if depth else ["rel"]))
    if kind == "rel":
        sides = int_recipes(max(depth - 1, 0))
        return _rel(draw(st.sampled_from(sorted(_REL))), draw(sides), draw(sides))
    if kind == "not":
        return _not(draw(bool_recipes(depth - 1)))
    op = draw(st.sampled_from(["and", "or"]))
    return _junction(op, draw(bool_recipes(depth - 1)), draw(bool_recipes(depth - 1)))


INTS = int_recipes()
BOOLS = bool_recipes()
SMALL = st.one_of(st.sampled_from([0, 1, 2, -1]), st.integers(-7, 7))
GENERAL_ENVS = st.fixed_dictionaries({n: SMALL for n in SYMS})
SMALL_NONNEG = st.one_of(st.sampled_from([0, 1, 2]), st.integers(0, 9))
NONNEG_ENVS = st.fixed_dictionaries({n: SMALL_NONNEG for n in SYMS})
ENVS = st.one_of(GENERAL_ENVS, NONNEG_ENVS)


def _ref_or_none(r: Recipe, env: dict[str, int]) -> Any:
    try:
        return r.ref(env)
    except ZeroDivisionError:
        return None


def _prove(claim: z3.BoolRef) -> bool:
    s = z3.Solver()
    s.set("timeout", 5000)
    s.add(z3.Not(claim))
    return s.check() == z3.unsat


def _py_floordiv(a: z3.ArithRef, b: z3.ArithRef) -> z3.ArithRef:
    """Independent z3 encoding of Python's ``a // b``."""
    return z3.If(b > 0, a / b, (-a) / (-b))


# ---------------------------------------------------------------------------------------------------------
# Hash-consing and canonical forms.


def test_hash_consing_identity() -> None:
    assert sym("s0") is s0
    assert add(sym("s0"), 1) is add(1, sym("s0"))
    assert const(3) is as_expr(3)
    assert as_expr(True) is TRUE and as_expr(False) is FALSE
    assert (s0 * s1 + 2) is (2 + s1 * s0)
    assert minimum(s0, s1) is minimum(s1, s0) and maximum(s0, s1) is maximum(s1, s0)
    assert and_(gt(s0, 2), ne(s1, 1)) is and_(ne(s1, 1), gt(s0, 2))
    assert and_(gt(s0, 2), and_(ne(s1, 1), lt(s2, 0))) is and_(and_(gt(s0, 2), ne(s1, 1)), lt(s2, 0))


def test_canonical_equalities() -> None:
    assert (s0 + s1 - s0) is s1
    assert (s0 + s1 - s0) is sym("s1")
    assert ((s0 + 1) * (s0 - 1)) is (s0 * s0 - 1)
    assert (2 * s0 + s0) is (3 * s0)
    assert (s0 - s0) is const(0)
    assert mul(s0, 0) is const(0) and mul(1, s0) is s0
    assert neg(neg(s0)) is s0 and sub(0, s0) is -s0
    assert ((s0 + s1) * (s0 + s1)) is (s0 * s0 + 2 * s0 * s1 + s1 * s1)


def test_constant_folding() -> None:
    assert add(2, 3) is const(5)
    assert floordiv(-7, 2) is const(-4) and mod(-7, 2) is const(1)
    assert floordiv(7, -2) is const(-4) and mod(7, -2) is const(-1)
    assert minimum(3, 5) is const(3) and maximum(3, 5) is const(5)
    assert lt(1, 2) is TRUE and eq(1, 2) is FALSE
    assert ite(TRUE, s0, s1) is s0 and ite(FALSE, s0, s1) is s1


def test_division_simplifications() -> None:
    assert (s0 // 1) is s0 and (s0 % 1) is const(0)
    assert ((3 * s0) // 3) is s0 and ((3 * s0) % 3) is const(0)
    assert ((4 * s0 + 8) // 4) is (s0 + 2)
    assert ((4 * s0 + 8) % 4) is const(0)
    assert ((4 * s0 + 5) // 4) is (s0 + 1)
    assert ((4 * s0 + 5) % 4) is const(1)
    assert ((s0 + 4) // 4) is (s0 // 4 + 1)
    assert ((s0 // 2) // 3) is (s0 // 6)
    assert ((s0 % 3) % 3) is (s0 % 3)
    assert (s0 // -1) is -s0
    assert floordiv(s0, 0).op == "floordiv"  # division by a literal zero stays symbolic
    with pytest.raises(ZeroDivisionError):
        floordiv(s0, 0).eval({"s0": 1})


def test_division_simplifications_are_sound_z3() -> None:
    env: dict[str, Any] = {}
    x, y = z3.Int("s0"), z3.Int("s1")
    cases = [
        ((4 * s0 + 5) // 4, _py_floordiv(4 * x + 5, z3.IntVal(4))),
        ((4 * s0 + s1 + 5) // 4, _py_floordiv(4 * x + y + 5, z3.IntVal(4))),
        ((6 * s0 + 4 * s1 + 2) // -4, _py_floordiv(6 * x + 4 * y + 2, z3.IntVal(-4))),
        ((s0 // 2) // 3, _py_floordiv(_py_floordiv(x, z3.IntVal(2)), z3.IntVal(3))),
        (
            (6 * s0 + 4 * s1 + 2) % -4,
            (6 * x + 4 * y + 2) - (-4) * _py_floordiv(6 * x + 4 * y + 2, z3.IntVal(-4)),
        ),
        ((s0 + 7) % 3, (x + 7) - 3 * _py_floordiv(x + 7, z3.IntVal(3))),
    ]
    for e, expected in cases:
        assert _prove(to_z3(e, env) == expected), e


def test_min_max_if_simplifications() -> None:
    assert minimum(s0, s0) is s0 and maximum(s0, s0) is s0
    assert minimum(s0, s0 + 1) is s0 and maximum(s0, s0 + 1) is (s0 + 1)
    assert ite(gt(s0, 2), s1, s1) is s1
    assert ite(not_(gt(s0, 2)), s1, s2) is ite(le(s0, 2), s1, s2)


def test_boolean_simplifications() -> None:
    assert gt(s0 + 1, s0) is TRUE
    assert eq(s0, s0) is TRUE and ne(s0 + 2, s0) is TRUE
    assert not_(lt(s0, s1)) is ge(s0, s1)
    assert not_(not_(and_(gt(s0, 2), ne(s1, 1)))) is and_(gt(s0, 2), ne(s1, 1))
    assert and_(TRUE, gt(s0, 2)) is gt(s0, 2) and and_(FALSE, gt(s0, 2)) is FALSE
    assert or_(TRUE, gt(s0, 2)) is TRUE and or_(FALSE, gt(s0, 2)) is gt(s0, 2)
    assert and_(gt(s0, 2), gt(s0, 2)) is gt(s0, 2)
    assert and_(gt(s0, 2), le(s0, 2)) is FALSE and or_(gt(s0, 2), le(s0, 2)) is TRUE
    assert and_() is TRUE and or_() is FALSE


def test_relation_keeps_display_form() -> None:
    assert str(gt(s0, 2)) == "s0 > 2"
    assert str(lt(2, s0)) == "2 < s0"
    assert gt(s0, 2) is not ge(s0, 3)


def test_normalize_linear_equivalences() -> None:
    n = normalize(gt(s0, 2))
    assert n is normalize(ge(s0, 3)) is normalize(lt(2, s0)) is normalize(not_(le(s0, 2)))
    assert str(n) == "s0 - 3 >= 0"
    assert normalize(eq(2 * s0 - 4, 0)) is normalize(eq(s0, 2))
    assert str(normalize(eq(2 * s0, 4))) == "s0 - 2 == 0"
    assert normalize(ge(2 * s0 - 3, 0)) is normalize(ge(s0, 2))
    assert normalize(eq(2 * s0, 3)) is FALSE and normalize(ne(2 * s0, 3)) is TRUE
    assert normalize(eq(-s0, s1)) is normalize(eq(s0 + s1, 0))
    assert normalize(ne(3, s0)) is normalize(ne(s0, 3))
    assert normalize(le(s0, s1)) is normalize(ge(s1, s0)) is normalize(not_(gt(s0, s1)))
    b = not_(and_(gt(s0, 2), ne(s1, 1)))
    assert normalize(b) is or_(normalize(le(s0, 2)), normalize(eq(s1, 1)))
    assert normalize(normalize(b)) is normalize(b)


def test_normalize_proved_by_z3() -> None:
    relations = [
        gt(s0, 2),
        lt(2 * s0 + 3, 3 * s1),
        le(4 * s0 - 6, 2 * s1),
        eq(6 * s0 + 9, 3 * s1),
        ne(2 * s0, 4 * s1 + 3),
        ge(s0 * s1, 2 * s0 + 1),
        not_(and_(gt(s0 // 2, s1), ne(s1 % 3, 1))),
        or_(lt(s0, s1), eq(2 * s0, 2)),
    ]
    for b in relations:
        env: dict[str, Any] = {}
        assert _prove(to_z3(b, env) == to_z3(normalize(b), env)), b


def test_canonicalisation_proved_by_z3() -> None:
    x = z3.Int("s0")
    assert _prove(to_z3((s0 + 1) * (s0 - 1), {"s0": x}) == (x + 1) * (x - 1))
    assert _prove(to_z3(s0 * s0 - 1) == to_z3((s0 + 1) * (s0 - 1)))


# ---------------------------------------------------------------------------------------------------------
# Methods.


def test_subs_folds() -> None:
    assert (sym("s0") * sym("s1")).subs({"s0": 3, "s1": 4}) is const(12)
    assert (s0 * s1 + s2).subs({"s0": s2}) is (s1 * s2 + s2)
    assert ite(gt(s0, 2), s1, s2).subs({"s0": 5}) is s1
    assert and_(gt(s0, 2), ne(s1, 1)).subs({"s0": 0}) is FALSE
    assert ((s0 + 1) // s1).subs({"s1": 2}) is ((s0 + 1) // 2)
    e = s0 + 1
    assert e.subs({"s9": 3}) is e


def test_free_symbols_value_is_const() -> None:
    e = ite(gt(s0, 2), s1 // 2, 3)
    assert e.free_symbols() == frozenset({"s0", "s1"})
    assert const(0).free_symbols() == frozenset()
    assert const(7).is_const and const(7).value == 7
    assert TRUE.is_const and TRUE.value is True
    assert not s0.is_const
    with pytest.raises(ValueError):
        _ = s0.value


def test_eval() -> None:
    env = {"s0": 7, "s1": -2, "s2": 0}
    assert (s0 * s1 + 2).eval(env) == -12
    assert (s0 // s1).eval(env) == 7 // -2 and (s0 % s1).eval(env) == 7 % -2
    assert ite(gt(s0, 2), s1, s2).eval(env) == -2
    assert and_(gt(s0, 2), ne(s1, 1)).eval(env) is True
    with pytest.raises(ZeroDivisionError):
        (s0 // s2).eval(env)
    assert ite(eq(s2, 0), 0, s0 // s2).eval(env) == 0  # the untaken branch is not evaluated


def test_to_python_strings() -> None:
    assert str(s0 * s1 + 2) == "s0*s1 + 2"
    assert str(s0 - 1) == "s0 - 1"
    assert str(1 - s0) == "1 - s0"
    assert str(-s0 - 1) == "-s0 - 1"
    assert str((s0 + 1) // 2) == "(s0 + 1)//2"
    assert str(minimum(s1, s0)) == "min(s0, s1)"
    assert str(ite(eq(s0, 1), s1, s0)) == "(s1 if s0 == 1 else s0)"
    assert str(gt(s0, 2)) == "s0 > 2"
    assert str(and_(gt(s0, 2), ne(s1, 1))) == "(s0 > 2 and s1 != 1)"
    assert str(not_(and_(gt(s0, 2), ne(s1, 1)))) == "not (s0 > 2 and s1 != 1)"
    assert str(s0 * s0 - 1) == "s0*s0 - 1"
    assert str(2 * (s0 // 3)) == "2*(s0//3)"
    assert str(-(s0 // 3)) == "-(s0//3)"
    assert str(s1 // (s0 * s1)) == "s1//(s0*s1)"
    assert str(s0 % 3) == "s0%3"
    assert str(sym("s10") + sym("s2")) == "s2 + s10"
    assert str(TRUE) == "True"
    assert repr(s0 + 1) == "Expr(s0 + 1)"
    names = {"s0": "a.shape[0]", "s1": "b.shape[1]"}
    assert gt(s0, 2).to_python(names.__getitem__) == "a.shape[0] > 2"
    assert (s0 * s1 - 2).to_python(names.__getitem__) == "a.shape[0]*b.shape[1] - 2"


def test_sort_key_numeric_suffix() -> None:
    assert sym("s2").sort_key < sym("s10").sort_key
    assert str(and_(gt(sym("s10"), 0), gt(sym("s9"), 0))) == "(s9 > 0 and s10 > 0)"


def test_immutable_copy_pickle_and_weak_table() -> None:
    e = s0 * s1 + 1
    with pytest.raises(AttributeError):
        e.op = "const"  # type: ignore[misc]
    with pytest.raises(TypeError):
        Expr()
    assert copy.copy(e) is e and copy.deepcopy(e) is e
    assert pickle.loads(pickle.dumps(e)) is e
    ref = weakref.ref(sym("only_used_here") + 12345)
    gc.collect()
    assert ref() is None


def test_type_errors() -> None:
    with pytest.raises(TypeError):
        add(TRUE, 1)
    with pytest.raises(TypeError):
        and_(s0)
    with pytest.raises(TypeError):
        ite(s0, 1, 2)
    with pytest.raises(TypeError):
        s0 + 1.5  # noqa: B018


def test_bounds_examples() -> None:
    assert bounds(s0 % 4, {}) == (0, 3)
    assert bounds(s0 * s1, {"s0": (0, 3), "s1": (2, 5)}) == (0, 15)
    assert bounds(s0 * s0, {"s0": (-3, 2)}) == (0, 9)
    assert bounds(s0 - s1, {"s0": (0, None), "s1": (0, 4)}) == (-4, None)
    assert bounds((s0 + 3) // 2, {"s0": (0, 5)}) == (1, 4)
    assert bounds(minimum(s0, 7), {"s0": (0, None)}) == (0, 7)
    assert bounds(ite(gt(s0, 2), s1, 0), {"s0": (3, None), "s1": (1, 2)}) == (1, 2)
    assert bounds(s1 // s0, {"s0": (1, None), "s1": (0, 10)}) == (0, 10)
    assert bounds(s0, {}) == (None, None)
    assert decide_by_bounds(ge(s0 * s1, 0), {"s0": (0, None), "s1": (0, None)}) is True
    assert decide_by_bounds(eq(s0, 0), {"s0": (1, None)}) is False
    assert decide_by_bounds(eq(2 * s0, 1), {}) is False
    assert decide_by_bounds(gt(s0, 3), {"s0": (0, None)}) is None
    assert decide_by_bounds(or_(gt(s0, 3), ge(s1, 0)), {"s1": (0, 0)}) is True


def test_to_z3_env_population() -> None:
    env: dict[str, Any] = {}
    to_z3(s0 + s1, env)
    assert set(env) == {"s0", "s1"} and all(isinstance(v, z3.ArithRef) for v in env.values())
    x = z3.Int("x")
    assert _prove(to_z3(s0 // s1, {"s0": x, "s1": z3.IntVal(-2)}) == _py_floordiv(x, z3.IntVal(-2)))


# ---------------------------------------------------------------------------------------------------------
# Properties.


@FAST
@given(INTS, ENVS)
def test_eval_matches_reference(r: Recipe, env: dict[str, int]) -> None:
    expected = _ref_or_none(r, env)
    if expected is not None:
        assert r.expr.eval(env) == expected


@FAST
@given(st.one_of(INTS, BOOLS), ENVS)
def test_to_python_round_trips(r: Recipe, env: dict[str, int]) -> None:
    code = compile(r.expr.to_python(), "<expr>", "eval")
    try:
        value = r.expr.eval(env)
    except ZeroDivisionError:
        with pytest.raises(ZeroDivisionError):
            eval(code, {}, dict(env))
        return
    assert eval(code, {}, dict(env)) == value


@SLOW
@given(st.one_of(INTS, BOOLS), ENVS)
def test_z3_agrees_with_eval(r: Recipe, env: dict[str, int]) -> None:
    try:
        value = r.expr.eval(env)
    except ZeroDivisionError:
        return
    zenv = {n: z3.Int(n) for n in SYMS}
    expected = z3.BoolVal(value) if isinstance(value, bool) else z3.IntVal(value)
    fixed = z3.And(*(zenv[n] == env[n] for n in SYMS))
    assert _prove(z3.Implies(fixed, to_z3(r.expr, zenv) == expected))


@FAST
@given(BOOLS, ENVS)
def test_normalize_preserves_meaning(r: Recipe, env: dict[str, int]) -> None:
    n = normalize(r.expr)
    assert normalize(n) is n
    expected = _ref_or_none(r, env)
    if expected is not None:
        assert r.expr.eval(env) == expected
        assert n.eval(env) == expected


LINEAR = st.builds(
    lambda ks, c, op: _REL[op][1](ks[0] * s0 + ks[1] * s1 + c, 0),
    st.tuples(st.integers(-6, 6), st.integers(-6, 6)),
    st.integers(-9, 9),
    st.sampled_from(sorted(_REL)),
)


@SLOW
@given(LINEAR, LINEAR)
def test_normalize_linear_is_exact(a: Expr, b: Expr) -> None:
    env: dict[str, Any] = {}
    assert _prove(to_z3(a, env) == to_z3(normalize(a), env))
    # complete in the linear case: relations meaning the same thing share one normal form
    assert (normalize(a) is normalize(b)) == _prove(to_z3(a, env) == to_z3(b, env))


def _ranges(nonneg: bool) -> st.SearchStrategy[dict[str, tuple[int | None, int | None]]]:
    lo = st.integers(0, 4) if nonneg else st.one_of(st.none(), st.integers(-5, 5))
    rng = st.tuples(lo, st.one_of(st.none(), st.integers(0, 6))).map(
        lambda t: (t[0], None if t[1] is None else (t[0] or 0) + t[1])
    )
    return st.fixed_dictionaries({n: rng for n in SYMS})


def _env_within(data: st.DataObject, ranges: dict[str, tuple[int | None, int | None]]) -> dict[str, int]:
    env = {}
    for n, (lo, hi) in ranges.items():
        lo2 = lo if lo is not None else (hi if hi is not None else 0) - 12
        env[n] = data.draw(st.integers(lo2, hi if hi is not None else lo2 + 12))
    return env


@FAST
@given(st.one_of(INTS, BOOLS), st.booleans(), st.data())
def test_bounds_are_sound(r: Recipe, nonneg: bool, data: st.DataObject) -> None:
    ranges = data.draw(_ranges(nonneg))
    env = _env_within(data, ranges)
    try:
        value = r.expr.eval(env)
    except ZeroDivisionError:
        return
    if r.expr.is_bool:
        decided = decide_by_bounds(r.expr, ranges)
        assert decided is None or decided == value
    else:
        lo, hi = bounds(r.expr, ranges)
        assert (lo is None or lo <= value) and (hi is None or value <= hi)


def test_nested_min_max_with_constants_collapse() -> None:
    s0 = sym("s0")
    assert maximum(0, maximum(0, minimum(64, s0))) is maximum(0, minimum(64, s0))
    assert maximum(3, maximum(5, s0)) is maximum(5, s0)
    assert minimum(2, minimum(7, s0)) is minimum(2, s0)
    for v in (-3, 0, 4, 70):
        assert maximum(0, maximum(0, minimum(64, s0))).eval({"s0": v}) == max(0, max(0, min(64, v)))


MONOMIALS = st.builds(
    lambda c, names: mul(c, math.prod((sym(n) for n in names), start=const(1))),
    st.sampled_from([-3, -2, -1, 1, 2, 4]),
    st.lists(st.sampled_from(SYMS), min_size=1, max_size=3),
)


@FAST
@given(INTS, MONOMIALS, st.one_of(st.just(const(0)), INTS.map(lambda r: r.expr)), ENVS)
def test_exact_quotient_is_floordiv_where_the_divisor_is_nonzero(q: Recipe, b: Expr, rest: Expr, env: dict) -> None:
    """`exact_quotient(a, b)` (a view's -1 related back to the batch) is `a // b`, `a % b == 0`, wherever b != 0;
    a product `q*b` always divides back to q."""
    for a in (mul(q.expr, b), add(mul(q.expr, b), rest)):
        found = exact_quotient(a, b)
        if a is mul(q.expr, b):
            assert found is not None
        bv = b.eval(env)
        try:
            av = a.eval(env)
        except ZeroDivisionError:
            continue
        if found is not None and bv != 0:
            assert found.eval(env) == av // bv and av % bv == 0
