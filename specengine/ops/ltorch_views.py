"""Views and basic indexing (view, reshape, permute, transpose, (un)squeeze, expand, flatten, x[...]) as
decompositions into prims; integer-tensor (advanced) indexing takes the generic path."""

from __future__ import annotations

import math
import operator
from typing import Any

import torch

from specengine.constraints import expr as E
from specengine.ir import context
from specengine.ir.proxies import NumberProxy, TensorProxy, unsupported, value_expr
from specengine.ops import prims
from specengine.ops.ltorch_index import advanced_getitem
from specengine.ops.number_tensors import as_number
from specengine.ops.registry import torchop
from specengine.ops.utils import canonical_dim, decide, example, fmt_shape, shape_arg

__all__ = ["view", "reshape", "permute", "transpose", "unsqueeze", "squeeze", "expand", "flatten", "getitem"]


def _numel(dims: tuple) -> E.Expr:
    return math.prod(dims, start=E.const(1))


def _size_exprs(sizes: tuple, op: str) -> list[E.Expr]:
    out = []
    for s in sizes:
        s = as_number(s, op)  # a 0-d integer tensor: its int (known, or read at run time), as eager's int(t)
        if isinstance(s, TensorProxy) and s.ndim == 0 and not s.dtype.is_floating_point:
            raise unsupported(f"{op}() with a tensor as a size", "its value is tensor data (eager reads it with "
                              "int()); compute the size with Python numbers (`a // b` for torch.div(a, b, "
                              "rounding_mode='trunc'))")  # fmt: skip
        if not isinstance(s, (int, NumberProxy)) or isinstance(s, bool):
            raise TypeError(f"{op}(): argument 'size' must be tuple of ints, but found element of type "
                            f"{type(s).__name__}")  # fmt: skip
        out.append(value_expr(s))
    return out


def _is_minus_one(e: E.Expr, op: str) -> bool:
    """Whether a size is -1 (infer or keep the size); a symbolic size decides it."""
    if e.is_const:
        return e.value == -1
    if context.require().decider.unbacked.mentions(e):  # a size from data (`x.reshape(t.tolist())`): not -1, as
        return not decide(E.ne(e, -1), op, "a size from data is not -1")  # torch assumes (asserted at run time)
    return decide(E.eq(e, -1), op, "is the size -1")


def _infer_shape(a: TensorProxy, sizes: tuple, op: str) -> tuple:
    """torch's infer_size: resolve one -1 and check numel, with symbolic sizes."""
    exprs = _size_exprs(sizes, op)
    numel = _numel(a.dims)

    def wanted() -> str:  # for error messages only
        return "[" + ", ".join(str(example(e)) for e in exprs) + "]"

    unknown = [i for i, e in enumerate(exprs) if _is_minus_one(e, op)]
    if len(unknown) > 1:
        raise RuntimeError("only one dimension can be inferred")
    for i, e in enumerate(exprs):
        if i not in unknown and not decide(E.ge(e, 0), op, "sizes must be non-negative"):
            raise RuntimeError(f"invalid shape dimension {example(e)}")
    if not unknown:
        if not decide(E.eq(numel, _numel(tuple(exprs))), op, "numel must be preserved"):
            raise RuntimeError(f"shape '{wanted()}' is invalid for input of size {example(numel)}")
        return tuple(exprs)
    known = _numel(tuple(e for i, e in enumerate(exprs) if i not in unknown))
    if not decide(E.ne(known, 0), op, "-1 is ambiguous when the other sizes multiply to 0"):
        raise RuntimeError(f"cannot reshape tensor of {example(numel)} elements into shape {wanted()} because the "
                           "unspecified dimension size -1 can be any value and is ambiguous")  # fmt: skip
    quotient = E.exact_quotient(numel, known)  # (known != 0 decided above) `b*h*t // (h*t)` is `b`: no guard
    if quotient is None and not decide(E.eq(E.mod(numel, known), 0), op, "-1 needs numel divisible by the other sizes"):
        raise RuntimeError(f"shape '{wanted()}' is invalid for input of size {example(numel)}")
    exprs[unknown[0]] = E.floordiv(numel, known) if quotient is None else quotient
    return tuple(exprs)


