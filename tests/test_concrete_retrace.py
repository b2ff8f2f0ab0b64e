"""Symbolic numbers that reach code needing a real one, and `is` on symbolic bools (api._trace_stage's retraces).

Generated: consumers (C functions and libraries that take only a real int: json, deque, struct, int's own
methods, array) x sources of the number (a size, `size()`, `len`, `numel`, an int argument) x how the program meets
the failure (it propagates, or a `try` catches it) x the three dynamic modes; and identity comparisons of a
symbolic bool (`is True`, `is not False`, `True is b`, two bools) x where the bool is made (inline, a helper, a
lambda) x modes. Each program is compared with eager over sizes 3, 1, 0, 3, 2 with exact miss counts.
"""

from __future__ import annotations

import array
import collections
import itertools
import json
import struct
import sys

import pytest
import torch

import specengine

SIZES = (3, 1, 0, 3, 2)
MODES = (True, None, False)

CONSUMERS = {  # an expression of `n` that only a real int satisfies
    "json": "json.dumps({'n': n})",
    "deque": "len(collections.deque(range(5), maxlen=n + 1))",
    "struct": "struct.pack('<q', n)",
    "int_add": "int.__add__(n, 1)",
    "bit_length": "int.bit_length(n)",
    "array": "array.array('q', [n, 1]).tolist()",
}
SOURCES = {"shape": "x.shape[0]", "size": "x.size(0)", "len": "len(x)", "numel": "x.numel()", "arg": "k"}
FATES = {
    "raises": "    r = {expr}\n",
    "caught": "    try:\n        r = {expr}\n    except TypeError:\n        r = 'caught'\n",
}


def _program(consumer: str, source: str, fate: str):
    src = (f"def f(x, k):\n    n = {SOURCES[source]}\n" + FATES[fate].format(expr=CONSUMERS[consumer])
           + "    return x * 2, r\n")  # fmt: skip
    glb = {"array": array, "collections": collections, "json": json, "struct": struct}
    exec(compile(src, f"<gen {consumer} {source} {fate}>", "exec"), glb)
    return glb["f"]


def _calls():
    return [(torch.ones(n, 2), n) for n in SIZES]


def _check(f, dynamic, expect_misses: int) -> None:
    cf = specengine.compile(f, dynamic=dynamic)
    for x, k in _calls():
        got, want = cf(x, k), f(x, k)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] == want[1], (got[1], want[1])
    assert specengine.cache_misses(cf) == expect_misses
    assert specengine.cache_hits(cf) == len(SIZES) - expect_misses


@pytest.mark.parametrize("dynamic", MODES)
@pytest.mark.parametrize("consumer,source,fate", list(itertools.product(CONSUMERS, SOURCES, FATES)))
def test_a_number_that_code_needs_real_is_pinned(consumer: str, source: str, fate: str, dynamic) -> None:
    # every distinct size is its own entry (the number is pinned), and a repeated size hits
    _check(_program(consumer, source, fate), dynamic, len(set(SIZES)))


def test_the_programs_own_type_error_is_raised_as_eager_and_nothing_is_cached() -> None:
    def f(x):
        return x * len(x.shape[0])  # eager: TypeError, object of type 'int' has no len()

    cf = specengine.compile(f, dynamic=True)
    with pytest.raises(TypeError, match="has no len"):
        f(torch.ones(2))
    with pytest.raises(TypeError, match="has no len"):
        cf(torch.ones(2))
    assert specengine.cache_entries(cf) == []


def test_a_caught_type_error_that_no_number_caused_keeps_sizes_symbolic() -> None:
    def f(x, o):
        try:
            s = len(o)
        except TypeError:
            s = -1
        return x * s

    cf = specengine.compile(f, dynamic=True)
    for n in SIZES:
        torch.testing.assert_close(cf(torch.ones(n), 5), f(torch.ones(n), 5))
    assert (specengine.cache_misses(cf), specengine.cache_hits(cf)) == (1, len(SIZES) - 1)


IDENTITY = {
    "is_true": "b is True",
    "is_not_false": "b is not False",
    "true_is": "True is b",
    "is_false": "b is False",
    "two_bools": "b is (x.shape[0] > 1)",
}
MAKERS = {
    "inline": "    b = x.shape[0] > 2\n",
    "helper": "    b = _big(x)\n",
    "lambda": "    b = (lambda t: t.shape[0] > 2)(x)\n",
}


def _big(t):
    return t.shape[0] > 2


