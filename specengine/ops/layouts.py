"""Layout and memory format: static facts about the inputs, decided in the prologue.

- `x.layout` is `torch.strided` for every traced tensor: inputs of another layout (sparse, mkldnn) are refused
  when a call is described, and the prologue checks each input's layout.
- `x.is_contiguous(memory_format=...)` of an input (or of a tensor closed over from outside) is the value seen at
  compile time, and the prologue checks it on every call (a guarded fact); of a computed tensor it is read from
  the real tensor at run time, as its strides are (ops/ltorch_strides.py). (`.contiguous(memory_format=...)` and `.to(memory_format=...)` are
  torch-level ops that the torch executor runs as they are, so their outputs have eager's strides.)
"""

from __future__ import annotations

from typing import Any

import torch

from specengine.ir import context
from specengine.ir.proxies import TensorProxy

_FORMATS = (torch.contiguous_format, torch.channels_last, torch.channels_last_3d)


def example_layout(t: torch.Tensor) -> tuple | None:
    """(storage key, storage offset, strides, storage bytes, sizes) of a tensor, or None: where its elements are,
    for the overlap checks of in-place ops made on the example (`overlap.py`). Plain data: no tensor is kept."""
    try:
        storage = t.untyped_storage()
        return (t.device, storage._cdata), t.storage_offset(), tuple(t.stride()), storage.nbytes(), tuple(t.shape)
    except Exception:  # noqa: BLE001 - a tensor without a plain storage: its layout is unknown
        return None


def formats_of(t: torch.Tensor) -> tuple[tuple[torch.memory_format, bool | str], ...]:
    """(memory format, whether `t` is contiguous in it) for the formats a program may ask about; where torch
    cannot say (a tensor batched by `vmap`, for formats other than contiguous), the message of its RuntimeError."""
    return tuple((mf, _contiguous_in(t, mf)) for mf in _FORMATS)


def _contiguous_in(t: torch.Tensor, mf: torch.memory_format) -> bool | str:
    try:
        return bool(t.is_contiguous(memory_format=mf))
    except RuntimeError as e:  # (raised again where the program asks: contiguity_fact)
        return str(e)


def _layout(self: TensorProxy) -> torch.layout:
    return torch.strided


def contiguity_fact(self: TensorProxy, memory_format: Any = torch.contiguous_format) -> bool | None:
    """`x.is_contiguous(memory_format)` of an input or a closed-over tensor: a guarded fact (recorded for the
    prologue); None for a computed tensor (ops/ltorch_strides.py reads it at run time)."""
    if not isinstance(memory_format, torch.memory_format):
        raise TypeError(f"is_contiguous(): argument 'memory_format' must be torch.memory_format, not "
                        f"{type(memory_format).__name__}")  # fmt: skip
    state = context.require()
    known = dict(state.facts.formats.get(self.name, ()))
    for proxy, t, _ in state.facts.lifted:
        if proxy is self:
            known = dict(formats_of(t))
    if not known:
        return None
    value = known.get(memory_format, False)  # (preserve_format: eager says False too)
    if isinstance(value, str):
        raise RuntimeError(value)  # eager's own error for this tensor (see formats_of)
    if (self.name, memory_format, value) not in state.facts.layout_facts:
        state.facts.layout_facts.append((self.name, memory_format, value))
    return value


TensorProxy.layout = property(_layout)
# static facts: such inputs are refused when a call is described, and the prologue checks the layout
for _flag in ("is_nested", "is_sparse", "is_sparse_csr", "is_quantized", "is_mkldnn"):
    setattr(TensorProxy, _flag, property(lambda self: False))
