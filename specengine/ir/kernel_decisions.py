"""How a decision that one of torch's kernels takes on our symbolic sizes becomes one of our constraints.

The generic op path (ops/generic.py) runs torch's meta kernels on SymInts over our nodes (ir/symnode.py). Each
decision a kernel asks for (`guard_bool`, `expect_true`, `guard_int`, ...) is decided here by the tracing
context's Decider, with provenance: the op being run (`running_op`), and the innermost torch source line that
asked (`kernel_site`). Sizes that a kernel pins are counted per op (`PINS`, `pin_report`, bench/pins.py); questions
that only set the strides of meta outputs are answered by the hints, unrecorded (`LAYOUT_DECISIONS`).
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from typing import Any, Callable

import torch

from specengine.constraints import expr as E
from specengine.ir import context

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep

# Over-specialization by torch's kernels: (op, kind) -> how many sizes a kernel pinned (guard_int and friends).
PINS: Counter = Counter()
_ops: list[str] = []  # the generic ops being run, innermost last


def current_op() -> str:
    return _ops[-1] if _ops else "meta kernel"


class running_op:
    """Context manager naming the op whose kernel decides (for provenance and the pin report)."""

    def __init__(self, name: str):
        self.name = name

    def __enter__(self) -> None:
        _ops.append(self.name)

    def __exit__(self, *exc: Any) -> None:
        _ops.pop()


def pin_report() -> dict[str, int]:
    """Per op, how many sizes torch's kernels pinned (each pin is a recorded equality guard)."""
    out: Counter = Counter()
    for (op, _), n in PINS.items():
        out[op] += n
    return dict(out.most_common())


def kernel_site() -> str:
    """The innermost torch source line on the stack (where a Python kernel decided), or 'C++ kernel'."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_TORCH_DIR) and "fx/experimental" not in name and not name.endswith("overrides.py"):
            return f"torch/{name[len(_TORCH_DIR) :]}:{frame.f_lineno}"
        if not name.startswith((_TORCH_DIR, _HERE)) and "specengine" not in name:
            break
        frame = frame.f_back
    return "C++ kernel"


def state() -> Any:
    """The tracing state, for code a kernel runs other than the questions below."""
    untranslated("the tracing state")
    return context.require()


def untranslated(what: str) -> None:
    """Called where a kernel reaches `what`, which a run on placeholder sizes cannot translate: that run stops."""
    if _translation is not None:
        _translation.spoiled = True
        raise Untranslated(f"a kernel run on placeholder sizes reached {what}")


def _state() -> Any:
    return context.require()


# torch's layout predicates: their answers set the strides of meta outputs only, and our proxies carry no
# strides (the real op computes its real layout at run time), so they are answered by the hints, unrecorded.
_LAYOUT_FUNCTIONS = frozenset({
    "_check_strides_helper", "check_significant_strides", "check_all_strides", "check_contiguous_sizes_strides",
    "is_contiguous", "is_contiguous_or_false", "is_channels_last_contiguous_2d", "is_channels_last_contiguous_3d",
    "is_channels_last_contiguous", "is_channels_last_contiguous_or_false", "is_channels_last_contiguous_or_false_2d",
    "is_channels_last_contiguous_or_false_3d", "is_contiguous_for_memory_format",
    "is_contiguous_for_memory_format_or_false", "is_non_overlapping_and_dense", "_is_non_overlapping_and_dense_or_false",
    "is_non_overlapping_and_dense_or_false", "compute_elementwise_output_logical_to_physical_perm",
    "compute_elementwise_output_strides", "make_contiguous_strides_for", "make_channels_last_1d_strides_for",
    "make_channels_last_2d_strides_for", "make_channels_last_3d_strides_for", "make_channels_last_strides_for",
    "suggest_memory_format", "_compute_elementwise_output_strides", "is_channels_last_strides_2d",
    "is_channels_last_strides_3d",
})  # fmt: skip
LAYOUT_DECISIONS: Counter = Counter()  # per op: layout questions answered by the hints (no guard needed)


def _in_layout_function(kind: str) -> bool:
    """Whether the decision comes from one of torch's layout predicates (its Python frames, our own skipped)."""
    frame = sys._getframe(2)
    for _ in range(16):
        if frame is None:
            return False
        name = frame.f_code.co_filename
        if name.startswith(_TORCH_DIR) and frame.f_code.co_name in _LAYOUT_FUNCTIONS:
            return True
        if not name.startswith((_TORCH_DIR, _HERE)):
            return False
        frame = frame.f_back
    return False


class _Attempt:
    """One run of a kernel: whether it may answer guard_or_* with the default against the hint, and the state
    before the first such answer (to run the kernel again deciding by the hints, should that path fail)."""

    def __init__(self, defaults: bool, replaying: bool = False):
        self.defaults = defaults
        self.replaying = replaying  # a replayed run cannot fail: no state to save
        self.saved: tuple | None = None


