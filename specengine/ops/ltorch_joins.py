"""Joining and splitting (cat/stack, split/chunk/unbind, narrow, unflatten, repeat) and the other shape ops with
rules: contiguous, t, expand_as, the gather family (index_select, gather, take_along_dim), tril/triu, roll (flip
takes the generic path: torch's meta kernel decides it with the same guards).

Ops with several outputs need a concrete number of outputs: where it depends on a symbolic size, it is decided
with guards on that size, and the sizes of the pieces stay symbolic. Sizes that must be equal (cat, stack) are
decided, a guard that every valid input meets and that lets later ops treat the sizes as one. Other invalid
arguments raise eager's error from the example values without a guard where the output shape does not depend
on the check: for later inputs the torch op raises the same error at run time (see `broadcast_pair`).
"""

from __future__ import annotations

import functools
import math
import types
from typing import Any

import torch

from specengine.constraints import expr as E
from specengine.ir import context
from specengine.ir.proxies import TensorProxy, is_outside_tensor, unsupported, value_expr
from specengine.ops import prims
from specengine.ops.ltorch_creation import iota
from specengine.ops.ltorch_views import _infer_shape, _size_exprs, expand
from specengine.ops.registry import torchop
from specengine.ops.utils import (
    broadcast_shapes,
    canonical_dim,
    convert,
    decide,
    example,
    expand_to,
    fmt_shape,
    hint,
    meta_call,
    shape_arg,
)

__all__ = [
    "contiguous", "t", "expand_as", "repeat", "unflatten", "split", "chunk", "unbind", "cat", "stack", "narrow",
    "index_select", "gather", "take_along_dim", "tril", "triu", "roll",
]  # fmt: skip


# Prims.


@prims.prim("cat", impl=torch.cat, tags=("shape_op",))
def cat_prim(tensors: list, dim: int) -> TensorProxy:
    """Concatenation along `dim` of tensors of one rank, dtype, and equal sizes in the other dims."""
    first = tensors[0]
    size = functools.reduce(E.add, (x.dims[dim] for x in tensors))
    return prims.new_tensor(first.dims[:dim] + (size,) + first.dims[dim + 1 :], first.dtype, list(tensors))


@prims.prim("gather", impl=torch.gather, tags=("gather",))
def gather_prim(a: TensorProxy, dim: int, index: TensorProxy) -> TensorProxy:
    """`out[..., i, ...] = a[..., index[..., i, ...], ...]` along `dim`; an int index, the output of its shape."""
    return prims.new_tensor(index.dims, a.dtype, [a])


@prims.prim("narrow", impl=torch.narrow, tags=("shape_op",))
def narrow_prim(a: TensorProxy, dim: int, start: Any, length: Any) -> TensorProxy:
    """`length` elements from `start` along `dim` (0 <= start <= start + length <= size): the output dim is
    exactly `length`, where prims.slice's would be max(0, length)."""
    return prims.new_tensor(a.dims[:dim] + (E.as_expr(length),) + a.dims[dim + 1 :], a.dtype, [a])


def _numel(dims: tuple) -> E.Expr:
    return math.prod(dims, start=E.const(1))


def _implied(b: E.Expr) -> bool:
    """Whether `b` holds for every input of this trace (nothing is recorded)."""
    return context.require().decider.implied(b, True) if b.eval(context.require().decider.hints) else False


# Views and copies.


# kept: torch's op, run as it is (no copy recorded); the generic path would record a copy
@torchop(torch.Tensor.contiguous, name="contiguous", methods=("contiguous",))
def contiguous(a: TensorProxy, memory_format: torch.memory_format = torch.contiguous_format) -> TensorProxy:
    """A new name, not `a`: at run time the result is `a` itself or a copy, as the strides decide, so an
    in-place op on `a` afterwards must still write to `a` (rebinding `a`'s name to the copy lost it)."""
    meta_call(torch.Tensor.contiguous, a, memory_format=memory_format)  # rank checks of channels_last
    return prims.new_tensor(a.dims, a.dtype, [a])


