"""What one trace records: bound symbols (with nested scopes for decompositions), decisions and fresh names.

`TraceState` owns the recording. It knows nothing of the Python frontend: the frontend (`capture/state.py`)
subclasses it and fills in the hooks (`_before_op`, `_after_op`, `_op_failed`, `_handler_observes`,
`_pause_user_code`), which do nothing here. What the ops learn about the inputs and rely on, which the prologue
must check, is kept apart in `InputFacts` (`state.facts`).
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

from specengine.constraints import expr as E
from specengine.constraints.decide import Decider
from specengine.constraints.floats import FloatExpr
from specengine.ir import data_dependent, unbacked
from specengine.ir.base import check_current
from specengine.ir.symbol import BoundSymbol
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


@dataclass
class InputFacts:
    """What the op rules learn about the inputs and rely on: the prologue checks it (`prologue/build.py`).

    The first three are the inputs' example layouts, given when the trace starts; the op rules write the rest.
    """

    formats: dict[str, tuple] = field(default_factory=dict)  # input tensor name -> its memory formats (ops/layouts)
    contiguity: dict[str, bool] = field(default_factory=dict)  # input tensor name -> contiguous in the example
    layouts: dict[str, tuple] = field(default_factory=dict)  # input tensor name -> its example layout (ops/overlap)
    layout_facts: list = field(default_factory=list)  # (tensor name, memory format, is_contiguous) relied on
    tensor_attrs: dict[str, dict] = field(default_factory=dict)  # input tensor name -> its example's Python attributes
    attr_facts: list = field(default_factory=list)  # (tensor name, attribute, value) read from an input tensor
    contiguous: set[str] = field(default_factory=set)  # inputs whose contiguity the trace relies on
    lifted: list = field(default_factory=list)  # (proxy, tensor, path): tensors closed over from outside
    uses_default_dtype: bool = False  # an op, or the program, read torch's default dtype (the prologue guards it)
    examples: Any = None  # ops/overlap.Examples: meta tensors with the example layouts, built on demand

    def read_default_dtype(self) -> None:
        """The trace depends on torch's default dtype."""
        self.uses_default_dtype = True


_EPOCHS = itertools.count(1)


