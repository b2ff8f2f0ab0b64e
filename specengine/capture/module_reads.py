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

Writes are refused: a user code object that may assign a global (`global n; n += 1` in a helper of another
module) or an attribute of a module that may change (`cfg.N += 1`, `setattr(cfg, "N", 1)`) has that module's
`__dict__` snapshotted when it first starts while tracing (`coverage.py`); after the trace, what changed is put
back and the compile refused (the write would happen only while tracing, never on cached calls). Allowed: a first
assignment of an object without value semantics (a function, a class, a handler, a list) to a global that was
None or absent (lazy initialisation: `_kernel = _kernel or build()`), modules being imported, and the code of
installed packages (site-packages), whose globals are their own internal state (caches, handlers, warn-once flags).

A module passed as an argument (`helper(mymod)`, then `m.X`) is followed too: `coverage.py` notes the modules each
argument held as the code started. Not seen: a module assigned to a local (`m = mymod`), `getattr(mymod, name)` with
a computed name, `vars(mymod)[k]`, `mymod.__dict__[k]`, and attributes given by a module's `__getattr__`. (Wrapping
the builtin `getattr` while tracing would see computed names, but it would put a specengine frame between the
caller and every descriptor or `__getattr__` that `getattr` runs, which the checks of who called a torch getter
read.)
"""

from __future__ import annotations

import dis
import functools
import importlib.util
import os
import sys
import types
from contextlib import contextmanager
from typing import Any, Iterator

from specengine.capture.library import is_library
from specengine.errors import UnsupportedOpError
from specengine.ir.literals import show
from specengine.prologue.external import has_value_semantics, user_module_object

_FRAMEWORKS = frozenset({"torch", "functorch", "numpy", "specengine", "z3", "builtins"})
_SOURCES = ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_FAST")
_ATTRS = ("LOAD_ATTR", "LOAD_METHOD")
_STORES = ("STORE_FAST", "STORE_DEREF", "STORE_NAME", "STORE_GLOBAL")
_CALLS = ("PRECALL", "CALL", "CALL_FUNCTION", "CALL_FUNCTION_EX")
_WRITES = ("STORE_ATTR", "DELETE_ATTR")


def immutable(mod: types.ModuleType) -> bool:
    """Whether a module's attributes are taken as constants (see the module docstring)."""
    d = vars(mod)
    name = d.get("__name__")
    if not isinstance(name, str):
        return False
    if name.partition(".")[0] in _FRAMEWORKS or name in sys.builtin_module_names:
        return True
    file = d.get("__file__")
    return isinstance(file, str) and is_library(os.path.abspath(file))


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
    if j < len(ins) and ins[j].opname in _WRITES:  # `mymod.n = v`, `del mymod.n`: a write on the chain's end
        yield ("write", source, tuple(attrs))
    if j + 1 < len(ins) and ins[j].opname == "COPY" and ins[j + 1].opname in _ATTRS:  # `mymod.n += 1`
        yield ("write", source, tuple(attrs))
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
        if prev.opname in ("LOAD_GLOBAL", "LOAD_NAME") and prev.argval in ("setattr", "delattr"):
            yield ("write", source, tuple(attrs))
        if prev.opname in ("LOAD_GLOBAL", "LOAD_NAME") and prev.argval in ("getattr", "hasattr") and not attrs:
            after = ins[j + 1] if ins[j + 1].opname in _CALLS else ins[j + 2] if j + 2 < len(ins) else None
            if after is not None and after.opname in _CALLS:
                yield (source, (ins[j].argval,))


def _resolve(source: tuple, glb: dict, local: dict) -> list:
    """The values `source` may stand for: a local's modules (several where calls passed several), else one value."""
    if source[0] == "name":
        name = source[1]
        if name in local:
            return local[name]
        if name in glb:
            return [glb[name]]
        b = glb.get("__builtins__")
        return [(b if isinstance(b, dict) else vars(b)).get(name) if b is not None else None]
    _, name, level, fromlist = source
    try:
        full = importlib.util.resolve_name("." * level + name, glb.get("__package__")) if level else name
    except (ImportError, ValueError):
        return [None]
    return [sys.modules.get(full if fromlist or not full else full.partition(".")[0])]