# kept: a prims.permute, which fusing executors take
@torchop(torch.t, torch.Tensor.t, name="t", methods=("t",))
def t(a: TensorProxy) -> TensorProxy:
    if a.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {a.ndim}D")
    return prims.permute(a, (1, 0)) if a.ndim == 2 else a


# kept: a prims.broadcast_in_dim, which fusing executors take
@torchop(torch.Tensor.expand_as, name="expand_as", methods=("expand_as",))
def expand_as(a: TensorProxy, other: TensorProxy) -> TensorProxy:
    return expand(a, *other.shape)


# kept: broadcast + reshape prims that fusing executors take
@torchop(torch.Tensor.repeat, name="repeat", methods=("repeat",))
def repeat(a: TensorProxy, *sizes: Any) -> TensorProxy:
    if not sizes:
        raise TypeError('repeat() missing 1 required positional arguments: "repeats"')
    reps = _size_exprs(shape_arg(sizes), "repeat")
    if len(reps) < a.ndim:
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor")
    lead = len(reps) - a.ndim
    dims = (E.const(1),) * lead + a.dims
    out = tuple(E.mul(r, d) for r, d in zip(reps, dims))
    if any(hint(r) < 0 for r in reps):  # no guard: torch raises this at run time too
        negative = next(example(e) for e in out if example(e) < 0)
        raise RuntimeError(f"Trying to create tensor with negative dimension {negative}: {fmt_shape(out)}")
    pairs = tuple(x for r, d in zip(reps, dims) for x in (r, d))
    tiled = prims.broadcast_in_dim(a, pairs, tuple(2 * (lead + i) + 1 for i in range(a.ndim)))
    return prims.reshape(tiled, out)


# kept: fewer guards than torch's kernel (it adds numel != 0 and size checks)
@torchop(torch.unflatten, torch.Tensor.unflatten, name="unflatten", methods=("unflatten",))
def unflatten(a: TensorProxy, dim: int, sizes: Any) -> TensorProxy:
    if a.ndim == 0:
        raise RuntimeError("unflatten got an unexpected error:\nDimension specified as 0 but tensor has no dimensions")
    d = canonical_dim(dim, a.ndim)
    if len(sizes) == 0:
        raise RuntimeError("unflatten: sizes must be non-empty")
    inner = _infer_shape(types.SimpleNamespace(dims=(a.dims[d],)), tuple(sizes), "unflatten")
    return prims.reshape(a, a.dims[:d] + inner + a.dims[d + 1 :])


# split, chunk, unbind: pieces along one dim.


def _pieces(a: TensorProxy, d: int, sizes: list) -> tuple:
    out, offset = [], E.const(0)
    for size in sizes:
        out.append(narrow_prim(a, d, offset, size))
        offset = E.add(offset, size)
    return tuple(out)


