"""The tracing state: the bound symbols being recorded, the decider, and fresh names."""

from __future__ import annotations

import contextvars
import itertools
from contextlib import contextmanager
from typing import Any, Iterator

from specengine.constraints import expr as E
from specengine.constraints.decide import Decider
from specengine.constraints.floats import FloatExpr
from specengine.provenance import user_frame

# view ops whose rule returns its input only where the view changes nothing (sizes and strides alike); not
# `contiguous`, whose rule returns its input whatever the strides are
_NO_OP_VIEWS = frozenset(f"ltorch.{n}" for n in ("view", "reshape", "permute", "transpose", "squeeze", "expand", "flatten",
                                                 "t", "expand_as", "unflatten", "narrow", "getitem"))  # fmt: skip


class NameGen:
    """Fresh, unique printing names; names of inputs are reserved up front."""

    def __init__(self, reserved: set[str] = frozenset()):
        self._reserved = set(reserved)
        self._counters: dict[str, itertools.count] = {}

    def reserve(self, name: str) -> str:
        if name in self._reserved:
            raise ValueError(f"name {name!r} is already taken")
        self._reserved.add(name)
        return name

    def fresh(self, prefix: str) -> str:
        counter = self._counters.setdefault(prefix, itertools.count())
        while (name := f"{prefix}{next(counter)}") in self._reserved:
            pass
        self._reserved.add(name)
        return name


_EPOCHS = itertools.count(1)


