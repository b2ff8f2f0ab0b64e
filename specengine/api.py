"""`CompiledFunction`: dispatch to cached entries, and the compile pipeline as named stages."""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch

from specengine import persist
from specengine.cache import Cache, CacheEntry
from specengine.capture import effect_strings, pg_timeouts, torch_settings, unbound_methods
from specengine.capture.interpreter import trace_function
from specengine.capture.writes import Promote, with_writes
from specengine.codegen import callable_target, function_name, module_of
from specengine.config import config
from specengine.constraints import expr as E
from specengine.constraints.decide import Decider
from specengine.constraints.solver import Solution, Solver, with_float_guards
from specengine.errors import (
    Misspeculation,
    RecompileLimitError,
    RecompileLimitWarning,
    SpecEngineError,
    UnsupportedOpError,
)
from specengine.executors import Executor, Request, claim_trace, resolve_executors
from specengine.ir import context as trace_context
from specengine.ir import passes
from specengine.ir.proxies import NumberProxy
from specengine.ir.trace import Trace, format_value
from specengine.logs import topic
from specengine.marks import check_marks, mark_constraints
from specengine.prologue.build import build_index_key, build_prologue
from specengine.prologue.codegen import Prologue
from specengine.prologue.contents import key as contents_key
from specengine.prologue.contents import needs_contents
from specengine.prologue.external import ObjGuard
from specengine.prologue.inputs import ConstSpec, InputSpecs, TensorSpec, describe_inputs
from specengine.provenance import Provenance

_MAX_CLAIM_ROUNDS = 8
_MAX_RESPECULATIONS = 64  # entries one call may try or compile for the sides of its branches on tensor data
recompiles, guards_log, traces_log = topic("recompiles"), topic("guards"), topic("traces")


@dataclass(frozen=True)
class Options:
    dynamic: bool | None
    executors: tuple[Executor, ...]
    recompile_limit: int | None = None  # None: specengine.config.recompile_limit
    on_recompile_limit: str | None = None  # None: specengine.config.on_recompile_limit
    cache: bool = True  # False: never the disk cache (specengine.compile(fn, cache=False))

    @property
    def timeout_ms(self) -> int:
        return config.solver_timeout_ms