def _count(n: E.Expr, per: E.Expr, op: str) -> int:
    """How many pieces of `per` elements (the last one may be smaller) cover `n` > 0; guards keep it so."""
    k = max(-(-example(n) // example(per)), 1)
    decide(E.le(n, E.mul(per, k)), op, "the number of pieces depends on the size")
    if k > 1:
        decide(E.gt(n, E.mul(per, k - 1)), op, "the number of pieces depends on the size")
    return k


def _split_by_size(n: E.Expr, size: Any) -> list:
    s = value_expr(size)
    if not decide(E.ge(s, 0), "split", "is the split size non-negative"):
        raise RuntimeError(f"split expects split_size be non-negative, but got split_size={example(s)}")
    if not decide(E.ne(s, 0), "split", "is the split size 0"):
        if not decide(E.eq(n, 0), "split", "a split size of 0 needs an empty dim"):
            raise RuntimeError(
                f"split_size can only be 0 if dimension size is 0, but got dimension size of {example(n)}"
            )
        return [n]
    k = _count(n, s, "split")
    return [s] * (k - 1) + [E.sub(n, E.mul(s, k - 1))]


def _split_by_sections(n: E.Expr, sections: Any, d: int) -> list:
    sizes = list(_size_exprs(tuple(sections), "split_with_sizes"))
    if any(hint(s) < 0 for s in sizes):  # no guard: the output sizes are the sections; torch raises this too
        raise RuntimeError("split_with_sizes expects split_sizes have only non-negative entries, but got "
                           f"split_sizes={fmt_shape(sizes)}")  # fmt: skip
    if not decide(E.eq(_sum(sizes), n), "split", "split sizes must add up to the size of the dim"):
        raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {example(n)} (input tensor's size "
                           f"at dimension {d}), but got split_sizes={fmt_shape(sizes)}")  # fmt: skip
    return sizes


def _sum(exprs: list) -> E.Expr:
    return functools.reduce(E.add, exprs, E.const(0))


# kept: symbolic piece sizes with guards on the count only (several outputs)
@torchop(torch.split, torch.Tensor.split, name="split", methods=("split",))
def split(a: TensorProxy, split_size_or_sections: Any, dim: int = 0) -> tuple:
    if a.ndim == 0:
        raise RuntimeError("split expects at least a 1-dimensional tensor")
    d = canonical_dim(dim, a.ndim)
    if isinstance(split_size_or_sections, (tuple, list, torch.Size)):
        sizes = _split_by_sections(a.dims[d], split_size_or_sections, d)
    else:
        sizes = _split_by_size(a.dims[d], split_size_or_sections)
    return _pieces(a, d, sizes)


# kept: symbolic piece sizes with guards on the count only (several outputs)
@torchop(torch.chunk, torch.Tensor.chunk, name="chunk", methods=("chunk",))
def chunk(a: TensorProxy, chunks: Any, dim: int = 0) -> tuple:
    """Pieces of ceil(n / chunks) elements: `chunks` of them when n is 0 or large enough, fewer otherwise."""
    if a.ndim == 0:
        raise RuntimeError("chunk expects at least a 1-dimensional tensor")
    c = int(chunks)  # a symbolic count of chunks is pinned: the number of outputs depends on it
    if c <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {c}")
    d = canonical_dim(dim, a.ndim)
    n = a.dims[d]
    size = E.floordiv(E.add(n, c - 1), c)
    k = c if example(n) == 0 else -(-example(n) // example(size))
    if k == c:
        every = E.or_(E.eq(n, 0), E.gt(n, E.mul(size, c - 1)))
        decide(every, "chunk", "are there `chunks` pieces")
    else:  # fewer pieces, none of them empty
        decide(E.gt(n, E.mul(size, k - 1)), "chunk", "the number of pieces depends on the size")
        decide(E.le(n, E.mul(size, k)), "chunk", "the number of pieces depends on the size")
    return _pieces(a, d, [size] * (k - 1) + [E.sub(n, E.mul(size, k - 1))])


# kept: prims (slices) that fusing executors take
@torchop(torch.unbind, torch.Tensor.unbind, name="unbind", methods=("unbind",))
def unbind(a: TensorProxy, dim: int = 0) -> tuple:
    meta_call(torch.unbind, a, dim)
    d = canonical_dim(dim, a.ndim)
    k = context.require().pin(a.dims[d], "unbind", "the number of outputs is the size of the dim")
    return tuple(prims.squeeze(p, (d,)) for p in _pieces(a, d, [E.const(1)] * k))


# cat, stack.


def _tensor_list(tensors: Any, op: str) -> list:
    tensors = list(tensors)
    for x in tensors:
        if is_outside_tensor(x):
            raise unsupported(f"{op} with a tensor closed over from outside", "pass the tensor as an argument")
    return tensors


def _cat_operands(tensors: list) -> list:
    """(position, tensor) of the tensors that take part; mixed ranks skip empty 1-D tensors (legacy rule)."""
    if len({x.ndim for x in tensors}) == 1:
        return list(enumerate(tensors))
    kept = [
        (i, x)
        for i, x in enumerate(tensors)
        if not (x.ndim == 1 and decide(E.eq(x.dims[0], 0), "cat", "legacy rule: empty 1-D tensors are skipped"))
    ]
    ref = kept[0][1]
    for _, x in kept:
        if x.ndim != ref.ndim:
            raise RuntimeError(f"Tensors must have same number of dimensions: got {ref.ndim} and {x.ndim}")
    return kept


# kept: a prims.cat that fusing executors take; empty legacy operands without guards
@torchop(torch.cat, torch.concat, name="cat")
def cat(tensors: Any, dim: int = 0) -> TensorProxy:
    tensors = _tensor_list(tensors, "cat")
    if not tensors:
        raise ValueError("torch.cat(): expected a non-empty list of Tensors")
    for i, x in enumerate(tensors):
        if x.ndim == 0:
            raise RuntimeError(f"zero-dimensional tensor (at position {i}) cannot be concatenated")
    dtype = functools.reduce(torch.promote_types, (x.dtype for x in tensors))
    kept = _cat_operands(tensors)
    ref = kept[0][1]
    d = canonical_dim(dim, ref.ndim)
    for i, x in kept:
        for j, (size, want) in enumerate(zip(x.dims, ref.dims)):
            if j != d and not decide(E.eq(size, want), "cat", "sizes must match except in the cat dim"):
                raise RuntimeError(
                    f"Sizes of tensors must match except in dimension {d}. Expected size {example(want)} but got size "
                    f"{example(size)} for tensor number {i} in the list."
                )
    return cat_prim([convert(x, dtype) for _, x in kept], d)


# kept: broadcast + cat prims that fusing executors take
@torchop(torch.stack, name="stack")
def stack(tensors: Any, dim: int = 0) -> TensorProxy:
    tensors = _tensor_list(tensors, "stack")
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    ref = tensors[0]
    d = canonical_dim(dim, ref.ndim + 1)
    for i, x in enumerate(tensors[1:], 1):
        if x.ndim != ref.ndim or not all(
            decide(E.eq(p, q), "stack", "stacked tensors must have equal sizes") for p, q in zip(x.dims, ref.dims)
        ):
            raise RuntimeError(f"stack expects each tensor to be equal size, but got {fmt_shape(ref.dims)} at entry "
                               f"0 and {fmt_shape(x.dims)} at entry {i}")  # fmt: skip
    dtype = functools.reduce(torch.promote_types, (x.dtype for x in tensors))
    shape = ref.dims[:d] + (E.const(1),) + ref.dims[d:]
    kept = tuple(i if i < d else i + 1 for i in range(ref.ndim))
    return cat_prim([prims.broadcast_in_dim(convert(x, dtype), shape, kept) for x in tensors], d)


# narrow.


def _wrap_start(s: E.Expr, n: E.Expr) -> E.Expr:
    """A start that may be negative, counted from the end, as an expression valid for both signs."""
    if s.is_const:
        return E.add(s, n) if s.value < 0 else s
    if _implied(E.ge(s, 0)):
        return s
    return E.ite(E.lt(s, 0), E.add(s, n), s)


# kept: a prims.narrow that fusing executors take, with fewer guards than torch's kernel
@torchop(torch.narrow, torch.Tensor.narrow, name="narrow", methods=("narrow",))
def narrow(a: TensorProxy, dim: int, start: Any, length: Any) -> TensorProxy:
    if a.ndim == 0:
        raise RuntimeError("narrow() cannot be applied to a 0-dim tensor.")
    if isinstance(start, TensorProxy) and start.ndim != 0:
        raise RuntimeError("start must be an 0-dim integral Tensor.")  # (a 0-dim one is its int: value_expr)
    d = canonical_dim(dim, a.ndim)
    n, s, length = a.dims[d], value_expr(start), value_expr(length)
    hn, hs, hl = example(n), example(s), example(length)
    # no guards: the output has `length` elements wherever the arguments are valid; torch checks them at run time;
    # where a handler in the function observes the checks, they are decided with guards
    check = _narrow_checks(n, s, length) if context.require().may_raise() else (-hn <= hs <= hn, hl >= 0, None)
    if not check[0]:
        raise IndexError(f"start out of range (expected to be in range of [{-hn}, {hn}], but got {hs})")
    if not check[1]:
        raise RuntimeError("narrow(): length must be non-negative.")
    if not (check[2] if check[2] is not None else (hs + hn if hs < 0 else hs) + hl <= hn):
        raise RuntimeError(f"start ({hs + hn if hs < 0 else hs}) + length ({hl}) exceeds dimension size ({hn}).")
    return narrow_prim(a, d, _wrap_start(s, n), length)


def _narrow_checks(n: E.Expr, s: E.Expr, length: E.Expr) -> tuple:
    if not decide(E.and_(E.le(E.neg(n), s), E.le(s, n)), "narrow", "start in range"):
        return False, True, True
    if not decide(E.ge(length, 0), "narrow", "length non-negative"):
        return True, False, True
    first = s if decide(E.ge(s, 0), "narrow", "is start non-negative") else E.add(s, n)
    return True, True, decide(E.le(E.add(first, length), n), "narrow", "start + length within the dim")


# The gather family. Out-of-range index values are data-dependent: the torch ops raise for them at run time.


# kept: meta accepts index dtypes the kernels reject (eager's error at trace time, not a compile that fails later)
@torchop(torch.index_select, torch.Tensor.index_select, name="index_select", methods=("index_select",))
def index_select(a: TensorProxy, dim: int, index: TensorProxy) -> TensorProxy:
    meta_call(torch.index_select, a, dim, index)
    if index.dtype not in (torch.int32, torch.int64):  # meta accepts it; the kernels do not
        raise RuntimeError("index_select(): Expected dtype int32 or int64 for index")
    if index.ndim > 1:
        raise IndexError("index_select(): Index is supposed to be a vector")
    idx = convert(index, torch.int64)
    if a.ndim == 0:
        count = hint(_numel(index.dims))
        if count != 1:  # no guard: the output is 0-d whatever the index size; torch raises this at run time
            raise RuntimeError(f"index_select(): Index to scalar can have only 1 value, got {count} value(s)")
        return gather_prim(a, 0, prims.reshape(idx, ()) if idx.ndim else idx)
    d = canonical_dim(dim, a.ndim)
    if idx.ndim == 0:
        idx = prims.broadcast_in_dim(idx, (E.const(1),), ())
    shape = a.dims[:d] + (idx.dims[0],) + a.dims[d + 1 :]
    return gather_prim(a, d, prims.broadcast_in_dim(idx, shape, (d,)))


# kept: no guard on the index size (torch's kernel adds index.size <= input.size)
@torchop(torch.gather, torch.Tensor.gather, name="gather", methods=("gather",))
def gather(a: TensorProxy, dim: int, index: TensorProxy, *, sparse_grad: bool = False) -> TensorProxy:
    d = canonical_dim(dim, a.ndim)
    if hint(_numel(index.dims)):  # eager checks a non-empty index only; no guard: torch checks it at run time
        _check_gather_index(a, d, index)
    return gather_prim(a, d, index)


def _check_gather_index(a: TensorProxy, d: int, index: TensorProxy) -> None:
    if index.dtype not in (torch.int32, torch.int64):
        raise RuntimeError("gather(): Expected dtype int32/int64 for index")
    if max(index.ndim, 1) != max(a.ndim, 1):
        raise RuntimeError("Index tensor must have the same number of dimensions as input tensor")
    for j, (want, have) in enumerate(zip(index.dims, a.dims)):
        if j != d and hint(want) > hint(have):
            raise RuntimeError(f"Size does not match at dimension {j} expected index {fmt_shape(index.dims)} to be no "
                               f"larger than self {fmt_shape(a.dims)} apart from dimension {d}")  # fmt: skip


# kept: torch's kernel fails on symbolic sizes
@torchop(torch.take_along_dim, torch.Tensor.take_along_dim, name="take_along_dim", methods=("take_along_dim",))
def take_along_dim(a: TensorProxy, indices: TensorProxy, dim: int | None = None) -> TensorProxy:
    meta_call(torch.take_along_dim, a, indices, dim)
    if dim is None:
        flat_a = prims.reshape(a, (_numel(a.dims),)) if a.ndim != 1 else a
        flat_i = prims.reshape(indices, (_numel(indices.dims),)) if indices.ndim != 1 else indices
        return gather_prim(flat_a, 0, flat_i)
    d = canonical_dim(dim, a.ndim)
    shape = broadcast_shapes(a.dims[:d] + (indices.dims[d],) + a.dims[d + 1 :], indices.dims)
    return gather_prim(expand_to(a, shape[:d] + (a.dims[d],) + shape[d + 1 :]), d, expand_to(indices, shape))


# tril, triu: a mask from column minus row indices.


def _triangle(a: TensorProxy, diagonal: Any, name: str, keep: Any) -> TensorProxy:
    if a.ndim < 2:
        raise RuntimeError(f"{name}: input tensor must have at least 2 dimensions")
    if isinstance(diagonal, TensorProxy):
        raise unsupported(f"{name} with a tensor diagonal", "pass an int")
    m, n = a.dims[-2:]
    rows = prims.broadcast_in_dim(iota(m, 0, 1, torch.int64, a.device), (m, n), (0,))
    cols = prims.broadcast_in_dim(iota(n, 0, 1, torch.int64, a.device), (m, n), (1,))
    mask = keep(prims.sub(cols, rows), value_expr(diagonal))
    mask = prims.broadcast_in_dim(mask, a.dims, (a.ndim - 2, a.ndim - 1))
    return prims.where(mask, a, False if a.dtype is torch.bool else 0)


# kept: no guards (torch's kernel adds size != 1 guards)
@torchop(torch.tril, torch.Tensor.tril, name="tril", methods=("tril",))
def tril(a: TensorProxy, diagonal: Any = 0) -> TensorProxy:
    return _triangle(a, diagonal, "tril", prims.le)


# kept: no guards (torch's kernel adds size != 1 guards)
@torchop(torch.triu, torch.Tensor.triu, name="triu", methods=("triu",))
def triu(a: TensorProxy, diagonal: Any = 0) -> TensorProxy:
    return _triangle(a, diagonal, "triu", prims.ge)


# roll.


def _roll_dim(a: TensorProxy, d: int, shift: Any) -> TensorProxy:
    """`out[i] = a[(i - shift) mod n]` along `d`, as a gather; the shift modulo n is an expression."""
    n, s = a.dims[d], value_expr(shift)
    r = E.mod(s, n) if n.is_const and n.value else E.ite(E.eq(n, 0), 0, E.mod(s, n))
    if r.is_const and r.value == 0:
        return a
    start = iota(n, E.sub(n, r), 1, torch.int64, a.device)  # i - r + n, in [n - r, 2n - r)
    index = prims.where(prims.ge(start, n), prims.sub(start, n), start)
    return gather_prim(a, d, prims.broadcast_in_dim(index, a.dims, (d,)))


# kept: no numel != 0 guard (torch's kernel adds one)
@torchop(torch.roll, torch.Tensor.roll, name="roll", methods=("roll",))
def roll(a: TensorProxy, shifts: Any, dims: Any = None) -> TensorProxy:
    meta_call(torch.roll, a, shifts, *(() if dims is None else (dims,)))
    shifts = list(shifts) if isinstance(shifts, (tuple, list)) else [shifts]
    dims = [] if dims is None else list(dims) if isinstance(dims, (tuple, list)) else [dims]
    if not dims:  # roll the flattened tensor
        flat = prims.reshape(a, (_numel(a.dims),))
        out = _roll_dim(flat, 0, shifts[0])
        return a if out is flat else prims.reshape(out, a.dims)
    out = a
    for s, d in zip(shifts, dims):
        out = _roll_dim(out, canonical_dim(d, a.ndim), s)
    return out
