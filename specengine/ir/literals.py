"""Constants in generated code, guards and keys: by literal only where the type is an exact builtin, else by reference.

No `repr`, `str`, `format` or `__index__` of a user object ever runs here, and none reaches generated source:

- `literal(v)`: Python source for `v` where `type(v)` is exactly `None`, `bool`, `int`, `float`, `complex`, `str`,
  `bytes` or `...` (or a tuple of those); floats are written so that `-0.0`, `nan` and `inf` round-trip. Anything
  else has no literal: generated code names it as a global (`Constants`).
- `base_value(v)`: the exact builtin value that an int, float, complex or str subclass (an IntEnum, a str Enum), or
  a numpy scalar, holds, read through the base type's own slots (never the subclass's methods).
- `exact_key(v)`: a hashable key that tells apart values that compare equal but behave differently (`0.0` and
  `-0.0`, complex signed zeros, `1`, `True` and `1.0`); objects without value semantics are keyed by identity.
- `show(v)`: text for the user (guard texts, messages): the literal, `Mode.A` for an Enum member, `MyInt(2)` for
  a subclass instance, else `<MyClass object>`.
"""

from __future__ import annotations

import enum
import hashlib
import math
import sys
from typing import Any

import torch

_EXACT = frozenset({type(None), bool, int, float, complex, str, bytes, type(Ellipsis)})
_BASES = (bool, int, float, complex, str, bytes)  # (bool has no subclasses)
_TORCH_VALUES = frozenset({torch.device, torch.dtype, torch.layout, torch.memory_format})
NO_BASE = object()  # base_value's answer for a value that stands for no builtin value


def literal(v: Any) -> str | None:
    """Python source that evaluates to a value equal to `v` and of its exact type, or None where there is none."""
    t = type(v)
    if t is float:
        return repr(v) if math.isfinite(v) else f"float({'nan' if v != v else repr(v)!r})"
    if t is complex:
        return f"complex({literal(v.real)}, {literal(v.imag)})"
    if t is tuple:
        inner = [literal(x) for x in v]
        if any(s is None for s in inner):
            return None
        return f"({inner[0]},)" if len(inner) == 1 else f"({', '.join(inner)})"
    if v is Ellipsis:
        return "..."
    if t in _EXACT:
        return repr(v)  # the builtin's own repr: None, True, 3, 'a', b'a'
    return None


def is_exact(v: Any) -> bool:
    """Whether `v` has a literal (an exact builtin constant, or a tuple of such)."""
    return type(v) in _EXACT or (type(v) is tuple and all(is_exact(x) for x in v))


def numpy_scalar(v: Any) -> bool:
    """A numpy scalar of any of numpy's own scalar types (numbers, bools, strings, bytes, datetimes, voids):
    immutable, a value by its type, dtype and bytes."""
    np = sys.modules.get("numpy")
    return np is not None and type(v).__module__ == "numpy" and isinstance(v, np.generic) and v.ndim == 0


_numpy_scalar = numpy_scalar


def numpy_array(v: Any) -> bool:
    """A numpy array of numbers (exactly `numpy.ndarray`): a value by its dtype, shape and contents."""
    np = sys.modules.get("numpy")
    return np is not None and type(v) is np.ndarray and v.dtype.kind in "biufc"


def same_array(a: Any, b: Any) -> bool:
    """Two numpy arrays of one type, dtype and shape with the same bytes (-0.0 is not 0.0; equal NaNs match)."""
    return type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def snapshot(v: Any) -> Any:
    """What a guard holds to compare `v` with on later calls: a read-only copy of an array (the caller's may be
    changed in place), `v` itself for immutable values."""
    if numpy_array(v):
        v = v.copy()
        v.flags.writeable = False
    elif type(v) is tuple:
        return tuple(snapshot(x) for x in v)
    return v


