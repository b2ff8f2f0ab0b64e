"""Structure and class guards across processes: saved as a portable fingerprint (classes by module, qualname and
content, submodules by name, attribute values by type and repr) and rebuilt in the new process on the live module,
whose fingerprint must then be the saved one. Version tags, stamps and ids are process-local and never saved."""

from __future__ import annotations

import json
from typing import Any

import torch

from specengine.persist import keys
from specengine.persist.places import held_module, walk
from specengine.persist.recipes import Context, NoRecipe, describe, resolve
from specengine.persist.signing import Rejected
from specengine.persist.writes import describe_skip, rebuild_skip
from specengine.prologue.classes import ClassGuard
from specengine.prologue.fields import is_config_object
from specengine.prologue.structure import ObjectsGuard, StructureGuard


class StructureDiffers(Rejected):
    """The live module's structure is not the saved one: it may become so later (an attribute the first call
    assigns), so the entry is tried again on later misses (`Disk.retry`)."""


def describe_guards(guards: list, ctx: Context) -> list[dict]:
    """The recipes of the structure and class guards of an entry, in order (NoRecipe if one has none)."""
    roots = _roots(guards, ctx)
    out = []
    for g in guards:
        if type(g) is StructureGuard:
            names = None if g.names is None else sorted(g.names)
            out.append({"kind": "structure", "path": g.path, "at": roots[id(g.root)][1], "names": names,
                        "skip": describe_skip(g.skip, g.root), "fingerprint": portable_structure(g)})  # fmt: skip
        elif type(g) is ClassGuard:
            out.append(
                {"kind": "classes", "path": g.path, "classes": [_describe_class(c, g, roots) for c in g.classes]}
            )
        elif type(g) is ObjectsGuard:
            objects = [[path, describe(obj, ctx)] for path, obj in g.objects]
            out.append({"kind": "objects", "objects": objects, "fingerprint": _portable_fields(g)})
        else:
            raise NoRecipe(f"a {type(g).__name__}")
    return out


def _roots(guards: list, ctx: Context) -> dict[int, tuple]:
    """id -> (module, path) of each module tree the structure guards walk: the compiled module (path None), or a
    module it holds in a list or dict attribute (transformers' `_kernel_funcs`), by its path from there."""
    roots = {} if ctx.module is None else {id(ctx.module): (ctx.module, None)}
    for g in guards:
        if type(g) is StructureGuard and id(g.root) not in roots:
            at = None if ctx.module is None else held_module(ctx.module, g.root)
            if at is None:
                raise NoRecipe("a module tree reached outside the compiled module")
            roots[id(g.root)] = (g.root, at)
    return roots


def _describe_class(cls: type, g: ClassGuard, roots: dict[int, tuple]) -> list:
    """A class by (module, qualname), or a class made in a function (`<locals>`) as the type of a module of a
    walked tree, by where that module is, with its content digest (checked at load)."""
    try:
        r = describe(cls, Context())
        if r[0] == "object":
            return r
    except NoRecipe:
        pass
    for root, at in roots.values():
        for qual, m in root.named_modules(remove_duplicate=False):
            if type(m) is cls:
                return ["module_type", at, qual, keys.class_digest(cls)]
    raise NoRecipe(f"a class of {g.path} without a module and qualname")


def _resolve_class(r: list, ctx: Context) -> type:
    if r[0] != "module_type":
        return resolve(r, ctx)
    _, at, qual, saved = r
    cls = type(_module_at(at, "self", ctx).get_submodule(qual))
    if keys.class_digest(cls) != saved:
        raise StructureDiffers(f"the class of the module at {qual!r} differs")
    return cls


def rebuild_guards(descriptions: list[dict], ctx: Context) -> None:
    """Build each guard anew in this process (into `ctx.guards`), checking it against the saved fingerprint."""
    for d in descriptions:
        if d["kind"] == "structure":
            root = _module_at(d.get("at"), d["path"], ctx)
            names = None if d["names"] is None else frozenset(d["names"])
            g = StructureGuard(root, d["path"], rebuild_skip(d.get("skip", []), root), names)
            found = portable_structure(g)
            if found != d["fingerprint"]:
                raise StructureDiffers(f"the module structure differs: {_first_difference(d['fingerprint'], found)}")
        elif d["kind"] == "objects":
            g = ObjectsGuard([(path, resolve(r, ctx)) for path, r in d["objects"]])
            found = _portable_fields(g)
            if found != d["fingerprint"]:
                raise Rejected(f"the fields of objects read differ: {_first_difference(d['fingerprint'], found)}")
        elif d["kind"] == "classes":
            g = ClassGuard([_resolve_class(r, ctx) for r in d["classes"]], d["path"])
        else:
            raise Rejected(f"unknown guard kind {d['kind']!r}")
        ctx.guards.append(g)


