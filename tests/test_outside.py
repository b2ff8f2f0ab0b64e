"""Values that do not come from the inputs (issue 12): constant factories, tensors closed over from outside,
Tensor methods called through the class, layout and memory format facts, complex scalars, sparse inputs."""

from __future__ import annotations

import warnings

import pytest
import torch
from helpers import counts, run_both
from torch import Tensor

import specengine
from specengine import UnsupportedOpError

SIZES = [0, 1, 2, 5]


def _sweep(fn, make, misses: int = 1):
    cfn = specengine.compile(fn, dynamic=True)
    for n in SIZES:
        run_both(fn, cfn, make(n))
    assert specengine.cache_misses(cfn) == misses
    return cfn


def test_constant_factories_are_computed_in_the_trace() -> None:
    def fn(x):
        a = torch.linspace(0, 1, 4) + torch.logspace(0, 2, 4) + torch.tensor([1.0, 2.0, 3.0, 4.0])
        return x.sum() + a + torch.scalar_tensor(3) + torch.tensor([]).sum(), torch.tensor([[1, 2], [3, 4]])

    cfn = _sweep(fn, lambda n: [torch.randn(n)])
    text = str(specengine.last_traces(cfn)[-1])
    assert "torch.linspace(0, 1, 4)" in text and "torch.tensor([])" in text
    first, second = cfn(torch.randn(2)), cfn(torch.randn(2))
    assert first[1] is not second[1]  # a fresh tensor per call, as eager makes
    assert specengine.cache_misses(cfn) == 1


def test_random_factory_draws_on_every_call() -> None:
    def fn(x):
        return x + torch.rand(3)

    cfn = specengine.compile(fn, dynamic=True)
    x = torch.zeros(3)
    torch.manual_seed(0)
    expected = fn(x)
    torch.manual_seed(0)
    torch.testing.assert_close(cfn(x), expected)  # tracing leaves the generator as it found it
    assert not torch.equal(cfn(x), cfn(x))
    assert counts(cfn) == (1, 2)


def test_factory_with_an_int_input_pins_it() -> None:  # (torch.linspace has a symbolic rule now)
    cfn = specengine.compile(lambda x, n: x.sum() + torch.logspace(0, 1, n), dynamic=True)
    for n in (3, 3, 4):
        run_both(lambda x, n: x.sum() + torch.logspace(0, 1, n), cfn, [torch.randn(2), n])
    assert counts(cfn) == (2, 1)
    assert "n == 4" in [str(g) for g in specengine.last_guards(cfn)]


C = torch.arange(5.0)
TABLE = {"c": torch.arange(5.0)}


def test_closed_over_tensors_are_inputs() -> None:
    def fn(x):
        return x * C + TABLE["c"] * 2 + torch.add(TABLE["c"], 1)

    cfn = _sweep(fn, lambda n: [torch.randn(n, 5)])
    C.add_(1)
    TABLE["c"].add_(1)  # in-place changes outside: the computation reads the current values
    try:
        run_both(fn, cfn, [torch.randn(3, 5)])
        assert specengine.cache_misses(cfn) == 1
    finally:
        C.sub_(1)
        TABLE["c"].sub_(1)


def test_closed_over_tensor_rebound_in_a_container() -> None:
    def fn(x):
        return x * TABLE["c"]

    cfn = _sweep(fn, lambda n: [torch.randn(n, 5)])
    old = TABLE["c"]
    TABLE["c"] = torch.full((5,), 7.0)  # the entry checks that the place still holds the tensor it read
    try:
        run_both(fn, cfn, [torch.randn(3, 5)])
        assert specengine.cache_misses(cfn) == 2
        assert "still reached as <root>['TABLE']['c']" in specengine.recompile_reasons(cfn)[-1]
        del TABLE["c"]
        with pytest.raises(KeyError):
            cfn(torch.randn(3, 5))
    finally:
        TABLE["c"] = old


def test_closed_over_tensor_returned() -> None:
    def fn(x):
        return x + 1, TABLE["c"]

    cfn = specengine.compile(fn, dynamic=True)
    assert cfn(torch.randn(3))[1] is TABLE["c"]  # the very tensor, as eager returns it


def test_inplace_on_closed_over_tensor_is_refused() -> None:
    cfn = specengine.compile(lambda x: (TABLE["c"].add_(1), x)[1], dynamic=True)
    with pytest.raises(UnsupportedOpError, match="closed over from outside"):
        cfn(torch.randn(2))


