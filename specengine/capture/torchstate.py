"""Torch state that a traced function changes: grad mode and autocast, replayed by the computation.

The state is compared before each top-level op the function records (and once more when it returns), so it does
not matter how the function changed it (`with torch.no_grad()`, `@torch.no_grad()`, `torch.set_grad_enabled(b)`,
`torch.autocast(...)`, a helper that flips it): each change becomes a bound symbol at the point where it took effect,
`tex.set_grad_enabled(False, entry=True)`, and the computation sets the state there. The `entry` value is the state
when the function was called (which the prologue guards); the computation sets it again if an op raises.

`torch.inference_mode()` inside the function is refused: the inference tensors it creates are not traced.

Inside an autocast region, the output dtypes of an op are eager's: torch's own autocast rules run on fake tensors of
the example sizes, and the casts that autocast makes to the inputs (to the autocast dtype, to float32, or to the
widest input type) are recorded as explicit conversions before the op; an op whose autocast dtypes none of these
reproduces is refused. An op on torch's generic path (ops/generic.py) runs its meta kernel before it is recorded,
so it asks for the casts first (`CaptureState.autocast_args`) and its kernel runs on the cast inputs.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode

from specengine.capture.torch_settings import quiet
from specengine.constraints import expr as E
from specengine.ir.proxies import NumberProxy, TensorProxy, unsupported
from specengine.ir.symbol import BoundSymbol, Symbol, tree_leaves, tree_map
from specengine.ops import runtime as tex
from specengine.ops.utils import convert

DEVICES = ("cpu", "cuda")
UNVERIFIED = object()  # torch's autocast rule could not run on fake tensors for this op
SET_GRAD = Symbol("set_grad_enabled", "tex", impl=tex.set_grad_enabled, pure=False)
SET_AUTOCAST = Symbol("set_autocast", "tex", impl=tex.set_autocast, pure=False)


def snapshot() -> tuple:
    """(grad mode, inference mode, ((device, autocast enabled, autocast dtype), ...))."""
    autocast = tuple((d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in DEVICES)
    return torch.is_grad_enabled(), torch.is_inference_mode_enabled(), autocast


def transitions(old: tuple, new: tuple, entry: tuple, source: Any) -> list[BoundSymbol]:
    """The bound symbols that take the state from `old` to `new` (`entry`: the state when the function was called)."""
    if old[1] != new[1]:
        raise unsupported("torch.inference_mode inside a compiled function",
                          "the inference tensors it creates are not traced; call the compiled function under "
                          "torch.inference_mode() instead, or use torch.no_grad()")  # fmt: skip
    out = []
    if old[0] != new[0]:
        out.append(BoundSymbol(SET_GRAD, (new[0],), (("entry", entry[0]),), None, (), source))
    for (dev, *was), (_, *now), (_, *first) in zip(old[2], new[2], entry[2]):
        if was != now:
            out.append(BoundSymbol(SET_AUTOCAST, (dev, *now), (("entry", tuple(first)),), None, (), source))
    return out


def autocast_devices(state: tuple) -> set[str]:
    return {dev for dev, enabled, _ in state[2] if enabled}


# Autocast: the casts torch's autocast makes to an op's inputs, found on fake tensors.


def _fake(x: Any, hints: dict) -> Any:
    if isinstance(x, TensorProxy):
        shape = [d.eval(hints) for d in x.dims]
        return torch.empty(shape, dtype=x.dtype, device=x.device, requires_grad=x.requires_grad)
    if isinstance(x, torch.Tensor):
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if isinstance(x, NumberProxy):
        return x.python_type(x.hint)
    if isinstance(x, E.Expr):
        return x.eval(hints)
    return x


class _Casts(TorchDispatchMode):
    """The dtypes autocast casts the op's own input tensors to (the `_to_copy`s it dispatches on them)."""

    def __init__(self, inputs: list) -> None:
        super().__init__()
        self.inputs, self.dtypes = {id(t) for t in inputs}, set()

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func is torch.ops.aten._to_copy.default and id(args[0]) in self.inputs and "dtype" in kwargs:
            self.dtypes.add(kwargs["dtype"])
        return func(*args, **kwargs)


