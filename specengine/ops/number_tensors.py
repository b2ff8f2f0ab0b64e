"""Number tensors: tensors whose values the trace knows, by the ops that made them.

- A literal (`torch.tensor(x.shape)`, `torch.tensor(n)`) holds its data (ops/ltorch_literals notes it).
- A 0-d int64 tensor computed from Python ints only (`torch.div(seq_len, w, rounding_mode="trunc") - 1`,
  Longformer) holds a known int, so a size made of it stays symbolic and `int(t)` pins only that int.

A value is known only while no impure op ran since the tensor was made (an in-place op may have changed it,
through a view too). The tensor itself is computed as before: knowing its value never removes an op.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

from specengine.ir import context, proxies, unbacked
from specengine.ir.proxies import NumberProxy, TensorProxy
from specengine.ir.symbol import BoundSymbol
from specengine.ops import prims
from specengine.provenance import user_frame

__all__ = ["is_int", "known_values", "known_number", "note_number", "note_constant", "read_value", "read_symbol",
           "as_number"]  # fmt: skip

_INT_RANGES = {torch.uint8: (0, 255), torch.int8: (-128, 127), torch.int16: (-(2**15), 2**15 - 1),
               torch.int32: (-(2**31), 2**31 - 1), torch.bool: (0, 1)}  # fmt: skip


def _item_impl(t: torch.Tensor, what: str) -> Any:
    return t.item()


@prims.prim("item", impl=_item_impl, tags=("unbacked",))
def item_prim(t: TensorProxy, what: str) -> NumberProxy:
    """`t.item()`, the value of an unbacked symbol (emitted by `read_value`, which names the output)."""
    raise AssertionError("prims.item is emitted by the tracer, never called while tracing")


def read_symbol(prim: Any, args: tuple, what: str, python_type: type = int, lo: int | None = None,
                hi: int | None = None, op: str = "", before: bool = True, as_type: type | None = None) -> Any:  # fmt: skip
    """A fresh unbacked symbol whose value the computation reads at run time: `u0 = prim(*args, description)`.

    The read is bound at the top level, before the op being recorded (`before`: the op consumes the value) or
    right after it (`TraceState.emit`). Returns its NumberProxy, typed `as_type` (bool) or `python_type`.
    """
    e = unbacked.new_symbol(what, python_type, lo, hi, op=op)
    (name,) = e.free_symbols()
    state = context.require()
    info = state.decider.unbacked.symbols[name]
    proxy = NumberProxy(name, e, state.decider.hints[name], as_type or info.python_type)
    bsym = BoundSymbol(prim, (*args, info.description), (), proxy, (), user_frame(op))
    info.bound = before or len(state.scopes) == 1  # (else read after the op being recorded)
    if before:
        state.scopes[0].append(bsym)
    else:
        state.emit(bsym)
    return proxy


def read_value(t: TensorProxy, what: str, op: str) -> NumberProxy:
    """The value of a one-element tensor, read at run time: an unbacked int (integer tensors), bool (a 0/1 int) or
    float, bound by `prims.item` at the top level (before the op being recorded, when one is)."""
    lo, hi = _INT_RANGES.get(t.dtype, (None, None))
    kind = float if t.dtype.is_floating_point else int
    return read_symbol(item_prim, (t,), what, kind, lo, hi, op, as_type=bool if t.dtype == torch.bool else None)


def as_number(x: Any, op: str) -> Any:
    """A 0-d integer tensor where torch reads a number (a size, arange's bounds, as_strided's strides) is that
    number, as eager's `int(t)`: its known int (a number tensor), else its data read at run time (`read_value`, an
    unbacked int). Anything else is returned as it is."""
    if not isinstance(x, TensorProxy) or x.ndim != 0 or x.dtype.is_floating_point or x.dtype.is_complex:
        return x
    known = known_number(x) if x.dtype is torch.int64 else None
    if known is not None:
        return known
    noted = known_values(x)
    if noted is not None:
        return noted  # read before (Longformer's max_num_global_attn_indices, twice): the same symbol
    state = context.require()
    value = read_value(x, f"int() of {x.name}", op)
    state.literals[id(x)] = (x, len(state.bsyms), value)
    return value


def is_int(v: Any) -> bool:
    return type(v) is int or (type(v) is NumberProxy and v.python_type is int)


def known_values(t: TensorProxy) -> Any:
    """The ints a literal holds (a list, or a number for a 0-d one), where no impure op ran since it was made (an
    in-place op may have changed it, through a view too); None otherwise."""
    state = context.require()
    noted = state.literals.get(id(t))
    if noted is None or noted[0] is not t or not all(b.sym.pure for b in state.bsyms[noted[1] :]):
        return None
    return noted[2]


def _trunc_div(a: Any, b: Any) -> Any:
    q = a // b
    return q + 1 if q < 0 and q * b != a else q  # (decisions on symbolic values: recorded guards)


_NUMBER_OPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "neg": operator.neg,
               "floor_divide": operator.floordiv, "remainder": operator.mod}  # fmt: skip
_DIVISIONS = {"floor": operator.floordiv, "trunc": _trunc_div}


def known_number(x: Any) -> Any:
    """The int a 0-d int64 tensor is known to hold (see `note_number`), a Python or symbolic int; else None."""
    if not isinstance(x, TensorProxy) or x.ndim != 0 or x.dtype is not torch.int64:
        return None
    known = known_values(x)
    return known if is_int(known) else None


def _operand_number(x: Any) -> Any:
    return x if is_int(x) else known_number(x)


def note_number(out: Any, prim: str, args: tuple, kwargs: dict) -> None:
    """Record the value of `prim(*args)` where it is a 0-d int64 tensor of known ints (an integer op whose operands
    are Python ints, symbolic ints or number tensors); the tensor itself is computed as before."""
    if not isinstance(out, TensorProxy) or out.ndim != 0 or out.dtype is not torch.int64:
        return
    fn = _DIVISIONS.get(kwargs.get("rounding_mode")) if prim == "div" else _NUMBER_OPS.get(prim)
    values = [_operand_number(a) for a in args]
    if fn is None or any(v is None for v in values) or set(kwargs) - {"rounding_mode"}:
        return
    if prim in ("div", "floor_divide", "remainder") and values[1] == 0:  # (a decision: eager raises at run time)
        return
    state = context.require()
    state.literals[id(out)] = (out, len(state.bsyms), fn(*values))


def note_constant(out: Any, value: int) -> None:
    """Record that `out` holds the int `value`: a factory of Python numbers only, run once while tracing
    (`torch.div(8, 4, rounding_mode="trunc")` with static sizes), whose op computes the same value on every call."""
    if isinstance(out, TensorProxy):
        state = context.require()
        state.literals[id(out)] = (out, len(state.bsyms), value)


def _number_protocol(name: str, to_python: Any, symbolic: bool) -> None:
    """`int(t)` and `float(t)` of a number tensor: its value (pinned, as any int made concrete). `operator.index(t)`
    only where the value is a Python int: torch's argument parser calls `__index__` to probe every int-list
    argument, so a pin there would happen on every call that passes the tensor inside a size."""
    data_dependent = getattr(TensorProxy, name)

    def method(self: TensorProxy) -> Any:
        known = known_number(self)
        if known is None or (not symbolic and type(known) is not int):
            return data_dependent(self)
        return to_python(known)

    setattr(TensorProxy, name, method)


for _name, _to_python, _symbolic in (("__index__", operator.index, False), ("__int__", int, True),
                                     ("__float__", float, True)):  # fmt: skip
    _number_protocol(_name, _to_python, _symbolic)


proxies.HOOKS.tensor_number = as_number
