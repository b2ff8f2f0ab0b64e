"""The fusion plan: the exact `nvfuser_direct.FusionDefinition` calls for one region, as plain data.

A plan is built from the region (its specialized trace: after the solver, every dim that broadcasts is the
constant 1) and the contiguity the prologue checks, and from nothing else: no tensor of any call.

- An input dim is broadcast (1) exactly where it is the constant 1, static where it is another constant,
  and symbolic (-1) otherwise. Contiguity is True per non-broadcast dim for tensors known to be contiguous,
  False otherwise (nvFuser then reads every stride), None on broadcast dims; stride_order stays empty.
- Sizes are taken inside the fusion: a symbol that is a dim of an input tensor becomes `ops.size(t, i)`,
  and polynomials, min and max over them become scalar ops. Any other size expression, and every int,
  bool or float value from outside, is a scalar input (Int, Bool or Double by its type) that the region's
  callable evaluates from its arguments on each call.

`replay` (lowering.py) issues `calls` in order; the values of `inputs` go to `execute` in that order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from specengine.constraints import expr as E
from specengine.constraints.floats import FloatExpr
from specengine.executors.nvfuser.regions import Region
from specengine.executors.nvfuser.table import DTYPES, SIZE_OP, TABLE
from specengine.ir.proxies import NumberProxy, TensorProxy


@dataclass(frozen=True)
class Ref:
    """The value returned by call number `index` of the plan."""

    index: int

    def __repr__(self) -> str:
        return f"v{self.index}"


@dataclass(frozen=True)
class DType:
    """`nvfuser_direct.DataType.<name>`."""

    name: str

    def __repr__(self) -> str:
        return f"DataType.{self.name}"


@dataclass(frozen=True)
class Call:
    """`fd.<fn>(*args, **kwargs)`; `fn` is "define_tensor", "define_scalar", "add_output" or "ops.<name>"."""

    fn: str
    args: tuple = ()
    kwargs: tuple[tuple[str, Any], ...] = ()

    def __str__(self) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs]
        return f"fd.{self.fn}({', '.join(parts)})"


@dataclass(frozen=True)
class Input:
    """One argument of `execute`: the region's argument `position` (a tensor), or `expr` evaluated over the
    region's arguments by name (a scalar)."""

    position: int | None = None
    expr: Any = None


@dataclass(frozen=True)
class FusionPlan:
    calls: tuple[Call, ...]
    inputs: tuple[Input, ...]

    def __str__(self) -> str:
        return "\n".join(f"v{i} = {c}" if c.fn != "add_output" else str(c) for i, c in enumerate(self.calls))

    def ops(self) -> list[str]:
        """The names of the `fd.ops` calls, in order."""
        return [c.fn[4:] for c in self.calls if c.fn.startswith("ops.")]

    def defined_tensors(self) -> list[dict[str, Any]]:
        return [dict(c.kwargs) for c in self.calls if c.fn == "define_tensor"]


def dtype(dt: torch.dtype) -> DType:
    return DType(DTYPES[dt])


def input_shape(t: TensorProxy) -> list[int]:
    """1 where the dim is the constant 1 (broadcast), the constant where static, -1 where symbolic."""
    return [d.value if d.is_const else -1 for d in t.dims]


def input_contiguity(t: TensorProxy, contiguous: bool) -> list[bool | None]:
    return [None if s == 1 else contiguous for s in input_shape(t)]


def build_plan(region: Region, contiguous: dict[str, bool]) -> FusionPlan:
    """The plan of `region`; `contiguous` maps each input tensor's name to its contiguity (a name missing
    from it is taken as not contiguous)."""
    b = Builder(region)
    for pos, x in enumerate(region.inputs):
        if isinstance(x, TensorProxy):
            b.define_tensor(pos, x, contiguous.get(x.name, False))
    for bsym in region.bsyms:
        emit = EMITTERS[TABLE[bsym.sym.name].kind]
        out = emit(b, bsym, TABLE[bsym.sym.name])
        b.values[bsym.output.name] = out
    added: set[Ref] = set()
    for o in region.outputs:
        ref = b.values[o.name]
        if ref in b.tensor_inputs or ref in added:  # an input or a repeated output (empty reductions): a copy
            ref = b.call("ops.set", ref)
        added.add(ref)
        b.calls.append(Call("add_output", (ref,)))
    return FusionPlan(tuple(b.calls), tuple(b.inputs))


