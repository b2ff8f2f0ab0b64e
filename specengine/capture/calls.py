"""Calls the tracer cannot see: C functions (and a few library functions) whose result can differ between calls.

The tracer runs the program's Python on proxies; a function implemented in C runs for real, once, while tracing, and
its result would be baked into the entry. While the function is traced, a profile function (`sys.setprofile`: this
thread only, chained to one already set; paused, as the coverage tracer is, inside `TraceState.record`) sees each
C call this thread makes and checks it against a table:

- a **getter whose value is guarded** (called from user code): `torch.get_num_threads()`,
  `torch.get_num_interop_threads()`, `torch.initial_seed()`, `threading.get_ident()`, `threading.current_thread()`
  (by identity), `ContextVar.get()` (by value where the value has value semantics, else by identity). The prologue
  calls the getter and compares, like a torch setting the function read (`torch_settings.resolved`);
- **refused** (`UnsupportedOpError` naming the call and the user's line), where the result differs on every call:
  the clocks of `time` and `datetime.now()`/`today()` (from user code; the standard library's own uses, such as a
  log record's time, are its business), `os.urandom` (from user or library code: `uuid.uuid4()`, `secrets`), every
  method of a `random.Random` (the module's functions included) and of numpy's random generators (from user or
  library code: `random.choice` draws in `random.py`), and `next()` on an iterator that lives across calls (a
  global, a closure variable from outside the trace, an argument of the compiled function, or an attribute of one
  of these: `next(COUNTER)` on a global `itertools.count`);
- **torch draws** (from any frame of this thread): the default generator's state before and after the call tell
  whether this thread drew. The before/after comparison of the random state (`torch_settings.check_unchanged`) refuses
  only a draw this thread made, and the state is set back only then: another thread drawing (a data loader) while
  this one traces neither fails the compile nor is rolled back.

Every other C call that the program's own code makes (not an installed library's) is classified by where its
function lives (`call_table.py`): pure (builtins, `math`, `operator`, container methods, ...), torch's own (the
torch-function mode records its ops), a guarded getter (`os.getcwd()`), or unknown: refused where its result is used.
An iterator that lives across calls advanced while tracing (`for v in COUNTER`) is refused (`iterators.py`: its
generator frame resuming is a `call` event here; a C iterator's position is compared after the trace).
A refusal raised inside the call is also kept: a handler in the program that swallows it does not make the compile
succeed (`Watch.check`). Code that an import runs is skipped (`library.importing`). Not seen: `next()` on an iterator
passed down from a helper's caller (its advance is seen by `iterators.py` where it lives across calls).
"""

from __future__ import annotations

import contextvars
import dis
import functools
import os
import random
import sys
import threading
import time
import types
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch

from specengine import logs
from specengine.capture import call_table
from specengine.capture.iterators import Iterators
from specengine.capture.library import importing_now
from specengine.errors import UnsupportedOpError
from specengine.prologue.external import has_value_semantics
from specengine.provenance import _is_internal, is_installed

_MISSING = object()
_SPECENGINE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
GETTERS: dict[str, tuple[Callable, str]] = {}  # a noted read's name -> (what the prologue calls, its text)

_CLOCKS = {getattr(time, n) for n in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter",
                                      "perf_counter_ns", "process_time", "process_time_ns", "thread_time",
                                      "thread_time_ns", "localtime", "gmtime", "ctime", "asctime", "strftime")
           if hasattr(time, n)}  # fmt: skip
_ENTROPY = {getattr(os, n) for n in ("urandom", "getrandom") if hasattr(os, n)}
_DATES = ("now", "utcnow", "today")
_TORCH_GETTERS = {torch.get_num_threads: "get_num_threads", torch.get_num_interop_threads: "get_num_interop_threads",
                  torch.initial_seed: "initial_seed", threading.get_ident: "get_ident"}  # fmt: skip
_TORCH_DRAWS = frozenset(("rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like",
                          "bernoulli", "bernoulli_", "multinomial", "normal", "normal_", "poisson", "dropout",
                          "dropout_", "alpha_dropout", "feature_dropout", "feature_alpha_dropout", "rrelu", "rrelu_",
                          "uniform_", "random_", "exponential_", "geometric_", "cauchy_", "log_normal_",
                          "native_dropout", "seed", "manual_seed", "set_state", "set_rng_state", "_set_rng_state",
                          "randint_like", "gumbel_softmax"))  # fmt: skip
