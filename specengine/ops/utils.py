"""Helpers shared by torch-level ops: decisions, dims, broadcasting and type promotion."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from specengine.constraints import expr as E
from specengine.constraints.folding import if_depth, simplify
from specengine.ir import context
from specengine.ir.proxies import NumberProxy, TensorProxy, value_expr
from specengine.ops import prims


def decide(b: E.Expr, op: str, reason: str) -> bool:
    """Decide a comparison on symbols (a constraint is recorded unless it is implied)."""
    return context.require().decide(b, op, reason)


def hint(e: Any) -> int:
    """The example value of an int, Expr or NumberProxy (for error messages and checks on example sizes).

    Reading it marks the op being recorded as one that may raise at run time (a check made on the example
    sizes only), so dead-code elimination keeps it and the torch op raises eager's error for other sizes.
    Where an exception handler in the user's frames would observe the check (the op runs inside a `try`), the value
    is pinned with a guard instead, so that the check goes the same way for every input the entry serves.
    """
    state = context.require()
    e = value_expr(e)
    if e.is_const or not state.may_raise():
        return e.eval(state.decider.hints)
    if e.is_bool:
        return state.decide(e, "check", "an exception handler in the function observes this check")
    return state.pin(e, "check", "an exception handler in the function observes this check")


def example(e: Any) -> int:
    """The example value, for an error message on a path that raises anyway (records nothing)."""
    return value_expr(e).eval(context.require().decider.hints)


def fmt_shape(dims: Sequence) -> str:
    return "[" + ", ".join(str(example(d)) for d in dims) + "]"


def canonical_dim(dim: Any, ndim: int) -> int:
    """A dim index in [0, ndim), raising IndexError as torch does."""
    dim = int(dim)
    rank = max(ndim, 1)
    if not -rank <= dim < rank:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-rank}, {rank - 1}], but got {dim})")
    return dim % rank


def canonical_dims(dims: Any, ndim: int) -> tuple[int, ...]:
    """Reduction dims: None or () means every dim."""
    if dims is None or (isinstance(dims, (tuple, list)) and len(dims) == 0):
        return tuple(range(ndim))
    if not isinstance(dims, (tuple, list)):
        dims = (dims,)
    out = tuple(canonical_dim(d, ndim) for d in dims)
    if len(set(out)) != len(out):
        raise RuntimeError(f"dim {out} appears multiple times in the list of dims")
    return tuple(sorted(out))


def shape_arg(args: tuple) -> tuple:
    """Sizes given as varargs or as one sequence."""
    if len(args) == 1 and isinstance(args[0], (tuple, list, torch.Size)):
        return tuple(args[0])
    return tuple(args)


_MAX_IF_DEPTH = 2  # deeper broadcast sizes are decided with guards instead (compile time stays linear)


def broadcast_pair(x: E.Expr, y: E.Expr, index: int) -> E.Expr:
    """The broadcast of two dims, valid for every size: `y if x == 1 else x`. No guard is recorded.

    Sizes that cannot broadcast raise eager's error here when the example sizes are incompatible; for
    later inputs the torch op itself raises that error at run time. An executor that needs the decision
    asks for it with a needs-constant request on `x == 1`.
    """
    if x is y or (y.is_const and y.value == 1):
        return x
    if x.is_const and x.value == 1:
        return y
    if x.op in ("if", "max", "min") or y.op in ("if", "max", "min"):  # `max(0, s0)` of a size is s0: fold it
        ranges = context.require().decider.ranges
        x, y = simplify(x, ranges), simplify(y, ranges)
        if x is y:
            return x
    if y in _operands(x) or x in _operands(y):  # broadcasting with a size already broadcast in changes nothing
        return x if y in _operands(x) else y
    state = context.require()
    hx, hy = x.eval(state.decider.hints), y.eval(state.decider.hints)
    unbacked = state.decider.unbacked.mentions(x) or state.decider.unbacked.mentions(y)  # no example value
    if state.may_raise():  # a handler observes whether they broadcast: decide it with a guard
        ok = decide(E.or_(E.eq(x, y), E.eq(x, 1), E.eq(y, 1)), "broadcast", f"dims {index} broadcast")
    else:  # unguarded: the op raises at run time where the sizes do not broadcast
        ok = unbacked or hx == hy or hx == 1 or hy == 1
    if not ok:
        raise RuntimeError(
            f"The size of tensor a ({hx}) must match the size of tensor b ({hy}) at non-singleton dimension {index}"
        )
    if x.is_const or y.is_const:
        return x if x.is_const else y  # a size other than 1 is the result wherever the pair is valid
    decider = context.require().decider
    # a decision already implied (a size pinned to 1, as a module buffer's is) needs neither an `if` nor a guard
    for known, result in ((E.eq(x, y), x), (E.ne(x, 1), x), (E.ne(y, 1), y), (E.eq(x, 1), y), (E.eq(y, 1), x)):
        if (unbacked or known.eval(decider.hints)) and decider.implied(known, True):
            return result  # already decided: the broadcast needs no `if`
    if max(if_depth(x), if_depth(y)) >= _MAX_IF_DEPTH:
        return _decided_broadcast(x, y, index)  # keep sizes small: nested `if`s would grow with every layer
    return E.ite(E.eq(x, 1), y, x)


def _decided_broadcast(x: E.Expr, y: E.Expr, index: int) -> E.Expr:
    """The broadcast decided with one guard (a stronger, smaller guard set), for sizes that already hold an `if`.

    The guard is that an operand other than 1 at the example (the deeper one first) is not 1: it is then the result
    wherever the pair is valid (the other may still be 1; the op raises at run time where it is neither), and later
    broadcasts of that size are decided by the same fact, without a guard each. Both 1: the deeper one is 1.
    """
    hints = context.require().decider.hints
    ordered = sorted([(x, "left"), (y, "right")], key=lambda p: -if_depth(p[0]))
    for size, side in ordered:
        if size.eval(hints) != 1:
            decide(E.ne(size, 1), "broadcast", f"dim {index} of the {side} operand is not 1")
            return size
    (deep, side), (other, _) = ordered
    decide(E.eq(deep, 1), "broadcast", f"dim {index} of the {side} operand is 1")
    return other


def _operands(size: E.Expr) -> set[E.Expr]:
    """The sizes that a broadcast size `b if a == 1 else a` (nested) was built from."""
    if size.op != "if":
        return {size}
    cond, then, other = size.args
    if cond.op == "rel" and cond.args[0] == "==" and cond.args[2] is E.const(1) and cond.args[1] is other:
        return _operands(other) | _operands(then)
    return {size}


def broadcast_shapes(*shapes: tuple) -> tuple:
    ndim = max((len(s) for s in shapes), default=0)
    out: list[E.Expr] = [E.const(1)] * ndim
    for shape in shapes:
        padded = (E.const(1),) * (ndim - len(shape)) + tuple(shape)
        out = [broadcast_pair(a, b, i) for i, (a, b) in enumerate(zip(out, padded))]
    return tuple(out)


def expand_to(a: Any, dims: tuple) -> Any:
    """`a` broadcast to `dims` with prims.broadcast_in_dim (numbers pass through)."""
    if not isinstance(a, TensorProxy) or a.dims == dims:
        return a
    offset = len(dims) - a.ndim
    return prims.broadcast_in_dim(a, dims, tuple(range(offset, len(dims))))


def convert(a: Any, dtype: torch.dtype) -> Any:
    if isinstance(a, TensorProxy) and a.dtype != dtype:
        return prims.convert_element_type(a, dtype)
    return a


def meta_value(x: Any) -> Any:
    """A stand-in for dtype rules: a meta tensor of the same rank and dtype, or the hint of a number."""
    if isinstance(x, TensorProxy):
        with torch._C.DisableTorchFunction():  # the tracing mode would trace (always-traced) torch.empty
            return torch.empty((1,) * x.ndim, dtype=x.dtype, device="meta")
    if isinstance(x, NumberProxy):
        return x.hint
    if isinstance(x, (tuple, list)):
        return type(x)(meta_value(v) for v in x)
    return x


def _cpu_value(x: Any) -> Any:
    if isinstance(x, TensorProxy):
        return torch.zeros((1,) * x.ndim, dtype=x.dtype)
    if isinstance(x, NumberProxy):
        return x.hint
    if isinstance(x, (tuple, list)):
        return type(x)(_cpu_value(v) for v in x)
    return x


def eager_call(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Run `fn` on one-element CPU tensors of zeros (proxies' dtypes, numbers' examples): eager's own checks, and
    eager's error type, for a refusal that holds whatever the sizes and values (it changes between torch releases)."""
    with torch._C.DisableTorchFunction():
        return fn(*(_cpu_value(a) for a in args), **{k: _cpu_value(v) for k, v in kwargs.items()})


