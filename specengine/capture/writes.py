"""Module attribute writes in `forward`, reproduced by every cached call (input lists, dicts and plain objects that
the program changes are written back by `capture/objects.py`).

While tracing, `Module.__setattr__` (patched by `prologue/structure.py`) hands writes on the traced modules to a
recorder: the write is performed, so `forward` reads it back, and undone when tracing ends, also on error, so no
proxy is left on a module. Each becomes a `Write` whose final value the computation returns; the entry assigns it
after every call. `self.steps += 1` on an int attribute makes the compile trace again with the attribute as a
symbolic input (`Promote`, once for all the int attributes the trace assigns). Parameters, submodules, other
objects and `del self.x` are refused.
"""

from __future__ import annotations

import contextvars
import os
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
from torch.utils import _pytree as pytree

from specengine.errors import UnsupportedOpError
from specengine.ir.proxies import NumberProxy, TensorProxy, unsupported
from specengine.prologue import structure
from specengine.prologue.external import has_value_semantics

_MISSING = structure._MISSING
_recorder: contextvars.ContextVar[Any] = contextvars.ContextVar("specengine_writes", default=None)


@dataclass(frozen=True)
class Write:
    """One module attribute write: `name` of module `obj`, in its `target` table ("__dict__" or "_buffers");
    `value` is the final value, as proxies while tracing."""

    kind: str
    target: str
    value: Any
    obj: Any = None
    name: str = ""
    bump: bool = False  # the attribute is part of the module structure fingerprint: applying it bumps EPOCH


def with_writes(computation: Callable, writes: list[Write]) -> Callable:
    """Wrap a computation that returns `(output, values)`: assign each value to its module attribute, return the
    output. A new attribute, or one that is part of the structure fingerprint, bumps the structure counter."""
    if not writes:
        return computation
    writes = tuple(writes)

    def run(*inputs: Any) -> Any:
        out, values = computation(*inputs)
        for w, v in zip(writes, values):
            table = w.obj._buffers if w.target == "_buffers" else w.obj.__dict__
            if w.bump or w.name not in table:
                structure.bump()
            structure.put(table, w.name, v)  # (without a second bump)
        return out

    return run


class Promote(Exception):  # noqa: N818 - a signal, not an error
    """Int module attributes that the program assigns (`keys`): compile again with them as symbolic inputs."""

    def __init__(self, keys: frozenset):
        super().__init__(keys)
        self.keys = keys


class _Recorder:
    """Attribute writes on the traced modules: performed (forward reads them back), undone when tracing ends."""

    def __init__(self, modules: set[int], inputs: set[tuple[int, str]], promoted: frozenset):
        self.modules, self.inputs, self.promoted = modules, inputs, promoted
        self.saved: dict[tuple[int, str], tuple] = {}
        self.pending: set[tuple[int, str]] = set()  # int attributes assigned that are to be promoted

    def setattr(self, m: torch.nn.Module, name: str, value: Any) -> bool:
        if id(m) not in self.modules:
            return False
        if name in m._modules and m._modules[name] is value:
            return True  # `self.lin = self.lin.to(dtype)` that changed nothing: eager's write changes nothing
        _check_assignable(m, name, value)
        table = m._buffers if name in m._buffers else m.__dict__
        old = table.get(name, _MISSING)
        key = (id(m), name)
        if type(old) is int and _is_int(value) and key not in self.promoted:
            self.pending.add(key)  # the trace goes on, to find every such attribute in one trace
        self.saved.setdefault(key, (m, name, table, old))
        structure.put(table, name, value)  # undone in finish(): not a structure change
        return True

    def finish(self) -> list[Write]:
        """Undo the writes; return them as state updates (final values) for the computation to reproduce."""
        out = []
        for key, (m, name, table, old) in self.saved.items():
            value = table.get(name, _MISSING)
            if old is _MISSING:
                structure.put(table, name, _MISSING)
            else:
                structure.put(table, name, old)
            kind = "_buffers" if table is m._buffers else "__dict__"
            out.append(Write("attr", kind, value, m, name, bump=key not in self.inputs and kind == "__dict__"))
        return out


_TORCH_CONSTANTS = (torch.dtype, torch.layout, torch.memory_format)  # one object per value: `self.dtype = x.dtype`


def _is_int(v: Any) -> bool:
    return (type(v) is int) or (isinstance(v, NumberProxy) and v.python_type is int)


def _check_assignable(m: torch.nn.Module, name: str, value: Any) -> None:
    what = f"assigning {type(m).__name__}.{name} while tracing"
    if isinstance(m, torch.nn.RNNBase) and name.startswith("_flat_weight"):
        raise unsupported(f"torch.nn.{type(m).__name__} (an RNNBase module)", "its fused kernel and flat-weight "
                          "bookkeeping are not traced; use nn.LSTMCell / nn.GRUCell / nn.RNNCell in a loop over "
                          "time steps")  # fmt: skip
    if name in m._parameters or name in m._modules or isinstance(value, torch.nn.Module):
        raise unsupported(what, "parameters and submodules cannot change inside the compiled function; change "
                          "them outside it (or register a buffer for state)")  # fmt: skip
    for leaf in pytree.tree_leaves(value):
        if not (isinstance(leaf, (TensorProxy, NumberProxy, *_TORCH_CONSTANTS)) or has_value_semantics(leaf)):
            raise unsupported(f"{what} (a {type(leaf).__name__})", "assign tensors, numbers, strings or tuples of "
                              "them, or return the value and assign it outside the compiled function")  # fmt: skip


