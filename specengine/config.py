"""Global settings; `specengine.compile(...)` arguments override them per compiled function."""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass
class Config:
    """Attributes:
    recompile_limit: entries per compiled function; past it, calls run eagerly (or raise).
    on_recompile_limit: "warn" (a RecompileLimitWarning, then an eager run) or "raise" (RecompileLimitError).
    solver_rlimit: the work limit of each z3 query, in z3's resource units (deterministic, unlike a clock: about
        1-2 s of z3 work on one core; the hardest query of the test suite takes about 55 000). 0: no limit.
    solver_timeout_ms: the wall-clock limit of each z3 query, a backstop behind `solver_rlimit` for a machine so
        loaded that the work limit is not reached in time.
    On either limit a query answers `unknown`, and the solver keeps the stronger guard set with a warning.
    cache_dir: the persistent cache's directory (README "Persistent cache"), read at import from
        `SPECENGINE_CACHE_DIR`; None or "" (the default): no disk cache.
    cache_max_bytes: the disk cache's size bound (`SPECENGINE_CACHE_MAX_BYTES`, default 1 GiB); least recently used
        entries are evicted first.
    cache_key: the secret (bytes or hex) entries are signed with; None: `SPECENGINE_CACHE_KEY` (hex), else a
        per-user key file `$XDG_CONFIG_HOME/specengine/cache.key` made on first use.
    distributed_timeout_factor: under torch.distributed, after each compile every process group's timeout becomes
        its own plus this factor times the longest compile of the process, so that a rank waiting in a collective
        for a rank that compiles does not time out (capture/pg_timeouts.py). 0: timeouts left alone.
    library_globals: how code of installed packages (site-packages) that the program calls while traced is treated
        (code that specengine or torch call, and code run by an import, is never the program's).
        "guarded" (the default, sound): as the user's own code: the module globals it reads are guarded and its
        side effects are the program's. "constant": as a library: its module globals are constants of the trace
        (a change to one, such as a flag the user sets between calls, is not seen: set them before the first call)
        and what it does runs while tracing only (`SPECENGINE_LIBRARY_GLOBALS`).
    """

    recompile_limit: int = 8
    on_recompile_limit: str = "warn"
    solver_rlimit: int = 2_000_000
    solver_timeout_ms: int = 30_000
    cache_dir: str | None = field(default_factory=lambda: os.environ.get("SPECENGINE_CACHE_DIR") or None)
    cache_max_bytes: int = field(default_factory=lambda: int(os.environ.get("SPECENGINE_CACHE_MAX_BYTES") or 1 << 30))
    cache_key: bytes | str | None = None
    distributed_timeout_factor: float = 2.0
    library_globals: str = field(default_factory=lambda: os.environ.get("SPECENGINE_LIBRARY_GLOBALS") or "guarded")


config = Config()
