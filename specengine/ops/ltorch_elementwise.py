"""More elementwise ops: unary math, activations, binary integer/logical ops with their operators,
masked_fill, clamp, lerp, dtype casts and in-place versions.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
import torch.nn.functional as F

from specengine.ir.proxies import NumberProxy, TensorProxy, is_outside_tensor, unsupported
from specengine.ir.symbol import Symbol
from specengine.ops import prims
from specengine.ops.ltorch_arith import elementwise
from specengine.ops.ltorch_inplace import _check_broadcast_into, _write, copy_to
from specengine.ops.overlap import check_write
from specengine.ops.registry import torchop
from specengine.ops.utils import broadcast_shapes, convert, expand_to, meta_call, meta_value

_UNARY = ["expm1", "log1p", "log2", "sqrt", "rsqrt", "sin", "cos", "erf", "reciprocal", "floor", "ceil", "trunc",
          "sign", "isnan", "isinf", "logical_not", "bitwise_not"]  # fmt: skip
_BINARY = ["floor_divide", "rfloordiv", "remainder", "rmod", "fmod", "maximum", "minimum", "atan2", "logical_and",
           "logical_or", "logical_xor", "bitwise_and", "rand", "bitwise_or", "ror", "bitwise_xor", "rxor"]  # fmt: skip
__all__ = [
    *_UNARY, "round", "invert", "gelu", "silu", "softplus", *_BINARY,
    "masked_fill", "masked_fill_", "clamp", "clamp_min", "clamp_max", "clamp_", "clamp_min_", "clamp_max_",
    "lerp", "to", "type_as", "to_float", "to_double", "to_half", "to_bfloat16", "to_long", "to_int", "to_bool",
    "floor_divide_", "remainder_", "bitwise_and_", "bitwise_or_", "bitwise_xor_",
]  # fmt: skip

# Helpers.

_C10_NAMES = {
    torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
    torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
    torch.bool: "Bool", torch.complex64: "ComplexFloat", torch.complex128: "ComplexDouble",
}  # fmt: skip
_CPP_NAMES = {
    torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16",
    torch.int64: "long int", torch.int32: "int", torch.int16: "short int", torch.int8: "signed char",
    torch.uint8: "unsigned char",
}  # fmt: skip
_REDUCED = (torch.float16, torch.bfloat16)


def _kernel_error(kernel: str, dtype: torch.dtype) -> NotImplementedError:
    """The error a CPU kernel raises for a dtype it has no implementation for (meta accepts these)."""
    return NotImplementedError(f"\"{kernel}\" not implemented for '{_C10_NAMES.get(dtype, str(dtype))}'")


def _device_of(*args: Any) -> str:
    return next(a.device.type for a in args if isinstance(a, TensorProxy))


def _result_dtype(a: Any, b: Any) -> torch.dtype:
    return torch.result_type(meta_value(a), meta_value(b))


def _is_float(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point or dtype.is_complex


def _scalar(x: Any) -> Any:
    """A prim operand for a number (a NumberProxy stays symbolic: its expression) or a tensor."""
    if isinstance(x, NumberProxy):
        return x.expr
    _no_outside(x)
    return x


def _type_name(x: Any) -> str:
    return x.python_type.__name__ if isinstance(x, NumberProxy) else type(x).__name__


def _no_outside(*xs: Any) -> None:
    if any(is_outside_tensor(x) for x in xs):
        raise unsupported("a tensor closed over from outside", "pass the tensor as an argument")


def _require_tensor(op: str, x: Any) -> None:
    _no_outside(x)
    if not isinstance(x, TensorProxy):
        raise TypeError(f"{op}(): argument 'other' (position 1) must be Tensor, not {_type_name(x)}")


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
        raise _kernel_error(f"{name}_vml_{a.device.type}", a.dtype)
    if name == "bitwise_not" and _is_float(a.dtype):
        raise _kernel_error(f"bitwise_not_{a.device.type}", a.dtype)


def _unary(name: str) -> Symbol:
    torch_fn = getattr(torch, name)

    def decomposition(a: TensorProxy) -> TensorProxy:
        _kernel_check(name, a)
        if name in _BOOL_OUT:  # computed in the input's dtype
            meta_call(torch_fn, a)
            return prims.PRIMS[name](a)
        return elementwise(name, torch_fn, a)

    decomposition.__name__ = name
    # kept: one prim per op, which fusing executors take (the generic op is opaque to them)
    return torchop(torch_fn, getattr(torch.Tensor, name), name=name, methods=(name,))(decomposition)


expm1, log1p, log2, sqrt, rsqrt, sin, cos, erf, reciprocal, floor, ceil, trunc = map(_unary, _UNARY[:12])
sign, isnan, isinf, logical_not, bitwise_not = map(_unary, _UNARY[12:])


# kept: fewer guards than torch's kernel (decimals); one prim, which fusing executors take
@torchop(torch.round, torch.Tensor.round, name="round", methods=("round",))
def round(a: TensorProxy, *, decimals: int | None = None) -> TensorProxy:  # noqa: A001 - torch's name
    if decimals is not None and not _is_float(a.dtype):  # torch.round(x, decimals=...) is floating-point only
        raise _kernel_error(f"round_vml_{a.device.type}" if decimals == 0 else f"round_{a.device.type}", a.dtype)
    _kernel_check("round", a)
    meta_call(torch.round, a, **({} if decimals is None else {"decimals": decimals}))
    return prims.round(a, decimals=decimals) if decimals else prims.round(a)


# kept: an operator (`~x`): dunders have no generic fallback
@torchop(torch.Tensor.__invert__, name="invert", methods=("__invert__",))
def invert(a: TensorProxy) -> TensorProxy:
    if _is_float(a.dtype):
        raise TypeError("~ (operator.invert) is only implemented on integer and Boolean-type tensors")
    return bitwise_not(a)


# Activations: decompositions in float for reduced precision, as their kernels compute.


def _float_input(a: TensorProxy, kernel: str) -> TensorProxy:
    if not a.dtype.is_floating_point:
        raise _kernel_error(kernel, a.dtype)
    return convert(a, torch.float32) if a.dtype in _REDUCED else a


# kept: elementwise prims, which fusing executors take
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


# kept: elementwise prims, which fusing executors take
@torchop(F.silu, name="silu")
def silu(a: TensorProxy, inplace: bool = False) -> TensorProxy:
    _no_inplace("silu", inplace)
    x = _float_input(a, f"silu_{a.device.type}")
    meta_call(F.silu, a)
    return convert(prims.div(x, prims.add(prims.exp(prims.neg(x)), 1.0)), a.dtype)


# kept: fewer guards than torch's kernel (0 against 4 over OpInfo's samples); fusible elementwise prims
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
        _no_outside(a, b)
        if tensors_only:
            _require_tensor(name, b)
        dtype = _result_dtype(a, b)
        if bool_kernel and dtype is torch.bool:
            raise _kernel_error(f"{bool_kernel}_{_device_of(a, b)}", dtype)
        if name.startswith("bitwise") and _is_float(dtype):
            raise _kernel_error(f"{name}_{_device_of(a, b)}", dtype)
        return elementwise(name, torch_fn, a, b)

    decomposition.__name__ = name
    dunder = {"floor_divide": "floordiv", "remainder": "mod"}.get(name, name.removeprefix("bitwise_"))
    dunders = (f"__{dunder}__",) if hasattr(torch.Tensor, f"__{dunder}__") else ()
    fns = (torch_fn, getattr(torch.Tensor, name), *(getattr(torch.Tensor, d) for d in dunders))
    # kept: broadcasting without guards (torch's kernel decides each size 1 or not); operators
    return torchop(*fns, name=name, methods=(name, *dunders))(decomposition)


def _reflected(name: str, dunder: str, forward: Symbol) -> Symbol:
    def decomposition(a: TensorProxy, b: Any) -> TensorProxy:
        return forward(b, a)

    decomposition.__name__ = name
    # kept: reflected operators (`2 // x`): dunders have no generic fallback
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
        _require_tensor(name, b)
        return elementwise(name, torch_fn, a, b, compare=True)  # the truth of values in the common dtype

    decomposition.__name__ = name
    # kept: one prim per op, which fusing executors take (the generic op is opaque to them)
    return torchop(torch_fn, getattr(torch.Tensor, name), name=name, methods=(name,))(decomposition)


logical_and, logical_or, logical_xor = map(_logical, ("logical_and", "logical_or", "logical_xor"))


# masked_fill.


def _check_masked_fill(mask: Any, value: Any) -> None:
    _no_outside(value)
    _require_tensor("masked_fill", mask)
    if mask.dtype is not torch.bool:
        name = _CPP_NAMES.get(mask.dtype, str(mask.dtype))
        raise RuntimeError(f"masked_fill_ only supports boolean masks, but got mask with dtype {name}")
    if isinstance(value, TensorProxy) and value.ndim != 0:
        raise RuntimeError("masked_fill_ only supports a 0-dimensional value tensor, but got tensor with "
                           f"{value.ndim} dimension(s).")  # fmt: skip


def _fill_value(value: Any, a: TensorProxy) -> TensorProxy:
    """`value` as a 0-d tensor of `a`'s dtype, converted as masked_fill converts it."""
    if isinstance(value, TensorProxy):
        return convert(value, a.dtype)
    if not isinstance(value, NumberProxy):
        _check_fits(value, a.dtype)
    return prims.full((), _scalar(value), a.dtype, a.device)


