"""Footguns of modules and torch state found by an outside tester (issue 11, bench/probe_modules.py): tied
parameters untied after the compile, state of hook objects, hooks that see the call's arguments, compiled modules
called by compiled functions, modules read by helpers.

Each call sequence offers an entry compiled for one call an input or a state that it must not serve; every call is
compared with eager (sizes 0, 1 and 2 among them) and the exact numbers of compiles and hits are asserted.
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch
import torch.nn as nn
from helpers import counts

import specengine
from specengine import UnsupportedOpError


def _same(cfn, model, *args, **kwargs):
    expected = model(*args, **kwargs)
    got = cfn(*args, **kwargs)
    torch.testing.assert_close(got, expected)
    return got


class _Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, idx):
        return self.head(self.emb(idx).tanh())


def test_untying_or_tying_parameters_is_a_structure_change():
    model = _Tied()
    cfn = specengine.compile(model, dynamic=True)
    for t in (3, 0, 1):
        _same(cfn, model, torch.randint(0, 10, (2, t)))
    model.head.weight = nn.Parameter(torch.zeros(10, 4))  # untied: the prologue read one tensor for both
    _same(cfn, model, torch.randint(0, 10, (2, 2)))
    model.head.weight = model.emb.weight  # tied again: the first entry serves
    _same(cfn, model, torch.randint(0, 10, (2, 2)))
    assert counts(cfn) == (2, 3)


def test_fields_of_a_hook_object_are_guarded():
    class Scaler:
        def __init__(self):
            self.k = 2.0

        def __call__(self, mod, args, out):
            return out * self.k

    class Recorder:
        def __init__(self):
            self.shift = 1.0

        def pre(self, mod, args):
            return (args[0] + self.shift,)

    scaler, rec = Scaler(), Recorder()
    model = nn.Linear(3, 3)
    model.register_forward_hook(scaler)
    model.register_forward_pre_hook(rec.pre)
    cfn = specengine.compile(model, dynamic=True)
    _same(cfn, model, torch.randn(2, 3))
    _same(cfn, model, torch.randn(0, 3))
    scaler.k = -1.0
    _same(cfn, model, torch.randn(1, 3))
    rec.shift = 5.0
    _same(cfn, model, torch.randn(2, 3))
    assert counts(cfn) == (3, 1)


class _Scaled(nn.Module):
    def forward(self, x, scale=1.0):
        return x * scale


def test_forward_hooks_see_the_arguments_as_passed():
    model = _Scaled()
    model.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))  # drops a positional `scale`
    cfn = specengine.compile(model, dynamic=True)
    x = torch.ones(2)
    _same(cfn, model, x, scale=3.0)  # a keyword stays a keyword: the hook keeps it
    _same(cfn, model, x, 3.0)
    _same(cfn, model, torch.ones(0), scale=3.0)
    with_len = _Scaled()
    with_len.register_forward_hook(lambda mod, args, out: out + len(args))
    cfn2 = specengine.compile(with_len, dynamic=True)
    _same(cfn2, with_len, torch.ones(1))
    _same(cfn2, with_len, torch.ones(2), 2.0)
    assert counts(cfn) == (2, 1) and counts(cfn2) == (2, 0)


def test_a_pre_hook_with_kwargs_gets_the_keywords():
    model = _Scaled()
    model.register_forward_pre_hook(lambda mod, args, kwargs: (args, {"scale": kwargs.get("scale", 1.0) * 2}),
                                    with_kwargs=True)  # fmt: skip
    cfn = specengine.compile(model, dynamic=True)
    _same(cfn, model, torch.randn(2), scale=3.0)
    _same(cfn, model, torch.randn(1), scale=0.5)
    _same(cfn, model, torch.randn(0))
    assert counts(cfn) == (2, 1)


def test_a_compiled_module_called_by_a_compiled_function():
    lin = nn.Linear(3, 2)
    inner = specengine.compile(lin, dynamic=True)

    def f(x):
        return inner(x) * 2 + inner(x * 0)

    cfn = specengine.compile(f, dynamic=True)
    for n in (2, 0, 1):
        torch.testing.assert_close(cfn(torch.ones(n, 3)), f(torch.ones(n, 3)))
    with torch.no_grad():
        lin.weight.fill_(1.0)  # the module's parameters are inputs of the outer entry too
    torch.testing.assert_close(cfn(torch.ones(2, 3)), f(torch.ones(2, 3)))
    assert counts(cfn) == (1, 3)


_LIN = nn.Linear(3, 2)


def _helper(x):
    return _LIN(x)


def test_a_module_read_by_a_helper_is_state():
    def f(x):
        return _helper(x) + 1

    cfn = specengine.compile(f, dynamic=True)
    for n in (2, 0, 1):
        torch.testing.assert_close(cfn(torch.ones(n, 3)), f(torch.ones(n, 3)))
    with torch.no_grad():
        _LIN.bias.fill_(3.0)
    torch.testing.assert_close(cfn(torch.ones(2, 3)), f(torch.ones(2, 3)))
    assert counts(cfn) == (1, 3)


class _GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        return -ctx.alpha * g, None


class _Ident(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x  # apply still returns a new tensor: later uses of x must not get its backward

    @staticmethod
    def backward(ctx, g):
        return g * 100


def _grads(fn, *args):
    leaves = [a.detach().requires_grad_() if isinstance(a, torch.Tensor) else a for a in args]
    out = fn(*leaves)
    out.sum().backward()
    return out, [a.grad for a in leaves if isinstance(a, torch.Tensor)]


def test_a_custom_autograd_function_runs_its_own_backward():
    def f(x, alpha):
        return (_GradReverse.apply(x * 2, alpha) + _Ident.apply(x) * 3 + x).sum(-1)

    cfn = specengine.compile(f, dynamic=True)
    for n, alpha in ((3, 0.5), (0, 0.5), (1, 2.0), (2, 0.5)):
        x = torch.randn(n, 2)
        torch.testing.assert_close(_grads(cfn, x, alpha), _grads(f, x, alpha))
    assert counts(cfn) == (1, 3)  # forward's view_as: torch's infer_size, no question whether the size is 0


class _TopIndex(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        idx = x.argmax(-1)
        ctx.mark_non_differentiable(idx)
        return x.softmax(-1), idx

    @staticmethod
    def backward(ctx, g, gi):
        return g * 3


def test_a_non_differentiable_output_of_a_custom_function():
    def f(x):
        p, i = _TopIndex.apply(x)
        return p * 2, i, i.requires_grad, p.requires_grad

    cfn = specengine.compile(f, dynamic=True)
    for n in (3, 1):
        x = torch.randn(2, n, requires_grad=True)
        assert cfn(x)[2:] == f(x)[2:] == (False, True)
        torch.testing.assert_close(cfn(x)[:2], f(x)[:2])
    with torch.no_grad():
        assert cfn(x)[3] is False
    assert counts(cfn) == (2, 3)  # the no_grad call is an entry of its own


def test_activation_checkpointing_is_traced_through():
    import torch.utils.checkpoint as cp

    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 1))

    def f(x, reentrant):
        return model[2](cp.checkpoint(model[:2], x, use_reentrant=reentrant))

    cfn = specengine.compile(f, dynamic=True)
    for n, reentrant in ((3, False), (0, False), (1, True), (2, True)):
        x = torch.randn(n, 3)
        got = _grads(cfn, x, reentrant), [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        expected = _grads(f, x, reentrant), [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        torch.testing.assert_close(got, expected)
    assert counts(cfn) == (2, 2)


def test_full_backward_hooks_and_rnn_modules_are_refused_cleanly():
    model = nn.Linear(3, 2)
    cfn = specengine.compile(model, dynamic=True)
    _same(cfn, model, torch.randn(2, 3))
    model.register_full_backward_hook(lambda mod, gin, gout: None)
    with pytest.raises(UnsupportedOpError, match="full backward hooks"):
        cfn(torch.randn(2, 3))
    lstm = nn.LSTM(3, 4)
    with pytest.raises(UnsupportedOpError, match="RNNBase"):
        specengine.compile(lstm, dynamic=True)(torch.randn(2, 1, 3))
    assert all(type(w) is nn.Parameter for w in lstm._flat_weights)
    lazy = nn.LazyLinear(2)
    with pytest.raises(UnsupportedOpError, match="lazy module"):
        specengine.compile(lazy, dynamic=True)(torch.randn(2, 3))


class _RegistersInForward(nn.Module):
    def forward(self, x):
        if not hasattr(self, "acc"):
            self.register_buffer("acc", torch.zeros_like(x))
        return x + self.acc


def test_registering_a_buffer_in_forward_is_refused_and_leaves_no_proxy():
    model = _RegistersInForward()
    with pytest.raises(UnsupportedOpError, match="register_buffer"):
        specengine.compile(model, dynamic=True)(torch.ones(2))
    assert dict(model._buffers) == {}
    torch.testing.assert_close(model(torch.ones(2)), torch.ones(2))


def test_attention_modules_and_inplace_activations_trace():
    mha = nn.MultiheadAttention(8, 2, batch_first=True)  # reads query.is_nested
    cfn = specengine.compile(mha, dynamic=True)
    for b, t in ((2, 3), (1, 1), (2, 5)):
        q = torch.randn(b, t, 8)
        torch.testing.assert_close(cfn(q, q, q), mha(q, q, q))
    net = nn.Sequential(nn.Linear(3, 3), nn.ReLU(inplace=True), nn.Dropout(0.5, inplace=True), nn.SiLU(inplace=True))
    cnet = specengine.compile(net, dynamic=True)
    for i, n in enumerate((2, 0, 1)):
        torch.manual_seed(i)
        expected = net(torch.ones(n, 3))
        torch.manual_seed(i)
        torch.testing.assert_close(cnet(torch.ones(n, 3)), expected)
    x = torch.randn(4)
    relu_ = specengine.compile(lambda x: torch.nn.functional.relu(x, inplace=True) * 2, dynamic=True)
    torch.testing.assert_close(relu_(x), x * 2)  # x itself was rectified
    assert (x >= 0).all()
    assert counts(cfn)[0] <= 2 and counts(cnet) == (1, 2)


class _HookedInForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.grads = []

    def save(self, g):
        self.grads.append(g.clone())

    def forward(self, x):
        h = self.lin(x)
        h.register_hook(self.save)
        h.register_hook(lambda g: g * 2)
        return h.relu()


def test_a_tensor_hook_registered_in_forward_runs_on_every_call():
    model = _HookedInForward()
    cfn = specengine.compile(model, dynamic=True)
    for n in (2, 0, 1):
        x = torch.randn(n, 3)
        got = [cfn(x).sum().backward(), model.lin.weight.grad.clone(), model.grads[-1]][1:]
        model.zero_grad()
        expected = [model(x).sum().backward(), model.lin.weight.grad.clone(), model.grads[-1]][1:]
        model.zero_grad()
        torch.testing.assert_close(got, expected)
    assert len(model.grads) == 6
    with torch.no_grad(), pytest.raises(RuntimeError, match="doesn't require gradient"):
        cfn(torch.randn(2, 3))

    def holds_a_proxy(x):
        y = x * 2
        x.register_hook(lambda g: g * y)
        return y

    with pytest.raises(UnsupportedOpError, match="holds traced values"):
        specengine.compile(holds_a_proxy, dynamic=True)(torch.randn(2, requires_grad=True))
    assert counts(cfn) == (1, 2)  # self.grads, filled by the hook between calls, is not read by forward: not guarded


class _Heads(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.heads = 1

    @functools.cached_property
    def scale(self):  # stored straight into __dict__ by its first read, while tracing
        return 1.0 / (3 // self.heads)

    def forward(self, x):
        return self.lin(x).reshape(x.shape[0], self.heads, 3 // self.heads) * self.scale


def test_a_cached_property_computed_while_tracing_is_kept():
    model = _Heads()
    cfn = specengine.compile(model, dynamic=True)
    _same(cfn, model, torch.randn(2, 3))
    assert model.__dict__["scale"] == 1 / 3
    model.heads = 3
    _same(cfn, model, torch.randn(0, 3))  # the cached scale stays 1/3, as in eager
    del model.scale
    _same(cfn, model, torch.randn(1, 3))

    class WritesAProxy(nn.Module):
        def forward(self, x):
            self.__dict__["n"] = x.shape[0]
            return x * self.n

    bad = WritesAProxy()
    with pytest.raises(UnsupportedOpError, match="without Module.__setattr__"):
        specengine.compile(bad, dynamic=True)(torch.ones(3))
    assert "n" not in bad.__dict__
    assert counts(cfn) == (3, 0)


def test_spectral_norm_power_iteration_writes_its_buffers():
    model = nn.utils.parametrizations.spectral_norm(nn.Linear(3, 3))  # normalize(..., out=v) in training
    old = nn.utils.spectral_norm(nn.Linear(3, 3))
    for m in (model, old):
        ref = copy.deepcopy(m)
        cfn = specengine.compile(m, dynamic=True)
        for i, n in enumerate((2, 1, 0, 2)):
            m.train(i != 1)
            ref.train(i != 1)
            torch.testing.assert_close(cfn(torch.ones(n, 3)), ref(torch.ones(n, 3)))
            torch.testing.assert_close(dict(m.named_buffers()), dict(ref.named_buffers()))
    assert counts(cfn) == (3, 1)  # the old hook assigns `weight` as a new attribute: one more compile


class _Teacher(nn.Module):
    def __init__(self):
        super().__init__()
        self.student = nn.Linear(2, 2)
        self.teachers = [nn.Linear(2, 2), nn.Linear(2, 2)]  # a plain list: kept out of the state dict

    def forward(self, x):
        return self.student(x) - sum(t(x) for t in self.teachers)


def test_modules_in_a_plain_list_attribute_are_state():
    model = _Teacher()
    cfn = specengine.compile(model, dynamic=True)
    for n in (2, 0, 1):
        _same(cfn, model, torch.randn(n, 2))
    with torch.no_grad():
        model.teachers[0].weight.zero_()
    _same(cfn, model, torch.randn(2, 2))
    model.teachers[1] = nn.Linear(2, 2)  # replaced in place: a structure change
    _same(cfn, model, torch.randn(2, 2))
    model.teachers.append(nn.Linear(2, 2))
    _same(cfn, model, torch.randn(2, 2))
    assert counts(cfn) == (3, 3)


class _ReturnsItsParameter(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3))

    def forward(self, x):
        return self.w, x + self.w.t(), x.squeeze(0)  # t() of a 1-D tensor and this squeeze change nothing


def test_a_no_op_view_does_not_replace_the_tensor_it_views():
    model = _ReturnsItsParameter()
    cfn = specengine.compile(model, dynamic=True)
    for n in (3, 0, 2):
        x = torch.randn(n, 3)
        w, y, z = cfn(x)
        assert w is model.w  # was the result of self.w.t(): a view, not the parameter (its .grad stayed None)
        torch.testing.assert_close((y, z), model(x)[1:])
    w.sum().backward()
    assert model.w.grad is not None
    assert counts(cfn) == (1, 2)
