"""Unbacked symbols: sizes and values known only inside the computation (`u0 = rows of nonzero(mask)`, `.item()`).

An unbacked symbol has no example value and no prologue source: the real op binds it on every call. What is known
about it is recorded here, per trace:

- its *range* (`0 <= u0`, `u0 <= x.numel()`; the upper bound may be an expression over backed symbols),
- *facts*: true by construction for every call (the op's contract), and
- *assumptions*: decisions taken while tracing that no fact proves, each asserted at run time by the computation
  (`prims.check_sym`), and facts the user stated with `specengine.check`.

Decisions on unbacked symbols never become constraints of the solver (so never prologue guards or cache keys):
`Decider.record` refuses them. See `Decider.prove` for how they are decided.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from specengine.constraints import expr as E
from specengine.constraints.constraint import Constraint
from specengine.provenance import Provenance

NAME = re.compile(r"u\d+")  # unbacked symbols are named u0, u1, ... (NameGen.fresh("u"): never an input's name)
SIZE_OBLIVIOUS_MIN = 2  # a size-like unbacked symbol counts as at least 2 where that decides (guard_size_oblivious)


@dataclass
class UnbackedSymbol:
    """One unbacked symbol: its name, Python type, what it is ("rows of nonzero") and where it was made."""

    name: str
    python_type: type
    what: str
    where: Provenance
    lo: int | None = None  # constant bounds (inclusive); None: unbounded
    hi: int | None = None
    hi_expr: E.Expr | None = None  # an upper bound over backed symbols (`x.numel()`), a fact
    size_like: bool = False  # a size (an op's output size, or a value assumed >= 0): size-oblivious reasoning applies
    bound: bool = False  # the computation reads it before the op being recorded (a check may go there)

    @property
    def description(self) -> str:
        return f"{self.what} at {self.where.where}"


@dataclass
class Unbacked:
    """The unbacked symbols of one trace, their facts and the assumptions asserted at run time."""

    symbols: dict[str, UnbackedSymbol] = field(default_factory=dict)
    facts: list[E.Expr] = field(default_factory=list)
    assumptions: list[Constraint] = field(default_factory=list)

    def add(self, info: UnbackedSymbol) -> E.Expr:
        self.symbols[info.name] = info
        if info.hi_expr is not None:
            self.facts.append(E.le(E.sym(info.name), info.hi_expr))
        return E.sym(info.name)

    def mentions(self, b: Any) -> bool:
        """Whether the expression `b` (an Expr or FloatExpr) refers to an unbacked symbol."""
        return bool(self.symbols) and not self.symbols.keys().isdisjoint(b.free_symbols())

    def of(self, b: Any) -> list[UnbackedSymbol]:
        return [self.symbols[s] for s in sorted(b.free_symbols()) if s in self.symbols]

    def ranges(self, oblivious: frozenset[str] = frozenset()) -> dict[str, tuple[int | None, int | None]]:
        """Constant ranges of the int symbols; those in `oblivious` raised to at least SIZE_OBLIVIOUS_MIN."""
        out = {}
        for name, s in self.symbols.items():
            if s.python_type is int:
                lo = max(s.lo, SIZE_OBLIVIOUS_MIN) if name in oblivious and s.lo is not None else s.lo
                out[name] = (lo, s.hi)
        return out

    def fact_exprs(self, oblivious: frozenset[str] = frozenset()) -> list[E.Expr]:
        """Every fact and assumption as a boolean Expr, the ranges included (for z3)."""
        out = list(self.facts) + [c.expr for c in self.assumptions]
        for name, (lo, hi) in self.ranges(oblivious).items():
            out += [E.ge(E.sym(name), lo)] if lo is not None else []
            out += [E.le(E.sym(name), hi)] if hi is not None else []
        return out

    def assume(self, fact: E.Expr, provenance: Provenance) -> None:
        """Record an assumption (asserted at run time); a constant bound on one symbol also narrows its range."""
        self.assumptions.append(Constraint(fact, provenance))
        bound = _simple_bound(E.normalize(fact))
        if bound is not None and bound[0] in self.symbols:
            name, lo, hi = bound
            s = self.symbols[name]
            if lo is not None:
                s.lo = lo if s.lo is None else max(s.lo, lo)
                s.size_like = s.size_like or (s.python_type is int and s.lo >= 0)  # `torch._check_is_size(n)`
            if hi is not None:
                s.hi = hi if s.hi is None else min(s.hi, hi)


def may_mention(e: Any) -> bool:
    """Whether `e` may refer to an unbacked symbol, by name alone (for code without the trace's registry, e.g. an
    executor's claim: a backed input that happens to be named `u3` only makes it more careful)."""
    return any(NAME.fullmatch(s) for s in e.free_symbols())


def hint_value(info: UnbackedSymbol, hints: Any = None) -> Any:
    """The stand-in value of an unbacked symbol while tracing: SIZE_OBLIVIOUS_MIN for a size (the value size-oblivious
    reasoning assumes), clamped into its range (its upper bound taken at the example sizes, given `hints`); 0 (0.0)
    for a value of `.item()`. No decision reads it: decisions are proved, taken size-obliviously, or assumed and
    asserted at run time (`Decider.prove`); it feeds only torch's dtype rules and checks that the real op makes again
    at run time."""
    if info.python_type is float:
        return 0.0
    v = SIZE_OBLIVIOUS_MIN if info.size_like else 0
    if info.hi is not None:
        v = min(v, info.hi)
    if info.hi_expr is not None and hints is not None:  # within its bound at the example sizes (`u0 <= numel`)
        v = min(v, info.hi_expr.eval(hints))
    if info.lo is not None:
        v = max(v, info.lo)
    return v


def _simple_bound(n: E.Expr) -> tuple[str, int | None, int | None] | None:
    """For a normalized `k*u + c >= 0` or `u + c == 0` (k = +-1): (u, lo, hi)."""
    if n.op != "rel" or n.args[0] not in (">=", "=="):
        return None
    p = n.args[1]
    c = p.args[0] if p.op == "poly" else 0
    terms = p.args[1] if p.op == "poly" else (((p,), 1),) if p.op == "sym" else ()
    if len(terms) != 1 or len(terms[0][0]) != 1 or terms[0][0][0].op != "sym" or terms[0][1] not in (1, -1):
        return None
    name, k = terms[0][0][0].args[0], terms[0][1]
    if n.args[0] == "==":
        return name, -c * k, -c * k
    return (name, -c, None) if k == 1 else (name, None, c)
