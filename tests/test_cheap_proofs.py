"""Cheap proofs before z3 (constraints/facts.py) and z3 bounded by work, not time (issue 26)."""

from __future__ import annotations

import itertools
import warnings

import torch
import torch.nn.functional as F
import z3
from hypothesis import given, settings
from hypothesis import strategies as st

import specengine
from specengine.constraints import expr as E
from specengine.constraints.decide import Decider
from specengine.constraints.facts import Facts
from specengine.constraints.z3expr import check, new_solver
from specengine.errors import SolverWarning
from specengine.provenance import Provenance

HERE = Provenance("test.py", 1, "op", "reason")
s0, s1, s2, s3, s4 = (E.sym(f"s{i}") for i in range(5))
SIZES = {f"s{i}": (0, None) for i in range(5)}


def _decider(hints, *facts):
    d = Decider(hints, SIZES)
    for f in facts:
        d.record(f, HERE)
    return d


def _pad(u, c):
    """torch's window padding: (c - u % c) % c, as Swin computes it."""
    return E.mod(E.neg(E.mod(u, c)), c)


def test_bloom_decode_divisibility_is_decided_without_z3():
    """`(64*s2 + 64*s2*s4) % (64*s0) == 0` after `max(0, s0) == s2`: one equality (ranges fold the max) and an
    exact division by a divisor known nonzero."""
    d = _decider({"s0": 2, "s1": 1, "s2": 2, "s4": 5}, E.ne(E.mul(s2, s4), 0), E.eq(E.maximum(0, s0), s2))
    q = E.eq(E.mod(E.add(E.mul(64, E.mul(s2, s4)), E.mul(64, E.mul(s2, E.maximum(0, s1)))), E.mul(64, s0)), 0)
    assert d.decide(q, HERE) is True
    quotient = E.floordiv(E.add(E.mul(64, E.mul(s2, s4)), E.mul(64, E.mul(s2, s1))), E.mul(64, s0))
    assert d.decide(E.eq(quotient, E.add(s4, s1)), HERE) is True
    assert d.z3_calls == 0 and len(d.constraints) == 2


def test_swin_window_padding_is_decided_without_z3():
    """Patch grid u = s2//4 padded to a multiple of the window (4): the windows' count divides exactly, and once the
    padding is known to be 0 the grid's parity and the halved grid follow from residues."""
    u, v = E.floordiv(s2, 4), E.floordiv(s3, 4)
    a, b = E.floordiv(E.add(u, _pad(u, 4)), 4), E.floordiv(E.add(v, _pad(v, 4)), 4)
    d = _decider({"s0": 1, "s2": 32, "s3": 32}, E.eq(E.mod(s2, 4), 0), E.and_(E.ge(s2, 4), E.ge(s3, 4)),
                 E.gt(E.minimum(u, v), 4))  # fmt: skip
    windows = E.mul(s0, E.mul(a, b))
    assert d.decide(E.ne(windows, 0), HERE) is True  # recorded: s0 may be 0
    assert d.decide(E.eq(E.mod(E.mul(256, windows), E.mul(128, windows)), 0), HERE) is True
    assert d.decide(E.eq(E.floordiv(E.mul(256, windows), E.mul(128, windows)), 2), HERE) is True
    padded = E.mul(E.add(u, _pad(u, 4)), E.add(v, _pad(v, 4)))
    assert d.decide(E.ne(padded, 0), HERE) is True  # bounds: u >= 5
    assert d.decide(E.ge(_pad(u, 4), 1), HERE) is False  # not implied (s2 = 28 pads): recorded, by example
    assert d.decide(E.eq(E.mod(u, 2), 1), HERE) is False  # u % 4 == 0 now: implied
    half = E.floordiv(E.add(u, 1), 2)
    assert d.decide(E.eq(half, E.floordiv(E.add(s2, 4), 8)), HERE) is True  # s2 % 16 == 0 (with s2 % 4 == 0)
    assert d.z3_calls == 0
    assert [str(c) for c in d.constraints][-2:] == ["s0*((s2//4 + -(s2//4%4)%4)//4)*((s3//4 + -(s3//4%4)%4)//4) != 0",
                                                    "-(s2//4%4)%4 < 1"]  # fmt: skip


def test_nested_floor_division_of_a_conv_stack_is_bounded_by_intervals():
    """Output sizes of stride-2 convs nest floor divisions: their bounds settle the usual size checks."""
    size = s0
    for _ in range(5):
        size = E.add(E.floordiv(E.add(size, E.const(2 * 1 - 3)), 2), 1)  # (n + 2p - k)//s + 1, k=3, p=1, s=2
    d = _decider({"s0": 224}, E.ge(s0, 64))
    assert d.decide(E.ge(size, 1), HERE) is True
    assert d.decide(E.ne(size, 0), HERE) is True
    assert d.z3_calls == 0 and len(d.constraints) == 1


