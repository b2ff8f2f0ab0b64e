"""Class guards: a method or class attribute reassigned after compile (`type(m).forward = other`,
`Model.helper = ...`, `nn.Linear.forward = ...`) makes the entries that traced through the class miss.

A trace inlines the methods it ran, so every class whose methods or attributes it may have read (the classes of
a compiled module tree, of a bound method's `self`, of the config objects modules hold, of plain objects passed
in) is guarded. Per call that costs one read per class: CPython gives each type a version tag
(`PyTypeObject.tp_version_tag`) that it resets whenever the type or one of its bases is modified, and assigns
anew on the next attribute lookup. The prologue compares the tags with those seen; only when one moved are the
classes' namespaces compared (by identity) with the snapshot taken at compile time. The tag is read through a
`ctypes` view of the type object, whose layout is checked once per process against the attributes Python exposes
(`__basicsize__`, `__flags__`, `__mro__`, `__base__`) and against the tag's behaviour on a probe class; where the
check fails (another interpreter), the namespaces are compared on every call instead: slower, equally sound.
"""

from __future__ import annotations

import ctypes
import functools
import types
from typing import Any, Iterable

import torch

_TAG_OFFSET = 384  # offsetof(PyTypeObject, tp_version_tag) on 64-bit CPython 3.8-3.13 (after tp_del)
_MISSING = object()


def _layout_ok() -> bool:
    """Whether the ctypes reads of a type object give what Python says it holds (64-bit CPython layout)."""
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        return False

    class Probe:
        pass

    try:
        base = id(Probe)
        if ctypes.c_ssize_t.from_address(base + 32).value != Probe.__basicsize__:
            return False
        if ctypes.c_ulong.from_address(base + 168).value != Probe.__flags__:
            return False
        if ctypes.c_void_p.from_address(base + 256).value != id(Probe.__base__):
            return False
        if ctypes.c_void_p.from_address(base + 344).value != id(Probe.__mro__):
            return False
        tag = ctypes.c_uint.from_address(base + _TAG_OFFSET)
        getattr(Probe, "probe", None)  # a lookup assigns a tag
        first = tag.value
        Probe.probe = 1  # a modification resets it
        reset = tag.value
        getattr(Probe, "probe", None)
        second = tag.value
        return first != 0 and reset != first and second not in (0, first)
    except Exception:  # noqa: BLE001 - any surprise: fall back to comparing namespaces
        return False


TAGS_READABLE = _layout_ok()


def _snapshot(cls: type) -> tuple:
    """The namespaces of `cls` and of its bases (object excluded), as (class, dict copy) pairs, and its MRO."""
    return cls.__mro__, tuple((c, dict(vars(c))) for c in cls.__mro__ if c is not object)


def _namespace_key(snapshot: tuple) -> int:
    mro, spaces = snapshot
    return hash(tuple(map(id, mro)) + tuple((id(c), k, id(v)) for c, space in spaces for k, v in space.items()))


def _unchanged(snapshot: tuple, cls: type) -> bool:
    mro, spaces = snapshot
    if cls.__mro__ != mro:
        return False
    for c, saved in spaces:
        space = vars(c)
        if len(space) != len(saved) or any(space.get(k, _MISSING) is not v for k, v in saved.items()):
            return False
    return True


class ClassGuard:
    """The prologue's check of a set of classes: `tags()` reads their version tags (one tuple per call);
    `__call__()` compares their namespaces with the compile-time snapshot, and on success records the current
    tags in `seen[0]`, so the next calls compare tags only."""

    def __init__(self, classes: Iterable[type], path: str):
        self.classes = tuple(dict.fromkeys(classes))  # distinct, in order
        self.path = path
        self.snapshots = tuple(_snapshot(c) for c in self.classes)
        self.readers = tuple(ctypes.c_uint.from_address(id(c) + _TAG_OFFSET) for c in self.classes)
        self.seen: list[Any] = [None]
        self.failed: tuple | None = None  # the tags under which the classes were last found changed
        # part of the entry key: entries traced through different versions of a class both stay
        self.key = tuple((c.__qualname__, id(c), _namespace_key(snap)) for c, snap in zip(self.classes, self.snapshots))
        self()

    def tags(self) -> tuple:
        return tuple(r.value for r in self.readers)

    def __call__(self) -> bool:
        if TAGS_READABLE and self.failed is not None and self.tags() == self.failed:
            return False  # found changed under these very tags already: no second walk
        for snapshot, cls in zip(self.snapshots, self.classes):
            if not _unchanged(snapshot, cls):
                if TAGS_READABLE:
                    for c in self.classes:
                        getattr(c, "__specengine_probe__", None)  # assign tags, so that they identify this state
                    tags = self.tags()
                    self.failed = tags if all(tags) else None
                return False
        if TAGS_READABLE:
            for cls in self.classes:
                getattr(cls, "__specengine_probe__", None)  # a lookup (re)assigns the version tag
            tags = self.tags()
            self.seen[0] = tags if all(tags) else None  # a class without a tag (CPython ran out): always compare
        return True

    def explain(self) -> str:
        for (mro, spaces), cls in zip(self.snapshots, self.classes):
            if cls.__mro__ != mro:
                return f"the bases of {cls.__name__} are unchanged failed: {cls.__name__}.__mro__ changed"
            for c, saved in spaces:
                space = vars(c)
                for k in sorted(set(space) | set(saved)):
                    if space.get(k, _MISSING) is not saved.get(k, _MISSING):
                        return f"{c.__name__}.{k} is unchanged failed: {c.__name__}.{k} was reassigned"
        return "the classes are unchanged"

    def prologue_check(self, name: Any) -> tuple[str, str]:
        """(Python that is true when the check fails, its text), with `name(value, hint)` naming globals."""
        guard, seen = name(self, "classes"), name(self.seen, "classes_seen")
        if not TAGS_READABLE:
            return f"not {guard}()", f"the classes of {self.path} are unchanged"
        reads = "".join(f"{name(r, 'tag')}.value, " for r in self.readers)
        return f"({reads}) != {seen}[0] and not {guard}()", f"the classes of {self.path} are unchanged"


def user_classes(values: Iterable[Any]) -> list[type]:
    """The classes of `values` that are neither builtins nor torch's own (for plain objects and constants)."""
    out = []
    for v in values:
        cls = type(v)
        mod = getattr(cls, "__module__", "") or ""
        engine = mod.startswith("specengine") and not mod.startswith("specengine.examples")
        if not engine and not mod.startswith(("builtins", "torch")) and cls is not type:
            out.append(cls)
    return out


def input_classes(target: Any, params: tuple) -> list[type]:
    """User classes whose methods a trace of `target` may run besides modules': a bound method's `self` (through
    partials), and the plain objects and constants among the arguments."""
    owners = []
    for _ in range(16):
        if isinstance(target, functools.partial):
            target = target.func
        elif isinstance(target, types.MethodType):
            owners.append(target.__self__)
            target = target.__func__
        else:
            break
    classes = [c for c in user_classes(owners) if not issubclass(c, type)]
    todo = list(params)
    while todo:
        spec = todo.pop(0)
        kind = type(spec).__name__
        if kind == "ObjectSpec":
            classes.append(spec.type)
        elif kind == "ConstSpec":
            classes += user_classes([spec.value])
        todo.extend(getattr(spec, "children", ()))
    return [c for c in classes if not issubclass(c, torch.nn.Module)]  # modules: guarded with their tree
