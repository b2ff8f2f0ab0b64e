"""How libraries see specengine while it traces: as a compiler, through torch's own switches.

While any thread traces, `torch.compiler.is_compiling()` returns True (torch's `_is_compiling_flag`, as
torch.export sets it). Libraries then avoid data-dependent fast paths: transformers builds explicit attention masks
instead of branching on `padding_mask.all()`, and states its checks as `torch._check(...)` /
`torch._check_tensor_all(...)`. Those two are handled while tracing (outside tracing they are torch's own):

- `torch._check(cond)` on a symbolic bool (sizes, ints): the fact is decided like a branch. It holds for the example
  inputs, so it is assumed from then on (later decisions that it implies record nothing) and becomes a prologue
  guard; an input that violates it is traced again, and then raises the check's error, as eager does. On a
  data-dependent (unbacked) symbol it is assumed and asserted at run time instead (`specengine.check`).
- `torch._check_tensor_all(t)` / `torch._assert_async(t)` on a traced tensor: a data-dependent assertion. It is
  recorded in the computation (`prims.assert_all`) and runs on every call, raising eager's error type.

A check's message that formats sizes (`torch._assert(cond, f"... got {x.shape}")`, `torch._check(cond, f"...")`) is
read only where the check fails: its sizes stay symbolic (capture/effect_strings.py), and it is rendered from the
example's values only for the error the failing check raises.

`F.scaled_dot_product_attention` also gets a thin wrapper: its `is_causal` may arrive as a symbolic bool
(`q_len > 1 and mask is None` returns its first operand), which torch's argument parser refuses before any
torch-function mode sees the call; the wrapper decides it, like a branch.
"""

from __future__ import annotations

import builtins
import sys
from contextlib import contextmanager
from typing import Any, Iterator

import torch

from specengine.capture import effect_strings, higher_order
from specengine.constraints import expr as E
from specengine.ir import context
from specengine.ir.proxies import NumberProxy, TensorProxy
from specengine.ops import ltorch_checks
from specengine.patching import Patches, original


def _message(message: Any, default: str) -> str:
    if message is None:
        return default
    try:
        return str(message() if callable(message) else message)
    except Exception:  # noqa: BLE001 - a message formatting traced values: keep the generic one
        return default


def _lazy_message(message: Any, caller: Any) -> Any:
    """A check's message holding placeholders of symbolic values (capture/effect_strings.py), rendered from the
    example's values: it is read only where the check fails (then this call raises, and is not compiled)."""
    if not isinstance(message, str) or context.current() is None:
        return message
    found = effect_strings.template(message, caller)
    return message if found is None else effect_strings.hint_text(*found)


def _assert(condition: Any, message: Any) -> None:
    """`torch._assert`: eager's, with a message that formats sizes left unformatted unless the assertion fails."""
    message = _lazy_message(message, sys._getframe(1))
    if context.current() is None or isinstance(condition, TensorProxy):
        return original(torch, "_assert")(condition, message)
    if __debug__ and not condition:  # (eager's `assert condition, message`: a branch, decided with a guard)
        raise AssertionError(message)
    return None


def _check_with(error_type: type, cond: Any, message: Any = None) -> None:
    state = context.current()
    message = _lazy_message(message, sys._getframe(2))  # (called by torch._check and its kin)
    if state is not None and callable(cond) and not isinstance(cond, (bool, torch.SymBool)):
        cond = cond()
    if state is None or not isinstance(cond, NumberProxy):
        return original(torch, "_check_with")(error_type, cond, message)
    b = cond.expr if cond.expr.is_bool else E.ne(cond.expr, 0)
    if state.decider.unbacked.mentions(b):  # assumed and asserted at run time (a callable message is not formatted)
        state.check(b, "torch._check", message if isinstance(message, str) else None)
        return None
    if not state.decide(b, "torch._check", "a checked fact"):
        return original(torch, "_check_with")(error_type, False, message)  # eager's error (and message)
    return None


def _check_tensor_all_with(error_type: type, cond: Any, message: Any = None) -> None:
    if context.current() is None or not isinstance(cond, TensorProxy):
        return original(torch, "_check_tensor_all_with")(error_type, cond, message)
    if cond.dtype != torch.bool:
        raise TypeError(f"cond tensor must have dtype torch.bool, but got {cond.dtype}")
    ltorch_checks.assert_all(cond, _error_name(error_type), _message(message, "Expected cond to be True"))
    return None


def _error_name(error_type: type) -> str:
    name = getattr(error_type, "__name__", "")
    return name if getattr(builtins, name, None) is error_type else "RuntimeError"


def _sdpa(*args: Any, **kwargs: Any) -> Any:
    """`is_causal = q_len > 1 and ...` hands SDPA a symbolic bool, which torch's argument parser refuses: decide it."""
    for key in ("is_causal", "enable_gqa"):
        if isinstance(kwargs.get(key), NumberProxy) and context.current() is not None:
            kwargs[key] = bool(kwargs[key])  # (a branch: the decision is recorded, as `and` already did)
    return original(torch.nn.functional, "scaled_dot_product_attention")(*args, **kwargs)


_SWAPS = Patches()
_PATCHES = ((torch, "_check_with", _check_with), (torch, "_assert", _assert), (torch, "_check_tensor_all_with", _check_tensor_all_with),
            (torch.nn.functional, "scaled_dot_product_attention", _sdpa), *higher_order.PATCHES)  # fmt: skip


@contextmanager
def compiling() -> Iterator[None]:
    """While tracing: `torch.compiler.is_compiling()` is True and torch's checks record facts and assertions."""
    with _SWAPS.applied([(torch.compiler, "_is_compiling_flag", True), *_PATCHES]):
        yield