_attempts: list[_Attempt] = []


def defaults_first(run: Any) -> Any:
    """`run()` (a kernel on our SymInts) answering each guard_or_false/true by its default, the general path that
    holds for every size (torch's contract for unbacked sizes: it states what it needs with torch._check): a size
    of 1 or 0 then gets no guard where the answer does not change the result (the `== 1` tests of a broadcast in
    batch_norm's reference). Where that path fails on the example (a check it makes does not hold), the decisions
    it recorded are forgotten and the kernel runs again answering by the hints, each recorded as a guard."""
    attempt = _Attempt(defaults=True)
    _attempts.append(attempt)
    try:
        if _translation is not None:
            _translation.begin()
        return run()
    except Exception:
        if attempt.saved is None:
            raise
    finally:
        _attempts.pop()
    _state().restore(attempt.saved)
    _attempts.append(_Attempt(defaults=False))
    try:
        if _translation is not None:
            _translation.begin()
        return run()
    finally:
        _attempts.pop()


# The questions a kernel asks. Each takes the Expr the kernel holds; under a `Translation` (a run on placeholder
# sizes, ops/kernel_memo.py) that Expr is translated to the real sizes first, and the answer logged.


def decide_or(b: E.Expr, default: bool) -> bool:
    """torch's guard_or_false/true: `default` is always a safe answer (the kernel's general path, which checks what
    it needs with torch._check), so it is given unrecorded unless the hint or the constraints say otherwise; inside
    `defaults_first`, against the hint too (then the path is checked by running it)."""
    if b.op == "bconst":
        return b.value
    t = _translation
    r = b if t is None else t(b)
    attempt = _attempts[-1] if _attempts else None
    answer = _or_shortcut(r, default, attempt)
    if answer is None:
        kind = _or_kind(default)
        if _in_layout_function(kind):
            LAYOUT_DECISIONS[current_op()] += 1
            return bool(_state().decider.hints.eval(r))
        answer = _decide(r, kind)
        shortcut = False
    else:
        shortcut = True
    if t is not None:
        t.note("or", b, (default, shortcut), answer)
    return answer


def decide(b: E.Expr, kind: str) -> bool:
    if b.op == "bconst":
        return b.value
    if _in_layout_function(kind):
        LAYOUT_DECISIONS[current_op()] += 1
        return bool(hint(b))
    return _asked("decide", b, kind, _decide)


def pin(e: E.Expr, kind: str) -> int:
    if e.op == "const":
        return e.value
    return _asked("pin", e, kind, _pin)


def known(b: E.Expr) -> bool | None:
    """What the constraints say of `b` without recording anything (torch's statically_known_true), else None."""
    if b.op == "bconst":
        return b.value
    return _asked("known", b, None, _known)


def _asked(tag: str, e: E.Expr, extra: Any, answer_of: Callable[[E.Expr, Any], Any]) -> Any:
    """`answer_of(e, extra)`; under a translation, of the real sizes, logged."""
    t = _translation
    if t is None:
        return answer_of(e, extra)
    answer = answer_of(t(e), extra)
    t.note(tag, e, extra, answer)
    return answer


def hint(e: E.Expr) -> Any:
    """The value on the example (never recorded: hints only guide, see LAYOUT_DECISIONS)."""
    t = _translation
    return _state().decider.hints.eval(e if t is None else t(e))


def unbacked_symbols() -> dict:
    """The trace's unbacked symbols, as the kernel being run may meet them (none on placeholder sizes, which
    stand for backed ones only)."""
    return {} if _translation is not None else _state().decider.unbacked.symbols


def _or_kind(default: bool) -> str:
    return f"guard_or_{str(default).lower()}"


def _or_shortcut(b: E.Expr, default: bool, attempt: _Attempt | None) -> bool | None:
    """guard_or_*'s answer where it needs no decision, else None (`attempt`: the kernel run it is asked in)."""
    if b.op == "bconst":
        return b.value
    s = _state()
    if s.decider.unbacked.mentions(b):  # data-dependent: what the facts prove, else the safe default
        proved = s.decider.prove(b)
        return default if proved is None else proved
    if bool(s.decider.hints.eval(b)) == default:
        return default
    if attempt is not None and attempt.defaults and s.decider.implied(b, not default) is False:
        if attempt.saved is None and not attempt.replaying:
            attempt.saved = s.checkpoint()
        return default
    return None


def _decide(b: E.Expr, kind: str, site: str | None = None) -> bool:
    return _state().decide(b, current_op(), lambda: f"{kind} {b} ({site or kernel_site()})")


def _pin(e: E.Expr, kind: str, site: str | None = None) -> int:
    if e.op == "const":
        return e.value
    PINS[(current_op(), kind)] += 1
    return _state().pin(e, current_op(), lambda: f"{kind} pins {e} ({site or kernel_site()})")