class Builder:
    """Accumulates calls; `value` turns a prim argument into a plan value (Ref, literal or list)."""

    def __init__(self, region: Region):
        self.region = region
        self.calls: list[Call] = []
        self.inputs: list[Input] = []
        self.values: dict[str, Ref] = {}  # tensor name -> its value
        self.tensor_inputs: set[Ref] = set()
        self.sizes: dict[str, tuple[Ref, int]] = {}  # symbol -> (input tensor, dim) that has it as size
        self.scalars: dict[Any, Any] = {}  # expression -> its value (memo)

    def call(self, fn: str, *args: Any, **kwargs: Any) -> Ref:
        self.calls.append(Call(fn, args, tuple(kwargs.items())))
        return Ref(len(self.calls) - 1)

    def op(self, name: str, params: tuple[str, ...] | None, *args: Any) -> Ref:
        if params is None:
            return self.call(f"ops.{name}", *args)
        return self.call(f"ops.{name}", **dict(zip(params, args)))

    def cast(self, x: Any, dt: DType) -> Ref:
        op = TABLE["convert_element_type"]
        return self.op(op.nv, op.params, x, dt)

    def define_tensor(self, position: int, t: TensorProxy, contiguous: bool) -> None:
        ref = self.call("define_tensor", shape=input_shape(t), contiguity=input_contiguity(t, contiguous),
                        dtype=dtype(t.dtype), stride_order=[])  # fmt: skip
        self.inputs.append(Input(position=position))
        self.values[t.name] = ref
        self.tensor_inputs.add(ref)
        for i, d in enumerate(t.dims):
            if d.op == "sym":
                self.sizes.setdefault(d.args[0], (ref, i))

    def value(self, x: Any) -> Any:
        if isinstance(x, TensorProxy):
            return self.values[x.name]
        if isinstance(x, (list, tuple)):
            return [self.value(v) for v in x]
        return self.scalar(x)

    def scalar(self, x: Any) -> Any:
        """A literal for constants; a size from the fusion or a scalar input for symbolic values."""
        if isinstance(x, NumberProxy):
            x = x.expr
        if isinstance(x, FloatExpr) and x.is_const:
            return x.args[0]
        if isinstance(x, E.Expr) and x.is_const:
            return x.value
        if not isinstance(x, (E.Expr, FloatExpr)):
            return x  # a Python number
        out = self.scalars.get(x)
        if out is None:
            out = self.scalars[x] = self._symbolic(x)
        return out

    def size_of(self, ref: Ref, dim: int) -> Ref:
        """`ops.size(ref, dim)`, once per tensor and dim: the extent itself, so nvFuser sees it is that size."""
        key = ("size", ref, dim)
        out = self.scalars.get(key)
        if out is None:
            out = self.scalars[key] = self.op(SIZE_OP.nv, SIZE_OP.params, ref, dim)
        return out

    def _symbolic(self, e: Any) -> Any:
        if isinstance(e, E.Expr) and e.op == "sym" and e.args[0] in self.sizes:
            return self.size_of(*self.sizes[e.args[0]])
        if isinstance(e, E.Expr) and e.op in ("poly", "min", "max") and e.free_symbols() <= set(self.sizes):
            return self._arith(e)
        kind = "Bool" if e.is_bool else "Double" if isinstance(e, FloatExpr) else "Int"
        self.inputs.append(Input(expr=e))
        return self.call("define_scalar", dtype=DType(kind))

    def _arith(self, e: E.Expr) -> Any:
        if e.op in ("min", "max"):
            a, b = (self.scalar(x) for x in e.args)
            return self.call("ops.minimum" if e.op == "min" else "ops.maximum", a, b)
        const, terms = e.args
        total: Any = None
        for mono, k in terms:
            term: Any = None
            for factor in mono:
                f = self.scalar(factor)
                term = f if term is None else self.call("ops.mul", term, f)
            if k != 1:
                term = self.call("ops.mul", term, k)
            total = term if total is None else self.call("ops.add", total, term)
        return total if const == 0 else self.call("ops.add", total, const)


# Emitters: one per `kind` of TABLE, each returning the value of the prim's output.


def _unary(b: Builder, bsym: Any, op: Any) -> Ref:
    return b.op(op.nv, op.params, *(b.value(a) for a in bsym.args))


def _logical(b: Builder, bsym: Any, op: Any) -> Ref:
    args = [b.cast(b.value(a), DType("Bool")) if isinstance(a, TensorProxy) and a.dtype is not torch.bool
            else b.value(a) for a in bsym.args]  # fmt: skip
    return b.op(op.nv, op.params, *args)


_ON_BOOLS = {
    "bitwise_and": "logical_and",
    "bitwise_or": "logical_or",
    "bitwise_xor": "ne",
    "bitwise_not": "logical_not",
}


def _bitwise(b: Builder, bsym: Any, op: Any) -> Ref:
    name = _ON_BOOLS[bsym.sym.name] if bsym.output.dtype is torch.bool else op.nv
    return b.op(name, None, *(b.value(a) for a in bsym.args))


def _fma(b: Builder, bsym: Any, op: Any) -> Ref:
    x, y, z = (b.value(a) for a in bsym.args)
    return b.op("add", None, b.op("mul", None, x, y), z)