def on_setattr(m: torch.nn.Module, name: str, value: Any) -> bool:
    """Module.__setattr__'s tracing hook: True when the write was recorded (and must not go through)."""
    rec = _recorder.get()
    return rec is not None and rec.setattr(m, name, value)


def on_apply(m: torch.nn.Module, fn: Callable) -> bool:
    """Module._apply's tracing hook (`Module.to`, `.float()`, `.cpu()`, ...): on a traced module, a conversion that
    leaves every parameter and buffer as it is does nothing (eager's returns the module); any other is refused."""
    rec = _recorder.get()
    if rec is None or id(m) not in rec.modules:
        return False
    with torch._C.DisableTorchFunction():  # (the real tensors: `to` of an unchanged one returns it)
        changed = [n for n, t in (*m.named_parameters(), *m.named_buffers()) if fn(t) is not t]
    if changed:
        raise unsupported(f"{type(m).__name__}.to() (or .float(), .half(), .cpu(), ...) changing {changed[0]} inside "
                          "the compiled function", "convert the module before compiling it, or compile it again "
                          "after converting it outside")  # fmt: skip
    return True


def on_delattr(m: torch.nn.Module, name: str) -> None:
    rec = _recorder.get()
    if rec is not None and id(m) in rec.modules:
        raise unsupported(f"deleting {type(m).__name__}.{name} while tracing", "delete it outside the compiled "
                          "function")  # fmt: skip


@contextmanager
def recording(modules: list, inputs: set[tuple[int, str]], promoted: frozenset) -> Iterator[_Recorder]:
    """Record attribute writes on the trees of `modules` while the program is traced."""
    structure.install()
    structure.trace_setattr[0], structure.trace_delattr[0] = on_setattr, on_delattr
    structure.trace_apply[0] = on_apply
    rec = _Recorder({id(s) for m in modules for s in m.modules()}, inputs, promoted)
    tables = [(s, name, getattr(s, name)) for m in modules for s in m.modules() for name in _TABLES]
    before = [dict(t) for _, _, t in tables]
    token = _recorder.set(rec)
    ok = False
    try:
        yield rec
        ok = True
    except Exception:
        if not rec.pending:
            raise  # (where some are pending, the trace is redone with them inputs: it may go otherwise then)
    finally:
        _recorder.reset(token)
        rec.writes = rec.finish()
        cached = _cache_writes(tables, before) if ok else []
        changed = [(s, name, k) for (s, name, t), old in zip(tables, before) for k in revert_changes(t, old)]
        for t, k in cached if changed else ():  # refused: nothing stays
            t.pop(k, None)
    if rec.pending:
        raise Promote(frozenset(rec.pending))
    if cached and not changed:  # a cached constant kept, as eager keeps it: trace again with it an attribute
        raise Promote(frozenset([None]))
    if changed and ok:  # register_buffer, add_module, `_buffers[k] = ...` in forward: would leave a proxy there
        s, name, k = changed[0]
        code = getattr(type(s).forward, "__code__", None)
        where = f"{code.co_filename}:{code.co_firstlineno}, in {code.co_name}" if code else type(s).__name__
        if name == "__dict__":  # a write that bypassed Module.__setattr__ (a functools.cached_property, __dict__[k])
            raise UnsupportedOpError(f"writing {type(s).__name__}.{k} while tracing without Module.__setattr__ "
                                     "(functools.cached_property, module.__dict__[k] = v, object.__setattr__)", where,
                                     "compute the value in __init__, or assign it (self.x = t), which cached calls "
                                     "reproduce")  # fmt: skip
        raise UnsupportedOpError(f"registering {type(s).__name__}.{name}[{k!r}] while tracing (register_buffer, "
                                 "register_parameter, add_module)", where, "register it in __init__, or assign a "
                                 "tensor attribute (self.x = t), which cached calls reproduce")  # fmt: skip


_TABLES = ("_parameters", "_buffers", "_modules", "__dict__")  # __dict__: writes that bypass __setattr__


def _cache_writes(tables: list, before: list) -> list:
    """Constants written straight into a module's `__dict__` while tracing (a `functools.cached_property` of ints
    and floats, which bypasses `__setattr__`): added to the snapshot, so that they stay, as eager keeps them."""
    kept = []
    for (_, name, t), old in zip(tables, before):
        if name == "__dict__":
            for k in [k for k in t if k not in old and has_value_semantics(t[k])]:
                old[k] = t[k]
                kept.append((t, k))
    return kept


def revert_changes(d: dict, old: dict) -> list:
    """The keys whose value in `d` is not (identically) the one in its snapshot `old`, sorted; `d` is put back."""
    changed = sorted(k for k in set(d) | set(old) if d.get(k, _MISSING) is not old.get(k, _MISSING))
    if changed:
        d.clear()
        d.update(old)
    return changed


@contextmanager
def objects_unchanged(dicts: list[dict], target: Callable) -> Iterator[None]:
    """Attribute writes on plain objects (a bound method's `self`) cannot be intercepted: compare their `__dict__`
    before and after, put it back, and refuse the program if it changed one."""
    before = [(d, dict(d)) for d in dicts]
    failed = True
    try:
        yield
        failed = False
    finally:
        changed = [k for d, old in before for k in revert_changes(d, old)]
    if changed and not failed:
        code = getattr(target, "__code__", None)
        where = f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}" if code else "<unknown>"
        name = getattr(target, "__qualname__", "the method")
        raise UnsupportedOpError(f"assigning self.{changed[0]} in {name} (a plain object, not a module)", where,
                                 "it would happen only while tracing; return the value and assign it outside the "
                                 "compiled function")  # fmt: skip
