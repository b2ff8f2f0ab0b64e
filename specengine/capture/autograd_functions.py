"""Custom `torch.autograd.Function`s, tensor hooks and activation checkpointing while tracing.

`MyFn.apply(x, n)` on proxies is one op of the trace: the computation calls `MyFn.apply` itself on every call, so its
backward is the user's, run by autograd as in eager. The output proxies are made by running `MyFn.forward` on the
proxies with a stand-in `ctx` (`save_for_backward`, `mark_non_differentiable`, `needs_input_grad`, attributes):
the decisions it takes on sizes become guards, and the ops it records are discarded (only `apply` runs). Every
output is a fresh proxy, also where `forward` returned an input (`apply` returns a new tensor then too).
Refused: `ctx.mark_dirty` (an in-place forward), non-tensor outputs, and `torch.nn.modules._functions.
BackwardHookFunction` (modules with full backward hooks).

`t.register_hook(fn)` is an op of the computation: every call registers `fn` (the function seen while tracing, which
must hold no proxies) on its tensor.

`torch.utils.checkpoint.checkpoint(fn, *args)` is traced as `fn(*args)`: the values and gradients are the same, the
activations are kept instead of recomputed (the memory saving is not reproduced).

While any thread traces, `Function.apply` and checkpoint's two paths are wrappers that act in a tracing context
only (`install`/`uninstall`, called by `capture/effects.py`).
"""

from __future__ import annotations

import re
import threading
from typing import Any, Iterator

import torch
import torch.utils.checkpoint as checkpoint_mod

from specengine.ir import context
from specengine.ir.proxies import Proxy, TensorProxy, unsupported
from specengine.ir.symbol import Symbol, tree_leaves, tree_map

_Function = torch.autograd.function.Function
_real_apply = _Function.__dict__["apply"]
# the generator that non-reentrant checkpoint drives (torch 2.14 calls `..._impl`, with args and kwargs as a tuple
# and a dict; the old name stays as a shim that calls it)
_GENERATOR = next(n for n in ("_checkpoint_without_reentrant_generator_impl", "_checkpoint_without_reentrant_generator")
                  if hasattr(checkpoint_mod, n))  # fmt: skip
_real_generator = getattr(checkpoint_mod, _GENERATOR)
_symbols: dict[type, Symbol] = {}


class _Ctx:
    """The `ctx` that `forward` gets while tracing."""

    def __init__(self, args: tuple):
        self.needs_input_grad = tuple(isinstance(a, TensorProxy) and a.requires_grad for a in args)
        self.non_differentiable: list = []
        self.materialize_grads = True

    def save_for_backward(self, *tensors: Any) -> None:
        pass

    def save_for_forward(self, *tensors: Any) -> None:
        pass

    def mark_non_differentiable(self, *tensors: Any) -> None:
        self.non_differentiable.extend(tensors)

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value

    def mark_dirty(self, *tensors: Any) -> None:
        raise unsupported("ctx.mark_dirty in a custom autograd.Function", "an in-place forward is not traced; "
                          "return a new tensor from forward")  # fmt: skip

    @property
    def saved_tensors(self) -> tuple:
        raise unsupported("ctx.saved_tensors in forward", "it is read in backward")


def _real(cls: type) -> Any:
    """torch's own `cls.apply` (a Python classmethod, or a C one without `__func__` from torch 2.14)."""
    return _real_apply.__get__(None, cls)


def _symbol(cls: type) -> Symbol:
    sym = _symbols.get(cls)
    if sym is None:
        name = re.sub(r"\W", "_", f"{cls.__qualname__}_{id(cls):x}")
        sym = _symbols[cls] = Symbol(name, "autograd_fn", meta=lambda *a, **k: _local.outputs.pop(),
                                     impl=lambda *a, **k: _real(cls)(*a, **k), pure=False)  # fmt: skip
    return sym


_local = threading.local()  # .outputs: the output proxies of the apply being recorded, per tracing thread


