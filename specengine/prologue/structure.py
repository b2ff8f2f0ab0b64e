"""Module structure guards: cheap on every call, exact when something changed.

A trace depends on a module tree's structure: each submodule's class and children, its hooks (and the global
hooks of `torch.nn.modules.module`), which parameters and buffers exist, and its plain attributes (`training`,
`n_head`, an activation function...). Re-walking hundreds of submodules per call would cost what Dynamo's guards
cost, so the prologue compares one counter instead: `EPOCH[0]` is bumped whenever a watched module (one in the
tree of a compiled function) changes through `Module.__setattr__`/`__delattr__`, `register_*`/`add_module`,
`ModuleList.insert`/`ModuleDict` deletion, or a hook is registered or removed on a watched module or globally.
Only when the counter moved since an entry last looked is its tree walked again and compared with the
fingerprint taken when the entry was compiled.

Not seen: writes that bypass these (`module.__dict__[k] = v`, `module._modules[k] = m`), in-place changes of
attribute objects (a list attribute appended to; a config object's field) and changes to classes.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable

import torch
import torch.nn.modules.module as module_mod
from torch.utils.hooks import RemovableHandle

from specengine.prologue.external import has_value_semantics

EPOCH = [0]
_watched_modules: set[int] = set()
_watched_dicts: set[int] = set()
_lock = threading.Lock()
_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
          "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks")  # fmt: skip
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks", "_global_forward_hooks_always_called",
                 "_global_forward_hooks_with_kwargs")  # fmt: skip
INTERNAL = frozenset(vars(torch.nn.Module()))  # Module's own bookkeeping attributes
_installed = False
trace_setattr: list[Callable | None] = [None]  # set by the tracer: intercepts attribute writes while tracing
trace_delattr: list[Callable | None] = [None]


def bump() -> None:
    EPOCH[0] += 1


def _global_hook_dicts() -> list[dict]:
    return [d for d in (getattr(module_mod, n, None) for n in _GLOBAL_HOOKS) if isinstance(d, dict)]


def watch(root: torch.nn.Module) -> None:
    """Make changes to `root`'s tree bump EPOCH (installs the patches on first use)."""
    install()
    with _lock:
        for m in root.modules():
            dicts = {id(getattr(m, h)) for h in _HOOKS if isinstance(getattr(m, h, None), dict)}
            _watched_dicts.update(dicts)
            if id(m) not in _watched_modules:
                _watched_modules.add(id(m))
                weakref.finalize(m, _forget, id(m), dicts)  # a dead module's id may be reused: forget it


def _forget(module_id: int, dicts: set[int]) -> None:
    with _lock:
        _watched_modules.discard(module_id)
        _watched_dicts.difference_update(dicts)


def _bumping(fn: Callable) -> Callable:
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if id(self) in _watched_modules:
            EPOCH[0] += 1
        return fn(self, *args, **kwargs)

    wrapper.__wrapped__ = fn
    return wrapper


def _setattr(original: Callable) -> Callable:
    def __setattr__(self: torch.nn.Module, name: str, value: Any) -> None:
        hook = trace_setattr[0]
        if hook is not None and hook(self, name, value):
            return
        if id(self) in _watched_modules:
            EPOCH[0] += 1
        original(self, name, value)

    __setattr__.__wrapped__ = original
    return __setattr__


def _delattr(original: Callable) -> Callable:
    def __delattr__(self: torch.nn.Module, name: str) -> None:
        hook = trace_delattr[0]
        if hook is not None:
            hook(self, name)
        if id(self) in _watched_modules:
            EPOCH[0] += 1
        original(self, name)

    __delattr__.__wrapped__ = original
    return __delattr__


