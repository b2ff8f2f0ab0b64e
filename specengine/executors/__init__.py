"""Executors and the claiming pass that hands each bound symbol to the first executor that takes it. May import
`ops`, `ir`, `marks`, `constraints` and the leaves; never `prologue`, `capture` or above."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

from specengine.constraints.expr import Expr
from specengine.errors import UnsupportedOpError
from specengine.executors.nvfuser import NvFuserExecutor, nvfuser_available
from specengine.executors.protocol import Claim, Executor
from specengine.executors.torchex import torch_executor
from specengine.ir.symbol import BoundSymbol
from specengine.ir.trace import Trace

__all__ = ["Claim", "Executor", "Request", "claim_trace", "resolve_executors"]


@dataclass(frozen=True)
class Request:
    """A request from `executor` to run `bsym`: `expr` must be a compile-time constant, or (when `tensor`
    is set) that tensor's contiguity must be fixed."""

    expr: Expr | None
    executor: str
    bsym: BoundSymbol
    tensor: Any = None


def resolve_executors(executors: Sequence[Executor | str] | None) -> tuple[Executor, ...]:
    """Executor objects for names ("torch") and user objects; "torch" is always last as the fallback."""
    named = {"torch": torch_executor, "nvfuser": NvFuserExecutor}
    out = []
    default = ("nvfuser", "torch") if nvfuser_available() else ("torch",)
    for ex in executors or default:
        if isinstance(ex, str):
            if ex not in named:
                raise ValueError(f"unknown executor {ex!r}; known: {sorted(named)}")
            ex = named[ex]() if isinstance(named[ex], type) else named[ex]
        out.append(ex)
    if torch_executor not in out:
        out.append(torch_executor)
    return tuple(out)


def claim_trace(trace: Trace, executors: Sequence[Executor]) -> tuple[Trace, list[Request]]:
    """Hand each bound symbol to the first executor that claims it; unclaimed ops are decomposed.

    Returns:
        The claimed trace and the needs-constant requests (each with the executor and bound symbol).
    """
    bsyms: list[BoundSymbol] = []
    requests: list[tuple[Expr, BoundSymbol]] = []
    for bsym in trace.bsyms:
        _claim(bsym, executors, bsyms, requests)
    return trace.with_("Claiming (executors: " + ", ".join(e.name for e in executors) + ")",
                       bsyms=tuple(bsyms)), requests  # fmt: skip


def _claim(bsym: BoundSymbol, executors: Sequence[Executor], out: list, requests: list) -> None:
    """The first executor (in priority order) that claims `bsym`, or that claims all of its decomposition,
    runs it; a decomposition claimed by several executors goes to the first one that takes all of it."""
    for ex in executors:
        claim = ex.claim(bsym)
        if claim is not None:
            impl = claim.impl if claim.impl.pure == bsym.sym.pure else replace(claim.impl, pure=bsym.sym.pure)
            out.append(bsym.with_(sym=impl, subsymbols=()))
            requests.extend(Request(e, ex.name, bsym) for e in claim.needs_constant if not e.is_const)
            requests.extend(Request(None, ex.name, bsym, t) for t in claim.needs_contiguous)
            return
        if bsym.subsymbols and _may_decompose(ex, bsym) and _claims_all(ex, bsym.subsymbols):
            for sub in bsym.subsymbols:
                _claim(sub.with_(source=sub.source or bsym.source), (ex,), out, requests)
            return
    if not bsym.subsymbols:
        where = bsym.source.where if bsym.source else "<unknown>"
        raise UnsupportedOpError(bsym.sym.print_name, where, "no executor claims it; add the torch executor")
    for sub in bsym.subsymbols:
        _claim(sub.with_(source=sub.source or bsym.source, may_raise=sub.may_raise or bsym.may_raise), executors, out,
               requests)  # fmt: skip


def _claims_all(ex: Executor, bsyms: Sequence[BoundSymbol]) -> bool:
    """Whether `ex` can run every op of a decomposition (directly or through deeper decompositions)."""
    return all(ex.claim(b) is not None or (b.subsymbols and _may_decompose(ex, b) and _claims_all(ex, b.subsymbols))
               for b in bsyms)  # fmt: skip


def _may_decompose(ex: Executor, bsym: BoundSymbol) -> bool:
    """An executor may refuse an op's decomposition (`declines_decomposition`), e.g. where the decomposition
    drops a check the op makes at run time (view's stride check)."""
    declines = getattr(ex, "declines_decomposition", None)
    return declines is None or not declines(bsym)
