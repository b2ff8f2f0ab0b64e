"""Mutable state reachable from outside the shadowed inputs: what tracing changed there is undone and refused.

A traced program may change Python state that no cached call would change again: a list held by a module
attribute or by a config object (`self.log.items.append(y)`), a container inside an argument that is not a plain
object (one with `__slots__`, a custom `__new__`), a hook's closure (`calls.append(1)`, `nonlocal n; n += 1`), a
global a hook assigns. Module attributes written through `Module.__setattr__` are replayed (`capture/writes.py`),
and lists, dicts and plain objects passed as arguments are shadowed and written back (`capture/objects.py`);
everything else reachable from the roots below is snapshotted before tracing and compared (by identity) after:
what changed is put back, also on error, so no proxy is left in it, and the program is refused with the place
and, for hooks, the hook's name.

Roots: the attributes of every module of the traced trees (with the hooks registered on them and globally), the
attributes of a bound method's `self`, the constant arguments, and the closure cells and global values the
compiled function reads. The walk follows lists, dicts, sets, tuples, deques, objects' `__dict__` and `__slots__`,
and functions' closures and defaults, to a fixed depth and number of objects. It skips the objects of the standard
library (except its plain-data ones: a `SimpleNamespace`, an `argparse.Namespace`, a `UserDict`), of torch and of
the engine: their state is their own bookkeeping (a logger's level cache fills while tracing), so a change there
is not refused. That cannot leave a proxy in them except through a cache of values the program computed, and the
one such cache user code names, `functools.lru_cache`, is cleared after tracing (`caches_cleared`); what the trace
reads from them is guarded by the fingerprints of `prologue/structure.py` (their fields), not walked here.
"""

from __future__ import annotations

import collections
import functools
import os
import sys
import types
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch
import torch.nn.modules.module as module_mod

from specengine.errors import UnsupportedOpError
from specengine.ir.literals import show
from specengine.ir.proxies import Proxy
from specengine.prologue.fields import PLAIN_LIBRARY
from specengine.prologue.structure import _GLOBAL_HOOKS, _HOOKS, INTERNAL

_MISSING = object()
_MAX_DEPTH = 6
_MAX_OBJECTS = 20000
_SKIP = (torch.Tensor, torch.nn.Module, type, types.ModuleType, types.BuiltinFunctionType, types.CodeType,
         torch.dtype, torch.device, torch.layout, torch.memory_format, str, bytes, int, float, complex, bool,
         type(None), range, slice)  # fmt: skip


def _item(k: Any) -> str:
    return f"[{show(k)}]"  # (never a key's own repr or format: a user class's may be anything)


def _attr(k: Any) -> str:
    return f".{show(k)[1:-1]}" if type(k) is str else f".{show(k)}"


