"""f-strings of symbolic numbers passed straight to an effect: `print(f"size {x.shape[0]}")` prints each call's size.

`format(n, spec)` of a NumberProxy pins its value (a guard), because a string made while tracing is a constant of
the trace. Where the string only ever reaches an effect op (`capture/effect_ops.py`), the value can stay symbolic:
the op formats it when it runs. While tracing, `NumberProxy.__format__` called by an f-string's FORMAT_VALUE in the
program's code looks at the bytecode after that instruction: if the formatted piece goes through the f-string's
BUILD_STRING straight into a call as an argument (nothing else runs on it in between), it returns a placeholder
token instead of the text, and notes the call's offset. An effect op that gets a string holding tokens checks that
its caller is that frame at that call (so the string came straight from the f-string), and keeps the string as a
template, formatted with the call's values when the op runs.

Every other fate of a token (the call was not an effect, the string was kept, compared, returned, or reached an
effect some other way) leaves it unconsumed when the trace ends, or is caught at the effect: then the trace is
thrown away (it may have decided things on the token's text) and run again with that f-string site pinned as
before (`Retrace`, caught by the compile pipeline; `PINNED` keeps the site pinned for every later compile).

Checks take the same path (issue 25): a message built for `torch._assert(cond, f"... got {x.shape}")` or
`torch._check(cond, "...")` is only read when the check fails, so formatting it must pin nothing. In a statement
that names a check (`_assert`, `_check*`), in the program's or a library's code, a number or a shape formatted by
an f-string, `%s`, `.format`, `str()` or `repr()` and passed straight (joined by the f-string, `+` or `%`) to the
call is a placeholder; the check (capture/compiling.py) takes the tokens and, only where it fails, raises eager's
error with the message rendered from the example's values (that call is then not compiled).
"""

from __future__ import annotations

import dis
import re
import sys
import threading
import types
import warnings
from dataclasses import dataclass, field

from specengine.capture import library
from specengine.errors import SpecEngineError
from specengine.ir.proxies import NumberProxy, SymSize
from specengine.provenance import _is_internal

_real_format = NumberProxy.__format__
_real_str = NumberProxy.__str__
_real_repr = NumberProxy.__repr__
_real_size_format = SymSize.__format__
_real_size_repr = SymSize.__repr__
_TOKEN = re.compile("\uf8f0(\\d+)\uf8f1")
PINNED: set[tuple[types.CodeType, int]] = set()  # f-string sites formatted as constants (pinned)
_local = threading.local()  # .stack: the tokens of each active trace on this thread
_consumers: dict[tuple[types.CodeType, int], tuple | None] = {}
EFFECT, CHECK = "effect", "check"  # what the call taking a formatted string is (see `_statement_kind`)


def program_code(filename: str) -> bool:
    """Whether `filename` is the program's own code (not specengine's, torch's, the standard library's or an
    installed package's): only its effects are ops."""
    return not (_is_internal(filename) or library.is_library(filename) or filename.startswith(library.SITE))


class Retrace(SpecEngineError):
    """A token of a symbolic f-string escaped to something other than an effect: trace again with it pinned."""


@dataclass
class _Token:
    value: NumberProxy
    spec: str
    frame: types.FrameType
    call: tuple[int, int]  # the offsets of the call that must receive the string (its caches included)
    site: tuple
    kind: str = EFFECT
    consumed: bool = False


@dataclass
class _Tokens:
    tokens: list[_Token] = field(default_factory=list)
    filters: tuple = ()  # the warnings filters when the trace started: (the list, its items)


def filters_changed() -> bool:
    """Whether the traced function changed the warnings filters (`catch_warnings`, `simplefilter` inside it)."""
    stack = getattr(_local, "stack", None)
    return bool(stack) and stack[-1].filters != (id(warnings.filters), tuple(warnings.filters))


# instruction -> how many stack items it pops (it may appear between an f-string piece and the call using it)
_POPS = {"LOAD_CONST": 0, "LOAD_FAST": 0, "LOAD_GLOBAL": 0, "LOAD_NAME": 0, "LOAD_DEREF": 0, "LOAD_CLOSURE": 0,
         "LOAD_FAST_CHECK": 0, "LOAD_FAST_LOAD_FAST": 0, "PUSH_NULL": 0, "KW_NAMES": 0, "NOP": 0, "CACHE": 0,
         "EXTENDED_ARG": 0, "LOAD_ATTR": 1, "LOAD_METHOD": 1, "UNARY_NEGATIVE": 1, "UNARY_NOT": 1,
         "UNARY_INVERT": 1, "CONVERT_VALUE": 1, "FORMAT_SIMPLE": 1, "FORMAT_WITH_SPEC": 2, "BINARY_SUBSCR": 2,
         "BINARY_OP": 2, "COMPARE_OP": 2}  # fmt: skip


