"""Unbacked symbols while tracing: making them, binding them in the computation, deciding on them.

An op whose output size depends on data (`nonzero`, `x[mask]`) calls `new_size(...)` for a fresh symbol `u0` with
its range and origin, builds its output with that dim, and calls `bind(u0)`: right after the op, the computation
reads `u0 = prims.unbacked_size(t, 0, "rows of nonzero at model.py:41")` from the real result. `.item()` binds its
symbol itself (`u0 = prims.item(t, ...)`).

A decision on an unbacked symbol (`TraceState.decide`) is, in this order:

1. *proved* from the ranges, the recorded constraints and the unbacked facts and assumptions so far: nothing is
   emitted;
2. else taken *size-obliviously*: each size-like unbacked symbol counts as at least 2 (torch's guard_size_oblivious);
   where that decides it, the decision is taken by speculation (ir/speculation.py: checked before the op being
   recorded; data on the other side is another entry), else assumed and asserted at run time (`prims.check_sym`);
3. else, for a check an op makes (its validity: divisibility, a non-negative size), the condition as the op states
   it is assumed and asserted (a `u == 1` or `u == 0` question, whose either answer is a computation, speculated
   as in 2); a branch of the program itself (`if n > 5:`) is taken by speculation where it can be, else refused
   with UnsupportedOpError naming `specengine.check`.

A failed assertion raises `DataDependentCheckError` (a RuntimeError) naming the line of the decision and the
symbol's origin. Nothing here is a guard: the prologue never sees an unbacked symbol.
"""

from __future__ import annotations

from typing import Any

from specengine.constraints import expr as E
from specengine.constraints.floats import FloatExpr
from specengine.constraints.folding import simplify
from specengine.constraints.intervals import bounds
from specengine.constraints.unbacked import UnbackedSymbol, hint_value
from specengine.errors import DataDependentCheckError, UnsupportedOpError
from specengine.ir import context
from specengine.ir.base import _prims
from specengine.ir.speculation import first_unrepeatable, speculate
from specengine.ir.symbol import BoundSymbol
from specengine.provenance import user_frame

# Decisions that Python protocols take for the program (`if`, `hash`, `str`, ...): its own branches, never assumed
_BRANCH_OPS = frozenset({"bool", "concrete", "float", "format", "hash", "index", "int", "repr", "str"})


def new_symbol(what: str, python_type: type = int, lo: int | None = None, hi: int | None = None,
               hi_expr: E.Expr | None = None, op: str = "", size_like: bool = False) -> Any:  # fmt: skip
    """A fresh unbacked symbol (an int Expr, or a FloatExpr for `python_type=float`).

    Args:
        what: what it is, for messages and traces ("rows of nonzero"); the user's line is added.
        lo, hi: constant inclusive bounds (None: unbounded). It becomes size-like (size-oblivious reasoning
            applies) once `u >= 0` is assumed (`torch._check_is_size(u)`, a size argument); `new_size` makes sizes.
        hi_expr: an upper bound over backed symbols, true for every call (e.g. the input's numel).
    """
    state = context.require()
    name = state.names.fresh("u")
    info = UnbackedSymbol(name, python_type, what, user_frame(op), lo, hi, hi_expr, size_like)
    state.decider.unbacked.add(info)
    state.decider.hints[name] = hint_value(info, state.decider.hints)
    return FloatExpr("sym", (name,)) if python_type is float else E.sym(name)


def new_size(what: str, hi_expr: E.Expr | None = None, op: str = "") -> E.Expr:
    """A fresh size-like unbacked symbol `0 <= u <= hi_expr`, bound from the op's output (see `bind`)."""
    u = new_symbol(what, int, 0, None, hi_expr, op, size_like=True)
    bind(u)
    return u


def bind(u: E.Expr) -> None:
    """Bind `u` from the output of the op being recorded: the first output dim that is exactly `u`."""
    context.require().pending_binds.append(u.args[0])


def describe(name: str) -> str:
    """`u0 (rows of nonzero at model.py:41)`, or the name for a backed symbol."""
    info = context.require().decider.unbacked.symbols.get(name)
    return f"{name} ({info.description})" if info is not None else name


def simplify_dims(state: Any, dims: tuple) -> tuple:
    """Sizes that mention unbacked symbols, with min/max folded by the ranges (`max(0, u0)` is `u0`)."""
    unbacked = state.decider.unbacked
    if not any(type(d) is E.Expr and unbacked.mentions(d) for d in dims):
        return dims
    ranges = {**state.decider.ranges, **unbacked.ranges()}
    return tuple(simplify(d, ranges) if type(d) is E.Expr and unbacked.mentions(d) else d for d in dims)


def decide(state: Any, b: E.Expr, op: str, reason: str) -> bool:
    """A decision on an unbacked symbol: proved, taken size-obliviously, or assumed; the last two are asserted."""
    decider = state.decider
    value = decider.prove(b)
    if value is not None:
        return value
    oblivious = frozenset(s.name for s in decider.unbacked.of(b) if s.size_like)
    if oblivious:
        value = decider.prove(b, oblivious)
    speculable = value is not None or _zero_or_one(b)  # (a check of validity stays asserted: its failure is eager's)
    if value is None:
        if op in _BRANCH_OPS:
            return branch(state, b, op)
        value = True  # an op's own check, stated as the condition under which it is valid
    if speculable and _can_speculate(state, b):  # the other side is an entry, as for a branch on data
        return speculate(state, b, op, default=value, before_op=True)
    assume(state, b if value else E.not_(b), op, reason)
    return value


