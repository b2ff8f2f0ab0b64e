"""More elementwise ops: unary math, activations, binary integer/logical ops (with their operators).

masked_fill, clamp, lerp, casts and in-place versions live in `ltorch_elementwise2`, re-exported here.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.nn.functional as F

from specengine.ops import prims
from specengine.ops.ltorch_elementwise2 import *  # noqa: F403 - ltorch's star import of this module brings them in
from specengine.ops.ltorch_elementwise2 import (
    REDUCED,
    _lt,
    device_of,
    is_float,
    kernel_error,
    require_tensor,
    result_dtype,
)
from specengine.ops.ltorch_elementwise2 import __all__ as _all2
from specengine.ops.registry import torchop
from specengine.ops.utils import convert, meta_call
from specengine.trace.proxies import TensorProxy, unsupported
from specengine.trace.symbol import Symbol

_UNARY = ["expm1", "log1p", "log2", "sqrt", "rsqrt", "sin", "cos", "erf", "reciprocal", "floor", "ceil", "trunc",
          "sign", "isnan", "isinf", "logical_not", "bitwise_not"]  # fmt: skip
_BINARY = ["floor_divide", "rfloordiv", "remainder", "rmod", "fmod", "maximum", "minimum", "atan2", "logical_and",
           "logical_or", "logical_xor", "bitwise_and", "rand", "bitwise_or", "ror", "bitwise_xor", "rxor"]  # fmt: skip
__all__ = [*_UNARY, "round", "invert", "gelu", "silu", "softplus", *_BINARY, *_all2]

# Prims. Tensor operands have identical dims; a name another module already defined is reused (the same
# torch function), so that modules may define common prims such as sqrt in any import order.


def _prim(name: str, impl: Callable, out_dtype: torch.dtype | None = None) -> Symbol:
    if name in prims.PRIMS:
        return prims.PRIMS[name]

    def meta(*args: Any, **kwargs: Any) -> TensorProxy:
        tensors = [a for a in args if isinstance(a, TensorProxy)]
        assert all(t.dims == tensors[0].dims for t in tensors), "elementwise prims need broadcast operands"
        return prims.new_tensor(tensors[0].dims, out_dtype or tensors[0].dtype, tensors)

    meta.__name__ = name
    return prims.prim(name, impl=impl, tags=("elementwise",))(meta)


def _round_impl(a: torch.Tensor, decimals: int = 0) -> torch.Tensor:
    return torch.round(a) if decimals == 0 else torch.round(a, decimals=decimals)


def _minimum_impl(a: torch.Tensor, b: Any) -> torch.Tensor:
    return torch.minimum(a, b) if torch.is_tensor(b) else torch.clamp_max(a, b)


_BOOL_OUT = ("isnan", "isinf", "logical_not", "logical_and", "logical_or", "logical_xor")
_PRIM_NAMES = _UNARY + ["floor_divide", "remainder", "fmod", "atan2", "logical_and", "logical_or", "logical_xor",
                        "bitwise_and", "bitwise_or", "bitwise_xor"]  # fmt: skip
for _name in _PRIM_NAMES:
    _prim(_name, getattr(torch, _name), torch.bool if _name in _BOOL_OUT else None)
_prim("minimum", _minimum_impl)  # scalar bounds for clamp, as prims.maximum
_prim("round", _round_impl)


# Unary ops.


def _kernel_check(name: str, a: TensorProxy) -> None:
    """Dtypes meta accepts but the kernels do not."""
    if name in ("floor", "ceil", "trunc", "round") and a.dtype is torch.bool:
        raise kernel_error(f"{name}_vml_{a.device.type}", a.dtype)
    if name == "bitwise_not" and is_float(a.dtype):
        raise kernel_error(f"bitwise_not_{a.device.type}", a.dtype)


def _unary(name: str) -> Symbol:
    torch_fn = getattr(torch, name)

    def decomposition(a: TensorProxy) -> TensorProxy:
        _kernel_check(name, a)
        if name in _BOOL_OUT:  # computed in the input's dtype
            meta_call(torch_fn, a)
            return prims.PRIMS[name](a)
        return _lt().elementwise(name, torch_fn, a)

    decomposition.__name__ = name
    return torchop(torch_fn, getattr(torch.Tensor, name), name=name, methods=(name,))(decomposition)


expm1, log1p, log2, sqrt, rsqrt, sin, cos, erf, reciprocal, floor, ceil, trunc = map(_unary, _UNARY[:12])
sign, isnan, isinf, logical_not, bitwise_not = map(_unary, _UNARY[12:])


@torchop(torch.round, torch.Tensor.round, name="round", methods=("round",))
def round(a: TensorProxy, *, decimals: int | None = None) -> TensorProxy:  # noqa: A001 - torch's name
    if decimals is not None and not is_float(a.dtype):  # torch.round(x, decimals=...) is floating-point only
        raise kernel_error(f"round_vml_{a.device.type}" if decimals == 0 else f"round_{a.device.type}", a.dtype)
    _kernel_check("round", a)
    meta_call(torch.round, a, **({} if decimals is None else {"decimals": decimals}))
    return prims.round(a, decimals=decimals) if decimals else prims.round(a)


@torchop(torch.Tensor.__invert__, name="invert", methods=("__invert__",))
def invert(a: TensorProxy) -> TensorProxy:
    if is_float(a.dtype):
        raise TypeError("~ (operator.invert) is only implemented on integer and Boolean-type tensors")
    return bitwise_not(a)


# Activations: decompositions in float for reduced precision, as their kernels compute.


def _float_input(a: TensorProxy, kernel: str) -> TensorProxy:
    if not a.dtype.is_floating_point:
        raise kernel_error(kernel, a.dtype)
    return convert(a, torch.float32) if a.dtype in REDUCED else a


@torchop(F.gelu, name="gelu")
def gelu(a: TensorProxy, approximate: str = "none") -> TensorProxy:
    if approximate not in ("none", "tanh"):
        raise RuntimeError("approximate argument must be either none or tanh.")
    x = _float_input(a, "GeluKernelImpl")
    meta_call(F.gelu, a, approximate=approximate)
    if approximate == "none":
        inner = prims.erf(prims.mul(x, math.sqrt(0.5)))
    else:
        cube = prims.mul(prims.mul(x, x), x)
        inner = prims.tanh(prims.mul(prims.add(x, prims.mul(cube, 0.044715)), math.sqrt(2 / math.pi)))
    return convert(prims.mul(prims.mul(x, 0.5), prims.add(inner, 1.0)), a.dtype)


def _no_inplace(op: str, inplace: bool) -> None:
    if inplace:
        raise unsupported(f"{op}(inplace=True)", "use inplace=False and assign the result")


@torchop(F.silu, name="silu")
def silu(a: TensorProxy, inplace: bool = False) -> TensorProxy:
    _no_inplace("silu", inplace)
    x = _float_input(a, f"silu_{a.device.type}")
    meta_call(F.silu, a)
    return convert(prims.div(x, prims.add(prims.exp(prims.neg(x)), 1.0)), a.dtype)


@torchop(F.softplus, name="softplus")
def softplus(a: TensorProxy, beta: float = 1.0, threshold: float = 20.0) -> TensorProxy:
    x = _float_input(a, f"softplus_{a.device.type}")
    meta_call(F.softplus, a, beta, threshold)
    scaled = prims.mul(x, beta)
    soft = prims.div(prims.log1p(prims.exp(scaled)), beta)
    return convert(prims.where(prims.gt(scaled, threshold), x, soft), a.dtype)


# Binary ops. Python numbers may stand on either side where torch accepts them.


def _binary(name: str, *, tensors_only: bool = False, bool_kernel: str | None = None) -> Symbol:
    torch_fn = getattr(torch, name)

    def decomposition(a: Any, b: Any) -> TensorProxy:
        if tensors_only:
            require_tensor(name, b)
        dtype = result_dtype(a, b)
        if bool_kernel and dtype is torch.bool:
            raise kernel_error(f"{bool_kernel}_{device_of(a, b)}", dtype)
        if name.startswith("bitwise") and is_float(dtype):
            raise kernel_error(f"{name}_{device_of(a, b)}", dtype)
        return _lt().elementwise(name, torch_fn, a, b)

    decomposition.__name__ = name
    dunder = {"floor_divide": "floordiv", "remainder": "mod"}.get(name, name.removeprefix("bitwise_"))
    dunders = (f"__{dunder}__",) if hasattr(torch.Tensor, f"__{dunder}__") else ()
    fns = (torch_fn, getattr(torch.Tensor, name), *(getattr(torch.Tensor, d) for d in dunders))
    return torchop(*fns, name=name, methods=(name, *dunders))(decomposition)


def _reflected(name: str, dunder: str, forward: Symbol) -> Symbol:
    def decomposition(a: TensorProxy, b: Any) -> TensorProxy:
        return forward(b, a)

    decomposition.__name__ = name
    return torchop(getattr(torch.Tensor, dunder), name=name, methods=(dunder,))(decomposition)


floor_divide = _binary("floor_divide", bool_kernel="div_floor")
rfloordiv = _reflected("rfloordiv", "__rfloordiv__", floor_divide)
remainder = _binary("remainder", bool_kernel="remainder")
rmod = _reflected("rmod", "__rmod__", remainder)
fmod = _binary("fmod", bool_kernel="fmod")
maximum = _binary("maximum", tensors_only=True)
minimum = _binary("minimum", tensors_only=True)
atan2 = _binary("atan2", tensors_only=True)
bitwise_and = _binary("bitwise_and")
rand = _reflected("rand", "__rand__", bitwise_and)
bitwise_or = _binary("bitwise_or")
ror = _reflected("ror", "__ror__", bitwise_or)
bitwise_xor = _binary("bitwise_xor")
rxor = _reflected("rxor", "__rxor__", bitwise_xor)


def _logical(name: str) -> Symbol:
    torch_fn = getattr(torch, name)

    def decomposition(a: TensorProxy, b: TensorProxy) -> TensorProxy:
        require_tensor(name, b)
        return _lt().elementwise(name, torch_fn, a, b, compare=True)  # the truth of values in the common dtype

    decomposition.__name__ = name
    return torchop(torch_fn, getattr(torch.Tensor, name), name=name, methods=(name,))(decomposition)


logical_and, logical_or, logical_xor = map(_logical, ("logical_and", "logical_or", "logical_xor"))
