"""Proxies kept from an earlier trace.

A proxy belongs to the trace that made it (`Proxy.epoch`). A cache that outlives the call (a `functools.lru_cache`
that `mutations.caches_cleared` cannot find, on a nested function; a memo on an object that no mutation check
walks) can hand a later trace a proxy of a trace that has ended: its names mean other values there, or nothing
(an `UnboundLocalError` in the computation, or a wrong result where a name is reused). Such a proxy reaching an op,
a decision or the output raises `UnsupportedOpError` instead.
"""

from __future__ import annotations

from typing import Any

from specengine.trace.proxies import Proxy, unsupported


def _stale(x: Any, epoch: int) -> bool:
    return isinstance(x, Proxy) and x.epoch != epoch and x.epoch != 0


def _refuse() -> Exception:
    return unsupported("a traced value kept from an earlier compile",
                       "a cache that outlives the call (functools.lru_cache on a nested function, a memo dict on an "
                       "object) stored a value computed while tracing; do not cache values computed from tensors "
                       "or sizes across calls, or call the cached helper outside the compiled function")  # fmt: skip


def check_current(state: Any, args: tuple, kwargs: dict) -> None:
    """Refuse a proxy of an earlier trace among an op's arguments (and in lists and tuples among them)."""
    epoch = state.epoch
    for x in (*args, *kwargs.values()):
        if _stale(x, epoch):
            raise _refuse()
        if type(x) in (list, tuple):
            for y in x:
                if _stale(y, epoch):
                    raise _refuse()


def check_value(state: Any, x: Any) -> None:
    """Refuse `x` (a decision on it, its value, the output) if it is a proxy of an earlier trace."""
    if state is not None and _stale(x, state.epoch):
        raise _refuse()
