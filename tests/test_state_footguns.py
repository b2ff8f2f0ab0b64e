"""Footguns of state read from outside the inputs (issue 11): globals read by any user code that ran, `with` blocks
whose exit may swallow an error, backend flags read as attributes, the CUDA random state, `type(x)` of a proxy.

Each call sequence offers an entry compiled for one call an input that it must not serve; every call is compared
with eager (sizes 0, 1 and 2 among them) and the exact numbers of compiles and hits are asserted.
"""

from __future__ import annotations

import contextlib
import threading

import pytest
import torch
import torch.nn as nn
from helpers import counts, guards, run_both

import specengine
from specengine import UnsupportedOpError

K = 2


def _with_k(cfn, fn, calls):
    """Run (k, args) calls with the global K set to k; K is put back."""
    global K
    try:
        for k, args in calls:
            K = k
            run_both(fn, cfn, list(args))
    finally:
        K = 2


# Globals read by user code that the static walk does not reach ---------------------------------------------------


class _Scaler:
    def scale(self, x):
        return x * K


def _uses_an_object(x, obj):
    return obj.scale(x) + 1


def test_a_global_read_by_a_method_of_an_object_passed_in_is_guarded():
    obj = _Scaler()
    cfn = specengine.compile(_uses_an_object, dynamic=True)
    calls = [(2, (torch.randn(0), obj)), (2, (torch.randn(1), obj)), (3, (torch.randn(2), obj)),
             (2, (torch.randn(2), obj)), (3, (torch.randn(0), obj))]  # fmt: skip
    _with_k(cfn, _uses_an_object, calls)
    assert counts(cfn) == (2, 3)


def _callback(x):
    return x - K


def _calls_back(x, fn):
    return fn(x) * 2


def test_a_global_read_by_a_callback_argument_is_guarded():
    cfn = specengine.compile(_calls_back, dynamic=True)
    calls = [(2, (torch.randn(1), _callback)), (5, (torch.randn(2), _callback)), (2, (torch.randn(0), _callback)),
             (5, (torch.randn(1), _callback))]  # fmt: skip
    _with_k(cfn, _calls_back, calls)
    assert counts(cfn) == (2, 2)


def test_a_closure_variable_of_a_callback_argument_is_guarded():
    scale = 2

    def cb(x):
        return x * scale

    def set_scale(v):
        nonlocal scale
        scale = v

    cfn = specengine.compile(_calls_back, dynamic=True)
    for v, n in ((2, 0), (3, 1), (2, 2), (3, 2)):
        set_scale(v)
        run_both(_calls_back, cfn, [torch.randn(n), cb])
    assert counts(cfn) == (2, 2)


def _make_scaler(k):
    def scale(x):
        return x * k

    return scale


def _make_counter():
    n = 1

    def get(x):
        return x * n

    def bump():
        nonlocal n
        n += 1

    return get, bump


def test_closures_made_by_a_finished_factory():
    two, three = _make_scaler(2), _make_scaler(3)  # cells that can no longer change: no guard, the functions are
    cfn = specengine.compile(_calls_back, dynamic=True)
    for fn, n in ((two, 0), (three, 1), (two, 2), (three, 2)):
        run_both(_calls_back, cfn, [torch.randn(n), fn])
    assert counts(cfn) == (2, 2)
    get, bump = _make_counter()  # a cell that a nonlocal writer changes: guarded
    cfn = specengine.compile(_calls_back, dynamic=True)
    for n, bumps in ((0, 0), (1, 1), (2, 0), (2, 1)):
        for _ in range(bumps):
            bump()
        run_both(_calls_back, cfn, [torch.randn(n), get])
    assert counts(cfn) == (3, 1)


class _Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.helper = _Scaler()  # a plain object, not a submodule: its class is not in the module tree

    def forward(self, x):
        return self.helper.scale(x)


def test_a_global_read_by_a_plain_object_held_by_a_module_is_guarded():
    model = _Holder()
    cfn = specengine.compile(model, dynamic=True)
    _with_k(cfn, model, [(2, (torch.randn(2),)), (4, (torch.randn(1),)), (2, (torch.randn(0),))])
    assert counts(cfn) == (2, 1)


def _chain(n: int) -> dict:
    """h0 -> h1 -> ... -> h{n-1}, the last one reading the global LAST: more helpers than the static walk scans."""
    ns: dict = {"LAST": 1}
    src = "".join(f"def h{i}(x):\n    return h{i + 1}(x) + 1\n" for i in range(n - 1))
    exec(compile(src + f"def h{n - 1}(x):\n    return x * LAST\n", "<chain>", "exec"), ns)  # noqa: S102 - a test
    return ns