def base_value(v: Any) -> Any:
    """The exact builtin value `v` stands for (a subclass instance through its base type's slots, a numpy scalar
    through numpy's `item()`), `v` itself for exact builtins, or NO_BASE."""
    t = type(v)
    if t in _EXACT:
        return v
    if issubclass(type(v), int):
        return int.__int__(v)  # int's own slot: an exact copy, whatever the subclass overrides
    if issubclass(type(v), float):
        return float.__float__(v)
    if issubclass(type(v), complex):
        return complex(complex.real.__get__(v), complex.imag.__get__(v))
    if issubclass(type(v), str):
        return str.__str__(v)
    if _numpy_scalar(v) and v.dtype.kind in "biufc":
        item = v.item()  # (np.longdouble and np.clongdouble have no exact builtin value: item() keeps them)
        return item if type(item) in _EXACT else NO_BASE
    return NO_BASE


def number_like(v: Any) -> bool:
    """A value that follows its base type's rules but is not of an exact builtin type: an int, float, complex or
    str subclass instance (IntEnum and str Enum members among them), or a numpy number scalar."""
    return type(v) not in _EXACT and base_value(v) is not NO_BASE


def plain_state(v: Any) -> bool:
    """Whether a subclass instance holds nothing besides its base value (no instance attributes), so that its type
    and base value are all of it."""
    d = getattr(type(v), "__dictoffset__", 0) and object.__getattribute__(v, "__dict__")
    return not d


def _float_key(v: float) -> Any:
    return ("nan",) if v != v else (v, math.copysign(1.0, v))


def exact_key(v: Any, depth: int = 0) -> Any:
    """A hashable key, equal only for values that behave the same (by type, sign of zero, NaN), or by identity. It
    holds only builtin values and builtin types (its `repr` runs no user code)."""
    t = type(v)
    if t is float:
        return (float, _float_key(v))
    if t is complex:
        return (complex, _float_key(v.real), _float_key(v.imag))
    if t in _EXACT:
        return (t, v)
    if depth < 16 and isinstance(v, tuple):  # (a namedtuple, torch.Size: by its class)
        return (t if t is tuple else ("T", id(t)), tuple(exact_key(x, depth + 1) for x in v))
    if depth < 16 and t is list:
        return (t, tuple(exact_key(x, depth + 1) for x in v))
    if depth < 16 and t is dict:
        return (t, tuple((exact_key(k, depth + 1), exact_key(x, depth + 1)) for k, x in v.items()))
    if depth < 16 and t is slice:
        return (t, tuple(exact_key(x, depth + 1) for x in (v.start, v.stop, v.step)))
    if numpy_array(v):  # (a digest of the bytes: signs of zeros and NaNs as they are; guards compare the bytes)
        return ("ndarray", v.dtype.str, v.shape, hashlib.blake2b(v.tobytes(), digest_size=16).hexdigest())
    if t in _TORCH_VALUES:
        return (t, v)  # (devices are equal, not identical, from one tensor to the next)
    if issubclass(type(v), enum.Enum):
        return ("id", id(v))  # members are singletons
    if numpy_scalar(v):  # (by its bytes: the sign of zero, NaN payloads and a longdouble's precision kept)
        return ("np", id(t), v.dtype.str, str(v.dtype), v.tobytes())
    if number_like(v) and plain_state(v):
        return ("of", id(t), exact_key(base_value(v), depth + 1))
    return ("id", id(v))


def type_name(t: type) -> str:
    """A class's name, read from the type itself (never a metaclass's property)."""
    name = type.__dict__["__qualname__"].__get__(t)
    return name if type(name) is str else "?"


