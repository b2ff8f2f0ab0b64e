"""Property: Python number protocols on symbolic ints and floats give eager's results, call after call.

Each example compiles one small program (`dynamic=True`) and calls it with a sequence of values, so an entry compiled
for one value is offered the others: it must serve only those for which tracing takes every decision the same way.
Floats include nan, +-inf and +-0.0; ints have both signs (bitwise ops, //, %, divmod, shifts, hashing).
"""

from __future__ import annotations

import math

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import specengine

SPECIAL = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.0, -1.0, 0.5]
FLOATS = st.one_of(st.sampled_from(SPECIAL), st.floats(-1e6, 1e6, allow_nan=False, width=32))
INTS = st.one_of(st.integers(-9, 9), st.integers(-(2**40), 2**40))

INT_OPS = {
    "and": lambda a, b: a & b,
    "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b,
    "and-mask": lambda a, b: (a & 7, a & -8, b & 1),
    "invert": lambda a, b: ~a + ~b,
    "shifts": lambda a, b: (a >> 3, a << 2, b >> 1),
    "shift-by-int": lambda a, b: a >> (b % 7),
    "floordiv": lambda a, b: a // b,
    "mod": lambda a, b: a % b,
    "divmod": lambda a, b: divmod(a, b),
    "pow-mod": lambda a, b: pow(a, 3, b),
    "truediv": lambda a, b: a / b,
    "hash": lambda a, b: (hash(a) == hash(b), len({a, b, 3})),
    "in-set": lambda a, b: a in {2, 3, b},
    "dict-get": lambda a, b: {0: 10, 1: 11, -1: 12}.get(a % 3 - 1, b),
    "vs-float": lambda a, b: (a > 2.5, a <= -0.5, a == 2.0, b < float("inf"), a != float("nan")),
    "attributes": lambda a, b: (a.real, a.imag, a.numerator, a.denominator, a.conjugate(), abs(b)),
    "str": lambda a, b: f"{a}:{b:>4}",
    "branch": lambda a, b: a - b if a & 1 else a + b,
}

FLOAT_OPS = {
    "gt": lambda s, t: s > t,
    "le": lambda s, t: s <= t,
    "eq-ne": lambda s, t: (s == t, s != t),
    "not-gt-0": lambda s, t: not (s > 0),
    "branch": lambda s, t: s + 1.0 if s > t else s - 1.0,
    "arith": lambda s, t: (s + t, s - t, s * t, -s),
    "truediv": lambda s, t: s / t,
    "copysign": lambda s, t: math.copysign(1.0, s),
    "isnan-isinf": lambda s, t: (math.isnan(s), math.isinf(t)),
    "str": lambda s, t: str(s),
    "hash": lambda s, t: hash(s) == hash(t) if s == s and t == t else None,
    "in-set": lambda s, t: s in {0.0, 1.0, float("inf")},
    "bool": lambda s, t: bool(s),
    "int-vs-float": lambda s, t: (3 > s, 3 == s, 3 / s if s else None),
}


def _same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return torch.equal(a.nan_to_num(), b.nan_to_num())
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return (a != a and b != b) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return a == b


def _program(op):
    def f(x, a, b):
        return x * 2, op(a, b)

    return f


def _run(op, calls) -> None:
    fn = _program(op)
    cfn = specengine.compile(fn, dynamic=True, recompile_limit=len(calls) + 1)
    x = torch.ones(2)
    for a, b in calls:
        try:
            expected = fn(x, a, b)
        except Exception as e:  # noqa: BLE001 - eager's exception is the expectation
            try:
                cfn(x, a, b)
            except Exception as got:  # noqa: BLE001
                assert type(got) is type(e), f"{a!r}, {b!r}: eager raised {e!r}, compiled {got!r}"
                continue
            raise AssertionError(f"{a!r}, {b!r}: eager raised {e!r}, compiled returned") from e
        got = cfn(x, a, b)
        assert _same(got, expected), f"{a!r}, {b!r}: compiled {got[1]!r}, eager {expected[1]!r}"
    assert specengine.cache_misses(cfn) <= len(calls)


_SETTINGS = settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


@_SETTINGS
@given(name=st.sampled_from(sorted(INT_OPS)), calls=st.lists(st.tuples(INTS, INTS), min_size=2, max_size=4))
def test_int_protocols_match_eager(name, calls):
    _run(INT_OPS[name], calls)


@_SETTINGS
@given(name=st.sampled_from(sorted(FLOAT_OPS)), calls=st.lists(st.tuples(FLOATS, FLOATS), min_size=2, max_size=4))
def test_float_protocols_match_eager(name, calls):
    _run(FLOAT_OPS[name], calls)


@_SETTINGS
@given(calls=st.lists(st.tuples(INTS, FLOATS), min_size=2, max_size=4))
def test_int_and_float_mixed_match_eager(calls):
    _run(lambda n, s: (n * s, n + s, n / s if s else 0.0, n < s, n >= s, n == s), calls)
