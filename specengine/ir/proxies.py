"""Proxies: the values a traced function sees instead of tensors and ints.

Tensor methods and operators are attached to TensorProxy by the op registry (`specengine.ops`),
next to each op's definition; the ops layer installs its entry points in `HOOKS` (proxies never import
ops). NumberProxy implements Python's number protocols; every decision it is asked to make (`bool`,
`int`, `__index__`) goes through the tracing state and becomes a constraint.
"""

from __future__ import annotations

import builtins
import dis
import functools
import math
import os
import sys
import types
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

from specengine.constraints import expr as E
from specengine.constraints import floats
from specengine.ir import context, symnode
from specengine.ir.base import HOOKS, OpsHooks, Proxy, _prims, check_value, unsupported  # noqa: F401 - re-exported
from specengine.patching import Patches
from specengine.provenance import _is_internal

_DTYPE_SHORT = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "b8", torch.complex64: "c64", torch.complex128: "c128",
}  # fmt: skip


def dtype_short(dtype: torch.dtype) -> str:
    return _DTYPE_SHORT.get(dtype, str(dtype).removeprefix("torch."))


def device_str(device: torch.device) -> str:
    return device.type if device.index is None else f"{device.type}:{device.index}"


# `x.__class__` of a proxy: eager's class for the user's code, the proxy's for C code's `isinstance`
_SPECENGINE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_class_reads: dict[int, tuple] = {}  # id(code) -> (code, offsets of its `LOAD_ATTR __class__`): hashing a code is slow


def seen_class(eager: type, own: type) -> type:
    """`proxy.__class__` (a property of TensorProxy and SymSize): `eager` where code outside specengine reads the
    attribute itself (the frame below the property is executing a `LOAD_ATTR __class__`), `own` where it is read
    for C code (`isinstance` reads `__class__` when the type alone does not answer: torch's C code checks tensors
    that way, and must not take a proxy for one)."""
    frame = sys._getframe(2)
    code = frame.f_code
    held = _class_reads.get(id(code))
    if held is None or held[0] is not code:
        if len(_class_reads) > 4096:
            _class_reads.clear()
        held = _class_reads[id(code)] = (code, _offsets(code))
    return eager if frame.f_lasti in held[1] else own


def _offsets(code: types.CodeType) -> frozenset:
    if code.co_filename.startswith(_SPECENGINE):
        return frozenset()
    reads = ("LOAD_ATTR", "LOAD_METHOD")
    return frozenset(i.offset for i in dis.get_instructions(code) if i.opname in reads and i.argval == "__class__")


_real_isinstance = builtins.isinstance


def is_outside_tensor(x: Any) -> bool:
    """A real tensor (e.g. closed over from outside), not a proxy. While tracing, `isinstance(proxy, torch.Tensor)`
    holds (see `tensor_isinstance`), so `isinstance` alone cannot tell. (The builtin itself, the proxy test first:
    it is asked of every argument of every op, and a failed test on a proxy reads its `__class__` property.)"""
    return not _real_isinstance(x, Proxy) and _real_isinstance(x, torch.Tensor)


def is_proxy(x: Any) -> bool:
    """`isinstance(x, Proxy)` by the builtin itself (what the swapped one answers too, as a Python call)."""
    return _real_isinstance(x, Proxy)


_SWAPS = Patches()
# (owner, name, hook, original): what tracing swaps in (`add_tracing_patch`), where the original still stands
_TRACING_PATCHES: list[tuple[Any, str, Any, Any]] = []


def _names_a_base_of(base: type, cls: Any) -> bool:
    """Whether `isinstance(an instance of base, cls)` holds by class alone (cls: a type, a tuple or a union)."""
    if _real_isinstance(cls, tuple):
        return any(_names_a_base_of(base, c) for c in cls)
    if _real_isinstance(cls, types.UnionType):
        return any(_names_a_base_of(base, c) for c in cls.__args__)
    return _real_isinstance(cls, type) and issubclass(base, cls)


