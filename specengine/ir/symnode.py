"""A SymNode for torch's `SymInt`/`SymBool`/`SymFloat`, backed by our canonical `Expr` and the `Decider`.

torch's meta kernels (C++ and `torch/_meta_registrations.py`, `torch/_refs`, `torch/_decomp`) compute sizes with
SymInts and route all of their arithmetic and every decision through the SymInt's node. `ExprNode` implements
that protocol duck-typed (as torch's own `SymNode` does), so a meta kernel run on tensors whose sizes are
`torch.SymInt(ExprNode(...))` computes our symbolic output sizes, and every decision it takes becomes one of
our constraints, with provenance: the user's line, the op, and the kernel's reason.

Floats are lazy: a float computed from symbolic ints (`sym_float`, true division, float arithmetic) carries its
value and pins the ints it came from only when a kernel reads it (`guard_float`, a comparison, a rounding), so
a float that only feeds data (the divisor of a mean) pins nothing; symbolic float inputs pin the same way. Data-dependent
(unbacked) sizes are nodes over our unbacked symbols (`shape_env.create_unbacked_symint`); decisions on them are
proved or asserted at run time, never guarded (ir/unbacked.py).
"""

from __future__ import annotations

import functools
import math
import operator
from typing import Any, Callable

import torch

from specengine.constraints import expr as E
from specengine.constraints import floats
from specengine.ir import kernel_decisions as K
from specengine.ir import shape_env as SE
from specengine.ir import unbacked


