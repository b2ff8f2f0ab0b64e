"""The user code a trace runs, seen as it runs.

While the function is traced, a trace function (`sys.settrace`, this thread only, chained to one already set) is
told of each Python frame that starts. It notes:

- each user code object (not specengine's, torch's or the standard library's) with the globals it runs with: the
  prologue guards the globals and closure variables read by every user function that ran, whoever called it (a
  method of an object passed in, a callback argument, a submodule's helper, a helper of a helper), not only those
  that the static walk of `prologue/external.py` reaches;
- each `__enter__` that a `with` statement calls, with its context manager, by (frame, offset of the `with`):
  `exceptions.py` decides from it whether the block's `__exit__` may swallow an error;
- a user code object that names the builtin `type` (or an alias of it, or `builtins`) runs with a `type` of its own
  in its module's globals while the trace runs (`pytypes.traced_type`): `type(x)` of a proxy is what eager gives
  (`torch.Tensor`, `int`, ...);
- the closure variables of user code that hold modules: `module_reads.py` follows their attributes;
- a frame of torch.distributed's code that user code called (a collective, FSDP's hooks): refused as it starts,
  before it runs (`distributed.py`);
- each `is` of user code that may see a symbolic bool (`identity.py`): a frame whose code holds one with an
  operand read as it runs gets opcode events, and the `is` is judged at its own offset; such a compile traces
  again with comparisons decided (`api._trace_stage`);
- each TypeError that reaches a user frame that has handlers (its local trace sees only exception events): a
  handler may have caught one that a symbolic number caused (`json.dumps(n)` in a `try`), so the compile traces
  again with every number concrete (`api._trace_stage`). Not seen while another trace function is set.

The tracer is paused inside `TraceState.record` (specengine's own work on an op, where no user code runs), which
keeps its cost to a few percent of a compile.
"""

from __future__ import annotations

import dis
import functools
import gc
import inspect
import os
import sys
import threading
import types
from contextlib import contextmanager
from typing import Any, Iterator

import torch

from specengine.capture import distributed, identity, module_reads
from specengine.capture.library import SITE, importing_now, is_library
from specengine.capture.pytypes import give_type, names_type, take_type, traced_type
from specengine.config import config
from specengine.errors import UnsupportedOpError
from specengine.prologue.external import user_module_object
from specengine.provenance import _is_internal

_SKIP, _USER, _ENTER, _TYPE, _DIST, _SITE = 0, 1, 2, 4, 8, 16
_SPECENGINE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_ENGINE_WORK = tuple(os.path.join(_SPECENGINE, d) + os.sep for d in ("ops", "ir", "constraints", "prologue", "persist"))
_TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_MAX_CLOSURES = 64  # functions sharing one code object whose cells are guarded; beyond it the compile is refused


def _not_users(filename: str, glb: dict) -> bool:
    if filename.startswith("<") and not filename.startswith("<frozen"):  # made by exec: judged by its module
        filename = getattr(sys.modules.get(glb.get("__name__")), "__file__", None) or filename
    return _is_internal(filename) or is_library(filename)


def _kind(code: types.CodeType, glb: dict) -> int:
    kind = _ENTER if code.co_name == "__enter__" and code.co_argcount >= 1 else _SKIP
    if distributed.distributed_code(code):
        return kind | _DIST
    if _not_users(code.co_filename, glb):
        return kind
    site = _SITE if code.co_filename.startswith(SITE) else 0  # an installed package's: the user's only when called by
    if site and config.library_globals == "constant":  # the user (`Coverage._called_by_user`), or never
        return kind
    return kind | _USER | site | (_TYPE if names_type(code, glb) else 0)


