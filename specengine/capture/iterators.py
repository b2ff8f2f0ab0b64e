"""Iterators that live across calls, advanced while tracing: `for v in COUNTER`, `zip(STREAM, xs)`, `list(GEN)`.

An iterator object reached from outside the trace (an argument, a global or a closure variable of the program's
code that ran, an attribute or item of one of these) holds a position that each call advances. The trace would
take the values it drew while tracing and every cached call would reuse them, while eager draws the next ones: the
compile is refused, naming the iterator and the program's line, whatever advanced it (a `for` loop, `zip`, `list`,
`sum`, unpacking, a C function the iterator was passed to):

- a generator: its frame resuming is a `call` event of this thread's profile function (`calls.Watch`), so this
  thread's own resumptions are seen, and only they (the generator cannot be put back: it stays advanced, as eager's
  call would have left it);
- an iterator implemented in C (`iter(list)`, `itertools.count`, `map`, `zip`, `enumerate`, a dict's iterators):
  its position (`__reduce__`, which CPython's iterators give, recursively through the iterators it holds) is
  compared after the trace; where it moved, it is put back (`__setstate__`) where the type allows it;
- an iterator class written in Python: its `__next__` is the program's code, traced; what it assigns is checked as
  any other write (`capture/mutations.py`, `capture/objects.py`), so it is not watched here.

Not seen: a C iterator whose position `__reduce__` does not give (a file object: `for line in FILE`), one held
beyond the first 64 items or attributes of a value, or deeper than an item or attribute of what the program reads;
and a C iterator that another thread advances while this one traces is taken as this thread's (its position is
compared process-wide).
"""

from __future__ import annotations

import dis
import inspect
import itertools
import os
import types
from typing import Any, Iterable

import torch

from specengine.errors import UnsupportedOpError
from specengine.ir.proxies import Proxy

_MISSING = object()
_MAX_CHILDREN = 64  # items or attributes of a value walked for iterators
_OPAQUE = (str, bytes, int, float, type, types.ModuleType, types.CodeType, Proxy, torch.Tensor)
_LOADS = ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_DEREF", "LOAD_CLASSDEREF", "LOAD_FAST", "LOAD_ATTR", "LOAD_METHOD")


def _c_iterator(v: Any) -> bool:
    cls = type(v)
    nxt = getattr(cls, "__next__", None)
    return nxt is not None and not isinstance(nxt, types.FunctionType) and not isinstance(v, types.GeneratorType)


def position(it: Any, depth: int = 0) -> Any:
    """A C iterator's position: its `__reduce__()`, with the iterators it holds replaced by their positions
    (_MISSING where the type gives none)."""
    try:
        reduced = it.__reduce__()
    except Exception:
        return _MISSING
    if not isinstance(reduced, tuple) or depth > 4:
        return _MISSING
    return tuple(_part(x, depth) for x in reduced)


def _part(x: Any, depth: int) -> Any:
    if isinstance(x, tuple):
        return tuple(_part(y, depth) for y in x)
    if _c_iterator(x):
        return (id(x), position(x, depth + 1))
    if type(x) in (int, bool, float, str, type(None)):
        return (type(x), x)
    return ("id", id(x))  # a container an iterator walks is the same object; its contents are the read set's


def _state(it: Any) -> Any:
    try:
        reduced = it.__reduce__()
    except Exception:
        return _MISSING
    return reduced[2] if isinstance(reduced, tuple) and len(reduced) > 2 else _MISSING


