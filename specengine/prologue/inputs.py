"""Input specs: what a compiled entry assumes about each input, and the symbols its sizes and ints get.

Specs are built from one call's arguments. Every tensor dim and every int input gets a symbol; the
dynamic mode only decides each symbol's range (a pinned range `[hint, hint]` under `dynamic=False`).
"""

from __future__ import annotations

import collections
import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

from specengine.codegen import call_signature, callable_target, check_call, module_of
from specengine.errors import UnsupportedOpError
from specengine.ir.literals import exact_key
from specengine.marks import Mark, marks_of
from specengine.ops.layouts import example_layout, formats_of
from specengine.prologue.classes import ClassGuard, input_classes
from specengine.prologue.external import has_value_semantics, unwrap
from specengine.prologue.state import StateBuilder, bound, captured

Range = tuple[int | None, int | None]


@dataclass(frozen=True)
class TensorSpec:
    path: str
    local: str
    type: type
    dtype: torch.dtype
    device: torch.device
    requires_grad: bool
    symbols: tuple[str, ...]
    contiguous: bool = True
    formats: tuple = ()  # (memory format, is_contiguous in it), for guarded `is_contiguous(memory_format=...)`
    attrs: dict | None = field(default=None, repr=False, compare=False)  # the example's Python attributes (or None)


@dataclass(frozen=True)
class IntSpec:
    path: str
    local: str
    symbol: str


@dataclass(frozen=True)
class FloatSpec:
    path: str
    local: str
    symbol: str


@dataclass(frozen=True)
class ConstSpec:
    path: str
    local: str
    value: Any

    def __repr__(self) -> str:  # (part of an entry's static key; never the value's own repr)
        return f"ConstSpec({self.path!r}, {self.local!r}, {exact_key(self.value)!r})"


@dataclass(frozen=True)
class AliasSpec:
    """An argument that is the very tensor of an earlier argument (`f(x, x)`): the same proxy, and `a is b` holds."""

    path: str
    local: str
    of: str  # the local of the earlier argument
    what: str = "tensor"  # or "object": a list, dict or plain object reached twice (one shadow while tracing)


@dataclass(frozen=True)
class NodeSpec:
    """A container that torch.utils._pytree flattens (list, tuple, dict, namedtuple, OrderedDict, ...).

    `keys` are the children's key paths as Python text (`[0]`, `['w']`, `.x`); `context` is pytree's
    flatten context (dict keys, the namedtuple class), which unflattening the proxies uses.
    """

    path: str
    local: str
    type: type
    node_type: Any  # pytree's registry key (the `namedtuple` function for namedtuples)
    context: Any
    keys: tuple[str, ...]
    children: tuple
    state: Any = None  # a user container's own state (`state_recipe`), rebuilt without running its code


@dataclass(frozen=True)
class ObjectSpec:
    """A plain Python object (an instance of a user class, such as a KV cache) read and mutated through its attributes.

    `keys` are `.attr` texts, one per entry of its `__dict__`; `children` their specs. Tracing sees a shadow copy
    (`objects.py`), never the user's object; what the trace changed in it is written back after each call.
    """

    path: str
    local: str
    type: type
    keys: tuple[str, ...]
    children: tuple


@dataclass
class InputSpecs:
    """The inputs of one call: a spec per parameter, plus the symbols and their hints and ranges."""

    signature: inspect.Signature
    params: tuple  # one spec per parameter, in signature order
    state: tuple = ()  # an nn.Module's parameters, buffers and plain attributes (paths start with `self`)
    module: Any = None
    marks: dict[str, Mark] = field(default_factory=dict)  # symbol -> mark_dynamic of its dim
    access: dict[str, str] = field(default_factory=dict)  # local of module state -> fast code reaching it
    hints: dict[str, int] = field(default_factory=dict)
    ranges: dict[str, Range] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # symbol -> Python text over input names
    captured: list = field(default_factory=list)  # globals and closure variables the trace read (effects.py)
    roots: dict[str, Any] = field(default_factory=dict)  # prologue globals that state is read from ("self": module)
    slots: dict[str, list] = field(default_factory=dict)  # local of a state tensor -> the places holding it
    modules: list = field(default_factory=list)  # (path, prologue global, module) of each module root
    promoted: frozenset = frozenset()  # (id(module), name) of int attributes the program assigns
    structure: list = field(default_factory=list)  # a StructureGuard per module root (prologue/structure.py)
    static_symbols: set[str] = field(default_factory=set)  # symbols of state (left out of the dispatch index)
    writes: list = field(default_factory=list)  # state updates the trace makes (capture/writes.py)
    external: list = field(default_factory=list)  # ObjGuards: bound self, defaults, partials (prologue/external.py)
    lifted: list = field(default_factory=list)  # (proxy, tensor): tensors closed over from outside (ops/outside.py)
    layout_facts: list = field(default_factory=list)  # (tensor local, memory format, bool) (ops/layouts.py)
    attr_facts: list = field(default_factory=list)  # (tensor local, attribute, value read) (capture/tensor_objects.py)
    mutables: dict = field(default_factory=dict)  # id -> (spec, value): lists, dicts, plain objects passed in
    outside_ids: frozenset = frozenset()  # ids of the mutable objects reachable from outside (capture/mutations.py)
    layouts: dict = field(default_factory=dict)  # tensor local -> its example layout (ops/overlap.layout_of)

    def leaves(self, state: bool = True) -> list:
        """Tensor, int and symbolic float specs, depth first (the order of the traced function's parameters);
        with `state=False`, those of the arguments only."""
        out: list = []

        def visit(spec: Any) -> None:
            if isinstance(spec, (TensorSpec, IntSpec, FloatSpec)):
                out.append(spec)
            for child in getattr(spec, "children", ()):
                visit(child)

        for p in self.params + (self.state if state else ()):
            visit(p)
        return out