def _check_fits(value: Any, dtype: torch.dtype) -> None:
    """Eager's overflow error for a Python number that `dtype` cannot hold (inf and nan fit a floating dtype)."""
    if dtype in _REDUCED:  # torch.full rounds these to inf; masked_fill raises
        if math.isfinite(value) and abs(value) > torch.finfo(dtype).max:
            raise RuntimeError(f"value cannot be converted to type {_CPP_NAMES[dtype]} without overflow")
        return
    with torch._C.DisableTorchFunction():
        torch.full((), value, dtype=dtype)  # "value cannot be converted to type ... without overflow"


# kept: fewer guards than torch's kernel (0 against 11 over OpInfo's samples)
@torchop(torch.masked_fill, torch.Tensor.masked_fill, name="masked_fill", methods=("masked_fill",))
def masked_fill(a: TensorProxy, mask: TensorProxy, value: Any) -> TensorProxy:
    _check_masked_fill(mask, value)
    meta_call(torch.masked_fill, a, mask, value)
    shape = broadcast_shapes(a.dims, mask.dims)
    fill = expand_to(_fill_value(value, a), shape)
    return prims.where(expand_to(mask, shape), fill, expand_to(a, shape))


# kept: the in-place form of masked_fill's rule (mask broadcast into the tensor without guards)
@torchop(torch.Tensor.masked_fill_, name="masked_fill_", methods=("masked_fill_",), pure=False)
def masked_fill_(a: TensorProxy, mask: TensorProxy, value: Any) -> TensorProxy:
    _check_masked_fill(mask, value)
    check_write(a, (mask,), "masked_fill_", internal=False)  # (an expanded tensor: eager only warns)
    _check_broadcast_into(a, mask, "masked_fill_")
    fill = expand_to(_fill_value(value, a), a.dims)
    return copy_to(a, prims.where(expand_to(mask, a.dims), fill, a))


