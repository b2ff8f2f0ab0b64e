"""Creation ops with symbolic sizes: arange, zeros/ones/full/empty and their *_like and new_* forms, eye, linspace.

Sizes are ints or NumberProxies (e.g. from `x.shape`); they stay symbolic. Invalid sizes (negative) raise
eager's error from the example values without a guard: the output shape is the given sizes for every valid
input, and for invalid inputs the torch op itself raises that error at run time (see `broadcast_pair`).
"""

from __future__ import annotations

from typing import Any

import torch

from specengine.constraints import expr as E
from specengine.ir import context
from specengine.ir.proxies import NumberProxy, TensorProxy, unsupported, value_expr
from specengine.ops import prims
from specengine.ops.number_tensors import as_number
from specengine.ops.registry import torchop
from specengine.ops.utils import decide, example, fmt_shape, hint, shape_arg

__all__ = [
    "arange", "zeros", "ones", "full", "empty", "zeros_like", "ones_like", "empty_like",
    "new_zeros", "new_ones", "new_full", "new_empty", "eye", "linspace",
]  # fmt: skip


# Prims.


def _iota_impl(length: int, start: Any, step: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """`start + step * i` for i in range(length), computed as eager's arange does (in double for floats)."""
    acc = torch.float64 if dtype.is_floating_point or dtype.is_complex else torch.int64
    return (torch.arange(length, dtype=acc, device=device) * step + start).to(dtype)


@prims.prim("iota", impl=_iota_impl)
def iota(length: Any, start: Any, step: Any, dtype: torch.dtype, device: torch.device) -> TensorProxy:
    """A 1-D tensor of `length` values `start + step * i` (length an int or int Expr)."""
    return prims.new_tensor((length,), dtype, [], device)


# Arguments shared by creation ops.


def _device(device: Any, like: TensorProxy | None = None) -> torch.device:
    if device is not None:
        return torch.device(device)
    return like.device if like is not None else torch.get_default_device()


def _default_float() -> torch.dtype:
    context.require().facts.read_default_dtype()
    return torch.get_default_dtype()


def _check_options(op: str, layout: Any = None, pin_memory: Any = False, out: Any = None) -> None:
    if out is not None:
        raise unsupported(f"{op}(out=...)", "use the returned tensor instead of out=")
    if layout not in (None, torch.strided) or pin_memory:
        raise unsupported(f"{op}(layout=..., pin_memory=True)", "only strided, unpinned tensors are traced")


def _finish(out: TensorProxy, requires_grad: bool) -> TensorProxy:
    if requires_grad:
        out.requires_grad = True
    return out


def _size_exprs(sizes: tuple, op: str) -> tuple:
    """Sizes as int Exprs; eager's TypeError for a non-int and RuntimeError for a negative size."""
    out = []
    for s in sizes:
        s = as_number(s, op)  # a 0-d integer tensor: its int (known, or read at run time), as eager's int(t)
        is_int = s.python_type is int if isinstance(s, NumberProxy) else isinstance(s, (int, E.Expr))
        if not is_int or isinstance(s, bool):
            raise TypeError(f"{op}(): argument 'size' must be tuple of ints, but found element of type "
                            f"{type(s).__name__}")  # fmt: skip
        out.append(value_expr(s))
    if any(hint(e) < 0 for e in out):  # no guard: torch raises this at run time too
        raise RuntimeError(f"Trying to create tensor with negative dimension {min(example(e) for e in out)}: "
                           f"{fmt_shape(out)}")  # fmt: skip
    return tuple(out)


def _fill_dtype(value: Any) -> torch.dtype:
    """torch.full's dtype for a fill value when no dtype is given."""
    kind = value.python_type if isinstance(value, NumberProxy) else type(value)
    if kind is bool:
        return torch.bool
    if kind is int:
        return torch.int64
    if kind is complex:
        return torch.complex128 if _default_float() is torch.float64 else torch.complex64
    return _default_float()


def _fill_value(value: Any) -> Any:
    if isinstance(value, TensorProxy):
        raise unsupported("a tensor fill value", "reading tensor data is data-dependent; pass a Python number")
    if isinstance(value, NumberProxy):
        return value.expr  # symbolic: `torch.full((2,), n / 2)` and a float argument do not pin (nor `.item()`)
    return value


def _sequence(size: Any, op: str) -> tuple:
    if not isinstance(size, (tuple, list, torch.Size)):
        raise TypeError(f"{op}(): argument 'size' (position 1) must be tuple of ints, not {type(size).__name__}")
    return tuple(size)


def _varargs(size: tuple, options: dict) -> tuple:
    """Sizes given as varargs, one sequence, or the keyword `size=`."""
    return shape_arg(size) if size or "size" not in options else tuple(options.pop("size"))


def _full(sizes: tuple, value: Any, dtype: torch.dtype, device: torch.device, op: str, **options: Any) -> TensorProxy:
    requires_grad = options.pop("requires_grad", False)
    options.pop("memory_format", None)
    options.pop("names", None)
    _check_options(op, **options)
    out = prims.full(_size_exprs(sizes, op), _fill_value(value), dtype, device)
    return _finish(out, requires_grad)


# zeros, ones, full, empty.


# kept: symbolic sizes without guards in a prims.full (torch's kernel: 3 guards over OpInfo's samples)
@torchop(torch.zeros, name="zeros", always_traced=True)
def zeros(*size: Any, dtype: torch.dtype | None = None, device: Any = None, **options: Any) -> TensorProxy:
    return _full(_varargs(size, options), 0, dtype or _default_float(), _device(device), "zeros", **options)


# kept: symbolic sizes without guards in a prims.full (torch's kernel: 3 guards over OpInfo's samples)
@torchop(torch.ones, name="ones", always_traced=True)
def ones(*size: Any, dtype: torch.dtype | None = None, device: Any = None, **options: Any) -> TensorProxy:
    return _full(_varargs(size, options), 1, dtype or _default_float(), _device(device), "ones", **options)


# torch.empty is not always traced: utils.meta_value calls it while tracing, for meta stand-ins.
# kept: symbolic sizes without guards in a prims.full (torch's kernel: 3 guards over OpInfo's samples)
@torchop(torch.empty, name="empty", always_traced=True)
def empty(*size: Any, dtype: torch.dtype | None = None, device: Any = None, **options: Any) -> TensorProxy:
    return _full(_varargs(size, options), 0, dtype or _default_float(), _device(device), "empty", **options)


# kept: fewer guards than torch's kernel (2 against 6 over OpInfo's samples); a prims.full
@torchop(torch.full, name="full", always_traced=True)
def full(size: Any, fill_value: Any, *, dtype: torch.dtype | None = None, device: Any = None, **options: Any) -> Any:
    return _full(
        _sequence(size, "full"), fill_value, dtype or _fill_dtype(fill_value), _device(device), "full", **options
    )


# *_like.


# kept: a prims.full, which fusing executors take
@torchop(torch.zeros_like, name="zeros_like")
def zeros_like(a: TensorProxy, *, dtype: torch.dtype | None = None, device: Any = None, **options: Any) -> Any:
    return _full(a.dims, 0, dtype or a.dtype, _device(device, a), "zeros_like", **options)


# kept: a prims.full, which fusing executors take
@torchop(torch.ones_like, name="ones_like")
def ones_like(a: TensorProxy, *, dtype: torch.dtype | None = None, device: Any = None, **options: Any) -> Any:
    return _full(a.dims, 1, dtype or a.dtype, _device(device, a), "ones_like", **options)


# kept: a prims.full, which fusing executors take
@torchop(torch.empty_like, name="empty_like")
def empty_like(a: TensorProxy, *, dtype: torch.dtype | None = None, device: Any = None, **options: Any) -> Any:
    return _full(a.dims, 0, dtype or a.dtype, _device(device, a), "empty_like", **options)


# Tensor.new_*: the dtype and device of `a` by default.


# kept: fewer guards than torch's kernel (0 against 7 over OpInfo's samples)
@torchop(torch.Tensor.new_zeros, name="new_zeros", methods=("new_zeros",))
def new_zeros(a: TensorProxy, *size: Any, dtype: torch.dtype | None = None, device: Any = None,
              **options: Any) -> TensorProxy:  # fmt: skip
    return _full(_varargs(size, options), 0, dtype or a.dtype, _device(device, a), "new_zeros", **options)


# kept: fewer guards than torch's kernel (0 against 7 over OpInfo's samples)
@torchop(torch.Tensor.new_ones, name="new_ones", methods=("new_ones",))
def new_ones(a: TensorProxy, *size: Any, dtype: torch.dtype | None = None, device: Any = None,
             **options: Any) -> TensorProxy:  # fmt: skip
    return _full(_varargs(size, options), 1, dtype or a.dtype, _device(device, a), "new_ones", **options)


# kept: fewer guards than torch's kernel (0 against 7 over OpInfo's samples)
@torchop(torch.Tensor.new_empty, name="new_empty", methods=("new_empty",))
def new_empty(a: TensorProxy, *size: Any, dtype: torch.dtype | None = None, device: Any = None,
              **options: Any) -> TensorProxy:  # fmt: skip
    return _full(_varargs(size, options), 0, dtype or a.dtype, _device(device, a), "new_empty", **options)


# kept: fewer guards than torch's kernel (4 against 7 over OpInfo's samples)
@torchop(torch.Tensor.new_full, name="new_full", methods=("new_full",))
def new_full(a: TensorProxy, size: Any, fill_value: Any, *, dtype: torch.dtype | None = None, device: Any = None,
             **options: Any) -> TensorProxy:  # fmt: skip
    return _full(_sequence(size, "new_full"), fill_value, dtype or a.dtype, _device(device, a), "new_full", **options)


# arange.


def _arange_args(start: Any, end: Any, step: Any) -> tuple:
    if end is None:
        start, end = 0, start
    elif start is None:
        start = 0
    start, end, step = (as_number(v, "arange") for v in (start, end, step))  # a 0-d tensor: its value
    for v in (start, end, step):
        if isinstance(v, TensorProxy):
            raise unsupported("arange with tensor bounds", "reading tensor data is data-dependent; pass numbers")
    return start, end, step


def _is_float(v: Any) -> bool:
    return (v.python_type if isinstance(v, NumberProxy) else type(v)) is float


def _concrete(v: Any) -> Any:
    """A Python number; a NumberProxy is pinned (an equality guard)."""
    if isinstance(v, NumberProxy):
        return float(v) if v.python_type is float else int(v)
    return v


def _meta_arange(start: Any, end: Any, step: Any, dtype: torch.dtype) -> int:
    """Eager's length and errors for concrete bounds (a meta arange, outside the tracing mode)."""
    with torch._C.DisableTorchFunction():
        return torch.arange(start, end, step, dtype=dtype, device="meta").shape[0]


def _symbolic_length(start: E.Expr, end: E.Expr, step: E.Expr) -> E.Expr:
    """`ceil((end - start) / step)` for int bounds; the step's sign is decided when it is symbolic."""
    if step.is_const:
        positive = step.value > 0
        if step.value == 0:
            raise RuntimeError("step must be nonzero")
    elif decide(E.ne(step, 0), "arange", "is the step nonzero"):
        positive = decide(E.gt(step, 0), "arange", "is the step positive")
    else:
        raise RuntimeError("step must be nonzero")
    if context.require().decider.unbacked.mentions(E.sub(end, start)):  # no example value: assumed, asserted
        consistent = decide(E.ge(end, start) if positive else E.le(end, start), "arange", "bounds fit the step's sign")
    else:
        hs, he = hint(start), hint(end)
        consistent = not ((positive and he < hs) or (not positive and he > hs))  # no guard: torch raises at run time
    if not consistent:
        raise RuntimeError("upper bound and lower bound inconsistent with step sign")
    span, k = (E.sub(end, start), step) if positive else (E.sub(start, end), E.neg(step))
    length = E.floordiv(E.add(span, E.sub(k, 1)), k)
    if context.require().decider.implied(E.ge(length, 0), True):
        return length
    return E.maximum(length, 0)


# kept: a symbolic length in a prims.iota, fewer guards than torch's kernel (3 against 5 over OpInfo's samples)
@torchop(torch.arange, name="arange", always_traced=True)
def arange(start: Any = None, end: Any = None, step: Any = 1, *, dtype: torch.dtype | None = None, device: Any = None,
           requires_grad: bool = False, **options: Any) -> TensorProxy:  # fmt: skip
    _check_options("arange", **options)
    start, end, step = _arange_args(start, end, step)
    floating = any(_is_float(v) for v in (start, end, step))
    dtype = dtype or (_default_float() if floating else torch.int64)
    device = _device(device)
    if dtype is torch.bool:
        raise NotImplementedError(f"\"arange_{device.type}\" not implemented for 'Bool'")
    if floating or not any(isinstance(v, NumberProxy) for v in (start, end, step)):
        start, end, step = (_concrete(v) for v in (start, end, step))
        length = _meta_arange(start, end, step, dtype)
        if not (dtype.is_floating_point or dtype.is_complex):  # eager converts the bounds to the int type
            start, step = int(start), int(step)
        return _finish(iota(length, start, step, dtype, device), requires_grad)
    s, e, k = (value_expr(v) for v in (start, end, step))
    return _finish(iota(_symbolic_length(s, e, k), s, k, dtype, device), requires_grad)


# eye.


# kept: fewer guards and misses than torch's kernel (0 guards, 2 misses against 6 and 3 over OpInfo's samples)
@torchop(torch.eye, name="eye", always_traced=True)
def eye(n: Any, m: Any = None, *, dtype: torch.dtype | None = None, device: Any = None,
        requires_grad: bool = False, **options: Any) -> TensorProxy:  # fmt: skip
    _check_options("eye", **options)
    rows, cols = (value_expr(v) for v in (n, n if m is None else m))
    for name, e in (("n", rows), ("m", cols)):
        if hint(e) < 0:  # no guard: torch raises this at run time too
            raise RuntimeError(f"{name} must be greater or equal to 0, got {example(e)}")
    dtype, device = dtype or _default_float(), _device(device)
    r = prims.broadcast_in_dim(iota(rows, 0, 1, torch.int64, device), (rows, cols), (0,))
    c = prims.broadcast_in_dim(iota(cols, 0, 1, torch.int64, device), (rows, cols), (1,))
    out = prims.eq(r, c)
    return _finish(prims.convert_element_type(out, dtype) if dtype is not torch.bool else out, requires_grad)


# linspace.


@prims.prim("linspace", impl=lambda start, end, steps, dtype, device: torch.linspace(start, end, steps, dtype=dtype,
                                                                                    device=device))  # fmt: skip
def linspace_prim(start: Any, end: Any, steps: Any, dtype: torch.dtype, device: torch.device) -> TensorProxy:
    return prims.new_tensor((steps,), dtype, [], device)


# kept: fewer guards (1 vs 7), misses (2 vs 7) and pins (0 vs 7) over OpInfo's samples and probes
@torchop(torch.linspace, name="linspace")
def linspace(start: Any, end: Any, steps: Any, *, dtype: torch.dtype | None = None, device: Any = None,
             requires_grad: bool = False, **options: Any) -> TensorProxy:  # fmt: skip
    """`torch.linspace(0, 1, n)`: `n` steps stay symbolic (the output's size), and so do number bounds."""
    _check_options("linspace", **options)
    if any(isinstance(v, TensorProxy) for v in (start, end, steps)):
        raise unsupported("linspace with tensor arguments", "reading tensor data is data-dependent; pass numbers")
    if any(isinstance(v, complex) for v in (start, end)):
        raise unsupported("linspace with complex bounds", "compute it outside the compiled function")
    if not (type(steps) is int or (isinstance(steps, NumberProxy) and steps.python_type is int)):
        raise TypeError(f"linspace(): argument 'steps' must be int, not {type(steps).__name__}")
    n = value_expr(steps)
    if not decide(E.ge(n, 0), "linspace", "number of steps must be non-negative"):
        raise RuntimeError("number of steps must be non-negative")
    bounds = [v.expr if isinstance(v, NumberProxy) else v for v in (start, end)]
    out = linspace_prim(*bounds, n, dtype or _default_float(), _device(device))
    return _finish(out, requires_grad)
