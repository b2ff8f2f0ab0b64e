"""specengine: a tracing JIT for PyTorch functions that specializes only as much as it must."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from specengine.api import CompiledFunction, make_compiled
from specengine.cache import CacheEntry
from specengine.errors import ConstraintViolationError, SolverWarning, SpecEngineError, UnsupportedOpError
from specengine.prologue.codegen import Guard, Prologue
from specengine.trace.trace import Trace

__all__ = [
    "compile", "cache_hits", "cache_misses", "last_traces", "last_prologue", "last_guards", "cache_entries",
    "recompile_reasons", "mark_dynamic", "mark_static", "CompiledFunction", "CacheEntry", "Guard", "Prologue",
    "Trace", "SpecEngineError", "UnsupportedOpError", "ConstraintViolationError", "SolverWarning",
]  # fmt: skip


def compile(
    fn: Callable | None = None,
    *,
    dynamic: bool | None = None,
    executors: Sequence[Any] | None = None,
) -> Any:
    """Compile `fn` (a function or nn.Module); also usable as `@compile` or `@compile(dynamic=True)`.

    Args:
        fn: the function to compile.
        dynamic: True: every tensor dim and int input is symbolic. False: everything is pinned to the
            values seen. None (default): automatic; until the dynamic-modes issue lands it acts as True.
        executors: executor names ("torch") or executor objects, in priority order; "torch" is always the
            fallback.

    Returns:
        A CompiledFunction, or a decorator when `fn` is omitted.
    """
    if fn is None:
        return lambda f: make_compiled(f, dynamic, executors)
    return make_compiled(fn, dynamic, executors)


def _compiled(cfn: Any) -> CompiledFunction:
    if not isinstance(cfn, CompiledFunction):
        raise TypeError(f"expected a function returned by specengine.compile, got {type(cfn).__name__}")
    return cfn


def cache_hits(cfn: CompiledFunction) -> int:
    """Calls served by an existing entry."""
    return _compiled(cfn)._cache.hits


def cache_misses(cfn: CompiledFunction) -> int:
    """Compilations (one per miss)."""
    return _compiled(cfn)._cache.misses


def last_traces(cfn: CompiledFunction) -> list[Trace]:
    """Computation traces of the last compilation, first (as traced) to final (as run)."""
    entry = _compiled(cfn)._last_compiled
    return list(entry.traces) if entry else []


def last_prologue(cfn: CompiledFunction) -> Prologue | None:
    """The prologue of the entry that served the last call."""
    entry = _compiled(cfn)._last
    return entry.prologue if entry else None


def last_guards(cfn: CompiledFunction) -> list[Guard]:
    """The minimized guards of the entry that served the last call (`str(g)` is Python over the inputs)."""
    entry = _compiled(cfn)._last
    return list(entry.guards) if entry else []


def cache_entries(cfn: CompiledFunction) -> list[CacheEntry]:
    """Every entry, oldest first; each has `.guards`, `.prologue` and `.traces`."""
    return list(_compiled(cfn)._cache.entries)


def recompile_reasons(cfn: CompiledFunction) -> list[str]:
    """For each miss after the first: the first failing guard of each existing entry, with actual values."""
    return list(_compiled(cfn)._cache.reasons)


def mark_dynamic(t: Any, dim: int, min: int | None = None, max: int | None = None) -> None:  # noqa: A002
    """Mark a dim as dynamic with an optional range (arrives with the dynamic-modes issue, #5)."""
    raise NotImplementedError("specengine.mark_dynamic arrives with issue 5 (dynamic modes)")


def mark_static(t: Any, dim: int) -> None:
    """Mark a dim as static (arrives with the dynamic-modes issue, #5)."""
    raise NotImplementedError("specengine.mark_static arrives with issue 5 (dynamic modes)")
