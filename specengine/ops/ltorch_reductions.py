"""More reductions: prod, var/std, amin, max/min with indices, argmax/argmin, all/any, softmax family, cumsum.

Reductions with an identity (prod, all, any, var -> nan, softmax of an empty dim) decide nothing on sizes;
those without one (amin, max, min, argmax, argmin) raise over an empty dim, so they decide `dim != 0`.

"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from specengine.constraints import expr as E
from specengine.ir.proxies import NumberProxy, TensorProxy, is_outside_tensor, unsupported, value_expr
from specengine.ops import prims
from specengine.ops.registry import torchop
from specengine.ops.utils import (
    broadcast_shapes,
    canonical_dim,
    canonical_dims,
    convert,
    decide,
    eager_call,
    expand_to,
    meta_call,
)

__all__ = [
    "prod", "var", "std", "var_mean", "std_mean", "amin", "max", "min", "argmax", "argmin", "all", "any",
    "softmax", "log_softmax", "logsumexp", "cumsum",
]  # fmt: skip

_UNSET: Any = object()  # an argument that was not passed (torch's overloads tell "absent" from None)
_LOW_PRECISION = (torch.float16, torch.bfloat16)
_TYPE_NAMES = {torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
               torch.uint8: "Byte", torch.bool: "Bool", torch.complex64: "ComplexFloat",
               torch.complex128: "ComplexDouble"}  # fmt: skip


# Prims.


def _reduced(a: TensorProxy, dims: tuple) -> tuple:
    return tuple(d for i, d in enumerate(a.dims) if i not in dims)


def _prod_impl(a: torch.Tensor, dims: tuple) -> torch.Tensor:
    """The product over `dims`, in `a`'s dtype (torch.prod alone promotes integers to int64)."""
    if a.ndim == 0 or len(dims) == a.ndim:
        return torch.prod(a, dtype=a.dtype)
    for d in sorted(dims, reverse=True):
        a = torch.prod(a, d, dtype=a.dtype)
    return a


@prims.prim("prod", impl=_prod_impl, tags=("reduction",))
def _prim_prod(a: TensorProxy, dims: tuple) -> TensorProxy:
    return prims.new_tensor(_reduced(a, dims), a.dtype, [a])


@prims.prim("amin", impl=torch.amin, tags=("reduction",))
def _prim_amin(a: TensorProxy, dims: tuple) -> TensorProxy:
    return prims.new_tensor(_reduced(a, dims), a.dtype, [a])


def _amax_ninf_impl(a: torch.Tensor, dims: tuple) -> torch.Tensor:
    if a.numel() == 0:
        shape = [s for i, s in enumerate(a.shape) if i not in dims]
        return torch.full(shape, -math.inf, dtype=a.dtype, device=a.device)
    return torch.amax(a, dims)


@prims.prim("amax_ninf", impl=_amax_ninf_impl, tags=("reduction",))
def _prim_amax_ninf(a: TensorProxy, dims: tuple) -> TensorProxy:
    """amax whose reduction over an empty dim is -inf (its identity) instead of an error."""
    return prims.new_tensor(_reduced(a, dims), a.dtype, [a])


def _arg_prim(name: str, torch_fn: Any) -> Any:
    def meta(a: TensorProxy, dim: int | None) -> TensorProxy:
        dims = () if dim is None or a.ndim == 0 else _reduced(a, (dim,))
        return prims.new_tensor(dims, torch.int64, [a])

    meta.__name__ = name
    return prims.prim(name, impl=lambda a, dim: torch_fn(a, dim), tags=("reduction",))(meta)


_prim_argmax = _arg_prim("argmax", torch.argmax)
_prim_argmin = _arg_prim("argmin", torch.argmin)


@prims.prim("cumsum", impl=lambda a, dim: torch.cumsum(a, dim, dtype=a.dtype), tags=("scan",))
def _prim_cumsum(a: TensorProxy, dim: int) -> TensorProxy:
    return prims.new_tensor(a.dims, a.dtype, [a])


# Helpers.