def _zero_or_one(b: E.Expr) -> bool:
    """`e == 0`, `e != 1`, ...: a kernel's question whose either answer is a computation (an empty tensor, a
    broadcast), not its validity."""
    if b.op != "rel" or b.args[0] not in ("==", "!="):
        return False
    return any(a.op == "const" and a.value in (0, 1) for a in b.args[1:])


def _can_speculate(state: Any, b: E.Expr) -> bool:
    """Whether a size-oblivious decision can be speculated: its check can run before the op being recorded (every
    unbacked symbol in it is read by then) and running the computation up to there again is not observable."""
    return all(s.bound for s in state.decider.unbacked.of(b)) and first_unrepeatable(state) is None


def branch(state: Any, b: Any, op: str) -> bool:
    """A branch of the program on data that no fact decides: `if mask.any().item():` takes a side by speculation,
    asserted at run time (each side is an entry); where that cannot be (an op before it is not repeatable, or the
    value is needed as a number: `int(u)`), it is refused."""
    blocker = first_unrepeatable(state) if op == "bool" else None
    if op == "bool" and blocker is None:
        return speculate(state, b, op)
    raise branch_error(b, op, blocker)


def branch_error(b: Any, op: str, blocker: Any = None) -> UnsupportedOpError:
    names = ", ".join(describe(s) for s in sorted(b.free_symbols()) if s in context.require().decider.unbacked.symbols)
    why = (
        ""
        if blocker is None
        else (
            f" (it cannot be taken by speculation: `{blocker.sym.name}`"
            f"{' at ' + blocker.source.where if blocker.source else ''} ran before it, and running it again is observable)"
        )
    )
    return UnsupportedOpError(f"a branch on data-dependent {names}", user_frame(op).where,
                              f"`{b}` depends on tensor data{why}; compute both sides with torch.where, or state what "
                              f"your program relies on with specengine.check(...) before it (asserted at run time)")  # fmt: skip


def proved_value(state: Any, e: E.Expr) -> int | None:
    """The one value an expression over unbacked symbols can take, where the ranges and facts prove it (e.g.
    `min(4, u0)` once `u0 >= 4` is known), else None."""
    decider = state.decider
    lo, hi = bounds(e, {**decider.ranges, **decider.unbacked.ranges()})
    if lo is not None and lo == hi:
        return lo
    for candidate in (lo, hi):
        if candidate is not None and decider.prove(E.eq(e, candidate)) is True:
            return candidate
    return None


def pin_error(e: Any, op: str, reason: str) -> UnsupportedOpError:
    names = ", ".join(describe(s) for s in sorted(e.free_symbols()) if s in context.require().decider.unbacked.symbols)
    return UnsupportedOpError(f"a concrete value of data-dependent {names}", user_frame(op).where,
                              f"{reason}, but `{e}` is known only at run time; keep it symbolic (a size, an op's "
                              "argument) or compute it outside the compiled function")  # fmt: skip


def assume(state: Any, fact: E.Expr, op: str, reason: str, message: str | None = None) -> None:
    """Assume `fact` from now on and assert it in the computation (raising DataDependentCheckError)."""
    source = user_frame(op, reason)
    state.decider.unbacked.assume(fact, source)
    unbacked = state.decider.unbacked.symbols
    names = tuple(sorted(fact.free_symbols(), key=lambda s: (s not in unbacked, s)))  # backed ones too: their values
    origin = "; ".join(_origin(state, s) for s in names)
    if message is None:
        text = f"the trace assumed `{fact}` ({op}: {reason}) at {source.where}, but the data contradicts it [{origin}]"
    else:
        text = f"{message} at {source.where} [{origin}]"
    args = (fact, text, names, tuple(E.sym(s) for s in names))
    state.emit(BoundSymbol(_prims().check_sym, args, (), None, (), source))


def _origin(state: Any, name: str) -> str:
    source = state.symbol_sources.get(name)
    return describe(name) if source is None or source == name else f"{name} ({source})"


def check(state: Any, b: E.Expr, op: str, message: str | None = None) -> None:
    """`specengine.check(b)` / `torch._check(b)` on an unbacked symbol: proved, or assumed and asserted."""
    value = state.decider.prove(b)
    if value is True:
        return
    text = message or f"{op}(`{b}`) failed"
    if value is False:  # fails on every call
        raise DataDependentCheckError(f"{text} at {user_frame(op).where}: it never holds")
    assume(state, b, op, "a checked fact", text)


def check_sym_impl(cond: bool, message: str, names: tuple, values: tuple) -> None:
    """The run-time assertion of a decision on unbacked symbols."""
    if not cond:
        seen = ", ".join(f"{n} = {v}" for n, v in zip(names, values))
        raise DataDependentCheckError(f"{message}: {seen}" if seen else message)


def unsupported_float_check(b: Any) -> UnsupportedOpError:
    return UnsupportedOpError("specengine.check on a float", user_frame("specengine.check").where,
                              "state facts about ints and sizes (floats are not reasoned about)")  # fmt: skip