def eager_error(fn: Callable[[], Any]) -> Exception | None:
    """The exception torch raises running `fn` on small real tensors, else None: for a check whose presence or order
    changed between torch releases, read from torch instead of copied (callers cache it; raise `fresh(e)`)."""
    try:
        with torch._C.DisableTorchFunction():
            fn()
    except Exception as e:  # noqa: BLE001 - whatever torch raises is the answer
        return e
    return None


def fresh(e: Exception) -> Exception:
    """A new exception like `e` (a cached one raised again would carry its old traceback)."""
    return type(e)(*e.args)


def meta_call(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Run `fn` on meta stand-ins, for torch's own dtype rules and dtype errors.

    Records that the trace depends on the default dtype when a floating result comes from no input.
    It first tries one-element CPU tensors of zeros: torch's C++ kernels give the same dtypes, while most
    meta kernels are Python (torch._refs) and their first call imports torch._dynamo (seconds, once per
    process). Where that raises, the meta run decides, with eager's errors, as before.
    """
    try:
        with torch._C.DisableTorchFunction():
            out = fn(*(_cpu_value(a) for a in args), **{k: _cpu_value(v) for k, v in kwargs.items()})
    except Exception:  # noqa: BLE001 - the meta run below raises eager's error, or decides
        out = fn(*(meta_value(a) for a in args), **{k: meta_value(v) for k, v in kwargs.items()})
    first = out[0] if isinstance(out, tuple) else out
    in_dtypes = {a.dtype for a in args if isinstance(a, TensorProxy)}
    if first.dtype.is_floating_point and first.dtype not in in_dtypes:
        context.require().facts.read_default_dtype()
    return out
