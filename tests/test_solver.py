"""The z3 solver and the tracing-time decider."""

from __future__ import annotations

import warnings

import pytest
import torch
import z3

import specengine
from specengine.constraints import expr as E
from specengine.constraints.constraint import Constraint
from specengine.constraints.decide import Decider
from specengine.constraints.examples import Examples
from specengine.constraints.solver import Solver
from specengine.constraints.z3expr import new_solver
from specengine.errors import SolverWarning
from specengine.provenance import Provenance

s0, s1, s2 = E.sym("s0"), E.sym("s1"), E.sym("s2")
HERE = Provenance("test.py", 1, "op", "reason")
DIMS = {"s0": (0, None), "s1": (0, None), "s2": (0, None)}


def solve(*exprs, hints=None, ranges=DIMS, timeout_ms=2000):
    hints = hints or {"s0": 3, "s1": 3, "s2": 3}
    return Solver([Constraint(e, HERE) for e in exprs], ranges, hints, timeout_ms).solve()


def texts(solution):
    return sorted(str(g) for g in solution.guards)


def test_equalities_merge_into_classes():
    sol = solve(E.eq(s1, s0), E.eq(s2, s1))
    assert dict(sol.rep) == {"s1": "s0", "s2": "s0"}
    assert texts(sol) == ["s1 == s0", "s2 == s0"]
    assert sol.substitution() == {"s1": s0, "s2": s0}


def test_constraints_over_class_members_are_rewritten_to_the_representative():
    sol = solve(E.eq(s1, s0), E.gt(s1, 2), E.gt(s0, 2))
    assert texts(sol) == ["s0 > 2", "s1 == s0"]  # one copy of the predicate, over the representative


def test_pins_are_detected_syntactically_and_by_z3():
    assert dict(solve(E.eq(s0, 3)).pinned) == {"s0": 3}
    sol = solve(E.eq(E.mul(s0, s0), 9))  # with s0 >= 0 only 3 is possible
    assert dict(sol.pinned) == {"s0": 3}
    assert texts(sol) == ["s0 == 3"]
    product = solve(E.eq(E.mul(s0, s1), 12), hints={"s0": 3, "s1": 4, "s2": 0})
    assert dict(product.pinned) == {}
    assert texts(product) == ["s0*s1 == 12"]


def test_implied_constraints_are_dropped():
    sol = solve(E.gt(s0, 2), E.gt(s0, 1), E.ge(s0, 0), hints={"s0": 5, "s1": 0, "s2": 0})
    assert texts(sol) == ["s0 > 2"]
    sol = solve(E.gt(s0, s1), E.gt(s1, s2), E.gt(s0, s2), hints={"s0": 3, "s1": 2, "s2": 1})
    assert texts(sol) == ["s0 > s1", "s1 > s2"]


def test_equivalent_sets_get_equal_keys():
    a = solve(E.gt(s0, 2), hints={"s0": 5, "s1": 0, "s2": 0})
    b = solve(E.ge(s0, 3), E.gt(s0, 1), hints={"s0": 5, "s1": 0, "s2": 0})
    c = solve(E.lt(2, s0), hints={"s0": 5, "s1": 0, "s2": 0})
    assert a.key == b.key == c.key
    assert a.key != solve(E.gt(s0, 3), hints={"s0": 5, "s1": 0, "s2": 0}).key


def test_unknown_falls_back_to_the_stronger_guard_set(monkeypatch):
    monkeypatch.setattr(z3.Solver, "check", lambda self, *a: z3.unknown)
    with pytest.warns(SolverWarning, match="z3 gave up"):  # s0 >= s1 is implied, but only z3 sees it
        sol = solve(E.gt(s0, s1), E.ge(s0, s1), hints={"s0": 5, "s1": 2, "s2": 0})
    assert texts(sol) == ["s0 > s1", "s0 >= s1"]  # nothing dropped: stronger, still sound