# clamp: min(max(a, lo), hi) in the promoted dtype; lo > hi gives hi, as in torch.


def _clamp(a: TensorProxy, lo: Any, hi: Any, op: str) -> TensorProxy:
    if lo is None and hi is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    _no_outside(lo, hi)
    bounds = [b for b in (lo, hi) if b is not None]
    tensors = [b for b in bounds if isinstance(b, TensorProxy)]
    if len(bounds) == 2 and len(tensors) == 1:
        raise TypeError(f"{op}() received an invalid combination of arguments - got (Tensor, min={_type_name(lo)}, "
                        f"max={_type_name(hi)})")  # fmt: skip
    dtype = meta_call(torch.clamp, a, lo, hi).dtype
    if dtype is torch.bool and len(tensors) != 1:  # only one tensor bound works for bool (maximum or minimum)
        raise _kernel_error(f"{_clamp_kernel(lo, hi, tensors)}_{a.device.type}", dtype)
    shape = broadcast_shapes(a.dims, *(b.dims for b in tensors))
    out = convert(expand_to(a, shape), dtype)
    if lo is not None:
        out = prims.maximum(out, convert(expand_to(_scalar(lo), shape), dtype))
    if hi is not None:
        out = prims.minimum(out, convert(expand_to(_scalar(hi), shape), dtype))
    return out


