"""Which prims nvFuser runs, and what it needs to know at compile time (pure Python, CPU-testable).

nvFuser handles symbolic sizes itself, but must know which dims broadcast; reduction, permute and cat dims,
ranks and dtypes are constants in our prims already. Scalars never leave a fusion: after specialization
every number is an expression over the prologue's symbols, passed into the fusion as a scalar input.
"""

from __future__ import annotations

from specengine.constraints import expr as E
from specengine.trace.proxies import TensorProxy
from specengine.trace.symbol import BoundSymbol

FUSIBLE_TAGS = frozenset({"elementwise", "reduction", "shape_op"})
FUSIBLE_NAMES = frozenset({"where", "full", "iota", "cat", "convert_element_type", "broadcast_in_dim", "reshape",
                           "permute", "slice", "squeeze"})  # fmt: skip
NOT_FUSIBLE = frozenset({"matmul", "shape", "copy_to"})


def is_fusible(bsym: BoundSymbol) -> bool:
    """A prim nvFuser can run: elementwise ops, casts, reductions, broadcasts, reshapes, permutes, slices,
    cat, where and full/iota. Torch-level ops are declined, so their decompositions are offered instead."""
    sym = bsym.sym
    if not sym.is_prim or not sym.pure or sym.name in NOT_FUSIBLE or sym.module != "prims":
        return False
    return bool(sym.tags & FUSIBLE_TAGS) or sym.name in FUSIBLE_NAMES


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
