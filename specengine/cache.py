"""Cache entries, the per-function cache, its counters, and the dispatch tables built from it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from specengine.codegen import exec_source
from specengine.constraints.solver import Solution, subsumes
from specengine.ir.trace import Trace
from specengine.prologue.codegen import Guard, Prologue


@dataclass(eq=False)
class CacheEntry:
    """One specialization: a prologue that accepts inputs, and the computation it feeds.

    Attributes:
        prologue: checks inputs and extracts symbols (`str(entry.prologue)` is its source).
        computation: the generated computation function.
        traces: computation traces, first (as traced) to final (as run).
        guards: the minimized guards, printed over input names.
        solution: the solved constraint set (None for an entry loaded from disk).
        key: canonical key (static input facts, global state, solved constraints).
        index: (source of the index-key function, this entry's pinned values, the function's globals), or
            None if nothing is pinned.
        stats: compile statistics (seconds per stage, z3 calls); `stats["origin"]` is "trace" or "disk".
    """

    prologue: Prologue
    computation: Callable
    traces: list[Trace]
    guards: list[Guard]
    solution: Solution
    key: Any
    index: tuple[str, tuple, dict] | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    hits: int = 0
    prologue_sources: Callable[[str], str] = str  # symbol -> Python text over the inputs
    promoted: frozenset = frozenset()  # (id(module), name) of int module attributes read as symbolic inputs
    material: Any = None  # what the disk cache needs to save a traced entry (persist.Material), until it is saved

    @property
    def row(self) -> tuple:
        """What dispatch runs when scanning: the full prologue, the computation, the entry."""
        return self.prologue.fn, self.computation, self

    @property
    def indexed_row(self) -> tuple:
        """What dispatch runs when the index found this entry (its pinned values already matched)."""
        return self.prologue.fn_indexed, self.computation, self

    def admit(self, args: tuple, kwargs: dict, key_fn: Callable | None) -> tuple | None:
        """The computation's arguments for a call, through the prologue that dispatch will run (one compile):
        the index key (`key_fn`, for an entry with pinned values) then the indexed prologue, or the full one."""
        if self.index is None:
            return self.prologue.fn(*args, **kwargs)
        if key_fn(*args, **kwargs) != self.index[1]:
            return None
        return self.prologue.fn_indexed(*args, **kwargs)


class Cache:
    """Entries of one compiled function.

    `indexes` and `scan` are immutable and rebuilt whole on every change, so dispatch reads them
    without a lock: `indexes` maps pinned input values to entries, `scan` lists entries that pin nothing.
    """

    def __init__(self) -> None:
        self.entries: tuple[CacheEntry, ...] = ()
        self.misses = 0
        self.retired_hits = 0  # hits of entries that newer, subsuming entries replaced
        self.reasons: list[str] = []
        self.indexes: tuple[tuple[Callable, dict], ...] = ()
        self.scan: tuple = ()
        self._key_fns: dict[str, Callable] = {}

    def add(self, entry: CacheEntry, reasons: list[str], traced: bool = True) -> None:
        """Insert a new entry; record why the call missed (`traced`: a miss; False: an entry loaded from disk).

        Older entries that the new one provably subsumes (same static facts, and z3 proves their guards
        imply the new guards; equivalent guard sets included) are dropped.
        """
        self.misses += traced
        if self.entries and traced:
            self.reasons.append("\n".join(reasons))
        kept = []
        for old in self.entries:
            if not _replaces(entry, old):
                kept.append(old)
                continue
            self.retired_hits += old.hits
            if subsumes(old.solution, entry.solution):
                entry.key = old.key  # equivalent guard sets share one key, whatever their syntax
        self.entries = tuple(kept) + (entry,)
        self._rebuild()

    def _rebuild(self) -> None:
        groups: dict[str, dict[tuple, tuple]] = {}
        for e in self.entries:
            if e.index is not None:
                source, values, glb = e.index
                rows = groups.setdefault(source, {})
                rows[values] = rows.get(values, ()) + (e.indexed_row,)
                self._key_fn(source, glb)
        self.indexes = tuple((self._key_fns[source], rows) for source, rows in groups.items())
        self.scan = tuple(e.row for e in self.entries if e.index is None)

    def key_fn(self, entry: CacheEntry) -> Callable | None:
        """The index-key function of `entry` (None if it pins nothing), shared by entries with the same source."""
        return None if entry.index is None else self._key_fn(entry.index[0], entry.index[2])

    def _key_fn(self, source: str, glb: dict) -> Callable:
        fn = self._key_fns.get(source)
        if fn is None:
            name = source[4 : source.index("(")]
            fn = self._key_fns[source] = exec_source(source, name, glb)
        return fn

    @property
    def hits(self) -> int:
        return self.retired_hits + sum(e.hits for e in self.entries)


def _replaces(new: CacheEntry, old: CacheEntry) -> bool:
    if new.solution is None or old.solution is None:
        return False  # an entry loaded from disk keeps no solution: both stay
    static_new, static_old = (new.key[0], new.key[2:]), (old.key[0], old.key[2:])
    return static_new == static_old and subsumes(new.solution, old.solution)
