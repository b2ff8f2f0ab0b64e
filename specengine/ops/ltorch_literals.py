"""`torch.tensor(data)` with literal data (numbers, bools, symbolic ints, nested lists): created in the computation.

Without a rule it would run once while tracing and become a tensor closed over from outside (transformers' cache
layers start from `torch.tensor([])`). Data that holds tensors is refused; data without any traced value that is
not a literal (a numpy array) still runs eagerly, as before.
"""

from __future__ import annotations

from typing import Any

import torch

from specengine.ir import context
from specengine.ir.proxies import NumberProxy, TensorProxy, unsupported
from specengine.ops import outside, prims
from specengine.ops.ltorch_creation import _default_float, _device, _finish
from specengine.ops.number_tensors import is_int as _is_int
from specengine.ops.registry import has_proxy, torchop

__all__ = ["tensor"]

_SCALARS = (bool, int, float, complex, NumberProxy)


def _is_literal(data: Any) -> bool:
    if isinstance(data, (list, tuple)):
        return all(_is_literal(x) for x in data)
    return isinstance(data, _SCALARS) and not isinstance(data, TensorProxy) and type(data).__module__ != "numpy"


def _hints(data: Any) -> Any:
    if isinstance(data, (list, tuple)):
        return [_hints(x) for x in data]
    return data.python_type(data.hint) if isinstance(data, NumberProxy) else data


def _tensor_impl(data: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.tensor(data, dtype=dtype, device=device)


@prims.prim("tensor_literal", impl=_tensor_impl)
def tensor_literal(data: Any, dtype: torch.dtype, device: torch.device) -> TensorProxy:
    """A tensor holding `data` (nested lists of numbers; symbolic ints are read at run time)."""
    shape = torch.tensor(_hints(data), dtype=dtype, device="meta").shape
    return prims.new_tensor(tuple(shape), dtype, [], device)


# kept: a literal of symbolic numbers (`torch.tensor([n, 2])`) stays symbolic; a constant factory pins them
@torchop(torch.tensor, name="tensor", always_traced=True)
def tensor(data: Any, *, dtype: torch.dtype | None = None, device: Any = None, requires_grad: bool = False,
           pin_memory: bool = False) -> Any:  # fmt: skip
    if not _is_literal(data):
        if has_proxy(data):
            raise unsupported("torch.tensor of traced tensors", "use torch.stack, or x.clone().detach()")
        kwargs = {"dtype": dtype, "device": device, "requires_grad": requires_grad, "pin_memory": pin_memory}
        return outside.constant_factory(torch.tensor, (data,), kwargs)  # (a numpy scalar keeps its dtype)
    if pin_memory:
        raise unsupported("torch.tensor(pin_memory=True)", "pin the tensor outside the compiled function")
    inferred = torch.tensor(_hints(data), dtype=dtype, device="meta").dtype
    if dtype is None and inferred in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        inferred = _default_float() if not any(isinstance(x, complex) for x in _flat(data)) else inferred
    out = _finish(tensor_literal(_as_list(data), inferred, _device(device)), requires_grad)
    _note_values(out, data, inferred)
    return out


def _note_values(out: Any, data: Any, dtype: torch.dtype) -> None:
    """The values of an int64 literal of ints (`torch.tensor(x.shape)`), for `.tolist()` and `.item()` of it."""
    flat = data if isinstance(data, (list, tuple)) else None
    values = flat if flat is not None else [data]
    if dtype is torch.int64 and isinstance(out, TensorProxy) and all(_is_int(v) for v in values):
        state = context.require()
        state.literals[id(out)] = (out, len(state.bsyms), list(values) if flat is not None else data)


def _flat(data: Any) -> list:
    return [y for x in data for y in _flat(x)] if isinstance(data, (list, tuple)) else [data]


def _as_list(data: Any) -> Any:
    return [_as_list(x) for x in data] if isinstance(data, (list, tuple)) else data
