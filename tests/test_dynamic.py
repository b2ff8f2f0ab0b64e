"""Dynamic modes and user control: automatic dynamic, marks, the recompile limit, explanations, logs."""

from __future__ import annotations

import logging
import warnings

import pytest
import torch
from helpers import counts, guards, run_both

import specengine


def mul(x, y):
    return x * y


@pytest.mark.parametrize(("dynamic", "misses"), [(None, 2), (True, 1), (False, 5)])
def test_automatic_dynamic_counts(dynamic, misses):
    cfn = specengine.compile(mul, dynamic=dynamic)
    for n in (2, 3, 4, 4, 5, 5, 6):
        run_both(mul, cfn, [torch.randn(n), torch.randn(n)])
    assert counts(cfn) == (misses, 7 - misses)


def test_automatic_dynamic_first_compile_pins_then_generalizes():
    cfn = specengine.compile(mul)  # dynamic=None is the default
    run_both(mul, cfn, [torch.randn(2), torch.randn(2)])
    assert guards(cfn) == ["x.shape[0] == 2", "y.shape[0] == 2"]
    run_both(mul, cfn, [torch.randn(3), torch.randn(3)])
    assert guards(cfn) == []  # both sizes are symbolic now, and broadcasting needs no guard


def test_bool_flag_and_changing_shape_match_torch_compile_counts():
    # torch.compile's automatic dynamic: the first compile is static; (3, True) changes the size, which becomes
    # dynamic; (3, False) flips a bool, which is always specialized; (4, False) and (2, True) hit. 3 compiles.
    def f(x, flag):
        return x * 2 if flag else x - 1

    cfn = specengine.compile(f)
    for n, flag in ((2, True), (3, True), (3, False), (4, False), (2, True)):
        run_both(f, cfn, [torch.randn(n), flag])
    assert counts(cfn) == (3, 2)


def test_int_inputs_follow_automatic_dynamic():
    def f(x, n):
        return x * n

    cfn = specengine.compile(f)
    for n in (2, 2, 3, 4, 5):
        run_both(f, cfn, [torch.randn(3), n])
    assert counts(cfn) == (2, 3)
    assert guards(cfn) == ["x.shape[0] == 3"]


def test_mark_dynamic_range_decides_branches_without_guards():
    def f(x):
        return x * 2 if x.shape[0] > 1 else x

    cfn = specengine.compile(f, dynamic=False)
    for n in (2, 5, 9):
        x = torch.randn(n)
        specengine.mark_dynamic(x, 0, min=2, max=16)
        run_both(f, cfn, [x])
    assert counts(cfn) == (1, 2)
    assert guards(cfn) == ["x.shape[0] >= 2", "x.shape[0] <= 16"]  # the range, checked; no branch guard
    run_both(f, cfn, [torch.randn(1)])  # outside the range: a new (static) entry
    assert counts(cfn) == (2, 2)
    assert specengine.recompile_reasons(cfn)[0].startswith("x.shape[0] >= 2 (<mark_dynamic>:0, mark_dynamic")


def test_mark_static_pins_under_dynamic_true():
    cfn = specengine.compile(mul, dynamic=True)
    x = torch.randn(3)
    specengine.mark_static(x, 0)
    run_both(mul, cfn, [x, torch.randn(3)])
    assert guards(cfn) == ["x.shape[0] == 3"]  # y broadcasts against 3 (or raises at run time): no guard


def test_pinning_a_dynamic_dim_raises_with_a_fix_that_works():
    def f(x):
        return x * int(x.shape[0])

    x = torch.randn(3)
    specengine.mark_dynamic(x, 0)
    cfn = specengine.compile(f, dynamic=True)
    with pytest.raises(specengine.ConstraintViolationError) as info:
        cfn(x)
    msg = str(info.value)
    assert "x.shape[0] is marked dynamic, but the program pins it: guard `x.shape[0] == 3`" in msg
    assert "test_dynamic.py:" in msg and "dim0 = 3" in msg and "specengine.mark_static(x, 0)" in msg
    assert counts(cfn) == (0, 0)
    x = torch.randn(3)
    specengine.mark_static(x, 0)  # the suggested fix
    run_both(f, cfn, [x])
    assert counts(cfn) == (1, 0)


@pytest.mark.parametrize("rows", [1, 3])
def test_divisibility_on_a_dynamic_dim_raises_with_a_fix_that_works(rows):
    def f(x):
        return x.reshape(rows, -1, 2).sum(-1)  # with rows=3 the guard is 3*x.shape[1] % 6 == 0

    x = torch.randn(rows, 4)
    specengine.mark_dynamic(x, 1)
    cfn = specengine.compile(f, dynamic=False)  # only the marked dim is dynamic, as with torch.export
    with pytest.raises(specengine.ConstraintViolationError) as info:
        cfn(x)
    msg = str(info.value)
    assert "x.shape[1] is marked dynamic, but the program needs a divisibility" in msg
    assert "dim1 = 2*_dim1" in msg and "specengine.mark_dynamic(x, 1, multiple_of=2)" in msg
    for n in (4, 6, 10):
        x = torch.randn(rows, n)
        specengine.mark_dynamic(x, 1, multiple_of=2)  # the suggested fix
        run_both(f, cfn, [x])
    assert counts(cfn) == (1, 2)
    assert guards(cfn) == [f"x.shape[0] == {rows}", "x.shape[1]%2 == 0"]


