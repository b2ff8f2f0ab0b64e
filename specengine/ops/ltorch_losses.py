"""Losses: F.cross_entropy (class indices or probabilities) and F.mse_loss, with eager's checks in eager's order."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.nn import _reduction as reduction_enum

from specengine.constraints import expr as E
from specengine.ir.proxies import TensorProxy
from specengine.ops import ltorch_arith, prims
from specengine.ops.ltorch_nn import (
    _check_floating,
    _expand_reduced,
    _no_outside_tensors,
    _numel,
    _same_dims,
    _type_name,
)
from specengine.ops.ltorch_reductions import log_softmax
from specengine.ops.registry import torchop
from specengine.ops.utils import broadcast_shapes, convert, decide, example, expand_to, fmt_shape, meta_value

__all__ = ["cross_entropy", "mse_loss"]


def _check_log_softmax(x: TensorProxy, dim: int) -> None:
    _check_floating(x, "log_softmax_lastdim_kernel_impl" if dim == x.ndim - 1 else "log_softmax_kernel_impl")


def _log_softmax(x: TensorProxy, dim: int) -> TensorProxy:
    return log_softmax(x, dim)  # ltorch_reductions: rounds where eager's float16/bfloat16 kernels do


def _check_class_targets(input: TensorProxy, target: TensorProxy, weight: Any) -> None:
    """nll_loss_nd's checks, in eager's order."""
    op, nd = "cross_entropy", input.ndim
    if nd != 1 and (target.ndim == 0 or not decide(E.eq(input.dims[0], target.dims[0]), op, "batch sizes match")):
        got = example(target.dims[0]) if target.ndim else 0
        raise ValueError(f"Expected input batch_size ({example(input.dims[0])}) to match target batch_size ({got}).")
    if nd <= 2 and target.ndim > 1:
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    if nd > 2 and not _same_dims(target.dims[1:], input.dims[2:], op, "target matches the input's extra dims"):
        raise RuntimeError(f"Expected target size {fmt_shape(input.dims[:1] + input.dims[2:])}, got "
                           f"{fmt_shape(target.dims)}")  # fmt: skip
    if target.dtype not in (torch.int64, torch.uint8):
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got {_type_name(target.dtype)}")
    if nd == 1 and target.ndim == 1 and not decide(E.eq(target.dims[0], 1), op, "1D target of a 1D input"):
        raise ValueError(f"For 1D input, 1D target must have size 1, but got target size: {example(target.dims[0])}")
    c = input.dims[0 if nd == 1 else 1]
    if weight is not None and not (weight.ndim == 1 and decide(E.eq(weight.dims[0], c), op, "weight size is C")):
        raise RuntimeError("weight tensor should be defined either for all or no classes" if nd > 2 else
                           f"weight tensor should be defined either for all {example(c)} classes or no classes but got "
                           f"weight tensor of shape: {fmt_shape(weight.dims)}")  # fmt: skip
    if weight is not None and weight.dtype != input.dtype:
        raise RuntimeError(f"expected scalar type {_type_name(input.dtype)} but found {_type_name(weight.dtype)}")


def _reduce(loss: TensorProxy, reduction: str, total: Any = None) -> TensorProxy:
    """`none`, `sum`, or `mean` (the sum divided by `total`: an int Expr or a 0-d tensor)."""
    if reduction == "none":
        return loss
    out = prims.sum(loss, tuple(range(loss.ndim)))
    if reduction == "sum":
        return out
    return prims.div(out, total if not isinstance(total, TensorProxy) else expand_to(total, out.dims))


def _class_losses(logp: TensorProxy, target: TensorProxy, weight: Any, ignore_index: int, cdim: int) -> tuple:
    """Per-target losses -w[t] * logp[t] (0 where ignored), the per-target weights (0 where ignored), the mask."""
    t = convert(target, torch.int64)
    ignored = prims.eq(t, ignore_index)
    safe = prims.where(ignored, 0, t)
    out_dims = () if logp.ndim == 1 else t.dims
    if logp.ndim == 1:
        index = prims.reshape(safe, (E.const(1),))
    else:
        index = _expand_reduced(safe, logp.dims[:1] + (E.const(1),) + logp.dims[2:], (1,))
    picked = prims.reshape(prims.gather(logp, cdim, index), out_dims)
    ignored = prims.reshape(ignored, out_dims)
    if weight is None:
        w = prims.where(ignored, 0.0, prims.full(out_dims, 1.0, logp.dtype, logp.device))
    else:
        gathered = prims.gather(weight, 0, prims.reshape(safe, (_numel(t.dims),)))
        w = prims.where(ignored, 0.0, prims.reshape(gathered, out_dims))
    return prims.where(ignored, 0.0, prims.neg(prims.mul(picked, w))), w, ignored


def _ce_class(input: TensorProxy, target: TensorProxy, weight: Any, ignore_index: int, reduction: str,
              smoothing: float) -> TensorProxy:  # fmt: skip
    cdim = 0 if input.ndim == 1 else 1
    _check_log_softmax(input, cdim)
    _check_class_targets(input, target, weight)
    logp = _log_softmax(input, cdim)
    loss, w, ignored = _class_losses(logp, target, weight, ignore_index, cdim)
    nll = _reduce(loss, reduction, prims.sum(w, tuple(range(w.ndim))))
    if smoothing <= 0:
        return nll
    if input.ndim == 1 and target.ndim == 1:  # eager fills a 0-d smooth loss with a (1,) mask in place
        raise RuntimeError("output with shape [] doesn't match the broadcast shape [1]")
    weighted = logp if weight is None else prims.mul(logp, prims.broadcast_in_dim(weight, logp.dims, (cdim,)))
    smooth = prims.where(ignored, 0.0, prims.neg(prims.sum(weighted, (cdim,))))
    smooth = _reduce(smooth, reduction, prims.sum(w, tuple(range(w.ndim))))
    smooth = prims.div(prims.mul(smooth, smoothing), input.dims[cdim])
    return prims.add(prims.mul(nll, 1 - smoothing), smooth)


def _ce_probs(input: TensorProxy, target: TensorProxy, weight: Any, ignore_index: int, reduction: str,
              smoothing: float) -> TensorProxy:  # fmt: skip
    if not target.dtype.is_floating_point:
        raise RuntimeError(f"Expected floating point type for target with class probabilities, got "
                           f"{_type_name(target.dtype)}")  # fmt: skip
    if ignore_index >= 0:
        raise RuntimeError("ignore_index is not supported for floating point target")
    cdim = 0 if input.ndim == 1 else 1
    c, lt = input.dims[cdim], ltorch_arith
    if weight is not None and not (weight.ndim == 1 and decide(E.eq(weight.dims[0], c), "cross_entropy", "C")):
        raise RuntimeError(f"cross_entropy: weight tensor should be defined either for all {example(c)} classes or no "
                           f"classes but got weight tensor of shape: {fmt_shape(weight.dims)}")  # fmt: skip
    if smoothing > 1:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {smoothing:g}")
    if smoothing > 0:
        spread = prims.div(prims.full((), smoothing, target.dtype, target.device), c)
        target = lt.add(lt.mul(target, 1 - smoothing), spread)
    prod = lt.mul(_log_softmax(input, cdim), target)
    if weight is not None:
        prod = lt.mul(prod, prims.broadcast_in_dim(weight, input.dims, (cdim,)))
    if reduction == "none":
        return prims.neg(prims.sum(prod, (cdim,)))
    batch = _numel(tuple(d for i, d in enumerate(input.dims) if i != cdim))
    return _reduce(prims.neg(prod), reduction, E.mul(batch, E.minimum(c, 1)))  # numel / C; 0 (so nan) if empty


# kept: fewer guards than torch's kernel (5 against 21 over OpInfo's samples)
@torchop(F.cross_entropy, name="cross_entropy")
def cross_entropy(input: TensorProxy, target: TensorProxy, weight: Any = None, size_average: Any = None,
                  ignore_index: int = -100, reduce: Any = None, reduction: str = "mean",
                  label_smoothing: float = 0.0) -> TensorProxy:  # fmt: skip
    _no_outside_tensors(input, target, weight)
    if size_average is not None or reduce is not None:
        reduction = reduction_enum.legacy_get_string(size_average, reduce, emit_warning=False)
    reduction_enum.get_enum(reduction)  # eager's ValueError for an unknown reduction
    ignore_index, smoothing = int(ignore_index), float(label_smoothing)
    if input.ndim == 0 and (target.ndim != 0 or target.dtype.is_floating_point):
        raise IndexError("Dimension specified as 1 but tensor has no dimensions" if target.ndim == 0 else
                         "Dimension out of range (expected to be in range of [-1, 0], but got 1)")  # fmt: skip
    if _same_dims(input.dims, target.dims, "cross_entropy", "same shapes: class probabilities"):
        return _ce_probs(input, target, weight, ignore_index, reduction, smoothing)
    if smoothing > 1:
        raise RuntimeError(f"label_smoothing must be between 0.0 and 1.0. Got: {smoothing:g}")
    return _ce_class(input, target, weight, ignore_index, reduction, smoothing)


# kept: fewer guards than torch's kernel (0 against 4 over OpInfo's samples)
@torchop(F.mse_loss, name="mse_loss")
def mse_loss(input: TensorProxy, target: TensorProxy, size_average: Any = None, reduce: Any = None,
             reduction: str = "mean", weight: Any = None) -> TensorProxy:  # fmt: skip
    _no_outside_tensors(input, target, weight)
    if size_average is not None or reduce is not None:
        reduction = reduction_enum.legacy_get_string(size_average, reduce, emit_warning=False)
    shape = broadcast_shapes(input.dims, target.dims)  # eager's error where the sizes cannot broadcast
    if weight is not None:
        return _weighted_mse(input, target, weight, reduction)
    reduction_enum.get_enum(reduction)
    dtype = torch.result_type(meta_value(input), meta_value(target))
    if not (dtype.is_floating_point or dtype.is_complex):
        raise NotImplementedError(f"\"mse_{input.device.type}\" not implemented for '{_type_name(dtype)}'")
    diff = prims.sub(*(convert(expand_to(t, shape), dtype) for t in (input, target)))
    return _reduce(prims.mul(diff, diff), reduction, _numel(shape))


def _weighted_mse(input: TensorProxy, target: TensorProxy, weight: TensorProxy, reduction: str) -> TensorProxy:
    """F.mse_loss's weighted branch, op for op."""
    if not _same_dims(weight.dims, input.dims, "mse_loss", "weight has the input's shape"):
        raise ValueError("Weights and input must have the same size.")
    lt = ltorch_arith
    if reduction not in ("none", "sum", "mean"):
        raise ValueError(f"Invalid reduction mode: {reduction}. Expected one of 'none', 'mean', 'sum'.")
    errors = lt.mul(lt.pow(lt.sub(input, target), 2), weight)
    if reduction == "none":
        return errors
    return lt.sum(errors) if reduction == "sum" else lt.div(lt.sum(errors), lt.sum(weight))
