"""Threads, interrupted compiles and memory (issue 6)."""

from __future__ import annotations

import builtins
import gc
import threading
import traceback
import tracemalloc
import weakref

import pytest
import torch
from helpers import counts

import specengine
from specengine import api
from specengine.ir import context

# Threads.


def branchy(x, y):
    return (x * 2 + y).sum(0) if x.shape[0] > 3 else (x - y).amax(-1)


SHAPES = [(n, m) for n in (1, 2, 4, 6) for m in (1, 3)]


@pytest.mark.parametrize("dynamic", [True, False, None])
def test_eight_threads_share_one_compiled_function(dynamic, monkeypatch):
    compiled: list[tuple] = []
    lock = threading.Lock()
    real = api.compile_entry

    def counted(fn, args, kwargs, *rest):
        entry = real(fn, args, kwargs, *rest)
        with lock:
            compiled.append(tuple(a.shape for a in args) + (len(compiled),))
        return entry

    monkeypatch.setattr(api, "compile_entry", counted)
    cfn = specengine.compile(branchy, dynamic=dynamic)
    start, errors = threading.Barrier(8), []

    def worker(k: int) -> None:
        start.wait()  # every thread misses on the same first shapes at once
        g = torch.Generator().manual_seed(k)
        for i in range(250):
            shape = SHAPES[(i + k * (i // 50)) % len(SHAPES)]
            x, y = torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)
            try:
                torch.testing.assert_close(cfn(x, y), branchy(x, y))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    misses, hits = counts(cfn)
    assert misses + hits == 2000
    assert misses == len(compiled)  # a miss is one compile
    shapes = [c[:-1] for c in compiled]
    assert len(set(shapes)) == len(shapes)  # each specialization compiled once
    entries = len(specengine.cache_entries(cfn))
    if dynamic is None:  # automatic dynamic: a generic entry replaces the static entries it subsumes
        assert 2 <= entries <= misses <= 4
    else:
        assert misses == entries == {True: 2, False: 8}[dynamic]


def test_print_in_other_threads_works_while_a_function_is_traced(capsys):
    tracing, printed = threading.Event(), threading.Event()

    def slow(a):
        tracing.set()
        assert printed.wait(10)
        return a * 2

    cfn = specengine.compile(slow, dynamic=True)
    worker = threading.Thread(target=cfn, args=(torch.ones(2),))
    worker.start()
    assert tracing.wait(10)
    print("from another thread")  # the print hook forwards outside a tracing context
    printed.set()
    worker.join()
    assert capsys.readouterr().out == "from another thread\n"
    assert builtins.print is not _guarded_print() and counts(cfn) == (1, 0)


# Interrupted compiles.


def user_bug(a, n):
    b = a * n
    if n > 2:
        raise ValueError(f"user bug with n={n}")  # the user's line: it must show in the traceback
    return b


def test_an_exception_while_tracing_keeps_the_users_traceback_and_the_cache():
    cfn = specengine.compile(user_bug, dynamic=False)
    cfn(torch.randn(3), 1)
    before = (counts(cfn), tuple(specengine.cache_entries(cfn)))
    with pytest.raises(ValueError, match="user bug with n=3") as info:
        cfn(torch.randn(3), 3)
    frames = traceback.extract_tb(info.value.__traceback__)
    assert frames[-1].name == "user_bug" and frames[-1].line.startswith('raise ValueError(f"user bug')
    assert (counts(cfn), tuple(specengine.cache_entries(cfn))) == before
    assert context.current() is None and builtins.print is not _guarded_print()


def _guarded_print():
    from specengine.capture import effect_ops

    return effect_ops._print


def interrupted(a, n):
    if n == 3:
        raise KeyboardInterrupt
    return a + n


def test_a_keyboard_interrupt_in_the_traced_function_leaves_no_entry():
    cfn = specengine.compile(interrupted, dynamic=False)
    with pytest.raises(KeyboardInterrupt):
        cfn(torch.randn(2), 3)
    assert counts(cfn) == (0, 0) and specengine.cache_entries(cfn) == []
    assert context.current() is None and builtins.print is not _guarded_print()
    x = torch.randn(2)
    torch.testing.assert_close(cfn(x, 1), x + 1)
    assert counts(cfn) == (1, 0)


@pytest.mark.parametrize("stage", ["_trace_stage", "_computation_stage", "_prologue_stage"])
def test_a_keyboard_interrupt_in_a_compile_stage_leaves_no_entry(stage, monkeypatch):
    cfn = specengine.compile(interrupted, dynamic=None)
    x = torch.randn(2)
    cfn(x, 1)
    before = (counts(cfn), tuple(specengine.cache_entries(cfn)), cfn._auto_dynamic, dict(cfn._seen))

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(api, stage, interrupt)
        with pytest.raises(KeyboardInterrupt):
            cfn(x, 2)
    assert (counts(cfn), tuple(specengine.cache_entries(cfn)), cfn._auto_dynamic, dict(cfn._seen)) == before
    torch.testing.assert_close(cfn(x, 2), x + 2)  # the interrupted compile runs again, whole
    assert counts(cfn) == (2, 0)


# Memory.


def two_ways(x):
    return (x * 2).sum(-1) if x.shape[0] > 25 else x.amax(0)


def test_ten_thousand_calls_over_fifty_shapes_keep_memory_bounded():
    cfn = specengine.compile(two_ways, dynamic=True)
    shapes = [(n, 1 + n % 5) for n in range(1, 51)]
    inputs = [torch.randn(*s) for s in shapes]
    for x in inputs * 2:  # warm up: compile, fill caches (hash-consed expressions, interned strings)
        cfn(x)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(10_000):
            cfn(inputs[i % 50])
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert counts(cfn) == (2, 10_098)  # the warm-up missed twice
    assert grown < 16 * 1024, f"{grown} bytes kept after 10,000 cached calls"  # measured: about 100 bytes


def test_entries_do_not_keep_inputs_alive():
    cfn = specengine.compile(lambda a, b: (a * b.shape[0], b.sum()), dynamic=None)
    refs = []
    for shape in [(3, 2), (3, 2), (4, 2), (5, 2), (5, 2)]:  # misses (static, then dynamic) and hits
        a, b = torch.randn(*shape), torch.randn(*shape)
        refs += [weakref.ref(a), weakref.ref(b)]
        out = cfn(a, b)
        del a, b, out
    try:
        cfn(torch.randn(2, 2), None)  # a failed compile: its traceback is dropped with the exception
    except AttributeError:
        pass
    gc.collect()
    assert all(r() is None for r in refs)
    assert counts(cfn) == (2, 3)


def test_a_deleted_compiled_function_frees_its_entries():
    def f(x, n):
        return x * n if x.shape[0] > 1 else x.sum()

    cfn = specengine.compile(f, dynamic=False)
    for n in range(1, 6):
        cfn(torch.randn(n), n)
    entries = specengine.cache_entries(cfn)
    refs = [weakref.ref(cfn)] + [weakref.ref(e) for e in entries] + [weakref.ref(e.computation) for e in entries]
    refs += [weakref.ref(e.prologue.fn) for e in entries]
    del cfn, entries
    gc.collect()
    assert [r for r in refs if r() is not None] == []
