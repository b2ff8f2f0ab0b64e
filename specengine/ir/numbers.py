"""Python's number protocols on NumberProxy: a symbolic rule where Expr or FloatExpr can express it, else a pin.

Every protocol of `int`, `float` and `bool` that a traced program can reach is defined here (none falls back to
`object` or to `torch.SymInt`): arithmetic, true division, comparisons (also against floats), bitwise ops and
shifts, `divmod`, `pow(n, e, m)`, rounding, and the attributes of `int` (`.real`, `.numerator`, `.bit_length()`).
A pin records `value == hint` with provenance (`NumberProxy._pin`). `proxies.py` installs these on import.
"""

from __future__ import annotations

import builtins
import math
import numbers
import operator
from collections.abc import Sequence
from typing import Any, Callable

from specengine.constraints import expr as E
from specengine.constraints import floats
from specengine.ir import context, proxies
from specengine.ir.base import check_value
from specengine.ir.literals import base_value
from specengine.ir.proxies import NumberProxy, _prims
from specengine.ir.symbol import BoundSymbol
from specengine.provenance import user_frame

_PY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv, "%": operator.mod,
       "&": operator.and_, "|": operator.or_, "^": operator.xor, "<<": operator.lshift, ">>": operator.rshift,
       "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt,
       ">=": operator.ge}  # fmt: skip
_PRIM = {"+": "sym_add", "-": "sym_sub", "*": "sym_mul", "//": "sym_floordiv", "%": "sym_mod", "==": "sym_eq",
         "!=": "sym_ne", "<": "sym_lt", "<=": "sym_le", ">": "sym_gt", ">=": "sym_ge"}  # fmt: skip
_NAMES = {"+": "add", "-": "sub", "*": "mul", "//": "floordiv", "%": "mod", "&": "and", "|": "or", "^": "xor",
          "<<": "lshift", ">>": "rshift"}  # fmt: skip
_COMPARISONS = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}


def kind(x: Any) -> type | None:
    """int, float or bool for a Python number or a NumberProxy (by its Python type); None for anything else."""
    if type(x) is NumberProxy:
        return x.python_type
    return type(x) if type(x) in (int, float, bool) else None


def concrete(x: Any) -> Any:
    """A Python number for `x`; a NumberProxy is pinned (a guard is recorded)."""
    if type(x) is NumberProxy:
        return x._value("concrete", "this operation has no symbolic rule: it needs a concrete value")
    return x


def float_result(op: str, a: Any, b: Any) -> Any:
    """`a op b` where the result is a float (or a predicate on floats): a NumberProxy over a FloatExpr."""
    r = floats.binary(op, a.expr if type(a) is NumberProxy else a, b.expr if type(b) is NumberProxy else b)
    state = context.require()
    for x in (a, b):
        if type(x) is NumberProxy and x.epoch != state.epoch and x.epoch != 0:
            check_value(state, x)
    if r.is_const:
        return r.args[0]
    try:
        hint = r.eval(state.decider.hints)
    except ZeroDivisionError:  # over a stand-in of a data-dependent value (never decided on): any stand-in does
        hint = 0.0
    return NumberProxy(state.names.fresh("f"), r, hint, bool if r.is_bool else float)


def _ints(a: Any, b: Any) -> tuple[Any, Any]:
    """Operands for an int rule: symbolic bools are pinned (bool arithmetic is rare), Python bools become ints."""
    return tuple(_int_of_bool(x) if kind(x) is bool else x for x in (a, b))


def _int_of_bool(x: Any) -> Any:
    """A bool as an int: a symbolic 0/1 int (a bool `.item()`) stays symbolic, a predicate is pinned."""
    if type(x) is NumberProxy and not x.expr.is_bool:
        return NumberProxy(x.name, x.expr, int(x.hint), int)
    return int(concrete(x))


def arith(op: str, a: Any, b: Any) -> Any:
    ka, kb = kind(a), kind(b)
    if ka is None or kb is None:
        return NotImplemented
    if float in (ka, kb):
        if op in ("+", "-", "*"):
            return float_result(op, a, b)
        return _PY[op](concrete(a), concrete(b))  # // and % of floats: pinned
    a, b = _ints(a, b)
    if type(a) is not NumberProxy and type(b) is not NumberProxy:
        return _PY[op](a, b)
    return getattr(_prims(), _PRIM[op])(a, b)


