"""Primitives: the ops every torch-level op decomposes into.

Each prim has a symbolic meta function (shapes are canonical int Exprs) and its torch implementation,
side by side. Prims never decide anything on symbols: the torch-level ops above them do.
"""

from __future__ import annotations

import builtins
import operator
import sys
from typing import Any, Callable

import torch

from specengine.constraints import expr as E
from specengine.ir import context, numbers, proxies, unbacked
from specengine.ir.literals import literal
from specengine.ir.proxies import NumberProxy, TensorProxy, value_expr
from specengine.ir.symbol import Symbol

PRIMS: dict[str, Symbol] = {}
proxies.HOOKS.prims = sys.modules[__name__]  # shape queries and number arithmetic on proxies record prims


def prim(name: str, impl: Callable, tags: tuple[str, ...] = (), pure: bool = True) -> Callable[[Callable], Symbol]:
    """Register a primitive: the decorated function is its meta; `impl` its torch implementation.

    Prims may be defined in any ops module; each is reachable as `prims.<name>`, which traces print.
    """

    def deco(meta: Callable) -> Symbol:
        if name in PRIMS:
            raise ValueError(f"prims.{name} is already defined")
        sym = Symbol(name, "prims", meta=meta, impl=impl, is_prim=True, pure=pure, tags=frozenset(tags))
        PRIMS[name] = sym
        globals().setdefault(name, sym)
        return sym

    return deco


def new_tensor(dims: tuple, dtype: torch.dtype, like: list[Any], device: torch.device | None = None) -> TensorProxy:
    """A fresh output proxy on `device`, by default the device of the tensors in `like`."""
    tensors = [t for t in like if isinstance(t, TensorProxy)]
    device = device or (tensors[0].device if tensors else torch.device("cpu"))
    if device.type == "cuda" and not torch.cuda.is_available():
        torch.cuda._lazy_init()  # raises eager's error (no CUDA build, or no device) while tracing, not at run time
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    grad = grad and (dtype.is_floating_point or dtype.is_complex)
    state = context.require()
    if state.decider.unbacked.symbols:  # `max(0, u0)` is `u0`: data-dependent sizes folded by their ranges
        dims = unbacked.simplify_dims(state, dims)
    return TensorProxy(state.names.fresh("t"), dims, dtype, device, grad)


def new_number(e: E.Expr, python_type: type = int) -> NumberProxy:
    """A fresh NumberProxy for `e`; a bare symbol keeps the symbol's name, a constant prints as itself."""
    state = context.require()
    try:
        hint = e.eval(state.decider.hints)
    except ZeroDivisionError:  # over a stand-in of a data-dependent divisor (checked at run time, never decided on)
        hint = 0
    if e.op == "sym":
        name = e.args[0]
    elif e.is_const:
        name = literal(e.value)
    else:
        name = state.names.fresh("i")
    return NumberProxy(name, e, python_type(hint), python_type)


# Shape queries and scalar arithmetic on symbols.


@prim("shape", impl=lambda a: tuple(a.shape), tags=("shape",))
def shape(a: TensorProxy) -> tuple[NumberProxy, ...]:
    return tuple(new_number(d) for d in a.dims)


def _scalar_prim(name: str, py_op: Callable, build: Callable, out_type: type = int) -> Symbol:
    def meta(a: Any, b: Any) -> NumberProxy:
        return new_number(build(value_expr(a), value_expr(b)), out_type)

    meta.__name__ = name
    return prim(name, impl=py_op, tags=("scalar",))(meta)


def _checked_div(build: Callable) -> Callable:
    def run(a: E.Expr, b: E.Expr) -> E.Expr:
        state = context.require()
        if isinstance(b, E.Expr) and state.decider.unbacked.mentions(b):
            numbers.check_divisor(b, "integer division or modulo by zero", "floordiv")  # checked at run time
            return build(a, b)
        if not state.decide(E.ne(b, 0), "floordiv", "division by zero check"):
            raise ZeroDivisionError("integer division or modulo by zero")
        return build(a, b)

    return run


