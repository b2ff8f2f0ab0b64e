"""Probes: grad modes, rng, default dtype, inputs mutated/aliased/returned, structured I/O, methods, nn layers."""

import dataclasses
from typing import NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mod_harness import probe


def bw(R, out, m=None):
    if isinstance(out, torch.Tensor) and out.requires_grad:
        out.sum().backward()
    if m is not None:
        R.state(m)


class PartNoGrad(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.b = nn.Linear(3, 3)

    def forward(self, x):
        with torch.no_grad():
            h = self.a(x)
        return self.b(h).relu()


@probe
def no_grad_block_in_forward(C, R):
    m = PartNoGrad()
    f = C(m)
    for n in (2, 1, 0, 3):
        m.zero_grad()
        out = R(f, torch.randn(n, 3))
        R.rec(out.requires_grad)
        bw(R, out, m)


@probe
def call_under_no_grad_then_grad(C, R):
    m = nn.Linear(3, 2)
    f = C(m)
    with torch.no_grad():
        out = R(f, torch.randn(2, 3))
    R.rec(out.requires_grad)
    out = R(f, torch.randn(2, 3))
    R.rec(out.requires_grad)
    bw(R, out, m)
    with torch.inference_mode():
        out = R(f, torch.randn(2, 3))
    R.rec(out.requires_grad, out.is_inference())
    out = R(f, torch.randn(1, 3))
    bw(R, out, m)
    with torch.set_grad_enabled(False):
        out = R(f, torch.randn(1, 3))
    R.rec(out.requires_grad)


class EnableGrad(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3))

    def forward(self, x):
        with torch.enable_grad():
            y = (x * self.w).sum()
        return y * 2


@probe
def enable_grad_inside_called_under_no_grad(C, R):
    m = EnableGrad()
    f = C(m)
    with torch.no_grad():
        out = R(f, torch.randn(3))
    R.rec(out.requires_grad)
    out = R(f, torch.randn(3))
    R.rec(out.requires_grad)