class CompiledFunction:
    """A function compiled by `specengine.compile`. Calling it dispatches to a cached entry or compiles."""

    _specengine_compiled = True  # (prologue/state.py: a compiled function called while another one traces)

    def __init__(self, fn: Callable, options: Options):
        self._fn = fn
        self._options = options
        self._cache = Cache()
        self._entries: tuple[CacheEntry, ...] = ()
        self._lock = threading.RLock()
        self._last: CacheEntry | None = None
        self._last_compiled: CacheEntry | None = None
        self._auto_dynamic: frozenset[str] = frozenset()  # under dynamic=None: sources seen to change
        self._seen: dict[str, Any] = {}  # source -> value at the first compile that saw it
        self._promoted: frozenset = frozenset()  # (id(module), name): int attributes the program assigns
        self._disk: Any = None  # persist.Disk (or False: none) once the first miss looked at the disk cache
        functools.update_wrapper(self, callable_target(fn), updated=())
        for attr in ("__name__", "__qualname__"):  # a functools.partial has neither
            if not hasattr(self, attr):
                setattr(self, attr, function_name(fn))

    @property
    def compiled_target(self) -> Callable:
        """The function or module this compiles (what it runs while another compiled function traces it)."""
        return self._fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        cache = self._cache
        for key_fn, index in cache.indexes:
            try:
                rows = index.get(key_fn(*args, **kwargs), ())
            except Exception:  # noqa: BLE001 - inputs of another structure: not this index
                rows = ()
            for prologue, computation, entry in rows:
                inputs = prologue(*args, **kwargs)
                if inputs is not None:
                    entry.hits += 1
                    self._last = entry
                    try:
                        return computation(*inputs)
                    except Misspeculation as m:
                        return self._respeculate(args, kwargs, entry, m)
        for prologue, computation, entry in cache.scan:
            inputs = prologue(*args, **kwargs)
            if inputs is not None:
                entry.hits += 1
                self._last = entry
                try:
                    return computation(*inputs)
                except Misspeculation as m:
                    return self._respeculate(args, kwargs, entry, m)
        return self._miss(args, kwargs)

    def _lookup(self, args: tuple, kwargs: dict, failed: tuple = ()) -> Any:
        """The dispatch of `__call__`, for the slow path: (entry, computation inputs) or None; entries in `failed`
        (which misspeculated on this call) are skipped."""
        cache = self._cache
        for key_fn, index in cache.indexes:
            try:
                rows = index.get(key_fn(*args, **kwargs), ())
            except Exception:  # noqa: BLE001 - inputs of another structure: not this index
                rows = ()
            for prologue, _, entry in rows:
                inputs = None if entry in failed else prologue(*args, **kwargs)
                if inputs is not None:
                    return entry, inputs
        for prologue, _, entry in cache.scan:
            inputs = None if entry in failed else prologue(*args, **kwargs)
            if inputs is not None:
                return entry, inputs
        return None

    def _respeculate(self, args: tuple, kwargs: dict, entry: CacheEntry, m: Misspeculation,
                     counted: bool = True) -> Any:  # fmt: skip
        """`entry` took the wrong side of a branch on tensor data (ir/speculation.py): run the entry that takes
        the sides the data took, compiling it where none does. (`counted`: the failed call was counted a hit.)"""
        failed, sides = (), {}  # entries that failed on this call; the sides its data took, as learned so far
        for _ in range(_MAX_RESPECULATIONS):
            entry.hits -= counted  # a call that misspeculated is no hit
            failed, sides = (*failed, entry), {**sides, **m.sides}
            with self._lock:
                found = self._lookup(args, kwargs, failed)
                counted = found is not None
                if not counted and len(self._entries) >= self._limit():
                    return self._over_limit(args, kwargs)
                entry, inputs = found if counted else self._compile(args, kwargs, sides)
            entry.hits += counted
            self._last = entry
            try:
                return entry.computation(*inputs)
            except Misspeculation as again:
                m = again
        raise SpecEngineError(f"internal error: {self.__qualname__} kept misspeculating on tensor data: {m}")

    def _miss(self, args: tuple, kwargs: dict) -> Any:
        if trace_context.current() is not None:  # called while tracing (e.g. recursion): trace through it
            return self._fn(*args, **kwargs)
        with self._lock:  # one compile at a time per function; dispatch stays lock-free
            if self._disk is None:
                self._load_disk()
            elif self._disk and self._disk.pending:
                self._add_loaded(self._disk.retry())
            found = self._lookup(args, kwargs)  # another thread may have compiled it meanwhile
            if found is not None:
                entry, inputs = found
                entry.hits += 1
            elif len(self._entries) >= self._limit():
                return self._over_limit(args, kwargs)
            else:
                entry, inputs = self._compile(args, kwargs)
        self._last = entry
        try:
            return entry.computation(*inputs)
        except Misspeculation as m:
            return self._respeculate(args, kwargs, entry, m, found is not None)

    def _compile(self, args: tuple, kwargs: dict, speculation: dict | None = None) -> tuple[CacheEntry, tuple]:
        reasons = [e.prologue.explain(args, kwargs) or "passed" for e in self._entries]
        auto_dynamic, seen = self._auto_dynamic, self._seen
        if self._options.dynamic is None:
            current = self._source_values(args, kwargs)
            auto_dynamic = auto_dynamic | {src for src, v in current.items() if src in seen and seen[src] != v}
            seen = {**current, **seen}
        start = time.perf_counter()
        with _gc_paused():
            entry = compile_entry(self._fn, args, kwargs, self._options, auto_dynamic, self._promoted, speculation)
        pg_timeouts.after_compile(time.perf_counter() - start)  # other ranks may be compiling as long: wait for them
        inputs = entry.admit(args, kwargs, self._cache.key_fn(entry))  # before it is kept: a broken one keeps nothing
        if inputs is None:
            raise SpecEngineError(f"internal error: a new entry rejects the inputs it was traced from: "
                                  f"{entry.prologue.explain(args, kwargs)}")  # fmt: skip
        self._auto_dynamic, self._seen = auto_dynamic, seen  # only a completed compile changes any state
        self._promoted = entry.promoted
        self._cache.add(entry, reasons)
        if self._disk:
            self._save_disk(entry)
        entry.material = None
        self._entries = self._cache.entries
        self._last_compiled = entry
        if reasons:
            recompiles.info("recompiling %s (entry %d):\n  %s", self.__name__, len(self._entries), "\n  ".join(reasons))
        if guards_log.isEnabledFor(logging.INFO):  # the guards' text only where it is logged
            guards_log.info("%s entry %d guards:\n  %s", self.__name__, len(self._entries),
                            "\n  ".join(g.constraint.debug_str(entry.prologue_sources) for g in entry.guards) or "(none)")  # fmt: skip
        return entry, inputs

    def _load_disk(self) -> None:
        """Entries and automatic-dynamic decisions saved by earlier processes (specengine/persist), on the first miss."""
        names = [ex.name for ex in self._options.executors]
        disk = self._options.cache and persist.open_program(self._fn, module_of(self._fn), self._options.dynamic, names)
        self._disk = disk or False
        if not disk:
            return
        self._add_loaded(disk.load())
        if self._options.dynamic is None:
            dynamic, seen = disk.dynamic()
            self._auto_dynamic, self._seen = self._auto_dynamic | dynamic, {**seen, **self._seen}

    def _add_loaded(self, loaded: list) -> None:
        for e in loaded:
            stats = {"origin": "disk", "path": e.key, "loaded_from": self._disk.folder}
            self._cache.add(CacheEntry(e.prologue, e.computation, [], e.guards, None, e.key, e.index, stats), [], False)
        self._entries = self._cache.entries

    def _save_disk(self, entry: CacheEntry) -> None:
        material, entry.material = entry.material, None
        if material is None:
            return
        path, why = self._disk.save(entry.prologue, entry.index, entry.guards, material)
        entry.stats["saved_to" if path else "not_saved"] = path or why
        if self._options.dynamic is None and self._auto_dynamic:
            self._disk.save_dynamic(self._auto_dynamic, self._seen)

    def _source_values(self, args: tuple, kwargs: dict) -> dict[str, Any]:
        """Every size, int and float of a call, by source ("x.shape[0]", "n"), for automatic dynamic."""
        specs = describe_inputs(self._fn, args, kwargs, True)
        return {specs.sources[s]: v for s, v in specs.hints.items()}

    def _limit(self) -> int:
        limit = self._options.recompile_limit
        return config.recompile_limit if limit is None else limit

    def _over_limit(self, args: tuple, kwargs: dict) -> Any:
        """Past the recompile limit: warn and run eagerly, or raise, as configured."""
        reason = "; ".join(e.prologue.explain(args, kwargs) or "passed" for e in self._entries[-1:])
        message = (f"specengine: {self.__qualname__} reached the recompile limit ({self._limit()} entries); "
                   f"last recompile reason: {reason}")  # fmt: skip
        mode = self._options.on_recompile_limit or config.on_recompile_limit
        if mode == "raise":
            raise RecompileLimitError(message + ". Raise specengine.config.recompile_limit or pass recompile_limit=.")
        warnings.warn(message + "; running eagerly", RecompileLimitWarning, stacklevel=3)
        return self._fn(*args, **kwargs)

    def reset(self) -> None:
        """Drop every entry, counter and automatic-dynamic observation."""
        with self._lock:
            self._cache = Cache()
            self._entries = ()
            self._last = self._last_compiled = None
            self._auto_dynamic, self._seen, self._promoted = frozenset(), {}, frozenset()


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No automatic garbage collection while compiling: a compile allocates many objects that all live on (the
    entry keeps them), and each full collection it would trigger scans the whole heap (torch's modules included),
    a cost that grows with the process, not with the program. Cyclic garbage is collected after the compile."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _trace_stage(fn: Callable, specs: InputSpecs, options: Options,
                 speculation: dict) -> tuple[list[Trace], Decider, Any]:  # fmt: skip
    retrace = {"concrete": False, "pin_comparisons": False}  # how the next trace decides (Decider)
    while True:
        decider = Decider(specs.hints, specs.ranges, options.timeout_ms)
        decider.speculation = speculation
        decider.concrete, decider.pin_comparisons = retrace["concrete"], retrace["pin_comparisons"]
        for constraint, provenance in mark_constraints(specs):
            decider.record(constraint, provenance)
        try:
            traced, state = trace_function(fn, specs, decider)
        except unbound_methods.MethodCalledThroughClass:
            continue  # a Tensor method called through the class from code not scanned: now swapped, trace again
        except effect_strings.Retrace:
            continue  # a symbolic f-string reached something other than an effect: now pinned, trace again
        except UnsupportedOpError:
            flipped = _other_side(decider)
            if flipped is None:
                raise
            speculation = flipped  # refused on the side a data branch took by default: try the other one
            continue
        except (SpecEngineError, Promote):
            raise
        except Exception as e:
            flipped = _other_side(decider)
            if flipped is not None:  # the side a data branch took by default raised: take the other one
                speculation = flipped
                continue
            if decider.concrete:
                raise  # with every number real it raises still: the program's own error (eager raises it too)
            recompiles.info("%s raised %s while tracing: traced again with every number concrete",
                            function_name(fn), type(e).__name__)  # fmt: skip
            retrace["concrete"] = True
            continue
        if state.type_errors and specs.hints and not decider.concrete:  # perhaps caught one a symbol caused
            recompiles.info("%s: %s, traced again with every number concrete", function_name(fn), state.type_errors[0])
            retrace["concrete"] = True
            continue
        if decider.symbolic_bools and not decider.pin_comparisons and state.identity_seen:
            recompiles.info("%s: an `is` at %s may have seen a symbolic bool: traced again with comparisons decided",
                            function_name(fn), next(iter(state.identity_seen)))  # fmt: skip
            retrace["pin_comparisons"] = True  # `flag is True` on a symbolic bool: decide comparisons, again
            continue
        break
    traces_log.info("traced %s:\n%s", function_name(fn), traced)
    cleaned = passes.dce(passes.cse(traced))
    return [traced, cleaned], decider, state