def _keep(out: TensorProxy, a: TensorProxy, dims: tuple, keepdim: bool) -> TensorProxy:
    """The reduced dims of `a` put back as size-1 dims when `keepdim`."""
    if not keepdim or a.ndim == 0:
        return out
    shape = tuple(E.const(1) if i in dims else d for i, d in enumerate(a.dims))
    return prims.broadcast_in_dim(out, shape, tuple(i for i in range(a.ndim) if i not in dims))


def _unreduce(out: TensorProxy, a: TensorProxy, dims: tuple) -> TensorProxy:
    """A reduction's result broadcast back to the shape of its input."""
    if a.ndim == 0:
        return out
    return prims.broadcast_in_dim(out, a.dims, tuple(i for i in range(a.ndim) if i not in dims))


def _count(a: TensorProxy, dims: Any) -> E.Expr:
    """How many elements a reduction over `dims` combines (a 0-d tensor reduces over dim 0 or -1)."""
    return math.prod((a.dims[i] for i in dims if a.ndim), start=E.const(1))


def _every_dim_error(op: str, exc: type = RuntimeError) -> Exception:
    msg = f"{op}(): Expected reduction dim to be specified for input.numel() == 0."
    if exc is RuntimeError:
        msg += " Specify the reduction dim with the 'dim' argument."
    return exc(msg)


def _check_nonempty(a: TensorProxy, dims: tuple, op: str, every: Exception | None) -> None:
    """Reductions without an identity need each reduced dim non-empty (a decision per dim)."""
    for i in dims if a.ndim else ():
        if not decide(E.ne(a.dims[i], 0), op, f"reduction over dim {i} needs a non-empty dim"):
            if every is not None:
                raise every
            raise IndexError(f"{op}(): Expected reduction dim {i} to have non-zero size.")


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Half-precision floats are computed in float32 (as torch's kernels accumulate)."""
    return torch.float32 if dtype in _LOW_PRECISION else dtype


def _check_dim_arg(op: str, dim: Any) -> None:
    if dim is None or isinstance(dim, (tuple, list, bool)) or not isinstance(dim, (int, NumberProxy)):
        raise TypeError(f"{op}() received an invalid combination of arguments - got dim={type(dim).__name__}")


def _check_tensor_arg(x: Any, op: str) -> None:
    if is_outside_tensor(x):
        raise unsupported(f"{op} with a tensor closed over from outside", "pass the tensor as an argument")


# prod, amin.


# kept: a reduction prim, which fusing executors take
@torchop(torch.prod, torch.Tensor.prod, name="prod", methods=("prod",))
def prod(a: TensorProxy, dim: Any = _UNSET, keepdim: bool = False, *, dtype: torch.dtype | None = None) -> Any:
    if dim is _UNSET:
        out_dtype, dims = meta_call(torch.prod, a, dtype=dtype).dtype, tuple(range(a.ndim))
    else:
        _check_dim_arg("prod", dim)
        out_dtype, dims = meta_call(torch.prod, a, dim, keepdim, dtype=dtype).dtype, (canonical_dim(dim, a.ndim),)
    return _keep(_prim_prod(convert(a, out_dtype), dims), a, dims, keepdim)


# kept: a reduction prim, which fusing executors take
@torchop(torch.amin, torch.Tensor.amin, name="amin", methods=("amin",))
def amin(a: TensorProxy, dim: Any = (), keepdim: bool = False) -> Any:
    meta_call(torch.amin, a, dim, keepdim)
    every = dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0)
    dims = canonical_dims(dim, a.ndim)
    _check_nonempty(a, dims, "amin", _every_dim_error("amin") if every else None)
    return _keep(_prim_amin(a, dims), a, dims, keepdim)


# var, std, var_mean, std_mean.


def _correction(op: str, dim: Any, unbiased: Any, correction: Any) -> tuple[Any, Any]:
    """(dim, correction) from torch's overloads: var(dim, unbiased, keepdim), var(unbiased), var(dim, *, correction)."""
    if isinstance(dim, bool):
        dim, unbiased = None, dim if unbiased is None else unbiased
    if unbiased is not None and correction is not None:
        raise TypeError(f"{op}() received an invalid combination of arguments - got both unbiased and correction")
    if correction is None:
        correction = 0 if unbiased is not None and not unbiased else 1
    return dim, correction


