"""Which code is library code, not the program's.

- By file: the standard library's own files (not site-packages under it), and the packages specengine itself runs
  while tracing (z3). Their module globals are not guarded as the user's.
- By time: code that runs while a module is being imported (`importing()`). A trace may import modules lazily (torch
  imports sympy, mpmath and a few hundred more on the first symbolic-shape query of a process); their import-time
  code reads environment variables, module globals and settings, and writes module attributes, once per process.
  None of it is the program's: it is not guarded, and its side effects are not the program's (they would not happen
  again on a second compile either).

While any thread traces (`install()`, under the effects lock), `importlib._bootstrap._find_and_load` (what every
`import` statement, `importlib.import_module` and `from x import y` call when the module is not yet in
`sys.modules`) is a wrapper that marks the import in this thread only: other threads' imports and the traced
thread outside imports are unaffected.
"""

from __future__ import annotations

import importlib._bootstrap as _bootstrap
import importlib.util
import os
import sysconfig
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from specengine.ir import context

_STDLIB = tuple({os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib")})
SITE = tuple({os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("purelib", "platlib")})


def _package_dirs(*names: str) -> tuple[str, ...]:
    out = []
    for name in names:
        spec = importlib.util.find_spec(name)
        out += [os.path.abspath(d) + os.sep for d in (spec.submodule_search_locations or ())] if spec else []
    return tuple(out)


_ENGINE_DEPENDENCIES = _package_dirs("z3")  # what specengine itself runs while tracing (the decider's z3 queries)


def is_library(filename: str) -> bool:
    """The standard library's own files (their module globals are not guarded), not site-packages under it, and
    the packages specengine itself runs."""
    if filename.startswith("<frozen") or filename.startswith(_ENGINE_DEPENDENCIES):
        return True
    return filename.startswith(_STDLIB) and not filename.startswith(SITE)


class _Local(threading.local):
    depth = 0  # (a class default: `getattr(local, name, default)` of a missing attribute raises inside, ~3 us)


_local = _Local()


def importing_now() -> bool:
    """Whether this thread is importing a module now (its code, whoever wrote it, is library code)."""
    return _local.depth > 0


# called as the outermost import of a thread starts; each returns what to call when it ends (or None)
AROUND_IMPORTS: list[Callable[[], Callable[[], None] | None]] = []


@contextmanager
def importing() -> Iterator[None]:
    """Code that runs inside the block (this thread) runs on behalf of an import, not of the program: it records
    into no trace (`context.current()` is None: its torch calls run eagerly, the settings and environment variables
    it reads are not noted, its `print` prints) and the coverage tracer skips its frames."""
    depth = _local.depth
    _local.depth = depth + 1
    try:
        with context.tracing(None):
            ends = [end for start in AROUND_IMPORTS if (end := start()) is not None] if depth == 0 else []
            try:
                yield
            finally:
                for end in ends:
                    end()
    finally:
        _local.depth = depth


_real_find_and_load = _bootstrap._find_and_load


def _find_and_load(*args: Any, **kwargs: Any) -> Any:
    with importing():
        return _real_find_and_load(*args, **kwargs)


_find_and_load.__wrapped__ = _real_find_and_load  # type: ignore[attr-defined]


def install() -> None:
    """Mark imports (called under the effects lock, when the first trace starts)."""
    if _bootstrap._find_and_load is _real_find_and_load:
        _bootstrap._find_and_load = _find_and_load


def uninstall() -> None:
    if _bootstrap._find_and_load is _find_and_load:  # leave alone what someone else installed
        _bootstrap._find_and_load = _real_find_and_load
