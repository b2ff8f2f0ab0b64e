"""Probes: custom autograd Functions, checkpoint, parameter iteration, module attributes read by forward, RNG."""

import torch
import torch.nn as nn
import torch.utils.checkpoint as cp
from mod_harness import probe


def bw(R, out, m=None):
    if isinstance(out, torch.Tensor) and out.requires_grad:
        out.sum().backward()
    if m is not None:
        R.state(m)


class GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return -ctx.alpha * g, None


class DANN(nn.Module):
    def __init__(self):
        super().__init__()
        self.feat = nn.Linear(3, 4)
        self.head = nn.Linear(4, 2)
        self.alpha = 0.5

    def forward(self, x):
        h = self.feat(x)
        return self.head(GradReverse.apply(h, self.alpha)) + h.sum(-1, keepdim=True)


@probe
def autograd_function_grad_reverse(C, R):
    m = DANN()
    f = C(m)
    for i, n in enumerate((3, 1, 0, 2)):
        m.alpha = (0.5, 0.5, 2.0, 1.0)[i]
        m.zero_grad()
        out = R(f, torch.randn(n, 3))
        bw(R, out, m)


class Clamp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, lo, hi):
        ctx.save_for_backward(x)
        ctx.lo, ctx.hi = lo, hi
        return x.clamp(lo, hi)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * ((x > ctx.lo) & (x < ctx.hi)).float() + 0.01 * g, None, None


@probe
def autograd_function_saved_tensors_int_args(C, R):
    def g(x, k):
        return Clamp.apply(x * 2, -k, k).pow(2).sum()

    f = C(g)
    for n, k in ((3, 1), (1, 2), (0, 1), (4, 0)):
        x = torch.randn(n, requires_grad=True)
        out = R(f, x, k)
        out.backward()
        R.rec(x.grad)


