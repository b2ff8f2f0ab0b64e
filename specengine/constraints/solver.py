"""The z3 solver: from recorded constraints to the smallest sound set of guards and a canonical key.

Steps: merge equalities into symbol classes, detect pinned symbols, drop constraints implied by the
others, and key the result canonically. Every z3 query has a time limit; on `unknown` the solver keeps
the stronger guard set and warns. If z3 itself fails, every symbol is pinned (full specialization).
"""

from __future__ import annotations

import logging
import sys
import warnings
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from specengine.constraints import expr as E
from specengine.constraints.constraint import Constraint
from specengine.constraints.decide import Ranges, linear_equality, range_facts, symbol_difference
from specengine.constraints.examples import Examples
from specengine.constraints.facts import Facts
from specengine.constraints.floats import FloatExpr
from specengine.constraints.folding import fold_conditions, fold_pinned, simplify
from specengine.constraints.intervals import decide_by_bounds
from specengine.constraints.z3expr import check, new_solver, to_z3, z3_module
from specengine.errors import SolverWarning
from specengine.provenance import Provenance

if TYPE_CHECKING:
    import z3

log = logging.getLogger("specengine.solver")  # the "solver" log topic


@dataclass(frozen=True)
class Solution:
    """The solved constraint set of one entry.

    Attributes:
        guards: minimized guards over the input symbols (class equalities and pins included).
        pinned: symbol -> constant.
        rep: symbol -> representative of its equality class (non-trivial members only).
        key: canonical, hashable key of the guard set (equivalent sets get equal keys).
        z3_calls: how many z3 queries solving took.
    """

    guards: tuple[Constraint, ...]
    pinned: Mapping[str, int]
    rep: Mapping[str, str]
    key: frozenset
    z3_calls: int = 0
    warnings: tuple[str, ...] = field(default=())
    expr_pins: Mapping[E.Expr, int] = field(default_factory=dict)
    z3_seconds: float = 0.0
    z3_max_seconds: float = 0.0
    ranges: Mapping[str, tuple[int | None, int | None]] = field(default_factory=dict)
    z3_max_work: int = 0  # the most z3 work (resource units) one query took

    _memo: dict = field(default_factory=dict, compare=False, repr=False)

    def substitution(self) -> dict[str, E.Expr]:
        return substitution(self.pinned, self.rep)

    def fold(self, e: E.Expr) -> E.Expr:
        """`e` over representatives, with pinned symbols and pinned expressions replaced by constants."""
        if isinstance(e, FloatExpr):  # (not memoized: equal FloatExprs may differ, 0.0 and -0.0)
            sub = self._memo.get("substitution")
            if sub is None:
                sub = self._memo["substitution"] = self.substitution()
            return e.subs(sub)
        out = self._memo.get(e)
        if out is None:
            sub = self._memo.get("substitution")
            if sub is None:
                sub = self._memo["substitution"] = self.substitution()
            facts = self._memo.get("facts")
            if facts is None:
                int_guards = [g for g in self.guards if not isinstance(g.expr, FloatExpr)]
                facts = self._memo["facts"] = frozenset(E.normalize(g.expr.subs(sub)) for g in int_guards)
            out = fold_conditions(fold_pinned(e.subs(sub), self.expr_pins), facts)
            self._memo[e] = out
        return out


def substitution(pinned: Mapping[str, int], rep: Mapping[str, str]) -> dict[str, E.Expr]:
    """Symbol -> its constant (pinned) or its class representative."""
    sub: dict[str, E.Expr] = {s: E.const(v) for s, v in pinned.items()}
    sub.update({s: E.sym(r) for s, r in rep.items() if s not in pinned})
    return sub


def sort_symbols(names: Iterable[str]) -> list[str]:
    """Symbol names in input order (s0, s1, ..., s10: by their sort keys)."""
    return sorted(names, key=_sym_key)


def _sym_key(name: str) -> tuple:
    return E.sym(name).sort_key


