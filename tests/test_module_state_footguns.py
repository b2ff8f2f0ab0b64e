"""Footguns of state read through modules and aliases (issue 11): attributes of imported modules (`cfg.SCALE`,
`mymod.helper`, `from cfg import K` inside a function), contents of containers read as globals, `builtins.type`,
`x.__class__`, and backend flags read or set through torch's C API (`torch._C._get_cudnn_enabled()`).

Each call sequence offers an entry compiled for one call an input that it must not serve; every call is compared
with eager (sizes 0, 1 and 2 among them) and the exact numbers of compiles and hits are asserted.
"""

from __future__ import annotations

import builtins
import math
import sys
import types

import pytest
import torch
import torch.nn as nn
from helpers import counts, run_both

import specengine
from specengine import UnsupportedOpError

cfg = types.ModuleType("specengine_test_cfg")  # a user module (not the standard library's, not torch's)
pkg = types.ModuleType("specengine_test_pkg")
pkg.sub = types.ModuleType("specengine_test_pkg.sub")
TABLE = {"scale": 2}
T = type  # an alias of the builtin


@pytest.fixture(autouse=True)
def _modules():
    """Fresh attributes for every test; `import specengine_test_cfg` finds the module."""
    vars(cfg).update(SCALE=2, FLAG=True, W=torch.ones(2), helper=lambda x: x + 1)
    vars(cfg).pop("NEW", None)
    pkg.sub.K = 1
    TABLE["scale"] = 2
    sys.modules[cfg.__name__] = cfg
    yield
    sys.modules.pop(cfg.__name__, None)


def _calls(cfn, fn, calls):
    """(change, size) calls: `change()` runs before calling eager and compiled on a tensor of that size."""
    for change, n in calls:
        change()
        run_both(fn, cfn, [torch.randn(n, 2)])


def _set(obj, name, value):
    return lambda: setattr(obj, name, value)


def _same():
    return None


# Attributes of imported modules ------------------------------------------------------------------------------------


def _scaled(x):
    return x * cfg.SCALE


def _flagged(x):
    return x + 1 if cfg.FLAG else x - 1


def _helped(x):
    return cfg.helper(x) * 2


def _imports_inside(x):
    from specengine_test_cfg import SCALE

    return x * SCALE


def _through_getattr(x):
    return x * getattr(cfg, "SCALE", 1) + (1 if hasattr(cfg, "NEW") else 0)


def _chained(x):
    return x * pkg.sub.K


@pytest.mark.parametrize(
    ("fn", "owner", "attr", "other"),
    [
        (_scaled, cfg, "SCALE", 3),
        (_flagged, cfg, "FLAG", False),
        (_helped, cfg, "helper", lambda x: x - 1),
        (_imports_inside, cfg, "SCALE", 5),
        (_through_getattr, cfg, "SCALE", 4),
        (_through_getattr, cfg, "NEW", 1),
        (_chained, pkg.sub, "K", 7),
    ],  # fmt: skip
    ids=["value", "flag", "function", "import-inside", "getattr", "hasattr", "chain"],
)
def test_a_module_attribute_read_is_guarded(fn, owner, attr, other):
    old = getattr(owner, attr, None)
    cfn = specengine.compile(fn, dynamic=True)
    restore = (lambda: delattr(owner, attr)) if old is None else _set(owner, attr, old)
    _calls(cfn, fn, [(_same, 0), (_set(owner, attr, other), 1), (restore, 2), (_set(owner, attr, other), 2)])
    assert counts(cfn) == (2, 2)  # both values keep their entries


def _make_reader():
    import specengine_test_cfg as held  # a closure variable holding a module

    def read(x):
        return x * held.SCALE

    return read


def test_a_module_held_by_a_closure_is_guarded():
    fn = _make_reader()
    cfn = specengine.compile(fn, dynamic=True)
    _calls(cfn, fn, [(_same, 0), (_set(cfg, "SCALE", 3), 1), (_same, 2)])
    assert counts(cfn) == (2, 1)


def _reads_a_module_passed_in(m, x):
    return x * m.K


def _passes_modules(x):
    return _reads_a_module_passed_in(pkg.sub, x) + _reads_a_module_passed_in(cfg, x)