def _locals(code: types.CodeType, glb: dict, free_modules: dict) -> dict:
    """name -> the modules it holds: closure variables and arguments seen holding modules, locals bound by imports."""
    local = {n: list(mods) for n, mods in free_modules.items()}
    for p in patterns(code):
        if p[0] == "bind":
            values = [
                v for v in (_follow(o, p[3]) for o in _resolve(p[2], glb, local)) if isinstance(v, types.ModuleType)
            ]
            if values:
                local[p[1]] = values
    return local


def reads(code: types.CodeType, glb: dict, free_modules: dict) -> list[tuple[types.ModuleType, str]]:
    """(module, attribute) for each attribute of a module that may change that `code` reads."""
    local = _locals(code, glb, free_modules)
    out = []
    for p in patterns(code):
        if p[0] in ("bind", "write"):
            continue
        for obj in _resolve(p[0], glb, local):
            for attr in p[1]:
                if not isinstance(obj, types.ModuleType):
                    break
                if not immutable(obj):
                    out.append((obj, attr))
                obj = vars(obj).get(attr)
    return out


@functools.lru_cache(maxsize=4096)
def sources(code: types.CodeType) -> frozenset:
    """The names `code` reads module attributes through (a closure variable or an argument may hold a module)."""
    return frozenset(p[1][1] if p[0] == "write" else p[0][1] for p in patterns(code)
                     if p[0] != "bind" and (p[1] if p[0] == "write" else p[0])[0] == "name")  # fmt: skip


def _follow(obj: Any, attrs: tuple) -> Any:
    for attr in attrs:
        obj = vars(obj).get(attr) if isinstance(obj, types.ModuleType) else None
    return obj


def captured(codes: dict, free_modules: dict, absent: Any) -> list:
    """`effects.captured_values`-style entries, ("attr", (attribute, "mymod.SCALE"), value, the module's __dict__),
    for the attributes of modules read by `codes` (code -> the globals it ran with). `absent` stands for a missing
    attribute (its absence is guarded); attributes a module's `__getattr__` would give are left out."""
    out = []
    for mod, attr in [r for code, glb in codes.items() for r in reads(code, glb, free_modules.get(code, {}))]:
        d = vars(mod)
        if attr not in d and "__getattr__" in d:
            continue
        value = d.get(attr, absent)
        if not isinstance(value, types.ModuleType) or user_module_object(value):
            out.append(("attr", (attr, f"{d.get('__name__', 'a module')}.{attr}"), value, d))
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


_GLOBAL_WRITES = ("STORE_GLOBAL", "DELETE_GLOBAL")


@functools.lru_cache(maxsize=4096)
def _writes_globals(code: types.CodeType) -> bool:
    return any(i.opname in _GLOBAL_WRITES for i in dis.get_instructions(code))


def note_writes(snapshots: dict, code: types.CodeType, glb: dict, free_modules: dict) -> None:
    """Snapshot the module dicts that `code` may write (see the module docstring), each once per trace:
    `snapshots[id(d)] = (d, copy of d, code, whether a global of code's own)`."""
    if _writes_globals(code) and id(glb) not in snapshots and not _importing(glb):
        snapshots[id(glb)] = (glb, dict(glb), code, True)
    writes = [p for p in patterns(code) if p[0] == "write"]
    if not writes:
        return
    local = _locals(code, glb, free_modules)
    for obj in [_follow(o, attrs) for _, source, attrs in writes for o in _resolve(source, glb, local)]:
        d = vars(obj) if isinstance(obj, types.ModuleType) else None
        if d is not None and not immutable(obj) and id(d) not in snapshots and not _importing(d):
            snapshots[id(d)] = (d, dict(d), code, False)


