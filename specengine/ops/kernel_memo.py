"""Memoized kernel runs: a trace runs torch's meta kernel once per shape pattern of its generic calls, and every
later call of the same pattern replays the questions that run asked instead of running the kernel again.

A call's *pattern* is its op, its arguments with each size other than 0 and 1 replaced by a numbered placeholder
(one placeholder per distinct Expr, in order of appearance: a constant size too, the weight's channels as much as
the activation's spatial sizes), and the global settings a kernel reads. A convnet's batch norms differ in their
channels and spatial sizes but share a few patterns; torch's Python reference for one costs 40 ms of SymInt
arithmetic, its replay well under one. (A question on a constant size, asked of the real size, is a constant:
nothing is recorded for it, as on the direct path.)

The first call of a pattern runs the kernel on meta tensors whose sizes are placeholder symbols. Each question
the kernel asks (ir/kernel_decisions.py: decisions, guard_or_*, pins, static checks) is asked of the real sizes,
by substitution, so that run is the call's own run, recording the constraints it would; and it is logged with its
answer. The kernel is a function of its arguments' pattern and of those answers, so the logged run's result holds
for every call of the pattern whose answers are the same. A later call asks the logged questions of its own sizes
in order (recording what they record) and, where every answer matches, takes the logged output sizes with its own
sizes substituted for the placeholders; where one differs, the decisions are restored and the kernel runs.
Questions that only set meta strides (layout predicates, hints) are answered by the hints and not replayed, as
they are not recorded on the direct path either.

Not memoized (the kernel runs as before): float and bool number arguments, unbacked sizes, arguments other than
tensors, sizes and plain values, runs that reach the tracing state other than through those questions (a
data-dependent size), runs that needed torch's other dispatcher, and runs that failed.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import torch
from torch.utils import _pytree as pytree

from specengine.constraints import expr as E
from specengine.ir import context
from specengine.ir import kernel_decisions as K
from specengine.ir.proxies import NumberProxy, SymSize, TensorProxy

_PLAIN = frozenset({int, bool, str, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format})
_MAX_RUNS = 4  # logged runs kept per pattern (a pattern whose answers vary runs the kernel again)
ENABLED = True  # (tests compare traces and guards with and without the memo)
STATS: Counter = Counter()  # runs "logged", calls "replayed", replays whose answers "differed"


def _settings() -> tuple:
    """The global state a meta kernel may read (creation dtypes, autograd and autocast modes, sdpa backends)."""
    c = torch._C
    return (torch.get_default_dtype(), c.is_grad_enabled(), torch.is_inference_mode_enabled(),
            c._get_deterministic_algorithms(), c._is_any_autocast_enabled(), c._get_cudnn_enabled(),
            *(getattr(c, f, lambda: None)() for f in ("_get_flash_sdp_enabled", "_get_mem_efficient_sdp_enabled",
                                                       "_get_math_sdp_enabled", "_get_cudnn_sdp_enabled")))  # fmt: skip


class Call:
    """One generic call's pattern: its key, the real Exprs its placeholders stand for, and its tensor arguments
    (in the order the stand-ins are made)."""

    def __init__(self, func: Any, args: tuple, kwargs: dict):
        self.exprs: list[E.Expr] = []
        self.tensors: list[TensorProxy] = []
        self._slots: dict[E.Expr, int] = {}
        leaves, spec = pytree.tree_flatten((args, kwargs))
        unbacked = context.require().decider.unbacked
        self._unbacked = unbacked if unbacked.symbols else None
        parts = tuple(self._leaf(x) for x in leaves)
        self.key = None if None in parts or not ENABLED else (func, spec, parts, _settings())

    def _slot(self, e: E.Expr) -> Any:
        if e.op == "const" and e.value in (0, 1):  # (kernels test these themselves: kept as they are)
            return e.value
        i = self._slots.get(e)
        if i is None:
            if self._unbacked is not None and self._unbacked.mentions(e):
                return None
            i = self._slots[e] = len(self.exprs)
            self.exprs.append(e)
        return ("p", i)

    def _leaf(self, x: Any) -> Any:
        t = type(x)
        if t is TensorProxy:
            self.tensors.append(x)
            dims = tuple(self._slot(d) for d in x.dims)
            return None if None in dims else ("t", dims, x.dtype, x.device)
        if t is NumberProxy:
            if x.python_type is not int or x.expr.is_bool:
                return None
            return ("n", self._slot(x.expr))
        if t is SymSize:
            items = tuple(self._leaf(v) for v in x)
            return None if None in items else ("s", items)
        if t in _PLAIN:
            return (t, x)
        if t is float:
            return (t, x.hex())  # (0.0 and -0.0 differ; nan is one key)
        return None

    def placeholder(self, e: E.Expr) -> E.Expr:
        """The placeholder Expr of a size of an argument (0 and 1 stay themselves)."""
        i = self._slots.get(e)
        return e if i is None else E.sym(f"_kernel_size{i}")

    def translation(self) -> K.Translation:
        return K.Translation(self._real(self.exprs))

    @staticmethod
    def _real(exprs: list[E.Expr]) -> dict[str, E.Expr]:
        return {f"_kernel_size{i}": e for i, e in enumerate(exprs)}


class Run:
    """A logged kernel run: its questions and answers, its outputs (ops/generic.py's descriptions, sizes over
    placeholders), the tree they form and whether the call is pure."""

    __slots__ = ("log", "outputs", "spec", "pure", "memos")

    def __init__(self, log: list[list[tuple]], outputs: list, spec: Any, pure: bool):
        self.log = log
        self.outputs, self.spec, self.pure = outputs, spec, pure
        self.memos: dict[tuple, dict] = {}  # a call's sizes -> the translation memo of its questions (Expr.subs)


def _runs() -> dict:
    return context.require().kernel_runs


def replay(call: Call, name: str) -> tuple[Run, dict[str, E.Expr]] | None:
    """A logged run of `call`'s pattern whose questions, asked of `call`'s sizes, get the same answers (each
    recorded as a constraint where it would be), with the substitution that gives `call`'s sizes; else None,
    with nothing recorded."""
    runs = _runs().get(call.key)
    if not runs:
        return None
    state = context.require()
    real = Call._real(call.exprs)
    for run in runs:
        saved = state.checkpoint()
        with K.running_op(name):  # (the same sizes again, a repeated layer: its questions translate from memo)
            same = K.replay(run.log, real, run.memos.setdefault(tuple(call.exprs), {}))
        if same:
            STATS["replayed"] += 1
            return run, real
        STATS["differed"] += 1
        state.restore(saved)
    return None


def store(call: Call, t: K.Translation, outputs: list, spec: Any, pure: bool) -> None:
    """Keep a finished run of `call`'s pattern (one run in one dispatcher, reaching nothing untranslated)."""
    segments = t.finish()
    if t.spoiled or len(segments) not in (2, 3):  # (stand-ins, then one or two tries of defaults_first)
        return
    runs = _runs().setdefault(call.key, [])
    if len(runs) < _MAX_RUNS:
        runs.append(Run(segments, outputs, spec, pure))
        STATS["logged"] += 1


def real_dims(dims: tuple, real: dict[str, E.Expr]) -> tuple:
    memo: dict = {}
    return tuple(d.subs(real, memo) for d in dims)
