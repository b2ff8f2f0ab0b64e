"""specengine: a tracing JIT for PyTorch functions that specializes only as much as it must."""

from __future__ import annotations

from typing import Any, Callable, Sequence

from specengine.api import CompiledFunction, make_compiled
from specengine.cache import CacheEntry
from specengine.compiled_module import CompiledModule, compile_module
from specengine.config import config
from specengine.errors import (
    ConstraintViolationError,
    DataDependentCheckError,
    RecompileLimitError,
    RecompileLimitWarning,
    SolverWarning,
    SpecEngineError,
    UnsupportedOpError,
)
from specengine.ir.data_dependent import user_check
from specengine.ir.trace import Trace
from specengine.logs import set_logs
from specengine.marks import mark_dynamic, mark_static
from specengine.persist.bundle import load_cache, save_cache
from specengine.prologue.codegen import Guard, Prologue

__all__ = [
    "compile", "cache_hits", "cache_misses", "last_traces", "last_prologue", "last_guards", "cache_entries",
    "recompile_reasons", "explain", "reset", "mark_dynamic", "mark_static", "config", "set_logs",
    "CompiledFunction", "CompiledModule", "CacheEntry", "Guard", "Prologue", "Trace", "SpecEngineError", "UnsupportedOpError",
    "ConstraintViolationError", "RecompileLimitError", "RecompileLimitWarning", "SolverWarning", "check",
    "DataDependentCheckError", "save_cache", "load_cache",
]  # fmt: skip


def compile(
    fn: Callable | None = None,
    *,
    dynamic: bool | None = None,
    executors: Sequence[Any] | None = None,
    recompile_limit: int | None = None,
    on_recompile_limit: str | None = None,
    cache: bool = True,
) -> Any:
    """Compile `fn` (a function or nn.Module); also usable as `@compile` or `@compile(dynamic=True)`.

    Args:
        fn: the function to compile.
        dynamic: True: every tensor dim and int input is symbolic. False: everything is pinned to the
            values seen. None (default): automatic; the first compile pins everything, and each size or int
            whose value changed between calls becomes symbolic for the recompile.
        executors: executor names ("torch") or executor objects, in priority order; "torch" is always the
            fallback.
        recompile_limit: entries allowed for this function (default `specengine.config.recompile_limit`, 8).
        on_recompile_limit: "warn" (a RecompileLimitWarning, then an eager run) or "raise" (default
            `specengine.config.on_recompile_limit`).
        cache: False: this function never uses the disk cache (`specengine.config.cache_dir`).

    Returns:
        A CompiledFunction; for an nn.Module, a CompiledModule (an nn.Module with the original's parameters,
        buffers, state_dict keys and attributes: `DistributedDataParallel(specengine.compile(model))` and
        `fully_shard(specengine.compile(model))` work). Of a `DistributedDataParallel`, or of a module with
        torch.distributed's forward hooks (`fully_shard`, `replicate`), the wrapper's own call stays eager and
        the module's `forward` is compiled. A decorator when `fn` is omitted.
    """

    def make(f: Callable) -> Any:
        return compile_module(
            f, lambda t: make_compiled(t, dynamic, executors, recompile_limit, on_recompile_limit, cache)
        )

    return make if fn is None else make(fn)


def check(cond: Any, message: Any = None) -> None:
    """State a fact about sizes or ints, as `torch._check` does: assumed while tracing, checked on every call.

    On a data-dependent (unbacked) symbol, such as the rows of `nonzero` or a value of `.item()`, the fact is
    assumed from here on (later decisions it implies record nothing) and asserted by the computation on every call:
    a call whose data violates it raises `DataDependentCheckError` (a RuntimeError) naming this line; it never
    recompiles. On backed symbols (input sizes and ints) it is decided like a branch: a prologue guard, and an
    input that violates it raises RuntimeError, as eager does. Outside a compiled function: `if not cond: raise`.

    Args:
        cond: a bool, or a comparison of sizes and ints (`n > 0`, `idx.shape[0] <= x.shape[0]`).
        message: the error message (a string, or a callable returning one).
    """
    user_check(cond, message)


def _compiled(cfn: Any) -> CompiledFunction:
    if isinstance(cfn, CompiledModule):
        cfn = cfn.compiled_function
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


def reset(cfn: CompiledFunction) -> None:
    """Drop every entry and counter of `cfn` (the next call compiles again)."""
    _compiled(cfn).reset()


def _runtime_checks(entry: CacheEntry) -> list:
    """The assertions on data-dependent symbols that the entry's computation makes on every call."""
    return [b for b in entry.traces[-1].bsyms if b.sym.print_name == "prims.check_sym"] if entry.traces else []


def _unbacked_binders(entry: CacheEntry) -> list:
    """The bound symbols that read the entry's data-dependent symbols (`u0 = prims.unbacked_size(...)`)."""
    return [b for b in entry.traces[-1].bsyms if "unbacked" in b.sym.tags] if entry.traces else []


def explain(cfn: CompiledFunction) -> str:
    """Print (and return) each entry of `cfn`: its guards with provenance, its hits, its compile statistics."""
    c = _compiled(cfn)
    lines = [f"{c.__name__}: {cache_misses(c)} misses, {cache_hits(c)} hits, {len(c._cache.entries)} entries"]
    for i, e in enumerate(c._cache.entries):
        st = e.stats
        if st.get("origin") == "disk":
            lines.append(f"entry {i}: {e.hits} hits; loaded from {st['loaded_from']}")
            lines += [f"  {g}" for g in e.guards] or ["  (no guards)"]
            continue
        lines.append(f"entry {i}: {e.hits} hits; compile {st['compile_s'] * 1e3:.1f} ms "
                     f"(trace {st['trace_s'] * 1e3:.1f}, solve {st['solve_s'] * 1e3:.1f}, "
                     f"codegen {st['codegen_s'] * 1e3:.1f}), {st['z3_calls']} z3 queries")  # fmt: skip
        lines += [f"  {g}    # {g.provenance}" for g in e.guards] or ["  (no guards)"]
        lines += [f"  data-dependent: {b.output.name} = {b.args[-1]}" for b in _unbacked_binders(e)]
        lines += [f"  run-time check: {b.args[0]}    # {b.source}" for b in _runtime_checks(e)]
        lines += [f"  not saved: {st['not_saved']}"] if "not_saved" in st else []
    for i, reason in enumerate(c._cache.reasons, 1):
        lines.append(f"recompile {i}:")
        lines += [f"  {r}" for r in reason.splitlines()]
    text = "\n".join(lines)
    print(text)
    return text