class ExprNode:
    """A symbolic int or bool (an `Expr`), or a concrete float, as torch's SymNode protocol sees it."""

    __slots__ = ("expr_", "pytype", "_float", "_pin_float")

    def __init__(self, expr: E.Expr | None, pytype: type, value: float | None = None, pin: Callable | None = None):
        self.expr_ = expr
        self.pytype = pytype
        self._float = value  # floats: the concrete value
        self._pin_float = pin  # a symbolic float input: records its equality guard on first use

    # Construction and state.

    @classmethod
    def of(cls, e: E.Expr) -> ExprNode:
        return cls(e, bool if e.is_bool else int)

    def _fval(self) -> float:
        if self._pin_float is not None:
            pin, self._pin_float = self._pin_float, None
            pin()
        return self._float

    def clone(self) -> ExprNode:
        return self

    def is_int(self) -> bool:
        return self.pytype is int

    def is_float(self) -> bool:
        return self.pytype is float

    def is_bool(self) -> bool:
        return self.pytype is bool

    def is_nested_int(self) -> bool:
        return False

    def nested_int(self) -> None:
        return None

    def nested_int_coeff(self) -> None:
        return None

    def is_constant(self) -> bool:
        return self.pytype is not float and self.expr_.is_const  # (torch unwraps constants as ints and bools only)

    def is_symbolic(self) -> bool:
        return self.pytype is float or not self.expr_.is_const

    def has_hint(self) -> bool:
        return True

    @property
    def hint(self) -> Any:
        return self._fval() if self.pytype is float else K.hint(self.expr_)

    @property
    def _hint(self) -> Any:
        return self.hint

    def require_hint(self, fallback: Any = None) -> Any:
        return self.hint

    @property
    def expr(self) -> Any:
        return SE.sympy_view(self.expr_) if self.pytype is not float else self._fval()

    @property
    def _expr(self) -> Any:
        return self.expr

    @property
    def shape_env(self) -> SE.ShapeEnvStandIn:
        return SHAPE_ENV

    @property
    def constant(self) -> Any:
        return self.maybe_as_float() if self.pytype is float else (self.expr_.value if self.expr_.is_const else None)

    def maybe_as_int(self) -> int | None:
        return self.expr_.value if self.pytype is int and self.expr_.is_const else None

    def maybe_as_bool(self) -> bool | None:
        return self.expr_.value if self.pytype is bool and self.expr_.is_const else None

    def maybe_as_float(self) -> float | None:
        return self._fval() if self.pytype is float else None

    def constant_int(self) -> int | None:
        return self.maybe_as_int()

    def constant_bool(self) -> bool | None:
        return self.maybe_as_bool()

    def wrap_int(self, v: int) -> ExprNode:
        return ExprNode(E.const(v), int)

    def wrap_bool(self, v: bool) -> ExprNode:
        return ExprNode(E.TRUE if v else E.FALSE, bool)

    def wrap_float(self, v: float) -> ExprNode:
        return ExprNode(None, float, float(v))

    def str(self) -> str:  # noqa: A003 - the protocol's name
        return str(self.expr_) if self.pytype is not float else repr(self._float)

    _graph_repr = str

    def __str__(self) -> str:
        return self.str()

    def __repr__(self) -> str:
        return f"ExprNode({self.str()})"

    def _value_hash(self) -> int:
        return hash((self.pytype, self.expr_, self._float)) if self._pin_float is None else id(self)

    def _value_eq(self, other: Any) -> bool:
        if self._pin_float is not None or getattr(other, "_pin_float", None) is not None:
            return self is other  # a lazy float equals another only once both are pinned
        return isinstance(other, ExprNode) and (self.pytype, self.expr_, self._float) == (
            other.pytype,
            other.expr_,
            other._float,
        )

    # Decisions: each one is decided by the Decider (a constraint with provenance unless implied).

    def guard_bool(self, file: str = "", line: int = 0) -> bool:
        return K.decide(self._as_bool(), "guard_bool")

    def bool_(self) -> bool:
        return K.decide(self._as_bool(), "bool")

    def expect_true(self, file: str = "", line: int = 0) -> bool:
        return K.decide(self._as_bool(), "expect_true")

    def expect_size(self, file: str = "", line: int = 0) -> bool:
        return K.decide(E.ge(self.expr_, 0), "expect_size")

    def guard_size_oblivious(self, file: str = "", line: int = 0) -> bool:
        return K.decide(self._as_bool(), "guard_size_oblivious")  # our sizes are backed: an ordinary decision

    def guard_or_false(self, file: str = "", line: int = 0) -> bool:
        return K.decide_or(self._as_bool(), False)

    def guard_or_true(self, file: str = "", line: int = 0) -> bool:
        return K.decide_or(self._as_bool(), True)

    def statically_known_true(self, file: str = "", line: int = 0) -> bool:
        return SHAPE_ENV.known(self._as_bool()) is True

    def guard_int(self, file: str = "", line: int = 0) -> int:
        return K.pin(self.expr_, "guard_int")

    def int_(self) -> int:
        return K.pin(self.expr_, "int")

    def guard_float(self, file: str = "", line: int = 0) -> float:
        if self.pytype is float:
            return self._fval()
        return float(K.pin(self.expr_, "guard_float"))

    def evaluate(self) -> Any:
        return self.guard_float() if self.pytype is float else self.guard_bool() if self.is_bool() else self.int_()

    def _as_bool(self) -> E.Expr:
        if self.pytype is float:
            return E.TRUE if self._fval() else E.FALSE
        return self.expr_ if self.expr_.is_bool else E.ne(self.expr_, 0)

    # Conversions.

    def sym_float(self) -> ExprNode:
        if self.pytype is float:
            return self
        return _lazy(float(_peek(self)), (self,), "sym_float")

    def sym_int(self) -> ExprNode:
        return self if self.pytype is int else self.wrap_int(int(self._fval()))

    def _as_int(self) -> E.Expr:
        return E.ite(self.expr_, 1, 0) if self.expr_.is_bool else self.expr_


def _node_of(x: Any) -> ExprNode:
    if isinstance(x, ExprNode):
        return x
    if isinstance(x, (torch.SymInt, torch.SymBool, torch.SymFloat)):
        return x.node
    if isinstance(x, bool):
        return ExprNode(E.TRUE if x else E.FALSE, bool)
    if isinstance(x, int):
        return ExprNode(E.const(x), int)
    return ExprNode(None, float, float(x))


