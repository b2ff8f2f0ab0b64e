"""Recipes: how a prologue global is found again in another process. No live object is written to disk.

A recipe is JSON: a value with a type tag, a module, an object named by (module, qualname) plus a content
fingerprint checked at load, an engine sentinel, the compiled module (`self`) or one of its tables, the compiled
function's globals or closure, an imported module's `__dict__`, or a part of a guard rebuilt in this process
(`guards.py`). A value with no recipe raises `NoRecipe`: the entry is then not saved (never saved without it).
"""

from __future__ import annotations

import builtins
import enum
import gc
import json
import os
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import torch

from specengine.persist import keys
from specengine.persist.signing import Rejected
from specengine.prologue import structure
from specengine.prologue.contents import Contents, key_and_objects

_ALLOWED = ("torch", "math", "operator", "builtins", "specengine", "collections", "functools", "typing", "_operator")
_TORCH_ENUMS = (torch.dtype, torch.layout, torch.memory_format)


_NAMEDTUPLE_GLOBALS = {"_tuple_new", "__builtins__", "__name__"}


class NoRecipe(Exception):
    """A value the disk cache cannot find again in another process (the message says which)."""


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
    members: dict = field(default_factory=dict)  # id -> (object, recipe) of class attributes a fingerprint read
    guards: list = field(default_factory=list)
    captured: list = field(default_factory=list)  # (kind, name, value, holder) read by the trace (specs.captured)


def context(fn: Any, module: Any) -> Context:
    target = fn.forward if isinstance(fn, torch.nn.Module) else fn
    func = getattr(target, "__func__", target)
    code = getattr(func, "__code__", None)
    return Context(module, getattr(func, "__globals__", None), getattr(func, "__closure__", None),
                   code if isinstance(code, types.CodeType) else None, func)  # fmt: skip


# ---- values with a type tag --------------------------------------------------------------------------------------


def encode_value(v: Any) -> Any:
    """A typed JSON form of a value with value semantics (NoRecipe for anything else)."""
    t = type(v)
    if v is None or t in (bool, int, str):
        return {"t": t.__name__, "v": v}
    if t is float:
        return {"t": "float", "v": v.hex()}
    if t is complex:
        return {"t": "complex", "v": [v.real.hex(), v.imag.hex()]}
    if t is bytes:
        return {"t": "bytes", "v": v.hex()}
    if t in (tuple, list, frozenset, set) or t is torch.Size:
        items = [encode_value(x) for x in v]
        return {"t": "size" if t is torch.Size else t.__name__, "v": items}
    if t is torch.device:
        return {"t": "device", "v": str(v)}
    if t is slice:
        return {"t": "slice", "v": [encode_value(v.start), encode_value(v.stop), encode_value(v.step)]}
    if v is Ellipsis:
        return {"t": "ellipsis"}
    if isinstance(v, _TORCH_ENUMS):
        name = str(v).removeprefix("torch.")
        if getattr(torch, name, None) is not v:
            raise NoRecipe(f"{v!r} is not torch.{name}")
        return {"t": "torch", "v": name}
    raise NoRecipe(f"a {t.__name__} value")


_SIMPLE = {"NoneType": lambda v: None, "bool": bool, "int": int, "str": str, "float": float.fromhex}


def decode_value(d: Any) -> Any:
    t = d["t"]
    if t in ("NoneType", "bool", "int", "str"):
        v = d["v"]
        if type(v) is not {"NoneType": type(None), "bool": bool, "int": int, "str": str}[t]:
            raise Rejected(f"a {t} value holds {type(v).__name__}")
        return v
    if t == "float":
        return float.fromhex(d["v"])
    if t == "complex":
        return complex(float.fromhex(d["v"][0]), float.fromhex(d["v"][1]))
    if t == "bytes":
        return bytes.fromhex(d["v"])
    if t in ("tuple", "list", "frozenset", "set", "size"):
        items = [decode_value(x) for x in d["v"]]
        return {"tuple": tuple, "list": list, "frozenset": frozenset, "set": set, "size": torch.Size}[t](items)
    if t == "device":
        return torch.device(d["v"])
    if t == "slice":
        return slice(*(decode_value(x) for x in d["v"]))
    if t == "ellipsis":
        return Ellipsis
    if t == "torch":
        v = getattr(torch, d["v"], None)
        if not isinstance(v, _TORCH_ENUMS):
            raise Rejected(f"torch.{d['v']} is not a dtype, layout or memory format")
        return v
    raise Rejected(f"unknown value tag {t!r}")