def _divide_dof(ss: TensorProxy, n: E.Expr, correction: Any) -> TensorProxy:
    """`ss / max(n - correction, 0)`; a fractional correction divides by a float tensor."""
    if isinstance(correction, NumberProxy) and correction.python_type is float:
        correction = float(correction)
    if isinstance(correction, float) and not correction.is_integer():
        dof = prims.full((), n, ss.dtype, ss.device)
        dof = prims.maximum(prims.sub(dof, correction), 0.0)
        return prims.div(ss, expand_to(dof, ss.dims))
    return prims.div(ss, E.maximum(E.sub(n, value_expr(correction)), 0))


def _moments(op: str, a: TensorProxy, dim: Any, unbiased: Any, correction: Any) -> tuple:
    """(var, mean, dims): the reduced variance and mean, in the compute dtype."""
    dim, correction = _correction(op, dim, unbiased, correction)
    if not (a.dtype.is_floating_point or a.dtype.is_complex):
        eager_call(getattr(torch, op), a)  # eager's refusal (RuntimeError before torch 2.15, NotImplementedError since)
        raise unsupported(f"{op} of a {a.dtype} tensor", "convert it to a floating dtype first")
    if a.dtype.is_complex:
        raise unsupported(f"{op} of a complex tensor", "take the variance of the real and imaginary parts")
    dims = canonical_dims(dim, a.ndim)
    x = convert(a, _compute_dtype(a.dtype))
    n = _count(a, dims)
    mean = prims.div(prims.sum(x, dims), n)
    diff = prims.sub(x, _unreduce(mean, a, dims))
    return _divide_dof(prims.sum(prims.mul(diff, diff), dims), n, correction), mean, dims


def _finish(t: TensorProxy, a: TensorProxy, dims: tuple, keepdim: bool) -> TensorProxy:
    return _keep(convert(t, a.dtype), a, dims, keepdim)


# kept: reduction and elementwise prims, which fusing executors take
@torchop(torch.var, torch.Tensor.var, name="var", methods=("var",))
def var(a: TensorProxy, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *, correction: Any = None) -> Any:
    v, _, dims = _moments("var", a, dim, unbiased, correction)
    return _finish(v, a, dims, keepdim)


# kept: reduction and elementwise prims, which fusing executors take
@torchop(torch.std, torch.Tensor.std, name="std", methods=("std",))
def std(a: TensorProxy, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *, correction: Any = None) -> Any:
    v, _, dims = _moments("std", a, dim, unbiased, correction)
    return _finish(prims.pow(v, 0.5), a, dims, keepdim)


# kept: fewer guards and misses than torch's kernel (OpInfo's samples: 3 guards against 7; unbiased: 2 misses against 4)
@torchop(torch.var_mean, name="var_mean")
def var_mean(
    a: TensorProxy, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *, correction: Any = None
) -> tuple:
    v, m, dims = _moments("var_mean", a, dim, unbiased, correction)
    return _finish(v, a, dims, keepdim), _finish(m, a, dims, keepdim)


# kept: fewer guards and misses than torch's kernel (OpInfo's samples: 3 guards against 7; unbiased: 2 misses against 4)
@torchop(torch.std_mean, name="std_mean")
def std_mean(
    a: TensorProxy, dim: Any = None, unbiased: Any = None, keepdim: bool = False, *, correction: Any = None
) -> tuple:
    v, m, dims = _moments("std_mean", a, dim, unbiased, correction)
    return _finish(prims.pow(v, 0.5), a, dims, keepdim), _finish(m, a, dims, keepdim)


# max, min (full, with dim, binary), argmax, argmin.


def _minimum(x: TensorProxy, y: TensorProxy) -> TensorProxy:
    """Elementwise minimum of equal-shape tensors, propagating NaN like torch.minimum."""
    smaller = prims.where(prims.lt(y, x), y, x)
    return prims.where(prims.ne(y, y), y, smaller)


