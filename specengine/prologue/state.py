"""State inputs: tensors the program reads from outside its arguments, and where each lives.

A compiled module's parameters and buffers, the plain tensor attributes of its submodules (`self.t = torch.ones(2)`),
tensors and modules closed over or read as globals, tensors bound by a `functools.partial` or held by a bound
method's `self`: each tensor becomes an input of the computation (read by the prologue on every call, with static
shapes), reached from a *root* object the prologue holds. While tracing, a proxy takes its place in every `Slot`
that holds it (tied tensors: one input, several slots); the slots are restored when tracing ends, even on error.
"""

from __future__ import annotations

import functools
import sys
import types
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from specengine.codegen import module_of
from specengine.ir.literals import show, source_key
from specengine.ir.proxies import unsupported
from specengine.prologue.classes import ClassGuard, user_classes
from specengine.prologue.external import captured_values, user_function
from specengine.prologue.structure import INTERNAL, StructureGuard, config_objects, module_path, put, watch  # noqa: F401


def sharded(module: Any) -> bool:
    """Whether FSDP2 (`fully_shard`) manages `module`: inside a compiled module, a call of it is an opaque call
    (capture/distributed.py), and its parameters (sharded DTensors outside its call) are not inputs."""
    fsdp = getattr(sys.modules.get("torch.distributed.fsdp"), "FSDPModule", None)
    return fsdp is not None and isinstance(module, fsdp)


def _outside_sharded(module: torch.nn.Module) -> list:
    """`module.named_modules()` without the subtrees of the sharded modules strictly inside it."""
    subs, cut = [], []
    for qual, sub in module.named_modules(remove_duplicate=False):
        if any(qual == c or qual.startswith(c + ".") for c in cut):
            continue
        if qual and sharded(sub):
            cut.append(qual)
            continue
        subs.append((qual, sub))
    return subs


@dataclass(frozen=True)
class Slot:
    """A place that holds a state tensor: a dict key, a closure cell (`key` None) or a partial's argument."""

    holder: Any
    key: Any

    def get(self) -> Any:
        if isinstance(self.holder, types.CellType):
            return self.holder.cell_contents
        if isinstance(self.holder, functools.partial):
            where, k = self.key
            return self.holder.args[k] if where == "args" else self.holder.keywords[k]
        return self.holder[self.key]

    def set(self, value: Any) -> None:
        if isinstance(self.holder, types.CellType):
            self.holder.cell_contents = value
        elif isinstance(self.holder, functools.partial):
            p, (where, k) = self.holder, self.key
            func, args, kwds, d = p.__reduce__()[2]
            if where == "args":
                args = args[:k] + (value,) + args[k + 1 :]
            else:
                kwds = {**kwds, k: value}
            p.__setstate__((func, args, kwds, d))
        else:
            put(self.holder, self.key, value)  # the engine's own swap: no structure change


def _all_modules(value: list | tuple | dict) -> bool:
    return all(isinstance(v, torch.nn.Module) for v in (value.values() if type(value) is dict else value))


def _lazy(module: torch.nn.Module, name: str) -> Exception:
    return unsupported(f"a lazy module's uninitialized {name} ({type(module).__name__})", "its shape is made by its "
                       "first call: call the module once eagerly before compiling it")  # fmt: skip