def compare(op: str, a: Any, b: Any) -> Any:
    """`a op b` for a NumberProxy `a` (Python reflects comparisons itself): a bool NumberProxy or a bool.

    Under `Decider.pin_comparisons` (a program that compares by identity, `flag is True`) a symbolic result is
    decided here (a guard), so the program gets the bool eager gives."""
    out = _compare(op, a, b)
    if type(out) is not NumberProxy:
        return out
    state = context.current()
    decider = getattr(state, "decider", None)
    if decider is None:
        return out
    if decider.pin_comparisons and not decider.unbacked.mentions(out.expr):
        return bool(out)
    decider.symbolic_bools += 1
    return out


def _compare(op: str, a: Any, b: Any) -> Any:
    ka, kb = kind(a), kind(b)
    if ka is None or kb is None:
        return NotImplemented
    if bool in (ka, kb):
        a, b = _ints(a, b)
        ka, kb = kind(a), kind(b)
    if type(a) is not NumberProxy and type(b) is not NumberProxy:
        return _PY[op](a, b)
    if ka is float or kb is float:
        if ka is int and type(b) is float:  # a symbolic int against a float constant: an int predicate
            rule = floats.int_comparison(op, b)
            return rule if type(rule) is bool else getattr(_prims(), _PRIM[rule[0]])(a, rule[1])
        return float_result(op, a, b)
    return getattr(_prims(), _PRIM[op])(a, b)


def truediv(a: Any, b: Any) -> Any:
    """`a / b`: a symbolic float; a symbolic divisor is checked against zero (a guard), as eager raises there."""
    ka, kb = kind(a), kind(b)
    if ka is None or kb is None:
        return NotImplemented
    a, b = _ints(a, b)
    message = "float division by zero" if float in (ka, kb) else "division by zero"
    if type(b) is NumberProxy and context.require().decider.unbacked.mentions(b.expr):
        check_divisor(b, message)
    elif not (_nonzero(b) if type(b) is NumberProxy else b != 0):
        raise ZeroDivisionError(message)
    if type(a) is not NumberProxy and type(b) is not NumberProxy:
        return a / b
    return float_result("/", a, b)


def check_divisor(b: NumberProxy | E.Expr, message: str, op: str = "truediv") -> None:
    """A data-dependent divisor: Python's ZeroDivisionError at run time where it is 0 (proved nonzero: nothing)."""
    state = context.require()
    e = b if isinstance(b, E.Expr) else b.expr
    if isinstance(e, E.Expr) and not e.is_bool:
        if state.decider.prove(E.ne(e, 0)) is True:
            return
        state.decider.unbacked.assume(E.ne(e, 0), user_frame(op, "division by zero check"))
    state.emit(BoundSymbol(_prims().check_divisor, (e, message), (), None, (), user_frame(op)))


def _nonzero(b: NumberProxy) -> bool:
    """Decide `b != 0`: on the int inside where `b` is an int, a float of an int or its square root (z3 and the
    ranges reason about those), else as a float predicate."""
    e = b.expr
    while isinstance(e, floats.FloatExpr) and e.op in ("sqrt", "int"):
        e = e.args[0]
    if isinstance(e, E.Expr) and not e.is_bool:
        return context.require().decide(E.ne(e, 0), "truediv", "division by zero check")
    return bool(compare("!=", b, 0.0 if b.python_type is float else 0))


def _power_of_two_mask(c: int) -> bool:
    return c > 0 and c & (c + 1) == 0  # 0b0...01...1


