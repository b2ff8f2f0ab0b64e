"""Arithmetic torch-level ops: the binary operators and their reflected forms, comparisons, sum and matmul, and
the elementwise helper the other op files build on (`elementwise`: type promotion and broadcasting)."""

from __future__ import annotations

import builtins  # sum shadows the builtin in this module
import math
import operator
from typing import Any, Callable

import torch
import torch.nn.functional as F

from specengine.constraints import expr as E
from specengine.ir.proxies import NumberProxy, TensorProxy, is_outside_tensor, unsupported, value_expr
from specengine.ops import prims, runtime
from specengine.ops.generic import generic_call
from specengine.ops.ltorch_literals import tensor as literal_tensor
from specengine.ops.number_tensors import note_number
from specengine.ops.registry import torchop
from specengine.ops.utils import (
    broadcast_shapes,
    canonical_dims,
    convert,
    decide,
    eager_call,
    expand_to,
    fmt_shape,
    meta_call,
    meta_value,
)

# Elementwise.


def _operand(x: Any) -> Any:
    """Numbers enter prims as int Exprs (symbolic) or Python scalars; tensors as they are."""
    if isinstance(x, NumberProxy):  # symbolic: an int Expr or a FloatExpr, computed from the prologue's symbols
        return x.expr
    if is_outside_tensor(x):
        raise unsupported(
            "a tensor closed over from outside", "pass the tensor as an argument, or register it as a module buffer"
        )
    return x


def elementwise(
    prim: Any, torch_fn: Any, *args: Any, compare: bool = False, out_dtype: Any = None, **kwargs: Any
) -> TensorProxy:
    """Type-promote (torch's rules, via meta, unless `out_dtype` corrects them), broadcast and apply a prim."""
    if not any(isinstance(a, TensorProxy) for a in args):  # `torch.div(n, 4)`: eager wraps the number in a tensor
        args = (literal_tensor(args[0]), *args[1:])
    meta_dtype = meta_call(torch_fn, *args, **kwargs).dtype
    out_dtype = out_dtype or meta_dtype
    compute = torch.result_type(*(_meta_or_value(a) for a in args[:2])) if compare else out_dtype
    shape = broadcast_shapes(*(a.dims for a in args if isinstance(a, TensorProxy)))
    operands = [convert(expand_to(_operand(a), shape), compute) for a in args]
    out = convert(prims.PRIMS[prim](*operands, **kwargs), out_dtype)
    note_number(out, prim, args, kwargs)
    return out


def _meta_or_value(a: Any) -> Any:
    return meta_value(a)


def _common_dtype(a: Any, b: Any) -> torch.dtype:
    return torch.result_type(_meta_or_value(a), _meta_or_value(b))


def _unary(name: str, torch_fn: Any, prim: str | None = None, extra: tuple = (), no_bool: bool = False) -> Any:
    methods = (name, *extra)

    def decomposition(a: TensorProxy) -> TensorProxy:
        if no_bool and a.dtype is torch.bool:  # meta accepts it; the CPU and CUDA kernels do not
            raise NotImplementedError(f"\"{name}_{a.device.type}\" not implemented for 'Bool'")
        return elementwise(prim or name, torch_fn, a)

    decomposition.__name__ = name
    # kept: one prim per op, which fusing executors take (the generic op is opaque to them)
    return torchop(torch_fn, getattr(torch.Tensor, name), name=name, methods=methods)(decomposition)


neg = _unary("neg", torch.neg, extra=("__neg__",))
abs = _unary("abs", torch.abs, extra=("__abs__",), no_bool=True)  # noqa: A001
exp = _unary("exp", torch.exp)
log = _unary("log", torch.log)
tanh = _unary("tanh", torch.tanh)
sigmoid = _unary("sigmoid", torch.sigmoid)