def _binary(op: str, a: TensorProxy, b: Any) -> TensorProxy:
    _check_tensor_arg(b, op)
    if not isinstance(b, TensorProxy):
        raise TypeError(f"{op}() received an invalid combination of arguments - got other={type(b).__name__}")
    torch_fn = torch.maximum if op == "max" else torch.minimum
    dtype = meta_call(torch_fn, a, b).dtype
    shape = broadcast_shapes(a.dims, b.dims)
    x, y = (convert(expand_to(t, shape), dtype) for t in (a, b))
    return prims.maximum(x, y) if op == "max" else _minimum(x, y)


def _max_min(op: str, a: TensorProxy, dim: Any, keepdim: Any, other: Any) -> Any:
    if other is not _UNSET or isinstance(dim, (TensorProxy, torch.Tensor)):
        if dim is not _UNSET and other is not _UNSET:
            raise TypeError(f"{op}() received an invalid combination of arguments")
        return _binary(op, a, other if other is not _UNSET else dim)
    reduce = prims.amax if op == "max" else _prim_amin
    if dim is _UNSET:
        if keepdim is not _UNSET:
            raise TypeError(f"{op}() received an invalid combination of arguments - got keepdim without dim")
        dims = tuple(range(a.ndim))
        _check_nonempty(a, dims, op, _every_dim_error(op))
        return reduce(a, dims)
    _check_dim_arg(op, dim)
    keepdim = False if keepdim is _UNSET else keepdim
    d = canonical_dim(dim, a.ndim)
    dims = (d,) if a.ndim else ()
    _check_nonempty(a, dims, op, None)
    values = reduce(a, dims)
    arg = _prim_argmax if op == "max" else _prim_argmin
    indices = arg(convert(a, torch.uint8) if a.dtype is torch.bool else a, d)
    pair = (_keep(values, a, dims, keepdim), _keep(indices, a, dims, keepdim))
    return (torch.return_types.max if op == "max" else torch.return_types.min)(pair)


# kept: reduction prims that fusing executors take; the binary form broadcasts without guards
@torchop(torch.max, torch.Tensor.max, name="max", methods=("max",))
def max(a: TensorProxy, dim: Any = _UNSET, keepdim: Any = _UNSET, *, other: Any = _UNSET) -> Any:  # noqa: A001
    """`max(a)`, `max(a, dim, keepdim)` -> (values, indices), or `max(a, other)` (elementwise)."""
    return _max_min("max", a, dim, keepdim, other)


# kept: reduction prims that fusing executors take; the binary form broadcasts without guards
@torchop(torch.min, torch.Tensor.min, name="min", methods=("min",))
def min(a: TensorProxy, dim: Any = _UNSET, keepdim: Any = _UNSET, *, other: Any = _UNSET) -> Any:  # noqa: A001
    """`min(a)`, `min(a, dim, keepdim)` -> (values, indices), or `min(a, other)` (elementwise)."""
    return _max_min("min", a, dim, keepdim, other)


def _arg_reduce(op: str, a: TensorProxy, dim: Any, keepdim: bool) -> TensorProxy:
    if a.dtype is torch.bool:
        eager_call(getattr(torch, op), a)  # eager's refusal (RuntimeError before torch 2.15, NotImplementedError since)
        raise unsupported(f"{op} of a bool tensor", "convert it to an integer dtype first")
    arg = _prim_argmax if op == "argmax" else _prim_argmin
    if dim is None:
        dims = tuple(range(a.ndim))
        _check_nonempty(a, dims, op, _every_dim_error(op, IndexError))
        return _keep(arg(a, None), a, dims, keepdim)
    _check_dim_arg(op, dim)
    d = canonical_dim(dim, a.ndim)
    _check_nonempty(a, (d,) if a.ndim else (), op, None)
    return _keep(arg(a, d), a, (d,), keepdim)