def bitwise(op: str, a: Any, b: Any) -> Any:
    """`&`, `|`, `^`: logical on two bools; on ints bitwise, symbolic where `%` and `-` express it, else pinned."""
    ka, kb = kind(a), kind(b)
    if ka is None or kb is None or float in (ka, kb):
        return NotImplemented
    if ka is bool and kb is bool:
        if op == "^":
            return bool(concrete(a)) ^ bool(concrete(b))
        return getattr(_prims(), "sym_and" if op == "&" else "sym_or")(a, b)
    a, b = _ints(a, b)
    if type(a) is not NumberProxy:
        a, b = b, a  # all three are commutative: the symbolic operand first
    if type(b) is int:
        rule = _bitwise_with_constant(op, a, b)
        if rule is not None:
            return rule
    return _PY[op](concrete(a), concrete(b))


def _bitwise_with_constant(op: str, a: NumberProxy, c: int) -> Any:
    p = _prims()
    if c == 0:
        return 0 if op == "&" else a
    if c == -1:
        return a if op == "&" else -1 if op == "|" else invert(a)
    if op == "&" and _power_of_two_mask(c):
        return p.sym_mod(a, c + 1)  # n & (2**k - 1) == n % 2**k, for negative n too (floor semantics)
    if op == "&" and _power_of_two_mask(~c):
        return p.sym_sub(a, p.sym_mod(a, ~c + 1))  # n & -(2**k) == n - n % 2**k
    return None


def shift(op: str, a: Any, b: Any) -> Any:
    """`a << b` and `a >> b`: multiplication and floor division by 2**b (a symbolic shift count is pinned)."""
    ka, kb = kind(a), kind(b)
    if ka is None or kb is None or float in (ka, kb):
        return NotImplemented
    a, b = _ints(a, b)
    b = concrete(b)
    if b < 0:
        raise ValueError("negative shift count")
    if type(a) is not NumberProxy:
        return _PY[op](a, b)
    return _prims().sym_mul(a, 2**b) if op == "<<" else _prims().sym_floordiv(a, 2**b)


def invert(a: NumberProxy) -> Any:
    if a.python_type is float:
        raise TypeError("bad operand type for unary ~: 'float'")
    if a.python_type is bool:
        return ~int(concrete(a))
    return _prims().sym_sub(_prims().sym_neg(a), 1)  # ~n == -n - 1


def power(a: Any, b: Any, mod: Any = None) -> Any:
    ka, kb = kind(a), kind(b)
    if ka is None or kb is None or (mod is not None and kind(mod) is None):
        return NotImplemented
    if mod is not None:
        return _modular_power(a, b, mod)
    if float in (ka, kb) and not (ka is int and type(b) is float):
        if (ka is float and type(a) is NumberProxy) or (kb is float and type(b) is NumberProxy) or kb is int:
            return float_result("**", a, b)
        return concrete(a) ** concrete(b)
    a, b = _ints(a, b)
    if type(b) is float or kind(b) is float:
        return _int_to_float_power(a, b)
    b = concrete(b)  # the exponent decides the result's type (a negative one makes a float)
    if b >= 0 and type(a) is NumberProxy:
        return math.prod([a] * b, start=1)
    return concrete(a) ** b


def _int_to_float_power(a: Any, b: float) -> Any:
    """`n ** 0.5`: a float where `n >= 0` (a guard, implied for sizes); a negative base gives a complex: pinned."""
    if type(a) is not NumberProxy:
        return a**b
    if b < 0 and not (a != 0):
        raise ZeroDivisionError("0.0 cannot be raised to a negative power")
    if b.is_integer() or a >= 0:
        return float_result("**", a, b)
    return concrete(a) ** b


def sqrt(x: Any) -> Any:
    """`math.sqrt` while tracing: symbolic for a symbolic number (a negative one raises eager's ValueError)."""
    if type(x) is not NumberProxy or x.python_type is bool:
        return _REAL_SQRT(x)
    if x < 0:  # a guard (implied for sizes); NaN is not negative: math.sqrt(nan) is nan
        raise ValueError("math domain error")
    return NumberProxy(context.require().names.fresh("f"), floats.sqrt(x.expr), math.sqrt(x.hint), float)


_REAL_SQRT = math.sqrt