def _out_dtypes(fn: Any, args: tuple, kwargs: dict, hints: dict, autocast: bool) -> tuple:
    """The op's output dtypes on fake tensors; with `autocast`, also the dtypes autocast cast its inputs to."""
    with quiet(), torch._C.DisableTorchFunction(), FakeTensorMode(allow_non_fake_inputs=True):
        fa, fk = tree_map(lambda x: _fake(x, hints), (args, kwargs))
        if autocast:
            with _Casts([t for t in tree_leaves((fa, fk)) if isinstance(t, torch.Tensor)]) as casts:
                out = fn(*fa, **fk)
        else:
            with torch.autocast("cpu", enabled=False), torch.autocast("cuda", enabled=False):
                out = fn(*fa, **fk)
    dtypes = tuple(t.dtype for t in tree_leaves(out) if isinstance(t, torch.Tensor))
    return (dtypes, casts.dtypes) if autocast else dtypes


def _eligible(x: Any, devices: set[str]) -> bool:
    """A tensor that autocast casts: floating, not float64, on a device type where autocast is on."""
    return (
        isinstance(x, TensorProxy)
        and x.dtype.is_floating_point
        and x.dtype is not torch.float64
        and x.device.type in devices
    )


def _policies(tensors: list[TensorProxy], devices: set[str], casts: set) -> list[torch.dtype | None]:
    """The casts to try, those autocast was seen to make first: fake kernels accept mixed dtypes that eager's refuse
    (a bfloat16 input of F.linear with a float32 weight), so "no cast" could match eager's dtypes wrongly."""
    lower = [torch.get_autocast_dtype(d) for d in sorted(devices)]
    widest = None
    for t in tensors:
        if t.dtype.is_floating_point:
            widest = t.dtype if widest is None else torch.promote_types(widest, t.dtype)
    policies = [None, *lower, torch.float32, *([widest] if widest is not None else [])]
    return [*casts, *(p for p in policies if p not in casts)] if len(casts) == 1 else policies


def autocast_inputs(name: str, impl: Any, args: tuple, kwargs: dict, devices: set[str], hints: dict) -> tuple:
    """`(args, kwargs, dtypes)`: the inputs of op `name` (run by `impl`) with autocast's casts made explicit, and
    eager's output dtypes.

    Raises UnsupportedOpError where no cast policy reproduces eager's dtypes.
    """
    tensors = [x for x in tree_leaves((args, kwargs)) if isinstance(x, TensorProxy)]
    if impl is None or not any(_eligible(t, devices) for t in tensors):
        return args, kwargs, None
    where = f"{name} inside torch.autocast"
    try:
        want, casts = _out_dtypes(impl, args, kwargs, hints, True)
    except Exception:  # noqa: BLE001 - an error of the op itself is raised by tracing it below
        return args, kwargs, UNVERIFIED
    for dtype in _policies(tensors, devices, casts):
        cast = _cast_fn(dtype, devices)
        cargs, ckwargs = tree_map(cast, (args, kwargs))
        try:
            got = _out_dtypes(impl, cargs, ckwargs, hints, False)
        except Exception:  # noqa: BLE001 - this cast is not autocast's
            continue
        if got == want:
            if dtype is None:
                return args, kwargs, want
            return tree_map(lambda x, d=dtype: convert(x, d) if _eligible(x, devices) else x, (args, kwargs)) + (want,)
    raise unsupported(where, f"its dtypes under autocast ({', '.join(map(str, want))}) come from no cast of its "
                      "inputs that specengine reproduces; cast the inputs explicitly, outside the autocast block")  # fmt: skip


def _cast_fn(dtype: torch.dtype | None, devices: set[str]) -> Any:
    def cast(x: Any) -> Any:
        if dtype is None or not _eligible(x, devices):
            return x
        return TensorProxy(x.name, x.dims, dtype, x.device, x.requires_grad)

    return cast


def check_autocast_outputs(sym: Symbol, out: Any, want: Any) -> None:
    """The traced op's output dtypes are eager's under autocast (or it has no floating output, where torch's rule
    could not be evaluated)."""
    got = tuple(t.dtype for t in tree_leaves(out) if isinstance(t, TensorProxy))
    if want is UNVERIFIED and any(d.is_floating_point for d in got):
        raise unsupported(f"{sym.name} inside torch.autocast", "torch's autocast rule for it could not be evaluated "
                          "on fake tensors; move it out of the autocast block")  # fmt: skip
    if want is not UNVERIFIED and got != want:
        raise unsupported(f"{sym.name} inside torch.autocast",
                          f"eager autocast gives dtypes {want}, the traced op {got}; cast the inputs explicitly, "
                          "outside the autocast block")  # fmt: skip
