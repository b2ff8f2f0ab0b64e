"""Mutable inputs and rich outputs: shadows while tracing, write-back after each call, outputs of their own type.

- **Shadows.** A plain object among the inputs (an instance of a user class such as transformers' `DynamicCache`,
  see `inputs.ObjectSpec`) and every list or dict input are traced as *copies* holding proxies. The user's objects
  are never touched while tracing, so a compile that fails leaves no proxy in them.
- **Write-back.** After tracing, each shadow is compared with its initial state. What the function changed (an
  attribute set to a new tensor, `is_initialized = True`, an item appended) becomes a step that the entry replays
  on the caller's own object after every call, with the computed tensors: the object ends up as eager leaves it.
- **Outputs.** The output is flattened with torch.utils._pytree: registered containers (`ModelOutput`,
  namedtuples, OrderedDict) are rebuilt with their own type around the computed leaves; a shadow comes back as the
  caller's object; a plain object created while tracing (a new cache) is rebuilt from its recorded state. Nothing
  runs `__post_init__` on proxies: the trace itself returns a flat tuple.
"""

from __future__ import annotations

import collections
import collections.abc
import numbers
import sys
import types
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
from torch.utils import _pytree as pytree

from specengine.capture.writes import revert_changes
from specengine.constraints.expr import Expr
from specengine.constraints.floats import FloatExpr
from specengine.ir import context as trace_context
from specengine.ir.base import check_value
from specengine.ir.literals import numpy_array
from specengine.ir.proxies import NumberProxy, Proxy, SymSize, as_original, unflatten_size, unsupported

Build = Callable[[tuple, tuple, dict], Any]  # (computed leaves, caller's objects, per-call memo) -> value
_IMMUTABLE = (bool, int, float, complex, str, bytes, type(None), type(Ellipsis), slice, range, torch.dtype,
              torch.device, torch.layout, torch.memory_format)  # fmt: skip


_WRITABLE_DICTS = (dict, collections.OrderedDict, collections.defaultdict)
_NOT_WATCHED = (type, types.FunctionType, types.MethodType, types.ModuleType, torch.nn.Module, torch.Tensor)


@dataclass
class Shadows:
    """The copies that tracing sees in place of mutable inputs: (spec, shadow, its initial state) each."""

    items: list = field(default_factory=list)
    by_id: dict[int, int] = field(default_factory=dict)
    constants: set[int] = field(default_factory=set)  # ids of constant inputs (guarded by identity)
    params: list = field(default_factory=list)  # every input proxy, in the order created
    watched: list = field(default_factory=list)  # (path, __dict__) of constant arguments that are not plain objects
    outside: list = field(default_factory=list)  # (path, value) of constant arguments (capture/mutations.py walks them)
    rebuilt: set[int] = field(default_factory=set)  # ids of containers among them that tracing itself built

    def constant(self, spec: Any) -> None:
        """A constant argument (guarded by identity); one with attributes is watched: tracing must not change it."""
        self.constants.add(id(spec.value))
        self.outside.append((spec.path, spec.value))
        state = getattr(spec.value, "__dict__", None)
        if type(state) is dict and not isinstance(spec.value, _NOT_WATCHED):
            self.watched.append((spec.path, spec.value, state))

    @contextmanager
    def constants_unchanged(self) -> Iterator[None]:
        """Attribute writes on a constant argument (an object that is not plain) would happen only while tracing
        and could leave proxies in it: its `__dict__` is put back, also on error, and the program is refused."""
        before = [(path, value, state, dict(state)) for path, value, state in self.watched]
        failed = True
        try:
            yield
            failed = False
        finally:
            changed = []
            for path, value, state, old in before:
                diff = revert_changes(state, old)
                if diff:
                    changed.append((path, value, diff[0]))
        if changed and not failed:
            path, value, attr = changed[0]
            raise unsupported(f"changing {path}.{attr} (a {type(value).__name__}, which is not a plain object)",
                              "only plain objects (state in __dict__, no __slots__, default __new__) are written "
                              "back after each call; pass such an object, or return the new value")  # fmt: skip

    def param(self, proxy: Any) -> Any:
        self.params.append(proxy)
        return proxy

    def object(self, spec: Any, values: list) -> Any:
        obj = spec.type.__new__(spec.type)
        obj.__dict__.update(zip((k[1:] for k in spec.keys), values))
        return self._add(spec, obj, dict(obj.__dict__))

    def container(self, spec: Any, value: Any) -> Any:
        """A container argument as tracing sees it (rebuilt by pytree): lists, dicts, OrderedDicts and defaultdicts
        are shadows, written back after each call; a change to another mutable container (a dict subclass) is
        refused (capture/mutations.py compares it, as it does constants)."""
        if type(value) is list:
            return self._add(spec, value, list(value))
        if type(value) in _WRITABLE_DICTS:
            return self._add(spec, value, dict(value))
        if isinstance(value, (list, dict, set)):
            self.outside.append((spec.path, value))
            self.rebuilt.add(id(value))
        return value

    def _add(self, spec: Any, shadow: Any, initial: Any) -> Any:
        self.by_id[id(shadow)] = len(self.items)
        self.items.append((spec, shadow, initial))
        return shadow


