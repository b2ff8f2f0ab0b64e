"""Module structure guards: cheap on every call, exact when something changed.

A trace depends on a module tree's structure: each submodule's class and children, its hooks (and the global
hooks of `torch.nn.modules.module`), which parameters and buffers exist, and its plain attributes (`training`,
`n_head`, an activation function...). Re-walking hundreds of submodules per call would cost what Dynamo's guards
cost, so the prologue compares one counter instead: `EPOCH[0]` is bumped whenever a watched module (one in the
tree of a compiled function) changes through `Module.__setattr__`/`__delattr__`, `register_*`/`add_module`,
`ModuleList.insert`/`ModuleDict` deletion, or a hook is registered or removed on a watched module or globally.
Only when the counter moved since an entry last looked is its tree walked again and compared with the
fingerprint taken when the entry was compiled.

Writes that bypass `__setattr__` are seen too: a watched module's `__dict__`, `_modules`, `_parameters` and
`_buffers` are replaced by `WatchedDict`s (plain dicts whose item writes bump EPOCH; they pickle and copy as plain
dicts), so `module.__dict__[k] = v` and `module._modules[k] = m` bump it. Objects held as module attributes (a
config: a dataclass, a transformers `PretrainedConfig`, any instance of a user class with a `__dict__`) are part of
the fingerprint field by field, and their class's `__setattr__`/`__delattr__` are wrapped to bump EPOCH for watched
instances, so `model.config.use_cache = False` is seen. Classes themselves are guarded in `prologue/classes.py`.

Writes that no Python hook sees (`object.__setattr__(obj, k, v)`, a replaced `__dict__`, `cfg.layers.append(x)`)
are caught by a stamp compared on every call (`prologue/stamps.py`): the modules' and config objects' `__dict__`
identities and dict version tags, the items of the lists and sets they hold. The fingerprint (`Graph`) has the
contents of list, tuple, dict and set values too, and the fields of config objects inside them.
"""

from __future__ import annotations

import threading
import types
import weakref
from typing import Any, Callable

import torch
import torch.nn.modules.module as module_mod
from torch.utils.hooks import RemovableHandle

from specengine.ir.literals import exact_key, show
from specengine.prologue.fields import (
    Graph,
    _first_change,
    config_tree,
    is_config_object,
)

EPOCH = [0]
_watched_modules: set[int] = set()
_watched_dicts: set[int] = set()
_watched_objects: set[int] = set()  # config objects held by watched modules (their class's setattr bumps EPOCH)
_patched_classes: set[type] = set()
_MODULE_DICTS = ("_modules", "_parameters", "_buffers")
_MISSING = object()
_lock = threading.RLock()  # reentrant: a finalizer (_forget) may run, by garbage collection, while it is held
_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
          "_forward_pre_hooks_with_kwargs", "_backward_hooks", "_backward_pre_hooks")  # fmt: skip
_GLOBAL_HOOKS = ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
                 "_global_backward_pre_hooks", "_global_forward_hooks_always_called",
                 "_global_forward_hooks_with_kwargs")  # fmt: skip
INTERNAL = frozenset(vars(torch.nn.Module()))  # Module's own bookkeeping attributes
_installed = False
trace_setattr: list[Callable | None] = [None]  # set by the tracer: intercepts attribute writes while tracing
trace_delattr: list[Callable | None] = [None]
trace_apply: list[Callable | None] = [None]  # Module._apply (`.to`, `.float()`, ...) while tracing: True if handled


_DIRTY = -1  # EPOCH's value after a write made under dynamo: never the epoch an entry has seen
_COUNT = [0]  # the last epoch handed out


def bump() -> None:
    """Note a change of watched state: EPOCH moves to a value no check has seen."""
    if torch.compiler.is_dynamo_compiling():
        # a constant store, which dynamo replays after its graph without guarding EPOCH's value (reading it here
        # would add a guard that every later write fails: a recompile per write, up to its limit)
        EPOCH[0] = _DIRTY
        return
    _COUNT[0] += 1
    EPOCH[0] = _COUNT[0]