def _clamp_kernel(lo: Any, hi: Any, tensors: list) -> str:
    if tensors:
        return "clamp"
    return "clamp_max_scalar" if lo is None else "clamp_min_scalar" if hi is None else "clamp_scalar"


# kept: fewer guards than torch's kernel (0 against 17 over OpInfo's samples)
@torchop(torch.clamp, torch.Tensor.clamp, torch.clip, torch.Tensor.clip, name="clamp", methods=("clamp", "clip"))
def clamp(a: TensorProxy, min: Any = None, max: Any = None) -> TensorProxy:  # noqa: A002 - torch's names
    return _clamp(a, min, max, "clamp")


def _one_bound(bound: Any, op: str) -> Any:
    if bound is None:
        raise TypeError(f"{op}() received an invalid combination of arguments - got (Tensor, NoneType)")
    return bound


# kept: broadcasting without guards (torch's kernel decides each size 1 or not)
@torchop(torch.clamp_min, torch.Tensor.clamp_min, name="clamp_min", methods=("clamp_min",))
def clamp_min(a: TensorProxy, min: Any) -> TensorProxy:  # noqa: A002
    return _clamp(a, _one_bound(min, "clamp_min"), None, "clamp_min")


# kept: broadcasting without guards (torch's kernel decides each size 1 or not)
@torchop(torch.clamp_max, torch.Tensor.clamp_max, name="clamp_max", methods=("clamp_max",))
def clamp_max(a: TensorProxy, max: Any) -> TensorProxy:  # noqa: A002
    return _clamp(a, None, _one_bound(max, "clamp_max"), "clamp_max")


def _clamp_into(a: TensorProxy, lo: Any, hi: Any, op: str) -> TensorProxy:
    if lo is not None or hi is not None:  # (else eager's error that one is needed comes first)
        check_write(a, (lo, hi), op)
    for bound in (lo, hi):
        _check_broadcast_into(a, bound, op)
    return _write(a, _clamp(a, lo, hi, op), op)


# kept: the in-place form of clamp's rule (bounds broadcast into the tensor without guards)
@torchop(torch.Tensor.clamp_, torch.clamp_, torch.Tensor.clip_, torch.clip_, name="clamp_", methods=("clamp_", "clip_"),
         pure=False)  # fmt: skip
def clamp_(a: TensorProxy, min: Any = None, max: Any = None) -> TensorProxy:  # noqa: A002
    return _clamp_into(a, min, max, "clamp_")


# kept: the in-place form of clamp_min's rule
@torchop(torch.Tensor.clamp_min_, torch.clamp_min_, name="clamp_min_", methods=("clamp_min_",), pure=False)
def clamp_min_(a: TensorProxy, min: Any) -> TensorProxy:  # noqa: A002
    return _clamp_into(a, _one_bound(min, "clamp_min_"), None, "clamp_min_")


# kept: the in-place form of clamp_max's rule
@torchop(torch.Tensor.clamp_max_, torch.clamp_max_, name="clamp_max_", methods=("clamp_max_",), pure=False)
def clamp_max_(a: TensorProxy, max: Any) -> TensorProxy:  # noqa: A002
    return _clamp_into(a, None, _one_bound(max, "clamp_max_"), "clamp_max_")


# lerp: torch's formula, `a + w * (b - a)` for |w| < 0.5 and `b - (b - a) * (1 - w)` otherwise, in float
# for reduced precision (as its kernels compute).