# ---- values of a known type held by reference (Enum members, numpy scalars and arrays) --------------------------


def encode_typed(v: Any) -> list | None:
    """A typed-value recipe for a constant held by reference: an Enum member by its class's module and qualname and
    its name (with its value's fingerprint), a numpy scalar or array by dtype, shape and bytes; None otherwise."""
    np = sys.modules.get("numpy")
    if isinstance(v, enum.Enum):
        cls = type(v)
        mod, qual = cls.__module__, cls.__qualname__
        if not isinstance(mod, str) or "<locals>" in qual:
            return None
        try:
            if _lookup(mod, qual) is not cls or cls[v.name] is not v:
                return None
        except (LookupError, AttributeError, KeyError):
            return None
        return ["enum", mod, qual, v.name, keys.fingerprint(v.value)]
    if np is not None and isinstance(v, (np.ndarray, np.generic)) and type(v).__module__ == "numpy":
        if v.dtype.kind not in "biufc" or (isinstance(v, np.ndarray) and type(v) is not np.ndarray):
            return None
        shape = list(v.shape) if isinstance(v, np.ndarray) else None
        return ["numpy", v.dtype.str, shape, np.ascontiguousarray(v).tobytes().hex()]
    return None


def decode_typed(d: list) -> Any:
    if d[0] == "enum":
        cls = _lookup(d[1], d[2])
        if not (isinstance(cls, type) and issubclass(cls, enum.Enum)):
            raise Rejected(f"{d[1]}.{d[2]} is not an Enum")
        member = cls[d[3]]
        if keys.fingerprint(member.value) != d[4]:
            raise Rejected(f"{d[1]}.{d[2]}.{d[3]} changed since the entry was saved")
        return member
    if d[0] == "numpy":
        np = sys.modules.get("numpy")
        if np is None:
            raise Rejected("numpy is not imported")
        dtype = np.dtype(d[1])
        if dtype.kind not in "biufc":
            raise Rejected(f"numpy dtype {d[1]}")
        arr = np.frombuffer(bytes.fromhex(d[3]), dtype=dtype)
        if d[2] is None:
            return arr.reshape(())[()]
        arr = arr.reshape(d[2]).copy()
        arr.flags.writeable = False
        return arr
    raise Rejected(f"unknown typed value {d[0]!r}")


def encode_constant(v: Any) -> list:
    """A computation's non-literal constant (`Trace.constants()`): a value or a typed value (NoRecipe else)."""
    try:
        return ["value", encode_value(v)]
    except NoRecipe:
        pass
    typed = encode_typed(v)
    if typed is None:
        raise NoRecipe(f"the constant {_short(v)} held by reference")
    return ["typed", typed]


def decode_constant(r: list) -> Any:
    if r[0] == "value":
        return decode_value(r[1])
    if r[0] == "typed":
        return decode_typed(r[1])
    raise Rejected(f"unknown constant recipe {r[0]!r}")


# ---- content fingerprints (prologue/contents.py) -----------------------------------------------------------------


def _contents(c: Contents, ctx: Context) -> list:
    """A `Contents` check: its object's recipe and its fingerprint made portable (rebuilt and compared at load)."""
    obj = _ref(c.obj, ctx)
    if obj[0] == "code":
        raise NoRecipe("a code object's contents")
    return ["contents", obj, c.text, portable_key(c.obj, ctx, c.expected)]


def portable_key(v: Any, ctx: Context, expected: Any = None) -> Any:
    """`contents.key(v)` as JSON: objects compared by identity named by their recipes (NoRecipe where one has
    none). With `expected`, NoRecipe unless `v` still has that fingerprint."""
    k, objects = key_and_objects(v)
    if expected is not None and k != expected:
        raise NoRecipe(f"{_short(v)} changed since it was traced")
    return _portable(k, objects, ctx)


_BUILTIN_TYPES = frozenset(
    t
    for t in (*vars(types).values(), *vars(builtins).values(), type(None), type(Ellipsis), type(NotImplemented))
    if isinstance(t, type) and t.__module__ == "builtins"
)  # (their (module, qualname) names them alone: `function`, `NoneType`)