# kept: reshape's divisibility guard instead of torch's per-size decisions
@torchop(torch.Tensor.view, name="view", methods=("view",))
def view(a: TensorProxy, *shape: Any) -> TensorProxy:
    if len(shape) == 1 and isinstance(shape[0], torch.dtype):
        raise unsupported("Tensor.view(dtype)", "reinterpreting bits is not traced yet; use .to(dtype)")
    _check_viewable(a)
    return prims.reshape(a, _infer_shape(a, shape_arg(shape), "view"))


def _check_viewable(a: TensorProxy) -> None:
    """Whether a view is possible depends on strides, which are not traced: the torch op raises at run time where it
    is not. Where a handler in the function observes that, a contiguous input (the prologue checks its contiguity)
    can be viewed whatever its sizes; anything else is refused."""
    state = context.require()
    if not state.may_raise():
        return
    if not state.facts.contiguity.get(a.name, False):
        raise unsupported("Tensor.view inside try", "whether the view is possible depends on strides, which "
                          "specengine does not trace; use reshape, or call .contiguous() before the view")  # fmt: skip
    state.facts.contiguous.add(a.name)


# kept: reshape's divisibility guard instead of torch's per-size decisions
@torchop(torch.Tensor.reshape, torch.reshape, name="reshape", methods=("reshape",))
def reshape(a: TensorProxy, *shape: Any) -> TensorProxy:
    return prims.reshape(a, _infer_shape(a, shape_arg(shape), "reshape"))


# kept: a prims.permute, which fusing executors take
@torchop(torch.Tensor.permute, torch.permute, name="permute", methods=("permute",))
def permute(a: TensorProxy, *dims: Any) -> TensorProxy:
    dims = tuple(canonical_dim(d, a.ndim) for d in shape_arg(dims))
    if len(dims) != a.ndim:
        raise RuntimeError(
            "permute(sparse_coo): number of dimensions in the tensor input does not match the length of "
            f"the desired ordering of dimensions i.e. input.dim() = {a.ndim} is not equal to len(dims) = {len(dims)}"
        )
    if len(set(dims)) != len(dims):
        raise RuntimeError("permute(): duplicate dims are not allowed.")
    return prims.permute(a, dims) if a.ndim else a


# kept: a prims.permute, which fusing executors take
@torchop(torch.transpose, torch.Tensor.transpose, name="transpose", methods=("transpose",))
def transpose(a: TensorProxy, dim0: int, dim1: int) -> TensorProxy:
    d0, d1 = canonical_dim(dim0, a.ndim), canonical_dim(dim1, a.ndim)
    if a.ndim < 2 or d0 == d1:
        return a
    perm = list(range(a.ndim))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return prims.permute(a, tuple(perm))


TensorProxy.T = property(lambda self: permute(self, tuple(reversed(range(self.ndim)))))
TensorProxy.mT = property(lambda self: transpose(self, -2, -1))


# kept: a prims.broadcast_in_dim, which fusing executors take
@torchop(torch.unsqueeze, torch.Tensor.unsqueeze, name="unsqueeze", methods=("unsqueeze",))
def unsqueeze(a: TensorProxy, dim: int) -> TensorProxy:
    d = canonical_dim(dim, a.ndim + 1)
    dims = a.dims[:d] + (E.const(1),) + a.dims[d:]
    return prims.broadcast_in_dim(a, dims, tuple(i if i < d else i + 1 for i in range(a.ndim)))