@dataclass
class OutputPlan:
    """How an entry turns the computation's flat results into the caller's output and object updates."""

    leaves: list  # the proxies the computation returns, in order
    build: Build  # the caller's output
    steps: list  # write-back steps, each (leaves, objects, memo) -> None
    objects: list[str]  # prologue locals of the caller's objects the steps and the output use

    def wrap(self, computation: Callable, n_params: int) -> Callable:
        build, steps = self.build, tuple(self.steps)

        def entry(*inputs: Any) -> Any:
            results, objects, memo = computation(*inputs[:n_params]), inputs[n_params:], {}
            for step in steps:
                step(results, objects, memo)
            return build(results, objects, memo)

        return entry


def is_plain_output(out: Any, shadows: Shadows) -> bool:
    """Tuples, lists and dicts of proxies and constants: the trace returns them as they are."""
    if id(out) in shadows.by_id:
        return False
    if type(out) in (tuple, list):
        return all(is_plain_output(x, shadows) for x in out)
    if type(out) is dict:
        return all(type(k) is str and is_plain_output(v, shadows) for k, v in out.items())
    return isinstance(out, (Proxy, Expr, FloatExpr)) or type(out) in (bool, int, float, str, type(None))


def plan_outputs(out: Any, shadows: Shadows) -> OutputPlan | None:
    """The output and write-back plan, or None where the output is plain and no input was changed."""
    planner = _Planner(shadows)
    steps = [s for i, item in enumerate(shadows.items) for s in planner.writeback(i, *item)]
    if not steps and is_plain_output(out, shadows):
        return None
    build = planner.value(out)
    return OutputPlan(planner.leaves, build, steps, [shadows.items[i][0].local for i in planner.objects])


