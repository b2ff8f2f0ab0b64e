"""The executor protocol: which ops an executor runs, and which values it needs as constants."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from specengine.constraints.expr import Expr
from specengine.ir.symbol import BoundSymbol, Symbol


@dataclass(frozen=True)
class Claim:
    """An executor's answer for one bound symbol.

    Attributes:
        impl: the symbol that runs in the computation instead (it prints as what it calls).
        needs_constant: symbolic values that must be compile-time constants for `impl` to run.
        needs_contiguous: tensors whose contiguity `impl` specializes on; for inputs of the computation the
            prologue then checks `is_contiguous()` against the value seen at compile time.
    """

    impl: Symbol
    needs_constant: tuple[Expr, ...] = ()
    needs_contiguous: tuple = ()


class Executor(Protocol):
    """What `specengine.compile(..., executors=[...])` accepts besides the names "torch" and "nvfuser"."""

    name: str

    def claim(self, bsym: BoundSymbol) -> Claim | None:
        """Return a Claim to run `bsym`, or None to decline (its decomposition is offered instead)."""
