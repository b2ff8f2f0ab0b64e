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
from typing import Any

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

    def __init__(self, defaults: bool):
        self.defaults = defaults
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
        return run()
    except Exception:
        if attempt.saved is None:
            raise
    finally:
        _attempts.pop()
    s = state()
    s.decider.restore(attempt.saved[0])
    del s.pending[attempt.saved[1] :]
    _attempts.append(_Attempt(defaults=False))
    try:
        return run()
    finally:
        _attempts.pop()


def decide_or(b: E.Expr, default: bool) -> bool:
    """torch's guard_or_false/true: `default` is always a safe answer (the kernel's general path, which checks what
    it needs with torch._check), so it is given unrecorded unless the hint or the constraints say otherwise; inside
    `defaults_first`, against the hint too (then the path is checked by running it)."""
    if b.op == "bconst":
        return b.value
    if state().decider.unbacked.mentions(b):  # data-dependent: what the facts prove, else the safe default
        proved = state().decider.prove(b)
        return default if proved is None else proved
    if bool(hint(b)) == default:
        return default
    if _attempts and _attempts[-1].defaults and state().decider.implied(b, not default) is False:
        if _attempts[-1].saved is None:
            _attempts[-1].saved = (state().decider.checkpoint(), len(state().pending))
        return default
    return decide(b, f"guard_or_{str(default).lower()}")


def decide(b: E.Expr, kind: str) -> bool:
    if b.op == "bconst":
        return b.value
    if _in_layout_function(kind):
        LAYOUT_DECISIONS[current_op()] += 1
        return bool(hint(b))
    return state().decide(b, current_op(), lambda: f"{kind} {b} ({kernel_site()})")


def pin(e: E.Expr, kind: str) -> int:
    if e.op == "const":
        return e.value
    PINS[(current_op(), kind)] += 1
    return state().pin(e, current_op(), lambda: f"{kind} pins {e} ({kernel_site()})")


def hint(e: E.Expr) -> Any:
    return state().decider.hints.eval(e)
