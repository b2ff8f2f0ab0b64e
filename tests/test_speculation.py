"""Branches on tensor data, taken by speculation (ir/speculation.py): each side is an entry, asserted at run time.

Generated: conditions on data (`.item()` compared, a tensor's truth value, `any()`/`all()`, an int count of data)
x what ran before the branch (nothing, a pure op, a write to a tensor made inside, dropout in eval mode) x the three
dynamic modes. Every call sequence shows each size both sides, in both orders, so an entry compiled for one side is
offered data of the other: outputs equal eager's over sizes 2, 0, 1, 3, and every shape class costs exactly two
compiles (one per side) however its calls alternate. (A first call that takes the other side compiles both: the
hand-written cases below.) What makes speculation impossible (an input written, a random
draw, a print before the branch) is refused by name, leaving the cache and the inputs as they were.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F
from helpers import counts

import specengine
from specengine.errors import UnsupportedOpError

MODES = (True, None, False)
CONDITIONS = {
    "item_gt": "t.sum().item() > 0",
    "tensor_gt": "t.sum() > 0",
    "any_item": "(t > 0).any().item()",
    "any_bool": "(t > 0).any()",
    "all_bool": "(t > -1).all()",
    "not_any": "not (t < -0.75).any()",  # (inverted: `any()` is what is speculated on; see _side)
    "count_item": "(t > 0).sum().item() >= 2",
}
BEFORE = {
    "nothing": "",
    "pure": "    x = x * 2\n",
    "fresh_write": "    y = x.clone()\n    y[0:1] = 0\n    x = y\n",
    "dropout_eval": "    x = F.dropout(x, 0.5, training=False)\n",
}
REFUSED = {
    "input_write": ("    x.add_(1)\n", "add_"),
    "random": ("    x = x + torch.rand_like(x)\n", "rand_like"),
    "print": ("    print('n', x.shape[0])\n", "print"),
}
SIDES = {True: torch.tensor([1.0, 2.0, -0.5]), False: torch.tensor([-1.0, -2.0, 0.0])}  # count_item: 2 vs 0 > 0
# each size's first call takes the side speculated by default (False), so every compile is a call's only one
CALLS = [(2, False), (2, True), (0, False), (0, True), (1, False), (1, True), (3, False), (3, True), (2, True),
         (2, False), (1, True), (3, False)]  # fmt: skip


def _program(condition: str, before: str):
    src = f"def f(x, t):\n{before}    if {condition}:\n        return x + 1\n    return x - 1\n"
    glb = {"torch": torch, "F": F}
    exec(compile(src, f"<gen {condition} | {before.strip()}>", "exec"), glb)
    return glb["f"]


def _classes(dynamic) -> int:
    """Entries a program without the branch needs over CALLS' sizes."""
    cf = specengine.compile(lambda x, t: x + 1, dynamic=dynamic)
    for n, side in CALLS:
        cf(torch.randn(n, 2), SIDES[side])
    return specengine.cache_misses(cf)


def _side(condition: str, side: bool) -> torch.Tensor:
    """Data for a side, where the speculated value is `side` (a `not` inverts what the branch reads)."""
    return SIDES[side != condition.startswith("not ")]


def _run(f, dynamic, condition: str):
    cf = specengine.compile(f, dynamic=dynamic)
    for n, side in CALLS:
        x, t = torch.randn(n, 2), _side(condition, side)
        torch.testing.assert_close(cf(x, t), f(x, t))
    return cf


CASES = list(itertools.product(CONDITIONS, BEFORE))


@pytest.mark.parametrize("dynamic", MODES, ids=lambda d: f"dynamic={d}")
@pytest.mark.parametrize("condition, before", CASES, ids=["-".join(c) for c in CASES])
def test_each_side_is_one_entry(condition, before, dynamic):
    cf = _run(_program(CONDITIONS[condition], BEFORE[before]), dynamic, CONDITIONS[condition])
    misses = 2 * _classes(dynamic)
    assert counts(cf) == (misses, len(CALLS) - misses), specengine.recompile_reasons(cf)