class _Classes:
    """Union-find over symbols; the representative is the first symbol in input order."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, s: str) -> str:
        while self.parent.get(s, s) != s:
            s = self.parent[s]
        return s

    def union(self, a: str, b: str) -> None:
        ra, rb = sort_symbols((self.find(a), self.find(b)))
        if ra != rb:
            self.parent[rb] = ra


class Solver:
    """Solves one trace's constraints. Usage: `Solver(constraints, ranges, hints).solve()`."""

    def __init__(self, constraints: Iterable[Constraint], ranges: Ranges, hints: Mapping[str, int],
                 timeout_ms: int = 30_000):  # fmt: skip
        self.constraints = list(constraints)
        self.ranges = dict(ranges)
        self.hints = dict(hints)
        self.timeout_ms = timeout_ms
        self.z3_calls = 0
        self.z3_seconds = 0.0
        self.z3_max_seconds = 0.0
        self.z3_max_work = 0
        self.notes: list[str] = []
        self._all_symbols: list[str] | None = None

    def solve(self) -> Solution:
        try:
            return self._solve()
        except Exception as exc:
            if not _is_z3_error(exc):
                raise
            warnings.warn(f"specengine: z3 failed ({exc}); specializing every symbol", SolverWarning, stacklevel=4)
            return self.full_specialization()

    def full_specialization(self) -> Solution:
        """The strongest guard set: every symbol pinned to its hint."""
        pins = {s: self.hints[s] for s in self._symbols()}
        guards = tuple(
            Constraint(E.eq(E.sym(s), v), Provenance("<solver>", 0, "pin", "fallback")) for s, v in pins.items()
        )
        key = frozenset(E.normalize(g.expr) for g in guards)
        return Solution(guards, pins, {}, key, self.z3_calls, ranges=self.ranges)

    def _symbols(self) -> list[str]:
        """Every symbol of the ranges and constraints, in input order (computed once)."""
        if self._all_symbols is None:
            names = set(self.ranges).union(*(c.expr.free_symbols() for c in self.constraints))
            self._all_symbols = sort_symbols(names)
        return self._all_symbols

    def _solve(self) -> Solution:
        classes, pinned, eq_prov = self._classes_and_pins()
        rep = {s: classes.find(s) for s in self._symbols() if classes.find(s) != s}
        rest = self._substituted(rep, pinned)
        implicit = self._implicit_pins(rest, pinned)
        if implicit:
            for s in implicit:  # named by the last decision that mentions it (the one that left it one value)
                eq_prov.setdefault(s, next((c.provenance for c in reversed(rest) if s in c.expr.free_symbols()),
                                           Provenance("<solver>", 0)))  # fmt: skip
            pinned.update(implicit)
            pinned.update({s: pinned[r] for s, r in rep.items() if r in pinned})  # a pinned class pins its members
            rest = self._substituted(rep, pinned)
        expr_pins = _expression_pins(rest)
        rest = self._minimize(rest, pinned)
        guards = self._class_guards(rep, pinned, eq_prov) + tuple(rest)
        key = frozenset(E.normalize(g.expr) for g in guards)
        log.info("solved %d constraints into %d guards with %d z3 calls", len(self.constraints), len(guards),
                  self.z3_calls)  # fmt: skip
        return Solution(guards, pinned, rep, key, self.z3_calls, tuple(self.notes), expr_pins, self.z3_seconds,
                        self.z3_max_seconds, self.ranges, self.z3_max_work)  # fmt: skip

    def _classes_and_pins(self) -> tuple[_Classes, dict[str, int], dict[str, Provenance]]:
        classes, pinned, prov = _Classes(), {}, {}
        for s, (lo, hi) in self.ranges.items():
            if lo is not None and lo == hi:
                pinned[s] = lo
                prov[s] = Provenance("<input>", 0, "pin", "static size")
        for c in self.constraints:
            parts = linear_equality(E.normalize(simplify(c.expr, self.ranges)))  # `max(0, s0) == s2`: s2 is s0
            if parts is None:
                continue
            p, constant = parts
            if p.op == "sym":
                pinned[p.args[0]] = -constant
                prov.setdefault(p.args[0], c.provenance)
            elif constant == 0 and (pair := symbol_difference(p)) is not None:
                classes.union(*pair)
                for name in pair:
                    prov.setdefault(name, c.provenance)
        if pinned and classes.parent:  # a pinned symbol pins its whole class
            members: dict[str, list[str]] = {}
            for t in self._symbols():
                members.setdefault(classes.find(t), []).append(t)
            for s in list(pinned):
                pinned.update(dict.fromkeys(members.get(classes.find(s), ()), pinned[s]))
        return classes, pinned, prov

    def _substituted(self, rep: Mapping[str, str], pinned: Mapping[str, int]) -> list[Constraint]:
        sub = substitution(pinned, rep)
        out, seen = [], set()
        for c in self.constraints:
            e = simplify(c.expr.subs(sub), self.ranges)
            n = E.normalize(e)
            if n.op == "bconst":
                assert n.value, f"inconsistent constraint {c.debug_str()}"
                continue
            if n not in seen:
                seen.add(n)
                out.append(Constraint(e, c.provenance))
        return out

    def _z3(self, facts: list) -> z3.Solver:
        s = new_solver(self.timeout_ms)
        s.add(*facts)
        return s

    def _check(self, solver: z3.Solver, extra: list, what: str, assumptions: tuple = (),
               on_sat: Callable[[z3.ModelRef], None] | None = None) -> z3.CheckSatResult:  # fmt: skip
        """One timed query: `solver`'s facts plus `extra` (added in a scope) under `assumptions`.

        `on_sat` receives the model of a satisfiable query before the scope is popped.
        """
        z3 = z3_module()
        self.z3_calls += 1
        solver.push()
        solver.add(*extra)
        result, elapsed, work = check(solver, *assumptions, what=what)
        self.z3_max_work = max(self.z3_max_work, work)
        reason = solver.reason_unknown() if result == z3.unknown else ""
        if result == z3.sat and on_sat is not None:
            on_sat(solver.model())
        solver.pop()
        self.z3_seconds += elapsed
        self.z3_max_seconds = max(self.z3_max_seconds, elapsed)
        if result == z3.unknown:
            note = f"z3 gave up ({reason}) while {what}; keeping the stronger guard set"
            self.notes.append(note)
            warnings.warn(f"specengine: {note}", SolverWarning, stacklevel=5)
        return result

    def _implicit_pins(self, constraints: list[Constraint], pinned: Mapping[str, int]) -> dict[str, int]:
        """Symbols that the constraints force to one value (e.g. `s0*s0 == 9` with `s0 >= 0`), component by
        component (constraints that share no symbol with a candidate cannot pin it)."""
        out: dict[str, int] = {}
        for group in components([c.expr for c in constraints]):
            out.update(self._implicit_pins_of([constraints[i] for i in group], pinned))
        return out

    def _implicit_pins_of(self, constraints: list[Constraint], pinned: Mapping[str, int]) -> dict[str, int]:
        """One query asks for a model in which some candidate differs from its hint; the candidates that
        differ in the model are not pinned and leave. Unsat means every remaining candidate is pinned.
        """
        z3, env = z3_module(), {}
        candidates = sort_symbols({s for c in constraints for s in c.expr.free_symbols()} - set(pinned))
        examples = Examples([c.expr for c in constraints], self.hints, self.ranges)
        changed = examples.unpinned(candidates, set(range(len(constraints))))
        candidates = [s for s in candidates if s not in changed]  # an example changes them: not pinned
        if not candidates:
            return {}
        solver = self._z3(self._range_facts(candidates, env) + [to_z3(c.expr, env) for c in constraints])
        while candidates:
            terms = {s: to_z3(E.sym(s), env) for s in candidates}
            query = [z3.Or(*(t != self.hints[s] for s, t in terms.items()))]
            values: dict[str, int] = {}

            def collect(model: z3.ModelRef, terms: dict = terms, values: dict = values) -> None:
                values.update({s: model.eval(t, model_completion=True).as_long() for s, t in terms.items()})

            result = self._check(solver, query, "checking for pinned symbols", on_sat=collect)
            if result != z3.sat:
                return {s: self.hints[s] for s in candidates} if result == z3.unsat else {}
            candidates = [s for s in candidates if values[s] == self.hints[s]]
        return {}

    def _range_facts(self, symbols: Iterable[str], env: dict) -> list:
        return range_facts({s: self.ranges[s] for s in sort_symbols(symbols) if s in self.ranges}, env)  # in order

    def _minimize(self, constraints: list[Constraint], pinned: Mapping[str, int]) -> list[Constraint]:
        """Drop each constraint that the ranges and the remaining constraints imply.

        Constraints that share no symbol (transitively) with a constraint cannot change whether it is
        implied (every group is satisfiable: the hints satisfy it), so each group is minimized on its own.
        A disjunct that another kept guard refutes (`s == 0 or ...` next to `s != 0`) is dropped, and the
        group is minimized once more.
        """
        kept: list[tuple[int, Constraint]] = []
        for group in components([c.expr for c in constraints]):
            members = [(i, constraints[i]) for i in group]
            members = [members[j] for j in self._minimize_group([c for _, c in members])]
            pruned, refuters = _prune_disjuncts([c for _, c in members])
            if refuters:  # only a refuting guard can have become implied (by the stronger-looking pruned one)
                members = [(i, p) for (i, _), p in zip(members, pruned)]
                members = [members[j] for j in self._minimize_group([c for _, c in members], refuters)]
            kept += members
        return [c for _, c in sorted(kept, key=lambda t: t[0])]

    def _minimize_group(self, constraints: list[Constraint], candidates: set[int] | None = None) -> list[int]:
        """The indices of `constraints` kept (only `candidates` may go, when given). Interval bounds, examples and
        the facts of the others (`Facts`: bounds, nonzero atoms, residues) settle most without z3; z3 gets a fresh
        solver per question (each constraint translated once), so that it preprocesses the whole problem."""
        kept = [i for i, c in enumerate(constraints) if decide_by_bounds(c.expr, self.ranges) is not True]
        if not kept:
            return []
        z3, env = z3_module(), {}
        terms = {i: to_z3(constraints[i].expr, env) for i in kept}
        symbols = set().union(*(constraints[i].expr.free_symbols() for i in kept))
        ranges = self._range_facts(symbols, env)
        examples = Examples([c.expr for c in constraints], self.hints, self.ranges)
        for i in [i for i in kept if candidates is None or i in candidates]:
            if examples.refutes(i, set(kept)):
                continue  # not implied: an example satisfies the others and falsifies it
            others = [j for j in kept if j != i]
            facts = Facts(self.ranges)
            for j in others:
                facts.add(constraints[j].expr)
            if facts.decide(constraints[i].expr) is True:
                kept.remove(i)
                continue
            solver = self._z3(ranges + [terms[j] for j in others])
            if self._check(solver, [z3.Not(terms[i])], f"minimizing {constraints[i]}") == z3.unsat:
                kept.remove(i)
        return kept

    def _class_guards(self, rep: Mapping[str, str], pinned: Mapping[str, int],
                      prov: Mapping[str, Provenance]) -> tuple[Constraint, ...]:  # fmt: skip
        out = []
        for s in self._symbols():
            default = Provenance("<solver>", 0)
            if s in pinned:
                out.append(Constraint(E.eq(E.sym(s), pinned[s]), prov.get(s, default)))
            elif s in rep:
                out.append(Constraint(E.eq(E.sym(s), E.sym(rep[s])), prov.get(s, default)))
        return tuple(out)


