"""The base of every traced value, and the proxies a trace must refuse.

`Proxy` gives a traced value its printing name and the epoch of the trace that made it. A proxy belongs to that
trace: a cache that outlives the call (a `functools.lru_cache` that `mutations.caches_cleared` cannot find, on a
nested function; a memo on an object that no mutation check walks) can hand a later trace a proxy of a trace that
has ended: its names mean other values there, or nothing (an `UnboundLocalError` in the computation, or a wrong
result where a name is reused). Such a proxy reaching an op, a decision or the output raises `UnsupportedOpError`.

`HOOKS` holds what the ops layer installs when it is imported, so that the IR never imports the ops.
"""

from __future__ import annotations

from typing import Any, Callable

from specengine.errors import UnsupportedOpError
from specengine.ir import context
from specengine.provenance import user_frame


class OpsHooks:
    """What the ops layer installs when it is imported, so that proxies never import it back (trace -> ops)."""

    prims: Any = None  # specengine.ops.prims: shape queries and scalar arithmetic
    dispatch_torch: Callable | None = None  # specengine.ops.registry.dispatch_torch: __torch_function__ calls
    fallback_method: Callable[[str], Callable | None] | None = None  # Tensor methods without a rule (generic path)
    writes_fresh: Callable[[Any, Any, int], bool] | None = None  # ops.overlap.writes_fresh: writes no input
    tensor_number: Callable[[Any, str], Any] | None = None  # ops.number_tensors.as_number: a 0-d tensor's int


HOOKS = OpsHooks()


def _prims() -> Any:
    return HOOKS.prims


def unsupported(op: str, hint: str) -> UnsupportedOpError:
    return UnsupportedOpError(op, user_frame(op).where, hint)


class Proxy:
    """A traced value. Names are for printing only; identity is the object. `epoch` is that of the trace that made
    it (0: made outside tracing): a proxy that a cache kept from an earlier trace is refused (below)."""

    __slots__ = ("name", "epoch")
    _ARITY = 1  # the engine's own constructor arguments

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) + len(kwargs) < cls._ARITY:  # library code that rebuilds a value by its type: `type(x)(v)`
            raise unsupported(f"calling type(x) of a traced value ({cls.__name__})",
                              "convert it with int(), float() or torch.as_tensor() first, or compute this outside "
                              "the compiled function")  # fmt: skip
        self = object.__new__(cls)
        state = context.current()
        # (object.__setattr__: TensorProxy's own __setattr__ is for the user's writes)
        object.__setattr__(self, "epoch", 0 if state is None else state.epoch)
        return self


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
