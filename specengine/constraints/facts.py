"""Cheap proofs from recorded constraints, tried before z3 (issue 26).

`Facts` holds what the symbol ranges and the constraints recorded so far say, in two forms a proof can use
without a solver:

- *bounds of atoms* (a symbol, `s2//4`, `min(a, b)`, ...): a fact linear in one atom (`min(s2//4, s3//4) >= 5`)
  bounds it, and the bound flows down to what it is made of (`s2//4 >= 5`, so `s2 >= 20`);
- *atoms known to be nonzero* (`s0*A*B != 0` makes `s0`, `A` and `B` nonzero), which license exact
  division by them.

A query is decided by interval bounds over these, first as written, then in a *canonical form* where
`y % c` is `y - c*(y//c)` (so `u + (-u)%4` becomes `-4*((-u)//4)`) and a division by a product known to be
nonzero cancels their common factors and splits off the exact quotient
(`(64*s0*s1 + 64*s0*s4) % (64*s0)` is `0` when `s0 != 0`). Every rewrite is an identity wherever the facts
hold, so a decision is implied by them: sound. Where nothing decides, the caller asks z3.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from specengine.constraints import expr as E
from specengine.constraints.expr import _INF, Expr, Interval
from specengine.constraints.intervals import _bounds, _decide

Bound = tuple  # (lo, hi): ints, or -inf/+inf floats where unbounded


class Facts:
    """Knowledge from `ranges` and the facts added (each true for every input the guards accept)."""

    def __init__(self, ranges: Mapping[str, Interval]):
        self.ranges = ranges
        self.atoms: dict[Expr, Bound] = {}  # atom -> bounds the facts imply (tighter than its own interval)
        self.nonzero: set[Expr] = set()  # atoms the facts make nonzero
        self.known: set[Expr] = set()  # normalized facts, as added and in canonical form
        self.residues: dict[Expr, tuple[int, int]] = {}  # atom -> (r, m): the facts make atom % m == r
        self._canon: dict[Expr, Expr] = {}  # memo of `canon` (cleared when a fact is added)

    def add(self, b: Expr) -> None:
        """Take the boolean `b` as a fact."""
        for n in dict.fromkeys((E.normalize(b), E.normalize(self.canon(b)))):
            for part in n.args if n.op == "and" else (n,):
                self.known.add(part)
                if part.op == "rel":
                    self._learn(part.args[0], part.args[1])
        self._canon.clear()

    def decide(self, b: Expr, splits: int = 2) -> bool | None:
        """The truth value of `b` that the facts imply, or None (undecided). Where an `if` condition is undecided, the
        two cases are decided apart (`splits` deep): the same answer in both is implied."""
        known = self._decide(E.normalize(b))
        if known is not None:
            return known
        n = E.normalize(self.canon(b))
        known = self._decide(n)
        if known is not None or splits == 0:
            return known
        conds = [x.args[0] for x in _walk(n) if x.op == "if"]  # innermost first: its cases fold the ones around it
        cond = next((c for c in conds if not any(y.op == "if" for y in _walk(c))), None)
        if cond is None:
            return None
        cases = []
        for case in (cond, E.not_(cond)):
            facts = self.copy()
            facts.add(case)
            cases.append(facts.decide(n, splits - 1))
            if cases[-1] is None:
                return None
        return cases[0] if cases[0] == cases[1] else None

    def copy(self) -> Facts:
        out = Facts(self.ranges)
        out.atoms, out.nonzero, out.known = dict(self.atoms), set(self.nonzero), set(self.known)
        out.residues = dict(self.residues)
        return out

    def _decide(self, n: Expr) -> bool | None:
        if n.op == "bconst":
            return n.value
        known = self._lookup(n)
        return known if known is not None else _decide(n, self.ranges, dict(self.atoms))

    def _lookup(self, n: Expr) -> bool | None:
        if n in self.known:
            return True
        if E.normalize(E.not_(n)) in self.known:
            return False
        if n.op in ("and", "or"):
            parts = [self._lookup(x) for x in n.args]
            absorbing = n.op == "or"
            if absorbing in parts:
                return absorbing
            return not absorbing if all(p is not None for p in parts) else None
        return None

    # -------------------------------------------------------------------------------------------------------
    # Bounds and nonzero atoms learned from one normalized relation `p op 0`.

    def _learn(self, op: str, p: Expr) -> None:
        terms = E._terms(p)
        c = terms.pop((), 0)
        if len(terms) != 1:
            return
        ((mono, k),) = terms.items()
        lo, hi = -_INF, _INF  # bounds of the monomial's value
        if op == ">=":  # k*m + c >= 0
            if k > 0:
                lo = -((c) // k)  # m >= ceil(-c/k)
            else:
                hi = c // -k  # m <= floor(c/-k)
        elif op == "==":
            if c % k:
                return
            lo = hi = -c // k
        elif op == "!=" and c == 0:
            self._nonzero_monomial(mono)
            return
        else:
            return
        if lo > 0 or hi < 0:
            self._nonzero_monomial(mono)
        if len(mono) == 1:
            self._tighten(mono[0], lo, hi)

    def _nonzero_monomial(self, mono: tuple) -> None:
        for atom in mono:
            self.nonzero.add(atom)
            lo, hi = self.bounds(atom)
            if lo == 0:
                self._tighten(atom, 1, _INF)
            elif hi == 0:
                self._tighten(atom, -_INF, -1)

    def bounds(self, e: Expr) -> Bound:
        """Bounds of the int expression `e` under the ranges and facts (-inf/+inf: unbounded)."""
        return _bounds(e, self.ranges, dict(self.atoms))

    def _tighten(self, atom: Expr, lo: float, hi: float, depth: int = 0) -> None:
        """Record `lo <= atom <= hi` and pass it down to what `atom` is made of."""
        old_lo, old_hi = self.bounds(atom)
        lo, hi = max(lo, old_lo), min(hi, old_hi)
        if (lo, hi) == (old_lo, old_hi) or lo > hi or depth > 8:
            return  # nothing new (or contradictory facts: the hints satisfy them, so this cannot happen)
        self.atoms[atom] = (lo, hi)
        if lo > 0 or hi < 0:
            self.nonzero.add(atom)
        op, args = atom.op, atom.args
        if op == "mod" and lo == hi and args[1].op == "const" and args[1].value > 0:
            self._learn_residue(args[0], lo, args[1].value)
        if op == "min" and lo > -_INF:
            for x in args:
                self._tighten_linear(x, lo, _INF, depth)
        elif op == "max" and hi < _INF:
            for x in args:
                self._tighten_linear(x, -_INF, hi, depth)
        elif op == "floordiv" and args[1].op == "const" and args[1].value > 0:
            c = args[1].value
            self._tighten_linear(args[0], lo * c if lo > -_INF else lo, hi * c + c - 1 if hi < _INF else hi, depth)

    def _tighten_linear(self, x: Expr, lo: float, hi: float, depth: int) -> None:
        """`lo <= x <= hi` for `x = k*atom + c`: bounds of that atom (other shapes of `x` teach nothing)."""
        terms = E._terms(x)
        c = terms.pop((), 0)
        if len(terms) != 1:
            return
        ((mono, k),) = terms.items()
        if len(mono) != 1:
            return
        lo, hi = (lo - c if lo > -_INF else lo), (hi - c if hi < _INF else hi)
        if k < 0:
            lo, hi, k = (-hi if hi < _INF else -_INF), (-lo if lo > -_INF else _INF), -k
        new_lo = -(-lo // k) if lo > -_INF else lo  # ceil(lo/k)
        new_hi = hi // k if hi < _INF else hi
        self._tighten(mono[0], new_lo, new_hi, depth + 1)

    def _learn_residue(self, y: Expr, r: int, m: int) -> None:
        """`y % m == r`: for `y = ±atom + c`, the residue of that atom."""
        terms = E._terms(y)
        c = terms.pop((), 0)
        if len(terms) == 1:
            ((mono, k),) = terms.items()
            if len(mono) == 1 and k in (1, -1):
                atom, r = mono[0], ((r - c) * k) % m
                old = self.residues.get(atom)
                if old is not None and old[1] >= m:
                    return
                self.residues[atom] = (r, m)
                divisor = atom.args[1].value if atom.op in ("mod", "floordiv") and atom.args[1].op == "const" else 0
                if atom.op == "mod" and divisor % m == 0:
                    self._learn_residue(atom.args[0], r, m)  # z % (j*m) == r (mod m): z == r (mod m)
                elif atom.op == "floordiv" and divisor > 0 and (rz := self.residue(atom.args[0], divisor)) is not None:
                    self._learn_residue(atom.args[0], divisor * r + rz, divisor * m)  # z//c == r (m), z == rz (c)

    def residue(self, y: Expr, m: int) -> int | None:
        """`y % m` when the facts decide it (each term a multiple of `m` or an atom of known residue), else None."""
        total = 0
        for mono, k in E._terms(y).items():
            if k % m == 0:
                continue
            if not mono:
                total += k
                continue
            known = self.residues.get(mono[0]) if len(mono) == 1 else None
            if known is None or (k * known[1]) % m:
                return None
            total += k * known[0]
        return total % m

    # -------------------------------------------------------------------------------------------------------
    # The canonical form.

    def canon(self, e: Expr) -> Expr:
        """`e` rewritten for proofs: equal to `e` wherever the facts hold (see the module docstring)."""
        out = self._canon.get(e)
        if out is None:
            out = self._pinned(e) or self._rebuild(e)
            out = self._canon[e] = self._pinned(out) or out
        return out

    def _pinned(self, e: Expr) -> Expr | None:
        """The constant that the facts pin the int atom `e` to, if any."""
        lo, hi = self.atoms.get(e, (None, None))
        return E.const(lo) if lo is not None and lo == hi and not e.is_bool else None

    def _rebuild(self, x: Expr) -> Expr:
        op, args = x.op, x.args
        if op in ("const", "bconst", "sym"):
            return x
        if op == "poly":
            acc: dict[tuple, int] = {(): args[0]}
            for mono, k in args[1]:
                t: dict[tuple, int] = {(): k}
                for a in mono:
                    t = E._mul_terms(t, E._terms(self.canon(a)))
                acc = E._add_terms(acc, t)
            return E._from_terms(acc)
        if op == "rel":
            return E._rel(args[0], self.canon(args[1]), self.canon(args[2]))
        if op in ("floordiv", "mod"):
            return self._divide(op, self.canon(args[0]), self.canon(args[1]))
        if op in ("min", "max"):
            a, b = self.canon(args[0]), self.canon(args[1])
            (al, ah), (bl, bh) = self.bounds(a), self.bounds(b)
            if op == "min":
                return a if ah <= bl else b if bh <= al else E.minimum(a, b)
            return a if al >= bh else b if bl >= ah else E.maximum(a, b)
        if op == "if":
            cond = self.canon(args[0])
            known = self.decide(cond)
            if known is not None:
                return self.canon(args[1] if known else args[2])
            return E.ite(cond, self.canon(args[1]), self.canon(args[2]))
        return E._CONSTRUCTORS[op](*(self.canon(a) for a in args))

    def _divide(self, op: str, a: Expr, b: Expr) -> Expr:
        """`a // b` or `a % b` (both canonical): constant divisors through the constructors (a `%` as `a - c*(a//c)`),
        and a divisor known nonzero loses the factors it shares with `a`, then splits off the exact quotient."""
        if b.op == "const":
            c = b.value
            if c > 0:  # a = y + d with y % c known: a // c = y // c + (y % c + d) // c, a % c = (y % c + d) % c
                d = E._terms(a).get((), 0)
                y = E.sub(a, d)
                r = self.residue(y, c)
                if r is not None and op == "mod":
                    return E.const((r + d) % c)
                if r is not None:
                    known = self.residues.get(y, (0, 0))
                    if known[1] > c and known[1] % c == 0:  # y == known[0] (mod m): y//c = (m/c)*(y//m) + ...
                        r, m = known
                        return E.add(E.mul(m // c, E.floordiv(y, m)), (r + d) // c)
                    return E.add(E.floordiv(y, c), (r + d) // c)
            if op == "mod" and c != 0:
                return E.sub(a, E.mul(c, E.floordiv(a, c)))
            return (E.floordiv if op == "floordiv" else E.mod)(a, b)
        if not self.is_nonzero(b):
            return (E.floordiv if op == "floordiv" else E.mod)(a, b)
        ta, tb = E._terms(a), E._terms(b)
        g = _content([*ta.items(), *tb.items()])
        if g != ((), 1):
            ta, tb = _divide_terms(ta, g), _divide_terms(tb, g)
            a, b = E._from_terms(ta), E._from_terms(tb)
            if op == "mod":
                return E.mul(_monomial(g), self._divide("mod", a, b))
            if b.op == "const":
                return self._divide(op, a, b)
        if len(tb) == 1 and () not in tb:  # a monomial divisor: split `a` as q*b + r
            ((mono, k),) = tb.items()
            q, r = {}, {}
            for m, v in ta.items():
                rest = _without(m, mono)
                if rest is not None and v % k == 0:
                    q[rest] = q.get(rest, 0) + v // k
                else:
                    r[m] = v
            if q:
                rem = E._from_terms(r)
                if op == "mod":
                    return E.mod(rem, b) if r else E.const(0)
                return E.add(E._from_terms(q), E.floordiv(rem, b)) if r else E._from_terms(q)
        return (E.floordiv if op == "floordiv" else E.mod)(a, b)

    def is_nonzero(self, e: Expr) -> bool:
        """Whether the facts make the int expression `e` nonzero."""
        lo, hi = self.bounds(e)
        if lo > 0 or hi < 0:
            return True
        terms = E._terms(e)
        if len(terms) == 1 and () not in terms:
            ((mono, k),) = terms.items()
            if k != 0 and all(a in self.nonzero or not _has_zero(self.bounds(a)) for a in mono):
                return True
        return E.normalize(E.ne(e, 0)) in self.known


def _walk(e: Expr) -> list[Expr]:
    """The nodes of `e`, outermost first (each once)."""
    out, seen, stack = [], set(), [e]
    while stack:
        x = stack.pop()
        if x in seen:
            continue
        seen.add(x)
        out.append(x)
        if x.op == "poly":
            stack.extend(a for mono, _ in reversed(x.args[1]) for a in reversed(mono))
        elif x.op == "rel":
            stack.extend((x.args[2], x.args[1]))
        elif x.op not in ("const", "bconst", "sym"):
            stack.extend(reversed(x.args))
    return out


def _has_zero(b: Bound) -> bool:
    return b[0] <= 0 <= b[1]


def _content(terms: Iterable[tuple[tuple, int]]) -> tuple[tuple, int]:
    """The monomial common to every term (atoms with multiplicity) and the gcd of the coefficients (positive)."""
    items = [(m, k) for m, k in terms if k]
    if not items:
        return (), 1
    common = list(items[0][0])
    for m, _ in items[1:]:
        rest = list(m)
        common = [x for x in common if x in rest and not rest.remove(x)]
    return tuple(common), math.gcd(*(k for _, k in items))


def _without(mono: tuple, part: tuple) -> tuple | None:
    """`mono` with the atoms of `part` removed (multiset), or None when `part` does not divide it."""
    rest = list(mono)
    for x in part:
        if x not in rest:
            return None
        rest.remove(x)
    return tuple(rest)


def _divide_terms(terms: dict[tuple, int], g: tuple[tuple, int]) -> dict[tuple, int]:
    mono, k = g
    out: dict[tuple, int] = {}
    for m, v in terms.items():
        if v:
            rest = _without(m, mono)
            assert rest is not None and v % k == 0
            out[rest] = v // k
    return out


def _monomial(g: tuple[tuple, int]) -> Expr:
    mono, k = g
    return E._from_terms({mono: k}) if mono else E.const(k)