def test_a_helper_beyond_the_static_limit_is_guarded():
    ns = _chain(80)
    fn = ns["h0"]
    cfn = specengine.compile(fn, dynamic=True)
    for last, n in ((1, 0), (1, 1), (3, 2), (1, 2), (3, 1)):
        ns["LAST"] = last
        run_both(fn, cfn, [torch.randn(n)])
    assert counts(cfn) == (2, 3)


# `with` blocks whose exit may swallow an error ----------------------------------------------------------------------


class _Swallows:
    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        return kind is RuntimeError


class _Quiet:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


@contextlib.contextmanager
def _catching():
    try:
        yield
    except RuntimeError:
        pass


@contextlib.contextmanager
def _passing():
    yield


def _add_inside(cm):
    def f(x, y):
        z = x * 2
        with cm():
            z = x + y
        return z

    return f


@pytest.mark.parametrize("cm", [_Swallows, _catching], ids=["exit-returns-true", "generator-catches"])
def test_a_with_block_whose_exit_may_swallow_guards_both_ways(cm):
    f = _add_inside(cm)
    cfn = specengine.compile(f, dynamic=True)
    for n, m in ((2, 2), (2, 3), (1, 2), (0, 1), (0, 0), (3, 2)):
        run_both(f, cfn, [torch.randn(n), torch.randn(m)])
    assert counts(cfn) == (2, 4)


@pytest.mark.parametrize(
    "cm", [_Quiet, _passing, contextlib.nullcontext, torch.no_grad], ids=["exit-none", "generator", "null", "no_grad"]
)
def test_a_with_block_whose_exit_cannot_swallow_stays_unguarded(cm):
    f = _add_inside(cm)
    cfn = specengine.compile(f, dynamic=True)
    for n, m in ((2, 2), (1, 2), (0, 1), (2, 3), (0, 0)):  # (2, 3) raises eagerly, and from the computation
        run_both(f, cfn, [torch.randn(n), torch.randn(m)])
    assert guards(cfn) == [] and counts(cfn) == (1, 4)


_LOCK = threading.Lock()


def test_a_lock_named_by_the_with_cannot_swallow():
    def f(x, y):
        with _LOCK:
            return x + y

    cfn = specengine.compile(f, dynamic=True)
    for n, m in ((2, 2), (1, 2), (2, 3), (0, 0)):
        run_both(f, cfn, [torch.randn(n), torch.randn(m)])
    assert guards(cfn) == [] and counts(cfn) == (1, 3)


def test_an_unsupported_op_inside_a_swallowing_with_is_refused():
    def f(x):
        with _Swallows():
            return x * len(x.reshape(1, -1).tolist())  # (2-D: unsupported)
        return x

    cfn = specengine.compile(f, dynamic=True)
    with pytest.raises(UnsupportedOpError):
        cfn(torch.randn(2))
    assert counts(cfn) == (0, 0)


# Backend flags read as attributes --------------------------------------------------------------------------------