# (not the methods every object has, `__new__`, `__init__`, `__eq__`...: none of them draws, and `object.__new__` is
# called for each object made)
_NAMES = frozenset({f.__name__ for f in _CLOCKS | _ENTROPY | set(_TORCH_GETTERS)} | set(_DATES) | _TORCH_DRAWS
                   | {"get", "next"} | (set(dir(random.Random)) - set(dir(object))))  # fmt: skip
_RANDOM_INIT = random.Random.__init__.__code__
_THREAD_CODES = {threading.current_thread.__code__, threading.main_thread.__code__}


class _Identity:
    """A value compared by identity in a prologue guard (a ContextVar's object value, the current thread)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, _Identity) and other.value is self.value

    def __ne__(self, other: Any) -> bool:
        return not self == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<the object {type(self.value).__name__} at {id(self.value):#x}>"


def _guarded(value: Any) -> Any:
    return value if value is _MISSING or has_value_semantics(value) else _Identity(value)


class Watch:
    """What this thread's C calls were, while one function is traced (see the module docstring)."""

    def __init__(self, state: Any, is_user: Callable[[types.FrameType], bool]) -> None:
        self.state = state
        self.is_user = is_user
        self.prev: Any = None
        self.refused: UnsupportedOpError | None = None
        self.drew_torch = False  # this thread changed the default generator's state
        self.drew_host = False  # this thread called a method of Python's or numpy's random generators
        self.pending: list[tuple[Any, bytes]] = []  # (drawing call, the generator's state as it started)
        self.outside = {id(f) for f in _stack(sys._getframe())}  # the frames below the trace: not the trace's
        self.made: set[int] = set()  # ids of the `random.Random` objects made while tracing
        self.generators: list[tuple[str, Any, Any]] = []  # (what, a random generator object, its state)
        self.iterators = Iterators()  # iterators that live across calls (iterators.py)
        self.own: dict[types.CodeType, bool] = {}  # code -> whether it is the program's own (`_own`)
        self.fn = self._profile

    def _profile(self, frame: types.FrameType, event: str, arg: Any) -> Any:
        if self.generators and event in ("call", "c_call"):
            self._drawn_from(frame if event == "c_call" else frame.f_back)
        if event == "c_call":
            own = self.own.get(frame.f_code)  # (False for most frames: specengine's and torch's; no call here)
            if own is None:
                own = self._own(frame)
            if (own or getattr(arg, "__name__", None) in _NAMES) and not importing_now():
                self._c_call(frame, arg)
        elif event == "call":
            if self.iterators.frames and id(frame) in self.iterators.frames:
                self.iterators.resumed(frame, self._user_caller(frame.f_back))
            elif (own := self.own.get(frame.f_code)) is None or (own and frame.f_code.co_freevars):
                if self._own(frame):  # (the program's code: first seen, or a closure, whose cells may differ)
                    self.iterators.scan_frame(frame, self._made_here)
            if frame.f_code is _RANDOM_INIT:  # a generator of the trace's own: `random.Random(0).random()` is fine
                self.made.add(id(frame.f_locals.get("self")))
            elif frame.f_code in _THREAD_CODES and not importing_now() and self._from_user(frame.f_back):
                self._getter("calls.current_thread", threading.current_thread, "threading.current_thread()", True)
        elif self.pending and self.pending[-1][0] is arg:  # c_return / c_exception of a drawing call
            _, before = self.pending.pop()
            self.drew_torch = self.drew_torch or before != _rng_state()
        prev = self.prev
        if prev is not None:
            prev(frame, event, arg)

    def _in_trace(self, frame: types.FrameType) -> bool | None:
        """Whether a frame of the stack runs user code in this trace (None: it is below the trace)."""
        return None if id(frame) in self.outside else self.is_user(frame)

    def _from_user(self, frame: types.FrameType | None) -> bool:
        return frame is not None and self.is_user(frame)

    def _c_call(self, frame: types.FrameType, fn: Any) -> None:
        owner = getattr(fn, "__self__", None)
        name = fn.__name__
        if isinstance(owner, random.Random) and id(owner) in self.made:
            return  # a generator the trace made, seeded there: the same numbers on every call
        if isinstance(owner, random.Random) or _numpy_random(owner):
            self.drew_host = True
            if not _is_internal(frame.f_code.co_filename):
                where = "random" if isinstance(owner, random.Random) else type(owner).__name__
                self._refuse(frame, f"{where}.{name}()", "it would draw once, while tracing, and every cached call "
                             "would reuse the number; use torch.rand / torch.randint (traced), or draw outside and "
                             "pass the numbers in")  # fmt: skip
        elif name in _TORCH_DRAWS and _torch_function(fn, owner):
            if not frame.f_code.co_filename.startswith(_SPECENGINE):  # (the engine's own calls are on meta tensors)
                self.pending.append((fn, _rng_state()))
        elif fn in _ENTROPY and not _is_internal(frame.f_code.co_filename):
            self._refuse(frame, f"os.{name}()", "its bytes differ on every call; make them outside and pass them in")
        elif not self._from_user(frame):
            return
        elif fn in _CLOCKS or (name in _DATES and isinstance(owner, type) and owner.__module__ == "datetime"):
            what = f"time.{name}()" if fn in _CLOCKS else f"{owner.__name__}.{name}()"
            self._refuse(frame, what, "the clock would be read once, while tracing; read it outside the compiled "
                         "function and pass the value in")  # fmt: skip
        elif fn in _TORCH_GETTERS:
            getter = _TORCH_GETTERS[fn]
            text = f"threading.{getter}()" if getter == "get_ident" else f"torch.{getter}()"
            self._getter(f"calls.{getter}", fn, text, False)
        elif name == "get" and isinstance(owner, contextvars.ContextVar):
            self._getter(f"calls.contextvar_{id(owner)}", functools.partial(owner.get, _MISSING),
                         f"ContextVar({owner.name!r}).get()", None)  # fmt: skip
        elif fn is next:
            self._next(frame)
        elif self._own(frame):
            self._unseen(frame, fn)

    def _own(self, frame: types.FrameType) -> bool:
        """Whether `frame` runs the program's own code (user code that is not an installed library's)."""
        own = self.own.get(frame.f_code)
        if own is None:
            if importing_now():  # (an import's code is library code now, not for good: not cached)
                return False
            own = self.own[frame.f_code] = self.is_user(frame) and not is_installed(frame.f_code.co_filename)
        return own

    def _user_caller(self, frame: types.FrameType | None) -> types.FrameType | None:
        while frame is not None and not self.is_user(frame):
            frame = frame.f_back
        return frame

    def _made_here(self, name: str, frame: types.FrameType) -> bool:
        """Whether the closure variable `name` of `frame` was made by a frame of this trace."""
        return any(name in f.f_code.co_cellvars for f in _user_frames(frame.f_back, self._in_trace))

    def _unseen(self, frame: types.FrameType, fn: Any) -> None:
        """A C call of the program's own code not handled by name: by its module (`call_table.verdict`)."""
        verdict = call_table.verdict(fn)
        if verdict in (call_table.PURE, call_table.TORCH):
            return
        if verdict == call_table.GETTER:
            text = call_table.GETTERS[fn]
            self._getter(f"calls.{text[:-2]}", fn, text, None)
        elif verdict == call_table.REFUSED or not call_table.result_dropped(frame):
            what = call_table.shown(fn)
            self._refuse(frame, what, f"specengine does not know whether {what[:-2]} gives the same result on every "
                         "call: it would run once, while tracing, and every cached call would reuse its result; call "
                         "it outside the compiled function and pass the result in")  # fmt: skip

    def _drawn_from(self, frame: types.FrameType | None) -> None:
        """Refuse a draw from a generator object the function was given or reads (numpy's are Cython functions:
        no event shows their calls, so their states are compared at each call event while such objects exist)."""
        for what, g, state in self.generators:
            if frame is not None and not _same(state, _generator_state(g)):
                _set_generator_state(g, state)
                self._refuse(frame, f"drawing from {what} (a {type(g).__name__})", _DRAW_HINT)

    def _getter(self, name: str, getter: Callable, text: str, identity: bool | None) -> None:
        value = getter()
        wrap = (
            (lambda: _Identity(getter())) if identity else (lambda: _guarded(getter())) if identity is None else getter
        )
        GETTERS.setdefault(name, (wrap, text))
        self.state.note_global_read((name, ()), _Identity(value) if identity else _guarded(value))

    def _next(self, frame: types.FrameType) -> None:
        source = _next_argument(frame.f_code, frame.f_lasti)
        if source is None:
            return
        op, name, attrs = source
        value = _outside_value(frame, op, name, self._in_trace)
        for attr in attrs:
            value = getattr(value, attr, _MISSING) if value is not _MISSING else value
        if value is not _MISSING and hasattr(type(value), "__next__"):
            text = ".".join((name,) + attrs)
            self._refuse(frame, f"next({text})", f"{text} lives across calls: each call would advance it, but the "
                         "compiled function would reuse the value read while tracing; pass the value in")  # fmt: skip

    def _refuse(self, frame: types.FrameType, what: str, hint: str) -> None:
        called = None  # the library function the user's code called, where the C call was made inside it
        while frame is not None and (not self.is_user(frame) or is_installed(frame.f_code.co_filename)):
            frame, called = frame.f_back, frame  # (an installed library's frame: its user's caller is named)
        if called is not None and not _is_internal(called.f_code.co_filename):
            what = f"{called.f_globals.get('__name__', '?')}.{_qualname(called.f_code)}() (it calls {what})"
        where = "<unknown>" if frame is None else f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
        error = UnsupportedOpError(what, where, hint)
        self.refused = self.refused or error
        raise error

    def pause(self) -> None:
        if sys.getprofile() is self.fn:
            sys.setprofile(None)

    def resume(self) -> None:
        sys.setprofile(self.fn)

    def check(self) -> None:
        """Raise the first refusal, even where the program caught it."""
        if self.refused is not None:
            raise self.refused