def _importing(d: dict) -> bool:
    """Whether the module of globals `d` is being imported (its code fills them)."""
    return getattr(d.get("__spec__"), "_initializing", False) is True


_MISSING = object()
_STORES_BY_NAME = ("STORE_GLOBAL", "DELETE_GLOBAL", "STORE_NAME", "DELETE_NAME", "STORE_ATTR", "DELETE_ATTR")
_DYNAMIC = frozenset(("globals", "vars", "setattr", "delattr", "__dict__", "exec", "eval", "__setattr__",
                      "__delattr__", "__setitem__", "__delitem__", "update", "setdefault", "pop", "popitem",
                      "clear"))  # fmt: skip


@functools.lru_cache(maxsize=4096)
def stored_names(code: types.CodeType) -> frozenset[str] | None:
    """The names `code` may store as a global or a module attribute (a global statement's, an attribute's), or
    None where it may store any (it names `globals`, `vars`, `setattr`, `exec`, `__dict__`, a dict's writers)."""
    if _DYNAMIC & set(code.co_names):
        return None
    return frozenset(i.argval for i in dis.get_instructions(code) if i.opname in _STORES_BY_NAME)


class Writers:
    """Which changed globals and module attributes the traced thread wrote (issue 22: another thread's activity
    never affects a trace). Where this thread was the process's only one as the trace started, every change is its
    own (or that of a thread it started: the program's); otherwise a change is this thread's where the user code
    that ran in it (`ran`, `coverage.Coverage`) may store that name (`stored_names`), and another thread's
    (neither refused nor put back) where none may."""

    def __init__(self) -> None:
        self.alone = len(sys._current_frames()) == 1
        self.ran: Any = None

    def mine(self, key: str) -> bool:
        if self.alone or self.ran is None:
            return True
        names = [stored_names(code) for code in self.ran.codes]
        return any(n is None or key in n for n in names)


@contextmanager
def unchanged(snapshots: dict, writers: Writers | None = None) -> Iterator[None]:
    """Refuse what the block (a trace, filling `snapshots` through `coverage.collecting`) wrote to modules, and
    put it back, also on error. Placed outside the other checks, which name a hook's writes more precisely."""
    try:
        yield
    finally:
        written = put_back(snapshots, writers.mine if writers is not None else None)
    if written is not None:
        what, key, code = written
        raise UnsupportedOpError(
            f"assigning {what}",
            site(code, key),
            "it would happen only while tracing, never on "
            "cached calls; return the new value and assign it outside the compiled function",
        )


def put_back(snapshots: dict, mine: Any = None) -> tuple | None:
    """Undo what changed in the snapshotted module dicts (what `mine(key)` says this thread wrote); the first
    change as (what, the code that may write it), or None."""
    first = None
    for d, before, code, own in snapshots.values():
        for key in [k for k in set(d) | set(before) if type(k) is str and not k.startswith("__")]:
            if mine is not None and not mine(key):
                continue
            old, new = before.get(key, _MISSING), d.get(key, _MISSING)
            if old is new or (old is _MISSING or old is None) and _initialises(new):
                continue
            if old is _MISSING:
                del d[key]
            else:
                d[key] = old
            if first is None:
                what = f"the global {show(key)}" if own else f"{d.get('__name__', 'a module')}.{key}"
                first = (what, key, code)
    return first


def _initialises(value: Any) -> bool:
    """A first assignment that lazy initialisation makes, or an import's: an object without value semantics."""
    return value is not _MISSING and not has_value_semantics(value)


def site(code: types.CodeType, key: str) -> str:
    """file:line of the first instruction of `code` that may write `key` (a store, or `setattr`'s constant name)."""
    ops = _GLOBAL_WRITES + _WRITES + ("LOAD_CONST",)
    line = code.co_firstlineno
    for i in dis.get_instructions(code):
        n = i.positions.lineno if i.positions is not None else None
        line = n if isinstance(n, int) else line
        if i.opname in ops and i.argval == key:
            return f"{os.path.basename(code.co_filename)}:{line}"
    return f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"
