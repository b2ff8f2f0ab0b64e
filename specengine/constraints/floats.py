"""Symbolic Python floats: immutable expression trees over float inputs (and int expressions).

Floats are not canonicalized like ints: arithmetic builds a tree that the computation evaluates at run
time, and every decision on a float is recorded as a predicate guard (no solver minimization beyond
exact duplicates). z3 sees them as reals when checking subsumption between entries.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable

import z3

from specengine.constraints import expr as E

_ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "**": operator.pow}
_RELS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_NEGATE = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}


@dataclass(frozen=True)
class FloatExpr:
    """`op` is "sym" (args: name), "const" (args: number), "int" (args: an int Expr), "neg", an arithmetic
    operator or a relation (args: two FloatExprs); relations are boolean."""

    op: str
    args: tuple

    @property
    def is_bool(self) -> bool:
        return self.op in _RELS

    @property
    def is_const(self) -> bool:
        return self.op == "const"

    def free_symbols(self) -> frozenset[str]:
        if self.op == "sym":
            return frozenset(self.args)
        if self.op == "int":
            return self.args[0].free_symbols()
        return frozenset().union(*(a.free_symbols() for a in self.args if isinstance(a, FloatExpr)))

    def eval(self, env: dict[str, Any]) -> Any:
        if self.op == "sym":
            return env[self.args[0]]
        if self.op in ("const",):
            return self.args[0]
        if self.op == "int":
            return self.args[0].eval(env)
        if self.op == "neg":
            return -self.args[0].eval(env)
        fn = _ARITH.get(self.op) or _RELS[self.op]
        return fn(self.args[0].eval(env), self.args[1].eval(env))

    def to_python(self, name: Callable[[str], str] = str) -> str:
        if self.op == "sym":
            return name(self.args[0])
        if self.op == "const":
            return repr(self.args[0])
        if self.op == "int":
            return f"({self.args[0].to_python(name)})"
        if self.op == "neg":
            return f"(-{self.args[0].to_python(name)})"
        a, b = (x.to_python(name) for x in self.args)
        return f"{a} {self.op} {b}" if self.is_bool else f"({a} {self.op} {b})"

    def negate(self) -> FloatExpr:
        return FloatExpr(_NEGATE[self.op], self.args)

    def subs(self, mapping: dict) -> FloatExpr:
        if self.op == "int":
            return FloatExpr("int", (self.args[0].subs(mapping),))
        if self.op in ("sym", "const"):
            return self
        return FloatExpr(self.op, tuple(a.subs(mapping) for a in self.args))

    def to_z3(self, env: dict) -> Any:
        if self.op == "sym":
            return env.setdefault(self.args[0], z3.Real(self.args[0]))
        if self.op == "const":
            return z3.RealVal(self.args[0])
        if self.op == "int":
            from specengine.constraints.z3expr import to_z3

            return z3.ToReal(to_z3(self.args[0], env))
        if self.op == "neg":
            return -self.args[0].to_z3(env)
        a, b = (x.to_z3(env) for x in self.args)
        if self.op == "**":
            raise z3.Z3Exception("powers of floats are not translated")
        return (_RELS.get(self.op) or _ARITH[self.op])(a, b)

    def __str__(self) -> str:
        return self.to_python()


def as_float_expr(x: Any) -> FloatExpr:
    """A FloatExpr for a float, an int, an int Expr or a FloatExpr."""
    if isinstance(x, FloatExpr):
        return x
    if isinstance(x, E.Expr):
        return FloatExpr("const", (x.value,)) if x.is_const else FloatExpr("int", (x,))
    return FloatExpr("const", (x,))


def binary(op: str, a: Any, b: Any) -> FloatExpr:
    a, b = as_float_expr(a), as_float_expr(b)
    if a.is_const and b.is_const:
        return FloatExpr("const", ((_ARITH.get(op) or _RELS[op])(a.args[0], b.args[0]),))
    return FloatExpr(op, (a, b))
