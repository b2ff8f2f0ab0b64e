"""Neural-network ops (embedding, norms, dropout, scaled_dot_product_attention); losses are in ltorch_losses.py.

Decompositions compute in opmath (float32 for float16/bfloat16) as the CPU kernels do. Sizes that may be 0 need
no decision: maxima use `prims.amax_ninf` (the max of nothing is -inf), means divide by symbolic counts.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
import torch.nn.functional as F

from specengine.constraints import expr as E
from specengine.ir.proxies import TensorProxy, is_outside_tensor, unsupported, value_expr
from specengine.ops import ltorch_arith, prims
from specengine.ops.generic import generic_call
from specengine.ops.ltorch_inplace import copy_to
from specengine.ops.ltorch_views import transpose
from specengine.ops.registry import torchop
from specengine.ops.utils import (
    broadcast_shapes,
    convert,
    decide,
    eager_error,
    example,
    expand_to,
    fmt_shape,
    fresh,
    hint,
)

__all__ = [
    "embedding", "torch_embedding", "layer_norm", "rms_norm", "group_norm", "torch_group_norm", "dropout",
    "torch_dropout", "scaled_dot_product_attention",
]  # fmt: skip

NEG_INF = float("-inf")


# Prims. Also used: prims.amax_ninf (ltorch_reductions: amax, -inf over an empty dim) and prims.gather
# (ltorch_joins), looked up when an op is traced.


def _bernoulli_impl(shape: tuple, p: float, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device=device).bernoulli_(p)  # as ATen's dropout draws its noise


@prims.prim("nn_bernoulli", impl=_bernoulli_impl, tags=("random",), pure=False)
def nn_bernoulli(shape: tuple, p: float, dtype: torch.dtype, device: torch.device) -> TensorProxy:
    """Ones with probability `p`, else zeros; draws from torch's generator exactly as eager dropout does."""
    return prims.new_tensor(shape, dtype, [], device)


@prims.prim("nn_fma", impl=lambda a, b, c: torch.addcmul(c, a, b), tags=("elementwise",))
def nn_fma(a: TensorProxy, b: TensorProxy, c: TensorProxy) -> TensorProxy:
    """a * b + c (one rounding where the CPU has fused multiply-add)."""
    return prims.new_tensor(a.dims, a.dtype, [a, b, c])


def _causal_mask_impl(rows: int, cols: int, device: torch.device) -> torch.Tensor:
    return torch.ones(rows, cols, dtype=torch.bool, device=device).tril()


@prims.prim("nn_causal_mask", impl=_causal_mask_impl)
def nn_causal_mask(rows: Any, cols: Any, device: torch.device) -> TensorProxy:
    """A bool (rows, cols) mask, True where col <= row (top-left aligned)."""
    return prims.new_tensor((rows, cols), torch.bool, [], device)


# Helpers.


