"""Prologue generation: plain Python that checks a call's inputs against an entry and extracts symbols.

Checks come in this order: arity (the prologue has the user's signature) and types; tensor dtype,
device, rank and requires_grad; constant dims; the solved guards; grad mode and default dtype. The
same check list also generates an explainer, which reports the first failing check with actual values.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

from specengine.codegen import exec_source
from specengine.constraints import expr as E
from specengine.constraints.constraint import Constraint
from specengine.ir.literals import show


@dataclass(frozen=True)
class Check:
    """One prologue check: `fail` is Python over prologue locals that is true when the check fails."""

    fail: str
    text: str  # what must hold, over input names
    values: tuple[tuple[str, str], ...] = ()  # (label, local expression) to report on failure
    provenance: str = ""
    indexed: bool = False  # implied when the entry was found through the dispatch index (a pinned value)
    describe: bool = False  # the one value is the whole failure message (a module structure check explains itself)

    def message(self, actual: tuple) -> str:
        """The failure message, given the actual values of `values` (computed by the generated explainer)."""
        if self.describe:
            return str(actual[0])
        where = f" ({self.provenance})" if self.provenance else ""
        shown = ", ".join(f"{label} = {_show(v)}" for (label, _), v in zip(self.values, actual))
        return f"{self.text}{where} failed" + (f": {shown}" if shown else "")


def _show(v: Any) -> str:
    return show(v)  # (never the value's own repr: a user class's may be anything)


@dataclass(frozen=True)
class Guard:
    """A solved guard, printed as a Python expression over the inputs (e.g. `a.shape[0] > 2`)."""

    constraint: Constraint
    text: str

    @property
    def expr(self) -> E.Expr:
        return self.constraint.expr

    @property
    def provenance(self) -> Any:
        return "loaded from disk" if self.constraint is None else self.constraint.provenance

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Guard({self.text!r}, {self.provenance})"


class Prologue:
    """The generated prologue of one entry: `str(prologue)` is its source; calling it checks inputs.

    It returns the computation's arguments, or None when the inputs do not fit the entry.
    """

    def __init__(self, name: str, steps: list, returns: Sequence[str], glb: dict[str, Any], sig: str):
        self.name = name
        self.steps = steps
        self.globals = glb
        self.provenance = "Prologue generation"
        self.source = f"# Constructed by {self.provenance}\n" + _render(name, sig, steps, returns, fast=True)
        self._unindexed = [s for s in steps if not (isinstance(s, Check) and s.indexed)]
        self._sig, self._returns = sig, returns
        # Each variant is compiled when first asked for (dispatch asks for one of them; they are one function where
        # no check is indexed): a prologue is compiled once, not twice.
        self._fn: Callable | None = None
        self._fn_indexed: Callable | None = None
        self._explain: Callable | None = None  # compiled on the first miss that asks (recompile reasons)

    @property
    def fn(self) -> Callable:
        """Checks every input fact; returns the computation's arguments or None."""
        if self._fn is None:
            self._fn = exec_source(self.source, self.name, self.globals)
        return self._fn

    @fn.setter
    def fn(self, fn: Callable) -> None:
        self._fn = fn

    @property
    def fn_indexed(self) -> Callable:
        """`fn` without the checks of pinned values, for an entry that the dispatch index found by them."""
        if self._fn_indexed is None:
            if len(self._unindexed) == len(self.steps):
                return self.fn
            src = _render(self.name, self._sig, self._unindexed, self._returns, fast=True)
            self._fn_indexed = exec_source(src, self.name, self.globals)
        return self._fn_indexed

    def __str__(self) -> str:
        return self.source

    def python(self) -> str:
        return self.source

    def python_callable(self) -> Callable:
        return self.fn

    def explain(self, args: tuple, kwargs: dict) -> str | None:
        """The first failing check for these inputs, with actual values; None if all pass."""
        if self._explain is None:
            src = _render(self.name, self._sig, self.steps, self._returns, fast=False)
            self._explain = exec_source(src, self.name, self.globals)
        index, actual = self._explain(*args, **kwargs)
        checks = [s for s in self.steps if isinstance(s, Check)]
        return None if index < 0 else checks[index].message(actual)


def _render(name: str, sig: str, steps: list, returns: Sequence[str], fast: bool) -> str:
    lines = [f"def {name}{sig}:"]
    pending: list[str] = []
    k = 0

    def flush() -> None:
        if pending:
            lines.append(f"  if {' or '.join(pending)}: return None")
            pending.clear()

    for step in steps:
        if isinstance(step, Check):
            if not fast:
                actual = "".join(f"{src}, " for _, src in step.values)
                lines.append(f"  if {step.fail}: return {k}, ({actual})")
            elif step.provenance:
                flush()
                lines.append(f"  if {step.fail}: return None  # {step.provenance}")
            else:
                pending.append(step.fail)
            k += 1
        else:
            flush()
            lines.append(f"  {step}")
    flush()
    ret = "(" + "".join(f"{r}, " for r in returns) + ")"
    lines.append(f"  return {ret}" if fast else "  return -1, ()")
    return "\n".join(lines) + "\n"