class _Walk:
    """Snapshots of the mutable containers reachable from the roots: (where, object, kind, copy) each."""

    def __init__(self, skip: set[int]):
        self.skip = skip  # ids of objects handled elsewhere (the traced modules)
        self.seen: dict[int, str] = {}  # id -> where it was first reached
        self.types: dict[int, type] = {}  # id -> the type of what was reached (the disk cache's outside_types)
        self.snaps: list[tuple[str, Any, str, Any, Any]] = []  # (where, object, kind, copy, root)
        self.root: Any = None  # the root being walked (a hook: its code is where a change is reported)

    def visit(self, where: str, v: Any, depth: int = 0, hook: bool = False) -> None:
        if isinstance(v, torch.nn.Module) and id(v) not in self.skip and id(v) not in self.seen:
            self.seen[id(v)] = where  # a module outside the traced trees (a hook's `self`): its attributes
            self.types[id(v)] = type(v)
            self.snaps.append((where, v.__dict__, "attrs", list(v.__dict__.items()), self.root))
            return
        if isinstance(v, type) and id(v) not in self.seen and depth <= _MAX_DEPTH and not _library_class(v):
            self.seen[id(v)] = where  # a program's class: its attributes (`Counter.calls += 1`)
            self.types[id(v)] = type(v)
            self.snaps.append((where, v, "class", dict(vars(v)), self.root))
            self._children(where, [(k, x) for k, x in vars(v).items() if not k.startswith("__")], depth, _attr)
            return
        if isinstance(v, _SKIP) or id(v) in self.seen or id(v) in self.skip or isinstance(v, Proxy):
            return  # (proxies: the state tensors and ints that tracing swapped in)
        if depth > _MAX_DEPTH or len(self.seen) > _MAX_OBJECTS:
            return
        self.seen[id(v)] = where
        self.types[id(v)] = type(v)
        if isinstance(v, (list, collections.deque)):
            self.snaps.append((where, v, "list", list(v), self.root))
            self._children(where, enumerate(v), depth, _item)
        elif isinstance(v, dict):
            self.snaps.append((where, v, "dict", list(dict.items(v)), self.root))
            self._children(where, dict.items(v), depth, _item)
        elif isinstance(v, (set, frozenset)):
            if isinstance(v, set):
                self.snaps.append((where, v, "set", set.copy(v), self.root))
        elif isinstance(v, tuple):
            self._children(where, enumerate(v), depth, _item)
        elif isinstance(v, types.FunctionType):
            if depth == 0:  # hooks and the compiled function (not every function reachable: library memos)
                self.function(where, v, hook)
            elif v.__dict__ and not _library_function(v):  # a helper's attributes (`helper.count += 1`)
                self.snaps.append((f"{where}: attributes", v.__dict__, "attrs", list(v.__dict__.items()), self.root))
        elif isinstance(v, types.MethodType):
            self.visit(where, v.__self__, depth + 1)
            self.visit(where, v.__func__, depth, hook)
        else:
            self._object(where, v, depth)

    def _children(self, where: str, items: Any, depth: int, fmt: Callable[[Any], str]) -> None:
        for k, x in list(items):
            self.visit(where + fmt(k), x, depth + 1)

    def _object(self, where: str, v: Any, depth: int) -> None:
        if isinstance(v, functools.partial):  # (a hook bound to a list it fills)
            self.visit(where, (v.func, v.args, v.keywords), depth + 1)
        if _library_object(v):
            return
        state = getattr(v, "__dict__", None)
        if type(state) is dict:
            self.snaps.append((where, state, "attrs", list(state.items()), self.root))
            self._children(where, state.items(), depth, _attr)
        slots = [s for c in type(v).__mro__ for s in _slot_names(c)]
        if slots:
            values = {s: getattr(v, s, _MISSING) for s in slots}
            self.snaps.append((where, v, "slots", values, self.root))
            self._children(where, values.items(), depth, _attr)

    def function(self, where: str, fn: types.FunctionType, globals_too: bool, depth: int = 0) -> None:
        """A function's closure cells, defaults and the values of the globals its code names; with `globals_too`
        (hooks), the globals themselves (the compiled function's are compared by `effects.checked`)."""
        for name, cell in zip(fn.__code__.co_freevars, fn.__closure__ or ()):
            try:
                contents = cell.cell_contents
            except ValueError:
                contents = _MISSING
            self.snaps.append((f"{where}: closure variable {name}", cell, "cell", contents, self.root))
            if contents is not _MISSING:
                self.visit(f"{where}: closure variable {name}", contents, depth + 1)
        if fn.__dict__ and not _library_function(fn):  # its attributes (`g.count += 1`)
            self.snaps.append((f"{where}: attributes", fn.__dict__, "attrs", list(fn.__dict__.items()), self.root))
        for i, d in enumerate(fn.__defaults__ or ()):
            self.visit(f"{where}: default {i}", d, depth + 1)
        glb = fn.__globals__
        names = [n for n in _code_names(fn.__code__) if not n.startswith("__")]
        if names and globals_too:
            self.snaps.append((f"{where}: global", glb, "globals", {n: glb.get(n, _MISSING) for n in names}, self.root))
        for n in names:
            if n in glb:
                self.visit(f"{where}: global {n}", glb[n], depth + 1)


def _library_function(fn: types.FunctionType) -> bool:
    """A function of the standard library, torch or the engine (its attributes are their bookkeeping)."""
    top = (fn.__module__ or "").partition(".")[0]
    return top in sys.stdlib_module_names or top in ("torch", "specengine")


def _library_class(cls: type) -> bool:
    """A class of the standard library, torch, builtins or the engine (their class state is not the program's)."""
    top = (getattr(cls, "__module__", None) or "builtins").partition(".")[0]
    return top in sys.stdlib_module_names or top in ("torch", "builtins", "specengine")