# kept: one prim per op, which fusing executors take (the generic op is opaque to them)
@torchop(torch.relu, torch.Tensor.relu, F.relu, name="relu", methods=("relu",), impl=F.relu)  # F.relu takes inplace=
def relu(a: TensorProxy, inplace: bool = False) -> TensorProxy:
    if inplace:
        raise unsupported("relu(inplace=True)", "use inplace=False (the result is the same tensor values)")
    meta_call(torch.relu, a)
    return prims.maximum(a, 0)


def _check_alpha(dtype: torch.dtype, alpha: Any) -> None:
    """torch's alpha_check, against the result dtype of `a op b`."""
    kind = alpha.python_type if isinstance(alpha, NumberProxy) else type(alpha)
    if kind is bool and dtype is not torch.bool:
        raise RuntimeError("Boolean alpha only supported for Boolean results.")
    if kind is float and not (dtype.is_floating_point or dtype.is_complex):
        raise RuntimeError("For integral input tensors, argument alpha must not be a floating point number.")


def _is_bool(x: Any) -> bool:
    if isinstance(x, (TensorProxy, NumberProxy)):
        return (x.dtype if isinstance(x, TensorProxy) else x.python_type) in (torch.bool, bool)
    return isinstance(x, bool)


def _add_or_sub(name: str, torch_fn: Any, a: Any, b: Any, alpha: Any) -> TensorProxy:
    """`a op alpha * b` in the dtype of `a op b` (scaling b first must not promote it)."""
    dtype = meta_call(torch_fn, a, b).dtype
    if name == "sub" and builtins.any(_is_bool(x) for x in (a, b)):  # meta lets a bool Python scalar through
        eager_call(torch_fn, a, b)  # eager refuses bools (its error type differs between torch releases)
    _check_alpha(dtype, alpha)
    if isinstance(alpha, NumberProxy) or alpha != 1:  # a symbolic alpha scales: no decision on its value
        b = mul(convert(b, dtype), alpha) if isinstance(b, TensorProxy) else b * alpha
    return convert(elementwise(name, torch_fn, a, b), dtype)


# kept: broadcasting without guards (torch's kernel decides each size 1 or not)
def _sym_extremum(prim: Any, py: Callable, a: Any, b: Any) -> Any:
    ints = [isinstance(x, NumberProxy) and x.python_type is int or type(x) is int for x in (a, b)]
    if builtins.all(ints) and builtins.any(isinstance(x, NumberProxy) for x in (a, b)):
        return prim(a, b)
    return py(a, b)  # floats: Python's comparison (a decision on the values)


# kept: min/max of symbolic ints stay symbolic (`torch.sym_min(k, x[mask].shape[0])`); the generic path pins them
@torchop(torch.sym_min, name="sym_min")
def sym_min(a: Any, b: Any) -> Any:
    return _sym_extremum(prims.sym_min, builtins.min, a, b)


# kept: as sym_min
@torchop(torch.sym_max, name="sym_max")
def sym_max(a: Any, b: Any) -> Any:
    return _sym_extremum(prims.sym_max, builtins.max, a, b)


# kept: an operator (__add__, __radd__: no generic fallback); fewer guards (48 vs 52), misses (9 vs 10), pins
# (48 vs 50), and more ops a fusing executor takes (72 vs 46) over OpInfo's samples (bench/rules_vs_generic.py)
@torchop(torch.add, torch.Tensor.add, name="add", methods=("add", "__add__", "__radd__"))
def add(a: Any, b: Any, *, alpha: Any = 1) -> TensorProxy:
    return _add_or_sub("add", torch.add, a, b, alpha)


# kept: broadcasting without guards (torch's kernel decides each size 1 or not)
@torchop(torch.sub, torch.Tensor.sub, name="sub", methods=("sub", "__sub__"))
def sub(a: Any, b: Any, *, alpha: Any = 1) -> TensorProxy:
    return _add_or_sub("sub", torch.sub, a, b, alpha)