def test_z3_failure_specializes_every_symbol(monkeypatch):
    def boom(self, *a):
        raise z3.Z3Exception("injected")

    monkeypatch.setattr(z3.Solver, "check", boom)
    with pytest.warns(SolverWarning, match="specializing every symbol"):  # s0 >= s1: only z3 answers it
        sol = solve(E.gt(s0, s1), E.ge(s0, s1), hints={"s0": 5, "s1": 1, "s2": 2})
    assert dict(sol.pinned) == {"s0": 5, "s1": 1, "s2": 2}


def test_engine_stays_correct_when_z3_gives_up(monkeypatch):
    monkeypatch.setattr(z3.Solver, "check", lambda self, *a: z3.unknown)

    def f(a, b):
        return (a @ b).sum(0) if a.shape[0] > 1 else a.sum()

    cfn = specengine.compile(f, dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SolverWarning)
        for n in (3, 4, 1):
            a, b = torch.randn(n, 2), torch.randn(2, 5)
            torch.testing.assert_close(cfn(a, b), f(a, b))
    assert specengine.cache_misses(cfn) == 2


def test_examples_answer_what_they_can_without_z3():
    hints = {"s0": 5, "s1": 10, "s2": 0}
    ex = Examples([E.eq(E.mul(s0, 2), s1), E.gt(s0, 3)], hints, DIMS)
    assert ex.refutes(1, {0, 1})  # s0 = 0, and s1 (only the equality mentions it) follows: s1 = 0
    assert ex.refutes(0, {0, 1})  # s0 = 6 breaks the equality alone
    assert ex.unpinned(["s0", "s1"], {0, 1}) == {"s0", "s1"}
    assert not Examples([E.gt(s0, 2), E.gt(s0, 1)], hints, DIMS).refutes(1, {0, 1})  # implied: z3 decides
    assert Examples([E.eq(E.floordiv(s1, s0), 2)], hints, DIMS).usable  # true at the hints
    assert not Examples([E.eq(s0, 4)], hints, DIMS).usable  # false at the hints: never used
    sol = solve(E.gt(s0, 2), E.ne(s2, 1), E.eq(E.mul(s0, 2), s1), hints=hints)
    assert texts(sol) == ["2*s0 == s1", "s0 > 2", "s2 != 1"] and sol.z3_calls == 0  # each one refuted by example
    sol = solve(E.gt(s0, 2), E.gt(s0, 1), E.ne(s1, 1), E.eq(E.mul(s0, 2), s1), hints=hints)
    assert texts(sol) == ["2*s0 == s1", "s0 > 2"] and sol.z3_calls == 1  # s0 > 1: the bounds of s0 > 2; s1 != 1: z3


def test_decider_uses_ranges_then_facts_then_z3_and_records_only_undecided():
    d = Decider({"s0": 4, "s1": 3}, {"s0": (0, None), "s1": (0, None)})
    assert d.decide(E.ge(s0, 0), HERE) is True  # by range
    assert d.z3_calls == 0 and d.constraints == []
    assert d.decide(E.gt(s0, 2), HERE) is True  # undecided: recorded
    assert [str(c) for c in d.constraints] == ["s0 > 2"]
    assert d.decide(E.gt(s0, 1), HERE) is True  # implied by s0 > 2: the facts' bounds prove it, no z3
    assert d.z3_calls == 0 and len(d.constraints) == 1
    assert d.decide(E.gt(s0, s1), HERE) is True  # recorded
    assert d.decide(E.ge(s0, s1), HERE) is True  # implied, beyond bounds: z3
    assert d.z3_calls == 1 and len(d.constraints) == 2
    assert d.decide(E.ge(s0, s1), HERE) is True  # memoized
    assert d.z3_calls == 1
    assert d.pin(E.mul(s0, s1), HERE) == 12
    assert str(d.constraints[-1]) == "s0*s1 == 12"