def epoch() -> int:
    """EPOCH's value, for a check to record as seen (a dirty EPOCH is moved to a fresh value first)."""
    if EPOCH[0] == _DIRTY:
        bump()
    return EPOCH[0]


def _global_hook_dicts() -> list[dict]:
    return [d for d in (getattr(module_mod, n, None) for n in _GLOBAL_HOOKS) if isinstance(d, dict)]


def module_path(qualname: str, kind: str, root: str = "self") -> str:
    """Python text reaching a submodule, parameter or buffer from `root` (`kind`: _modules, ...)."""
    path = root
    parts = qualname.split(".") if qualname else []
    for i, part in enumerate(parts):
        last_kind = kind if i == len(parts) - 1 else "_modules"
        path += f".{part}" if part.isidentifier() else f".{last_kind}[{part!r}]"
    return path


class WatchedDict(dict):
    """A watched module's `__dict__`, `_modules`, `_parameters` or `_buffers`: item writes bump EPOCH. Attribute
    writes through `object.__setattr__` bypass these methods; `Module.__setattr__` is patched for those."""

    __slots__ = ()

    def __setitem__(self, key: Any, value: Any) -> None:
        bump()
        dict.__setitem__(self, key, value)

    def __delitem__(self, key: Any) -> None:
        bump()
        dict.__delitem__(self, key)

    def __ior__(self, other: Any) -> WatchedDict:
        bump()
        dict.update(self, other)
        return self

    def __reduce_ex__(self, protocol: Any) -> tuple:
        return (dict, (dict(self),))  # pickles, copies and deep-copies as a plain dict

    def __repr__(self) -> str:
        return dict.__repr__(self)


def put(d: dict, key: Any, value: Any) -> None:
    """The engine's own write into a module dict (`value` _MISSING: delete), without bumping EPOCH."""
    if type(d) is WatchedDict:
        dict.pop(d, key, None) if value is _MISSING else dict.__setitem__(d, key, value)
    elif value is _MISSING:
        d.pop(key, None)
    else:
        d[key] = value


def _bumping_method(name: str) -> Callable:
    method = getattr(dict, name)

    def bumping(self: WatchedDict, *args: Any, **kwargs: Any) -> Any:
        bump()
        return method(self, *args, **kwargs)

    bumping.__name__ = name
    return bumping


for _name in ("pop", "popitem", "clear", "update", "setdefault"):
    setattr(WatchedDict, _name, _bumping_method(_name))


def _swap_dicts(m: torch.nn.Module) -> None:
    """Replace `m`'s plain `__dict__`, `_modules`, `_parameters` and `_buffers` by WatchedDicts (same contents);
    a swap bumps EPOCH (prologues hold the tables they read: the fingerprint has their ids)."""
    state = m.__dict__
    for name in _MODULE_DICTS:
        d = state.get(name)
        if type(d) is dict:
            dict.__setitem__(state, name, WatchedDict(d))
            bump()
    if type(state) is dict:
        object.__setattr__(m, "__dict__", WatchedDict(state))
        bump()


def watch(root: torch.nn.Module) -> None:
    """Make changes to `root`'s tree bump EPOCH (installs the patches on first use)."""
    install()
    with _lock:
        for m in root.modules():
            _swap_dicts(m)
            dicts = {id(getattr(m, h)) for h in _HOOKS if isinstance(getattr(m, h, None), dict)}
            _watched_dicts.update(dicts)
            if id(m) not in _watched_modules:
                _watched_modules.add(id(m))
                weakref.finalize(m, _forget, id(m), dicts)  # a dead module's id may be reused: forget it
            hooks = [o for h in _HOOKS for o in hook_objects(getattr(m, h, None) or {})]
            for obj in config_objects(m) + config_tree(hooks):
                _watch_object(obj)
        for obj in config_tree(o for d in _global_hook_dicts() for o in hook_objects(d)):
            _watch_object(obj)