# kept: broadcasting without guards (torch's kernel decides each size 1 or not)
@torchop(torch.rsub, name="rsub", methods=("__rsub__",))
def rsub(a: Any, b: Any, *, alpha: Any = 1) -> TensorProxy:
    return sub(b, a, alpha=alpha)


# kept: broadcasting without guards (torch's kernel decides each size 1 or not)
@torchop(torch.mul, torch.Tensor.mul, name="mul", methods=("mul", "__mul__", "__rmul__"))
def mul(a: Any, b: Any) -> TensorProxy:
    return elementwise("mul", torch.mul, a, b)


# kept: broadcasting without guards (torch's kernel decides each size 1 or not)
@torchop(torch.div, torch.Tensor.div, torch.true_divide, name="div", methods=("div", "__truediv__"))
def div(a: Any, b: Any, *, rounding_mode: str | None = None) -> TensorProxy:
    if rounding_mode not in (None, "trunc", "floor"):  # meta raises ValueError; eager, RuntimeError
        raise RuntimeError(
            f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{rounding_mode}'"
        )
    if rounding_mode is not None and _common_dtype(a, b) is torch.bool:  # meta raises a RuntimeError
        device = next(x.device.type for x in (a, b) if isinstance(x, TensorProxy))
        raise NotImplementedError(f"\"div_{rounding_mode}_{device}\" not implemented for 'Bool'")
    return elementwise("div", torch.div, a, b, rounding_mode=rounding_mode)


# kept: an operator (`2 / x`): dunders have no generic fallback; broadcasting without guards
@torchop(runtime.rdiv, name="rdiv", methods=("__rtruediv__",))
def rdiv(a: Any, b: Any) -> TensorProxy:
    return div(b, a)


# kept: broadcasting without guards (torch's kernel decides each size 1 or not)
@torchop(torch.pow, torch.Tensor.pow, name="pow", methods=("pow", "__pow__"))
def pow(a: Any, b: Any) -> TensorProxy:  # noqa: A001
    """Where meta is wrong: a bool tensor to a bool scalar power stays bool; other bool powers have no kernel."""
    bool_scalar_exponent = _is_bool(b) and not isinstance(b, TensorProxy)
    if _common_dtype(a, b) is torch.bool and not bool_scalar_exponent:
        raise NotImplementedError("\"pow\" not implemented for 'Bool'")
    integral = isinstance(a, TensorProxy) and not (a.dtype.is_floating_point or a.dtype.is_complex)
    int_exponent = type(b) is int or (isinstance(b, NumberProxy) and b.python_type is int)
    if integral and int_exponent and decide(E.lt(value_expr(b), 0), "pow", "is the integer exponent negative"):
        raise RuntimeError("Integers to negative integer powers are not allowed.")
    out_dtype = torch.bool if bool_scalar_exponent and a.dtype is torch.bool else None
    return elementwise("pow", torch.pow, a, b, out_dtype=out_dtype)


# kept: an operator (`2 ** x`): dunders have no generic fallback; broadcasting without guards
@torchop(runtime.rpow, name="rpow", methods=("__rpow__",))
def rpow(a: Any, b: Any) -> TensorProxy:
    return pow(b, a)


def _comparison(name: str) -> Any:
    torch_fn = getattr(torch, name)

    def decomposition(a: Any, b: Any) -> TensorProxy:
        return elementwise(name, torch_fn, a, b, compare=True)

    decomposition.__name__ = name
    # kept: broadcasting without guards (torch's kernel decides each size 1 or not)
    return torchop(torch_fn, getattr(torch.Tensor, name), name=name, methods=(name, f"__{name}__"))(decomposition)


eq = _comparison("eq")
ne = _comparison("ne")
lt = _comparison("lt")
le = _comparison("le")
gt = _comparison("gt")
ge = _comparison("ge")