def test_decider_memos_follow_the_hints_and_the_recorded_equalities():
    """The per-node memos of evaluation and substitution are kept across queries: a write to the hints (an unbacked
    symbol's stand-in) and each new recorded equality must be seen by the next query."""
    s2 = E.sym("s2")
    d = Decider({"s0": 3, "s1": 3, "s2": 3}, {name: (0, None) for name in ("s0", "s1", "s2")})
    size = E.floordiv(E.add(E.mul(s1, 2), s2), 2)
    assert d.hints.eval(size) == 4
    d.hints["s2"] = 5  # narrowed (ir/shape_env.py): what was evaluated on the old value is forgotten
    assert d.hints.eval(size) == 5 and d.hints.eval(E.add(s2, 1)) == 6
    d.hints["s2"] = 3
    assert d.decide(E.eq(s1, s0), HERE) is True and d.decide(E.ge(size, 4), HERE) is True
    assert d.constraints[-1].expr == E.ge(E.floordiv(E.add(E.mul(s1, 2), s2), 2), 4)
    assert str(d._representatives(size)) == "s0 + s2//2"
    assert d.decide(E.eq(s2, s0), HERE) is True  # a new equality: the substitution memo starts over
    assert str(d._representatives(size)) == "s0 + s0//2" and d.decide(E.ge(E.add(s0, E.floordiv(s2, 2)), 4), HERE)
    assert len(d.constraints) == 3  # the last one implied by the recorded (s1 and s2 as s0) `size >= 4`


def test_compile_statistics_count_z3_calls():
    def f(a):
        if a.shape[0] > a.shape[1]:
            if a.shape[0] >= a.shape[1]:  # implied by the first decision: z3 proves it, no guard
                return a * 2
        return a

    cfn = specengine.compile(f, dynamic=True)
    cfn(torch.randn(3, 2))
    (entry,) = specengine.cache_entries(cfn)
    assert [str(g) for g in entry.guards] == ["a.shape[0] > a.shape[1]"]
    assert entry.stats["z3_calls"] >= 1
    assert 0 < entry.stats["z3_s"] < entry.stats["compile_s"]
    assert set(entry.stats) >= {"trace_s", "solve_s", "codegen_s", "z3_max_query_s"}


def test_equivalence_beyond_syntax_is_decided_by_z3():
    from specengine.constraints.solver import subsumes

    hints = {"s0": 6, "s1": 0, "s2": 0}
    a = solve(E.eq(E.mod(s0, 2), 0), hints=hints)
    b = solve(E.eq(E.mul(E.floordiv(s0, 2), 2), s0), hints=hints)
    assert a.key != b.key  # syntactically different
    assert subsumes(a, b) and subsumes(b, a)  # but z3 proves them equivalent
    c = solve(E.eq(E.mod(s0, 3), 0), hints=hints)
    assert not subsumes(c, a) and not subsumes(a, c)


def _reshapes(a, b, c):
    x = a.reshape(-1, 6)
    y = b.reshape(x.shape[0], -1)
    z = c.reshape(-1, y.shape[1] * 2)
    if a.shape[0] * a.shape[1] > b.shape[0] * b.shape[1] * b.shape[2] - c.shape[0]:
        return x.sum() + y.sum() + z.sum()
    return x.sum() - y.sum() - z.sum()


_RESHAPE_CALLS = [((4, 9), (2, 3, 10), (10, 6)), ((2, 3), (1, 2, 5), (5, 4)), ((6, 6), (3, 2, 6), (3, 8)),
                  ((3, 4), (2, 2, 3), (4, 3)), ((12, 1), (1, 1, 12), (6, 4)), ((4, 9), (2, 3, 10), (10, 6))]  # fmt: skip


def _sweep(cfn):
    for shapes in _RESHAPE_CALLS:
        args = [torch.randn(*s) for s in shapes]
        try:
            expected = _reshapes(*args)
        except RuntimeError:
            with pytest.raises(RuntimeError):
                cfn(*args)
            continue
        torch.testing.assert_close(cfn(*args), expected)


