"""Higher-order ops and torch.func transforms inside a traced function: never run on proxies.

torch's higher-order ops (`associative_scan`, `cond`, `while_loop`) and `torch.vmap` / `torch.func.vmap` take a
function and run it on tensors through machinery that needs real (or fake) tensors (functorch's batched tensors,
torch.compile itself when not compiling). While tracing, called with traced tensors, each becomes one opaque op of
the trace (`ops/generic.opaque_call`): at run time it calls torch's own eager implementation on the real tensors
(`associative_scan`: torch's reference scan; `cond`: the branch the predicate picks; `while_loop`: the loop;
`vmap`: functorch's vmap), and its output sizes come from torch's meta kernels run on symbolic stand-ins (vmap,
cond's branch) or from the op's contract (a scan's and a loop's outputs are shaped as their inputs). `cond` on a
predicate that is not a tensor (a size test) is a plain branch, traced through with a guard.

The function given to the op runs at run time, reading its globals then, as eager; it may not close over values of
the trace (a cell holding anything but a function, class or module is refused: at run time it would hold the
first call's value). Outside tracing, or without traced tensors, every wrapper is torch's own.
"""

from __future__ import annotations

import importlib
import types
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

from specengine.capture.autograd_functions import cell_filled
from specengine.ir import context
from specengine.ir.proxies import NumberProxy, Proxy, TensorProxy, unsupported
from specengine.ops.generic import opaque_call
from specengine.patching import original

_SCAN = importlib.import_module("torch._higher_order_ops.associative_scan")
_COND = importlib.import_module("torch._higher_order_ops.cond")
_WHILE = importlib.import_module("torch._higher_order_ops.while_loop")
_CELL_TYPES = (types.FunctionType, types.BuiltinFunctionType, types.ModuleType, type, torch.nn.Module)


def _traced(tree: Any) -> bool:
    return context.current() is not None and any(isinstance(x, Proxy) for x in pytree.tree_leaves(tree))


def _check_function(fn: Any, op: str) -> None:
    """The function an op runs at run time may not hold values of this call (they would be the first call's)."""
    code_fn = getattr(fn, "func", fn)  # (a functools.partial: its arguments are values too)
    held = list(getattr(fn, "args", ())) + list(getattr(fn, "keywords", {}).values())
    held += [c.cell_contents for c in getattr(code_fn, "__closure__", None) or () if cell_filled(c)]
    held += list(getattr(code_fn, "__defaults__", None) or ())
    bad = [v for v in held if not isinstance(v, _CELL_TYPES) and v is not None]
    if bad:
        raise unsupported(f"{op} of a function closing over values ({type(bad[0]).__name__})",
                          "the function runs at run time as one op, and would keep this call's values: pass them as "
                          "arguments (operands) instead")  # fmt: skip


def _tensors_only(leaves: list, op: str) -> None:
    for leaf in leaves:
        if not isinstance(leaf, TensorProxy):
            raise unsupported(f"{op} with a {type(leaf).__name__} among its inputs",
                              "pass tensors (a number as a 0-d tensor)")  # fmt: skip


def associative_scan(combine_fn: Callable, xs: Any, dim: int, reverse: bool = False,
                     combine_mode: str = "pointwise") -> Any:  # fmt: skip
    """torch's associative_scan: one op running torch's reference scan (its outputs are shaped as `xs`)."""
    if not _traced(xs):
        return original(_SCAN, "associative_scan")(combine_fn, xs, dim, reverse, combine_mode)
    _check_function(combine_fn, "associative_scan")
    leaves, spec = pytree.tree_flatten(xs)
    _tensors_only(leaves, "associative_scan")
    dim = int(dim)

    def run(*values: Any) -> list:
        out = _SCAN._fake_associative_scan(combine_fn, pytree.tree_unflatten(list(values), spec), dim, reverse)
        return pytree.tree_leaves(out)

    out = opaque_call("hop.associative_scan", run, lambda *v: [torch.empty_like(x) for x in v], tuple(leaves))
    return pytree.tree_unflatten(list(out), spec)


