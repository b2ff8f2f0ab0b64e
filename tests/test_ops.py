"""The op database: every supported torch op against eager PyTorch over a sweep of sizes.

Each OpCase is a function and a list of input templates. A template is a tuple of argument specs: a tuple
of sizes is a float32 tensor, `T(...)` a tensor of another dtype, and the names N, M (sizes) and K (an int
argument) are filled in from SWEEP, which has sizes 0, 1, 2 and larger ones. Every call is compared with
eager (the same exception type where eager raises); so are the traced output's dtype and shape, and the
values of the entry's decomposition into prims. Each sweep runs forward and backward (an entry traced at
one size serves others) and twice (the second pass only hits).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from helpers import run_both

import specengine
from specengine.ir import passes
from specengine.ir.proxies import TensorProxy
from specengine.ir.symbol import tree_leaves

N, M, K = "n", "m", "k"
SWEEP = [(2, 3, 1), (0, 2, 0), (1, 1, -1), (2, 0, 3), (5, 4, 2), (1, 5, 7), (3, 1, -4), (4, 4, 4)]


@dataclass(frozen=True)
class T:
    """A tensor spec: sizes (ints or N/M) and dtype; ints are drawn from [low, high)."""

    shape: tuple
    dtype: torch.dtype = torch.float32
    low: int = -5
    high: int = 6


def i64(*shape: Any, low: int = -5) -> T:
    return T(shape, torch.int64, low)


def f64(*shape: Any) -> T:
    return T(shape, torch.float64)


def bf16(*shape: Any) -> T:
    return T(shape, torch.bfloat16)


def b8(*shape: Any) -> T:
    return T(shape, torch.bool)


@dataclass(frozen=True)
class OpCase:
    """An op under test: `fn` over `templates`; `one_miss`: nothing depends on sizes, so one compile serves
    every size (0 and 1 included); `static`: also swept with dynamic=False."""

    name: str
    fn: Callable
    templates: list
    one_miss: bool = False
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
    """For each template, its calls with every (n, m, k) of SWEEP, without repeated signatures."""
    out, seen = [], set()
    for template in case.templates:
        calls = []
        for n, m, k in SWEEP:
            args = [_fill(s, {N: n, M: m, K: k}) for s in template]
            if _signature(args) not in seen:
                seen.add(_signature(args))
                calls.append(args)
        out.append(calls)
    return out


def calls_of(case: OpCase) -> list[list]:
    return [args for calls in calls_by_template(case) for args in calls]


def check_entry(cfn: Any, args: list, out: Any, all_prims: bool = False) -> None:
    """The entry that ran: its output proxies have the dtype and (evaluated) shape of the real outputs, and its
    decomposition into prims (what an executor without torch-level ops runs) computes the same values."""
    prologue = specengine.last_prologue(cfn)
    entry = next(e for e in specengine.cache_entries(cfn) if e.prologue is prologue)
    final = entry.traces[-1]
    values = {}
    for param, value in zip(final.params, prologue.fn(*args)):
        values[param.name] = value
        if isinstance(param, TensorProxy):
            values.update({d.args[0]: size for d, size in zip(param.dims, value.shape) if d.op == "sym"})
    for proxy, value in zip(tree_leaves(final.output), tree_leaves(out)):
        if isinstance(proxy, TensorProxy):
            assert proxy.dtype == value.dtype, f"traced {proxy.dtype}, eager {value.dtype}"
            assert tuple(d.eval(values) for d in proxy.dims) == tuple(value.shape), f"{proxy} vs {value.shape}"
    if entry not in _FLAT:
        specialized = next(t for t in entry.traces if t.provenance.startswith("Specialization"))
        flat = passes.flatten(specialized)
        assert not all_prims or all(b.sym.is_prim for b in flat.bsyms), "the flattened trace has non-prim ops"
        _FLAT[entry] = (flat.params, flat.python_callable())
    params, flat_fn = _FLAT[entry]
    torch.testing.assert_close(flat_fn(*(values[p.name] for p in params)), out, equal_nan=True)


_FLAT: dict = {}


def run_sweep(fn: Callable, calls: list[list], dynamic: bool, all_prims: bool = False) -> Any:
    """Compile and run every call twice (the second pass must only hit); returns the compiled function.

    `all_prims`: also require every op of the entry's decomposition to be a prim."""
    cfn = specengine.compile(fn, dynamic=dynamic)
    for repeat in range(2):
        misses = specengine.cache_misses(cfn)
        for args in calls:
            out = run_both(fn, cfn, args)
            if not isinstance(out, Exception):
                check_entry(cfn, args, out, all_prims)
        assert repeat == 0 or specengine.cache_misses(cfn) == misses, "a repeated call missed"
    return cfn


