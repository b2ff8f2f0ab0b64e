"""Torch's own signatures: one table, derived from torch, that binds a call the way eager binds it.

A rule is a Python function whose parameters follow torch's order, but whose names are its own (`mul(a, b)`).
Before a rule sees a call, `bind` rewrites it into torch's canonical spelling: every positional parameter of
torch's signature passed positionally, in torch's order (a skipped one that has a default gets it), every
keyword-only one by its name. So `torch.mul(x, other=2.0)`, `torch.sum(input=x, dim=0)`, `x.reshape(shape=s)`
and `torch.add(x, other=1, alpha=2)` reach the rule as `mul(x, 2.0)`, `sum(x, 0)`, `reshape(x, s)` and
`add(x, 1, alpha=2)`. A call that no signature of torch's accepts raises eager's `TypeError`.

The signatures come from torch itself, never from the rules:

- builtins (`torch.add`, `torch.Tensor.add`, `torch._C._nn.gelu`, `torch.linalg.*`): the aten schemas of the
  op (`torch._C._jit_get_schemas_for_operator`), as Python's argument parser exposes them: a Tensor `self` is
  `input` for the function form and bound for the method form, out= variants add a keyword-only `out`, the
  TorchScript-only overloads (no Tensor in or out, `prim_*`) are left out, a lone int-list parameter of a
  method also takes its ints one by one (`x.view(2, 3)`), and `memory_format` is keyword-only (as everywhere in
  Python; `Tensor.to`, bound by hand in torch, is the one schema that has it positional);
- Python functions (`torch.nn.functional.*`, `torch.Tensor.split`): `inspect.signature`.

Torch's deprecated Python signatures (`torch.add(x, 2, y)` is `add(input, alpha, other)`), which no aten schema
has, come from the file torch's code generator builds its argument parser from (torchgen's `deprecated.yaml`): a call
that no regular signature accepts and a deprecated one does is rewritten into the canonical form of the op's own
schema (`add(x, y, alpha=2)`), as torch's parser tries them last.

A call whose spelling is ambiguous between overloads (`x.to(dtype=d)` matches `to.dtype` and `to.dtype_layout`)
takes the first overload whose parameter types its values fit; one no overload fits is passed on as written
(the rule raises, as before).
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import os
from dataclasses import dataclass
from typing import Any, Callable

import torch
import yaml
from torch.utils import _pytree as pytree

from specengine.ir.base import unsupported
from specengine.ir.proxies import NumberProxy, TensorProxy

_REQUIRED = inspect.Parameter.empty


@dataclass(frozen=True)
class Param:
    """One parameter of a torch signature: `kind` is the schema type (e.g. `Optional[List[int]]`), "" if unknown."""

    name: str
    kw_only: bool = False
    default: Any = _REQUIRED
    kind: str = ""
    positional_only: bool = False  # (Python functions' `/`)


@dataclass(frozen=True)
class Overload:
    """One signature. `varargs`: its lone positional int list also takes the ints as separate arguments."""

    params: tuple[Param, ...]
    varargs: bool = False

    @property
    def positional(self) -> tuple[Param, ...]:
        return tuple(p for p in self.params if not p.kw_only)


_TABLE: dict[Any, tuple[Overload, ...]] = {}
_PREFIXES = {"torch._C._linalg": "linalg_", "torch._C._special": "special_", "torch._C._fft": "fft_"}


def _is_method(fn: Any) -> bool:
    return getattr(fn, "__objclass__", None) is torch._C.TensorBase


def _tensor_typed(kind: str) -> bool:
    return "Tensor" in kind


def _python_visible(schema: Any) -> bool:
    """Overloads Python's argument parser offers: not TorchScript's (no Tensor in or out, `prim_*`), not out=."""
    if schema.overload_name.startswith("prim_") or schema.overload_name.endswith("out"):
        return False
    kinds = [str(a.real_type) for a in (*schema.arguments, *schema.returns)]
    return any(_tensor_typed(k) for k in kinds)


def _schema_overload(schema: Any, method: bool, has_out: bool) -> Overload | None:
    params, self_param = [], None
    for a in schema.arguments:
        kind, name = str(a.real_type), a.name
        default = a.default_value if a.has_default_value() else _REQUIRED
        if name == "self" and kind == "Tensor":  # bound by the method form; `input` in the function form
            self_param = Param(name, False, _REQUIRED, kind)
            if method:
                continue
            name = "input"
        params.append(Param(name, a.kwarg_only or name == "memory_format", default, kind))
    if method and self_param is None:
        return None  # `pow.Scalar(Scalar self, Tensor exponent)` is no method of a tensor
    if method:
        params.insert(0, self_param)  # `x.where(condition, y)`: self comes first, wherever the schema has it
    if has_out and not method:
        params.append(Param("out", True, None, "Optional[Tensor]"))
    rest = [p for p in params[1 if method else 0 :] if not p.kw_only]
    varargs = len(rest) == 1 and rest[0].kind in ("List[int]", "List[SymInt]")  # x.view(2, 3), torch.zeros(2, 3)
    return Overload(tuple(params), varargs)


def _schema_overloads(fn: Any) -> tuple[Overload, ...]:
    name = getattr(fn, "__name__", None)
    if name is None:
        return ()
    name = _PREFIXES.get(getattr(fn, "__module__", None) or "", "") + name
    schemas = torch._C._jit_get_schemas_for_operator(f"aten::{name}")
    has_out = any(s.overload_name.endswith("out") for s in schemas)
    method = _is_method(fn)
    found = (_schema_overload(s, method, has_out) for s in schemas if _python_visible(s))
    return tuple(o for o in found if o is not None)


def _python_overloads(fn: Callable) -> tuple[Overload, ...]:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return ()
    kinds = {p.kind for p in sig.parameters.values()}
    if kinds & {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}:
        return ()  # `torch.einsum(eq, *operands)`: Python binds it as it is
    params = tuple(Param(p.name, p.kind is inspect.Parameter.KEYWORD_ONLY, p.default,
                         positional_only=p.kind is inspect.Parameter.POSITIONAL_ONLY) for p in sig.parameters.values())  # fmt: skip
    return (Overload(params),)


def overloads(fn: Any) -> tuple[Overload, ...]:
    """Torch's signatures of `fn` (empty where it has none the table can bind: operators, `*args` functions)."""
    found = _TABLE.get(fn)
    if found is None:
        name = getattr(fn, "__name__", "") or ""
        if name.startswith("__") and name.endswith("__"):
            found = ()  # operators: Python never passes them keywords
        else:
            found = _python_overloads(fn) if inspect.isfunction(fn) else _schema_overloads(fn)
        _TABLE[fn] = found
    return found


