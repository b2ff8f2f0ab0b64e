"""Data-dependent assertions (`torch._check_tensor_all(t)`, `torch._assert_async(t)`) and `torch.manual_seed` run in
the computation, in program order."""

from __future__ import annotations

import builtins

import torch

from specengine.ir.proxies import TensorProxy
from specengine.ops import prims
from specengine.ops.registry import torchop

__all__ = [
    "assert_all",
    "assert_async",
    "manual_seed",
    "get_rng_state",
    "set_rng_state",
    "cuda_manual_seed",
    "cuda_manual_seed_all",
    "cuda_get_rng_state",
    "cuda_set_rng_state",
]


def _assert_all_impl(cond: torch.Tensor, error: str, message: str) -> None:
    if not bool(cond.all()):
        raise getattr(builtins, error, RuntimeError)(message)


@prims.prim("assert_all", impl=_assert_all_impl, pure=False)
def assert_all(cond: TensorProxy, error: str, message: str) -> None:
    """Raise `error(message)` at run time unless every element of `cond` is true (never removed by passes)."""
    return None


# kept: a check that runs in the computation on every call (torch has no meta for it)
@torchop(torch._assert_async, name="assert_async", pure=False)
def assert_async(cond: TensorProxy, msg: str = "Expected Tensor with single nonzero value, but got zero") -> None:
    if cond.numel() != 1:  # eager's check, on the (symbolic) size
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return assert_all(cond != 0, "RuntimeError", msg)


# The global RNG state inside a compiled function (specengine/capture/effects.py routes these calls here): seeding,
# saving and restoring run on every call, in program order, as in eager. manual_seed returns None (not the generator).


def _manual_seed_impl(seed: int) -> None:
    torch.random.manual_seed(seed)


# kept: torch state changed by the function: reproduced by the computation on every call
@torchop(torch.random.manual_seed, name="manual_seed", pure=False, always_traced=True, impl=_manual_seed_impl)
def manual_seed(seed: int) -> None:
    return None


# kept: torch state read by the function: read by the computation on every call
@torchop(torch.random.get_rng_state, name="get_rng_state", pure=False, always_traced=True)
def get_rng_state() -> TensorProxy:
    return prims.new_tensor((torch.default_generator.get_state().numel(),), torch.uint8, [])


# kept: torch state changed by the function: reproduced by the computation on every call
@torchop(torch.random.set_rng_state, name="set_rng_state", pure=False, always_traced=True)
def set_rng_state(new_state: TensorProxy) -> None:
    return None


# The CUDA generators (torch.cuda.manual_seed, ...; routed here by specengine/capture/effects.py): run in the
# computation as the CPU ones are. A CUDA generator's state is its seed and offset (16 bytes, on the CPU).
_CUDA_STATE_BYTES = 16


def _cuda_manual_seed_impl(seed: int) -> None:
    torch.cuda.random.manual_seed(seed)


def _cuda_manual_seed_all_impl(seed: int) -> None:
    torch.cuda.random.manual_seed_all(seed)


# kept: CUDA random state, reproduced by the computation on every call (the generic path runs it once, at trace
# time); not measurable on this CPU machine
@torchop(torch.cuda.random.manual_seed, name="cuda_manual_seed", pure=False, always_traced=True,
         impl=_cuda_manual_seed_impl)  # fmt: skip
def cuda_manual_seed(seed: int) -> None:
    return None


# kept: CUDA random state, reproduced by the computation on every call (the generic path runs it once, at trace
# time); not measurable on this CPU machine
@torchop(torch.cuda.random.manual_seed_all, name="cuda_manual_seed_all", pure=False, always_traced=True,
         impl=_cuda_manual_seed_all_impl)  # fmt: skip
def cuda_manual_seed_all(seed: int) -> None:
    return None


# kept: CUDA random state, reproduced by the computation on every call (the generic path runs it once, at trace
# time); not measurable on this CPU machine
@torchop(torch.cuda.random.get_rng_state, name="cuda_get_rng_state", pure=False, always_traced=True)
def cuda_get_rng_state(device: object = "cuda") -> TensorProxy:
    return prims.new_tensor((_CUDA_STATE_BYTES,), torch.uint8, [])


# kept: CUDA random state, reproduced by the computation on every call (the generic path runs it once, at trace
# time); not measurable on this CPU machine
@torchop(torch.cuda.random.set_rng_state, name="cuda_set_rng_state", pure=False, always_traced=True)
def cuda_set_rng_state(new_state: TensorProxy, device: object = "cuda") -> None:
    return None
