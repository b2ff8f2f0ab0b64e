"""Symbolic Python floats: immutable expression trees over float inputs (and int expressions).

Floats are not canonicalized like ints: arithmetic builds a tree that the computation evaluates at run
time, and every decision on a float is recorded as a predicate guard (no solver minimization beyond
exact duplicates). z3 sees them as reals when checking subsumption between entries.

IEEE semantics: a predicate is negated as `not (...)`, never by flipping its operator (NaN fails both
`s > 0` and `s <= 0`); a pinned value is matched by `same`, which tells -0.0 from 0.0 and matches NaN;
inf and nan print as `float('inf')` and `float('nan')`.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Callable

from specengine.constraints import expr as E
from specengine.constraints.z3expr import to_z3

_ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv, "**": operator.pow}
_RELS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}
_BOOLS = frozenset(_RELS) | {"not", "same"}


def literal(c: float | int) -> str:
    """Python source for a number constant: `float('inf')`, `float('-inf')` and `float('nan')` are not names."""
    if isinstance(c, float) and not math.isfinite(c):
        return f"float({str(c)!r})"
    return repr(c)


def same_value(v: Any, c: float) -> bool:
    """`v` is the float `c`: NaN matches NaN, and the sign of a zero counts."""
    if c != c:
        return v != v
    return v == c and (c != 0 or math.copysign(1.0, v) == math.copysign(1.0, c))


@dataclass(frozen=True)
class FloatExpr:
    """`op` is "sym" (args: name), "const" (args: number), "int" (args: an int Expr), "neg" or "sqrt" (args: a
    FloatExpr), an arithmetic operator or a relation (args: two FloatExprs), "not" (args: a boolean FloatExpr), or "same" (args: a
    FloatExpr and the `float.hex()` of a constant: the value is exactly that float). Relations, "not" and
    "same" are boolean."""

    op: str
    args: tuple

    @property
    def is_bool(self) -> bool:
        return self.op in _BOOLS

    @property
    def is_const(self) -> bool:
        return self.op == "const"

    def free_symbols(self) -> frozenset[str]:
        if self.op == "sym":
            return frozenset(self.args)
        if self.op == "int":
            return self.args[0].free_symbols()
        if self.op == "same":
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
        if self.op == "not":
            return not self.args[0].eval(env)
        if self.op == "sqrt":
            return math.sqrt(self.args[0].eval(env))
        if self.op == "same":
            return same_value(self.args[0].eval(env), float.fromhex(self.args[1]))
        fn = _ARITH.get(self.op) or _RELS[self.op]
        return fn(self.args[0].eval(env), self.args[1].eval(env))

    def to_python(self, name: Callable[[str], str] = str) -> str:
        if self.op == "sym":
            return name(self.args[0])
        if self.op == "const":
            return literal(self.args[0])
        if self.op == "int":
            return f"({self.args[0].to_python(name)})"
        if self.op == "neg":
            return f"(-{self.args[0].to_python(name)})"
        if self.op == "not":
            return f"not ({self.args[0].to_python(name)})"
        if self.op == "sqrt":
            return f"math.sqrt({self.args[0].to_python(name)})"
        if self.op == "same":
            return _same_python(self.args[0].to_python(name), float.fromhex(self.args[1]))
        a, b = (x.to_python(name) for x in self.args)
        return f"{a} {self.op} {b}" if self.is_bool else f"({a} {self.op} {b})"

    def negate(self) -> FloatExpr:
        """`not (self)`: flipping the operator would be wrong for NaN."""
        return self.args[0] if self.op == "not" else FloatExpr("not", (self,))

    def subs(self, mapping: dict) -> FloatExpr:
        if self.op == "int":
            return FloatExpr("int", (self.args[0].subs(mapping),))
        if self.op in ("sym", "const"):
            return self
        if self.op == "same":
            return FloatExpr("same", (self.args[0].subs(mapping), self.args[1]))
        return FloatExpr(self.op, tuple(a.subs(mapping) for a in self.args))

    def to_z3(self, env: dict) -> Any:
        import z3  # lazy: z3 loads with the first query, not with specengine

        if self.op == "sym":
            return env.setdefault(self.args[0], z3.Real(self.args[0]))
        if self.op == "const":
            if not math.isfinite(self.args[0]):
                raise z3.Z3Exception("infinities and NaN are not reals")
            return z3.RealVal(self.args[0])
        if self.op == "int":
            return z3.ToReal(to_z3(self.args[0], env))
        if self.op == "neg":
            return -self.args[0].to_z3(env)
        if self.op == "not":
            return z3.Not(self.args[0].to_z3(env))
        if self.op == "sqrt":
            raise z3.Z3Exception("square roots are not translated")
        if self.op == "same":
            c = float.fromhex(self.args[1])
            if c == 0 or not math.isfinite(c):
                raise z3.Z3Exception("signed zeros, infinities and NaN are not reals")
            return self.args[0].to_z3(env) == z3.RealVal(c)
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
    if type(x) not in (int, float, bool):  # a subclass: the value its base type holds (it prints as a literal)
        x = float.__float__(x) if issubclass(type(x), float) else int.__int__(x)
    return FloatExpr("const", (x,))


def binary(op: str, a: Any, b: Any) -> FloatExpr:
    a, b = as_float_expr(a), as_float_expr(b)
    if a.is_const and b.is_const:
        return FloatExpr("const", ((_ARITH.get(op) or _RELS[op])(a.args[0], b.args[0]),))
    return FloatExpr(op, (a, b))


def same(x: Any, c: float) -> FloatExpr:
    """The predicate "`x` is exactly the float `c`" (the guard of a pinned float)."""
    return FloatExpr("same", (as_float_expr(x), float(c).hex()))


def _same_python(a: str, c: float) -> str:
    if c != c:
        return f"{a} != {a}"  # NaN
    if c == 0:
        return f"{a} == 0.0 and math.copysign(1.0, {a}) {'>' if math.copysign(1.0, c) > 0 else '<'} 0"
    return f"{a} == {literal(c)}"


def int_comparison(op: str, c: float) -> bool | tuple[str, int]:
    """`n op c` for an int `n` and a float constant `c`, as a comparison with an int (or a constant truth value).

    NaN compares unequal to everything; infinities are beyond every int; `n > 2.5` is `n >= 3`.
    """
    if c != c:
        return op == "!="
    if math.isinf(c):
        below = c > 0  # n is below +inf, above -inf
        return {"==": False, "!=": True, "<": below, "<=": below, ">": not below, ">=": not below}[op]
    if c.is_integer():
        return op, int(c)
    lo = math.floor(c)  # lo < c < lo + 1
    return {"==": False, "!=": True, "<": ("<=", lo), "<=": ("<=", lo), ">": (">", lo), ">=": (">", lo)}[op]


def sqrt(x: Any) -> FloatExpr:
    """`math.sqrt(x)` (the caller has decided that `x` is not negative)."""
    return FloatExpr("sqrt", (as_float_expr(x),))
