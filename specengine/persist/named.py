"""Recipe kinds of objects found by name: a class, function or object by (module, qualname) with its content
fingerprint checked at load; the globals and closure of a named function; a module global or a closure variable
the trace read (with its fingerprint; its fields are guarded by an ObjectsGuard)."""

from __future__ import annotations

import gc
import sys
import types
from typing import Any

from specengine.persist import keys
from specengine.persist.places import module_at, module_roots
from specengine.persist.recipe_base import Context, Kind, register, resolve
from specengine.persist.signing import Rejected
from specengine.persist.values import NoRecipe, lookup

_NAMEDTUPLE_GLOBALS = {"_tuple_new", "__builtins__", "__name__"}


def _owner_module(v: Any) -> str | None:
    mod = getattr(v, "__module__", None)
    if mod is None and hasattr(v, "__objclass__"):  # a method descriptor (torch.Tensor.view)
        mod = getattr(v.__objclass__, "__module__", None)
    return mod if isinstance(mod, str) else None


def named(v: Any) -> list | None:
    """`["object", module, qualname, fingerprint]` when (module, qualname) finds `v` itself."""
    mod, qual = _owner_module(v), getattr(v, "__qualname__", None)
    if not (mod and isinstance(qual, str)) or "<locals>" in qual or "<lambda>" in qual:
        return None
    try:
        found = lookup(mod, qual)
    except (LookupError, AttributeError):
        found = None
    if found is not v and hasattr(v, "__objclass__"):  # TensorBase.view through torch._C
        return None
    return ["object", mod, qual, keys.fp(v)] if found is v else None


def _checked(v: Any, saved: Any, what: str) -> Any:
    if keys.fp(v) != saved:
        raise Rejected(f"{what} changed since the entry was saved")
    return v


@register
class Named(Kind):
    name, order = "object", 180

    def describe(self, v: Any, ctx: Context) -> list | None:
        return named(v)

    def resolve(self, r: list, ctx: Context) -> Any:
        return _checked(lookup(r[1], r[2]), r[3], f"{r[1]}.{r[2]}")


@register
class NamedtupleGlobals(Kind):
    """collections.namedtuple's generated `__new__` reads `tuple.__new__` from globals of its own."""

    name, order = "namedtuple_globals", 130

    def describe(self, v: Any, ctx: Context) -> list | None:
        if type(v) is dict and v.get("__name__", "").startswith("namedtuple_") and set(v) <= _NAMEDTUPLE_GLOBALS:
            return ["namedtuple_globals", v["__name__"]]
        return None

    def resolve(self, r: list, ctx: Context) -> Any:
        return {"_tuple_new": tuple.__new__, "__builtins__": __builtins__, "__name__": r[1]}


@register
class GlobalsOf(Kind):
    """The `__globals__` of a named function that is not a module's dict (a namedtuple's generated methods)."""

    name, order = "fn_globals_of", 140

    def describe(self, v: Any, ctx: Context) -> list | None:
        if type(v) is not dict:
            return None
        memo = ctx.memo.setdefault("globals_of", {})
        if id(v) not in memo:
            memo[id(v)] = (v, _globals_of(v))
        return memo[id(v)][1]

    def resolve(self, r: list, ctx: Context) -> Any:
        return _checked(lookup(r[1], r[2]), r[3], f"{r[1]}.{r[2]}").__globals__


def _globals_of(d: dict) -> list | None:
    for f in gc.get_referrers(d):
        if isinstance(f, types.FunctionType) and f.__globals__ is d:
            found = named(f)
            if found is not None:
                return ["fn_globals_of", *found[1:]]
    return None


@register
class Closure(Kind):
    """The closure of a named function (a helper the trace ran, a method using `super()`, a decorator's wrapper
    found through the `__wrapped__` chain of the name it decorates)."""

    name, order = "closure", 150

    def describe(self, v: Any, ctx: Context) -> list | None:
        if isinstance(v, tuple) and v and all(isinstance(c, types.CellType) for c in v):
            return closure_of(v, ctx)
        return None

    def resolve(self, r: list, ctx: Context) -> Any:
        fn = _wrapped_chain(lookup(r[1], r[2]))[r[3]]
        return _checked(fn, r[4], f"{r[1]}.{r[2]}").__closure__