def _int_binary(name: str, build: Callable, py: Callable, zero_check: bool = False) -> Callable:
    def method(self: ExprNode, other: Any) -> ExprNode:
        other = _node_of(other)
        if self.pytype is float or other.pytype is float:
            return _computed(py, (self, other), name)
        a, b = self._as_int(), other._as_int()
        if zero_check and not K.decide(E.ne(b, 0), name):
            raise ZeroDivisionError("integer division or modulo by zero")
        quotient = E.exact_quotient(a, b) if zero_check else None  # `b*h*t // (h*t)` is `b` (b != 0 decided)
        if quotient is not None:
            return ExprNode(E.const(0) if name == "mod" else quotient, int)
        return ExprNode(build(a, b), int)

    method.__name__ = name
    return method


def _relation(name: str, build: Callable, py: Callable) -> Callable:
    def method(self: ExprNode, other: Any) -> ExprNode:
        other = _node_of(other)
        if self.pytype is float or other.pytype is float:
            return self.wrap_bool(py(_concrete(self), _concrete(other)))
        return ExprNode(build(self._as_int(), other._as_int()), bool)

    method.__name__ = name
    return method


def _concrete(n: ExprNode, kind: str = "float arithmetic") -> Any:
    """A Python value; a symbolic int or bool is pinned (a recorded guard)."""
    if n.pytype is float:
        return n._fval()
    if n.pytype is bool:
        return K.decide(n.expr_, "concrete bool")
    return K.pin(n.expr_, kind)


def _peek(n: ExprNode) -> Any:
    """The value by the hints, recording nothing (the caller keeps what pins it)."""
    return n._float if n.pytype is float else K.hint(n._as_int() if n.pytype is int else n.expr_)


def _pending(n: ExprNode) -> bool:
    return n._pin_float is not None if n.pytype is float else not n.expr_.is_const


def _lazy(value: float, nodes: tuple, kind: str) -> ExprNode:
    """A float computed from `nodes`, which pins them (in order) when something reads its value."""
    pending = tuple(n for n in nodes if _pending(n))
    if not pending:
        return ExprNode(None, float, float(value))
    return ExprNode(None, float, float(value), lambda: [_concrete(n, kind) for n in pending])


def _computed(py: Callable, nodes: tuple, kind: str) -> ExprNode:
    """`py` over the nodes' values: a lazy float, or (an int, a bool, an error) decided now with pins."""
    try:
        result = py(*(_peek(n) for n in nodes))
    except (ArithmeticError, ValueError):
        result = None
    if type(result) is float:
        return _lazy(result, nodes, kind)
    result = py(*(_concrete(n) for n in nodes))  # raises eager's error with the operands pinned
    first = nodes[0]
    return first.wrap_bool(result) if isinstance(result, bool) else first.wrap_float(result)


def _float_op(name: str, py: Callable) -> Callable:
    def method(self: ExprNode, other: Any = None) -> ExprNode:
        return _computed(py, (self,) if other is None else (self, _node_of(other)), name)

    method.__name__ = name
    return method


def _pow(self: ExprNode, other: Any) -> ExprNode:
    other = _node_of(other)
    if self.pytype is int and other.pytype is int and other.expr_.is_const and other.expr_.value >= 0:
        return ExprNode(math.prod([self.expr_] * other.expr_.value, start=E.const(1)), int)
    if self.pytype is float or other.pytype is float:
        return _computed(operator.pow, (self, other), "pow")
    result = _concrete(self) ** _concrete(other)
    return self.wrap_int(result) if isinstance(result, int) else self.wrap_float(result)


def _memo(build: Callable) -> Callable:
    """`build` (a pure constructor of canonical Exprs, which compare by identity) remembering its recent results:
    torch's kernels ask the same questions of the same sizes many times (a convnet's batch norm reference compares
    each stride pair in every elementwise prim: 87% of these calls repeat an earlier one)."""
    return functools.lru_cache(maxsize=1 << 14)(build)