class SetGradTraining(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        with torch.set_grad_enabled(self.training):
            return self.lin(x)


@probe
def set_grad_enabled_by_training(C, R):
    m = SetGradTraining()
    f = C(m)
    for tr in (True, False, True):
        m.train(tr)
        out = R(f, torch.randn(2, 3))
        R.rec(out.requires_grad)


class Autocast(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = self.lin(x)
            a = h @ h.T
        return a.float().softmax(-1), h.dtype


@probe
def autocast_inside_forward(C, R):
    m = Autocast()
    f = C(m)
    for n in (2, 1, 3):
        out = R(f, torch.randn(n, 4))
        bw(R, out[0], m)


@probe
def autocast_around_call(C, R):
    m = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    f = C(m)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        R(f, torch.randn(3, 4))
    R(f, torch.randn(3, 4))
    with torch.autocast("cpu", dtype=torch.float16):
        R(f, torch.randn(3, 4))
    with torch.autocast("cpu", enabled=False):
        R(f, torch.randn(3, 4))


@probe
def input_requires_grad_changes(C, R):
    def g(x, w):
        return (x * w).sum()

    f = C(g)
    for rx, rw in ((False, False), (True, False), (False, True), (True, True), (False, False)):
        x = torch.randn(3, requires_grad=rx)
        w = torch.randn(3, requires_grad=rw)
        out = R(f, x, w)
        R.rec(out.requires_grad)
        if out.requires_grad:
            out.backward()
        R.rec(x.grad, w.grad)


@probe
def detach_and_requires_grad_inside(C, R):
    def g(x):
        y = x.detach() * 2
        return y, x * 3

    f = C(g)
    for rg in (True, False, True):
        x = torch.randn(2, requires_grad=rg)
        a, b = R(f, x)
        R.rec(a.requires_grad, b.requires_grad)


# RNG / dtype ---------------------------------------------------------------------------------------------------------


class Noise(nn.Module):
    def forward(self, x):
        return x + torch.rand(x.shape[0], 2) + torch.randn_like(x) * 0.1 + torch.bernoulli(torch.full_like(x, 0.5))


@probe
def random_ops_in_forward(C, R):
    m = Noise()
    f = C(m)
    torch.manual_seed(5)
    for n in (3, 1, 0, 2, 3):
        R(f, torch.zeros(n, 2))
    R.rec(torch.rand(2))


@probe
def manual_seed_inside_forward(C, R):
    def g(x, seed):
        torch.manual_seed(seed)
        return F.dropout(x, 0.5)

    f = C(g)
    for s, n in ((0, 4), (1, 4), (0, 2), (3, 0)):
        R(f, torch.ones(n), s)
    R.rec(torch.rand(2))


@probe
def default_dtype_changed_between_calls(C, R):
    def g(x):
        return x.sum() + torch.zeros(x.shape[0]).sum() + torch.tensor(1.5), torch.arange(3.0).dtype

    f = C(g)
    R(f, torch.randn(2))
    torch.set_default_dtype(torch.float64)
    try:
        R(f, torch.randn(2))
        R(f, torch.randn(3))
    finally:
        torch.set_default_dtype(torch.float32)
    R(f, torch.randn(1))


@probe
def default_dtype_module_factory(C, R):
    class M(nn.Module):
        def forward(self, x):
            return torch.ones(x.shape) * x, torch.get_default_dtype()

    f = C(M())
    R(f, torch.randn(2))
    torch.set_default_dtype(torch.float64)
    try:
        R(f, torch.randn(2, dtype=torch.float64))
    finally:
        torch.set_default_dtype(torch.float32)


@probe
def deterministic_flag_read(C, R):
    def g(x):
        if torch.are_deterministic_algorithms_enabled():
            return x.sum()
        return x * 2

    f = C(g)
    R(f, torch.randn(2))
    torch.use_deterministic_algorithms(True)
    try:
        R(f, torch.randn(2))
    finally:
        torch.use_deterministic_algorithms(False)
    R(f, torch.randn(2))


# Inputs mutated, aliased, returned ------------------------------------------------------------------------------------


@probe
def input_mutated_inplace(C, R):
    def g(x, y):
        x.add_(1)
        y[0] = x.sum()
        return x * 2

    f = C(g)
    for n in (3, 1, 2):
        x, y = torch.randn(n), torch.zeros(n + 1)
        R(f, x, y)
        R.rec(x, y)
    x = torch.zeros(2)
    R(f, x, x)  # aliased
    R.rec(x)


@probe
def return_view_of_input(C, R):
    def g(x):
        return x[0], x.view(-1), x.t()

    f = C(g)
    for n in (2, 1, 3):
        x = torch.randn(n, 2)
        a, b, c = R(f, x)
        b.mul_(0)  # mutate through the returned view
        R.rec(x, a, c, a._base is x, b.data_ptr() == x.data_ptr())


@probe
def return_input_itself(C, R):
    def g(x, y):
        return x, y + 1, x

    f = C(g)
    for n in (2, 0):
        x, y = torch.randn(n), torch.randn(n)
        a, b, c = R(f, x, y)
        R.rec(a is x, c is x, a is c)


class ReturnsParam(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3))
        self.register_buffer("b", torch.ones(3))

    def forward(self, x):
        return self.w, self.b, self.w.t(), x + self.w


@probe
def output_aliases_params(C, R):
    m = ReturnsParam()
    f = C(m)
    for _ in range(2):
        w, b, wt, y = R(f, torch.randn(3))
        R.rec(w is m.w, b is m.b, wt.data_ptr() == m.w.data_ptr(), w.requires_grad, wt.requires_grad)


@probe
def inplace_on_leaf_requiring_grad(C, R):
    def g(x):
        x.relu_()
        return x

    f = C(g)
    R(f, torch.randn(3, requires_grad=True))
    R(f, torch.randn(3))
    R(f, torch.randn(3, requires_grad=True))


@probe
def inplace_on_view_of_input(C, R):
    def g(x):
        x[:, 0].mul_(10)
        x.narrow(0, 0, 1).zero_()
        return x.sum(0)

    f = C(g)
    for n in (3, 1, 2):
        x = torch.randn(n, 2)
        R(f, x)
        R.rec(x)


# Structured inputs and outputs ----------------------------------------------------------------------------------------


class Out(NamedTuple):
    logits: torch.Tensor
    n: int


@dataclasses.dataclass
class Batch:
    x: torch.Tensor
    scale: float
    k: int


class StructNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, batch, extra=None):
        y = self.lin(batch.x) * batch.scale
        if extra is not None:
            y = y + extra["bias"]
        return Out(y[: batch.k], batch.k), {"shape": tuple(y.shape), "sum": y.sum()}


@probe
def dataclass_namedtuple_dict_io(C, R):
    m = StructNet()
    f = C(m)
    for n, s, k, e in ((3, 1.0, 2, None), (2, 0.5, 1, None), (1, 2.0, 5, {"bias": torch.ones(2)}), (0, 1.0, 0, None)):
        out = R(f, Batch(torch.randn(n, 3), s, k), extra=e)
        R.rec(type(out[0]).__name__ if out else None)


