"""Global torch settings that a traced function reads or changes (grad mode and autocast: see `torchstate`).

While any thread traces, the `torch.*` getters and setters below are wrappers that act in a tracing context and
forward everywhere else:

- a getter notes the value read on the tracing state (`global_reads`): the prologue guards it, so an entry traced
  with `torch.are_deterministic_algorithms_enabled()` True does not serve a call where it is False;
- (`torch.manual_seed`, `get_rng_state` and `set_rng_state` are recorded as ops: `effects.py`, `ops/ltorch_checks.py`);
- a setter is refused: the change would happen only while tracing, never on cached calls.

As a backstop, the settings (and the default random generator's state) are compared before and after tracing.
"""

from __future__ import annotations

import random
import sys
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch

from specengine.capture import backend_flags, calls, environ, library
from specengine.capture.setting_reads import _SPECENGINE, _quiet, note_read, quiet  # noqa: F401 - re-exported
from specengine.errors import UnsupportedOpError
from specengine.ir import context
from specengine.ir.literals import show
from specengine.ir.proxies import unsupported

# getter name -> whether specengine's own calls count (they note the dependency themselves where it matters)
GETTERS = {
    "get_default_dtype": False,
    "get_default_device": True,
    "are_deterministic_algorithms_enabled": True,
    "is_deterministic_algorithms_warn_only_enabled": True,
    "get_deterministic_debug_mode": True,
    "get_float32_matmul_precision": True,
    "is_anomaly_enabled": True,
    "is_inference_mode_enabled": False,
    "get_autocast_dtype": False,
}
SETTERS = ("set_default_dtype", "set_default_device", "set_default_tensor_type", "use_deterministic_algorithms",
           "set_deterministic_debug_mode", "set_float32_matmul_precision", "seed",
           "set_anomaly_enabled")  # fmt: skip
_saved: dict[str, Callable] = {}
_saved_c: dict[str, Callable] = {}


def _getter(name: str, real: Callable, internal_counts: bool) -> Callable:
    def wrapper(*args: Any) -> Any:
        value = real(*args)
        state = context.current()
        if state is None or _quiet.get():
            return value
        if internal_counts or not sys._getframe(1).f_code.co_filename.startswith(_SPECENGINE):
            note_read(state, name, args, value)
        return value

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__wrapped__ = real
    return wrapper


def note_captured(state: Any, captured: list) -> None:
    """A getter the function holds itself (`from torch import get_default_dtype`) is not wrapped: guard its value."""
    for _, _, value, _ in captured:
        for name in GETTERS:
            if value is _real(name) and name != "get_autocast_dtype":
                note_read(state, name, (), value())
        held = backend_flags.held_getter(value) if callable(value) else None  # `from torch._C import _get_...`
        if held is not None and held != "_C._get_fp32_precision_getter":
            note_read(state, held, (), real_getter(held)())


def _setter(name: str, real: Callable) -> Callable:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if context.current() is not None:
            raise unsupported(f"torch.{name}", "the change would happen only while tracing, never on cached calls; "
                              "change the setting outside the compiled function")  # fmt: skip
        return real(*args, **kwargs)

    wrapper.__name__ = wrapper.__qualname__ = name
    wrapper.__wrapped__ = real
    return wrapper


def _grad_setter(real: Callable) -> Callable:
    def _set_grad_enabled(mode: Any) -> None:
        if context.current() is not None and type(mode) is not bool and hasattr(mode, "expr"):
            mode = bool(mode)  # `torch.set_grad_enabled(n > 0)`: the decision is recorded (a guard)
        return real(mode)

    _set_grad_enabled.__wrapped__ = real
    return _set_grad_enabled


