"""Side effects as ops: `print`, `warnings.warn`, `logging` calls and `torch.set_printoptions` inside a compiled
function become ops of its computation, run on every call in program order, with their arguments as computed then.

While any thread traces, `builtins.print`, `warnings.warn`, the `logging.Logger` methods (`debug`, `info`,
`warning`, `warn`, `error`, `critical`, `fatal`, `log`, `exception`) and `torch.set_printoptions` are wrappers
(`install`/`uninstall`, called by `capture/effects.py`). In a tracing context, called from the program's own code,
each records an impure op instead of acting: the op holds the call's arguments, with every symbolic number (a size,
an int or float input, a value computed from them) an argument of the op, so a cached call prints its own values;
other values are held by the op as they were seen (an object's `str` is taken when the op runs, as eager takes it).
A tensor among the arguments (its data would be formatted) is refused, as is a proxy held inside an object.

Where eager's effect depends on the caller's location, the op reproduces it from the location seen while tracing:
`warnings.warn` runs as `warnings.warn_explicit` with the file, line, module and `__warningregistry__` of the frame
that `stacklevel` names (so the warnings filters' "once per location" holds across calls as in eager); a logging
call builds its record with the caller's file, line and function and checks `logger.isEnabledFor(level)` when the
op runs (so a level enabled or disabled between calls is honoured, as eager).

Calls made by library code (torch, the standard library, site-packages, specengine) are not ops: they act while
tracing only, as before. Outside a tracing context every wrapper is the original.
"""

from __future__ import annotations

import builtins
import itertools
import logging
import os
import sys
import threading
import types
import warnings
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

from specengine.capture import effect_strings
from specengine.capture.effect_strings import program_code
from specengine.errors import UnsupportedOpError
from specengine.ir import context
from specengine.ir.proxies import NumberProxy, Proxy, TensorProxy, unsupported
from specengine.ir.symbol import Symbol
from specengine.provenance import _is_internal

_names = itertools.count()
_THIS = os.path.normcase(os.path.abspath(__file__))
_LOGGING = os.path.normcase(logging._srcfile or "")
_VALUE_TYPES = (int, float, complex, bool, str, bytes, type(None), torch.dtype, torch.device, torch.Size, type)
_MISSING = object()


def _held_proxy(obj: Any, depth: int = 0) -> bool:
    """Whether an object held by an effect op reaches a proxy through its attributes (its `str` at run time would
    read a value of the trace)."""
    if isinstance(obj, Proxy):
        return True
    if depth > 2 or isinstance(obj, _VALUE_TYPES + (types.ModuleType, types.FunctionType, logging.Logger)):
        return False
    values = list(getattr(obj, "__dict__", {}).values()) if hasattr(obj, "__dict__") else []
    values += [getattr(obj, s, None) for s in getattr(type(obj), "__slots__", ()) if isinstance(s, str)]
    values = [v for x in values for v in pytree.tree_leaves(x)]
    return any(_held_proxy(v, depth + 1) for v in values)


def record(label: str, fn: Callable, args: tuple, kwargs: dict, tensors: bool = False,
           caller: types.FrameType | None = None, recipe: list | None = None) -> None:  # fmt: skip
    """Record `fn(*args, **kwargs)` as an impure op of the trace: its symbolic numbers (and with `tensors`, its
    tensors) are the op's arguments, every other leaf of the arguments is held by the op. A string made by an
    f-string of symbolic numbers in `caller` (`capture/effect_strings.py`) is formatted when the op runs."""
    state = context.require()
    leaves, spec = pytree.tree_flatten((args, kwargs))
    templates: dict[int, list] = {}
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, TensorProxy) and not tensors:
            raise unsupported(f"{label} of a tensor", "formatting tensor data is data-dependent; pass x.shape, "
                              "x.dtype or sizes, or return the tensor and print it outside the compiled function")  # fmt: skip
        if isinstance(leaf, str) and (found := effect_strings.template(leaf, caller)) is not None:
            templates[i], leaves[i] = found[0], found[1]
        elif not isinstance(leaf, (NumberProxy, TensorProxy)) and _held_proxy(leaf):
            raise unsupported(f"{label} of a {type(leaf).__name__} holding traced values", "pass the numbers "
                              "themselves (they are substituted on every call), or format them outside")  # fmt: skip
    slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, (NumberProxy, TensorProxy)) or i in templates]
    counts = [len(leaves[i]) if i in templates else 1 for i in slots]
    held = [None if i in slots else leaf for i, leaf in enumerate(leaves)]

    def impl(*values: Any) -> None:
        filled, at = list(held), 0
        for i, n in zip(slots, counts):
            filled[i] = effect_strings.render(templates[i], values[at : at + n]) if i in templates else values[at]
            at += n
        a, k = pytree.tree_unflatten(filled, spec)
        fn(*a, **k)

    if recipe is not None and not templates and slots == list(range(len(leaves))):
        impl = fn  # (it takes the op's values as they are)
        impl.recipe = recipe
    sym = Symbol(f"{label.replace('.', '_')}_{next(_names)}", "effects", meta=lambda *a: None, impl=impl, pure=False)
    flat = [v for i in slots for v in (leaves[i] if i in templates else [leaves[i]])]
    state.record(sym, tuple(flat), {})


