"""Where in the user's program something happened: file, line and the source text."""

from __future__ import annotations

import linecache
import os
import sys
import sysconfig
from dataclasses import dataclass
from types import TracebackType

import torch

_SKIP_DIRS = (
    os.path.dirname(os.path.abspath(__file__)) + os.sep,
    os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
)


_INSTALLED = tuple({os.path.abspath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "platstdlib", "purelib",
                                                                                    "platlib")})  # fmt: skip


@dataclass(frozen=True)
class Provenance:
    """The frame that caused an op or a constraint (the innermost outside specengine and torch, which may be an
    installed library's), plus the op and the reason. `user`: the user's own file:line where that frame is a
    library's (`copy.py` called from `prog.py:12`); errors name it (`where`), traces print the frame's line."""

    filename: str
    lineno: int
    op: str = ""
    reason: str = ""
    user: str = ""

    @property
    def where(self) -> str:
        """The user's file:line: never a library's frame."""
        return self.user or f"{os.path.basename(self.filename)}:{self.lineno}"

    @property
    def source_line(self) -> str:
        return linecache.getline(self.filename, self.lineno).strip()

    def with_op(self, op: str, reason: str) -> Provenance:
        return Provenance(self.filename, self.lineno, op, reason, self.user)

    def __str__(self) -> str:
        parts = [self.where] + [p for p in (self.op, self.reason) if p]
        return ", ".join(parts)


_DEMO = os.path.join(_SKIP_DIRS[0], "__main__.py")


try:  # torch's deprecated checks (`torch._check_is_size`) run through typing_extensions' `deprecated` wrapper
    import typing_extensions

    _WRAPPERS = (os.path.abspath(typing_extensions.__file__),)
except ImportError:  # pragma: no cover - torch depends on it
    _WRAPPERS = ()


_internal: dict[str, bool] = {}  # filename -> _is_internal (asked for every frame below each op and decision)


def _is_internal(filename: str) -> bool:
    """Frames of specengine itself (but its demo), of torch and of decorators wrapping torch are not the user's."""
    known = _internal.get(filename)
    if known is None:
        if len(_internal) > 4096:  # (exec'd sources have names of their own)
            _internal.clear()
        known = _internal[filename] = (
            (filename.startswith(_SKIP_DIRS) and filename != _DEMO)
            or filename.startswith("<specengine-")
            or (filename in _WRAPPERS)
        )
    return known


def is_installed(filename: str) -> bool:
    """Code of installed libraries (the standard library, site-packages, frozen modules): never the user's."""
    return filename.startswith("<frozen") or filename.startswith(_INSTALLED)


def _users(filename: str) -> bool:
    return not _is_internal(filename) and not is_installed(filename)


def user_frame(op: str = "", reason: str = "") -> Provenance:
    """The innermost frame outside specengine and torch, as a Provenance; where it is an installed library's, the
    innermost frame of the user's own code above it is its `user` (what errors name)."""
    frame = sys._getframe(1)
    internal = _internal.get
    while frame is not None and (internal(frame.f_code.co_filename) or _is_internal(frame.f_code.co_filename)):
        frame = frame.f_back
    if frame is None:
        return Provenance("<unknown>", 0, op, reason)
    user = frame
    while user is not None and not _users(user.f_code.co_filename):
        user = user.f_back
    site = "" if user is None or user is frame else f"{os.path.basename(user.f_code.co_filename)}:{user.f_lineno}"
    return Provenance(frame.f_code.co_filename, frame.f_lineno, op, reason, site)


def user_line(tb: TracebackType | None) -> str | None:
    """The user's innermost file:line in a traceback (None if it holds none): where an error names the user's code."""
    where = None
    while tb is not None:
        if _users(tb.tb_frame.f_code.co_filename):
            where = f"{os.path.basename(tb.tb_frame.f_code.co_filename)}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


def code_site(fn: object) -> str:
    """`name (file:line)` of a function's definition (for an nn.Module, of its forward), for errors that cannot name
    a line inside it."""
    target = getattr(type(fn), "forward", fn) if hasattr(fn, "forward") and not hasattr(fn, "__code__") else fn
    code = getattr(getattr(target, "__func__", target), "__code__", None)
    if code is None:
        return getattr(fn, "__qualname__", type(fn).__qualname__)
    return (
        f"{code.co_qualname if hasattr(code, 'co_qualname') else code.co_name} "
        f"({os.path.basename(code.co_filename)}:{code.co_firstlineno})"
    )