RADD, GETITEM = torch.Tensor.__radd__, torch.Tensor.__getitem__


def test_unbound_tensor_methods_use_the_same_table() -> None:
    mul = torch.Tensor.__rmul__
    _sweep(
        lambda x: (RADD(x, 2), GETITEM(x, 0), mul(x, 3), torch.Tensor.__rsub__(x, 1)), lambda n: [torch.randn(n + 1)]
    )


def _mul_through_class(x):
    return torch.Tensor.mul(x, 3)  # (in a helper: not in the traced function's code, learned on the first trace)


def test_any_tensor_method_called_through_the_class_runs() -> None:
    def fn(x, y):
        return (
            torch.Tensor.add(x, y),
            Tensor.sum(x),
            torch.Tensor.shape.__get__(x)[0],
            _mul_through_class(x),
            torch.Tensor.clamp(x, min=0),
            torch.Tensor.size(x, 0),
            torch.Tensor.cosh(x),
        )  # fmt: skip (cosh: generic)

    _sweep(fn, lambda n: [torch.randn(n + 1), torch.randn(n + 1)])
    assert "add" not in torch.Tensor.__dict__ and torch.Tensor.add is torch._C.TensorBase.add  # put back


def test_tensor_method_that_still_reaches_torchs_type_check_is_refused_cleanly() -> None:
    cfn = specengine.compile(lambda x: torch._C.TensorBase.add(x, 1), dynamic=True)
    with pytest.raises(UnsupportedOpError, match=r"torch.Tensor.add called through the class .*test_outside.py.*x.add"):
        cfn(torch.randn(2))


def test_layout_is_a_static_fact() -> None:
    def fn(x):
        return x * 2 if x.layout == torch.strided else x

    cfn = _sweep(fn, lambda n: [torch.randn(n)])
    assert specengine.last_guards(cfn) == []
    assert "x.layout is not _strided" in str(specengine.last_prologue(cfn))
    with pytest.raises(UnsupportedOpError, match="sparse_coo tensor input"):
        cfn(torch.randn(3).to_sparse())  # the entry's layout check fails; describing the input refuses it


def test_sparse_csr_input_is_refused() -> None:
    cfn = specengine.compile(lambda x: x * 2, dynamic=True)
    with warnings.catch_warnings():  # torch warns "Sparse CSR ... beta" once per process, whichever test is first
        warnings.simplefilter("ignore", UserWarning)
        x = torch.eye(3).to_sparse_csr()
    with pytest.raises(UnsupportedOpError, match="sparse_csr"):
        cfn(x)
    assert counts(cfn) == (0, 0)


def test_memory_format_facts_and_conversions() -> None:
    def fn(x):
        if x.is_contiguous(memory_format=torch.channels_last):
            return x.to(memory_format=torch.contiguous_format) * 2
        return x.contiguous(memory_format=torch.channels_last) + 1

    cfn = specengine.compile(fn, dynamic=True)
    plain = torch.randn(2, 3, 4, 5)
    last = plain.to(memory_format=torch.channels_last)
    for x in (plain, last, torch.randn(3, 3, 2, 2), torch.randn(1, 3, 4, 4).to(memory_format=torch.channels_last)):
        got, expected = cfn(x), fn(x)
        torch.testing.assert_close(got, expected)
        assert got.stride() == expected.stride()
    assert specengine.cache_misses(cfn) == 2


def test_is_contiguous_of_a_computed_tensor_is_read_at_run_time() -> None:
    fn = lambda x: (x * 2).t().is_contiguous()  # noqa: E731 - eager: True only where a dim is 1 (or 0)
    cfn = specengine.compile(fn, dynamic=True)
    for s in [(2, 3), (1, 3), (2, 2), (0, 2)]:
        x = torch.randn(*s)
        assert cfn(x) is fn(x)
    assert specengine.cache_misses(cfn) == 1  # a value read at run time: no guard, no recompile


def test_complex_scalars_are_pinned() -> None:
    def fn(x, c):
        return x * c + torch.full((1,), 1j) * (1 + 2j), torch.tensor(c)

    cfn = specengine.compile(fn, dynamic=True)
    for c in (1 + 2j, 1 + 2j, 3j):
        run_both(fn, cfn, [torch.randn(3), c])
    assert counts(cfn) == (2, 1)