def test_recompile_limit_warns_then_runs_eagerly_and_old_entries_keep_serving():
    cfn = specengine.compile(mul, dynamic=False, recompile_limit=2)
    for n in (1, 2):
        run_both(mul, cfn, [torch.randn(n), torch.randn(n)])
    with pytest.warns(specengine.RecompileLimitWarning, match=r"mul reached the recompile limit \(2 entries\)"):
        run_both(mul, cfn, [torch.randn(3), torch.randn(3)])
    assert counts(cfn) == (2, 0)
    run_both(mul, cfn, [torch.randn(2), torch.randn(2)])
    assert counts(cfn) == (2, 1)


def test_recompile_limit_default_global_and_raise_mode(monkeypatch):
    assert specengine.config.__class__().recompile_limit == 8
    monkeypatch.setattr(specengine.config, "recompile_limit", 1)
    monkeypatch.setattr(specengine.config, "on_recompile_limit", "raise")
    cfn = specengine.compile(mul, dynamic=False)
    run_both(mul, cfn, [torch.randn(1), torch.randn(1)])
    with pytest.raises(specengine.RecompileLimitError, match="recompile limit"):
        cfn(torch.randn(2), torch.randn(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfn2 = specengine.compile(mul, dynamic=False, recompile_limit=3, on_recompile_limit="warn")
        for n in (1, 2, 3):
            run_both(mul, cfn2, [torch.randn(n), torch.randn(n)])
    assert counts(cfn2) == (3, 0)


def test_recompile_reasons_one_line_per_entry_and_explain(capsys):
    def f(a):
        return a * 2 if a.shape[0] > 2 else a * 3

    cfn = specengine.compile(f, dynamic=True)
    for n in (4, 1, 5):
        cfn(torch.randn(n))
    cfn(torch.randn(2, 2))
    reasons = specengine.recompile_reasons(cfn)
    assert len(reasons) == 2
    assert reasons[0].startswith("a.shape[0] > 2 (test_dynamic.py:") and reasons[0].endswith("a.shape[0] = 1")
    lines = reasons[1].splitlines()
    assert lines == ["a.ndim == 1 failed: a.ndim = 2", "a.ndim == 1 failed: a.ndim = 2"]
    text = specengine.explain(cfn)
    assert text == capsys.readouterr().out.rstrip("\n")
    assert text.startswith("f: 3 misses, 1 hits, 3 entries")  # entries, hits, and a line per guard
    assert "entry 0: 1 hits" in text and "a.shape[0] > 2    # test_dynamic.py:" in text


def test_reset_drops_entries_and_counters():
    cfn = specengine.compile(mul, dynamic=True)
    run_both(mul, cfn, [torch.randn(2), torch.randn(2)])
    specengine.reset(cfn)
    assert counts(cfn) == (0, 0) and specengine.cache_entries(cfn) == []
    run_both(mul, cfn, [torch.randn(2), torch.randn(2)])
    assert counts(cfn) == (1, 0)


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ("guards", "guards:\n  a.shape[0] > 2  (test_dynamic.py:"),
        ("recompiles", "recompiling f (entry 2):\n  a.shape[0] > 2 (test_dynamic.py:"),
        ("traces", "# Constructed by Tracing"),
        ("solver", "solved 1 constraints into 1 guards"),
    ],
)
def test_log_topics(topic, expected, caplog):
    def f(a):
        return a * 2 if a.shape[0] > 2 else a * 3

    specengine.set_logs(topic)
    try:
        with caplog.at_level(logging.INFO, logger="specengine"):
            cfn = specengine.compile(f, dynamic=True)
            cfn(torch.randn(4))
            cfn(torch.randn(1))
    finally:
        specengine.set_logs("")
    records = [r for r in caplog.records if r.name == f"specengine.{topic}"]
    assert records and any(expected in r.getMessage() for r in records)
    assert all(r.name == f"specengine.{topic}" for r in caplog.records if r.name.startswith("specengine."))


def test_logs_env_variable_in_a_fresh_process():
    import os
    import subprocess
    import sys

    code = "import torch, specengine\nf = specengine.compile(lambda a: a + 1, dynamic=True)\nf(torch.randn(2))\n"
    env = {**os.environ, "SPECENGINE_LOGS": "traces,guards"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "[specengine.traces] traced <lambda>" in out.stderr or "[specengine.traces] traced prologue" in out.stderr
    assert "[specengine.guards]" in out.stderr and "(none)" in out.stderr


def test_strings_are_compared_by_value():
    def f(a, mode):
        return a * 2 if mode == "double" else a * 3

    cfn = specengine.compile(f, dynamic=True)
    for mode in ("double", "triple", "double"):
        run_both(f, cfn, [torch.randn(3), mode])
    assert counts(cfn) == (2, 1)


def test_floats_follow_automatic_dynamic():
    def f(x, s):
        return x * s if s > 0 else x

    cfn = specengine.compile(f)
    for s in (1.5, 1.5, 2.0, 2.5, -1.0):
        run_both(f, cfn, [torch.randn(3), s])
    assert counts(cfn) == (3, 2)  # static 1.5; then s symbolic with guard s > 0; then s <= 0
    assert guards(cfn) == ["x.shape[0] == 3", "not (s > 0)"]  # negated as not (...): NaN fails s > 0
