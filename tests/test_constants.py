"""Constants by reference and exact constants (issue 22, parts 3 and 6), as a generator.

Programs are the cross product of
- *value families*: values that compare equal but behave differently (`2`, an IntEnum member, an int subclass,
  a numpy int; `-0.0`, `0.0`, a float subclass, numpy floats; `1`, `True`, `1.0`; complex signed zeros; a str, a
  str Enum member, a str subclass);
- *where the value comes from*: an argument, a global, a closure variable, a module attribute;
- *how it is used*: arithmetic with a tensor, as a size, in a branch, as an op keyword, returned after Python
  arithmetic (whose result keeps eager's type);

each run under the three dynamic modes against eager, with exact hit and miss counts: a value built anew hits, a
value of the same family that compares equal to it (another type, another sign of zero) misses.

The int, float and str subclasses carry payloads: `__repr__`, `__str__` and `__format__` return code that would
set a flag if it ever ran, and they, `__index__`, `__int__`, `__float__` and `__hash__` record each call. Eager runs
none of them for these programs, so neither may the engine, at compile time or on a cached call.
"""

from __future__ import annotations

import builtins
import enum
import math
import types
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest
import torch
from helpers import counts

import specengine

PAYLOAD = "(__import__('builtins').__setattr__('CONSTANT_PAYLOAD_RAN', 1) or 2)"
CALLED: list[str] = []  # payload methods that ran


class _Payload:
    def __repr__(self) -> str:
        CALLED.append("repr")
        return PAYLOAD

    def __str__(self) -> str:
        CALLED.append("str")
        return PAYLOAD

    def __format__(self, spec: str) -> str:
        CALLED.append("format")
        return PAYLOAD

    def __index__(self) -> int:
        CALLED.append("index")
        return 7

    def __int__(self) -> int:
        CALLED.append("int")
        return 7

    def __float__(self) -> float:
        CALLED.append("float")
        return 7.0

    def __hash__(self) -> int:  # (the dispatch index must not hash a value that is not exactly an int)
        CALLED.append("hash")
        return 7


class PInt(_Payload, int):
    pass


class PFloat(_Payload, float):
    pass


class PStr(_Payload, str):
    pass


class Mode(enum.IntEnum):
    ONE = 1
    TWO = 2


class Rounding(str, enum.Enum):
    FLOOR = "floor"


@dataclass(frozen=True)
class Family:
    """Values that compare equal: each is offered after the one before it must not serve it."""

    name: str
    kind: str  # "int", "float", "complex", "str": which uses apply
    makers: tuple[Callable[[], Any], ...]  # each builds its value anew


FAMILIES = [
    Family("two", "int", (lambda: 2, lambda: Mode.TWO, lambda: PInt(2), lambda: np.int64(2))),
    Family("one", "int", (lambda: 1, lambda: True, lambda: 1.0, lambda: Mode.ONE)),
    Family("half", "float", (lambda: 2.5, lambda: PFloat(2.5), lambda: np.float32(2.5), lambda: np.float64(2.5))),
    Family("zero", "float", (lambda: -0.0, lambda: 0.0, lambda: PFloat(-0.0), lambda: np.float64(-0.0))),
    Family("complex", "complex", (lambda: complex(-1.0, -0.0), lambda: complex(-1.0, 0.0))),
    Family("str", "str", (lambda: "floor", lambda: Rounding.FLOOR, lambda: PStr("floor"))),
    Family(
        "array",
        "array",
        (lambda: np.array([-0.0, 2.0]), lambda: np.array([0.0, 2.0]), lambda: np.array([-0.0, 2.0], dtype=np.float32)),
    ),  # fmt: skip
]

