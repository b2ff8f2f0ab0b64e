"""Calls the tracer cannot see (issue 22, part 2; `specengine/capture/calls.py`), by a generator.

Each case is a kind of call (a pure C function, a getter whose value is guarded, a call whose result differs on every
call) x where the program reaches it from (an argument, a global, a closure variable, a module attribute) x the
three dynamic modes. A pure call hits; a guarded getter's entry is not offered a call where the getter gives another
value (and serves again when the value comes back); a call whose result differs between calls is refused with an
error naming it and the program's line, and the failed compile changes nothing (no entry, the generator's state as
it was). Observation is per thread: another thread drawing random numbers or importing while this one traces
changes nothing."""

from __future__ import annotations

import contextvars
import itertools
import math
import operator
import os
import random
import re
import sys
import threading
import time
import types
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import pytest
import torch
from helpers import counts
from unseen_gen import KINDS as ITER_KINDS
from unseen_gen import USES, all_cases, run_case

import specengine
from specengine import UnsupportedOpError

_CV = contextvars.ContextVar("se_test_cv", default=2)


@dataclass(frozen=True)
class Kind:
    """One kind of call: `make()` gives the object the program reaches; `use` is the expression over it (`{o}`);
    `kind` is "pure", "getter" or "refused"; a getter's `change()` makes it give another value and returns the undo."""

    name: str
    make: Callable[[], Any]
    use: str
    kind: str
    change: Callable[[], Callable[[], None]] | None = None
    says: str = ""  # what a refusal names


def _threads() -> Callable[[], None]:
    n = torch.get_num_threads()
    torch.set_num_threads(n + 1)
    return lambda: torch.set_num_threads(n)


def _contextvar() -> Callable[[], None]:
    token = _CV.set(5)
    return lambda: _CV.reset(token)


def _chdir() -> Callable[[], None]:
    old = os.getcwd()
    os.chdir(os.path.dirname(old) if os.path.dirname(old) != old else os.path.expanduser("~"))
    return lambda: os.chdir(old)


KINDS = [
    Kind("math.floor", lambda: math.floor, "{o}(2.5)", "pure"),
    Kind("operator.mul", lambda: operator.mul, "{o}(3, 2)", "pure"),
    Kind("builtin abs", lambda: abs, "{o}(-2)", "pure"),
    Kind("torch.get_num_threads", lambda: torch.get_num_threads, "{o}()", "getter", _threads),
    Kind("ContextVar.get", lambda: _CV, "{o}.get()", "getter", _contextvar),
    Kind("time.monotonic_ns", lambda: time.monotonic_ns, "({o}() % 7)", "refused", says="time.monotonic_ns()"),
    Kind("time.time", lambda: time.time, "({o}() % 7)", "refused", says="time.time()"),
    Kind("random.random", lambda: random.random, "{o}()", "refused", says="random.random()"),
    Kind("random.Random", lambda: random.Random(0), "{o}.random()", "refused", says="random.random()"),
    Kind("random.Random.choice", lambda: random.Random(0), "{o}.choice([1, 2, 3])", "refused", says="choice"),
    Kind("numpy Generator", lambda: np.random.default_rng(0), "{o}.random()", "refused", says="Generator"),
    Kind("itertools.count", lambda: itertools.count(), "next({o})", "refused", says="next("),
    # C functions no rule names, classified by their module (specengine/capture/call_table.py)
    Kind("zlib.crc32", lambda: __import__("zlib").crc32, "({o}(b'abc') % 7)", "pure"),
    Kind("str method", lambda: "a-b-c", "len({o}.split('-'))", "pure"),
    Kind("os.getcwd", lambda: os.getcwd, "len({o}())", "getter", _chdir),
    Kind("os.listdir", lambda: os.listdir, "len({o}('.'))", "refused", says="os.listdir()"),
    Kind("sys.getrefcount", lambda: sys.getrefcount, "({o}(x) % 3)", "refused", says="sys.getrefcount()"),
    Kind("ContextVar.set", lambda: _CV, "(1 if {o}.set(3) else 2)", "refused", says="ContextVar.set()"),
]
REACHES = ("argument", "global", "closure", "module attribute")
MODES = (True, False, None)


