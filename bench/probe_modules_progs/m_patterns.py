"""Probes: compile patterns of training code, old-style norm hooks, properties, module __getattr__, pools."""

import copy
import functools

import torch
import torch.nn as nn
import torch.nn.functional as F
from mod_harness import probe


def bw(R, out, m=None):
    if isinstance(out, torch.Tensor) and out.requires_grad:
        out.sum().backward()
    if m is not None:
        R.state(m)


@probe
def forward_replaced_by_compiled(C, R):
    m = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    m.forward = C(m.forward)
    for i, n in enumerate((2, 1, 0)):
        m.train(i != 1)
        torch.manual_seed(i)
        out = R(m, torch.randn(n, 3))
        bw(R, out, m)
    m[0].register_forward_hook(lambda mod, inp, out: out * 0)
    R(m, torch.randn(2, 3))


@probe
def deepcopy_module_compiled_twice(C, R):
    m = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    f = C(m)
    R(f, torch.randn(4, 3))
    m2 = copy.deepcopy(m)
    f2 = C(m2)
    R(f2, torch.randn(4, 3))
    with torch.no_grad():
        m2[0].weight.zero_()
    R(f, torch.randn(4, 3))
    R(f2, torch.randn(4, 3))
    R.state(m)
    R.state(m2)


@probe
def ema_update_compiled(C, R):
    model = nn.Linear(3, 3)
    ema = copy.deepcopy(model)

    @torch.no_grad()
    def update(ema, model, decay):
        for pe, p in zip(ema.parameters(), model.parameters()):
            pe.mul_(decay).add_(p, alpha=1 - decay)

    f = C(update)
    for d in (0.9, 0.9, 0.5):
        with torch.no_grad():
            model.weight.add_(1.0)
        R(f, ema, model, d)
        R.state(ema)


@probe
def foreach_ops_on_params(C, R):
    m = nn.Linear(3, 2)

    def g(params, scale):
        with torch.no_grad():
            torch._foreach_mul_(params, scale)
        return sum(p.sum() for p in params)

    f = C(g)
    R(f, list(m.parameters()), 0.5)
    R(f, list(m.parameters()), 2.0)
    R.state(m)