def _module_at(at: list | None, path: str, ctx: Context) -> torch.nn.Module:
    """The module a saved structure guard walks: the compiled module, or one it holds in a container (`at`)."""
    if ctx.module is None:
        raise Rejected("a structure guard needs the compiled module")
    if at is None:
        if path != "self":
            raise Rejected("a structure guard of a module outside the compiled module")
        return ctx.module
    root = walk(at, lambda r: resolve(r, ctx))
    if not isinstance(root, torch.nn.Module):
        raise StructureDiffers(f"{path} is a {type(root).__name__}, not a module")
    return root


def _first_difference(saved: list, found: list) -> str:
    a, b = dict((k, v) for k, v in saved), dict((k, v) for k, v in found)
    for k in list(a) + [k for k in b if k not in a]:
        if a.get(k) != b.get(k):
            return f"{k}: saved {a.get(k)!r}, found {b.get(k)!r}"
    return "(order)"


def portable_structure(g: StructureGuard) -> list:
    """The structure guard's fingerprint with every id replaced by what it stands for (NoRecipe: hooks)."""
    objects: dict[int, Any] = {id(o): o for o in g.keep}
    for m in g.root.modules():
        objects[id(m)] = m
        objects[id(type(m))] = type(m)
    out, classes = [], {}
    for k, v in _stable(g.expected):
        if k.endswith(": tables"):
            continue  # the prologue's tables are found again by path
        if k.endswith(": class"):
            cls = objects[v[1]]
            v = keys.qualified(cls)
            if v not in classes:
                classes[v] = keys.class_digest(cls)
        elif k.endswith(": submodules"):
            v = [name for name, _ in v]
        elif ": _" in k:
            v = _portable_hooks(k, v, objects)
        else:
            v = _portable(v, objects)
        out.append([k, v])
    out.append(["classes", [list(kv) for kv in sorted(classes.items())]])
    return out  # JSON's own types only (lists, not tuples): it compares equal to the fingerprint read back


def _portable_hooks(k: str, hooks: tuple, objects: dict[int, Any]) -> list:
    """A hooks dict of a module (or torch's global hooks), in order, each hook by its content fingerprint (its
    code hash, defaults and closure; a callable object's fields are items of their own). Handle ids are a
    process-wide counter: left out."""
    if k.startswith("torch.nn.modules.module: "):
        d = getattr(torch.nn.modules.module, k.partition(": ")[2], None) or {}
        objects = {**objects, **{id(fn): fn for fn in d.values()}}
    out = []
    for _, ident in hooks:
        if ident not in objects:
            raise NoRecipe(f"hooks ({k}): a hook the guard does not hold")
        out.append(keys.fp(objects[ident]))
    return out


def _portable_fields(g: ObjectsGuard) -> list:
    objects = {id(o): o for o in g.keep}
    return [[k, _portable(v, objects)] for k, v in _stable(g.expected)]


# Fields whose value is process-local by construction and never read by a forward pass: transformers'
# GenerationConfig keeps `hash()` of its own repr (string hashes are salted per process) to notice later edits.
_PROCESS_LOCAL_FIELDS = (".generation_config._original_object_hash",)


def _stable(expected: dict) -> list:
    """The fingerprint's items in an order and form that do not depend on the process: a set's elements are listed
    by position (and the order of a set of strings is salted per process), so only its sorted contents count."""
    sets = {k[len("the contents of ") :] for k, v in expected.items()
            if k.startswith("the contents of ") and isinstance(v, tuple) and len(v) > 1 and v[1] in (set, frozenset)}  # fmt: skip
    out = []
    for k, v in sorted(expected.items(), key=lambda kv: kv[0]):
        if k.endswith(_PROCESS_LOCAL_FIELDS):
            continue
        base, bracket, rest = k.rpartition("[")
        if bracket and base in sets and rest.endswith("]") and rest[:-1].isdigit():
            continue  # an element of a set, by its position: the sorted contents above stand for it
        out.append((k, v))
    return out


def _portable(v: Any, objects: dict[int, Any]) -> Any:
    if isinstance(v, tuple):
        if len(v) == 2 and v[0] == "id" and type(v[1]) is int:
            obj = objects.get(v[1])
            if obj is None:
                raise NoRecipe("an object in the module structure that the guard does not hold")
            if is_config_object(obj):
                return ["config", keys.class_digest(type(obj))]  # its fields are items of their own
            if isinstance(obj, (dict, list, set, tuple)):
                return ["container", keys.qualified(type(obj))]  # compared by identity in-process; walked contents
            return keys.fp(obj)  # are items of their own
        if len(v) == 3 and v[0] == "items" and v[1] in (set, frozenset):  # a set's items: ordered by their ids
            return ["items", keys.qualified(v[1]), sorted((_portable(x, objects) for x in v[2]), key=json.dumps)]
        return [_portable(x, objects) for x in v]
    if isinstance(v, type):
        return keys.class_digest(v)
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    raise NoRecipe(f"a {type(v).__name__} in the module structure")