_ATOMS = [s0, s1, E.floordiv(s0, 2), E.mod(s0, 3), E.minimum(s0, s1), E.maximum(s0, 1), E.floordiv(s1, s0),
          E.ite(E.eq(s0, 1), s1, s0), E.mod(s1, E.ite(E.eq(s1, 1), s0, s1))]  # fmt: skip


def _expr(draw):
    a, b = draw(st.sampled_from(_ATOMS)), draw(st.sampled_from(_ATOMS))
    k, c = draw(st.integers(-3, 3)), draw(st.integers(-4, 4))
    op = draw(st.sampled_from(["add", "mul", "floordiv", "mod"]))
    e = getattr(E, op)(a, b) if op in ("add", "mul") else getattr(E, op)(E.add(a, c), E.add(b, draw(st.integers(1, 3))))
    return E.add(E.mul(k, e), c)


@st.composite
def _problem(draw):
    hints = {"s0": draw(st.integers(0, 9)), "s1": draw(st.integers(0, 9))}
    facts = []
    for _ in range(draw(st.integers(0, 3))):
        b = getattr(E, draw(st.sampled_from(["eq", "ne", "ge", "lt"])))(_expr(draw), draw(st.integers(-3, 6)))
        value = _safe(b, hints)
        if value is not None:
            facts.append(b if value else E.not_(b))
    query = getattr(E, draw(st.sampled_from(["eq", "ne", "ge", "lt"])))(_expr(draw), _expr(draw))
    return hints, facts, query


def _safe(b, env):
    try:
        return bool(b.eval(env))
    except ZeroDivisionError:
        return None


@settings(max_examples=200, deadline=None)
@given(_problem())
def test_what_the_facts_decide_holds_wherever_the_facts_hold(problem):
    """Soundness: every decision holds at every point of a grid (0..12 squared) that satisfies the facts."""
    hints, facts, query = problem
    known = Facts({"s0": (0, None), "s1": (0, None)})
    for f in facts:
        known.add(f)
    decided = known.decide(query)
    if decided is None:
        return
    for x, y in itertools.product(range(13), repeat=2):
        env = {"s0": x, "s1": y}
        if all(_safe(f, env) is True for f in facts):
            assert _safe(query, env) in (decided, None), (facts, query, env)


def test_z3_is_bounded_by_work_and_an_unknown_is_recorded(monkeypatch):
    """A query z3 cannot settle within `solver_rlimit` answers unknown after that much work (the same on any machine),
    and the decider records the decision instead of assuming it: a guard that is sound, if redundant."""
    monkeypatch.setattr(specengine.config, "solver_rlimit", 200)
    solver = new_solver(30_000)
    x, y = z3.Ints("x y")
    solver.add(x * x * y - 7 * y * y * x == 12345, x > 0, y > 0)
    result, _, work = check(solver, what="a cubic")
    assert result == z3.unknown and work <= 200 + 1000  # z3 checks its limit between steps
    monkeypatch.setattr(specengine.config, "solver_rlimit", 1)
    d = _decider({"s0": 6, "s1": 3}, E.gt(s0, s1))
    assert d.decide(E.ge(s0, s1), HERE) is True  # implied, but only z3 sees it, and z3 stops at once
    assert d.z3_calls == 1 and [str(c) for c in d.constraints] == ["s0 > s1", "s0 >= s1"]  # recorded, not assumed


def test_broadcast_sizes_are_decided_by_cases():
    """`numel % s0 == 0` where each broadcast size is `s3 if s0 == 1 else s0`: both cases of `s0 == 1` decide it."""
    bcast = E.ite(E.eq(s0, 1), s1, s0)
    outer = E.ite(E.eq(bcast, 1), s2, bcast)
    d = _decider({"s0": 2, "s1": 2, "s2": 2, "s3": 3}, E.ne(s0, 0))
    assert d.decide(E.eq(E.mod(E.mul(outer, s3), s0), 0), HERE) is True
    assert d.z3_calls == 0 and len(d.constraints) == 1


def _windows(x):
    b, h, w, c = x.shape
    pad_b, pad_r = (4 - h % 4) % 4, (4 - w % 4) % 4
    x = F.pad(x, (0, 0, 0, pad_r, 0, pad_b))
    hp, wp = h + pad_b, w + pad_r
    x = x.view(b, hp // 4, 4, wp // 4, 4, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, 16, c)
    mask = torch.zeros(hp, wp)
    mask[h:, :] = 1
    mask[:, w:] = 1
    mask = mask.view(hp // 4, 4, wp // 4, 4).permute(0, 2, 1, 3).reshape(-1, 16)
    return (x * 2).view(b, -1, 16, c).sum(-1) + mask


def test_window_partition_with_padding_compiles_with_few_cheap_z3_queries():
    cfn = specengine.compile(_windows, dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SolverWarning)  # no z3 query gives up
        for h, w in [(8, 8), (10, 9), (8, 8), (13, 7)]:
            x = torch.randn(2, h, w, 3)
            torch.testing.assert_close(cfn(x), _windows(x))
    for entry in specengine.cache_entries(cfn):
        assert entry.stats["z3_max_query_work"] <= specengine.config.solver_rlimit
