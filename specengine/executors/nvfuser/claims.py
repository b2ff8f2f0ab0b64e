"""Which prims nvFuser runs, and what it needs to know at compile time (pure Python, CPU-testable).

nvFuser handles symbolic sizes itself, but must know which dims broadcast; reduction, permute and cat dims,
ranks and dtypes are constants in our prims already. A prim is declined (left to the torch executor) where
the lowering could not run it exactly: no nvFuser dtype (int8, int16, uint8, complex), a slice step other
than 1 or constant bounds nvFuser rejects, rounding divisions, float-only ops on integers, pow on bools, and any op whose
result would need autograd (a fusion's outputs carry no autograd history).
"""

from __future__ import annotations

import torch

from specengine.constraints import expr as E
from specengine.executors.nvfuser.table import DTYPES, LOWERABLE, UNARY
from specengine.ir.proxies import TensorProxy
from specengine.ir.symbol import BoundSymbol

FUSIBLE_TAGS = frozenset({"elementwise", "reduction", "shape_op"})
FUSIBLE_NAMES = frozenset({"where", "full", "iota", "cat", "convert_element_type", "broadcast_in_dim", "reshape",
                           "permute", "slice", "squeeze"})  # fmt: skip
NOT_FUSIBLE = frozenset({"matmul", "shape", "copy_to"})
_ANY_DTYPE_UNARY = frozenset({"neg", "abs", "sign", "isnan", "isinf"})  # the others are float-only in nvFuser


def is_fusible(bsym: BoundSymbol) -> bool:
    """A prim nvFuser can run: elementwise ops, casts, reductions, broadcasts, reshapes, permutes, slices,
    cat, where and full/iota. Torch-level ops are declined, so their decompositions are offered instead."""
    sym = bsym.sym
    if not sym.is_prim or not sym.pure or sym.name in NOT_FUSIBLE or sym.module != "prims":
        return False
    return bool(sym.tags & FUSIBLE_TAGS) or sym.name in FUSIBLE_NAMES


def lowerable(bsym: BoundSymbol) -> bool:
    """Whether the lowering runs `bsym` exactly (see the module docstring for what is declined)."""
    name = bsym.sym.name
    if name not in LOWERABLE or needs_autograd(bsym):
        return False
    tensors = tensor_inputs(bsym) + [o for o in bsym.flat_outs() if isinstance(o, TensorProxy)]
    if not all(t.dtype in DTYPES for t in tensors):
        return False
    if any(isinstance(x, torch.dtype) and x not in DTYPES for x in bsym.flat_args()):
        return False
    check = _CHECKS.get(name)
    return check is None or check(bsym)


def needs_autograd(bsym: BoundSymbol) -> bool:
    """Grad mode is on and an input requires grad, or the op records for autograd (an output requires grad):
    a fusion's outputs would have no autograd history, so the gradients would silently go missing."""
    if any(isinstance(o, TensorProxy) and o.requires_grad for o in bsym.flat_outs()):
        return True
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensor_inputs(bsym))


def _slice_ok(bsym: BoundSymbol) -> bool:
    _, starts, ends, steps = bsym.args
    for s, e, k in zip(starts, ends, steps):
        s, e = E.as_expr(s), E.as_expr(e)
        if k != 1 or (s.is_const and s.value < 0) or (e.is_const and e.value < 0):
            return False
        if s.is_const and e.is_const and e.value < s.value:  # torch returns empty; nvFuser rejects it
            return False
    return True


def _narrow_ok(bsym: BoundSymbol) -> bool:
    start, length = (E.as_expr(x) for x in bsym.args[2:4])
    return not (start.is_const and start.value < 0) and not (length.is_const and length.value < 0)


def _div_ok(bsym: BoundSymbol) -> bool:  # true division only, on floats
    return bsym.kwargs_dict.get("rounding_mode") is None and bsym.output.dtype.is_floating_point


def _not_on_bools(bsym: BoundSymbol) -> bool:  # pow has no bool kernel in nvFuser
    return bsym.output.dtype is not torch.bool


def _unary_ok(bsym: BoundSymbol) -> bool:
    a = bsym.args[0]
    return bsym.sym.name in _ANY_DTYPE_UNARY or (isinstance(a, TensorProxy) and a.dtype.is_floating_point)


_CHECKS = {"slice": _slice_ok, "narrow": _narrow_ok, "div": _div_ok, "pow": _not_on_bools,
           **{n: _unary_ok for n in UNARY}}  # fmt: skip


def broadcast_requests(bsym: BoundSymbol) -> tuple[E.Expr, ...]:
    """For broadcast_in_dim: each symbolic input dim that may or may not broadcast needs `dim == 1` decided."""
    if bsym.sym.name != "broadcast_in_dim":
        return ()
    a, shape, bdims = bsym.args[0], bsym.args[1], bsym.args[2]
    out = []
    for i, d in enumerate(a.dims):
        target = E.as_expr(shape[bdims[i]])
        if not d.is_const and d is not target:
            out.append(E.eq(d, 1))
    return tuple(out)


def tensor_inputs(bsym: BoundSymbol) -> list[TensorProxy]:
    return [x for x in bsym.flat_args() if isinstance(x, TensorProxy)]
