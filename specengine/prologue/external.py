"""State a compiled function reads from outside its arguments, and how the prologue guards it.

A traced program bakes in every Python value it reads that is not an input: a bound method's `self` and its
attributes, class attributes used as configuration, `__defaults__` and `__kwdefaults__`, what a
`functools.partial` binds, captured globals and closure variables. Each becomes an `ObjGuard`: a read (Python
over the prologue's globals), the value seen while tracing, and whether it is compared by value (types with value
semantics: numbers, strings, devices, slices, tuples of such...) or by identity (everything else).
"""

from __future__ import annotations

import dis
import enum
import functools
import os
import sys
import sysconfig
import types
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from specengine.ir.literals import (
    exact_key,
    number_like,
    numpy_array,
    numpy_scalar,
    plain_state,
    same_array,
    show,
    snapshot,
    source_key,
)

_ABSENT = object()  # what a guarded read gives for a missing attribute or key
_SCALARS = (int, str, bytes, complex, bool, type(None), type(Ellipsis), type(NotImplemented))
_SINGLETONS = (torch.dtype, torch.layout, torch.memory_format, type, types.FunctionType, types.BuiltinFunctionType)


def has_value_semantics(v: Any, depth: int = 0) -> bool:
    """Whether equal values of this type behave the same everywhere (so an equal, non-identical one may be served)."""
    t = type(v)
    if t in _SCALARS or t is float or t is torch.device:
        return True
    if numpy_array(v):  # by dtype, shape and contents (a snapshot: prologue/external.py's fail_source)
        return True
    if numpy_scalar(v):  # immutable: by type and bytes
        return True
    if number_like(v) and not isinstance(v, enum.Enum):  # an int subclass: by type and base value
        return plain_state(v)
    if depth > 8:
        return False
    if t in (tuple, frozenset, torch.Size):
        return all(has_value_semantics(x, depth + 1) for x in v)
    if t in (slice, range):
        return all(has_value_semantics(x, depth + 1) for x in (v.start, v.stop, v.step))
    return False


def same_value(a: Any, b: Any) -> bool:
    """Strict equality for values with value semantics: same types all the way down, floats by sign and NaN too."""
    if type(a) is not type(b):
        return False
    if numpy_array(a):
        return same_array(a, b)
    if numpy_scalar(a):
        return exact_key(a) == exact_key(b)
    if type(a) not in _SCALARS and number_like(a):
        return plain_state(b) and exact_key(a) == exact_key(b)
    if type(a) in (float, complex):  # by sign of zero, NaN equal to NaN
        return exact_key(a) == exact_key(b)
    if type(a) in (tuple, torch.Size):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if type(a) is frozenset:
        return a == b and sorted(map(show, a)) == sorted(map(show, b))
    if type(a) in (slice, range):
        return all(same_value(getattr(a, k), getattr(b, k)) for k in ("start", "stop", "step"))
    return a == b


@dataclass(frozen=True)
class ObjGuard:
    """One value read from outside the inputs: `read` (over prologue globals) must give `value` again."""

    read: str
    text: str  # the value's name for the user: "self.k", "global K", "f.__defaults__"
    value: Any
    names: dict = field(default_factory=dict, compare=False)  # prologue globals the read needs
    identity: bool = False  # compared by identity even where its contents were read (a `__dict__` not replaced)

    @property
    def by_value(self) -> bool:
        return has_value_semantics(self.value)

    @property
    def key(self) -> tuple:
        """Part of the entry key: equal guards give equal keys, so entries guarding different values never merge."""
        return (self.text, ("value", exact_key(self.value)) if self.by_value else ("id", id(self.value)))


