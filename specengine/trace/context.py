"""The tracing state: the bound symbols being recorded, the decider, and fresh names."""

from __future__ import annotations

import contextvars
import itertools
from contextlib import contextmanager
from typing import Any, Iterator

from specengine.constraints import expr as E
from specengine.constraints.decide import Decider
from specengine.constraints.floats import FloatExpr
from specengine.provenance import user_frame


class NameGen:
    """Fresh, unique printing names; names of inputs are reserved up front."""

    def __init__(self, reserved: set[str] = frozenset()):
        self._reserved = set(reserved)
        self._counters: dict[str, itertools.count] = {}

    def reserve(self, name: str) -> str:
        if name in self._reserved:
            raise ValueError(f"name {name!r} is already taken")
        self._reserved.add(name)
        return name

    def fresh(self, prefix: str) -> str:
        counter = self._counters.setdefault(prefix, itertools.count())
        while (name := f"{prefix}{next(counter)}") in self._reserved:
            pass
        self._reserved.add(name)
        return name


class TraceState:
    """Everything one trace records: bound symbols (with nested scopes for decompositions) and decisions."""

    def __init__(self, decider: Decider, names: NameGen):
        self.decider = decider
        self.names = names
        self.scopes: list[list] = [[]]
        self.raises: list[bool] = [False]  # per scope: whether an op recorded there may raise at run time
        self.uses_default_dtype = False
        self.output_plan = None  # objects.OutputPlan where the output is not plain or an input was changed

    @property
    def bsyms(self) -> list:
        return self.scopes[0]

    def record(self, sym: Any, args: tuple, kwargs: dict) -> Any:
        """Run `sym`'s meta (a prim's shape rule, or a torch-level op's decomposition) and record it."""
        from specengine.trace.symbol import BoundSymbol

        source = user_frame(sym.name) if len(self.scopes) == 1 else None
        self.scopes.append([])
        self.raises.append(False)
        try:
            out = sym.meta(*args, **kwargs)
        finally:
            subsymbols = tuple(self.scopes.pop())
            raises = self.raises.pop()
        self.raises[-1] = self.raises[-1] or raises  # an op whose decomposition may raise may raise
        self.scopes[-1].append(BoundSymbol(sym, args, tuple(kwargs.items()), out, subsymbols, source, raises))
        return out

    def may_raise(self) -> None:
        """The op being recorded checked something on the example sizes only (see BoundSymbol.may_raise)."""
        self.raises[-1] = True

    def decide(self, b: E.Expr, op: str, reason: str) -> bool:
        """Decide a comparison on symbols, recording a constraint unless it is implied."""
        if isinstance(b, FloatExpr):
            return self.decider.decide_float(b, user_frame(op, reason))
        if b.op == "bconst":
            return b.value
        return self.decider.decide(b, user_frame(op, reason))

    def pin(self, e: E.Expr, op: str, reason: str) -> int:
        """The concrete value of an int expression, recording `e == value` unless already constant."""
        if e.op == "const":
            return e.value
        return self.decider.pin(e, user_frame(op, reason))


_current: contextvars.ContextVar[TraceState | None] = contextvars.ContextVar("specengine_trace", default=None)


def current() -> TraceState | None:
    """The active tracing state, or None outside tracing."""
    return _current.get()


def require() -> TraceState:
    state = _current.get()
    if state is None:
        raise RuntimeError("specengine: no active trace")
    return state


@contextmanager
def tracing(state: TraceState) -> Iterator[TraceState]:
    token = _current.set(state)
    try:
        yield state
    finally:
        _current.reset(token)