def install() -> None:
    """Wrap the getters and setters (called under the effects lock, when the first trace starts)."""
    backend_flags.install()
    environ.install()
    library.install()
    _saved_c["_set_grad_enabled"] = torch._C._set_grad_enabled
    torch._C._set_grad_enabled = _grad_setter(torch._C._set_grad_enabled)
    wrappers = {n: _getter(n, getattr(torch, n), c) for n, c in GETTERS.items()}
    wrappers.update({n: _setter(n, getattr(torch, n)) for n in SETTERS if hasattr(torch, n)})
    for name, wrapper in wrappers.items():
        _saved[name] = getattr(torch, name)
        setattr(torch, name, wrapper)


def uninstall() -> None:
    backend_flags.uninstall()
    environ.uninstall()
    library.uninstall()
    real = _saved_c.pop("_set_grad_enabled", None)
    if real is not None and getattr(torch._C._set_grad_enabled, "__wrapped__", None) is real:
        torch._C._set_grad_enabled = real
    for name, real in _saved.items():
        if getattr(getattr(torch, name), "__wrapped__", None) is real:  # leave alone what someone else installed
            setattr(torch, name, real)
    _saved.clear()


def _real(name: str) -> Callable:
    fn = getattr(torch, name)
    return getattr(fn, "__wrapped__", fn)


def describe_read(name: str, args: tuple) -> str:
    """`torch.get_float32_matmul_precision()`, `torch.backends.cudnn.deterministic` (an attribute)."""
    if name == environ.READ:
        return f"os.environ.get({show(args[0])})"
    if name in calls.GETTERS:
        return calls.GETTERS[name][1]
    if backend_flags.is_attribute(name):
        return f"torch.{name}"
    return f"torch.{name}({', '.join(map(show, args))})"


def resolved(reads: tuple) -> tuple:
    """`((name, args), value)` reads as the prologue checks them: `(name, args, value, getter, text)`."""
    return tuple((name, args, value, real_getter(name), describe_read(name, args)) for (name, args), value in reads)


def real_getter(name: str) -> Callable:
    """What the prologue calls to read a setting noted as `name` (a torch getter, or a backend flag's getter)."""
    if name == environ.READ:
        return environ.real_getter()
    if name in calls.GETTERS:
        return calls.GETTERS[name][0]
    return backend_flags.real_getter(name) or _real(name)


def snapshot() -> tuple:
    """The settings and the default generator's random state, read without noting anything."""
    with quiet():  # (torch's getters call the C getters, wrapped while tracing)
        values = tuple(_real(n)() for n in GETTERS if n not in ("get_autocast_dtype", "get_default_device"))
        return values, torch.default_generator.get_state(), backend_flags.snapshot(), _cuda_rng(), _host_rng()


_tracked = threading.local()  # this thread's snapshots taken as its traces started (a trace inside a trace: a stack)


@contextmanager
def tracked(before: tuple) -> Iterator[list]:
    """`[before]`, the snapshot a trace's settings are compared with and its random state restored to. A module that
    a trace imports (`library.importing`) may seed or draw at import time, once per process as in eager: where the
    state was the trace's snapshot as the import started, the state after it becomes the snapshot."""
    stack = _tracked.__dict__.setdefault("stack", [])
    stack.append([before])
    try:
        yield stack[-1]
    finally:
        stack.pop()


def _around_import() -> Callable[[], None] | None:
    stack = getattr(_tracked, "stack", None)
    if not stack:
        return None
    at_start = snapshot()

    def end() -> None:
        if _same(at_start, stack[-1][0]):
            stack[-1][0] = snapshot()

    return end


library.AROUND_IMPORTS.append(_around_import)


def _same(a: tuple, b: tuple) -> bool:
    return (a[0] == b[0] and _equal(a[1], b[1]) and a[2] == b[2] and _same_states(a[3], b[3])
            and _same_host_states(a[4], b[4]))  # fmt: skip


def _equal(x: torch.Tensor, y: torch.Tensor) -> bool:
    """torch.equal of two generator states, outside any dispatch mode (an import inside a kernel's meta run, as z3's
    first import, compares them while the meta mode is active: aten.equal was then refused as data-dependent)."""
    with torch.utils._python_dispatch._disable_current_modes():
        return torch.equal(x, y)