def install() -> None:
    """Patch the few torch.nn entry points that change a module's structure (once per process)."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
        M = torch.nn.Module
        M.__setattr__ = _setattr(M.__setattr__)
        M.__delattr__ = _delattr(M.__delattr__)
        for name in ("add_module", "register_module", "register_buffer", "register_parameter"):
            setattr(M, name, _bumping(getattr(M, name)))
        for cls, name in ((torch.nn.ModuleList, "insert"), (torch.nn.Sequential, "insert"),
                          (torch.nn.ModuleDict, "__delitem__"), (torch.nn.ModuleDict, "clear")):  # fmt: skip
            if name in vars(cls):
                setattr(cls, name, _bumping(getattr(cls, name)))
        init, remove = RemovableHandle.__init__, RemovableHandle.remove
        global_ids = {id(d) for d in _global_hook_dicts()}

        def handle_init(self: RemovableHandle, hooks_dict: Any, *args: Any, **kwargs: Any) -> None:
            if id(hooks_dict) in _watched_dicts or id(hooks_dict) in global_ids:
                EPOCH[0] += 1
            init(self, hooks_dict, *args, **kwargs)

        def handle_remove(self: RemovableHandle) -> None:
            d = self.hooks_dict_ref()
            if d is not None and (id(d) in _watched_dicts or id(d) in global_ids):
                EPOCH[0] += 1
            remove(self)

        RemovableHandle.__init__, RemovableHandle.remove = handle_init, handle_remove


def _attr_key(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("tensor",)  # an input, read and checked on every call
    if has_value_semantics(value):
        return ("value", type(value), repr(value))
    return ("id", id(value))


def _shown(key: Any) -> str:
    if key is None:
        return "absent"
    if key[0] == "value":
        return key[2]
    return {"tensor": "a tensor", "id": "an object"}[key[0]] + ("" if key[0] == "tensor" else f" (id {key[1]})")


def fingerprint(root: torch.nn.Module, path: str, skip: frozenset = frozenset(), keep: list | None = None) -> dict:
    """What a trace of `root` depends on, item by item: `{"self.fc: class": ..., "self.training": ...}`.

    `skip` names attributes (`(id(module), name)`) read as inputs on every call instead (promoted ints). Objects
    are compared by id: `keep` gets them, so that the guard keeps them alive and no other object can take the id."""
    from specengine.prologue.state import module_path

    out: dict[str, Any] = {}
    if keep is not None:
        keep.extend(_global_hook_dicts())
        for m in root.modules():
            keep.extend([m, *vars(m).values(), *(v for h in _HOOKS for v in (getattr(m, h, None) or {}).values())])
    for d, name in zip(_global_hook_dicts(), _GLOBAL_HOOKS):
        out[f"torch.nn.modules.module: {name}"] = tuple((k, id(v)) for k, v in d.items())
    for qual, m in root.named_modules(remove_duplicate=False):
        p = module_path(qual, "_modules", path)
        out[f"{p}: class"] = ("id", id(type(m)), type(m).__name__)
        out[f"{p}: submodules"] = tuple((k, id(v)) for k, v in m._modules.items())
        out[f"{p}: parameters"] = tuple((k, v is None) for k, v in m._parameters.items())
        out[f"{p}: buffers"] = tuple((k, v is None) for k, v in m._buffers.items())
        for h in _HOOKS:
            hooks = getattr(m, h, None)
            if hooks:
                out[f"{p}: {h}"] = tuple((k, id(v)) for k, v in hooks.items())
        for attr, value in vars(m).items():
            if attr not in INTERNAL and (id(m), attr) not in skip:
                out[f"{p}.{attr}"] = _attr_key(value)
        out[f"{p}.training"] = ("value", bool, repr(m.training))
    return out


class StructureGuard:
    """The prologue's structure check of one module root for one entry: `guard()` is True while the structure
    is the one the entry was compiled for; it walks the tree only when EPOCH moved since it last looked."""

    def __init__(self, root: torch.nn.Module, path: str, skip: frozenset = frozenset()):
        watch(root)
        self.root, self.path, self.skip = root, path, skip
        self.keep: list = []
        self.expected = fingerprint(root, path, skip, self.keep)
        self.seen = [EPOCH[0]]  # the epoch at which the structure was last found unchanged
        self.failed = -1  # the epoch at which it was last found changed
        self.key = tuple(sorted(self.expected.items(), key=lambda kv: kv[0]))

    def __call__(self) -> bool:
        epoch = EPOCH[0]
        if epoch == self.failed:
            return False  # found changed at this epoch already: no second walk
        if fingerprint(self.root, self.path, self.skip) != self.expected:
            self.failed = epoch
            return False
        watch(self.root)  # the same structure under new objects (a dict reassigned): watch them too
        self.seen[0] = epoch
        return True

    def explain(self) -> str:
        """The first changed item, as `<what> == <expected> failed: <what> = <actual>`."""
        actual = fingerprint(self.root, self.path, self.skip)
        for k, v in self.expected.items():
            if actual.get(k) != v:
                return _message(k, v, actual.get(k))
        for k, v in actual.items():
            if k not in self.expected:
                return _message(k, None, v)
        return "the module structure is unchanged"


def _message(what: str, expected: Any, actual: Any) -> str:
    if ":" in what:
        return f"{what} is unchanged failed: {what} changed"
    if isinstance(expected, tuple) and expected[:2] == ("value", bool):
        return f"{what} is {expected[2]} failed: {what} = {_shown(actual)}"
    if expected is None:
        return f"{what} is absent failed: {what} = {_shown(actual)}"
    if expected[0] == "value":
        return f"{what} == {expected[2]} failed: {what} = {_shown(actual)}"
    return f"{what} is the object seen at compile time failed: {what} = {_shown(actual)}"