def _ref(o: Any, ctx: Context) -> list:
    """An object a fingerprint names by identity: a module by its name, a code object by its hash, else its recipe."""
    if isinstance(o, types.ModuleType) and sys.modules.get(o.__name__) is o:
        return ["modname", o.__name__]
    if isinstance(o, types.CodeType):
        return ["code", keys.code_hash(o)]
    known = ctx.known.get(id(o))
    if known is not None and known[0] is o:
        return known[1]
    try:
        return describe(o, ctx)
    except NoRecipe:
        member = ctx.members.get(id(o))
        if member is None or member[0] is not o:
            raise
        return member[1]  # (a property, a staticmethod of a class fingerprinted with it: `Enum.__new__`)


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
        for i, _ in rest[1]:
            cref = _ref(mro[i], ctx)
            for name, x in vars(mro[i]).items():
                ctx.members.setdefault(id(x), (x, ["member", cref, name]))
        spaces = [[_ref(mro[i], ctx), _portable(members, objects, ctx)] for i, members in rest[1]]
        return ["cls", _ref(o, ctx), [_ref(c, ctx) for c in o.__mro__], spaces]
    return [tag, _ref(o, ctx), *(_portable(x, objects, ctx) for x in rest)]


def _portable(k: Any, objects: dict, ctx: Context) -> Any:
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
            found = _lookup(mod, qual) is k
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


def _resolve_refs(p: Any, ctx: Context) -> None:
    """At load: the objects a saved fingerprint names (those found), so that the same ones are named alike now."""
    if not isinstance(p, list) or not p:
        return
    refs = [p[i] for i in _REF_AT.get(p[0], ())] if isinstance(p[0], str) else []
    if p[0] == "cls" and len(p) == 4:
        refs = [p[1], *p[2], *(s[0] for s in p[3])]
    for ref in refs:
        if isinstance(ref, list) and ref and ref[0] not in ("code", "modname", "contents"):
            try:
                o = resolve(ref, ctx)
            except Rejected:
                continue
            ctx.known[id(o)] = (o, ref)
    for x in p[1:]:
        _resolve_refs(x, ctx)


def _rebuild_contents(r: list, ctx: Context) -> Contents:
    if r[1][0] == "modname":  # (a user module: never imported here, and its contents are compared below)
        obj = sys.modules[r[1][1]]
    else:
        obj = resolve(r[1], ctx)
    _resolve_refs(r[3], ctx)
    try:
        now = portable_key(obj, ctx)
    except NoRecipe as e:
        raise Rejected(f"the contents of {r[2]} cannot be compared: {e}") from None
    if json.dumps(now, sort_keys=True) != json.dumps(r[3], sort_keys=True):
        raise Rejected(f"the contents of {r[2]} changed since the entry was saved")
    return Contents(obj, r[2])


# ---- objects by name ---------------------------------------------------------------------------------------------


def _owner_module(v: Any) -> str | None:
    mod = getattr(v, "__module__", None)
    if mod is None and hasattr(v, "__objclass__"):  # a method descriptor (torch.Tensor.view)
        mod = getattr(v.__objclass__, "__module__", None)
    return mod if isinstance(mod, str) else None


