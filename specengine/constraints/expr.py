"""Canonical, hash-consed symbolic integer and boolean expressions.

Symbols stand for tensor sizes and Python int inputs of a traced function. Every constructor returns a
canonical node, and structurally equal nodes are the same object, so Exprs are compared with ``is``.
Integer division and modulo follow Python's ``//`` and ``%`` (floor semantics).
"""

from __future__ import annotations

import itertools
import math
import operator
import re
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from specengine.constraints.expr_print import to_python

Interval = tuple[int | None, int | None]

# Sort rank of each op; the first element of every sort_key, so keys of different ops never compare deeper.
_RANK = {"const": 0, "sym": 1, "floordiv": 2, "mod": 3, "min": 4, "max": 5, "if": 6, "poly": 7, "bconst": 8}
_RANK.update({"rel": 9, "not": 10, "and": 11, "or": 12})
_BOOL_OPS = frozenset({"bconst", "rel", "not", "and", "or"})
_RELNAMES = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}
_RELOPS: dict[str, Callable[[Any, Any], Any]] = {op: getattr(operator, f) for op, f in _RELNAMES.items()}
_NEGATED = {"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}
_SYM_RE = re.compile(r"(.*?)(\d+)")
_INF = math.inf

# Hash-consing table: (op, args) -> the unique live node; args hold canonical children, compared by identity.
_TABLE: weakref.WeakValueDictionary[tuple, Expr] = weakref.WeakValueDictionary()
_LOCK = threading.Lock()
_REFS = _TABLE.data  # its weak references, read directly on a hit (WeakValueDictionary.get is a Python method)


def _operator(fn: str, reflected: bool = False) -> Callable[[Expr, Any], Any]:
    """An Expr arithmetic dunder calling the module-level constructor named ``fn``; ints accepted."""

    def method(self: Expr, other: Any) -> Any:
        if type(other) is not Expr and not isinstance(other, int):  # `type() is` first: Expr has no subclasses
            return NotImplemented
        return globals()[fn](other, self) if reflected else globals()[fn](self, other)

    return method


class Expr:
    """An immutable canonical expression node; structurally equal nodes are the same object."""

    __slots__ = ("__weakref__", "_free", "_norm", "args", "is_bool", "op", "sort_key")

    op: str
    args: tuple
    is_bool: bool
    sort_key: tuple

    def __new__(cls, *args: Any, **kwargs: Any) -> Expr:  # noqa: PYI034
        raise TypeError("Expr nodes are created with the constructors of specengine.constraints.expr")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Expr is immutable")

    def __copy__(self) -> Expr:
        return self

    def __deepcopy__(self, memo: dict) -> Expr:
        return self

    def __reduce__(self) -> tuple:
        return (_intern, (self.op, self.args))

    @property
    def is_const(self) -> bool:
        """Whether this is an integer or boolean constant."""
        return self.op in ("const", "bconst")

    @property
    def value(self) -> int | bool:
        """The Python value of a constant; raises ValueError for anything else."""
        if not self.is_const:
            raise ValueError(f"{self!r} is not a constant")
        return self.args[0]

    def free_symbols(self) -> frozenset[str]:
        """Names of the symbols occurring in this expression."""
        if self._free is None:
            if self.op == "sym":
                free = frozenset(self.args)
            else:
                free = frozenset().union(*(c.free_symbols() for c in _children(self)))
            object.__setattr__(self, "_free", free)
        return self._free

    def eval(self, env: Mapping[str, int], memo: dict | None = None) -> int | bool:
        """Evaluate with Python semantics (``if``/``and``/``or`` are lazy, in printed order). `memo` (node -> value)
        may be kept across calls with the same, unchanged `env`."""
        return _eval(self, env, {} if memo is None else memo)

    def subs(self, mapping: Mapping[str, IntLike], memo: dict | None = None) -> Expr:
        """Substitute symbols by expressions or ints, re-canonicalising (constants fold). `memo` (node -> result)
        may be kept across calls with the same, unchanged `mapping`: shared subtrees are then rebuilt once."""
        free = self.free_symbols()
        if not any(s in mapping for s in free):  # not isdisjoint(mapping): that walks the whole mapping
            return self

        def leaf(s: Expr) -> Expr:  # converts only the symbols that occur (no per-call copy of the mapping)
            v = mapping.get(s.args[0])
            return s if v is None else _int(v)

        return _rebuild(self, leaf, {} if memo is None else memo)

    def to_python(self, name: Callable[[str], str] = str) -> str:
        """Python source for this expression; ``name`` maps a symbol name to the text printed for it."""
        return to_python(self, name)

    def __str__(self) -> str:
        return self.to_python()

    def __repr__(self) -> str:
        return f"Expr({self.to_python()})"

    __add__ = _operator("add")
    __radd__ = _operator("add", reflected=True)
    __sub__ = _operator("sub")
    __rsub__ = _operator("sub", reflected=True)
    __mul__ = _operator("mul")
    __rmul__ = _operator("mul", reflected=True)
    __floordiv__ = _operator("floordiv")
    __rfloordiv__ = _operator("floordiv", reflected=True)
    __mod__ = _operator("mod")
    __rmod__ = _operator("mod", reflected=True)

    def __neg__(self) -> Expr:
        return neg(self)


IntLike = int | Expr
BoolLike = bool | Expr


def _children(e: Expr) -> tuple[Expr, ...]:
    if e.op in ("const", "bconst", "sym"):
        return ()
    if e.op == "poly":
        return tuple(a for mono, _ in e.args[1] for a in mono)
    if e.op == "rel":
        return e.args[1:]
    return e.args


def _mono_key(mono: tuple[Expr, ...]) -> tuple:
    return tuple(a.sort_key for a in mono)


def _make_key(op: str, args: tuple) -> tuple:
    rank = _RANK[op]
    if op in ("const", "bconst"):
        return (rank, int(args[0]))
    if op == "sym":
        m = _SYM_RE.fullmatch(args[0])
        return (rank, m.group(1), int(m.group(2)), args[0]) if m else (rank, args[0], -1, args[0])
    if op == "poly":
        return (rank, tuple((_mono_key(mono), k) for mono, k in args[1]), args[0])
    if op == "rel":
        return (rank, args[1].sort_key, args[2].sort_key, args[0])
    return (rank, *(a.sort_key for a in args))


def _intern(op: str, args: tuple) -> Expr:
    """The unique node for ``(op, args)``; callers guarantee ``args`` is already canonical."""
    key = (op, args)
    ref = _REFS.get(key)  # a hit needs no lock; a miss (or a dead reference) re-checks under it
    e = ref() if ref is not None else None
    if e is not None:
        return e
    with _LOCK:
        e = _TABLE.get(key)
        if e is None:
            e = object.__new__(Expr)
            fields = (("op", op), ("args", args), ("is_bool", op in _BOOL_OPS))
            for slot, val in (*fields, ("sort_key", _make_key(op, args)), ("_free", None), ("_norm", None)):
                object.__setattr__(e, slot, val)
            _TABLE[key] = e
    return e


# ---------------------------------------------------------------------------------------------------------
# Integer constructors. Internally a polynomial is a dict {monomial: coeff} with () as the constant monomial.


def const(v: int) -> Expr:
    """The integer constant ``v``."""
    e = _SMALL.get(v) if type(v) is int else None
    if e is None:
        e = _intern("const", (int(operator.index(v)),))
        if type(v) is int and -1024 <= v <= 65536:
            _SMALL[v] = e  # (held: the constants of sizes and strides are made again and again)
    return e


_SMALL: dict[int, Expr] = {}


def sym(name: str) -> Expr:
    """The integer symbol ``name``."""
    if not isinstance(name, str) or not name:
        raise TypeError(f"symbol name must be a non-empty str, got {name!r}")
    return _intern("sym", (name,))


def as_expr(x: int | bool | Expr) -> Expr:
    """``x`` as an Expr: bools become TRUE/FALSE, ints become constants."""
    if type(x) is Expr:  # Expr has no subclasses (and tracing makes isinstance a Python function)
        return x
    if isinstance(x, bool):
        return TRUE if x else FALSE
    return const(x)


def _int(x: IntLike) -> Expr:
    e = x if type(x) is Expr else const(x)  # const raises TypeError for non-integers
    if e.is_bool:
        raise TypeError(f"expected an int or integer expression, got {x!r}")
    return e


def _bool(x: BoolLike) -> Expr:
    if type(x) is Expr and x.is_bool:
        return x
    if not isinstance(x, (bool, Expr)) or not as_expr(x).is_bool:
        raise TypeError(f"expected a bool or boolean expression, got {x!r}")
    return as_expr(x)


def _terms(e: Expr) -> dict[tuple, int]:
    if e.op == "const":
        return {(): e.args[0]}
    if e.op == "poly":
        d = dict(e.args[1])
        d[()] = e.args[0]
        return d
    return {(e,): 1}


def _from_terms(d: dict[tuple, int]) -> Expr:
    c = d.get((), 0)
    items = sorted(((m, k) for m, k in d.items() if k and m), key=lambda t: _mono_key(t[0]))
    if not items:
        return const(c)
    if c == 0 and len(items) == 1 and items[0][1] == 1 and len(items[0][0]) == 1:
        return items[0][0][0]
    return _intern("poly", (c, tuple(items)))


def _add_terms(a: dict[tuple, int], b: dict[tuple, int], scale: int = 1) -> dict[tuple, int]:
    out = dict(a)
    for m, k in b.items():
        out[m] = out.get(m, 0) + scale * k
    return out


def _mul_terms(a: dict[tuple, int], b: dict[tuple, int]) -> dict[tuple, int]:
    out: dict[tuple, int] = {}
    for (ma, ka), (mb, kb) in itertools.product(a.items(), b.items()):
        m = tuple(sorted(ma + mb, key=operator.attrgetter("sort_key")))
        out[m] = out.get(m, 0) + ka * kb
    return out


def add(a: IntLike, b: IntLike) -> Expr:
    """``a + b``."""
    return _from_terms(_add_terms(_terms(_int(a)), _terms(_int(b))))


def sub(a: IntLike, b: IntLike) -> Expr:
    """``a - b``."""
    return _from_terms(_add_terms(_terms(_int(a)), _terms(_int(b)), -1))


def neg(a: IntLike) -> Expr:
    """``-a``."""
    return _from_terms({m: -k for m, k in _terms(_int(a)).items()})


def mul(a: IntLike, b: IntLike) -> Expr:
    """``a * b`` (products are multiplied out)."""
    return _from_terms(_mul_terms(_terms(_int(a)), _terms(_int(b))))


def _split(d: dict[tuple, int], c: int) -> tuple[dict[tuple, int], dict[tuple, int]]:
    """Split ``d`` as ``c*q + r`` where r keeps the terms not divisible by ``c`` and a constant ``k % c``."""
    q: dict[tuple, int] = {(): d.get((), 0) // c}
    r: dict[tuple, int] = {(): d.get((), 0) % c}
    for m, k in d.items():
        if m:
            if k % c == 0:
                q[m] = k // c
            else:
                r[m] = k
    return q, r


def floordiv(a: IntLike, b: IntLike) -> Expr:
    """``a // b`` with Python floor semantics; division by a literal zero is kept symbolic."""
    a, b = _int(a), _int(b)
    if b.op != "const" or b.args[0] == 0:
        return _intern("floordiv", (a, b))
    c = b.args[0]
    q, r = _split(_terms(a), c)
    if any(q.values()):
        return add(_from_terms(q), floordiv(_from_terms(r), b))
    rest = _from_terms(r)
    if rest.op == "const":
        return const(rest.args[0] // c)
    g = math.gcd(c, *r.values())
    if g > 1:
        return floordiv(_from_terms({m: k // g for m, k in r.items()}), c // g)
    if rest.op == "floordiv" and c > 0 and rest.args[1].op == "const" and rest.args[1].args[0] > 0:
        return floordiv(rest.args[0], c * rest.args[1].args[0])
    return _intern("floordiv", (rest, b))


def exact_quotient(a: IntLike, b: IntLike) -> Expr | None:
    """``q`` where ``a == q*b`` as polynomials and ``b`` is one monomial (``c*x*y``), else None: then
    ``a // b == q`` and ``a % b == 0`` wherever ``b != 0`` (callers decide that first). A size ``-1`` of
    ``view(-1, h, t)`` is ``b*h*t // (h*t)``: this relates it back to ``b``."""
    a, b = _int(a), _int(b)
    divisor = [(m, k) for m, k in _terms(b).items() if k]
    if len(divisor) != 1 or not divisor[0][0]:
        return None
    (mono, c) = divisor[0]
    q: dict[tuple, int] = {}
    for m, k in _terms(a).items():
        if not k:
            continue
        rest = list(m)
        for x in mono:
            if x not in rest:
                return None
            rest.remove(x)
        if k % c:
            return None
        q[tuple(rest)] = k // c
    return _from_terms(q)


def mod(a: IntLike, b: IntLike) -> Expr:
    """``a % b`` with Python semantics (result has the divisor's sign)."""
    a, b = _int(a), _int(b)
    if b.op != "const" or b.args[0] == 0:
        return _intern("mod", (a, b))
    c = b.args[0]
    _, r = _split(_terms(a), c)
    rest = _from_terms(r)
    if rest.op == "const":
        return const(rest.args[0] % c)
    g = math.gcd(c, *r.values())
    if g > 1:
        return mul(g, mod(_from_terms({m: k // g for m, k in r.items()}), c // g))
    if rest.op == "mod" and rest.args[1] is b:
        return rest
    return _intern("mod", (rest, b))


def _minmax(op: str, a: IntLike, b: IntLike) -> Expr:
    a, b = _int(a), _int(b)
    d = sub(a, b)
    if d.op == "const":
        return a if (d.args[0] <= 0) == (op == "min") else b
    for x, y in ((a, b), (b, a)):  # max(c, max(d, e)) = max(max(c, d), e) for constants c and d
        if x.op == "const" and y.op == op and (inner := next((z for z in y.args if z.op == "const"), None)):
            other = y.args[1] if y.args[0] is inner else y.args[0]
            return _minmax(op, _minmax(op, x, inner), other)
    if b.sort_key < a.sort_key:
        a, b = b, a
    return _intern(op, (a, b))


def minimum(a: IntLike, b: IntLike) -> Expr:
    """``min(a, b)``."""
    return _minmax("min", a, b)


def maximum(a: IntLike, b: IntLike) -> Expr:
    """``max(a, b)``."""
    return _minmax("max", a, b)


def ite(cond: BoolLike, a: IntLike, b: IntLike) -> Expr:
    """``a if cond else b``."""
    cond, a, b = _bool(cond), _int(a), _int(b)
    if cond.op == "bconst":
        return a if cond.args[0] else b
    if a is b:
        return a
    if cond.op == "not":
        return ite(cond.args[0], b, a)
    if cond.op == "rel" and cond.args[0] == "!=":
        return ite(_intern("rel", ("==", cond.args[1], cond.args[2])), b, a)
    binding = _binding(cond)
    if binding is not None:  # `a if x == v else b` is `b` when both branches agree at x = v: If(x == 1, 1, x) -> x
        x, v = binding
        if a.subs({x: v}) is b.subs({x: v}):
            return b
    return _intern("if", (cond, a, b))


def _binding(cond: Expr) -> tuple[str, Expr] | None:
    """For `x == e` (a symbol on one side, a constant or another symbol on the other): (x, e)."""
    if cond.op != "rel" or cond.args[0] != "==":
        return None
    lhs, rhs = cond.args[1], cond.args[2]
    if lhs.op == "sym" and (rhs.op == "const" or (rhs.op == "sym" and rhs is not lhs)):
        return lhs.args[0], rhs
    if rhs.op == "sym" and lhs.op == "const":
        return rhs.args[0], lhs
    return None


# ---------------------------------------------------------------------------------------------------------
# Boolean constructors.

TRUE = _intern("bconst", (True,))
FALSE = _intern("bconst", (False,))


def _rel(op: str, a: IntLike, b: IntLike) -> Expr:
    a, b = _int(a), _int(b)
    d = sub(a, b)
    if d.op == "const":
        return TRUE if _RELOPS[op](d.args[0], 0) else FALSE
    return _intern("rel", (op, a, b))


def _relation(op: str) -> Callable[[IntLike, IntLike], Expr]:
    def make(a: IntLike, b: IntLike) -> Expr:
        return _rel(op, a, b)

    make.__name__ = make.__qualname__ = _RELNAMES[op]
    make.__doc__ = f"``a {op} b`` (keeps the operator and sides for display)."
    return make


eq, ne, lt, le, gt, ge = map(_relation, _RELNAMES)


def not_(x: BoolLike) -> Expr:
    """``not x``; relations flip their operator and double negations cancel."""
    x = _bool(x)
    if x.op == "bconst":
        return FALSE if x.args[0] else TRUE
    if x.op == "not":
        return x.args[0]
    if x.op == "rel":
        return _intern("rel", (_NEGATED[x.args[0]], x.args[1], x.args[2]))
    return _intern("not", (x,))


def _junction(op: str, xs: tuple[BoolLike, ...]) -> Expr:
    unit = op == "and"  # the identity element of the junction; its negation absorbs everything
    items: dict[Expr, None] = {}
    for x in map(_bool, xs):
        if x.op == "bconst":
            if x.args[0] != unit:
                return _bool(not unit)
            continue
        items.update(dict.fromkeys(x.args if x.op == op else (x,)))
    if any(not_(x) in items for x in items):
        return _bool(not unit)
    if len(items) <= 1:
        return next(iter(items), _bool(unit))
    return _intern(op, tuple(sorted(items, key=operator.attrgetter("sort_key"))))


def and_(*xs: BoolLike) -> Expr:
    """Conjunction of any number of boolean operands (flattened, deduplicated, sorted)."""
    return _junction("and", xs)


def or_(*xs: BoolLike) -> Expr:
    """Disjunction of any number of boolean operands (flattened, deduplicated, sorted)."""
    return _junction("or", xs)


def normalize(b: BoolLike) -> Expr:
    """Canonical equivalent of ``b``: relations become ``p >= 0``, ``p == 0`` or ``p != 0``; no ``not``."""
    b = _bool(b)
    if b._norm is None:
        object.__setattr__(b, "_norm", _normalize(b))
    return b._norm


def _normalize(b: Expr) -> Expr:
    if b.op == "bconst":
        return b
    if b.op == "rel":
        return _normalize_rel(*b.args)
    if b.op == "not":
        x = b.args[0]
        if x.op in ("and", "or"):
            dual = or_ if x.op == "and" else and_
            return dual(*(normalize(not_(y)) for y in x.args))
        return normalize(not_(x))
    return _junction(b.op, tuple(normalize(y) for y in b.args))


def _normalize_rel(op: str, lhs: Expr, rhs: Expr) -> Expr:
    d = _terms(sub(lhs, rhs))
    if op in ("<", "<="):
        d = {m: -k for m, k in d.items()}
    c = d.pop((), 0) - (op in ("<", ">"))  # over the integers a > b <=> a - b - 1 >= 0
    kind = op if op in ("==", "!=") else ">="
    if not d:
        return _rel(kind, c, 0)
    g = math.gcd(*d.values())
    if kind != ">=" and c % g:
        return _bool(kind == "!=")
    sign = -1 if kind != ">=" and min(d.items(), key=lambda t: _mono_key(t[0]))[1] < 0 else 1
    d = {m: sign * k // g for m, k in d.items()}
    d[()] = sign * c // g  # floor is exact for ">=": q*g + c >= 0 <=> q + floor(c/g) >= 0 (g > 0)
    return _rel(kind, _from_terms(d), 0)


# ---------------------------------------------------------------------------------------------------------
# Evaluation and substitution. All traversals memoise per call on node identity, so shared subtrees cost once.

_PY_FNS = {"floordiv": operator.floordiv, "mod": operator.mod, "min": min, "max": max, "not": operator.not_}


def _eval(e: Expr, env: Mapping[str, int], memo: dict) -> Any:
    if e in memo:
        return memo[e]
    op, args = e.op, e.args
    if op in ("const", "bconst"):
        r = args[0]
    elif op == "sym":
        r = env[args[0]]
    elif op == "poly":
        r = args[0] + sum(k * math.prod(_eval(a, env, memo) for a in mono) for mono, k in args[1])
    elif op == "if":
        r = _eval(args[1] if _eval(args[0], env, memo) else args[2], env, memo)
    elif op in ("and", "or"):
        r = (all if op == "and" else any)(_eval(a, env, memo) for a in args)
    elif op == "rel":
        r = _RELOPS[args[0]](_eval(args[1], env, memo), _eval(args[2], env, memo))
    else:
        r = _PY_FNS[op](*(_eval(a, env, memo) for a in args))
    memo[e] = r
    return r


_CONSTRUCTORS = {"floordiv": floordiv, "mod": mod, "min": minimum, "max": maximum, "if": ite, "not": not_}
_CONSTRUCTORS.update({"and": and_, "or": or_})


def _rebuild(e: Expr, leaf: Callable[[Expr], Expr], memo: dict) -> Expr:
    """Rebuild ``e`` bottom-up through the canonical constructors, mapping each symbol with ``leaf``."""
    if e in memo:
        return memo[e]
    op, args = e.op, e.args
    if op in ("const", "bconst"):
        r = e
    elif op == "sym":
        r = leaf(e)
    elif op == "poly":
        acc: dict[tuple, int] = {(): args[0]}
        for mono, k in args[1]:
            t: dict[tuple, int] = {(): k}
            for a in mono:
                t = _mul_terms(t, _terms(_rebuild(a, leaf, memo)))
            acc = _add_terms(acc, t)
        r = _from_terms(acc)
    elif op == "rel":
        r = _rel(args[0], _rebuild(args[1], leaf, memo), _rebuild(args[2], leaf, memo))
    else:
        r = _CONSTRUCTORS[op](*(_rebuild(a, leaf, memo) for a in args))
    memo[e] = r
    return r


def divisors(e: Expr) -> list[Expr]:
    """The non-constant divisors of the ``//`` and ``%`` in ``e``, inner ones first (each once)."""
    out: list[Expr] = []

    def visit(x: Expr) -> None:
        for c in _children(x):
            visit(c)
        if x.op in ("floordiv", "mod") and not x.args[1].is_const and x.args[1] not in out:
            out.append(x.args[1])

    visit(e)
    return out
