"""Differential runs of fuzzed programs: every call against eager, under the three dynamic modes (issue 6).

Per call the compiled function must return what eager returns (`assert_close`, `equal_nan=True`, the inputs
after the call included, so in-place mutation must be visible as in eager) or raise eager's exception type.
The cache counters must tell the truth: a miss is exactly one completed compile (counted by wrapping the
compile pipeline), a failed compile leaves the entries as they were, a call that some entry served before
never misses again, and the guards of the entry that served a call hold for its inputs.
"""

from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterator

import torch
from fuzzgen import Call, Program

import specengine
from specengine import api

MODES = (True, False, None)
_ENGINE_DIR = os.path.dirname(os.path.abspath(specengine.__file__)) + os.sep
_EAGER_TYPES = (RuntimeError, IndexError, ValueError, ZeroDivisionError, NotImplementedError)


@dataclass
class Tally:
    programs: int = 0
    calls: int = 0
    wrong: int = 0
    crashes: int = 0
    misses: int = 0
    eager_ok: int = 0
    failures: list[str] = field(default_factory=list)

    def merge(self, other: Tally) -> None:
        for name in ("programs", "calls", "wrong", "crashes", "misses", "eager_ok"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.failures += other.failures

    def line(self) -> str:
        per_call = self.misses / self.calls if self.calls else 0.0
        return (f"programs={self.programs} calls={self.calls} wrong={self.wrong} crashes={self.crashes} "
                f"misses/call={per_call:.3f}")  # fmt: skip


@dataclass
class Outcome:
    out: Any = None
    exc: BaseException | None = None
    args: list = field(default_factory=list)  # the inputs after the call (in-place ops mutate them)
    grads: tuple = ((), ())  # requires_grad of the output tensors, gradients with respect to the inputs


def clone(values: list) -> list:
    return [v.detach().clone().requires_grad_(v.requires_grad) if isinstance(v, torch.Tensor) else v for v in values]


def call_once(fn: Any, inputs: list) -> Outcome:
    args = clone(inputs)
    try:
        out = fn(*args)
    except Exception as e:  # noqa: BLE001 - the exception is the outcome
        return Outcome(None, e, args)
    return Outcome(out, None, args, _grads(out, args))


def _grads(out: Any, args: list) -> tuple:
    """requires_grad of each output tensor, and the gradients of the outputs' sum with respect to the inputs."""
    leaves = [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
    flags = tuple(t.requires_grad for t in leaves)
    wrt = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    losses = [t.sum() for t in leaves if t.requires_grad]
    if not losses or not wrt:
        return flags, ()
    with torch.enable_grad():
        grads = torch.autograd.grad(sum(losses), wrt, allow_unused=True)
    return flags, tuple(g.detach() if g is not None else None for g in grads)


@contextmanager
def counting_compiles() -> Iterator[list[int]]:
    """Count completed compiles (calls of the compile pipeline that returned an entry)."""
    count = [0]
    real = api.compile_entry

    def counted(*args: Any, **kwargs: Any) -> Any:
        entry = real(*args, **kwargs)
        count[0] += 1
        return entry

    api.compile_entry = counted
    try:
        yield count
    finally:
        api.compile_entry = real


def is_engine_error(exc: BaseException) -> bool:
    """A SpecEngineError, or an exception that no eager op raises, raised by the engine's code or generated code."""
    if isinstance(exc, specengine.SpecEngineError):
        return True
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    inner = tb.tb_frame.f_code.co_filename if tb is not None else ""
    engine = inner.startswith(_ENGINE_DIR) or inner.startswith("<specengine-")  # its sources, or generated code
    return engine and not isinstance(exc, _EAGER_TYPES)


def compare(expected: Outcome, got: Outcome) -> tuple[str, str] | None:
    """("crash" | "wrong", message) when the compiled call differs from eager; None when it matches."""
    e, g = expected.exc, got.exc
    if g is not None and (e is None or type(e) is not type(g)) and is_engine_error(g):
        return "crash", f"engine error {g!r}; eager {'returned' if e is None else f'raised {e!r}'}"
    if e is None and g is not None:
        return "wrong", f"eager returned, compiled raised {g!r}"
    if e is not None and g is None:
        return "wrong", f"eager raised {e!r}, compiled returned"
    if e is not None:
        return None if type(e) is type(g) else ("wrong", f"eager raised {e!r}, compiled raised {g!r}")
    try:
        torch.testing.assert_close(got.out, expected.out, equal_nan=True)
        torch.testing.assert_close(got.args, expected.args, equal_nan=True)
        if got.grads[0] != expected.grads[0]:
            return "wrong", f"requires_grad of the outputs {got.grads[0]}, eager {expected.grads[0]}"
        torch.testing.assert_close(got.grads[1], expected.grads[1], equal_nan=True)
    except (AssertionError, TypeError, RuntimeError) as ex:
        return "wrong", f"outputs differ: {ex}"
    return None


@dataclass
class _Snap:
    misses: int
    hits: int
    entries: tuple
    compiles: int

    @classmethod
    def of(cls, cfn: Any, compiles: list[int]) -> _Snap:
        return cls(specengine.cache_misses(cfn), specengine.cache_hits(cfn),
                   tuple(specengine.cache_entries(cfn)), compiles[0])  # fmt: skip


def check_counters(cfn: Any, before: _Snap, after: _Snap, got: Outcome, served_before: bool) -> str | None:
    """What the counters must say about one call; a message when they lie."""
    dm, dh = after.misses - before.misses, after.hits - before.hits
    if dm != after.compiles - before.compiles:
        return f"misses went up by {dm} but {after.compiles - before.compiles} compiles completed"
    if dm not in (0, 1) or dh not in (0, 1) or dm + dh > 1:
        return f"one call changed misses by {dm} and hits by {dh}"
    if dm == 0 and after.entries != before.entries:
        return "the entries changed without a miss"
    if dm == 1 and (after.entries[-1] in before.entries or specengine.last_traces(cfn) != after.entries[-1].traces):
        return "a miss did not append a new entry"
    if dm + dh == 0 and got.exc is None:
        return "a call that returned counted neither a hit nor a miss"
    if len(after.entries) > after.misses:
        return f"{len(after.entries)} entries but only {after.misses} misses"
    if len(specengine.recompile_reasons(cfn)) != max(after.misses - 1, 0):
        return f"{len(specengine.recompile_reasons(cfn))} recompile reasons for {after.misses} misses"
    if served_before and dm:
        return "an input that an entry served before missed again"
    return None


def check_guards(cfn: Any, program: Program, inputs: list) -> str | None:
    """The served entry's guards, evaluated as Python over the inputs, must all hold."""
    env = dict(zip(program.params, inputs))
    for g in specengine.last_guards(cfn):
        try:
            ok = eval(str(g), {"torch": torch}, env)  # noqa: S307 - the engine's own guard text, in a test
        except Exception as e:  # noqa: BLE001
            return f"guard {g} does not evaluate: {e!r}"
        if not ok:
            return f"guard {g} is false for the inputs it served"
    return None


def report(program: Program, calls: tuple[Call, ...], mode: Any, i: int, what: str) -> str:
    lines = [f"dynamic={mode}, call {i} ({calls[i]}): {what}", program.source().rstrip(), "calls:"]
    return "\n".join(lines + [f"  {j}: {c}" for j, c in enumerate(calls)])


def run_mode(program: Program, calls: tuple[Call, ...], eager: list[Outcome], mode: Any, tally: Tally) -> None:
    fn = program.function()
    cfn = specengine.compile(fn, dynamic=mode)
    served: set[Call] = set()
    with counting_compiles() as compiles:
        for i, call in enumerate(calls):
            inputs = call.inputs(i)
            before = _Snap.of(cfn, compiles)
            got = call_once(cfn, inputs)
            after = _Snap.of(cfn, compiles)
            tally.calls += 1
            problem = compare(eager[i], got)
            if problem is None:
                counters = check_counters(cfn, before, after, got, call in served)
                guards = check_guards(cfn, program, inputs) if got.exc is None and counters is None else None
                problem = ("crash", counters or guards) if counters or guards else None
            if after.misses + after.hits > before.misses + before.hits:
                served.add(call)
            if problem is not None:
                if problem[0] == "crash":
                    tally.crashes += 1
                else:
                    tally.wrong += 1
                tally.failures.append(report(program, calls, mode, i, f"{problem[0]}: {problem[1]}"))
    tally.misses += specengine.cache_misses(cfn)


def program_seed(seed: int, i: int) -> int:
    """The seed of program `i` of a fuzzing run with `seed` (bench/fuzz.py)."""
    return seed * 1_000_003 + i


def run_case(program: Program, calls: tuple[Call, ...], tally: Tally, modes: tuple = MODES) -> None:
    """Run `calls` eagerly and under each dynamic mode; add the figures and failures to `tally`."""
    old = specengine.config.recompile_limit
    specengine.config.recompile_limit = 10_000
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn = program.function()
            eager = [call_once(fn, call.inputs(i)) for i, call in enumerate(calls)]
            tally.eager_ok += sum(o.exc is None for o in eager) * len(modes)
            for mode in modes:
                run_mode(program, calls, eager, mode, tally)
    finally:
        specengine.config.recompile_limit = old
    tally.programs += 1