def closure_of(cells: tuple, ctx: Context) -> list:
    memo = ctx.memo.setdefault("closures", {})
    found = memo.get(id(cells))
    if found is None:
        found = memo[id(cells)] = (cells, _closure_of(cells, ctx))
    if isinstance(found[1], NoRecipe):
        raise found[1]
    return found[1]


def _closure_of(cells: tuple, ctx: Context) -> list | NoRecipe:
    owners = [f for f in gc.get_referrers(cells) if isinstance(f, types.FunctionType) and f.__closure__ is cells]
    for f in owners:
        if found := _module_method(f, ctx):
            return found
        mod, qual = f.__module__, f.__qualname__
        if not (isinstance(mod, str) and isinstance(qual, str)) or "<locals>" in qual or "<lambda>" in qual:
            continue
        try:
            chain = _wrapped_chain(lookup(mod, qual))
        except (LookupError, AttributeError):
            continue
        for depth, g in enumerate(chain):
            if g is f:
                return ["closure", mod, qual, depth, keys.fp(f)]
    names = ", ".join(f"{f.__module__}.{f.__qualname__}" for f in owners) or "no live function"
    return NoRecipe(f"the closure of a function without a module and qualname ({names})")


def _module_method(f: types.FunctionType, ctx: Context) -> list | None:
    """`["module_closure", at, qual, mro index, name, depth, fp]` for a function of a class made in a function
    (kernels' `Func.forward` closes over the function it wraps): a member of the class of a module the entry walks."""
    if "<locals>" not in f.__qualname__:
        return None
    for root, at in module_roots(ctx):
        for qual, m in root.named_modules(remove_duplicate=False):
            for i, klass in enumerate(type(m).__mro__):
                for name, member in vars(klass).items():
                    for depth, g in enumerate(_wrapped_chain(member) if isinstance(member, types.FunctionType) else ()):
                        if g is f:
                            return ["module_closure", at, qual, i, name, depth, keys.fp(f)]
    return None


@register
class ModuleClosure(Kind):
    """The closure of a method of a class made in a function, found on the class of a module the entry walks."""

    name = "module_closure"

    def resolve(self, r: list, ctx: Context) -> Any:
        _, at, qual, i, name, depth, saved = r
        m = module_at(at, ctx, lambda ref: resolve(ref, ctx)).get_submodule(qual)
        fn = _wrapped_chain(vars(type(m).__mro__[i])[name])[depth]
        return _checked(fn, saved, f"{type(m).__qualname__}.{name}").__closure__


def _wrapped_chain(obj: Any) -> list:
    out = []
    for _ in range(16):
        if obj is None:
            break
        out.append(obj)
        obj = getattr(obj, "__wrapped__", None)
    return out


@register
class Global(Kind):
    """An object the trace read as a module's global or attribute (a logger, a registry, a config instance)."""

    name, order = "global", 200

    def describe(self, v: Any, ctx: Context) -> list | None:
        for kind, name, value, holder in ctx.captured:
            if value is v and kind in ("global", "attr") and isinstance(holder, dict):
                module = holder.get("__name__")
                key = name if kind == "global" else name[0]
                if (
                    isinstance(module, str)
                    and sys.modules.get(module) is not None
                    and vars(sys.modules[module]) is holder
                ):
                    return ["global", module, key, keys.fp(v)]
        return None

    def resolve(self, r: list, ctx: Context) -> Any:
        return _checked(vars(sys.modules[r[1]])[r[2]], r[3], f"the global {r[1]}.{r[2]}")


@register
class Cell(Kind):
    """An object the trace read from a closure variable (of the compiled function or of a named function)."""

    name, order = "cell", 210

    def describe(self, v: Any, ctx: Context) -> list | None:
        for kind, name, value, holder in ctx.captured:
            if value is v and kind == "cell" and isinstance(holder, tuple):
                try:
                    where = ["fn_closure"] if holder is ctx.fn_closure else closure_of(holder, ctx)
                except NoRecipe:
                    continue
                return ["cell", where, name[0], keys.fp(v)]
        return None

    def resolve(self, r: list, ctx: Context) -> Any:
        v = resolve(r[1], ctx)[r[2]].cell_contents
        return _checked(v, r[3], f"a closure variable ({r[1][1:3]})")