def _forget(module_id: int, dicts: set[int]) -> None:
    with _lock:
        _watched_modules.discard(module_id)
        _watched_dicts.difference_update(dicts)


def config_objects(m: torch.nn.Module) -> list:
    """Config objects among `m`'s attributes, and those they hold (two levels deep)."""
    return config_tree(v for k, v in vars(m).items() if k not in INTERNAL)


def _watch_object(obj: Any) -> None:
    """Attribute writes on `obj` bump EPOCH: its class's `__setattr__`/`__delattr__` are wrapped (once per class)."""
    cls = type(obj)
    if cls not in _patched_classes:
        try:
            for name in ("__setattr__", "__delattr__"):
                current = getattr(cls, name)
                if not getattr(current, "_bumps_epoch", False):
                    setattr(cls, name, _object_bumping(current))
        except (TypeError, AttributeError):
            return  # a class that cannot be patched: its instances' fields stay unwatched
        _patched_classes.add(cls)
    if id(obj) not in _watched_objects:
        _watched_objects.add(id(obj))
        try:
            weakref.finalize(obj, _watched_objects.discard, id(obj))
        except TypeError:
            pass  # not weakly referenceable: the id stays watched (a spurious bump at worst)


def _object_bumping(original: Callable) -> Callable:
    if getattr(original, "_bumps_epoch", False):
        return original  # already bumping (inherited, or patched before): one wrapper per chain, never nested
    if original is object.__setattr__ or original is object.__delattr__:
        # named literally: dynamo traces `object.__setattr__(self, ...)` in a __setattr__, but recurses on a
        # slot wrapper held in a closure (torch.compile of a model whose config class is watched)
        wrapper = _object_setattr if original is object.__setattr__ else _object_delattr
    else:

        def wrapper(self: Any, *args: Any) -> Any:
            if id(self) in _watched_objects:
                bump()
            return original(self, *args)

        wrapper.__name__ = getattr(original, "__name__", "wrapper")
        wrapper.__wrapped__ = original  # (the disk cache finds the class's own code through it: specengine/persist)
        wrapper._bumps_epoch = True
    return wrapper


def _object_setattr(self: Any, *args: Any) -> Any:
    if id(self) in _watched_objects:
        bump()
    return object.__setattr__(self, *args)


def _object_delattr(self: Any, *args: Any) -> Any:
    if id(self) in _watched_objects:
        bump()
    return object.__delattr__(self, *args)


_object_setattr._bumps_epoch = True
_object_delattr._bumps_epoch = True


def _bumping(fn: Callable) -> Callable:
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if id(self) in _watched_modules:
            bump()
        return fn(self, *args, **kwargs)

    wrapper.__wrapped__ = fn
    return wrapper


def _applying(original: Callable) -> Callable:
    def _apply(self: torch.nn.Module, fn: Callable, *args: Any, **kwargs: Any) -> Any:
        hook = trace_apply[0]
        if hook is not None and hook(self, fn):
            return self
        return original(self, fn, *args, **kwargs)

    _apply.__wrapped__ = original
    return _apply


def _setattr(original: Callable) -> Callable:
    def __setattr__(self: torch.nn.Module, name: str, value: Any) -> None:
        hook = trace_setattr[0]
        if hook is not None and hook(self, name, value):
            return
        if id(self) in _watched_modules:
            bump()
        original(self, name, value)

    __setattr__.__wrapped__ = original
    return __setattr__


def _delattr(original: Callable) -> Callable:
    def __delattr__(self: torch.nn.Module, name: str) -> None:
        hook = trace_delattr[0]
        if hook is not None:
            hook(self, name)
        if id(self) in _watched_modules:
            bump()
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
        M._apply = _applying(M._apply)
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
                bump()
            init(self, hooks_dict, *args, **kwargs)

        def handle_remove(self: RemovableHandle) -> None:
            d = self.hooks_dict_ref()
            if d is not None and (id(d) in _watched_dicts or id(d) in global_ids):
                bump()
            remove(self)

        RemovableHandle.__init__, RemovableHandle.remove = handle_init, handle_remove


