"""Guards are irredundant (issue 16): a property over random programs from the fuzzer.

For every entry of every program, each guard can fail: z3 finds a model of the domain (sizes >= 0, ranges
that are not pins) in which it is false, and the guard set is irredundant: no guard is implied by the domain
and the entry's other guards (z3 finds a model in which the others hold and it fails).
"""

from __future__ import annotations

import warnings

import pytest
import z3
from fuzzgen import RandomChooser, gen_calls, gen_program

import specengine
from specengine.constraints.decide import range_facts
from specengine.constraints.floats import FloatExpr
from specengine.constraints.z3expr import to_z3

PROGRAMS = 400


def _z3(e, env):
    return e.to_z3(env) if isinstance(e, FloatExpr) else to_z3(e, env)


def _counterexample(others: list, guard, ranges: dict) -> z3.CheckSatResult:
    """Whether the domain and `others` allow `guard` to fail (sat: yes)."""
    env: dict = {}
    solver = z3.Solver()
    solver.set("timeout", 5000)
    solver.add(*range_facts(ranges, env), *(_z3(g, env) for g in others), z3.Not(_z3(guard, env)))
    return solver.check()


def _entries(seed: int) -> list:
    ch = RandomChooser(seed)
    program = gen_program(ch, max_steps=8)
    calls = gen_calls(ch, program, max_calls=5)
    cfn = specengine.compile(program.function(), dynamic=True, recompile_limit=1000)
    for i, call in enumerate(calls):
        try:
            cfn(*call.inputs(i))
        except Exception:  # noqa: BLE001 - programs that raise eagerly raise here too; their entries still count
            pass
    return specengine.cache_entries(cfn)


def test_every_guard_of_random_programs_can_fail_and_none_is_implied_by_the_others():
    checked = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for seed in range(PROGRAMS):
            for entry in _entries(seed):
                solution = entry.solution
                domain = {s: r for s, r in solution.ranges.items() if r[0] != r[1]}  # static pins are guards
                exprs = [g.expr for g in solution.guards]
                for i, guard in enumerate(exprs):
                    text = f"seed {seed}: guard {guard} of {[str(e) for e in exprs]}"
                    assert _counterexample([], guard, domain) != z3.unsat, f"{text} can never fail"
                    others = exprs[:i] + exprs[i + 1 :]
                    assert _counterexample(others, guard, domain) != z3.unsat, f"{text} is implied by the others"
                    checked += 1
    assert checked > 100  # the property is not vacuous


@pytest.mark.parametrize("dynamic", [True, None])
def test_the_demo_gpt_has_no_shape_guard_on_idx(dynamic):
    import torch

    from specengine.examples.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=32, block_size=16, n_layer=2, n_head=2, n_embd=16)).eval()
    cfn = specengine.compile(model, dynamic=dynamic)
    with torch.no_grad():
        for b, t in ((2, 5), (1, 1), (3, 7)):
            idx = torch.randint(0, 32, (b, t))
            torch.testing.assert_close(cfn(idx), model(idx))
    guards = [str(g) for g in specengine.last_guards(cfn)]
    assert not [g for g in guards if "idx" in g], guards
    assert specengine.cache_misses(cfn) == (1 if dynamic else 2)


def test_the_issue_guard_simplifies_to_true():
    from specengine.constraints import expr as E
    from specengine.constraints.folding import simplify

    b, t = E.sym("s0"), E.sym("s1")
    width = E.ite(E.eq(t, 1), E.maximum(0, E.minimum(64, t)), t)  # a slice's length, broadcast against t
    batch = E.ite(E.eq(b, 1), 1, b)
    guard = E.eq(64 * width * E.ite(E.eq(batch, 1), b, batch), 64 * b * t)
    assert width is t and batch is b  # If(x == v, a, b) is b when both branches agree at x = v
    assert simplify(guard, {"s0": (0, None), "s1": (0, None)}) is E.TRUE


def test_simplify_keeps_the_value_over_the_ranges():
    import itertools

    from specengine.constraints import expr as E
    from specengine.constraints.folding import simplify

    a, b, c, n = (E.sym(s) for s in ("s0", "s1", "s2", "s3"))
    ranges = {"s0": (0, None), "s1": (1, None), "s2": (0, None), "s3": (None, None)}
    cases = {
        E.maximum(0, E.minimum(64, a)): "min(64, s0)",
        E.eq(64 * a, 64 * c): "s0 == s2",
        E.eq(2 * a, 4 * c + 2): "s0 == 2*s2 + 1",
        E.ge(4 * a, 8 * c): "s0 >= 2*s2",
        E.eq(a * b * c, n * a * b * (c // 3)): "(s0 == 0 or s2 == s3*(s2//3))",  # s1 >= 1 cancels; s0 splits
        E.ne(b * a, b * c): "s0 != s2",
        E.ne(a * c, a * n): "s0*s2 != s0*s3",  # a factor that may be 0 stays in `!=`
        E.ite(E.ge(b, 1), a, c): "s0",
    }
    for e, text in cases.items():
        s = simplify(e, ranges)
        assert str(s) == text, (e, s)
        for values in itertools.product((0, 1, 2, 3, 5), (1, 2, 3), (0, 1, 2, 6), (-2, 0, 1, 2)):
            env = dict(zip(("s0", "s1", "s2", "s3"), values))
            try:
                expected = e.eval(env)
            except ZeroDivisionError:
                continue
            assert s.eval(env) == expected, (e, s, env)
