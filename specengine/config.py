"""Global settings; `specengine.compile(...)` arguments override them per compiled function."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Config:
    """Attributes:
    recompile_limit: entries per compiled function; past it, calls run eagerly (or raise).
    on_recompile_limit: "warn" (a RecompileLimitWarning, then an eager run) or "raise" (RecompileLimitError).
    solver_timeout_ms: the time limit of each z3 query.
    """

    recompile_limit: int = 8
    on_recompile_limit: str = "warn"
    solver_timeout_ms: int = 2000


config = Config()