class _Planner:
    def __init__(self, shadows: Shadows):
        self.shadows = shadows
        self.leaves: list = []
        self.leaf_index: dict[int, int] = {}
        self.objects: list[int] = []  # shadow indices, in the order the entry receives the caller's objects
        self.active: set[int] = set()

    def writeback(self, i: int, spec: Any, shadow: Any, initial: Any) -> list:
        """Steps that make the caller's object (the `i`-th shadow) what tracing left the shadow as."""
        if isinstance(shadow, list):
            if len(shadow) == len(initial) and all(a is b for a, b in zip(shadow, initial)):
                return []
            return [writeback_step("list", self.object(i), [self.value(v) for v in shadow], [])]
        state = shadow if isinstance(shadow, dict) else vars(shadow)
        changed = [k for k in state if k not in initial or state[k] is not initial[k]]
        removed = [k for k in initial if k not in state]
        if not changed and not removed:
            return []
        fns = [(k, self.value(state[k])) for k in changed]
        return [writeback_step("dict" if isinstance(shadow, dict) else "attrs", self.object(i), fns, removed)]

    def object(self, i: int) -> int:
        if i not in self.objects:
            self.objects.append(i)
        return self.objects.index(i)

    def value(self, v: Any) -> Build:
        if isinstance(v, (Proxy, Expr, FloatExpr)):
            check_value(trace_context.current(), v)  # a proxy a cache kept from an earlier trace
            if isinstance(v, NumberProxy) and v.expr.is_const:
                return _constant(v.expr.value)
            k = self.leaf_index.setdefault(id(v), len(self.leaves))
            if k == len(self.leaves):
                self.leaves.append(v)
            return _described(lambda r, o, m: r[k], "leaf", k)
        i = self.shadows.by_id.get(id(v))
        if i is not None:
            j = self.object(i)
            return _described(lambda r, o, m: o[j], "object", j)
        if as_original(v) is not v:  # `max` as the trace saw it
            return _constant(as_original(v))
        if type(v) is frozenset:  # of hashed (so pinned) values: `frozenset(x.shape)`
            return _constant(_concrete_keys(v))
        if type(v) is slice:  # its bounds may be symbolic (`slice(1, n)`)
            parts = [self.value(p) for p in (v.start, v.stop, v.step)]
            return _described(lambda r, o, m: slice(*(f(r, o, m) for f in parts)), "slice", parts)
        if isinstance(v, _IMMUTABLE) or _immutable_number(v) or id(v) in self.shadows.constants or named_global(v):
            return _constant(v)
        if numpy_array(v):  # computed from guarded values (by contents): a new array per call, as eager returns
            return lambda r, o, m: v.copy()
        if isinstance(v, torch.Tensor):
            raise unsupported("returning a tensor not computed from the inputs",
                              "pass the tensor as an argument, or register it as a module buffer")  # fmt: skip
        if isinstance(v, (types.GeneratorType, collections.abc.Iterator)):
            raise unsupported("returning a generator", "it would be consumed once; return a tuple or list instead")
        node = pytree.SUPPORTED_NODES.get(pytree._get_node_type(v))
        if node is not None:
            children, context = node.flatten_fn(v)
            context = _concrete_keys(context)  # a dict's keys: `{x.shape[0]: y}` returns `{3: y}`
            fns, unflatten = [self.value(c) for c in children], node.unflatten_fn
            if type(v) is torch.Size:
                unflatten = unflatten_size  # torch's pytree rebuilds a torch.Size as a tuple
            build = lambda r, o, m: unflatten([f(r, o, m) for f in fns], context)  # noqa: E731
            return _described(build, "node", pytree._get_node_type(v), context, fns, type(v) is torch.Size)
        return self.new_object(v)

    def new_object(self, v: Any) -> Build:
        """An object the function created (a new cache, a dict subclass): rebuilt from its state on every call."""
        cls, key = type(v), id(v)
        attrs = getattr(v, "__dict__", None)
        if cls.__module__ == "builtins" or (type(attrs) is not dict and not isinstance(v, (dict, list))):
            raise unsupported(f"returning a {cls.__name__}", "return tensors and numbers, containers of them, "
                              "or plain objects (a class instance whose state is its __dict__)")  # fmt: skip
        if key in self.active:
            raise unsupported(f"returning a {cls.__name__} that refers to itself", "return a tree of values")
        self.active.add(key)
        state = [(a, self.value(x)) for a, x in (attrs or {}).items()]
        items = [(_concrete_keys(k), self.value(x)) for k, x in dict.items(v)] if isinstance(v, dict) else None
        elements = [self.value(x) for x in list.__iter__(v)] if isinstance(v, list) else None
        self.active.discard(key)

        return _described(object_build(cls, key, state, items, elements), "new", key, cls, state, items, elements)


def _described(build: Build, *recipe: Any) -> Build:
    """`build` with what it builds as data (`build.recipe`: a kind and its parts, sub-builds included), from which
    the disk cache (specengine/persist) rebuilds it in another process."""
    build.recipe = recipe
    return build


