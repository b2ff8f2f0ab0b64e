"""Tensor methods called through the class: `torch.Tensor.add(x, y)`, `Tensor.shape.__get__(x)`, `op(x, 2)` where
`op = torch.Tensor.__radd__`.

torch's C methods check that `self` is a real tensor before any dispatch, so such a call on a proxy cannot reach the
op table by itself. While a function is traced, the methods it reaches through the class are swapped for
dispatchers: on a proxy a dispatcher calls the proxy's own method (the table that bound calls use), on anything
else the C method itself. Swapped are:

- the traced function's closure cells and the globals its code reads that hold such a method;
- `torch.Tensor.<name>` on the class for each name that the function's code looks up as `<...>.Tensor.<name>`,
  and each name that an earlier trace in this process saw called through the class (a call from code not
  scanned, such as a helper in another module, raises `MethodCalledThroughClass`, and the compile traces again,
  with the name swapped).

A method that still reaches torch's type check is refused with UnsupportedOpError.
"""

from __future__ import annotations

import contextlib
import dis
import functools
import re
from typing import Any, Callable, Iterator

import torch

from specengine.errors import SpecEngineError, UnsupportedOpError
from specengine.ir.proxies import TensorProxy
from specengine.patching import Patches
from specengine.prologue.external import code_objects
from specengine.provenance import user_line

_BASE = torch._C.TensorBase
_C_KINDS = (type(_BASE.add), type(_BASE.__getitem__), type(_BASE.shape))  # method, slot wrapper, property
_DESCRIPTOR = re.compile(r"descriptor '(\w+)' (?:for|requires a) '?torch\._C\.TensorBase'? .*'TensorProxy'")

LEARNED: set[str] = set()  # names seen called through the class by code that the scan did not see
_CLASS_SWAPS = Patches()


class MethodCalledThroughClass(SpecEngineError):
    """A Tensor method called through the class by code that was not scanned: trace again with it swapped."""


# The class's own machinery: never swapped (tensor construction, attribute access, torch's protocols).
_NEVER = frozenset({"__new__", "__init__", "__getattribute__", "__getattr__", "__setattr__", "__delattr__",
                    "__init_subclass__", "__subclasshook__", "__dir__", "__sizeof__", "__reduce__", "__reduce_ex__",
                    "__class__", "__dict__", "__hash__", "__del__", "__torch_function__", "__torch_dispatch__"})  # fmt: skip


def _c_method(name: str) -> Any:
    value = None if name in _NEVER else _BASE.__dict__.get(name)
    return value if isinstance(value, _C_KINDS) else None


def _c_method_name(value: Any) -> str | None:
    if isinstance(value, _C_KINDS) and getattr(value, "__objclass__", None) is _BASE:
        return value.__name__
    return None


def _dispatcher(method: Any, name: str) -> Any:
    if isinstance(method, type(_BASE.shape)):  # a property: `Tensor.shape.__get__(x)`, and `x.shape` of real ones
        return property(lambda self: getattr(self, name) if isinstance(self, TensorProxy) else method.__get__(self),
                        lambda self, value: method.__set__(self, value))  # fmt: skip

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(self, TensorProxy):
            return getattr(self, name)(*args, **kwargs)
        return method(self, *args, **kwargs)

    call.__name__ = name
    return call


@functools.lru_cache(maxsize=4096)
def _scan(code: Any) -> tuple[frozenset, tuple]:
    """(the names that `code` and the code nested in it look up as `<...>.Tensor.<name>` on a C method, the globals
    they read); once per code object."""
    names, glbs = set(), set()
    for c in code_objects(code):
        previous = None
        for i in dis.get_instructions(c):
            if previous == "Tensor" and i.opname in ("LOAD_ATTR", "LOAD_METHOD") and _c_method(i.argval) is not None:
                names.add(i.argval)
            if i.opname == "LOAD_GLOBAL":
                glbs.add(i.argval)
            previous = i.argval if i.opname in ("LOAD_GLOBAL", "LOAD_ATTR", "LOAD_DEREF", "LOAD_NAME") else None
    return frozenset(names), tuple(sorted(glbs))


def names_through_class(code: Any) -> frozenset:
    return _scan(code)[0]


def _class_patches(names: set[str]) -> list:
    """`torch.Tensor.<name>` -> a dispatcher, for each name whose attribute is still the C one."""
    return [(torch.Tensor, name, _dispatcher(_BASE.__dict__[name], name)) for name in sorted(names)
            if name not in torch.Tensor.__dict__ or torch.Tensor.__dict__[name] is _BASE.__dict__[name]]  # fmt: skip


def _swap_captured(target: Callable) -> list:
    """Closure cells and globals read by `target` that hold a C Tensor method: swapped; returns what to put back."""
    swapped = []
    for cell in getattr(target, "__closure__", None) or ():
        try:
            value = cell.cell_contents
        except ValueError:
            continue
        if (name := _c_method_name(value)) is not None:
            swapped.append((cell, "cell_contents", value))
            cell.cell_contents = _dispatcher(value, name)
    glb, code = getattr(target, "__globals__", None), getattr(target, "__code__", None)
    if isinstance(glb, dict) and code is not None:
        for g in _scan(code)[1]:
            if (name := _c_method_name(glb.get(g))) is not None:
                swapped.append((glb, g, glb[g]))
                glb[g] = _dispatcher(glb[g], name)
    return swapped


@functools.cache
def _warm_torch_tables() -> None:
    """torch's cached tables of Tensor methods are built from the real ones, before any swap."""
    torch.overrides.get_overridable_functions()


@contextlib.contextmanager
def swapped(target: Callable) -> Iterator[None]:
    """While `target` is traced, the C Tensor methods it reaches through the class are dispatchers (module doc)."""
    code = getattr(target, "__code__", None)
    names = LEARNED | (names_through_class(code) if code is not None else set())
    if names:
        _warm_torch_tables()
    _CLASS_SWAPS.enter(_class_patches(names))  # nested and concurrent traces share the swaps
    captured = _swap_captured(target)
    try:
        yield
    finally:
        for holder, key, value in reversed(captured):
            if isinstance(holder, dict):
                holder[key] = value
            else:
                holder.cell_contents = value
        _CLASS_SWAPS.exit()


def call_user(fn: Callable, args: list, kwargs: dict) -> Any:
    """Call `fn`; torch's refusal of a proxy as `self` of a Tensor method: trace again with the method swapped
    (MethodCalledThroughClass), or, when it was swapped already, an UnsupportedOpError. Any other error that is
    not the engine's own (eager's, raised with its type and message) gets a note naming the user's line."""
    try:
        return fn(*args, **kwargs)
    except TypeError as e:
        m = _DESCRIPTOR.search(str(e))
        if m is None:
            _note_user_line(e)
            raise
        name = m.group(1)
        if name not in LEARNED and _c_method(name) is not None:
            LEARNED.add(name)
            raise MethodCalledThroughClass(name) from None
        raise UnsupportedOpError(f"torch.Tensor.{name} called through the class", user_line(e.__traceback__) or
                                 "<unknown>", f"call it as a method: x.{name}(...)") from None  # fmt: skip
    except SpecEngineError:
        raise
    except Exception as e:
        _note_user_line(e)
        raise


def _note_user_line(e: BaseException) -> None:
    where = user_line(e.__traceback__)
    note = f"(specengine: raised while tracing, at {where})"
    if where is not None and note not in getattr(e, "__notes__", ()):
        e.add_note(note)