_MAX_OBJECT_LEAVES = 512  # a bigger object graph stays one constant, guarded by identity


def plain_instance(value: Any) -> bool:
    """Whether `value` is an instance of a plain user class whose state is its `__dict__` (a cache, a dataclass).

    Such an object is an input through its attributes: tensors, numbers, containers and nested plain instances
    (a graph of at most _MAX_OBJECT_LEAVES values, without cycles). Other objects stay constants (by identity).
    """
    return _plain_size(value, set()) is not None


def _plain_size(value: Any, active: set) -> int | None:
    cls = type(value)
    if cls.__new__ is not object.__new__ or cls.__module__.split(".")[0] in ("builtins", "torch", "typing"):
        return None
    if isinstance(value, (type, torch.nn.Module, torch.Tensor)) or id(value) in active:
        return None
    attrs = getattr(value, "__dict__", None)
    if type(attrs) is not dict or any(_slots(c) for c in cls.__mro__[:-1]):
        return None
    if not all(type(a) is str and a.isidentifier() and not _data_descriptor(cls, a) for a in attrs):
        return None
    active.add(id(value))
    try:
        total = 0
        for v in attrs.values():
            for leaf in pytree.tree_leaves(v):
                total += _plain_size(leaf, active) or 1 if hasattr(leaf, "__dict__") else 1
        return total if total <= _MAX_OBJECT_LEAVES else None
    finally:
        active.discard(id(value))


def _slots(cls: type) -> set:
    """The slots a class adds besides `__dict__` and `__weakref__` (`__slots__ = ()`, as in ABC, adds none)."""
    slots = vars(cls).get("__slots__", ())
    return set([slots] if isinstance(slots, str) else slots) - {"__dict__", "__weakref__"}


def _data_descriptor(cls: type, attr: str) -> bool:
    d = getattr(cls, attr, None)
    return d is not None and (hasattr(type(d), "__set__") or hasattr(type(d), "__delete__"))


def _local_name(path: str) -> str:
    return re.sub(r"\W+", "_", path).strip("_") or "x"