def _known(b: E.Expr, _: Any = None) -> bool | None:
    if b.op == "bconst":
        return b.value
    s = _state()
    if s.decider.unbacked.mentions(b):
        return s.decider.prove(b)
    value = bool(s.decider.hints.eval(b))
    return value if s.decider.implied(b, value) else None


# Memoized kernel runs (ops/kernel_memo.py).


class Untranslated(BaseException):
    """A kernel run on placeholder sizes reached the tracing state other than through the questions above (a
    data-dependent size, a float input's pin): that run cannot be memoized. (Not an Exception: a kernel's own
    `except Exception` must not take it for a failure of its own.)"""


class Translation:
    """A kernel run on placeholder sizes: each question is asked of the real sizes (`real`: placeholder name ->
    Expr) and logged with its answer and torch's site, so that a run on other sizes of the same pattern can
    replay the answers instead of running the kernel."""

    def __init__(self, real: dict[str, E.Expr]):
        self.real = real
        self._memo: dict = {}
        self.spoiled = False  # the run reached something untranslated (even if a kernel caught it)
        self.log: list[tuple] = []  # the questions of the current segment
        self.segments: list[list[tuple]] = []  # before the kernel (its stand-ins), then one per try
        self._seen: set[tuple] = set()

    def begin(self) -> None:
        """The kernel starts (again, in `defaults_first`'s second try: the first one's log is kept, as a replay
        fails the same way where its answers are the same)."""
        self.segments.append(self.log)
        self.log, self._seen = [], set()

    def finish(self) -> list[list[tuple]]:
        """The segments of a finished run."""
        return [*self.segments, self.log]

    def __call__(self, e: E.Expr) -> E.Expr:
        return _as_direct(e.subs(self.real, self._memo))

    def note(self, tag: str, e: E.Expr, extra: Any, answer: Any) -> None:
        # (a question asked again with the same answer adds nothing: replaying the first is enough)
        if (tag, e, extra, answer) not in self._seen:
            self._seen.add((tag, e, extra, answer))
            self.log.append((tag, e, extra, answer, kernel_site()))


_translation: Translation | None = None
_MIRRORED = {"==": E.eq, "!=": E.ne, "<": E.gt, "<=": E.ge, ">": E.lt, ">=": E.le}


def _as_direct(b: E.Expr) -> E.Expr:
    """`3 == s1` (a placeholder that stood for a constant, on the left) as the direct run asks it: `s1 == 3` (Python
    gives an int's comparison with a SymInt to the SymInt's reflected method), so that reasons read the same."""
    if b.op == "rel" and b.args[1].op == "const" and b.args[2].op != "const":
        return _MIRRORED[b.args[0]](b.args[2], b.args[1])
    return b


class translating:
    """Context manager: the kernel run inside it holds placeholder sizes, translated by `t`."""

    def __init__(self, t: Translation | None):
        self.t = t

    def __enter__(self) -> None:
        global _translation
        self.saved, _translation = _translation, self.t

    def __exit__(self, *exc: Any) -> None:
        global _translation
        _translation = self.saved


def replay(segments: list[list[tuple]], real: dict[str, E.Expr], memo: dict | None = None) -> bool:
    """Ask a logged run's questions of the sizes `real` (placeholder name -> Expr), in order, as the kernel asked
    them (each may record a constraint), in its tries as `defaults_first` makes them; False at the first answer that
    differs (the caller restores the state). `memo`: `Expr.subs`'s, kept across replays with the same `real`."""
    memo = {} if memo is None else memo
    if not _replay(segments[0], real, memo, None):
        return False
    if len(segments) == 2:  # one try, answering guard_or_* by default
        return _replay(segments[1], real, memo, _Attempt(True, replaying=True))
    first = _Attempt(True)  # failed where these answers are the same: its decisions after `saved` are dropped
    if not _replay(segments[1], real, memo, first) or first.saved is None:
        return False
    _state().restore(first.saved)
    return _replay(segments[2], real, memo, _Attempt(False, replaying=True))


def _replay(log: list[tuple], real: dict[str, E.Expr], memo: dict, attempt: _Attempt | None) -> bool:
    for tag, e, extra, answer, site in log:
        r = _as_direct(e.subs(real, memo))
        if tag == "decide":
            got = _decide(r, extra, site)
        elif tag == "or":
            got = _or_shortcut(r, extra[0], attempt)
            if got is None:
                if extra[1]:  # (answered without a decision when logged: one now)
                    return False
                got = _decide(r, _or_kind(extra[0]), site)
        elif tag == "pin":
            got = _pin(r, extra, site)
        else:
            got = _known(r)
        if got != answer or type(got) is not type(answer):
            return False
    return True
