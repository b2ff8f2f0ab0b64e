"""The reductions database (prod, var/std, amin, max/min, argmax/argmin, all/any, softmax family, cumsum) against
eager PyTorch, in the style of test_ops.py: a sweep of sizes (0, 1, 2 and larger), each call compared with eager
(the same exception type where eager raises), the traced dtype and shape, and the entry's decomposition into prims.

`one_miss` cases assert that one compile serves every size: reductions with an identity decide nothing on sizes;
those without one decide `dim != 0`, which only splits off the sizes where eager raises.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from helpers import run_both

import specengine

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # var's dof <= 0; softmax's implicit dim

from test_ops import (  # noqa: E402 - the shared op-database harness
    K,
    M,
    N,
    OpCase,
    T,
    _raises,
    b8,
    bf16,
    calls_by_template,
    calls_of,
    case_params,
    f64,
    i64,
    run_sweep,
)


def _same(name: str, fn: Callable, templates: list, static: bool = False) -> OpCase:
    return OpCase(name, fn, templates, one_miss=True, static=static)


X2, X3 = (N, M), (N, 2, M)
RED = [(X2,), (X3,)]
RED0 = RED + [((),)]
FLOATS = [(f64(N, M),), (bf16(N, M),)]
OTHERS = [(i64(N, M),), (b8(N, M),)]

PROD = [
    _same("prod", lambda x: torch.prod(x), RED0 + FLOATS + OTHERS, static=True),
    _same("Tensor.prod-dim", lambda x: x.prod(1), RED + FLOATS + OTHERS),
    _same("prod-neg-dim-keepdim", lambda x: torch.prod(x, -1, keepdim=True), RED0),
    _same("prod-dim-kwarg", lambda x: x.prod(dim=0), RED),
    _same("prod-dtype", lambda x: (x.prod(0, dtype=torch.float64), torch.prod(x, dtype=torch.int32)), [(X2,)] + OTHERS),
    _same("prod-int32", lambda x: (torch.prod(x), x.prod(0, True)), [(T((N, M), torch.int32),)]),
    _same("prod-dtype-int32", lambda x: (x.prod(dtype=torch.int32), torch.prod(x, 1, dtype=torch.int32)), RED),
    _same("prod-bad-dim", lambda x: x.prod(2), [(X2,)]),
    _same("prod-tuple-dim", lambda x: torch.prod(x, (0, 1)), [(X2,)]),
    _same("Tensor.prod-tuple-dim", lambda x: x.prod((0, 1)), [(X2,)]),
]

VAR = [
    _same("var", lambda x: torch.var(x), RED0 + FLOATS, static=True),
    _same("Tensor.var-dim", lambda x: x.var(0), RED0 + FLOATS),
    _same("var-dims-keepdim", lambda x: x.var((0, -1), keepdim=True), RED),
    _same("var-dim-none-keepdim", lambda x: torch.var(x, dim=None, keepdim=True), RED),
    _same("var-unbiased", lambda x: (torch.var(x, False), x.var(1, False, True), x.var(0, unbiased=True)), [(X2,)]),
    _same("var-correction", lambda x: (x.var(1, correction=0), torch.var(x, 0, correction=2)), RED),
    _same("var-correction-float", lambda x: torch.var(x, 1, correction=0.5), RED + FLOATS),
    _same("var-correction-int-arg", lambda x, k: x.var(0, correction=k), [(X2, K)]),
    _same("var-unbiased-and-correction", lambda x: x.var(0, unbiased=False, correction=1), [(X2,)]),
    _same("var-int", lambda x: (x.var(), torch.var(x, 0)), OTHERS),
    _same("var-bad-dim", lambda x: x.var(2), [(X2,)]),
    _same("var-repeated-dim", lambda x: x.var((0, 0)), [(X2,)]),
    _same("std", lambda x: torch.std(x), RED0 + FLOATS, static=True),
    _same("Tensor.std-keepdim", lambda x: x.std(1, keepdim=True), RED),
    _same("std-unbiased-correction", lambda x: (x.std(False), torch.std(x, -1, correction=1.5)), RED),
    _same("var_mean", lambda x: torch.var_mean(x, 1), RED + FLOATS, static=True),
    _same("var_mean-all", lambda x: (torch.var_mean(x), torch.var_mean(x, False)), RED0),
    _same("var_mean-keepdim", lambda x: torch.var_mean(x, dim=(0, 1), correction=0, keepdim=True), RED),
    _same("std_mean", lambda x: torch.std_mean(x, -1, True, True), RED + FLOATS),
    _same("std_mean-all", lambda x: torch.std_mean(x, correction=2), RED0),
    _same("std_mean-int", lambda x: torch.std_mean(x, 0), OTHERS),
]

AMIN = [
    _same("amin", lambda x: torch.amin(x, 0), RED + FLOATS + OTHERS, static=True),
    _same("Tensor.amin-neg-keepdim", lambda x: x.amin(-1, keepdim=True), RED),
    _same("amin-dims", lambda x: x.amin((0, 1)), RED),
    _same("amin-all", lambda x: x.amin(), RED0 + OTHERS),
    _same("amin-0d", lambda x: (x.amin(0), x.amin(-1, keepdim=True)), [((),)]),
]


def _pair(r: Any) -> tuple:
    """Every way of reading a (values, indices) result."""
    values, indices = r
    assert r.values is values and r[1] is indices
    return values, indices, r.values, r.indices, r[0], r[1]


MAX_MIN = [
    _same("max", lambda x: torch.max(x), RED0 + FLOATS + OTHERS, static=True),
    _same("Tensor.min", lambda x: x.min(), RED0 + FLOATS + OTHERS),
    _same("max-dim", lambda x: _pair(torch.max(x, 1)), RED + FLOATS + OTHERS, static=True),
    _same("Tensor.min-dim", lambda x: _pair(x.min(0)), RED + FLOATS + OTHERS),
    _same("max-dim-keepdim", lambda x: _pair(x.max(-1, True)), RED),
    _same("min-dim-kwargs", lambda x: _pair(torch.min(x, dim=-2, keepdim=True)), RED),
    _same("max-dim-unpack", lambda x: [t * 2 for t in x.max(0)], RED),
    _same("max-min-0d", lambda x: (*x.max(0), *x.min(-1, keepdim=True), x.max(), x.min()), [((),)]),
    _same("max-dim-returned", lambda x: x.max(1), RED),
    _same("max-bad-dim", lambda x: x.max(2), [(X2,)]),
    _same("max-keepdim-without-dim", lambda x: x.max(keepdim=True), [(X2,)]),
    _same("max-dim-none", lambda x: x.min(dim=None), [(X2,)]),
    _same("max-binary", lambda x, y: torch.max(x, y), [(X2, X2), ((N,), (N,))], static=True),
    _same("Tensor.min-binary", lambda x, y: x.min(y), [(X2, X2), ((N,), (N,))]),
    _same("max-min-other-kwarg", lambda x, y: (torch.max(x, other=y), torch.min(x, other=y)), [(X2, X2)]),
    _same("min-binary-nan", lambda x, y: (torch.min(x.log(), y), torch.min(y, x.log()), x.log().max(y)), [(X2, X2)]),
    _same("max-binary-dtypes", lambda x, y: (torch.max(x, y), torch.min(y, x)), [(i64(N), (N,)), (b8(N), b8(N))]),
    _same("min-binary-bf16-f64", lambda x, y: torch.min(x, y), [(bf16(N, M), f64(N, M)), (i64(N), b8(N))]),
    OpCase("max-binary-broadcast", lambda x, y: (torch.max(x, y), y.min(x)), [(X2, (M,)), ((N, 1), (1, M))]),
    _same("max-binary-mismatch", lambda x, y: torch.max(x, y), [((N, 3), (4,))]),
]

ARG = [
    _same("argmax", lambda x: torch.argmax(x), RED0 + FLOATS + [(i64(N, M),)], static=True),
    _same("Tensor.argmin", lambda x: x.argmin(), RED0 + FLOATS + [(i64(N, M),)]),
    _same("argmax-dim", lambda x: x.argmax(1), RED + FLOATS + [(i64(N, M),)], static=True),
    _same("argmin-dim-keepdim", lambda x: torch.argmin(x, -1, keepdim=True), RED + [(i64(N, M),)]),
    _same("argmax-keepdim-all", lambda x: (x.argmax(keepdim=True), torch.argmin(x, dim=None, keepdim=True)), RED),
    _same("argmax-0d", lambda x: (x.argmax(), x.argmin(0), x.argmax(-1, keepdim=True)), [((),)]),
    _same("argmax-bool", lambda x: (x.argmax(), torch.argmin(x, 0)), [(b8(N, M),)]),
    _same("argmax-bad-dim", lambda x: x.argmax(-3), [(X2,)]),
]

U8 = (T((N, M), torch.uint8, 0),)
ALL_ANY = [
    _same("all", lambda x: torch.all(x), RED0 + OTHERS + [U8], static=True),
    _same("Tensor.any", lambda x: x.any(), RED0 + OTHERS + [U8]),
    _same("all-dim", lambda x: (torch.all(x, 1), x.any(0)), RED + OTHERS + [U8]),
    _same("any-dims-keepdim", lambda x: (torch.any(x, (0, -1), keepdim=True), x.all((1, 0))), RED + OTHERS),
    _same("all-dim-none", lambda x: (x.all(dim=None), torch.any(x, dim=None)), [(X2,)] + OTHERS),
    _same("any-compare", lambda x: ((x > 0).any(-1), (x > 0).all(-1, True)), RED0),
    _same("all-0d", lambda x: (x.all(0), torch.any(x, -1, keepdim=True)), [((),), (b8(),)]),
    _same("any-nan", lambda x: (torch.any(x.log() * 0, 1), x.log().all(0)), RED),
]

SOFTMAX = [
    _same("softmax", lambda x: torch.softmax(x, -1), RED0 + FLOATS, static=True),
    _same("Tensor.softmax", lambda x: x.softmax(0), RED0 + FLOATS),
    _same("F.softmax", lambda x: F.softmax(x, dim=1), RED + FLOATS, static=True),
    _same("F.softmax-implicit-dim", lambda x: F.softmax(x), RED0),
    _same("softmax-dtype", lambda x: (torch.softmax(x, 0, dtype=torch.float64), x.softmax(1, torch.float64)), RED),
    _same("softmax-dtype-positional", lambda x: torch.softmax(x, -1, torch.float64), [(X2,), (i64(N, M),)]),
    _same("F.softmax-dtype", lambda x: F.softmax(x, 1, dtype=torch.float64), [(X2,), (i64(N, M),), (bf16(N, M),)]),
    _same("softmax-int", lambda x: torch.softmax(x, -1), [(i64(N),), (b8(N),)]),
    _same("softmax-int-2d", lambda x: (torch.softmax(x, 0), x.log_softmax(1)), [(i64(N, M),)]),
    _same("softmax-inf", lambda x: (torch.softmax(x / 0, 1), F.log_softmax(x / 0, 1)), [(X2,)]),
    _same("softmax-bad-dim", lambda x: torch.softmax(x, 2), [(X2,)]),
    _same("softmax-missing-dim", lambda x: x.softmax(), [(X2,)]),
    _same("log_softmax", lambda x: torch.log_softmax(x, -1), RED0 + FLOATS, static=True),
    _same("Tensor.log_softmax", lambda x: x.log_softmax(0), RED0),
    _same("F.log_softmax", lambda x: (F.log_softmax(x, 1), F.log_softmax(x, -2, dtype=torch.float64)), RED + FLOATS),
    _same("F.log_softmax-implicit-dim", lambda x: F.log_softmax(x), RED0),
    _same("logsumexp", lambda x: torch.logsumexp(x, 1), RED + FLOATS + OTHERS, static=True),
    _same("Tensor.logsumexp-keepdim", lambda x: x.logsumexp((0, -1), keepdim=True), RED),
    _same("logsumexp-dim-list", lambda x: (torch.logsumexp(x, [0]), torch.logsumexp(x, -1, True)), RED0),
    _same("logsumexp-all", lambda x: torch.logsumexp(x, ()), RED),
    _same("logsumexp-inf", lambda x: (torch.logsumexp(x / 0, 1), torch.logsumexp(x.log(), 0)), [(X2,)]),
    _same("logsumexp-inf-mixed", lambda x: torch.logsumexp(torch.where(x > 0, x / 0, x), 1), [(X2,)]),
]

CUMSUM = [
    _same("cumsum", lambda x: torch.cumsum(x, 0), RED0 + FLOATS + OTHERS, static=True),
    _same("Tensor.cumsum", lambda x: x.cumsum(-1), RED0 + OTHERS),
    _same("cumsum-dim-kwarg", lambda x: x.cumsum(dim=1), RED),
    _same("cumsum-dtype", lambda x: (torch.cumsum(x, 1, dtype=torch.float64), x.cumsum(0, dtype=torch.int32)), RED),
    _same("cumsum-int-dtype", lambda x: (torch.cumsum(x, 0), x.cumsum(1, dtype=torch.float32)), OTHERS),
    _same("cumsum-int32", lambda x: torch.cumsum(x, -1), [(T((N, M), torch.int32),)]),
    _same("cumsum-bad-dim", lambda x: x.cumsum(2), [(X2,)]),
]

COMPOSED = [
    _same("normalize", lambda x: (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True), RED),
    _same("argmax-of-softmax", lambda x: torch.softmax(x, -1).max(-1).indices == x.argmax(-1), RED),
    _same("masked-any", lambda x: (x.abs() > 1).any(1) & torch.all(x.cumsum(1) < 3, 1), [(X2,)]),
]

CASES = PROD + VAR + AMIN + MAX_MIN + ARG + ALL_ANY + SOFTMAX + CUMSUM + COMPOSED


@pytest.mark.parametrize("case", case_params(CASES))
def test_op_dynamic(case: OpCase) -> None:
    calls = calls_of(case)
    for order in (calls, calls[::-1]):
        cfn = run_sweep(case.fn, order, dynamic=True, all_prims=True)
        misses = specengine.cache_misses(cfn)
        assert misses <= len(calls)
        if case.one_miss:  # one entry per template (they differ in rank or dtype), whatever the sizes
            expected = sum(any(not _raises(case.fn, args) for args in t) for t in calls_by_template(case))
            assert misses == expected, f"{misses} misses; guards: {specengine.last_guards(cfn)}"


@pytest.mark.parametrize("case", case_params([c for c in CASES if c.static]))
def test_op_static(case: OpCase) -> None:
    calls = calls_of(case)
    cfn = run_sweep(case.fn, calls, dynamic=False, all_prims=True)
    assert specengine.cache_misses(cfn) == sum(not _raises(case.fn, args) for args in calls)


def test_every_case_name_is_unique() -> None:
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))


# Decisions: only reductions without an identity decide on sizes, and only `dim != 0`.

EMPTY_OK = [
    lambda x: x.prod(1),
    lambda x: torch.var_mean(x, 0),
    lambda x: x.std(),
    lambda x: torch.softmax(x, 1),
    lambda x: F.log_softmax(x, 0),
    lambda x: torch.logsumexp(x, 1),
    lambda x: (x > 0).all(1),
    lambda x: torch.any(x),
    lambda x: x.cumsum(0),
    lambda x: torch.max(x, x * 2),
]


@pytest.mark.parametrize("fn", EMPTY_OK)
def test_identity_reductions_record_no_guard(fn: Callable) -> None:
    cfn = specengine.compile(fn, dynamic=True)
    for shape in [(2, 3), (0, 3), (3, 0), (1, 1), (0, 0), (4, 5)]:
        run_both(fn, cfn, [torch.randn(shape)])
    assert specengine.cache_misses(cfn) == 1
    assert specengine.last_guards(cfn) == []


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (lambda x: x.max(1), ["x.shape[1] != 0"]),
        (lambda x: torch.argmin(x, 0), ["x.shape[0] != 0"]),
        (lambda x: x.amin(-1, keepdim=True), ["x.shape[1] != 0"]),
        (lambda x: torch.min(x), ["x.shape[0] != 0", "x.shape[1] != 0"]),
        (lambda x: x.argmax(), ["x.shape[0] != 0", "x.shape[1] != 0"]),
    ],
)
def test_reductions_without_identity_guard_nonempty(fn: Callable, expected: list) -> None:
    cfn = specengine.compile(fn, dynamic=True)
    for shape in [(2, 3), (0, 3), (3, 0), (1, 1), (4, 5)]:
        run_both(fn, cfn, [torch.randn(shape)])
    assert specengine.cache_misses(cfn) == 1
    assert sorted(str(g) for g in specengine.last_guards(cfn)) == expected


def test_integer_softmax_runs_only_when_empty() -> None:
    fn = lambda x: torch.softmax(x, 1)  # noqa: E731
    cfn = specengine.compile(fn, dynamic=True)
    for shape in [(0, 3), (3, 0), (0, 0), (2, 3)]:
        run_both(fn, cfn, [torch.ones(shape, dtype=torch.int64)])
    assert specengine.cache_misses(cfn) == 1
    with pytest.raises(NotImplementedError, match="softmax_lastdim_kernel_impl"):
        cfn(torch.ones(2, 2, dtype=torch.int64))


def test_returned_max_keeps_its_type() -> None:
    cfn = specengine.compile(lambda x: x.max(1), dynamic=True)
    out = cfn(torch.randn(2, 3))
    assert isinstance(out, torch.return_types.max) and out.indices.dtype is torch.int64


def test_trace_prints_value_index_pairs() -> None:
    cfn = specengine.compile(lambda x: x.max(1).values.sum() + x.min(0, keepdim=True)[1], dynamic=True)
    cfn(torch.randn(2, 3))
    text = str(specengine.cache_entries(cfn)[0].traces[0])
    # (calls reach rules in torch's canonical spelling, ops/signatures.py: keepdim, a positional parameter, positionally)
    assert "ltorch.max(x, 1)" in text and "ltorch.min(x, 0, True)" in text


# Gradients: backward through the compiled function equals eager's.

GRADS = [
    OpCase("grad-prod", lambda x: x.prod(1, keepdim=True) * x + torch.prod(x), [(X2,)]),
    OpCase("grad-var-std", lambda x: x.var(0) + torch.std(x, 1, correction=0).sum() + x.var(), [(X2,)]),
    OpCase("grad-var_mean", lambda x: operator.mul(*torch.var_mean(x, -1, keepdim=True)) * x, [(X2,)]),
    OpCase("grad-std_mean", lambda x: sum(torch.std_mean(x, (0, 1))), [(X3,)]),
    OpCase("grad-max-min", lambda x, y: x.max(1).values + x.min(0, True)[0].sum() + torch.max(x, y), [(X2, X2)]),
    OpCase("grad-amin-full", lambda x, y: x.amin(-1) + x.max() + y.min() + torch.min(x, y).sum(0), [(X2, X2)]),
    OpCase("grad-softmax", lambda x: torch.softmax(x, -1) * F.log_softmax(x, 0), [(X2,), (X3,)]),
    OpCase("grad-logsumexp-cumsum", lambda x: torch.logsumexp(x, 1, keepdim=True) + x.cumsum(0), [(X2,)]),
]


def _grad_args(args: list) -> list:
    return [a.double().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]


@pytest.mark.parametrize("case", case_params(GRADS))
def test_op_gradients(case: OpCase) -> None:
    cfn = specengine.compile(case.fn, dynamic=True)
    calls = [_grad_args(args) for args in calls_of(case)]
    for args in calls:
        if _raises(case.fn, args):
            continue
        inputs = [a for a in args if isinstance(a, torch.Tensor)]
        expected, got = case.fn(*args), cfn(*args)
        torch.testing.assert_close(got, expected, equal_nan=True)
        grad_out = torch.randn_like(expected)
        got_grads = torch.autograd.grad(got, inputs, grad_out, allow_unused=True)
        expected_grads = torch.autograd.grad(expected, inputs, grad_out, allow_unused=True)
        for g, e in zip(got_grads, expected_grads):
            torch.testing.assert_close(g, e, equal_nan=True)
    assert specengine.cache_misses(cfn) <= len(calls)
