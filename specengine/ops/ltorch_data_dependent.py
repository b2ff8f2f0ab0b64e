"""Ops whose output sizes or values depend on tensor data: `nonzero`, `argwhere`, `masked_select`, `x[mask]`,
`torch.where(cond)`, `.item()` and `.tolist()`.

Each output size is an unbacked symbol (`specengine.ir.unbacked`): `0 <= u0 <= numel`, read from the real result
by the computation (`u0 = prims.unbacked_size(t, 0, ...)`); `.item()` is an unbacked int or float. No guard is ever
recorded on them; decisions later ops take on them are proved or asserted at run time.
"""

from __future__ import annotations

from typing import Any

import torch

from specengine.constraints import expr as E
from specengine.ir import context, speculation, unbacked
from specengine.ir.proxies import NumberProxy, TensorProxy, unsupported
from specengine.ops import prims
from specengine.ops.number_tensors import item_prim, known_values, read_value  # noqa: F401 - prims.item
from specengine.ops.registry import torchop
from specengine.ops.utils import broadcast_shapes, decide

__all__ = ["masked_select", "masked_index", "masked_setitem", "item", "tolist"]


def _numel(dims: tuple) -> E.Expr:
    out = E.const(1)
    for d in dims:
        out = E.mul(out, d)
    return out


# Prims that bind unbacked symbols in the computation (tag "unbacked": never merged by CSE, kept by specialization)
# and the run-time assertion of decisions on them.


@prims.prim("unbacked_size", impl=lambda t, dim, what: t.shape[dim], tags=("unbacked",))
def unbacked_size(t: TensorProxy, dim: int, what: str) -> NumberProxy:
    """`t.shape[dim]`, the value of an unbacked size (bound after the op that made `t`; see trace.unbacked.bind)."""
    raise AssertionError("unbacked_size is emitted by the tracer, never called while tracing")


@prims.prim("check_sym", impl=unbacked.check_sym_impl, pure=False)
def check_sym(cond: Any, message: str, names: tuple, values: tuple) -> None:
    """Raise DataDependentCheckError(message) at run time unless `cond` (over unbacked symbols) holds."""
    return None


@prims.prim("check_speculation", impl=speculation.check_speculation_impl, pure=False)
def check_speculation(cond: Any, key: str, value: bool, taken: tuple) -> None:
    """Raise Misspeculation at run time unless the data took the side `key` speculated (ir/speculation.py)."""
    return None


def _check_divisor_impl(value: Any, message: str) -> None:
    if value == 0:
        raise ZeroDivisionError(message)


@prims.prim("check_divisor", impl=_check_divisor_impl, pure=False)
def check_divisor(value: Any, message: str) -> None:
    """Raise ZeroDivisionError(message) at run time where a data-dependent divisor is 0, as Python does."""
    return None


def _checked_scalar(t: TensorProxy, op: str) -> None:
    if t.dtype.is_complex:
        raise unsupported(f"Tensor.{op} of a complex tensor", "complex values are not traced; keep the value a "
                          "tensor")  # fmt: skip
    if len(context.require().scopes) != 1:
        raise unsupported(f"Tensor.{op}", "inside an op's decomposition; call it from the program itself")


def item(t: TensorProxy) -> NumberProxy:
    """`t.item()`: an unbacked int (integer tensors), bool (a 0/1 int, bool tensors) or float (floating tensors),
    bound by `prims.item`."""
    _checked_scalar(t, "item")
    known = _known(t)
    if known is not None and not isinstance(known, list):
        return known  # `torch.tensor(n).item()` is n
    numel = _numel(t.dims)
    if not decide(E.eq(numel, 1), "item", "item() needs one element"):
        raise RuntimeError(f"a Tensor with {numel.eval(context.require().decider.hints)} elements cannot be "
                           "converted to Scalar")  # fmt: skip
    return read_value(t, "item()", "item")


def _known(t: TensorProxy) -> Any:
    return known_values(t)


def tolist(t: TensorProxy) -> Any:
    """`t.tolist()` of a 1-D integer or floating tensor: a list of unbacked values (its length is pinned); of a 0-d
    tensor, its value."""
    _checked_scalar(t, "tolist")
    known = _known(t)
    if isinstance(known, list):
        return list(known)  # `torch.tensor(x.shape).tolist()` is the sizes
    if t.ndim == 0:
        return item(t)  # as eager: the number itself
    if t.ndim != 1:
        raise unsupported("Tensor.tolist", "only 1-D tensors become lists of data-dependent values")
    n = context.require().pin(t.dims[0], "tolist", "the list's length")
    return [item(prims.squeeze(prims.slice_prim(t, (i,), (i + 1,), (1,)), (0,))) for i in range(n)]


