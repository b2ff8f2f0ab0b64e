"""Footguns of module and object structure (issue 11): what the structure counter, the class guards, the shadows
and the mutation checks must see. Each call sequence offers an entry compiled for one call an input (or a changed
model) that it must not serve; every call is compared with eager and exact compile and hit counts are asserted.
See docs/python-semantics.md, "Python state, modules and containers".
"""

from __future__ import annotations

import argparse
import collections
import copy
import dataclasses
import functools
import pickle
import types
from typing import NamedTuple

import pytest
import torch
import torch.nn as nn
from helpers import counts

import specengine
from specengine import UnsupportedOpError


def _same(cfn, fn, *args):
    with torch.no_grad():
        torch.testing.assert_close(cfn(*args), fn(*args))


class _Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.k = 2

    def forward(self, x):
        return self.lin(x) * self.k


# Writes that bypass setattr ------------------------------------------------------------------------------------


def test_direct_writes_to_the_module_dicts_are_noticed():
    model = _Scaled()
    cfn = specengine.compile(model, dynamic=True)
    for n in (0, 1, 2):
        _same(cfn, model, torch.randn(n, 3))
    model.__dict__["k"] = 3  # no __setattr__
    _same(cfn, model, torch.randn(2, 3))
    model._modules["lin"] = nn.Sequential(nn.Linear(3, 3), nn.ReLU())  # another class, written directly
    _same(cfn, model, torch.randn(1, 3))
    model._modules["lin"]._modules["0"]._parameters["bias"] = None
    _same(cfn, model, torch.randn(2, 3))
    vars(model).update(k=4)
    _same(cfn, model, torch.randn(0, 3))
    assert counts(cfn) == (5, 2)


def test_direct_writes_undone_serve_the_first_entry_again():
    model = _Scaled()
    cfn = specengine.compile(model, dynamic=True)
    _same(cfn, model, torch.randn(2, 3))
    model.__dict__["k"] = 5
    _same(cfn, model, torch.randn(1, 3))
    model.__dict__.pop("k")
    model.__dict__.setdefault("k", 2)
    _same(cfn, model, torch.randn(0, 3))
    assert counts(cfn) == (2, 1)


def test_a_replaced_parameter_table_is_read_anew():
    model = _Scaled()
    cfn = specengine.compile(model, dynamic=True)
    for n in (0, 1, 2):
        _same(cfn, model, torch.randn(n, 3))
    weight = nn.Parameter(torch.ones(3, 3))
    model.lin._parameters = {"weight": weight, "bias": model.lin.bias}  # a new table (the prologue held the old)
    _same(cfn, model, torch.randn(2, 3))
    model.lin._parameters["weight"] = nn.Parameter(torch.full((3, 3), 2.0))  # in the new table: read per call
    _same(cfn, model, torch.randn(1, 3))
    assert counts(cfn) == (2, 3)


def test_watched_modules_copy_and_pickle_as_plain_modules():
    model = _Scaled()
    cfn = specengine.compile(model, dynamic=True)
    _same(cfn, model, torch.randn(2, 3))
    for clone in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert type(clone.__dict__) is dict and type(clone._modules) is dict and type(clone.lin._parameters) is dict
        torch.testing.assert_close(clone(torch.ones(1, 3)), model(torch.ones(1, 3)))
    assert list(model.state_dict()) == ["lin.weight", "lin.bias"]
    assert counts(cfn) == (1, 0)


# Config objects ------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class _Inner:
    shift: float = 0.0


@dataclasses.dataclass
class _Config:
    use_scale: bool = True
    scale: int = 2
    inner: _Inner = dataclasses.field(default_factory=_Inner)