def _other_side(decider: Decider) -> dict | None:
    """Where the trace raised after taking its last data branch by default (not a side it was asked to take,
    ir/speculation.py): the sides to trace instead, that branch flipped. (Data that takes the raising side then
    misspeculates, and its compile raises the program's error: as eager.)"""
    if not decider.speculated:
        return None
    key, value = decider.speculated[-1]
    if key in decider.speculation:
        return None
    return {**dict(decider.speculated[:-1]), key: not value}


def _solve_stage(decider: Decider, specs: InputSpecs, options: Options) -> Solution:
    for c in decider.constraints:  # by construction (Decider.record): guards read only what the prologue knows
        if not c.expr.free_symbols() <= specs.hints.keys():
            raise SpecEngineError(f"internal error: a guard on a symbol without a source: {c.debug_str()}")
    solution = Solver(decider.constraints, specs.ranges, specs.hints, options.timeout_ms).solve()
    return with_float_guards(solution, decider.float_constraints)


def _record_requests(requests: list[Request], decider: Decider) -> int:
    """Turn needs-constant requests into constraints (`expr == hint`); returns how many were new."""
    new = 0
    for r in requests:
        if r.expr is None:
            continue  # contiguity: a prologue metadata check, not a constraint
        if decider.unbacked.mentions(r.expr):
            where = r.bsym.source.where if r.bsym.source else "<unknown>"
            raise UnsupportedOpError(r.bsym.sym.name, where, f"the {r.executor} executor needs `{r.expr}` as a "
                                     "constant, but it depends on tensor data; run the op with the torch executor")  # fmt: skip
        b = r.expr if r.expr.is_bool else E.eq(r.expr, r.expr.eval(decider.hints))
        value = bool(b.eval(decider.hints))
        if decider.implied(b, value):
            continue
        src = r.bsym.source or Provenance("<unknown>", 0)
        reason = f"the {r.executor} executor needs a constant"
        decider.record(b if value else E.not_(b), Provenance(src.filename, src.lineno, r.bsym.sym.name, reason))
        new += 1
    return new


