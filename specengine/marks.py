"""`mark_dynamic` / `mark_static`: per-dim user intent, read when an input is described for a compile."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from specengine.constraints import expr as E
from specengine.constraints.solver import implies
from specengine.errors import ConstraintViolationError
from specengine.provenance import Provenance

_ATTR = "_specengine_marks"


@dataclass(frozen=True)
class Mark:
    """What the user asked of one dim: dynamic within [min, max] (and a multiple of `multiple_of`), or static."""

    dynamic: bool
    min: int | None = None
    max: int | None = None
    multiple_of: int = 1


def _check_dim(t: torch.Tensor, dim: int, fn: str) -> int:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn}() expects a tensor, got {type(t).__name__}")
    if not -t.ndim <= dim < max(t.ndim, 1):
        raise IndexError(f"{fn}(): dim {dim} is out of range for a tensor with {t.ndim} dims")
    return dim % t.ndim


def _set(t: torch.Tensor, dim: int, mark: Mark) -> None:
    marks = dict(getattr(t, _ATTR, {}))
    marks[dim] = mark
    setattr(t, _ATTR, marks)


def mark_dynamic(t: torch.Tensor, dim: int, min: int | None = None, max: int | None = None,  # noqa: A002
                 multiple_of: int = 1) -> None:  # fmt: skip
    """Make `t.shape[dim]` symbolic in every mode, within `[min, max]` and a multiple of `multiple_of`.

    The range and divisibility become constraints the solver uses (checked by the prologue). A program
    that pins the dim, or needs more than the mark allows, raises ConstraintViolationError.

    Args:
        t: the input tensor.
        dim: the dim to mark.
        min: smallest size allowed (inclusive), or None.
        max: largest size allowed (inclusive), or None.
        multiple_of: the size is a multiple of this (a `2*_dim` in torch.export's terms).
    """
    d = _check_dim(t, dim, "mark_dynamic")
    size = t.shape[d]
    if (min is not None and size < min) or (max is not None and size > max) or size % multiple_of:
        raise ValueError(f"mark_dynamic: size {size} of dim {d} is outside min={min}, max={max}, "
                         f"multiple_of={multiple_of}")  # fmt: skip
    _set(t, d, Mark(True, min, max, multiple_of))


def mark_static(t: torch.Tensor, dim: int) -> None:
    """Pin `t.shape[dim]` to its current value in every mode.

    Args:
        t: the input tensor.
        dim: the dim to pin.
    """
    _set(t, _check_dim(t, dim, "mark_static"), Mark(False))


def marks_of(t: torch.Tensor) -> dict[int, Mark]:
    return getattr(t, _ATTR, {})


def mark_constraints(specs: Any) -> list[tuple[Any, Any]]:
    """(constraint, provenance) for every dynamic mark's min, max and multiple_of (they become guards)."""
    out = []
    for s, mark in specs.marks.items():
        prov = Provenance("<mark_dynamic>", 0, "mark_dynamic", f"{specs.sources[s]} as marked")
        v = E.sym(s)
        if mark.min is not None and mark.min > 0:
            out.append((E.ge(v, mark.min), prov))
        if mark.max is not None:
            out.append((E.le(v, mark.max), prov))
        if mark.multiple_of > 1:
            out.append((E.eq(E.mod(v, mark.multiple_of), 0), prov))
    return out


def check_marks(specs: Any, solution: Any) -> None:
    """Raise ConstraintViolationError when the program pins a dim marked dynamic, or needs a divisibility
    the mark does not promise. The message suggests the fix, as torch.export suggests Dim fixes."""
    for s in specs.marks:
        src, dim = specs.sources[s], _dim_of(specs.sources[s])
        tensor = src.rsplit(".shape[", 1)[0]
        for g in solution.guards:
            if s not in g.expr.free_symbols() or g.provenance.op == "mark_dynamic":
                continue
            text = g.expr.to_python(specs.sources.__getitem__)
            if s in solution.pinned:
                value = solution.pinned[s]
                fix = f"dim{dim} = {value}: call specengine.mark_static({tensor}, {dim}) instead"
                reason = "the program pins it"
            elif (k := _divisor(g.expr, s, solution)) is not None:
                fix = f"dim{dim} = {k}*_dim{dim}: call specengine.mark_dynamic({tensor}, {dim}, multiple_of={k})"
                reason = "the program needs a divisibility"
            else:
                continue
            raise ConstraintViolationError(
                f"{src} is marked dynamic, but {reason}: guard `{text}` ({g.provenance}). Suggested fix: {fix}"
            )


def _dim_of(source: str) -> str:
    return source.rsplit("[", 1)[1].rstrip("]") if source.endswith("]") else "?"


def _divisor(e: Any, s: str, solution: Any) -> int | None:
    """The smallest k such that `s % k == 0` (with the other guards) implies guard `e`, for a guard with a
    `... % K` subexpression over `s` (k divides K); z3 proves the implication."""
    big = _mod_constant(e, s)
    if big is None:
        return None
    others = [g.expr for g in solution.guards if g.expr is not e]
    for k in (d for d in range(2, big + 1) if big % d == 0):
        if implies(others + [E.eq(E.mod(E.sym(s), k), 0)], e, solution.ranges):
            return k
    return big


def _mod_constant(e: Any, s: str) -> int | None:
    """The constant divisor of a `... % K` subexpression of `e` that mentions symbol `s`."""
    stack = [e]
    while stack:
        x = stack.pop()
        if x.op == "mod" and x.args[1].is_const and s in x.args[0].free_symbols():
            return x.args[1].value
        if x.op == "poly":
            stack.extend(a for mono, _ in x.args[1] for a in mono)
        elif x.op not in ("const", "bconst", "sym"):
            stack.extend(a for a in x.args if hasattr(a, "op"))
    return None
