"""The calls a computation makes that torch has no function for, printed as `tex.<name>` in traces: reflected
operators, a tensor property read by name, and the torch state changes a traced function makes."""

from __future__ import annotations

import sys
from typing import Any

import torch

from specengine.ir.trace import print_module


def rdiv(a: Any, b: Any) -> Any:
    """`b / a` (Python's reflected true division)."""
    return b / a


def rpow(a: Any, b: Any) -> Any:
    """`b ** a` (Python's reflected power)."""
    return b**a


def rmatmul(a: Any, b: Any) -> Any:
    """`b @ a` (Python's reflected matmul)."""
    return b @ a


def tensor_attr(a: Any, name: str) -> Any:
    """`a.<name>`: a tensor property without a rule (`x.mH`), run by the generic op path."""
    return getattr(a, name)


# Torch state the traced function changed: the computation replays each change where the function made it. The
# trace records each as `tex.set_...(*key, *new, entry=old)`: on an exception the computation sets `entry` again.


def set_grad_enabled(enabled: bool, entry: bool | None = None) -> None:
    """Grad mode, as `torch.no_grad()`, `enable_grad()` and `set_grad_enabled()` set it."""
    torch._C._set_grad_enabled(enabled)


def set_autocast(device: str, enabled: bool, dtype: torch.dtype, entry: tuple | None = None) -> None:
    """Autocast state of one device type, as `torch.autocast` sets it; the cast cache is cleared where the last
    autocast region ends, as `torch.autocast.__exit__` does."""
    before = torch._C._is_any_autocast_enabled()
    torch.set_autocast_enabled(device, enabled)
    torch.set_autocast_dtype(device, dtype)
    after = torch._C._is_any_autocast_enabled()
    if after and not before:
        torch.autocast_increment_nesting()
    elif before and not after and torch.autocast_decrement_nesting() == 0:
        torch.clear_autocast_cache()


for _setter in (set_grad_enabled, set_autocast):
    _setter.torch_state = True  # a grad-mode or autocast change: set back to its entry value on an exception


print_module("tex", sys.modules[__name__])