@pytest.mark.parametrize("before", REFUSED)
def test_refused_where_the_work_before_is_not_repeatable(before):
    code, op = REFUSED[before]
    f = _program(CONDITIONS["any_item"], code)
    cf = specengine.compile(f, dynamic=True)
    x = torch.ones(2, 2)
    with pytest.raises(UnsupportedOpError, match=rf"branch on data-dependent u0.*speculation: `{op}"):
        cf(x, SIDES[True])
    assert counts(cf) == (0, 0)
    torch.testing.assert_close(x, torch.ones(2, 2))  # the input write did not happen


def test_two_branches_four_entries_in_any_order():
    def f(x, a, b):
        y = x * 2
        if a.any():
            y = y + 1
        if b.sum().item() > 0:
            y = y * 3
        return y

    cf = specengine.compile(f, dynamic=True)
    pos, neg = torch.tensor([1.0]), torch.tensor([-1.0])
    sides = [(pos, pos), (neg, neg), (pos, neg), (neg, pos), (pos, pos), (neg, pos), (neg, neg), (pos, neg)]
    for n, (a, b) in zip(itertools.cycle((2, 0, 1, 3)), sides):
        x = torch.randn(n)
        torch.testing.assert_close(cf(x, a > 0, b), f(x, a > 0, b))
    assert specengine.cache_misses(cf) == 4
    assert specengine.cache_hits(cf) == len(sides) - 2  # calls 1 (three entries) and 4 (one) compiled


def test_a_module_branching_on_its_mask():
    class Masked(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)

        def forward(self, x, mask):
            h = self.lin(x)
            if mask.any():  # (as Longformer's `is_index_global_attn.flatten().any().item()`)
                h = h.masked_fill(mask[..., None], 0.0)
            return h.relu()

    m = Masked().eval()
    cm = specengine.compile(m, dynamic=True)
    for b, t, hot in [(2, 5, False), (2, 5, True), (1, 3, True), (3, 1, False), (2, 2, True)]:
        x, mask = torch.randn(b, t, 3), torch.zeros(b, t, dtype=torch.bool)
        if hot:
            mask[0, 0] = True
        torch.testing.assert_close(cm(x, mask), m(x, mask))
    assert counts(cm) == (2, 3)


def test_the_failed_side_writes_nothing_the_caller_sees():
    def f(x, t):
        y = x.clone()
        y.mul_(10)  # a write to a tensor made inside: repeatable
        if t.any():
            return y + x
        return y - x

    cf = specengine.compile(f, dynamic=True)
    x = torch.ones(3)
    for side in (True, False, True):
        t = torch.tensor([side])
        torch.testing.assert_close(cf(x, t), f(x, t))
    torch.testing.assert_close(x, torch.ones(3))
    assert counts(cf) == (2, 2)  # the first call compiled both sides


def test_entries_name_the_side_they_took():
    cf = specengine.compile(lambda x, t: x + 1 if t.any() else x - 1, dynamic=True)
    cf(torch.ones(2), torch.tensor([True]))
    sources = [str(e.traces[-1]) for e in cf._entries]
    assert any("check_speculation(u0 != 0" in s and "True" in s for s in sources), sources
    assert any("check_speculation(u0 == 0" in s for s in sources), sources


def test_a_side_that_raises_is_traced_the_other_way_and_raises_as_eager_when_taken():
    def f(x, t):
        assert (t > 0).any(), "no positive value"  # the default side (False) raises while tracing
        return x * 2

    cf = specengine.compile(f, dynamic=True)
    x = torch.randn(3)
    torch.testing.assert_close(cf(x, SIDES[True]), x * 2)
    assert counts(cf) == (1, 0)  # one entry: the raising side has none
    with pytest.raises(AssertionError, match="no positive value"):
        f(x, SIDES[False])
    with pytest.raises(AssertionError, match="no positive value"):
        cf(x, SIDES[False])
    torch.testing.assert_close(cf(torch.randn(0), SIDES[True]), torch.randn(0))
    assert specengine.cache_hits(cf) == 1


