"""Folding what the solver decided into expressions: pinned expressions (`s0*s1 == 12` pins the product,
not the symbols) and `if` nodes whose condition is a known fact."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from specengine.constraints.expr import (
    _CONSTRUCTORS,
    Expr,
    _add_terms,
    _from_terms,
    _mul_terms,
    _rel,
    _terms,
    const,
    ite,
    normalize,
    not_,
)


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
