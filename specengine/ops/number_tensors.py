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

from specengine.ir import context
from specengine.ir.proxies import NumberProxy, TensorProxy

__all__ = ["is_int", "known_values", "known_number", "note_number", "note_constant"]


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