# kept: a reduction prim, so the flattened trace is all prims (tests/test_ops_reductions.py, an executor without
# torch-level ops; the generic path is one opaque op); OpInfo's samples alone measured no difference
@torchop(torch.argmax, torch.Tensor.argmax, name="argmax", methods=("argmax",))
def argmax(a: TensorProxy, dim: Any = None, keepdim: bool = False) -> TensorProxy:
    return _arg_reduce("argmax", a, dim, keepdim)


# kept: as argmax
@torchop(torch.argmin, torch.Tensor.argmin, name="argmin", methods=("argmin",))
def argmin(a: TensorProxy, dim: Any = None, keepdim: bool = False) -> TensorProxy:
    return _arg_reduce("argmin", a, dim, keepdim)


# all, any: counts of (non)zero elements, so empty reductions need no decision.


def _all_any(op: str, a: TensorProxy, dim: Any, keepdim: bool) -> TensorProxy:
    torch_fn = getattr(torch, op)
    out_dtype = (meta_call(torch_fn, a) if dim is None else meta_call(torch_fn, a, dim, keepdim)).dtype
    dims = canonical_dims(dim, a.ndim)
    flags = prims.ne(a, 0) if op == "any" else prims.eq(a, 0)
    count = prims.sum(convert(flags, torch.int64), dims)
    out = prims.gt(count, 0) if op == "any" else prims.eq(count, 0)
    return _keep(convert(out, out_dtype), a, dims, keepdim)


# kept: reduction prims that fusing executors take; empty reductions need no decision
@torchop(torch.all, torch.Tensor.all, name="all", methods=("all",))
def all(a: TensorProxy, dim: Any = None, keepdim: bool = False) -> TensorProxy:  # noqa: A001
    return _all_any("all", a, dim, keepdim)


# kept: reduction prims that fusing executors take; empty reductions need no decision
@torchop(torch.any, torch.Tensor.any, name="any", methods=("any",))
def any(a: TensorProxy, dim: Any = None, keepdim: bool = False) -> TensorProxy:  # noqa: A001
    return _all_any("any", a, dim, keepdim)


# softmax, log_softmax, logsumexp.


def _softmax_args(op: str, a: TensorProxy, dim: Any, stacklevel: Any, dtype: Any) -> tuple[int, Any]:
    """(dim, dtype) from torch.softmax(a, dim, dtype) and F.softmax(a, dim=None, _stacklevel=3, dtype=None)."""
    if isinstance(stacklevel, torch.dtype):
        dtype = stacklevel
    if dim is None:
        if stacklevel is _UNSET:  # only F.softmax passes _stacklevel, and it alone infers dim
            raise TypeError(f'{op}() missing 1 required positional arguments: "dim"')
        return (0 if a.ndim in (0, 1, 3) else 1), dtype
    return canonical_dim(dim, a.ndim), dtype


def _softmax_impl_for(fn: Any) -> Any:
    def impl(a: torch.Tensor, dim: Any = None, _stacklevel: Any = 3, dtype: Any = None) -> torch.Tensor:
        if isinstance(_stacklevel, torch.dtype):  # torch.softmax(a, dim, dtype) passes dtype third
            dtype = _stacklevel
        return fn(a, dim, dtype=dtype)

    impl.__name__ = fn.__name__
    return impl


def _not_floating(op: str, a: TensorProxy, d: int) -> TensorProxy:
    """torch's softmax kernels reject integer and complex tensors unless there is nothing to compute."""
    if not decide(E.eq(_count(a, range(a.ndim)), 0), op, "a non-floating softmax runs only when empty"):
        kernel = f"{op}_lastdim_kernel_impl" if a.ndim == 0 or d == a.ndim - 1 else f"{op}_kernel_impl"
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{_TYPE_NAMES.get(a.dtype, a.dtype)}'")
    return prims.convert_element_type(a, a.dtype)