class TwoOut(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        idx = x.argmax(-1)
        ctx.mark_non_differentiable(idx)
        return x.softmax(-1), idx

    @staticmethod
    def backward(ctx, g, gi):
        return g * 3


@probe
def autograd_function_non_differentiable_output(C, R):
    def g(x):
        p, i = TwoOut.apply(x)
        return p * 2, i, i.requires_grad, p.requires_grad

    f = C(g)
    for n in (3, 1, 2):
        x = torch.randn(2, n, requires_grad=True)
        out = R(f, x)
        out[0].sum().backward()
        R.rec(x.grad)
    with torch.no_grad():
        R(f, torch.randn(2, 3))


class SetupCtx(torch.autograd.Function):
    @staticmethod
    def forward(x, scale):
        return x * scale

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.scale = inputs[1]

    @staticmethod
    def backward(ctx, g):
        return g * ctx.scale * 10, None


@probe
def autograd_function_setup_context(C, R):
    def g(x, s):
        return SetupCtx.apply(x, s).sum()

    f = C(g)
    for n, s in ((2, 1.5), (3, 2.0), (0, 1.0)):
        x = torch.randn(n, requires_grad=True)
        out = R(f, x, s)
        out.backward()
        R.rec(x.grad)


class Ident(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 100


@probe
def autograd_function_returns_input(C, R):
    def g(x):
        y = Ident.apply(x)
        return (y * 2 + x).sum()

    f = C(g)
    for n in (2, 3):
        x = torch.randn(n, requires_grad=True)
        out = R(f, x)
        out.backward()
        R.rec(x.grad)


K = 2


class GlobalShape(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x[:K] * 1

    @staticmethod
    def backward(ctx, g):
        raise NotImplementedError


@probe
def autograd_function_forward_reads_global(C, R):
    global K

    def g(x):
        return GlobalShape.apply(x) + torch.ones(2)

    f = C(g)
    try:
        R(f, torch.randn(5))
        K = 3
        R(f, torch.randn(5))
    finally:
        K = 2


@probe
def checkpoint_non_reentrant(C, R):
    m = nn.Sequential(nn.Linear(3, 4), nn.Dropout(0.3), nn.Tanh(), nn.Linear(4, 1))

    def g(x):
        h = cp.checkpoint(m[:3], x, use_reentrant=False)
        return m[3](h)

    f = C(g)
    for i, n in enumerate((3, 1, 2)):
        m.zero_grad()
        torch.manual_seed(i)
        out = R(f, torch.randn(n, 3, requires_grad=True))
        bw(R, out, m)


@probe
def checkpoint_reentrant(C, R):
    m = nn.Sequential(nn.Linear(3, 4), nn.Tanh())

    def g(x):
        return cp.checkpoint(m, x, use_reentrant=True).sum()

    f = C(g)
    for n in (3, 1):
        m.zero_grad()
        x = torch.randn(n, 3, requires_grad=True)
        out = R(f, x)
        bw(R, out, m)
        R.rec(x.grad)


@probe
def checkpoint_sequential(C, R):
    m = nn.Sequential(*[nn.Linear(3, 3) for _ in range(4)])

    def g(x):
        return cp.checkpoint_sequential(m, 2, x, use_reentrant=False)

    f = C(g)
    for n in (2, 1):
        m.zero_grad()
        out = R(f, torch.randn(n, 3, requires_grad=True))
        bw(R, out, m)


# Parameter iteration, attributes read by forward -----------------------------------------------------------------------


class L2(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        reg = sum(p.pow(2).sum() for p in self.parameters())
        n = sum(1 for _ in self.named_parameters())
        return self.lin(x).sum() + 0.01 * reg + n


@probe
def parameters_iterated_in_forward(C, R):
    m = L2()
    f = C(m)
    out = R(f, torch.randn(2, 3))
    bw(R, out, m)
    m.extra = nn.Parameter(torch.ones(2))
    out = R(f, torch.randn(2, 3))
    bw(R, out, m)
    m.lin.bias.requires_grad_(False)
    R(f, torch.randn(2, 3))


class GetattrDefault(nn.Module):
    def forward(self, x):
        s = getattr(self, "scale", 1.0)
        if hasattr(self, "shift"):
            x = x + self.shift
        return x * s


@probe
def attribute_created_later(C, R):
    m = GetattrDefault()
    f = C(m)
    R(f, torch.randn(2))
    m.scale = 3.0
    R(f, torch.randn(2))
    m.shift = torch.ones(2)
    R(f, torch.randn(2))
    del m.scale
    R(f, torch.randn(2))
    m.shift = torch.full((1,), 5.0)
    R(f, torch.randn(2))


class IsinstanceAct(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.ReLU()

    def forward(self, x):
        if isinstance(self.act, nn.ReLU):
            return self.act(x) * 2
        return self.act(x) - type(self.act).__name__.__len__()


@probe
def isinstance_of_submodule(C, R):
    m = IsinstanceAct()
    f = C(m)
    R(f, torch.randn(3))
    m.act = nn.Tanh()
    R(f, torch.randn(3))
    m.act = nn.ReLU()
    R(f, torch.randn(3))


@probe
def requires_grad_whole_model(C, R):
    m = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 1))
    f = C(m)
    m.requires_grad_(False)
    out = R(f, torch.randn(2, 3))
    R.rec(out.requires_grad)
    m.requires_grad_(True)
    m[0].requires_grad_(False)
    out = R(f, torch.randn(2, 3))
    bw(R, out, m)


@probe
def reinit_with_apply_between_calls(C, R):
    m = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 1))
    f = C(m)
    x = torch.randn(2, 3)
    R(f, x)

    def init(mod):
        if isinstance(mod, nn.Linear):
            nn.init.constant_(mod.weight, 0.1)
            nn.init.zeros_(mod.bias)

    m.apply(init)
    R(f, x)


@probe
def functional_call_params_dict(C, R):
    m = nn.Linear(3, 2)

    def g(params, x):
        return torch.func.functional_call(m, params, (x,))

    f = C(g)
    params = {k: v.detach().clone() for k, v in m.named_parameters()}
    R(f, params, torch.randn(2, 3))
    params2 = {k: torch.ones_like(v) for k, v in params.items()}
    R(f, params2, torch.randn(1, 3))
    R.state(m)


class ModeFlag(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    @torch.no_grad()
    def forward(self, x):
        return self.lin(x)


@probe
def no_grad_decorated_forward(C, R):
    m = ModeFlag()
    f = C(m)
    out = R(f, torch.randn(2, 3))
    R.rec(out.requires_grad)


@probe
def inference_mode_decorated_method(C, R):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        @torch.inference_mode()
        def predict(self, x):
            return self.lin(x).argmax(-1)

    m = M()
    f = C(m.predict)
    R(f, torch.randn(2, 3))
    R(f, torch.randn(1, 3))


@probe
def gradient_penalty_autograd_grad(C, R):
    m = nn.Linear(3, 1)

    def g(x):
        x = x.requires_grad_(True)
        y = m(x).sum()
        (gx,) = torch.autograd.grad(y, x, create_graph=True)
        return gx.pow(2).sum()

    f = C(g)
    R(f, torch.randn(2, 3))


@probe
def dropout_inplace_and_relu_inplace(C, R):
    m = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5, inplace=True), nn.ReLU(inplace=True))
    f = C(m)
    for i, n in enumerate((2, 1, 3)):
        torch.manual_seed(i)
        out = R(f, torch.randn(n, 3))
        bw(R, out, m)