def cond(pred: Any, true_fn: Callable, false_fn: Callable, operands: Any = ()) -> Any:
    """torch.cond: a branch where the predicate is a size test; one op choosing the branch at run time where it is
    a tensor (its outputs shaped by `true_fn` on stand-ins: torch requires both branches to match)."""
    if context.current() is None or not (isinstance(pred, (TensorProxy, NumberProxy)) or _traced(operands)):
        return original(_COND, "cond")(pred, true_fn, false_fn, operands)
    if not isinstance(pred, TensorProxy):
        return (true_fn if pred else false_fn)(*operands)  # (bool(pred): a decision with a guard)
    for fn in (true_fn, false_fn):
        _check_function(fn, "torch.cond")
    leaves, spec = pytree.tree_flatten(tuple(operands))
    _tensors_only(leaves, "torch.cond")
    out_spec: list = []

    def branch(fn: Callable, values: tuple) -> list:
        out, s = pytree.tree_flatten(fn(*pytree.tree_unflatten(list(values), spec)))
        out_spec[:] = [s]
        return out

    def run(p: torch.Tensor, *values: Any) -> list:
        return branch(true_fn if bool(p) else false_fn, values)

    out = opaque_call("hop.cond", run, lambda p, *v: branch(true_fn, v), (pred, *leaves))
    return pytree.tree_unflatten(list(out), out_spec[0])


def while_loop(cond_fn: Callable, body_fn: Callable, carried_inputs: Any, *extra: Any, **kwargs: Any) -> Any:
    """torch's while_loop: one op running the loop at run time (its outputs are shaped as the carried inputs)."""
    if not _traced(carried_inputs) or extra or kwargs:
        return original(_WHILE, "while_loop")(cond_fn, body_fn, carried_inputs, *extra, **kwargs)
    for fn in (cond_fn, body_fn):
        _check_function(fn, "while_loop")
    leaves, spec = pytree.tree_flatten(tuple(carried_inputs))
    _tensors_only(leaves, "while_loop")

    def run(*values: Any) -> list:
        carried = pytree.tree_unflatten(list(values), spec)
        while bool(cond_fn(*carried)):
            carried = tuple(body_fn(*carried))
        return pytree.tree_leaves(carried)

    out = opaque_call("hop.while_loop", run, lambda *v: [torch.empty_like(x) for x in v], tuple(leaves))
    return pytree.tree_unflatten(list(out), spec)


def vmap(func: Callable, *args: Any, **kwargs: Any) -> Callable:
    """torch.vmap / torch.func.vmap: the batched function, called with traced tensors, is one op (functorch's vmap
    at run time; its output sizes from functorch on symbolic meta stand-ins)."""
    real = original(torch, "vmap")(func, *args, **kwargs)

    def batched(*call_args: Any, **call_kwargs: Any) -> Any:
        if not _traced((call_args, call_kwargs)):
            return real(*call_args, **call_kwargs)
        _check_function(func, "torch.vmap")
        leaves, spec = pytree.tree_flatten((call_args, call_kwargs))
        at = [i for i, x in enumerate(leaves) if isinstance(x, TensorProxy)]
        held = [None if i in at else (int(x) if isinstance(x, NumberProxy) else x) for i, x in enumerate(leaves)]
        out_spec: list = []

        def run(*tensors: Any) -> list:
            filled = list(held)
            for i, t in zip(at, tensors):
                filled[i] = t
            a, k = pytree.tree_unflatten(filled, spec)
            out, s = pytree.tree_flatten(real(*a, **k))
            out_spec[:] = [s]
            return out

        out = opaque_call("hop.vmap", run, run, tuple(leaves[i] for i in at))
        return pytree.tree_unflatten(list(out), out_spec[0])

    return batched


PATCHES = ((_SCAN, "associative_scan", associative_scan), (_COND, "cond", cond), (torch, "cond", cond),
           (_WHILE, "while_loop", while_loop), (torch, "vmap", vmap), (torch.func, "vmap", vmap))  # fmt: skip