def _traced_isinstance(obj: Any, cls: Any, /) -> bool:
    t = type(obj)
    if (t is TensorProxy or t is SymSize) and not _real_isinstance(obj, cls):
        return _names_a_base_of(obj.tensor_type if t is TensorProxy else torch.Size, cls)
    return _real_isinstance(obj, cls)


@contextmanager
def tensor_isinstance() -> Iterator[None]:
    """While tracing, `isinstance(x, torch.Tensor)` (so `torch.is_tensor(x)`) holds for a TensorProxy and
    `isinstance(x.shape, torch.Size)` for its shape, as in eager.

    The builtin is swapped only for Python callers: torch's C code checks tensors with its own `PyObject_IsInstance`
    and unpacks them, so a proxy must not pass for a tensor there (a `__class__` property would). Nothing of this
    runs on cached calls; nested and concurrent traces share one swap.
    """
    patches = [(owner, name, hook) for owner, name, hook, was in _TRACING_PATCHES if getattr(owner, name) is was]
    with _SWAPS.applied(patches):  # (not over one that someone else put there)
        yield


_set = object.__setattr__


class TensorProxy(Proxy):
    """A tensor during tracing: symbolic dims (canonical int Exprs), dtype, device and requires_grad."""

    __slots__ = ("dims", "dtype", "device", "requires_grad", "tensor_type", "__weakref__")
    _ARITY = 5
    __hash__ = object.__hash__  # as eager: a tensor hashes by identity

    def __init__(self, name: str, dims: tuple, dtype: torch.dtype, device: torch.device, requires_grad: bool,
                 tensor_type: type = torch.Tensor):  # fmt: skip
        # (object.__setattr__: the frontend gives TensorProxy a __setattr__ for the user's writes, capture/tensor_objects)
        _set(self, "name", name)
        _set(self, "dims", tuple(E.as_expr(d) for d in dims))
        _set(self, "dtype", dtype)
        _set(self, "device", device)
        _set(self, "requires_grad", requires_grad)
        _set(self, "tensor_type", tensor_type)  # the input's class (nn.Parameter, a subclass): what isinstance sees

    @property
    def __class__(self) -> type:  # noqa: PLE0302 - `x.__class__` in the user's code is eager's (seen_class)
        return seen_class(self.tensor_type, TensorProxy)

    @property
    def ndim(self) -> int:
        return len(self.dims)

    @property
    def sym_shape(self) -> tuple:
        """The shape as ints (static dims) and Exprs (symbolic dims); records nothing."""
        return tuple(d.value if d.op == "const" else d for d in self.dims)

    @property
    def shape(self) -> SymSize:
        dims = _prims().shape(self)
        decider = getattr(context.current(), "decider", None)
        if decider is not None and decider.concrete:  # a retrace with every size pinned: real ints
            return unflatten_size([concrete_number(d, decider) for d in dims], None)
        return SymSize(dims)

    def size(self, dim: int | None = None) -> Any:
        shape = self.shape
        return shape if dim is None else shape[dim]

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> Any:
        return math.prod(self.shape, start=1)

    def nelement(self) -> Any:
        return self.numel()

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def is_complex(self) -> bool:
        return self.dtype.is_complex

    def element_size(self) -> int:
        return self.dtype.itemsize  # (torch.empty here would be traced, and ask its proxy again)

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    @property
    def is_cpu(self) -> bool:
        return self.device.type == "cpu"

    def type_string(self) -> str:
        dims = ", ".join(str(d) for d in self.dims)
        return f"{device_str(self.device)} {dtype_short(self.dtype)}[{dims}]"

    def __len__(self) -> int:
        if not self.dims:
            raise TypeError("len() of a 0-d tensor")
        return context.require().pin(self.dims[0], "len", "len() of a tensor needs a concrete size")

    def __bool__(self) -> bool:
        raise unsupported("Tensor.__bool__", "branching on tensor data is data-dependent; use torch.where (or "
                          "specengine.check for a fact about sizes)")  # fmt: skip

    def __str__(self) -> str:
        raise unsupported(
            "str(Tensor)", "formatting tensor data is data-dependent; print outside the compiled function"
        )

    def __format__(self, spec: str) -> str:
        raise unsupported("format(Tensor)", "formatting tensor data is data-dependent; format outside the compiled "
                          "function")  # fmt: skip

    def __repr__(self) -> str:
        if context.current() is not None and not _is_internal(sys._getframe(1).f_code.co_filename):
            raise unsupported("repr(Tensor)", "formatting tensor data is data-dependent; repr outside the compiled "
                              "function (x.shape, x.dtype and x.device are fine)")  # fmt: skip
        return f'<TensorProxy {self.name}: "{self.type_string()}">'

    def __iter__(self) -> Iterator[Any]:
        if not self.dims:
            raise TypeError("iteration over a 0-d tensor")
        return iter([self[i] for i in range(len(self))])  # the number of rows is pinned, as by len()

    def __deepcopy__(self, memo: dict) -> Any:
        raise unsupported("copy.deepcopy(Tensor)", "use x.clone()")

    def __copy__(self) -> Any:
        raise unsupported("copy.copy(Tensor)", "use x.clone() or x.view_as(x)")

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise unsupported("pickling a Tensor", "pickle outside the compiled function")

    def __pos__(self) -> Any:
        return self.positive()

    def item(self) -> Any:
        raise unsupported("Tensor.item", "reading tensor data is data-dependent; keep the value a tensor")

    def tolist(self) -> Any:
        raise unsupported("Tensor.tolist", "reading tensor data is data-dependent; keep the value a tensor")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or not hasattr(torch.Tensor, name):
            # as eager: hasattr(x, "jax") is False (transformers asks it of every tensor)
            raise AttributeError(f"'Tensor' object has no attribute '{name}'")
        method = HOOKS.fallback_method(name) if HOOKS.fallback_method is not None else None  # the generic path
        if method is None:
            raise unsupported(f"Tensor.{name}", "this method has no symbolic implementation yet; call eager code")
        return method.__get__(self)

    @classmethod
    def __torch_function__(cls, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None):
        return HOOKS.dispatch_torch(func, args, kwargs or {})


