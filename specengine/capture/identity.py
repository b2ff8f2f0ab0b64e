"""`is` on a symbolic bool: `flag is True` where `flag = x.shape[0] > 2`.

A comparison of symbolic numbers returns a symbolic bool (a NumberProxy) so that a program may keep it symbolic
(`x * (n > 2)`); a branch on it decides it then. Identity cannot be hooked: `flag is True` is False for a proxy,
while eager's `3 > 2 is True` holds. So a trace in which a comparison returned a symbolic bool and an identity
comparison (`is`, `is not`) of user code that ran may have seen one is traced again with every comparison decided
where it is made (`Decider.pin_comparisons`: a guard, as a branch would record): the program then gets eager's
real bool. Comparisons against `None` are exact for proxies (a number is never None).

Which `is` may have seen a symbolic bool (`sites`, judged per code object, then per run by `coverage.py`):

- `a is b` gives eager's answer wherever one operand is neither a bool nor a NumberProxy: eager's bool is not
  that object, and neither is the proxy standing for it. An operand is read where its value is known at the
  `is`: a constant (`x is "s"`: judged once), or a local, closure or global variable loaded just before it with
  nothing run in between (`type(self).forward is wrapper`: read when the `is` runs, through an opcode event of
  that frame's local trace);
- any other `is` (both operands computed, the `is` a jump target), or one whose frame could not be watched
  (another trace function is set), counts as having seen one.

Not covered: `n is m` on two symbolic ints (eager's answer depends on CPython's small-int cache).
"""

from __future__ import annotations

import dis
import functools
import types
from dataclasses import dataclass, field
from typing import Any

from specengine.ir.proxies import NumberProxy

_NAME_LOADS = frozenset({"LOAD_FAST", "LOAD_GLOBAL", "LOAD_DEREF", "LOAD_NAME", "LOAD_CLOSURE"})
# loads that push one value and run no code: what each reads
_VALUE_LOADS = {"LOAD_FAST": "local", "LOAD_DEREF": "local", "LOAD_CLASSDEREF": "local", "LOAD_GLOBAL": "global",
                "LOAD_NAME": "name", "LOAD_CONST": "const"}  # fmt: skip


@dataclass(frozen=True)
class Sites:
    """The identity comparisons of one code object: `unsure` where one may see a symbolic bool whatever runs;
    `watched`: the offset of each other one -> how to read its known operands when it runs."""

    unsure: bool = False
    watched: dict = field(default_factory=dict)


@functools.lru_cache(maxsize=4096)
def sites(code: types.CodeType) -> Sites:
    """The `Sites` of `code` (not its nested functions: each runs as its own code)."""
    unsure, watched = False, {}
    window: tuple = (None, None)  # the two instructions before the current one
    for ins in dis.get_instructions(code):
        if ins.opname == "IS_OP" and not _against_none(ins, *window):
            readers = _operands(ins, *window)
            if any(how == "const" and not _may_be_bool(v) for how, v in readers):
                pass  # a constant that is no bool: eager's answer whatever the other operand
            elif any(how != "const" for how, _ in readers):
                watched[ins.offset] = tuple(r for r in readers if r[0] != "const")
            else:
                unsure = True
        window = (window[1], ins)
    return Sites(unsure, watched)


def _operands(ins: dis.Instruction, first: Any, second: Any) -> list[tuple[str, Any]]:
    """The operands of IS_OP `ins` that a simple load pushed right before it: (how, name or constant)."""
    if ins.is_jump_target or not _simple(second):
        return []
    out = [_reader(second)]
    if not second.is_jump_target and _simple(first):
        out.append(_reader(first))
    return out


def _simple(ins: dis.Instruction | None) -> bool:
    return ins is not None and ins.opname in _VALUE_LOADS and not str(ins.argrepr).startswith("NULL")


def _reader(ins: dis.Instruction) -> tuple[str, Any]:
    return _VALUE_LOADS[ins.opname], ins.argval


def _may_be_bool(value: Any) -> bool:
    """Whether `value` may be the operand that makes `is` differ: a bool or a NumberProxy."""
    return type(value) is bool or isinstance(value, NumberProxy)


def seen_at(frame: types.FrameType, readers: tuple) -> bool:
    """Whether the `is` `frame` is about to run may see a symbolic bool: no operand it reads is surely other."""
    local = frame.f_locals if any(how in ("local", "name") for how, _ in readers) else {}
    for how, name in readers:
        if how == "local":
            value = local.get(name, True)
        elif how == "global":
            value = frame.f_globals.get(name, frame.f_builtins.get(name, True))
        else:
            value = local.get(name, frame.f_globals.get(name, frame.f_builtins.get(name, True)))
        if not _may_be_bool(value):
            return False
    return True


def _against_none(ins: dis.Instruction, first: dis.Instruction | None, second: dis.Instruction | None) -> bool:
    """Whether the IS_OP `ins` surely compares with None: `v is None` or `None is name` with nothing jumping in."""
    if ins.is_jump_target or second is None or second.is_jump_target:
        return False
    if _is_none(second):
        return True
    return second.opname in _NAME_LOADS and _is_none(first) and not first.is_jump_target


def _is_none(ins: dis.Instruction | None) -> bool:
    return ins is not None and ins.opname == "LOAD_CONST" and ins.argval is None
