"""Folding what the solver decided into expressions: pinned expressions (`s0*s1 == 12` pins the product,
not the symbols), `if` nodes whose condition is a known fact, and readable guards (`simplify`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from specengine.constraints.expr import (
    _CONSTRUCTORS,
    FALSE,
    TRUE,
    Expr,
    Interval,
    _add_terms,
    _from_terms,
    _mul_terms,
    _rel,
    _terms,
    const,
    eq,
    ite,
    maximum,
    minimum,
    normalize,
    not_,
    or_,
)
from specengine.constraints.intervals import _bounds, decide_by_bounds


def _pinned_monomials(pins: Mapping[Expr, int]) -> list[tuple[tuple, int]]:
    """Pinned expressions that are a single monomial with coefficient 1, as (monomial, value)."""
    out = []
    for p, v in pins.items():
        if p.op == "poly" and p.args[0] == 0 and len(p.args[1]) == 1 and p.args[1][0][1] == 1:
            out.append((p.args[1][0][0], v))
        elif p.op != "poly":
            out.append(((p,), v))
    return out


def _fold_mono(mono: tuple, monos: list[tuple[tuple, int]]) -> tuple[tuple, int]:
    """Remove pinned sub-monomials from `mono` (a multiset of atoms); returns (rest, factor)."""
    factor = 1
    for pm, v in monos:
        while True:
            rest = list(mono)
            try:
                for atom in pm:
                    rest.remove(atom)
            except ValueError:
                break
            mono, factor = tuple(rest), factor * v
    return mono, factor


def fold_pinned(e: Expr, pins: Mapping[Expr, int]) -> Expr:
    """`e` with every occurrence of a pinned expression replaced by its value.

    Whole subexpressions are matched, and pinned monomials also inside larger monomials
    (`s0*s1*s2` with `s0*s1 == 12` becomes `12*s2`).
    """
    if not pins:
        return e
    monos = _pinned_monomials(pins)
    memo: dict = {}

    def visit(x: Expr) -> Expr:
        if x in memo:
            return memo[x]
        if x in pins:
            r = const(pins[x])
        elif x.op == "poly":
            acc: dict[tuple, int] = {(): x.args[0]}
            for mono, k in x.args[1]:
                rest, factor = _fold_mono(mono, monos)
                t: dict[tuple, int] = {(): k * factor}
                for a in rest:
                    t = _mul_terms(t, _terms(visit(a)))
                acc = _add_terms(acc, t)
            r = _from_terms(acc)
            r = const(pins[r]) if r in pins else r
        elif x.op == "rel":
            r = _rel(x.args[0], visit(x.args[1]), visit(x.args[2]))
        elif x.op in ("const", "bconst", "sym"):
            r = x
        else:
            r = _CONSTRUCTORS[x.op](*(visit(a) for a in x.args))
        memo[x] = r
        return r

    return visit(e)


def fold_conditions(e: Expr, facts: frozenset) -> Expr:
    """`e` with each `if` whose condition (normalized) is a known fact, or the negation of one, folded."""
    if not facts or not any(x.op == "if" for x in _walk(e)):
        return e
    memo: dict = {}

    def visit(x: Expr) -> Expr:
        if x in memo:
            return memo[x]
        if x.op == "if":
            cond = normalize(x.args[0])
            if cond in facts:
                r = visit(x.args[1])
            elif normalize(not_(cond)) in facts:
                r = visit(x.args[2])
            else:
                r = ite(x.args[0], visit(x.args[1]), visit(x.args[2]))
        elif x.op in ("const", "bconst", "sym"):
            r = x
        elif x.op == "poly":
            r = _from_terms(_fold_poly_atoms(x, visit))
        elif x.op == "rel":
            r = _rel(x.args[0], visit(x.args[1]), visit(x.args[2]))
        else:
            r = _CONSTRUCTORS[x.op](*(visit(a) for a in x.args))
        memo[x] = r
        return r

    return visit(e)


def _fold_poly_atoms(p: Expr, visit: Callable[[Expr], Expr]) -> dict[tuple, int]:
    acc: dict[tuple, int] = {(): p.args[0]}
    for mono, k in p.args[1]:
        t: dict[tuple, int] = {(): k}
        for a in mono:
            t = _mul_terms(t, _terms(visit(a)))
        acc = _add_terms(acc, t)
    return acc


def _walk(e: Expr) -> list[Expr]:
    out, stack = [], [e]
    while stack:
        x = stack.pop()
        out.append(x)
        if x.op == "poly":
            stack.extend(a for mono, _ in x.args[1] for a in mono)
        elif x.op not in ("const", "bconst", "sym"):
            stack.extend(a for a in x.args if isinstance(a, Expr))
    return out


def if_depth(e: Expr) -> int:
    """How deeply `if` nodes nest in `e` (0: none)."""
    if e.op in ("const", "bconst", "sym"):
        return 0
    children = (
        [a for mono, _ in e.args[1] for a in mono] if e.op == "poly" else [a for a in e.args if isinstance(a, Expr)]
    )
    return (e.op == "if") + max((if_depth(c) for c in children), default=0)


def simplify(e: Expr, ranges: Mapping[str, Interval]) -> Expr:
    """`e` in a more readable form with the same value wherever the symbols are within `ranges`.

    `min`/`max` and `if` that the interval bounds decide fold, and a relation loses a factor common to both
    sides: a constant (`64*a == 64*b` -> `a == b`), a symbolic factor known positive, or, for `==`, a
    symbolic factor that may be 0 by a case split (`s*a == s*b` -> `s == 0 or a == b`).
    """
    memo: dict = {}

    def visit(x: Expr) -> Expr:
        r = memo.get(x)
        if r is not None:
            return r
        op, args = x.op, x.args
        if op in ("const", "bconst", "sym"):
            r = x
        elif op == "poly":
            r = _from_terms(_fold_poly_atoms(x, visit))
        elif op in ("min", "max"):
            r = _minmax_by_bounds(op, visit(args[0]), visit(args[1]), ranges)
        elif op == "if":
            cond = visit(args[0])
            known = decide_by_bounds(cond, ranges)
            r = visit(args[1] if known else args[2]) if known is not None else ite(cond, visit(args[1]), visit(args[2]))
        elif op == "rel":
            r = _cancel(args[0], visit(args[1]), visit(args[2]), ranges)
        else:
            r = _CONSTRUCTORS[op](*(visit(a) for a in args))
        if r.is_bool and r.op != "bconst" and (known := decide_by_bounds(r, ranges)) is not None:
            r = TRUE if known else FALSE
        memo[x] = r
        return r

    return visit(e)


def _minmax_by_bounds(op: str, a: Expr, b: Expr, ranges: Mapping[str, Interval]) -> Expr:
    (al, ah), (bl, bh) = (_bounds(x, ranges, {}) for x in (a, b))
    if op == "min":
        return a if ah <= bl else b if bh <= al else minimum(a, b)
    return a if al >= bh else b if bl >= ah else maximum(a, b)


def _cancel(op: str, a: Expr, b: Expr, ranges: Mapping[str, Interval]) -> Expr:
    """`a op b` without the factors common to every term of both sides (see `simplify`)."""
    ta, tb = _terms(a), _terms(b)
    terms = [(m, k) for t in (ta, tb) for m, k in t.items() if k]
    if not terms:
        return _rel(op, a, b)
    g = math.gcd(*(k for _, k in terms))
    common = [] if any(not m for m, _ in terms) else _common_atoms([m for m, _ in terms])
    split = []
    for atom in common:
        lo = _bounds(atom, ranges, {})[0]
        if lo >= 1 or (op == "==" and lo >= 0):
            split += [] if lo >= 1 else [atom]
        else:
            common = [c for c in common if c is not atom]
    if g == 1 and not common:
        return _rel(op, a, b)
    a2, b2 = (_from_terms({_remove(m, common): k // g for m, k in t.items() if k}) for t in (ta, tb))
    core = _rel(op, a2, b2)
    return or_(*(eq(atom, 0) for atom in split), core) if split else core


def _common_atoms(monos: list[tuple]) -> list[Expr]:
    """The atoms every monomial contains, with multiplicity (as a list)."""
    common = list(monos[0])
    for m in monos[1:]:
        rest = list(m)
        common = [x for x in common if x in rest and not rest.remove(x)]
    return common


def _remove(mono: tuple, atoms: list[Expr]) -> tuple:
    rest = list(mono)
    for x in atoms:
        rest.remove(x)
    return tuple(rest)