@probe
def kwargs_and_defaults_changed(C, R):
    def g(x, scale=2.0, *, shift=0, mode="add"):
        return x * scale + shift if mode == "add" else x * scale - shift

    f = C(g)
    R(f, torch.randn(2))
    R(f, torch.randn(2), 3.0)
    R(f, torch.randn(2), shift=1)
    R(f, torch.randn(2), mode="sub", shift=5)
    g.__defaults__ = (10.0,)
    R(f, torch.randn(2))
    g.__kwdefaults__ = {"shift": 100, "mode": "add"}
    R(f, torch.randn(2))


@probe
def varargs_count(C, R):
    def g(*xs, **kw):
        out = sum(xs)
        for _k, v in kw.items():
            out = out + v
        return out

    f = C(g)
    R(f, torch.randn(2))
    R(f, torch.randn(2), torch.randn(2))
    R(f, torch.randn(2), torch.randn(2), a=torch.ones(2))
    R(f, torch.randn(2), b=torch.ones(2))


@probe
def list_input_varying_length(C, R):
    def g(xs):
        return torch.stack(xs).sum(0) * len(xs)

    f = C(g)
    for k in (2, 3, 1, 2):
        R(f, [torch.randn(3) for _ in range(k)])
    R(f, [])


@probe
def dict_input_with_ints(C, R):
    def g(d):
        return d["x"][: d["n"]] * d.get("scale", 1)

    f = C(g)
    R(f, {"x": torch.randn(5), "n": 2})
    R(f, {"x": torch.randn(5), "n": 4})
    R(f, {"x": torch.randn(5), "n": 0, "scale": 3})
    R(f, {"x": torch.randn(1), "n": 3})


# Methods other than forward ------------------------------------------------------------------------------------------


class Gen(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(8, 4)
        self.head = nn.Linear(4, 8)
        self.temperature = 1.0

    def step(self, idx):
        h = self.emb(idx).mean(1)
        return (self.head(h) / self.temperature).argmax(-1)

    def forward(self, idx):
        return self.head(self.emb(idx))


@probe
def compile_bound_method(C, R):
    m = Gen()
    step = C(m.step)
    idx = torch.randint(0, 8, (2, 3))
    for t in (3, 1, 4):
        R(step, torch.randint(0, 8, (2, t)))
    m.temperature = -1.0
    R(step, idx)
    with torch.no_grad():
        m.head.bias.fill_(0)
        m.head.bias[3] = 100
    R(step, idx)
    m.head = nn.Linear(4, 8, bias=False)
    R(step, idx)


@probe
def generate_loop_with_compiled_step(C, R):
    m = Gen()
    step = C(m.step)
    idx = torch.randint(0, 8, (2, 1))
    for _ in range(5):
        nxt = R(step, idx)
        idx = torch.cat([idx, nxt[:, None]], 1)
    R.rec(idx)


# nn layers -----------------------------------------------------------------------------------------------------------


@probe
def embedding_padding_idx(C, R):
    m = nn.Embedding(6, 3, padding_idx=0)
    f = C(m)
    for t in (4, 1, 0, 3):
        m.zero_grad()
        idx = torch.tensor([0, 1, 0, 5, 2, 0][:t], dtype=torch.long)
        out = R(f, idx)
        bw(R, out * torch.arange(3.0), m)
    R(f, torch.tensor([6]))  # out of range


@probe
def embedding_max_norm(C, R):
    m = nn.Embedding(6, 3, max_norm=1.0)
    with torch.no_grad():
        m.weight.mul_(5)
    f = C(m)
    for t in (2, 3, 1):
        R(f, torch.tensor([1, 2, 4][:t]))
        R.state(m)


@probe
def multihead_attention(C, R):
    m = nn.MultiheadAttention(8, 2, batch_first=True, dropout=0.0)
    f = C(m)
    for b, t in ((2, 3), (1, 1), (2, 5)):
        q = torch.randn(b, t, 8)
        out = R(f, q, q, q, need_weights=True)
        bw(R, out[0] if out else None, m)
    mask = torch.triu(torch.ones(3, 3, dtype=torch.bool), 1)
    R(f, torch.randn(2, 3, 8), torch.randn(2, 3, 8), torch.randn(2, 3, 8), attn_mask=mask, need_weights=False)
    m.eval()
    with torch.no_grad():
        R(f, q, q, q, need_weights=False)


@probe
def transformer_encoder_layer_train_eval(C, R):
    m = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.1, batch_first=True)
    f = C(m)
    torch.manual_seed(0)
    for b, t in ((2, 3), (1, 4)):
        out = R(f, torch.randn(b, t, 8))
        bw(R, out, m)
    m.eval()
    with torch.no_grad():
        for b, t in ((2, 3), (1, 1), (3, 5)):
            R(f, torch.randn(b, t, 8))
        R(f, torch.randn(2, 3, 8), src_key_padding_mask=torch.tensor([[False, False, True], [False, True, True]]))


