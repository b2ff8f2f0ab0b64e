"""The disk cache's keys: code hashes (bytecode, constants, names, defaults, closure fingerprints; no paths or line
numbers), value fingerprints, the engine's source hash, and the program key that names a directory."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import json
import os
import platform
import sys
import types
import weakref
from typing import Any

import torch

_MAX_DEPTH = 4


def _h(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=repr).encode("utf-8")).hexdigest()


_CODE_HASHES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # code objects are immutable


def code_hash(code: types.CodeType) -> str:
    """A hash of what a code object does: bytecode, constants (nested code recursively), names, flags, argument
    counts and the exception table; not its file name or line table."""
    found = _CODE_HASHES.get(code)
    if found is None:
        found = _CODE_HASHES[code] = _code_hash(code)
    return found


def _code_hash(code: types.CodeType) -> str:
    consts = [code_hash(c) if isinstance(c, types.CodeType) else _const(c) for c in code.co_consts]
    return _h(code.co_code.hex(), consts, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
              code.co_flags, code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount, code.co_name,
              getattr(code, "co_exceptiontable", b"").hex())  # fmt: skip


def _const(c: Any) -> Any:
    if isinstance(c, (tuple, frozenset)):
        items = [_const(x) for x in c]
        return [type(c).__name__, sorted(items, key=repr) if isinstance(c, frozenset) else items]
    if isinstance(c, float):
        return ["float", c.hex()]
    return [type(c).__name__, repr(c)]


def fingerprint(value: Any, depth: int = 0) -> Any:
    """A portable, JSON-able description of `value`'s content: functions by code hash, defaults and closure;
    classes by qualname and (for classes outside torch and the standard library) their namespace; data by value."""
    if depth > _MAX_DEPTH:
        return ["deep", qualified(type(value))]
    if value is None or isinstance(value, (bool, int, str)):
        return [type(value).__name__, value]
    if isinstance(value, float):
        return ["float", value.hex()]
    if isinstance(value, (tuple, list, frozenset, set)):
        items = [fingerprint(v, depth + 1) for v in value]
        return [type(value).__name__, sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items]
    if isinstance(value, dict) and type(value) is dict:
        return ["dict", [[repr(k), fingerprint(v, depth + 1)] for k, v in value.items()]]
    if isinstance(value, (torch.dtype, torch.device, torch.Size, torch.layout, torch.memory_format, complex, bytes)):
        return [type(value).__name__, repr(value)]
    if isinstance(value, types.FunctionType):
        return function_fingerprint(value, depth)
    if isinstance(value, types.MethodType):
        return ["method", fingerprint(value.__func__, depth + 1), qualified(type(value.__self__))]
    if isinstance(value, (staticmethod, classmethod)):
        return [type(value).__name__, fingerprint(value.__func__, depth + 1)]
    if isinstance(value, property):
        return ["property", [fingerprint(f, depth + 1) for f in (value.fget, value.fset, value.fdel)]]
    if isinstance(value, functools.partial):
        return ["partial", fingerprint(value.func, depth + 1), fingerprint(value.args, depth + 1),
                fingerprint(value.keywords, depth + 1)]  # fmt: skip
    if isinstance(value, type):
        return class_fingerprint(value, depth)
    if isinstance(value, types.ModuleType):
        return ["module", value.__name__]
    if isinstance(value, (types.UnionType, types.GenericAlias)) or type(value).__module__ == "typing":
        return ["alias", qualified(type(value)), repr(value)]  # `str | None`, `Sequence['Config']`: by what they name
    return ["object", qualified(type(value))]


def fp(value: Any) -> str:
    """`fingerprint(value)` as a short hash (what recipes store and compare)."""
    return digest(fingerprint(value))


def function_fingerprint(fn: types.FunctionType, depth: int = 0) -> list:
    cells = []
    for cell in fn.__closure__ or ():
        try:
            v = cell.cell_contents
            cells.append(["class", qualified(v)] if isinstance(v, type) else fingerprint(v, depth + 1))
        except ValueError:
            cells.append(["empty"])
    return ["function", code_hash(fn.__code__), fingerprint(fn.__defaults__, depth + 1),
            fingerprint(fn.__kwdefaults__, depth + 1), cells]  # fmt: skip


def _library(cls: type) -> bool:
    mod = getattr(cls, "__module__", "") or ""
    return mod.split(".")[0] in ("torch", "builtins", "typing", "abc", "collections", "enum", "functools")


def class_fingerprint(cls: type, depth: int = 0) -> list:
    """A class by qualname; a user class also by its bases' names and every attribute of its namespace."""
    if _library(cls) or depth >= _MAX_DEPTH - 1:
        return ["class", qualified(cls)]
    space = []
    for c in cls.__mro__:
        if c is object or _library(c):
            continue
        items = [
            [k, fingerprint(v, depth + 1)]
            for k, v in vars(c).items()
            if k not in ("__dict__", "__weakref__", "__doc__")
        ]
        space.append([qualified(c), items])
    return ["class", qualified(cls), [qualified(c) for c in cls.__mro__], space]


_LIBRARY_DIGESTS: dict[type, str] = {}  # a library class's fingerprint is its qualname alone: fixed per process


def class_digest(cls: type) -> str:
    """`digest(class_fingerprint(cls))`, memoized for torch's and the standard library's classes."""
    found = _LIBRARY_DIGESTS.get(cls)
    if found is None:
        found = digest(class_fingerprint(cls))
        if _library(cls):
            _LIBRARY_DIGESTS[cls] = found
    return found


