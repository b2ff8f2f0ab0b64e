"""In-place ops and setitem: mutation is visible exactly as in eager, aliasing included."""

from __future__ import annotations

import pytest
import torch
from helpers import counts, guards

import specengine


def run(fn, cfn, *make):
    """Run eager and compiled on fresh copies of the same inputs; outputs and mutated inputs must match."""
    eager_in, comp_in = [m() for m in make], None
    comp_in = [x.clone() if isinstance(x, torch.Tensor) else x for x in eager_in]
    expected = fn(*eager_in)
    got = cfn(*comp_in)
    torch.testing.assert_close(got, expected)
    for a, b in zip(comp_in, eager_in):
        if isinstance(a, torch.Tensor):
            torch.testing.assert_close(a, b)


def test_inplace_on_inputs_is_visible_to_the_caller():
    def f(x, y):
        x.add_(y, alpha=2)
        x.mul_(3)
        x -= 1
        x /= 2
        return x * 2

    cfn = specengine.compile(f, dynamic=True)
    for n in (0, 1, 2, 5):
        run(f, cfn, lambda n=n: torch.randn(n, 3), lambda: torch.randn(3))
    assert counts(cfn) == (1, 3)
    final = str(specengine.last_traces(cfn)[-1])
    assert "torch.Tensor.add_(x, y, alpha=2)" in final and "torch.Tensor.mul_(x, 3)" in final


def test_cse_does_not_merge_across_a_mutation():
    def f(x):
        a = x * 2
        x.add_(1)
        b = x * 2
        return a, b

    cfn = specengine.compile(f, dynamic=True)
    run(f, cfn, lambda: torch.randn(4))
    assert str(specengine.last_traces(cfn)[-1]).count("torch.mul(x, 2)") == 2


def test_setitem_with_symbolic_bounds_like_a_kv_cache():
    def update(cache, new, pos):
        cache[:, pos : pos + new.shape[1]] = new
        return cache[:, : pos + new.shape[1]].sum(1)

    cfn = specengine.compile(update, dynamic=True)
    for pos, t in ((0, 3), (3, 1), (4, 2), (6, 0)):
        run(update, cfn, lambda: torch.zeros(2, 8, 4), lambda t=t: torch.randn(2, t, 4), lambda pos=pos: pos)
    assert counts(cfn) == (1, 3)


def test_fill_zero_copy_and_views():
    def f(x, y):
        x[0].fill_(1.5)
        x[:, -1].zero_()
        x[1:].copy_(y)
        return x.sum()

    cfn = specengine.compile(f, dynamic=True)
    for n in (2, 3):
        run(f, cfn, lambda n=n: torch.randn(n, 4), lambda n=n: torch.randn(n - 1, 4))
    assert counts(cfn) == (1, 1)


def test_aliased_inputs_behave_as_in_eager():
    def f(a, b):
        a.add_(b)
        return a + b

    cfn = specengine.compile(f, dynamic=True)
    x = torch.randn(3)
    run(f, cfn, lambda: torch.ones(3), lambda: torch.ones(3))
    xe, xc = x.clone(), x.clone()
    expected = f(xe, xe)
    torch.testing.assert_close(cfn(xc, xc), expected)
    torch.testing.assert_close(xc, xe)
    assert counts(cfn) == (2, 0)  # `a is b` could be observed: the aliased call gets its own entry
    assert guards(cfn) == []
    xe, xc = x.clone(), x.clone()
    torch.testing.assert_close(cfn(xc, xc), f(xe, xe))
    assert counts(cfn) == (2, 1)


def test_inplace_errors_match_eager():
    def widen(x, y):
        x.add_(y)
        return x

    cfn = specengine.compile(widen, dynamic=True)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        cfn(torch.randn(3, 1), torch.randn(3, 4))
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
        cfn(torch.arange(3), torch.randn(3))
    assert counts(cfn) == (0, 0)
    leaf = torch.randn(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        cfn(leaf, torch.randn(3))


def _write_after_contiguous(x):
    v = x.t()
    w = v.contiguous()  # a copy where v is not contiguous, v itself where it is
    v.mul_(2)
    return x + 0, w + 0


def _write_through_contiguous(x):
    w = x.t().contiguous()
    w.add_(1)
    return x + 0, w + 0


def _write_after_channels_last(x):
    w = x.to(memory_format=torch.channels_last)
    x.mul_(3)
    return w + 0, x + 0


@pytest.mark.parametrize(
    "fn, shapes",
    [
        (_write_after_contiguous, [(2, 3), (1, 3), (0, 2), (2, 2)]),
        (_write_through_contiguous, [(2, 3), (1, 3), (3, 1), (0, 0), (2, 2)]),
        (_write_after_channels_last, [(2, 3, 4, 5), (1, 1, 1, 1), (0, 2, 1, 1), (2, 1, 3, 3)]),
    ],
)
def test_contiguous_result_aliases_its_input_only_where_eager_does(fn, shapes):
    """`.contiguous()` and `.to(memory_format=)` are their input or a copy, as the strides decide: an in-place op
    on either afterwards reaches the other exactly where eager's does (an entry traced where they alias serves a
    size where they do not: the computation runs torch's op, which decides)."""
    cfn = specengine.compile(fn, dynamic=True)
    for s in shapes:
        run(fn, cfn, lambda s=s: torch.arange(float(torch.Size(s).numel())).reshape(s))
    assert counts(cfn) == (1, len(shapes) - 1)


def test_setitem_drops_the_values_leading_ones_as_torch_does():
    """`y[...] = x` with x of more dims than y, the extra leading ones of size 1, is eager's copy of x's last dims
    (an entry traced for 1s there does not serve a value whose leading size is 2: eager raises)."""

    def f(y, x):
        y[...] = x
        return y * 2

    cfn = specengine.compile(f, dynamic=True)
    for ys, xs in (((3,), (1, 1, 3)), ((0,), (1, 1, 1)), ((1,), (1, 1, 1)), ((2,), (1, 2))):
        run(
            f, cfn, lambda ys=ys: torch.zeros(ys), lambda xs=xs: torch.arange(float(torch.Size(xs).numel())).reshape(xs)
        )
    with pytest.raises(RuntimeError):
        f(torch.zeros(2), torch.ones(2, 2))
    with pytest.raises(RuntimeError):
        cfn(torch.zeros(2), torch.ones(2, 2))
    assert counts(cfn) == (2, 2)  # the 3-d values, the 2-d one (a 2-d value whose leading size is 2 keeps nothing)