class _Builder:
    def __init__(self, dynamic: bool | None, auto_dynamic: frozenset[str]):
        self.dynamic = dynamic
        self.auto_dynamic = auto_dynamic
        self.specs: InputSpecs | None = None
        self.locals: set[str] = set()
        self.n_dims = 0
        self.objects: set[int] = set()
        self.static = False  # building state (module parameters...): static shapes
        self.tensors: dict[int, TensorSpec] | None = {}  # arguments by identity (None: module state, deduped there)

    def local(self, path: str) -> str:
        base = name = _local_name(path)
        k = 0
        while name in self.locals or re.fullmatch(r"[sit]\d+", name):
            k += 1
            name = f"{base}_{k}"
        self.locals.add(name)
        return name

    def symbol(self, name: str, hint: int, source: str, lo: int | None, mark: Mark | None = None) -> str:
        """A symbol for one size or int; its range says how dynamic it is (a pinned range: static)."""
        specs = self.specs
        specs.hints[name] = hint
        specs.sources[name] = source
        if self.static:
            specs.static_symbols.add(name)
        if mark is not None and mark.dynamic:
            specs.marks[name] = mark  # its min, max and multiple_of become guards, not assumed ranges
            specs.ranges[name] = (lo, None)
        elif mark is not None or not self._dynamic(source):
            specs.ranges[name] = (hint, hint)
        else:
            specs.ranges[name] = (lo, None)
        return name

    def _dynamic(self, source: str) -> bool:
        if self.static:
            return False  # module state has static shapes
        return self.dynamic is True or (self.dynamic is None and source in self.auto_dynamic)

    def build_dynamic_int(self, path: str, value: int) -> IntSpec:
        """A symbolic int whatever the dynamic mode (an int attribute that the program assigns)."""
        local = self.local(path)
        self.specs.hints[local], self.specs.sources[local], self.specs.ranges[local] = value, path, (None, None)
        self.specs.static_symbols.add(local)  # state: not part of the dispatch index
        return IntSpec(path, local, local)

    def build(self, path: str, value: Any) -> Any:
        local = self.local(path)
        if isinstance(value, torch.Tensor) and self.tensors is not None and id(value) in self.tensors:
            return AliasSpec(path, local, self.tensors[id(value)].local)
        if isinstance(value, torch.Tensor):
            if value.is_nested or value.is_quantized:
                kind = "nested" if value.is_nested else "quantized"
                raise UnsupportedOpError(f"a {kind} tensor input", f"argument {path}", "only strided (dense) tensors "
                                         "are traced; pass its dense components")  # fmt: skip
            if value.layout is not torch.strided:
                raise UnsupportedOpError(f"a {value.layout} tensor input", f"argument {path}", "only strided (dense) tensors are "
                                         "traced; convert it with .to_dense() before the call")  # fmt: skip
            syms, marks = [], marks_of(value)
            for d, size in enumerate(value.shape):
                name = f"s{self.n_dims}"
                self.n_dims += 1
                syms.append(self.symbol(name, int(size), f"{path}.shape[{d}]", 0, marks.get(d)))
            attrs = getattr(value, "__dict__", None)  # (read by name, by value: capture/tensor_objects.py)
            spec = TensorSpec(path, local, type(value), value.dtype, value.device, value.requires_grad, tuple(syms),
                              value.is_contiguous(), formats_of(value), dict(attrs) if attrs else None)  # fmt: skip
            self.specs.layouts[local] = example_layout(value)
            if self.tensors is not None:
                self.tensors[id(value)] = spec
            return spec
        if type(value) is int:
            return IntSpec(path, local, self.symbol(local, value, path, None))
        if type(value) is float and self._dynamic(path):
            self.specs.hints[local], self.specs.sources[local] = value, path
            return FloatSpec(path, local, local)
        seen = self.specs.mutables.get(id(value)) if self.tensors is not None else None
        if seen is not None:  # a list, dict or plain object reached a second time: the same shadow
            return AliasSpec(path, local, seen[0].local, "object")
        node = _pytree_node(value)
        if node is not None:
            keyed, context = node.flatten_with_keys_fn(value)
            keys = tuple(str(k) for k, _ in keyed)
            children = tuple(self.build(f"{path}{k}", v) for k, (_, v) in zip(keys, keyed))
            recipe = state_recipe(value, [v for _, v in keyed])
            spec = NodeSpec(path, local, type(value), pytree._get_node_type(value), context, keys, children, recipe)
            return self._mutable(spec, value) if isinstance(value, (list, dict)) else spec
        if id(value) not in self.objects and plain_instance(value):
            self.objects.add(id(value))  # (a cycle back to an object being built stays a constant)
            attrs = vars(value)
            keys = tuple(f".{a}" for a in attrs)
            children = tuple(self.build(f"{path}{k}", v) for k, v in zip(keys, attrs.values()))
            self.objects.discard(id(value))
            return self._mutable(ObjectSpec(path, local, type(value), keys, children), value)
        return ConstSpec(path, local, value)

    def _mutable(self, spec: Any, value: Any) -> Any:
        if self.tensors is not None:  # an argument (not module state): its aliases share its shadow
            self.specs.mutables[id(value)] = (spec, value)
        return spec


_OWN_NODES = ("builtins", "collections", "torch")


def state_recipe(value: Any, leaves: list) -> tuple | None:
    """How to rebuild a user-registered container (transformers' `ModelOutput`) around proxies without running its
    `__init__`/`__post_init__` on them: `(items, attrs)`, each `(key, leaf index or None)`, where its dict items are
    leaves and its attributes are leaves or None (the pytree context, which the prologue checks, fixes which).
    None where the object holds anything else: pytree's own unflatten rebuilds it."""
    if type(value).__module__.split(".")[0] in _OWN_NODES or isinstance(value, tuple):
        return None
    index = {id(v): i for i, v in reversed(list(enumerate(leaves)))}
    items = tuple((k, index.get(id(v), -1)) for k, v in dict.items(value)) if isinstance(value, dict) else ()
    attrs = tuple((a, None if v is None else index.get(id(v), -1)) for a, v in getattr(value, "__dict__", {}).items())
    used = {i for _, i in items + attrs}
    if -1 in used or not all(type(k) is str for k, _ in items) or used - {None} != set(range(len(leaves))):
        return None
    if not isinstance(getattr(value, "__dict__", None), dict) and not items:
        return None
    return items, attrs