# how the value is used: (name, kinds it applies to, body over `x` and `c`)
USES = [
    ("arith", ("int", "float", "complex"), "return 1 / (x * c + 0.0)"),
    ("size", ("int",), "return torch.zeros(c) + x.sum()"),
    ("size", ("int",), "return x.new_zeros(x.shape[0] * c) + 1"),
    ("branch", ("int",), "return x + 1 if c > 1 else x - 1"),
    ("branch", ("float",), "return x + 1 if math.copysign(1.0, c) > 0 and c < 1.0 else x - 1"),
    ("branch", ("complex",), "return x + 1 if math.copysign(1.0, c.imag) > 0 else x - 1"),
    ("branch", ("str",), "return x + 1 if c == 'floor' else x - 1"),
    ("kwarg", ("int", "float", "complex"), "return torch.full((2,), fill_value=c) * x.sum()"),
    ("kwarg", ("str",), "return torch.div(x, 3, rounding_mode=c)"),
    ("returned", ("int", "float", "complex"), "return x + 1, c * 2, -c"),
    ("data", ("int", "float", "complex"), "return x + 1, torch.tensor(c), torch.as_tensor([c, c])"),
    ("returned", ("str",), "return x + 1, c + '_x', c[:2]"),
    ("arith", ("array",), "return 1 / (x * torch.as_tensor(c)[:1]), 1 / (x * c[0])"),
    ("size", ("array",), "return x.new_zeros(c.shape[0]) + x.sum()"),
    ("branch", ("array",), "return x + 1 if math.copysign(1.0, c[0]) > 0 else x - 1"),
    ("returned", ("array",), "return x + 1, c * 2, c.dtype.itemsize"),
]
SOURCES = ("argument", "global", "closure", "module")


def _program(source: str, body: str) -> tuple[Callable, Callable[[Any], tuple]]:
    """The function `f`, and `bind(value)`: the arguments of a call that reads `value` from `source`."""
    read = {"argument": "", "global": "c = C", "closure": "c = cell", "module": "c = cfg.value"}[source]
    params = "x, c" if source == "argument" else "x"
    text = (
        "def make():\n"
        "    cell = None\n"
        f"    def f({params}):\n"
        f"        {read}\n"
        f"        {body}\n"
        "    def put(v):\n"
        "        nonlocal cell\n"
        "        cell = v\n"
        "    return f, put\n"
    )
    cfg = types.ModuleType("constants_cfg")
    ns: dict[str, Any] = {"torch": torch, "math": math, "cfg": cfg}
    exec(compile(text, f"<constants {source}>", "exec"), ns)
    f, put = ns["make"]()

    def bind(value: Any) -> tuple:
        if source == "argument":
            return (value,)
        ns["C"] = value
        put(value)
        cfg.value = value
        return ()

    return f, bind


def _same(got: Any, expected: Any) -> None:
    """Equal, of the same type, and the same signs of zero."""
    assert type(got) is type(expected), (got, expected)
    if isinstance(expected, tuple):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            _same(g, e)
    elif isinstance(expected, np.ndarray):
        assert got.dtype == expected.dtype and got.shape == expected.shape
        assert got.tobytes() == expected.tobytes()
    elif isinstance(expected, torch.Tensor):
        assert got.dtype == expected.dtype and got.shape == expected.shape
        torch.testing.assert_close(got, expected, equal_nan=True, rtol=0, atol=0)
        real = (lambda t: torch.view_as_real(t)) if expected.is_complex() else (lambda t: t)
        if expected.is_floating_point() or expected.is_complex():
            assert torch.equal(torch.signbit(real(got)), torch.signbit(real(expected)))
    else:
        assert got == expected or (got != got and expected != expected)
        if isinstance(expected, (complex, np.complexfloating)):
            assert _signs(got.real, got.imag) == _signs(expected.real, expected.imag)
        elif isinstance(expected, (float, np.floating)):
            assert _signs(got) == _signs(expected)


def _signs(*parts: Any) -> tuple:
    return tuple(math.copysign(1.0, p) for p in parts)


def _cases():
    for family in FAMILIES:
        for use, kinds, body in USES:
            if family.kind not in kinds:
                continue
            for source in SOURCES:
                yield pytest.param(family, use, body, source, id=f"{family.name}-{use}-{source}")


def _entry_key(value: Any, index: int, source: str, dynamic: Any) -> Any:
    """Which entry serves `value`: an int or float argument under dynamic=True is symbolic (any value of its type,
    `0.0` after `-0.0` too: the computation reads the sign at run time) unless a branch or a kernel pins it; any other value
    has an entry of its own."""
    if dynamic is True and source == "argument" and type(value) in (int, float):
        return type(value)
    return index


def _eager(f: Callable, args: tuple) -> Any:
    return f(*args)


@pytest.fixture
def no_payload():
    CALLED.clear()
    yield
    assert not hasattr(builtins, "CONSTANT_PAYLOAD_RAN")