def _lookup(module: str, qualname: str) -> Any:
    obj: Any = sys.modules.get(module)  # never imports: the module must already be loaded
    if obj is None:
        raise LookupError(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _named(v: Any) -> list | None:
    """`["object", module, qualname, fingerprint]` when (module, qualname) finds `v` itself."""
    mod, qual = _owner_module(v), getattr(v, "__qualname__", None)
    if not (mod and isinstance(qual, str)) or "<locals>" in qual or "<lambda>" in qual:
        return None
    try:
        found = _lookup(mod, qual)
    except (LookupError, AttributeError):
        found = None
    if found is not v and hasattr(v, "__objclass__"):  # TensorBase.view through torch._C
        return None
    return ["object", mod, qual, keys.fingerprint(v)] if found is v else None


def _engine_sentinel(v: Any) -> list | None:
    for name, mod in list(sys.modules.items()):
        if name.startswith("specengine.") and mod is not None:
            for k, x in vars(mod).items():
                if x is v and not k.startswith("__"):
                    return ["engine", name, k]
    return None


def _table(ctx: Context, v: Any) -> list | None:
    if ctx.module is None or not isinstance(v, dict):
        return None
    for qual, m in ctx.module.named_modules(remove_duplicate=False):
        for kind in ("__dict__", "_parameters", "_buffers"):
            if (vars(m) if kind == "__dict__" else m.__dict__.get(kind)) is v:
                return ["table", qual, kind]
    return None


def describe(v: Any, ctx: Context) -> list:
    """The recipe of a prologue global (NoRecipe where there is none)."""
    for i, g in enumerate(ctx.guards):
        part = _guard_part(g, v)
        if part is not None:
            return ["guard", i, *part]
    if v is structure.EPOCH:
        return ["epoch"]
    if ctx.module is not None and v is ctx.module:
        return ["self"]
    if v is not None and v is ctx.fn_globals:
        return ["fn_globals"]
    if v is not None and v is ctx.fn_closure:
        return ["fn_closure"]
    if v is not None and v is ctx.fn_code:
        return ["fn_code"]
    if isinstance(v, Contents):
        return _contents(v, ctx)
    table = _table(ctx, v)
    if table is not None:
        return table
    if isinstance(v, types.ModuleType):
        if v.__name__.split(".")[0] not in _ALLOWED:
            raise NoRecipe(f"module {v.__name__}")
        return ["module", v.__name__]
    if isinstance(v, dict) and isinstance(v.get("__name__"), str):
        mod = sys.modules.get(v["__name__"])
        if mod is not None and vars(mod) is v:
            return ["moddict", v["__name__"]]
    if v is os.environ:
        return ["environ"]
    if isinstance(v, types.MethodType) or (isinstance(v, types.BuiltinMethodType) and isinstance(v.__self__, type)):
        if getattr(v.__self__, v.__name__, None) == v:  # found again as that attribute of its owner
            try:
                return ["bound", describe(v.__self__, ctx), v.__name__]
            except NoRecipe:
                pass  # (a method of an object read from a closure: below)
    if type(v) is dict and v.get("__name__", "").startswith("namedtuple_") and set(v) <= _NAMEDTUPLE_GLOBALS:
        return ["namedtuple_globals", v["__name__"]]  # collections.namedtuple's generated __new__ reads tuple.__new__
    if type(v) is dict:
        found = _globals_of(v)
        if found is not None:
            return found
    if isinstance(v, tuple) and v and all(isinstance(c, types.CellType) for c in v):
        return _closure_of(v)
    try:
        return ["value", encode_value(v)]
    except NoRecipe:
        pass
    typed = encode_typed(v)
    if typed is not None:
        return ["typed", typed]
    named = _named(v)
    if named is not None:
        return named
    sentinel = _engine_sentinel(v)
    if sentinel is not None:
        return sentinel
    found = _module_global(v, ctx)
    if found is not None:
        return found
    if v is not None and v is ctx.fn and isinstance(v, types.FunctionType):
        return ["fn"]  # (its code is in the program key; its defaults and attributes have guards of their own)
    raise NoRecipe(f"a {type(v).__name__} object ({_short(v)}) has no recipe")


def _closure_of(cells: tuple) -> list:
    """The closure of a named function (a helper the trace ran, a method using `super()`, a decorator's wrapper found
    through the `__wrapped__` chain of the name it decorates)."""
    for f in gc.get_referrers(cells):
        if not (isinstance(f, types.FunctionType) and f.__closure__ is cells):
            continue
        mod, qual = f.__module__, f.__qualname__
        if not (isinstance(mod, str) and isinstance(qual, str)) or "<locals>" in qual or "<lambda>" in qual:
            continue
        try:
            chain = _wrapped_chain(_lookup(mod, qual))
        except (LookupError, AttributeError):
            continue
        for depth, g in enumerate(chain):
            if g is f:
                return ["closure", mod, qual, depth, keys.fingerprint(f)]
    raise NoRecipe("the closure of a function without a module and qualname")


def _globals_of(d: dict) -> list | None:
    """The `__globals__` of a named function that is not a module's dict (a namedtuple's generated methods)."""
    for f in gc.get_referrers(d):
        if isinstance(f, types.FunctionType) and f.__globals__ is d:
            named = _named(f)
            if named is not None:
                return ["fn_globals_of", *named[1:]]
    return None


def _wrapped_chain(obj: Any) -> list:
    out = []
    for _ in range(16):
        if obj is None:
            break
        out.append(obj)
        obj = getattr(obj, "__wrapped__", None)
    return out


def _module_global(v: Any, ctx: Context) -> list | None:
    """An object the trace read as a module's global or attribute (a logger, a registry, a config instance):
    found again under that name, with its content fingerprint (its fields are guarded by an ObjectsGuard)."""
    for kind, name, value, holder in ctx.captured:
        if value is not v:
            continue
        if kind in ("global", "attr") and isinstance(holder, dict):
            module = holder.get("__name__")
            key = name if kind == "global" else name[0]
            if isinstance(module, str) and sys.modules.get(module) is not None and vars(sys.modules[module]) is holder:
                return ["global", module, key, keys.fingerprint(v)]
        elif kind == "cell" and isinstance(holder, tuple):
            try:
                where = ["fn_closure"] if holder is ctx.fn_closure else _closure_of(holder)
            except NoRecipe:
                continue
            return ["cell", where, name[0], keys.fingerprint(v)]
    return None


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) < 60 else text[:57] + "..."


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