@probe
def train_step_with_backward_inside(C, R):
    m = nn.Linear(3, 1)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)

    def step(x, y):
        opt.zero_grad()
        loss = F.mse_loss(m(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    f = C(step)
    for n in (4, 2):
        R(f, torch.randn(n, 3), torch.randn(n, 1))
        R.state(m)


@probe
def spectral_norm_old_hooks(C, R):
    m = nn.utils.spectral_norm(nn.Linear(3, 3))
    f = C(m)
    for i, n in enumerate((2, 1, 2)):
        m.train(i != 1)
        out = R(f, torch.randn(n, 3))
        bw(R, out, m)


@probe
def spectral_norm_parametrization(C, R):
    m = nn.utils.parametrizations.spectral_norm(nn.Linear(3, 3))
    f = C(m)
    for i, n in enumerate((2, 1, 2)):
        m.train(i != 1)
        m.zero_grad()
        out = R(f, torch.randn(n, 3))
        bw(R, out, m)


@probe
def weight_norm_old_hooks(C, R):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = nn.utils.weight_norm(nn.Linear(3, 3))
    f = C(m)
    for n in (2, 1):
        m.zero_grad()
        out = R(f, torch.randn(n, 3))
        bw(R, out, m)
    with torch.no_grad():
        m.weight_g.mul_(2)
    R(f, torch.randn(2, 3))


class Props(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.heads = 1

    @property
    def head_dim(self):
        return 3 // self.heads

    @functools.cached_property
    def scale(self):
        return 1.0 / self.head_dim

    def forward(self, x):
        return self.lin(x).reshape(x.shape[0], self.heads, self.head_dim) * self.scale


@probe
def property_and_cached_property(C, R):
    m = Props()
    f = C(m)
    R(f, torch.randn(2, 3))
    m.heads = 3
    R(f, torch.randn(2, 3))
    del m.scale  # cached_property reset
    R(f, torch.randn(1, 3))


class GetattrFallback(nn.Module):
    def __init__(self):
        super().__init__()
        self.cfg = {"scale": 2.0}
        self.lin = nn.Linear(2, 2)

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return self.__dict__["cfg"][name]

    def forward(self, x):
        return self.lin(x) * self.scale


@probe
def module_getattr_fallback_to_dict(C, R):
    m = GetattrFallback()
    f = C(m)
    R(f, torch.randn(2, 2))
    m.cfg["scale"] = -1.0
    R(f, torch.randn(2, 2))


@probe
def param_item_in_forward(C, R):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.temp = nn.Parameter(torch.tensor(2.0))

        def forward(self, x):
            return x / self.temp.item() + x * self.temp

    m = M()
    f = C(m)
    R(f, torch.randn(3))
    with torch.no_grad():
        m.temp.fill_(4.0)
    R(f, torch.randn(3))


@probe
def bool_mask_buffer_where(C, R):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("mask", torch.tensor([True, False, True]))

        def forward(self, x):
            return torch.where(self.mask, x, -x).sum(-1)

    m = M()
    f = C(m)
    R(f, torch.randn(2, 3))
    m.mask.logical_not_()
    R(f, torch.randn(0, 3))


@probe
def buffer_view_of_buffer(C, R):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("table", torch.arange(6.0))
            self.register_buffer("head", self.table[:3])

        def forward(self, x):
            self.head.add_(1)
            return x + self.table[3:] + self.head

    m = M()
    f = C(m)
    for _ in range(2):
        R(f, torch.zeros(3))
        R.state(m)


@probe
def embedding_from_pretrained_frozen(C, R):
    m = nn.Embedding.from_pretrained(torch.randn(5, 3), freeze=True, padding_idx=1)
    f = C(m)
    R(f, torch.tensor([0, 1, 4]))
    m.weight.requires_grad_(True)
    out = R(f, torch.tensor([1, 2]))
    bw(R, out, m)


@probe
def pools_and_upsample(C, R):
    m = nn.Sequential(
        nn.Conv2d(1, 2, 3, padding=1),
        nn.MaxPool2d(2),
        nn.Upsample(scale_factor=2),
        nn.PixelShuffle(1),
        nn.AdaptiveAvgPool2d((1, 2)),
    )
    f = C(m)
    for h in (4, 5, 2):
        R(f, torch.randn(1, 1, h, h))


@probe
def maxpool_return_indices_unpool(C, R):
    pool = nn.MaxPool2d(2, return_indices=True)
    unpool = nn.MaxUnpool2d(2)

    def g(x):
        y, idx = pool(x)
        return unpool(y, idx, output_size=x.shape)

    f = C(g)
    for h in (4, 5):
        R(f, torch.randn(1, 1, h, h))


@probe
def grid_sample_affine(C, R):
    def g(x, theta):
        grid = F.affine_grid(theta, x.shape, align_corners=False)
        return F.grid_sample(x, grid, align_corners=False)

    f = C(g)
    for n, h in ((1, 4), (2, 3)):
        R(f, torch.randn(n, 1, h, h), torch.eye(2, 3).expand(n, 2, 3))


@probe
def autocast_with_batchnorm_train(C, R):
    m = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    f = C(m)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = R(f, torch.randn(4, 3))
    R.state(m)
    bw(R, out, m)


@probe
def multiple_outputs_with_none(C, R):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x, return_hidden=False):
            h = self.lin(x)
            return h.sum(-1), (h if return_hidden else None), self.training

    m = M()
    f = C(m)
    R(f, torch.randn(2, 3))
    R(f, torch.randn(2, 3), return_hidden=True)
    m.eval()
    R(f, torch.randn(2, 3), True)


@probe
def load_state_dict_non_strict_and_buffers(C, R):
    m = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    f = C(m)
    R(f, torch.randn(4, 3))
    sd = m.state_dict()
    sd = {k: (v + 1 if v.is_floating_point() else v) for k, v in sd.items() if "bias" not in k}
    m.load_state_dict(sd, strict=False)
    R(f, torch.randn(4, 3))
    m.eval()
    R(f, torch.randn(4, 3))
    R.state(m)


@probe
def half_model_on_cpu(C, R):
    m = nn.Linear(3, 2).to(torch.bfloat16)
    f = C(m)
    R(f, torch.randn(2, 3, dtype=torch.bfloat16))
    m.float()
    R(f, torch.randn(2, 3))


@probe
def module_list_of_plain_list_modules(C, R):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.experts = [nn.Linear(2, 2), nn.Linear(2, 2)]  # a plain list: not submodules

        def forward(self, x):
            return sum(e(x) for e in self.experts)

    m = M()
    f = C(m)
    R(f, torch.randn(2, 2))
    with torch.no_grad():
        m.experts[0].weight.zero_()
    R(f, torch.randn(2, 2))
