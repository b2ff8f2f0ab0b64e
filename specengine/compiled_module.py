"""`CompiledModule`: what `specengine.compile(module)` returns, an nn.Module that stands for the module it compiles.

It shares the original's parameter, buffer and submodule tables (the same dict objects), without registering the
original as a child: `parameters()`, `named_parameters()`, `buffers()`, `state_dict()` and `load_state_dict()` give
and take the original's keys (no `_orig_mod.` prefix), `.to()`, `train()`/`eval()` and `zero_grad()` act on the
original, attributes it does not have itself are the original's, and a wrapper such as
`DistributedDataParallel(specengine.compile(model))` or `fully_shard(specengine.compile(model))` sees the
original's parameters (FSDP2's swaps of sharded and unsharded parameters land in the shared tables). Hooks
registered on the CompiledModule run eagerly around the compiled call; the original's own hooks, and the global
module hooks, run once, in the original's call (traced with it).

Two forms run an outer call eagerly and compile only a module's `forward`:

- `specengine.compile(DistributedDataParallel(model))` compiles `model.forward`; DDP's own forward (buffer
  broadcast, reducer bookkeeping, `no_sync()`, `join()`) runs eagerly on every call;
- a module whose forward hooks are torch.distributed's (`replicate(model)`, `fully_shard(model)`, the composable
  `checkpoint(model)`) keeps those hooks eager and compiles its `forward`.

Submodules that FSDP2 manages inside the compiled module are opaque calls of its trace (capture/distributed.py).
The compiled function is installed as the inner module's `forward` (an instance attribute), exactly as
`model.forward = specengine.compile(model.forward)` does, so the eager code calls it (also when the wrapper or the
module is called directly; a per-call install would change the module's `__dict__` on every call, which makes every
prologue walk the module tree again).
"""

from __future__ import annotations

import copy
from typing import Any, Callable

import torch
import torch.nn.modules.module as _nn_module

from specengine.capture.distributed import data_parallel, distributed_hooks, refuse_managed
from specengine.errors import SpecEngineError
from specengine.prologue.structure import watch

_OWN = ("_orig_module", "_compiled", "_inner")
_GLOBAL_HOOKS = ("_global_forward_pre_hooks", "_global_forward_hooks", "_global_backward_pre_hooks",
                 "_global_backward_hooks", "_global_forward_hooks_always_called")  # fmt: skip


