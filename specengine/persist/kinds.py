"""Recipe kinds of values and of the compiled target's own objects: guards rebuilt in this process (`guards.py`),
the structure epoch, the compiled module and its tables, the compiled function's globals, closure, code and itself,
allowed modules, module dicts, `os.environ`, bound methods, typed values, engine sentinels."""

from __future__ import annotations

import os
import sys
import types
from typing import Any

from specengine.persist.recipe_base import Context, Kind, describe, register, resolve
from specengine.persist.signing import Rejected
from specengine.persist.values import NoRecipe, decode_typed, decode_value, encode_typed, encode_value
from specengine.prologue import structure

ALLOWED = ("torch", "math", "operator", "builtins", "specengine", "collections", "functools", "typing", "_operator")


@register
class GuardPart(Kind):
    """A guard rebuilt in this process, or one of its parts (its seen set, its stamp, a tag reader)."""

    name, order = "guard", 10

    def describe(self, v: Any, ctx: Context) -> list | None:
        for i, g in enumerate(ctx.guards):
            part = _guard_part(g, v)
            if part is not None:
                return ["guard", i, *part]
        return None

    def resolve(self, r: list, ctx: Context) -> Any:
        g = ctx.guards[r[1]]
        parts = {"self": lambda: g, "seen": lambda: g.seen, "stamp": lambda: g.stamp.fresh,
                 "reader": lambda: g.readers[r[3]]}  # fmt: skip
        return parts[r[2]]()


def _guard_part(g: Any, v: Any) -> list | None:
    if v is g:
        return ["self"]
    if hasattr(g, "seen") and v is g.seen:
        return ["seen"]
    stamp = getattr(g, "stamp", None)
    if stamp is not None and isinstance(v, types.MethodType) and v.__self__ is stamp and v.__name__ == "fresh":
        return ["stamp"]
    for k, r in enumerate(getattr(g, "readers", ())):
        if v is r:
            return ["reader", k]
    return None


@register
class Epoch(Kind):
    name, order = "epoch", 20

    def describe(self, v: Any, ctx: Context) -> list | None:
        return ["epoch"] if v is structure.EPOCH else None

    def resolve(self, r: list, ctx: Context) -> Any:
        return structure.EPOCH


class _Own(Kind):
    """One of the compiled target's own objects (a `Context` field)."""

    field: str

    def describe(self, v: Any, ctx: Context) -> list | None:
        return [self.name] if v is not None and v is getattr(ctx, self.field) else None

    def resolve(self, r: list, ctx: Context) -> Any:
        v = getattr(ctx, self.field)
        if v is None:
            raise Rejected(f"the entry needs the compiled target's {self.name}")
        return v


@register
class Self(_Own):
    name, order, field = "self", 30, "module"


@register
class FnGlobals(_Own):
    name, order, field = "fn_globals", 40, "fn_globals"


@register
class FnClosure(_Own):
    name, order, field = "fn_closure", 50, "fn_closure"


@register
class FnCode(_Own):
    name, order, field = "fn_code", 60, "fn_code"


@register
class Fn(_Own):
    """The compiled function itself (its code is in the program key; its defaults and attributes have guards)."""

    name, order, field = "fn", 1000, "fn"

    def describe(self, v: Any, ctx: Context) -> list | None:
        return super().describe(v, ctx) if isinstance(v, types.FunctionType) else None

    def resolve(self, r: list, ctx: Context) -> Any:
        if not isinstance(ctx.fn, types.FunctionType):
            raise Rejected("the entry needs a plain function")
        return ctx.fn


@register
class Table(Kind):
    """A table of a submodule of the compiled module (`__dict__`, `_parameters`, `_buffers`), by path."""

    name, order = "table", 80

    def describe(self, v: Any, ctx: Context) -> list | None:
        if ctx.module is None or not isinstance(v, dict):
            return None
        for qual, m in ctx.module.named_modules(remove_duplicate=False):
            for kind in ("__dict__", "_parameters", "_buffers"):
                if (vars(m) if kind == "__dict__" else m.__dict__.get(kind)) is v:
                    return ["table", qual, kind]
        return None

    def resolve(self, r: list, ctx: Context) -> Any:
        m = ctx.module.get_submodule(r[1])
        return vars(m) if r[2] == "__dict__" else m.__dict__[r[2]]