def object_build(cls: type, key: Any, state: list, items: list | None, elements: list | None) -> Build:
    """A new object of `cls` built once per call (memo `key`) without its `__init__`: dict items, list elements and
    `__dict__` entries from their builds."""

    def build(r: tuple, o: tuple, m: dict) -> Any:
        obj = m.get(key)
        if obj is None:
            obj = m[key] = cls.__new__(cls)
            if items is not None:
                dict.update(obj, {k: f(r, o, m) for k, f in items})
            if elements is not None:
                list.extend(obj, [f(r, o, m) for f in elements])
            obj.__dict__.update({a: f(r, o, m) for a, f in state})
        return obj

    return build


def named_global(v: Any) -> bool:
    """A module, or a class or function that its module and qualified name find (not one a call made: no
    `<locals>`): the same object on every call, so an output may hold it as it is (a cache's
    `layer_class_to_replicate = DynamicLayer`)."""
    if isinstance(v, types.ModuleType):
        return sys.modules.get(v.__name__) is v
    if not isinstance(v, (type, types.FunctionType, types.BuiltinFunctionType)):
        return False
    qualname, module = getattr(v, "__qualname__", None), getattr(v, "__module__", None)
    if not isinstance(qualname, str) or not isinstance(module, str) or "<locals>" in qualname:
        return False
    obj: Any = sys.modules.get(module)
    for part in qualname.split("."):
        space = getattr(obj, "__dict__", None)
        obj = space.get(part) if isinstance(space, (dict, types.MappingProxyType)) else None
    return obj is v


def _immutable_number(v: Any) -> bool:
    """Numbers of other types (Fraction, Decimal, numpy scalars, `np.bool_` included): values, returned as they are."""
    np = sys.modules.get("numpy")
    return isinstance(v, numbers.Number) or (np is not None and isinstance(v, np.generic))


def _concrete_keys(k: Any) -> Any:
    """Keys of a returned dict (a pytree context) as Python values: symbolic sizes among them are pinned (their
    hash pinned them already), a tuple of sizes or a shape becomes a tuple or a `torch.Size`."""
    if isinstance(k, NumberProxy):
        return k._value("dict key", "a key of a returned dict needs a concrete value")
    if isinstance(k, SymSize):
        return torch.Size([_concrete_keys(x) for x in k])
    if type(k) in (tuple, list, frozenset):
        return type(k)(_concrete_keys(x) for x in k)
    if isinstance(k, Proxy):
        raise unsupported("returning a dict keyed by a tensor", "key it by a name or an index instead")
    return k


def _constant(v: Any) -> Build:
    return _described(lambda r, o, m: v, "constant", v)


def writeback_step(kind: str, j: int, fns: list, removed: list) -> Callable:
    """A write-back step: make the caller's `j`-th object what tracing left its shadow as: a list's elements
    (`fns`: builds), a dict's items or an object's attributes (`fns`: (key, build) pairs; `removed`: keys).
    `step.recipe` is `(kind, j, fns, removed)`, from which the disk cache rebuilds it."""
    if kind == "list":

        def step(r: tuple, o: tuple, m: dict) -> None:
            o[j][:] = [f(r, o, m) for f in fns]

    else:
        update = _update_dict if kind == "dict" else _update_object

        def step(r: tuple, o: tuple, m: dict) -> None:
            update(o[j], fns, removed, r, o, m)

    step.recipe = (kind, j, fns, removed)
    return step


def _update_object(obj: Any, fns: list, removed: list, r: tuple, o: tuple, m: dict) -> None:
    state = obj.__dict__
    for k in removed:
        state.pop(k, None)
    state.update({k: f(r, o, m) for k, f in fns})


def _update_dict(d: dict, fns: list, removed: list, r: tuple, o: tuple, m: dict) -> None:
    for k in removed:
        d.pop(k, None)
    d.update({k: f(r, o, m) for k, f in fns})
