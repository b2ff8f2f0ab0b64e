"""In-place writes whose memory overlaps: eager's errors (partial overlap of the written tensor with an input,
internal overlap of the written tensor), raised at the op, before any later error (ops/overlap.py)."""

from __future__ import annotations

from typing import Any, Callable

import pytest
import torch
from helpers import counts

import specengine


def _outcome(fn: Callable, args: list) -> Any:
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - the exception is the outcome
        return e


def both(fn: Callable, cfn: Callable, make: Callable[[], list]) -> Any:
    """Eager and compiled on fresh inputs from `make` (the ops mutate them): same outputs, same inputs after the
    call, or the same exception type. Returns eager's outcome."""
    torch.manual_seed(0)
    eager_args = make()
    torch.manual_seed(0)
    compiled_args = make()
    expected, got = _outcome(fn, eager_args), _outcome(cfn, compiled_args)
    if isinstance(expected, Exception):
        assert type(got) is type(expected), f"eager raised {expected!r}; compiled gave {got!r}"
        return expected
    assert not isinstance(got, Exception), f"eager returned; compiled raised {got!r}"
    torch.testing.assert_close(got, expected, equal_nan=True)
    torch.testing.assert_close(compiled_args, eager_args, equal_nan=True)
    return expected


def _program_4936(x0, x1, n0):
    v1 = x0.transpose(0, -1)
    v1.sub_(x0)
    v8 = x0.sum() * 2
    try:
        v8 = (x0 * v1).sum()
    except RuntimeError:
        pass
    if x0.shape[1] == len(x1):
        v9 = x1.sum(0)
    else:
        v9 = x1[0]
    return v9.amax() + v8


@pytest.mark.parametrize("dynamic", [True, False, None])
def test_fuzz_program_4936_raises_the_overlap_error_before_the_index_error(dynamic):
    cfn = specengine.compile(_program_4936, dynamic=dynamic)
    out = both(_program_4936, cfn, lambda: [torch.randn(2, 2, 2, dtype=torch.float64), torch.randn(0), 1])
    assert isinstance(out, RuntimeError) and "refer to a single memory location" in str(out)
    assert counts(cfn) == (0, 0)  # raised while tracing: no entry
    for a, b in [((1, 1, 1), (2,)), ((1, 1, 1), (1,))]:
        both(_program_4936, cfn, lambda a=a, b=b: [torch.randn(a, dtype=torch.float64), torch.randn(b), 1])
    assert counts(cfn) == (2, 0)  # the two calls take the two branches


def _transposed_sub(x, y):
    x.transpose(0, -1).sub_(x)
    return y[0] + x.sum()


def test_entry_for_a_size_that_does_not_overlap_serves_one_that_does():
    cfn = specengine.compile(_transposed_sub, dynamic=True)
    calls = [(1, 2), (2, 2), (2, 0), (0, 0), (1, 0), (2, 2), (1, 1)]  # (n of x: n x n, len of y)
    outcomes = [both(_transposed_sub, cfn, lambda c=c: [torch.randn(c[0], c[0]), torch.randn(c[1])]) for c in calls]
    kinds = [type(o).__name__ if isinstance(o, Exception) else "ok" for o in outcomes]
    assert kinds == ["ok", "RuntimeError", "RuntimeError", "IndexError", "IndexError", "RuntimeError", "ok"]
    assert counts(cfn) == (1, 3)  # (y[0] guards len(y) > 0); for sizes that overlap the op raises at run time


def test_entry_not_made_for_a_size_that_overlaps():
    cfn = specengine.compile(_transposed_sub, dynamic=True)
    out = both(_transposed_sub, cfn, lambda: [torch.randn(2, 2), torch.randn(0)])
    assert isinstance(out, RuntimeError) and counts(cfn) == (0, 0)  # the overlap, not the index error
    for n in (0, 1, 2):
        both(_transposed_sub, cfn, lambda n=n: [torch.randn(n, n), torch.randn(2)])
    assert counts(cfn) == (1, 2)


def _expanded_add(x, n):
    x.expand(n, 3).add_(1)
    return x * 2