def _extremum(real: Callable, prim: str) -> Callable:
    """The builtin `max`/`min` while tracing: symbolic (`prims.sym_max`) where every argument is an int or a
    symbolic int and one is symbolic (`max(n, 1)`, `min(x.shape)`); anything else (floats, `key=`, `default=`,
    iterators) is the builtin, whose comparisons are decisions."""

    def extremum(*args: Any, **kwargs: Any) -> Any:
        items = args[0] if len(args) == 1 and type(args[0]) in (tuple, list, proxies.SymSize) else args
        if kwargs or not items or not _symbolic_ints(items):
            return real(*args, **kwargs)
        out = items[0]
        for x in items[1:]:
            out = getattr(_prims(), prim)(out, x)
        return out

    extremum.__name__ = extremum.__qualname__ = real.__name__
    return extremum


_real_len = builtins.len


def _traced_len(obj: Any, /) -> Any:
    """The builtin `len` while tracing: of a tensor, its first size as `x.shape[0]` is (symbolic, nothing decided:
    `x.view(len(idx), -1)`); anything else, the builtin (a tensor's own `__len__` pins, for callers Python's protocol
    reaches without this, such as C code)."""
    if type(obj) is proxies.TensorProxy and obj.dims:
        return obj.shape[0]
    return _real_len(obj)


def _symbolic_ints(items: Sequence) -> bool:
    symbolic = False
    for x in items:
        t = type(x)
        if t is NumberProxy and x.python_type is int:
            symbolic = True
        elif t is not int:
            return False
    return symbolic


def _modular_power(a: Any, b: Any, m: Any) -> Any:
    """`pow(a, b, m)`: `a**b % m` for b >= 0 (symbolic in `a` and `m`), else pinned (a modular inverse)."""
    if float in (kind(a), kind(b), kind(m)):
        raise TypeError("pow() 3rd argument not allowed unless all arguments are integers")
    a, b = _ints(a, b)
    m = int(concrete(m)) if kind(m) is bool else m
    b = concrete(b)
    if not (m != 0):
        raise ValueError("pow() 3rd argument cannot be 0")
    if b < 0 or (type(a) is not NumberProxy and type(m) is not NumberProxy):
        return pow(concrete(a), b, concrete(m))
    return arith("%", power(a, b), m)


def _binary(fn: Callable, op: str, reflected: bool = False) -> Callable:
    if not reflected:
        return lambda self, other: fn(op, self, other)

    def method(self: NumberProxy, other: Any) -> Any:
        out = fn(op, other, self)
        if out is NotImplemented and not isinstance(other, Sequence):  # (sequences repeat and concatenate)
            # the left operand declined already: raise Python's own message, which would name NumberProxy
            raise TypeError(f"unsupported operand type(s) for {op}: '{type(other).__name__}' and "
                            f"'{self.python_type.__name__}'")  # fmt: skip
        return out

    return method


def _rounding(name: str, fn: Callable) -> Callable:
    def method(self: NumberProxy, *args: Any) -> Any:
        if self.python_type is int and not args:
            return self  # floor, ceil, trunc and round of an int are the int
        if name in ("__floor__", "__ceil__") and not args:
            q = _int_quotient(self)
            if q is not None and -(2**53) < q[0] < 2**53:  # a guard, implied where the range bounds it
                a, b = q
                return arith("//", a, b) if name == "__floor__" else -arith("//", -a, b)
        return fn(concrete(self), *(concrete(a) for a in args))

    method.__name__ = name
    return method


def _int_quotient(x: NumberProxy) -> tuple[Any, Any] | None:
    """The int operands `(a, b)` of `x = a / b` (`math.ceil(n / 4)`), or None.

    Python divides ints correctly rounded, and for |a| < 2**53 the rounding never crosses an integer (the distance
    from a non-integer a/b to one is at least 1/|b|, the error at most |a/b| * 2**-53), so floor(a / b) == a // b
    and ceil(a / b) == -(-a // b)."""
    e = x.expr
    if not isinstance(e, floats.FloatExpr) or e.op != "/":
        return None
    out = []
    for arg in e.args:
        if arg.op == "int" and not context.require().decider.unbacked.mentions(arg.args[0]):
            out.append(_prims().new_number(arg.args[0]))
        elif arg.op == "const" and type(arg.args[0]) is int:
            out.append(arg.args[0])
        elif arg.op == "const" and type(arg.args[0]) is float and arg.args[0].is_integer() and abs(arg.args[0]) < 2**53:
            out.append(int(arg.args[0]))  # `n / 2.0` is the float `n / 2`
        else:
            return None
    return out[0], out[1]