def fingerprint(root: torch.nn.Module, path: str, skip: frozenset = frozenset(), graph: Graph | None = None) -> dict:
    """What a trace of `root` depends on, item by item: `{"self.fc: class": ..., "self.training": ...}`.

    `skip` names attributes (`(id(module), name)`) read as inputs on every call instead (promoted ints). Objects
    are compared by id: a `graph` given keeps them (so that no other object can take the id) and collects what its
    stamp compares on every call."""
    g = graph if graph is not None else Graph(None)
    out = g.out
    if g.keep is not None:
        g.keep.extend(_global_hook_dicts())
        for m in root.modules():
            g.keep.extend([m, *vars(m).values(), *(v for h in _HOOKS for v in (getattr(m, h, None) or {}).values())])
    for d, name in zip(_global_hook_dicts(), _GLOBAL_HOOKS):
        out[f"torch.nn.modules.module: {name}"] = tuple((k, id(v)) for k, v in d.items())
        _hook_fields(g, f"torch.nn.modules.module: {name}", d)
    tensors: dict[int, str] = {}  # id -> the first place it was seen: which tensors are one (tied weights)
    for qual, m in root.named_modules(remove_duplicate=False):
        p = module_path(qual, "_modules", path)
        g.owners.append(m)
        out[f"{p}: class"] = ("id", id(type(m)), type(m).__name__)
        out[f"{p}: tables"] = (id(m.__dict__), id(m._parameters), id(m._buffers))  # the prologue reads them
        out[f"{p}: submodules"] = tuple((k, id(v)) for k, v in m._modules.items())
        for table in ("_parameters", "_buffers"):
            items = getattr(m, table).items()
            out[f"{p}: {table[1:]}"] = tuple((k, v is None or _first(tensors, v, f"{p}.{k}")) for k, v in items)
        for h in _HOOKS:
            hooks = getattr(m, h, None)
            if hooks:
                out[f"{p}: {h}"] = tuple((k, id(v)) for k, v in hooks.items())
                _hook_fields(g, f"{p}: {h}", hooks)
        for attr, value in vars(m).items():
            if attr not in INTERNAL and (id(m), attr) not in skip:
                g.walk(f"{p}.{attr}", value, 0, contents=g.names is None or attr in g.names)
                if isinstance(value, torch.Tensor):
                    out[f"{p}.{attr}"] = ("tensor", _first(tensors, value, f"{p}.{attr}"))
        out[f"{p}.training"] = ("value", exact_key(m.training), show(m.training))
    return out


def _first(tensors: dict[int, str], t: torch.Tensor, place: str) -> str:
    """Where `t` was first seen in this walk: a parameter tied to an earlier one (`head.weight = emb.weight`) is
    read once by the prologue, so untying it (or tying two) is a structure change."""
    return tensors.setdefault(id(t), place)


def hook_objects(hooks: dict) -> list:
    """The config objects among hooks: a callable object (`register_forward_hook(Scaler())`) or the `self` of a
    bound method; their fields are read while tracing, as a module's attributes."""
    targets = (getattr(v, "__self__", None) if isinstance(v, types.MethodType) else v for v in hooks.values())
    return [v for v in targets if v is not None and is_config_object(v)]


def _hook_fields(g: Graph, path: str, hooks: dict) -> None:
    for i, obj in enumerate(hook_objects(hooks)):
        g.walk(f"{path}[{i}]", obj, 0)


