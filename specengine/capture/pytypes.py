"""`type(x)` of a proxy, as eager gives it.

`type` is a builtin that cannot be swapped globally like `isinstance` (specengine's own code relies on `type(x)` of
its proxies). Instead, while a trace runs, a user module whose code names `type` gets a global `type` of its own
(`coverage.py` gives it when such code starts to run, and takes it back when the trace ends): `traced_type`, a
subclass of `type` whose metaclass makes it behave as `type` everywhere:

- `type(x)` of a tensor proxy is its input's class (`torch.Tensor`, `nn.Parameter`), of a symbolic int, float or
  bool its Python type, of a symbolic shape `torch.Size`; of a class with metaclass `type`, `traced_type` itself
  (so `type(C) is type` holds); of everything else its type;
- `type(name, bases, namespace)` creates a class; `isinstance(c, type)` and `issubclass(m, type)` are the
  builtin's answers; `type.__new__`, `type.mro`, `type.__name__` are the builtin's;
- a metaclass defined while tracing (`class M(type)`) is a subclass of it and behaves as usual.

A module that defines its own `type` keeps it. A global alias of the builtin (`T = type`) is `traced_type` too
meanwhile, and a global `builtins` a view of the builtins whose `type` is `traced_type` (`builtins.type(x)`).
Nested and concurrent traces share one global per module (counted).

`x.__class__` of a tensor proxy or a symbolic shape is eager's class (`ir/proxies.py`, `seen_class`).
"""

from __future__ import annotations

import builtins
import sys
import threading
import types
from typing import Any

import torch

from specengine.ir.proxies import NumberProxy, SymSize, TensorProxy

_real_type = type
_lock = threading.Lock()
_given: dict[int, list] = {}  # id(globals) -> [globals, count]


class _TypeMeta(type):
    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if cls is not traced_type:
            return type.__call__(cls, *args, **kwargs)
        if len(args) == 1 and not kwargs:
            return type_of(args[0])
        if len(args) == 3 and type_of(args[2]) is dict and "__module__" not in args[2]:  # as the caller's class
            args = (*args[:2], {"__module__": sys._getframe(1).f_globals.get("__name__"), **args[2]})
        return _real_type(*args, **kwargs)

    def __getitem__(cls, item: Any) -> Any:
        return _real_type[item]

    def __instancecheck__(cls, obj: Any) -> bool:
        return isinstance(obj, _real_type) if cls is traced_type else type.__instancecheck__(cls, obj)

    def __subclasscheck__(cls, sub: Any) -> bool:
        return issubclass(sub, _real_type) if cls is traced_type else type.__subclasscheck__(cls, sub)

    def __repr__(cls) -> str:
        return "<class 'type'>" if cls is traced_type else type.__repr__(cls)


class traced_type(type, metaclass=_TypeMeta):  # noqa: N801 - it stands for the builtin `type`
    pass


traced_type.__name__ = traced_type.__qualname__ = "type"
traced_type.__module__ = "builtins"


def type_of(obj: Any) -> type:
    """`type(obj)` as eager gives it for the value a proxy stands for."""
    t = _real_type(obj)
    if t is TensorProxy:
        return obj.tensor_type
    if t is NumberProxy:
        return obj.python_type
    if t is SymSize:
        return torch.Size
    if t is _real_type or obj is traced_type:
        return traced_type
    return t


def names_type(code: types.CodeType, glb: dict) -> bool:
    """Whether `code` may call the builtin `type` (by that name, an alias such as `T = type`, or `builtins.type`)."""
    return "type" in code.co_names or any(glb.get(n) is _real_type or glb.get(n) is builtins for n in code.co_names)


class _BuiltinsView(types.ModuleType):
    """What a user module's global `builtins` is while a trace runs: the builtins, with `type` answering for
    proxies (`builtins.type(x)`)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(builtins, name)


_builtins_view = _BuiltinsView("builtins", builtins.__doc__)
_builtins_view.type = traced_type
_MISSING = object()


def give_type(glb: dict) -> bool:
    """Put `traced_type` in a module's globals as `type` (unless the module has a `type` of its own) and in place of
    each global alias of the builtin (`T = type`), and the builtins view in place of a global `builtins`; whether
    it did anything."""
    with _lock:
        held = _given.get(id(glb))
        if held is not None and held[0] is glb:
            held[1] += 1
            return True
        swaps = {n: v for n, v in glb.items() if type(n) is str and (v is _real_type or v is builtins)}
        if "type" not in glb:
            swaps["type"] = _MISSING
        if not swaps:
            return False
        for name, old in swaps.items():
            glb[name] = _builtins_view if old is builtins else traced_type
        _given[id(glb)] = [glb, 1, swaps]
        return True


def take_type(glb: dict) -> None:
    with _lock:
        held = _given.get(id(glb))
        if held is None or held[0] is not glb:
            return
        held[1] -= 1
        if held[1] == 0:
            del _given[id(glb)]
            for name, old in held[2].items():
                if glb.get(name) is (_builtins_view if old is builtins else traced_type):  # else reassigned since
                    if old is _MISSING:
                        del glb[name]
                    else:
                        glb[name] = old