def _fusion_passes(trace: Trace, options: Options, contiguous: dict[str, bool]) -> Trace:
    """Executors that fuse (nvFuser) group the ops they claimed into regions; `contiguous` is the contiguity
    the prologue checks, per input tensor."""
    for ex in options.executors:
        fusion_pass = getattr(ex, "fusion_pass", None)
        if fusion_pass is not None:
            trace = fusion_pass(trace, contiguous)
    return trace


def _computation_stage(cleaned: Trace, decider: Decider, specs: InputSpecs,
                       options: Options) -> tuple[Solution, list[Trace], set[str]]:  # fmt: skip
    """Solve, specialize and claim until the executors request no new constants."""
    for _ in range(_MAX_CLAIM_ROUNDS):
        solution = _solve_stage(decider, specs, options)
        specialized = passes.specialize(cleaned, solution.fold, specs.hints)
        claimed, requests = claim_trace(specialized, options.executors)
        if not _record_requests(requests, decider):
            contiguous = {r.tensor.name for r in requests if r.tensor is not None}
            checked = {
                t.local: t.contiguous for t in specs.leaves() if isinstance(t, TensorSpec) and t.local in contiguous
            }
            fused = _fusion_passes(passes.dce(claimed), options, checked)
            final = passes.insert_deletes(passes.prune_params(fused))
            return solution, [specialized, claimed, final], contiguous
    raise SpecEngineError(f"executors kept requesting new constants after {_MAX_CLAIM_ROUNDS} rounds")


