"""Attributes that tracing swaps in while any trace runs (builtins, torch's switches, Tensor methods).

Nested and concurrent traces share one swap per attribute: the first `enter` of a `Patches` installs it, the last
`exit` puts the original back, unless someone else replaced the attribute meanwhile (then it is left as they set
it). `original(owner, name)` is the attribute as it is when no trace runs.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterable, Iterator

_MISSING = object()
_originals: dict[tuple[int, str], tuple[Any, Any]] = {}  # (id(owner), name) -> (owner, value before, or _MISSING)


class Patches:
    """A depth-counted set of swapped attributes (each `(owner, name, new)`), installed and restored as a whole."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._swapped: list[tuple[Any, str, Any, Any]] = []  # (owner, name, value before or _MISSING, new)

    def enter(self, patches: Iterable[tuple[Any, str, Any]] = ()) -> None:
        """Swap in each attribute not swapped already; count one more user."""
        with self._lock:
            for owner, name, new in patches:
                if (id(owner), name) in _originals:
                    continue
                old = vars(owner).get(name, _MISSING)
                _originals[id(owner), name] = (owner, old)
                self._swapped.append((owner, name, old, new))
                setattr(owner, name, new)
            self._depth += 1

    def exit(self) -> None:
        """Count one user less; the last puts every swapped attribute back."""
        with self._lock:
            self._depth -= 1
            if self._depth:
                return
            for owner, name, old, new in reversed(self._swapped):
                del _originals[id(owner), name]
                if vars(owner).get(name, _MISSING) is not new:
                    continue  # someone else replaced it meanwhile
                if old is _MISSING:
                    delattr(owner, name)
                else:
                    setattr(owner, name, old)
            self._swapped.clear()

    @contextmanager
    def applied(self, patches: Iterable[tuple[Any, str, Any]] = ()) -> Iterator[None]:
        """`enter(patches)` for the duration of the block."""
        self.enter(patches)
        try:
            yield
        finally:
            self.exit()

    def swapped(self, name: str) -> bool:
        """Whether an attribute of this name is swapped now."""
        return any(n == name for _, n, _, _ in self._swapped)


def original(owner: Any, name: str) -> Any:
    """`owner.<name>` as it is when no trace runs (None where there is none)."""
    held = _originals.get((id(owner), name))
    if held is None:
        return getattr(owner, name, None)
    if held[1] is not _MISSING:
        return held[1]
    return next((vars(c)[name] for c in getattr(owner, "__mro__", ())[1:] if name in vars(c)), None)  # inherited
