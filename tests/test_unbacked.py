"""Data-dependent sizes and values (issue 14): unbacked symbols, decided by proof or by a run-time check.

Each sweep runs the same call shapes over data of different densities (all False, all True, random; sizes 0, 1, 2
and larger), compares with eager, and asserts exactly one compile: the data never recompiles. A call whose data
contradicts a decision raises DataDependentCheckError naming this file's line; no guard mentions an unbacked symbol.
"""

from __future__ import annotations

import re

import pytest
import torch
from helpers import counts

import specengine
from specengine import DataDependentCheckError, UnsupportedOpError


def _masks(n: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed + n)
    return [torch.zeros(n, dtype=torch.bool), torch.ones(n, dtype=torch.bool), torch.rand(n, generator=g) > 0.5]


def _no_unbacked_guards(cfn) -> None:
    for entry in specengine.cache_entries(cfn):
        for g in entry.guards:
            assert not re.search(r"\bu\d+\b", str(g)), f"a guard on an unbacked symbol: {g}"
        assert "u0" not in str(entry.prologue)


def _data_sweep(fn, calls) -> specengine.CompiledFunction:
    """Compile once, run every call against eager: exactly one compile, every later call a hit."""
    cfn = specengine.compile(fn, dynamic=True)
    for args in calls:
        torch.testing.assert_close(cfn(*args), fn(*args), equal_nan=True)
    assert counts(cfn) == (1, len(calls) - 1)
    _no_unbacked_guards(cfn)
    return cfn


def _sides_sweep(fn, calls) -> specengine.CompiledFunction:
    """Run every call against eager (a program that branches on data: one entry per side, tests/test_speculation.py)."""
    cfn = specengine.compile(fn, dynamic=True)
    for args in calls:
        torch.testing.assert_close(cfn(*args), fn(*args))
    return cfn


def _same_shape_calls(n: int, cols: int | None = None) -> list[tuple]:
    x = torch.randn(n) if cols is None else torch.randn(n, cols)
    return [(x, m) for m in _masks(n)]


@pytest.mark.parametrize("n", [0, 1, 2, 7])
def test_mask_sum_over_densities(n):
    _data_sweep(lambda x, m: x[m].sum(), _same_shape_calls(n))


def test_mask_sum_over_sizes_and_densities():
    _data_sweep(lambda x, m: x[m].sum(), [c for n in (0, 1, 2, 5) for c in _same_shape_calls(n)])


def test_mask_times_two_then_reductions():
    def f(x, m):
        y = x[m] * 2
        return y.sum(0), y.abs().sum(), y.shape[0]

    _data_sweep(f, [c for n in (0, 1, 2, 6) for c in _same_shape_calls(n, 3)])


def test_masked_select_and_where_one_argument():
    def f(x, m):
        (rows,) = torch.where(m)
        return torch.masked_select(x, m).sum(), rows * 2, m.nonzero().shape[0]

    _data_sweep(f, [c for n in (0, 1, 2, 5) for c in _same_shape_calls(n)])


def test_nonzero_feeds_index_select():
    def f(x, m):
        idx = torch.nonzero(m)[:, 0]
        y = torch.index_select(x, 0, idx)
        return (y * 3).sum(0), idx.numel()

    calls = [c for n in (0, 1, 2, 6) for c in _same_shape_calls(n, 4)]
    cfn = _data_sweep(f, calls)
    final = str(specengine.last_traces(cfn)[-1])
    assert "u0 = prims.unbacked_size(" in final and "rows of nonzero at test_unbacked.py:" in final


def test_nonzero_2d_argwhere_and_as_tuple():
    def f(a):
        rows, cols = torch.nonzero(a, as_tuple=True)
        return torch.argwhere(a), rows + cols, a[a > 0.5].shape

    _data_sweep(f, [(torch.rand(n, 3),) for n in (0, 1, 2, 4)] + [(torch.zeros(3, 3),), (torch.ones(2, 3),)])


def test_arange_of_item():
    def f(t, x):
        n = t.item()
        return torch.arange(n) * 2, x * n, n + 1

    calls = [(torch.tensor(k), torch.randn(3)) for k in (0, 1, 2, 5)]
    cfn = _data_sweep(f, calls)
    final = str(specengine.last_traces(cfn)[-1])
    assert "u0 = prims.item(t, 'item() at test_unbacked.py:" in final