def _forward(cls: type, args: tuple, kwargs: dict) -> Any:
    """The output proxies of `cls.apply(*args)`: `forward` run on the proxies as user code (its reads are guarded,
    its ops dropped), each output tensor a fresh proxy that requires grad as `apply`'s would."""
    state = context.require()
    ctx = _Ctx(args)
    pending = len(state.pending) + len(state.pending_binds)
    state.scopes.append([])  # forward's ops: discarded
    try:
        if torch.autograd.function._is_setup_context_defined(cls.setup_context):
            out = cls.forward(*args, **kwargs)
        else:
            out = cls.forward(ctx, *args, **kwargs)
    finally:
        state.scopes.pop()
    if len(state.pending) + len(state.pending_binds) != pending:
        raise unsupported(f"data-dependent values in {cls.__name__}.forward", "compute them outside forward")
    for leaf in tree_leaves(out):
        if not isinstance(leaf, TensorProxy) and leaf is not None:
            raise unsupported(f"{cls.__name__}.forward returning a {type(leaf).__name__}", "return tensors only")
    grad = torch.is_grad_enabled() and any(isinstance(a, TensorProxy) and a.requires_grad for a in args)

    def fresh(t: Any) -> Any:
        if not isinstance(t, TensorProxy):
            return t
        wants = grad and not any(t is n for n in ctx.non_differentiable) and t.dtype.is_floating_point
        return TensorProxy(state.names.fresh("t"), t.dims, t.dtype, t.device, wants)

    return tree_map(fresh, out)


def _apply(cls: type, *args: Any, **kwargs: Any) -> Any:
    if context.current() is None or not any(isinstance(x, Proxy) for x in tree_leaves((args, kwargs))):
        return _real(cls)(*args, **kwargs)
    if cls is torch.nn.modules._functions.BackwardHookFunction:
        raise unsupported("a module with full backward hooks (register_full_backward_hook, "
                          "register_full_backward_pre_hook)", "register a hook on the output tensor "
                          "(out.register_hook) outside the compiled function, or compile the module's children")  # fmt: skip
    if cls is checkpoint_mod.CheckpointFunction:  # reentrant checkpoint(fn, *args): (fn, preserve_rng, *args)
        return args[0](*args[2:])
    state = context.require()
    _local.outputs = [_forward(cls, args, kwargs)]
    out = state.record(_symbol(cls), args, kwargs)
    return out


def _generator(*args: Any, **kwargs: Any) -> Iterator[None]:
    """Non-reentrant checkpoint's setup and teardown around `fn(*args)`: nothing while tracing."""
    if context.current() is None:
        yield from _real_generator(*args, **kwargs)
        return
    yield


_apply_wrapper = classmethod(_apply)


def install() -> None:
    if _Function.__dict__.get("apply") is _real_apply:
        _Function.apply = _apply_wrapper
    if getattr(checkpoint_mod, _GENERATOR) is _real_generator:
        setattr(checkpoint_mod, _GENERATOR, _generator)


def uninstall() -> None:
    if _Function.__dict__.get("apply") is _apply_wrapper:
        _Function.apply = _real_apply
    if getattr(checkpoint_mod, _GENERATOR) is _generator:
        setattr(checkpoint_mod, _GENERATOR, _real_generator)


class _TraceHandle:
    """What `t.register_hook(fn)` returns while tracing: the hook is registered by every cached call."""

    def remove(self) -> None:
        raise unsupported("removing a tensor hook inside the compiled function", "register it outside, or keep it")


def register_hook(self: TensorProxy, hook: Any) -> _TraceHandle:
    """`t.register_hook(fn)` in the traced function: an op of the computation that registers `fn` on the tensor of
    every call. `fn` is the function object seen while tracing, so it must not hold traced values (proxies)."""
    if not callable(hook):
        raise TypeError(f"register_hook expects a callable, got {type(hook).__name__}")
    if not self.requires_grad:
        raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
    held = [c.cell_contents for c in getattr(hook, "__closure__", None) or () if cell_filled(c)]
    held += list(getattr(hook, "__defaults__", None) or ()) + [getattr(hook, "__self__", None)]
    if any(isinstance(x, Proxy) for x in tree_leaves(held)):
        raise unsupported("a tensor hook that holds traced values (a closure over a tensor or size of the trace)",
                          "register a hook that reads no traced values, or register it outside")  # fmt: skip
    sym = Symbol(re.sub(r"\W", "_", f"hook_{getattr(hook, '__name__', 'fn')}_{id(hook):x}"), "tensor_hooks",
                 meta=lambda t: None, impl=lambda t: t.register_hook(hook) and None, pure=False)  # fmt: skip
    context.require().record(sym, (self,), {})
    return _TraceHandle()


def cell_filled(cell: Any) -> bool:
    """Whether a closure cell holds a value (an empty one raises on read)."""
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


TensorProxy.register_hook = register_hook
