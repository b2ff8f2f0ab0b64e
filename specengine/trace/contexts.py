"""Whether a context manager's `__exit__` may swallow an exception raised in its `with` block.

`exceptions.py` asks this for each `with` between a may-raise op and the traced function: a `with` whose exit may
swallow the error observes the op's check (so it becomes a guard, both ways), one whose exit cannot re-raises it.

- not seen entered (an `__enter__` written in C that `coverage` cannot see): may swallow, unless the `with`
  names a lock or a file by a variable or plain attributes (`with self.lock:`, read again by `exceptions.py`);
- no `__exit__` found: may swallow;
- `contextlib.suppress`, `contextlib.ExitStack`: may;
- a `@contextmanager` generator: may where the generator, at the `yield` it stands at, would catch the error (its
  own `try`s and `with`s, decided the same way);
- an `__exit__` written in Python: may unless every `return` in it returns a constant that is false (None, False,
  0), as `torch.no_grad()`, `torch.autocast`, `contextlib.nullcontext` and most user classes do.
"""

from __future__ import annotations

import contextlib
import dis
import functools
import io
import threading
import types
from typing import Any

_RETURNS = ("RETURN_VALUE", "RETURN_CONST")
_C_NON_SWALLOWING = (io.IOBase, type(threading.Lock()), type(threading.RLock()))


def may_swallow(cm: Any) -> bool:
    if cm is None:
        return True
    if isinstance(cm, contextlib._GeneratorContextManager):
        frame = getattr(getattr(cm, "gen", None), "gi_frame", None)
        if frame is None:
            return True
        from specengine.trace.exceptions import frame_observes

        return frame_observes(frame)
    return _type_may_swallow(type(cm))


@functools.lru_cache(maxsize=256)
def _type_may_swallow(cls: type) -> bool:
    if issubclass(cls, (contextlib.suppress, contextlib.ExitStack)):
        return True
    if issubclass(cls, _C_NON_SWALLOWING):
        return False
    exit_ = next((c.__dict__["__exit__"] for c in cls.__mro__ if "__exit__" in c.__dict__), None)
    if not isinstance(exit_, types.FunctionType):
        return True
    return not _returns_false_only(exit_.__code__)


def _returns_false_only(code: types.CodeType) -> bool:
    """Every return of `code` returns a false constant (3.11: LOAD_CONST then RETURN_VALUE; 3.12: RETURN_CONST)."""
    instructions = list(dis.get_instructions(code))
    for i, ins in enumerate(instructions):
        if ins.opname == "RETURN_CONST" and ins.argval:
            return False
        if ins.opname == "RETURN_VALUE":
            prev = instructions[i - 1] if i else None
            if prev is None or prev.opname != "LOAD_CONST" or prev.argval:
                return False
    return any(ins.opname in _RETURNS for ins in instructions)