def _data_dependent(protocol: str) -> Callable:
    def method(self: TensorProxy, *args: Any) -> Any:
        raise unsupported(f"{protocol} of a Tensor", "reading tensor data is data-dependent; keep the value a tensor "
                          "(torch.where for a branch), or use x.item(): a symbolic value, checked with "
                          "specengine.check")  # fmt: skip

    return method


for _name, _protocol in (("__index__", "index()"), ("__int__", "int()"), ("__float__", "float()"),
                         ("__complex__", "complex()"), ("__contains__", "`in`"), ("__array__", "numpy conversion"),
                         ("__dlpack__", "DLPack export")):  # fmt: skip
    setattr(TensorProxy, _name, _data_dependent(_protocol))


class NumberProxy(Proxy, torch.SymInt):
    """An int, float or bool whose value is a symbolic expression; `hint` is the example value.

    It subclasses `torch.SymInt` only so that torch's argument parser lets it through to our
    torch-function mode (`torch.arange(n)`, `torch.full((n, 2), v)`); its `node` is our SymNode. Its `__class__` is its
    Python type, so `isinstance(n, int)` holds as in eager (torch's C code checks numbers by type flags, never
    by `__class__`). The number protocols live in `specengine.ir.numbers`: each follows a symbolic rule or
    pins the value with a recorded guard. Hashing, `str`, `repr` and formatting pin it while tracing.
    """

    __slots__ = ("expr", "hint", "python_type")
    _ARITY = 4

    def __init__(self, name: str, expr: E.Expr, hint: Any, python_type: type):
        self.name = name
        self.expr = expr
        self.hint = hint
        self.python_type = python_type

    @property
    def __class__(self) -> type:  # noqa: PLE0302 - isinstance(n, int) and isinstance(s, float) hold, as in eager
        return self.python_type

    @property
    def node(self) -> Any:
        """Its SymNode (ir/symnode.py), which torch's Python helpers read: their decisions on it are our guards."""
        return symnode.number_node(self.expr, self.hint, self.python_type)

    def type_string(self) -> str:
        return f"{self.python_type.__name__} {self.expr}"

    def __bool__(self) -> bool:
        _check_current(self)
        if self.expr.is_bool:
            b = self.expr
        elif self.python_type is float:
            b = floats.binary("!=", self.expr, 0.0)  # bool(nan) is True, bool(-0.0) False: as `!= 0.0`
        else:
            b = E.ne(self.expr, 0)
        return context.require().decide(b, "bool", "branch")

    def __index__(self) -> int:
        if self.python_type is float:
            raise TypeError("'float' object cannot be interpreted as an integer")
        return int(self._pin("index", "a concrete int is needed (indexing, range)"))

    def __int__(self) -> int:
        return int(self._pin("int", "int() needs a concrete value"))

    def __float__(self) -> float:
        return float(self._pin("float", "float() needs a concrete value"))

    def __len__(self) -> int:
        raise TypeError(f"object of type '{self.python_type.__name__}' has no len()")

    def __hash__(self) -> int:
        if context.current() is None:
            return object.__hash__(self)  # the engine's own bookkeeping, after tracing
        return hash(self._value("hash", "hashing (a set, a dict key, `in {...}`) needs a concrete value"))

    def __str__(self) -> str:
        return str(self._value("str", "str() needs a concrete value"))

    def __format__(self, spec: str) -> str:
        return format(self._value("format", "formatting (an f-string) needs a concrete value"), spec)

    def __repr__(self) -> str:
        if context.current() is None:
            return f"<NumberProxy {self.name}: {self.type_string()}>"
        return repr(self._value("repr", "repr() needs a concrete value"))

    def __copy__(self) -> NumberProxy:
        return self  # numbers are immutable

    def __deepcopy__(self, memo: dict) -> NumberProxy:
        return self

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise unsupported("pickling a symbolic number", "pickle outside the compiled function")

    def _value(self, op: str, reason: str) -> Any:
        """The concrete value, as its Python type (a guard pins it)."""
        value = self._pin(op, reason)
        return bool(value) if self.python_type is bool else value

    def _pin(self, op: str, reason: str) -> Any:
        _check_current(self)
        if self.expr.is_bool:
            return int(context.require().decide(self.expr, op, reason))
        if self.python_type is float:  # `same` tells -0.0 from 0.0, and matches NaN
            context.require().decide(floats.same(self.expr, self.hint), op, reason)
            return self.hint
        return context.require().pin(self.expr, op, reason)


