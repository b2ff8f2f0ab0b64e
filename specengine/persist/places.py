"""Places: where an object a content fingerprint names by identity is found again in another process, as a path
from an object that has a recipe (a module's global, a class's member, a dict's item, a closure cell, a default).

A fingerprint of a library module or class names by identity the objects it holds that the disk cache cannot name
by (module, qualname): typing aliases (`str | None`), sentinels (`_MISSING = object()`), lambdas, dataclass fields,
registries of objects. `locate` walks breadth-first from the fingerprinted object, so each of them gets its shortest
path; `walk` follows a saved path in the new process. Paths only read attributes, items and cells: they never import,
call, or run a user `__getitem__`. The object at the end is compared by `keys.fingerprint` (recipes.py, "at").
"""

from __future__ import annotations

import collections
import functools
import types
from typing import Any, Callable

import torch

from specengine.persist.signing import Rejected
from specengine.persist.values import decode_value, encode_value, lookup

_MAX_DEPTH, _MAX_NODES = 8, 200_000
_KEY_TYPES = (str, int, bool, type(None))
_ATTRS = {functools.partial: ("func", "args", "keywords"), types.MethodType: ("__func__", "__self__")}


def locate(root: Any, where: list, wanted: dict[int, Any], places: dict) -> None:
    """Fill `places` (id -> (object, path)) for the objects of `wanted` reachable from `root`, found at `where`."""
    missing = {i for i in wanted if i not in places}
    queue = collections.deque([(root, where, 0)])
    seen: set[int] = set()
    while queue and missing and len(seen) < _MAX_NODES:
        x, path, depth = queue.popleft()
        if path is None or id(x) in seen:
            continue
        seen.add(id(x))
        if id(x) not in places:
            places[id(x)] = (x, path)
        missing.discard(id(x))
        if depth < _MAX_DEPTH:
            queue.extend((y, _named(y) or p, depth + 1) for y, p in _children(x, path))


def _children(x: Any, path: list) -> list:
    out: list = []
    if isinstance(x, (dict, types.MappingProxyType)):
        items = dict.items(x) if isinstance(x, dict) else x.items()
        items = list(items)
        out += [(y, ["item", path, key]) for k, y in items if (key := _encode_key(k)) is not None]
        out += [(k, None) for k, _ in items if isinstance(k, (type, types.FunctionType))]  # (keys: by name)
    elif type(x) in (list, tuple) or (isinstance(x, (list, tuple)) and not hasattr(x, "_fields")):
        out += [(y, ["index", path, i]) for i, y in enumerate(x)]
    elif isinstance(x, (set, frozenset)):  # (no path into a set: its classes and functions by name)
        out += [(y, None) for y in x if isinstance(y, (type, types.FunctionType))]
    if isinstance(x, types.FunctionType):
        out += [(c.cell_contents, ["cell", path, i]) for i, c in enumerate(x.__closure__ or ()) if _full(c)]
        out += [(d, ["default", path, i]) for i, d in enumerate(x.__defaults__ or ())]
        out += [(d, ["kwdefault", path, k]) for k, d in (x.__kwdefaults__ or {}).items()]
    if isinstance(x, type):
        out += [(c, ["mro", path, i]) for i, c in enumerate(x.__mro__) if i]
        out.append((type(x), ["type", path]))  # (its metaclass)
    else:
        out.append((type(x), ["type", path]))
    for t, names in _ATTRS.items():
        if type(x) is t:
            out += [(getattr(x, n), ["attr", path, n]) for n in names]
    d = getattr(x, "__dict__", None) if not isinstance(x, types.MappingProxyType) else None
    if isinstance(d, (dict, types.MappingProxyType)):
        out += [(y, ["field", path, k]) for k, y in (dict.items(d) if isinstance(d, dict) else d.items())
                if type(k) is str and k not in ("__dict__", "__weakref__")]  # fmt: skip
    return out


def held_module(module: torch.nn.Module, target: Any) -> list | None:
    """The path to a module that the compiled module holds outside its submodule tree (in a list, tuple or dict
    attribute of one of its submodules, as transformers' `_kernel_funcs`), or None: containers only, 4 deep."""
    for qual, m in module.named_modules(remove_duplicate=False):
        level = [(vars(m), ["ref", ["table", qual, "__dict__"]])]
        for _ in range(4):
            nxt = []
            for x, path in level:
                if isinstance(x, dict):
                    kids = [(y, ["item", path, key]) for k, y in dict.items(x) if (key := _encode_key(k)) is not None]
                else:
                    kids = [(y, ["index", path, i]) for i, y in enumerate(x)]
                for y, p in kids:
                    if y is target:
                        return p
                    if type(y) in (dict, list, tuple) and not (x is vars(m) and p[2] in ("_modules", "_parameters",
                                                                                         "_buffers")):  # fmt: skip
                        nxt.append((y, p))
            level = nxt
    return None