def _caller(skip_logging: bool = False) -> types.FrameType:
    """The first frame outside this module (and outside logging's own source when `skip_logging`)."""
    frame = sys._getframe(1)
    while frame is not None and _skipped(frame, skip_logging):
        frame = frame.f_back
    return frame


def _skipped(frame: types.FrameType, skip_logging: bool) -> bool:
    name = os.path.normcase(frame.f_code.co_filename)
    return name == _THIS or (skip_logging and name == _LOGGING)


def _tracing_program(frame: types.FrameType | None) -> bool:
    return frame is not None and context.current() is not None and program_code(frame.f_code.co_filename)


# print

_real_print = builtins.print


def _print(*args: Any, **kwargs: Any) -> None:
    """`print(...)`: an op where the program's code calls it while tracing, else the builtin."""
    real = _saved.get((id(builtins), "print"), _real_print)  # (a print someone else installed before tracing)
    caller = _caller()
    if not _tracing_program(caller):
        return real(*args, **kwargs)
    unknown = set(kwargs) - {"sep", "end", "file", "flush"}
    if unknown:
        raise TypeError(f"{sorted(unknown)[0]!r} is an invalid keyword argument for print()")
    record("print", real, args, kwargs, caller=caller)
    return None


# warnings.warn

_real_warn = warnings.warn


def _warn(message: Any, category: Any = None, stacklevel: int = 1, source: Any = None) -> None:
    caller = _caller()
    if not _tracing_program(caller):
        return _real_warn(message, category, stacklevel + 1, source)
    if isinstance(message, Warning):
        category = message.__class__
    elif category is None:
        category = UserWarning
    if not (isinstance(category, type) and issubclass(category, Warning)):
        raise TypeError(f"category must be a Warning subclass, not '{type(category).__name__}'")
    if effect_strings.filters_changed():
        raise unsupported("warnings.warn under warnings filters set inside the compiled function (catch_warnings, "
                          "simplefilter)", "the filters would apply only while tracing; set them outside")  # fmt: skip
    if context.require()._handler_observes():
        raise unsupported("warnings.warn inside a try block", "a warnings filter set to 'error' raises it when the op "
                          "runs, and the handler's path is not traced; warn outside the try")  # fmt: skip
    frame = caller
    for _ in range(max(int(stacklevel), 1) - 1):
        frame = frame.f_back if frame is not None else None
    if frame is None or not program_code(frame.f_code.co_filename):
        raise unsupported("warnings.warn with a stacklevel reaching outside the compiled function",
                          "its location would differ between calls; use a smaller stacklevel, or warn outside")  # fmt: skip
    glb = frame.f_globals
    registry = glb.setdefault("__warningregistry__", {})
    where = (frame.f_code.co_filename, frame.f_lineno, glb.get("__name__", "<string>"), registry, glb)

    def emit(message: Any, category: type, source: Any) -> None:
        filename, lineno, module, registry, module_globals = where
        warnings.warn_explicit(message, category, filename, lineno, module, registry, module_globals, source)

    record("warnings.warn", emit, (message, category, source), {}, caller=caller)
    return None


# logging

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "warn": logging.WARNING,
           "error": logging.ERROR, "exception": logging.ERROR, "critical": logging.CRITICAL,
           "fatal": logging.CRITICAL}  # fmt: skip
_real_logger = {name: logging.Logger.__dict__[name] for name in (*_LEVELS, "log")}


def _where(frame: types.FrameType) -> str:
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def _emit(logger: logging.Logger, level: int, where: tuple, msg: Any, args: tuple, extra: Any) -> None:
    """A logging call as its op runs it: the level is checked now, the record carries the traced call's location."""
    if logger.isEnabledFor(level):
        filename, lineno, func = where
        logger.handle(logger.makeRecord(logger.name, level, filename, lineno, msg, args, None, func, extra, None))