def _library_object(v: Any) -> bool:
    """Objects of the standard library (an Event, a logger and its level cache), of torch or of the engine: state
    they keep for themselves, not program state (lists, dicts, sets and deques are walked whatever holds them, and
    so are the library's plain-data objects: a `SimpleNamespace`, an `argparse.Namespace`, a `UserDict`)."""
    if isinstance(v, PLAIN_LIBRARY):
        return False
    mod = getattr(type(v), "__module__", None) or "builtins"
    top = mod.partition(".")[0]
    if top == "specengine":
        return not mod.startswith("specengine.examples")
    return top in sys.stdlib_module_names or top in ("torch", "builtins")


def _slot_names(cls: type) -> list[str]:
    slots = vars(cls).get("__slots__", ())
    return [s for s in ([slots] if isinstance(slots, str) else slots) if s not in ("__dict__", "__weakref__")]


def _code_names(code: types.CodeType) -> list[str]:
    """The global names a code object (and the code nested in it) loads or stores."""
    out = list(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out += _code_names(c)
    return list(dict.fromkeys(out))


def _changed(kind: str, obj: Any, old: Any) -> str | None:
    """None where `obj` is as snapshotted; else what changed, as a suffix of its place (`.name`, `['k']`, "")."""
    if kind == "list":
        items = list.__iter__(obj) if isinstance(obj, list) else iter(obj)
        same = len(obj) == len(old) and all(a is b for a, b in zip(items, old))
        return None if same else ""
    if kind in ("dict", "attrs"):
        fmt = _attr if kind == "attrs" else _item
        for k, v in old:
            if dict.get(obj, k, _MISSING) is not v:
                return fmt(k)
        new = [k for k in dict.keys(obj) if k not in dict(old)]
        if new:
            return fmt(new[0])
        return None if list(dict.keys(obj)) == [k for k, _ in old] else ""
    if kind == "set":
        return None if obj == old else ""
    if kind == "class":
        now = vars(obj)
        moved = [k for k, v in old.items() if now.get(k, _MISSING) is not v] + [k for k in now if k not in old]
        return f".{moved[0]}" if moved else None
    if kind == "cell":
        try:
            return None if obj.cell_contents is old else ""
        except ValueError:
            return None if old is _MISSING else ""
    getter = (lambda k: obj.get(k, _MISSING)) if kind == "globals" else (lambda k: getattr(obj, k, _MISSING))
    for k, v in old.items():
        if getter(k) is not v:
            return f" {k}" if kind == "globals" else f".{k}"
    return None


def _restore(kind: str, obj: Any, old: Any) -> None:
    if kind == "list" and isinstance(obj, collections.deque):
        obj.clear()
        obj.extend(old)
    elif kind == "list":
        obj[:] = old
    elif kind in ("dict", "attrs"):
        obj.clear()
        obj.update(old)
    elif kind == "set":
        obj.clear()
        obj.update(old)
    elif kind == "cell":
        if old is _MISSING:
            del obj.cell_contents
        else:
            obj.cell_contents = old
    elif kind == "class":
        for k in [k for k in vars(obj) if k not in old]:
            delattr(obj, k)
        for k, v in old.items():
            if vars(obj).get(k, _MISSING) is not v:
                setattr(obj, k, v)
    elif kind == "globals":
        for k, v in old.items():
            obj.pop(k, None) if v is _MISSING else obj.__setitem__(k, v)
    else:
        for k, v in old.items():
            object.__delattr__(obj, k) if v is _MISSING else object.__setattr__(obj, k, v)


def roots(modules: list, bound_selves: list, constants: list, target: Callable) -> tuple[list, list, set[int]]:
    """(where, value) roots to walk, (where, hook) hooks, and the ids of the traced modules (their attributes are
    replayed). `bound_selves` are the `__dict__`s of bound methods' plain `self` objects."""
    out: list[tuple[str, Any]] = []
    hooks: list[tuple[str, Any]] = []
    tree = {id(s): s for m in modules for s in m.modules()}
    names = {id(s): q for m in modules for q, s in m.named_modules(remove_duplicate=False)}
    for s in tree.values():
        p = f"self.{names[id(s)]}" if names.get(id(s)) else "self"
        out += [(f"{p}.{k}", v) for k, v in vars(s).items() if k not in INTERNAL]
        for h in _HOOKS:
            for fn in (getattr(s, h, None) or {}).values():
                hooks.append((f"the {h.strip('_').replace('_', ' ')[:-1]} {_name(fn)} of {p}", fn))
    if tree:
        for h in _GLOBAL_HOOKS:
            for fn in (getattr(module_mod, h, None) or {}).values():
                hooks.append((f"the global {h.removeprefix('_global_').replace('_', ' ')[:-1]} {_name(fn)}", fn))
    out += [(f"class {c.__qualname__}", c) for c in dict.fromkeys(type(s) for s in tree.values())]
    for state in bound_selves:
        out += [(f"self.{k}", v) for k, v in state.items()]
    out += constants
    if isinstance(target, types.FunctionType):
        out.append((f"{target.__qualname__}", target))
    return out, hooks, set(tree)


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__name__


@contextmanager
def unchanged(found: tuple[list, list, set[int]], target: Callable) -> Iterator[_Walk]:
    """Snapshot what the roots and hooks of `found` (see `roots`) reach; after tracing put back what changed, and
    refuse the program if anything did. Yields the walk (`seen`: the ids reached, and where)."""
    roots_, hooks, skip = found
    walk = _Walk(skip)
    for where, v in roots_:
        walk.root = target
        walk.visit(where, v)
    for where, v in hooks:
        walk.root = v
        walk.visit(where, v, hook=True)
    failed = True
    try:
        yield walk
        failed = False
    finally:
        changed = []
        for where, obj, kind, old, root in walk.snaps:
            what = _changed(kind, obj, old)
            if what is not None:
                _restore(kind, obj, old)
                changed.append((where + what, root))
    if changed and not failed:
        raise _refusal(*changed[0])


def _refusal(where: str, root: Any) -> UnsupportedOpError:
    code = getattr(getattr(root, "__func__", root), "__code__", None)
    site = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}" if code else "<unknown>"
    return UnsupportedOpError(f"changing {where} while tracing", site, "it would happen only while tracing, never "
                              "on cached calls; pass the object as an argument (lists, dicts and plain objects are "
                              "written back after every call), keep the state in module attributes, or return the "
                              "new value and apply it outside the compiled function")  # fmt: skip