def resolve(r: list, ctx: Context) -> Any:
    """The object a recipe names in this process (Rejected where it cannot be found or its content changed)."""
    kind = r[0]
    try:
        if kind == "guard":
            g = ctx.guards[r[1]]
            part = r[2]
            if part == "self":
                return g
            if part == "seen":
                return g.seen
            if part == "stamp":
                return g.stamp.fresh
            if part == "reader":
                return g.readers[r[3]]
        elif kind == "epoch":
            return structure.EPOCH
        elif kind == "self":
            if ctx.module is None:
                raise Rejected("the entry needs a module")
            return ctx.module
        elif kind == "fn_globals":
            return ctx.fn_globals
        elif kind == "fn_closure":
            return ctx.fn_closure
        elif kind == "fn_code":
            if ctx.fn_code is None:
                raise Rejected("the compiled function has no code object")
            return ctx.fn_code
        elif kind == "fn":
            if not isinstance(ctx.fn, types.FunctionType):
                raise Rejected("the entry needs a plain function")
            return ctx.fn
        elif kind == "contents":
            return _rebuild_contents(r, ctx)
        elif kind == "typed":
            return decode_typed(r[1])
        elif kind == "table":
            m = ctx.module.get_submodule(r[1])
            return vars(m) if r[2] == "__dict__" else m.__dict__[r[2]]
        elif kind == "module":
            if r[1].split(".")[0] not in _ALLOWED or r[1] not in sys.modules:
                raise Rejected(f"module {r[1]} is not an imported allowed module")
            return sys.modules[r[1]]
        elif kind == "moddict":
            return vars(sys.modules[r[1]])
        elif kind == "value":
            return decode_value(r[1])
        elif kind == "object":
            v = _lookup(r[1], r[2])
            if keys.fingerprint(v) != r[3]:
                raise Rejected(f"{r[1]}.{r[2]} changed since the entry was saved")
            return v
        elif kind == "global":
            v = vars(sys.modules[r[1]])[r[2]]
            if keys.fingerprint(v) != r[3]:
                raise Rejected(f"the global {r[1]}.{r[2]} changed since the entry was saved")
            return v
        elif kind == "cell":
            v = resolve(r[1], ctx)[r[2]].cell_contents
            if keys.fingerprint(v) != r[3]:
                raise Rejected(f"a closure variable changed since the entry was saved ({r[1][1:3]})")
            return v
        elif kind == "namedtuple_globals":
            return {"_tuple_new": tuple.__new__, "__builtins__": __builtins__, "__name__": r[1]}
        elif kind == "environ":
            return os.environ
        elif kind == "bound":
            return getattr(resolve(r[1], ctx), r[2])
        elif kind == "fn_globals_of":
            fn = _lookup(r[1], r[2])
            if keys.fingerprint(fn) != r[3]:
                raise Rejected(f"{r[1]}.{r[2]} changed since the entry was saved")
            return fn.__globals__
        elif kind == "closure":
            fn = _wrapped_chain(_lookup(r[1], r[2]))[r[3]]
            if keys.fingerprint(fn) != r[4]:
                raise Rejected(f"{r[1]}.{r[2]} changed since the entry was saved")
            return fn.__closure__
        elif kind == "engine":
            if not r[1].startswith("specengine."):
                raise Rejected(f"{r[1]} is not an engine module")
            return vars(sys.modules[r[1]])[r[2]]
    except Rejected:
        raise
    except (LookupError, AttributeError, TypeError, ValueError) as e:
        raise Rejected(f"recipe {r[:3]} not found: {type(e).__name__}: {e}") from None
    raise Rejected(f"unknown recipe {kind!r}")