sym_add = _scalar_prim("sym_add", operator.add, E.add)
sym_sub = _scalar_prim("sym_sub", operator.sub, E.sub)
sym_mul = _scalar_prim("sym_mul", operator.mul, E.mul)
sym_floordiv = _scalar_prim("sym_floordiv", operator.floordiv, _checked_div(E.floordiv))
sym_mod = _scalar_prim("sym_mod", operator.mod, _checked_div(E.mod))
sym_min = _scalar_prim("sym_min", min, E.minimum)
sym_max = _scalar_prim("sym_max", max, E.maximum)
sym_eq = _scalar_prim("sym_eq", operator.eq, E.eq, bool)
sym_ne = _scalar_prim("sym_ne", operator.ne, E.ne, bool)
sym_lt = _scalar_prim("sym_lt", operator.lt, E.lt, bool)
sym_le = _scalar_prim("sym_le", operator.le, E.le, bool)
sym_gt = _scalar_prim("sym_gt", operator.gt, E.gt, bool)
sym_ge = _scalar_prim("sym_ge", operator.ge, E.ge, bool)
sym_and = _scalar_prim("sym_and", operator.and_, lambda a, b: E.and_(_as_bool(a), _as_bool(b)), bool)
sym_or = _scalar_prim("sym_or", operator.or_, lambda a, b: E.or_(_as_bool(a), _as_bool(b)), bool)


def _as_bool(e: E.Expr) -> E.Expr:
    return e if e.is_bool else E.ne(e, 0)


@prim("sym_neg", impl=operator.neg, tags=("scalar",))
def sym_neg(a: Any) -> NumberProxy:
    return new_number(E.neg(value_expr(a)))


@prim("sym_abs", impl=abs, tags=("scalar",))
def sym_abs(a: Any) -> NumberProxy:
    e = value_expr(a)
    return new_number(E.maximum(e, E.neg(e)))


# Elementwise. Tensor operands have identical dims (torch-level ops broadcast explicitly).


def _elementwise_meta(*args: Any, dtype: torch.dtype | None = None) -> TensorProxy:
    tensors = [a for a in args if isinstance(a, TensorProxy)]
    assert all(t.dims == tensors[0].dims for t in tensors), "elementwise prims need broadcast operands"
    return new_tensor(tensors[0].dims, dtype or tensors[0].dtype, tensors)


def _unary(name: str, impl: Callable) -> Symbol:
    return prim(name, impl=impl, tags=("elementwise",))(lambda a: _elementwise_meta(a))


def _binary(name: str, impl: Callable, out_dtype: torch.dtype | None = None) -> Symbol:
    return prim(name, impl=impl, tags=("elementwise",))(lambda a, b: _elementwise_meta(a, b, dtype=out_dtype))


neg = _unary("neg", torch.neg)
abs = _unary("abs", torch.abs)  # noqa: A001 - the prim's name
exp = _unary("exp", torch.exp)
log = _unary("log", torch.log)
tanh = _unary("tanh", torch.tanh)
sigmoid = _unary("sigmoid", torch.sigmoid)
add = _binary("add", torch.add)
sub = _binary("sub", torch.sub)
mul = _binary("mul", torch.mul)
pow = _binary("pow", torch.pow)  # noqa: A001
maximum = _binary("maximum", lambda a, b: torch.clamp_min(a, b) if not torch.is_tensor(b) else torch.maximum(a, b))
eq = _binary("eq", torch.eq, torch.bool)
ne = _binary("ne", torch.ne, torch.bool)
lt = _binary("lt", torch.lt, torch.bool)
le = _binary("le", torch.le, torch.bool)
gt = _binary("gt", torch.gt, torch.bool)
ge = _binary("ge", torch.ge, torch.bool)


@prim("div", impl=torch.div, tags=("elementwise",))
def div(a: Any, b: Any, *, rounding_mode: str | None = None) -> TensorProxy:
    return _elementwise_meta(a, b)


@prim("where", impl=torch.where, tags=("elementwise",))
def where(cond: TensorProxy, a: Any, b: Any) -> TensorProxy:
    dtype = next(x.dtype for x in (a, b) if isinstance(x, TensorProxy))
    return new_tensor(cond.dims, dtype, [cond, a, b])


