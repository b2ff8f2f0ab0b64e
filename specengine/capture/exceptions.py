"""Exceptions caught inside the traced function.

Some ops check their arguments on the example sizes only (whether sizes broadcast, an index is in bounds): for other
inputs the torch op raises eager's error at run time. That is sound only if nothing in the function observes the
error. Where the op runs inside a `try` of the user's frames (Python 3.11+ exception tables say so), the check is
decided with a guard instead, so that both outcomes, raising and not raising, are traced (`TraceState.may_raise`).

A `with` block counts as such a handler where its context manager's `__exit__` may swallow the error
(`may_swallow`: `contextlib.suppress`, a `@contextmanager` whose generator catches it, a class whose
`__exit__` may return a true value, a context manager that `coverage` did not see entered), not where it cannot
(`torch.no_grad()`, `torch.autocast`, `contextlib.nullcontext`, files and locks, an `__exit__` that returns None).
An error of the engine itself (UnsupportedOpError) that such a handler observes refuses the compile: the trace
would take the except path where eager takes the other one.

Not seen: handlers in torch's own Python code.

Whether a context manager's `__exit__` may swallow an exception raised in its `with` block (`may_swallow`):
- not seen entered (an `__enter__` written in C that `coverage` cannot see): may swallow, unless the `with`
  names a lock or a file by a variable or plain attributes (`with self.lock:`, read again here);
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
import sys
import threading
import types
from typing import Any, Callable

from torch.utils import _pytree as pytree

from specengine.constraints import expr as E
from specengine.constraints import floats
from specengine.errors import SpecEngineError
from specengine.ir import context
from specengine.ir.proxies import NumberProxy, TensorProxy
from specengine.provenance import _is_internal

_HANDLES = ("CHECK_EXC_MATCH", "CHECK_EG_MATCH", "RETURN_VALUE", "RETURN_CONST")
_MAX_CHAIN = 32


@functools.lru_cache(maxsize=1024)
def _table(code: types.CodeType) -> tuple[list, list]:
    """The code's exception table entries and its instructions."""
    return dis._parse_exception_table(code), list(dis.get_instructions(code))


def _entry(code: types.CodeType, offset: int) -> Any:
    for e in _table(code)[0]:
        if e.start <= offset < e.end:
            return e
    return None


def _classify(frame: Any, code: types.CodeType, target: int) -> tuple[bool, int]:
    """(whether the handler at `target` may swallow the exception, else where it re-raises it).

    An `except` clause (or a `finally` that returns) may swallow it; a `finally` body and the interpreter's cleanup
    blocks re-raise it; a `with` block's exit swallows it where its context manager's `__exit__` may (see
    `may_swallow`).
    """
    instructions = _table(code)[1]
    start = next(i for i, ins in enumerate(instructions) if ins.offset == target)
    pushed = instructions[start].opname == "PUSH_EXC_INFO"
    for ins in instructions[start:]:
        if ins.opname == "WITH_EXCEPT_START" and _with_swallows(frame, code, target):
            return True, target
        if ins.opname in _HANDLES or (pushed and ins.opname == "POP_EXCEPT"):
            return True, target
        if ins.opname == "RERAISE":
            return False, ins.offset
    return True, target


def _with_swallows(frame: Any, code: types.CodeType, target: int) -> bool:
    """Whether the `with` whose exit handler is at `target` may swallow: decided by its context manager, which
    `coverage` saw entered at the `with` (the instruction before the block's first protected one)."""
    state = context.current()
    cov = getattr(state, "coverage", None)
    starts = [e.start for e in _table(code)[0] if e.target == target]
    before = [i for i in _table(code)[1] if starts and i.offset < min(starts)]
    if cov is None or not before or before[-1].opname != "BEFORE_WITH":
        return True  # not seen: as a handler
    cm = cov.context_manager(frame, before[-1].offset)
    return may_swallow(cm if cm is not None else _loaded(frame, before[:-1]))


def _loaded(frame: Any, before: list) -> Any:
    """The object a `with` entered when its `__enter__` is written in C (a lock, a file): read again from the
    frame where the `with` names a variable or a chain of plain attributes (`with self.lock:`), else None."""
    chain: list[str] = []
    for ins in reversed(before[-8:]):
        if ins.opname == "LOAD_ATTR":
            chain.append(ins.argval)
            continue
        if ins.opname in ("LOAD_FAST", "LOAD_DEREF", "LOAD_GLOBAL", "LOAD_NAME"):
            scope = frame.f_locals if ins.opname in ("LOAD_FAST", "LOAD_DEREF") else frame.f_globals
            obj = scope.get(ins.argval)
            for name in reversed(chain):
                obj = getattr(obj, "__dict__", {}).get(name)  # plain attributes only: no property runs
            return obj
        return None
    return None


def _observes(frame: Any, code: types.CodeType, offset: int) -> bool:
    for _ in range(_MAX_CHAIN):
        entry = _entry(code, offset)
        if entry is None:
            return False
        swallows, offset = _classify(frame, code, entry.target)
        if swallows:
            return True
    return True


_root: list = [None]  # the code of the frontend's entry point (capture/interpreter.trace_function)


def walks_stop_at(fn: Callable) -> Callable:
    """Decorator: frames at and above `fn`'s called the compiled function; walks of the user's frames stop there."""
    _root[0] = fn.__code__
    return fn