def fail_source(x: str, v: Any, name: Callable[[Any, str], str]) -> str:
    """Python that is true when `x` (an expression evaluated once) is not `v` (by value or identity)."""
    if v is None or isinstance(v, bool) or v is Ellipsis or v is NotImplemented:
        return f"{x} is not {v!r}"
    if type(v) in (int, str, bytes):
        return f"type(_e := {x}) is not {type(v).__name__} or _e != {name(v, 'const')}"
    if has_value_semantics(v):
        return f"not {name(same_value, 'same_value')}({x}, {name(snapshot(v), 'const')})"
    return f"{x} is not {name(v, 'obj')}"


def user_class(cls: type) -> bool:
    mod = getattr(cls, "__module__", "") or ""
    return cls is not object and not mod.startswith(("torch.", "builtins", "specengine.", "typing", "abc"))


def class_guards(cls: type, owner: str, names: dict) -> list[ObjGuard]:
    """Class attributes with value semantics (configuration such as `scale = 2`) of the user classes in the MRO."""
    out, seen = [], set()
    key = f"_cls_{len(names)}"
    names[key] = cls
    for c in cls.__mro__:
        if not user_class(c):
            continue
        for attr, value in vars(c).items():
            if attr in seen or attr.startswith("__") or not has_value_semantics(value):
                continue
            seen.add(attr)
            out.append(ObjGuard(f"{key}.{attr}", f"{owner}.{attr}", getattr(cls, attr), {key: cls}))
    return out


def object_guards(obj: Any, owner: str) -> list[ObjGuard]:
    """A plain object's attributes (a bound method's `self`): by value where they have value semantics, else by
    identity; the attribute set itself (len of `__dict__`) too, so a new attribute that shadows a class one shows."""
    d = getattr(obj, "__dict__", None)
    if not isinstance(d, dict):
        return []
    key = f"_obj_{id(obj)}"
    names = {key: d, "_absent": _ABSENT, f"{key}_self": obj}
    out = [ObjGuard(f"vars({key}_self)", f"{owner}.__dict__", d, names, True),  # not replaced by object.__setattr__
           ObjGuard(f"len({key})", f"the number of attributes of {owner}", len(d), names)]  # fmt: skip
    for attr, value in d.items():
        if type(attr) is str and not isinstance(value, torch.Tensor):  # tensors are inputs (prologue/state.py)
            out.append(ObjGuard(f"{key}.get({attr!r}, _absent)", f"{owner}.{attr}", value, names))
    return out + class_guards(type(obj), f"type({owner})", names)


def defaults_guards(func: Any, owner: str) -> list[ObjGuard]:
    """`__defaults__` (by identity: a new tuple is a new object) and each `__kwdefaults__` value (by identity)."""
    out = []
    key = f"_func_{id(func)}"
    names = {key: func, "_absent": _ABSENT}
    if isinstance(getattr(func, "__code__", None), types.CodeType):  # replaced (autoreload): another program
        out.append(ObjGuard(f"{key}.__code__", f"{owner}.__code__", func.__code__, names))
    if getattr(func, "__defaults__", None) is not None:
        out.append(ObjGuard(f"{key}.__defaults__", f"{owner}.__defaults__", func.__defaults__, names))
    kwd = getattr(func, "__kwdefaults__", None)
    if kwd is not None:
        out.append(ObjGuard(f"len({key}.__kwdefaults__)", f"len({owner}.__kwdefaults__)", len(kwd), names))
        for k, v in kwd.items():
            out.append(ObjGuard(f"{key}.__kwdefaults__.get({source_key(k)}, _absent)", f"{owner}.__kwdefaults__[{show(k)}]", v,
                                names))  # fmt: skip
    return out


