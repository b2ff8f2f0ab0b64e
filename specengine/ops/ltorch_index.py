"""Advanced indexing with integer tensors and no guards on broadcasting: `mask[batch_idx, kv_idx]`, `w[ids]`.

The index tensors broadcast as elementwise ops do (`ops.utils.broadcast_shapes`: `b if a == 1 else a`, valid for
every size), so a batch of 1 needs no entry of its own. Keys of integer tensors, full slices (`:`), None and `...`
take this rule; any other key (ints or partial slices mixed with tensors, a boolean mask mixed with other indices)
goes through torch's meta kernel, or its fake rule where the output size depends on a mask (ops/fake_rules.py).
"""

from __future__ import annotations

from typing import Any

import torch

from specengine.ir.proxies import TensorProxy
from specengine.ops import prims
from specengine.ops.generic import generic_call
from specengine.ops.ltorch_data_dependent import masked_index
from specengine.ops.utils import broadcast_shapes

_INTEGER = (torch.int64, torch.int32, torch.int16, torch.int8)  # (uint8 and bool index as masks)


def mask_key(key: Any) -> tuple | None:
    """(mask, number of full slices after it) for `x[mask]`, `x[mask, :]`, `x[mask, ...]`; else None."""
    key = key if isinstance(key, tuple) else (key,)
    if not key or not isinstance(key[0], TensorProxy) or key[0].dtype != torch.bool:
        return None
    rest = key[1:]
    if rest and rest[-1] is Ellipsis:
        rest = rest[:-1]
    return (key[0], len(rest)) if all(_full_slice(k) for k in rest) else None


def _getitem(a: torch.Tensor, key: Any) -> torch.Tensor:
    return a[key]


def _full_slice(k: Any) -> bool:
    return isinstance(k, slice) and k.start is None and k.stop is None and k.step is None


def simple_key(a: TensorProxy, key: Any) -> tuple | None:
    """The key with `...` expanded into full slices, where this rule applies; else None."""
    key = key if isinstance(key, tuple) else (key,)
    tensors = [k for k in key if isinstance(k, TensorProxy)]
    if not tensors or any(k.dtype not in _INTEGER for k in tensors):
        return None
    if not all(isinstance(k, TensorProxy) or k is None or k is Ellipsis or _full_slice(k) for k in key):
        return None
    if sum(k is Ellipsis for k in key) > 1:
        return None
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
    if consumed > a.ndim:
        raise IndexError(f"too many indices for tensor of dimension {a.ndim}")
    out: list = []
    for k in key:
        out.extend([slice(None)] * (a.ndim - consumed) if k is Ellipsis else [k])
    return tuple(out + [slice(None)] * (a.ndim - sum(1 for k in out if k is not None)))


@prims.prim("index_tensors", impl=_getitem)
def index_tensors(a: TensorProxy, key: tuple) -> TensorProxy:
    """`a[key]` for a key of integer tensors, full slices and None (see simple_key)."""
    index_shape = broadcast_shapes(*(k.dims for k in key if isinstance(k, TensorProxy)))
    positions = [i for i, k in enumerate(key) if isinstance(k, TensorProxy)]
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    dims: list = []
    dim = 0
    for i, k in enumerate(key):
        if k is None:
            dims.append(1)
            continue
        if isinstance(k, TensorProxy):
            if adjacent and i == positions[0]:
                dims.extend(index_shape)
        else:
            dims.append(a.dims[dim])
        dim += 1
    dims = list(index_shape) + dims if not adjacent else dims
    return prims.new_tensor(tuple(dims), a.dtype, [a])


def advanced_getitem(a: TensorProxy, key: Any) -> Any:
    """`a[key]` with integer tensors in the key: this rule, or torch's meta kernel for other keys."""
    mask = mask_key(key)
    if mask is not None:  # x[mask]: its rows are an unbacked size
        return masked_index(a, *mask)
    simple = simple_key(a, key)  # (a mask mixed with other indices takes the generic path: torch's fake rules)
    if simple is not None:
        return index_tensors(a, simple)
    return generic_call(torch.Tensor.__getitem__, (a, key), {})
