"""Sound interval bounds of symbolic int expressions, and decisions they prove.

Internally an endpoint is an int or the float -inf/+inf (unbounded); never NaN.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from specengine.constraints.expr import _INF, BoolLike, Expr, Interval, IntLike, _bool, _int, normalize


def _xadd(a: float, b: float) -> float:
    return a if isinstance(a, float) else b if isinstance(b, float) else a + b


def _xmul(a: float, b: float) -> float:
    if a == 0 or b == 0:
        return 0
    if isinstance(a, float) or isinstance(b, float):
        return _INF if (a > 0) == (b > 0) else -_INF
    return a * b


def _ipow(x: tuple, n: int) -> tuple:
    lo, hi = x
    a, b = ((_INF if v > 0 or n % 2 == 0 else -_INF) if isinstance(v, float) else v**n for v in x)
    if n % 2 == 1 or lo >= 0:
        return a, b
    return (b, a) if hi <= 0 else (0, max(a, b))


def _xfloordiv(x: float, y: float) -> float:
    """``x // y`` for ``y >= 1``, taking limits at infinite endpoints."""
    if isinstance(x, float):
        return x
    if isinstance(y, float):
        return 0 if x >= 0 else -1  # x // y for every large enough y
    return x // y


def _idiv(a: tuple, b: tuple) -> tuple:
    (al, ah), (bl, bh) = a, b
    if bl > 0:
        # floor(x/y) is monotone in each argument on this box, so the corners (or their limits) bound it
        cands = [_xfloordiv(x, y) for x in a for y in b]
        return min(cands), max(cands)
    if bh < 0:
        return _idiv((-ah, -al), (-bh, -bl))
    m = max(abs(al), abs(ah))  # |a // b| <= |a| whenever b != 0
    return -m, m


def _imod(a: tuple, b: tuple) -> tuple:
    (al, ah), (bl, bh) = a, b
    if bl > 0:
        if al >= 0 and ah < bl:
            return a
        finite = not isinstance(al, float) and not isinstance(ah, float)
        if bl == bh and finite and al // bl == ah // bl:
            return al % bl, ah % bl
        hi = _xadd(bh, -1)
        return 0, min(hi, ah) if al >= 0 else hi
    if bh < 0:
        lo, hi = _imod((-ah, -al), (-bh, -bl))
        return -hi, -lo
    m = max(_xadd(max(abs(bl), abs(bh)), -1), 0)  # |a % b| < |b|
    return -m, m


def _bounds(e: Expr, ranges: Mapping[str, Interval], memo: dict) -> tuple:
    if e in memo:
        return memo[e]
    op, args = e.op, e.args
    if op == "const":
        r = args[0], args[0]
    elif op == "sym":
        lo, hi = ranges.get(args[0], (None, None))
        r = -_INF if lo is None else lo, _INF if hi is None else hi
    elif op == "poly":
        r = args[0], args[0]
        for mono, k in args[1]:
            iv = (k, k)
            for atom, group in itertools.groupby(mono):
                iv = _imul(iv, _ipow(_bounds(atom, ranges, memo), len(list(group))))
            r = _xadd(r[0], iv[0]), _xadd(r[1], iv[1])
    elif op == "if" and (known := _decide(args[0], ranges, memo)) is not None:
        r = _bounds(args[1] if known else args[2], ranges, memo)
    else:
        (al, ah), (bl, bh) = (_bounds(x, ranges, memo) for x in args[-2:])
        if op in ("min", "max"):
            f = min if op == "min" else max
            r = f(al, bl), f(ah, bh)
        elif op == "if":
            r = min(al, bl), max(ah, bh)
        else:
            r = (_idiv if op == "floordiv" else _imod)((al, ah), (bl, bh))
    memo[e] = r
    return r


def _imul(x: tuple, y: tuple) -> tuple:
    cands = [_xmul(a, b) for a in x for b in y]
    return min(cands), max(cands)


def _decide(b: Expr, ranges: Mapping[str, Interval], memo: dict) -> bool | None:
    if b.op == "bconst":
        return b.args[0]
    if b.op == "not":
        r = _decide(b.args[0], ranges, memo)
        return None if r is None else not r
    if b.op in ("and", "or"):
        results = [_decide(x, ranges, memo) for x in b.args]
        absorbing = b.op == "or"  # the operand value that decides the whole junction
        if any(r is absorbing for r in results):
            return absorbing
        return None if any(r is None for r in results) else not absorbing
    n = normalize(b)
    if n.op != "rel":
        return _decide(n, ranges, memo)
    op, p, _ = n.args
    lo, hi = _bounds(p, ranges, memo)
    if op == ">=":
        return True if lo >= 0 else False if hi < 0 else None
    is_eq = True if lo == hi == 0 else False if lo > 0 or hi < 0 else None
    return is_eq if is_eq is None or op == "==" else not is_eq


def bounds(e: IntLike, ranges: Mapping[str, Interval]) -> Interval:
    """Sound ``(lo, hi)`` bounds of int expression ``e`` given symbol ranges; ``None`` means unbounded."""
    lo, hi = _bounds(_int(e), ranges, {})
    return (None if isinstance(lo, float) else lo, None if isinstance(hi, float) else hi)


def decide_by_bounds(b: BoolLike, ranges: Mapping[str, Interval]) -> bool | None:
    """True/False when interval bounds prove the boolean ``b`` either way, else None."""
    return _decide(_bool(b), ranges, {})
