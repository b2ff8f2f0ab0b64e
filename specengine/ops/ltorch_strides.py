"""Strides of traced tensors, read from the real tensor at run time, and `as_strided` (Longformer's chunking).

A traced tensor carries no strides: the real op decides its layout on every call (an executor may too). So
`x.stride()` of a tensor whose strides the trace does not know is one unbacked int per dim (`ir/unbacked.py`),
`0 <= u`, bound by the computation from the real tensor (`u3 = prims.stride_of(t5, 1, 'stride(1) at f.py:7')`):
exactly what eager reads, for every call. Arithmetic on them stays symbolic (`stride[1] // 2`); a branch on one is
a branch on data (speculated); `as_strided(size, stride, offset)` passes them to the real op, and its output's dims
are `size` (backed or not), as torch's rule says. Strides of a tensor made here from an input of known layout are
not derived: reading them costs one int read per dim at run time, no guard.
"""

from __future__ import annotations

from typing import Any

import torch

from specengine.errors import UnsupportedOpError
from specengine.ir.proxies import NumberProxy, TensorProxy, value_expr
from specengine.ops import prims
from specengine.ops.generic import generic_method
from specengine.ops.layouts import contiguity_fact
from specengine.ops.number_tensors import as_number, read_symbol
from specengine.ops.registry import torchop
from specengine.ops.utils import canonical_dim, shape_arg

__all__ = ["stride", "as_strided"]


@prims.prim("stride_of", impl=lambda t, dim, what: t.stride(dim), tags=("unbacked",))
def stride_of(t: TensorProxy, dim: int, what: str) -> NumberProxy:
    """`t.stride(dim)` of the real tensor, the value of an unbacked symbol (emitted by `stride` below)."""
    raise AssertionError("prims.stride_of is emitted by the tracer, never called while tracing")


def _read_stride(t: TensorProxy, dim: int) -> NumberProxy:
    return read_symbol(stride_of, (t, dim), f"stride({dim}) of {t.name}", int, 0, None, "stride", before=False)


def stride(self: TensorProxy, dim: Any = None) -> Any:
    """Constant strides where the generic path knows them (static sizes); else read at run time (module docstring)."""
    try:
        return generic_method("stride").__get__(self)(*(() if dim is None else (dim,)))
    except UnsupportedOpError:  # the generic path has no constant answer: read them at run time
        pass
    if dim is not None:
        return _read_stride(self, canonical_dim(dim, self.ndim))
    return tuple(_read_stride(self, d) for d in range(self.ndim))


def _as_strided_impl(a: torch.Tensor, size: Any, stride: Any, storage_offset: Any = None) -> torch.Tensor:
    return torch.as_strided(a, size, stride, storage_offset)


@prims.prim("as_strided", impl=_as_strided_impl)
def as_strided_prim(a: TensorProxy, size: tuple, stride: tuple, storage_offset: Any = None) -> TensorProxy:
    """A view of `a`'s storage with the given sizes and strides (the real op checks the bounds)."""
    return prims.new_tensor(tuple(size), a.dtype, [], a.device)


# kept: a view whose strides are read at run time; torch's kernel checks the storage bounds on every call
@torchop(torch.as_strided, torch.Tensor.as_strided, name="as_strided", methods=("as_strided",))
def as_strided(a: TensorProxy, size: Any, stride: Any, storage_offset: Any = None) -> TensorProxy:
    sizes, strides = (tuple(as_number(s, "as_strided") for s in shape_arg((v,))) for v in (size, stride))
    if len(sizes) != len(strides):
        raise RuntimeError("mismatch in length of strides and shape")
    for s in (*sizes, *strides):
        if not isinstance(s, (int, NumberProxy)) or isinstance(s, bool):
            raise TypeError(f"as_strided(): argument 'size' must be tuple of ints, but found element of type "
                            f"{type(s).__name__}")  # fmt: skip
    out = as_strided_prim(a, tuple(value_expr(s) for s in sizes), tuple(value_expr(s) for s in strides),
                          None if storage_offset is None else value_expr(storage_offset))  # fmt: skip
    return out


@prims.prim("is_contiguous_of", impl=lambda t, memory_format, what: t.is_contiguous(memory_format=memory_format),
            tags=("unbacked",))  # fmt: skip
def is_contiguous_of(t: TensorProxy, memory_format: Any, what: str) -> NumberProxy:
    """`t.is_contiguous(memory_format)` of the real tensor, an unbacked bool (emitted by `is_contiguous` below)."""
    raise AssertionError("prims.is_contiguous_of is emitted by the tracer, never called while tracing")


def is_contiguous(self: TensorProxy, memory_format: Any = torch.contiguous_format) -> Any:
    """A guarded fact for an input (ops/layouts.py); for a computed tensor, read from the real tensor at run time:
    an unbacked bool (`if x.is_contiguous():` is a branch on it, speculated)."""
    fact = contiguity_fact(self, memory_format)
    if fact is not None:
        return fact
    what = f"is_contiguous() of {self.name}"
    return read_symbol(is_contiguous_of, (self, memory_format), what, int, 0, 1, "is_contiguous", False, bool)


TensorProxy.stride = stride
TensorProxy.is_contiguous = is_contiguous
