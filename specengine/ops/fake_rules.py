"""Data-dependent aten ops on the generic path: torch's own fake rules, with our unbacked symbols.

torch has no meta kernel for ops whose output size depends on data (aten ops tagged `dynamic_output_shape` or
`data_dependent_output`: `_unique2`, `unique_dim`, `unique_consecutive`, `bincount`, `repeat_interleave.Tensor`,
`nonzero`, `masked_select`, `_local_scalar_dense`). FakeTensorMode runs a Python rule for each instead
(`torch/_subclasses/fake_impls.py`): it asks its `fake_mode.shape_env` for an unbacked SymInt, constrains its range
(`_constrain_range_for_size(u, max=numel)`), states what it needs with `torch._check`, and builds the outputs with
`new_empty`. The same rules run here on our meta stand-ins, with a stand-in `fake_mode` whose `shape_env` is ours
(`ir/shape_env.py`): each unbacked SymInt is one of our unbacked symbols, named after the op, and each decision
or `torch._check` a rule takes on it is proved or asserted at run time (`ir/unbacked.py`). The generic path
then binds every new symbol from the real op's output in the computation (`bind_new_symbols`).

nonzero and masked_select have rules of their own here: torch's bound their sizes with sympy's `bound_sympy` over
its own symbols; ours bound them by the symbolic numel (a fact: `u <= x.numel()`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch._subclasses import fake_impls
from torch.utils import _pytree as pytree

from specengine.constraints import expr as E
from specengine.ir import context, unbacked
from specengine.ir import shape_env as SE
from specengine.ir import symnode as S
from specengine.ir.kernel_decisions import current_op
from specengine.ir.proxies import NumberProxy, TensorProxy, unsupported

_aten = torch.ops.aten
_MEMOS = ("nonzero_memo", "unique_memo", "unique_consecutive_memo", "item_memo")  # FakeTensor's per-tensor memos


class _FakeModeStandIn:
    """What torch's fake rules read from their `fake_mode`: the shape env, and `with fake_mode:` (which re-enters
    our meta mode, so that a rule's own aten calls are dispatched there too)."""

    allow_scalar_outputs = True

    def __init__(self, mode: Any):
        self.mode = mode
        self.shape_env = S.SHAPE_ENV

    def __enter__(self) -> Any:
        return self.mode.__enter__()

    def __exit__(self, *exc: Any) -> Any:
        return self.mode.__exit__(*exc)


def _size(what: str, hi: E.Expr) -> Any:
    """A fresh size-like unbacked symbol `0 <= u <= hi` (a fact), as a SymInt."""
    return S.symint(unbacked.new_symbol(what, int, lo=0, hi_expr=hi, op=current_op()))


def _numel(shape: Any) -> E.Expr:
    return math.prod((S.expr_of(d) for d in shape), start=E.const(1))


def _nonzero(fake_mode: Any, func: Any, arg: torch.Tensor) -> torch.Tensor:
    return arg.new_empty((_size("rows of nonzero", _numel(arg.shape)), arg.dim()), dtype=torch.int64)


def _masked_select(fake_mode: Any, func: Any, a: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    shape = torch.broadcast_shapes(a.shape, mask.shape)
    return a.new_empty((_size("elements of masked_select", _numel(shape)),))


_OWN = {_aten.nonzero.default: _nonzero, _aten.masked_select.default: _masked_select}


def run(mode: Any, func: Any, args: tuple, kwargs: dict, device: torch.device) -> Any:
    """`func` by its fake rule, on meta stand-ins; raises DataDependentError where torch has none."""
    rule = _OWN.get(func) or fake_impls.op_implementations_dict.get(func)
    if rule is None:
        raise SE.DataDependentError(f"{func} has a data-dependent output and torch has no fake rule for it")
    for t in pytree.tree_leaves((args, kwargs)):
        if isinstance(t, torch.Tensor):
            for memo in _MEMOS:
                if not hasattr(t, memo):
                    setattr(t, memo, None)
            t.fake_device = device  # some rules' outputs depend on the device (unique_dim on CPU)
    return rule(_FakeModeStandIn(mode), func, *args, **kwargs)


def symbols_before() -> set[str]:
    return set(context.require().decider.unbacked.symbols)


def bind_new_symbols(name: str, result: Any, before: set[str]) -> bool:
    """Bind each unbacked symbol the call made from its output (a size of an output tensor, or the returned number);
    whether it made any. A symbol that no output carries (a kernel's internal `.item()`) cannot be bound: refused."""
    new = set(context.require().decider.unbacked.symbols) - before
    if not new:
        return False
    leaves = pytree.tree_leaves(result)
    dims = {e.args[0] for t in leaves if isinstance(t, TensorProxy) for e in t.dims if e.op == "sym"}
    numbers = {n.expr.args[0] for n in leaves if isinstance(n, NumberProxy) and n.expr.op == "sym"}
    for u in sorted(new):
        if u in dims:
            unbacked.bind(E.sym(u))
        elif u not in numbers:
            raise unsupported(name, f"its kernel makes a data-dependent value ({unbacked.describe(u)}) that none "
                              "of its outputs carries; run it outside the compiled function")  # fmt: skip
    return True


def number(leaf: Any) -> NumberProxy | None:
    """The NumberProxy of a SymInt result that is one of our unbacked symbols (`.item()` of an int tensor)."""
    if not isinstance(leaf, torch.SymInt) or not isinstance(leaf.node, S.ExprNode):
        return None
    e = leaf.node.expr_
    state = context.require()
    if e.op != "sym" or e.args[0] not in state.decider.unbacked.symbols:
        return None
    return NumberProxy(e.args[0], e, state.decider.hints[e.args[0]], int)