def _check_current(x: NumberProxy) -> None:
    state = context.current()
    if state is not None and x.epoch != state.epoch and x.epoch != 0:
        check_value(state, x)


class SymSize(tuple):
    """`x.shape` while tracing: a tuple of ints and int NumberProxies that behaves as `torch.Size`.

    (`torch.Size` itself cannot be subclassed, and its C methods would read the proxies as ints.) It compares equal
    to tuples, slices, concatenates and repeats to a SymSize, has `.numel()`, is `isinstance(..., torch.Size)` while
    tracing, and is returned from the compiled function as a `torch.Size`. Its repr, str and hash pin the sizes.
    """

    __slots__ = ()

    @property
    def __class__(self) -> type:  # noqa: PLE0302 - `x.shape.__class__` in the user's code is torch.Size
        return seen_class(torch.Size, SymSize)

    def numel(self) -> Any:
        return math.prod(self, start=1)

    def __getitem__(self, key: Any) -> Any:
        out = tuple.__getitem__(self, key)
        return SymSize(out) if type(key) is slice else out

    def __add__(self, other: Any) -> Any:
        if not isinstance(other, tuple):
            raise TypeError(f"can only concatenate tuple (not {type(other).__name__}) to torch.Size")
        return SymSize(tuple.__add__(self, other))

    def __radd__(self, other: Any) -> Any:
        return SymSize(tuple.__add__(other, self)) if isinstance(other, tuple) else NotImplemented

    def __mul__(self, n: Any) -> Any:
        return SymSize(tuple.__mul__(self, n))

    __rmul__ = __mul__

    def __repr__(self) -> str:
        sizes = (d._value("repr", "repr() of a shape needs its sizes") if type(d) is NumberProxy else d for d in self)
        return f"torch.Size([{', '.join(repr(d) for d in sizes)}])"

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        return format(repr(self), spec)

    def __copy__(self) -> SymSize:
        return self  # immutable, of immutable sizes

    def __deepcopy__(self, memo: dict) -> SymSize:
        return self

    def __reduce__(self) -> tuple:
        raise unsupported("pickling a shape", "pickle outside the compiled function")