def test_float_item_is_symbolic():
    _data_sweep(lambda x: x * x.sum().item() + 1, [(torch.randn(n),) for n in (0, 1, 2, 4)])


def test_tolist_of_a_1d_int_tensor():
    def f(t, x):
        a, b = t.tolist()
        return x[:, a:b].sum(), a * b, t[0].tolist() + 1

    _data_sweep(f, [(torch.tensor([i, j]), torch.randn(2, 5)) for i, j in ((0, 3), (1, 1), (2, 5))])


def test_reshape_of_masked_rows_is_proved():
    def f(x, m):
        return x[m].reshape(-1).sum(), x[m].reshape(-1, x.shape[1]).sum(0)  # numel s1*u0: divisible, proved

    cfn = _data_sweep(f, [c for n in (0, 1, 3) for c in _same_shape_calls(n, 3)])
    assert "check_sym" not in str(specengine.last_traces(cfn)[-1])


def test_size_oblivious_branch_is_speculated():
    def f(x, m):
        y = x[m]
        if y.shape[0] > 0:  # size-oblivious: taken as True by speculation, checked at run time
            return y * 2
        return x

    cfn = _data_sweep(f, [(x, m) for x, m in _same_shape_calls(4)[1:]])
    assert counts(cfn) == (1, 1)
    assert "prims.check_speculation(u0 > 0" in str(specengine.last_traces(cfn)[-1])
    x, none = torch.randn(4), torch.zeros(4, dtype=torch.bool)
    for _ in range(2):  # the data took the other side: its own entry, then a hit
        torch.testing.assert_close(cfn(x, none), f(x, none))
    assert counts(cfn) == (2, 2)  # (the call that misspeculated ran on the new entry: not a hit)
    assert isinstance(DataDependentCheckError("x"), RuntimeError)


def test_check_is_assumed_and_asserted():
    def f(x, m):
        y = x[m]
        specengine.check(y.shape[0] >= 2)
        return y[:2] * 2, y.shape[0] >= 2  # the slice is the first two rows; the comparison is proved

    cfn = specengine.compile(f, dynamic=True)
    x = torch.randn(5)
    for m in (x > -9, torch.tensor([True, True, False, False, False])):
        got = cfn(x, m)
        torch.testing.assert_close(got[0], x[m][:2] * 2)
        assert got[1] is True
    with pytest.raises(DataDependentCheckError, match=r"specengine.check.*test_unbacked.py:\d+.*u0 = 1"):
        cfn(x, torch.tensor([True, False, False, False, False]))
    assert counts(cfn) == (1, 2)
    _no_unbacked_guards(cfn)


def test_check_on_backed_sizes_is_a_guard():
    def f(x):
        specengine.check(x.shape[0] > 1)
        return x * 2

    cfn = specengine.compile(f, dynamic=True)
    cfn(torch.randn(3))
    assert [str(g) for g in specengine.last_guards(cfn)] == ["x.shape[0] > 1"]
    with pytest.raises(RuntimeError):
        cfn(torch.randn(1))
    specengine.check(True)
    with pytest.raises(RuntimeError):
        specengine.check(False)


def test_torch_check_on_unbacked_is_asserted():
    def f(t):
        n = t.item()
        torch._check(n >= 0)
        torch._check(n <= 10)
        return torch.zeros(n, 2).sum(0) + n

    cfn = _data_sweep(f, [(torch.tensor(k),) for k in (0, 3, 10)])
    with pytest.raises(RuntimeError, match=r"test_unbacked.py:\d+"):
        cfn(torch.tensor(11))


def test_branch_on_item_value_is_speculated():  # one entry per side (tests/test_speculation.py)
    def f(t, x):
        return x * 2 if t.item() > 0 else x

    cfn = specengine.compile(f, dynamic=True)
    for k, n in ((3, 2), (-1, 0), (5, 1), (0, 2), (7, 2)):
        t, x = torch.tensor(k), torch.randn(n)
        torch.testing.assert_close(cfn(t, x), f(t, x))
    assert counts(cfn) == (2, 4)  # the first call compiles both sides: its speculation (False) failed