class StructureGuard:
    """The prologue's structure check of one module root for one entry: `guard()` is True while the structure
    is the one the entry was compiled for. It walks the tree only when EPOCH moved since it last looked, or when
    the stamp (`prologue/stamps.py`: the modules' and config objects' `__dict__`s, the containers they hold) shows
    a write that bypassed every hook (`object.__setattr__(m, k, v)`, a replaced `__dict__`, `cfg.layers.append`)."""

    def __init__(self, root: torch.nn.Module, path: str, skip: frozenset = frozenset(), names: frozenset | None = None):
        watch(root)
        self.root, self.path, self.skip = root, path, skip
        self.restrict(names)

    def restrict(self, names: frozenset | None) -> None:
        """Take the fingerprint again, with the contents of the list, dict and set attributes of the modules only
        where the code that ran names the attribute (`names_read`): a list that a hook or the caller fills between
        calls and that the program never reads (`self.grads`) must not make every call a new entry."""
        self.names = names
        self.keep: list = []
        graph = Graph(self.keep, names)
        self.expected = fingerprint(self.root, self.path, self.skip, graph)
        self.stamp = graph.stamp()
        self.seen = [epoch()]  # the epoch at which the structure was last found unchanged
        self.failed: tuple = (None, None)  # the epoch and stamp at which it was last found changed
        self.key = tuple(sorted(self.expected.items(), key=lambda kv: kv[0]))

    def __call__(self) -> bool:
        now, (failed, state) = epoch(), self.failed
        if now == failed and self.stamp.matches(state):
            return False  # found changed in this very state already: no second walk
        if fingerprint(self.root, self.path, self.skip, Graph(None, self.names)) != self.expected:
            self.failed = (now, self.stamp.snapshot())
            return False
        watch(self.root)  # the same structure under new objects (a dict reassigned): watch them too
        self.stamp.arm()
        self.seen[0] = epoch()
        return True

    def prologue_check(self, name: Callable) -> tuple[str, str]:
        """(Python that is true when the check fails, its text), with `name(value, hint)` naming globals."""
        epoch, guard, seen = name(EPOCH, "epoch"), name(self, "structure"), name(self.seen, "seen")
        fresh = name(self.stamp.fresh, "stamp")
        fail = f"({epoch}[0] != {seen}[0] or not {fresh}()) and not {guard}()"
        return fail, f"the structure of module {self.path} is unchanged"

    def explain(self) -> str:
        """The first changed item, as `<what> == <expected> failed: <what> = <actual>`."""
        actual = fingerprint(self.root, self.path, self.skip, Graph(None, self.names))
        return _first_change(self.expected, actual, "the module structure")


class ObjectsGuard:
    """Config objects the program reads outside module trees (globals, closure variables, a bound method's
    `self` attributes): their fields and the contents of their containers, compared when the stamp moved."""

    def __init__(self, objects: list[tuple[str, Any]]):
        self.objects = objects  # (path, object); their classes are not patched (the stamp needs no counter), so
        # the class guards' snapshots taken before tracing stay true
        self.path = ", ".join(p for p, _ in objects)
        self.keep: list = [obj for _, obj in objects]
        graph = Graph(self.keep)
        self.expected = self._fields(graph)
        self.stamp = graph.stamp()
        self.failed = None  # the stamp under which the fields were last found changed
        self.key = tuple(sorted(self.expected.items(), key=lambda kv: kv[0]))

    def _fields(self, graph: Graph | None = None) -> dict:
        g = graph if graph is not None else Graph(None)
        for path, obj in self.objects:
            g.walk(path, obj, 0)
        return {k: v for k, v in g.out.items() if k not in {p for p, _ in self.objects}}

    def __call__(self) -> bool:
        if self.failed is not None and self.stamp.matches(self.failed):
            return False
        if self._fields() != self.expected:
            self.failed = self.stamp.snapshot()
            return False
        self.stamp.arm()
        return True

    def prologue_check(self, name: Callable) -> tuple[str, str]:
        guard, fresh = name(self, "objects"), name(self.stamp.fresh, "stamp")
        return f"not {fresh}() and not {guard}()", f"the fields of {self.path} are unchanged"

    def explain(self) -> str:
        return _first_change(self.expected, self._fields(), "the fields")