# kept: a prims.squeeze, which fusing executors take (its size-1 dims are needs-constant facts)
@torchop(torch.squeeze, torch.Tensor.squeeze, name="squeeze", methods=("squeeze",))
def squeeze(a: TensorProxy, dim: Any = None) -> TensorProxy:
    if dim is None:
        candidates = tuple(range(a.ndim))
    else:
        candidates = tuple(canonical_dim(d, a.ndim) for d in (dim if isinstance(dim, (tuple, list)) else (dim,)))
    dims = tuple(i for i in candidates if a.ndim and decide(E.eq(a.dims[i], 1), "squeeze", f"is dim {i} 1"))
    return prims.squeeze(a, dims) if dims else a


# kept: fewer guards than torch's kernel (15 against 21 over OpInfo's samples)
@torchop(torch.Tensor.expand, name="expand", methods=("expand",))
def expand(a: TensorProxy, *sizes: Any, implicit: bool = False) -> TensorProxy:
    exprs = _size_exprs(shape_arg(sizes), "expand")
    if len(exprs) < a.ndim:
        raise RuntimeError(
            f"expand({a.type_string()}, size={fmt_shape(exprs)}): the number of sizes provided "
            f"({len(exprs)}) must be greater or equal to the number of dimensions in the tensor ({a.ndim})"
        )
    offset = len(exprs) - a.ndim
    out = list(exprs)
    for i, d in enumerate(a.dims):
        want = exprs[offset + i]
        if want is d or _is_minus_one(want, "expand"):
            out[offset + i] = d
        elif not decide(E.or_(E.eq(d, want), E.eq(d, 1)), "expand", f"dim {i} matches the size or is 1"):
            raise RuntimeError(
                f"The expanded size of the tensor ({example(want)}) must match the existing size ({example(d)}) at "
                f"non-singleton dimension {offset + i}.  Target sizes: {fmt_shape(exprs)}.  "
                f"Tensor sizes: {fmt_shape(a.dims)}"
            )
    for i, e in enumerate(out):
        if not decide(E.ge(e, 0), "expand", "sizes must be non-negative"):
            where = f"in a leading, non-existing dimension {i}" if i < offset else f"at dimension {i}"
            raise RuntimeError(f"The expanded size of the tensor ({example(e)}) isn't allowed {where}")
    return prims.broadcast_in_dim(a, tuple(out), tuple(range(offset, len(out))))


# kept: fewer guards than torch's kernel (4 against 9 over OpInfo's samples); a reshape prim
@torchop(torch.flatten, torch.Tensor.flatten, name="flatten", methods=("flatten",))
def flatten(a: TensorProxy, start_dim: int = 0, end_dim: int = -1) -> TensorProxy:
    if a.ndim == 0:
        return prims.reshape(a, (E.const(1),))
    s, e = canonical_dim(start_dim, a.ndim), canonical_dim(end_dim, a.ndim)
    if s > e:
        raise RuntimeError("flatten() has invalid args: start_dim cannot come after end_dim")
    if s == e:
        return a
    return prims.reshape(a, a.dims[:s] + (_numel(a.dims[s : e + 1]),) + a.dims[e + 1 :])


# Indexing with ints, slices (symbolic bounds allowed), None and Ellipsis.


def advanced_index(key: Any) -> bool:
    """Whether an index key holds integer tensors or lists (torch's advanced indexing: a copy, not a view)."""
    for k in key if isinstance(key, tuple) else (key,):
        if isinstance(k, torch.Tensor) and not isinstance(k, TensorProxy) and k.dtype in (torch.bool, torch.uint8):
            raise unsupported("boolean mask indexing x[mask] with a mask closed over from outside",
                              "pass the mask as an argument")  # fmt: skip
    return any(isinstance(k, (TensorProxy, torch.Tensor, list)) for k in (key if isinstance(key, tuple) else (key,)))


