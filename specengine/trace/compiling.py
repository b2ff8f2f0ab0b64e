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

`F.scaled_dot_product_attention` also gets a thin wrapper: its `is_causal` may arrive as a symbolic bool
(`q_len > 1 and mask is None` returns its first operand), which torch's argument parser refuses before any
torch-function mode sees the call; the wrapper decides it, like a branch.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch

from specengine.trace import context

_lock = threading.Lock()
_depth = 0
_saved: dict[str, Any] = {}


def _message(message: Any, default: str) -> str:
    if message is None:
        return default
    try:
        return str(message() if callable(message) else message)
    except Exception:  # noqa: BLE001 - a message formatting traced values: keep the generic one
        return default


def _check_with(error_type: type, cond: Any, message: Any = None) -> None:
    from specengine.trace.proxies import NumberProxy

    state = context.current()
    if state is not None and callable(cond) and not isinstance(cond, (bool, torch.SymBool)):
        cond = cond()
    if state is None or not isinstance(cond, NumberProxy):
        return _saved["check_with"](error_type, cond, message)
    from specengine.constraints import expr as E

    b = cond.expr if cond.expr.is_bool else E.ne(cond.expr, 0)
    if state.decider.unbacked.mentions(b):  # assumed and asserted at run time (a callable message is not formatted)
        state.check(b, "torch._check", message if isinstance(message, str) else None)
        return None
    if not state.decide(b, "torch._check", "a checked fact"):
        raise error_type(_message(message, "Expected cond to be True, but got False"))
    return None


def _check_tensor_all_with(error_type: type, cond: Any, message: Any = None) -> None:
    from specengine.trace.proxies import TensorProxy

    if context.current() is None or not isinstance(cond, TensorProxy):
        return _saved["check_tensor_all_with"](error_type, cond, message)
    if cond.dtype != torch.bool:
        raise TypeError(f"cond tensor must have dtype torch.bool, but got {cond.dtype}")
    from specengine.ops import ltorch_checks

    ltorch_checks.assert_all(cond, _error_name(error_type), _message(message, "Expected cond to be True"))
    return None


def _error_name(error_type: type) -> str:
    import builtins

    name = getattr(error_type, "__name__", "")
    return name if getattr(builtins, name, None) is error_type else "RuntimeError"


def _sdpa(*args: Any, **kwargs: Any) -> Any:
    """`is_causal = q_len > 1 and ...` hands SDPA a symbolic bool, which torch's argument parser refuses: decide it."""
    from specengine.trace.proxies import NumberProxy

    for key in ("is_causal", "enable_gqa"):
        if isinstance(kwargs.get(key), NumberProxy) and context.current() is not None:
            kwargs[key] = bool(kwargs[key])  # (a branch: the decision is recorded, as `and` already did)
    return _saved["sdpa"](*args, **kwargs)


_PATCHES: dict[str, tuple[Any, str, Callable]] = {
    "check_with": (torch, "_check_with", _check_with),
    "check_tensor_all_with": (torch, "_check_tensor_all_with", _check_tensor_all_with),
    "sdpa": (torch.nn.functional, "scaled_dot_product_attention", _sdpa),
}


def _install() -> None:
    global _depth
    with _lock:
        if _depth == 0:
            _saved["flag"] = torch.compiler._is_compiling_flag
            torch.compiler._is_compiling_flag = True
            for key, (owner, attr, fn) in _PATCHES.items():
                _saved[key] = getattr(owner, attr)
                setattr(owner, attr, fn)
        _depth += 1


def _uninstall() -> None:
    global _depth
    with _lock:
        _depth -= 1
        if _depth == 0:
            torch.compiler._is_compiling_flag = _saved.pop("flag")
            for key, (owner, attr, fn) in _PATCHES.items():
                if getattr(owner, attr) is fn:  # leave alone what someone else installed meanwhile
                    setattr(owner, attr, _saved[key])


@contextmanager
def compiling() -> Iterator[None]:
    """While tracing: `torch.compiler.is_compiling()` is True and torch's checks record facts and assertions."""
    _install()
    try:
        yield
    finally:
        _uninstall()