def module_roots(ctx: Any) -> list[tuple[Any, list | None]]:
    """(module, path) of the module trees an entry walks: the compiled module (path None) and the modules it holds
    in containers that its structure guards walk (`ctx.guards`), by `held_module` path."""
    if not isinstance(ctx.module, torch.nn.Module):
        return []
    out, seen = [(ctx.module, None)], {id(ctx.module)}
    for g in ctx.guards:
        root = getattr(g, "root", None)
        if isinstance(root, torch.nn.Module) and id(root) not in seen:
            seen.add(id(root))
            at = held_module(ctx.module, root)
            if at is not None:
                out.append((root, at))
    return out


def module_at(at: list | None, ctx: Any, resolve_ref: Callable[[list], Any]) -> Any:
    """The module at a `module_roots` path in this process (Rejected where it is not a module)."""
    if not isinstance(ctx.module, torch.nn.Module):
        raise Rejected("the entry needs the compiled module")
    root = ctx.module if at is None else walk(at, resolve_ref)
    if not isinstance(root, torch.nn.Module):
        raise Rejected(f"a {type(root).__name__} where the entry walked a module")
    return root


def _named(y: Any) -> list | None:
    """`["named", module, qualname]` for a class or function found again by its name."""
    if not isinstance(y, (type, types.FunctionType)):
        return None
    mod, qual = getattr(y, "__module__", None), getattr(y, "__qualname__", None)
    if not isinstance(mod, str) or not isinstance(qual, str) or "<" in qual:
        return None
    try:
        return ["named", mod, qual] if lookup(mod, qual) is y else None
    except (LookupError, AttributeError):
        return None


def _encode_key(k: Any) -> Any:
    """A dict key as JSON: a value, or a class found by (module, qualname) (`copyreg.dispatch_table`)."""
    if type(k) in _KEY_TYPES:
        return encode_value(k)
    if isinstance(k, type) and isinstance(k.__module__, str):
        try:
            if lookup(k.__module__, k.__qualname__) is k:
                return {"t": "class", "v": [k.__module__, k.__qualname__]}
        except (LookupError, AttributeError):
            pass
    return None


def _decode_key(d: Any) -> Any:
    if isinstance(d, dict) and d.get("t") == "class":
        return lookup(*d["v"])
    return decode_value(d)


def _full(cell: types.CellType) -> bool:
    try:
        return cell.cell_contents is not _EMPTY
    except ValueError:  # an empty cell
        return False


_EMPTY = object()


def walk(path: list, resolve_ref: Callable[[list], Any]) -> Any:
    """The object at a saved path in this process (Rejected where a step does not apply)."""
    step = path[0]
    if step == "ref":
        return resolve_ref(path[1])
    if step == "named":
        return lookup(path[1], path[2])
    base = walk(path[1], resolve_ref)
    if step == "type":
        return type(base)
    arg = path[2]
    if step == "field":
        d = getattr(base, "__dict__", None)
        if not isinstance(d, (dict, types.MappingProxyType)) or type(arg) is not str:
            raise Rejected(f"no field {arg!r} on a {type(base).__name__}")
        return d[arg]
    if step == "item" and isinstance(base, dict):
        return dict.__getitem__(base, _decode_key(arg))
    if step == "item" and type(base) is types.MappingProxyType:
        return base[_decode_key(arg)]
    if step == "index" and isinstance(base, (list, tuple)) and type(arg) is int:
        return list.__getitem__(base, arg) if isinstance(base, list) else tuple.__getitem__(base, arg)
    if step in ("cell", "default", "kwdefault") and isinstance(base, types.FunctionType):
        if step == "cell":
            return base.__closure__[arg].cell_contents
        return base.__defaults__[arg] if step == "default" else base.__kwdefaults__[arg]
    if step == "mro" and isinstance(base, type) and type(arg) is int:
        return base.__mro__[arg]
    if step == "attr" and arg in _ATTRS.get(type(base), ()):
        return getattr(base, arg)
    raise Rejected(f"path step {step!r} on a {type(base).__name__}")
