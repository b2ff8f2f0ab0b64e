"""Data-dependent assertions: `torch._check_tensor_all(t)` and `torch._assert_async(t)` run in the computation."""

from __future__ import annotations

import builtins

import torch

from specengine.ops import prims
from specengine.ops.registry import torchop
from specengine.trace.proxies import TensorProxy

__all__ = ["assert_all", "assert_async"]


def _assert_all_impl(cond: torch.Tensor, error: str, message: str) -> None:
    if not bool(cond.all()):
        raise getattr(builtins, error, RuntimeError)(message)


@prims.prim("assert_all", impl=_assert_all_impl, pure=False)
def assert_all(cond: TensorProxy, error: str, message: str) -> None:
    """Raise `error(message)` at run time unless every element of `cond` is true (never removed by passes)."""
    return None


@torchop(torch._assert_async, name="assert_async", pure=False)
def assert_async(cond: TensorProxy, msg: str = "Expected Tensor with single nonzero value, but got zero") -> None:
    if cond.numel() != 1:  # eager's check, on the (symbolic) size
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return assert_all(cond != 0, "RuntimeError", msg)
