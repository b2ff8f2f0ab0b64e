"""`specengine.compile(module)` returns an nn.Module that stands for the original: its parameters, buffers,
state_dict keys, modes, dtype, hooks and attributes (the distributed wrappers rely on them: tests/test_distributed.py)."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
from helpers import counts

import specengine


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(3, 4)
        self.norm = nn.BatchNorm1d(4)
        self.drop = nn.Dropout(0.5)
        self.register_buffer("offset", torch.ones(4))
        self.register_buffer("scratch", torch.zeros(1), persistent=False)
        self.scale = 2.0

    def forward(self, x):
        return self.drop(self.norm(self.lin(x))) * self.scale + self.offset


def test_a_compiled_module_is_a_module_with_the_originals_state():
    net = Net()
    cm = specengine.compile(net, dynamic=True)
    assert isinstance(cm, nn.Module) and isinstance(cm, specengine.CompiledModule)
    assert [n for n, _ in cm.named_parameters()] == [n for n, _ in net.named_parameters()]
    assert all(a is b for a, b in zip(cm.parameters(), net.parameters()))
    assert [n for n, _ in cm.named_buffers()] == [n for n, _ in net.named_buffers()]
    assert list(cm.state_dict()) == list(net.state_dict())  # no prefix, non-persistent buffers left out
    assert cm.lin is net.lin and cm.scale == 2.0 and cm.offset is net.offset
    assert cm.compiled_target is net and "lin" in dir(cm)
    assert [n for n, _ in cm.named_children()] == ["lin", "norm", "drop"]


def test_load_state_dict_reaches_the_original_and_the_compiled_entry():
    net, other = Net(), Net()
    with torch.no_grad():
        for p in other.parameters():
            p.add_(1.0)
    cm = specengine.compile(net, dynamic=True)
    cm.eval(), other.eval()
    x = torch.randn(5, 3)
    cm(x)
    cm.load_state_dict(other.state_dict())
    torch.testing.assert_close(net.lin.weight, other.lin.weight)
    torch.testing.assert_close(cm(x), other(x))
    with pytest.raises(RuntimeError, match="Missing key"):
        cm.load_state_dict({"_orig_mod.lin.weight": other.lin.weight})
    assert counts(cm) == (1, 1)


def test_train_and_eval_reach_the_original():
    net = Net()
    cm = specengine.compile(net, dynamic=True)
    assert cm.eval() is cm
    assert not net.training and not net.drop.training and not cm.training
    x = torch.randn(4, 3)
    torch.testing.assert_close(cm(x), net(x))
    cm.train()
    assert net.training and net.norm.training
    torch.manual_seed(1)
    out = cm(x)
    torch.manual_seed(1)
    torch.testing.assert_close(out, net(x))
    assert counts(cm) == (2, 0)  # the modes are guarded: one entry each


def test_to_converts_the_originals_tensors():
    net = Net().eval()
    cm = specengine.compile(net, dynamic=True)
    assert cm.to(torch.float64) is cm
    assert net.lin.weight.dtype == torch.float64 and net.offset.dtype == torch.float64
    x = torch.randn(3, 3, dtype=torch.float64)
    torch.testing.assert_close(cm(x), net(x))
    cm.zero_grad()
    cm.requires_grad_(False)
    assert not net.lin.weight.requires_grad


def test_hooks_on_the_compiled_module_run_eagerly_on_every_call():
    net = Net().eval()
    cm = specengine.compile(net, dynamic=True)
    seen = []
    cm.register_forward_pre_hook(lambda m, args: (args[0] * 0 + 1,))
    cm.register_forward_hook(lambda m, args, out: seen.append(out.shape[0]))
    for n in (2, 0, 1, 2):
        torch.testing.assert_close(cm(torch.randn(n, 3)), net(torch.ones(n, 3)))
    assert seen == [2, 0, 1, 2] and counts(cm) == (2, 2)  # batch_norm of 0 rows is its own entry


def test_attributes_written_through_the_compiled_module_are_the_originals():
    net = Net().eval()
    cm = specengine.compile(net, dynamic=True)
    x = torch.randn(2, 3)
    cm(x)
    cm.scale = 3.0  # the original's attribute: the entry's guard on it fails
    assert net.scale == 3.0 and "scale" not in vars(cm)
    torch.testing.assert_close(cm(x), net(x))
    cm.extra = nn.Linear(1, 1)  # a new submodule lands in the shared table
    assert net.extra is cm.extra
    assert counts(cm) == (2, 0)


def test_the_original_module_stays_eager_and_the_counters_accept_the_compiled_one():
    net = Net().eval()
    cm = specengine.compile(net, dynamic=True)
    x = torch.randn(2, 3)
    cm(x), net(x), net(x), cm(x)
    assert specengine.cache_misses(cm) == 1 and specengine.cache_hits(cm) == 1
    assert len(specengine.cache_entries(cm)) == 1 and specengine.last_guards(cm) is not None
    assert "1 misses, 1 hits" in specengine.explain(cm)
    specengine.reset(cm)
    assert counts(cm) == (0, 0)
    again = specengine.compile(cm, dynamic=False)  # compiled again: from the original
    assert again.compiled_target is net
    again(x)
    assert counts(again) == (1, 0) and counts(cm) == (0, 0)


def test_a_compiled_submodule_inside_a_compiled_model():
    net = Net().eval()
    outer = nn.Sequential(nn.Linear(3, 3), net)
    outer[1] = specengine.compile(net, dynamic=True)
    cfn = specengine.compile(outer, dynamic=True)
    assert list(outer.state_dict()) == ["0.weight", "0.bias"] + [f"1.{k}" for k in net.state_dict()]
    for n in (2, 0, 1):
        x = torch.randn(n, 3)
        torch.testing.assert_close(cfn(x), net(outer[0](x)))
    with torch.no_grad():
        net.lin.weight.fill_(0.5)
    torch.testing.assert_close(cfn(torch.ones(2, 3)), net(outer[0](torch.ones(2, 3))))
    assert counts(cfn) == (2, 2) and counts(outer[1]) == (0, 0)  # (0 rows: batch_norm's own entry)


def test_deepcopy_copies_one_module():
    net = Net().eval()
    cm = specengine.compile(net, dynamic=True)
    twin = copy.deepcopy(cm)
    with torch.no_grad():
        twin.lin.weight.fill_(0.0)
    assert twin.lin.weight is not net.lin.weight and net.lin.weight.abs().sum() > 0
    assert all(a is b for a, b in zip(twin.parameters(), twin.compiled_target.parameters()))


def test_a_failed_compile_of_a_module_leaves_it_unchanged():
    class Bad(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, x):
            return self.lin(x).tolist() and torch.ops.aten.nonexistent_op_for_test(x)

    bad = Bad()
    cm = specengine.compile(bad, dynamic=True)
    weight = bad.lin.weight
    with pytest.raises(Exception):  # noqa: B017 - whatever the refusal, nothing is left behind
        cm(torch.ones(2, 2))
    assert bad.lin.weight is weight and type(weight) is nn.Parameter and counts(cm) == (0, 0)


@pytest.mark.parametrize("own_hook", [False, True])
def test_global_module_hooks_run_once_per_module_call(own_hook):
    net = Net().eval()
    cm = specengine.compile(net, dynamic=True)
    if own_hook:
        cm.register_forward_hook(lambda m, args, out: out + 1)
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, args, out: out * 2)
    try:
        x = torch.randn(2, 3)
        for _ in range(2):
            expected = net(x) + 1 if own_hook else net(x)
            torch.testing.assert_close(cm(x), expected)
    finally:
        handle.remove()
    assert counts(cm) == (1, 1)