def qualified(obj: Any) -> str:
    """`module:qualname` of a class or function."""
    return f"{getattr(obj, '__module__', '?')}:{getattr(obj, '__qualname__', type(obj).__name__)}"


_TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _engine_entries(folder: str = _TOP, rel: str = "") -> list[tuple[str, os.DirEntry]]:
    """Every `.py` file of the engine's package, by its path inside the package, in sorted order."""
    out = []
    with os.scandir(folder) as it:
        found = sorted(it, key=lambda e: e.name)
    for e in found:
        name = rel + e.name
        if e.name.endswith(".py") and e.is_file():
            out.append((name, e))
        elif e.is_dir() and e.name != "__pycache__":
            out += _engine_entries(e.path, name + "/")
    return out


def _engine_files() -> list[tuple[str, str]]:
    return [(rel, e.path) for rel, e in _engine_entries()]


def engine_stat() -> str:
    """A hash of the engine's source files' names, sizes and modification times (what `engine_hash` is memoized
    under, as Python's own bytecode cache is: a file rewritten in place changes its mtime)."""
    return _h([(rel, st.st_size, st.st_mtime_ns) for rel, path in _engine_files() for st in [os.stat(path)]])


@functools.lru_cache(maxsize=1)
def engine_hash() -> str:
    """A hash of the engine's own source files (a development checkout changes without a version bump)."""
    digest = hashlib.sha256()
    for rel, path in _engine_files():
        digest.update(rel.encode() + b"\0")
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()


def target_identity(fn: Any) -> list | None:
    """What a compiled target is, portably: module, qualname and content fingerprint (None: no portable name)."""
    if isinstance(fn, torch.nn.Module):
        return ["module", qualified(type(fn)), class_fingerprint(type(fn))]
    if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType):
        return ["method", qualified(type(fn.__self__)), qualified(fn.__func__), function_fingerprint(fn.__func__)]
    if isinstance(fn, types.FunctionType) and "<lambda>" not in fn.__qualname__:
        return ["function", qualified(fn), function_fingerprint(fn)]
    return None


def program_key(fn: Any, dynamic: bool | None, executors: list[str], engine: str | None = None) -> str | None:
    """The directory name of a compiled target's entries (None: the target has no portable identity). `engine`:
    `engine_hash()`, where the caller knows it already."""
    target = target_identity(fn)
    if target is None:
        return None
    return _h("specengine-cache", 1, engine or engine_hash(), torch.__version__, torch.version.git_version,
              platform.python_implementation(), list(sys.version_info[:2]), executors, dynamic, target)[:40]  # fmt: skip


def digest(value: Any) -> str:
    """A hash of a JSON-able value (an entry file's name)."""
    return _h(value)[:40]


def resolve_code(module: str, qualname: str, code_name: str | None = None) -> types.CodeType | None:
    """The code object that `qualname` names in the already imported `module` (nested functions through their
    enclosing function's constants); None where it cannot be found. Never imports anything."""
    obj: Any = sys.modules.get(module)
    if obj is None:
        return None
    parts = qualname.split(".")
    for i, part in enumerate(parts):
        if part == "<locals>":
            code = _code_of(obj, ".".join(parts[:i]))
            return None if code is None else _nested(code, qualname)
        try:
            obj = inspect.getattr_static(obj, part)
        except AttributeError:
            return None
        if isinstance(obj, (staticmethod, classmethod)):
            obj = obj.__func__
        elif isinstance(obj, property):
            obj = obj.fget
    return _code_of(obj, qualname, code_name)


def _code_of(obj: Any, qualname: str, code_name: str | None = None) -> types.CodeType | None:
    """The code named `qualname` along a decorator chain (`__wrapped__`); a generated function (a dataclass's
    `__init__`, whose code is named `__create_fn__.<locals>.__init__`) by its function's qualname."""
    chain = []
    for _ in range(16):
        if obj is None:
            break
        chain.append(obj)
        obj = getattr(obj, "__wrapped__", None)
    for f in list(chain):  # a callable object in place of a function (kernels' `Func()`): its class's methods
        if not isinstance(f, (type, types.FunctionType)):
            chain += [m for m in (inspect.getattr_static(type(f), n, None) for n in ("__call__", "forward"))
                      if isinstance(m, types.FunctionType)]  # fmt: skip
    for f in list(chain):  # a wrapper without __wrapped__ holds the original in its closure
        for cell in getattr(f, "__closure__", None) or ():
            with contextlib.suppress(ValueError):
                if isinstance(cell.cell_contents, types.FunctionType):
                    chain.append(cell.cell_contents)
    codes = [(f, getattr(f, "__code__", None)) for f in chain]
    codes = [(f, c) for f, c in codes if isinstance(c, types.CodeType)]
    for _, code in codes:
        if getattr(code, "co_qualname", code.co_name) == (code_name or qualname):
            return code
    for f, code in codes:
        if getattr(f, "__qualname__", None) == qualname and getattr(code, "co_qualname", None) == code_name:
            return code
    return None


def _nested(code: types.CodeType, qualname: str) -> types.CodeType | None:
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            if getattr(c, "co_qualname", c.co_name) == qualname:
                return c
            found = _nested(c, qualname)
            if found is not None:
                return found
    return None