def _softmax(op: str, a: TensorProxy, dim: Any, stacklevel: Any, dtype: Any) -> TensorProxy:
    """exp(x - amax) / sum, or (x - amax) - log(sum(exp(x - amax))) for log_softmax."""
    d, dtype = _softmax_args(op, a, dim, stacklevel, dtype)
    if dtype is not None:
        a = convert(a, dtype)
    if not a.dtype.is_floating_point:
        return _not_floating(op, a, d)
    x = convert(a, _compute_dtype(a.dtype))
    dims = (d,)
    shifted = prims.sub(x, _unreduce(_prim_amax_ninf(x, dims), a, dims))
    e = prims.exp(shifted)
    total = _unreduce(prims.sum(e, dims), a, dims)
    # Half-precision inputs: round where torch's CPU kernels store an intermediate in the input dtype, so the
    # decomposition matches eager's values (log_softmax over the last dim stores log(sum); softmax over another
    # dim stores exp(x - max)).
    last = a.ndim == 0 or d == a.ndim - 1
    if op == "log_softmax":
        log_total = _rounded(prims.log(_rounded(total, a.dtype, last)), a.dtype, last)
        return convert(prims.sub(shifted, log_total), a.dtype)
    return convert(prims.div(_rounded(e, a.dtype, not last), total), a.dtype)


def _rounded(t: TensorProxy, dtype: torch.dtype, when: bool) -> TensorProxy:
    """`t` rounded to the half-precision `dtype` (and back), when `when`."""
    if not when or dtype not in _LOW_PRECISION:
        return t
    return prims.convert_element_type(prims.convert_element_type(t, dtype), t.dtype)


# kept: reduction and elementwise prims, which fusing executors take; on the GPT's hot path
@torchop(torch.softmax, torch.Tensor.softmax, F.softmax, name="softmax", methods=("softmax",),
         impl=_softmax_impl_for(F.softmax))  # fmt: skip
def softmax(a: TensorProxy, dim: Any = None, _stacklevel: Any = _UNSET, dtype: Any = None) -> TensorProxy:
    return _softmax("softmax", a, dim, _stacklevel, dtype)


# kept: fewer guards than torch's kernel (4 against 12 over OpInfo's samples)
@torchop(torch.log_softmax, torch.Tensor.log_softmax, F.log_softmax, name="log_softmax", methods=("log_softmax",),
         impl=_softmax_impl_for(F.log_softmax))  # fmt: skip
def log_softmax(a: TensorProxy, dim: Any = None, _stacklevel: Any = _UNSET, dtype: Any = None) -> TensorProxy:
    return _softmax("log_softmax", a, dim, _stacklevel, dtype)


# kept: fewer guards than torch's kernel (4 against 10 over OpInfo's samples)
@torchop(torch.logsumexp, torch.Tensor.logsumexp, name="logsumexp", methods=("logsumexp",))
def logsumexp(a: TensorProxy, dim: Any, keepdim: bool = False) -> TensorProxy:
    """log(sum(exp(x - m))) + m, with m = amax where finite, else 0 (torch's own composite)."""
    out_dtype = meta_call(torch.logsumexp, a, dim, keepdim).dtype
    if out_dtype.is_complex:
        raise unsupported("logsumexp of a complex tensor", "its decomposition is written for real tensors")
    dims = canonical_dims(dim, a.ndim)
    x = convert(a, out_dtype)  # op by op in the result dtype, as torch computes it
    m = _prim_amax_ninf(x, dims)
    m = prims.where(prims.eq(prims.abs(m), math.inf), 0.0, m)
    total = prims.sum(prims.exp(prims.sub(x, _unreduce(m, a, dims))), dims)
    return _keep(convert(prims.add(prims.log(total), m), out_dtype), a, dims, keepdim)


# cumsum.


# kept: fewer guards than torch's kernel (4 against 8 over OpInfo's samples)
@torchop(torch.cumsum, torch.Tensor.cumsum, name="cumsum", methods=("cumsum",))
def cumsum(a: TensorProxy, dim: Any, *, dtype: torch.dtype | None = None) -> TensorProxy:
    out_dtype = meta_call(torch.cumsum, a, dim, dtype=dtype).dtype
    return _prim_cumsum(convert(a, out_dtype), canonical_dim(dim, a.ndim))