class Iterators:
    """The iterators that live across calls, found as one trace runs (see the module docstring)."""

    def __init__(self) -> None:
        self.seen: set[int] = set()
        self.frames: dict[int, str] = {}  # id(a generator's frame) -> what it is
        self.c: list[tuple[str, Any, Any, Any]] = []  # (what, iterator, position, state to put back)
        self.advanced: tuple[str, str] | None = None  # a generator this thread resumed
        self.moved: list[tuple[str, Any, Any]] = []  # the C iterators that moved (put_back)

    def scan(self, named: Iterable[tuple[str, Any]], depth: int = 1) -> None:
        """Note the iterators among `named` values, their items (lists, tuples, dicts) and their attributes."""
        for what, v in named:
            if id(v) in self.seen or isinstance(v, _OPAQUE):
                continue
            self.seen.add(id(v))
            if isinstance(v, types.GeneratorType):
                if v.gi_frame is not None:
                    self.frames[id(v.gi_frame)] = what
            elif _c_iterator(v):
                if (pos := position(v)) is not _MISSING:
                    self.c.append((what, v, pos, _state(v)))
            elif depth > 0:
                self.scan(_children(what, v), depth - 1)

    def scan_frame(self, frame: types.FrameType, inside: Any) -> None:
        """Note the iterators that a frame of the program's code starting now reads as globals or closure variables
        (`inside(name, frame)`: whether a closure variable was made by a frame of this trace)."""
        code, glb = frame.f_code, frame.f_globals
        self.scan((f"the global {n}", glb[n]) for n in code.co_names if n in glb)
        if code.co_freevars:
            local = frame.f_locals
            self.scan((f"the closure variable {n}", local[n]) for n in code.co_freevars
                      if n in local and not inside(n, frame))  # fmt: skip

    def resumed(self, frame: types.FrameType, user: types.FrameType | None) -> None:
        """A generator frame resumed by this thread (a `call` event): note it where it lives across calls."""
        what = self.frames.get(id(frame))
        if what is not None and self.advanced is None and frame.f_code.co_flags & inspect.CO_GENERATOR:
            where = "<unknown>" if user is None else f"{os.path.basename(user.f_code.co_filename)}:{user.f_lineno}"
            self.advanced = (what, where)  # (not the frame: a frame kept alive keeps its locals alive)

    def put_back(self) -> None:
        """Note the C iterators that moved, and put them back where their type allows it (also on error)."""
        self.moved = [(what, it, state) for what, it, pos, state in self.c if position(it) != pos]
        for _, it, state in self.moved:
            if state is not _MISSING and hasattr(it, "__setstate__"):
                it.__setstate__(state)

    def check(self, codes: Iterable[types.CodeType]) -> None:
        """Refuse an iterator that lives across calls and was advanced (`put_back` first)."""
        if self.advanced is not None:
            what, where = self.advanced
            raise UnsupportedOpError(f"advancing {what} (a generator)", where, _HINT)
        if self.moved:
            what, it, _ = self.moved[0]
            raise UnsupportedOpError(f"advancing {what} (a {type(it).__name__})", _site(what, codes), _HINT)


_HINT = (
    "it lives across calls: each call advances it, but the compiled function would reuse the values drawn while "
    "tracing; draw the values outside and pass them in (a list or a tensor)"
)


def _children(what: str, v: Any) -> list[tuple[str, Any]]:
    """The items and attributes of `v` (the first `_MAX_CHILDREN`: a vocabulary dict is not walked)."""
    if isinstance(v, dict):
        items = itertools.islice(v.items(), _MAX_CHILDREN)
        return [(f"{what}[{k!r}]" if type(k) in (str, int) else f"an item of {what}", x) for k, x in items]
    if isinstance(v, (list, tuple)):
        return [(f"{what}[{i}]", x) for i, x in enumerate(v[:_MAX_CHILDREN])]
    d = getattr(v, "__dict__", None)
    if isinstance(d, dict) and not callable(v):
        return [(f"{what}.{k}", x) for k, x in itertools.islice(d.items(), _MAX_CHILDREN) if type(k) is str]
    return []


def _site(what: str, codes: Iterable[types.CodeType]) -> str:
    """file:line of the first load, in the program's code that ran (the compiled function's first), of the name
    `what` ends with (`argument i`: the compiled function's i-th parameter)."""
    codes = list(codes)
    name = what.replace("]", "").replace("[", ".").split(".")[-1].split()[-1]
    if what.startswith("argument ") and name.isdigit() and codes and int(name) < codes[0].co_argcount:
        name = codes[0].co_varnames[int(name)]
    for code in codes:
        for ins in dis.get_instructions(code):
            if ins.opname in _LOADS and ins.argval == name:
                line = ins.positions.lineno if ins.positions is not None else None
                return f"{os.path.basename(code.co_filename)}:{line or code.co_firstlineno}"
    return f"{os.path.basename(codes[0].co_filename)}:{codes[0].co_firstlineno}" if codes else "<unknown>"