def _flatten_size(s: SymSize) -> tuple[list, None]:
    return list(s), None


def concrete_number(v: Any, decider: Any) -> Any:
    """`v` pinned to its value (a guard) where it is a symbol with a source; data-dependent ones stay symbolic."""
    if type(v) is not NumberProxy or decider.unbacked.mentions(v.expr):
        return v
    reason = "a retrace with every number concrete: symbolic, it reached code that needs a real one"
    return v._pin("concrete", reason) if v.python_type is float else v.python_type(v._pin("concrete", reason))


def unflatten_size(values: Any, context: Any) -> Any:
    """A torch.Size where every size is an int (a compiled function's output), else a SymSize (inside traces)."""
    values = tuple(values)
    return torch.Size(values) if all(type(v) is int for v in values) else SymSize(values)


pytree.register_pytree_node(SymSize, _flatten_size, unflatten_size,
                            flatten_with_keys_fn=lambda s: ([(pytree.SequenceKey(i), v) for i, v in enumerate(s)],
                                                            None))  # fmt: skip

_TRACING_PATCHES.append((builtins, "isinstance", _traced_isinstance, _real_isinstance))


class _Patched:
    """A function swapped in while tracing (`max`, `min`, `math.sqrt`) that compares and hashes as its original, so
    that a table keyed by the builtin (`{max: torch.amax}[op]`) still finds it; `is` cannot be made to hold, so a
    constant argument that is the original is given to the traced function as this (`op is max` holds)."""

    def __init__(self, original: Callable, hook: Callable):
        functools.update_wrapper(self, original)
        self.original, self.hook = original, hook

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.hook(*args, **kwargs)

    def __eq__(self, other: Any) -> bool:
        return other is self or other is self.original

    def __hash__(self) -> int:
        return hash(self.original)

    def __repr__(self) -> str:
        return repr(self.original)

    def __reduce__(self) -> Any:
        return self.original.__reduce__()


_PATCHED: dict[int, _Patched] = {}  # id(original) -> what the trace sees in its place


def add_tracing_patch(owner: Any, name: str, hook: Callable) -> None:
    """Swap `owner.name` for `hook` while any trace runs (see `tensor_isinstance`)."""
    original = getattr(owner, name)
    hook = _PATCHED[id(original)] = _Patched(original, hook)
    _TRACING_PATCHES.append((owner, name, hook, original))


def as_traced(value: Any) -> Any:
    """A constant as the traced function sees it: `max` passed in is the `max` its code names while tracing."""
    return _PATCHED.get(id(value), value)


def as_original(value: Any) -> Any:
    """The inverse of `as_traced`, for what the function returns or stores."""
    return value.original if type(value) is _Patched else value


def value_expr(x: Any) -> E.Expr:
    """The symbolic int expression of an int, bool or NumberProxy."""
    if isinstance(x, NumberProxy):
        return x.expr
    if isinstance(x, E.Expr):
        return x
    if isinstance(x, TensorProxy) and HOOKS.tensor_number is not None:  # `x.narrow(-1, 0, t)`: as eager's int(t)
        number = HOOKS.tensor_number(x, "int")
        if number is not x:
            return value_expr(number)
    return E.as_expr(int(x))