def partial_guards(p: functools.partial, owner: str) -> list[ObjGuard]:
    """What a partial binds: its function (identity), each positional and keyword argument."""
    key = f"_partial_{id(p)}"
    names = {key: p, "_absent": _ABSENT}
    out = [ObjGuard(f"{key}.func", f"{owner}.func", p.func, names),
           ObjGuard(f"len({key}.args)", f"len({owner}.args)", len(p.args), names),
           ObjGuard(f"len({key}.keywords)", f"len({owner}.keywords)", len(p.keywords), names)]  # fmt: skip
    tensor = torch.Tensor  # tensors are inputs (prologue/state.py)
    out += [ObjGuard(f"{key}.args[{i}]", f"{owner}.args[{i}]", v, names) for i, v in enumerate(p.args)
            if not isinstance(v, tensor)]  # fmt: skip
    out += [ObjGuard(f"{key}.keywords.get({source_key(k)}, _absent)", f"{owner}.keywords[{show(k)}]", v, names)
            for k, v in p.keywords.items() if not isinstance(v, tensor)]  # fmt: skip
    return out


def unwrap(fn: Any) -> tuple[Any, list[ObjGuard]]:
    """The plain function under partials and bound methods (whose code the tracer reads), and the guards on what
    they bind. Modules are handled as module state, not here."""
    guards: list[ObjGuard] = []
    owner = getattr(fn, "__name__", "fn")
    for _ in range(16):
        if isinstance(fn, functools.partial):
            guards += partial_guards(fn, owner)
            fn, owner = fn.func, f"{owner}.func"
        elif isinstance(fn, types.MethodType):
            if not isinstance(fn.__self__, (torch.nn.Module, type, types.ModuleType)):
                guards += object_guards(fn.__self__, "self")
            fn, owner = fn.__func__, fn.__func__.__name__
        else:
            break
    if isinstance(fn, (types.FunctionType, types.MethodType)):
        guards += defaults_guards(fn, getattr(fn, "__name__", owner))
    return fn, guards


def code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from code_objects(const)


def captured_values(target: Callable) -> list[tuple[str, Any, Any, Any]]:
    """The globals and closure variables that `target`'s own code reads, with their values while it was traced.

    Their values are baked into the trace (a scale factor, a flag, a helper function), so the prologue guards each
    by identity: `[("global", name, value, globals), ("cell", (index, name), value, closure), ...]`. Modules are
    left out (rebinding one is not a thing programs do).
    """
    code = getattr(target, "__code__", None)
    glb = getattr(target, "__globals__", None)
    if code is None or not isinstance(glb, dict):
        return []
    names = sorted(
        {ins.argval for c in code_objects(code) for ins in dis.get_instructions(c) if ins.opname == "LOAD_GLOBAL"}
    )
    out: list = [("global", n, glb[n], glb) for n in names if n in glb and guardable(glb[n])]
    closure = getattr(target, "__closure__", None) or ()
    for i, (name, cell) in enumerate(zip(code.co_freevars, closure)):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell: reading it raises NameError, as it will at run time
            continue
        if guardable(value):
            out.append(("cell", (i, name), value, closure))
    return out


def guardable(value: Any) -> bool:
    """Library modules are left out (their attributes are constants); the user's own are read through."""
    return not isinstance(value, types.ModuleType) or user_module_object(value)


_LIBRARY_DIRS = tuple({os.path.abspath(sysconfig.get_paths()[k]) + os.sep
                       for k in ("stdlib", "platstdlib", "purelib", "platlib")})  # fmt: skip
_FRAMEWORKS = frozenset({"torch", "functorch", "numpy", "specengine", "z3", "builtins"})


def user_module_object(m: Any) -> bool:
    """A module of the user's (made with `types.ModuleType`, or a file outside the standard library and
    site-packages), whose attributes a trace reads as it reads an object's."""
    if not isinstance(m, types.ModuleType):
        return False
    d = vars(m)
    name = d.get("__name__")
    if not isinstance(name, str) or name.partition(".")[0] in _FRAMEWORKS or name in sys.builtin_module_names:
        return False
    file = d.get("__file__")
    return not isinstance(file, str) or not os.path.abspath(file).startswith(_LIBRARY_DIRS)


def user_function(v: Any) -> bool:
    mod = getattr(v, "__module__", "") or ""
    return isinstance(v, types.FunctionType) and not mod.startswith(("torch", "specengine", "functools", "typing"))
