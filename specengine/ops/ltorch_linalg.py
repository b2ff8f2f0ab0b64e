"""Linear algebra: mm, bmm, linear, einsum (baddbmm takes the generic path: torch's kernel decides no more).

Inner and batch sizes that must be equal are decided (as matmul does). A tensor added into the product (a bias)
is broadcast into the product's shape whatever its sizes: its compatibility raises eager's error from the example
values without a guard, as the torch op raises it at run time (see `broadcast_pair`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from specengine.constraints import expr as E
from specengine.ir.proxies import TensorProxy, unsupported
from specengine.ops import prims
from specengine.ops.ltorch_arith import matmul
from specengine.ops.ltorch_inplace import _type_name
from specengine.ops.registry import torchop
from specengine.ops.utils import convert, decide, example, expand_to, hint, meta_call

__all__ = ["mm", "bmm", "linear", "einsum"]

_CPP_NAMES = {
    torch.float32: "float", torch.float64: "double", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16",
    torch.int64: "long int", torch.int32: "int", torch.bool: "bool",
}  # fmt: skip


def _cpp(dtype: torch.dtype) -> str:
    return _CPP_NAMES.get(dtype, str(dtype).removeprefix("torch."))


def _no_bool(kernel: str, x: TensorProxy, sizes: tuple) -> None:
    """Eager's error for a bool product; its kernel runs (and raises) only when no size is 0. No guard: for
    other sizes the torch op raises it at run time."""
    if x.dtype is torch.bool and all(hint(s) > 0 for s in sizes):
        raise NotImplementedError(f"\"{kernel}\" not implemented for 'Bool'")


def _sizes(x: TensorProxy) -> str:
    return "x".join(str(example(d)) for d in x.dims)


def _broadcast_into(x: TensorProxy, dims: tuple) -> TensorProxy:
    """`x` broadcast into `dims`, the op's output shape whatever `x` is; eager's expand errors from the hints."""
    have, want = [hint(d) for d in x.dims], [hint(d) for d in dims]
    if len(have) > len(want):
        raise RuntimeError(f"expand({x.type_string()}, size={want}): the number of sizes provided ({len(want)}) must "
                           f"be greater or equal to the number of dimensions in the tensor ({len(have)})")  # fmt: skip
    offset = len(want) - len(have)
    for i, h in enumerate(have):
        if h not in (want[offset + i], 1):  # no guard: the torch op raises this at run time too
            raise RuntimeError(f"The expanded size of the tensor ({want[offset + i]}) must match the existing size "
                               f"({h}) at non-singleton dimension {offset + i}.  Target sizes: {want}.  Tensor "
                               f"sizes: {have}")  # fmt: skip
    return expand_to(x, tuple(dims))


# kept: eager's errors on bad inputs at trace time (torch's kernel compiles an entry for them first)
@torchop(torch.mm, torch.Tensor.mm, name="mm", methods=("mm",))
def mm(a: TensorProxy, b: TensorProxy) -> TensorProxy:
    if a.ndim != 2:
        raise RuntimeError("self must be a matrix")
    if b.ndim != 2:
        raise RuntimeError("mat2 must be a matrix")
    if a.dtype != b.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {_cpp(a.dtype)} != {_cpp(b.dtype)}")
    _no_bool(f"addmm_impl_{a.device.type}_", a, a.dims + b.dims[1:])
    if not decide(E.eq(a.dims[1], b.dims[0]), "mm", "inner dims must match"):
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({_sizes(a)} and {_sizes(b)})")
    return prims.matmul(a, b)


def _check_batched(a: TensorProxy, b: TensorProxy, op: str) -> None:
    for name, x in (("batch1", a), ("batch2", b)):
        if x.ndim != 3:
            raise RuntimeError(f"{name} must be a 3D tensor")
    batch = decide(E.eq(b.dims[0], a.dims[0]), op, "batch sizes must match")
    if not (batch and decide(E.eq(b.dims[1], a.dims[2]), op, "inner dims must match")):
        raise RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: [{example(a.dims[0])}, "
                           f"{example(a.dims[2])}] but got: [{example(b.dims[0])}, {example(b.dims[1])}].")  # fmt: skip


# kept: an empty product has batch2's dtype, as eager (torch's meta kernel raises on mixed dtypes)
@torchop(torch.bmm, torch.Tensor.bmm, name="bmm", methods=("bmm",))
def bmm(a: TensorProxy, b: TensorProxy) -> TensorProxy:
    _check_batched(a, b, "bmm")
    sizes = a.dims + b.dims[2:]
    if a.dtype != b.dtype and all(hint(s) > 0 for s in sizes):  # an empty product has batch2's dtype
        raise RuntimeError(f"expected scalar type {_type_name(a.dtype)} but found {_type_name(b.dtype)}")
    _no_bool("bmm", a, sizes)
    return prims.matmul(convert(a, b.dtype), b)


# kept: fewer guards than torch's kernel (bias broadcast into the product without guards)
@torchop(F.linear, name="linear")
def linear(input: TensorProxy, weight: TensorProxy, bias: TensorProxy | None = None) -> TensorProxy:
    """`input @ weight.T + bias` (nn.Linear)."""
    if input.ndim == 0 or weight.ndim == 0:
        raise RuntimeError(f"both arguments to linear need to be at least 1D, but they are {input.ndim}D and "
                           f"{weight.ndim}D")  # fmt: skip
    if weight.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {weight.ndim}D")
    if input.dtype != weight.dtype:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: {_cpp(input.dtype)} != "
                           f"{_cpp(weight.dtype)}")  # fmt: skip
    rows = math.prod((hint(d) for d in input.dims[:-1]), start=1)
    _no_bool(
        f"addmm_impl_{input.device.type}_", input, (rows, input.dims[-1], weight.dims[0] if weight.ndim == 2 else 1)
    )
    if bias is not None and bias.dtype != input.dtype:
        raise RuntimeError(f"self and mat2 must have the same dtype, but got {_type_name(bias.dtype)} and "
                           f"{_type_name(input.dtype)}")  # fmt: skip
    if bias is not None and input.ndim == 2 and weight.ndim == 1:  # eager's addmm path wants a matrix
        raise RuntimeError("mat2 must be a matrix, got 1-D tensor")
    if input.ndim == 2 and weight.ndim == 2:
        if not decide(E.eq(input.dims[1], weight.dims[1]), "linear", "inner dims must match"):
            raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({_sizes(input)} and "
                               f"{example(weight.dims[1])}x{example(weight.dims[0])})")  # fmt: skip
        out = prims.matmul(input, prims.permute(weight, (1, 0)))
    else:
        out = matmul(input, prims.permute(weight, (1, 0)) if weight.ndim == 2 else weight)
    return out if bias is None else prims.add(out, _broadcast_into(bias, out.dims))


# einsum: operands are contracted left to right with matmul (a broadcast mul when nothing is summed, or for
# bool), after summing out the subscripts that neither a later operand nor the output uses.

_ELLIPSIS = tuple(chr(0x3B1 + i) for i in range(24))  # stand-ins for the dims under "..." (not ASCII letters)


def _parse(equation: str, ranks: list[int]) -> tuple[list[str], str]:
    lhs, arrow, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    spans = [r - (len(term) - 3) for term, r in zip(terms, ranks) if "..." in term]
    ell = "".join(_ELLIPSIS[: max(spans, default=0)])
    inputs = [term.replace("...", ell[len(ell) - (r - (len(term) - 3)) :]) for term, r in zip(terms, ranks)]
    if arrow:
        return inputs, rhs.replace("...", ell)
    once = sorted(c for c in set(lhs) if c.isalpha() and lhs.count(c) == 1)
    return inputs, ell + "".join(once)


def _letter_sizes(inputs: list[str], operands: tuple) -> dict[str, E.Expr]:
    sizes: dict[str, E.Expr] = {}
    for i, (letters, x) in enumerate(zip(inputs, operands)):
        for c, n in zip(letters, x.dims):
            old = sizes.setdefault(c, n)
            if old is n or decide(E.eq(old, n), "einsum", "subscript sizes must match"):
                continue
            if decide(E.eq(n, 1), "einsum", "does the subscript broadcast"):
                continue
            if not decide(E.eq(old, 1), "einsum", "does the subscript broadcast"):
                raise RuntimeError(f"einsum(): subscript {c} has size {example(n)} for operand {i} which does not "
                                   f"broadcast with previously seen size {example(old)}")  # fmt: skip
            sizes[c] = n
    return sizes


def _sum_out(x: TensorProxy, letters: str, keep: set) -> tuple[TensorProxy, str]:
    dims = tuple(i for i, c in enumerate(letters) if c not in keep)
    if not dims:
        return x, letters
    dtype = x.dtype if x.dtype.is_floating_point or x.dtype.is_complex else torch.int64  # as torch.sum
    return prims.sum(convert(x, dtype), dims), "".join(c for c in letters if c in keep)


def _arrange(x: TensorProxy, letters: str, order: list[str], dims: tuple | None = None) -> TensorProxy:
    """`x` permuted to `order`, then reshaped to `dims` when they differ."""
    if list(letters) != order:
        x = prims.permute(x, tuple(letters.index(c) for c in order))
    return x if dims is None or x.dims == dims else prims.reshape(x, dims)


def _check_product(a: TensorProxy, b: TensorProxy, inner: list, rest: list, sizes: dict) -> None:
    """Eager's errors for a contraction that runs bmm (inner size over 1, no empty operand); no guard: for other
    sizes the torch op raises them at run time."""
    if len(inner) == 0 or hint(_numel(sizes, inner)) <= 1 or hint(_numel(sizes, rest)) == 0:
        return
    if a.dtype != b.dtype:
        raise RuntimeError(f"expected scalar type {_type_name(a.dtype)} but found {_type_name(b.dtype)}")
    _no_bool("bmm", a, ())


def _numel(sizes: dict, letters: list) -> E.Expr:
    return math.prod((sizes[c] for c in letters), start=E.const(1))


def _by_mul(a: TensorProxy, la: str, b: TensorProxy, lb: str, groups: tuple, sizes: dict) -> TensorProxy:
    """The contraction as a broadcast product summed over `inner` (outer products; bool operands)."""
    batch, left, inner, right = groups
    letters = batch + left + right + inner
    pos = {c: i for i, c in enumerate(letters)}
    dims = tuple(sizes[c] for c in letters)
    a2 = prims.broadcast_in_dim(
        _arrange(a, la, batch + left + inner), dims, tuple(pos[c] for c in batch + left + inner)
    )
    b2 = prims.broadcast_in_dim(
        _arrange(b, lb, batch + inner + right), dims, tuple(pos[c] for c in batch + inner + right)
    )
    out = prims.mul(a2, b2)
    if not inner:
        return out
    summed = prims.sum(
        convert(out, torch.int64) if a.dtype is torch.bool else out, tuple(range(len(dims) - len(inner), len(dims)))
    )
    return convert(summed, a.dtype)


def _contract(a: TensorProxy, la: str, b: TensorProxy, lb: str, keep: set, sizes: dict, dtype: torch.dtype) -> tuple:
    a, la = _sum_out(a, la, keep | set(lb))
    b, lb = _sum_out(b, lb, keep | set(la))
    batch = [c for c in la if c in lb and c in keep]
    inner = [c for c in la if c in lb and c not in keep]
    left, right = [c for c in la if c not in lb], [c for c in lb if c not in la]
    _check_product(a, b, inner, batch + left + right, sizes)
    a, b = convert(a, dtype), convert(b, dtype)
    letters = batch + left + right
    if not inner or dtype is torch.bool:
        return _by_mul(a, la, b, lb, (batch, left, inner, right), sizes), "".join(letters)
    if len(left) == len(inner) == len(right) == 1:
        out = prims.matmul(_arrange(a, la, batch + left + inner), _arrange(b, lb, batch + inner + right))
        return out, "".join(letters)
    group = tuple(sizes[c] for c in batch)
    a3 = _arrange(a, la, batch + left + inner, (*group, _numel(sizes, left), _numel(sizes, inner)))
    b3 = _arrange(b, lb, batch + inner + right, (*group, _numel(sizes, inner), _numel(sizes, right)))
    out = prims.matmul(a3, b3)
    out_dims = tuple(sizes[c] for c in letters)
    return (out if out.dims == out_dims else prims.reshape(out, out_dims)), "".join(letters)


def _einsum_operands(equation: str, operands: tuple) -> tuple[list, str, dict]:
    for x in operands:
        if not isinstance(x, TensorProxy):
            raise unsupported("einsum with a tensor closed over from outside", "pass the tensor as an argument")
    inputs, output = _parse(equation, [x.ndim for x in operands])
    if any(len(set(letters)) != len(letters) for letters in inputs):
        raise unsupported("einsum with a subscript repeated in one operand (a diagonal)", "use torch.diagonal")
    sizes = _letter_sizes(inputs, operands)
    ops = []
    for letters, x in zip(inputs, operands):
        dims = tuple(sizes[c] for c in letters)
        ops.append((_broadcast_into(x, dims) if any(hint(d) != hint(n) for d, n in zip(dims, x.dims)) else x, letters))
    return ops, output, sizes


# kept: fewer guards than torch's kernel; contractions as matmul and reduction prims
@torchop(torch.einsum, name="einsum")
def einsum(equation: str, *operands: Any) -> TensorProxy:
    if not isinstance(equation, str):
        raise unsupported("einsum in sublist format", "pass the equation as a string")
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    dtype = meta_call(torch.einsum, equation, *operands).dtype  # also eager's errors on the equation
    ops, output, sizes = _einsum_operands(equation, operands)
    cur, letters = ops[0]
    for i, (x, lx) in enumerate(ops[1:], 1):
        keep = set(output).union(*(set(s) for _, s in ops[i + 1 :]))
        cur, letters = _contract(cur, letters, x, lx, keep, sizes, dtype)
    cur, letters = _sum_out(cur, letters, set(output))
    return convert(_arrange(cur, letters, list(output)), dtype)