def _lerp_far(a: TensorProxy, b: TensorProxy, diff: TensorProxy, w: Any) -> TensorProxy:
    one_minus = prims.add(prims.neg(w), 1) if isinstance(w, TensorProxy) else 1 - w
    return prims.sub(b, prims.mul(diff, one_minus))


# kept: fewer guards than torch's kernel (0 against 3 over OpInfo's samples)
@torchop(torch.lerp, torch.Tensor.lerp, name="lerp", methods=("lerp",))
def lerp(a: TensorProxy, end: TensorProxy, weight: Any) -> TensorProxy:
    _no_outside(end, weight)
    dtype = meta_call(torch.lerp, a, end, weight).dtype
    if not _is_float(dtype):
        kind = "tensor" if isinstance(weight, TensorProxy) else "scalar"
        raise _kernel_error(f"lerp_kernel_{kind}", dtype)
    compute = torch.float32 if dtype in _REDUCED else dtype
    shape = broadcast_shapes(*(x.dims for x in (a, end, weight) if isinstance(x, TensorProxy)))
    start, stop = (convert(expand_to(x, shape), compute) for x in (a, end))
    diff = prims.sub(stop, start)
    if isinstance(weight, NumberProxy):  # decided per element, as for a tensor weight: no guard on its value
        weight = prims.full((), _scalar(weight), compute, a.device)
    if isinstance(weight, TensorProxy):
        w = convert(expand_to(weight, shape), compute)
        near = prims.add(start, prims.mul(w, diff))
        out = prims.where(prims.lt(prims.abs(w), 0.5), near, _lerp_far(start, stop, diff, w))
    elif abs(_scalar(weight)) < 0.5:
        out = prims.add(start, prims.mul(diff, weight))
    else:
        out = _lerp_far(start, stop, diff, weight)
    return convert(out, dtype)


# Casts.


def _same_device(device: torch.device, target: Any) -> bool:
    target = torch.device(target)
    if target.type != device.type:
        return False
    if target.index is None or device.type == "cpu":
        return True
    return target.index == (device.index if device.index is not None else torch.cuda.current_device())


def _cast(a: TensorProxy, dtype: torch.dtype | None, device: Any, copy: bool, memory_format: Any) -> TensorProxy:
    if device is not None and not _same_device(a.device, device):
        raise unsupported("Tensor.to(device)", "moving to another device is not traced; move the inputs instead")
    if memory_format not in (None, torch.preserve_format):  # values are unchanged; the torch op sets the strides
        meta_call(torch.Tensor.contiguous, a, memory_format=memory_format)  # eager's rank checks (channels_last)
    if dtype is None or dtype == a.dtype:
        if copy or memory_format not in (None, torch.preserve_format):  # a copy, or `a` or a copy by its strides
            return prims.new_tensor(a.dims, a.dtype, [a])  # (a new name: see ltorch.contiguous)
        return a
    return prims.convert_element_type(a, dtype)


def _to_args(args: tuple, kwargs: dict) -> tuple:
    """Tensor.to's overloads: (dtype, ...), (device, dtype, ...), (other, ...); then non_blocking, copy."""
    args, kw = list(args), dict(kwargs)
    dtype, device = kw.pop("dtype", None), kw.pop("device", None)
    if args and isinstance(args[0], TensorProxy):
        other = args.pop(0)
        dtype, device = other.dtype, other.device
    elif args and is_outside_tensor(args[0]):
        raise unsupported("Tensor.to(a tensor closed over from outside)", "pass the tensor as an argument")
    elif args and isinstance(args[0], torch.dtype):
        dtype = args.pop(0)
    elif args and (args[0] is None or isinstance(args[0], (str, torch.device, int)) and not isinstance(args[0], bool)):
        device = args.pop(0)  # (None: the tensor's own, as Module.to passes it: `t.to(None, dtype, False)`)
        if args and not (args[0] is None or isinstance(args[0], torch.dtype)):  # (eager: dtype follows a device)
            raise TypeError(f"to() received an invalid combination of arguments - got a {type(args[0]).__name__} "
                            "where (device, dtype, non_blocking, copy) expects a dtype")  # fmt: skip
        if args:
            dtype = args.pop(0)
    flags = dict(zip(("non_blocking", "copy"), args))
    flags.update({k: kw.pop(k) for k in ("non_blocking", "copy") if k in kw})
    memory_format = kw.pop("memory_format", None)
    bad_flag = any(not isinstance(v, bool) for v in flags.values())
    if kw or len(args) > 2 or bad_flag or (dtype is not None and not isinstance(dtype, torch.dtype)):
        raise TypeError(f"to() received an invalid combination of arguments - got {len(args)} extra arguments and "
                        f"keywords {sorted(kw)}")  # fmt: skip
    return dtype, device, bool(flags.get("copy", False)), memory_format


