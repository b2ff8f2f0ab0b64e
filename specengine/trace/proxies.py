"""Proxies: the values a traced function sees instead of tensors and ints.

Tensor methods and operators are attached to TensorProxy by the op registry (`specengine.ops`),
next to each op's definition. NumberProxy implements Python's number protocols; every decision it is
asked to make (`bool`, `int`, `__index__`) goes through the tracing state and becomes a constraint.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any, Callable

import torch

from specengine.constraints import expr as E
from specengine.constraints import floats
from specengine.errors import UnsupportedOpError
from specengine.provenance import user_frame
from specengine.trace import context

_DTYPE_SHORT = {
    torch.float32: "f32", torch.float64: "f64", torch.float16: "f16", torch.bfloat16: "bf16",
    torch.int64: "i64", torch.int32: "i32", torch.int16: "i16", torch.int8: "i8", torch.uint8: "u8",
    torch.bool: "b8", torch.complex64: "c64", torch.complex128: "c128",
}  # fmt: skip


def dtype_short(dtype: torch.dtype) -> str:
    return _DTYPE_SHORT.get(dtype, str(dtype).removeprefix("torch."))


def device_str(device: torch.device) -> str:
    return device.type if device.index is None else f"{device.type}:{device.index}"


def _prims():
    from specengine.ops import prims

    return prims


def unsupported(op: str, hint: str) -> UnsupportedOpError:
    return UnsupportedOpError(op, user_frame(op).where, hint)


FALLBACK_METHOD: Callable[[str], Callable | None] | None = None  # set by specengine.ops: Tensor methods without a rule


class Proxy:
    """A traced value. Names are for printing only; identity is the object."""

    __slots__ = ("name",)


class TensorProxy(Proxy):
    """A tensor during tracing: symbolic dims (canonical int Exprs), dtype, device and requires_grad."""

    __slots__ = ("dims", "dtype", "device", "requires_grad")
    __hash__ = object.__hash__

    def __init__(self, name: str, dims: tuple, dtype: torch.dtype, device: torch.device, requires_grad: bool):
        self.name = name
        self.dims = tuple(E.as_expr(d) for d in dims)
        self.dtype = dtype
        self.device = device
        self.requires_grad = requires_grad

    @property
    def ndim(self) -> int:
        return len(self.dims)

    @property
    def sym_shape(self) -> tuple:
        """The shape as ints (static dims) and Exprs (symbolic dims); records nothing."""
        return tuple(d.value if d.op == "const" else d for d in self.dims)

    @property
    def shape(self) -> tuple:
        return _prims().shape(self)

    def size(self, dim: int | None = None) -> Any:
        shape = self.shape
        return shape if dim is None else shape[dim]

    def dim(self) -> int:
        return len(self.shape)

    def numel(self) -> Any:
        return math.prod(self.shape, start=1)

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def is_complex(self) -> bool:
        return self.dtype.is_complex

    def element_size(self) -> int:
        return torch.empty((), dtype=self.dtype).element_size()

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
        raise unsupported("Tensor.__bool__", "branching on tensor data is data-dependent; use torch.where")

    def __str__(self) -> str:
        raise unsupported(
            "str(Tensor)", "formatting tensor data is data-dependent; print outside the compiled function"
        )

    def __format__(self, spec: str) -> str:
        raise unsupported("format(Tensor)", "formatting tensor data is data-dependent; format outside the compiled "
                          "function")  # fmt: skip

    def item(self) -> Any:
        raise unsupported("Tensor.item", "reading tensor data is data-dependent; keep the value a tensor")

    def tolist(self) -> Any:
        raise unsupported("Tensor.tolist", "reading tensor data is data-dependent; keep the value a tensor")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        method = FALLBACK_METHOD(name) if FALLBACK_METHOD is not None else None  # ops: the generic path
        if method is None:
            raise unsupported(f"Tensor.{name}", "this method has no symbolic implementation yet; call eager code")
        return method.__get__(self)

    @classmethod
    def __torch_function__(cls, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None):
        from specengine.ops.registry import dispatch_torch

        return dispatch_torch(func, args, kwargs or {})

    def __repr__(self) -> str:
        return f'<TensorProxy {self.name}: "{self.type_string()}">'


class NumberProxy(Proxy, torch.SymInt):
    """An int, float or bool whose value is a symbolic expression; `hint` is the example value.

    It subclasses `torch.SymInt` only so that torch's argument parser lets it through to our
    torch-function mode (`torch.arange(n)`, `torch.full((n, 2), v)`); it has no SymNode, and every
    SymInt protocol it does not implement symbolically pins its value with a recorded guard.
    """

    __slots__ = ("expr", "hint", "python_type")
    __hash__ = object.__hash__

    def __init__(self, name: str, expr: E.Expr, hint: Any, python_type: type):
        self.name = name
        self.expr = expr
        self.hint = hint
        self.python_type = python_type

    def type_string(self) -> str:
        return f"{self.python_type.__name__} {self.expr}"

    def __bool__(self) -> bool:
        if self.python_type is float:
            b = self.expr if self.expr.is_bool else floats.binary("!=", self.expr, 0.0)
        else:
            b = self.expr if self.expr.is_bool else E.ne(self.expr, 0)
        return context.require().decide(b, "bool", "branch")

    def __index__(self) -> int:
        return self._pin("index", "a concrete int is needed (indexing, range)")

    def __int__(self) -> int:
        return self._pin("int", "int() needs a concrete value")

    def __float__(self) -> float:
        return float(self._pin("float", "float() needs a concrete value"))

    def __round__(self, ndigits: int | None = None) -> Any:
        return round(self._pin("round", "round() needs a concrete value"), ndigits)

    def __len__(self) -> int:
        raise TypeError(f"object of type '{self.python_type.__name__}' has no len()")

    def __str__(self) -> str:
        return str(self._value("str", "str() needs a concrete value"))

    def __format__(self, spec: str) -> str:
        return format(self._value("format", "formatting (an f-string) needs a concrete value"), spec)

    def _value(self, op: str, reason: str) -> Any:
        """The concrete value, as its Python type (a guard pins it)."""
        value = self._pin(op, reason)
        return bool(value) if self.python_type is bool else value

    def _pin(self, op: str, reason: str) -> Any:
        if self.expr.is_bool:
            return int(context.require().decide(self.expr, op, reason))
        if self.python_type is float:
            context.require().decide(floats.binary("==", self.expr, self.hint), op, reason)
            return self.hint
        return context.require().pin(self.expr, op, reason)

    def __repr__(self) -> str:
        return f"<NumberProxy {self.name}: {self.type_string()}>"


_FLOAT_OPS = {"sym_add": "+", "sym_sub": "-", "sym_mul": "*", "sym_eq": "==", "sym_ne": "!=", "sym_lt": "<",
              "sym_le": "<=", "sym_gt": ">", "sym_ge": ">="}  # fmt: skip


_SYMBOLS = {"sym_add": "+", "sym_sub": "-", "sym_mul": "*", "sym_floordiv": "//", "sym_mod": "%", "sym_and": "&",
            "sym_or": "|"}  # fmt: skip


def _is_float(x: Any) -> bool:
    return isinstance(x, NumberProxy) and x.python_type is float


def float_result(op: str, a: Any, b: Any) -> Any:
    """`a op b` where one side is a symbolic float: a float (or bool) NumberProxy over a FloatExpr."""
    r = floats.binary(op, a.expr if isinstance(a, NumberProxy) else a, b.expr if isinstance(b, NumberProxy) else b)
    if r.is_const:
        return r.args[0]
    state = context.require()
    hint = r.eval(state.decider.hints)
    return NumberProxy(state.names.fresh("f"), r, hint, bool if r.is_bool else float)


def _number_binary(prim_name: str, py_op: Callable, reflected: bool = False) -> Callable:
    def method(self: NumberProxy, other: Any) -> Any:
        if (_is_float(self) or _is_float(other)) and isinstance(other, (int, float, NumberProxy)):
            a, b = (other, self) if reflected else (self, other)
            if prim_name in _FLOAT_OPS:
                return float_result(_FLOAT_OPS[prim_name], a, b)
            return py_op(_concrete(a), _concrete(b))
        if isinstance(other, NumberProxy) or type(other) in (int, bool):
            a, b = (other, self) if reflected else (self, other)
            return getattr(_prims(), prim_name)(a, b)
        if type(other) is float:
            value = float(self)
            return py_op(other, value) if reflected else py_op(value, other)
        if reflected and prim_name in _SYMBOLS and not isinstance(other, Sequence):  # (sequences repeat)
            # the left operand declined already: raise Python's own message, which would name NumberProxy
            raise TypeError(f"unsupported operand type(s) for {_SYMBOLS[prim_name]}: '{type(other).__name__}' "
                            f"and '{self.python_type.__name__}'")  # fmt: skip
        return NotImplemented

    return method


def _install_number_ops() -> None:
    arith = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": operator.floordiv,
             "mod": operator.mod}  # fmt: skip
    for name, py_op in arith.items():
        setattr(NumberProxy, f"__{name}__", _number_binary(f"sym_{name}", py_op))
        setattr(NumberProxy, f"__r{name}__", _number_binary(f"sym_{name}", py_op, reflected=True))
    for name in ("eq", "ne", "lt", "le", "gt", "ge"):
        setattr(NumberProxy, f"__{name}__", _number_binary(f"sym_{name}", getattr(operator, name)))
    for name in ("and", "or"):
        setattr(NumberProxy, f"__{name}__", _number_binary(f"sym_{name}", getattr(operator, f"{name}_")))
        setattr(NumberProxy, f"__r{name}__", _number_binary(f"sym_{name}", getattr(operator, f"{name}_"), True))

    def truediv(a: Any, b: Any) -> Any:
        if not isinstance(a, (int, float, NumberProxy)) or not isinstance(b, (int, float, NumberProxy)):
            return NotImplemented
        if _is_float(a) or _is_float(b):
            return float_result("/", a, b)
        return float(_concrete(a)) / float(_concrete(b))

    def power(a: Any, b: Any) -> Any:
        if not isinstance(b, (int, float, NumberProxy)) or not isinstance(a, (int, float, NumberProxy)):
            return NotImplemented
        if _is_float(a) or _is_float(b):
            return float_result("**", a, b)
        if type(b) is int and b >= 0 and isinstance(a, NumberProxy) and a.python_type is int:
            return math.prod([a] * b, start=1)
        return _concrete(a) ** _concrete(b)

    NumberProxy.__truediv__ = lambda self, other: truediv(self, other)
    NumberProxy.__rtruediv__ = lambda self, other: truediv(other, self)
    NumberProxy.__pow__ = lambda self, other: power(self, other)
    NumberProxy.__rpow__ = lambda self, other: power(other, self)
    NumberProxy.__neg__ = lambda self: float_result("*", self, -1.0) if _is_float(self) else _prims().sym_neg(self)
    NumberProxy.__pos__ = lambda self: self
    NumberProxy.__abs__ = lambda self: abs(_concrete(self)) if _is_float(self) else _prims().sym_abs(self)


_install_number_ops()


def _install_pinning_fallbacks() -> None:
    """SymInt protocols without a symbolic rule: computed on the pinned value (a guard is recorded)."""
    unary = {"__ceil__": math.ceil, "__floor__": math.floor, "__trunc__": math.trunc, "__sym_float__": float,
             "__sym_sqrt__": math.sqrt, "__sym_cos__": math.cos, "__sym_sin__": math.sin, "__sym_tan__": math.tan,
             "__sym_cosh__": math.cosh, "__sym_sinh__": math.sinh, "__sym_tanh__": math.tanh,
             "__sym_acos__": math.acos, "__sym_asin__": math.asin, "__sym_atan__": math.atan}  # fmt: skip
    for name, fn in unary.items():
        setattr(NumberProxy, name, lambda self, fn=fn: fn(_concrete(self)))
    binary = {"__lshift__": operator.lshift, "__rshift__": operator.rshift, "__xor__": operator.xor,
              "__sym_max__": max, "__sym_min__": min, "__pow_by_natural__": operator.pow,
              "__float_pow__": operator.pow, "__float_truediv__": operator.truediv,
              "__int_floordiv__": operator.floordiv, "__int_truediv__": operator.truediv}  # fmt: skip
    for name, fn in binary.items():
        setattr(NumberProxy, name, lambda self, other, fn=fn: fn(_concrete(self), _concrete(other)))
        reflected = name.replace("__", "__r", 1)
        setattr(NumberProxy, reflected, lambda self, other, fn=fn: fn(_concrete(other), _concrete(self)))


_install_pinning_fallbacks()


def _concrete(x: Any) -> Any:
    """A Python number for `x`; a NumberProxy is pinned (an equality constraint is recorded)."""
    if isinstance(x, NumberProxy):
        return float(x) if x.python_type is float else int(x)
    return x


def value_expr(x: Any) -> E.Expr:
    """The symbolic int expression of an int, bool or NumberProxy."""
    if isinstance(x, NumberProxy):
        return x.expr
    if isinstance(x, E.Expr):
        return x
    return E.as_expr(int(x))
