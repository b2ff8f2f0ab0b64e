"""Content fingerprints across processes (prologue/contents.py): a `Contents` check saved as its object's recipe
plus its fingerprint made portable (objects compared by identity named by their recipes), rebuilt and compared at
load. Objects without a recipe of their own are named by their place inside the fingerprinted object (places.py)."""

from __future__ import annotations

import builtins
import json
import sys
import types
from typing import Any

from specengine.persist import keys, places
from specengine.persist.recipe_base import Context, Kind, describe, register, resolve
from specengine.persist.signing import Rejected
from specengine.persist.values import NoRecipe, encode_value, lookup, short
from specengine.prologue.contents import Contents, key_and_objects


@register
class ContentsKind(Kind):
    """A `Contents` check of an object the trace read through."""

    name, order = "contents", 70

    def describe(self, v: Any, ctx: Context) -> list | None:
        return _contents(v, ctx) if isinstance(v, Contents) else None

    def resolve(self, r: list, ctx: Context) -> Any:
        return _rebuild_contents(r, ctx)


@register
class At(Kind):
    """An object at a path inside a fingerprinted object, with its content fingerprint."""

    name = "at"

    def resolve(self, r: list, ctx: Context) -> Any:
        v = places.walk(r[1], lambda ref: _resolve_ref(ref, ctx))
        if keys.fp(v) != r[2]:
            raise Rejected(f"{short(r[1])} changed since the entry was saved")
        return v


@register
class BuiltinType(Kind):
    name = "builtin_type"

    def resolve(self, r: list, ctx: Context) -> Any:
        return _BUILTIN_TYPES_BY_NAME[r[1]]


def _resolve_ref(r: list, ctx: Context) -> Any:
    return sys.modules[r[1]] if r[0] == "modname" else resolve(r, ctx)


def _contents(c: Contents, ctx: Context) -> list:
    """A `Contents` check: its object's recipe and its fingerprint made portable (rebuilt and compared at load)."""
    obj = _ref(c.obj, ctx)
    if obj[0] == "code":
        raise NoRecipe("a code object's contents")
    key = portable_key(c.obj, ctx, c.expected, obj)
    refs: list = []
    _refs_in(key, refs)
    unique = list({json.dumps(r, sort_keys=True): r for r in refs}.values())
    return ["contents", obj, c.text, keys.digest(key), unique]


def portable_key(v: Any, ctx: Context, expected: Any = None, where: list | None = None) -> Any:
    """`contents.key(v)` as JSON: objects compared by identity named by their recipes (NoRecipe where one has
    none). With `expected`, NoRecipe unless `v` still has that fingerprint. `where`: `v`'s own recipe (what it
    holds is then found again through it)."""
    k, objects = key_and_objects(v)
    if expected is not None and k != expected:
        raise NoRecipe(f"{short(v)} changed since it was traced")
    if where is not None:
        named = {i: objects[i] for i in _named_ids(k) if i in objects}
        places.locate(v, ["ref", where], named, ctx.places)
    return _portable(k, objects, ctx)


def _named_ids(k: Any, out: set | None = None) -> set:
    """The ids a fingerprint names objects by (`("id", i)` leaves, the heads of its shapes, a class's bases)."""
    out = set() if out is None else out
    if isinstance(k, tuple):
        if len(k) >= 2 and k[0] in ("id", "fn", "cls", "mod", "obj") and type(k[1]) is int:
            out.add(k[1])
            if k[0] == "cls" and len(k) == 4:
                out.update(i for i in k[2] if type(i) is int)
                out.update(i for i, _ in k[3] if type(i) is int)
        for x in k:
            _named_ids(x, out)
    elif isinstance(k, frozenset):
        for x in k:
            _named_ids(x, out)
    return out


_BUILTIN_TYPES = frozenset(
    t
    for t in (*vars(types).values(), *vars(builtins).values(), type(None), type(Ellipsis), type(NotImplemented))
    if isinstance(t, type) and t.__module__ == "builtins"
)  # (their (module, qualname) names them alone: `function`, `NoneType`)


_BUILTIN_TYPES_BY_NAME = {t.__qualname__: t for t in _BUILTIN_TYPES}


def _ref(o: Any, ctx: Context) -> list:
    """An object a fingerprint names by identity: a module by its name, a code object by its hash, else its recipe."""
    if isinstance(o, types.ModuleType) and sys.modules.get(o.__name__) is o:
        return ["modname", o.__name__]
    if isinstance(o, types.CodeType):
        return ["code", keys.code_hash(o)]
    if isinstance(o, type) and _BUILTIN_TYPES_BY_NAME.get(o.__qualname__) is o:
        return ["builtin_type", o.__qualname__]
    known = ctx.known.get(id(o))
    if known is not None and known[0] is o:
        return known[1]
    try:
        return describe(o, ctx)
    except NoRecipe:
        place = ctx.places.get(id(o))
        if place is None or place[0] is not o:
            raise
        return ["at", place[1], keys.fp(o)]  # (a property of a class fingerprinted with it, a module's alias)