def _install() -> None:
    ints = {
        "add": (E.add, operator.add), "sub": (E.sub, operator.sub), "mul": (E.mul, operator.mul),
        "sym_min": (E.minimum, min), "sym_max": (E.maximum, max),
    }  # fmt: skip
    for name, (build, py) in ints.items():
        setattr(ExprNode, name, _int_binary(name, _memo(build), py))
    for name in ("floordiv", "int_floordiv"):
        setattr(ExprNode, name, _int_binary(name, _memo(E.floordiv), operator.floordiv, zero_check=True))
    ExprNode.mod = _int_binary("mod", _memo(E.mod), operator.mod, zero_check=True)
    rels = {"eq": E.eq, "ne": E.ne, "lt": E.lt, "le": E.le, "gt": E.gt, "ge": E.ge}
    for name, build in rels.items():
        setattr(ExprNode, name, _relation(name, _memo(build), getattr(operator, name)))
    floats_ = {
        "truediv": operator.truediv, "int_truediv": operator.truediv, "float_truediv": operator.truediv,
        "float_pow": operator.pow, "lshift": operator.lshift, "rshift": operator.rshift,
        "bitwise_and": operator.and_, "bitwise_or": operator.or_, "bitwise_xor": operator.xor,
    }  # fmt: skip
    for name, py in floats_.items():
        setattr(ExprNode, name, _float_op(name, py))
    unary = {"sym_sqrt": math.sqrt, "sym_cos": math.cos, "sym_sin": math.sin, "sym_tan": math.tan,
             "sym_cosh": math.cosh, "sym_sinh": math.sinh, "sym_tanh": math.tanh, "sym_acos": math.acos,
             "sym_asin": math.asin, "sym_atan": math.atan, "sym_log2": math.log2,
             "is_integer": lambda v: float(v).is_integer()}  # fmt: skip
    for name, py in unary.items():
        setattr(ExprNode, name, _float_op(name, py))
    ExprNode.pow = ExprNode.pow_by_natural = _pow


_install()


def _neg(self: ExprNode) -> ExprNode:
    return _lazy(-self._float, (self,), "neg") if self.pytype is float else ExprNode(E.neg(self._as_int()), int)


def _abs(self: ExprNode) -> ExprNode:
    if self.pytype is float:
        return _lazy(abs(self._float), (self,), "abs")
    e = self._as_int()
    return ExprNode(E.maximum(e, E.neg(e)), int)


def _rounding(py: Callable) -> Callable:
    def method(self: ExprNode, *args: Any) -> ExprNode:
        if self.pytype is int:
            return self
        return self.wrap_int(int(py(self._fval(), *args)))

    return method


def _sym_sum(self: ExprNode, args: list) -> ExprNode:
    nodes = [_node_of(a) for a in args]
    if any(n.pytype is float for n in nodes):
        return _lazy(float(sum(_peek(n) for n in nodes)), tuple(nodes), "sym_sum")
    total = E.const(0)
    for n in nodes:
        total = E.add(total, n._as_int())
    return ExprNode(total, int)


def _sym_ite(self: ExprNode, then: Any, other: Any) -> ExprNode:
    then, other = _node_of(then), _node_of(other)
    if then.pytype is int and other.pytype is int:
        return ExprNode(E.ite(self._as_bool(), then.expr_, other.expr_), int)
    return then if K.decide(self._as_bool(), "sym_ite") else other


def _and(self: ExprNode, other: Any) -> ExprNode:
    return ExprNode(E.and_(self._as_bool(), _node_of(other)._as_bool()), bool)


def _or(self: ExprNode, other: Any) -> ExprNode:
    return ExprNode(E.or_(self._as_bool(), _node_of(other)._as_bool()), bool)


def _not(self: ExprNode) -> ExprNode:
    return ExprNode(E.not_(self._as_bool()), bool)


ExprNode.neg = _neg
ExprNode.pos = lambda self: self
ExprNode.abs = _abs
ExprNode.ceil = _rounding(math.ceil)
ExprNode.floor = _rounding(math.floor)
ExprNode.trunc = _rounding(math.trunc)
ExprNode.round = _rounding(round)
ExprNode.sym_sum = _sym_sum
ExprNode.sym_ite = _sym_ite
ExprNode.sym_and = ExprNode.and_ = _and
ExprNode.sym_or = ExprNode.or_ = _or
ExprNode.sym_not = _not


# C++ layout predicates over (sizes, strides): answered by the hints, unrecorded (see _LAYOUT_FUNCTIONS).