def test_an_index_write_into_a_tensor_made_inside_is_repeatable():
    def f(x, idx, t):
        y = x.new_zeros(x.shape)
        y[idx] = x[idx]  # the generic path's __setitem__ (index_put_): writes only `y`
        if (t > 0).any():
            return y + 1
        return y - 1

    cf = specengine.compile(f, dynamic=True)
    for n, side in [(4, False), (4, True), (2, True), (3, False)]:
        x, idx = torch.randn(n), torch.tensor([0, n - 1])
        torch.testing.assert_close(cf(x, idx, SIDES[side]), f(x, idx, SIDES[side]))
    assert counts(cf) == (2, 2)


def test_gradients_flow_through_the_side_taken():
    def f(w, x, t):
        h = x @ w
        if (t > 0).any():  # the side that misspeculates leaves only an unused autograd graph behind
            return (h * 2).sum()
        return (h - 1).pow(2).sum()

    cf = specengine.compile(f, dynamic=True)
    for n, side in [(3, True), (2, False), (4, True), (1, False)]:
        w = torch.randn(2, 2, requires_grad=True)
        x = torch.randn(n, 2)
        (g_eager,) = torch.autograd.grad(f(w, x, SIDES[side]), w)
        (g_spec,) = torch.autograd.grad(cf(w, x, SIDES[side]), w)
        torch.testing.assert_close(g_spec, g_eager)
    assert counts(cf) == (2, 3)  # (the first call, side True, compiled both)


INPLACE = {  # in-place ops, hand-written rules and the generic path, some of them not idempotent
    "add_": lambda y: y.add_(1),
    "mul_view": lambda y: y[:1].mul_(3),
    "index_add_": lambda y: y.index_add_(0, torch.tensor([0]), torch.tensor([5.0])),
    "scatter_add_": lambda y: y.scatter_add_(0, torch.tensor([0]), torch.tensor([5.0])),
    "index_put_acc": lambda y: y.index_put_((torch.tensor([0]),), torch.tensor(5.0), accumulate=True),
    "index_fill_": lambda y: y.index_fill_(0, torch.tensor([0]), 5.0),
    "setitem": lambda y: y.__setitem__(0, y[0] + 5),
    "setitem_index": lambda y: y.__setitem__(torch.tensor([0]), y[0] + 5),
    "masked_fill_": lambda y: y.masked_fill_(y > 0, 7.0),
    "clamp_": lambda y: y.clamp_(max=0.5),
    "copy_": lambda y: y.copy_(y * 2),
    "zero_": lambda y: y.zero_(),
}
TARGETS = {"input": lambda x: x, "view_of_input": lambda x: x[1:], "made_inside": lambda x: x.clone()}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("op", INPLACE)
def test_in_place_ops_before_a_data_branch_never_run_twice(op, target):
    """Speculation re-runs the work before a branch when the data takes the other side: an in-place op on an input
    (or a view of one) there must be refused, never applied twice; one on a tensor made inside is repeatable."""

    def f(x, t):
        y = TARGETS[target](x)
        INPLACE[op](y)
        if (t > 0).any():
            return y.sum() + x
        return y.sum() - x

    cf = specengine.compile(f, dynamic=True)
    for side in (True, False, True):
        xa, xb = torch.ones(3), torch.ones(3)
        want = f(xb, SIDES[side])
        if target == "made_inside":
            torch.testing.assert_close(cf(xa, SIDES[side]), want)
            torch.testing.assert_close(xa, xb)
            continue
        with pytest.raises(UnsupportedOpError, match="cannot be taken by speculation"):
            cf(xa, SIDES[side])
        torch.testing.assert_close(xa, torch.ones(3))  # the refused compile wrote nothing
    assert counts(cf) == ((2, 2) if target == "made_inside" else (0, 0))
