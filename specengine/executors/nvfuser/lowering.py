"""Lowering fusion regions to `nvfuser_direct.FusionDefinition` (imported lazily; needs CUDA).

One FusionDefinition per region per entry, built on the region's first call from the real inputs (whose
dtype, rank and contiguity the prologue fixes); nvFuser reuses its kernels across sizes itself. Every
size expression a prim needs becomes a scalar input, evaluated in Python from the prologue's symbols.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from specengine.constraints import expr as E
from specengine.executors.nvfuser.regions import Region
from specengine.trace.proxies import NumberProxy, TensorProxy
from specengine.trace.symbol import tree_leaves

_UNARY = {"neg", "abs", "exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt", "sin", "cos", "erf", "floor", "ceil",
          "trunc", "sign", "reciprocal", "expm1", "log1p", "log2", "isnan", "isinf", "logical_not", "bitwise_not"}  # fmt: skip
_BINARY = {"add", "sub", "mul", "pow", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge", "atan2",
           "fmod", "remainder", "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or",
           "bitwise_xor"}  # fmt: skip
_REDUCTIONS = {"sum": "sum", "amax": "max", "amin": "min", "prod": "prod"}
_SHAPES = {"div", "where", "convert_element_type", "broadcast_in_dim", "reshape", "permute", "squeeze", "slice", "full"}
LOWERABLE = frozenset(_UNARY | _BINARY | set(_REDUCTIONS) | _SHAPES)  # prims `_emit` translates


def _dtype(dt: torch.dtype) -> Any:
    from nvfuser_direct import DataType

    table = {torch.float32: DataType.Float, torch.float64: DataType.Double, torch.float16: DataType.Half,
             torch.bfloat16: DataType.BFloat16, torch.int64: DataType.Int, torch.int32: DataType.Int32,
             torch.bool: DataType.Bool}  # fmt: skip
    return table[dt]


def lower(region: Region) -> Callable[..., tuple]:
    """A callable running `region` with nvFuser; it takes the region's inputs (tensors and symbols)."""
    names = [x.name for x in region.inputs]
    exprs = _size_exprs(region)
    built: list = []

    def run(*args: Any) -> tuple:
        env = dict(zip(names, args))
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        scalars = [e.eval(env) for e in exprs]
        if not built:
            built.append(_define(region, tensors, exprs))
        return tuple(built[0].execute(tensors + scalars))

    run.region = region  # inspectable: the prims the fusion was defined from
    return run


def _size_exprs(region: Region) -> list[E.Expr]:
    seen: dict[E.Expr, None] = {}
    for b in region.bsyms:
        for x in tree_leaves((b.args, [v for _, v in b.kwargs])):
            if isinstance(x, E.Expr) and not x.is_const:
                seen.setdefault(x)
    return list(seen)


def _define(region: Region, tensors: list[torch.Tensor], exprs: list[E.Expr]) -> Any:
    from nvfuser_direct import DataType, FusionDefinition

    with FusionDefinition() as fd:
        values: dict[Any, Any] = {}
        tensor_inputs = [x for x in region.inputs if isinstance(x, TensorProxy)]
        for proxy, real in zip(tensor_inputs, tensors):
            values[proxy.name] = fd.from_pytorch(real)
        for e in exprs:
            values[e] = fd.define_scalar(dtype=DataType.Int)
        for b in region.bsyms:
            out = _emit(fd, b, lambda x: _value(fd, values, x))
            for proxy, v in zip([o for o in b.flat_outs() if isinstance(o, TensorProxy)], _as_tuple(out)):
                values[proxy.name] = v
        for o in region.outputs:
            fd.add_output(values[o.name])
    return fd


def _as_tuple(x: Any) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def _value(fd: Any, values: dict, x: Any) -> Any:
    if isinstance(x, TensorProxy):
        return values[x.name]
    if isinstance(x, E.Expr):
        return x.value if x.is_const else values[x]
    if isinstance(x, NumberProxy):
        return _value(fd, values, x.expr)
    if isinstance(x, (tuple, list)):
        return [_value(fd, values, v) for v in x]
    return x


def _emit(fd: Any, b: Any, v: Callable[[Any], Any]) -> Any:
    name, args = b.sym.name, b.args
    if name in _UNARY or name in _BINARY or name == "where":
        return getattr(fd.ops, name)(*(v(a) for a in args))
    if name == "div":
        return fd.ops.div(v(args[0]), v(args[1]))
    if name == "convert_element_type":
        return fd.ops.cast(v(args[0]), dtype=_dtype(args[1]))
    if name == "broadcast_in_dim":
        return fd.ops.broadcast_in_dim(v(args[0]), shape=v(args[1]), broadcast_dims=list(args[2]))
    if name == "reshape":
        return fd.ops.reshape(v(args[0]), v(args[1]))
    if name == "permute":
        return fd.ops.permute(v(args[0]), dims=list(args[1]))
    if name == "squeeze":
        return fd.ops.squeeze(v(args[0]), list(args[1]))
    if name == "slice":
        return fd.ops.slice(v(args[0]), v(args[1]), v(args[2]), list(args[3]))
    if name in _REDUCTIONS:
        return getattr(fd.ops, _REDUCTIONS[name])(v(args[0]), list(args[1]), False)
    if name == "full":
        return fd.ops.full(v(args[0]), v(args[1]), _dtype(b.kwargs_dict.get("dtype", args[2])))
    raise NotImplementedError(f"nvFuser lowering has no rule for prims.{name}")