# kept: broadcasting without guards; a prims.where, which fusing executors take
@torchop(torch.where, name="where")
def where(condition: TensorProxy, input: Any = None, other: Any = None) -> TensorProxy:
    if input is None and other is None:  # torch.where(condition) is nonzero(condition, as_tuple=True)
        return generic_call(torch.nonzero, (condition,), {"as_tuple": True})
    if input is None or other is None:
        raise TypeError("where() missing an argument: pass both input and other, or neither")
    out_dtype = meta_call(torch.where, condition, input, other).dtype
    shape = broadcast_shapes(*(x.dims for x in (condition, input, other) if isinstance(x, TensorProxy)))
    cond = expand_to(condition, shape)
    a, b = (convert(expand_to(_operand(x), shape), out_dtype) for x in (input, other))
    if not isinstance(a, TensorProxy) and not isinstance(b, TensorProxy):
        a = prims.full(shape, a, out_dtype, cond.device)
    return prims.where(cond, a, b)


# kept: broadcasting without guards; a prims.where, which fusing executors take
@torchop(torch.Tensor.where, name="tensor_where", methods=("where",))
def tensor_where(a: TensorProxy, condition: TensorProxy, other: Any) -> TensorProxy:
    """`a.where(condition, other)` is `torch.where(condition, a, other)`."""
    return where(condition, a, other)


# Reductions.


def _keep(out: TensorProxy, a: TensorProxy, dims: tuple, keepdim: bool) -> TensorProxy:
    if not keepdim or a.ndim == 0:
        return out
    shape = tuple(E.const(1) if i in dims else d for i, d in enumerate(a.dims))
    kept = tuple(i for i in range(a.ndim) if i not in dims)
    return prims.broadcast_in_dim(out, shape, kept)


# kept: a reduction prim, which fusing executors take (dims as needs-constant requests)
@torchop(torch.sum, torch.Tensor.sum, name="sum", methods=("sum",))
def sum(a: TensorProxy, dim: Any = None, keepdim: bool = False, *, dtype: torch.dtype | None = None) -> Any:  # noqa: A001
    by_dim = (dim, keepdim) if dim is not None else ()
    out_dtype = meta_call(torch.sum, a, *by_dim, dtype=dtype).dtype
    dims = canonical_dims(dim, a.ndim)
    out = prims.sum(convert(a, out_dtype), dims)
    return _keep(out, a, dims, keepdim)


# kept: reduction and elementwise prims, which fusing executors take
@torchop(torch.mean, torch.Tensor.mean, name="mean", methods=("mean",))
def mean(a: TensorProxy, dim: Any = None, keepdim: bool = False, *, dtype: torch.dtype | None = None) -> Any:
    if dtype is None and not (a.dtype.is_floating_point or a.dtype.is_complex):
        eager_call(torch.mean, a)  # eager's refusal first: the meta kernel's type differs from torch 2.15's
    out_dtype = (meta_call(torch.mean, a, dim, keepdim, dtype=dtype) if dim is not None else
                 meta_call(torch.mean, a, dtype=dtype)).dtype  # fmt: skip
    dims = canonical_dims(dim, a.ndim)
    total = prims.sum(convert(a, out_dtype), dims)
    count = E.const(1)
    for i in dims if a.ndim else ():  # a 0-d tensor reduces over dim 0 or -1
        count = E.mul(count, a.dims[i])
    return _keep(prims.div(total, count), a, dims, keepdim)


# kept: a reduction prim, which fusing executors take (dims as needs-constant requests)
@torchop(torch.amax, torch.Tensor.amax, name="amax", methods=("amax",))
def amax(a: TensorProxy, dim: Any = (), keepdim: bool = False) -> Any:
    meta_call(torch.amax, a, dim, keepdim)
    every = dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0)
    dims = canonical_dims(dim, a.ndim)
    for i in dims if a.ndim else ():  # a 0-d tensor reduces over dim 0 or -1
        if not decide(E.ne(a.dims[i], 0), "amax", f"reduction over dim {i} needs a non-empty dim"):
            if every:
                raise RuntimeError("amax(): Expected reduction dim to be specified for input.numel() == 0. "
                                   "Specify the reduction dim with the 'dim' argument.")  # fmt: skip
            raise IndexError(f"amax(): Expected reduction dim {i} to have non-zero size.")
    return _keep(prims.amax(a, dims), a, dims, keepdim)