# kept: the generic path cannot trace it (it may return its input, or move devices)
@torchop(torch.Tensor.to, name="to", methods=("to",))
def to(a: TensorProxy, *args: Any, **kwargs: Any) -> TensorProxy:
    return _cast(a, *_to_args(args, kwargs))


# kept: the generic path cannot trace it (it returns its input where that is on the CPU already)
@torchop(torch.Tensor.cpu, name="cpu", methods=("cpu",))
def cpu(a: TensorProxy, memory_format: Any = torch.preserve_format) -> TensorProxy:
    return _cast(a, None, torch.device("cpu"), False, memory_format)


# kept: a prims.convert_element_type, which fusing executors take
@torchop(torch.Tensor.type_as, name="type_as", methods=("type_as",))
def type_as(a: TensorProxy, other: TensorProxy) -> TensorProxy:
    if is_outside_tensor(other):
        raise unsupported("type_as(a tensor closed over from outside)", "pass the tensor as an argument")
    _require_tensor("type_as", other)
    return _cast(a, other.dtype, None, False, None)


def _cast_method(method: str, dtype: torch.dtype) -> Symbol:
    """`Tensor.float()` and friends; ltorch names them `to_<method>` (not to shadow builtins there)."""

    def decomposition(a: TensorProxy, memory_format: Any = torch.preserve_format) -> TensorProxy:
        return _cast(a, dtype, None, False, memory_format)

    name = f"to_{method}"
    decomposition.__name__ = name
    # kept: a prims.convert_element_type, which fusing executors take
    return torchop(getattr(torch.Tensor, method), name=name, methods=(method,))(decomposition)


to_float = _cast_method("float", torch.float32)
to_double = _cast_method("double", torch.float64)
to_half = _cast_method("half", torch.float16)
to_bfloat16 = _cast_method("bfloat16", torch.bfloat16)
to_long = _cast_method("long", torch.int64)
to_int = _cast_method("int", torch.int32)
to_bool = _cast_method("bool", torch.bool)


# In-place forms of the binary ops with operators (`x //= y`, `x &= m`, ...): without them Python would
# fall back to `x = x // y`, leaving the caller's tensor unchanged.


def _binary_inplace(name: str, dunder: str, functional: Symbol) -> Symbol:
    def decomposition(a: TensorProxy, b: Any) -> TensorProxy:
        check_write(a, (b,), name)
        _check_broadcast_into(a, b, name)
        return _write(a, functional(a, b), name)

    decomposition.__name__ = name
    fns = (getattr(torch.Tensor, name), getattr(torch.Tensor, dunder))
    # kept: in-place operators (`x //= y`): dunders have no generic fallback
    return torchop(*fns, name=name, methods=(name, dunder), pure=False)(decomposition)


floor_divide_ = _binary_inplace("floor_divide_", "__ifloordiv__", floor_divide)
remainder_ = _binary_inplace("remainder_", "__imod__", remainder)
bitwise_and_ = _binary_inplace("bitwise_and_", "__iand__", bitwise_and)
bitwise_or_ = _binary_inplace("bitwise_or_", "__ior__", bitwise_or)
bitwise_xor_ = _binary_inplace("bitwise_xor_", "__ixor__", bitwise_xor)
