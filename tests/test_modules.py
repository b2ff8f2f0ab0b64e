"""nn.Module: parameters and buffers are inputs, plain attributes and train/eval are guarded."""

from __future__ import annotations

import torch
import torch.nn as nn
from helpers import counts

import specengine


class Dense(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n_out, n_in) * 0.3)
        self.bias = nn.Parameter(torch.randn(n_out) * 0.1)

    def forward(self, x):
        return x @ self.weight.T + self.bias


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = Dense(4, 8)
        self.proj = Dense(8, 4)
        self.scale = 2
        self.register_buffer("shift", torch.zeros(4))

    def forward(self, x):
        h = self.fc(x).relu() if self.training else self.fc(x).tanh()
        return self.proj(h) * self.scale + self.shift


def check(cfn, model, x):
    out = cfn(x)
    torch.testing.assert_close(out, model(x))
    return out


def test_parameters_and_buffers_are_inputs_not_constants():
    model = MLP()
    cfn = specengine.compile(model, dynamic=True)
    for n in (0, 1, 2, 5):
        check(cfn, model, torch.randn(n, 4))
    assert counts(cfn) == (1, 3)
    x = torch.randn(3, 4)
    before = check(cfn, model, x)
    with torch.no_grad():
        model.fc.weight.add_(1)
        model.shift.fill_(0.5)
    after = check(cfn, model, x)
    assert not torch.allclose(before, after)
    assert counts(cfn) == (1, 5)
    final = str(specengine.last_traces(cfn)[-1])
    assert "def computation(x, self_fc_weight, self_fc_bias, self_proj_weight, self_proj_bias, self_shift)" in final


def test_parameter_shapes_are_static():
    model = MLP()
    cfn = specengine.compile(model, dynamic=True)
    check(cfn, model, torch.randn(3, 4))
    texts = [str(g) for g in specengine.last_guards(cfn)]
    assert "self.fc.weight.shape[0] == 8" in texts and "x.shape[1] == 4" in texts
    assert not any("x.shape[0]" in t for t in texts)


def test_train_eval_flag_and_plain_attributes_are_guarded():
    model = MLP()
    cfn = specengine.compile(model, dynamic=True)
    x = torch.randn(3, 4)
    check(cfn, model, x)
    model.eval()
    check(cfn, model, x)
    model.scale = 3
    check(cfn, model, x)
    model.train()
    model.scale = 2
    check(cfn, model, x)
    assert counts(cfn) == (3, 1)
    reasons = specengine.recompile_reasons(cfn)
    assert reasons[0] == "self.training is True failed: self.training = False"
    assert "self.scale == 2 failed: self.scale = 3" in reasons[1]


def test_backward_and_optimizer_step_match_eager():
    torch.manual_seed(0)
    model, ref = MLP(), MLP()
    ref.load_state_dict(model.state_dict())
    cfn = specengine.compile(model, dynamic=True)
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, ref))
    for n in (3, 5, 3):
        x = torch.randn(n, 4)
        loss, ref_loss = (cfn(x) ** 2).mean(), (ref(x) ** 2).mean()
        torch.testing.assert_close(loss, ref_loss)
        loss.backward()
        ref_loss.backward()
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
        opt.step(), ref_opt.step(), opt.zero_grad(), ref_opt.zero_grad()
    assert counts(cfn) == (1, 2)


def test_tied_weights_and_numeric_submodule_names():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.Sequential(Dense(4, 4), Dense(4, 4))
            self.layers[1].weight = self.layers[0].weight

        def forward(self, x):
            return self.layers(x)

    model = Tied()
    cfn = specengine.compile(model, dynamic=True)
    for n in (1, 3):
        check(cfn, model, torch.randn(n, 4))
    assert counts(cfn) == (1, 1)
    prologue = str(specengine.last_prologue(cfn))
    # the modules' tables are read directly (one subscript, not __getattr__); tied: one input
    assert prologue.count("['weight']") == 1 and ".weight" not in prologue
    assert "self.layers._modules['0'].weight.shape[0] == 4" in [str(g) for g in specengine.last_guards(cfn)]
    with torch.no_grad():
        model.layers[0].weight.mul_(2)
    check(cfn, model, torch.randn(2, 4))
    assert counts(cfn) == (1, 2)
