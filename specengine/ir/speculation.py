"""Branches on tensor data, taken by speculation and asserted (`if mask.any().item():`, Longformer's global attention).

A branch of the program on an unbacked value (`bool(u)`) that no fact decides takes a side: the one the compile was
asked to take (`Decider.speculation`, keyed by the condition and its line), else False. The computation asserts the
side it took where the branch was (`prims.check_speculation`); if the data says otherwise it raises `Misspeculation`
before anything observable has happened, and dispatch tries the next entry, or compiles one that takes the other
side (api.CompiledFunction). So each side of a data-dependent branch is one entry, and no entry ever computes a
result for data it did not branch on.

Speculating needs the work before the branch to be repeatable: only pure ops so far (no in-place op on an input or
a module buffer, no random draw, no effect op such as `print`). Otherwise the branch is refused as before.
"""

from __future__ import annotations

from typing import Any

from specengine.constraints import expr as E
from specengine.constraints.floats import FloatExpr
from specengine.errors import Misspeculation
from specengine.ir.base import HOOKS, _prims
from specengine.ir.symbol import BoundSymbol
from specengine.provenance import user_frame

__all__ = ["first_unrepeatable", "speculate", "check_speculation_impl"]


def first_unrepeatable(state: Any) -> BoundSymbol | None:
    """The first op so far that running the computation up to here again would make observable (an impure op: an
    in-place write, a random draw, an effect), or None."""
    return next((b for i, b in enumerate(state.bsyms) if not _repeatable(state, b, i)), None)


def _repeatable(state: Any, b: BoundSymbol, pos: int) -> bool:
    """Pure, or an impure op (at top-level position `pos`) the ops layer finds repeatable (`HOOKS.writes_fresh`: it
    only checks, only writes tensors made in this trace, or did nothing here: `F.dropout(x, training=False)`)."""
    return b.sym.pure or (HOOKS.writes_fresh is not None and HOOKS.writes_fresh(state, b, pos))


def speculate(state: Any, b: E.Expr, op: str, default: bool = False, before_op: bool = False) -> bool:
    """Take a side of the branch `bool(b)` (`default` unless a misspeculation asked for the other) and assert it in
    the computation (`before_op`: before the op being recorded, not after it); returns the side taken."""
    source = user_frame(op, "a branch on tensor data, taken by speculation")
    decider = state.decider
    key = f"{b} at {source.where}"
    value = decider.speculation.get(key, default)
    taken = tuple(decider.speculated)
    decider.speculated.append((key, value))
    if isinstance(b, FloatExpr):  # (floats are not reasoned about: nothing later is proved from it)
        fact = b if value else b.negate()
    else:
        fact = b if value else E.not_(b)
        decider.unbacked.assume(fact, source)
    check = BoundSymbol(_prims().check_speculation, (fact, key, value, taken), (), None, (), source)
    if before_op:
        state.scopes[0].append(check)
    else:
        state.emit(check)
    return value


def check_speculation_impl(cond: bool, key: str, value: bool, taken: tuple) -> None:
    """At run time: the data took the speculated side, or `Misspeculation` names the sides to take instead."""
    if not cond:
        raise Misspeculation(dict(taken) | {key: not value})
