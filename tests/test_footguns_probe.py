"""Footguns found by probing ordinary Python programs (bench/probe_python.py): each was a wrong result or an
internal error before its fix. Each call sequence offers an entry compiled for one call an input that it must not
serve; every call is compared with eager and the exact number of compiles is asserted."""

from __future__ import annotations

import collections
import enum
import fractions
import functools
import math
import random
import statistics

import numpy as np
import pytest
import torch

import specengine
from specengine import UnsupportedOpError
from specengine.ir.proxies import Proxy


def _same(a, b) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return (
            list(a) == list(b) and all(type(k) is type(j) for k, j in zip(a, b)) and _same([*a.values()], [*b.values()])
        )
    if isinstance(a, float):
        return (a != a and b != b) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return a == b


def _check(fn, calls, misses, hits=None, dynamic=True):
    cfn = specengine.compile(fn, dynamic=dynamic)
    for args in calls:
        expected = fn(*args)
        got = cfn(*args)
        assert _same(got, expected), f"{args}: compiled {got!r}, eager {expected!r}"
    assert specengine.cache_misses(cfn) == misses
    if hits is not None:
        assert specengine.cache_hits(cfn) == hits
    return cfn


def _t(*shape, dtype=torch.float32):
    return (torch.arange(math.prod(shape)).reshape(shape) + 1).to(dtype)


# Other number types as operands ----------------------------------------------------------------------------------


class Color(enum.IntEnum):
    RED = 2
    BLUE = 3


def test_an_intenum_compares_as_the_int_it_holds():
    def f(x):  # was: `n == Color.RED` fell back to identity (False), and the entry served every size
        n = x.shape[0]
        return (x * 2 if n == Color.RED else x), n in (Color.RED, Color.BLUE), n + Color.BLUE

    _check(f, [(_t(2),), (_t(3),), (_t(2),), (_t(5),), (_t(7),)], misses=3, hits=2)


def test_complex_numpy_and_fraction_operands_pin_and_give_eagers_type():
    def f(x):  # was: TypeError for `n * 1j`
        n = x.shape[0]
        return n * 1j, n * np.float64(0.5), n * fractions.Fraction(1, 2), 1j - n

    _check(f, [(_t(2),), (_t(3),), (_t(2),)], misses=2, hits=1)


def test_float_hex_and_int_to_bytes():
    def f(x, s):
        return s.hex(), x.shape[0].to_bytes(2, "little")

    _check(f, [(_t(2), 0.5), (_t(3), -0.0), (_t(2), 0.5)], misses=2, hits=1)


def test_a_library_calling_type_of_a_traced_number_is_refused():
    def f(x):  # statistics rebuilds values with type(x)(...): was a TypeError naming NumberProxy.__init__
        return x * statistics.mean(x.shape)

    with pytest.raises(UnsupportedOpError, match=r"type\(x\)"):
        specengine.compile(f, dynamic=True)(_t(2, 3))


# Builtins swapped while tracing keep their identity for the program ----------------------------------------------

REDUCE = {max: torch.amax, min: torch.amin}
NAN, INF = float("nan"), float("inf")


def test_builtin_max_passed_in_is_max():
    def f(x, op):  # was: `op is max` False while tracing (max is swapped), so x * 3, cached for max
        return x * 2 if op is max else x * 3

    _check(f, [(_t(2), max), (_t(2), min), (_t(3), max), (_t(2), min)], misses=2, hits=2)


def test_a_table_keyed_by_builtins_finds_them():
    def f(x, op):
        return REDUCE[op](x, 0), REDUCE[max](x, 0), op  # the builtin itself comes back

    _check(f, [(_t(2, 3), max), (_t(2, 3), min), (_t(4, 3), max)], misses=2, hits=1)


# Returned containers hold values, never proxies ------------------------------------------------------------------


def test_a_returned_dict_keyed_by_sizes_has_int_keys():
    def f(x):  # was: the keys were NumberProxy objects of the trace
        return {x.shape[0]: x.sum(), "w": x.shape[1]}, {tuple(x.shape): 1}, {x.shape: 2}, collections.Counter(x.shape)

    cfn = _check(f, [(_t(2, 3),), (_t(3, 3),), (_t(2, 4),), (_t(2, 3),)], misses=3, hits=1)
    keys = [k for d in cfn(_t(2, 5)) for k in d]
    assert not any(isinstance(k, Proxy) or (type(k) is tuple and isinstance(k[0], Proxy)) for k in keys)
    assert type(keys[3]) is torch.Size


