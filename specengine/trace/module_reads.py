"""Attributes of imported modules that the user code which ran while tracing reads: `cfg.SCALE`, `mymod.helper(x)`,
`if flags.FAST:`, `from mymod import SCALE` inside a function, `getattr(mymod, "X", None)`.

A global read by a function is a read of its own module's `__dict__` (guarded through `coverage.py`); an attribute
of another module is a read of that module's `__dict__`, made by `LOAD_ATTR` on a module object. The code objects
that ran are read statically, each once: a module reached from a global, a closure variable, or an `import` in the
code itself, followed by a chain of attribute reads. Each attribute read of a module that may change is guarded
as a global of that module (by value where the type has value semantics, else by identity; an absent one by its
absence); an attribute that is itself a module is followed, not guarded.

Modules treated as immutable (their attributes are not guarded): the standard library and builtin modules,
`torch` (and `functorch`), `numpy`, `specengine` and what it runs (`z3`). Every other module is guarded: the
user's own, `__main__`, modules made with `types.ModuleType`, and third-party packages.

Not seen: a module passed as a value (`helper(mymod)`, `m = mymod` and then `m.X`), `getattr(mymod, name)` with a
computed name, `vars(mymod)`, and attributes given by a module's `__getattr__`.
"""

from __future__ import annotations

import dis
import functools
import importlib.util
import os
import sys
import types
from typing import Any, Iterator

_FRAMEWORKS = frozenset({"torch", "functorch", "numpy", "specengine", "z3", "builtins"})
_SOURCES = ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_FAST")
_ATTRS = ("LOAD_ATTR", "LOAD_METHOD")
_STORES = ("STORE_FAST", "STORE_DEREF", "STORE_NAME", "STORE_GLOBAL")
_CALLS = ("PRECALL", "CALL", "CALL_FUNCTION", "CALL_FUNCTION_EX")


def immutable(mod: types.ModuleType) -> bool:
    """Whether a module's attributes are taken as constants (see the module docstring)."""
    name = getattr(mod, "__name__", None)
    if not isinstance(name, str):
        return False
    if name.partition(".")[0] in _FRAMEWORKS or name in sys.builtin_module_names:
        return True
    from specengine.trace.coverage import _library

    file = getattr(mod, "__file__", None)
    return isinstance(file, str) and _library(os.path.abspath(file))


@functools.lru_cache(maxsize=4096)
def patterns(code: types.CodeType) -> tuple[tuple, ...]:
    """The module-attribute reads `code` may make, statically: `(source, attrs)`, where `source` is
    `("name", n)` (a global, a closure variable or a local bound by an import) or `("import", module, level,
    fromlist)`, and `attrs` the attribute names read in turn (each on the previous one's value). Imports that bind
    locals are given as `("bind", local, source, attrs)`."""
    ins = [i for i in dis.get_instructions(code) if i.opname not in ("EXTENDED_ARG", "CACHE", "NOP")]
    out: list[tuple] = []
    for k, i in enumerate(ins):
        if i.opname in _SOURCES:
            source: tuple = ("name", i.argval)
        elif i.opname == "IMPORT_NAME" and k >= 2:
            level, fromlist = ins[k - 2].argval, ins[k - 1].argval
            source = ("import", i.argval, level if isinstance(level, int) else 0, bool(fromlist))
        else:
            continue
        out += list(_chains(ins, k, source))
    return tuple(out)


