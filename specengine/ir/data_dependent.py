"""Unbacked sizes read from the outputs of the ops that make them, and `specengine.check` on traced values.

The symbols themselves, and the decisions on them, are `ir/unbacked.py`'s.
"""

from __future__ import annotations

from typing import Any

from specengine.constraints import expr as E
from specengine.constraints.floats import FloatExpr
from specengine.errors import UnsupportedOpError
from specengine.ir import context, unbacked
from specengine.ir.base import _prims
from specengine.ir.proxies import NumberProxy, TensorProxy
from specengine.ir.symbol import BoundSymbol, tree_leaves


def binders(state: Any, out: Any, source: Any) -> list:
    """The bound symbols that read the pending unbacked sizes from an op's real output `out`."""
    made = []
    for name in state.pending_binds:
        u = E.sym(name)
        found = next(((t, d) for t in tree_leaves(out) if isinstance(t, TensorProxy)
                      for d, e in enumerate(t.dims) if e is u), None)  # fmt: skip
        if found is None:
            op = source.op if source is not None else "an op"
            raise UnsupportedOpError(op, source.where if source else "<unknown>", f"its data-dependent size "
                                     f"{unbacked.describe(name)} is not a size of its outputs")  # fmt: skip
        info = state.decider.unbacked.symbols[name]
        info.bound = True
        proxy = NumberProxy(name, u, state.decider.hints[name], int)
        made.append(BoundSymbol(_prims().unbacked_size, (*found, info.description), (), proxy, (), source))
    state.pending_binds.clear()
    return made


def user_check(cond: Any, message: Any = None) -> None:
    """`specengine.check(cond)`: see its docstring in specengine/__init__.py."""
    state = context.current()
    text = None if message is None else str(message() if callable(message) else message)
    if isinstance(cond, TensorProxy):
        raise TypeError("specengine.check takes a bool about sizes or ints (e.g. n > 0); for tensor data use "
                        "torch._check_tensor_all(t), which is asserted at run time")  # fmt: skip
    if state is None or not isinstance(cond, NumberProxy):
        if not cond:
            raise RuntimeError(text or "specengine.check failed")
        return
    b = cond.expr if cond.expr.is_bool else E.ne(cond.expr, 0)
    if isinstance(b, FloatExpr):
        raise unbacked.unsupported_float_check(b)
    if not state.check(b, "specengine.check", text):
        raise RuntimeError(text or f"specengine.check(`{b}`) failed")