def test_a_module_passed_as_an_argument_is_guarded():
    cfg.K = 3
    cfn = specengine.compile(_passes_modules, dynamic=True)
    _calls(cfn, _passes_modules, [(_same, 0), (_set(pkg.sub, "K", 5), 1), (_set(cfg, "K", 4), 2), (_same, 1)])
    assert counts(cfn) == (3, 1)  # both modules the helper was given are guarded


def _weighted(x):
    return x * cfg.W


def test_a_tensor_attribute_of_a_module_is_an_input():
    cfn = specengine.compile(_weighted, dynamic=True)
    _calls(cfn, _weighted, [(_same, 0), (lambda: cfg.W.mul_(3), 1), (_set(cfg, "W", torch.full((2,), 5.0)), 2)])
    assert counts(cfn) == (2, 1)  # an in-place change is read; a rebinding is a new entry


def _helper_reads_its_module(x):
    return cfg.helper(x)


def test_a_function_replaced_by_one_of_another_module_is_guarded():
    def reads_scale(x):
        return x * cfg.SCALE

    cfg.helper = reads_scale
    cfn = specengine.compile(_helper_reads_its_module, dynamic=True)
    calls = [(_same, 0), (_set(cfg, "SCALE", 3), 1), (_set(cfg, "helper", torch.neg), 2), (_same, 1)]
    _calls(cfn, _helper_reads_its_module, calls)
    assert counts(cfn) == (3, 1)


def _libraries(x):
    return x * math.pi + torch.pi + (1 if torch.nn.functional.relu is not None else 0)


def test_attributes_of_the_standard_library_and_torch_are_not_guarded():
    cfn = specengine.compile(_libraries, dynamic=True)
    _calls(cfn, _libraries, [(_same, 0), (_same, 1), (_same, 2)])
    assert counts(cfn) == (1, 2)
    text = str(specengine.last_prologue(cfn))
    assert "_mod" not in text and "_user_globals" not in text


# Containers read as globals ----------------------------------------------------------------------------------------


def _tabled(x):
    return x * TABLE["scale"]


def test_a_global_dict_changed_in_place_is_guarded():
    cfn = specengine.compile(_tabled, dynamic=True)
    _calls(cfn, _tabled, [(_same, 0), (lambda: TABLE.update(scale=3), 1), (lambda: TABLE.update(scale=2), 2)])
    assert counts(cfn) == (2, 1)


# builtins.type, aliases of type, __class__ -------------------------------------------------------------------------


def _explicit_types(x, n, s):
    a = 1 if builtins.type(x) is torch.Tensor and T(n) is int and builtins.type(s) is float else 2
    b = 10 if x.__class__ is torch.Tensor and x.shape.__class__ is torch.Size else 20
    c = 100 if n.__class__ is int and s.__class__ is float and x.__class__.__name__ == "Tensor" else 200
    d = 1000 if isinstance(x * 2, builtins.type(x)) and T(x).__name__ == "Tensor" else 2000
    return x * (a + b + c + d + n) + s


def test_explicit_type_and_class_of_proxies_are_eagers():
    cfn = specengine.compile(_explicit_types, dynamic=True)
    for n in (0, 1, 2):
        run_both(_explicit_types, cfn, [torch.ones(n), n, n / 2])
    assert counts(cfn) == (1, 2)
    assert globals()["T"] is type and globals()["builtins"] is builtins  # put back after tracing


def test_class_of_a_parameter_is_eagers():
    model = nn.Linear(2, 2)

    def f(x, p):
        return x * (2 if p.__class__ is nn.Parameter and x.__class__ is torch.Tensor else 3)

    cfn = specengine.compile(f, dynamic=True)
    for n in (0, 1, 2):
        run_both(f, cfn, [torch.randn(n, 2), model.weight])
    run_both(f, cfn, [torch.randn(2, 2), torch.randn(2, 2)])  # a plain tensor: another class, another entry
    assert counts(cfn) == (2, 2)


# Backend flags read and set through torch's C API --------------------------------------------------------------------