def _shaped(k: tuple, objects: dict, ctx: Context) -> list | None:
    """The fingerprint shapes that hold bare ids (a function, a class, a module, an object): each id by `_ref`."""
    tag, ident = k[0], k[1]
    if tag not in ("fn", "cls", "mod", "obj") or type(ident) is not int:
        return None
    if ident not in objects:
        raise NoRecipe("a fingerprint part that cannot be described portably")
    o = objects[ident]
    rest = k[2:]
    if tag == "fn":
        if rest[0] != id(o.__code__):
            raise NoRecipe("a function whose code changed while it was fingerprinted")
        return ["fn", _ref(o, ctx), _ref(o.__code__, ctx), *(_portable(x, objects, ctx) for x in rest[1:])]
    if tag == "cls":
        mro = {id(c): c for c in o.__mro__}
        if rest[0] != tuple(mro):
            raise NoRecipe("a class whose bases changed while it was fingerprinted")
        spaces = [[_ref(mro[i], ctx), _portable(members, objects, ctx)] for i, members in rest[1]]
        return ["cls", _ref(o, ctx), [_ref(c, ctx) for c in o.__mro__], spaces]
    return [tag, _ref(o, ctx), *(_portable(x, objects, ctx) for x in rest)]


_PROCESS_LOCAL = ((str, "_torchdynamo_wrapper_id"),)  # attributes holding an id() (torch._dynamo's disable)


def _portable(k: Any, objects: dict, ctx: Context) -> Any:
    if isinstance(k, tuple) and len(k) == 2 and k[0] in _PROCESS_LOCAL:
        return ["process-local", k[0][1]]
    if isinstance(k, tuple) and len(k) >= 2 and k[0] in ("id", "T", "of") and type(k[1]) is int:
        if k[0] != "id" or k[1] not in objects:
            raise NoRecipe("a fingerprint part that cannot be described portably")
        return ["@", _ref(objects[k[1]], ctx)]
    if isinstance(k, tuple) and len(k) >= 2:
        shaped = _shaped(k, objects, ctx)
        if shaped is not None:
            return shaped
    if isinstance(k, tuple):
        return ["(", *(_portable(x, objects, ctx) for x in k)]
    if isinstance(k, frozenset):
        items = [_portable(x, objects, ctx) for x in k]
        return ["{", *sorted(items, key=lambda x: json.dumps(x, sort_keys=True))]
    if isinstance(k, type):
        mod, qual = k.__module__, k.__qualname__
        try:
            found = lookup(mod, qual) is k
        except (LookupError, AttributeError):
            found = False
        if not found and k not in _BUILTIN_TYPES:
            raise NoRecipe(f"the class {mod}.{qual} in a fingerprint")
        return ["type", mod, qual]
    if isinstance(k, float):
        return ["float", k.hex()]
    if isinstance(k, complex):
        return ["complex", k.real.hex(), k.imag.hex()]
    if isinstance(k, bytes):
        return ["bytes", k.hex()]
    if k is None or type(k) in (bool, int, str):
        return [type(k).__name__, k]
    if k is Ellipsis or k is NotImplemented:
        return [repr(k)]
    try:
        return ["value", encode_value(k)]  # a dtype, a device
    except NoRecipe:
        pass
    raise NoRecipe(f"a {type(k).__name__} in a fingerprint")


_REF_AT = {"@": (1,), "fn": (1,), "mod": (1,), "obj": (1,)}


def _refs_in(p: Any, out: list) -> None:
    """The recipes of the objects a portable fingerprint names (saved beside its hash: at load, the same objects
    are found first, so that they are named alike)."""
    if not isinstance(p, list) or not p:
        return
    refs = [p[i] for i in _REF_AT.get(p[0], ())] if isinstance(p[0], str) else []
    if p[0] == "cls" and len(p) == 4:
        refs = [p[1], *p[2], *(s[0] for s in p[3])]
    out += [ref for ref in refs if isinstance(ref, list) and ref and ref[0] not in ("code", "modname", "contents")]
    for x in p[1:]:
        _refs_in(x, out)


def _rebuild_contents(r: list, ctx: Context) -> Contents:
    obj = _resolve_ref(r[1], ctx)  # (a user module: never imported here, and its contents are compared below)
    for ref in r[4]:
        try:
            o = resolve(ref, ctx)
        except Rejected:
            continue  # (named otherwise now: the hashes differ)
        ctx.known[id(o)] = (o, ref)
    try:
        now = portable_key(obj, ctx, where=r[1])
    except NoRecipe as e:
        raise Rejected(f"the contents of {r[2]} cannot be compared: {e}") from None
    if keys.digest(now) != r[3]:
        raise Rejected(f"the contents of {r[2]} changed since the entry was saved")
    return Contents(obj, r[2])
