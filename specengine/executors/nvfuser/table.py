"""The one table of what the nvFuser lowering emits: per prim, the `nvfuser_direct` op, its parameters in
order, and how the plan builds its arguments; plus the dtypes nvFuser has.

Every entry follows the Python bindings of NVIDIA/Fuser 0.2.36 (`python/python_direct/ops.cpp`, with the
definitions of `define_tensor`/`define_scalar` in `ir.cpp` and their checks in
`python/python_common/python_utils.cpp`). `params` names the binding's `py::arg`s in order; `None` means
the binding declares none (the unary/binary/ternary macros), so arguments are passed by position.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Op:
    """`kind` selects the plan builder's argument rule (plan.py); `nv` is the `fd.ops` name it calls."""

    nv: str
    kind: str
    params: tuple[str, ...] | None = None


def _same(kind: str, names: str) -> dict[str, Op]:
    return {n: Op(n, kind) for n in names.split()}


# bindUnaryOps: NVFUSER_DIRECT_BINDING_UNARY_OP(name, ...) -> ops.<name>(x), on a TensorView or a scalar.
# (No `round`: torch rounds half to even; not claimed.)
UNARY = _same("unary", "neg abs exp log tanh sigmoid sqrt rsqrt sin cos erf floor ceil trunc sign reciprocal "
              "expm1 log1p log2 isnan isinf")  # fmt: skip

# bindBinaryOps: NVFUSER_DIRECT_BINDING_BINARY_OP(name, ...) -> ops.<name>(lhs, rhs), TensorView or scalar each.
BINARY = _same("binary", "add sub mul pow maximum minimum eq ne lt le gt ge atan2 fmod remainder")

TABLE: dict[str, Op] = {
    **UNARY,
    **BINARY,
    # prims.div is true division (rounding modes are declined at claim time): ops.truediv(lhs, rhs).
    "div": Op("truediv", "binary"),
    # ops.logical_and / ops.logical_or (lhs, rhs) on operands cast to Bool. There is no ops.logical_xor:
    # logical_xor is ops.ne of the operands cast to Bool.
    "logical_and": Op("logical_and", "logical"),
    "logical_or": Op("logical_or", "logical"),
    "logical_xor": Op("ne", "logical"),
    # ops.logical_not(x) on x cast to Bool.
    "logical_not": Op("logical_not", "logical"),
    # ops.bitwise_and/or/xor/not on integers; on bools the logical op (bitwise ops are not bool ops there).
    "bitwise_and": Op("bitwise_and", "bitwise"),
    "bitwise_or": Op("bitwise_or", "bitwise"),
    "bitwise_xor": Op("bitwise_xor", "bitwise"),
    "bitwise_not": Op("bitwise_not", "bitwise"),
    # NVFUSER_DIRECT_BINDING_TERNARY_OP("where", ...) -> ops.where(cond, a, b).
    "where": Op("where", "ternary"),
    # prims.nn_fma(a, b, c) = a * b + c: ops.mul then ops.add.
    "nn_fma": Op("add", "fma"),
    # bindCastOps: ops.cast(arg, dtype).
    "convert_element_type": Op("cast", "cast", ("arg", "dtype")),
    # bindReductionOps: NVFUSER_DIRECT_BINDING_REDUCTION_OP -> ops.<name>(arg, dims, keepdim=False,
    # dtype=DataType.Null). sum/prod promote integers and bools to Int unless given `dtype`: pass the output
    # dtype. max/min take no dtype. Empty `dims` raise "No reduction axis specified": no op is emitted.
    "sum": Op("sum", "reduce_dtype", ("arg", "dims", "keepdim", "dtype")),
    "prod": Op("prod", "reduce_dtype", ("arg", "dims", "keepdim", "dtype")),
    "amax": Op("max", "reduce", ("arg", "dims", "keepdim")),
    "amax_ninf": Op("max", "reduce", ("arg", "dims", "keepdim")),  # max over nothing is -inf there too
    "amin": Op("min", "reduce", ("arg", "dims", "keepdim")),
    # bindMetadataOps: ops.broadcast_in_dim(arg, shape, broadcast_dims) is broadcast + expand; an entry of
    # -1 keeps the input's extent (csrc/ops/alias.cpp expand).
    "broadcast_in_dim": Op("broadcast_in_dim", "broadcast_in_dim", ("arg", "shape", "broadcast_dims")),
    # ops.reshape(arg, new_shape): ints and scalar Vals.
    "reshape": Op("reshape", "reshape", ("arg", "new_shape")),
    # ops.squeeze(arg, dims) rejects dims that are not broadcast; a reshape to the output shape never does.
    "squeeze": Op("reshape", "squeeze", ("arg", "new_shape")),
    # ops.permute(arg, dims).
    "permute": Op("permute", "permute", ("arg", "dims")),
    # ops.slice(arg, start_indices, end_indices, strides=None): strides must be 1 and constant starts >= 0,
    # constant ends >= starts (checked at claim time).
    "slice": Op("slice", "slice", ("arg", "start_indices", "end_indices")),
    "narrow": Op("slice", "narrow", ("arg", "start_indices", "end_indices")),
    # bindTensorUtilityOps: ops.cat(tensors, dim, manual_padding=False).
    "cat": Op("cat", "cat", ("tensors", "dim")),
    # bindTensorFactoryOps: ops.iota(length, start, step, dtype) and ops.full(shape, fill_value, dtype).
    # iota is emitted as eager computes arange: an Int iota, times step plus start in Int or Double, cast.
    "iota": Op("iota", "iota", ("length", "start", "step", "dtype")),
    "full": Op("full", "full", ("shape", "fill_value", "dtype")),
}

# Ops the plan builder emits besides TABLE's: ops.size(arg, dim) (bindTensorUtilityOps) for the sizes of the
# region's input tensors, ops.set(x) (unary) where an output would be an input, and scalar add/mul/minimum/
# maximum (binary, on Vals) for size expressions.
SIZE_OP = Op("size", "size", ("arg", "dim"))

# torch dtype -> nvfuser_direct.DataType member (python_direct/enum.cpp). int8, int16 and uint8 have none;
# complex dtypes are not claimed.
DTYPES: dict[torch.dtype, str] = {
    torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
    torch.int64: "Int", torch.int32: "Int32", torch.bool: "Bool",
}  # fmt: skip

LOWERABLE = frozenset(TABLE)