def tensor_bool(t: TensorProxy) -> bool:
    """`bool(t)`, `if t:`, `if (x > 0).any():` of a one-element tensor: a branch on its value, `t.item() != 0`
    (taken by speculation, ir/speculation.py, or refused by name); eager's RuntimeError for other sizes."""
    if t.dtype.is_complex:
        raise unsupported("Tensor.__bool__ of a complex tensor", "complex values are not traced; use torch.where")
    numel = _numel(t.dims)
    if not decide(E.eq(numel, 1), "bool", "bool() needs one element"):
        what = "no values" if numel.eval(context.require().decider.hints) == 0 else "more than one value"
        raise RuntimeError(f"Boolean value of Tensor with {what} is ambiguous")
    return bool(item(t))


TensorProxy.item = item
TensorProxy.tolist = tolist
TensorProxy.__bool__ = tensor_bool


# Output sizes from data.


# kept: fewer guards (0 vs 6) and pins (0 vs 1) over OpInfo's samples
@torchop(torch.masked_select, torch.Tensor.masked_select, name="masked_select", methods=("masked_select",))
def masked_select(a: TensorProxy, mask: TensorProxy) -> TensorProxy:
    """The elements of `a` where `mask` (broadcast together) is true: (u,) with `0 <= u <= numel`."""
    if not isinstance(mask, TensorProxy) or mask.dtype != torch.bool:
        dtype = mask.dtype if isinstance(mask, TensorProxy) else type(mask).__name__
        raise RuntimeError(f"masked_select: expected BoolTensor for mask, got {dtype}")
    return prims.PRIMS["select_mask"](a, mask, broadcast_shapes(a.dims, mask.dims))


@prims.prim("select_mask", impl=lambda a, mask, shape: torch.masked_select(a, mask))
def select_mask(a: TensorProxy, mask: TensorProxy, shape: tuple) -> TensorProxy:
    u = unbacked.new_size("elements of masked_select", _numel(shape), "masked_select")
    return prims.new_tensor((u,), a.dtype, [a, mask])


def _check_mask(a: TensorProxy, mask: TensorProxy, op: str) -> None:
    if mask.ndim > a.ndim:
        raise IndexError(f"too many indices for tensor of dimension {a.ndim}")
    for i, (m, d) in enumerate(zip(mask.dims, a.dims)):
        if not decide(E.eq(m, d), op, "the mask's shape matches the indexed dims"):
            raise IndexError(f"The shape of the mask [{m}] at index {i} does not match the shape of the indexed "
                             f"tensor [{d}] at index {i}")  # fmt: skip


def masked_index(a: TensorProxy, mask: TensorProxy, rest: int) -> TensorProxy:
    """`a[mask]` (then `rest` full slices): (u, *a.shape[mask.ndim:]) with `0 <= u <= mask.numel()`."""
    _check_mask(a, mask, "getitem")
    return prims.PRIMS["index_mask"](a, mask, rest)


def _setitem_mask_impl(a: torch.Tensor, mask: torch.Tensor, rest: int, value: Any) -> None:
    a[(mask,) + (slice(None),) * rest] = value


@prims.prim("setitem_mask", impl=_setitem_mask_impl, pure=False)
def setitem_mask(a: TensorProxy, mask: TensorProxy, rest: int, value: Any) -> None:
    """`a[mask] = value` in place. No size is decided: the value broadcasts to the selected rows, whatever their
    number (torch raises eager's error at run time where it does not)."""
    return None


def masked_setitem(a: TensorProxy, mask: TensorProxy, rest: int, value: Any) -> None:
    """`a[mask] = value`: the rows are never counted while tracing (one element selected is no special case)."""
    _check_mask(a, mask, "setitem")
    if isinstance(value, TensorProxy) and value.ndim > a.ndim - mask.ndim + 1:
        raise RuntimeError(f"shape mismatch: value tensor of rank {value.ndim} cannot be broadcast to indexing "
                           f"result of rank {a.ndim - mask.ndim + 1}")  # fmt: skip
    if isinstance(value, NumberProxy):
        value = value.expr
    setitem_mask(a, mask, rest, value)


@prims.prim("index_mask", impl=lambda a, mask, rest: a[(mask,) + (slice(None),) * rest])
def index_mask(a: TensorProxy, mask: TensorProxy, rest: int) -> TensorProxy:
    u = unbacked.new_size("rows of x[mask]", _numel(mask.dims), "getitem")
    return prims.new_tensor((u, *a.dims[mask.ndim :]), a.dtype, [a])