def _index_key(a: TensorProxy, key: Any) -> list:
    key = list(key) if isinstance(key, tuple) else [key]
    for k in key:
        if isinstance(k, (TensorProxy, torch.Tensor)) and k.dtype in (torch.bool, torch.uint8):
            raise unsupported("boolean mask indexing x[mask]", "its output shape depends on the mask's values; "
                              "keep the shape with torch.where(mask, x, 0), or index outside the compiled function")  # fmt: skip
        if isinstance(k, bool):
            raise unsupported("indexing with a bool", "index with ints, slices, None, ... or integer tensors")
    specified = sum(1 for k in key if k is not None and k is not Ellipsis)
    if specified > a.ndim:
        raise IndexError(f"too many indices for tensor of dimension {a.ndim}")
    ellipses = [i for i, k in enumerate(key) if k is Ellipsis]
    rest = [slice(None)] * (a.ndim - specified)
    if not ellipses:
        return key + rest
    # torch expands the first Ellipsis over the unindexed dims; later ones stand for no dims
    first = ellipses[0]
    return key[:first] + rest + [k for k in key[first + 1 :] if k is not Ellipsis]


def _clamp_bound(b: Any, n: E.Expr, default: E.Expr) -> E.Expr:
    """Python slice bound semantics: negative counts from the end, then clamp to [0, n]."""
    if b is None:
        return default
    e = value_expr(b)
    if decide(E.ge(e, 0), "getitem", "is the slice bound non-negative"):
        return E.minimum(e, n)
    return E.maximum(E.add(e, n), 0)


def _int_index(i: Any, n: E.Expr, dim: int) -> E.Expr:
    e = value_expr(i)
    if not (decide(E.lt(e, n), "getitem", "index in range") and decide(E.le(E.neg(e), n), "getitem", "index in range")):
        raise IndexError(f"index {example(e)} is out of bounds for dimension {dim} with size {example(n)}")
    return e if decide(E.ge(e, 0), "getitem", "is the index non-negative") else E.add(e, n)


# kept: an operator (`x[i]`): dunders have no generic fallback; slice prims that fusing executors take
@torchop(operator.getitem, torch.Tensor.__getitem__, name="getitem", methods=("__getitem__",))
def getitem(a: TensorProxy, key: Any) -> TensorProxy:
    if advanced_index(key):  # integer tensors index: ltorch_index (no broadcast guards), else torch's meta kernel
        return advanced_getitem(a, key)
    starts, ends, steps, drop, new_axes, out_pos, dim = [], [], [], [], [], 0, 0
    for k in _index_key(a, key):
        if k is None:
            new_axes.append(out_pos)
            out_pos += 1
            continue
        n = a.dims[dim]
        if isinstance(k, slice):
            step = 1 if k.step is None else int(k.step)
            if step <= 0:
                raise ValueError("step must be greater than zero")
            start = _clamp_bound(k.start, n, E.const(0))
            starts.append(start)
            stop = _clamp_bound(k.stop, n, n)  # in [0, n]: an end no less than a start of 0 needs no max
            ends.append(stop if start is E.const(0) else E.maximum(stop, start))
            steps.append(step)
            out_pos += 1
        else:
            start = _int_index(k, n, dim)
            starts.append(start), ends.append(E.add(start, 1)), steps.append(1), drop.append(dim)
        dim += 1
    out = a
    if any(
        not (s.is_const and s.value == 0) or e is not d or k != 1 for s, e, k, d in zip(starts, ends, steps, a.dims)
    ):
        out = prims.slice_prim(a, tuple(starts), tuple(ends), tuple(steps))
    if drop:
        out = prims.squeeze(out, tuple(drop))
    if new_axes:
        kept = [i for i in range(len(out.dims) + len(new_axes)) if i not in new_axes]
        dims = [E.const(1)] * (len(out.dims) + len(new_axes))
        for j, i in enumerate(kept):
            dims[i] = out.dims[j]
        out = prims.broadcast_in_dim(out, tuple(dims), tuple(kept))
    return out