def _log_op(name: str, logger: logging.Logger, level: Any, msg: Any, args: tuple, kwargs: dict,
            caller: types.FrameType) -> None:  # fmt: skip
    unknown = set(kwargs) - {"exc_info", "extra", "stack_info", "stacklevel"}
    if unknown:
        raise TypeError(f"Logger.{name}() got an unexpected keyword argument {sorted(unknown)[0]!r}")
    if name == "exception" or kwargs.get("exc_info") or kwargs.get("stack_info"):
        raise UnsupportedOpError(f"Logger.{name} with exc_info or stack_info inside the compiled function",
                                 _where(caller), "the exception or stack seen while tracing is not a cached "
                                 "call's; log it outside")  # fmt: skip
    if isinstance(level, NumberProxy):
        level = int(level)  # (pinned: the level decides which handlers run)
    if not isinstance(level, int):
        raise TypeError("level must be an integer")
    frame = caller
    for _ in range(max(int(kwargs.get("stacklevel", 1)), 1) - 1):
        frame = frame.f_back if frame is not None else None
    if frame is None or not program_code(frame.f_code.co_filename):
        raise UnsupportedOpError(f"Logger.{name} with a stacklevel reaching outside the compiled function",
                                 _where(caller), "its location would differ between calls; use a smaller "
                                 "stacklevel, or log outside")  # fmt: skip
    where = (frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
    record(f"logging.{name}", lambda msg, args, extra: _emit(logger, level, where, msg, args, extra),
           (msg, args, kwargs.get("extra")), {}, caller=caller)  # fmt: skip


def _logger_method(name: str) -> Callable:
    real = _real_logger[name]

    def method(self: logging.Logger, *args: Any, **kwargs: Any) -> Any:
        direct = sys._getframe(1).f_code.co_filename
        if _is_internal(direct) and os.path.normcase(direct) != _THIS:  # torch's own (a debug line per SymInt op)
            return real(self, *args, **kwargs)  # (what _caller finds then is not the program's code)
        caller = _caller(skip_logging=True)
        if not _tracing_program(caller):
            return real(self, *args, **kwargs)
        if name == "log":
            if not args:
                raise TypeError("Logger.log() missing 2 required positional arguments: 'level' and 'msg'")
            level, args = args[0], args[1:]
        else:
            level = _LEVELS[name]
        if not args:
            raise TypeError(f"Logger.{name}() missing 1 required positional argument: 'msg'")
        _log_op(name, self, level, args[0], args[1:], kwargs, caller)
        return None

    method.__name__ = method.__qualname__ = name
    method.__wrapped__ = real
    return method


_LOGGER_METHODS = {name: _logger_method(name) for name in _real_logger}


# torch.set_printoptions

_real_printoptions = torch._tensor_str.set_printoptions


def _set_printoptions(*args: Any, **kwargs: Any) -> None:
    caller = _caller()
    if not _tracing_program(caller):
        return _real_printoptions(*args, **kwargs)
    record("torch.set_printoptions", _real_printoptions, args, kwargs, caller=caller)
    return None


_set_printoptions.__wrapped__ = _real_printoptions

_lock = threading.Lock()
_depth = 0
# (owner, name, wrapper): what tracing installs, where the original still stands
_SWAPS = [(builtins, "print", _print), (warnings, "warn", _warn), (torch, "set_printoptions", _set_printoptions),
          (torch._tensor_str, "set_printoptions", _set_printoptions)]  # fmt: skip
_saved: dict[tuple, Any] = {}


def install() -> None:
    """Swap in the wrappers (nested and concurrent traces share one swap)."""
    global _depth
    with _lock:
        if _depth == 0:
            for owner, name, wrapper in _SWAPS:
                if getattr(owner, name, _MISSING) is not wrapper:
                    _saved[(id(owner), name)] = getattr(owner, name)
                    setattr(owner, name, wrapper)
            for name, method in _LOGGER_METHODS.items():
                if logging.Logger.__dict__.get(name) is _real_logger[name]:
                    setattr(logging.Logger, name, method)
        _depth += 1


def uninstall() -> None:
    """Put the originals back (leaving alone what someone else swapped in since)."""
    global _depth
    with _lock:
        _depth -= 1
        if _depth == 0:
            for owner, name, wrapper in _SWAPS:
                if getattr(owner, name, _MISSING) is wrapper and (id(owner), name) in _saved:
                    setattr(owner, name, _saved.pop((id(owner), name)))
            for name, method in _LOGGER_METHODS.items():
                if logging.Logger.__dict__.get(name) is method:
                    setattr(logging.Logger, name, _real_logger[name])