def test_branch_on_item_value_after_an_input_write_is_refused():
    def f(t, x):
        x.add_(1)
        return x * 2 if t.item() > 0 else x

    cfn = specengine.compile(f, dynamic=True)
    with pytest.raises(UnsupportedOpError, match=r"data-dependent u0 .*test_unbacked.py:\d+.*speculation.*torch.where"):
        cfn(torch.tensor(3), torch.randn(2))
    assert counts(cfn) == (0, 0)


def test_branch_on_tensor_data_after_a_random_draw_is_refused():
    def f(x):
        x = x + torch.randn(3)
        return x if x.sum() > 0 else -x

    with pytest.raises(UnsupportedOpError, match=r"speculation: `randn`.*torch.where"):
        specengine.compile(f, dynamic=True)(torch.randn(3))
    cfn = specengine.compile(lambda x: x * 2 if x.sum().item() > 0 else x, dynamic=True)
    for v in (1.0, -1.0, 3.0):
        x = torch.full((3,), v)
        torch.testing.assert_close(cfn(x), x * 2 if v > 0 else x)
    assert counts(cfn) == (2, 2)  # (the first call's speculation, False, failed: both sides compiled)


def test_pinning_an_unbacked_value_is_refused():
    cfn = specengine.compile(lambda t, x: [x * i for i in range(t.item())], dynamic=True)
    with pytest.raises(UnsupportedOpError, match=r"concrete value of data-dependent u0.*test_unbacked.py:\d+"):
        cfn(torch.tensor(2), torch.randn(2))


def test_guard_on_unbacked_is_impossible():
    from specengine.constraints import expr as E
    from specengine.constraints.decide import Decider
    from specengine.constraints.unbacked import UnbackedSymbol
    from specengine.provenance import Provenance

    d = Decider({"s0": 3}, {"s0": (0, None)})
    d.unbacked.add(UnbackedSymbol("u0", int, "rows", Provenance("x.py", 1), 0, None, E.sym("s0"), size_like=True))
    with pytest.raises(specengine.SpecEngineError, match="internal error: a guard on a data-dependent symbol"):
        d.record(E.gt(E.sym("u0"), 1), Provenance("x.py", 2))
    assert d.prove(E.le(E.sym("u0"), E.sym("s0"))) is True
    assert d.prove(E.ge(E.sym("u0"), 0)) is True
    assert d.prove(E.gt(E.sym("u0"), 0)) is None
    assert d.prove(E.gt(E.sym("u0"), 0), frozenset({"u0"})) is True


def test_mask_shape_mismatch_raises_eagers_error():
    cfn = specengine.compile(lambda x, m: x[m], dynamic=True)
    with pytest.raises(IndexError):
        cfn(torch.randn(3), torch.ones(4, dtype=torch.bool))


def test_printed_trace_runs():
    def f(x, m):
        y = x[m]
        if y.shape[0] > 0:
            return y.sum() * y.shape[0]
        return x.sum()

    cfn = specengine.compile(f, dynamic=True)
    x, m = torch.randn(5), torch.tensor([True, False, True, True, False])
    expected = cfn(x, m)
    trace = specengine.last_traces(cfn)[-1]
    torch.testing.assert_close(trace.python_callable()(x, m), expected)


def test_broadcasts_of_unbacked_sizes_need_no_decision():
    def f(x, w, m):
        a, b = x[m], w[m]  # two symbols, equal at run time: the broadcast is `u1 if u0 == 1 else u0`
        return (a * b).sum(), (a[:, None] + b[None, :]).shape, (a + w[:1]).sum()

    calls = [(torch.randn(n), torch.randn(n), m) for n in (1, 2, 5) for m in _masks(n)]
    _data_sweep(f, calls)
    cfn = specengine.compile(lambda x, m, y: x[m] + y, dynamic=True)  # broadcast against an input: eager's error
    cfn(torch.randn(3), torch.tensor([True, False, True]), torch.randn(2))
    with pytest.raises(RuntimeError, match="must match"):
        cfn(torch.randn(3), torch.tensor([True, True, True]), torch.randn(2))