@probe
def lstm(C, R):
    m = nn.LSTM(3, 4, batch_first=True)
    f = C(m)
    for b, t in ((2, 3), (1, 1)):
        out = R(f, torch.randn(b, t, 3))
        if out:
            bw(R, out[0], m)


@probe
def gru_cell_loop(C, R):
    cell = nn.GRUCell(3, 4)

    def g(x):
        h = torch.zeros(x.shape[0], 4)
        for t in range(x.shape[1]):
            h = cell(x[:, t], h)
        return h

    f = C(g)
    for b, t in ((2, 3), (1, 2), (2, 3)):
        out = R(f, torch.randn(b, t, 3))
        bw(R, out, cell)


@probe
def conv2d_padding_modes(C, R):
    ms = nn.ModuleList(
        [nn.Conv2d(2, 3, 3, padding=1, padding_mode=pm) for pm in ("zeros", "reflect", "replicate", "circular")]
        + [nn.Conv2d(2, 3, 3, padding="same"), nn.Conv2d(2, 3, 2, stride=2, dilation=1)]
    )

    def g(x):
        return [c(x) for c in ms]

    f = C(g)
    for n, h in ((1, 4), (2, 3), (1, 5), (0, 4)):
        out = R(f, torch.randn(n, 2, h, h))
        if out:
            sum(o.sum() for o in out).backward()
    R.state(ms)
    R(f, torch.randn(1, 2, 1, 1))  # reflect pad larger than input: eager raises


@probe
def layernorm_shape_from_input(C, R):
    def g(x, w):
        return F.layer_norm(x, x.shape[-1:], w[: x.shape[-1]]) + F.layer_norm(x, x.shape[1:]).mean()

    f = C(g)
    for n, d in ((2, 4), (1, 1), (3, 2), (0, 3)):
        R(f, torch.randn(n, d), torch.randn(5))


@probe
def conv_transpose_output_size(C, R):
    m = nn.ConvTranspose2d(2, 2, 3, stride=2)
    f = C(m)
    for h, os in ((3, 7), (3, 8), (2, 5), (4, 10)):
        R(f, torch.randn(1, 2, h, h), output_size=(os, os))


class LossMod(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 4)
        self.loss = nn.CrossEntropyLoss(ignore_index=-1, label_smoothing=0.1)

    def forward(self, x, y):
        return self.loss(self.lin(x), y)


@probe
def loss_module_config_changed(C, R):
    m = LossMod()
    f = C(m)
    y = torch.tensor([0, -1, 3])
    out = R(f, torch.randn(3, 3), y)
    bw(R, out, m)
    m.loss.reduction = "sum"
    R(f, torch.randn(3, 3), y)
    m.loss.label_smoothing = 0.0
    R(f, torch.randn(3, 3), y)
    m.loss.ignore_index = 0
    R(f, torch.randn(3, 3), y)
    R(f, torch.randn(3, 3), torch.tensor([-1, -1, -1]))


@probe
def sdpa_causal_dropout(C, R):
    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.p = 0.0

        def forward(self, q):
            return F.scaled_dot_product_attention(q, q, q, is_causal=True, dropout_p=self.p if self.training else 0.0)

    m = Attn()
    f = C(m)
    for t in (3, 1, 4):
        R(f, torch.randn(1, 2, t, 4))
    m.p = 0.5
    torch.manual_seed(1)
    R(f, torch.randn(1, 2, 3, 4))
    m.eval()
    R(f, torch.randn(1, 2, 3, 4))


@probe
def flatten_unflatten(C, R):
    m = nn.Sequential(nn.Flatten(1), nn.Linear(6, 6), nn.Unflatten(1, (2, 3)))
    f = C(m)
    for n in (2, 0, 1):
        R(f, torch.randn(n, 2, 3))
    R(f, torch.randn(2, 3, 3))  # wrong size: eager raises


@probe
def lazy_linear(C, R):
    m = nn.LazyLinear(2)
    f = C(m)
    R(f, torch.randn(2, 3))
    R(f, torch.randn(1, 3))
    R.state(m)


@probe
def spectral_weight_norm(C, R):
    m = nn.utils.parametrizations.weight_norm(nn.Linear(3, 2))
    f = C(m)
    for n in (2, 1):
        m.zero_grad()
        out = R(f, torch.randn(n, 3))
        bw(R, out, m)
    with torch.no_grad():
        m.parametrizations.weight.original0.mul_(2)
    R(f, torch.randn(2, 3))
