"""Module attribute writes across processes (`self.steps += 1`, `self.last = x.sum()`, a buffer's running value):
each write is saved as the path of its module inside the compiled module, the attribute and its table, and rebuilt
on the live module of the new process, where `capture.writes.with_writes` assigns it after every call, as eager
does. Promoted int attributes (read as symbolic inputs, left out of the structure fingerprint) are saved the same
way. A write on a module outside the compiled module has no such path: the entry is then not saved."""

from __future__ import annotations

from typing import Any

import torch

from specengine.capture.writes import Write
from specengine.persist.recipe_base import Context
from specengine.persist.signing import Rejected
from specengine.persist.values import NoRecipe

_TARGETS = ("__dict__", "_buffers")


def _paths(module: Any) -> dict[int, str]:
    """id -> the first path of each submodule of the compiled module ("" for the module itself)."""
    out: dict[int, str] = {}
    if isinstance(module, torch.nn.Module):
        for qual, m in module.named_modules(remove_duplicate=False):
            out.setdefault(id(m), qual)
    return out


def describe_writes(writes: list, ctx: Context) -> list[list]:
    """`[path, table, attribute, bump]` of each write (NoRecipe where a module is not the compiled module's)."""
    paths, out = _paths(ctx.module), []
    for w in writes:
        qual = paths.get(id(w.obj))
        if w.kind != "attr" or w.target not in _TARGETS or qual is None or type(w.name) is not str:
            raise NoRecipe(f"the program assigns {type(w.obj).__name__}.{w.name}, a module that is not the compiled "
                           "module or one of its submodules (compile that module, or pass the value out and assign "
                           "it outside the compiled function)")  # fmt: skip
        out.append([qual, w.target, w.name, bool(w.bump)])
    return out


def rebuild_writes(saved: list, ctx: Context) -> list[Write]:
    """The writes of a saved entry, on the live submodules of this process's compiled module."""
    if saved and not isinstance(ctx.module, torch.nn.Module):
        raise Rejected("the entry assigns module attributes and needs the compiled module")
    out = []
    for qual, target, name, bump in saved:
        if target not in _TARGETS or type(name) is not str or type(bump) is not bool:
            raise Rejected(f"a write of {qual!r}.{name!r} in {target!r}")
        out.append(Write("attr", target, None, ctx.module.get_submodule(qual), name, bump))
    return out


def describe_skip(skip: frozenset, root: Any) -> list[list[str]]:
    """The promoted int attributes `(id(module), name)` of a structure guard's tree, as `[path, name]`."""
    paths = _paths(root)
    return sorted([paths[i], name] for i, name in skip if i in paths)


def rebuild_skip(saved: list, root: Any) -> frozenset:
    return frozenset((id(root.get_submodule(qual)), name) for qual, name in saved)