def _pops(ins: dis.Instruction) -> int | None:
    if ins.opname == "FORMAT_VALUE":
        return 2 if ins.arg & 4 else 1
    if ins.opname in ("BUILD_STRING", "BUILD_TUPLE", "BUILD_LIST", "BUILD_SLICE"):
        return ins.arg
    if ins.opname == "BUILD_CONST_KEY_MAP":
        return ins.arg + 1
    return _POPS.get(ins.opname)


def consumer(code: types.CodeType, offset: int) -> tuple[int, int, str] | None:
    """The offsets (from, to) of the call that takes, as an argument, the string that the instruction at `offset`
    formats a value into (an f-string piece, `%`, a `str()`/`.format()` call), with nothing but joins (the
    f-string's BUILD_STRING, `+`, `%`) on it in between, and what that call is (EFFECT or CHECK); None where the
    string goes anywhere else."""
    key = (code, offset)
    if key not in _consumers:
        _consumers[key] = _find_consumer(list(dis.get_instructions(code)), offset)
    return _consumers[key]


_EFFECT_NAMES = frozenset(("print", "warn", "debug", "info", "warning", "error", "critical", "fatal", "log"))
_CHECK_NAMES = frozenset(("_assert", "_check", "_check_with", "_check_index", "_check_value", "_check_type",
                          "_check_not_implemented"))  # fmt: skip
_STATEMENT_ENDS = ("POP_TOP", "STORE_FAST", "STORE_NAME", "STORE_GLOBAL", "STORE_ATTR", "STORE_SUBSCR",
                   "STORE_DEREF", "RETURN_VALUE", "RESUME")  # fmt: skip
_NB_ADD, _NB_REMAINDER = 0, 6  # BINARY_OP's `+` and `%`: a string joined stays a string holding the tokens


def _statement_kind(instructions: list, start: int) -> str | None:
    """EFFECT or CHECK where the statement holding the formatting names an effect (`print`, `.warn`, `.info`, ...)
    or a check (`torch._assert`, `torch._check`) before it: a filter, so that a string given to another call
    (`int(f"{n}")`) is formatted as a constant without a retrace."""
    for ins in reversed(instructions[max(0, start - 64) : start]):
        if ins.opname in _STATEMENT_ENDS:
            return None
        if ins.opname in ("LOAD_GLOBAL", "LOAD_NAME", "LOAD_METHOD", "LOAD_ATTR"):
            if ins.argval in _EFFECT_NAMES:
                return EFFECT
            if ins.argval in _CHECK_NAMES:
                return CHECK
    return None


def _formats(ins: dis.Instruction) -> bool:
    """Whether the instruction may format a value into a string: an f-string piece, `%`, or a call."""
    return (
        ins.opname.startswith("FORMAT")
        or ins.opname in ("CALL", "PRECALL", "CALL_KW", "CALL_FUNCTION_EX")
        or (ins.opname == "BINARY_OP" and ins.arg == _NB_REMAINDER)
    )


def _joins(ins: dis.Instruction) -> bool:
    return ins.opname == "BUILD_STRING" or (ins.opname == "BINARY_OP" and ins.arg in (_NB_ADD, _NB_REMAINDER))


def _find_consumer(instructions: list, offset: int) -> tuple[int, int, str] | None:
    start = next((i for i, ins in enumerate(instructions) if ins.offset == offset), None)
    if start is None or not _formats(instructions[start]):
        return None
    kind = _statement_kind(instructions, start)
    if kind is None:
        return None
    depth = 0  # how many items lie above the tracked value
    i = start
    while (i := i + 1) < len(instructions):
        ins = instructions[i]
        if ins.opname in ("PRECALL", "CALL"):
            at = next((j for j in range(i, len(instructions)) if instructions[j].opname == "CALL"), None)
            if at is None:
                return None
            if depth >= ins.arg + 2:  # a call on values above the tracked one (`+ str(n)`): it stays where it is
                depth, i = depth - ins.arg - 1, at
                continue
            if depth >= ins.arg:
                return None  # the piece itself, or the callable
            end = instructions[at + 1].offset if at + 1 < len(instructions) else instructions[at].offset + 2
            return instructions[at].offset, end, kind
        pops = _pops(ins)
        if pops is None or ins.is_jump_target:
            return None
        if depth < pops:
            if not _joins(ins):
                return None
            depth = 0
            continue
        depth += dis.stack_effect(ins.opcode, ins.arg if ins.opcode >= dis.HAVE_ARGUMENT else None)
    return None