def _program(kind: Kind, reach: str) -> tuple[Callable, tuple, Any]:
    """The program `f`, the extra arguments it takes after `x`, and the object it reaches."""
    obj = kind.make()
    glb: dict = {"__name__": "se_unseen_calls"}
    if reach == "argument":
        src, extra = f"def f(x, o):\n    return x * {kind.use.format(o='o')}\n", (obj,)
    elif reach == "global":
        src, extra, glb["O"] = f"def f(x):\n    return x * {kind.use.format(o='O')}\n", (), obj
    elif reach == "closure":
        src, extra = f"def outer(o):\n    def f(x):\n        return x * {kind.use.format(o='o')}\n    return f\n", ()
    else:
        mod = types.ModuleType("se_unseen_calls_mod")
        mod.O = obj
        src, extra, glb["mod"] = f"def f(x):\n    return x * {kind.use.format(o='mod.O')}\n", (), mod
    exec(compile(src, "<unseen-calls>", "exec"), glb)
    f = glb["outer"](obj) if reach == "closure" else glb["f"]
    return f, extra, obj


def _state(obj: Any) -> Any:
    if isinstance(obj, random.Random):
        return obj.getstate()
    if isinstance(obj, np.random.Generator):
        return obj.bit_generator.state
    if obj is random.random:
        return random.getstate()
    if isinstance(obj, itertools.count):
        return repr(obj)
    return None


CASES = [(k, r, m) for k in KINDS for r in REACHES for m in MODES]


@pytest.mark.parametrize("kind,reach,dynamic", CASES, ids=[f"{k.name}-{r}-{m}" for k, r, m in CASES])
def test_a_call_the_tracer_cannot_see(kind, reach, dynamic):
    f, extra, obj = _program(kind, reach)
    cfn = specengine.compile(f, dynamic=dynamic)
    x = torch.arange(3.0)
    if kind.kind == "refused":
        before = _state(obj)
        with pytest.raises(UnsupportedOpError) as info:
            cfn(x, *extra)
        assert kind.says in str(info.value) and "<unseen-calls>:" in str(info.value)
        assert counts(cfn) == (0, 0) and _state(obj) == before  # a failed compile changes nothing
        return
    for _ in range(2):
        torch.testing.assert_close(cfn(x, *extra), f(x, *extra))
    if kind.kind == "pure":
        assert counts(cfn) == (1, 1)
        return
    undo = kind.change()
    try:
        for _ in range(2):
            torch.testing.assert_close(cfn(x, *extra), f(x, *extra))
    finally:
        undo()
    torch.testing.assert_close(cfn(x, *extra), f(x, *extra))  # the first entry serves again
    assert counts(cfn) == (2, 3)


def test_the_current_thread_is_guarded_by_identity():
    def f(x):
        return x * 2 if threading.current_thread() is threading.main_thread() else x * 3

    cfn = specengine.compile(f, dynamic=True)
    x = torch.arange(3.0)
    torch.testing.assert_close(cfn(x), x * 2)
    out: list = []
    t = threading.Thread(target=lambda: out.append(cfn(x)))
    t.start()
    t.join()
    torch.testing.assert_close(out[0], x * 3)
    torch.testing.assert_close(cfn(x), x * 2)
    assert counts(cfn) == (2, 1)


def test_a_refusal_the_program_catches_still_fails_the_compile():
    def f(x):
        try:
            t = time.monotonic_ns()
        except Exception:
            t = 0
        return x * (t % 3)

    cfn = specengine.compile(f, dynamic=True)
    with pytest.raises(UnsupportedOpError, match="time.monotonic_ns"):
        cfn(torch.arange(3.0))
    assert counts(cfn) == (0, 0)


def test_a_helper_attribute_counter_is_refused_and_put_back():
    def g(x):
        g.count += 1
        return x * g.count

    g.count = 0
    cfn = specengine.compile(g, dynamic=True)
    with pytest.raises(UnsupportedOpError, match="count"):
        cfn(torch.arange(3.0))
    assert g.count == 0 and counts(cfn) == (0, 0)


def test_another_threads_draws_neither_fail_the_trace_nor_are_rolled_back():
    """A data loader thread draws from the default generator while this thread traces a function that draws
    nothing: the compile succeeds, and the other thread's draws stand (its sequence is the seed's)."""
    drawn: list = []
    ready, drew = threading.Event(), threading.Event()

    def loader():
        ready.wait(10)
        drawn.append(torch.randn(2))
        drew.set()

    def f(x):
        ready.set()
        drew.wait(10)
        return x.cos()

    torch.manual_seed(7)
    t = threading.Thread(target=loader)
    t.start()
    cfn = specengine.compile(f, dynamic=True)
    x = torch.arange(3.0)
    torch.testing.assert_close(cfn(x), x.cos())
    t.join()
    after = torch.randn(2)
    torch.manual_seed(7)
    torch.testing.assert_close(drawn[0], torch.randn(2))
    torch.testing.assert_close(after, torch.randn(2))  # not rolled back to before the trace
    assert counts(cfn) == (1, 0)