class TraceState:
    """Everything one trace records: bound symbols (with nested scopes for decompositions) and decisions."""

    def __init__(self, decider: Decider, names: NameGen):
        self.epoch = next(_EPOCHS)  # stamped on the proxies this trace makes (trace/memo.py)
        self.decider = decider
        self.names = names
        self.symbol_sources: dict[str, str] = {}  # backed symbol -> the input it reads ('x.shape[0]')
        self.scopes: list[list] = [[]]
        self.raises: list[bool] = [False]  # per scope: whether an op recorded there may raise at run time
        self.uses_default_dtype = False
        self.lifted: list = []  # (proxy, tensor, path): tensors closed over from outside, inputs of the computation
        self.outside_roots: list = []  # the globals and closure variables the traced function reads (effects.py)
        self.input_formats: dict[str, tuple] = {}  # input tensor name -> its memory formats (ops/layouts.py)
        self.layout_facts: list = []  # (tensor name, memory format, is_contiguous): checked by the prologue
        self.output_plan = None  # objects.OutputPlan where the output is not plain or an input was changed
        self.global_reads: dict[str, Any] = {}  # global torch state the function read (see effects.GETTERS)
        self.caught: Exception | None = None  # an error of the engine that a handler in the function observes
        self.suppressing = 0  # how many `contextlib.suppress` blocks are open
        self.coverage = None  # coverage.Coverage: the user code that runs, while the function runs
        self.input_contiguity: dict[str, bool] = {}  # input tensor name -> contiguous in the example
        self.input_layouts: dict[str, tuple] = {}  # input tensor name -> its example layout (ops/overlap.py)
        self.examples = None  # ops/overlap.Examples: meta tensors with the example layouts, built on demand
        self.contiguous_inputs: set[str] = set()  # inputs whose contiguity the trace relies on (the prologue checks it)
        self.pending_binds: list[str] = []  # unbacked sizes to read from the output of the op being recorded
        self.pending: list = []  # run-time checks decided inside the op being recorded (emitted after it)
        self.literals: dict[int, tuple] = {}  # id -> (tensor, bsyms before it, values): torch.tensor of ints
        self._observed: list = [None]  # per scope: whether a handler in the user's frames observes the op (lazy)
        from specengine.trace import torchstate

        self.entry_torch_state = self.torch_state = torchstate.snapshot()

    @property
    def bsyms(self) -> list:
        return self.scopes[0]

    def record(self, sym: Any, args: tuple, kwargs: dict) -> Any:
        """Run `sym`'s meta (a prim's shape rule, or a torch-level op's decomposition) and record it."""
        from specengine.trace.symbol import BoundSymbol

        top = len(self.scopes) == 1
        if top:
            from specengine.trace.memo import check_current

            check_current(self, args, kwargs)
        source = user_frame(sym.name) if top else None
        autocast = None
        if top:
            args, kwargs, autocast = self._sync_torch_state(sym, args, kwargs, source)
        self.scopes.append([])
        self.raises.append(False)
        self._observed.append(None if top else self._observed[-1])
        paused = top and self.coverage is not None and self.coverage.pause()  # no user code runs in here
        try:
            out = sym.meta(*args, **kwargs)
        except BaseException as error:
            if top:
                self.pending_binds.clear()
                self.pending.clear()
                from specengine.trace.exceptions import pin_raised

                pin_raised(self, sym.name, args, kwargs, error)  # a caught error's message shows the sizes
            raise
        finally:
            if paused:
                self.coverage.resume()
            subsymbols = tuple(self.scopes.pop())
            raises = self.raises.pop()
            self._observed.pop()
        self.raises[-1] = self.raises[-1] or raises  # an op whose decomposition may raise may raise
        if top and sym.print_name in _NO_OP_VIEWS and not (subsymbols or raises or autocast or self.pending):
            if any(out is a for a in args) and not self.pending_binds:
                return out  # a view that changes nothing (`x.t()` of a 1-D x): recorded, it would rebind its input
        self.scopes[-1].append(BoundSymbol(sym, args, tuple(kwargs.items()), out, subsymbols, source, raises))
        if top and (self.pending_binds or self.pending):
            self._flush(out, source)
        if autocast is not None:  # the output dtypes eager's autocast gives
            from specengine.trace import torchstate

            torchstate.check_autocast_outputs(sym, out, autocast)
        return out

    def _flush(self, out: Any, source: Any) -> None:
        """After a top-level op: read its unbacked sizes from its output, then run the checks it decided."""
        from specengine.trace import unbacked

        self.scopes[0].extend(unbacked.binders(self, out, source))
        self.scopes[0].extend(self.pending)
        self.pending.clear()

    @contextmanager
    def deferred(self) -> Iterator[None]:
        """Bound symbols emitted meanwhile (run-time checks a kernel decides) wait for the next top-level op."""
        self.scopes.append([])
        try:
            yield
        except BaseException:
            if len(self.scopes) == 2:
                self.pending.clear()
            raise
        finally:
            self.scopes.pop()

    def emit(self, bsym: Any) -> None:
        """Add a bound symbol at the top level: now, or right after the top-level op being recorded."""
        (self.scopes[0] if len(self.scopes) == 1 else self.pending).append(bsym)

    def _sync_torch_state(self, sym: Any, args: tuple, kwargs: dict, source: Any) -> tuple:
        """Record the torch state changes since the last top-level op; make autocast's casts explicit."""
        from specengine.trace import torchstate

        self.sync_torch_state(source)
        devices = torchstate.autocast_devices(self.torch_state)
        if not devices or sym.is_prim:
            return args, kwargs, None
        return torchstate.autocast_inputs(sym, args, kwargs, devices, self.decider.hints)

    def sync_torch_state(self, source: Any = None) -> None:
        from specengine.trace import torchstate

        now = torchstate.snapshot()
        if now != self.torch_state:
            self.scopes[0].extend(torchstate.transitions(self.torch_state, now, self.entry_torch_state, source))
            self.torch_state = now

    def may_raise(self) -> bool:
        """The op being recorded checks something on the example sizes only (see BoundSymbol.may_raise).

        Returns True where that check must be decided with a guard instead: an exception handler in the user's
        frames would observe it (the op runs inside a `try`), so both outcomes must be traced.
        """
        if self.observed():
            return True
        self.raises[-1] = True
        return False

    def observed(self) -> bool:
        """Whether an exception handler in the user's frames observes the op being recorded (marks nothing)."""
        if self._observed[-1] is None:
            from specengine.trace.exceptions import handler_observes

            self._observed[-1] = self.suppressing > 0 or handler_observes()
        return self._observed[-1]

    def note_refusal(self, error: Exception) -> None:
        """An UnsupportedOpError was raised: if a handler in the function catches it, the compile is refused."""
        from specengine.trace.exceptions import handler_observes

        if self.caught is None and (self.suppressing > 0 or handler_observes()):
            self.caught = error

    def decide(self, b: E.Expr, op: str, reason: str) -> bool:
        """Decide a comparison on symbols, recording a constraint unless it is implied."""
        if isinstance(b, FloatExpr):
            if self.decider.unbacked.mentions(b):  # a value of `.item()` of a float tensor: nothing is decided on it
                from specengine.trace import unbacked

                if b.op == "same":  # a pin (`float(v)`, `math.exp(v)`, a Python float argument)
                    raise unbacked.pin_error(b.args[0], op, reason)
                raise unbacked.branch_error(b, op)
            return self.decider.decide_float(b, user_frame(op, reason))
        if b.op == "bconst":
            return b.value
        if self.decider.unbacked.mentions(b):
            from specengine.trace import unbacked

            return unbacked.decide(self, b, op, reason)
        return self.decider.decide(b, user_frame(op, reason))

    def check(self, b: E.Expr, op: str, message: str | None = None) -> bool:
        """A checked fact (`specengine.check`, `torch._check`): on backed symbols decided like a branch (a guard);
        on unbacked ones assumed and asserted at run time (raises now only if it can never hold)."""
        if b.op == "bconst" or not self.decider.unbacked.mentions(b):
            return self.decide(b, op, "a checked fact")
        from specengine.trace import unbacked

        unbacked.check(self, b, op, message)
        return True

    def pin(self, e: E.Expr, op: str, reason: str) -> int:
        """The concrete value of an int expression, recording `e == value` unless already constant."""
        if e.op == "const":
            return e.value
        if self.decider.unbacked.mentions(e):
            from specengine.trace import unbacked

            value = unbacked.proved_value(self, e)  # no guard: true for every call
            if value is None:
                raise unbacked.pin_error(e, op, reason)
            return value
        return self.decider.pin(e, user_frame(op, reason))


_current: contextvars.ContextVar[TraceState | None] = contextvars.ContextVar("specengine_trace", default=None)


def current() -> TraceState | None:
    """The active tracing state, or None outside tracing."""
    return _current.get()


def require() -> TraceState:
    state = _current.get()
    if state is None:
        raise RuntimeError("specengine: no active trace")
    return state


@contextmanager
def tracing(state: TraceState) -> Iterator[TraceState]:
    token = _current.set(state)
    try:
        yield state
    finally:
        _current.reset(token)