def test_internal_overlap_of_the_written_tensor():
    cfn = specengine.compile(_expanded_add, dynamic=True)
    kinds = []
    for n in (1, 2, 0, 3, 1):
        out = both(_expanded_add, cfn, lambda n=n: [torch.randn(1, 3), n])
        kinds.append(type(out).__name__ if isinstance(out, Exception) else "ok")
    assert kinds == ["ok", "RuntimeError", "ok", "RuntimeError", "ok"]
    assert counts(cfn) == (1, 4)


def _shift(x):
    x[1:] = x[:-1]
    return x


def test_setitem_of_an_overlapping_slice():
    cfn = specengine.compile(_shift, dynamic=True)
    kinds = []
    for n in (0, 1, 2, 3, 2, 4):
        out = both(_shift, cfn, lambda n=n: [torch.randn(n)])
        kinds.append(type(out).__name__ if isinstance(out, Exception) else "ok")
    assert kinds == ["ok", "ok", "ok", "RuntimeError", "ok", "RuntimeError"]
    assert counts(cfn) == (1, 5)


def _setitem_expanded(y, z):
    v = y.expand(2, *y.shape)
    v[...] = y.unsqueeze(0)  # exactly v's elements after expanding: copy_ does nothing
    if z is not None:
        v[...] = z  # (raises where v has internal overlap)
    return y + 0


def test_setitem_of_the_same_elements_into_an_expanded_tensor():
    cfn = specengine.compile(_setitem_expanded, dynamic=True)
    kinds = []
    for n in (2, 0, 1, 3):  # (n = 1: torch drops the value's leading 1s, expands it: not the same strides)
        out = both(_setitem_expanded, cfn, lambda n=n: [torch.randn(n), None])
        kinds.append(type(out).__name__ if isinstance(out, Exception) else "ok")
    assert kinds == ["ok", "ok", "RuntimeError", "ok"]
    assert counts(cfn) == (1, 3)
    cfn = specengine.compile(_setitem_expanded, dynamic=True)
    kinds = []
    for n in (0, 2, 1, 2):
        out = both(_setitem_expanded, cfn, lambda n=n: [torch.randn(n), torch.randn(n)])
        kinds.append(type(out).__name__ if isinstance(out, Exception) else "ok")
    assert kinds == ["ok", "RuntimeError", "RuntimeError", "RuntimeError"]
    assert counts(cfn) == (1, 3)


def _views_that_do_not_overlap(x):
    x[0].add_(x[1])  # disjoint rows
    x.add_(x)  # the same tensor
    x.view(-1).view(x.shape).mul_(x)  # the same elements with the same strides
    x.t().contiguous().sub_(x)  # a copy (for n > 1)
    return x


def test_overlaps_that_torch_allows():
    cfn = specengine.compile(_views_that_do_not_overlap, dynamic=True)
    for n in (2, 3, 2):
        both(_views_that_do_not_overlap, cfn, lambda n=n: [torch.randn(2, n)])
    assert counts(cfn) == (1, 2)


def _add_into(a, b):
    a.add_(b)
    return a.sum() + b[5]


def test_distinct_inputs_that_share_memory():
    cfn = specengine.compile(_add_into, dynamic=True)
    base = lambda: torch.randn(3, 3)  # noqa: E731
    out = both(_add_into, cfn, lambda: (lambda t: [t, t.t()])(base()))  # eager: the overlap, not b[5]'s IndexError
    assert isinstance(out, RuntimeError) and counts(cfn) == (0, 0)
    both(_add_into, cfn, lambda: [base(), base()])  # IndexError
    both(_add_into, cfn, lambda: [torch.randn(6), torch.randn(6)])
    both(_add_into, cfn, lambda: (lambda t: [t[:6], t[6:]])(torch.randn(12)))  # the same storage, disjoint
    assert counts(cfn) == (1, 1)


def _other_inplace_rules(x, m):
    y = x * 2
    y.t().clamp_(y, None)
    m.t().masked_fill_(m, True)
    k = x.long()
    k.t().bitwise_and_(k)
    return y, m, k


