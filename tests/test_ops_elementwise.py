"""The op database for ltorch_elementwise(2): unary math, activations, binary integer/logical ops, masked_fill,
clamp, lerp, casts and in-place forms, against eager PyTorch over a sweep of sizes (the structure of
test_ops.py). Every call is compared with eager (the same exception type where eager raises), so are the
traced output's dtype and shape and the values of the entry's decomposition into prims.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F

import specengine
from specengine.errors import UnsupportedOpError
from specengine.ir import passes
from specengine.ir.proxies import TensorProxy
from specengine.ir.symbol import tree_leaves

N, M, K, W = "n", "m", "k", "w"  # W: a float argument, k / 2 + 0.25
SWEEP = [(2, 3, 1), (0, 2, 0), (1, 1, -1), (2, 0, 3), (5, 4, 2), (1, 5, 7), (3, 1, -4), (4, 4, 4)]
F64, BF16 = torch.float64, torch.bfloat16


@dataclass(frozen=True)
class T:
    """A tensor spec: sizes (ints or N/M) and dtype; ints are drawn from [low, high)."""

    shape: tuple
    dtype: torch.dtype = torch.float32
    low: int = -5
    high: int = 6


def i64(*shape: Any, low: int = -5) -> T:
    return T(shape, torch.int64, low)


def b8(*shape: Any) -> T:
    return T(shape, torch.bool)


def f64(*shape: Any) -> T:
    return T(shape, F64)


def bf16(*shape: Any) -> T:
    return T(shape, BF16)


@dataclass(frozen=True)
class OpCase:
    """`fn` over `templates`; `one_miss`: one compile per template serves every size; `static`: also swept with
    dynamic=False."""

    name: str
    fn: Callable
    templates: list
    one_miss: bool = True
    static: bool = False
    xfail: str | None = None


def _fill(spec: Any, env: dict) -> Any:
    if isinstance(spec, str):
        return env[spec]
    if isinstance(spec, tuple):
        spec = T(spec)
    if not isinstance(spec, T):
        return spec
    shape = tuple(env.get(s, s) for s in spec.shape)
    if spec.dtype.is_floating_point:
        return torch.randn(shape).to(spec.dtype)
    if spec.dtype is torch.bool:
        return torch.randint(0, 2, shape).bool()
    return torch.randint(spec.low, spec.high, shape, dtype=spec.dtype)


def _signature(args: list) -> tuple:
    return tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args)


def calls_by_template(case: OpCase) -> list[list[list]]:
    out, seen = [], set()
    for template in case.templates:
        calls = []
        for n, m, k in SWEEP:
            args = [_fill(s, {N: n, M: m, K: k, W: k / 2 + 0.25}) for s in template]
            if _signature(args) not in seen:
                seen.add(_signature(args))
                calls.append(args)
        out.append(calls)
    return out


def calls_of(case: OpCase) -> list[list]:
    return [args for calls in calls_by_template(case) for args in calls]


def run_both(fn: Callable, cfn: Callable, args: list) -> Any:
    """Eager and compiled on clones of the same inputs (in-place ops mutate them): same outputs, same mutated
    inputs, or the same exception type."""
    clones = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    try:
        expected = fn(*clones)
    except Exception as e:  # noqa: BLE001 - eager's exception is the expectation
        with pytest.raises(type(e)):
            cfn(*args)
        return e
    got = cfn(*args)
    torch.testing.assert_close(got, expected, equal_nan=True)
    torch.testing.assert_close(args, clones, equal_nan=True)
    return got


def check_entry(cfn: Any, args: list, out: Any) -> None:
    """The entry's output proxies have the real outputs' dtypes and shapes; its decomposition into prims computes
    the same values (run on fresh clones of the inputs, for in-place ops)."""
    prologue = specengine.last_prologue(cfn)
    entry = next(e for e in specengine.cache_entries(cfn) if e.prologue is prologue)
    final = entry.traces[-1]
    values = {}
    for param, value in zip(final.params, prologue.fn(*args)):
        values[param.name] = value.clone() if isinstance(value, torch.Tensor) else value
        if isinstance(param, TensorProxy):
            values.update({d.args[0]: size for d, size in zip(param.dims, value.shape) if d.op == "sym"})
    for proxy, value in zip(tree_leaves(final.output), tree_leaves(out)):
        if isinstance(proxy, TensorProxy):
            assert proxy.dtype == value.dtype, f"traced {proxy.dtype}, eager {value.dtype}"
            assert tuple(d.eval(values) for d in proxy.dims) == tuple(value.shape), f"{proxy} vs {value.shape}"
    if entry not in _FLAT:
        specialized = next(t for t in entry.traces if t.provenance.startswith("Specialization"))
        flat = passes.flatten(specialized)
        assert all(b.sym.is_prim or not b.subsymbols for b in flat.bsyms)
        _FLAT[entry] = (flat.params, flat.python_callable())
    params, flat_fn = _FLAT[entry]
    torch.testing.assert_close(flat_fn(*(values[p.name] for p in params)), out, equal_nan=True)


_FLAT: dict = {}


def run_sweep(fn: Callable, calls: list[list], dynamic: bool) -> Any:
    """Compile and run every call twice (the second pass must only hit)."""
    cfn = specengine.compile(fn, dynamic=dynamic)
    for repeat in range(2):
        misses = specengine.cache_misses(cfn)
        for args in calls:
            inputs = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            out = run_both(fn, cfn, args)
            if not isinstance(out, Exception):
                check_entry(cfn, inputs, out)
        assert repeat == 0 or specengine.cache_misses(cfn) == misses, "a repeated call missed"
    return cfn


def _raises(fn: Callable, args: list) -> bool:
    try:
        fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])
    except Exception:  # noqa: BLE001
        return True
    return False


def case_params(cases: list[OpCase]) -> list:
    marks = lambda c: [pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else []  # noqa: E731
    return [pytest.param(c, id=c.name, marks=marks(c)) for c in cases]


# Templates: float32 at ranks 2, 1 and 0, then float64, bfloat16, int64 and bool.

X2, Y2 = (N, M), (N, M)
ONE = [(X2,), ((N,),), ((),)]
ONE_ALL = ONE + [(f64(N, M),), (bf16(N),), (i64(N),), (b8(N),)]
TWO = [(X2, Y2), ((N,), (N,)), ((), ())]
TWO_ALL = TWO + [(f64(N), f64(N)), (bf16(N), bf16(N)), (i64(N, M), i64(N, M, low=1)), (b8(N), b8(N))]
MIXED = [(i64(N), (N,)), ((N,), f64(N)), (b8(N), i64(N)), (bf16(N), ()), (i64(N), f64()), ((N,), b8(N))]
BCAST = [((N, 1), (1, M)), ((N, M), (M,)), ((N, 3), (4,))]
NONZERO = i64(N, M, low=1)
UNARY = ["expm1", "log1p", "log2", "sqrt", "rsqrt", "sin", "cos", "erf", "reciprocal", "floor", "ceil", "trunc",
         "round", "sign", "isnan", "isinf", "logical_not", "bitwise_not"]  # fmt: skip


def _unary_cases(name: str) -> list[OpCase]:
    fn, method = getattr(torch, name), operator.methodcaller(name)
    return [OpCase(name, lambda x: fn(x), ONE_ALL, static=True), OpCase(f"Tensor.{name}", lambda x: method(x), ONE)]


UNARY_CASES = [c for name in UNARY for c in _unary_cases(name)] + [
    OpCase("nan-inf", lambda x: (torch.isnan(x.log()), (x / 0).isinf(), torch.isinf(x.log()), x.log().sign()), ONE),
    OpCase("round-decimals", lambda x: (torch.round(x * 100, decimals=-1), x.round(decimals=2)), ONE_ALL, static=True),
    OpCase("round-decimals-0", lambda x: torch.round(x, decimals=0), [(X2,), (i64(N),), (b8(N),)]),
    OpCase("invert", lambda x: ~x, ONE_ALL, static=True),
    OpCase("floor-ceil-scaled", lambda x: ((x * 3).floor(), torch.ceil(x * 3), (x * 3).trunc()), [(X2,), (bf16(N),)]),
]

ACTIVATIONS = [
    OpCase("gelu", lambda x: F.gelu(x), ONE_ALL, static=True),
    OpCase("gelu-tanh", lambda x: F.gelu(x * 3, approximate="tanh"), ONE_ALL, static=True),
    OpCase("gelu-bad-approximate", lambda x: F.gelu(x, approximate="fast"), [(X2,)]),
    OpCase("silu", lambda x: F.silu(x * 4), ONE_ALL, static=True),
    OpCase("softplus", lambda x: F.softplus(x * 10), ONE_ALL, static=True),
    OpCase("softplus-beta-threshold", lambda x: (F.softplus(x, beta=2, threshold=1), F.softplus(x, 0.5, 0.1)), ONE),
    OpCase("softplus-f64-bf16", lambda x: F.softplus(x * 20, beta=3), [(f64(N),), (bf16(N, M),)]),
]


def _binary_cases(name: str, op: Callable | None = None, templates: list = TWO_ALL, mixed: list = MIXED) -> list:
    fn = getattr(torch, name)
    same = TWO if templates is TWO_ALL else templates[:2]
    cases = [
        OpCase(name, lambda x, y: fn(x, y), templates, static=True),
        OpCase(f"Tensor.{name}", lambda x, y: getattr(x, name)(y), same),
        OpCase(f"{name}-mixed", lambda x, y: fn(x, y), mixed),
        OpCase(f"{name}-broadcast", lambda x, y: fn(x, y), BCAST if templates is TWO_ALL else BCAST_INT, False),
    ]
    return cases + ([OpCase(f"{name}-operator", lambda x, y: op(x, y), same)] if op else [])


def _scalar_cases(name: str, op: Callable, scalars: tuple, templates: list = ONE_ALL) -> list[OpCase]:
    return [
        OpCase(f"{name}-scalar", lambda x: tuple(op(x, s) for s in scalars), templates),
        OpCase(f"{name}-rscalar", lambda x: tuple(op(s, x) for s in scalars), templates),
    ]


INTS = [(i64(N, M), NONZERO), (i64(N), i64(N, low=1)), (T((N,), torch.int32), i64(N, low=1))]
BITS = [(i64(N, M), i64(N, M)), (b8(N), b8(N)), (b8(N, M), i64(M)), (X2, i64(N, M)), (T((N,), torch.int32), i64())]
BITS_MIXED = [(b8(N), i64(N)), (T((N,), torch.int32), i64(N)), (i64(N), b8()), ((N,), b8(N)), (bf16(N), i64(N))]
BCAST_INT = [(i64(N, 1), i64(1, M)), (b8(N, M), b8(M)), (i64(N, 3), i64(4))]
BINARY_CASES = [
    *_binary_cases("floor_divide", operator.floordiv),
    *_scalar_cases("floordiv", operator.floordiv, (2, 2.5, -3)),
    OpCase("floor_divide-scalar-first", lambda x: torch.floor_divide(2, x), ONE),
    OpCase("floor_divide-int", lambda x, y: (x // y, x // -y, torch.floor_divide(x, y)), INTS),
    *_binary_cases("remainder", operator.mod),
    *_scalar_cases("mod", operator.mod, (2, 2.5, -3)),
    OpCase("remainder-scalar-first", lambda x: torch.remainder(2, x), ONE),
    OpCase("remainder-int", lambda x, y: (x % y, x % -y, y.remainder(x.abs() + 1)), INTS),
    *_binary_cases("fmod"),
    OpCase("fmod-scalar", lambda x: (torch.fmod(x, 2), x.fmod(-1.5), x.fmod(True)), ONE_ALL),
    OpCase("fmod-scalar-first", lambda x: torch.fmod(2, x), ONE),
    OpCase("fmod-int", lambda x, y: (torch.fmod(x, y), x.fmod(-y)), INTS),
    *_binary_cases("maximum"),
    *_binary_cases("minimum"),
    OpCase("maximum-scalar", lambda x: (x.maximum(2), x.minimum(2.5)), [(X2,)]),
    *_binary_cases("atan2"),
    OpCase("atan2-scalar", lambda x: x.atan2(2), [(X2,)]),
    *_binary_cases("logical_and"),
    *_binary_cases("logical_or"),
    *_binary_cases("logical_xor"),
    OpCase("logical-scalar", lambda x: x.logical_and(1), [(X2,)]),
    OpCase("logical-tiny-f64", lambda x, y: torch.logical_and(x, y * 1e-50), [((N,), f64())]),
    *_binary_cases("bitwise_and", operator.and_, BITS, BITS_MIXED),
    *_binary_cases("bitwise_or", operator.or_, BITS, BITS_MIXED),
    *_binary_cases("bitwise_xor", operator.xor, BITS, BITS_MIXED),
    *_scalar_cases("and", operator.and_, (3, True), [(i64(N, M),), (b8(N),), (X2,)]),
    *_scalar_cases("or", operator.or_, (3, False), [(i64(N, M),), (b8(N),), (X2,)]),
    *_scalar_cases("xor", operator.xor, (-2, True), [(i64(N, M),), (b8(N),)]),
    OpCase("bitwise-float-scalar", lambda x: x & 2.5, [(i64(N),)]),
    OpCase(
        "nan-propagation",
        lambda x, y: (
            x.log().clamp(-1, 1),
            x.clamp(y.log()),
            x.log().maximum(y),
            x.minimum(y.log()),
            x.clamp(y, y.log()),
        ),
        [(X2, Y2), ((N,), ())],
    ),
    OpCase("bool-masks", lambda x, y: ((x > 0) & (y < 0)) | ~(x > y) ^ (y > 1), [(X2, Y2), ((N, 1), (M,))], False),
]

# masked_fill, clamp, lerp.

FILL_T = [(X2, b8(N, M)), ((N,), b8(N)), ((), b8()), (f64(N), b8(N)), (bf16(N, M), b8(M)), (i64(N), b8(N))]
FILL_T += [(b8(N), b8(N)), (T((N,), torch.float16), b8(N))]
FILL_BCAST = [((1, M), b8(N, 1)), ((N, 1), b8(M)), ((N, M), b8(1))]
OTHER_CASES = [
    OpCase("masked_fill", lambda x, m: torch.masked_fill(x, m, 2.5), FILL_T, static=True),
    OpCase("Tensor.masked_fill", lambda x, m: (x.masked_fill(m, -1), x.masked_fill(m, True)), FILL_T),
    OpCase(
        "masked_fill-broadcast", lambda x, m: (x.masked_fill(m, 2), torch.masked_fill(x, m, -1.5)), FILL_BCAST, False
    ),
    OpCase(
        "masked_fill-tensor-value", lambda x, m, v: x.masked_fill(m, v), [(X2, b8(N, M), ()), (i64(N), b8(N), f64())]
    ),
    OpCase("masked_fill-bad-value", lambda x, m, v: x.masked_fill(m, v), [(X2, b8(N, M), (1,))]),
    OpCase("masked_fill-bad-mask", lambda x, m: x.masked_fill(m, 1.0), [(X2, X2), ((N,), i64(N))]),
    OpCase("masked_fill-overflow", lambda x, m: x.masked_fill(m, 300), [(T((N,), torch.int8), b8(N))]),
    OpCase("masked_fill-float-overflow", lambda x, m: x.masked_fill(m, 1e300), [((N,), b8(N)), (bf16(N), b8(N))]),
    OpCase(
        "masked_fill-reduced-big",
        lambda x, m: x.masked_fill(m, 7e4),
        [(T((N,), torch.float16), b8(N)), (bf16(N), b8(N))],
    ),
    OpCase("masked_fill-mismatch", lambda x, m: x.masked_fill(m, 0), [((N, 3), b8(4))]),
    OpCase("masked_fill_", lambda x, m: x.masked_fill_(m, 1.5), FILL_T[:7], static=True),
    OpCase("masked_fill_-bcast-out", lambda x, m: x.masked_fill_(m, 1.5), [((M,), b8(N, M))]),
    OpCase("masked_fill_-tensor-value", lambda x, m, v: x.masked_fill_(m, v), [(X2, b8(M), ())]),
    OpCase("clamp", lambda x: torch.clamp(x, -0.5, 0.5), ONE_ALL, static=True),
    OpCase("clamp-variants", lambda x: (x.clamp(min=0), x.clamp(max=0.3), torch.clip(x, 1, -1), x.clip(-1)), ONE_ALL),
    OpCase("clamp-min-max-fns", lambda x: (torch.clamp_min(x, 0.5), x.clamp_max(1), x.clamp_min(False)), ONE_ALL),
    OpCase("clamp-none", lambda x: torch.clamp(x), [(X2,)]),
    OpCase("clamp-tensors", lambda x, lo, hi: torch.clamp(x, lo, hi), [(X2, (M,), (N, 1)), (i64(N), (N,), ())]),
    OpCase("clamp-tensor-min", lambda x, lo: (x.clamp(lo), x.clamp(max=lo), x.clamp_min(lo)), TWO_ALL + MIXED),
    OpCase("clamp-mixed-bounds", lambda x, lo: x.clamp(0, lo), [(X2, X2)]),
    OpCase("clamp_", lambda x: x.clamp_(-0.5, 0.5), ONE_ALL, static=True),
    OpCase("clamp_-variants", lambda x, lo: (x.clamp_(lo), x.clip_(max=lo), x.clamp_min_(-1), x.clamp_max_(lo)), TWO),
    OpCase("clamp_-int-float", lambda x: x.clamp_(0.5), [(i64(N),)]),
    OpCase("clamp_-bad-broadcast", lambda x, lo: x.clamp_(lo), [((N,), (2, N)), ((3,), (N,))]),
    OpCase("lerp", lambda x, y: torch.lerp(x, y, 0.3), TWO_ALL, static=True),
    OpCase("lerp-weights", lambda x, y: (x.lerp(y, 0.7), x.lerp(y, 1), x.lerp(y, -0.2), x.lerp(y, True)), TWO),
    OpCase("lerp-tensor-weight", lambda x, y, w: torch.lerp(x, y, w * 2), [(X2, Y2, X2), (bf16(N), bf16(N), bf16(N))]),
    OpCase("lerp-broadcast", lambda x, y, w: x.lerp(y, w), [((N, 1), (M,), (1, M)), ((N,), (N,), f64())], False),
    OpCase("lerp-dtype-mismatch", lambda x, y, w: x.lerp(y, w), [(X2, f64(N, M), 0.5), (X2, Y2, f64(N, M))]),
    OpCase("lerp-int", lambda x, y: (torch.lerp(x, y, 0.5), x.lerp(y, y)), [(i64(N), i64(N))]),
]

CASTS = [
    OpCase("to-dtype", lambda x: (x.to(torch.float64), x.to(torch.int32), x.to(x.dtype)), ONE_ALL, static=True),
    OpCase("to-kwargs", lambda x: (x.to(dtype=BF16), x.to("cpu"), x.to(torch.device("cpu"), F64)), ONE_ALL),
    OpCase("to-other", lambda x, y: (x.to(y), x.type_as(y), y.to(x, copy=True)), MIXED),
    OpCase("to-flags", lambda x: (x.to(torch.int64, False, True), x.to(F64, non_blocking=True)), ONE),
    OpCase(
        "cast-methods", lambda x: (x.float(), x.double(), x.half(), x.bfloat16(), x.long(), x.int(), x.bool()), ONE_ALL
    ),
    OpCase("to-bad-args", lambda x: x.to(torch.float64, "cpu"), [(X2,)]),
    OpCase("to-bad-kwarg", lambda x: x.to(torch.float64, layout=torch.strided), [(X2,)]),
]

# Symbolic int and float arguments (dynamic=True keeps K and W symbolic: no guard on their values).

INT_ARG = [
    OpCase("int-arg-division", lambda x, k: (x // k, x % k, x.fmod(k), x.remainder(k), x.floor_divide(k)), [(X2, K)]),
    OpCase("int-arg-division-int", lambda x, k: (x // k, x % k, k // x, k % x), [(NONZERO, K), (i64(3), K), ((3,), K)]),
    OpCase("int-arg-bitwise", lambda x, k: (x & k, k | x, x ^ k, x.bitwise_and(k)), [(i64(N, M), K), (b8(N), K)]),
    OpCase("int-arg-masked_fill", lambda x, m, k: x.masked_fill(m, k), [(X2, b8(N, M), K), (i64(N), b8(N), K)]),
    OpCase("int-arg-clamp", lambda x, k: (x.clamp(k), x.clamp(max=k), x.clamp(-k, k), x.clamp_min(k)), [(X2, K)]),
    OpCase("int-arg-lerp", lambda x, y, k: x.lerp(y, k), [(X2, Y2, K)]),
    OpCase(
        "float-arg", lambda x, w: (x.clamp(w), x.clamp(-w, w), x % w, x.floor_divide(w), x.lerp(x * 2, w)), [(X2, W)]
    ),
    OpCase("float-arg-masked_fill", lambda x, m, w: x.masked_fill(m, w), [(X2, b8(N, M), W), (i64(N), b8(N), W)]),
    OpCase("int-arg-masked_fill-int8", lambda x, m, k: x.masked_fill(m, k * 100), [(T((N,), torch.int8), b8(N), K)]),
]

CASES = UNARY_CASES + ACTIVATIONS + BINARY_CASES + OTHER_CASES + CASTS + INT_ARG


@pytest.mark.parametrize("case", case_params(CASES))
def test_op_dynamic(case: OpCase) -> None:
    calls = calls_of(case)
    for order in (calls, calls[::-1]):
        cfn = run_sweep(case.fn, order, dynamic=True)
        misses = specengine.cache_misses(cfn)
        assert misses <= len(calls)
        if case.one_miss:  # one entry per template (they differ in rank or dtype), whatever the sizes
            expected = sum(any(not _raises(case.fn, args) for args in t) for t in calls_by_template(case))
            assert misses == expected, f"{misses} misses; guards: {specengine.last_guards(cfn)}"


@pytest.mark.parametrize("case", case_params([c for c in CASES if c.static]))
def test_op_static(case: OpCase) -> None:
    calls = calls_of(case)
    cfn = run_sweep(case.fn, calls, dynamic=False)
    assert specengine.cache_misses(cfn) == sum(not _raises(case.fn, args) for args in calls)


def test_every_case_name_is_unique() -> None:
    names = [c.name for c in CASES + GRADS]
    assert len(names) == len(set(names))


# In-place operators mutate the caller's tensor; other devices and copies are not traced.


def test_inplace_operators_mutate_the_input() -> None:
    def f(x, y, b):
        x //= y
        x %= 3
        b &= y > 0
        b |= x > 1
        b ^= y > 2
        return x + 1, b

    cfn = specengine.compile(f, dynamic=True)
    for n in (0, 1, 2, 5):
        x, y, b = torch.randint(-9, 9, (n, 3)), torch.randint(1, 5, (3,)), torch.randint(0, 2, (n, 1)).bool()
        run_both(f, cfn, [x, y, b.expand(n, 3).clone()])
    assert specengine.cache_misses(cfn) == 1


def test_inplace_result_that_cannot_be_cast_raises() -> None:
    cfn = specengine.compile(lambda x: x.floor_divide_(2.5), dynamic=True)
    with pytest.raises(RuntimeError, match="can't be cast"):
        cfn(torch.arange(3))


OUTSIDE = torch.ones(5)
UNSUPPORTED = {
    "other-device": lambda x: x.to("meta"),
}
# Tensors closed over from outside are inputs of the computation (tests/test_outside.py).
CLOSED_OVER = {
    "memory-format": lambda x: x.to(memory_format=torch.channels_last),
}
# A tensor read from outside (here a global) is an input of the computation (prologue/state.py), as in eager.
OUTSIDE_CASES = {
    "outside-maximum": lambda x: x.maximum(OUTSIDE),
    "outside-mod": lambda x: x % OUTSIDE,
    "outside-clamp": lambda x: x.clamp(max=OUTSIDE),
    "outside-mask": lambda x: x.masked_fill(OUTSIDE > 0, 1.0),
    "outside-lerp": lambda x: x.lerp(OUTSIDE, 0.5),
    "outside-type_as": lambda x: x.type_as(OUTSIDE),
}


@pytest.mark.parametrize("fn", list(OUTSIDE_CASES.values()), ids=list(OUTSIDE_CASES))
def test_tensors_read_from_outside_are_inputs(fn: Callable) -> None:
    cfn = specengine.compile(fn, dynamic=True)
    for n in (0, 1, 2):
        run_both(fn, cfn, [torch.randn(n, 5)])
    assert specengine.cache_misses(cfn) == 1


@pytest.mark.parametrize("fn", list(UNSUPPORTED.values()), ids=list(UNSUPPORTED))
def test_unsupported(fn: Callable) -> None:
    cfn = specengine.compile(fn, dynamic=True)
    with pytest.raises(UnsupportedOpError):
        cfn(torch.randn(2, 3, 4, 5))


@pytest.mark.parametrize("fn", list(CLOSED_OVER.values()), ids=list(CLOSED_OVER))
def test_closed_over(fn: Callable) -> None:
    cfn = specengine.compile(fn, dynamic=True)
    for shape in [(2, 3, 4, 5), (1, 1, 1, 5), (0, 2, 3, 5)]:
        run_both(fn, cfn, [torch.randn(shape)])
    assert specengine.cache_misses(cfn) == 1


def test_traces_name_the_torch_callables() -> None:
    cfn = specengine.compile(lambda x, m: (x // 2, 3 % x, x.masked_fill(m, 1.0).clamp(0), F.gelu(x).float()))
    cfn(torch.randn(3), torch.ones(3, dtype=torch.bool))
    final = str(specengine.last_traces(cfn)[-1])
    for name in ("torch.floor_divide", "torch.Tensor.__rmod__", "torch.masked_fill", "torch.clamp", "gelu"):
        assert name in final, final


# Gradients: backward through the compiled function equals eager's.

GRADS = [
    OpCase(
        "grad-unary", lambda x: x.expm1() + x.sin() * x.cos() + torch.erf(x) + (x.abs() + 1).sqrt().log1p(), [(X2,)]
    ),
    OpCase("grad-more-unary", lambda x: (x.abs() + 1).rsqrt() + (x.abs() + 1).log2() + (x + 5).reciprocal(), [(X2,)]),
    OpCase(
        "grad-activations", lambda x: F.gelu(x) + F.gelu(x, approximate="tanh") + F.silu(x) + F.softplus(x), [(X2,)]
    ),
    OpCase(
        "grad-binary", lambda x, y: x.maximum(y) * x.minimum(y) + torch.atan2(x, y) + x.fmod(1.5) + x % 2, [(X2, (M,))]
    ),
    OpCase("grad-clamp-lerp", lambda x, y: x.clamp(y - 1, y) + x.lerp(y, 0.3) + torch.lerp(x, y, x), [(X2, (M,))]),
    OpCase("grad-masked_fill-cast", lambda x, y: x.masked_fill(x > y, 0.0).float() + x.to(torch.float32), [(X2, Y2)]),
]


@pytest.mark.parametrize("case", case_params(GRADS))
def test_op_gradients(case: OpCase) -> None:
    cfn = specengine.compile(case.fn, dynamic=True)
    calls = [
        [a.double().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args] for args in calls_of(case)
    ]
    for args in calls:
        inputs = [a for a in args if isinstance(a, torch.Tensor)]
        expected, got = case.fn(*args), cfn(*args)
        torch.testing.assert_close(got, expected)
        grad_out = torch.randn_like(expected)
        got_grads = torch.autograd.grad(got, inputs, grad_out, allow_unused=True)
        expected_grads = torch.autograd.grad(expected, inputs, grad_out, allow_unused=True)
        for g, e in zip(got_grads, expected_grads):
            torch.testing.assert_close(g, e)
    assert specengine.cache_misses(cfn) == 1
