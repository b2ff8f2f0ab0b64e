"""Printing canonical expressions (`constraints/expr.py`) as Python source.

Each node prints as (text, precedence); a child is parenthesised when its precedence is below what its position
needs. Shared subtrees print once per call (memoised on node identity).
"""

from __future__ import annotations

from typing import Any, Callable

Expr = Any  # a `constraints.expr.Expr` (not imported: expr.py imports this module to print itself)


_P_NOT, _P_CMP, _P_ADD, _P_MUL, _P_NEG, _P_ATOM = 1, 2, 3, 4, 5, 6


def _wrap(e: Expr, need: int, name: Callable[[str], str], memo: dict) -> str:
    text, prec = _py(e, name, memo)
    return text if prec >= need else f"({text})"


def _py_poly(e: Expr, name: Callable[[str], str], memo: dict) -> tuple[str, int]:
    c, terms = e.args
    lead = c > 0 and terms[0][1] < 0  # print "1 - s0" rather than "-s0 + 1"
    pieces = [str(c)] if lead else []
    for mono, k in terms:
        factors = [str(abs(k))] if abs(k) != 1 else []
        for a in mono:  # a leading "-" binds tighter than "*", so the first factor then needs _P_NEG
            first = _P_NEG if k < 0 and not pieces else _P_MUL
            factors.append(_wrap(a, _P_MUL + 1 if factors else first, name, memo))
        sign = ("-" if k < 0 else "") if not pieces else (" - " if k < 0 else " + ")
        pieces.append(sign + "*".join(factors))
    if c and not lead:
        pieces.append(f" - {-c}" if c < 0 else f" + {c}")
    if len(pieces) > 1:
        return "".join(pieces), _P_ADD
    mono, k = terms[0]
    return pieces[0], _P_NEG if k == -1 and len(mono) == 1 else _P_MUL


def _py(e: Expr, name: Callable[[str], str], memo: dict) -> tuple[str, int]:
    if e in memo:
        return memo[e]
    op, args = e.op, e.args
    if op in ("const", "bconst"):
        r = str(args[0]), _P_NEG if args[0] < 0 else _P_ATOM
    elif op == "sym":
        r = name(args[0]), _P_ATOM
    elif op == "poly":
        r = _py_poly(e, name, memo)
    elif op in ("floordiv", "mod"):
        sep = "//" if op == "floordiv" else "%"
        r = f"{_wrap(args[0], _P_MUL, name, memo)}{sep}{_wrap(args[1], _P_MUL + 1, name, memo)}", _P_MUL
    elif op in ("min", "max"):
        r = f"{op}({_py(args[0], name, memo)[0]}, {_py(args[1], name, memo)[0]})", _P_ATOM
    elif op == "if":
        c, a, b = (_py(x, name, memo)[0] for x in args)
        r = f"({a} if {c} else {b})", _P_ATOM
    elif op == "rel":
        r = f"{_wrap(args[1], _P_ADD, name, memo)} {args[0]} {_wrap(args[2], _P_ADD, name, memo)}", _P_CMP
    elif op == "not":
        r = f"not {_wrap(args[0], _P_NOT, name, memo)}", _P_NOT
    else:
        r = "(" + f" {op} ".join(_wrap(a, _P_NOT, name, memo) for a in args) + ")", _P_ATOM
    memo[e] = r
    return r


def to_python(e: Expr, name: Callable[[str], str] = str) -> str:
    """Python source for `e`; `name` maps a symbol name to the text printed for it."""
    return _py(e, name, {})[0]
