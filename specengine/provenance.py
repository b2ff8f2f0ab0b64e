"""Where in the user's program something happened: file, line and the source text."""

from __future__ import annotations

import linecache
import os
import sys
from dataclasses import dataclass

import torch

_SKIP_DIRS = (
    os.path.dirname(os.path.abspath(__file__)) + os.sep,
    os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
)


@dataclass(frozen=True)
class Provenance:
    """The user's frame that caused an op or a constraint, plus the op and the reason."""

    filename: str
    lineno: int
    op: str = ""
    reason: str = ""

    @property
    def where(self) -> str:
        return f"{os.path.basename(self.filename)}:{self.lineno}"

    @property
    def source_line(self) -> str:
        return linecache.getline(self.filename, self.lineno).strip()

    def with_op(self, op: str, reason: str) -> Provenance:
        return Provenance(self.filename, self.lineno, op, reason)

    def __str__(self) -> str:
        parts = [self.where] + [p for p in (self.op, self.reason) if p]
        return ", ".join(parts)


_DEMO = os.path.join(_SKIP_DIRS[0], "__main__.py")


try:  # torch's deprecated checks (`torch._check_is_size`) run through typing_extensions' `deprecated` wrapper
    import typing_extensions

    _WRAPPERS = (os.path.abspath(typing_extensions.__file__),)
except ImportError:  # pragma: no cover - torch depends on it
    _WRAPPERS = ()


def _is_internal(filename: str) -> bool:
    """Frames of specengine itself (but its demo), of torch and of decorators wrapping torch are not the user's."""
    return (
        (filename.startswith(_SKIP_DIRS) and filename != _DEMO)
        or filename.startswith("<specengine-")
        or (filename in _WRAPPERS)
    )


def user_frame(op: str = "", reason: str = "") -> Provenance:
    """The innermost frame outside specengine and torch, as a Provenance."""
    frame = sys._getframe(1)
    while frame is not None and _is_internal(frame.f_code.co_filename):
        frame = frame.f_back
    if frame is None:
        return Provenance("<unknown>", 0, op, reason)
    return Provenance(frame.f_code.co_filename, frame.f_lineno, op, reason)
