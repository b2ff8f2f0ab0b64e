"""Translation of symbolic expressions to z3 (Python floor semantics for // and %)."""

from __future__ import annotations

import functools
import operator
from typing import Any

import z3

from specengine.constraints.expr import _RELOPS, BoolLike, Expr, IntLike, as_expr

_Z3_FNS = {"if": z3.If, "not": z3.Not, "and": z3.And, "or": z3.Or}
_Z3_FNS.update({"min": lambda a, b: z3.If(a <= b, a, b), "max": lambda a, b: z3.If(a >= b, a, b)})


def _z3_div(op: str, a: Any, b: Any, divisor: Expr) -> Any:
    c = divisor.args[0] if divisor.op == "const" else None
    if op == "mod":
        return a % z3.IntVal(c) if c is not None and c > 0 else a - b * _z3_div("floordiv", a, b, divisor)
    if c is not None:
        return a / z3.IntVal(c) if c > 0 else (-a) / z3.IntVal(-c)
    return z3.If(b > 0, a / b, (-a) / (-b))  # z3's Int "/" is Euclidean: floor only for b > 0


def _z3(e: Expr, env: dict, memo: dict) -> Any:
    if e in memo:
        return memo[e]
    op, args = e.op, e.args
    if op in ("const", "bconst"):
        r = z3.IntVal(args[0]) if op == "const" else z3.BoolVal(args[0])
    elif op == "sym":
        if args[0] not in env:
            env[args[0]] = z3.Int(args[0])
        r = env[args[0]]
    elif op == "poly":
        r = z3.IntVal(args[0])
        for mono, k in args[1]:
            r = r + functools.reduce(operator.mul, (_z3(a, env, memo) for a in mono), z3.IntVal(k))
    elif op == "rel":
        r = _RELOPS[args[0]](_z3(args[1], env, memo), _z3(args[2], env, memo))
    elif op in ("floordiv", "mod"):
        r = _z3_div(op, _z3(args[0], env, memo), _z3(args[1], env, memo), args[1])
    else:
        r = _Z3_FNS[op](*(_z3(a, env, memo) for a in args))
    memo[e] = r
    return r


def to_z3(e: BoolLike | IntLike, env: dict[str, Any] | None = None) -> Any:
    """Translate ``e`` to a z3 expression; symbols missing from ``env`` get a fresh ``z3.Int`` added to it."""
    return _z3(as_expr(e), {} if env is None else env, {})