def test_a_returned_slice_and_frozenset_of_sizes():
    def f(x):  # was: a slice holding a NumberProxy; frozenset refused
        n = x.shape[0]
        return slice(1, n), x[slice(1, n)], frozenset(x.shape)

    _check(f, [(_t(4, 2),), (_t(5, 2),), (_t(0, 2),), (_t(4, 2),)], misses=3, hits=1)


# Caches that outlive a trace -------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=16)
def _positions(n):
    return torch.arange(n) + 1


@functools.cache
def _width(a, b):
    return a * 10 + b


def test_an_lru_cached_helper_is_traced_through_and_keeps_no_proxy():
    def f(x):  # was: the second trace (same size, new dtype) got the first trace's proxy: UnboundLocalError
        return x + _positions(x.shape[0]), x.new_zeros(_width(x.shape[0], 1))

    calls = [(_t(3),), (_t(3, dtype=torch.float64),), (_t(4),), (_t(3),), (_t(0),)]
    _check(f, calls, misses=4, hits=1)
    assert _width(3, 1) == 31 and type(_width(3, 1)) is int  # eager calls see no traced value
    assert torch.equal(_positions(3), torch.tensor([1, 2, 3]))


def test_a_traced_value_kept_by_a_nested_cache_is_refused():
    @functools.lru_cache(maxsize=16)
    def width(n):  # a cache the engine cannot find to clear (a nested function)
        return n + 1

    def f(x):
        return x.new_ones(width(x.shape[0]))

    cfn = specengine.compile(f, dynamic=True)
    assert cfn(_t(3)).shape == (4,)
    with pytest.raises(UnsupportedOpError, match="earlier compile"):
        cfn(_t(3, dtype=torch.float64))  # the cache holds the first trace's n + 1 for n == 3
    assert specengine.cache_misses(cfn) == 1


# Caught errors show the sizes ------------------------------------------------------------------------------------


def test_a_caught_reshape_error_message_is_the_calls_own():
    def f(x):  # was: the message of the first call (size 7) came back for size 8
        try:
            return x.reshape(-1, 3), ""
        except RuntimeError as e:
            return x, str(e)

    _check(f, [(_t(7),), (_t(8),), (_t(6),), (_t(9),), (_t(8),)], misses=3, hits=2)


def test_caught_broadcast_and_index_error_messages_are_the_calls_own():
    def f(x, y):
        try:
            return x + y, ""
        except RuntimeError as e:
            return x, str(e)

    def g(x):
        try:
            return x[5], ""
        except IndexError as e:
            return x, e.args[0]

    _check(f, [(_t(2), _t(3)), (_t(4), _t(5)), (_t(2), _t(2)), (_t(5), _t(5)), (_t(4), _t(5))], misses=3, hits=2)
    _check(g, [(_t(3),), (_t(4),), (_t(7),), (_t(9),), (_t(4),)], misses=3, hits=2)


# math.floor / math.ceil of a quotient of ints --------------------------------------------------------------------


def test_ceil_and_floor_of_an_int_quotient_are_symbolic():
    def f(x, k):  # was: the float n / 4 was pinned, one entry per size
        n = x.shape[0]
        return x.new_zeros(math.ceil(n / 4)), x[: math.floor(n / 3)], math.ceil(n / k), math.floor(-n / 2.0)

    calls = [(_t(4), 3), (_t(5), 3), (_t(0), 3), (_t(1), -2), (_t(9), 5), (_t(8), 3)]
    cfn = _check(f, calls, misses=1, hits=5)
    assert "x.shape[0] < 9007199254740992" in [str(g) for g in specengine.last_guards(cfn)]


def test_floor_of_a_quotient_of_huge_ints_is_pinned():
    def f(a, b):  # floor(a / b) differs from a // b past 2**53: rounding of the float quotient
        return math.floor(a / b), math.ceil(a / b)

    _check(f, [(5, 2), (2**53 + 1, 1), (-(2**53) - 3, 1), (7, 2)], misses=3, hits=1)


# Random numbers of Python and numpy ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "draw", [lambda: random.random(), lambda: random.randint(1, 9), lambda: float(np.random.rand())]
)
def test_python_and_numpy_random_draws_are_refused(draw):
    def f(x):  # was: drawn once while tracing, every cached call reused the number
        return x * draw()

    state, np_state = random.getstate(), np.random.get_state()
    with pytest.raises(UnsupportedOpError, match="random"):
        specengine.compile(f, dynamic=True)(_t(3))
    assert random.getstate() == state  # a failed compile changes nothing
    assert (np.random.get_state()[1] == np_state[1]).all()