def test_clamp_masked_fill_and_bitwise_in_place():
    cfn = specengine.compile(_other_inplace_rules, dynamic=True)
    kinds = []
    for n in (1, 2, 0, 2):
        out = both(_other_inplace_rules, cfn, lambda n=n: [torch.randn(n, n), torch.rand(n, n) > 0.5])
        kinds.append(type(out).__name__ if isinstance(out, Exception) else "ok")
    assert kinds == ["ok", "RuntimeError", "ok", "RuntimeError"]
    assert counts(cfn) == (1, 3)


def _caught(x):
    try:
        x.t().add_(x)
        r = 1
    except RuntimeError:
        r = 2
    return x * r


def test_overlap_caught_by_the_function_is_guarded():
    cfn = specengine.compile(_caught, dynamic=True)
    for n in (2, 3, 0, 2, 3, 0):
        both(_caught, cfn, lambda n=n: [torch.randn(n, n)])
    assert counts(cfn) == (3, 3)  # each size pinned: an entry for each, each serving its size again
    assert "x.shape[0] == 0" in [str(g) for g in specengine.last_guards(cfn)]


def test_overlap_caught_by_the_function_refused_where_strides_decide_it():
    cfn = specengine.compile(_caught, dynamic=True)
    with pytest.raises(specengine.UnsupportedOpError, match="size-1 dims"):
        cfn(torch.randn(1, 1))  # (the stride of a size-1 dim tells a full overlap from a partial one)
    with pytest.raises(specengine.UnsupportedOpError, match="non-contiguous input"):
        cfn(torch.randn(3, 3).t())


def _deep(x):
    y = x
    for _ in range(401):  # a long chain of views (the layouts are rebuilt without recursion)
        y = y.t()
    y.sub_(x)
    for _ in range(300):  # in-place ops on tensors that ops made: nothing to rebuild
        x = x * 1.0
        x.add_(1)
    return x


def test_long_chains_of_views_and_writes():
    cfn = specengine.compile(_deep, dynamic=True)
    kinds = []
    for n in (2, 1, 3):
        out = both(_deep, cfn, lambda n=n: [torch.randn(n, n)])
        kinds.append(type(out).__name__ if isinstance(out, Exception) else "ok")
    assert kinds == ["RuntimeError", "ok", "RuntimeError"]
    assert counts(cfn) == (1, 1)


def _caught_fresh(x, y):
    try:
        z = x * 2
        z.add_(1)  # a tensor an op made: nothing to check
        x.mul_(2)  # a contiguous input: no internal overlap whatever its sizes (the prologue checks contiguity)
        y.t().add_(x.t())  # sources that share nothing with what is written (broadcasting pins the sizes here)
    except RuntimeError:
        z = x
    return z


def test_writes_that_cannot_overlap_pin_nothing_inside_try():
    cfn = specengine.compile(_caught_fresh, dynamic=True)
    for n in (2, 3, 0, 1):
        both(_caught_fresh, cfn, lambda n=n: [torch.randn(n, 3), torch.randn(n, 3)])
    assert counts(cfn) == (4, 0)
    assert [str(g) for g in specengine.last_guards(cfn)] == [f"{t}.shape[{d}] == {v}" for t in "xy" for d, v in
                                                             enumerate((1, 3))]  # fmt: skip
    cfn = specengine.compile(_caught_scalars, dynamic=True)
    for n in (2, 3, 0, 1):
        both(_caught_scalars, cfn, lambda n=n: [torch.randn(n, 3)])
    assert counts(cfn) == (1, 3) and specengine.last_guards(cfn) == []
    with pytest.raises(specengine.UnsupportedOpError, match="non-contiguous input x"):
        cfn(torch.randn(3, 2).t())  # (its strides decide whether it overlaps itself; the prologue does not see them)


def _caught_scalars(x):
    try:
        z = x * 2
        z.add_(1)
        x.mul_(2)
        w = torch.zeros(2, 3)
        w.t().sub_(1)  # a view of a tensor a factory made (the factory does not run while checking)
    except RuntimeError:
        z = x
    return z, w