@pytest.mark.parametrize("dynamic", [None, True, False])
@pytest.mark.parametrize("family,use,body,source", list(_cases()))
def test_constants(family: Family, use: str, body: str, source: str, dynamic: Any, no_payload: None) -> None:
    f, bind = _program(source, body)
    cfn = specengine.compile(f, dynamic=dynamic)
    x = torch.randn(2)
    makers = family.makers
    # each value, then the same value built anew (hits), then the next value of the family (must miss) ...
    order = [i for i in range(len(makers)) for _ in (0, 1)] + [0]
    seen, misses, hits = set(), 0, 0
    for i in order:
        args = (x, *bind(makers[i]()))
        CALLED.clear()
        try:
            expected = _eager(f, args)
        except Exception as e:  # noqa: BLE001 - eager's error is the expectation (e.g. a bool size)
            with pytest.raises(type(e)):
                cfn(x, *bind(makers[i]()))
            assert CALLED == [], f"payload methods ran: {CALLED}"
            continue
        assert CALLED == [], f"eager ran payload methods: {CALLED}"
        key = _entry_key(makers[i](), i, source if use not in ("branch", "data") else "pinned", dynamic)
        misses, hits = misses + (key not in seen), hits + (key in seen)
        seen.add(key)
        got = cfn(x, *bind(makers[i]()))  # (built anew: an equal object, not the one eager saw)
        assert CALLED == [], f"payload methods ran: {CALLED}"
        _same(got, expected)
    assert counts(cfn) == (misses, hits), specengine.recompile_reasons(cfn)
    before = counts(cfn)
    for n in (0, 1, 3):  # other sizes with the first value: a miss per size (False), one (None), none (True)
        xs = torch.randn(n)
        args = (xs, *bind(makers[0]()))
        _same(cfn(*args), _eager(f, args))
    extra = {False: 3, None: 1, True: 0}[dynamic]
    assert counts(cfn) == (before[0] + extra, before[1] + 3 - extra), specengine.recompile_reasons(cfn)
    for entry in specengine.cache_entries(cfn):
        for trace in entry.traces:
            assert "__import__" not in str(trace)
        assert "__import__" not in str(entry.prologue)


def test_the_generator_covers_every_family_source_and_use():
    cases = list(_cases())
    assert len(cases) == sum(len(SOURCES) for fam in FAMILIES for _, kinds, _ in USES if fam.kind in kinds)
    assert {c.values[0].name for c in cases} == {f.name for f in FAMILIES}


# Constants inside one program that compare equal but behave differently: CSE must keep both ops.
PAIRS = [
    ("-0.0", "0.0"),
    ("1", "True"),
    ("1", "1.0"),
    ("True", "1.0"),
    ("complex(1.0, -0.0)", "complex(1.0, 0.0)"),
    ("complex(-0.0, 1.0)", "complex(0.0, 1.0)"),
    ("float('nan')", "float('-inf')"),
]
OPS = [
    "1 / (x * {k})",
    "1 / torch.full((x.shape[0],), {k})",
    "1 / torch.where(x > 0, x, {k})",
    "1 / x.new_full((2,), {k})",
    "1 / torch.mul(x, {k})",
]


@pytest.mark.parametrize("dynamic", [None, True, False])
@pytest.mark.parametrize("a,b", PAIRS)
@pytest.mark.parametrize("op", OPS)
def test_equal_constants_stay_apart(op: str, a: str, b: str, dynamic: Any) -> None:
    ns: dict[str, Any] = {"torch": torch}
    exec(f"def f(x):\n    return {op.format(k=a)}, {op.format(k=b)}\n", ns)
    f = ns["f"]
    cfn = specengine.compile(f, dynamic=dynamic)
    try:
        f(torch.randn(2))
    except RuntimeError:  # (a complex fill of a real tensor): the compiled function raises as eager does
        with pytest.raises(RuntimeError):
            cfn(torch.randn(2))
        return
    for n in (2, 0, 1, 2):
        x = torch.randn(n)
        _same(cfn(x), f(x))
    # sizes 2, 0, 1, 2: static entries per size (False); static, then one dynamic entry (None); one entry (True)
    assert counts(cfn) == {False: (3, 1), None: (2, 2), True: (1, 3)}[dynamic], specengine.recompile_reasons(cfn)


@pytest.mark.parametrize("dynamic", [None, True, False])
@pytest.mark.parametrize("source", SOURCES)
def test_an_array_changed_in_place_is_not_served_the_old_entry(source: str, dynamic: Any) -> None:
    f, bind = _program(source, "return x * float(c.sum())")
    cfn = specengine.compile(f, dynamic=dynamic)
    a = np.array([1.0, 2.0])
    x = torch.randn(2)
    for change in (None, (0, 5.0), None, (1, -0.0), (1, 0.0), None):
        if change is not None:
            a[change[0]] = change[1]
        args = (x, *bind(a))
        _same(cfn(*args), f(*args))
    assert counts(cfn) == (4, 2)  # three changes of contents miss; -0.0 after 0.0 too (the bytes differ)