class _Configured(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        y = self.lin(x)
        if self.config.use_scale:
            y = y * self.config.scale
        return y + self.config.inner.shift


def test_a_config_field_changed_after_compile_is_noticed():
    config = _Config()
    model = nn.Sequential(_Configured(config), _Configured(config))  # one config shared by two layers
    cfn = specengine.compile(model, dynamic=True)
    for n in (0, 1, 2):
        _same(cfn, model, torch.randn(n, 3))
    config.use_scale = False
    _same(cfn, model, torch.randn(2, 3))
    config.inner.shift = 1.5  # a nested config object
    _same(cfn, model, torch.randn(1, 3))
    config.use_scale, config.inner.shift = True, 0.0  # back: the first entry serves
    _same(cfn, model, torch.randn(2, 3))
    config.scale = 3
    _same(cfn, model, torch.randn(0, 3))
    assert counts(cfn) == (4, 3)
    assert "self._modules['0'].config.scale == 2 failed" in specengine.recompile_reasons(cfn)[-1]


@dataclasses.dataclass
class _Layered:
    kinds: list = dataclasses.field(default_factory=lambda: ["full", "full"])
    table: dict = dataclasses.field(default_factory=lambda: {"full": 2})


class _ByKind(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = _Layered()

    def forward(self, x):
        for kind in self.config.kinds:
            x = x * self.config.table.get(kind, 3)
        return x


def test_a_list_or_dict_field_of_a_config_changed_in_place_is_noticed():
    model = _ByKind()
    cfn = specengine.compile(model, dynamic=True)
    for n in (0, 1, 2):
        _same(cfn, model, torch.randn(n))
    model.config.kinds.append("sliding")  # in place: no attribute write
    _same(cfn, model, torch.randn(2))
    model.config.table["sliding"] = 5
    _same(cfn, model, torch.randn(1))
    model.config.kinds.pop()
    del model.config.table["sliding"]  # as at first: the first entry serves
    _same(cfn, model, torch.randn(2))
    assert counts(cfn) == (3, 3)
    assert specengine.recompile_reasons(cfn)[0] == (
        "the contents of self.config.kinds == ['full', 'full'] failed: "
        "the contents of self.config.kinds = ['full', 'full', 'sliding']"
    )


def test_a_transformers_config_field_changed_after_compile_is_noticed():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(use_cache=True)
    model = _Configured(_Config())
    model.config = config

    def forward(x):
        y = model.lin(x)
        return y * 2 if model.config.use_cache else y

    model.forward = forward
    cfn = specengine.compile(model, dynamic=True)
    for n in (0, 1, 2):
        _same(cfn, model, torch.randn(n, 3))
    config.use_cache = False
    _same(cfn, model, torch.randn(2, 3))
    assert counts(cfn) == (2, 2)


GLOBAL_CONFIG = _Config()


def _uses_global_config(x):
    return x * GLOBAL_CONFIG.scale if GLOBAL_CONFIG.use_scale else x


def test_fields_of_a_config_read_as_a_global_or_by_a_bound_self_are_noticed():
    cfn = specengine.compile(_uses_global_config, dynamic=True)
    try:
        for n in (0, 1, 2):
            _same(cfn, _uses_global_config, torch.randn(n))
        GLOBAL_CONFIG.use_scale = False
        _same(cfn, _uses_global_config, torch.randn(2))
    finally:
        GLOBAL_CONFIG.use_scale = True
    _same(cfn, _uses_global_config, torch.randn(1))
    assert counts(cfn) == (2, 3)

    class Runner:
        def __init__(self):
            self.config = _Config()

        def run(self, x):
            return x * self.config.inner.shift

    runner = Runner()
    cr = specengine.compile(runner.run, dynamic=True)
    _same(cr, runner.run, torch.randn(2))
    runner.config.inner.shift = 2.0
    _same(cr, runner.run, torch.randn(1))
    assert counts(cr) == (2, 0)
    assert specengine.recompile_reasons(cr)[0] == "self.config.inner.shift == 0.0 failed: self.config.inner.shift = 2.0"


def test_a_config_changed_while_tracing_is_refused_and_put_back():
    class Writes(_Configured):
        def forward(self, x):
            self.config.scale = x.shape[0]  # would happen only while tracing
            return self.lin(x)

    config = _Config()
    model = Writes(config)
    cfn = specengine.compile(model, dynamic=True)
    with pytest.raises(UnsupportedOpError, match=r"changing self.config.scale"):
        cfn(torch.randn(2, 3))
    assert config.scale == 2 and specengine.cache_entries(cfn) == []


# Writes that no hook sees (prologue/stamps.py) ------------------------------------------------------------------


def test_object_setattr_on_a_module_is_noticed():
    model = _Scaled()
    cfn = specengine.compile(model, dynamic=True)
    for n in (0, 1, 2):
        _same(cfn, model, torch.randn(n, 3))
    object.__setattr__(model, "k", 3)  # PyDict_SetItem: neither Module.__setattr__ nor WatchedDict.__setitem__ runs
    _same(cfn, model, torch.randn(2, 3))
    dict.__setitem__(model.__dict__, "k", 2)  # back: the first entry serves
    _same(cfn, model, torch.randn(1, 3))
    object.__setattr__(model.lin, "extra", 1)  # a new attribute of a submodule
    _same(cfn, model, torch.randn(0, 3))
    assert counts(cfn) == (3, 3)
    assert specengine.recompile_reasons(cfn)[0] == "self.k == 2 failed: self.k = 3"


def test_a_module_dict_replaced_wholesale_is_noticed():
    model = _Scaled()
    cfn = specengine.compile(model, dynamic=True)
    for n in (0, 1, 2):
        _same(cfn, model, torch.randn(n, 3))
    object.__setattr__(model, "__dict__", {**vars(model), "k": 5})  # no write to the dict the prologue holds
    _same(cfn, model, torch.randn(2, 3))
    lin = model.lin  # a submodule's state replaced, with a new parameter table
    params = {"weight": nn.Parameter(torch.full((3, 3), 2.0)), "bias": lin.bias}
    object.__setattr__(lin, "__dict__", {**vars(lin), "_parameters": params})
    _same(cfn, model, torch.randn(1, 3))
    _same(cfn, model, torch.randn(0, 3))
    assert counts(cfn) == (3, 3)
    assert specengine.recompile_reasons(cfn)[0] == "self: tables is unchanged failed: self: tables changed"


def _bypassing_writes():
    """Writes to a config field that its class's `__setattr__` never sees, each as (name, write(obj, field, value))."""
    return [("object.__setattr__", lambda o, k, v: object.__setattr__(o, k, v)),
            ("__dict__[k]", lambda o, k, v: o.__dict__.__setitem__(k, v)),
            ("vars(o)[k]", lambda o, k, v: vars(o).__setitem__(k, v)),
            ("__dict__.update", lambda o, k, v: o.__dict__.update({k: v})),
            ("dict.__setitem__", lambda o, k, v: dict.__setitem__(o.__dict__, k, v)),
            ("a new __dict__", lambda o, k, v: object.__setattr__(o, "__dict__", {**vars(o), k: v}))]  # fmt: skip


@pytest.mark.parametrize("name, write", _bypassing_writes(), ids=[n for n, _ in _bypassing_writes()])
def test_config_writes_that_bypass_setattr_are_noticed(name, write):
    config = _Config()
    model = nn.Sequential(_Configured(config), _Configured(config))
    cfn = specengine.compile(model, dynamic=True)
    for n in (0, 1, 2):
        _same(cfn, model, torch.randn(n, 3))
    write(config, "scale", 3)
    _same(cfn, model, torch.randn(2, 3))
    write(config.inner, "shift", 1.5)  # a nested config object
    _same(cfn, model, torch.randn(1, 3))
    write(config, "scale", 2)
    write(config.inner, "shift", 0.0)  # back: the first entry serves
    _same(cfn, model, torch.randn(0, 3))
    assert counts(cfn) == (3, 3)
    assert specengine.recompile_reasons(cfn)[0] == "self._modules['0'].config.scale == 2 failed: " \
                                                   "self._modules['0'].config.scale = 3"  # fmt: skip


@pytest.mark.parametrize("name, write", _bypassing_writes()[::2], ids=[n for n, _ in _bypassing_writes()[::2]])
def test_bypassing_writes_to_a_global_config_are_noticed(name, write):
    cfn = specengine.compile(_uses_global_config, dynamic=True)
    try:
        for n in (0, 1, 2):
            _same(cfn, _uses_global_config, torch.randn(n))
        write(GLOBAL_CONFIG, "scale", 3)
        _same(cfn, _uses_global_config, torch.randn(2))
        write(GLOBAL_CONFIG, "use_scale", False)
        _same(cfn, _uses_global_config, torch.randn(1))
    finally:
        GLOBAL_CONFIG.scale, GLOBAL_CONFIG.use_scale = 2, True
    _same(cfn, _uses_global_config, torch.randn(0))
    assert counts(cfn) == (3, 3)


class _SlotConfig:
    __slots__ = ("scale",)

    def __init__(self):
        self.scale = 2


def test_object_setattr_on_a_slotted_config_and_a_bound_self_is_noticed():
    config = _SlotConfig()
    model = _Configured(_Config())
    model.slots = config

    def forward(x):
        return model.lin(x) * model.slots.scale

    model.forward = forward
    cfn = specengine.compile(model, dynamic=True)
    for n in (0, 1, 2):
        _same(cfn, model, torch.randn(n, 3))
    object.__setattr__(config, "scale", 3)  # the slot's descriptor: no __setattr__, no dict
    _same(cfn, model, torch.randn(2, 3))
    assert counts(cfn) == (2, 2)

    class Runner:
        def __init__(self):
            self.k = 2

        def run(self, x):
            return x * self.k

    runner = Runner()
    cr = specengine.compile(runner.run, dynamic=True)
    _same(cr, runner.run, torch.randn(2))
    object.__setattr__(runner, "__dict__", {"k": 3})  # the prologue held the old __dict__
    _same(cr, runner.run, torch.randn(1))
    object.__setattr__(runner, "k", 4)
    _same(cr, runner.run, torch.randn(0))
    assert counts(cr) == (3, 0)


# In-place changes of containers of objects ----------------------------------------------------------------------


@dataclasses.dataclass
class _Block:
    gated: bool = True


@dataclasses.dataclass
class _Stack:
    acts: list = dataclasses.field(default_factory=lambda: [torch.relu])
    table: dict = dataclasses.field(default_factory=lambda: {"out": torch.tanh})
    blocks: list = dataclasses.field(default_factory=lambda: [_Block(), _Block()])
    groups: tuple = dataclasses.field(default_factory=lambda: ([torch.neg],))
    name: str = "stack"


class _Stacked(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = _Stack()
        self.extra = [torch.sigmoid]  # a module attribute: a list of functions
        self.history = []  # filled by the caller, never read by forward

    def forward(self, x):
        for act in self.config.acts + self.extra + self.config.groups[0]:
            x = act(x)
        for block in self.config.blocks:
            x = x * 2 if block.gated else x
        return self.config.table["out"](x)


def test_containers_of_objects_in_a_config_changed_in_place_are_noticed():
    model = _Stacked()
    cfn = specengine.compile(model, dynamic=True)
    for n in (0, 1, 2):
        _same(cfn, model, torch.randn(n))
    model.config.acts.append(torch.exp)  # a list of functions
    _same(cfn, model, torch.randn(2))
    model.config.table["out"] = torch.sin  # a dict of functions
    _same(cfn, model, torch.randn(1))
    model.config.blocks[1].gated = False  # a config object inside a list
    _same(cfn, model, torch.randn(2))
    model.config.groups[0][0] = torch.abs  # a list inside a tuple
    _same(cfn, model, torch.randn(0))
    model.extra.append(torch.cos)  # a module attribute's list
    _same(cfn, model, torch.randn(2))
    model.config.acts.pop()
    model.config.table["out"] = torch.tanh
    model.config.blocks[1].gated = True
    model.config.groups[0][0] = torch.neg
    model.extra.pop()  # all back: the first entry serves
    model.history.append(object())  # not named by the code that ran: not part of the fingerprint
    _same(cfn, model, torch.randn(1))
    assert counts(cfn) == (6, 3)
    reasons = specengine.recompile_reasons(cfn)
    assert (
        reasons[0] == "the contents of self.config.acts is unchanged failed: the contents of self.config.acts changed"
    )
    assert reasons[2].endswith("self.config.blocks[1].gated is True failed: self.config.blocks[1].gated = False")


def test_the_stamp_is_compared_without_walking(monkeypatch):
    from specengine.prologue import stamps, structure

    if not stamps.TAGS_READABLE:
        pytest.skip("dict version tags are not readable on this interpreter")
    model = _Stacked()
    cfn = specengine.compile(model, dynamic=True)
    _same(cfn, model, torch.randn(2))
    walks = []
    original = structure.fingerprint
    monkeypatch.setattr(structure, "fingerprint", lambda *a, **k: walks.append(1) or original(*a, **k))
    for n in (0, 1, 2):
        _same(cfn, model, torch.randn(n))
    assert walks == []
    object.__setattr__(model.config, "name", "".join(["st", "ack"]))  # an equal value: one walk, no change found
    _same(cfn, model, torch.randn(1))
    _same(cfn, model, torch.randn(0))
    assert len(walks) == 1 and counts(cfn) == (1, 5)


# Classes -------------------------------------------------------------------------------------------------------


def test_a_method_reassigned_on_the_class_is_noticed():
    class Model(nn.Module):
        def helper(self, x):
            return x * 2

        def forward(self, x):
            return self.helper(x) + 1

    model = Model()
    cfn = specengine.compile(model, dynamic=True)
    for n in (0, 1, 2):
        _same(cfn, model, torch.randn(n))
    original = Model.helper
    Model.helper = lambda self, x: x * 3
    _same(cfn, model, torch.randn(2))
    type(model).forward = lambda self, x: self.helper(x) - 1
    _same(cfn, model, torch.randn(1))
    Model.scale = 4  # a new class attribute: walked, and a new entry (attributes are compared, not uses)
    _same(cfn, model, torch.randn(1))
    assert counts(cfn) == (4, 2)
    assert specengine.recompile_reasons(cfn)[0] == "Model.helper is unchanged failed: Model.helper was reassigned"
    Model.helper = original


def test_a_torch_class_patched_after_compile_is_noticed():
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    cfn = specengine.compile(model, dynamic=True)
    for n in (0, 1, 2):
        _same(cfn, model, torch.randn(n, 3))
    original = nn.ReLU.forward
    nn.ReLU.forward = lambda self, x: x.abs()
    try:
        _same(cfn, model, torch.randn(2, 3))
    finally:
        nn.ReLU.forward = original
    _same(cfn, model, torch.randn(1, 3))  # the class as it was: the first entry serves again
    assert counts(cfn) == (2, 3)


def test_methods_of_a_bound_self_and_of_an_object_argument_are_guarded():
    class Scaler:
        def __init__(self):
            self.k = 2

        def factor(self):
            return self.k

        def apply(self, x):
            return x * self.factor()

    s = Scaler()
    cfn = specengine.compile(s.apply, dynamic=True)
    for n in (0, 1, 2):
        _same(cfn, s.apply, torch.randn(n))
    Scaler.factor = lambda self: self.k + 1
    _same(cfn, s.apply, torch.randn(2))

    def g(x, obj):
        return x * obj.factor()

    cg = specengine.compile(g, dynamic=True)
    _same(cg, g, torch.randn(2), s)
    Scaler.factor = lambda self: self.k + 2
    _same(cg, g, torch.randn(1), s)
    assert counts(cfn) == (2, 2) and counts(cg) == (2, 0)


def test_class_tags_are_compared_without_walking(monkeypatch):
    from specengine.prologue import classes

    if not classes.TAGS_READABLE:
        pytest.skip("type version tags are not readable on this interpreter")
    model = _Scaled()
    cfn = specengine.compile(model, dynamic=True)
    _same(cfn, model, torch.randn(2, 3))
    walks = []
    original = classes.ClassGuard.__call__
    monkeypatch.setattr(classes.ClassGuard, "__call__", lambda self: walks.append(1) or original(self))
    for n in (0, 1, 2):
        _same(cfn, model, torch.randn(n, 3))
    assert walks == []
    _Scaled.unrelated = 1  # the class changed: one walk, which finds a new attribute (a new entry)
    try:
        _same(cfn, model, torch.randn(2, 3))
        compared = []
        unchanged = classes._unchanged
        monkeypatch.setattr(classes, "_unchanged", lambda *a: compared.append(1) or unchanged(*a))
        _same(cfn, model, torch.randn(1, 3))
        _same(cfn, model, torch.randn(0, 3))
        assert compared == []  # the first entry's failure under these tags is remembered: no namespace compared
    finally:
        del _Scaled.unrelated
    assert counts(cfn) == (2, 5)


# Aliasing of mutable inputs ------------------------------------------------------------------------------------


class _Box:
    def __init__(self):
        self.items = []


def _push(a, b, x):
    a.items.append(x * 2)
    return x * len(b.items)


def test_a_plain_object_passed_twice_is_one_object():
    cfn = specengine.compile(_push, dynamic=True)
    for n, alias in ((2, False), (1, True), (0, False), (2, True)):
        mine = [_Box(), _Box()]
        theirs = [_Box(), _Box()]
        if alias:
            mine[1], theirs[1] = mine[0], theirs[0]
        x = torch.randn(n)
        torch.testing.assert_close(cfn(mine[0], mine[1], x), _push(theirs[0], theirs[1], x))
        assert [len(b.items) for b in mine] == [len(b.items) for b in theirs]
        for a, b in zip(mine[0].items, theirs[0].items):
            torch.testing.assert_close(a, b)
    assert counts(cfn) == (2, 2)
    assert specengine.recompile_reasons(cfn)[0].startswith("the lists, dicts and objects passed in are distinct")


def test_a_list_reachable_twice_among_the_arguments():
    def f(box, xs, x):
        box.items.append(x)
        return x * len(xs)

    cfn = specengine.compile(f, dynamic=True)
    for n, alias in ((2, True), (1, False), (0, True), (2, False)):
        box, ref = _Box(), _Box()
        args = (box, box.items if alias else [], torch.randn(n))
        refs = (ref, ref.items if alias else [], args[2])
        torch.testing.assert_close(cfn(*args), f(*refs))
        assert len(box.items) == len(ref.items) == 1
    assert counts(cfn) == (2, 2)


def test_an_argument_that_is_also_a_module_attribute_is_refused():
    class Holder(nn.Module):
        def __init__(self):
            super().__init__()
            self.cache = _Box()

        def forward(self, x, box):
            box.items.append(x)
            return x * (len(self.cache.items) + 1)

    model = Holder()
    cfn = specengine.compile(model, dynamic=True)
    for n in (0, 1, 2):
        box, ref, x = _Box(), _Box(), torch.randn(n)
        torch.testing.assert_close(cfn(x, box), model(x, ref))
        assert len(box.items) == len(ref.items) == 1
    with pytest.raises(UnsupportedOpError, match=r"passing self.cache \(a _Box\) as the argument box"):
        cfn(torch.randn(2), model.cache)
    assert model.cache.items == [] and counts(cfn) == (1, 2)


def test_an_argument_that_is_also_an_attribute_of_a_bound_self_is_refused():
    class Owner:
        def __init__(self):
            self.cache = _Box()

        def run(self, x, box):
            box.items.append(x)
            return x * (len(self.cache.items) + 1)

    owner = Owner()
    cfn = specengine.compile(owner.run, dynamic=True)
    for n in (0, 1, 2):
        box, ref, x = _Box(), _Box(), torch.randn(n)
        torch.testing.assert_close(cfn(x, box), owner.run(x, ref))
        assert len(box.items) == len(ref.items) == 1
    with pytest.raises(UnsupportedOpError, match=r"passing self.cache \(a _Box\) as the argument box"):
        cfn(torch.randn(1), owner.cache)
    assert owner.cache.items == [] and counts(cfn) == (1, 2)


# Nested state inside objects that are not shadowed -------------------------------------------------------------


class _Slotted:
    __slots__ = ("items", "n")

    def __init__(self):
        self.items, self.n = [], 0


def test_a_list_inside_an_argument_that_is_not_plain_is_refused_and_put_back():
    def f(x, obj):
        obj.items.append(x * 2)
        return x + 1

    obj = _Slotted()
    cfn = specengine.compile(f, dynamic=True)
    with pytest.raises(UnsupportedOpError, match=r"changing obj.items while tracing"):
        cfn(torch.ones(2), obj)
    assert obj.items == [] and specengine.cache_entries(cfn) == []


def test_a_list_inside_a_module_attribute_object_is_refused_and_put_back():
    class Logs(nn.Module):
        def __init__(self):
            super().__init__()
            self.log = _Slotted()

        def forward(self, x):
            self.log.items.append(x)
            return x * 2

    model = Logs()
    cfn = specengine.compile(model, dynamic=True)
    with pytest.raises(UnsupportedOpError, match=r"changing self.log.items while tracing"):
        cfn(torch.ones(2))
    assert model.log.items == [] and specengine.cache_entries(cfn) == []


def test_fields_of_an_argument_that_is_not_plain_changed_between_calls_are_noticed():
    def f(x, obj):
        return x * (obj.n + len(obj.items))

    obj = _Slotted()
    cfn = specengine.compile(f, dynamic=True)
    for n in (0, 1, 2):
        _same(cfn, f, torch.randn(n), obj)
    obj.n = 3  # a slot assigned: the stamp compares the slot values
    _same(cfn, f, torch.randn(2), obj)
    obj.items = [1]
    _same(cfn, f, torch.randn(1), obj)
    obj.items.append(2)  # in place: its contents are compared on every call
    _same(cfn, f, torch.randn(1), obj)
    obj.n, obj.items = 0, []  # a new, equal list: its contents are compared (issue 22), so the first entry serves
    _same(cfn, f, torch.randn(1), obj)
    assert counts(cfn) == (4, 3)


class _Pair(NamedTuple):
    items: list
    scale: int


@dataclasses.dataclass
class _Record:
    items: list
    seen: int = 0


def test_lists_inside_namedtuples_and_dataclasses_are_written_back():
    def f(pair, rec, x):
        pair.items.append(x * pair.scale)
        rec.items.append(x + len(pair.items))
        rec.seen = rec.seen + 1
        return x * len(rec.items)

    cfn = specengine.compile(f, dynamic=True)
    for n in (0, 1, 2, 2):
        x = torch.randn(n)
        mine, theirs = (_Pair([], 2), _Record([])), (_Pair([], 2), _Record([]))
        torch.testing.assert_close(cfn(*mine, x), f(*theirs, x))
        assert mine[1].seen == theirs[1].seen == 1
        for a, b in zip(mine[0].items + mine[1].items, theirs[0].items + theirs[1].items):
            torch.testing.assert_close(a, b)
    assert counts(cfn) == (1, 3)


def test_ordered_and_default_dicts_passed_in_are_written_back():
    def f(od, dd, x):
        od["k"] = x * 2
        dd["seen"].append(x + 1)
        return x + len(od)

    cfn = specengine.compile(f, dynamic=True)
    for n in (0, 1, 2):
        x = torch.randn(n)
        mine = (collections.OrderedDict(a=1), collections.defaultdict(list))
        theirs = (collections.OrderedDict(a=1), collections.defaultdict(list))
        torch.testing.assert_close(cfn(*mine, x), f(*theirs, x))
        assert list(mine[0]) == list(theirs[0]) == ["a", "k"] and list(mine[1]) == ["seen"]
        torch.testing.assert_close(mine[0]["k"], theirs[0]["k"])
        torch.testing.assert_close(mine[1]["seen"][0], theirs[1]["seen"][0])
    assert counts(cfn) == (1, 2)


GLOBAL_LOG: list = []


def test_a_global_list_appended_to_is_refused_and_put_back():
    def f(x):
        GLOBAL_LOG.append(x)
        return x + 1

    cfn = specengine.compile(f, dynamic=True)
    with pytest.raises(UnsupportedOpError, match=r"global GLOBAL_LOG"):
        cfn(torch.ones(2))
    assert GLOBAL_LOG == [] and specengine.cache_entries(cfn) == []


# Objects of the standard library (capture/mutations.py skips their caches, not their users' data) ---------------------

NAMESPACE = types.SimpleNamespace(count=0)
ARGS = argparse.Namespace(scale=2)
USER_DICT = collections.UserDict(k=2)
ACTS = [torch.relu]  # a global list of functions
QUEUE = collections.deque([torch.relu])


def _counts_calls(x):
    NAMESPACE.count += 1  # would happen only while tracing
    return x * NAMESPACE.count


def _reads_library_data(x):
    for act in [*ACTS, *QUEUE]:
        x = act(x)
    return x * ARGS.scale * USER_DICT["k"]


def test_library_data_objects_changed_while_tracing_are_refused_and_put_back():
    cfn = specengine.compile(_counts_calls, dynamic=True)
    with pytest.raises(UnsupportedOpError, match=r"changing _counts_calls: global NAMESPACE.count while tracing"):
        cfn(torch.randn(2))
    assert NAMESPACE.count == 0 and specengine.cache_entries(cfn) == []

    class Keeps(nn.Module):
        def __init__(self):
            super().__init__()
            self.history = collections.deque()

        def forward(self, x):
            self.history.append(x.shape[0])  # a deque: walked as a list
            return x * 2

    model = Keeps()
    cm = specengine.compile(model, dynamic=True)
    with pytest.raises(UnsupportedOpError, match=r"changing self.history while tracing"):
        cm(torch.randn(2))
    assert len(model.history) == 0 and specengine.cache_entries(cm) == []


def test_library_data_objects_and_containers_of_functions_changed_between_calls_are_noticed():
    cfn = specengine.compile(_reads_library_data, dynamic=True)
    for n in (0, 1, 2):
        _same(cfn, _reads_library_data, torch.rand(n) + 0.5)
    try:
        ACTS.append(torch.exp)
        _same(cfn, _reads_library_data, torch.rand(2) + 0.5)
        QUEUE.append(torch.exp)
        _same(cfn, _reads_library_data, torch.rand(1) + 0.5)
        ARGS.scale = 3
        _same(cfn, _reads_library_data, torch.rand(2) + 0.5)
        USER_DICT["k"] = 5
        _same(cfn, _reads_library_data, torch.rand(0) + 0.5)
    finally:
        ACTS.pop(), QUEUE.pop()
        ARGS.scale, USER_DICT["k"] = 2, 2
    _same(cfn, _reads_library_data, torch.rand(2) + 0.5)  # all back: the first entry serves
    assert counts(cfn) == (5, 3)
    assert specengine.recompile_reasons(cfn)[0] == "len(global ACTS) == 1 failed: len(global ACTS) = 2"


@functools.lru_cache
def _positions(n):
    return torch.arange(n) * 2.0


def test_an_lru_cache_filled_while_tracing_keeps_no_proxy():
    first = specengine.compile(lambda x: x + _positions(x.shape[0]), dynamic=True)
    second = specengine.compile(lambda x: x * _positions(x.shape[0]), dynamic=True)
    for n in (0, 1, 2, 2):  # hashing the size pins it: an entry per size
        x = torch.randn(n)
        torch.testing.assert_close(first(x), x + torch.arange(n) * 2.0)
        assert _positions.cache_info().currsize == 0  # what tracing stored (proxies) is gone
        torch.testing.assert_close(second(x.double()), x.double() * torch.arange(n) * 2.0)  # (read a stale proxy)
    assert counts(first) == (3, 1) and counts(second) == (3, 1)


class _Cached(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(2))

    @functools.cached_property
    def doubled(self):
        return self.w * 2  # computed while tracing: a proxy written into __dict__ without __setattr__

    def forward(self, x):
        return x + self.doubled


def test_a_cached_property_computed_while_tracing_is_refused_and_put_back():
    model = _Cached()
    cfn = specengine.compile(model, dynamic=True)
    with pytest.raises(UnsupportedOpError, match=r"writing _Cached.doubled while tracing without Module.__setattr__"):
        cfn(torch.randn(2))
    assert "doubled" not in vars(model) and specengine.cache_entries(cfn) == []
    with torch.no_grad():
        assert model.doubled is vars(model)["doubled"]  # computed eagerly: a tensor attribute, an input of every call
        _same(cfn, model, torch.randn(2))
    assert counts(cfn) == (1, 0)


# Hooks ---------------------------------------------------------------------------------------------------------


def test_a_hook_writing_a_module_attribute_is_replayed():
    def count(module, args):
        module.calls = module.calls + 1

    model, ref = _Scaled(), _Scaled()
    ref.load_state_dict(model.state_dict())
    for m in (model, ref):
        m.calls = 0
        m.register_forward_pre_hook(count)
    cfn = specengine.compile(model, dynamic=True)
    for n in (0, 1, 2, 2):
        x = torch.randn(n, 3)
        _same(cfn, ref, x)
        assert model.calls == ref.calls
    assert model.calls == 4 and counts(cfn) == (1, 3)


def test_side_effects_in_hooks_are_refused_naming_the_hook():
    calls = []
    n_calls = 0

    def append_hook(module, args, out):
        calls.append(out)

    def count_hook(module, args):
        nonlocal n_calls
        n_calls += 1

    class Counter:
        def __init__(self):
            self.n = 0

        def __call__(self, module, args, out):
            self.n += 1

    counter = Counter()
    stored: list = []

    def store_hook(store, module, args, out):
        store.append(out)

    for hook, register, name in (
        (append_hook, "register_forward_hook", "append_hook"),
        (functools.partial(store_hook, stored), "register_forward_hook", "partial"),
        (count_hook, "register_forward_pre_hook", "count_hook"),
        (counter, "register_forward_hook", "Counter"),
    ):
        model = _Scaled()
        handle = getattr(model.lin, register)(hook)
        cfn = specengine.compile(model, dynamic=True)
        with pytest.raises(UnsupportedOpError, match=rf"{name} of self.lin"):
            cfn(torch.randn(2, 3))
        assert specengine.cache_entries(cfn) == [] and counts(cfn) == (0, 0)
        handle.remove()
    assert calls == [] and stored == [] and n_calls == 0 and counter.n == 0


HOOK_CALLS = 0


def _global_counting_hook(module, args, out):
    global HOOK_CALLS
    HOOK_CALLS += 1


def test_a_global_assigned_by_a_global_hook_is_refused_and_put_back():
    model = _Scaled()
    handle = torch.nn.modules.module.register_module_forward_hook(_global_counting_hook)
    try:
        cfn = specengine.compile(model, dynamic=True)
        with pytest.raises(UnsupportedOpError, match=r"the global forward hook _global_counting_hook: global HOOK"):
            cfn(torch.randn(2, 3))
    finally:
        handle.remove()
    assert HOOK_CALLS == 0 and specengine.cache_entries(cfn) == []


def test_watched_config_class_stays_traceable_by_dynamo_and_is_wrapped_once():
    """A watched object's class keeps one bumping __setattr__, and torch.compile still traces writes to it."""
    from specengine.prologue import structure

    class Flags:
        def __init__(self):
            self.on = False

    flags = Flags()
    structure._watch_object(flags)
    structure._watch_object(Flags())
    assert Flags.__setattr__ is structure._object_setattr  # not a wrapper of a wrapper
    before = structure.EPOCH[0]
    flags.on = True
    assert structure.EPOCH[0] != before

    def f(x):
        flags.on = x.shape[0] > 1
        return x + 1

    torch._dynamo.reset()
    out = torch.compile(f, backend="eager")(torch.ones(2))
    torch.testing.assert_close(out, torch.full((2,), 2.0))
    assert flags.on is True


class _Gain:
    def __init__(self):
        self.scale = 2.0


GAIN = _Gain()


def test_config_write_under_dynamo_is_seen_and_does_not_recompile_dynamo():
    """torch.compile writing a config object specengine watches: specengine sees the write (the entry compiled
    for the old value is not served), and dynamo does not guard on the counter (one graph, not one per write)."""

    def f(x):
        return x * GAIN.scale

    def g(x):
        GAIN.scale = 3.0
        return x + 1

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    cfn, tg, x = specengine.compile(f, dynamic=True), torch.compile(g, backend=backend), torch.ones(2)
    expected = []
    for write in ("eager", "dynamo", "eager", "dynamo"):  # scale 2, 3, 2, 3: the second round hits
        if write == "eager":
            GAIN.scale = 2.0
        else:
            tg(x)
        expected.append(GAIN.scale)
        torch.testing.assert_close(cfn(x), f(x))
    assert expected == [2.0, 3.0, 2.0, 3.0]
    assert counts(cfn) == (2, 2) and len(graphs) == 1