@pytest.mark.parametrize("dynamic", [True, False, None])
def test_data_never_recompiles_in_any_mode(dynamic):
    def f(x, m, t):
        return x[m].sum() + torch.arange(1, t.item()).sum()

    cfn = specengine.compile(f, dynamic=dynamic)
    x = torch.randn(6)
    for i, m in enumerate(_masks(6)):
        torch.testing.assert_close(cfn(x, m, torch.tensor(i + 1)), f(x, m, torch.tensor(i + 1)))
    assert counts(cfn) == (1, 2)
    with pytest.raises(RuntimeError, match="inconsistent with step sign"):  # arange(1, 0): eager's error, at run time
        cfn(x, m, torch.tensor(0))
    _no_unbacked_guards(cfn)


def test_masked_setitem_counts_no_rows():
    def f(x, m, v):
        y = x * 1  # (x.clone() of size 0 pins the size: a guard_or_false of the generic path)
        y[m] = v[m]  # one selected element is no special case
        z = x + 0
        z[m] = 0.5
        w = torch.zeros(x.shape[0], 2)
        w[m, :] = v[m][:, None]
        return y, z, w

    calls = [(torch.randn(n), m, torch.randn(n)) for n in (0, 1, 2, 5) for m in _masks(n)]
    calls.append((torch.randn(3), torch.tensor([False, True, False]), torch.randn(3)))
    cfn = _data_sweep(f, calls)
    assert "check_sym" not in str(specengine.last_traces(cfn)[-1])


def test_check_is_size_names_the_user_line():
    def f(t):
        n = t.item()
        torch._check_is_size(n)  # (torch's deprecated wrapper is not the user's frame)
        return torch.zeros(n, 2).sum(0)

    cfn = _data_sweep(f, [(torch.tensor(k),) for k in (0, 1, 4)])
    with pytest.raises(DataDependentCheckError, match=r"u0 >= 0.* at test_unbacked.py:\d+ .*u0 = -1"):
        cfn(torch.tensor(-1))


def test_formatting_a_decision_on_unbacked_is_refused():
    cfn = specengine.compile(lambda t, x: x * len(str(t.item() > 2)), dynamic=True)
    with pytest.raises(UnsupportedOpError, match=r"data-dependent u0"):
        cfn(torch.tensor(3), torch.randn(2))


def test_item_values_are_not_sizes_until_checked():
    def f(t, x):
        n = t.item()  # uint8: 0 <= n <= 255, but a value, not a size: no size-oblivious branch
        return x * 2 if n > 0 else x

    cfn = _sides_sweep(f, [(torch.tensor(k, dtype=torch.uint8), torch.randn(2)) for k in (3, 0, 1)])
    assert counts(cfn) == (2, 2)  # a branch taken by speculation: one entry per side

    def g(t, x):
        n = t.item()
        torch._check_is_size(n)  # a size from now on: `n > 0` is taken size-obliviously, speculated
        return x * 2 if n > 0 else x

    cfn = _data_sweep(g, [(torch.tensor(k), torch.randn(2)) for k in (1, 3)])
    x = torch.randn(2)
    torch.testing.assert_close(cfn(torch.tensor(0), x), g(torch.tensor(0), x))  # the other side
    assert counts(cfn) == (2, 1)


def test_two_reads_of_the_same_data_stay_two_symbols():
    def f(t, x, m):
        a, b = t.item(), t.item()  # never merged: later sizes name each
        return torch.arange(a).sum() + b, x[m].sum() + x[m].shape[0]

    _data_sweep(f, [(torch.tensor(k), torch.randn(3), torch.tensor([True, False, k > 1])) for k in (0, 1, 2)])


def test_check_relating_unbacked_and_input_sizes():
    def f(x, m):
        y = x[m]
        specengine.check(y.shape[0] == x.shape[0])  # every row selected: the broadcast below is proved
        return y + x

    cfn = specengine.compile(f, dynamic=True)
    for n in (1, 3):
        x = torch.randn(n)
        torch.testing.assert_close(cfn(x, torch.ones(n, dtype=torch.bool)), x + x)
    assert counts(cfn) == (1, 1)
    final = str(specengine.last_traces(cfn)[-1])
    assert "if" not in final.split("def computation")[1].replace("# ", "")  # no `u0 if s0 == 1 else ...` size
    with pytest.raises(DataDependentCheckError, match=r"u0 = 1"):
        cfn(torch.randn(3), torch.tensor([True, False, False]))
    text = specengine.explain(cfn)
    assert "data-dependent: u0 = rows of x[mask] at test_unbacked.py:" in text


