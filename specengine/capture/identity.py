"""`is` on a symbolic bool: `flag is True` where `flag = x.shape[0] > 2`.

A comparison of symbolic numbers returns a symbolic bool (a NumberProxy) so that a program may keep it symbolic
(`x * (n > 2)`); a branch on it decides it then. Identity cannot be hooked: `flag is True` is False for a proxy,
while eager's `3 > 2 is True` holds. So a trace whose program code holds an identity comparison (`is`, `is not`)
other than against `None`, and in which a comparison returned a symbolic bool, is traced again with every
comparison decided where it is made (`Decider.pin_comparisons`: a guard, as a branch would record): the program
then gets eager's real bool. Comparisons against `None` are exact for proxies (a number is never None).

Not covered: `n is m` on two symbolic ints (eager's answer depends on CPython's small-int cache).
"""

from __future__ import annotations

import dis
import functools
import types
from collections.abc import Iterable

_NAME_LOADS = frozenset({"LOAD_FAST", "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_NAME", "LOAD_CLOSURE"})


@functools.lru_cache(maxsize=4096)
def _compares_identity(code: types.CodeType) -> bool:
    """Whether `code` (not its nested functions: each runs as its own code) has an `is` not against None."""
    window: tuple = (None, None)  # the two instructions before the current one
    for ins in dis.get_instructions(code):
        if ins.opname == "IS_OP" and not _against_none(ins, *window):
            return True
        window = (window[1], ins)
    return False


def _against_none(ins: dis.Instruction, first: dis.Instruction | None, second: dis.Instruction | None) -> bool:
    """Whether the IS_OP `ins` surely compares with None: `v is None` or `None is name` with nothing jumping in."""
    if ins.is_jump_target or second is None or second.is_jump_target:
        return False
    if _is_none(second):
        return True
    return second.opname in _NAME_LOADS and _is_none(first) and not first.is_jump_target


def _is_none(ins: dis.Instruction | None) -> bool:
    return ins is not None and ins.opname == "LOAD_CONST" and ins.argval is None


def compares_identity(codes: Iterable[types.CodeType]) -> bool:
    """Whether any of `codes` (the program code a trace ran) compares by identity other than against None."""
    return any(_compares_identity(c) for c in codes)
