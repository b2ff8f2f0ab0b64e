"""Probes: training flag, dropout, batchnorm, buffers, parameters replaced, optimizers."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from mod_harness import probe

SIZES = (3, 0, 1, 2, 5)


def bw(R, out, m=None):
    if out is not None and isinstance(out, torch.Tensor) and out.requires_grad:
        out.sum().backward()
    if m is not None:
        R.state(m)


class TrainBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        if self.training:
            return self.lin(x).relu() * 2
        return self.lin(x).tanh()


@probe
def train_eval_branch(C, R):
    m = TrainBranch()
    f = C(m)
    for i, n in enumerate(SIZES):
        m.train(i % 2 == 0)
        out = R(f, torch.randn(n, 4))
        bw(R, out, m)


class Drop(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(self.lin(x))


@probe
def dropout_train_eval(C, R):
    m = Drop()
    f = C(m)
    for i, n in enumerate((4, 0, 1, 2, 6, 3)):
        m.train(i % 3 != 1)
        torch.manual_seed(i)
        out = R(f, torch.randn(n, 4))
        bw(R, out, m)


class FDrop(nn.Module):
    def __init__(self, p=0.3):
        super().__init__()
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, training=self.training) + 1


@probe
def functional_dropout_p_attr(C, R):
    m = FDrop()
    f = C(m)
    for i, (n, p, tr) in enumerate(
        [(5, 0.3, True), (5, 0.0, True), (2, 0.3, False), (1, 0.9, True), (0, 1.0, True), (3, 1.0, True)]
    ):
        m.p = p
        m.train(tr)
        torch.manual_seed(10 + i)
        R(f, torch.randn(n, 3))


@probe
def dropout_rng_stream(C, R):
    torch.manual_seed(3)
    m = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.2))
    f = C(m)
    for n in (4, 4, 1, 2, 0, 7):
        R(f, torch.randn(n, 3))
    R.rec(torch.rand(3))  # rng state after calls


class BN(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.bn = nn.BatchNorm1d(3, **kw)

    def forward(self, x):
        return self.bn(x) * 2


@probe
def batchnorm_train_eval_stats(C, R):
    m = BN()
    f = C(m)
    for i, n in enumerate((4, 2, 5, 3, 2, 8)):
        m.train(i not in (2, 4))
        out = R(f, torch.randn(n, 3))
        bw(R, out, m)


@probe
def batchnorm_batch1_train_raises(C, R):
    m = BN()
    f = C(m)
    for n in (4, 1, 2, 1, 3):
        R(f, torch.randn(n, 3))
        R.state(m)
    m.eval()
    R(f, torch.randn(1, 3))


@probe
def batchnorm_momentum_none(C, R):
    m = BN(momentum=None)
    f = C(m)
    for n in (4, 2, 5, 3):
        R(f, torch.randn(n, 3))
        R.state(m)


@probe
def batchnorm_momentum_changed(C, R):
    m = BN()
    f = C(m)
    for n, mom in ((4, 0.1), (3, 0.5), (2, 0.1), (5, 0.9)):
        m.bn.momentum = mom
        R(f, torch.randn(n, 3))
        R.state(m)


@probe
def batchnorm_no_running_stats(C, R):
    m = BN(track_running_stats=False)
    f = C(m)
    for i, n in enumerate((4, 2, 5)):
        m.train(i != 1)
        R(f, torch.randn(n, 3))
        R.state(m)


@probe
def batchnorm2d_channels(C, R):
    m = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU())
    f = C(m)
    for i, (n, h) in enumerate(((2, 5), (1, 3), (3, 4), (2, 1))):
        m.train(i != 2)
        out = R(f, torch.randn(n, 2, h, h))
        bw(R, out, m)


@probe
def batchnorm_reset_running_stats(C, R):
    m = BN()
    f = C(m)
    R(f, torch.randn(4, 3))
    m.bn.reset_running_stats()
    R(f, torch.randn(4, 3))
    R.state(m)
    m.bn.num_batches_tracked.zero_()
    m.eval()
    R(f, torch.randn(2, 3))


@probe
def groupnorm_instancenorm(C, R):
    m = nn.Sequential(nn.GroupNorm(2, 4), nn.InstanceNorm1d(4, affine=True, track_running_stats=True))
    f = C(m)
    for i, (n, t) in enumerate(((2, 5), (1, 3), (3, 2), (2, 7))):
        m.train(i != 2)
        out = R(f, torch.randn(n, 4, t))
        bw(R, out, m)


# Buffers -----------------------------------------------------------------------------------------------------------


class RunningMean(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("running", torch.zeros(3))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.running.add_(x.mean(0))
        self.count += 1
        return x - self.running / self.count


@probe
def buffer_inplace_add_and_count(C, R):
    m = RunningMean()
    f = C(m)
    for n in (3, 1, 2, 5, 4):
        R(f, torch.randn(n, 3))
        R.state(m)


class EMA(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("ema", torch.zeros(2))

    def forward(self, x):
        if self.training:
            with torch.no_grad():
                self.ema.mul_(0.9).add_(x.detach().sum(0) * 0.1)
        return x * self.ema


@probe
def buffer_ema_train_only(C, R):
    m = EMA()
    f = C(m)
    for i, n in enumerate((3, 2, 0, 1, 4)):
        m.train(i != 2)
        R(f, torch.randn(n, 2, requires_grad=True))
        R.state(m)


class IntCounter(nn.Module):
    def __init__(self):
        super().__init__()
        self.steps = 0

    def forward(self, x):
        self.steps += 1
        if self.steps % 2 == 0:
            return x * self.steps
        return x - self.steps


@probe
def int_attribute_counter_branch(C, R):
    m = IntCounter()
    f = C(m)
    for n in (2, 3, 0, 1, 2, 5):
        R(f, torch.randn(n))
        R.state(m)


class Ring(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(4))
        self.ptr = 0

    def forward(self, x):
        self.buf[self.ptr] = x.sum()
        self.ptr = (self.ptr + 1) % 4
        return self.buf.clone()


@probe
def ring_buffer_index_attr(C, R):
    m = Ring()
    f = C(m)
    for n in (3, 1, 2, 0, 4, 2):
        R(f, torch.randn(n))
        R.state(m)


class BufRebind(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("total", torch.zeros(()))

    def forward(self, x):
        self.total = self.total + x.sum()
        return x * 2


@probe
def buffer_rebound_out_of_place(C, R):
    m = BufRebind()
    f = C(m)
    for n in (3, 1, 0, 2):
        R(f, torch.randn(n))
        R.state(m)


class UseBuf(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.ones(3))
        self.plain = torch.full((3,), 2.0)

    def forward(self, x):
        return x * self.scale + self.plain


@probe
def buffer_and_plain_tensor_replaced(C, R):
    m = UseBuf()
    f = C(m)
    R(f, torch.randn(2, 3))
    m.scale = torch.full((3,), 5.0)
    R(f, torch.randn(2, 3))
    m.plain = torch.full((1,), -1.0)
    R(f, torch.randn(1, 3))
    m.plain.fill_(7.0)
    R(f, torch.randn(0, 3))
    m.scale = torch.ones(4)
    R(f, torch.randn(2, 3))
    R(f, torch.randn(2, 4))
    m.register_buffer("scale", torch.ones(3, dtype=torch.float64))
    R(f, torch.randn(2, 3))


class NonPersist(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.tril(torch.ones(4, 4)), persistent=False)

    def forward(self, x):
        t = x.shape[-1]
        return x.masked_fill(self.mask[:t, :t] == 0, float("-inf")).softmax(-1)


@probe
def nonpersistent_mask_buffer_slice(C, R):
    m = NonPersist()
    f = C(m)
    for t in (3, 1, 4, 2, 0):
        R(f, torch.randn(2, t, t))
    m.mask = torch.ones(4, 4)
    R(f, torch.randn(2, 3, 3))


# Parameters replaced between calls ----------------------------------------------------------------------------------


@probe
def param_replaced_same_shape(C, R):
    m = nn.Linear(3, 2)
    f = C(m)
    out = R(f, torch.randn(4, 3))
    bw(R, out, m)
    m.weight = nn.Parameter(torch.ones(2, 3))
    out = R(f, torch.randn(1, 3))
    bw(R, out, m)
    m.bias = nn.Parameter(torch.zeros(2), requires_grad=False)
    out = R(f, torch.randn(2, 3))
    bw(R, out, m)


@probe
def param_replaced_other_shape(C, R):
    m = nn.Linear(3, 2)
    f = C(m)
    R(f, torch.randn(4, 3))
    m.weight = nn.Parameter(torch.ones(5, 3))
    m.bias = nn.Parameter(torch.zeros(5))
    R(f, torch.randn(2, 3))
    R(f, torch.randn(0, 3))


@probe
def load_state_dict_between_calls(C, R):
    m = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
    f = C(m)
    x = torch.randn(5, 3)
    R(f, x)
    sd = {k: torch.randn_like(v) for k, v in m.state_dict().items()}
    m.load_state_dict(sd)
    R(f, x)
    R(f, torch.randn(1, 3))
    m.load_state_dict(sd, assign=True)
    out = R(f, x)
    bw(R, out, m)


@probe
def param_data_assigned(C, R):
    m = nn.Linear(3, 2)
    f = C(m)
    x = torch.randn(4, 3)
    R(f, x)
    m.weight.data = torch.full((2, 3), 0.5)
    R(f, x)
    m.weight.data = torch.full((4, 3), 0.5)
    m.bias.data = torch.zeros(4)
    R(f, x)
    R(f, torch.randn(2, 3))


@probe
def requires_grad_toggled(C, R):
    m = nn.Linear(3, 2)
    f = C(m)
    for i, n in enumerate((4, 1, 2, 0, 3)):
        m.weight.requires_grad_(i % 2 == 0)
        m.zero_grad()
        out = R(f, torch.randn(n, 3))
        if out is not None:
            R.rec(out.requires_grad)
            if out.requires_grad:
                out.sum().backward()
        R.state(m)


@probe
def all_params_frozen_then_unfrozen(C, R):
    m = nn.Linear(3, 2)
    for p in m.parameters():
        p.requires_grad_(False)
    f = C(m)
    out = R(f, torch.randn(2, 3))
    R.rec(out.requires_grad)
    for p in m.parameters():
        p.requires_grad_(True)
    out = R(f, torch.randn(2, 3))
    R.rec(out.requires_grad)
    out.sum().backward()
    R.state(m)


@probe
def manual_sgd_no_grad(C, R):
    m = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))
    f = C(m)
    x, y = torch.randn(16, 3), torch.randn(16, 1)
    for _step in range(5):
        loss = R(f, x)
        loss = ((loss - y) ** 2).mean()
        m.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in m.parameters():
                p -= 0.1 * p.grad
        R.rec(loss)
    R.state(m)


@probe
def optimizer_sgd_momentum_loop(C, R):
    m = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.1), nn.Linear(8, 2))
    f = C(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
    for step in range(6):
        n = (8, 8, 1, 3, 8, 2)[step]
        x, y = torch.randn(n, 4), torch.randint(0, 2, (n,))
        opt.zero_grad()
        loss = F.cross_entropy(R(f, x), y)
        loss.backward()
        opt.step()
        R.rec(loss)
    R.state(m)


@probe
def optimizer_adamw_eval_interleaved(C, R):
    m = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.GELU(), nn.Linear(8, 1))
    f = C(m)
    opt = torch.optim.AdamW(m.parameters(), lr=0.01)
    for step in range(5):
        m.train()
        x = torch.randn(6, 4)
        loss = R(f, x).pow(2).mean()
        opt.zero_grad(set_to_none=step % 2 == 0)
        loss.backward()
        opt.step()
        m.eval()
        with torch.no_grad():
            R(f, torch.randn(2, 4))
    R.state(m)


@probe
def model_dtype_changed(C, R):
    m = nn.Linear(3, 2)
    f = C(m)
    R(f, torch.randn(2, 3))
    m.double()
    R(f, torch.randn(2, 3, dtype=torch.float64))
    R(f, torch.randn(2, 3))  # float input into double model: eager raises
    m.to(torch.bfloat16)
    R(f, torch.randn(2, 3, dtype=torch.bfloat16))


@probe
def bias_set_to_none(C, R):
    m = nn.Linear(3, 2)
    f = C(m)
    R(f, torch.randn(2, 3))
    m.bias = None
    R(f, torch.randn(2, 3))
    m.bias = nn.Parameter(torch.ones(2))
    R(f, torch.randn(1, 3))


class GradAccum(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3))

    def forward(self, x):
        return (x * self.w).sum()


@probe
def grad_accumulation_over_calls(C, R):
    m = GradAccum()
    f = C(m)
    for n in (2, 1, 0, 4):
        out = R(f, torch.randn(n, 3))
        out.backward()
        R.state(m)
    with torch.no_grad():
        m.w.zero_()
    out = R(f, torch.randn(2, 3))
    R.state(m)