# Programs that need data-dependent sizes: one compile over sizes and data.


def _detect(boxes, scores):
    keep = scores > 0.5  # detection post-processing: threshold, sort, top 10
    b, s = boxes[keep], scores[keep]
    out = b[s.argsort(descending=True)[:10]]
    return out, out.shape[0], (out[:, 2:] - out[:, :2]).prod(1).sum()


def _ragged(x, mask):
    lengths = mask.sum(1)  # a ragged batch: tokens per row from a mask
    total = lengths.sum().item()
    flat = x[mask]
    specengine.check(flat.shape[0] == total)
    return flat.mean(0) * total, torch.arange(total).float().sum()


def _scatter_back(x, mask):
    idx = mask.nonzero()  # gather the selected entries, scatter them back
    vals = x[idx[:, 0], idx[:, 1]]
    return vals.sum(), torch.zeros_like(x).index_put((idx[:, 0], idx[:, 1]), vals * 2)


@pytest.mark.parametrize(
    "fn, make",
    [
        (_detect, lambda n: (torch.rand(n, 4), torch.rand(n))),
        (_ragged, lambda n: (torch.randn(3, n, 2), torch.rand(3, n) > 0.5)),
        (_scatter_back, lambda n: (torch.randn(3, n), torch.rand(3, n) > 0.5)),
    ],
)
def test_programs_with_data_dependent_sizes(fn, make):
    torch.manual_seed(0)
    _data_sweep(fn, [make(n) for n in (0, 1, 2, 7, 30)])


def test_fusing_executor_runs_data_dependent_sizes():
    from specengine.executors.nvfuser import NvFuserExecutor

    def f(x, m, w):
        y = x[m]  # the fusion reads u0 as a scalar; whether u0 broadcasts is never asked of it
        return ((y * 2 + 1).relu() * w).sum(0), (y[:, 0] * x[:, 1][m]).sum(), torch.arange(m.sum().item())

    cfn = specengine.compile(f, dynamic=True, executors=[NvFuserExecutor("reference"), "torch"])
    for n in (3, 5, 8):
        for m in _masks(n):
            x, w = torch.randn(n, 3), torch.randn(3)
            torch.testing.assert_close(cfn(x, m, w), f(x, m, w))
    assert counts(cfn) == (1, 8)
    assert "nvfuser.fusion" in str(specengine.last_traces(cfn)[-1])


def test_float_item_values_stay_symbolic_or_are_refused():
    def f(x, t):
        v = t.sum().item()
        return x * v + v * 2, torch.full((2,), v), x.clamp(max=v)

    _data_sweep(f, [(torch.randn(3), torch.tensor(k)) for k in ([1.5, 2.0], [-3.0, 0.25], [0.0, 0.0])])
    import math

    cfn = specengine.compile(lambda x, t: x * math.exp(t.item()), dynamic=True)
    with pytest.raises(UnsupportedOpError, match=r"a concrete value of data-dependent u0 \(item\(\) at test_unbac"):
        cfn(torch.randn(2), torch.tensor(1.0))


def test_builtin_max_min_of_unbacked_and_backed_ints_stay_symbolic():
    def f(t, x):
        n = t.item()
        k = max(n, 1)  # Python's builtins: symbolic (sym_max / sym_min), never a branch on n
        return x[: min(k, x.shape[0])] * min(n, 3, x.shape[0]), max([n, 0]), min(x.shape), max(2.5, 1.0)

    calls = [(torch.tensor(v), torch.randn(s, 2)) for v in (0, 1, 2, 5) for s in (0, 1, 2, 4)]
    cfn = _data_sweep(f, calls)
    assert specengine.last_guards(cfn) == []  # min(x.shape) and min(k, x.shape[0]) need no guard either
    assert max([3, 1], key=lambda v: -v) == 1 and min([], default=7) == 7  # outside a trace: the builtins


def test_builtin_max_with_key_keeps_python_semantics():
    def f(x, n):
        return x * max([n, 2], key=lambda v: -v)  # key=: Python compares (a guard on n), as eager

    cfn = specengine.compile(f, dynamic=True)
    x = torch.randn(2)
    for n in (0, 1, 2, 3, 4):
        torch.testing.assert_close(cfn(x, n), f(x, n))
    assert counts(cfn) == (2, 3)  # n < 2 and n >= 2 (the key compares -n with -2)


