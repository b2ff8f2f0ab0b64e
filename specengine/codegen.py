"""The one helper through which generated Python source becomes a function.

Every generated program is registered in `linecache`, so tracebacks and `inspect` show its source.
"""

from __future__ import annotations

import inspect
import itertools
import linecache
import weakref
from typing import Any, Callable

import torch
import torch.nn.modules.module as mm

_counter = itertools.count()


def exec_source(source: str, name: str, globals_: dict[str, Any]) -> Callable:
    """Compile `source`, which defines a function called `name`, and return that function.

    Args:
        source: Python source text of a module defining `name`.
        name: the function to return.
        globals_: the module globals the source runs with (copied).

    Returns:
        The function object; its code's filename is a `<specengine-...>` entry in `linecache`, removed when
        the function is collected (compiled functions that are deleted leave nothing behind).
    """
    filename = f"<specengine-{name}-{next(_counter)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    namespace = dict(globals_)
    exec(compile(source, filename, "exec"), namespace)
    fn = namespace[name]
    weakref.finalize(fn, linecache.cache.pop, filename, None)  # the source lives as long as the function
    return fn


class _Name:
    """Prints as a bare name (used to print defaults in a generated signature)."""

    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return self.name


def signature_source(sig: inspect.Signature, globals_: dict[str, Any]) -> str:
    """`sig` as Python source, e.g. "(a, b=_default_b, *args)"; defaults are stored in `globals_`."""
    params = []
    for p in sig.parameters.values():
        if p.default is not inspect.Parameter.empty:
            globals_[f"_default_{p.name}"] = p.default
            p = p.replace(default=_Name(f"_default_{p.name}"))
        params.append(p.replace(annotation=inspect.Parameter.empty))
    return str(sig.replace(parameters=params, return_annotation=inspect.Signature.empty))


def callable_target(fn: Any) -> Callable:
    """What a compiled `fn` is called like: an nn.Module's bound `forward`, else `fn` itself."""
    return fn.forward if isinstance(fn, torch.nn.Module) else fn


def module_of(fn: Any) -> Any:
    """The nn.Module whose parameters and buffers are inputs: `fn` itself, or the module of a bound method
    (`specengine.compile(model.forward)`, which `model.forward = specengine.compile(model.forward)` installs)."""
    if isinstance(fn, torch.nn.Module):
        return fn
    owner = getattr(fn, "__self__", None)
    return owner if isinstance(owner, torch.nn.Module) and callable(getattr(fn, "__func__", None)) else None


def call_signature(fn: Any) -> inspect.Signature:
    """The signature `fn` is really called with: a decorator's own (`*args, **kwargs`), not the one it wraps.

    Arguments are then passed on as the caller passed them (keywords as keywords, omitted ones omitted), which is
    what a wrapper that reads its `kwargs` (transformers' config defaults) needs, and the prologue checks it.
    """
    if _call_hooks(fn):
        return _AS_CALLED
    return inspect.signature(callable_target(fn), follow_wrapped=False)


_AS_CALLED = inspect.Signature([inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
                                inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)])  # fmt: skip


def _call_hooks(fn: Any) -> bool:
    """Whether `Module.__call__` of `fn` runs forward hooks or pre-hooks (its own or global ones): they see the
    positional arguments and keywords as the caller passed them, so the call is not bound to `forward`'s
    signature (a default filled in would reach a pre-hook as a positional argument)."""
    if not isinstance(fn, torch.nn.Module):
        return False
    names = ("_forward_pre_hooks", "_forward_hooks")
    return any(getattr(fn, n, None) for n in names) or any(getattr(mm, "_global" + n, None) for n in names)


def function_name(fn: Any) -> str:
    """The name generated code uses for `fn`, so Python's own messages (arity errors) read naturally."""
    name = getattr(callable_target(fn), "__name__", "")
    return name if name.isidentifier() else "prologue"


def check_call(fn: Callable, args: tuple, kwargs: dict) -> None:
    """Raise the TypeError Python would raise for a bad call of `fn` (wrong arity, unknown keyword)."""
    glb: dict[str, Any] = {}
    name = function_name(fn)
    sig = signature_source(call_signature(fn), glb)
    stub = exec_source(f"def {name}{sig}:\n  return None\n", name, glb)
    stub(*args, **kwargs)