def components(exprs: list[E.Expr]) -> list[list[int]]:
    """Indices of `exprs` grouped by shared symbols (transitively), each group in order; constant ones alone."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for e in exprs:
        names = iter(e.free_symbols())
        first = next(names, None)
        for other in names:
            parent[find(other)] = find(first)
    groups: dict[Any, list[int]] = {}
    for i, e in enumerate(exprs):
        first = next(iter(e.free_symbols()), None)
        groups.setdefault(find(first) if first is not None else ("const", i), []).append(i)
    return list(groups.values())


def _prune_disjuncts(constraints: list[Constraint]) -> tuple[list[Constraint], set[int]]:
    """Each `or` guard without the disjuncts whose negation is another guard (equivalent under the others),
    and the indices of the guards that refuted a disjunct."""
    facts = {E.normalize(c.expr): i for i, c in enumerate(constraints)}
    out, refuters = [], set()
    for c in constraints:
        if c.expr.op == "or":
            found = {d: facts.get(E.normalize(E.not_(d))) for d in c.expr.args}
            rest = [d for d, j in found.items() if j is None]
            refuters |= {j for j in found.values() if j is not None}
            c = Constraint(E.or_(*rest), c.provenance) if len(rest) < len(c.expr.args) else c
        out.append(c)
    return out, refuters


def _expression_pins(constraints: list[Constraint]) -> dict[E.Expr, int]:
    """Expressions that constraints pin to one value (`s0*s1 == 12`); symbols are pinned separately."""
    pins = {}
    for c in constraints:
        parts = linear_equality(E.normalize(c.expr))
        if parts is not None and parts[0].op != "sym" and not parts[0].is_const:
            pins[parts[0]] = -parts[1]
    return pins


def implies(facts: Iterable[E.Expr], goal: E.Expr, ranges: Ranges, timeout_ms: int = 30_000) -> bool:
    """Whether z3 proves `goal` from `facts` and the symbol ranges (False when unknown or on failure)."""
    z3, env = z3_module(), {}
    solver = new_solver(timeout_ms)
    try:
        solver.add(*range_facts(ranges, env), *(_z3_any(f, env) for f in facts))
        solver.add(z3.Not(_z3_any(goal, env)))
        return check(solver, what=f"proving {goal}")[0] == z3.unsat
    except z3.Z3Exception:
        return False


def _is_z3_error(exc: Exception) -> bool:
    z3 = sys.modules.get("z3")  # never loaded: no z3 error
    return z3 is not None and isinstance(exc, z3.Z3Exception)


def _z3_any(e: Any, env: dict) -> Any:
    return e.to_z3(env) if isinstance(e, FloatExpr) else to_z3(e, env)


def with_float_guards(solution: Solution, constraints: list[Constraint]) -> Solution:
    """`solution` plus guards on symbolic floats (each a predicate recorded while tracing).

    Each is folded with the solution (pinned sizes become constants, equal sizes their representative): one left
    without symbols held at the hints, so it holds for every input the other guards accept, and is dropped.
    """
    folded = [replace(c, expr=solution.fold(c.expr)) for c in constraints]
    folded = [c for c in folded if c.expr.free_symbols()]
    if not folded:
        return solution
    return replace(solution, guards=solution.guards + tuple(folded),
                   key=solution.key | frozenset(c.expr for c in folded))  # fmt: skip


def subsumes(new: Solution, old: Solution, timeout_ms: int = 30_000) -> bool:
    """Whether every input that `old`'s guards accept is accepted by `new`'s (z3 proves old => new).

    Both solutions must be over the same input symbols (entries with the same static input facts).
    """
    if new.key == old.key or not new.guards:
        return True
    if any(isinstance(g.expr, FloatExpr) for g in (*old.guards, *new.guards)):
        return False  # z3 sees floats as reals: NaN's entry (`not (s > 0) and not (s <= 0)`) looks empty
    if any(old.pinned.get(s) != v for s, v in new.pinned.items()):
        return False  # old leaves free (or pins elsewhere) a symbol that new pins
    ranges = {s: r for s, r in old.ranges.items() if r[0] != r[1]}
    return all(implies([g.expr for g in old.guards], g.expr, ranges, timeout_ms) for g in new.guards)