def test_seeded_generators_created_inside_are_fine():
    def f(x):  # a generator of its own, seeded: the same numbers on every call, as in eager
        return x * random.Random(0).random() * float(np.random.default_rng(0).random())

    _check(f, [(_t(3),), (_t(4),), (_t(3),)], misses=1, hits=2)


# torch.tensor of sizes, read back ---------------------------------------------------------------------------------


def test_tolist_and_item_of_a_tensor_of_sizes_are_the_sizes():
    def f(x):  # was: unbacked values, and reshape to them raised "only one dimension can be inferred"
        s = torch.tensor(x.shape)
        return x.reshape(s.tolist()), torch.tensor(x.shape[0]).item() + 1, torch.arange(torch.tensor(x.shape[1]).item())

    _check(f, [(_t(2, 3),), (_t(4, 5),), (_t(0, 2),), (_t(1, 1),)], misses=1, hits=3)


def test_tolist_of_a_tensor_of_sizes_changed_in_place_reads_the_data():
    def f(x):
        s = torch.tensor(x.shape)
        s[:1].add_(1)  # through a view
        return s.tolist()

    _check(f, [(_t(2, 3),), (_t(4, 5),), (_t(0, 2),)], misses=1, hits=2)


def test_reshape_to_sizes_read_from_data():
    def f(x, t):  # was: "only one dimension can be inferred" for every call (a data size was assumed to be -1)
        return x.reshape(t.tolist())

    cfn = _check(
        f,
        [(_t(2, 3), torch.tensor([3, 2])), (_t(2, 3), torch.tensor([6, 1])), (_t(4), torch.tensor([2, 2]))],
        misses=2,
        hits=1,
    )  # fmt: skip  (a new rank: a new entry)
    with pytest.raises(specengine.DataDependentCheckError, match="-1"):
        cfn(_t(2, 3), torch.tensor([-1, 2]))  # eager infers the -1; the trace assumed a size from data is not -1


# Float arguments pinned under the default mode -------------------------------------------------------------------


def test_a_pinned_float_argument_tells_minus_zero_and_matches_nan():
    def f(x, s):  # was: the default mode's first entry checked `s != 0.0`: -0.0 got 0.0 back; NaN never hit
        return (x * 2 if s == 0.0 else x), s

    _check(f, [(_t(1), 0.0), (_t(1), -0.0), (_t(1), 0.0), (_t(1), -0.0)], misses=2, hits=2, dynamic=None)
    _check(f, [(_t(1), NAN), (_t(1), NAN), (_t(1), NAN)], misses=1, hits=2, dynamic=None)
    _check(f, [(_t(1), 0.0), (_t(1), -0.0), (_t(1), 0.0), (_t(1), -0.0)], misses=1, hits=3, dynamic=True)


def test_the_nan_entry_is_not_dropped_as_subsumed():
    def f(x, s):  # z3 sees floats as reals: NaN's guards `not (s > 0) and not (s < 0)...` looked unsatisfiable
        return max(s, 0.0), min(s, 1.0), max(0.0, s), min(1.0, s)

    calls = [(_t(1), s) for s in (1.0, 2.5, -0.0, NAN, -INF, NAN, 2.5)]
    _check(f, calls, misses=5, hits=2)  # was 6: the NaN entry was dropped when the -inf entry came


# Factories of sizes and float arguments --------------------------------------------------------------------------


def test_full_of_a_float_expression_and_linspace_of_a_size_are_symbolic():
    def f(x, s):  # were: the fill value n / 2 and the steps n pinned, one entry per size
        n = x.shape[0]
        return torch.full((2,), n / 2), torch.full((n,), s), torch.linspace(0, 1, n), torch.linspace(s, 2 * s, n + 1)

    calls = [(_t(4), 1.5), (_t(5), -0.0), (_t(0), NAN), (_t(1), INF), (_t(4), 2.5)]
    cfn = specengine.compile(f, dynamic=True)
    for args in calls:  # (NaN and -0.0 in tensors: compared by hand)
        got, want = cfn(*args), f(*args)
        assert all(torch.equal(a.signbit(), b.signbit()) for a, b in zip(got, want))
        torch.testing.assert_close(got, want, equal_nan=True)
    assert specengine.cache_misses(cfn) == 1
    with pytest.raises(RuntimeError, match="non-negative"):
        specengine.compile(lambda k: torch.linspace(0, 1, k), dynamic=True)(-1)
