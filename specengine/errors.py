"""Errors and warnings the engine raises itself."""

from __future__ import annotations

from typing import Callable


class SpecEngineError(Exception):
    """Base of every error the engine raises itself."""


class UnsupportedOpError(SpecEngineError):
    """An op, or a use of an op, that the engine cannot trace symbolically.

    The message names the op, the user's source line and what to do instead.
    """

    def __init__(self, op: str, where: str, hint: str):
        self.op, self.where, self.hint = op, where, hint
        super().__init__(f"{op} is not supported by specengine (at {where}): {hint}")
        for observe in _refusal_observers:
            observe(self)  # the active trace: a handler in the traced function must not swallow it


_refusal_observers: list[Callable[[UnsupportedOpError], None]] = []


def observe_refusals(observer: Callable[[UnsupportedOpError], None]) -> None:
    """Call `observer` with each UnsupportedOpError as it is made (`ir/context.py` tells the active trace)."""
    _refusal_observers.append(observer)


class ConstraintViolationError(SpecEngineError):
    """The program contradicts a constraint the user asked for (e.g. it pins a dim marked dynamic)."""


class SolverWarning(UserWarning):
    """z3 gave up on a query; the engine fell back to a stronger (more specialized) guard set."""


class RecompileLimitError(SpecEngineError):
    """A compiled function reached its recompile limit and is configured to raise."""


class RecompileLimitWarning(UserWarning):
    """A compiled function reached its recompile limit; the call runs eagerly."""


class DataDependentCheckError(SpecEngineError, RuntimeError):
    """A run-time check on a data-dependent size or value failed (a `RuntimeError`, as eager's checks are).

    The computation asserts every decision that tracing took on an unbacked symbol (the rows of `nonzero`, a value
    of `.item()`) and that the facts did not prove, and every `specengine.check`. The message names the check, the
    user's source line, the symbol's origin and the values seen. The data contradicted the trace: no entry
    computes a wrong result for it, and no recompile would help (the data is not an input the prologue reads).
    """


class Misspeculation(DataDependentCheckError):
    """The data took the other side of a branch that an entry speculated on (ir/speculation.py).

    Dispatch catches it and tries another entry, or compiles one that takes `sides` (condition and line -> side);
    it reaches a user only from an entry run outside dispatch.
    """

    def __init__(self, sides: dict[str, bool]):
        super().__init__("the data took another side of a speculated branch: " + "; ".join(
            f"{k}: {v}" for k, v in sides.items()))  # fmt: skip
        self.sides = sides