def _rng_state() -> bytes:
    """The default generator's state, read under no torch-function or dispatch mode (the program's, or the
    engine's meta mode, may be active where the call is made)."""
    with torch._C.DisableTorchFunction(), torch._C._DisableTorchDispatch():
        return bytes(torch.default_generator.get_state().numpy())


def _qualname(code: types.CodeType) -> str:
    return getattr(code, "co_qualname", code.co_name)


def _numpy_random(owner: Any) -> bool:
    return owner is not None and type(owner).__module__.startswith("numpy.random")


def _torch_function(fn: Any, owner: Any) -> bool:
    module = getattr(fn, "__module__", None) or ""
    return module.startswith("torch") or isinstance(owner, (torch.Tensor, torch.Generator)) or owner is torch._C


_LOADS = ("LOAD_GLOBAL", "LOAD_DEREF", "LOAD_FAST", "LOAD_NAME", "LOAD_CLASSDEREF")
_SIMPLE = _LOADS + ("LOAD_CONST",)


@functools.lru_cache(maxsize=1024)
def _instructions(code: types.CodeType) -> tuple:
    return tuple(dis.get_instructions(code))


@functools.lru_cache(maxsize=4096)
def _next_argument(code: types.CodeType, offset: int) -> tuple | None:
    """For the `next(...)` call at `offset`: its iterator argument as (load op, name, attributes), where the argument
    is a name or a chain of attributes of one (`next(COUNTER)`, `next(self.it, None)`), else None."""
    ins = _instructions(code)
    k = next((i for i, x in enumerate(ins) if x.offset >= offset and x.opname in ("CALL", "CALL_FUNCTION")), None)
    if k is None or ins[k].arg not in (1, 2):
        return None
    argc, k = ins[k].arg, k - 1
    k -= 1 if k >= 0 and ins[k].opname == "PRECALL" else 0
    if argc == 2:  # next(it, default): a default loaded by one instruction
        if k < 0 or ins[k].opname not in _SIMPLE:
            return None
        k -= 1
    attrs: list[str] = []
    while k >= 0 and ins[k].opname == "LOAD_ATTR":
        attrs.insert(0, ins[k].argval)
        k -= 1
    if k < 0 or ins[k].opname not in _LOADS:
        return None
    return ins[k].opname, ins[k].argval, tuple(attrs)


