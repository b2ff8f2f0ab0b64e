"""Values across processes: a typed JSON form of values with value semantics (`encode_value`), constants of a known
type held by reference (Enum members, numpy scalars and arrays: `encode_typed`), and a computation's constants."""

from __future__ import annotations

import enum
import sys
from typing import Any

import torch

from specengine.persist import keys
from specengine.persist.signing import Rejected

_TORCH_ENUMS = (torch.dtype, torch.layout, torch.memory_format)


class NoRecipe(Exception):
    """A value the disk cache cannot find again in another process (the message says which)."""


def short(v: Any) -> str:
    text = repr(v)
    return text if len(text) < 60 else text[:57] + "..."


def lookup(module: str, qualname: str) -> Any:
    """The object at (module, qualname); never imports: the module must already be loaded."""
    obj: Any = sys.modules.get(module)
    if obj is None:
        raise LookupError(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


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
            if lookup(mod, qual) is not cls or cls[v.name] is not v:
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
        cls = lookup(d[1], d[2])
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
        raise NoRecipe(f"the constant {short(v)} held by reference")
    return ["typed", typed]


def decode_constant(r: list) -> Any:
    if r[0] == "value":
        return decode_value(r[1])
    if r[0] == "typed":
        return decode_typed(r[1])
    raise Rejected(f"unknown constant recipe {r[0]!r}")