def _prologue_stage(fn: Callable, specs: InputSpecs, solution: Solution, final: Trace, uses_default_dtype: bool,
                    contiguous: set[str], objects: list[str], reads: tuple = ()) -> tuple[Prologue, list]:  # fmt: skip
    name = function_name(fn)
    returns = [format_value(p) for p in final.params] + objects  # then the caller's objects that outputs update
    symbols = {p.name for p in final.params if isinstance(p, NumberProxy)}
    default_dtype = torch.get_default_dtype() if uses_default_dtype else None
    return build_prologue(name, specs, solution, returns, symbols, torch.is_grad_enabled(), default_dtype,
                          contiguous, torch_settings.resolved(reads))  # fmt: skip


def compile_entry(fn: Callable, args: tuple, kwargs: dict, options: Options, auto_dynamic: frozenset[str] = frozenset(),
                  promoted: frozenset = frozenset(), speculation: dict | None = None) -> CacheEntry:  # fmt: skip
    """The compile pipeline: describe inputs, trace, solve, specialize and claim, generate the prologue.
    `speculation`: the sides to take of branches on tensor data (ir/speculation.py)."""
    times = {"start": time.perf_counter(), "frontend": 0.0}
    for _ in range(64):
        described = time.perf_counter()
        specs = describe_inputs(fn, args, kwargs, options.dynamic, auto_dynamic, promoted)
        times["frontend"] += time.perf_counter() - described  # (walks of module state, fingerprints)
        try:
            traces, decider, state = _trace_stage(fn, specs, options, speculation or {})
            break
        except Promote as p:  # `self.steps += 1`: trace again with the attribute as a symbolic input
            promoted = promoted | p.keys
    else:
        raise SpecEngineError("internal error: module attributes kept being promoted")
    uses_default_dtype, plan = state.facts.uses_default_dtype, state.output_plan
    times["frontend"] += state.frontend_s
    reads = tuple(sorted(state.global_reads.items(), key=repr))  # global torch settings the trace read
    times["trace"] = time.perf_counter()
    solution, computation, contiguous = _computation_stage(traces[-1], decider, specs, options)
    check_marks(specs, solution)
    contiguous |= state.facts.contiguous
    traces += computation
    times["solve"] = time.perf_counter()
    objects = plan.objects if plan is not None else []
    prologue, guards = _prologue_stage(fn, specs, solution, traces[-1], uses_default_dtype, contiguous, objects, reads)
    entry_fn = traces[-1].python_callable()
    if plan is not None:  # outputs of their own type (ModelOutput, a cache), inputs the function changed
        entry_fn = plan.wrap(entry_fn, len(traces[-1].params))
    entry_fn = with_writes(entry_fn, specs.writes)
    times["codegen"] = time.perf_counter()
    key = (_static_key(specs), solution.key, torch.is_grad_enabled(), uses_default_dtype and torch.get_default_dtype(),
           _autocast_state(), reads, tuple(decider.speculated))  # fmt: skip
    stats = {**_stats(times, decider, solution), "origin": "trace"}
    index = build_index_key(function_name(fn), specs, dict(solution.pinned))
    traces_log.info("final computation of %s:\n%s", function_name(fn), traces[-1])
    entry = CacheEntry(prologue, entry_fn, traces, guards, solution, key, index, stats)
    entry.prologue_sources = specs.sources.__getitem__
    entry.promoted = promoted
    entry.material = persist.Material(specs, getattr(state, "ran_codes", {}), traces[-1], plan)
    if decider.speculated:  # TODO(issue 23): a disk entry keyed by its speculated sides
        entry.material, entry.stats["not_saved"] = None, "it speculates on tensor data (a branch on .item())"
    return entry


