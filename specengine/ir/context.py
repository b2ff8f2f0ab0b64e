"""The recording context: which trace, if any, the ops called now record into (one per thread and task)."""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from typing import Any, Iterator

from specengine.errors import UnsupportedOpError, observe_refusals

_current: contextvars.ContextVar[Any] = contextvars.ContextVar("specengine_trace", default=None)


def current() -> Any:
    """The active tracing state (an `ir.recording.TraceState`), or None outside tracing."""
    return _current.get()


def require() -> Any:
    state = _current.get()
    if state is None:
        raise RuntimeError("specengine: no active trace")
    return state


@contextmanager
def tracing(state: Any) -> Iterator[Any]:
    """Make `state` the active tracing state inside the block."""
    token = _current.set(state)
    try:
        yield state
    finally:
        _current.reset(token)


def _note_refusal(error: UnsupportedOpError) -> None:
    state = _current.get()
    if state is not None:
        state.note_refusal(error)


observe_refusals(_note_refusal)