def _opmath(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _type_name(dtype: torch.dtype) -> str:
    """torch's scalar type name, e.g. Float, Long, BFloat16."""
    return torch.empty(0, dtype=dtype).type().removeprefix("torch.").removesuffix("Tensor")


def _no_outside_tensors(*xs: Any) -> None:
    if any(is_outside_tensor(x) for x in xs):
        raise unsupported("a tensor closed over from outside", "pass the tensor as an argument")


def _numel(dims: tuple) -> E.Expr:
    return math.prod(dims, start=E.const(1))


def _same_dims(a: tuple, b: tuple, op: str, reason: str) -> bool:
    if len(a) != len(b):
        return False
    return not a or decide(E.and_(*(E.eq(x, y) for x, y in zip(a, b))), op, reason)


def _expand_reduced(t: TensorProxy, dims: tuple, reduced: tuple) -> TensorProxy:
    """A reduction's result broadcast back over the reduced dims."""
    return prims.broadcast_in_dim(t, tuple(dims), tuple(i for i in range(len(dims)) if i not in reduced))


def _check_floating(x: TensorProxy, kernel: str) -> None:
    if not x.dtype.is_floating_point:
        raise NotImplementedError(f"\"{kernel}\" not implemented for '{_type_name(x.dtype)}'")


def _safe_softmax(s: TensorProxy) -> TensorProxy:
    """Softmax over the last dim; rows with no finite score (fully masked or empty) are 0, as in eager sdpa."""
    last = (s.ndim - 1,)
    m = prims.amax_ninf(s, last)
    dead = prims.eq(m, NEG_INF)
    e = prims.exp(prims.sub(s, _expand_reduced(prims.where(dead, 0.0, m), s.dims, last)))
    p = prims.div(e, _expand_reduced(prims.sum(e, last), s.dims, last))
    return prims.where(_expand_reduced(dead, s.dims, last), 0.0, p)


# Embedding.


def _embed(indices: TensorProxy, weight: TensorProxy) -> TensorProxy:
    if weight.ndim != 2:
        raise RuntimeError("'weight' must be 2-D")
    if indices.dtype not in (torch.int64, torch.int32):
        raise RuntimeError("Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {torch.empty(0, dtype=indices.dtype).type()} instead (while checking "
                           "arguments for embedding)")  # fmt: skip
    k = _numel(indices.dims)
    flat = prims.reshape(convert(indices, torch.int64), (k,))
    rows = prims.gather(weight, 0, prims.broadcast_in_dim(flat, (k, weight.dims[1]), (0,)))
    return prims.reshape(rows, indices.dims + (weight.dims[1],))


# kept: gather and reshape prims (an all-prims trace, tests/test_ops_nn.py); padding_idx and weight checks raise
# eager's errors (the generic path does not: test_ops_nn's embedding-padding-oob, -bad-weight); the GPT's hot path
@torchop(F.embedding, name="embedding")
def embedding(input: TensorProxy, weight: TensorProxy, padding_idx: Any = None, max_norm: Any = None,
              norm_type: float = 2.0, scale_grad_by_freq: bool = False,
              sparse: bool = False) -> TensorProxy:  # fmt: skip
    _no_outside_tensors(input, weight)
    if padding_idx is not None and weight.ndim:
        p, n = value_expr(padding_idx), weight.dims[0]
        if decide(E.gt(p, 0), "embedding", "is padding_idx positive"):
            ok = E.lt(p, n)
        else:
            ok = E.ge(p, E.neg(n)) if decide(E.lt(p, 0), "embedding", "is padding_idx negative") else E.TRUE
        if not decide(ok, "embedding", "padding_idx within num_embeddings"):
            raise AssertionError("Padding_idx must be within num_embeddings")
    if max_norm is not None:
        raise unsupported("embedding(max_norm=...)", "max_norm renormalizes the weight in place; renormalize it "
                          "outside the compiled function")  # fmt: skip
    return _embed(input, weight)


# kept: torch.embedding, the same prims as F.embedding (what F.embedding calls in eager; OpInfo measured no difference)
@torchop(torch.embedding, name="torch_embedding")
def torch_embedding(weight: TensorProxy, indices: TensorProxy, padding_idx: int = -1,
                    scale_grad_by_freq: bool = False, sparse: bool = False) -> TensorProxy:  # fmt: skip
    _no_outside_tensors(weight, indices)
    return _embed(indices, weight)


# Normalization.


def _shape_exprs(shape: Any, op: str) -> tuple:
    if not isinstance(shape, (tuple, list, torch.Size)):
        raise TypeError(f"{op}(): argument 'normalized_shape' (position 2) must be tuple of ints, not "
                        f"{type(shape).__name__}")  # fmt: skip
    return tuple(value_expr(s) for s in shape)


def _check_normalized_shape(x: TensorProxy, ns: tuple, params: dict, op: str) -> None:
    if not ns:
        raise RuntimeError("Expected normalized_shape to be at least 1-dimensional, i.e., containing at least one "
                           "element, but got normalized_shape = []")  # fmt: skip
    for name, p in params.items():
        if p is not None and not _same_dims(p.dims, ns, op, f"{name} has the normalized shape"):
            raise RuntimeError(f"Expected {name} to be of same shape as normalized_shape, but got {name} of shape "
                               f"{fmt_shape(p.dims)} and normalized_shape = {fmt_shape(ns)}")  # fmt: skip
    k = len(ns)
    if x.ndim < k or not _same_dims(x.dims[x.ndim - k :], ns, op, "input ends with the normalized shape"):
        star = "*, " if op == "layer_norm" else "*"
        raise RuntimeError(f"Given normalized_shape={fmt_shape(ns)}, expected input with shape [{star}"
                           f"{fmt_shape(ns)[1:]}, but got input of size{fmt_shape(x.dims)}")  # fmt: skip


def _check_params_dtype(x: TensorProxy, params: tuple, kernel: bool = True) -> None:
    """The CPU kernels' rules: parameters share the input's dtype, or are float32 for a float16/bfloat16 input.
    `kernel=False`: only the mixed-dtype checks (the op's, before the kernel's)."""
    params = [p for p in params if p is not None]
    if x.device.type != "cpu" or not params:
        return
    if params[0].dtype != x.dtype:
        if any(p.dtype != torch.float32 for p in params):
            raise RuntimeError("mixed dtype (CPU): expect parameter to have scalar type of Float")
        if x.dtype not in (torch.float16, torch.bfloat16):
            raise RuntimeError("mixed dtype (CPU): all inputs must share same datatype.")
        return
    for p in params if kernel else ():
        if p.dtype != x.dtype:
            raise RuntimeError(f"expected scalar type {_type_name(x.dtype)} but found {_type_name(p.dtype)}")


def _normalize(x: TensorProxy, reduced: tuple, eps: float, fused: bool = False) -> TensorProxy:
    """(x - mean) / sqrt(var + eps) over `reduced`, with the biased variance; `fused`: as fma(x, rstd, -mean *
    rstd), the rounding of the CPU layer_norm kernel for float16/bfloat16 (visible where var is 0)."""
    n = _numel(tuple(x.dims[i] for i in reduced))
    mean = prims.div(prims.sum(x, reduced), n)
    xc = prims.sub(x, _expand_reduced(mean, x.dims, reduced))
    rstd = prims.pow(prims.add(prims.div(prims.sum(prims.mul(xc, xc), reduced), n), eps), -0.5)
    if fused:
        shift = prims.neg(prims.mul(mean, rstd))
        return nn_fma(x, _expand_reduced(rstd, x.dims, reduced), _expand_reduced(shift, x.dims, reduced))
    return prims.mul(xc, _expand_reduced(rstd, x.dims, reduced))


def _affine(y: TensorProxy, weight: Any, bias: Any, at: tuple) -> TensorProxy:
    if weight is not None:
        y = prims.mul(y, prims.broadcast_in_dim(convert(weight, y.dtype), y.dims, at))
    if bias is not None:
        y = prims.add(y, prims.broadcast_in_dim(convert(bias, y.dtype), y.dims, at))
    return y


# kept: fewer guards than torch's kernel (12 against 25 over OpInfo's samples); fusible prims
@torchop(F.layer_norm, torch.layer_norm, name="layer_norm", impl=torch.layer_norm)
def layer_norm(input: TensorProxy, normalized_shape: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5,
               cudnn_enable: bool = True) -> TensorProxy:  # fmt: skip
    _no_outside_tensors(input, weight, bias)
    ns = _shape_exprs(normalized_shape, "layer_norm")
    _check_normalized_shape(input, ns, {"weight": weight, "bias": bias}, "layer_norm")
    _check_params_dtype(input, (weight, bias))
    _check_floating(input, "LayerNormKernelImpl")
    dims = tuple(range(input.ndim - len(ns), input.ndim))
    y = _normalize(convert(input, _opmath(input.dtype)), dims, eps, fused=_opmath(input.dtype) != input.dtype)
    return convert(_affine(y, weight, bias, dims), input.dtype)


# kept: fewer guards than torch's kernel (8 against 20 over OpInfo's samples); fusible prims
@torchop(F.rms_norm, torch.rms_norm, name="rms_norm")
def rms_norm(input: TensorProxy, normalized_shape: Any, weight: Any = None, eps: float | None = None) -> TensorProxy:
    """torch's composite: x * rsqrt(mean(x^2) + eps) in opmath, cast back, then times the weight, cast back."""
    _no_outside_tensors(input, weight)
    ns = _shape_exprs(normalized_shape, "rms_norm")
    _check_normalized_shape(input, ns, {"weight": weight}, "rms_norm")
    _check_floating(input, "rms_norm")
    up = _opmath(input.dtype)
    eps = torch.finfo(up).eps if eps is None else eps
    x, dims = convert(input, up), tuple(range(input.ndim - len(ns), input.ndim))
    ms = prims.div(prims.sum(prims.mul(x, x), dims), _numel(tuple(input.dims[i] for i in dims)))
    y = convert(prims.mul(x, _expand_reduced(prims.pow(prims.add(ms, eps), -0.5), x.dims, dims)), input.dtype)
    return y if weight is None else convert(ltorch_arith.mul(y, weight), input.dtype)


def _verify_batch_size(x: TensorProxy, g: E.Expr) -> None:
    """F.group_norm's `_verify_batch_size([N * C // G, G, *spatial])`."""
    if not decide(E.ne(g, 0), "group_norm", "num_groups must be non-zero"):
        raise ZeroDivisionError("integer division or modulo by zero")
    size = [E.floordiv(E.mul(x.dims[0], x.dims[1]), g), g, *x.dims[2:]]
    if decide(E.eq(E.mul(size[0], _numel(x.dims[2:])), 1), "group_norm", "more than 1 value per channel"):
        raise ValueError(f"Expected more than 1 value per channel when training, got input size {fmt_shape(size)}")


@functools.cache
def _torch_group_norm_error(shape: tuple, dtype: torch.dtype) -> Exception | None:
    """What torch's group_norm (one group) raises on zeros of `shape`: its checks of empty sizes changed in torch
    2.14 (C == 0 and HxW == 0 refused before the other checks, an empty batch returned before the dtype checks)."""
    return eager_error(lambda: torch.group_norm(torch.zeros(shape, dtype=dtype), 1))


def _group_norm(input: TensorProxy, num_groups: Any, weight: Any, bias: Any, eps: float, verify: bool) -> TensorProxy:
    _no_outside_tensors(input, weight, bias)
    if input.ndim < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received {input.ndim}")
    g, c = value_expr(num_groups), input.dims[1]
    if verify:
        _verify_batch_size(input, g)
    for probe, size in (((1, 0), c), ((1, 1, 0), _numel(input.dims[2:]))):  # C == 0, then HxW == 0
        error = _torch_group_norm_error(probe, torch.float32)
        if error is not None and decide(E.eq(size, 0), "group_norm", "torch refuses an empty channel or spatial size"):
            raise fresh(error)
    if not decide(E.gt(g, 0), "group_norm", "num_groups must be positive"):
        raise RuntimeError(f"Expected num groups to be greater than 0, got {example(g)}")
    if not decide(E.eq(E.mod(c, g), 0), "group_norm", "num_groups must divide the channels"):
        raise RuntimeError("Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {fmt_shape(input.dims)} and num_groups={example(g)}")  # fmt: skip
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None and not (p.ndim == 1 and decide(E.eq(p.dims[0], c), "group_norm", f"{name} size is C")):
            raise RuntimeError(f"Expected {name} to be a vector of size equal to the number of channels in input, "
                               f"but got {name} of shape {fmt_shape(p.dims)} and input of shape "
                               f"{fmt_shape(input.dims)}")  # fmt: skip
    _check_params_dtype(input, (weight, bias), kernel=False)
    if _group_norm_kernel_refuses(input, (weight, bias)) and _torch_group_norm_error((0, 1), torch.int64) is None:
        if decide(E.eq(input.dims[0], 0), "group_norm", "torch returns an empty batch before its kernel's checks"):
            return prims.full(input.dims, 0, input.dtype, input.device)
    _check_params_dtype(input, (weight, bias))
    _check_floating(input, "GroupNormKernelImpl")
    x = convert(input, _opmath(input.dtype))
    grouped = prims.reshape(x, (input.dims[0], g, E.mul(E.floordiv(c, g), _numel(input.dims[2:]))))
    y = prims.reshape(_normalize(grouped, (2,), eps), input.dims)
    return convert(_affine(y, weight, bias, (1,)), input.dtype)


def _group_norm_kernel_refuses(x: TensorProxy, params: tuple) -> bool:
    """Whether the kernel's own checks (after the op's) refuse these dtypes: an empty batch decides only then."""
    params = [p for p in params if p is not None]
    mixed = x.device.type == "cpu" and params and params[0].dtype == x.dtype and any(p.dtype != x.dtype for p in params)
    return not x.dtype.is_floating_point or bool(mixed)


# kept: fewer guards than torch's kernel (5 against 7 over OpInfo's samples)
@torchop(F.group_norm, name="group_norm")
def group_norm(input: TensorProxy, num_groups: Any, weight: Any = None, bias: Any = None,
               eps: float = 1e-5) -> TensorProxy:  # fmt: skip
    return _group_norm(input, num_groups, weight, bias, eps, verify=True)


# kept: torch.group_norm, the same rule as F.group_norm
@torchop(torch.group_norm, name="torch_group_norm")
def torch_group_norm(input: TensorProxy, num_groups: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5,
                     cudnn_enabled: bool = True) -> TensorProxy:  # fmt: skip
    return _group_norm(input, num_groups, weight, bias, eps, verify=False)


# Dropout: impure (random), so passes never merge or drop two of them.


def _dropout(a: TensorProxy, p: float, train: bool) -> TensorProxy:
    """ATen's `_dropout_impl`: x * (bernoulli(1 - p) / (1 - p)); an identity when p == 0 or not training."""
    if not train or p == 0:
        return a
    if p == 1:  # eager multiplies by a 0-d zero, so nan and inf inputs give nan
        return prims.mul(a, expand_to(prims.full((), 0, a.dtype, a.device), a.dims))
    if not (a.dtype.is_floating_point or a.dtype.is_complex):
        if decide(E.eq(_numel(a.dims), 0), "dropout", "an empty tensor is returned as is"):
            return a
        raise RuntimeError(f"result type Float can't be cast to the desired output type {_type_name(a.dtype)}")
    noise = prims.div(nn_bernoulli(a.dims, 1 - p, a.dtype, a.device), 1 - p)
    return prims.mul(a, noise)


# kept: a bernoulli prim drawn per call, fewer guards than torch's kernel
@torchop(F.dropout, name="dropout", pure=False)
def dropout(input: TensorProxy, p: float = 0.5, training: bool = True, inplace: bool = False) -> TensorProxy:
    _no_outside_tensors(input)
    p = float(p)
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    out = _dropout(input, p, bool(training))
    if inplace and out is not input:  # written back into the input (the torch executor runs F.dropout as it is)
        return copy_to(input, out)
    return out


# kept: torch.dropout, the same rule as F.dropout
@torchop(torch.dropout, name="torch_dropout", pure=False)
def torch_dropout(input: TensorProxy, p: float, train: bool) -> TensorProxy:
    _no_outside_tensors(input)
    p = float(p)
    if p < 0.0 or p > 1.0:
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got {p:g}")
    return _dropout(input, p, bool(train))


# Attention.

_SDPA = "scaled_dot_product_attention"
_C10_NAMES = {torch.float32: "float", torch.float64: "double", torch.int64: "long int", torch.int32: "int",
              torch.bfloat16: "c10::BFloat16", torch.float16: "c10::Half", torch.bool: "bool"}  # fmt: skip
_c10 = lambda dtype: _C10_NAMES.get(dtype, str(dtype))  # noqa: E731


def _check_sdpa(q: TensorProxy, k: TensorProxy, v: TensorProxy, mask: Any, is_causal: bool = False) -> None:
    """The checks eager makes whatever the sizes."""
    if min(q.ndim, k.ndim, v.ndim) < 2:
        raise RuntimeError("Expected query, key, and value to all be  at least 2 dimensional, but got query.dim: "
                           f"{q.ndim} key.dim: {k.ndim} and value.dim: {v.ndim} instead.")  # fmt: skip
    if not q.dtype == k.dtype == v.dtype:
        raise RuntimeError("Expected query, key, and value to have the same dtype, but got query.dtype: "
                           f"{_c10(q.dtype)} key.dtype: {_c10(k.dtype)} and value.dtype: {_c10(v.dtype)} "
                           "instead.")  # fmt: skip
    if is_causal and mask is not None and _torch_causal_mask_error() is not None:
        raise fresh(_torch_causal_mask_error())
    if mask is not None and mask.dtype not in (torch.bool, torch.float32, q.dtype):
        raise RuntimeError("Expected attn_mask dtype to be bool or float or to match query dtype, but got "
                           f"attn_mask.dtype: {_c10(mask.dtype)} and  query.dtype: {_c10(q.dtype)} "
                           "instead.")  # fmt: skip


def _size_error(batch: tuple, want: E.Expr, got: E.Expr) -> RuntimeError:
    b = example(_numel(batch))
    return RuntimeError(f"Expected size for first two dimensions of batch2 tensor to be: [{b}, {example(want)}] but "
                        f"got: [{b}, {example(got)}].")  # fmt: skip


def _sdpa_error(
    q: TensorProxy, k: TensorProxy, v: TensorProxy, mask: Any, is_causal: bool, gqa: bool
) -> Exception | None:
    """The first failing check of those eager skips when the attention is empty. The batch broadcast is checked
    on the example sizes without a guard (as `broadcast_pair` does); the torch op raises where it fails."""
    if not q.dtype.is_floating_point:
        return RuntimeError(f"expected scalar type Float but found {_type_name(q.dtype)}")
    if is_causal and mask is not None and _torch_causal_mask_error() is None:  # (else _check_sdpa raised)
        return RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be set when is_causal=True")
    heads = [t.dims[-3] for t in (k, v) if gqa and q.ndim >= 3 and t.ndim >= 3]
    if any(not (decide(E.gt(h, 0), _SDPA, "heads") and decide(E.eq(E.mod(q.dims[-3], h), 0), _SDPA, "heads divide"))
           for h in heads):  # fmt: skip
        return RuntimeError("Number of heads in key and value must divide the number of heads in query")
    if not decide(E.eq(q.dims[-1], k.dims[-1]), _SDPA, "query and key have the same embedding dim"):
        return _size_error(k.dims[:-2], q.dims[-1], k.dims[-1])
    if not decide(E.eq(k.dims[-2], v.dims[-2]), _SDPA, "key and value have the same length"):
        return _size_error(v.dims[:-2], k.dims[-2], v.dims[-2])
    batches = [tuple(q.dims[-3] if heads and i == t.ndim - 3 else d for i, d in enumerate(t.dims[:-2]))
               for t in (q, k, v)]  # fmt: skip
    try:
        torch.broadcast_shapes(*([hint(d) for d in b] for b in batches))
    except RuntimeError as e:
        return e
    scores = broadcast_shapes(batches[0], batches[1]) + (q.dims[-2], k.dims[-2])
    return None if mask is None else _mask_error(mask, scores)


@functools.cache
def _torch_causal_mask_error() -> Exception | None:
    """What torch raises for attn_mask with is_causal=True on an empty attention: from torch 2.14 it refuses the pair
    before returning an empty attention's zeros (before: only a non-empty one)."""
    z = torch.zeros(1, 0, 1)
    return eager_error(lambda: torch._C._nn.scaled_dot_product_attention(z, z, z, torch.zeros(0, 0).bool(), 0.0, True))


def _mask_error(mask: TensorProxy, scores: tuple) -> Exception | None:
    """The mask is added in place to the scores: it broadcasts to their shape (decided: the decomposition
    expands it, and eager skips the add, so does not raise, when the attention is empty)."""
    if mask.ndim < 2:
        return IndexError("Dimension specified as -2 but tensor has no dimensions" if mask.ndim == 0 else
                          "Dimension out of range (expected to be in range of [-1, 0], but got -2)")  # fmt: skip
    want, sizes = [hint(d) for d in scores], [hint(d) for d in mask.dims]
    try:
        out = list(torch.broadcast_shapes(want, sizes))
    except RuntimeError as e:
        return e
    fits = [E.or_(E.eq(d, 1), E.eq(d, s)) for d, s in zip(mask.dims[::-1], scores[::-1])]
    if out != want or not decide(E.and_(*fits), _SDPA, "attn_mask broadcasts to the scores"):
        return RuntimeError(f"output with shape {want} doesn't match the broadcast shape {out}")
    return None


def _repeat_heads(q: TensorProxy, kv: TensorProxy) -> TensorProxy:
    """enable_gqa: each key/value head serves H_q / H_kv consecutive query heads (repeat_interleave on dim -3)."""
    if q.ndim < 3 or kv.ndim < 3:
        return kv
    lead, hk = kv.ndim - 3, kv.dims[-3]
    dims = kv.dims[:lead] + (hk, E.floordiv(q.dims[-3], hk)) + kv.dims[-2:]
    repeated = prims.broadcast_in_dim(kv, dims, (*range(lead + 1), lead + 2, lead + 3))
    return prims.reshape(repeated, kv.dims[:lead] + (q.dims[-3],) + kv.dims[-2:])


def _scaled(q: TensorProxy, k: TensorProxy, scale: Any) -> tuple[TensorProxy, TensorProxy]:
    """The math backend scales q and k by sqrt(scale) each (a negative scale goes on q); the default scale is
    1 / sqrt(E), computed from the symbolic E as a tensor so that no size is pinned."""
    if scale is None:
        root = prims.pow(prims.full((), q.dims[-1], q.dtype, q.device), -0.25)
        return prims.mul(q, expand_to(root, q.dims)), prims.mul(k, expand_to(root, k.dims))
    scale = float(scale)
    root = math.sqrt(abs(scale))
    return prims.mul(q, -root if scale < 0 else root), prims.mul(k, root)


# kept: matmul and softmax prims with few guards (torch's kernel: 20 over OpInfo's samples, pins E)
@torchop(F.scaled_dot_product_attention, name=_SDPA)
def scaled_dot_product_attention(query: TensorProxy, key: TensorProxy, value: TensorProxy, attn_mask: Any = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: Any = None,
                                 enable_gqa: bool = False) -> TensorProxy:  # fmt: skip
    """Eager returns zeros without its other checks when L, S, E_v or the key's or value's batch is 0."""
    if dropout_p != 0:  # random per call: torch's own op through the generic path (impure: drawn on every call)
        options = dict(
            attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa
        )
        # torch's own function, not the attribute: while tracing F's is capture/compiling.py's wrapper
        return generic_call(torch._C._nn.scaled_dot_product_attention, (query, key, value), options)
    _no_outside_tensors(query, key, value, attn_mask)
    _check_sdpa(query, key, value, attn_mask, is_causal)
    error = _sdpa_error(query, key, value, attn_mask, is_causal, enable_gqa)
    if error is not None:
        empty = [query.dims[-2], key.dims[-2], value.dims[-1], _numel(key.dims[:-2]), _numel(value.dims[:-2])]
        if not decide(E.or_(*(E.eq(d, 0) for d in empty)), _SDPA, "eager skips its checks when empty"):
            raise error
        return prims.full(query.dims[:-1] + value.dims[-1:], 0, query.dtype, query.device)
    if enable_gqa:
        key, value = _repeat_heads(query, key), _repeat_heads(query, value)
    dtype = _opmath(query.dtype)
    q, k = _scaled(convert(query, dtype), convert(key, dtype), scale)
    scores = ltorch_arith.matmul(q, transpose(k, -2, -1))
    mask = nn_causal_mask(query.dims[-2], key.dims[-2], query.device) if is_causal else attn_mask
    if mask is not None and mask.dtype is torch.bool:
        scores = prims.where(expand_to(mask, scores.dims), scores, NEG_INF)
    elif mask is not None:
        scores = prims.add(scores, expand_to(convert(mask, dtype), scores.dims))
    return convert(ltorch_arith.matmul(_safe_softmax(scores), convert(value, dtype)), query.dtype)
