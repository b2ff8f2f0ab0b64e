"""Python side effects while tracing, which would run once (at trace time) and never on cached calls.

Rejected with UnsupportedOpError, where they happen:

- assigning (or deleting) a global of the traced function's module: the module's globals are compared before
  and after tracing;
- changing global torch settings (`torch.set_default_dtype`, `torch.use_deterministic_algorithms`, the random
  state other than by `torch.manual_seed`, ...): wrapped the same way, and compared before and after tracing.

Recorded instead:

- `print`, `warnings.warn`, `logging` calls and `torch.set_printoptions` from the program's code become ops of the
  computation (`capture/effect_ops.py`), run on every call with the values of that call;
- `torch.manual_seed(s)` becomes a bound symbol: the computation seeds where the function did;
- reads of global torch settings (`torch.get_default_dtype()`, `torch.are_deterministic_algorithms_enabled()`, ...)
  are noted on the tracing state: the prologue guards the values read.

Changes to Python objects reachable from the function (a global list, a module's config, a hook's closure) are
undone and refused by `capture/mutations.py`; lists, dicts and plain objects passed as arguments are written back
after every call (`capture/objects.py`). Effects outside the Python heap (writing a file, a socket) cannot be seen:
they run only while tracing (docs/python-semantics.md, "Python state, modules and containers").
"""

from __future__ import annotations

import dis
import os
import threading
import types
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch

from specengine.capture import (
    autograd_functions,
    effect_ops,
    effect_strings,
    exceptions,
    module_reads,
    tensor_objects,
    torch_settings,
)
from specengine.errors import UnsupportedOpError
from specengine.ir import context
from specengine.ir.proxies import HOOKS, unsupported
from specengine.prologue.external import captured_values, code_objects  # noqa: F401 - captured_values re-exported
from specengine.provenance import code_site

_lock = threading.Lock()
_depth = 0
# Global RNG state functions: recorded while tracing (the computation runs them on every call, in program order,
# as eager does); the recorded op is torch.random's own function (torch._dynamo wraps torch.manual_seed).
_RNG_FUNCTIONS = ("manual_seed", "get_rng_state", "set_rng_state")
_real_rng = {name: getattr(torch.random, name) for name in _RNG_FUNCTIONS}
# The CUDA generators likewise (torch.cuda and torch.cuda.random); seeding them at random is refused.
_CUDA_RNG = ("manual_seed", "manual_seed_all", "get_rng_state", "set_rng_state")
_CUDA_REFUSED = ("seed", "seed_all", "initial_seed", "get_rng_state_all", "set_rng_state_all")
_saved_rng: dict[str, tuple] = {}
_MISSING = object()


def _traced_rng(name: str) -> Callable:
    def traced(*args: Any, **kwargs: Any) -> Any:
        if context.current() is not None:
            return HOOKS.dispatch_torch(_real_rng[name], args, kwargs)
        return _real_rng[name](*args, **kwargs)  # (never a saved wrapper: torch._dynamo may wrap this function)

    traced.__name__ = name
    return traced


_TRACED_RNG = {name: _traced_rng(name) for name in _RNG_FUNCTIONS}


def _traced_cuda(name: str) -> Callable:
    real = getattr(torch.cuda.random, name)

    def traced(*args: Any, **kwargs: Any) -> Any:
        if context.current() is not None:
            if name in _CUDA_REFUSED:
                raise unsupported(f"torch.cuda.{name}", "the CUDA random state it reads or sets would be used only "
                                  "while tracing; call it outside the compiled function")  # fmt: skip
            return HOOKS.dispatch_torch(real, args, kwargs)
        return real(*args, **kwargs)

    traced.__name__ = name
    traced.__wrapped__ = real
    return traced


_TRACED_CUDA = {name: _traced_cuda(name) for name in _CUDA_RNG + _CUDA_REFUSED}


def _swap_rng(install: bool) -> None:
    for name, traced in _TRACED_CUDA.items():
        for module in (torch.cuda, torch.cuda.random):
            if install and getattr(module, name) is traced.__wrapped__:
                setattr(module, name, traced)
            elif not install and getattr(module, name) is traced:
                setattr(module, name, traced.__wrapped__)
    for name in _RNG_FUNCTIONS:
        if install and getattr(torch, name) is not _TRACED_RNG[name]:
            _saved_rng[name] = (getattr(torch, name), getattr(torch.random, name))
            setattr(torch, name, _TRACED_RNG[name])
            setattr(torch.random, name, _TRACED_RNG[name])
        elif not install and name in _saved_rng:
            for module, saved in zip((torch, torch.random), _saved_rng[name]):
                if getattr(module, name) is _TRACED_RNG[name]:
                    setattr(module, name, saved)


def _install() -> None:
    global _depth
    with _lock:
        if _depth == 0:
            effect_ops.install()
            tensor_objects.install()
            _swap_rng(install=True)
            torch_settings.install()
            exceptions.install()
            autograd_functions.install()
        _depth += 1


def _uninstall() -> None:
    global _depth
    with _lock:
        _depth -= 1
        if _depth == 0:
            effect_ops.uninstall()
            tensor_objects.uninstall()
            _swap_rng(install=False)
            torch_settings.uninstall()
            exceptions.uninstall()
            autograd_functions.uninstall()


@contextmanager
def checked(target: Callable) -> Iterator[module_reads.Writers]:
    """Trace `target` with its effects recorded or refused; after it returns, refuse assignments to its module's
    globals that this thread made (the block sets `writers.ran`, what user code ran: `module_reads.Writers`)."""
    writers = module_reads.Writers()
    glb = getattr(target, "__globals__", None)
    before = dict(glb) if isinstance(glb, dict) else None
    settings = [torch_settings.snapshot()]  # (moved on by imports: `torch_settings.tracked`)
    _install()
    effect_strings.begin()
    try:
        with torch_settings.tracked(settings[0]) as settings:
            try:
                yield writers
            except BaseException:
                effect_strings.end(failed=True)  # a placeholder of a symbolic f-string may have caused it: trace again
                raise
            effect_strings.end(failed=False)
            torch_settings.check_unchanged(settings[0], context.require(), f"in {code_site(target)}")
    finally:
        _uninstall()
        torch_settings.restore_rng(settings[0], context.current())
    if before is not None:
        _check_globals(target, before, glb, writers)


def _check_globals(target: Callable, before: dict, after: dict, writers: module_reads.Writers) -> None:
    changed = [k for k, v in after.items() if before.get(k, _MISSING) is not v]
    changed = sorted(k for k in changed + [k for k in before if k not in after] if not k.startswith("__"))
    changed = [k for k in changed if writers.mine(k)]
    if changed:
        code = getattr(target, "__code__", None)
        where = _store_site(code, changed[0]) if code is not None else "<unknown>"
        raise UnsupportedOpError(f"assigning the global {changed[0]!r}", where,
                                 "it would happen only while tracing, never on cached calls; return the new value "
                                 "and assign it outside the compiled function")  # fmt: skip


def _store_site(code: types.CodeType, name: str) -> str:
    """file:line of the first STORE_GLOBAL/DELETE_GLOBAL of `name` in `code` (nested code included)."""
    for c in code_objects(code):
        line = c.co_firstlineno
        for ins in dis.get_instructions(c):
            n = ins.line_number if hasattr(ins, "line_number") else ins.starts_line  # Python 3.13 / before
            line = n if isinstance(n, int) and not isinstance(n, bool) else line
            if ins.opname in ("STORE_GLOBAL", "DELETE_GLOBAL") and ins.argval == name:
                return f"{os.path.basename(c.co_filename)}:{line}"
    return f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}"