def _stats(times: dict[str, float], decider: Decider, solution: Solution) -> dict[str, Any]:
    """Compile statistics: seconds per stage, z3 calls, z3 seconds and the slowest z3 query."""
    return {
        "trace_s": times["trace"] - times["start"],
        "solve_s": times["solve"] - times["trace"],
        "codegen_s": times["codegen"] - times["solve"],
        "compile_s": times["codegen"] - times["start"],
        "frontend_s": times["frontend"],  # (part of trace_s) describing the inputs, the walks around the user's call
        "z3_calls": decider.z3_calls + solution.z3_calls,
        "z3_s": decider.z3_seconds + solution.z3_seconds,
        "z3_max_query_s": max(decider.z3_max_seconds, solution.z3_max_seconds),
        "z3_max_query_work": max(decider.z3_max_work, solution.z3_max_work),
    }


def _autocast_state() -> tuple:
    if not torch._C._is_any_autocast_enabled():
        return ()
    return tuple((d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda"))


def _static_key(specs: InputSpecs) -> str:
    """The static facts of the inputs (types, dtypes, devices, ranks, constants), module state included, and the
    outside values the trace read (so entries for two values of a global both stay)."""
    external = [_outside_key(g.text, g.value, g.key) for g in specs.external]
    external += [_outside_key(str(c[1]), c[2], None) for c in specs.captured]
    objects = [_outside_key(c.path, c.value, None) for c in _constants(specs.params)]  # equal reprs, other objects
    return repr((specs.params, specs.state, external, objects, [g.key for g in specs.structure]))


def _outside_key(text: str, value: Any, key: Any) -> Any:
    """An outside value's part of the entry key: by fingerprint where its contents were read (an entry for a set
    before and after an in-place change both stay), else `ObjGuard.key` (value or identity)."""
    if needs_contents(value):
        return (text, contents_key(value))
    return key if key is not None else ObjGuard("", text, value).key


def _constants(specs: tuple) -> list[ConstSpec]:
    out, todo = [], list(specs)
    while todo:
        spec = todo.pop()
        out += [spec] if isinstance(spec, ConstSpec) else []
        todo.extend(getattr(spec, "children", ()))
    return out


def make_compiled(fn: Callable, dynamic: bool | None, executors: Sequence[Executor | str] | None,
                  recompile_limit: int | None = None, on_recompile_limit: str | None = None,
                  cache: bool = True) -> CompiledFunction:  # fmt: skip
    if on_recompile_limit not in (None, "warn", "raise"):
        raise ValueError(f"on_recompile_limit must be 'warn' or 'raise', got {on_recompile_limit!r}")
    options = Options(dynamic, resolve_executors(executors), recompile_limit, on_recompile_limit, cache)
    return CompiledFunction(fn, options)