def _dense_in(sizes: list, strides: list, order: list[int]) -> bool:
    """Whether strides are dense in `order` (innermost first), ignoring size-1 dims; empty tensors count."""
    sizes, strides = [_hint_of(s) for s in sizes], [_hint_of(s) for s in strides]
    if math.prod(sizes) == 0:
        return True
    expected = 1
    for i in order:
        if sizes[i] != 1 and strides[i] != expected:
            return False
        expected *= sizes[i]
    return True


def _hint_of(x: Any) -> int:
    n = _node_of(x)
    return int(n.hint)


def _layout(fn: Callable) -> Callable:
    def method(self: ExprNode, sizes: list, strides: list) -> ExprNode:
        return self.wrap_bool(fn(sizes, strides))

    return method


def _channels_last(rank: int) -> Callable:
    def predicate(sizes: list, strides: list) -> bool:
        return len(sizes) == rank and _dense_in(sizes, strides, [1, *range(rank - 1, 1, -1), 0])

    return _layout(predicate)


def _non_overlapping_and_dense(sizes: list, strides: list) -> bool:
    order = sorted(range(len(sizes)), key=lambda i: _hint_of(strides[i]))
    return _dense_in(sizes, strides, order)


ExprNode.is_contiguous = _layout(lambda sizes, strides: _dense_in(sizes, strides, list(reversed(range(len(sizes))))))
ExprNode.is_channels_last_contiguous_2d = _channels_last(4)
ExprNode.is_channels_last_contiguous_3d = _channels_last(5)
ExprNode.is_channels_last_strides_2d = _channels_last(4)
ExprNode.is_channels_last_strides_3d = _channels_last(5)
ExprNode.is_non_overlapping_and_dense = _layout(_non_overlapping_and_dense)
ExprNode.is_non_overlapping_and_dense_indicator = lambda self, sizes, strides: self.wrap_int(
    int(_non_overlapping_and_dense(sizes, strides))
)


def symint(e: E.Expr) -> Any:
    """`e` as what torch takes for a size: an int when constant, else a SymInt over our node."""
    return e.value if e.is_const else torch.SymInt(ExprNode(e, int))


def symfloat_input(value: float, pin: Callable) -> Any:
    """A symbolic float input: a SymFloat that pins (calls `pin`) the first time a kernel reads it."""
    return torch.SymFloat(ExprNode(None, float, float(value), pin))


def expr_of(x: Any) -> E.Expr:
    """The int Expr of a size a kernel returned (an int or a SymInt over our node)."""
    if isinstance(x, bool) or not isinstance(x, (int, torch.SymInt)):
        raise TypeError(f"expected a size, got {x!r}")
    if isinstance(x, int):
        return E.const(x)
    node = x.node
    if not isinstance(node, ExprNode):
        raise SE.DataDependentError(f"a size {x} from outside specengine's symbols")
    return node._as_int()


def pin_float(expr: Any, hint: float) -> Callable:
    """A callback recording that the symbolic float `expr` equals its hint."""

    def pin() -> None:
        K.PINS[(K.current_op(), "float input")] += 1
        K.state().decide(floats.same(expr, hint), K.current_op(), "a kernel reads the float's value")

    return pin


def number_node(expr: Any, hint: Any, python_type: type) -> ExprNode:
    """The node of a NumberProxy (its `.node`, which torch's Python helpers read from a SymInt)."""
    if python_type is float:
        return ExprNode(None, float, float(hint), pin_float(expr, hint))
    return ExprNode.of(expr)


class ShapeEnv(SE.ShapeEnvStandIn):
    """The `shape_env` of our nodes; its unbacked ints are nodes over fresh unbacked symbols."""

    def create_unbacked_symint(self, *args: Any, **kwargs: Any) -> Any:
        """A fresh unbacked int for the op being run (a size, `.item()` of an integer tensor); bound by the op's
        output in the computation (ops/generic.py)."""
        K.untranslated("a data-dependent size")
        op = K.current_op()
        return torch.SymInt(ExprNode(unbacked.new_symbol(f"a data-dependent int of {op}", int, op=op), int))


SHAPE_ENV = ShapeEnv()
