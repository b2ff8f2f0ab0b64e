"""How a read of a global setting by the traced function is noted (torch's getters, backend flags, environment
variables), and how specengine's own reads are kept out (`quiet`)."""

from __future__ import annotations

import contextvars
import os
from contextlib import contextmanager
from typing import Any, Iterator

import torch

_SPECENGINE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_quiet: contextvars.ContextVar[bool] = contextvars.ContextVar("specengine_quiet_reads", default=False)


@contextmanager
def quiet() -> Iterator[None]:
    """specengine's own use of torch (fake-tensor runs): the settings torch reads meanwhile are not the function's."""
    token = _quiet.set(True)
    try:
        yield
    finally:
        _quiet.reset(token)


def note_read(state: Any, name: str, args: tuple, value: Any) -> None:
    if name == "get_default_dtype":
        state.facts.read_default_dtype()  # the prologue's default-dtype guard
    elif name == "get_autocast_dtype" or name == "is_inference_mode_enabled":
        state.note_global_read((name, args), _entry_value(state, name, args, value))
    else:
        state.note_global_read((name, args), value)


def _entry_value(state: Any, name: str, args: tuple, value: Any) -> Any:
    """Grad mode and autocast change inside the function (and are replayed): guard their value at the entry."""
    entry = state.entry_torch_state
    if name == "is_inference_mode_enabled":
        return entry[1]
    device = torch.device(args[0]).type if args else "cuda"
    return next((dtype for dev, _, dtype in entry[2] if dev == device), value)