def _pytree_node(value: Any) -> Any:
    """torch's pytree node description for a container whose children can be reached by key paths, or None."""
    if value is None or isinstance(value, torch.Tensor):
        return None
    node = pytree.SUPPORTED_NODES.get(pytree._get_node_type(value))
    if node is None or node.flatten_with_keys_fn is None:
        return None
    keyed, _ = node.flatten_with_keys_fn(value)
    plain = (pytree.SequenceKey, pytree.GetAttrKey)
    if all(isinstance(k, plain) or (isinstance(k, pytree.MappingKey) and type(k.key) in (str, int)) for k, _ in keyed):
        return node
    return None


def describe_inputs(fn: Callable, args: tuple, kwargs: dict, dynamic: bool | None,
                    auto_dynamic: frozenset[str] = frozenset(), promoted: frozenset = frozenset()) -> InputSpecs:  # fmt: skip
    """Specs for one call of `fn`; raises TypeError for a bad call, as calling `fn` would.

    Args:
        fn: the compiled function or module.
        args: the call's positional arguments.
        kwargs: the call's keyword arguments.
        dynamic: True, False or None (automatic: sizes and ints in `auto_dynamic` are symbolic).
        auto_dynamic: sources (e.g. "x.shape[0]", "n") that changed between calls, under `dynamic=None`.
        promoted: (id(module), name) of int module attributes that the program assigns: symbolic inputs.
    """
    check_call(fn, args, kwargs)
    signature = call_signature(fn)
    bound = signature.bind(*args, **kwargs)
    given = set(bound.arguments)
    bound.apply_defaults()
    builder = _Builder(dynamic, auto_dynamic)
    builder.specs = specs = InputSpecs(signature, ())
    for p in signature.parameters.values():
        builder.locals.add(p.name)
    specs.params = tuple(_param_spec(builder, p, bound.arguments[p.name], p.name not in given)
                         for p in signature.parameters.values())  # fmt: skip
    specs.promoted = promoted
    specs.state = _state_specs(builder, fn, promoted)
    specs.external = unwrap(callable_target(fn))[1] + specs.external  # (module attribute contents first)
    classes = input_classes(callable_target(fn), specs.params)
    if classes:
        specs.structure.append(ClassGuard(classes, "the inputs"))
    return specs


def _state_specs(builder: _Builder, fn: Callable, promoted: frozenset) -> tuple:
    """Module parameters, buffers and tensor attributes, and tensors and modules read from outside the arguments."""
    builder.tensors, builder.static = None, True  # state has static shapes; tied tensors are deduplicated there
    sb = StateBuilder(builder, promoted)
    specs = builder.specs
    module = module_of(fn)  # compile(model) and compile(model.forward)
    if module is not None:
        specs.module = module
        sb.module(module, "self", "self")
    target = callable_target(fn)
    sb.external(bound(target, specs.roots))
    sb.external(captured(unwrap(target)[0], specs.roots))
    sb.external((c.path, "", None, c.value) for c in _module_arguments(specs.params))
    return tuple(sb.out)


def _module_arguments(params: tuple) -> list[ConstSpec]:
    """Modules passed as arguments (constants, by identity): their parameters and buffers are state inputs too."""
    out, todo = [], list(params)
    while todo:
        spec = todo.pop(0)
        if isinstance(spec, ConstSpec) and isinstance(spec.value, torch.nn.Module):
            out.append(spec)
        todo.extend(getattr(spec, "children", ()))
    return out


def _param_spec(builder: _Builder, p: inspect.Parameter, value: Any, defaulted: bool = False) -> Any:
    builder.locals.discard(p.name)
    if p.kind is inspect.Parameter.VAR_POSITIONAL:
        return builder.build(p.name, tuple(value))
    if p.kind is inspect.Parameter.VAR_KEYWORD:
        return builder.build(p.name, dict(value))
    if defaulted and _shared_default(value):
        # a mutable default (`def f(x, table=[...])`) is one object shared by every call, reached through
        # `f.__defaults__`: read as it is, checked by fingerprint (prologue/contents.py), not traced as a copy
        return ConstSpec(p.name, builder.local(p.name), value)
    return builder.build(p.name, value)


def _shared_default(value: Any) -> bool:
    """A list, dict, deque, a tuple holding one, or a plain object, without tensors (tensors in it: traced as a copy,
    as before); a tuple of values stays an input (its ints symbolic)."""
    if isinstance(value, (list, dict, collections.deque)) or (type(value) is tuple and not has_value_semantics(value)):
        return not any(isinstance(leaf, torch.Tensor) for leaf in pytree.tree_leaves(value))
    return plain_instance(value) and not any(
        isinstance(leaf, torch.Tensor) for leaf in pytree.tree_leaves(list(vars(value).values()))
    )