class StateBuilder:
    """Collects state tensors (as specs built by the input builder), their slots, the roots and module roots."""

    def __init__(self, builder: Any, promoted: frozenset = frozenset()):
        self.builder = builder
        self.promoted = promoted  # (id(module), attribute) of ints that forward assigns
        self.promoted_seen: set[int] = set()
        self.specs = builder.specs
        self.by_id: dict[int, Any] = {}  # id(tensor) -> its spec
        self.out: list = []
        self.module_ids: set[int] = set()
        self.tables: dict[int, str] = {}  # id(dict) -> its prologue global (numbered: the source is stable)

    def root(self, name: str, obj: Any) -> str:
        self.specs.roots.setdefault(name, obj)
        return name

    def tensor(self, path: str, read: str, slot: Slot, value: torch.Tensor) -> None:
        spec = self.by_id.get(id(value))
        if spec is None:
            spec = self.by_id[id(value)] = self.builder.build(path, value)
            self.specs.access[spec.local] = read
            self.out.append(spec)
        self.specs.slots.setdefault(spec.local, []).append(slot)

    def module(self, module: torch.nn.Module, path_root: str, glb: str) -> None:
        """Parameters, buffers and plain tensor attributes of every submodule; plain attributes as constants."""
        if id(module) in self.module_ids:
            return
        self.module_ids.add(id(module))
        watch(module)  # first: it replaces the module dicts that the slots below hold
        self.specs.modules.append((path_root, glb, module))
        self.root(glb, module)
        subs = _outside_sharded(module)
        for kind in ("_parameters", "_buffers"):
            for qual, sub in subs:
                table = getattr(sub, kind)
                for name, t in table.items():
                    if isinstance(t, torch.nn.parameter.UninitializedTensorMixin):
                        raise _lazy(sub, name)
                    if t is not None:
                        q = f"{qual}.{name}" if qual else name
                        read = f"{self.table(table)}[{source_key(name)}]"
                        self.tensor(module_path(q, kind, path_root), read, Slot(table, name), t)
        for qual, sub in subs:
            for attr, value in vars(sub).items():
                if not isinstance(attr, str):
                    continue  # (no attribute access reaches it)
                path = f"{module_path(qual, '_modules', path_root)}.{attr}"
                read = f"{self.table(sub.__dict__)}.get({source_key(attr)})"
                if attr in INTERNAL:
                    continue
                if isinstance(value, torch.Tensor):
                    self.tensor(path, read, Slot(sub.__dict__, attr), value)
                elif type(value) in (list, tuple, dict) and value and _all_modules(value):
                    # `self.teacher = [model]` (kept out of the state dict): their state is input as for submodules;
                    # which modules the container holds is part of the structure fingerprint
                    for i, mod in enumerate(value.values() if type(value) is dict else value):
                        self.module(mod, f"{path}[{i}]", f"_root_{len(self.specs.roots)}")
        self.specs.structure.append(StructureGuard(module, path_root, self.promoted))
        every = list(module.named_modules(remove_duplicate=False))  # (a sharded module's forward is traced too)
        configs = list({id(o): o for _, sub in every for o in config_objects(sub)}.values())
        self.specs.structure.append(ClassGuard([type(s) for _, s in every] + user_classes(configs), path_root))
        self._promoted_ints(subs, path_root, glb)

    def table(self, d: dict) -> str:
        """A prologue global holding a module's `__dict__`, `_parameters` or `_buffers` itself: state is read with
        one subscript per call instead of a walk from the root. The structure fingerprint has the tables' ids, and
        replacing one bumps EPOCH, so the prologue reads the module's current tables."""
        name = self.tables.get(id(d))
        if name is None:
            name = self.tables[id(d)] = f"_table{len(self.tables)}"
        return self.root(name, d)

    def _promoted_ints(self, subs: list, path_root: str, glb: str) -> None:
        """Int attributes that `forward` assigns (`self.steps += 1`): inputs read on every call, symbolic."""
        for qual, sub in subs:
            for attr, value in vars(sub).items():
                if (id(sub), attr) in self.promoted and type(value) is int and id(sub) not in self.promoted_seen:
                    path = f"{module_path(qual, '_modules', path_root)}.{attr}"
                    self.builder.static = False
                    spec = self.builder.build_dynamic_int(path, value)
                    self.builder.static = True
                    self.specs.access[spec.local] = f"{self.table(sub.__dict__)}.get({source_key(attr)})"
                    self.specs.slots.setdefault(spec.local, []).append(Slot(sub.__dict__, attr))
                    self.out.append(spec)
            self.promoted_seen.add(id(sub))

    def external(self, found: Iterator[tuple[str, str, Slot, Any]]) -> None:
        """Tensors and modules found outside the arguments: (path, read, slot, value)."""
        for path, read, slot, value in found:
            if isinstance(value, torch.nn.Module):
                self.module(value, path, f"_root_{len(self.specs.roots)}")
            elif isinstance(value, torch.Tensor):
                self.tensor(path, read, slot, value)


def captured(target: Any, roots: dict, limit: int = 64) -> Iterator[tuple[str, str, Slot, Any]]:
    """Globals and closure variables that hold tensors or modules (`roots` gets their holders): those of `target`,
    and of the user functions it reaches through them (helpers, recursively, up to `limit`), also through a
    compiled function (`specengine.compile(model)` called by the function: its module's state is this trace's)."""
    todo, done = [target], set()
    while todo and len(done) < limit:
        fn = todo.pop(0)
        if id(fn) in done:
            continue
        done.add(id(fn))
        for kind, name, value, holder in captured_values(fn):
            value = _compiled_target(value)
            if user_function(value):
                todo.append(value)
            if not isinstance(value, (torch.Tensor, torch.nn.Module)):
                continue
            if kind == "global":
                key = _holder_key(roots, "_user_globals", holder)
                yield name, f"{key}.get({source_key(name)})", Slot(holder, name), value
            else:
                key = _holder_key(roots, "_user_cells", holder)
                yield name[1], f"{key}[{name[0]}].cell_contents", Slot(holder[name[0]], None), value


def _holder_key(roots: dict, base: str, holder: Any) -> str:
    """The compiled function's own globals and closure are `_user_globals` and `_user_cells`; a helper's get a key
    of their own."""
    key = base if roots.setdefault(base, holder) is holder else f"{base}_{id(holder)}"
    roots.setdefault(key, holder)
    return key


def _compiled_target(value: Any) -> Any:
    """What a compiled function (a `CompiledFunction`) runs while tracing: its module, or its plain function."""
    fn = getattr(value, "compiled_target", None) if getattr(type(value), "_specengine_compiled", False) else None
    if fn is not None:
        module = module_of(fn)
        return module if module is not None else unwrap_plain(fn)
    return value


def unwrap_plain(fn: Any) -> Any:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__func__", fn)


def bound(fn: Any, roots: dict) -> Iterator[tuple[str, str, Slot, Any]]:
    """Tensors and modules held by the partials and bound `self` objects `fn` is made of."""
    for _ in range(16):
        if isinstance(fn, functools.partial):
            key = f"_partial_{id(fn)}"
            roots.setdefault(key, fn)
            for i, v in enumerate(fn.args):
                yield f"{key}.args[{i}]", f"{key}.args[{i}]", Slot(fn, ("args", i)), v
            for k, v in fn.keywords.items():
                yield f"{key}.keywords[{show(k)}]", f"{key}.keywords.get({source_key(k)})", Slot(fn, ("keywords", k)), v
            fn = fn.func
        elif isinstance(fn, types.MethodType):
            obj = fn.__self__
            if not isinstance(obj, (torch.nn.Module, type, types.ModuleType)) and isinstance(
                getattr(obj, "__dict__", None), dict
            ):
                key = f"_obj_{id(obj)}"
                roots.setdefault(key, obj.__dict__)
                for attr, v in vars(obj).items():
                    if not isinstance(attr, str):
                        continue
                    yield f"self.{attr}", f"{key}.get({source_key(attr)})", Slot(obj.__dict__, attr), v
            fn = fn.__func__
        else:
            return