def test_constants_are_globals_of_the_printed_trace() -> None:
    def f(x, c, a):
        return torch.mul(x, c), c * 2, torch.as_tensor(a) + x

    cfn = specengine.compile(f, dynamic=True)
    a = np.array([1.0, 2.0])
    x = torch.randn(2)
    for c in (Mode.TWO, PInt(2), np.float32(2.5)):
        _same(cfn(x, c, a), f(x, c, a))
        trace = specengine.last_traces(cfn)[-1]
        source = str(trace)
        assert "_c0.copy()" in source and "__import__" not in source and "Mode" not in source  # (the array)
        ns = {**specengine.ir.trace.trace_globals(), **trace.constants()}
        exec(source, ns)
        got, expected = ns[trace.name](x), f(x, c, a)
        tensors = [v for v in got if isinstance(v, torch.Tensor)]  # (constant outputs are the entry's, not traced)
        _same(tuple(tensors), (expected[0], expected[2]))
    a_new = a.copy()
    a[0] = 7.0  # the first call's array changed in place: the entry holds the contents it checked
    _same(cfn(x, np.float32(2.5), a_new), f(x, np.float32(2.5), a_new))
    assert counts(cfn) == (3, 1) and CALLED == []


def numpy_scalar_types() -> list[type]:
    """Every numpy scalar type (numpy 2 has no `np.sctypes`: the concrete types of `np.sctypeDict`, deduplicated)."""
    types = {t for t in np.sctypeDict.values() if issubclass(t, np.generic) and t is not np.object_}
    return sorted(types, key=lambda t: t.__name__)  # (np.object_(v) is v: no scalar of its own)


def _numpy_values(t: type) -> tuple[Any, Any]:
    """Two values of numpy scalar type `t` that differ (for a string, bytes or void type: two contents)."""
    kind = np.dtype(t).kind
    if kind in "iu":
        return t(2), t(3)
    if kind == "b":
        return t(True), t(False)
    if kind in "fc":
        return t(-0.0), t(0.0)  # (equal, but not the same value)
    if kind in "mM":
        return t(1, "D"), t(2, "D")
    if kind == "U":
        return t("floor"), t("trunc")
    return t(b"ab"), t(b"cd")  # bytes_, void


_NUMPY_BODIES = {
    "iub": "return x * c, c * 2, c == c, x.new_zeros(int(c)), torch.tensor(c), x + 1 if c else x - 1",
    "fc": "return 1 / (x * c), c * 2, -c, c == c, torch.tensor(c), torch.full((2,), c)",
    "mM": "return x + 1, c, c == c, c + c if c.dtype.kind == 'm' else c",
    "U": "return torch.div(x, 3, rounding_mode=c), c + '_', c == 'floor'",
    "SV": "return x + 1, c, c == c",
}


@pytest.mark.parametrize("source", ["argument", "closure"])
@pytest.mark.parametrize("t", numpy_scalar_types(), ids=lambda t: t.__name__)
def test_every_numpy_scalar_type(t: type, source: str) -> None:
    """Each numpy scalar type, as an argument and a closure variable (globals: the families above): results of eager's types, no payload
    of generated code names numpy (`NameError: np`), an equal value built anew hits, another value (another sign of
    zero) or the builtin value of the same number misses. The dynamic mode rotates over types (all three covered)."""
    kind = np.dtype(t).kind
    body = next(b for kinds, b in _NUMPY_BODIES.items() if kind in kinds)
    f, bind = _program(source, body)
    dynamic = [None, True, False][numpy_scalar_types().index(t) % 3]
    cfn = specengine.compile(f, dynamic=dynamic)
    a, b = _numpy_values(t)
    x = torch.randn(3)
    base = a.item() if type(a.item()) in (int, float, complex, bool, str, bytes) else None
    values = [a, t(a), b, a] + ([base] if base is not None else [])
    raised = False
    for v in values:
        args = (x, *bind(v))
        try:
            expected = f(*args)
        except Exception as e:  # noqa: BLE001 - eager's error is the expectation
            with pytest.raises(type(e)):
                cfn(*args)
            raised = True
            continue
        _same(cfn(*args), expected)
    misses = 3 if base is not None else 2  # a, b, and the builtin value; t(a) and a again hit
    if not raised:
        assert counts(cfn) == (misses, len(values) - misses), specengine.recompile_reasons(cfn)
