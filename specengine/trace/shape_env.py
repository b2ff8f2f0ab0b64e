"""What torch's Python helpers find as a node's `shape_env` and `expr`: the few `ShapeEnv` methods they call, and
a view of our `Expr` with the sympy attributes they read. Decisions go through trace/kernel_decisions.py."""

from __future__ import annotations

from typing import Any

import torch

from specengine.constraints import expr as E
from specengine.trace.kernel_decisions import decide, decide_or, hint, pin, state


class DataDependentError(RuntimeError):
    """A kernel asked for a data-dependent (unbacked) size, which the generic path does not model yet."""


class ShapeEnvStandIn:
    """The few `ShapeEnv` methods that torch's Python helpers call on a node's `shape_env`.

    Static evaluation consults the Decider without recording; evaluation with a fallback decides (records).
    """

    prefer_deferred_runtime_asserts_over_guards = False
    var_to_range: dict = {}
    var_to_val: dict = {}
    replacements: dict = {}
    unbacked_var_to_val: dict = {}
    deferred_runtime_asserts: dict = {}

    def known(self, b: Any) -> bool | None:
        b = b.e if isinstance(b, ExprView) else b
        b = b if isinstance(b, E.Expr) else _as_bool(b)
        if b.op == "bconst":
            return b.value
        value = bool(hint(b))
        return value if state().decider.implied(b, value) else None

    def _maybe_evaluate_static(self, expr: Any, *args: Any, **kwargs: Any) -> Any:
        expr = expr.e if isinstance(expr, ExprView) else expr
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
        expr = expr.e if isinstance(expr, ExprView) else expr
        return decide(expr, "evaluate_expr") if expr.is_bool else pin(expr, "evaluate_expr")

    def optimization_hint(self, expr: Any, fallback: Any = None) -> Any:
        return hint(expr.e if isinstance(expr, ExprView) else expr)

    size_hint = optimization_hint

    def bound_sympy(self, expr: Any, *args: Any, **kwargs: Any) -> Any:
        return _Bounds(expr)

    def is_unbacked_symint(self, expr: Any) -> bool:
        return False

    def create_unbacked_symint(self, *args: Any, **kwargs: Any) -> Any:
        raise DataDependentError("the output size is data-dependent (an unbacked symbol)")

    create_unbacked_symfloat = create_unbacked_symbool = create_unbacked_symint

    def _constrain_range_for_size(self, *args: Any, **kwargs: Any) -> None:
        raise DataDependentError("the output size is data-dependent (an unbacked symbol)")

    _constrain_range = _constrain_is_bounded = _constrain_range_for_size

    def defer_runtime_assert(self, expr: Any, msg: str, fx_node: Any = None) -> bool:
        return decide(expr, "runtime assert")

    def guard_or_defer_runtime_assert(self, expr: Any, msg: str, fx_node: Any = None) -> bool:
        return decide(expr, "runtime assert")


class ExprView:
    """What torch's Python helpers read as `node.expr` (they expect sympy): free symbols and constness."""

    __slots__ = ("e",)

    def __init__(self, e: E.Expr):
        self.e = e

    @property
    def free_symbols(self) -> set:
        import sympy

        return {sympy.Symbol(f"s_{name}", integer=True) for name in self.e.free_symbols()}  # "s": backed sizes

    @property
    def is_number(self) -> bool:
        return self.e.is_const

    is_Integer = is_number
    is_Symbol = False

    def __str__(self) -> str:
        return str(self.e)


class _Bounds:
    def __init__(self, expr: Any):
        self.expr = expr.e if isinstance(expr, ExprView) else expr

    def is_singleton(self) -> bool:
        return isinstance(self.expr, E.Expr) and self.expr.is_const


SHAPE_ENV = ShapeEnvStandIn()


def _as_bool(b: Any) -> E.Expr:
    """The bool Expr of a node, a SymBool/SymInt over our node, or a Python bool."""
    if isinstance(b, (torch.SymBool, torch.SymInt)):
        b = b.node
    if isinstance(b, bool):
        return E.TRUE if b else E.FALSE
    return b._as_bool()