def _outside_value(frame: types.FrameType, op: str, name: str, in_trace: Callable) -> Any:
    """The value a load reads where it comes from outside the trace (a global; a closure variable no frame of this
    trace made; an argument of the compiled function), else _MISSING."""
    code = frame.f_code
    if op in ("LOAD_GLOBAL", "LOAD_NAME"):
        return frame.f_globals.get(name, _MISSING)
    if op in ("LOAD_DEREF", "LOAD_CLASSDEREF"):
        if name in code.co_cellvars or any(name in f.f_code.co_cellvars for f in _user_frames(frame.f_back, in_trace)):
            return _MISSING  # made by a function of this trace
        return frame.f_locals.get(name, _MISSING)
    outer = list(_user_frames(frame.f_back, in_trace))
    n_args = code.co_argcount + code.co_kwonlyargcount
    if outer or name not in code.co_varnames[:n_args]:
        return _MISSING  # a local (a helper's argument comes from its caller: not followed)
    return frame.f_locals.get(name, _MISSING)


def _user_frames(frame: types.FrameType | None, in_trace: Callable) -> Iterator[types.FrameType]:
    """The user frames of this trace from `frame` down."""
    for f in _stack(frame):
        user = in_trace(f)
        if user is None:
            return
        if user:
            yield f