class TraceState:
    """Everything one trace records: bound symbols (with nested scopes for decompositions) and decisions."""

    def __init__(self, decider: Decider, names: NameGen, facts: InputFacts | None = None,
                 symbol_sources: dict[str, str] | None = None):  # fmt: skip
        self.epoch = next(_EPOCHS)  # stamped on the proxies this trace makes (ir/base.py)
        self.decider = decider
        self.names = names
        self.facts = InputFacts() if facts is None else facts
        self.symbol_sources = symbol_sources or {}  # backed symbol -> the input it reads ('x.shape[0]')
        self.scopes: list[list] = [[]]
        self.raises: list[bool] = [False]  # per scope: whether an op recorded there may raise at run time
        self.pending_binds: list[str] = []  # unbacked sizes to read from the output of the op being recorded
        self.pending: list = []  # run-time checks decided inside the op being recorded (emitted after it)
        self.literals: dict[int, tuple] = {}  # id -> (tensor, bsyms before it, values): ops/ltorch_literals' memo
        self.kernel_runs: dict[tuple, list] = {}  # a generic call's pattern -> its logged runs (ops/kernel_memo.py)
        self._observed: list = [None]  # per scope: whether a handler in the user's frames observes the op (lazy)

    # Hooks of the Python frontend (capture/state.py); here, a trace without one.
    def _before_op(self, sym: Any, args: tuple, kwargs: dict, source: Any) -> tuple:
        """Before a top-level op: `(args, kwargs, token)`, the arguments it runs on; `token` goes to `_after_op`."""
        return args, kwargs, None

    def autocast_args(self, name: str, impl: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """A top-level op's arguments as autocast casts them, for a kernel that runs before the op is recorded
        (the generic path): unchanged here, where no autocast is traced."""
        return args, kwargs

    def _after_op(self, sym: Any, out: Any, token: Any) -> None:
        """After a top-level op was recorded."""

    def _op_failed(self, op: str, args: tuple, kwargs: dict, error: BaseException) -> None:
        """A top-level op raised `error` (eager's error)."""

    def _handler_observes(self) -> bool:
        """Whether an exception raised by the op being recorded would reach a handler in the user's code."""
        return False

    def _pause_user_code(self) -> bool:
        """Stop watching user code while the engine works on an op; whether there was anything to pause."""
        return False

    def _resume_user_code(self) -> None:
        """Watch user code again (after `_pause_user_code` returned True)."""

    def pause_user_code(self) -> bool:
        """`_pause_user_code` for a stretch of the engine's work outside `record` that runs no user code (the
        generic path's kernel run); whether it paused (then `resume_user_code()` after it)."""
        return self._pause_user_code()

    def resume_user_code(self) -> None:
        self._resume_user_code()

    def note_refusal(self, error: Exception) -> None:
        """An UnsupportedOpError was raised while this trace records."""

    @property
    def bsyms(self) -> list:
        return self.scopes[0]

    def record(self, sym: Any, args: tuple, kwargs: dict) -> Any:
        """Run `sym`'s meta (a prim's shape rule, or a torch-level op's decomposition) and record it."""
        top = len(self.scopes) == 1
        paused = top and self._pause_user_code()  # no user code runs in here (the hooks slow every Python call)
        try:
            return self._record(sym, args, kwargs, top)
        finally:
            if paused:
                self._resume_user_code()

    def _record(self, sym: Any, args: tuple, kwargs: dict, top: bool) -> Any:
        if top:
            check_current(self, args, kwargs)
        source = user_frame(sym.name) if top else None
        token = None
        if top:
            args, kwargs, token = self._before_op(sym, args, kwargs, source)
        self.scopes.append([])
        self.raises.append(False)
        self._observed.append(None if top else self._observed[-1])
        try:
            out = sym.meta(*args, **kwargs)
        except BaseException as error:
            if top:
                self.pending_binds.clear()
                self.pending.clear()
                self._op_failed(sym.name, args, kwargs, error)
            raise
        finally:
            subsymbols = tuple(self.scopes.pop())
            raises = self.raises.pop()
            self._observed.pop()
        self.raises[-1] = self.raises[-1] or raises  # an op whose decomposition may raise may raise
        if top and sym.print_name in _NO_OP_VIEWS and not (subsymbols or raises or token or self.pending):
            if any(out is a for a in args) and not self.pending_binds:
                return out  # a view that changes nothing (`x.t()` of a 1-D x): recorded, it would rebind its input
        args, kwargs = _snapshot(args), _snapshot(kwargs)  # (the program may change a list it passed afterwards)
        self.scopes[-1].append(BoundSymbol(sym, args, tuple(kwargs.items()), out, subsymbols, source, raises))
        if top and (self.pending_binds or self.pending):
            self._flush(out, source)
        if token is not None:
            self._after_op(sym, out, token)
        return out

    def _flush(self, out: Any, source: Any) -> None:
        """After a top-level op: read its unbacked sizes from its output, then run the checks it decided."""
        self.scopes[0].extend(data_dependent.binders(self, out, source))
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

    def checkpoint(self) -> tuple:
        """What `restore` needs to forget every decision and pending check recorded after now."""
        return self.decider.checkpoint(), len(self.pending)

    def restore(self, saved: tuple) -> None:
        """Forget the decisions and pending checks recorded since `saved` (a kernel run that is run again)."""
        self.decider.restore(saved[0])
        del self.pending[saved[1] :]

    def emit(self, bsym: Any) -> None:
        """Add a bound symbol at the top level: now, or right after the top-level op being recorded."""
        (self.scopes[0] if len(self.scopes) == 1 else self.pending).append(bsym)

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
            self._observed[-1] = self._handler_observes()
        return self._observed[-1]

    def decide(self, b: E.Expr, op: str, reason: str | Callable[[], str]) -> bool:
        """Decide a comparison on symbols, recording a constraint unless it is implied (`reason` may be a function
        making it: most decisions are implied, and the site is named only where a constraint is recorded)."""
        if type(b) is E.Expr and b.op != "bconst" and not self.decider.unbacked.mentions(b):
            return self.decider.decide(b, lambda: user_frame(op, _text(reason)))
        reason = _text(reason)
        if isinstance(b, FloatExpr):
            if self.decider.unbacked.mentions(b):  # a value of `.item()` of a float tensor: nothing is decided on it
                if b.op == "same":  # a pin (`float(v)`, `math.exp(v)`, a Python float argument)
                    raise unbacked.pin_error(b.args[0], op, reason)
                return unbacked.branch(self, b, op)
            return self.decider.decide_float(b, user_frame(op, reason))
        if b.op == "bconst":
            return b.value
        return unbacked.decide(self, b, op, reason)

    def check(self, b: E.Expr, op: str, message: str | None = None) -> bool:
        """A checked fact (`specengine.check`, `torch._check`): on backed symbols decided like a branch (a guard);
        on unbacked ones assumed and asserted at run time (raises now only if it can never hold)."""
        if b.op == "bconst" or not self.decider.unbacked.mentions(b):
            return self.decide(b, op, "a checked fact")
        unbacked.check(self, b, op, message)
        return True

    def pin(self, e: E.Expr, op: str, reason: str | Callable[[], str]) -> int:
        """The concrete value of an int expression, recording `e == value` unless already constant (`reason` as
        for `decide`)."""
        if e.op == "const":
            return e.value
        if self.decider.unbacked.mentions(e):
            value = unbacked.proved_value(self, e)  # no guard: true for every call
            if value is None:
                raise unbacked.pin_error(e, op, _text(reason))
            return value
        return self.decider.pin(e, lambda: user_frame(op, _text(reason)))


def _snapshot(x: Any) -> Any:
    """`x` with every list and dict in it copied: an op's arguments as they were when it ran (DenseNet appends to
    the list it passed to `torch.cat`; a bound symbol holding that list printed the later members)."""
    t = type(x)
    if t is list:
        return [_snapshot(v) for v in x]
    if t is tuple:
        return x if not any(type(v) in (list, tuple, dict) for v in x) else tuple(_snapshot(v) for v in x)
    if t is dict:
        return {k: _snapshot(v) for k, v in x.items()}
    return x


def _text(reason: str | Callable[[], str]) -> str:
    return reason() if callable(reason) else reason