@prim("convert_element_type", impl=lambda a, dtype: a.to(dtype), tags=("elementwise",))
def convert_element_type(a: TensorProxy, dtype: torch.dtype) -> TensorProxy:
    return new_tensor(a.dims, dtype, [a])


@prim("full", impl=lambda shape, value, dtype, device: torch.full(shape, value, dtype=dtype, device=device))
def full(shape: tuple, value: Any, dtype: torch.dtype, device: torch.device) -> TensorProxy:
    return new_tensor(shape, dtype, [], device)


# Shapes. Shape arguments are tuples of ints and int Exprs.


def _broadcast_in_dim_impl(a: torch.Tensor, shape: tuple, broadcast_dims: tuple) -> torch.Tensor:
    view = [1] * len(shape)
    for i, d in enumerate(broadcast_dims):
        view[d] = a.shape[i]
    return a.reshape(view).expand(shape)


@prim("broadcast_in_dim", impl=_broadcast_in_dim_impl, tags=("shape_op",))
def broadcast_in_dim(a: TensorProxy, shape: tuple, broadcast_dims: tuple) -> TensorProxy:
    return new_tensor(shape, a.dtype, [a])


@prim("reshape", impl=torch.reshape, tags=("shape_op",))
def reshape(a: TensorProxy, shape: tuple) -> TensorProxy:
    return new_tensor(shape, a.dtype, [a])


@prim("permute", impl=torch.permute, tags=("shape_op",))
def permute(a: TensorProxy, perm: tuple) -> TensorProxy:
    return new_tensor(tuple(a.dims[p] for p in perm), a.dtype, [a])


@prim("squeeze", impl=torch.squeeze, tags=("shape_op",))
def squeeze(a: TensorProxy, dims: tuple) -> TensorProxy:
    return new_tensor(tuple(d for i, d in enumerate(a.dims) if i not in dims), a.dtype, [a])


def _slice_impl(a: torch.Tensor, starts: tuple, ends: tuple, steps: tuple) -> torch.Tensor:
    return a[tuple(builtins.slice(s, e, k) for s, e, k in zip(starts, ends, steps))]


@prim("slice", impl=_slice_impl, tags=("shape_op",))
def slice(a: TensorProxy, starts: tuple, ends: tuple, steps: tuple) -> TensorProxy:  # noqa: A001 - traces print prims.slice
    dims = []
    for s, e, k, d in zip(starts, ends, steps, a.dims):
        if E.as_expr(s).is_const and E.as_expr(s).value == 0 and k == 1 and E.as_expr(e) is d:
            dims.append(d)  # an untouched dim keeps its size
            continue
        length = E.sub(E.as_expr(e), E.as_expr(s))
        dims.append(E.maximum(E.floordiv(E.add(length, k - 1), k), 0))
    return new_tensor(tuple(dims), a.dtype, [a])


slice_prim = slice


# Reductions over `dims` (no keepdim: torch-level ops restore kept dims with broadcast_in_dim).


def _reduce_meta(a: TensorProxy, dims: tuple, dtype: torch.dtype | None = None) -> TensorProxy:
    return new_tensor(tuple(d for i, d in enumerate(a.dims) if i not in dims), dtype or a.dtype, [a])


@prim("sum", impl=lambda a, dims, dtype=None: torch.sum(a, dims, dtype=dtype or a.dtype), tags=("reduction",))
def sum(a: TensorProxy, dims: tuple, dtype: torch.dtype | None = None) -> TensorProxy:  # noqa: A001
    return _reduce_meta(a, dims, dtype)


@prim("amax", impl=torch.amax, tags=("reduction",))
def amax(a: TensorProxy, dims: tuple) -> TensorProxy:
    return _reduce_meta(a, dims)


@prim("matmul", impl=torch.matmul, tags=("matmul",))
def matmul(a: TensorProxy, b: TensorProxy) -> TensorProxy:
    """Batched matmul: a (..., m, k) @ b (..., k, n) with equal batch dims."""
    return new_tensor(a.dims[:-1] + b.dims[-1:], a.dtype, [a, b])