class CompiledModule(torch.nn.Module):
    """A module compiled by `specengine.compile`: calling it runs the compiled forward (see the module docstring)."""

    _specengine_compiled = True  # (prologue/state.py: a compiled module called while another function traces)

    def __init__(self, module: torch.nn.Module, compiled: Callable, inner: torch.nn.Module | None = None):
        super().__init__()
        watch(module)  # its tables become the watched dicts compiles read, once and for all, before they are shared
        own = self.__dict__
        for table in ("_parameters", "_buffers", "_modules", "_non_persistent_buffers_set"):
            own[table] = module.__dict__[table]  # the same dicts: one state, the original's keys
        own["training"] = module.training
        own["_orig_module"] = module  # not a child: no key prefix
        own["_compiled"] = compiled  # a CompiledFunction
        own["_inner"] = inner  # the module whose forward `compiled` is, called by the original's eager call
        if inner is not None:
            inner.__dict__["forward"] = compiled  # as `model.forward = specengine.compile(model.forward)` does

    @property
    def compiled_target(self) -> Callable:
        """The module this compiles (what runs while another compiled function traces it)."""
        return self._compiled.compiled_target if self._inner is None else self._inner

    @property
    def compiled_function(self) -> Any:
        """The `CompiledFunction` holding the entries (`specengine.cache_hits` and the others read it)."""
        return self._compiled

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not self._compiled._entries:  # a compile is coming: refuse it before any hook touches distributed state
            _refuse(self._compiled.compiled_target)
        if not (self._forward_pre_hooks or self._forward_hooks or self._backward_hooks or self._backward_pre_hooks):
            return self.forward(*args, **kwargs)  # the original's call (its hooks, the global ones) is inside
        if not any(getattr(_nn_module, name) for name in _GLOBAL_HOOKS):
            return super().__call__(*args, **kwargs)
        return self._own_hooks_call(args, kwargs)

    def _own_hooks_call(self, args: tuple, kwargs: dict) -> Any:
        """This module's forward hooks around the call, without the global ones (the original's call runs them)."""
        if self._backward_hooks or self._backward_pre_hooks:
            raise SpecEngineError("specengine: backward hooks on a CompiledModule while global module hooks are "
                                  "registered: register them on the original module instead")  # fmt: skip
        for hook_id, hook in list(self._forward_pre_hooks.items()):
            if hook_id in self._forward_pre_hooks_with_kwargs:
                res = hook(self, args, kwargs)
                args, kwargs = (args, kwargs) if res is None else res
            else:
                res = hook(self, args)
                args = args if res is None else res if isinstance(res, tuple) else (res,)
        out = self.forward(*args, **kwargs)
        for hook_id, hook in list(self._forward_hooks.items()):
            with_kwargs = hook_id in self._forward_hooks_with_kwargs
            res = hook(self, args, kwargs, out) if with_kwargs else hook(self, args, out)
            out = out if res is None else res
        return out

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if self._inner is None:
            return self._compiled(*args, **kwargs)
        return self._orig_module(*args, **kwargs)  # eager, calling the inner module's compiled forward

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name in _OWN or "_orig_module" not in self.__dict__:
                raise
            return getattr(self.__dict__["_orig_module"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        orig = self.__dict__.get("_orig_module")
        if orig is not None and name not in self.__dict__ and name in orig.__dict__:
            setattr(orig, name, value)  # a plain attribute of the original (`model.steps = 0`)
        else:
            super().__setattr__(name, value)

    def __dir__(self) -> list:
        return sorted(set(super().__dir__()) | set(dir(self._orig_module)))

    def train(self, mode: bool = True) -> CompiledModule:
        self._orig_module.train(mode)
        self.__dict__["training"] = mode
        return self

    def _apply(self, fn: Callable, recurse: bool = True) -> CompiledModule:
        self._orig_module._apply(fn, recurse)
        return self

    def _save_to_state_dict(self, destination: Any, prefix: str, keep_vars: bool) -> None:
        self._orig_module._save_to_state_dict(destination, prefix, keep_vars)

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        self._orig_module._load_from_state_dict(*args, **kwargs)

    def __deepcopy__(self, memo: dict) -> CompiledModule:
        """A copy of the original, compiled anew with the same options (no entries, no hooks of this module)."""
        if self._inner is not None:
            raise SpecEngineError("specengine: a compiled DDP or module with torch.distributed hooks is not copied; "
                                  "copy the module before compiling or wrapping it")  # fmt: skip
        orig = copy.deepcopy(self._orig_module, memo)
        copied = CompiledModule(orig, type(self._compiled)(orig, self._compiled._options))
        memo[id(self)] = copied
        return copied

    def __repr__(self) -> str:
        return f"CompiledModule({self._orig_module!r})"


def compile_module(fn: Any, make: Callable[[Callable], Any]) -> Any:
    """What `specengine.compile(fn)` returns: `make(target)` is the CompiledFunction of a target."""
    if isinstance(fn, CompiledModule):
        fn = fn._orig_module  # compiled again: with the new options, from the original
    if not isinstance(fn, torch.nn.Module):
        return make(fn)
    if data_parallel(fn):
        target, inner = _forward(fn.module), fn.module
    elif distributed_hooks(fn):
        target, inner = _forward(fn), fn
    else:
        target, inner = fn, None
    _refuse(target)
    return CompiledModule(fn, make(target), inner)


def _forward(module: torch.nn.Module) -> Callable:
    """The forward to compile: the module's own, not one installed by an earlier `specengine.compile`."""
    forward = module.forward
    return forward.compiled_target if getattr(type(forward), "_specengine_compiled", False) else forward


def _refuse(target: Any) -> None:
    """A module that torch.distributed manages inside the compiled one: refused (capture/distributed.py)."""
    module = target if isinstance(target, torch.nn.Module) else target.__self__
    refuse_managed(target, [("self", None, module)])