def test_a_draw_this_thread_makes_outside_the_trace_mode_is_still_refused():
    def f(x):
        with torch._C.DisableTorchFunction():
            noise = float(torch.randn(1))
        return x * noise

    cfn = specengine.compile(f, dynamic=True)
    state = torch.get_rng_state()
    with pytest.raises(UnsupportedOpError, match="random"):
        cfn(torch.arange(3.0))
    assert torch.equal(torch.get_rng_state(), state) and counts(cfn) == (0, 0)


def test_under_cprofile_the_compile_works_and_the_profiler_stays():
    """cProfile's profiler is C-level and cannot be chained: the trace's C calls go unchecked (a warning says so), the
    compile works and cProfile is still the profile function afterwards."""
    import cProfile
    import sys

    prof = cProfile.Profile()
    prof.enable()
    try:
        before = sys.getprofile()
        cfn = specengine.compile(lambda x: x.sin() * 2, dynamic=True)
        x = torch.arange(3.0)
        torch.testing.assert_close(cfn(x), x.sin() * 2)
        assert sys.getprofile() is before
    finally:
        prof.disable()
    assert counts(cfn) == (1, 0)


def test_a_c_call_whose_result_is_dropped_runs_while_tracing_and_compiles():
    """An unknown C call as a statement (its result dropped) is an effect outside the Python heap: it runs while
    tracing only (docs/python-semantics.md), and the compile works."""

    def f(x):
        os.listdir(".")
        return x * 2

    cfn = specengine.compile(f, dynamic=True)
    x = torch.arange(3.0)
    for _ in range(2):
        torch.testing.assert_close(cfn(x), x * 2)
    assert counts(cfn) == (1, 1)


@pytest.mark.parametrize("chunk", range(3))
def test_iterators_that_live_across_calls_are_refused_and_containers_pass(chunk):
    """tests/unseen_gen.py: iterator kinds x places x uses (and iterable containers), modes in turn."""
    failures = [f"{c.name}: {r}\n{c.source()}" for c in all_cases()[chunk::3] if (r := run_case(c)).startswith("FAIL")]
    assert not failures, failures[0]


TICKS = 0


def test_another_threads_global_writes_do_not_affect_a_trace():
    """Another thread assigns a global of this module (the function reads it) while this thread traces: the
    compile succeeds, the other thread's write stands, and the value read is guarded (a later change misses)."""
    global TICKS
    ready, wrote = threading.Event(), threading.Event()

    def writer():
        global TICKS
        ready.wait(10)
        TICKS = 5
        wrote.set()

    def f(x):
        ready.set()
        wrote.wait(10)
        return x * 2

    def g(x):
        return x + TICKS

    TICKS = 0
    t = threading.Thread(target=writer)
    t.start()
    cfn = specengine.compile(f, dynamic=True)
    x = torch.arange(3.0)
    torch.testing.assert_close(cfn(x), x * 2)
    t.join()
    assert TICKS == 5 and counts(cfn) == (1, 0)
    cg = specengine.compile(g, dynamic=True)
    torch.testing.assert_close(cg(x), x + 5)
    TICKS = 6
    torch.testing.assert_close(cg(x), x + 6)
    assert counts(cg) == (2, 0)


def test_this_threads_global_write_is_still_refused_while_another_thread_runs():
    stop = threading.Event()
    t = threading.Thread(target=lambda: stop.wait(10))
    t.start()

    def f(x):
        global TICKS
        TICKS += 1
        return x * TICKS

    try:
        before = TICKS
        cfn = specengine.compile(f, dynamic=True)
        with pytest.raises(UnsupportedOpError, match="TICKS"):
            cfn(torch.arange(3.0))
        assert TICKS == before and counts(cfn) == (0, 0)
    finally:
        stop.set()
        t.join()


def test_the_docs_iterator_table_names_the_generators_rows_and_columns():
    path = os.path.join(os.path.dirname(__file__), "..", "docs", "python-semantics.md")
    with open(path) as f:
        doc = f.read()
    body = doc[doc.index("<!-- unseen-matrix:begin -->") : doc.index("<!-- unseen-matrix:end -->")]
    assert "| kind \\ use | " + " | ".join(USES) + " |" in body
    assert re.findall(r"^\| (\w+) \|", body, re.M) == list(ITER_KINDS)
