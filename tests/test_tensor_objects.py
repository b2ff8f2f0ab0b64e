"""Tensors as Python objects inside a compiled function (issue 22, part 5): autograd flags, backward, gradients,
parameters, Python attributes, `nbytes`/`itemsize`.

A generator: tensor kinds (an input, an input carrying a Python attribute the caller set, an input that requires grad, a tensor computed inside with and without grad,
a detached one, an `nn.Parameter` made inside) x operations (reads, writes, calls) x the three dynamic modes, over
calls of sizes 0, 1, 2 that hit and miss. Each call's result, and the state it leaves on the input (its flags,
`.grad`, Python attributes), equals eager's; where eager raises, the same exception type is raised; the constructs
documented as refused raise UnsupportedOpError naming themselves and this file; hit/miss counts are exact.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import specengine
from specengine.errors import UnsupportedOpError

CALLS = [(0, 1), (1, 1), (2, 2), (2, 2), (1, 3)]  # (size, n)
MODES = (True, None, False)
PLAIN_MISSES = {True: 1, None: 3, False: 4}  # a program whose sizes and ints stay symbolic, over CALLS

KINDS = {
    "input": (False, lambda x: x),
    "input_rg": (True, lambda x: x),
    "computed": (False, lambda x: x * 2),
    "computed_rg": (True, lambda x: x * 2),
    "detached": (True, lambda x: x.detach()),
    "parameter": (False, lambda x: nn.Parameter(x * 2)),
    "input_tagged": (False, lambda x: x),  # the caller set `x.tag = n` (a Python attribute that changes with n)
}
TAGGED = {"input_tagged"}
READS_TAG = {"getattr_default", "hasattr", "attr", "vars", "dict_get"}  # (a read is a guarded value, hasattr's too)
TAGGED_MISSES = {True: 3, None: 4, False: 4}  # over CALLS, the tag (n) changing: 1, 1, 2, 2, 3


def _set_tag(t, n):
    t.tag = n
    return t.tag * 2


def _set_grad_none(t, n):
    t.grad = None
    return t.grad


def _set_data(t, n):
    t.data = t * 2


def _backward(t, n):
    loss = (t * t * n).sum()
    loss.backward()
    return loss


def _retain(t, n):
    y = t * n
    y.retain_grad()
    return y


OPS = {
    # reads
    "requires_grad": lambda t, n: t.requires_grad,
    "nbytes": lambda t, n: t.nbytes + n,
    "itemsize": lambda t, n: t.itemsize,
    "is_leaf": lambda t, n: t.is_leaf,
    "grad": lambda t, n: t.grad,
    "getattr_default": lambda t, n: getattr(t, "tag", n),
    "hasattr": lambda t, n: hasattr(t, "tag"),
    "attr": lambda t, n: t.tag * 2,
    "vars": lambda t, n: sorted(vars(t)),
    "dict_get": lambda t, n: t.__dict__.get("tag", 0) + n,
    # writes
    "requires_grad=": lambda t, n: setattr(t, "requires_grad", True),
    "requires_grad_()": lambda t, n: t.requires_grad_(),
    "requires_grad_(False)": lambda t, n: t.requires_grad_(False),
    "tag=": _set_tag,
    "grad=None": _set_grad_none,
    "data=": _set_data,
    # calls
    "retain_grad": lambda t, n: t.retain_grad(),
    "retain_grad_computed": _retain,
    "backward": _backward,
    "autograd.grad": lambda t, n: torch.autograd.grad((t * t * n).sum(), t),
    "autograd.grad_create_graph": lambda t, n: torch.autograd.grad((t * t).sum(), [t], create_graph=True)[0] * n,
    "Parameter": lambda t, n: nn.Parameter(t * n),
    "Parameter_no_grad": lambda t, n: nn.Parameter(t, requires_grad=False),
}

# (kind, op) -> what a compile refuses, by the construct's name (the others behave as eager, errors included)
REFUSED = {
    **{(k, "is_leaf"): "Tensor.is_leaf of an input" for k in ("input_rg",)},
    **{(k, "grad"): "Tensor.grad inside" for k in ("input", "input_tagged", "input_rg", "computed_rg", "parameter")},
    **{(k, "data="): "assigning Tensor.data" for k in KINDS},
}


def program(kind: str, op: str):
    def fn(x, n):
        t = KINDS[kind][1](x)
        return t, OPS[op](t, n)

    return fn


def _norm(v):
    if isinstance(v, torch.Tensor):
        grad = None if not v.is_leaf or v.grad is None else v.grad.tolist()  # (a non-leaf's .grad warns)
        return (type(v).__name__, v.tolist(), v.requires_grad, v.is_leaf, v.grad_fn is None, grad)
    if isinstance(v, (tuple, list)):
        return tuple(_norm(x) for x in v)
    return (type(v).__name__, v)


def _state(x):
    return (x.requires_grad, None if x.grad is None else x.grad.tolist(), getattr(x, "tag", None))


def _run(fn, kind: str) -> list:
    out = []
    for size, n in CALLS:
        x = torch.arange(float(size)).requires_grad_(KINDS[kind][0])
        if kind in TAGGED:
            x.tag = n
        try:
            result = _norm(fn(x, n))
        except UnsupportedOpError as e:
            result = ("refused", e.op)
        except Exception as e:  # noqa: BLE001 - eager's exception type is the expectation
            result = ("raised", type(e).__name__)
        out.append((result, _state(x)))
    return out


@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")  # (eager's, on grad=None)
@pytest.mark.parametrize("dynamic", MODES, ids=lambda d: f"dynamic={d}")
@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("kind", list(KINDS))
def test_tensor_object_behaves_as_eager_or_is_refused_by_name(kind, op, dynamic):
    fn = program(kind, op)
    cfn = specengine.compile(fn, dynamic=dynamic)
    got = _run(cfn, kind)
    if (kind, op) in REFUSED:
        assert all(r[0] == "refused" and r[1].startswith(REFUSED[kind, op]) for r, _ in got), got
        assert specengine.cache_misses(cfn) == 0
        with pytest.raises(UnsupportedOpError, match=r"test_tensor_objects.py:\d+"):
            cfn(torch.ones(2).requires_grad_(KINDS[kind][0]), 1)
        return
    expected = _run(fn, kind)
    assert got == expected
    if any(r[0] == "raised" for r, _ in expected):
        assert specengine.cache_misses(cfn) == 0  # eager's error while tracing: no entry
    else:
        misses = (TAGGED_MISSES if kind in TAGGED and op in READS_TAG else PLAIN_MISSES)[dynamic]
        assert specengine.cache_misses(cfn) == misses
        assert specengine.cache_hits(cfn) == len(CALLS) - misses


def test_an_attribute_read_as_missing_is_checked_on_every_call():
    def f(x):
        return x * getattr(x, "scale", 2)

    cfn = specengine.compile(f, dynamic=True)
    torch.testing.assert_close(cfn(torch.ones(2)), torch.full((2,), 2.0))
    tagged = torch.ones(3)
    tagged.scale = 5
    torch.testing.assert_close(cfn(tagged), torch.full((3,), 5.0))  # the attribute appeared: a miss
    tagged.scale = [5]
    with pytest.raises(UnsupportedOpError, match=r"'scale' of an input tensor \(a list\).*test_tensor_objects.py:\d+"):
        cfn(tagged)  # no value semantics: refused while tracing
    assert (specengine.cache_hits(cfn), specengine.cache_misses(cfn)) == (0, 2)


def test_an_attribute_set_inside_is_set_on_every_call_and_read_back_symbolically():
    def f(x, n):
        x.meta = n + 1
        return x * x.meta

    cfn = specengine.compile(f, dynamic=True)
    for size, n in ((0, 1), (2, 4), (1, 7)):
        x = torch.ones(size)
        torch.testing.assert_close(cfn(x, n), torch.full((size,), n + 1.0))
        assert x.meta == n + 1
    assert (specengine.cache_hits(cfn), specengine.cache_misses(cfn)) == (2, 1)


def test_backward_inside_accumulates_into_a_modules_parameters_as_eager():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)

        def forward(self, x):
            loss = self.lin(x).pow(2).sum()
            loss.backward()
            return loss.detach()

    torch.manual_seed(0)
    eager, compiled = Model(), Model()
    compiled.load_state_dict(eager.state_dict())
    cfn = specengine.compile(compiled, dynamic=True)
    for rows in (1, 2, 0, 3):
        x = torch.randn(rows, 3)
        torch.testing.assert_close(cfn(x), eager(x))
        for p, q in zip(compiled.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    assert (specengine.cache_hits(cfn), specengine.cache_misses(cfn)) == (3, 1)


def test_second_order_gradients_through_autograd_grad():
    def f(x):
        (g,) = torch.autograd.grad(x.pow(3).sum(), x, create_graph=True)
        (h,) = torch.autograd.grad(g.sum(), x)
        return g, h

    cfn = specengine.compile(f, dynamic=True)
    for size in (0, 1, 2, 5):
        x = torch.randn(size, requires_grad=True)
        for a, b in zip(cfn(x), f(x)):
            torch.testing.assert_close(a, b)
    assert (specengine.cache_hits(cfn), specengine.cache_misses(cfn)) == (3, 1)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda x: torch.autograd.grad(x.sum(), x, allow_unused=True), r"torch.autograd.grad\(allow_unused=True\)"),
        (lambda x: torch.autograd.grad(x.sum(), x, is_grads_batched=True), r"is_grads_batched=True"),
        (lambda x: x.grad_fn, r"Tensor.grad_fn inside the compiled function"),
        (lambda x: setattr(x, "add", None), r"assigning Tensor.add"),
    ],
)
def test_refusals_name_the_construct_and_the_line(call, match):
    cfn = specengine.compile(call)
    with pytest.raises(UnsupportedOpError, match=match + r".*test_tensor_objects.py:\d+"):
        cfn(torch.ones(2, requires_grad=True))
    assert specengine.cache_misses(cfn) == 0


def test_non_scalar_implicit_gradient_is_eagers_error_for_that_size():
    def f(x):
        y = x * 2
        y.backward()
        return y.detach()

    cfn = specengine.compile(f, dynamic=True)
    torch.testing.assert_close(cfn(torch.ones(1, requires_grad=True)), torch.full((1,), 2.0))
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        cfn(torch.ones(2, requires_grad=True))


NOT_DIFFERENTIABLE = {
    "detach": lambda x: x.detach(),
    "torch.detach": lambda x: torch.detach(x),
    "data": lambda x: x.data,
    "full_like": lambda x: torch.full_like(x, 2.0),
    "rand_like": lambda x: torch.rand_like(x),
    "randn_like": lambda x: torch.randn_like(x),
    "zeros_like": lambda x: torch.zeros_like(x),
    "new_zeros": lambda x: x.new_zeros(3),
    "full_like(requires_grad=True)": lambda x: torch.full_like(x, 2.0, requires_grad=True),
    "randn_like(requires_grad=True)": lambda x: torch.randn_like(x, requires_grad=True),
    "clone": lambda x: x.clone(),
    "floor": lambda x: x.floor(),
}


@pytest.mark.parametrize("op", list(NOT_DIFFERENTIABLE))
def test_requires_grad_of_results_is_eagers(op):
    def f(x):
        y = NOT_DIFFERENTIABLE[op](x)
        return y.requires_grad, y.is_leaf, y.shape

    cfn = specengine.compile(f, dynamic=True)
    for size in (0, 1, 2):
        x = torch.ones(size, requires_grad=True)
        assert cfn(x) == f(x)
    if op in ("detach", "torch.detach", "data", "full_like", "zeros_like", "new_zeros", "floor"):
        assert (specengine.cache_hits(cfn), specengine.cache_misses(cfn)) == (2, 1)  # (others pin sizes themselves)


def test_assigning_a_read_only_tensor_attribute_is_eagers_attribute_error():
    def f(x):
        x.shape = (3,)
        return x

    with pytest.raises(AttributeError, match="not writable"):
        f(torch.ones(2))
    cfn = specengine.compile(f)
    with pytest.raises(AttributeError, match="not writable"):
        cfn(torch.ones(2))
    assert specengine.cache_misses(cfn) == 0