def handler_observes() -> bool:
    """Whether an exception raised here would reach an exception handler in a user frame of the traced function.

    Walks the user's frames from the op up to the traced function (frames of specengine and torch are not the
    user's; frames that called the compiled function do not count: they see the computation's error the same way).
    """
    stop = _root[0]
    frame = sys._getframe(1)
    while frame is not None and frame.f_code is not stop:
        code = frame.f_code
        if not _is_internal(code.co_filename) and code.co_exceptiontable and _observes(frame, code, frame.f_lasti):
            return True
        frame = frame.f_back
    return False


def frame_observes(frame: Any) -> bool:
    """Whether an exception raised where `frame` (a suspended generator's) stands reaches a handler in it."""
    code = frame.f_code
    return bool(code.co_exceptiontable) and _observes(frame, code, frame.f_lasti)


def pin_raised(state: Any, op: str, args: tuple, kwargs: dict, error: BaseException) -> None:
    """An op raised `error` (eager's error, decided with guards) and a handler in the function may read it (`except
    RuntimeError as e`, `traceback.format_exc()`): the error's message shows sizes and numbers of the op's arguments
    (`shape '[-1, 3]' is invalid for input of size 7`), so each symbol they mention is pinned; another size takes the
    same path, with its own message, in its own entry. A handler that cannot read it (`except RuntimeError:`,
    `contextlib.suppress`) pins nothing."""
    if isinstance(error, SpecEngineError) or not isinstance(error, Exception) or not _handler_inspects():
        return
    symbols: set[str] = set()
    for leaf in pytree.tree_leaves((args, kwargs)):
        exprs = leaf.dims if isinstance(leaf, TensorProxy) else (leaf.expr,) if isinstance(leaf, NumberProxy) else ()
        symbols.update(*(e.free_symbols() for e in exprs if hasattr(e, "free_symbols")))
    hints, reason = state.decider.hints, "the error that a handler catches shows the sizes"
    for s in sorted(symbols):
        if s not in hints or state.decider.unbacked.mentions(E.sym(s)):
            continue
        if type(hints[s]) is float:
            state.decide(floats.same(floats.FloatExpr("sym", (s,)), hints[s]), op, reason)
        else:
            state.pin(E.sym(s), op, reason)


_INSPECTORS = frozenset({"exc_info", "exception", "format_exc", "print_exc", "format_exception", "print_exception",
                         "last_value", "TracebackException"})  # fmt: skip


def _handler_inspects() -> bool:
    """Whether the handler that would catch an error raised here (in the user's frames) may read it: an `except ...
    as name` clause, or a read of `sys.exc_info`, `traceback.format_exc`, ... at or after its start (conservative:
    anywhere after it in that code)."""
    stop = _root[0]
    frame = sys._getframe(2)
    while frame is not None and frame.f_code is not stop:
        code = frame.f_code
        if not _is_internal(code.co_filename) and code.co_exceptiontable:
            target = _swallowing_target(frame, code, frame.f_lasti)
            if target is not None:
                return target < 0 or _may_inspect(code, target)
        frame = frame.f_back
    return False


def _swallowing_target(frame: Any, code: types.CodeType, offset: int) -> int | None:
    """The offset of the handler that swallows an error raised at `offset` (-1: unknown), or None."""
    for _ in range(_MAX_CHAIN):
        entry = _entry(code, offset)
        if entry is None:
            return None
        swallows, offset = _classify(frame, code, entry.target)
        if swallows:
            return entry.target
    return -1


def _may_inspect(code: types.CodeType, target: int) -> bool:
    instructions = _table(code)[1]
    start = next(i for i, ins in enumerate(instructions) if ins.offset == target)
    after = instructions[start:]
    for a, c in zip(after, after[2:]):
        if a.opname == "CHECK_EXC_MATCH" and c.opname.startswith("STORE_"):
            return True
    return any(i.opname.startswith("LOAD_") and i.argval in _INSPECTORS for i in after)


def check_caught(state: Any) -> None:
    """After tracing returned: refuse when the function caught an error of the engine (the trace took the except
    path, where eager takes the other one)."""
    if state.caught is not None:
        raise state.caught


_suppress_enter = contextlib.suppress.__enter__
_suppress_exit = contextlib.suppress.__exit__


def _enter(self: contextlib.suppress) -> Any:
    state = context.current()
    if state is not None:
        state.suppressing += 1
    return _suppress_enter(self)


def _exit(self: contextlib.suppress, *exc: Any) -> Any:
    state = context.current()
    if state is not None:
        state.suppressing -= 1
    return _suppress_exit(self, *exc)


def install() -> None:
    """While tracing, `contextlib.suppress` blocks count as handlers that observe errors (their `with` looks like
    any other in the exception table)."""
    contextlib.suppress.__enter__, contextlib.suppress.__exit__ = _enter, _exit


def uninstall() -> None:
    if contextlib.suppress.__enter__ is _enter:
        contextlib.suppress.__enter__, contextlib.suppress.__exit__ = _suppress_enter, _suppress_exit


# Context managers: whether a `with` block's exit may swallow an exception raised in it
_RETURNS = ("RETURN_VALUE", "RETURN_CONST")
_C_NON_SWALLOWING = (io.IOBase, type(threading.Lock()), type(threading.RLock()))


def may_swallow(cm: Any) -> bool:
    if cm is None:
        return True
    if isinstance(cm, contextlib._GeneratorContextManager):
        frame = getattr(getattr(cm, "gen", None), "gi_frame", None)
        if frame is None:
            return True
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