def _stack(frame: types.FrameType | None) -> Iterator[types.FrameType]:
    while frame is not None:
        yield frame
        frame = frame.f_back


def _generator_state(g: Any) -> Any:
    """The state of a random generator object (Python's `random.Random`, numpy's Generator, RandomState and bit
    generators; numpy's are Cython functions, whose calls no profile event shows), or _MISSING for other objects."""
    if isinstance(g, random.Random):
        return g.getstate()
    module = type(g).__module__ or ""
    if not module.startswith("numpy.random"):
        return _MISSING
    bits = getattr(g, "bit_generator", g)
    state = getattr(bits, "state", _MISSING) if not hasattr(g, "get_state") else g.get_state(legacy=False)
    return state if isinstance(state, dict) else _MISSING


def _set_generator_state(g: Any, state: Any) -> None:
    if isinstance(g, random.Random):
        g.setstate(state)
    elif hasattr(g, "set_state"):
        g.set_state(state)
    else:
        getattr(g, "bit_generator", g).state = state


def _same(a: Any, b: Any) -> bool:
    """Equal generator states (numpy's are dicts that may hold arrays)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if hasattr(a, "shape") and hasattr(b, "shape"):
        return a.shape == b.shape and bool((a == b).all())
    return type(a) is type(b) and a == b


def generators(named: list[tuple[str, Any]]) -> list[tuple[str, Any, Any]]:
    """The random generator objects among `named` values (and the items of their lists, tuples and dicts), with
    their states: `(what, generator, state)`."""
    out: list = []
    seen: set[int] = set()
    for what, v in named:
        items = list(v.values()) if isinstance(v, dict) else list(v) if isinstance(v, (list, tuple)) else []
        for x in [v] + items:
            if id(x) not in seen and (state := _generator_state(x)) is not _MISSING:
                seen.add(id(x))
                out.append((what, x, state))
    return out


_DRAW_HINT = (
    "the numbers would be drawn once, while tracing, and every cached call would reuse them; draw outside "
    "the compiled function and pass them in, or use torch.rand / torch.randint (traced)"
)


def _check_generators(found: list) -> None:
    """Refuse (and undo) a draw from a generator object the function was given or reads from outside."""
    changed = [(what, g, state) for what, g, state in found if not _same(state, _generator_state(g))]
    for _, g, state in changed:
        _set_generator_state(g, state)
    if changed:
        what, g, _ = changed[0]
        raise UnsupportedOpError(f"drawing from {what} (a {type(g).__name__})", "<traced function>", _DRAW_HINT)


class _Local(threading.local):
    watch: Any = None  # (a class default: a missing attribute's getattr with a default raises inside)


_local = _Local()


def current() -> Watch | None:
    return _local.watch


@contextmanager
def watching(state: Any, is_user: Callable[[types.FrameType], bool], named: list) -> Iterator[Watch]:
    """Watch this thread's C calls inside the block; `state.calls` is the watch (kept after the block: the random
    state check of `torch_settings.check_unchanged` reads it). The random generator objects among `named`
    (`(what, value)`: the arguments, the globals and closure variables the function reads) must not be drawn from."""
    found = generators(named)
    watch = Watch(state, is_user)
    watch.generators = found
    watch.iterators.scan(named)
    watch.prev = sys.getprofile()
    if watch.prev is not None and not callable(watch.prev):  # a C profiler (cProfile): it cannot be chained
        logs.root.warning("a C-level profiler (cProfile) is active: the C calls of this trace are not checked")
        yield watch  # (state.calls stays None: the random state is compared process-wide, as without a watch)
        _check_generators(found)
        return
    outer = current()
    _local.watch = state.calls = watch
    sys.setprofile(watch.fn)
    try:
        yield watch
    finally:
        sys.setprofile(watch.prev)
        _local.watch = outer
        watch.iterators.put_back()
        if outer is not None:  # a trace inside a trace: the outer one made these calls too
            outer.drew_torch |= watch.drew_torch
            outer.drew_host |= watch.drew_host
    watch.check()
    watch.iterators.check(code for code, own in watch.own.items() if own)
    _check_generators(found)