def _identity_program(form: str, maker: str):
    src = f"def f(x):\n{MAKERS[maker]}    return (x * 2 if {IDENTITY[form]} else x - 1), {IDENTITY[form]}\n"
    ns: dict = {}
    exec(compile(src, f"<gen is {form} {maker}>", "exec"), {"_big": _big}, ns)
    return ns["f"]


def _compare_over_sizes(cf, f) -> None:
    """`cf` against eager `f` over SIZES: the tensor equal, the `is` result the same object."""
    for n in SIZES:
        x = torch.ones(n)
        got, want = cf(x), f(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1] is want[1]


@pytest.mark.filterwarnings("ignore::SyntaxWarning")
@pytest.mark.parametrize("dynamic", MODES)
@pytest.mark.parametrize("form,maker", list(itertools.product(IDENTITY, MAKERS)))
def test_is_on_a_symbolic_bool_is_eagers(form: str, maker: str, dynamic) -> None:
    f = _identity_program(form, maker)
    cf = specengine.compile(f, dynamic=dynamic)
    _compare_over_sizes(cf, f)
    # decided comparisons: one entry per outcome of `n > 2` (and of `n > 1` for two bools); static: per size
    outcomes = {tuple(n > t for t in (2, 1)) if form == "two_bools" else n > 2 for n in SIZES}
    expected = len(set(SIZES)) if dynamic is False else len(outcomes)
    assert specengine.cache_misses(cf) == expected


def test_is_none_keeps_a_comparison_symbolic() -> None:
    def f(x, m=None):
        b = x.shape[0] > 2
        return x * b if m is None else x

    cf = specengine.compile(f, dynamic=True)
    for n in SIZES:
        torch.testing.assert_close(cf(torch.ones(n)), f(torch.ones(n)))
    assert specengine.cache_misses(cf) == 1


# `b is O` and `O is b` for a symbolic bool `b`, by what the other operand O is: where O is neither a bool nor a
# number and is read as the `is` runs (a constant, a variable loaded just before it), eager's answer is the
# trace's and `b` stays symbolic (1 entry); otherwise the trace is taken again with comparisons decided (2)
OTHERS = {  # name -> (the setup line, the operand, whether `is` is judged without deciding b)
    "const_str": ("", "'s'", True),
    "global_fn": ("", "_big", True),
    "local_fn": ("o = _big", "o", True),
    "closure_fn": ("", "c", True),
    "in_try": ("", "_big", True),
    "global_true": ("", "_TRUE", False),
    "local_bool": ("o = True", "o", False),
    "attribute": ("", "_NS.fn", False),
    "computed": ("", "(lambda: _big)()", False),
}


def _other_program(other: str, first: bool):
    setup, operand, _ = OTHERS[other]
    test = f"({operand} is b)" if first else f"(b is {operand})"
    body = ["b = x.shape[0] > 2", setup]
    if other == "in_try":
        body += ["try:", f"    r = {test}", "except KeyError:", "    r = None"]
    else:
        body.append(f"r = {test}")
    lines = ["def make(c):", "    def f(x):", *("        " + line for line in body if line), "        return x * b, r"]
    ns: dict = {}
    glb = {"_big": _big, "_TRUE": True, "_NS": type("NS", (), {"fn": _big})}
    exec(compile("\n".join(lines + ["    return f", ""]), f"<gen other {other} {first}>", "exec"), glb, ns)
    return ns["make"](_big)


@pytest.mark.filterwarnings("ignore::SyntaxWarning")
@pytest.mark.parametrize("dynamic", (True, False))
@pytest.mark.parametrize("other,first", list(itertools.product(OTHERS, (True, False))))
def test_is_against_an_object_known_as_it_runs_keeps_the_bool_symbolic(other: str, first: bool, dynamic) -> None:
    f = _other_program(other, first)
    cf = specengine.compile(f, dynamic=dynamic)
    _compare_over_sizes(cf, f)
    expected = 1 if OTHERS[other][2] else 2
    assert specengine.cache_misses(cf) == (len(set(SIZES)) if dynamic is False else expected)
    assert specengine.cache_hits(cf) == len(SIZES) - specengine.cache_misses(cf)


def test_an_is_not_watched_under_another_trace_function_decides_comparisons() -> None:
    """With a trace function of the user's set (a debugger, coverage), frames are not watched: each `is` counts."""
    f = _other_program("global_fn", False)
    cf = specengine.compile(f, dynamic=True)
    previous = sys.gettrace()
    sys.settrace(lambda frame, event, arg: None)
    try:
        _compare_over_sizes(cf, f)
    finally:
        sys.settrace(previous)
    assert (specengine.cache_misses(cf), specengine.cache_hits(cf)) == (2, 3)
