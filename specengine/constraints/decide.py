"""Decisions on symbolic values during tracing.

A comparison is decided statically when it is implied (constant folding, value ranges, then z3 over the
constraints recorded so far, memoized). Only when undecided is it decided by the hint, and then the
decision is recorded as a constraint with its provenance.
"""

from __future__ import annotations

import time

import z3

from specengine.constraints import expr as E
from specengine.constraints.constraint import Constraint
from specengine.constraints.intervals import decide_by_bounds
from specengine.constraints.z3expr import to_z3
from specengine.provenance import Provenance

Ranges = dict[str, tuple[int | None, int | None]]


class Decider:
    """Decides boolean symbolic expressions and records the decisions that were not implied.

    Invariant: the hints satisfy every recorded constraint, so an implied fact can only be implied
    to hold with its hint value; one z3 query settles it.
    """

    def __init__(self, hints: dict[str, int], ranges: Ranges, timeout_ms: int = 2000):
        self.hints = hints
        self.ranges = ranges
        self.constraints: list[Constraint] = []
        self.z3_calls = 0
        self.z3_seconds = 0.0
        self.z3_max_seconds = 0.0
        self._timeout_ms = timeout_ms
        self._memo: dict[E.Expr, bool] = {}
        self._solver: z3.Solver | None = None
        self._z3_env: dict[str, z3.ArithRef] = {}

    def decide(self, b: E.Expr, provenance: Provenance) -> bool:
        """The truth value of `b` for this trace; records a constraint unless it is implied."""
        value = bool(b.eval(self.hints))
        if self.implied(b, value):
            return value
        self.record(b if value else E.not_(b), provenance)
        return value

    def pin(self, e: E.Expr, provenance: Provenance) -> int:
        """The concrete value of `e`; records `e == value` unless `e` is already known to be constant."""
        value = e.eval(self.hints)
        self.decide(E.eq(e, value), provenance)
        return value

    def record(self, b: E.Expr, provenance: Provenance) -> None:
        self.constraints.append(Constraint(b, provenance))
        self._memo[E.normalize(b)] = True
        if self._solver is not None:
            self._solver.add(to_z3(b, self._z3_env))

    def implied(self, b: E.Expr, value: bool) -> bool:
        """Whether the ranges and recorded constraints imply that `b` has truth value `value`."""
        if b.op == "bconst":
            return True
        n = E.normalize(b)
        if n.op == "bconst":
            return True
        known = self._memo.get(n)
        if known is None:
            known = decide_by_bounds(n, self.ranges)
        if known is None:
            known = self._z3_decide(n, value)
        if known is not None:
            self._memo[n] = known
        return known is not None

    def _z3_decide(self, n: E.Expr, value: bool) -> bool | None:
        solver = self._ensure_solver()
        self.z3_calls += 1
        solver.push()
        start = time.perf_counter()
        try:
            z = to_z3(n, self._z3_env)
            solver.add(z3.Not(z) if value else z)
            result = solver.check()
        except z3.Z3Exception:
            result = z3.unknown  # undecided: the decision is recorded, which is sound
        finally:
            solver.pop()
            elapsed = time.perf_counter() - start
            self.z3_seconds += elapsed
            self.z3_max_seconds = max(self.z3_max_seconds, elapsed)
        return value if result == z3.unsat else None

    def _ensure_solver(self) -> z3.Solver:
        if self._solver is None:
            self._solver = z3.Solver()
            self._solver.set("timeout", self._timeout_ms)
            for fact in range_facts(self.ranges, self._z3_env):
                self._solver.add(fact)
            for c in self.constraints:
                self._solver.add(to_z3(c.expr, self._z3_env))
        return self._solver


def range_facts(ranges: Ranges, env: dict[str, z3.ArithRef]) -> list:
    """z3 facts for symbol ranges (inclusive bounds, None = unbounded)."""
    facts = []
    for name, (lo, hi) in ranges.items():
        v = to_z3(E.sym(name), env)
        if lo is not None:
            facts.append(v >= lo)
        if hi is not None:
            facts.append(v <= hi)
    return facts