def case_params(cases: list[OpCase]) -> list:
    marks = lambda c: [pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else []  # noqa: E731
    return [pytest.param(c, id=c.name, marks=marks(c)) for c in cases]


# Elementwise: function, method and operator forms; Python numbers on either side.

X2, Y2 = (N, M), (N, M)
SAME = [(X2, Y2), ((N,), (N,)), ((), ())]
ONE = [(X2,), ((N,),), ((),)]


def _same(name: str, fn: Callable, templates: list = SAME, static: bool = False) -> OpCase:
    return OpCase(name, fn, templates, one_miss=True, static=static)


def _unary_cases(name: str, torch_fn: Callable, op: Callable | None = None) -> list[OpCase]:
    method = operator.methodcaller(name)
    cases = [_same(name, lambda x: torch_fn(x), ONE, static=True), _same(f"Tensor.{name}", lambda x: method(x), ONE)]
    return cases + ([_same(f"{name}-operator", lambda x: op(x), ONE)] if op else [])


def _comparison_cases(name: str, op: Callable) -> list[OpCase]:
    torch_fn = getattr(torch, name)
    return [
        _same(name, lambda x, y: torch_fn(x, y), static=True),
        _same(f"Tensor.{name}", lambda x, y: getattr(x, name)(y)),
        _same(f"{name}-operator", lambda x, y: op(x, y)),
        _same(f"{name}-scalar", lambda x: op(x, 0.5), ONE),
        _same(f"{name}-rscalar", lambda x: op(0, x), ONE),
        _same(f"{name}-int-float", lambda x, y: op(x, y), [(i64(N, M), X2), ((N,), i64(N))]),
    ]


# Regression: torch's C++ argument parser once rejected a NumberProxy where a Number is expected and pinned
# one in an int list; NumberProxy now passes as a torch.SymInt and reaches the torch-function mode.
NONZERO = i64(N, M, low=1)
ELEMENTWISE = [
    _same("add", lambda x, y: torch.add(x, y), static=True),
    _same("add-alpha", lambda x, y: torch.add(x, y, alpha=2)),
    _same("add-alpha-float", lambda x, y: x.add(y, alpha=-0.5)),
    _same("add-scalar-alpha", lambda x: torch.add(x, 3, alpha=2), ONE),
    _same("Tensor.add", lambda x, y: x.add(y)),
    _same("add-operator", lambda x, y: x + y),
    _same("radd-scalar", lambda x: 2 + x, ONE),
    _same("sub", lambda x, y: torch.sub(x, y), static=True),
    _same("sub-alpha", lambda x, y: torch.sub(x, y, alpha=3)),
    _same("Tensor.sub-alpha", lambda x, y: x.sub(y, alpha=0.5)),
    _same("sub-operator", lambda x, y: x - y),
    _same("rsub-scalar", lambda x: 2 - x, ONE),
    _same("rsub", lambda x, y: torch.rsub(x, y)),
    _same("rsub-alpha", lambda x, y: (torch.rsub(x, y, alpha=3), torch.rsub(x, 2, alpha=0.5)), [(X2, Y2)]),
    _same("mul", lambda x, y: torch.mul(x, y), static=True),
    _same("Tensor.mul", lambda x, y: x.mul(y)),
    _same("mul-operator", lambda x, y: x * y),
    _same("mul-float", lambda x: x * 2.5, ONE),
    _same("rmul-int", lambda x: 3 * x, ONE),
    _same("div", lambda x, y: torch.div(x, y), static=True),
    _same("Tensor.div", lambda x, y: x.div(y)),
    _same("div-operator", lambda x, y: x / y),
    _same("true_divide", lambda x, y: torch.true_divide(x, y)),
    _same("rdiv-scalar", lambda x: 2 / x, ONE),
    _same("div-scalar", lambda x: x / 4, ONE),
    _same("div-trunc", lambda x, y: torch.div(x, y, rounding_mode="trunc")),
    _same("div-floor", lambda x, y: torch.div(x, y, rounding_mode="floor")),
    _same("Tensor.div-floor-scalar", lambda x: x.div(2, rounding_mode="floor"), ONE),
    _same("div-trunc-int", lambda x, y: torch.div(x, y, rounding_mode="trunc"), [(i64(N, M), NONZERO)]),
    _same("div-bad-rounding-mode", lambda x, y: torch.div(x, y, rounding_mode="round"), [(X2, Y2)]),
    _same("div-floor-int", lambda x, y: x.div(y, rounding_mode="floor"), [(i64(N, M), NONZERO)]),
    *_unary_cases("neg", torch.neg, operator.neg),
    *_unary_cases("abs", torch.abs, abs),
    *_unary_cases("exp", torch.exp),
    *_unary_cases("log", torch.log),
    *_unary_cases("tanh", torch.tanh),
    *_unary_cases("sigmoid", torch.sigmoid),
    *_unary_cases("relu", torch.relu),
    _same("F.relu", lambda x: F.relu(x), ONE),
    _same("relu-int", lambda x: torch.relu(x), [(i64(N, M),)]),
    _same("unary-int", lambda x: (x.exp(), torch.log(x), x.tanh(), torch.sigmoid(x), x.abs()), [(i64(N),), (b8(N),)]),
    _same("pow-scalar", lambda x: x**2, ONE, static=True),
    _same("pow-float-scalar", lambda x: torch.pow(x, 0.5), ONE),
    _same("rpow-scalar", lambda x: 2**x, ONE),
    _same("rpow-float", lambda x: 2.5**x, ONE),
    _same("pow-scalar-base", lambda x: torch.pow(2, x), ONE),
    _same("pow-tensor", lambda x, y: x**y),
    _same("Tensor.pow", lambda x, y: x.pow(y)),
    _same("pow-int", lambda x: x**2, [(i64(N, M),)]),
    OpCase("pow-int-arg", lambda x, k: x**k, [(i64(N, M), K), (X2, K)]),
    _same("rpow-int-arg", lambda x, k: k**x, [(X2, K)]),
    _same("mul-shape-predicate", lambda x: x * (x.shape[0] > 2) + (x.shape[-1] == 1), [((N,),), (X2,)]),
    _same("sub-bool-scalar", lambda x: (x - True, x - (x.shape[0] > 2)), [((N,),)]),
    _same("rsub-bool-scalar", lambda x: False - x, [((N,),)]),
    _same("add-int-arg", lambda x, k: (x + k, k - x, x * k, k / x), [(i64(N), K), ((N,), K)]),
    _same("Tensor.add-alpha-int-arg", lambda x, y, k: x.add(y, alpha=k), [(X2, Y2, K)]),
    OpCase("add-alpha-int-arg", lambda x, y, k: torch.add(x, y, alpha=k), [(X2, Y2, K)], True),
    *[c for name in ("eq", "ne", "lt", "le", "gt", "ge") for c in _comparison_cases(name, getattr(operator, name))],
    _same("where", lambda x, y: torch.where(x > 0, x, y), static=True),
    _same("where-bool-cond", lambda c, x, y: torch.where(c, x, y), [(b8(N, M), X2, Y2)]),
    _same("where-scalar-other", lambda x: torch.where(x > 0, x, 0.0), ONE),
    _same("where-scalar-input", lambda x: torch.where(x > 0, 1.5, x), ONE),
    _same("where-two-scalars", lambda x: torch.where(x > 0, 1.0, -1.0), ONE),
    _same("Tensor.where", lambda x, y: x.where(x > 0, y)),
    _same("Tensor.where-int-arg", lambda x, k: x.where(x > 0, k), [(X2, K), ((), K)]),
    OpCase("where-int-arg", lambda x, k: torch.where(x > 0, x, k), [(X2, K)], True),
    _same("where-float-cond", lambda x, y: torch.where(x, x, y)),
    OpCase("where-broadcast", lambda c, x, y: torch.where(c, x, y), [(b8(N, 1), (1, M), (M,))]),
]

BROADCAST = [
    OpCase("add-outer", lambda x, y: x + y, [((N, 1), (1, M))], static=True),
    _same("mul-row", lambda x, y: x * y, [((N, 3), (3,)), ((3,), (N, 3))]),
    OpCase("sub-keepdim-col", lambda x, y: x - y, [((N, M), (N, 1)), ((N, 1), (N, M))]),
    OpCase("div-broadcast-3d", lambda x, y: x / y, [((N, 1, M), (2, 1))]),
    OpCase("where-broadcast-scalar", lambda c, x: torch.where(c, x, 2), [(b8(N, 1), (1, M))]),
    OpCase("pow-broadcast", lambda x, y: x**y, [((N, 1), (M,))]),
    OpCase("gt-broadcast", lambda x, y: x > y, [((N, 1), (1, M))]),
    _same("add-rows-equal", lambda x, y: x + y, [((N, M), (M,))], static=True),
    _same("add-mismatch", lambda x, y: x + y, [((N, 3), (4,)), ((N, M), (M, 1)), ((N,), (M,))], static=True),
    _same("mul-zero-dim", lambda x, y: x * y, [((N, M), (N, 1, 1))]),
]

DTYPES = [
    _same("int-plus-float-scalar", lambda x: x + 2.5, [(i64(N),)]),
    _same("int-times-float-scalar", lambda x: x * 2.5, [(i64(N, M),)]),
    _same("int-times-int-scalar", lambda x: x * 3, [(i64(N),)]),
    _same("i32-plus-int-scalar", lambda x: (x + 3, x * 2.5, x > 1.5), [(T((N,), torch.int32),)]),
    _same("f16-plus-float-scalar", lambda x: (x + 2.5, x * 2), [(T((N,), torch.float16),)]),
    _same("int-truediv-int", lambda x, y: x / y, [(i64(N), i64(N, low=1))]),
    _same("int-truediv-scalar", lambda x: x / 2, [(i64(N),)]),
    _same("bool-plus-int", lambda x, y: x + y, [(b8(N), i64(N)), (b8(N), 3)]),
    _same("bool-times-float", lambda x: x * 2.5, [(b8(N),)]),
    _same("f16-plus-f32", lambda x, y: x + y, [(T((N,), torch.float16), (N,))]),
    _same("f16-plus-f32-0d", lambda x, y: x + y, [(T((N,), torch.float16), ())]),
    _same("int-plus-f32-0d", lambda x, y: x + y, [(i64(N), ())]),
    _same("i32-plus-i64", lambda x, y: x + y, [(T((N,), torch.int32), i64(N))]),
    _same("u8-plus-i8", lambda x, y: x + y, [(T((N,), torch.uint8, 0), T((N,), torch.int8))]),
    _same("f64-times-f32", lambda x, y: x * y, [(T((N,), torch.float64), (N,))]),
    _same("int-lt-float", lambda x, y: x < y, [(i64(N), (N,)), ((N,), i64(N))]),
    _same("int-eq-float-scalar", lambda x: x == 2.0, [(i64(N),)]),
    _same("int-pow-float", lambda x: x**2.0, [(i64(N),)]),
    _same("int-rpow", lambda x: 2**x, [(i64(N, low=0),)]),
    _same("float-rpow-int", lambda x: 2.5**x, [(i64(N),)]),
    _same("int-floor-div", lambda x, y: torch.div(x, y, rounding_mode="floor"), [(i64(N), i64(N, low=1))]),
    _same("where-int-float", lambda c, x, y: torch.where(c, x, y), [(b8(N), i64(N), (N,))]),
    _same("where-int-float-scalar", lambda c, x: torch.where(c, x, 2.5), [(b8(N), i64(N))]),
    _same("sum-int", lambda x: x.sum(0), [(T((N,), torch.int32),), (b8(N),)]),
    _same("mean-f16", lambda x: x.mean(), [(T((N,), torch.float16),)]),
    _same("neg-bool", lambda x: -x, [(b8(N),)]),
    _same("add-int-float-alpha", lambda x, y: torch.add(x, y, alpha=2.5), [(i64(N), i64(N)), (i64(N), (N,))]),
    _same("sub-bool", lambda x, y: x - y, [(b8(N), b8(N))]),
    _same("add-bool-alpha", lambda x, y: (torch.add(x, y, alpha=True), torch.add(x, y, alpha=2)), [(b8(N), b8(N))]),
    _same("add-int-bool-alpha", lambda x, y: torch.add(x, y, alpha=True), [(i64(N), i64(N))]),
    _same("add-int-alpha-scales-first", lambda x, y: torch.add(x, y, alpha=3), [(T((N,), torch.int8), b8(N))]),
    _same("pow-int-negative", lambda x: x**-1, [(i64(N, low=1),)]),
    _same("pow-bool-bool-scalar", lambda x: (x**True, torch.pow(x, False), x**2), [(b8(N),)]),
    _same("pow-bool-tensors", lambda x, y: x**y, [(b8(N), b8(N))]),
    _same("rpow-bool", lambda x: True**x, [(b8(N),)]),
    _same("div-floor-bool", lambda x, y: torch.div(x, y, rounding_mode="floor"), [(b8(N), b8(N)), (b8(N), True)]),
    _same("div-trunc-bool", lambda x, y: torch.div(x, y, rounding_mode="trunc"), [(b8(N), b8(N))]),
]

# Reductions: one dim, several dims, every dim; keepdim; negative dims; dtype=.

X3 = (N, 2, M)
RED = [(X2,), (X3,)]
REDUCTIONS = [
    _same("sum", lambda x: torch.sum(x), RED + [((),)], static=True),
    _same("Tensor.sum", lambda x: x.sum(), RED),
    _same("sum-dim", lambda x: x.sum(0), RED),
    _same("sum-neg-dim", lambda x: x.sum(-1), RED),
    _same("sum-dims", lambda x: torch.sum(x, (0, -1)), RED),
    _same("sum-dims-list-keepdim", lambda x: x.sum([1, 0], keepdim=True), RED),
    _same("sum-keepdim", lambda x: torch.sum(x, 1, keepdim=True), RED),
    _same("sum-dim-kwarg", lambda x: x.sum(dim=-2), RED),
    _same("sum-dtype", lambda x: x.sum(dtype=torch.float64), RED),
    _same("sum-dim-dtype", lambda x: torch.sum(x, 1, dtype=torch.float64), [(i64(N, M),)]),
    _same("sum-dtype-int32", lambda x: (torch.sum(x, dtype=torch.int32), x.sum(0, dtype=torch.int32)), [(i64(N, M),)]),
    _same("sum-int-keepdim", lambda x: x.sum(-1, keepdim=True), [(i64(N, M),), (b8(N, M),)]),
    _same("sum-dim-none", lambda x: x.sum(dim=None), RED),
    _same("sum-0d-dim", lambda x: (x.sum(0), x.sum(-1, keepdim=True), x.mean(0)), [((),)]),
    _same("sum-bad-dim", lambda x: x.sum(2), [(X2,)]),
    _same("sum-repeated-dim", lambda x: x.sum((0, -2)), [(X2,)]),
    _same("mean", lambda x: torch.mean(x), RED, static=True),
    _same("Tensor.mean", lambda x: x.mean(), RED),
    _same("mean-dim", lambda x: x.mean(0), RED),
    _same("mean-dims-keepdim", lambda x: x.mean((0, -1), keepdim=True), RED),
    _same("mean-neg-dim-keepdim", lambda x: torch.mean(x, -1, keepdim=True), RED),
    _same("mean-dim-list", lambda x: torch.mean(x, dim=[1]), RED),
    _same("mean-dtype", lambda x: x.mean(dtype=torch.float64), RED),
    _same("mean-int", lambda x: x.mean(), [(i64(N, M),)]),
    _same("amax", lambda x: torch.amax(x, 0), RED, static=True),
    _same("Tensor.amax-neg-keepdim", lambda x: x.amax(-1, keepdim=True), RED),
    _same("amax-dims", lambda x: x.amax((0, 1)), RED),
    _same("amax-all", lambda x: x.amax(), RED),
    _same("amax-nonempty-dim", lambda x: x.amax(1), [(X3,)]),
    _same("amax-0d", lambda x: (x.amax(0), x.amax(-1, keepdim=True), x.amax()), [((),)]),
]

# Shape ops.

SHAPES = [
    _same("view-flat", lambda x: x.view(-1), RED, static=True),
    _same("view-shape-product", lambda x: x.view(x.shape[0] * x.shape[1]), [(X2,)]),
    _same("view-swap-sizes", lambda x: x.view(x.shape[1], x.shape[0]), [(X2,)]),
    _same("view-tuple-infer", lambda x: x.view((-1, x.shape[1])), [(X2,)]),
    _same("view-divisible", lambda x: x.view(-1, 2), [((N, 4),)]),
    _same("view-infer-indivisible", lambda x: x.view(2, -1), [(X2,)]),
    _same("view-wrong-numel", lambda x: x.view(x.shape[0], 3), [(X2,)]),
    _same("view-two-infer", lambda x: x.view(-1, -1), [(X2,)]),
    OpCase("view-noncontiguous", lambda x: x.transpose(0, 1).view(-1), [(X2,)]),
    _same("reshape", lambda x: torch.reshape(x, (-1,)), RED, static=True),
    _same("Tensor.reshape-varargs", lambda x: x.reshape(x.shape[0], x.shape[1]), [(X2,)]),
    _same("reshape-tuple", lambda x: x.reshape((1, x.shape[0], 1, x.shape[1])), [(X2,)]),
    _same("reshape-infer", lambda x: x.reshape(x.shape[0], -1), [(X3,)]),
    _same("reshape-infer-last", lambda x: x.reshape(-1, 3), [(X2,)]),
    _same("reshape-0d", lambda x: x.reshape(1, 1), [((),)]),
    OpCase("reshape-int-arg", lambda x, k: x.reshape(k, x.shape[1]), [(X2, K)]),
    OpCase("view-int-arg", lambda x, k: x.view(k), [(X2, K)]),
    OpCase("reshape-int-arg-infer", lambda x, k: x.reshape(k, -1), [(X2, K)]),
    _same("view-size-tuple", lambda x, y: x.view(y.size()), [((N, M), (N, M))]),
    _same("Tensor.reshape-shape-of-other", lambda x, y: x.reshape(y.shape), [((N, M), (M, N))]),
    OpCase("reshape-shape-of-other", lambda x, y: torch.reshape(x, y.shape), [(X2, (M, N))], True),
    _same("permute", lambda x: x.permute(2, 0, 1), [(X3,)], static=True),
    _same("permute-tuple", lambda x: x.permute((1, 0, 2)), [(X3,)]),
    _same("torch.permute-neg", lambda x: torch.permute(x, (0, -1, 1)), [(X3,)]),
    _same("permute-bad", lambda x: x.permute(0, 0, 1), [(X3,)]),
    _same("transpose", lambda x: x.transpose(0, 1), RED),
    _same("torch.transpose-neg", lambda x: torch.transpose(x, -1, -2), RED),
    _same("transpose-same-dim", lambda x: x.transpose(1, 1), RED),
    _same("T", lambda x: x.T, [(X2,)]),
    _same("mT", lambda x: x.mT, [(X3,)]),
    _same("transpose-0d", lambda x: x.transpose(0, -1), [((),)]),
    _same("squeeze-0d", lambda x: (x.squeeze(), torch.squeeze(x, 0)), [((),)]),
    _same("unsqueeze", lambda x: x.unsqueeze(0), ONE, static=True),
    _same("unsqueeze-neg", lambda x: x.unsqueeze(-1), ONE),
    _same("torch.unsqueeze-mid", lambda x: torch.unsqueeze(x, 1), [(X2,)]),
    _same("unsqueeze-neg-mid", lambda x: x.unsqueeze(-2), [(X2,)]),
    _same("unsqueeze-bad-dim", lambda x: x.unsqueeze(3), [(X2,)]),
    OpCase("squeeze", lambda x: x.squeeze(), [((N, 1, M),), (X2,)], static=True),
    _same("squeeze-size-1-dim", lambda x: x.squeeze(1), [((N, 1, M),)]),
    OpCase("squeeze-symbolic-dim", lambda x: torch.squeeze(x, 0), [(X2,)]),
    _same("squeeze-size-3-dim", lambda x: x.squeeze(-1), [((N, 3),)]),
    OpCase("squeeze-dims", lambda x: x.squeeze((0, 1)), [((N, 1, M),)]),
    _same("expand", lambda x: x.expand(-1, 4), [((N, 1),)], static=True),
    _same("expand-leading", lambda x: x.expand(3, -1, -1), [(X2,)]),
    _same("expand-from-shape", lambda x, y: x.expand(y.shape[0], -1), [((1, M), (N,))]),
    OpCase("expand-symbolic", lambda x, y: x.expand(y.shape[0], y.shape[1]), [((N, 1), (N, M)), ((1, M), (N, M))]),
    _same("expand-bad", lambda x: x.expand(2, 3), [(X2,)]),
    OpCase("expand-int-arg", lambda x, k: x.expand(k, 3), [((N, 1), K), ((1, 3), K)]),
    _same("expand-leading-minus-one", lambda x: x.expand(-1, 2, 3), [((N, 3),)]),
    _same("expand-tuple-shape", lambda x, y: x.expand(y.shape), [((1, M), (N, M))]),
    _same("expand-too-few", lambda x: x.expand(3), [(X2,)]),
    _same("flatten", lambda x: x.flatten(), RED + [((),)], static=True),
    _same("torch.flatten-start", lambda x: torch.flatten(x, 1), RED),
    _same("flatten-range", lambda x: x.flatten(0, 1), RED),
    _same("flatten-neg", lambda x: x.flatten(-2, -1), RED),
    _same("flatten-single", lambda x: x.flatten(1, 1), RED),
    _same("flatten-bad", lambda x: x.flatten(1, 0), RED),
]

# Matmul.

MATMUL = [
    _same("matmul-1d-1d", lambda a, b: torch.matmul(a, b), [((M,), (M,))], static=True),
    _same("matmul-2d-1d", lambda a, b: a @ b, [((N, M), (M,))]),
    _same("matmul-1d-2d", lambda a, b: a.matmul(b), [((M,), (M, N))]),
    _same("matmul-2d-2d", lambda a, b: a @ b, [((N, M), (M, 3))], static=True),
    _same("matmul-3d-3d", lambda a, b: torch.matmul(a, b), [((2, N, M), (2, M, 3))]),
    _same("matmul-3d-3d-batch", lambda a, b: a @ b, [((N, 2, M), (N, M, 3))]),
    _same("matmul-3d-2d", lambda a, b: a @ b, [((N, 2, M), (M, 3))]),
    _same("matmul-batch-broadcast", lambda a, b: a @ b, [((1, N, M), (3, M, 2))]),
    _same("matmul-1d-3d", lambda a, b: a @ b, [((M,), (2, M, N))]),
    _same("matmul-3d-1d", lambda a, b: a @ b, [((2, N, M), (M,))]),
    OpCase("matmul-mismatch", lambda a, b: a @ b, [((N, M), (3, 2)), ((N, M), (N, M)), ((M,), (N,))]),
    _same("matmul-batch-mismatch", lambda a, b: a @ b, [((N, 2, 3), (M, 3, 2))]),
    _same("matmul-0d", lambda a, b: a @ b, [((), (N,))]),
    _same(
        "matmul-dtype-mismatch",
        lambda a, b: a @ b,
        [((N, M), T((M, 2), torch.float64)), ((M,), T((M,), torch.float64)), (i64(M), (M,))],
    ),
    _same("matmul-int", lambda a, b: a @ b, [(i64(N, M), i64(M, 2))]),
]

# Basic indexing; K is an int argument (symbolic under dynamic=True).

INDEXING = [
    _same("index-int", lambda x: x[0], [(X2,), ((N,),)], static=True),
    _same("index-neg-int", lambda x: x[-1], [(X2,)]),
    _same("index-two-ints", lambda x: x[1, -2], [(X2,)]),
    _same("index-int-dim1", lambda x: x[:, -1], [(X2,)]),
    _same("slice-start", lambda x: x[1:], [(X2,)], static=True),
    _same("slice-step", lambda x: x[::2], [(X2,)]),
    _same("slice-start-step", lambda x: x[1::3, ::2], [(X2,)]),
    _same("slice-neg-bounds", lambda x: x[-3:-1], [(X2,)]),
    _same("slice-beyond", lambda x: x[:100, -100:], [(X2,)]),
    _same("slice-empty", lambda x: x[2:1], [(X2,)]),
    _same("slice-dim1", lambda x: x[:, 1:3], [(X2,)]),
    _same("index-none", lambda x: x[None], [(X2,), ((),)]),
    _same("index-none-mid", lambda x: x[:, None], [(X2,)]),
    _same("index-ellipsis-none", lambda x: x[None, ..., None], [(X3,), ((),)]),
    _same("index-ellipsis-int", lambda x: x[..., 0], [(X3,)]),
    _same("index-ellipsis-slice", lambda x: x[..., None, 1:], [(X3,)]),
    _same("index-ellipsis-only", lambda x: x[...], [(X2,)]),
    _same("index-two-ellipses", lambda x: x[0, ..., 1, ...], [(X3,)]),
    _same("index-ellipses-none", lambda x: x[..., None, ...], [(X3,)]),
    OpCase("slice-to-k", lambda x, k: x[:k], [(X2, K)], static=True),
    OpCase("slice-from-k", lambda x, k: x[k:], [(X2, K)]),
    OpCase("slice-1-k-2", lambda x, k: x[1:k:2], [(X2, K)]),
    OpCase("slice-neg-k", lambda x, k: x[:, -k:], [(X2, K)]),
    _same("slice-to-other-size", lambda x, y: x[: y.shape[0]], [((N, 2), (M,))]),
    OpCase("index-k", lambda x, k: x[k], [(X2, K)]),
    OpCase("slice-k-arithmetic", lambda x, k: x[k - 1 : k + 2, -k], [(X2, K)]),
    OpCase("slice-step-k", lambda x, k: x[::k], [(X2, K)]),
    _same("index-out-of-range", lambda x: x[5], [(X2,)]),
    _same("index-too-many", lambda x: x[0, 0, 0], [(X2,)]),
    _same("slice-zero-step", lambda x: x[::0], [(X2,)]),
    _same("slice-negative-step", lambda x: x[::-1], [(X2,)]),
]

# Regression: CSE once left merged names in decompositions, breaking the prims-only trace.
REPEATED = [
    OpCase("cse-repeated-getitem", lambda a: a[0] @ a[0], [(X2,)]),
    OpCase("cse-repeated-add", lambda x: (x + 1) * (x + 1), [(X2,)]),
]

CASES = REPEATED + ELEMENTWISE + BROADCAST + DTYPES + REDUCTIONS + SHAPES + MATMUL + INDEXING


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


def _raises(fn: Callable, args: list) -> bool:
    try:
        fn(*args)
    except Exception:  # noqa: BLE001
        return True
    return False


def test_every_case_name_is_unique() -> None:
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))


