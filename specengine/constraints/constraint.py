"""Constraints are data: a boolean symbolic expression plus where and why it was recorded."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from specengine.constraints.expr import Expr
from specengine.provenance import Provenance


@dataclass(frozen=True)
class Constraint:
    """A boolean fact about symbols that a compiled entry relies on."""

    expr: Expr
    provenance: Provenance

    def render(self, name: Callable[[str], str] = str) -> str:
        return self.expr.to_python(name)

    def debug_str(self, name: Callable[[str], str] = str) -> str:
        return f"{self.render(name)}  ({self.provenance})"

    def __str__(self) -> str:
        return self.render()
