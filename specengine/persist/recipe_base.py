"""The recipe table: how a prologue global is found again in another process. No live object is written to disk.

A recipe is JSON, `[kind, ...]`. Each kind is a `Kind` (kinds.py: values and the compiled target's own objects;
named.py: objects by module and qualname, captured globals and closures; fingerprints.py: content fingerprints and
paths inside them); `describe` asks each kind in the order of their `order`, `resolve` asks the kind the recipe
names. A value no kind describes raises `NoRecipe`: the entry is then not saved (never saved without it).
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from specengine.persist.signing import Rejected
from specengine.persist.values import NoRecipe, short


@dataclass
class Context:
    """What recipes are relative to: the compiled module, the compiled function's globals and closure, and the
    guards rebuilt (at load) or present (at save) in this process."""

    module: Any = None
    fn_globals: dict | None = None
    fn_closure: tuple | None = None
    fn_code: Any = None  # the compiled function's own `__code__` (its hash is in the program key)
    fn: Any = None  # the compiled function itself (the plain function under a module's bound `forward`)
    known: dict = field(default_factory=dict)  # at load: id -> (object, recipe) of the objects a fingerprint named
    places: dict = field(default_factory=dict)  # id -> (object, path) inside the objects a fingerprint read
    guards: list = field(default_factory=list)
    captured: list = field(default_factory=list)  # (kind, name, value, holder) read by the trace (specs.captured)
    lifted: list = field(default_factory=list)  # (proxy, tensor, (root, steps)): tensors closed over (specs.lifted)
    memo: dict = field(default_factory=dict)  # indexes built once per save or load (kinds.Engine, named.closure_of)


def context(fn: Any, module: Any) -> Context:
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    func = getattr(target, "__func__", target)
    code = getattr(func, "__code__", None)
    return Context(module, getattr(func, "__globals__", None), getattr(func, "__closure__", None),
                   code if isinstance(code, types.CodeType) else None, func)  # fmt: skip


class Kind:
    """One kind of recipe. `describe` returns the recipe of `v` or None (not of this kind); `resolve` returns the
    object a recipe of this kind names in this process (Rejected, LookupError, AttributeError...: not found)."""

    name: ClassVar[str]
    order: ClassVar[float | None] = None  # position among the describers (None: resolve only)

    def describe(self, v: Any, ctx: Context) -> list | None:
        return None

    def resolve(self, r: list, ctx: Context) -> Any:
        raise Rejected(f"recipe kind {self.name!r} cannot be resolved")


TABLE: dict[str, Kind] = {}
_ORDER: list[Kind] = []


def register(cls: type[Kind]) -> type[Kind]:
    """Class decorator: add a kind to the table."""
    kind = cls()
    TABLE[kind.name] = kind
    if kind.order is not None:
        _ORDER.append(kind)
        _ORDER.sort(key=lambda k: k.order)
    return cls


def describe(v: Any, ctx: Context) -> list:
    """The recipe of a prologue global (NoRecipe where there is none)."""
    for kind in _ORDER:
        r = kind.describe(v, ctx)
        if r is not None:
            return r
    raise NoRecipe(f"a {type(v).__name__} object ({short(v)}) has no recipe")


def resolve(r: list, ctx: Context) -> Any:
    """The object a recipe names in this process (Rejected where it cannot be found or its content changed)."""
    kind = TABLE.get(r[0]) if isinstance(r, list) and r and isinstance(r[0], str) else None
    if kind is None:
        raise Rejected(f"unknown recipe {r[:1]!r}")
    try:
        return kind.resolve(r, ctx)
    except Rejected:
        raise
    except (LookupError, AttributeError, TypeError, ValueError) as e:
        raise Rejected(f"recipe {r[:3]} not found: {type(e).__name__}: {e}") from None
