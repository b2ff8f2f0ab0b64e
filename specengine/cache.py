"""Cache entries, the per-function cache, and its counters."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from specengine.constraints.solver import Solution
from specengine.prologue.codegen import Guard, Prologue
from specengine.trace.trace import Trace


@dataclass(eq=False)
class CacheEntry:
    """One specialization: a prologue that accepts inputs, and the computation it feeds.

    Attributes:
        prologue: checks inputs and extracts symbols (`str(entry.prologue)` is its source).
        computation: the generated computation function.
        traces: computation traces, first (as traced) to final (as run).
        guards: the minimized guards, printed over input names.
        solution: the solved constraint set.
        key: canonical key (static input facts, global state, solved constraints).
        stats: compile statistics (z3 calls, seconds per stage).
    """

    prologue: Prologue
    computation: Callable
    traces: list[Trace]
    guards: list[Guard]
    solution: Solution
    key: Any
    stats: dict[str, Any] = field(default_factory=dict)
    hits: int = 0


class Cache:
    """Entries of one compiled function. `entries` is an immutable tuple, swapped whole (lock-free reads)."""

    def __init__(self) -> None:
        self.entries: tuple[CacheEntry, ...] = ()
        self.misses = 0
        self.reasons: list[str] = []

    def add(self, entry: CacheEntry, reasons: list[str]) -> None:
        """Insert a new entry, replacing one with an identical key; record why the call missed."""
        self.misses += 1
        if self.entries:
            self.reasons.append("; ".join(reasons))
        kept = tuple(e for e in self.entries if e.key != entry.key)
        self.entries = kept + (entry,)

    @property
    def hits(self) -> int:
        return sum(e.hits for e in self.entries)