@probe
def generator_argument(C, R):
    def g(x, gen):
        return x + torch.rand(x.shape, generator=gen)

    f = C(g)
    gen = torch.Generator().manual_seed(3)
    R(f, torch.zeros(2), gen)
    R(f, torch.zeros(3), gen)
    R.rec(torch.rand(2, generator=gen))


@probe
def generator_module_attribute(C, R):
    class Noisy(nn.Module):
        def __init__(self):
            super().__init__()
            self.gen = torch.Generator().manual_seed(0)

        def forward(self, x):
            return x + torch.randn(x.shape, generator=self.gen)

    m = Noisy()
    f = C(m)
    for n in (2, 2, 1):
        R(f, torch.zeros(n))


@probe
def fork_rng_inside(C, R):
    def g(x):
        with torch.random.fork_rng():
            torch.manual_seed(0)
            a = torch.rand(x.shape)
        return x + a + torch.rand(x.shape)

    f = C(g)
    torch.manual_seed(1)
    for n in (2, 3):
        R(f, torch.zeros(n))
    R.rec(torch.rand(1))


@probe
def reversed_modulelist_and_slicing(C, R):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])

        def forward(self, x):
            for layer in self.layers[::-1]:
                x = layer(x)
            for layer in reversed(self.layers[1:]):
                x = layer(x)
            return x

    m = M()
    f = C(m)
    R(f, torch.randn(2, 2))
    m.layers[2] = nn.Identity()
    R(f, torch.randn(2, 2))


@probe
def buffer_index_table(C, R):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("perm", torch.tensor([2, 0, 1]))

        def forward(self, x):
            return x[:, self.perm]

    m = M()
    f = C(m)
    R(f, torch.randn(2, 3))
    m.perm.copy_(torch.tensor([0, 1, 2]))
    R(f, torch.randn(2, 3))
    m.perm = torch.tensor([1, 1])
    R(f, torch.randn(2, 3))


@probe
def new_zeros_from_attr_size(C, R):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.size = (2, 3)

        def forward(self, x):
            return x.new_zeros(self.size) + x.sum()

    m = M()
    f = C(m)
    R(f, torch.randn(4))
    m.size = (1, 1)
    R(f, torch.randn(4))


@probe
def call_overridden(C, R):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def __call__(self, x, **kw):
            return super().__call__(x * 2, **kw)

        def forward(self, x):
            return self.lin(x)

    m = M()
    f = C(m)
    R(f, torch.randn(2, 3))
    R(f, torch.randn(1, 3))


@probe
def parametrization_added_later(C, R):
    import torch.nn.utils.parametrize as P

    class Sym(nn.Module):
        def forward(self, w):
            return w.triu() + w.triu(1).T

    m = nn.Linear(3, 3)
    f = C(m)
    x = torch.randn(2, 3)
    R(f, x)
    P.register_parametrization(m, "weight", Sym())
    out = R(f, x)
    bw(R, out, m)
    P.remove_parametrizations(m, "weight")
    R(f, x)


@probe
def training_attr_set_directly(C, R):
    m = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.9))
    f = C(m)
    torch.manual_seed(0)
    R(f, torch.ones(2, 3))
    m[1].training = False  # only the dropout
    R(f, torch.ones(2, 3))
    m.training = False  # only the root: the dropout is still in eval
    m[1].training = True
    torch.manual_seed(1)
    R(f, torch.ones(2, 3))


@probe
def eval_called_inside_forward(C, R):
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(0.5)

        def forward(self, x):
            self.drop.eval()
            return self.drop(x)

    m = M()
    f = C(m)
    R(f, torch.ones(3))
    m.drop.train()
    R(f, torch.ones(3))
    R.state(m)


@probe
def register_buffer_inside_forward(C, R):
    class M(nn.Module):
        def forward(self, x):
            if not hasattr(self, "acc"):
                self.register_buffer("acc", torch.zeros_like(x))
            self.acc += x
            return self.acc * 1

    m = M()
    f = C(m)
    for _ in range(3):
        R(f, torch.ones(2))
    R.state(m)


@probe
def batchnorm_track_running_stats_toggled(C, R):
    m = nn.BatchNorm1d(3)
    f = C(m)
    R(f, torch.randn(4, 3))
    m.track_running_stats = False
    R(f, torch.randn(4, 3))
    m.eval()
    R(f, torch.randn(4, 3))
    R.state(m)