def _install_arithmetic() -> None:
    for op in ("+", "-", "*", "//", "%"):
        setattr(NumberProxy, f"__{_NAMES[op]}__", _binary(arith, op))
        setattr(NumberProxy, f"__r{_NAMES[op]}__", _binary(arith, op, True))
    for op in ("&", "|", "^"):
        setattr(NumberProxy, f"__{_NAMES[op]}__", _binary(bitwise, op))
        setattr(NumberProxy, f"__r{_NAMES[op]}__", _binary(bitwise, op, True))
    for op in ("<<", ">>"):
        setattr(NumberProxy, f"__{_NAMES[op]}__", _binary(shift, op))
        setattr(NumberProxy, f"__r{_NAMES[op]}__", _binary(shift, op, True))
    for op, name in _COMPARISONS.items():
        setattr(NumberProxy, f"__{name}__", _binary(compare, op))
    NumberProxy.__truediv__ = lambda self, other: truediv(self, other)
    NumberProxy.__rtruediv__ = _binary(lambda op, a, b: truediv(a, b), "/", True)
    NumberProxy.__pow__ = lambda self, other, mod=None: power(self, other, mod)
    NumberProxy.__rpow__ = _binary(lambda op, a, b: power(a, b), "** or pow()", True)
    NumberProxy.__divmod__ = lambda self, other: _divmod(self, other)
    NumberProxy.__rdivmod__ = lambda self, other: _divmod(other, self)
    NumberProxy.__neg__ = _negate
    NumberProxy.__pos__ = lambda self: self if self.python_type is not bool else int(concrete(self))
    NumberProxy.__abs__ = _absolute
    NumberProxy.__invert__ = invert


def _divmod(a: Any, b: Any) -> Any:
    q = arith("//", a, b)
    return NotImplemented if q is NotImplemented else (q, arith("%", a, b))


def _negate(self: NumberProxy) -> Any:
    if self.python_type is float:
        return float_result("*", self, -1.0)
    if self.python_type is bool:
        return -int(concrete(self))
    return _prims().sym_neg(self)


def _absolute(self: NumberProxy) -> Any:
    if self.python_type is int:
        return _prims().sym_abs(self)
    return abs(concrete(self))


def _install_int_attributes() -> None:
    """The attributes of int and float: `.real` and `.numerator` are the number itself, `.bit_length()` pins."""
    NumberProxy.real = property(lambda self: self if self.python_type is not bool else int(concrete(self)))
    NumberProxy.imag = property(lambda self: 0.0 if self.python_type is float else 0)
    NumberProxy.conjugate = lambda self: self.real
    NumberProxy.numerator = property(_int_only("numerator", lambda self: self.real))
    NumberProxy.denominator = property(_int_only("denominator", lambda self: 1))
    NumberProxy.bit_length = _int_only("bit_length", lambda self: concrete(self).bit_length())
    NumberProxy.bit_count = _int_only("bit_count", lambda self: int(concrete(self)).bit_count())
    NumberProxy.as_integer_ratio = lambda self: concrete(self).as_integer_ratio()
    NumberProxy.to_bytes = _int_only("to_bytes", lambda self, *a, **k: int(concrete(self)).to_bytes(*a, **k))
    NumberProxy.hex = _float_only("hex", lambda self: concrete(self).hex())
    NumberProxy.is_integer = lambda self: self.python_type is not float or concrete(self).is_integer()
    rounding = {"__floor__": math.floor, "__ceil__": math.ceil, "__trunc__": math.trunc, "__round__": round}
    for name, fn in rounding.items():
        setattr(NumberProxy, name, _rounding(name, fn))


