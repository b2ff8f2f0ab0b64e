"""In-place ops and setitem. They run in place in the computation, in the program's order, so mutation of
inputs, of views and of aliased inputs behaves exactly as in eager; passes never drop or merge them.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from specengine.constraints import expr as E
from specengine.ir import context
from specengine.ir.proxies import TensorProxy, is_outside_tensor, unsupported
from specengine.ir.symbol import Symbol
from specengine.ops import ltorch_arith, prims
from specengine.ops.generic import generic_call
from specengine.ops.ltorch_data_dependent import masked_setitem
from specengine.ops.ltorch_index import mask_key
from specengine.ops.ltorch_views import advanced_index, getitem
from specengine.ops.overlap import check_write
from specengine.ops.registry import torchop
from specengine.ops.utils import decide, expand_to, hint

__all__ = ["add_", "sub_", "mul_", "div_", "copy_", "setitem"]


def _copy_impl(dst: torch.Tensor, src: Any) -> torch.Tensor:
    return dst.copy_(src) if isinstance(src, torch.Tensor) else dst.fill_(src)


def _copy_meta(dst: TensorProxy, src: Any) -> TensorProxy:
    return dst


copy_to = Symbol("copy_to", "prims", meta=_copy_meta, impl=_copy_impl, is_prim=True, pure=False)
prims.PRIMS["copy_to"] = copy_to
prims.copy_to = copy_to  # traces print prims.copy_to


def _check_broadcast_into(dst: TensorProxy, src: Any, op: str) -> None:
    """Raise eager's error when `src` does not broadcast to `dst`'s shape.

    Checked on the hints without recording a guard: `dst` keeps its shape whatever the sizes are, and for
    inputs where the check fails the in-place torch op raises this same error at run time.
    """
    if not isinstance(src, TensorProxy):
        return
    unbacked = context.require().decider.unbacked
    if any(unbacked.mentions(d) for d in dst.dims + src.dims):
        return  # no example value of a data-dependent size: the torch op checks it at run time
    dst_sizes, src_sizes = [hint(d) for d in dst.dims], [hint(s) for s in src.dims]
    tail = dst_sizes[len(dst_sizes) - len(src_sizes) :] if len(src_sizes) <= len(dst_sizes) else None
    if tail is None or any(s not in (d, 1) for d, s in zip(tail, src_sizes)):
        raise RuntimeError(f"output with shape {dst_sizes} doesn't match the broadcast shape {src_sizes}")


def _write(dst: TensorProxy, result: Any, op: str) -> TensorProxy:
    if isinstance(result, TensorProxy) and not torch.can_cast(result.dtype, dst.dtype):
        raise RuntimeError(f"result type {_type_name(result.dtype)} can't be cast to the desired output type "
                           f"{_type_name(dst.dtype)}")  # fmt: skip
    copy_to(dst, prims.convert_element_type(result, dst.dtype) if result.dtype != dst.dtype else result)
    return dst


def _type_name(dtype: torch.dtype) -> str:
    return {torch.float32: "Float", torch.float64: "Double", torch.int64: "Long", torch.bool: "Bool",
            torch.int32: "Int", torch.float16: "Half", torch.bfloat16: "BFloat16"}.get(dtype, str(dtype))  # fmt: skip


def _binary_inplace(name: str, functional: Any) -> Any:
    def decomposition(a: TensorProxy, b: Any, **kwargs: Any) -> TensorProxy:
        if name != "sub_" or not _bool_operand(a, b):  # (eager refuses subtracting bools before the overlap check)
            check_write(a, (b,), name)
        _check_broadcast_into(a, b, name)
        return _write(a, functional(a, b, **kwargs), name)

    decomposition.__name__ = name
    method = getattr(torch.Tensor, name)
    # kept: broadcast into the written tensor without guards; in-place operators (`x += y`) have no fallback
    return torchop(method, name=name, methods=(name, f"__i{name[:-1].replace('div', 'truediv')}__"), pure=False)(
        decomposition
    )


def _bool_operand(a: TensorProxy, b: Any) -> bool:
    return a.dtype is torch.bool or (isinstance(b, TensorProxy) and b.dtype is torch.bool) or type(b) is bool


add_ = _binary_inplace("add_", lambda a, b, **kw: ltorch_arith.add(a, b, **kw))
sub_ = _binary_inplace("sub_", lambda a, b, **kw: ltorch_arith.sub(a, b, **kw))
mul_ = _binary_inplace("mul_", lambda a, b: ltorch_arith.mul(a, b))
div_ = _binary_inplace("div_", lambda a, b, **kw: ltorch_arith.div(a, b, **kw))


# kept: a broadcast and convert into the written tensor: prims that fusing executors take
@torchop(torch.Tensor.copy_, name="copy_", methods=("copy_",), pure=False)
def copy_(a: TensorProxy, src: TensorProxy, non_blocking: bool = False) -> TensorProxy:
    check_write(a, (src,), "copy_", same_data=True)
    _check_broadcast_into(a, src, "copy_")
    return copy_to(a, expand_to(src, a.dims))


def _drop_leading_ones(value: Any, ndim: int) -> Any:
    """As torch's setitem does before it copies: the value's leading size-1 dims beyond `ndim` are dropped
    (`y[...] = x` with x of shape (1, 1, 3) into a y of shape (3,)); a size that is not 1 stays, to be refused."""
    if not isinstance(value, TensorProxy) or value.ndim <= ndim:
        return value
    extra = 0
    while extra < value.ndim - ndim and decide(
        E.eq(value.dims[extra], 1), "setitem", "a leading size-1 dim of the value"
    ):
        extra += 1
    return prims.reshape(value, value.dims[extra:]) if extra else value


# kept: an operator (`x[i] = v`): dunders have no generic fallback
@torchop(operator.setitem, torch.Tensor.__setitem__, name="setitem", methods=("__setitem__",), pure=False)
def setitem(a: TensorProxy, key: Any, value: Any) -> None:
    if is_outside_tensor(value):
        raise unsupported("setitem with a tensor closed over from outside", "pass the tensor as an argument")
    mask = mask_key(key)
    if mask is not None:  # a[mask] = value: no count of the rows is needed
        return masked_setitem(a, *mask, value)
    if advanced_index(key):  # index_put: torch's meta kernel, run in place
        generic_call(torch.Tensor.__setitem__, (a, key, value), {})
        return
    view = getitem(a, key)
    value = _drop_leading_ones(value, view.ndim)
    _check_broadcast_into(view, value, "setitem")
    check_write(view, (value,), "setitem", expand=True, same_data=True)  # (eager expands the value, then copy_)
    if isinstance(value, TensorProxy) and value.dtype != view.dtype:
        value = prims.convert_element_type(value, view.dtype)
    copy_to(view, expand_to(value, view.dims))
