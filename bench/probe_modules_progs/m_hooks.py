"""Probes: hooks, containers, config attributes, sharing, nested compile."""

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
def forward_pre_hook_added_later(C, R):
    m = nn.Linear(3, 3)
    f = C(m)
    R(f, torch.randn(2, 3))
    h = m.register_forward_pre_hook(lambda mod, args: (args[0] * 10,))
    R(f, torch.randn(2, 3))
    R(f, torch.randn(0, 3))
    h.remove()
    R(f, torch.randn(1, 3))


@probe
def forward_hook_modifies_output_removed(C, R):
    m = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 2))
    f = C(m)
    h = m[0].register_forward_hook(lambda mod, inp, out: out * 0 + 1)
    out = R(f, torch.randn(2, 3))
    bw(R, out, m)
    h.remove()
    out = R(f, torch.randn(2, 3))
    bw(R, out, m)
    h2 = m[2].register_forward_hook(lambda mod, inp, out: out.flip(-1))
    out = R(f, torch.randn(5, 3))
    bw(R, out, m)
    h2.remove()
    R(f, torch.randn(5, 3))


@probe
def full_backward_hook_scales_grad(C, R):
    m = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))
    f = C(m)
    out = R(f, torch.randn(2, 3))
    bw(R, out, m)
    m.zero_grad()
    h = m[2].register_full_backward_hook(lambda mod, gin, gout: (gin[0] * 3,))
    out = R(f, torch.randn(2, 3))
    bw(R, out, m)
    m.zero_grad()
    h.remove()
    out = R(f, torch.randn(2, 3))
    bw(R, out, m)


@probe
def full_backward_pre_hook(C, R):
    m = nn.Linear(3, 2)
    m.register_full_backward_pre_hook(lambda mod, gout: (gout[0] * -1,))
    f = C(m)
    for n in (2, 1, 3):
        m.zero_grad()
        x = torch.randn(n, 3, requires_grad=True)
        out = R(f, x)
        bw(R, out, m)
        R.rec(x.grad)


class TensorHook(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        h = self.lin(x)
        h.register_hook(lambda g: g * 2)
        return h.relu()


@probe
def tensor_register_hook_in_forward(C, R):
    m = TensorHook()
    f = C(m)
    for n in (2, 1, 4):
        m.zero_grad()
        out = R(f, torch.randn(n, 3))
        bw(R, out, m)


@probe
def param_register_hook(C, R):
    m = nn.Linear(3, 2)
    f = C(m)
    out = R(f, torch.randn(2, 3))
    bw(R, out, m)
    m.zero_grad()
    h = m.weight.register_hook(lambda g: g * 0)
    out = R(f, torch.randn(2, 3))
    bw(R, out, m)
    h.remove()
    m.zero_grad()
    out = R(f, torch.randn(2, 3))
    bw(R, out, m)


@probe
def global_forward_hook(C, R):
    m = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    f = C(m)
    R(f, torch.randn(2, 3))
    h = torch.nn.modules.module.register_module_forward_hook(lambda mod, inp, out: out + 100)
    try:
        R(f, torch.randn(2, 3))
    finally:
        h.remove()
    R(f, torch.randn(2, 3))


@probe
def global_forward_pre_hook(C, R):
    m = nn.Linear(3, 3)
    f = C(m)
    R(f, torch.randn(2, 3))
    h = torch.nn.modules.module.register_module_forward_pre_hook(lambda mod, inp: (inp[0] * 0,))
    try:
        R(f, torch.randn(2, 3))
    finally:
        h.remove()
    R(f, torch.randn(1, 3))


@probe
def forward_hook_with_kwargs(C, R):
    class M(nn.Module):
        def forward(self, x, scale=1.0):
            return x * scale

    m = M()
    m.register_forward_pre_hook(
        lambda mod, args, kwargs: (args, {"scale": kwargs.get("scale", 1.0) * 2}), with_kwargs=True
    )
    f = C(m)
    R(f, torch.randn(2), scale=3.0)
    R(f, torch.randn(3))
    R(f, torch.randn(1), scale=0.5)


@probe
def hook_on_submodule_added(C, R):
    m = nn.Sequential(nn.Linear(3, 3), nn.Sequential(nn.ReLU(), nn.Linear(3, 2)))
    f = C(m)
    R(f, torch.randn(2, 3))
    m[1][0].register_forward_hook(lambda mod, inp, out: out - 1)
    R(f, torch.randn(2, 3))
    R(f, torch.randn(0, 3))


SCALE = 2.0


@probe
def hook_reads_global_changed(C, R):
    global SCALE
    m = nn.Linear(3, 3)
    m.register_forward_hook(lambda mod, inp, out: out * SCALE)
    f = C(m)
    try:
        R(f, torch.randn(2, 3))
        SCALE = 5.0
        R(f, torch.randn(2, 3))
    finally:
        SCALE = 2.0
    R(f, torch.randn(2, 3))


@probe
def hook_is_callable_object_with_state(C, R):
    class Scaler:
        def __init__(self):
            self.k = 2.0

        def __call__(self, mod, inp, out):
            return out * self.k

    s = Scaler()
    m = nn.Linear(3, 3)
    m.register_forward_hook(s)
    f = C(m)
    R(f, torch.randn(2, 3))
    s.k = -1.0
    R(f, torch.randn(2, 3))


# Containers ---------------------------------------------------------------------------------------------------------


@probe
def sequential_append_between_calls(C, R):
    m = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    f = C(m)
    R(f, torch.randn(2, 3))
    m.append(nn.Linear(3, 1))
    out = R(f, torch.randn(2, 3))
    bw(R, out, m)
    del m[2]
    R(f, torch.randn(1, 3))
    m.insert(0, nn.Tanh())
    R(f, torch.randn(1, 3))


class ListNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(3, 3) for _ in range(3)])

    def forward(self, x, k):
        for i in range(len(self.layers)):
            if i < k:
                x = self.layers[i](x).relu()
        return self.layers[-1](x) + len(self.layers)