def test_a_layout_depends_on_each_size_once_however_the_ops_before_it_branch(monkeypatch):
    """Funnel's attention: every op read its inputs' dependencies with repeats, so a chain where each op reads a
    tensor twice doubled them per op (2**n entries; funnel's first compile took 24 GB and 44 s). Each is kept once."""
    from specengine.ops import overlap

    seen = []
    real = overlap.Examples.of
    monkeypatch.setattr(overlap.Examples, "of", lambda self, *a, **k: seen.append(real(self, *a, **k)) or seen[-1])
    monkeypatch.setattr(overlap.Examples, "overlap_free", lambda self, proxy: False)  # (the layout is replayed)

    def f(x):
        y = x
        for _ in range(16):
            y = y * 0.5 + y.t().t()
        y.t().add_(1)  # a write into a view: its layout is replayed through the chain
        return y

    cfn = specengine.compile(f, dynamic=True)
    for n in (2, 0, 1, 3, 2):
        x = torch.randn(n, 3)
        torch.testing.assert_close(cfn(x), f(x))
    assert specengine.cache_misses(cfn) == 1 and specengine.cache_hits(cfn) == 4
    assert seen and all(len(deps) == len(set(deps)) <= 4 for _, deps in seen), [len(d) for _, d in seen]


# Internal overlap decided from the ops that made the written tensor (Examples.overlap_free) or by replaying its
# layout: a generator of bases x view chains x writes, each compared with eager (the error, or the values) over
# sizes 2, 0, 1, 3 that make an expanded dim overlap or not.
BASES = {
    "fresh": lambda x: x * 2,
    "input": lambda x: x,
    "expanded input": lambda x: x[:1].expand(x.shape[0], -1),
    "einsum of two": lambda x: torch.einsum("ij,jk->ik", x, torch.ones(x.shape[1], x.shape[1])),
    "einsum of one, expanded": lambda x: torch.einsum("ij->ji", x[:1].expand(x.shape[0], -1)),
    "matmul": lambda x: x @ torch.ones(x.shape[1], x.shape[1]),
    "cat": lambda x: torch.cat([x, x]),
}
CHAINS = {
    "none": lambda v: v,
    "subset views": lambda v: v.t().reshape(-1).unflatten(0, (v.shape[1], -1))[:, 1:].unsqueeze(0).squeeze(0),
    "expand": lambda v: v[:, :1].expand(-1, 3),
    "unfold": lambda v: v.reshape(-1).unfold(0, 2, 1),
    "diagonal then select": lambda v: v.diagonal().unsqueeze(1),
}
WRITES = {
    "add_": lambda v: v.add_(1),
    "mul_ of a fresh tensor": lambda v: v.mul_(torch.full_like(v, 2)),
    "setitem": lambda v: v.__setitem__(Ellipsis, 3.0),
}


@pytest.mark.parametrize("write", list(WRITES))
@pytest.mark.parametrize("chain", list(CHAINS))
@pytest.mark.parametrize("base", list(BASES))
def test_internal_overlap_by_base_chain_and_write(base, chain, write, monkeypatch):
    """... and the counts of the same program where every layout is replayed (no op is known to allocate)."""
    from specengine.ops import overlap

    def f(x):
        v = CHAINS[chain](BASES[base](x))
        WRITES[write](v)
        return v.sum() + x.sum()

    outcomes = []
    for structural in (True, False):
        if not structural:
            monkeypatch.setattr(overlap.Examples, "overlap_free", lambda self, proxy: False)
        cfn = specengine.compile(f, dynamic=True)
        kinds = [type(both(f, cfn, lambda n=n: [torch.randn(n, 2)])).__name__ for n in (2, 0, 1, 3, 2)]
        outcomes.append((kinds, counts(cfn)))
    assert outcomes[0] == outcomes[1]  # (an entry made at size 0 serves size 1 and raises torch's error there)
    assert sum(outcomes[0][1]) >= outcomes[0][0].count("Tensor")
