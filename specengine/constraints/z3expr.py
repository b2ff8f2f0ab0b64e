"""Translation of symbolic expressions to z3 (Python floor semantics for // and %)."""

from __future__ import annotations

import functools
import logging
import operator
import time
from typing import Any

from specengine.config import config
from specengine.constraints.expr import _RELOPS, BoolLike, Expr, IntLike, as_expr

log = logging.getLogger("specengine.solver")  # the "solver" log topic: one line per z3 query


def z3_module() -> Any:
    """The z3 module, imported on the first query (loading it takes ~0.1 s; a compile may need no query)."""
    import z3  # lazy: z3 loads with the first solver query, not with specengine

    return z3


def new_solver(timeout_ms: int) -> Any:
    """A z3 solver whose every query stops at `config.solver_rlimit` units of z3's own work (deterministic: the
    same query gets the same answer however loaded the machine is) or at `timeout_ms` of wall-clock time (a
    backstop), whichever comes first; either way the query answers `unknown`."""
    solver = z3_module().Solver()
    solver.set("timeout", timeout_ms)
    if config.solver_rlimit:
        solver.set("rlimit", config.solver_rlimit)
    return solver


def check(solver: Any, *assumptions: Any, what: str = "") -> tuple[Any, float, int]:
    """`solver.check(*assumptions)`, its wall-clock seconds and its z3 work (resource units: what `rlimit` bounds).

    The "solver" log topic gets one line per query: the answer, its milliseconds, its work and what it decided.
    """
    before = _rlimit_count(solver)
    start = time.perf_counter()
    result = solver.check(*assumptions)
    elapsed = time.perf_counter() - start
    work = _rlimit_count(solver) - before
    if log.isEnabledFor(logging.INFO):
        reason = f" ({solver.reason_unknown()})" if str(result) == "unknown" else ""
        log.info("z3 %s%s in %.1f ms, rlimit %d: %s", result, reason, elapsed * 1e3, work, what)
    return result, elapsed, work


def _rlimit_count(solver: Any) -> int:
    """The z3 work the solver has done so far, in resource units (cumulative over its checks)."""
    return int(solver.statistics().get_key_value("rlimit count"))


class _Translator:
    """One translation: z3 terms memoized per node, symbols from (and added to) `env`."""

    def __init__(self, env: dict) -> None:
        z3 = self.z3 = z3_module()
        self.env, self.memo = env, {}
        self.fns = {"if": z3.If, "not": z3.Not, "and": z3.And, "or": z3.Or,
                    "min": lambda a, b: z3.If(a <= b, a, b), "max": lambda a, b: z3.If(a >= b, a, b)}  # fmt: skip

    def div(self, op: str, a: Any, b: Any, divisor: Expr) -> Any:
        z3 = self.z3
        c = divisor.args[0] if divisor.op == "const" else None
        if op == "mod":
            return a % z3.IntVal(c) if c is not None and c > 0 else a - b * self.div("floordiv", a, b, divisor)
        if c is not None:
            return a / z3.IntVal(c) if c > 0 else (-a) / z3.IntVal(-c)
        return z3.If(b > 0, a / b, (-a) / (-b))  # z3's Int "/" is Euclidean: floor only for b > 0

    def __call__(self, e: Expr) -> Any:
        r = self.memo.get(e)
        if r is not None:
            return r
        z3, op, args = self.z3, e.op, e.args
        if op in ("const", "bconst"):
            r = z3.IntVal(args[0]) if op == "const" else z3.BoolVal(args[0])
        elif op == "sym":
            if args[0] not in self.env:
                self.env[args[0]] = z3.Int(args[0])
            r = self.env[args[0]]
        elif op == "poly":
            r = z3.IntVal(args[0])
            for mono, k in args[1]:
                r = r + functools.reduce(operator.mul, (self(a) for a in mono), z3.IntVal(k))
        elif op == "rel":
            r = _RELOPS[args[0]](self(args[1]), self(args[2]))
        elif op in ("floordiv", "mod"):
            r = self.div(op, self(args[0]), self(args[1]), args[1])
        else:
            r = self.fns[op](*(self(a) for a in args))
        self.memo[e] = r
        return r


def to_z3(e: BoolLike | IntLike, env: dict[str, Any] | None = None) -> Any:
    """Translate ``e`` to a z3 expression; symbols missing from ``env`` get a fresh ``z3.Int`` added to it."""
    return _Translator({} if env is None else env)(as_expr(e))