def _int_only(name: str, fn: Callable) -> Callable:
    def method(self: NumberProxy, *args: Any, **kwargs: Any) -> Any:
        if self.python_type is float:
            raise AttributeError(f"'float' object has no attribute '{name}'")
        return fn(self, *args, **kwargs)

    return method


def _float_only(name: str, fn: Callable) -> Callable:
    def method(self: NumberProxy) -> Any:
        if self.python_type is not float:
            raise AttributeError(f"'{self.python_type.__name__}' object has no attribute '{name}'")
        return fn(self)

    return method


def _install_pinning_fallbacks() -> None:
    """SymInt protocols that torch calls (torch.sym_max, math functions): computed on the pinned value."""
    unary = {"__sym_float__": float, "__sym_sqrt__": math.sqrt, "__sym_cos__": math.cos, "__sym_sin__": math.sin,
             "__sym_tan__": math.tan, "__sym_cosh__": math.cosh, "__sym_sinh__": math.sinh,
             "__sym_tanh__": math.tanh, "__sym_acos__": math.acos, "__sym_asin__": math.asin,
             "__sym_atan__": math.atan}  # fmt: skip
    for name, fn in unary.items():
        setattr(NumberProxy, name, lambda self, fn=fn: fn(concrete(self)))
    binary = {"__sym_max__": max, "__sym_min__": min, "__pow_by_natural__": operator.pow,
              "__float_pow__": operator.pow, "__float_truediv__": operator.truediv,
              "__int_floordiv__": operator.floordiv, "__int_truediv__": operator.truediv}  # fmt: skip
    for name, fn in binary.items():
        setattr(NumberProxy, name, lambda self, other, fn=fn: fn(concrete(self), concrete(other)))
        reflected = name.replace("__", "__r", 1)
        setattr(NumberProxy, reflected, lambda self, other, fn=fn: fn(concrete(other), concrete(self)))


_NATIVE = frozenset({int, float, bool, NumberProxy})
_PY_BINARY = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "floordiv": operator.floordiv,
              "mod": operator.mod, "and": operator.and_, "or": operator.or_, "xor": operator.xor,
              "lshift": operator.lshift, "rshift": operator.rshift, "truediv": operator.truediv, "pow": operator.pow,
              "divmod": divmod, "eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
              "gt": operator.gt, "ge": operator.ge}  # fmt: skip


def _foreign_aware(name: str, method: Callable, reflected: bool) -> Callable:
    """`method` for another number type as the other operand: an int subclass that keeps int's own operator (an
    IntEnum) is the int it holds (symbolic); other numbers (complex, numpy scalars, Fraction, Decimal, float
    subclasses, an IntFlag's `|`) get the pinned value, so that the result has eager's type."""
    py, dunder = _PY_BINARY[name], f"__{'r' if reflected else ''}{name}__"
    mirror = f"__{name}__" if name in _COMPARISONS.values() else dunder

    def wrapper(self: NumberProxy, other: Any, *rest: Any) -> Any:
        t = type(other)
        if t in _NATIVE or rest or not isinstance(other, numbers.Number):
            return method(self, other, *rest)
        if isinstance(other, int) and getattr(t, mirror, None) is getattr(int, mirror, None):
            return method(self, base_value(other))  # (int's own slot: never the subclass's __int__)
        value = concrete(self)
        return py(other, value) if reflected else py(value, other)

    wrapper.__name__ = wrapper.__qualname__ = dunder
    return wrapper


def _install_foreign_operands() -> None:
    for name in _PY_BINARY:
        for reflected in (False, True) if name not in _COMPARISONS.values() else (False,):
            dunder = f"__{'r' if reflected else ''}{name}__"
            setattr(NumberProxy, dunder, _foreign_aware(name, getattr(NumberProxy, dunder), reflected))


_install_arithmetic()
_install_int_attributes()
_install_pinning_fallbacks()
_install_foreign_operands()
proxies.add_tracing_patch(math, "sqrt", sqrt)
proxies.add_tracing_patch(builtins, "max", _extremum(builtins.max, "sym_max"))
proxies.add_tracing_patch(builtins, "min", _extremum(builtins.min, "sym_min"))
proxies.add_tracing_patch(builtins, "len", _traced_len)