def check_not_aliased(specs: Any, walk: _Walk, rebuilt: set[int]) -> None:
    """A list, dict or plain object passed in that the program also reaches from outside (`f(obj)` where
    `self.cache is obj`) would be two objects while tracing (the shadow and the original): refused. The prologue
    checks that later arguments are none of the objects reached (`specs.outside_ids`)."""
    both = [(spec.path, walk.seen[oid], value) for oid, (spec, value) in specs.mutables.items() if oid in walk.seen]
    if both:
        path, where, value = min(both, key=lambda b: len(b[0]))
        raise UnsupportedOpError(f"passing {where} (a {type(value).__name__}) as the argument {path}", "<arguments>",
                                 "the program would see it as two objects while tracing (the argument is traced as a "
                                 "copy, written back after each call); pass it only one way")  # fmt: skip
    specs.outside_ids = frozenset(k for k in walk.seen if k not in rebuilt)
    specs.outside_types = frozenset(walk.types[k] for k in specs.outside_ids if k in walk.types)


_LRU = type(functools.lru_cache(lambda: None))  # functools._lru_cache_wrapper


@contextmanager
def caches_cleared(ran: Any) -> Iterator[None]:
    """A `functools.lru_cache` (or `functools.cache`) whose function ran while tracing stored what it returned
    there: proxies, keyed by symbolic ints, that a later trace would read back (a stale proxy in another trace) and
    that would stay in the user's cache. When tracing ends (also on error) the caches of the user functions that
    ran (`ran`: the `coverage.Coverage` of the trace) are cleared: a cache only saves work, the next call computes
    again. A cache hit while tracing returns what an eager call computed, as eager would."""
    try:
        yield
    finally:
        for wrapper in _lru_wrappers(ran.codes):
            wrapper.cache_clear()


def _lru_wrappers(codes: dict) -> list:
    """The lru-cache wrappers in the globals of the code that ran (and in the classes there) whose function ran."""
    out: dict[int, Any] = {}
    for glb in {id(g): g for g in codes.values()}.values():
        for v in list(glb.values()):
            for w in [v, *(vars(v).values() if isinstance(v, type) else ())]:
                w = w.__func__ if isinstance(w, (staticmethod, classmethod)) else w  # (not getattr: an AttrDict's
                # __getattr__ may raise KeyError)
                if isinstance(w, _LRU) and getattr(getattr(w, "__wrapped__", None), "__code__", None) in codes:
                    out[id(w)] = w
    return list(out.values())