# Gradients: backward through the compiled function equals eager's.

GRADS = [
    OpCase("grad-mul-broadcast", lambda x, y: x * y, [((N, 1), (1, M))]),
    OpCase("grad-div-sub-alpha", lambda x, y: torch.sub(x / y, y, alpha=2), [((N, M), (M,))]),
    OpCase("grad-pow-unary", lambda x, y: (x**2 + 2**y).tanh().sigmoid() * y.exp() + F.relu(x), [(X2, Y2)]),
    OpCase("grad-reductions", lambda x: x.sum(1, keepdim=True) * x + x.mean((0, 1)) - x.amax(-1, True), [(X2,)]),
    OpCase("grad-matmul", lambda a, b: a @ b, [((N, 2, M), (M, 3)), ((M,), (M, N))]),
    OpCase("grad-getitem", lambda x, k: x[1:, None, ::2] * x[-1] + x[:k].sum(), [(X2, K)]),
    OpCase("grad-where", lambda x, y: torch.where(x > 0, x, y * 2), [(X2, (M,))]),
    OpCase(
        "grad-shape-ops", lambda x: x.reshape(-1).view(x.shape).T.expand(3, -1, -1).flatten(1).unsqueeze(0), [(X2,)]
    ),
]


def _grad_args(args: list) -> list:
    return [a.double().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]


@pytest.mark.parametrize("case", case_params(GRADS))
def test_op_gradients(case: OpCase) -> None:
    cfn = specengine.compile(case.fn, dynamic=True)
    calls = [_grad_args(args) for args in calls_of(case)]
    for args in calls:
        if _raises(case.fn, args):
            continue
        inputs = [a for a in args if isinstance(a, torch.Tensor)]
        expected, got = case.fn(*args), cfn(*args)
        torch.testing.assert_close(got, expected)
        grad_out = torch.randn_like(expected)
        got_grads = torch.autograd.grad(got, inputs, grad_out, allow_unused=True)
        expected_grads = torch.autograd.grad(expected, inputs, grad_out, allow_unused=True)
        for g, e in zip(got_grads, expected_grads):
            torch.testing.assert_close(g, e)
    assert specengine.cache_misses(cfn) <= len(calls)