def _chains(ins: list, k: int, source: tuple) -> Iterator[tuple]:
    attrs: list[str] = []
    j = k + 1
    while j < len(ins) and ins[j].opname in _ATTRS:
        attrs.append(ins[j].argval)
        j += 1
    if j + 1 < len(ins) and ins[j].opname == "COPY" and ins[j + 1].opname in _ATTRS:  # `mymod.n += 1`
        attrs.append(ins[j + 1].argval)
    if source[0] == "import" and source[3]:  # `from m import a, b`: each IMPORT_FROM reads the module's attribute
        while j + 1 < len(ins) and ins[j].opname == "IMPORT_FROM":
            if ins[j + 1].opname in _STORES:
                yield ("bind", ins[j + 1].argval, source, (ins[j].argval,))
            yield (source, (ins[j].argval,))
            j += 2
        return
    while j < len(ins) and ins[j].opname == "IMPORT_FROM":  # `import a.b as c`
        attrs.append(ins[j].argval)
        j += 1
        while j < len(ins) and ins[j].opname in ("SWAP", "POP_TOP", "ROT_TWO"):
            j += 1
    if source[0] == "import" and j < len(ins) and ins[j].opname in _STORES:
        yield ("bind", ins[j].argval, source, tuple(attrs))
    if attrs:
        yield (source, tuple(attrs))
    if j + 1 < len(ins) and ins[j].opname == "LOAD_CONST" and isinstance(ins[j].argval, str) and k > 0:
        prev = ins[k - 1]  # `getattr(mymod, "X")`, `hasattr(mymod, "X")`, `getattr(mymod, "X", default)`
        if prev.opname in ("LOAD_GLOBAL", "LOAD_NAME") and prev.argval in ("getattr", "hasattr") and not attrs:
            after = ins[j + 1] if ins[j + 1].opname in _CALLS else ins[j + 2] if j + 2 < len(ins) else None
            if after is not None and after.opname in _CALLS:
                yield (source, (ins[j].argval,))


def _resolve(source: tuple, glb: dict, local: dict) -> Any:
    if source[0] == "name":
        name = source[1]
        if name in local:
            return local[name]
        if name in glb:
            return glb[name]
        b = glb.get("__builtins__")
        return (b if isinstance(b, dict) else vars(b)).get(name) if b is not None else None
    _, name, level, fromlist = source
    try:
        full = importlib.util.resolve_name("." * level + name, glb.get("__package__")) if level else name
    except (ImportError, ValueError):
        return None
    return sys.modules.get(full if fromlist or not full else full.partition(".")[0])


def reads(code: types.CodeType, glb: dict, free_modules: dict) -> list[tuple[types.ModuleType, str]]:
    """(module, attribute) for each attribute of a module that may change that `code` reads."""
    local = dict(free_modules)  # closure variables holding modules, then locals bound by imports
    for p in patterns(code):
        if p[0] == "bind":
            value = _follow(_resolve(p[2], glb, local), p[3])
            if isinstance(value, types.ModuleType):
                local[p[1]] = value
    out = []
    for p in patterns(code):
        if p[0] == "bind":
            continue
        obj = _resolve(p[0], glb, local)
        for attr in p[1]:
            if not isinstance(obj, types.ModuleType):
                break
            if not immutable(obj):
                out.append((obj, attr))
            obj = vars(obj).get(attr)
    return out


def _follow(obj: Any, attrs: tuple) -> Any:
    for attr in attrs:
        obj = vars(obj).get(attr) if isinstance(obj, types.ModuleType) else None
    return obj


def captured(codes: dict, free_modules: dict, absent: Any) -> list:
    """`effects.captured_values`-style entries, ("attr", (attribute, "mymod.SCALE"), value, the module's __dict__),
    for the attributes of modules read by `codes` (code -> the globals it ran with). `absent` stands for a missing
    attribute (its absence is guarded); attributes a module's `__getattr__` would give are left out."""
    out = []
    for code, glb in codes.items():
        for mod, attr in reads(code, glb, free_modules.get(code, {})):
            d = vars(mod)
            if attr not in d and "__getattr__" in d:
                continue
            value = d.get(attr, absent)
            if not isinstance(value, types.ModuleType):
                out.append(("attr", (attr, f"{mod.__name__}.{attr}"), value, d))
    return out


def roots(target: Any) -> list:
    """Where tensors closed over from outside may be found (`ops/outside.py`): the attributes of modules that
    `target`'s own code reads (`x * mypkg.cfg.W`), as ("global", attribute, value, the module's __dict__)."""
    code, glb = getattr(target, "__code__", None), getattr(target, "__globals__", None)
    if not isinstance(code, types.CodeType) or not isinstance(glb, dict):
        return []
    out, todo = [], [code]
    while todo:
        c = todo.pop()
        todo += [k for k in c.co_consts if isinstance(k, types.CodeType)]
        out += [("global", attr, vars(m)[attr], vars(m)) for m, attr in reads(c, glb, {}) if attr in vars(m)]
    return out