def public_name(fn: Any) -> str:
    """The name a user writes for `fn`: `torch.add`, `torch.Tensor.add`, `torch.nn.functional.relu`."""
    name = getattr(fn, "__name__", None) or type(fn).__name__
    if _is_method(fn):
        return f"torch.Tensor.{name}"
    return torch.overrides.resolve_name(fn) or f"{getattr(fn, '__module__', None) or ''}.{name}".lstrip(".")


def _short(fn: Any) -> str:
    return getattr(fn, "__name__", None) or public_name(fn)


def _bind_one(fn: Any, ov: Overload, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The call in canonical form under one overload, or TypeError as Python would raise it."""
    positional = ov.positional
    first = 1 if _is_method(fn) else 0
    if ov.varargs and len(args) > first + 1:
        args = (*args[:first], tuple(args[first:]))  # x.view(2, 3) is x.view((2, 3))
    if len(args) > len(positional):
        raise TypeError(f"{_short(fn)}() takes {len(positional) - first} positional arguments but "
                        f"{len(args) - first} were given")  # fmt: skip
    values = {p.name: v for p, v in zip(positional, args)}
    names = {p.name for p in ov.params if not p.positional_only}
    for key, value in kwargs.items():
        if key not in names and not inspect.isfunction(fn):
            key = _numpy_name(key, names, values, kwargs)
        if key not in names:
            raise TypeError(f"{_short(fn)}() got an unexpected keyword argument '{key}'")
        if key in values:
            raise TypeError(f"{_short(fn)}() got multiple values for argument '{key}'")
        values[key] = value
    given = [i for i, p in enumerate(positional) if p.name in values]
    out_args = []
    for i, p in enumerate(positional):
        if p.name not in values and p.default is _REQUIRED:
            raise TypeError(f"{_short(fn)}() missing required argument '{p.name}'")
        if given and i <= given[-1]:
            out_args.append(values[p.name] if p.name in values else p.default)
    out_kwargs = {}
    for p in ov.params:
        if p.kw_only and p.name in values:
            out_kwargs[p.name] = values[p.name]
        elif p.kw_only and p.default is _REQUIRED:
            raise TypeError(f"{_short(fn)}() missing required keyword argument '{p.name}'")
    return tuple(out_args), out_kwargs


# torch's argument parser also accepts numpy's names for these parameters (`x.sum(axis=0, keepdims=True)`)
_NUMPY_NAMES = {"axis": "dim", "keepdims": "keepdim", "x": "input", "a": "input", "x1": "input", "x2": "other"}


def _numpy_name(key: str, names: set[str], values: dict, kwargs: dict) -> str:
    """The parameter a keyword spelled the numpy way names in a builtin, as torch's parser reads it: only where the
    parameter has no other value (`x.sum(0, axis=1)` is eager's "unexpected keyword argument 'axis'")."""
    name = _NUMPY_NAMES.get(key)
    return name if name in names and name not in values and name not in kwargs else key


def _int_like(v: Any) -> bool:
    if isinstance(v, NumberProxy):
        return v.python_type in (int, bool)
    return isinstance(v, (int, torch.SymInt)) or (hasattr(v, "__index__") and not isinstance(v, torch.Tensor))


def _number(v: Any) -> bool:
    return isinstance(v, (int, float, complex, NumberProxy, torch.SymInt, torch.SymFloat, torch.SymBool))


def _tensor(v: Any) -> bool:
    return isinstance(v, (TensorProxy, torch.Tensor)) or _number(v)  # Python's parser wraps numbers (`mul(x, 2)`)


def _seq(v: Any, item: Callable[[Any], bool]) -> bool:
    return isinstance(v, (tuple, list)) and all(item(x) for x in v)


_FITS: dict[str, Callable[[Any], bool]] = {
    "Tensor": _tensor,
    "int": _int_like,
    "SymInt": _int_like,
    "float": _number,
    "number": _number,
    "Scalar": _number,
    "bool": lambda v: isinstance(v, bool) or (isinstance(v, NumberProxy) and v.python_type is bool),
    "str": lambda v: isinstance(v, str),
    "Dimname": lambda v: isinstance(v, str),
    "ScalarType": lambda v: isinstance(v, torch.dtype),
    "Layout": lambda v: isinstance(v, torch.layout),
    "MemoryFormat": lambda v: isinstance(v, torch.memory_format),
    "Device": lambda v: isinstance(v, (torch.device, str, int)),
    "Generator": lambda v: isinstance(v, torch.Generator),
}


def fits(kind: str, value: Any) -> bool:
    """Whether `value` can be passed for a parameter of schema type `kind` (lenient where the type is unknown)."""
    if not kind:
        return True
    if kind.startswith("Optional[") and kind.endswith("]"):
        return value is None or fits(kind[9:-1], value)
    if kind.startswith("List[") and kind.endswith("]"):
        inner = kind[5:-1]
        if inner in ("int", "SymInt") and _int_like(value):
            return True  # int[1] dim=0
        return _seq(value, lambda x: fits(inner, x))
    check = _FITS.get(kind)
    return True if check is None else check(value)


def _fits_all(ov: Overload, form: tuple[tuple, dict], scalar_tensors: bool = False) -> bool:
    """Whether every value fits its parameter; `scalar_tensors`: a 0-dim tensor is also a number (as torch's parser
    takes it for the Scalars of its deprecated signatures)."""
    args, kwargs = form
    by_name = {p.name: p for p in ov.params}

    def ok(kind: str, v: Any) -> bool:
        zero_dim = scalar_tensors and isinstance(v, (TensorProxy, torch.Tensor)) and v.ndim == 0
        return fits(kind, v) or (zero_dim and kind in ("number", "Scalar"))

    return all(ok(p.kind, v) for p, v in zip(ov.positional, args)) and all(
        ok(by_name[k].kind, v) for k, v in kwargs.items()
    )


def _same(a: tuple[tuple, dict], b: tuple[tuple, dict]) -> bool:
    return (len(a[0]) == len(b[0]) and all(x is y for x, y in zip(a[0], b[0]))
            and a[1].keys() == b[1].keys() and all(a[1][k] is b[1][k] for k in a[1]))  # fmt: skip


def _stand_in(v: Any) -> Any:
    if isinstance(v, TensorProxy):
        return torch.empty((0,) * v.ndim, dtype=v.dtype, device="meta")
    if isinstance(v, torch.Tensor):
        return torch.empty((0,) * v.ndim, dtype=v.dtype, device="meta")
    if isinstance(v, NumberProxy):
        return v.python_type(1)
    return v


def _check_parser(fn: Any, args: tuple, kwargs: dict) -> None:
    """Torch's own argument parser decides what eager refuses (`x.max(other=2)`: numbers are tensors only for
    some ops): the call runs on empty meta stand-ins, and a TypeError it raises is eager's. Only calls with a tensor
    among their arguments and no `device` or `generator` are checked (nothing is allocated or drawn)."""
    leaves = pytree.tree_leaves((args, kwargs))
    if (
        "device" in kwargs
        or "generator" in kwargs
        or not any(isinstance(v, (TensorProxy, torch.Tensor)) for v in leaves)
    ):
        return
    try:
        with torch._C.DisableTorchFunction():  # (the trace's mode would trace the stand-ins' own creation)
            margs, mkwargs = pytree.tree_map(_stand_in, (args, kwargs))
            fn(*margs, **mkwargs)
    except TypeError as e:
        if str(e).startswith(f"{_short(fn)}("):  # the parser's (`mul() got an unexpected keyword argument ...`)
            raise
    except Exception:  # noqa: BLE001 - only the parser's verdict matters: sizes and kernels are the rule's
        pass


def _deprecated_entries() -> dict[str, list[tuple[Any, tuple[str, ...]]]]:
    """Torch's deprecated Python signatures (`torch.add(x, 2, y)` is `torch.add(x, y, alpha=2)`), from the file
    torch's own code generator builds its argument parser from (torchgen's `deprecated.yaml`): op name -> [(the
    deprecated schema, the aten call's arguments in the op's schema order)]. Signatures with `out=` are left out."""
    global _DEPRECATED
    if _DEPRECATED is None:
        _DEPRECATED = {}
        spec = importlib.util.find_spec("torchgen")
        path = os.path.join(*spec.submodule_search_locations[:1], "packaged", "autograd", "deprecated.yaml") if spec \
            else ""  # fmt: skip
        if os.path.exists(path):
            with open(path) as f:
                # (libyaml's loader where built: the pure-Python one takes ~0.4 s of the process's first compile)
                for item in yaml.load(f, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or ():
                    schema = torch._C.parse_schema(item["name"])
                    if any(a.name == "out" for a in schema.arguments):
                        continue
                    call = item["aten"].strip()
                    names = tuple(a.strip() for a in call[call.index("(") + 1 : call.rindex(")")].split(","))
                    _DEPRECATED.setdefault(schema.name, []).append((schema, names))
    return _DEPRECATED


_DEPRECATED: dict | None = None


def _deprecated(fn: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict] | None:
    """The canonical form of a call that only one of torch's deprecated signatures accepts, or None."""
    name = getattr(fn, "__name__", None)
    entries = _deprecated_entries().get(name or "") if name else None
    if not entries:
        return None
    method = _is_method(fn)
    regular = overloads_all(fn)
    for ov in regular:  # torch's parser tries the deprecated signatures last
        try:
            if _fits_all(ov, _bind_one(fn, ov, args, kwargs)):
                return None
        except TypeError:
            pass
    for schema, aten_args in entries:
        old = _schema_overload(schema, method, False)
        try:
            form = _bind_one(fn, old, args, kwargs) if old is not None else None
        except TypeError:
            continue
        if form is None or not _fits_all(old, form, scalar_tensors=True):
            continue
        values = {**dict(zip((p.name for p in old.positional), form[0])), **form[1]}
        values["self"] = values.get("self", values.get("input"))
        for ov in regular:
            names = [p.name for p in ov.params if p.name != "out"]
            if len(names) != len(aten_args):
                continue
            named = {n: values[a] if a in values else ast.literal_eval(a) for n, a in zip(names, aten_args)}
            first = named.pop(names[0]) if method else None
            try:
                new = _bind_one(fn, ov, (first,) if method else (), named)
            except TypeError:
                continue
            if _fits_all(ov, new, scalar_tensors=True):
                _no_tensor_scalars(fn, ov, new)
                return new
    return None


def has_deprecated(fn: Any) -> bool:
    """Whether torch also accepts `fn` with a deprecated signature (`torch.add(x, 2, y)`)."""
    name = getattr(fn, "__name__", None)
    return type(name) is str and name in _deprecated_entries() and not inspect.isfunction(fn)


def _no_tensor_scalars(fn: Any, ov: Overload, form: tuple[tuple, dict]) -> None:
    """A deprecated signature that took a 0-dim tensor as its Scalar (`x.add(t, other=y)`: alpha=t) reads the
    tensor's data: refused."""
    values = {**dict(zip((p.name for p in ov.positional), form[0])), **form[1]}
    for p in ov.params:
        if p.kind in ("number", "Scalar") and isinstance(values.get(p.name), (TensorProxy, torch.Tensor)):
            raise unsupported(f"{public_name(fn)} with a tensor as {p.name} (a deprecated signature of torch's)",
                              f"pass a number as {p.name}, or write the call as {_short(fn)}(..., {p.name}=...)")  # fmt: skip


def overloads_all(fn: Any) -> tuple[Overload, ...]:
    """Torch's (non-deprecated) signatures of a builtin `fn`, including those of operators."""
    return overloads(fn) or (_schema_overloads(fn) if not inspect.isfunction(fn) else ())


def bind(fn: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """`fn(*args, **kwargs)` in torch's canonical spelling (positional parameters positionally, in torch's order;
    keyword-only ones by name), or eager's TypeError where torch refuses the call.

    Calls without keywords are returned as they are (they are already positional), as are callables the table
    has no signature for, and calls of a builtin that torch's parser accepts by a signature the schemas lack.
    """
    old = _deprecated(fn, args, kwargs) if not inspect.isfunction(fn) else None
    if old is not None:
        return old
    sigs = overloads(fn) if kwargs else ()
    if not sigs:
        return args, kwargs
    forms, errors = [], []
    for ov in sigs:
        try:
            forms.append((ov, _bind_one(fn, ov, args, kwargs)))
        except TypeError as e:
            errors.append(e)
    if not inspect.isfunction(fn):
        _check_parser(fn, args, kwargs)  # raises eager's TypeError
        if not forms:
            return args, kwargs  # a Python-only signature (`torch.nonzero(x, as_tuple=True)`): as written
    if not forms:
        raise errors[0] if len(errors) == 1 else TypeError(
            f"{_short(fn)}() received an invalid combination of arguments: " + "; ".join(dict.fromkeys(
                str(e) for e in errors)))  # fmt: skip
    if all(_same(forms[0][1], f) for _, f in forms[1:]):
        return forms[0][1]
    fitting = [f for ov, f in forms if _fits_all(ov, f)]
    return fitting[0] if fitting else (args, kwargs)