# Matmul.


def _check_inner(k1: E.Expr, k2: E.Expr, a: TensorProxy, b: TensorProxy) -> None:
    if not decide(E.eq(k1, k2), "matmul", "inner dims must match"):
        ashape = "x".join(fmt_shape(a.dims)[1:-1].split(", ")) if a.ndim else "1"
        bshape = "x".join(fmt_shape(b.dims)[1:-1].split(", ")) if b.ndim else "1"
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({ashape} and {bshape})")


def _mixed_dtypes(a: TensorProxy, b: TensorProxy) -> TensorProxy:
    """Operands of different dtypes: eager raises, except on its batched (bmm) path, which returns early, in
    b's dtype, when the output or the contraction is empty. That path is taken when both operands are at least
    3-D, or for 2-D @ 3-D+ unless the 2-D operand requires grad (then eager folds it into a matmul)."""
    folded = a.ndim == 2 and a.requires_grad and torch.is_grad_enabled()
    if (a.ndim >= 3 and b.ndim >= 3) or (a.ndim == 2 and b.ndim >= 3 and not folded):
        out = broadcast_shapes(a.dims[:-2], b.dims[:-2]) + (a.dims[-2], b.dims[-1])
        empty = E.or_(E.eq(math.prod(out, start=E.const(1)), 0), E.eq(a.dims[-1], 0))
        if decide(empty, "matmul", "operands of different dtypes only multiply when the result is empty"):
            return convert(a, b.dtype)
    raise RuntimeError(f"expected both matmul operands to have the same dtype, but got {a.dtype} and {b.dtype}")


# kept: batch dims broadcast with fewer guards and misses than torch's kernel; on the GPT's hot path
@torchop(torch.matmul, torch.Tensor.matmul, name="matmul", methods=("matmul", "__matmul__"))
def matmul(a: TensorProxy, b: TensorProxy) -> TensorProxy:
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError("both arguments to matmul need to be at least 1D, but they are "
                           f"{a.ndim}D and {b.ndim}D")  # fmt: skip
    _check_inner(a.dims[-1], b.dims[0] if b.ndim == 1 else b.dims[-2], a, b)
    if a.dtype != b.dtype:  # meta promotes; the kernels do not
        a = _mixed_dtypes(a, b)
    meta_call(torch.matmul, a, b)
    if a.ndim == 1 and b.ndim == 1:
        return prims.sum(prims.mul(a, expand_to(b, a.dims)), (0,))
    a2 = prims.broadcast_in_dim(a, (E.const(1), a.dims[0]), (1,)) if a.ndim == 1 else a
    b2 = prims.broadcast_in_dim(b, (b.dims[0], E.const(1)), (0,)) if b.ndim == 1 else b
    batch = broadcast_shapes(a2.dims[:-2], b2.dims[:-2])
    out = prims.matmul(expand_to(a2, batch + a2.dims[-2:]), expand_to(b2, batch + b2.dims[-2:]))
    if a.ndim == 1:
        out = prims.squeeze(out, (out.ndim - 2,))
    if b.ndim == 1:
        out = prims.squeeze(out, (out.ndim - 1,))
    return out


# kept: an operator (`a @ x` with a non-tensor a): dunders have no generic fallback
@torchop(operator.rmatmul if hasattr(operator, "rmatmul") else runtime.rmatmul, name="rmatmul",
         methods=("__rmatmul__",), impl=runtime.rmatmul)  # fmt: skip
def rmatmul(a: TensorProxy, b: TensorProxy) -> TensorProxy:
    return matmul(b, a)