def _token(value: NumberProxy, spec: str, frame: types.FrameType) -> str | None:
    """A placeholder for `format(value, spec)` formatted by `frame`'s current instruction, or None (format it)."""
    stack = getattr(_local, "stack", None)
    if not stack or _is_internal(frame.f_code.co_filename) or (frame.f_code, frame.f_lasti) in PINNED:
        return None
    call = consumer(frame.f_code, frame.f_lasti)
    if call is None or (call[2] == EFFECT and not program_code(frame.f_code.co_filename)):
        return None
    tokens = stack[-1].tokens
    tokens.append(_Token(value, spec, frame, call[:2], (frame.f_code, frame.f_lasti), kind=call[2]))
    return f"\uf8f0{len(tokens) - 1}\uf8f1"


def _format(self: NumberProxy, spec: str) -> str:
    token = _token(self, spec, sys._getframe(1))
    return _real_format(self, spec) if token is None else token


def _str(self: NumberProxy) -> str:
    token = _token(self, "", sys._getframe(1))
    return _real_str(self) if token is None else token


def _repr(self: NumberProxy) -> str:
    token = _token(self, "", sys._getframe(1))
    return _real_repr(self) if token is None else token


def _size_text(size: SymSize, frame: types.FrameType) -> str | None:
    """`torch.Size([...])` with a placeholder per symbolic size, or None (format it, pinning its sizes)."""
    if not any(isinstance(d, NumberProxy) for d in size):
        return None
    parts = []
    for d in size:
        token = _token(d, "", frame) if isinstance(d, NumberProxy) else repr(d)
        if token is None:
            return None
        parts.append(token)
    return f"torch.Size([{', '.join(parts)}])"


def _size_format(self: SymSize, spec: str) -> str:
    text = _size_text(self, sys._getframe(1)) if not spec else None
    return _real_size_format(self, spec) if text is None else text


def _size_repr(self: SymSize) -> str:
    text = _size_text(self, sys._getframe(1))
    return _real_size_repr(self) if text is None else text


def template(text: str, caller: types.FrameType | None) -> tuple[list, list] | None:
    """For a string holding tokens, its pieces (str, or (index into the values, spec)) and the values; None for a
    plain string. Raises Retrace where the string did not come straight from the f-string to this call."""
    if "\uf8f0" not in text or not getattr(_local, "stack", None):
        return None
    tokens = _local.stack[-1].tokens
    pieces: list = []
    values: list = []
    for i, part in enumerate(_TOKEN.split(text)):
        if i % 2 == 0:
            pieces.append(part)
            continue
        token = tokens[int(part)]
        if caller is not token.frame or not token.call[0] <= caller.f_lasti < token.call[1] or token.consumed:
            _retrace([token])
        token.consumed = True
        pieces.append((len(values), token.spec))
        values.append(token.value)
    return pieces, values


def render(pieces: list, values: tuple) -> str:
    """The string of a template with the values of a call."""
    return "".join(p if isinstance(p, str) else format(values[p[0]], p[1]) for p in pieces)


def begin() -> None:
    """A trace starts on this thread."""
    if not hasattr(_local, "stack"):
        _local.stack = []
    _local.stack.append(_Tokens(filters=(id(warnings.filters), tuple(warnings.filters))))


def end(failed: bool) -> None:
    """The trace ends (`failed`: by an exception): a token not taken by an effect op means the trace used a
    placeholder as text (which may be why it failed): trace again. A KeyboardInterrupt is left to propagate."""
    tokens = _local.stack.pop().tokens
    left = [t for t in tokens if not t.consumed]
    for t in tokens:
        t.frame = None  # (frames hold the program's locals)
    error = sys.exc_info()[0] if failed else None
    if not left or (error is not None and not issubclass(error, Exception)):
        return
    if {t.site for t in left} - PINNED:
        _retrace(left)
    if error is None:
        raise SpecEngineError("internal error: a pinned f-string site gave a placeholder")
    # (else the error propagating is the Retrace that pinned these sites)


def _retrace(tokens: list) -> None:
    PINNED.update(t.site for t in tokens)
    raise Retrace("a symbolic f-string reached something other than an effect; traced again with it pinned")


def hint_text(pieces: list, values: list) -> str:
    """The string of a template with the example's values (a check's message, read only where the check fails)."""
    return render(pieces, tuple(v.hint for v in values))


# (the originals where no trace of this thread collects tokens)
NumberProxy.__format__, NumberProxy.__str__, NumberProxy.__repr__ = _format, _str, _repr
SymSize.__format__, SymSize.__repr__, SymSize.__str__ = _size_format, _size_repr, _size_repr
