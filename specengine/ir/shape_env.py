"""What torch's Python helpers find as a node's `shape_env` and `expr`: the few `ShapeEnv` methods they call, and
a view of our `Expr` with the sympy attributes they read. Decisions go through ir/kernel_decisions.py.

Data-dependent sizes: torch's fake rules (`torch/_subclasses/fake_impls.py`: unique, bincount, repeat_interleave,
`.item()`, ...) call `shape_env.create_unbacked_symint()` and then `_constrain_range_for_size(u, max=...)`; here
that makes one of our unbacked symbols (`ir/unbacked.py`) named after the op that asked, with that range. The
node of a bare unbacked symbol shows torch a `sympy.Symbol` named `u<k>` (what torch's helpers check for)."""

from __future__ import annotations

import sys
from typing import Any

import torch

from specengine.constraints import expr as E
from specengine.constraints.unbacked import hint_value
from specengine.ir.kernel_decisions import decide, decide_or, hint, known, pin, state, unbacked_symbols


class DataDependentError(RuntimeError):
    """A kernel asked for a data-dependent (unbacked) size, which the generic path does not model yet."""


class ShapeEnvStandIn:
    """The few `ShapeEnv` methods that torch's Python helpers call on a node's `shape_env`.

    Static evaluation consults the Decider without recording; evaluation with a fallback decides (records).
    """

    prefer_deferred_runtime_asserts_over_guards = False
    allow_dynamic_output_shape_ops = True  # torch's fake rules make unbacked sizes only where these are set
    allow_scalar_outputs = True
    var_to_range: dict = {}
    var_to_val: dict = {}
    replacements: dict = {}
    unbacked_var_to_val: dict = {}
    deferred_runtime_asserts: dict = {}

    def known(self, b: Any) -> bool | None:
        b = _unview(b)
        return known(b if isinstance(b, E.Expr) else _as_bool(b))

    def _maybe_evaluate_static(self, expr: Any, *args: Any, **kwargs: Any) -> Any:
        expr = _unview(expr)
        if isinstance(expr, E.Expr) and not expr.is_bool:
            return expr.value if expr.is_const else None
        return self.known(expr)

    def evaluate_sym_node(self, node: Any, size_oblivious: bool = False, fallback_value: Any = None) -> Any:
        if not node.is_bool():
            return node.int_()
        if isinstance(fallback_value, bool):
            return decide_or(node._as_bool(), fallback_value)
        return decide(node._as_bool(), "guard")

    def evaluate_expr(self, expr: Any, hint: Any = None, fx_node: Any = None, **kwargs: Any) -> Any:
        expr = _unview(expr)
        return decide(expr, "evaluate_expr") if expr.is_bool else pin(expr, "evaluate_expr")

    def optimization_hint(self, expr: Any, fallback: Any = None) -> Any:
        return hint(_unview(expr))

    size_hint = optimization_hint

    def bound_sympy(self, expr: Any, *args: Any, **kwargs: Any) -> Any:
        return _Bounds(expr)

    def is_unbacked_symint(self, expr: Any) -> bool:
        e = _unview(expr)
        return isinstance(e, E.Expr) and e.op == "sym" and e.args[0] in unbacked_symbols()

    def create_unbacked_symfloat(self, *args: Any, **kwargs: Any) -> Any:
        raise DataDependentError("a data-dependent float (the generic path keeps floats concrete)")

    def create_unbacked_symbool(self, *args: Any, **kwargs: Any) -> Any:
        raise DataDependentError("a data-dependent bool (a branch on tensor data)")

    def _constrain_range_for_size(self, expr: Any, min: int | None = None, max: int | None = None) -> None:
        """`u` is a size: `max(min, 0) <= u <= max` (torch passes sys.maxsize - 1 for "no bound")."""
        self._constrain_range(expr, 0 if min is None else builtins_max(min, 0), max)
        info = state().decider.unbacked.symbols[_unview(expr).args[0]]
        info.what = info.what.replace("a data-dependent int of", "an output size of")
        info.size_like = True  # size-oblivious reasoning applies (its stand-in value becomes 2, within the range)
        state().decider.hints[info.name] = hint_value(info, state().decider.hints)

    def _constrain_range(self, expr: Any, min: int | None = None, max: int | None = None) -> None:
        e = _unview(expr)
        info = state().decider.unbacked.symbols.get(e.args[0]) if isinstance(e, E.Expr) and e.op == "sym" else None
        if info is None:
            raise DataDependentError(f"a range for {expr}, which is not an unbacked symbol")
        if min is not None:
            info.lo = min if info.lo is None else builtins_max(info.lo, min)
        if max is not None and max < sys.maxsize - 1:
            info.hi = max if info.hi is None else builtins_min(info.hi, max)
        state().decider.hints[info.name] = hint_value(info, state().decider.hints)

    def defer_runtime_assert(self, expr: Any, msg: str, fx_node: Any = None) -> bool:
        return decide(expr, "runtime assert")

    def guard_or_defer_runtime_assert(self, expr: Any, msg: str, fx_node: Any = None) -> bool:
        return decide(expr, "runtime assert")


builtins_max, builtins_min = max, min


def _unview(x: Any) -> Any:
    """Our Expr behind what torch hands back: an ExprView, a sympy Symbol naming an unbacked symbol, or as is."""
    if isinstance(x, ExprView):
        return x.e
    if type(x).__module__.startswith("sympy") and getattr(x, "is_Symbol", False):
        return E.sym(x.name)
    return x


def sympy_view(e: E.Expr) -> Any:
    """What `node.expr` is for torch: a sympy Symbol for a bare unbacked symbol (torch's range and memo helpers
    require one), else an ExprView."""
    if e.op == "sym" and e.args[0] in unbacked_symbols():
        import sympy  # lazy: sympy only for torch helpers that ask for sympy values

        return sympy.Symbol(e.args[0], integer=True)
    return ExprView(e)


class ExprView:
    """What torch's Python helpers read as `node.expr` (they expect sympy): free symbols and constness."""

    __slots__ = ("e",)

    def __init__(self, e: E.Expr):
        self.e = e

    @property
    def free_symbols(self) -> set:
        import sympy  # lazy: sympy only for torch helpers that ask for sympy values

        unbacked = unbacked_symbols()
        return {sympy.Symbol(name if name in unbacked else f"s_{name}", integer=True)  # torch's prefixes: u, s
                for name in self.e.free_symbols()}  # fmt: skip

    @property
    def is_number(self) -> bool:
        return self.e.is_const

    is_Integer = is_number
    is_Symbol = is_Boolean = False

    def __str__(self) -> str:
        return str(self.e)


class _Bounds:
    def __init__(self, expr: Any):
        self.expr = _unview(expr)

    def is_singleton(self) -> bool:
        return isinstance(self.expr, E.Expr) and self.expr.is_const


def _as_bool(b: Any) -> E.Expr:
    """The bool Expr of a node, a SymBool/SymInt over our node, or a Python bool."""
    if isinstance(b, (torch.SymBool, torch.SymInt)):
        b = b.node
    if isinstance(b, bool):
        return E.TRUE if b else E.FALSE
    return b._as_bool()