_FLAGS = [
    (torch.backends.cudnn, "deterministic"),
    (torch.backends.cudnn, "benchmark"),
    (torch.backends.cudnn, "enabled"),
    (torch.backends.cudnn, "allow_tf32"),
    (torch.backends.mkldnn, "enabled"),
    (torch.backends.cuda.matmul, "allow_tf32"),
    (torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction"),
]


def _set_flag(owner, attr, value):
    """Also where torch.testing froze the cudnn flags (torch.backends.disable_global_flags)."""
    prop = vars(type(owner)).get(attr)
    if isinstance(prop, torch.backends.ContextProp):
        prop.setter(value)
    else:
        setattr(owner, attr, value)


@pytest.mark.parametrize(("owner", "attr"), _FLAGS, ids=[f"{o.__class__.__name__}.{a}" for o, a in _FLAGS])
def test_a_backend_flag_read_is_guarded(owner, attr):
    def f(x):
        return x + 1 if getattr(owner, attr) else x - 1

    saved = getattr(owner, attr)
    cfn = specengine.compile(f, dynamic=True)
    try:
        for n, flip in ((2, False), (1, True), (0, False), (2, True), (1, False)):
            _set_flag(owner, attr, saved != flip)
            run_both(f, cfn, [torch.randn(n)])
    finally:
        _set_flag(owner, attr, saved)
    assert counts(cfn) == (2, 3)


def test_an_unread_flag_adds_no_check():
    cfn = specengine.compile(lambda x: x + 1, dynamic=True)
    cfn(torch.randn(2))
    assert "deterministic" not in str(specengine.last_prologue(cfn))


def _sets_benchmark(x):
    torch.backends.cudnn.benchmark = not torch.backends.cudnn.benchmark
    return x + 1


def _sets_matmul(x):
    torch.backends.cuda.matmul.allow_tf32 = True
    return x + 1


def _cudnn_flags_block(x):
    with torch.backends.cudnn.flags(enabled=False):
        return x + 1


@pytest.mark.parametrize("fn", [_sets_benchmark, _sets_matmul, _cudnn_flags_block], ids=lambda f: f.__name__)
def test_setting_a_backend_flag_inside_is_refused(fn):
    before = (torch.backends.cudnn.benchmark, torch.backends.cudnn.enabled, torch.backends.cuda.matmul.allow_tf32)
    cfn = specengine.compile(fn, dynamic=True)
    with pytest.raises(UnsupportedOpError, match="inside a compiled function"):
        cfn(torch.randn(2))
    after = (torch.backends.cudnn.benchmark, torch.backends.cudnn.enabled, torch.backends.cuda.matmul.allow_tf32)
    assert after == before and counts(cfn) == (0, 0)


# The CUDA random state ---------------------------------------------------------------------------------------------


def test_cuda_seeding_is_an_op_of_the_computation():
    def f(x, s):
        torch.cuda.manual_seed(s)
        torch.cuda.manual_seed_all(s + 1)
        return x * 2

    cfn = specengine.compile(f, dynamic=True)
    for n, s in ((0, 1), (1, 2), (2, 3)):
        run_both(f, cfn, [torch.randn(n), s])
    assert counts(cfn) == (1, 2)
    text = str(specengine.last_traces(cfn)[-1])
    assert "ltorch.cuda_manual_seed(s)" in text and "ltorch.cuda_manual_seed_all(" in text


def test_cuda_rng_state_save_and_restore_are_ops():
    def f(x):
        state = torch.cuda.get_rng_state()
        torch.cuda.set_rng_state(state)
        return x + 1

    cfn = specengine.compile(f, dynamic=True)
    if torch.cuda.is_available():
        for n in (0, 1, 2):
            run_both(f, cfn, [torch.randn(n, device="cuda")])
        assert counts(cfn) == (1, 2)
    else:  # the computation calls torch.cuda.get_rng_state, which raises eager's error on a CPU build
        for n in (0, 1):
            run_both(f, cfn, [torch.randn(n)])
        assert counts(cfn) == (1, 1)
        assert "ltorch.cuda_get_rng_state(" in str(specengine.last_traces(cfn)[-1])


def test_seeding_cuda_at_random_is_refused():
    def f(x):
        torch.cuda.seed()
        return x

    with pytest.raises(UnsupportedOpError, match="torch.cuda.seed"):
        specengine.compile(f)(torch.randn(2))


# type() of a proxy -------------------------------------------------------------------------------------------------


def _type_queries(x, n, s):
    a = 1 if type(x) is torch.Tensor else 2
    b = 10 if type(n) is int else 20
    c = 100 if type(s) is float and type(x.shape) is torch.Size else 200
    d = 1000 if type(_Scaler) is type and isinstance(_Scaler, type) and type(x) is not type else 2000
    made = type("Made", (), {"k": 3})
    return x * (a + b + c + d + made.k + n) + s


def test_type_of_a_proxy_is_eagers():
    cfn = specengine.compile(_type_queries, dynamic=True)
    for n in (0, 1, 2, 3):
        run_both(_type_queries, cfn, [torch.ones(n), n, n / 2])
    assert counts(cfn) == (1, 3)
    assert "type" not in globals()  # the module's `type` was taken back


def test_type_of_a_parameter_and_metaclasses_while_tracing():
    class Meta(type):
        def __new__(mcs, name, bases, ns):
            return type.__new__(mcs, name, bases, ns)

    model = nn.Linear(2, 2)

    def f(x, p):
        class Local(metaclass=Meta):
            scale = 2

        assert type(Local) is Meta and isinstance(Local, type)
        return x * Local.scale + (1 if type(p) is nn.Parameter else 0)

    cfn = specengine.compile(f, dynamic=True)
    for n in (0, 1, 2):
        run_both(f, cfn, [torch.randn(n, 2), model.weight])
    assert counts(cfn) == (1, 2)


def test_type_of_a_size_picks_eagers_branch():
    def f(x, n):
        return x + 1 if type(n) is int and type(x) is torch.Tensor else x - 1

    cfn = specengine.compile(f, dynamic=True)
    for size in (0, 1, 2):
        run_both(f, cfn, [torch.randn(size), size])
    assert counts(cfn) == (1, 2)