def test_a_1ms_solver_timeout_warns_keeps_stronger_guards_and_stays_correct(monkeypatch):
    normal = specengine.compile(_reshapes, dynamic=True)
    _sweep(normal)
    monkeypatch.setattr(specengine.config, "solver_timeout_ms", 1)
    hurried = specengine.compile(_reshapes, dynamic=True)
    with pytest.warns(SolverWarning, match="z3 gave up"):
        _sweep(hurried)
    assert specengine.cache_misses(hurried) >= specengine.cache_misses(normal)
    # Stronger: every input that an entry of the hurried function accepts, some normal entry accepts too.
    for shapes in _RESHAPE_CALLS + [((n, 6), (n, 2, 3), (n, 12)) for n in range(6)]:
        args = [torch.randn(*s) for s in shapes]
        for entry in specengine.cache_entries(hurried):
            if entry.prologue.fn(*args) is not None:
                assert any(e.prologue.fn(*args) is not None for e in specengine.cache_entries(normal)), shapes


def test_the_work_limit_is_deterministic_and_falls_back_to_stronger_guards(monkeypatch):
    """z3's resource limit, not the clock, ends a hard query: the same guards however loaded the machine is."""
    monkeypatch.setattr(specengine.config, "solver_rlimit", 1)
    runs = []
    for _ in range(2):
        cfn = specengine.compile(_reshapes, dynamic=True)
        with pytest.warns(SolverWarning, match="z3 gave up"):
            _sweep(cfn)
        runs.append([sorted(str(g) for g in e.guards) for e in specengine.cache_entries(cfn)])
    assert runs[0] == runs[1]
    solver = new_solver(30_000)
    x = z3.Int("x")
    solver.add(x * x * x == 27 + x * x)
    assert solver.check() == z3.unknown and "resource" in solver.reason_unknown()


def test_z3_raising_specializes_fully_and_stays_correct(monkeypatch):
    def boom(self, *a):
        raise z3.Z3Exception("injected")

    monkeypatch.setattr(z3.Solver, "check", boom)
    cfn = specengine.compile(_reshapes, dynamic=True)
    with pytest.warns(SolverWarning, match="specializing every symbol"):
        _sweep(cfn)
    for entry in specengine.cache_entries(cfn):
        assert all(str(g).endswith(tuple(f"== {v}" for v in range(13))) for g in entry.guards)  # every size pinned
    distinct = {s for s in _RESHAPE_CALLS if _valid(s)}
    assert specengine.cache_misses(cfn) == len(specengine.cache_entries(cfn)) == len(distinct)


def _valid(shapes):
    try:
        _reshapes(*[torch.randn(*s) for s in shapes])
    except RuntimeError:
        return False
    return True


def test_prove_asks_z3_once_per_undecided_question_until_something_is_learned():
    """fastspeech2's duration loop asked `u1 - 1 == 0` of z3 320 times (1 s): an undecided question stays
    undecided while no constraint, fact, assumption or unbacked range changes, and is asked again after one does."""
    from specengine.constraints.unbacked import UnbackedSymbol

    d = Decider({"s0": 4}, {"s0": (0, None)})
    u = d.unbacked.add(UnbackedSymbol("u0", int, "a data-dependent int of item", HERE, lo=0))
    d.hints["u0"] = 2
    q = E.eq(E.sub(u, s0), 0)
    assert d.prove(q) is None
    calls = d.z3_calls
    assert all(d.prove(q) is None for _ in range(5)) and d.z3_calls == calls  # nothing learned: not asked again
    saved = d.checkpoint()
    d.unbacked.assume(E.eq(u, s0), HERE)  # an assumption proves it
    assert d.prove(q) is True
    d.restore(saved)  # forgotten: undecided again
    assert d.prove(q) is None
    d.unbacked.symbols["u0"].lo = d.unbacked.symbols["u0"].hi = 4  # a range narrowed (torch._check): not s0's
    assert d.prove(q) is None and d.z3_calls > calls
    d.record(E.eq(s0, 4), HERE)  # a recorded constraint decides it
    assert d.prove(q) is True