def show(v: Any, depth: int = 0) -> str:
    """Text for the user that names `v` without calling any method of its class (`repr` may be anything)."""
    text = literal(v)
    if text is not None:
        return text
    t = type(v)
    if issubclass(type(v), enum.Enum):
        name = object.__getattribute__(v, "_name_")
        return f"{type_name(t)}.{name if type(name) is str else '?'}"
    if numpy_array(v):
        return f"ndarray(shape={v.shape}, dtype={v.dtype.str})"
    base = base_value(v)
    if base is not NO_BASE:
        return f"{type_name(t)}({literal(base)})"
    if depth < 4 and t in (tuple, list):
        inner = ", ".join(show(x, depth + 1) for x in v)
        return f"({inner},)" if t is tuple and len(v) == 1 else (f"({inner})" if t is tuple else f"[{inner}]")
    if depth < 4 and t is dict:
        return "{" + ", ".join(f"{show(k, depth + 1)}: {show(x, depth + 1)}" for k, x in v.items()) + "}"
    if depth < 4 and t in (set, frozenset):
        return f"{t.__name__}({{{', '.join(sorted(show(x, depth + 1) for x in v))}}})"
    if depth < 4 and t is slice:
        return f"slice({', '.join(show(x, depth + 1) for x in (v.start, v.stop, v.step))})"
    module = type.__dict__["__module__"].__get__(t)
    if type(module) is str and module.partition(".")[0] == "torch" and not issubclass(type(v), type):
        return repr(v)  # torch's own classes (torch.Size, a dtype, a device)
    if issubclass(type(v), type):
        return type_name(v)
    return f"<{type_name(t)} object>"


def source_key(k: Any) -> str:
    """Python source for a dict key or attribute name that generated code looks up: the literal of its base value
    (a str subclass key is found by the equal str); raises TypeError where there is none."""
    text = literal(base_value(k))
    if text is None:
        raise TypeError(f"no literal for a key of type {type_name(type(k))}")
    return text


def _torch_reads(v: Any, data: bool = False) -> Any:
    """The builtin value torch's argument parser reads from `v`: an int, float, complex or str subclass by its base
    value (torch reads the C value, never a method), a numpy integer or floating scalar by its value; else `v`."""
    t = type(v)
    if t in _EXACT:
        return v
    if data and type(v).__module__ == "numpy":
        return v  # (np.float64 is a float subclass: as data, torch keeps its dtype)
    if issubclass(type(v), _BASES):
        return base_value(v)
    if not data and _numpy_scalar(v) and v.dtype.kind in "iuf":  # (numpy bools and complex64 are read otherwise: kept)
        return v.item()
    return v


def as_torch_reads(args: tuple, kwargs: dict, data: bool = False) -> tuple[tuple, dict]:
    """`args` and `kwargs` of a torch call with each number or string of another type replaced by the builtin value
    torch reads from it, so that rules see what eager's kernels see (an IntEnum size, a numpy scalar factor).
    `data`: the call reads its arguments as data (`torch.tensor`, `as_tensor`), which keeps a numpy scalar's
    dtype: numpy scalars stay."""
    if not any(_foreign(a, data) for a in args) and not any(_foreign(v, data) for v in kwargs.values()):
        return args, kwargs
    return tuple(_deep(a, data) for a in args), {k: _deep(v, data) for k, v in kwargs.items()}


def _foreign(v: Any, data: bool, depth: int = 0) -> bool:
    t = type(v)
    if t in _EXACT:
        return False
    if t in (tuple, list):
        return depth < 4 and any(_foreign(x, data, depth + 1) for x in v)
    return _torch_reads(v, data) is not v


def _deep(v: Any, data: bool, depth: int = 0) -> Any:
    if type(v) in (tuple, list) and depth < 4:
        return type(v)(_deep(x, data, depth + 1) for x in v)
    return _torch_reads(v, data)


class Constants:
    """The globals a generated function reads its non-literal constants from: one name per object (`_c0`, ...)."""

    def __init__(self, prefix: str = "_c"):
        self.prefix = prefix
        self.values: dict[str, Any] = {}
        self._names: dict[int, str] = {}

    def name(self, v: Any) -> str:
        name = self._names.get(id(v))
        if name is None:
            name = self._names[id(v)] = f"{self.prefix}{len(self.values)}"
            self.values[name] = snapshot(v)  # (an array: a read-only copy, whatever the caller does to theirs)
        return name

    def source(self, v: Any) -> str:
        """`v`'s literal, or the name of the global that holds it."""
        text = literal(v)
        return text if text is not None else self.name(v)
