"""Decisions on symbolic values during tracing.

A comparison is decided statically when it is implied (constant folding, value ranges, then z3 over the
constraints recorded so far, memoized). Only when undecided is it decided by the hint, and then the
decision is recorded as a constraint with its provenance.
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Any, Callable

from specengine.constraints import expr as E
from specengine.constraints.constraint import Constraint
from specengine.constraints.examples import Examples
from specengine.constraints.facts import Facts
from specengine.constraints.folding import simplify
from specengine.constraints.intervals import decide_by_bounds
from specengine.constraints.unbacked import Unbacked
from specengine.constraints.z3expr import check, new_solver, to_z3, z3_module
from specengine.errors import SpecEngineError
from specengine.provenance import Provenance

if TYPE_CHECKING:
    import z3

Ranges = dict[str, tuple[int | None, int | None]]


class _Hints(dict):
    """The example values of the symbols; every write (an unbacked symbol's stand-in, set or narrowed) forgets the
    values of the expressions evaluated on them."""

    def __init__(self, hints: dict[str, int]):
        super().__init__(hints)
        self.memo: dict[E.Expr, Any] = {}  # node -> value on these hints (shared by every evaluation)

    def _forget(name: str) -> Any:
        def method(self: _Hints, *args: Any, **kwargs: Any) -> Any:
            self.memo = {}
            return getattr(dict, name)(self, *args, **kwargs)

        method.__name__ = name
        return method

    __setitem__ = _forget("__setitem__")
    __delitem__ = _forget("__delitem__")
    __ior__ = _forget("__ior__")
    update = _forget("update")
    setdefault = _forget("setdefault")
    pop = _forget("pop")
    popitem = _forget("popitem")
    clear = _forget("clear")
    del _forget

    def eval(self, e: E.Expr) -> Any:
        """`e` at these values, memoised per node (conv sizes nest floor divisions that share their subterms)."""
        return e.eval(self, self.memo)


class Decider:
    """Decides boolean symbolic expressions and records the decisions that were not implied.

    Invariant: the hints satisfy every recorded constraint, so an implied fact can only be implied
    to hold with its hint value; one z3 query settles it.
    """

    def __init__(self, hints: dict[str, int], ranges: Ranges, timeout_ms: int = 30_000):
        self.hints = _Hints(hints)  # a copy: unbacked symbols add their stand-in values (never the prologue's)
        self.ranges = ranges
        self.unbacked = Unbacked()  # data-dependent symbols: decided by `prove`, never recorded
        # (normalized query, oblivious symbols) -> what `prove` proved, or what it was undecided over
        self._proved: dict[tuple, bool | tuple] = {}
        self.constraints: list[Constraint] = []
        self.float_constraints: list[Constraint] = []  # predicates on symbolic floats (kept as recorded)
        self.z3_calls = 0
        self.z3_seconds = 0.0
        self.z3_max_seconds = 0.0
        self.z3_max_work = 0  # the most z3 work (resource units) one query took
        self._timeout_ms = timeout_ms
        self.concrete = False  # every size and number input is pinned where the trace reads it (a retrace)
        self.pin_comparisons = False  # a comparison of symbolic numbers is decided where it is made (a retrace)
        self.symbolic_bools = 0  # comparisons that returned a symbolic bool to the program
        self.speculation: dict[str, bool] = {}  # sides to take of branches on tensor data (ir/speculation.py)
        self.speculated: list[tuple[str, bool]] = []  # the sides this trace took, in order
        self._memo: dict[E.Expr, bool] = {}
        self._z3_env: dict[str, z3.ArithRef] = {}
        self._z3_terms: dict[E.Expr, Any] = {}  # recorded constraints translated once
        self._facts: Facts | None = None  # bounds and nonzero atoms of the recorded constraints (built on demand)
        # symbol -> representative or constant, from recorded equalities and static ranges (lo == hi)
        self._subst: dict[str, E.Expr] = {
            s: E.const(lo) for s, (lo, hi) in ranges.items() if lo is not None and lo == hi
        }
        self._constrained: set[str] = set()  # symbols that some recorded constraint mentions
        # (the `_subst` it was built for, node -> node substituted): a `_subst` is never changed once published
        # (`_merge` and `restore` replace it), so the memo holds while `_subst` is that same object
        self._subst_memo: tuple[dict, dict] = (self._subst, {})

    def decide(self, b: E.Expr, provenance: Provenance | Callable[[], Provenance]) -> bool:
        """The truth value of `b` for this trace; records a constraint unless it is implied (`provenance` may be a
        function that makes it: most decisions are implied, and naming the site costs a stack walk and a print)."""
        value = bool(self.hints.eval(b))
        if self.implied(b, value):
            return value
        self.record(b if value else E.not_(b), provenance() if callable(provenance) else provenance)
        return value

    def decide_float(self, b: Any, provenance: Provenance) -> bool:
        """Decide a predicate on symbolic floats by its hint, recording it unless it was recorded before."""
        value = bool(b.eval(self.hints))
        fact = b if value else b.negate()
        if all(c.expr != fact for c in self.float_constraints):
            self.float_constraints.append(Constraint(fact, provenance))
        return value

    def pin(self, e: E.Expr, provenance: Provenance | Callable[[], Provenance]) -> int:
        """The concrete value of `e`; records `e == value` unless `e` is already known to be constant."""
        value = self.hints.eval(e)
        self.decide(E.eq(e, value), provenance)
        return value

    def checkpoint(self) -> tuple:
        """What `restore` needs to forget every decision recorded after now."""
        u = self.unbacked
        return (len(self.constraints), len(self.float_constraints), dict(self._memo), dict(self._subst),
                set(self._constrained), dict(self._proved), len(u.facts), len(u.assumptions))  # fmt: skip

    def restore(self, saved: tuple) -> None:
        """Forget the decisions recorded since `saved` (a kernel's attempt that is run again another way)."""
        n, nf, self._memo, self._subst, self._constrained, self._proved, facts, assumptions = saved
        if len(self.constraints) != n:
            self._solver = None  # (rebuilt from the constraints kept)
            self._facts = None  # (its bounds came from the constraints forgotten too)
        del self.constraints[n:], self.float_constraints[nf:]
        del self.unbacked.facts[facts:], self.unbacked.assumptions[assumptions:]

    def record(self, b: E.Expr, provenance: Provenance) -> None:
        if self.unbacked.mentions(b):  # by construction: a guard can only read what the prologue knows
            raise SpecEngineError(f"internal error: a guard on a data-dependent symbol: {b} ({provenance})")
        self.constraints.append(Constraint(b, provenance))
        self._memo[E.normalize(b)] = True
        self._constrained |= b.free_symbols()
        subst = self._subst
        self._merge(E.normalize(simplify(b, self.ranges)))  # `max(0, s0) == s2` with s0 >= 0: s2 is s0
        if self._facts is not None:
            if self._subst is subst:
                self._facts.add(b.subs(subst) if subst else b)
            else:
                self._facts = None  # a new equality: the facts are rebuilt over the new representatives

    def _merge(self, n: E.Expr) -> None:
        """Track `s_a == s_b` and `s == c` facts as a substitution, so later queries fold syntactically."""
        parts = linear_equality(n)
        if parts is None:
            return
        p, constant = parts
        pair = symbol_difference(p)
        if p.op == "sym":
            target, value = p.args[0], E.const(-constant)
        elif pair is not None and constant == 0:
            a, b = (E.sym(x).subs(self._subst) for x in pair)
            if a is b or a.is_const or b.is_const:
                return
            loser, winner = sorted((a, b), key=lambda e: e.sort_key, reverse=True)
            target, value = loser.args[0], winner
        else:
            return
        self._subst = {k: v.subs({target: value}) for k, v in self._subst.items()}
        self._subst[target] = value

    def implied(self, b: E.Expr, value: bool) -> bool:
        """Whether the ranges and recorded constraints imply that `b` has truth value `value`.

        Fast paths first: constant folding after substituting recorded equalities, the memo, value
        ranges; z3 only when every symbol of the query appears in a recorded constraint (a query on an
        unconstrained symbol is recorded instead, which is sound; the solver drops it if it was implied).
        """
        if b.op == "bconst":
            return True
        if self.unbacked.mentions(b):
            return self.prove(b) is value
        n = E.normalize(self._representatives(b))
        if n.op == "bconst":
            return True
        known = self._memo.get(n)
        if known is None:
            known = self.facts().decide(n)
            if known is not None and known is not value:  # the hints satisfy every fact: a proof can only agree
                raise SpecEngineError(f"internal error: {n} proved {known} but is {value} at the example inputs")
        if known is None and n.free_symbols() <= self._constrained and not self._refuted(n, value):
            known = self._z3_decide(n, value)
        if known is not None:
            self._memo[n] = known
        return known is not None

    def _representatives(self, b: E.Expr) -> E.Expr:
        """`b` over the representatives of `_subst`, memoised per node while `_subst` is unchanged (the conv sizes of
        a convnet nest floor divisions: each query shares most of its nodes with earlier ones)."""
        if not self._subst:
            return b
        if self._subst_memo[0] is not self._subst:
            self._subst_memo = (self._subst, {})
        return b.subs(self._subst, self._subst_memo[1])

    def facts(self) -> Facts:
        """What the ranges and the recorded constraints (over the current representatives) say, for cheap proofs."""
        if self._facts is None:
            self._facts = Facts(self.ranges)
            for c in self.constraints:
                self._facts.add(c.expr.subs(self._subst) if self._subst else c.expr)
        return self._facts

    def _refuted(self, n: E.Expr, value: bool) -> bool:
        """Whether an example (the hints with a symbol changed) satisfies every recorded constraint and gives `n`
        the other truth value: then `n` is not implied, and z3 need not be asked."""
        exprs = [c.expr for c in self.constraints] + [n if value else E.not_(n)]
        return Examples(exprs, self.hints, self.ranges).refutes(len(exprs) - 1, set(range(len(exprs))))

    def prove(self, b: E.Expr, oblivious: frozenset[str] = frozenset()) -> bool | None:
        """The truth value of `b` that the ranges, the recorded constraints and the unbacked facts and assumptions
        imply, or None. Symbols in `oblivious` (size-like unbacked ones) count as at least 2 (size-oblivious)."""
        n = E.normalize(self._representatives(b))
        if n.op == "bconst":
            return n.value
        key = (n, oblivious)
        known = self._proved.get(key)  # facts only accumulate: what was proved stays proved
        if isinstance(known, bool):
            return known
        facts = tuple(self.unbacked.fact_exprs(oblivious))
        unproved = (len(self.constraints), facts)  # what an undecided query was undecided over
        if known == unproved:
            return None  # nothing was learned since (`restore` forgets this memo with the rest)
        known = decide_by_bounds(n, {**self.ranges, **self.unbacked.ranges(oblivious)})
        if known is None:
            known = next((v for v in (True, False) if self._z3_decide(n, v, facts) is not None), None)
        self._proved[key] = unproved if known is None else known
        return known

    def _z3_decide(self, n: E.Expr, value: bool, facts: tuple = ()) -> bool | None:
        """z3 over the constraints that share symbols (transitively) with the query: a fresh solver each time, so
        z3 preprocesses the whole problem (an incremental one skips that, and takes seconds on div/mod nests) and
        the answer does not depend on the queries asked before. Bounded by `config.solver_rlimit`."""
        z3 = z3_module()
        self.z3_calls += 1
        elapsed = 0.0
        try:
            solver = new_solver(self._timeout_ms)
            related, symbols = self._related([n, *facts])
            solver.add(*range_facts({s: r for s, r in self.ranges.items() if s in symbols}, self._z3_env))
            solver.add(*(self._z3_term(e) for e in (*related, *facts)))
            z = to_z3(n, self._z3_env)
            solver.add(z3.Not(z) if value else z)
            result, elapsed, work = check(solver, what=f"deciding {n} is {value}")
            self.z3_max_work = max(self.z3_max_work, work)
        except z3.Z3Exception:
            result = z3.unknown  # undecided: the decision is recorded, which is sound
        except ctypes.ArgumentError as e:  # how ctypes reports a RecursionError of the program (deep recursion)
            if "RecursionError" not in str(e):
                raise
            raise RecursionError("maximum recursion depth exceeded (while deciding a branch)") from e
        finally:
            self.z3_seconds += elapsed
            self.z3_max_seconds = max(self.z3_max_seconds, elapsed)
        return value if result == z3.unsat else None

    def _related(self, exprs: list[E.Expr]) -> tuple[list[E.Expr], set[str]]:
        """The recorded constraints that share symbols, transitively, with `exprs`, and all their symbols."""
        symbols = set().union(*(e.free_symbols() for e in exprs))
        pending = [c.expr for c in self.constraints]
        related: list[E.Expr] = []
        grew = True
        while grew:
            grew, rest = False, []
            for e in pending:
                if e.free_symbols() & symbols:
                    related.append(e)
                    symbols |= e.free_symbols()
                    grew = True
                else:
                    rest.append(e)
            pending = rest
        return related, symbols

    def _z3_term(self, e: E.Expr) -> Any:
        term = self._z3_terms.get(e)
        if term is None:
            term = self._z3_terms[e] = to_z3(e, self._z3_env)
        return term


def range_facts(ranges: Ranges, env: dict[str, z3.ArithRef]) -> list:
    """z3 facts for symbol ranges (inclusive bounds, None = unbounded)."""
    facts = []
    for name, (lo, hi) in ranges.items():
        v = to_z3(E.sym(name), env)
        if lo is not None:
            facts.append(v >= lo)
        if hi is not None:
            facts.append(v <= hi)
    return facts


def linear_equality(n: E.Expr) -> tuple[E.Expr, int] | None:
    """For a normalized `p == 0`, the pair (p without its constant, the constant)."""
    if n.op != "rel" or n.args[0] != "==":
        return None
    p = E.sub(n.args[1], n.args[2])
    constant = p.args[0] if p.op == "poly" else (p.value if p.is_const else 0)
    return E.sub(p, constant), constant


def symbol_difference(p: E.Expr) -> tuple[str, str] | None:
    """The two symbols of `p = s_a - s_b` (coefficients +1 and -1), or None."""
    if p.op != "poly" or len(p.args[1]) != 2:
        return None
    (m1, c1), (m2, c2) = p.args[1]
    if len(m1) == 1 and len(m2) == 1 and m1[0].op == "sym" and m2[0].op == "sym" and {c1, c2} == {1, -1}:
        return m1[0].args[0], m2[0].args[0]
    return None