class Coverage:
    """What one trace ran (see the module docstring)."""

    def __init__(self) -> None:
        self.codes: dict[types.CodeType, dict] = {}  # user code -> the globals it ran with
        self.entered: dict[tuple, Any] = {}  # (id(frame), its code, offset of the with) -> the context manager
        self.kinds: dict[types.CodeType, int] = {}
        self.frees: dict[types.CodeType, set] = {}  # user code with free variables -> ids of their values as run
        self.free_modules: dict[types.CodeType, dict] = {}  # user code -> {closure variable or argument: [modules]}
        self.written: dict[int, tuple] = {}  # module dicts that user code that ran may write (module_reads.py)
        self.typed: list[dict] = []  # globals given a `type` of their own
        self._typed_ids: set[int] = set()
        self.prev: Any = None
        self.type_errors: list[str] = []  # TypeErrors that reached user frames with handlers (see `_local`)
        self.identity_seen: dict[str, None] = {}  # file:line of each `is` that may see a symbolic bool (identity.py)
        self.fn = self._trace  # the trace function, as set (sys.gettrace() gives this very object)

    def _trace(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        code = frame.f_code
        kind = self.kinds.get(code)
        if kind is None:
            kind = self._kind_of(frame)
        if kind and not importing_now():  # (code an import runs is a library's, whoever wrote it)
            if kind & _SITE and not self._called_by_user(frame):
                kind &= _ENTER | _DIST  # (specengine or torch called it: library code)
            if kind:
                self._note(frame, code, kind)
        if not kind & _USER or importing_now():
            return None if self.prev is None else self.prev(frame, event, arg)
        sites = identity.sites(code)
        if sites.unsure or (sites.watched and self.prev is not None):  # (an unwatched frame: each `is` counts)
            self.identity_seen[f"{code.co_filename}:{code.co_firstlineno}"] = None
        if self.prev is not None:
            return self.prev(frame, event, arg)
        if sites.watched:  # each `is` it holds is judged as it runs: opcode events
            frame.f_trace_opcodes = True
        if code.co_exceptiontable or sites.watched:  # it may catch: see its exceptions
            frame.f_trace_lines = False
            return self._local
        return None

    def _local(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        """The local trace of a user frame that has handlers or a watched `is`: notes each TypeError that reaches
        it, and each `is` that may see a symbolic bool."""
        if event == "opcode":
            readers = identity.sites(frame.f_code).watched.get(frame.f_lasti)
            if readers is not None and identity.seen_at(frame, readers):
                self.identity_seen[f"{frame.f_code.co_filename}:{frame.f_lineno}"] = None
        elif event == "exception" and issubclass(arg[0], TypeError):
            self.type_errors.append(f"{frame.f_code.co_filename}:{frame.f_lineno}: {arg[0].__name__}: {arg[1]}")
        return self._local

    def _note(self, frame: types.FrameType, code: types.CodeType, kind: int) -> None:
        if kind & _DIST:
            distributed.refuse_call(frame)  # torch.distributed's machinery is called, never traced
        if kind & _USER:
            first = code not in self.codes
            if first:
                self.codes[code] = frame.f_globals
            if code.co_freevars:  # which function of this code runs: the values of its cells tell
                local = frame.f_locals
                self.frees.setdefault(code, set()).add(tuple(id(local.get(n)) for n in code.co_freevars))
            self._note_modules(frame, code)
            if first and code.co_name != "<module>" and not code.co_filename.startswith(SITE):  # (see module_reads)
                module_reads.note_writes(self.written, code, frame.f_globals, self.free_modules.get(code, {}))
        if kind & _TYPE:
            self._give_type(frame.f_globals)
        back = frame.f_back
        if kind & _ENTER and back is not None and self._kind_of(back) & _USER:  # a user's `with`
            self.entered[(id(back), back.f_code, back.f_lasti)] = frame.f_locals.get(code.co_varnames[0])

    def _note_modules(self, frame: types.FrameType, code: types.CodeType) -> None:
        """The modules held by the closure variables and arguments through which `code` reads attributes
        (module_reads.py follows their attributes), each module once per name."""
        names = module_reads.sources(code)
        if not names:
            return
        n_args = code.co_argcount + code.co_kwonlyargcount
        held = [n for n in code.co_freevars + code.co_varnames[:n_args] if n in names]
        if held:
            local = frame.f_locals
            for n in held:
                v = local.get(n)
                if isinstance(v, types.ModuleType):
                    seen = self.free_modules.setdefault(code, {}).setdefault(n, [])
                    if not any(m is v for m in seen):
                        seen.append(v)

    def _give_type(self, glb: dict) -> None:
        if id(glb) not in self._typed_ids and give_type(glb):
            self.typed.append(glb)
        self._typed_ids.add(id(glb))  # (held in `typed`, or a module with a `type` of its own: asked once)

    def _kind_of(self, frame: types.FrameType) -> int:
        kind = self.kinds.get(frame.f_code)
        if kind is None:
            kind = self.kinds[frame.f_code] = _kind(frame.f_code, frame.f_globals)
        return kind

    def _called_by_user(self, frame: types.FrameType) -> bool:
        """Whether installed-package code runs on the program's behalf: below it, past installed packages' and
        torch's frames (`nn.Module.__call__` calling a model's `forward`, torch's pytree calling a helper), comes
        the user's code or the trace's entry, not specengine's own work on an op (reading torch's signature
        tables with yaml, its shape and constraint machinery calling sympy through torch)."""
        back = frame.f_back
        while back is not None and (self._kind_of(back) & _SITE or back.f_code.co_filename.startswith(_TORCH)):
            back = back.f_back
        return back is None or not back.f_code.co_filename.startswith(_ENGINE_WORK)

    def is_user(self, frame: types.FrameType) -> bool:
        """Whether `frame` runs user code (not specengine's, torch's or the standard library's; not an import's)."""
        kind = self._kind_of(frame)
        return bool(kind & _USER) and not importing_now() and (not kind & _SITE or self._called_by_user(frame))

    def context_manager(self, frame: types.FrameType, offset: int) -> Any:
        """The context manager that the `with` at `offset` of `frame` entered (None if not seen: a C `__enter__`).

        Frames are not kept (a frame kept alive keeps its locals alive, such as torch's dispatch-key guards, whose
        late release would restore a stale dispatch state): a record is keyed by the frame's id and code."""
        return self.entered.get((id(frame), frame.f_code, offset))

    def pause(self) -> bool:
        if self.prev is None and sys.gettrace() is self.fn:
            sys.settrace(None)
            return True
        return False

    def resume(self) -> None:
        sys.settrace(self.fn)

    def captured(self, covered: set, proxy_free: Any) -> list:
        """`effects.captured_values` entries for the user code that ran and is not in `covered` (code objects
        whose functions the static walk scanned): the globals each reads, and the cells of its functions where they
        can still change (the functions found through the garbage collector, those whose cells hold the values a
        frame of theirs ran with; cells holding proxies were made while tracing and are skipped)."""
        out: list = []
        closures = [c for c, g in self.codes.items() if c not in covered and c.co_freevars and not _cells_fixed(c, g)]
        for code, glb in self.codes.items():
            if code not in covered:
                out += [("global", n, glb[n], glb) for n in global_reads(code) if n in glb and _guardable(glb[n])]
        if closures:
            out += _closure_cells(closures, self.frees, proxy_free)
        return out


def _guardable(value: Any) -> bool:
    return (not isinstance(value, types.ModuleType) or user_module_object(value)) and value is not traced_type


@functools.lru_cache(maxsize=4096)
def global_reads(code: types.CodeType) -> tuple[str, ...]:
    """The names `code` reads as globals (LOAD_GLOBAL, and LOAD_NAME in class bodies)."""
    return tuple(sorted({i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}))


def _closure_cells(codes: list, frees: dict, proxy_free: Any) -> list:
    """The cells of the live functions of `codes` whose cell values are those a frame of theirs ran with."""
    out: list = []
    wanted = set(codes)
    per_code: dict = {}
    for f in gc.get_referrers(*codes):
        if isinstance(f, types.FunctionType) and f.__code__ in wanted and _ran(f, frees.get(f.__code__, ())):
            per_code.setdefault(f.__code__, []).append(f)
    for code, fs in per_code.items():
        if len(fs) > _MAX_CLOSURES:
            raise UnsupportedOpError(f"a closure {code.co_name} of which {len(fs)} copies exist",
                                     f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}",
                                     "its closure variables cannot all be guarded; pass the values it reads as "
                                     "arguments")  # fmt: skip
        for f in fs:
            cells = []
            for i, (name, cell) in enumerate(zip(code.co_freevars, f.__closure__ or ())):
                try:
                    # ("ran": a cell of code seen running, not of the function or its static helpers: a list held
                    # there is compared by identity, so a log its functions append to is not a new entry per call)
                    cells.append(("cell", (i, name, "ran"), cell.cell_contents, f.__closure__))
                except ValueError:  # an empty cell: reading it raises NameError, as it will at run time
                    continue
            if all(proxy_free(v) for _, _, v, _ in cells):  # else made while tracing, of traced values
                out += cells
    return out


_WRITES = ("STORE_DEREF", "DELETE_DEREF")
_SUSPENDS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def _cells_fixed(code: types.CodeType, glb: dict) -> bool:
    """Whether the cells of `code`'s functions can no longer change: a cell changes only while the function that
    made it runs (or is suspended), or through a nested function that declares it `nonlocal`. So they are fixed
    where each enclosing function is found (through `code`'s qualified name), runs in no thread now, is no
    generator, and no function nested in it writes the names."""
    names = set(code.co_freevars) - {"__class__"}  # a method's class cell (zero-argument super) is set once
    if not names:
        return True
    chain = _enclosing(code, glb)
    if chain is None:
        return False
    running = {f.f_code for top in sys._current_frames().values() for f in _stack(top)}
    for parent in chain:
        if parent in running or parent.co_flags & _SUSPENDS:
            return False
        if any(i.opname in _WRITES and i.argval in names for c in _nested(parent) for i in dis.get_instructions(c)):
            return False
        names &= set(parent.co_freevars)  # passed through from further out
        if not names:
            return True
    return not names


def _stack(frame: Any) -> Iterator[types.FrameType]:
    while frame is not None:
        yield frame
        frame = frame.f_back


def _nested(code: types.CodeType) -> Iterator[types.CodeType]:
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            yield c
            yield from _nested(c)


def _enclosing(code: types.CodeType, glb: dict) -> list | None:
    """The code objects enclosing `code`, innermost first, resolved from its qualified name (None if not found)."""
    parts = code.co_qualname.split(".") if hasattr(code, "co_qualname") else []
    if len(parts) < 3 or "<locals>" not in parts:
        return None
    obj: Any = glb.get(parts[0])
    i = 1
    while i < len(parts) and parts[i] != "<locals>" and obj is not None:
        obj, i = getattr(obj, parts[i], None), i + 1
    current = getattr(obj, "__code__", None)
    chain = []
    while current is not None and i < len(parts) and parts[i] == "<locals>":
        chain.append(current)
        name, i = parts[i + 1], i + 2
        if i >= len(parts):
            return chain[::-1] if current is not None and any(c is code for c in _nested(current)) else None
        current = next((c for c in current.co_consts if isinstance(c, types.CodeType) and c.co_name == name), None)
    return None


def _ran(f: types.FunctionType, seen: set) -> bool:
    values = []
    for cell in f.__closure__ or ():
        try:
            values.append(id(cell.cell_contents))
        except ValueError:
            values.append(id(None))
    return tuple(values) in seen


class _Local(threading.local):
    coverage: Any = None  # (a class default: a missing attribute's getattr with a default raises inside)


_local = _Local()


def current() -> Coverage | None:
    return _local.coverage


@contextmanager
def collecting(state: Any, written: dict | None = None) -> Iterator[Coverage]:
    """Note the user code that runs inside the block (this thread); `state.coverage` is it meanwhile. The module
    dicts that code may write are snapshotted into `written` (`module_reads.unchanged` compares them)."""
    cov = Coverage()
    cov.written = {} if written is None else written
    cov.prev = sys.gettrace()
    outer = current()
    _local.coverage = state.coverage = cov
    sys.settrace(cov.fn)
    try:
        yield cov
    finally:
        sys.settrace(cov.prev)
        _local.coverage, state.coverage = outer, None
        for glb in cov.typed:
            take_type(glb)
        if outer is not None:  # a trace inside a trace: the outer one ran this code too
            outer.codes.update((c, g) for c, g in cov.codes.items() if c not in outer.codes)
            outer.entered.update(cov.entered)
            outer.type_errors += cov.type_errors
            outer.identity_seen.update(cov.identity_seen)