def _cast(b: Builder, bsym: Any, op: Any) -> Ref:
    return b.op(op.nv, op.params, b.value(bsym.args[0]), dtype(bsym.output.dtype))


def _reduce(b: Builder, bsym: Any, op: Any) -> Ref:
    x = bsym.args[0]
    dims = list(bsym.args[1]) if x.ndim else []  # a 0-d tensor reduces over dim 0 as over nothing
    if not dims:  # nothing to reduce: the input (cast to the output dtype)
        if x.dtype is bsym.output.dtype:
            return b.values[x.name]
        return b.cast(b.values[x.name], dtype(bsym.output.dtype))
    extra = (dtype(bsym.output.dtype),) if op.kind == "reduce_dtype" else ()
    return b.op(op.nv, op.params, b.values[x.name], dims, False, *extra)


def _broadcast_in_dim(b: Builder, bsym: Any, op: Any) -> Ref:
    x, shape, bdims = bsym.args
    kept = {out: x.dims[i] for i, out in enumerate(bdims)}
    # -1 keeps a non-broadcast input extent; new dims and broadcast (constant 1) input dims get the size
    sizes = [-1 if j in kept and not (kept[j].is_const and kept[j].value == 1) else b.scalar(s)
             for j, s in enumerate(shape)]  # fmt: skip
    return b.op(op.nv, op.params, b.values[x.name], sizes, list(bdims))


def _reshape(b: Builder, bsym: Any, op: Any) -> Ref:
    shape = bsym.args[1] if bsym.sym.name == "reshape" else bsym.output.dims
    return b.op(op.nv, op.params, b.values[bsym.args[0].name], [b.scalar(s) for s in shape])


def _permute(b: Builder, bsym: Any, op: Any) -> Ref:
    return b.op(op.nv, op.params, b.values[bsym.args[0].name], list(bsym.args[1]))


def _slice(b: Builder, bsym: Any, op: Any) -> Ref:
    x, starts, ends = bsym.args[:3]
    return _emit_slice(b, op, x, starts, ends)


def _narrow(b: Builder, bsym: Any, op: Any) -> Ref:
    x, dim, start, length = bsym.args
    starts = [start if i == dim else 0 for i in range(x.ndim)]
    ends = [E.add(E.as_expr(start), E.as_expr(length)) if i == dim else d for i, d in enumerate(x.dims)]
    return _emit_slice(b, op, x, starts, ends)


def _emit_slice(b: Builder, op: Any, x: TensorProxy, starts: Any, ends: Any) -> Ref:
    """A dim taken whole ends at `ops.size` of the input (its own extent): nvFuser leaves it unsliced, which a
    broadcast dim needs."""
    ref = b.values[x.name]
    whole = [
        E.as_expr(s) is E.const(0) and E.as_expr(e) in (d, E.maximum(0, d)) for s, e, d in zip(starts, ends, x.dims)
    ]
    stops = [b.size_of(ref, i) if w else b.scalar(e) for i, (w, e) in enumerate(zip(whole, ends))]
    return b.op(op.nv, op.params, ref, [b.scalar(s) for s in starts], stops)


def _cat(b: Builder, bsym: Any, op: Any) -> Ref:
    tensors, dim = bsym.args
    return b.op(op.nv, op.params, [b.values[t.name] for t in tensors], dim)


def _iota(b: Builder, bsym: Any, op: Any) -> Ref:
    length, start, step = (b.scalar(x) for x in bsym.args[:3])
    out = bsym.output.dtype
    i = b.op(op.nv, op.params, length, 0, 1, DType("Int"))
    if out.is_floating_point:  # eager's arange: in double, then cast
        i = b.cast(i, DType("Double"))
    if not (isinstance(step, int) and step == 1):
        i = b.op("mul", None, i, step)
    if not (isinstance(start, int) and start == 0):
        i = b.op("add", None, i, start)
    return i if out is torch.int64 else b.cast(i, dtype(out))


def _full(b: Builder, bsym: Any, op: Any) -> Ref:
    shape, value = bsym.args[:2]
    return b.op(op.nv, op.params, [b.scalar(s) for s in shape], b.scalar(value), dtype(bsym.output.dtype))


EMITTERS = {
    "unary": _unary, "binary": _unary, "ternary": _unary, "logical": _logical, "bitwise": _bitwise, "fma": _fma,
    "cast": _cast, "reduce": _reduce, "reduce_dtype": _reduce, "broadcast_in_dim": _broadcast_in_dim,
    "reshape": _reshape, "squeeze": _reshape, "permute": _permute, "slice": _slice, "narrow": _narrow,
    "cat": _cat, "iota": _iota, "full": _full,
}  # fmt: skip
