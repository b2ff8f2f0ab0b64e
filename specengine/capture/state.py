"""What the Python frontend observes while a trace runs: the recording state of `ir/recording.py`, with the
frontend's own facts and its hooks into each op (torch state, autocast, caught errors, the user code that runs)."""

from __future__ import annotations

from typing import Any

import torch

from specengine.capture import exceptions, torchstate
from specengine.constraints.decide import Decider
from specengine.ir.recording import InputFacts, NameGen, TraceState


class CaptureState(TraceState):
    """A trace of user code. The fields below are the frontend's; each has one writer (named)."""

    def __init__(self, decider: Decider, names: NameGen, facts: InputFacts | None = None,
                 symbol_sources: dict[str, str] | None = None):  # fmt: skip
        super().__init__(decider, names, facts, symbol_sources)
        self.outside_roots: list = []  # globals and closure variables the function reads (interpreter)
        self.output_plan = None  # objects.OutputPlan where the output is not plain or an input changed (interpreter)
        self.global_reads: dict[tuple, Any] = {}  # global settings the function read (note_global_read)
        self.caught: Exception | None = None  # an engine error that a handler in the function observes (here)
        self.suppressing = 0  # how many `contextlib.suppress` blocks are open (exceptions)
        self.coverage = None  # coverage.Coverage: the user code that runs, while the function runs (coverage)
        self.calls = None  # calls.Watch: the C calls this thread makes while the function runs (calls)
        self.entry_torch_state = self.torch_state = torchstate.snapshot()  # at entry; now (here)
        self.frontend_s = 0.0  # seconds of the walks before and after the user's call: snapshots, checks (interpreter)

    def note_global_read(self, key: tuple, value: Any) -> None:
        """The function read a global setting (`(getter name, args)`): its first value is guarded by the prologue."""
        self.global_reads.setdefault(key, value)

    def _before_op(self, sym: Any, args: tuple, kwargs: dict, source: Any) -> tuple:
        """Record the torch state changes since the last top-level op; make autocast's casts explicit."""
        self.sync_torch_state(source)
        devices = torchstate.autocast_devices(self.torch_state)
        if not devices or sym.is_prim:
            return args, kwargs, None
        return torchstate.autocast_inputs(sym.name, sym.impl, args, kwargs, devices, self.decider.hints)

    def autocast_args(self, name: str, impl: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """A top-level op's arguments with autocast's casts made explicit, before its kernel runs."""
        if len(self.scopes) != 1 or not torch._C._is_any_autocast_enabled():  # (one C call on every generic op)
            return args, kwargs
        devices = torchstate.autocast_devices(torchstate.snapshot())  # (live: `_before_op` records the change)
        return torchstate.autocast_inputs(name, impl, args, kwargs, devices, self.decider.hints)[:2]

    def _after_op(self, sym: Any, out: Any, token: Any) -> None:
        torchstate.check_autocast_outputs(sym, out, token)  # the output dtypes eager's autocast gives

    def _op_failed(self, op: str, args: tuple, kwargs: dict, error: BaseException) -> None:
        exceptions.pin_raised(self, op, args, kwargs, error)  # a caught error's message shows the sizes

    def _handler_observes(self) -> bool:
        return self.suppressing > 0 or exceptions.handler_observes()

    def _pause_user_code(self) -> bool:
        paused = self.coverage is not None and self.coverage.pause()
        if paused and self.calls is not None:
            self.calls.pause()
        return paused

    def _resume_user_code(self) -> None:
        if self.calls is not None:
            self.calls.resume()
        self.coverage.resume()

    def note_refusal(self, error: Exception) -> None:
        """An UnsupportedOpError was raised: if a handler in the function catches it, the compile is refused."""
        if self.caught is None and (self.suppressing > 0 or exceptions.handler_observes()):
            self.caught = error

    def sync_torch_state(self, source: Any = None) -> None:
        """Record the torch state changes since the last top-level op (or since the function was called)."""
        now = torchstate.snapshot()
        if now != self.torch_state:
            self.scopes[0].extend(torchstate.transitions(self.torch_state, now, self.entry_torch_state, source))
            self.torch_state = now
