"""Differential fuzzing against eager (issue 6): random programs, random call sequences, three dynamic modes.

The CI budget is bounded (`max_examples`, derandomized, so every run checks the same programs); `bench/fuzz.py
--programs N` runs the same generator much longer. A failure prints the program as Python and its calls.
"""

from __future__ import annotations

import collections

import torch
from fuzzgen import KINDS, Call, DataChooser, Program, RandomChooser, Step, gen_calls, gen_program
from fuzzrun import Tally, program_seed, run_case
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specengine.ir.symbol import Symbol


@st.composite
def cases(draw):
    ch = DataChooser(draw)
    program = gen_program(ch, max_steps=6)
    return program, gen_calls(ch, program, max_calls=6)


@settings(max_examples=1200, deadline=None, derandomize=True, database=None, print_blob=False,
          suppress_health_check=list(HealthCheck))  # fmt: skip
@given(case=cases())
def test_compiled_programs_match_eager(case):
    program, calls = case
    tally = Tally()
    run_case(program, calls, tally)
    assert tally.calls == 3 * len(calls)
    assert not tally.failures, tally.failures[0]


def test_generator_covers_every_kind_of_step_and_input():
    kinds, calls = collections.Counter(), []
    for seed in range(300):
        ch = RandomChooser(seed)
        program = gen_program(ch)
        kinds.update(step.kind for step in program.steps)
        calls += gen_calls(ch, program)
        program.function()  # every program is valid Python
    assert set(kinds) == set(KINDS)
    sizes = {s for c in calls for shape in c.shapes for s in shape}
    assert {0, 1, 2} <= sizes
    assert len({d for c in calls for d in c.dtypes}) == 2
    assert len(calls) > len(set(calls))  # repeated calls


def test_the_harness_catches_a_wrong_result(monkeypatch):
    # A broken executor (it runs every mul as an add) must be reported as "wrong", never pass silently.
    from specengine.executors import torchex

    real = torchex._impl_symbol

    def broken(sym):
        return Symbol("add", "torch", impl=torch.add) if sym.impl is torch.mul else real(sym)

    monkeypatch.setattr(torchex, "_impl_symbol", broken)
    monkeypatch.setattr(torchex.torch_executor, "_impls", {})
    program = Program((("A",),), 0, 0, (Step("binary", ("v1 = x0 * x0",)),), ("v1",))
    tally = Tally()
    run_case(program, (Call(((3,),), (torch.float32,), (), ()),), tally)
    assert tally.wrong == 3 and tally.crashes == 0, tally.failures
    assert "outputs differ" in tally.failures[0] and "v1 = x0 * x0" in tally.failures[0]


def test_programs_of_the_bench_generator():
    # bench/fuzz.py's programs are longer than what hypothesis draws: a fixed sample of them runs in CI too.
    tally = Tally()
    for seed in range(25):
        ch = RandomChooser(program_seed(7, seed))
        program = gen_program(ch)
        run_case(program, gen_calls(ch, program), tally)
    assert not tally.failures, tally.failures[0]
    assert tally.eager_ok > tally.calls // 2  # most calls run (the others check that errors match eager)