def test_failed_check_shows_the_input_sizes_it_involves():
    def f(x, m):
        y = x[m]
        specengine.check(y.shape[0] >= x.shape[0] - 1)  # relates u0 to the backed s0
        return y * 2

    x = torch.randn(4)
    small = [(torch.randn(n), torch.zeros(n, dtype=torch.bool)) for n in (0, 1)]  # u0 = 0 >= n - 1 holds
    cfn = _data_sweep(f, [*small, (x, x > -9), (x, torch.tensor([True, False, True, True]))])
    line = f.__code__.co_firstlineno + 2
    with pytest.raises(
        DataDependentCheckError, match=rf"test_unbacked.py:{line} .*s0 \(x.shape\[0\]\).*u0 = 2, s0 = 4"
    ):
        cfn(x, torch.tensor([True, False, False, True]))
    for n in (0, 1, 2):  # the message has the call's own value of s0
        with pytest.raises(DataDependentCheckError, match=rf"u0 = 0, s0 = {n + 2}"):
            cfn(torch.randn(n + 2), torch.zeros(n + 2, dtype=torch.bool))
    assert counts(cfn) == (1, 7)


def test_bool_item_is_an_unbacked_bool_value():
    def f(t, x):
        b = (t > 0).all().item()
        return torch.where(x > 0, x, b * 1.0), x * b, b + 1, x + (b == True), isinstance(b, bool)  # noqa: E712

    calls = [(torch.tensor(v), torch.randn(n)) for v in ([1, 2], [0, 1], [-1, -3]) for n in (0, 1, 2)]
    cfn = _data_sweep(f, calls + [(torch.ones(0, dtype=torch.int64), torch.randn(2))])  # all() of nothing: True
    assert "prims.item" in str(specengine.last_traces(cfn)[-1])


def test_branch_on_bool_item_is_speculated():
    cfn = _sides_sweep(
        lambda t, x: x if t.item() else -x, [(torch.tensor(b), torch.randn(2)) for b in (True, False, True)]
    )
    assert counts(cfn) == (2, 2)


def test_division_by_a_data_dependent_value_raises_pythons_error_at_run_time():
    def f(t, x):
        v = t.sum().item()
        return x * (2 / v), 2 / v

    cfn = _data_sweep(f, [(torch.tensor(k), torch.randn(n)) for k in ([1.5, 2.0], [-3.0, 0.25]) for n in (0, 1, 2)])
    with pytest.raises(ZeroDivisionError, match="float division by zero"):  # as eager: v is a Python float
        cfn(torch.tensor([0.0, 0.0]), torch.randn(2))
    assert counts(cfn) == (1, 6)
    assert "prims.check_divisor(u0" in str(specengine.last_traces(cfn)[-1])

    def g(t, x):
        n = t.item()
        return x * (6 / n) + 6 / n  # the second division is proved nonzero by the first check

    cfn = _data_sweep(g, [(torch.tensor(k), torch.randn(s)) for k in (1, 2, -3) for s in (0, 1, 2)])
    with pytest.raises(ZeroDivisionError, match="^division by zero"):
        cfn(torch.tensor(0), torch.randn(1))
    assert str(specengine.last_traces(cfn)[-1]).count("check_divisor") == 1


def test_int_floordiv_and_mod_by_a_data_dependent_value_raise_pythons_error_at_run_time():
    """`6 // n` and `7 % n` with n from .item(): ZeroDivisionError at run time for n == 0, as eager; one compile."""

    def f(t, x):
        n = t.item()
        return x * (6 // n) + (7 % n)

    cf = specengine.compile(f, dynamic=True)
    for v, size in ((1, 0), (2, 1), (3, 2), (5, 3)):
        x = torch.ones(size)
        torch.testing.assert_close(cf(torch.tensor(v), x), f(torch.tensor(v), x))
    with pytest.raises(ZeroDivisionError, match="integer division or modulo by zero"):
        cf(torch.tensor(0), torch.ones(2))
    assert specengine.cache_misses(cf) == 1
    assert not any("u0" in str(g) for g in specengine.last_guards(cf))