def check_unchanged(before: tuple, state: Any, site: str) -> None:
    """Refuse a trace that changed a setting, or drew random numbers (ops run eagerly at trace time); `site` names
    the traced function (`f (prog.py:12)`): the change is seen after it returned."""
    values, rng, flags, *_ = snapshot()
    names = [n for n in GETTERS if n not in ("get_autocast_dtype", "get_default_device")]
    for name, old, new in zip(names, before[0], values):
        if old != new:
            raise UnsupportedOpError(f"changing torch.{name}() inside a compiled function", site,
                                     "the change would happen only while tracing; change it outside")  # fmt: skip
    for (name, old), (_, new) in zip(before[2], flags):
        if old != new:
            raise UnsupportedOpError(f"changing torch.{name} inside a compiled function", site,
                                     "the change would happen only while tracing; change it outside")  # fmt: skip
    watch = getattr(state, "calls", None)  # (None: a trace without one; any change counts)
    drew, drew_host = (True, True) if watch is None else (watch.drew_torch, watch.drew_host)  # (this thread's own)
    if drew and (not torch.equal(before[1], rng) or not _same_states(before[3], _cuda_rng())):  # (seeding is an op)
        raise UnsupportedOpError("drawing random numbers (or changing the random state) inside a compiled function",
                                 site, "random ops are not traced; draw the numbers outside the "
                                 "compiled function and pass them in")  # fmt: skip
    if not _same_host_states(before[4], _host_rng(), drew_host):
        raise UnsupportedOpError("drawing random numbers from Python's `random` or numpy's `np.random` inside a "
                                 "compiled function", site, "they would be drawn once, while tracing; "
                                 "use torch.rand / torch.randint (traced), or draw outside and pass them in")  # fmt: skip


def restore_rng(before: tuple, state: Any = None) -> None:
    """Undo what this thread did to the random state while tracing (a failed compile changes nothing); what other
    threads drew meanwhile stands where the trace's watch (`calls.Watch`) saw this thread draw nothing."""
    watch = getattr(state, "calls", None)
    drew, drew_host = (True, True) if watch is None else (watch.drew_torch, watch.drew_host)
    if drew:
        torch.default_generator.set_state(before[1])
    if not _same_host_states(before[4], _host_rng(), drew_host):
        _restore_host_rng(before[4], drew_host)
    if drew and before[3] is not None and not _same_states(before[3], _cuda_rng()):
        torch.cuda.set_rng_state_all(before[3])


def _host_rng() -> tuple:
    """The states of Python's `random` and (where imported) numpy's global generator."""
    np = sys.modules.get("numpy")
    return random.getstate(), (np.random.get_state() if np is not None else None)


def _same_host_states(a: tuple, b: tuple, python_too: bool = True) -> bool:
    """Python's `random` state is compared where this thread called a method of it (`calls.Watch.drew_host`: other
    threads' draws are theirs); numpy's global state always (its Cython functions show no call event)."""
    if (python_too and a[0] != b[0]) or (a[1] is None) != (b[1] is None):
        return False
    return a[1] is None or all(
        (x == y).all() if hasattr(x, "shape") else x == y for x, y in zip(a[1], b[1])
    )  # (name, keys array, pos, has_gauss, cached_gaussian)


def _restore_host_rng(before: tuple, python_too: bool = True) -> None:
    if python_too:
        random.setstate(before[0])
    np = sys.modules.get("numpy")
    if before[1] is not None and np is not None:
        np.random.set_state(before[1])


def _cuda_rng() -> list | None:
    """The CUDA generators' states, where CUDA is initialized (never initializes it)."""
    return torch.cuda.get_rng_state_all() if torch.cuda.is_available() and torch.cuda.is_initialized() else None


def _same_states(a: list | None, b: list | None) -> bool:
    return (a is None) == (b is None) and (a is None or all(_equal(x, y) for x, y in zip(a, b)))