@register
class Module(Kind):
    """A module of the allowlist (torch, math, operator...), imported already."""

    name, order = "module", 90

    def describe(self, v: Any, ctx: Context) -> list | None:
        if not isinstance(v, types.ModuleType):
            return None
        if v.__name__.split(".")[0] not in ALLOWED:
            raise NoRecipe(f"module {v.__name__}")
        return ["module", v.__name__]

    def resolve(self, r: list, ctx: Context) -> Any:
        if r[1].split(".")[0] not in ALLOWED or r[1] not in sys.modules:
            raise Rejected(f"module {r[1]} is not an imported allowed module")
        return sys.modules[r[1]]


@register
class ModDict(Kind):
    """The `__dict__` of an imported module."""

    name, order = "moddict", 100

    def describe(self, v: Any, ctx: Context) -> list | None:
        if isinstance(v, dict) and isinstance(v.get("__name__"), str):
            mod = sys.modules.get(v["__name__"])
            if mod is not None and vars(mod) is v:
                return ["moddict", v["__name__"]]
        return None

    def resolve(self, r: list, ctx: Context) -> Any:
        return vars(sys.modules[r[1]])


@register
class Environ(Kind):
    name, order = "environ", 110

    def describe(self, v: Any, ctx: Context) -> list | None:
        return ["environ"] if v is os.environ else None

    def resolve(self, r: list, ctx: Context) -> Any:
        return os.environ


@register
class Bound(Kind):
    """A method bound to an object that has a recipe, found again as that attribute of its owner."""

    name, order = "bound", 120

    def describe(self, v: Any, ctx: Context) -> list | None:
        bound = isinstance(v, types.MethodType) or (
            isinstance(v, types.BuiltinMethodType) and isinstance(v.__self__, type)
        )
        if not bound or getattr(v.__self__, v.__name__, None) != v:
            return None
        try:
            return ["bound", describe(v.__self__, ctx), v.__name__]
        except NoRecipe:
            return None  # (a method of an object read from a closure: a later kind)

    def resolve(self, r: list, ctx: Context) -> Any:
        return getattr(resolve(r[1], ctx), r[2])


@register
class Value(Kind):
    """A value with value semantics, by its typed JSON form (values.py)."""

    name, order = "value", 160

    def describe(self, v: Any, ctx: Context) -> list | None:
        try:
            return ["value", encode_value(v)]
        except NoRecipe:
            return None

    def resolve(self, r: list, ctx: Context) -> Any:
        return decode_value(r[1])


@register
class Typed(Kind):
    """A constant of a known type held by reference (an Enum member, a numpy scalar or array)."""

    name, order = "typed", 170

    def describe(self, v: Any, ctx: Context) -> list | None:
        typed = encode_typed(v)
        return None if typed is None else ["typed", typed]

    def resolve(self, r: list, ctx: Context) -> Any:
        return decode_typed(r[1])


@register
class Engine(Kind):
    """A module-level object of the engine itself (a sentinel), by module and name."""

    name, order = "engine", 190

    def describe(self, v: Any, ctx: Context) -> list | None:
        index = ctx.memo.get("engine")
        if index is None:  # id -> (module, name) of the engine's module-level objects, once per save or load
            index = ctx.memo["engine"] = {}
            for name, mod in sorted(sys.modules.items()):
                if name.startswith("specengine.") and mod is not None:
                    for k, x in vars(mod).items():
                        if not k.startswith("__"):
                            index.setdefault(id(x), (x, name, k))
        found = index.get(id(v))
        return ["engine", found[1], found[2]] if found is not None and found[0] is v else None

    def resolve(self, r: list, ctx: Context) -> Any:
        if not r[1].startswith("specengine."):
            raise Rejected(f"{r[1]} is not an engine module")
        return vars(sys.modules[r[1]])[r[2]]