_C_FLAGS = [("_get_cudnn_enabled", "_set_cudnn_enabled"), ("_get_cudnn_benchmark", "_set_cudnn_benchmark"),
            ("_get_cudnn_deterministic", "_set_cudnn_deterministic"), ("_get_mkldnn_enabled", "_set_mkldnn_enabled"),
            ("_get_deterministic_algorithms", "_set_deterministic_algorithms"),
            ("_get_nnpack_enabled", "_set_nnpack_enabled")]  # fmt: skip


@pytest.mark.parametrize(("get", "put"), _C_FLAGS, ids=[g for g, _ in _C_FLAGS])
def test_a_c_flag_read_is_guarded(get, put):
    def f(x):
        return x + 1 if getattr(torch._C, get)() else x - 1

    saved = getattr(torch._C, get)()
    cfn = specengine.compile(f, dynamic=True)
    flip = [lambda v=v: getattr(torch._C, put)(v) for v in (saved, not saved, saved, not saved)]
    try:
        _calls(cfn, f, list(zip(flip, (0, 1, 2, 2))))
    finally:
        getattr(torch._C, put)(saved)
    assert counts(cfn) == (2, 2)


def test_a_c_getter_held_by_the_function_is_guarded():
    from torch._C import _get_mkldnn_enabled, _set_mkldnn_enabled

    def f(x):
        return x * 2 if _get_mkldnn_enabled() else x * 3

    saved = _get_mkldnn_enabled()
    cfn = specengine.compile(f, dynamic=True)
    try:
        _calls(cfn, f, [(_same, 0), (lambda: _set_mkldnn_enabled(not saved), 1), (_same, 2)])
    finally:
        _set_mkldnn_enabled(saved)
    assert counts(cfn) == (2, 1)


@pytest.mark.parametrize("setter", ["_set_cudnn_benchmark", "_set_deterministic_algorithms", "_set_nnpack_enabled"])
def test_a_c_flag_set_inside_is_refused(setter):
    def f(x):
        getattr(torch._C, setter)(True)
        return x + 1

    before = (torch._C._get_cudnn_benchmark(), torch._C._get_deterministic_algorithms(), torch._C._get_nnpack_enabled())
    cfn = specengine.compile(f, dynamic=True)
    with pytest.raises(UnsupportedOpError, match="inside a compiled function"):
        cfn(torch.randn(2))
    after = (torch._C._get_cudnn_benchmark(), torch._C._get_deterministic_algorithms(), torch._C._get_nnpack_enabled())
    assert after == before and counts(cfn) == (0, 0)


# Writes to modules while tracing ------------------------------------------------------------------------------------


def _counts_in_module(x):
    cfg.SCALE += 1
    return x * cfg.SCALE


def _sets_through_setattr(x):
    setattr(cfg, "FLAG", not cfg.FLAG)  # noqa: B010 - the pattern under test
    return x + 1


_helpers = types.ModuleType("specengine_test_helpers")
exec("N = 0\ndef bump(x):\n    global N\n    N += 1\n    return x * N\n", vars(_helpers))  # noqa: S102 - a test


@pytest.mark.parametrize("fn", [_counts_in_module, _sets_through_setattr, _helpers.bump], ids=lambda f: f.__name__)
def test_a_module_written_while_tracing_is_refused_and_put_back(fn):
    before = (cfg.SCALE, cfg.FLAG, _helpers.N)
    cfn = specengine.compile(lambda x: fn(x) + 1, dynamic=True)
    with pytest.raises(UnsupportedOpError, match="assigning"):
        cfn(torch.randn(2))
    assert (cfg.SCALE, cfg.FLAG, _helpers.N) == before and counts(cfn) == (0, 0)


def _lazily_built(x):
    if getattr(cfg, "kernel", None) is None:
        cfg.kernel = torch.neg
    return cfg.kernel(x)


def test_a_lazy_initialisation_of_a_module_attribute_is_allowed():
    vars(cfg).pop("kernel", None)
    cfn = specengine.compile(_lazily_built, dynamic=True)
    _calls(cfn, _lazily_built, [(_same, 0), (_same, 1), (_same, 2)])
    assert cfg.kernel is torch.neg and counts(cfn) == (1, 2)  # guarded as set: the entry serves the later calls
