"""Environment variables a traced function reads (`os.environ.get("FLAG")`, `os.getenv`, `"FLAG" in os.environ`,
`os.environ["FLAG"]`): the value read (None where unset) is noted as a global read, which the prologue guards, so
an entry traced with FLAG=1 does not serve a call made after FLAG changed. Writing `os.environ` while tracing is
refused: it would happen only while tracing (torch's own
writes, which its lazy imports make, are let through).

While any thread traces, `os.environ`'s class methods are wrappers that note reads in a tracing context (reads by
torch and by the engine itself are not the program's) and forward everywhere else.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any, Callable

from specengine.ir import context
from specengine.ir.proxies import unsupported
from specengine.provenance import _is_internal

READ = "os.environ.get"  # the name reads are noted under (`global_reads`)
_Environ = type(os.environ)
_real: dict[str, Callable] = {}
# the files of os's and Mapping's methods, as their code names them (`<frozen os>` where they are frozen)
_PLUMBING = frozenset((type(os.environ).__getitem__.__code__.co_filename, Mapping.get.__code__.co_filename))


def _programs_read() -> bool:
    """Whether the caller of the wrapper is the program (not torch, not the engine), past os's and Mapping's
    methods."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename in _PLUMBING:
        frame = frame.f_back
    return frame is not None and not _is_internal(frame.f_code.co_filename)


def _getitem(self: Any, key: Any) -> Any:
    value = None  # (unset: what `os.environ.get` gives)
    try:
        value = _real["__getitem__"](self, key)
    except KeyError:
        raise
    finally:
        state = context.current()
        if state is not None and self is os.environ and isinstance(key, str) and _programs_read():
            state.note_global_read((READ, (key,)), value)
    return value


def _refused(name: str) -> Callable:
    def write(self: Any, *args: Any) -> Any:
        if context.current() is not None and self is os.environ and _programs_read():  # (torch sets some)
            raise unsupported(f"changing os.environ ({name}) inside a compiled function", "it would happen only "
                              "while tracing, never on cached calls; set it outside the compiled function")  # fmt: skip
        return _real[name](self, *args)

    write.__name__ = name
    return write


_WRAPPERS = {"__getitem__": _getitem, "__setitem__": _refused("__setitem__"), "__delitem__": _refused("__delitem__")}


def install() -> None:
    """Wrap `os.environ`'s class methods (under the effects lock, when the first trace starts)."""
    for name, wrapper in _WRAPPERS.items():
        _real[name] = vars(_Environ)[name]
        setattr(_Environ, name, wrapper)


def uninstall() -> None:
    for name, wrapper in _WRAPPERS.items():
        if vars(_Environ).get(name) is wrapper and name in _real:  # leave alone what someone else installed
            setattr(_Environ, name, _real[name])


def real_getter() -> Callable:
    """What the prologue calls: `os.environ.get` itself."""
    return os.environ.get