@probe
def modulelist_len_and_int_arg(C, R):
    m = ListNet()
    f = C(m)
    for k in (3, 1, 0, 2, 3):
        out = R(f, torch.randn(2, 3), k)
        bw(R, out, m)
    m.layers.append(nn.Linear(3, 3))
    R(f, torch.randn(2, 3), 4)
    m.layers[0] = nn.Identity()
    R(f, torch.randn(2, 3), 4)


class DictNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(3, 2), "b": nn.Linear(3, 4)})

    def forward(self, x, name):
        return self.heads[name](x)


@probe
def moduledict_key_arg(C, R):
    m = DictNet()
    f = C(m)
    for name, n in (("a", 2), ("b", 2), ("a", 1), ("b", 0)):
        R(f, torch.randn(n, 3), name)
    m.heads["a"] = nn.Linear(3, 5)
    R(f, torch.randn(2, 3), "a")
    R(f, torch.randn(2, 3), "c")  # KeyError in eager


class DictIter(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({"a": nn.Linear(3, 2), "b": nn.Linear(3, 2)})

    def forward(self, x):
        return {k: h(x) for k, h in self.heads.items()}


@probe
def moduledict_items_output_dict(C, R):
    m = DictIter()
    f = C(m)
    R(f, torch.randn(2, 3))
    m.heads["c"] = nn.Linear(3, 1)
    R(f, torch.randn(2, 3))
    del m.heads["a"]
    R(f, torch.randn(1, 3))


class SliceSeq(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(*[nn.Linear(3, 3) for _ in range(4)])
        self.depth = 2

    def forward(self, x):
        return self.seq[: self.depth](x)


@probe
def sequential_slice_by_attr(C, R):
    m = SliceSeq()
    f = C(m)
    for d in (2, 4, 0, 1, 2):
        m.depth = d
        R(f, torch.randn(2, 3))


class ParamList(nn.Module):
    def __init__(self):
        super().__init__()
        self.ws = nn.ParameterList([nn.Parameter(torch.randn(3)) for _ in range(2)])
        self.pd = nn.ParameterDict({"s": nn.Parameter(torch.ones(1))})

    def forward(self, x):
        for w in self.ws:
            x = x * w
        return x * self.pd["s"]


@probe
def parameterlist_dict(C, R):
    m = ParamList()
    f = C(m)
    out = R(f, torch.randn(2, 3))
    bw(R, out, m)
    m.ws.append(nn.Parameter(torch.full((3,), 2.0)))
    out = R(f, torch.randn(2, 3))
    bw(R, out, m)
    m.pd["s"] = nn.Parameter(torch.full((1,), 3.0))
    R(f, torch.randn(2, 3))


class ZipLists(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
        self.gates = [0.5, 1.0, 2.0]

    def forward(self, x):
        for i, (layer, g) in enumerate(zip(self.a, self.gates)):
            x = layer(x) * g + i
        return x


@probe
def modulelist_zip_list_attr(C, R):
    m = ZipLists()
    f = C(m)
    R(f, torch.randn(2, 2))
    m.gates[1] = -3.0
    R(f, torch.randn(2, 2))
    m.gates.pop()
    R(f, torch.randn(2, 2))


# Config attributes ---------------------------------------------------------------------------------------------------


class Cfg(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.scale = 0.5
        self.act = nn.ReLU()
        self.residual = True
        self.dims = (0, 1)

    def forward(self, x):
        h = self.act(self.lin(x)) * self.scale
        if self.residual:
            h = h + x
        return h.permute(*self.dims)


@probe
def float_scale_attr_changed(C, R):
    m = Cfg()
    f = C(m)
    for s in (0.5, 2.0, 0.5, -1.0, float("nan")):
        m.scale = s
        R(f, torch.randn(2, 3))


@probe
def activation_swapped(C, R):
    m = Cfg()
    f = C(m)
    x = torch.randn(3, 3)
    R(f, x)
    m.act = nn.GELU()
    R(f, x)
    m.act.approximate = "tanh"
    R(f, x)
    m.act = nn.LeakyReLU(0.1)
    R(f, x)
    m.act.negative_slope = 0.5
    R(f, x)
    m.act = nn.Identity()
    R(f, x)


@probe
def bool_and_tuple_attr(C, R):
    m = Cfg()
    f = C(m)
    R(f, torch.randn(2, 3))
    m.residual = False
    R(f, torch.randn(2, 3))
    m.dims = (1, 0)
    R(f, torch.randn(2, 3))
    m.residual = True
    R(f, torch.randn(2, 3))


class ClassCfg(nn.Module):
    mult = 3

    def forward(self, x):
        return x * self.mult


@probe
def class_attribute_changed(C, R):
    m = ClassCfg()
    f = C(m)
    R(f, torch.randn(2))
    ClassCfg.mult = 5
    try:
        R(f, torch.randn(2))
        m.mult = 7
        R(f, torch.randn(2))
        del m.mult
        R(f, torch.randn(2))
    finally:
        ClassCfg.mult = 3


class Interp(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale_factor = 2.0
        self.mode = "nearest"
        self.pad = (1, 1)

    def forward(self, x):
        y = F.interpolate(x, scale_factor=self.scale_factor, mode=self.mode)
        return F.pad(y, self.pad, value=-1.0)


@probe
def interpolate_pad_from_attrs(C, R):
    m = Interp()
    f = C(m)
    for t in (4, 1, 3):
        R(f, torch.randn(2, 3, t))
    m.scale_factor = 1.5
    R(f, torch.randn(2, 3, 4))
    R(f, torch.randn(2, 3, 5))
    m.mode = "linear"
    R(f, torch.randn(2, 3, 4))
    m.pad = (0, 2)
    R(f, torch.randn(1, 3, 2))


@probe
def interpolate_size_from_input(C, R):
    def up(x, y):
        return F.interpolate(x, size=y.shape[-2:], mode="bilinear", align_corners=False) + y

    f = C(up)
    for a, b in ((2, 4), (3, 3), (1, 5), (2, 2)):
        R(f, torch.randn(1, 2, a, a), torch.randn(1, 2, b, b))


@probe
def pad_modes_symbolic(C, R):
    def p(x, k):
        return F.pad(x, (k, k), mode="reflect") + F.pad(x, (0, k), mode="replicate").sum(-1, keepdim=True)

    f = C(p)
    for t, k in ((4, 1), (5, 2), (3, 2), (2, 3), (3, 0)):
        R(f, torch.randn(1, 2, t), k)


class DropoutP(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(x)


@probe
def dropout_p_changed(C, R):
    m = DropoutP()
    f = C(m)
    for i, p in enumerate((0.5, 0.0, 1.0, 0.25)):
        m.drop.p = p
        torch.manual_seed(i)
        R(f, torch.ones(4, 4))


# Sharing and nesting ------------------------------------------------------------------------------------------------


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, idx):
        return self.head(self.emb(idx).tanh())


@probe
def weight_tying_grads(C, R):
    m = Tied()
    f = C(m)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for t in (3, 1, 5, 0, 2):
        idx = torch.randint(0, 10, (2, t))
        out = R(f, idx)
        if out is not None:
            opt.zero_grad()
            out.logsumexp(-1).sum().backward()
            opt.step()
        R.state(m)
    R.rec(m.head.weight is m.emb.weight)


@probe
def weight_untied_later(C, R):
    m = Tied()
    f = C(m)
    R(f, torch.randint(0, 10, (2, 3)))
    m.head.weight = nn.Parameter(torch.zeros(10, 4))
    R(f, torch.randint(0, 10, (2, 3)))
    m.head.weight = m.emb.weight
    R(f, torch.randint(0, 10, (2, 3)))


class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Linear(3, 3)
        self.layers = nn.ModuleList([self.block, nn.ReLU(), self.block])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


@probe
def shared_submodule(C, R):
    m = Shared()
    f = C(m)
    for n in (2, 0, 1, 3):
        m.zero_grad()
        out = R(f, torch.randn(n, 3))
        bw(R, out, m)


@probe
def nested_compile_module_calls_compiled_fn(C, R):
    g = C(lambda h: h.relu() * 2 + h.shape[0])

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)

        def forward(self, x):
            return g(self.lin(x)).sum(-1)

    m = M()
    f = C(m)
    for n in (2, 1, 0, 4):
        m.zero_grad()
        out = R(f, torch.randn(n, 3))
        bw(R, out, m)


@probe
def compiled_fn_calls_compiled_module(C, R):
    m = nn.Linear(3, 2)
    cm = C(m)

    def f(x):
        return cm(x) * 2 + cm(x * 0)

    cf = C(f)
    for n in (2, 1, 3):
        R(cf, torch.randn(n, 3))
    with torch.no_grad():
        m.weight.fill_(1.0)
    R(cf, torch.randn(2, 3))
    m.train(False)
    R(cf, torch.randn(2, 3))


@probe
def same_module_two_compiles(C, R):
    m = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    f1 = C(m)
    f2 = C(m)
    torch.manual_seed(1)
    R(f1, torch.randn(2, 3))
    m.eval()
    R(f2, torch.randn(2, 3))
    R(f1, torch.randn(2, 3))
    m.train()
    torch.manual_seed(2)
    R(f2, torch.randn(2, 3))


@probe
def module_passed_as_argument(C, R):
    def apply(mod, x):
        return mod(x).sum(0)

    f = C(apply)
    a, b = nn.Linear(3, 2), nn.Linear(3, 2)
    R(f, a, torch.randn(2, 3))
    R(f, b, torch.randn(2, 3))
    with torch.no_grad():
        a.weight.zero_()
    R(f, a, torch.randn(1, 3))
    R(f, nn.Linear(3, 4), torch.randn(1, 3))


@probe
def closure_module_replaced(C, R):
    holder = {"m": nn.Linear(3, 2)}

    def f(x):
        return holder["m"](x)

    cf = C(f)
    R(cf, torch.randn(2, 3))
    holder["m"] = nn.Linear(3, 5)
    R(cf, torch.randn(2, 3))


class Scaled(nn.Module):
    def forward(self, x, scale=1.0):
        return x * scale


@probe
def pre_hook_sees_args_as_passed(C, R):
    m = Scaled()
    m.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))  # drops a positional `scale`
    f = C(m)
    for n in (2, 0, 1):
        R(f, torch.ones(n), scale=3.0)
        R(f, torch.ones(n), 3.0)
    m2 = Scaled()
    m2.register_forward_hook(lambda mod, args, out: out + len(args))
    f2 = C(m2)
    R(f2, torch.ones(2))
    R(f2, torch.ones(2), 2.0)


HELPER_LIN = nn.Linear(3, 2)


def helper_uses_global_module(x):
    return HELPER_LIN(x)


@probe
def module_read_by_helper(C, R):
    def g(x):
        return helper_uses_global_module(x) + 1

    with torch.no_grad():  # a global module: the same for every mode of the probe
        HELPER_LIN.weight.fill_(0.5)
        HELPER_LIN.bias.zero_()
    f = C(g)
    for n in (2, 0, 1):
        R(f, torch.ones(n, 3))
    with torch.no_grad():
        HELPER_LIN.bias.fill_(3.0)
    R(f, torch.ones(2, 3))
