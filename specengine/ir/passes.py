"""Passes: pure functions Trace -> Trace (they never mutate their input)."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from specengine.constraints import expr as E
from specengine.constraints import unbacked
from specengine.constraints.floats import FloatExpr
from specengine.ir.literals import exact_key
from specengine.ir.proxies import NumberProxy, Proxy, TensorProxy
from specengine.ir.symbol import BoundSymbol, tree_leaves, tree_map
from specengine.ir.trace import DEL, Trace


def _names_used(value: Any) -> set[str]:
    names = set()
    for x in tree_leaves(value):
        if isinstance(x, Proxy):
            names.add(x.name)
            if isinstance(x, NumberProxy):
                names.update(x.expr.free_symbols())
        elif isinstance(x, (E.Expr, FloatExpr)):
            names.update(x.free_symbols())
    return names


def dce(trace: Trace) -> Trace:
    """Dead code elimination: drop pure bound symbols none of whose outputs is used.

    Ops that may raise at run time (`BoundSymbol.may_raise`, e.g. an unguarded broadcast) stay: eager raises there.
    """
    live = _names_used(trace.output)
    bound = {o.name for b in trace.bsyms if "unbacked" in b.sym.tags for o in b.flat_outs()}  # u0, u1, ...
    kept: list[BoundSymbol] = []
    for bsym in reversed(trace.bsyms):
        outs = [o.name for o in bsym.flat_outs() if isinstance(o, Proxy)]
        if not bsym.sym.pure or bsym.may_raise or any(n in live for n in outs):
            kept.append(bsym)
            live |= _names_used((bsym.args, [v for _, v in bsym.kwargs]))
            if bound and bsym.subsymbols:  # an executor that runs the decomposition reads its unbacked sizes
                live |= bound & _free_symbols(bsym.subsymbols, None)
    return trace.with_("Dead Code Elimination", bsyms=tuple(reversed(kept)))


def _cse_key(value: Any, swap: dict[int, Any]) -> Any:
    """A hashable key: tensors by identity, numbers by their symbolic value and Python type, constants by
    `exact_key` (`0.0` and `-0.0`, `1`, `True` and `1.0`, complex signed zeros stay apart)."""

    def leaf(x: Any) -> Any:
        if isinstance(x, NumberProxy):
            if isinstance(x.expr, FloatExpr):  # (float constants compare equal across signed zeros: key the text)
                return ("float", x.python_type, x.expr.to_python())
            return ("num", x.python_type, x.expr)
        if isinstance(x, Proxy):
            return ("proxy", id(swap.get(id(x), x)))
        if isinstance(x, E.Expr):
            return ("expr", x)
        if isinstance(x, FloatExpr):
            return ("fexpr", x.to_python())
        return exact_key(x)

    return tuple(leaf(x) for x in tree_leaves(value)), exact_key(_structure(value))


def _structure(value: Any) -> Any:
    return tree_map(lambda _: 0, value)


def cse(trace: Trace) -> Trace:
    """Common subexpression elimination: a pure op applied to the same values is computed once.

    Repeated shape queries collapse here; NumberProxies with the same symbolic value are interchangeable.
    """
    swap: dict[int, Any] = {}
    seen: dict[Any, BoundSymbol] = {}
    kept: list[BoundSymbol] = []
    mutated = _maybe_mutated(trace)
    for bsym in trace.bsyms:
        bsym = _swap_args(bsym, swap)
        if not bsym.sym.pure:
            seen.clear()  # a mutation may change what any earlier op computed from its inputs
        key = (bsym.sym, _cse_key((bsym.args, bsym.kwargs), swap)) if bsym.sym.pure else None
        if "unbacked" in bsym.sym.tags:
            key = None  # it binds a symbol that later sizes name: never merged into another
        if key is not None and any(id(o) in mutated for o in bsym.flat_outs()):
            key = None  # a tensor mutated later must stay a tensor of its own, as in eager
        first = seen.get(key) if key is not None else None
        if first is None:
            if key is not None:
                seen[key] = bsym
            kept.append(bsym)
            continue
        for old, new in zip(bsym.flat_outs(), first.flat_outs()):
            swap[id(old)] = new
    output = tree_map(lambda x: swap.get(id(x), x), trace.output)
    return trace.with_("Common Subexpression Elimination", bsyms=tuple(kept), output=output)


def _maybe_mutated(trace: Trace) -> set[int]:
    """ids of the tensors that an in-place op may mutate: its tensor arguments and, since any of them may be a view,
    every tensor they were computed from."""
    producer = {id(o): b for b in trace.bsyms for o in b.flat_outs() if isinstance(o, TensorProxy)}
    stack = [x for b in trace.bsyms if not b.sym.pure for x in b.flat_args() if isinstance(x, TensorProxy)]
    out: set[int] = set()
    while stack:
        x = stack.pop()
        if id(x) not in out:
            out.add(id(x))
            b = producer.get(id(x))
            stack += [y for y in b.flat_args() if isinstance(y, TensorProxy)] if b is not None else []
    return out


def _swap_args(bsym: BoundSymbol, swap: dict[int, Any]) -> BoundSymbol:
    """`bsym` with merged values replaced in its arguments and in its decomposition's arguments."""
    if not swap:
        return bsym

    def fn(x: Any) -> Any:
        return swap.get(id(x), x)

    return bsym.with_(
        args=tree_map(fn, bsym.args),
        kwargs=tuple((k, tree_map(fn, v)) for k, v in bsym.kwargs),
        subsymbols=tuple(_swap_args(s, swap) for s in bsym.subsymbols),
    )


def specialize(trace: Trace, fold: Callable[[E.Expr], E.Expr], hints: Mapping[str, int]) -> Trace:
    """Replace numbers by symbolic values over the entry's symbols, substituting pinned constants and
    symbol-class representatives; shape queries and scalar arithmetic then vanish (their results are
    computed from the prologue's symbols)."""
    tensors: dict[int, TensorProxy] = {}

    def fn(x: Any) -> Any:
        t = type(x)  # (by type: `isinstance` of a proxy that fails reads its `__class__` property)
        if t is TensorProxy:
            new = tensors.get(id(x))
            if new is None:
                dims = tuple(fold(d) for d in x.dims)
                new = tensors[id(x)] = TensorProxy(x.name, dims, x.dtype, x.device, x.requires_grad)
            return new
        if t is NumberProxy:
            x, t = x.expr, type(x.expr)
        if t is E.Expr or t is FloatExpr:
            e = fold(x)
            return e.args[0] if isinstance(e, FloatExpr) and e.is_const else e.value if e.is_const else e
        return x

    bsyms = tuple(
        b.map_values(fn) if "unbacked" not in b.sym.tags else b.map_values(fn).with_(output=b.output)
        for b in trace.bsyms
        if not b.sym.pure or "unbacked" in b.sym.tags or any(isinstance(o, TensorProxy) for o in b.flat_outs())
    )
    output = tree_map(fn, trace.output)
    tensor_params = tuple(fn(p) for p in trace.params if isinstance(p, TensorProxy))
    symbols = sorted(_input_symbols(_free_symbols(bsyms, output), hints), key=lambda s: E.sym(s).sort_key)
    params = tensor_params + tuple(NumberProxy(s, E.sym(s), hints[s], type(hints[s])) for s in symbols)
    return trace.with_("Specialization to the solved constraints", bsyms=bsyms, output=output, params=params)


def _input_symbols(names: set[str], hints: Mapping[str, int]) -> set[str]:
    """The symbols the prologue passes: all but the unbacked ones, which the computation binds itself."""
    inputs = {s for s in names if s in hints}
    if any(not unbacked.NAME.fullmatch(s) for s in names - inputs):  # the computation binds u0, u1, ... itself
        raise AssertionError(f"internal error: symbols without a source: {sorted(names - inputs)}")
    return inputs


def _free_symbols(bsyms: tuple[BoundSymbol, ...], output: Any) -> set[str]:
    """Symbols that the bound symbols (decompositions included) and the output refer to."""
    names: set[str] = set()
    for x in tree_leaves(([b.args for b in bsyms], [b.kwargs for b in bsyms], output)):
        if type(x) is E.Expr or type(x) is FloatExpr:  # (not isinstance: a proxy's `__class__` is a property)
            names.update(x.free_symbols())
    for b in bsyms:
        names |= _free_symbols(b.subsymbols, None)
    return names


def prune_params(trace: Trace) -> Trace:
    """Drop symbol parameters that the trace no longer uses (tensor parameters stay)."""
    used = _free_symbols(trace.bsyms, trace.output)
    params = tuple(p for p in trace.params if not isinstance(p, NumberProxy) or p.name in used)
    return trace.with_("Pruning unused symbol parameters", params=params)


def flatten(trace: Trace) -> Trace:
    """Replace every torch-level op by its decomposition into prims."""
    out: list[BoundSymbol] = []

    def visit(bsym: BoundSymbol) -> None:
        if bsym.sym.is_prim or not bsym.subsymbols:
            out.append(bsym)
            return
        for sub in bsym.subsymbols:
            visit(sub.with_(source=sub.source or bsym.source, may_raise=sub.may_raise or bsym.may_raise))

    for b in trace.bsyms:
        visit(b)
    return trace.with_("Flattening to prims", bsyms=tuple(out))


def insert_deletes(trace: Trace) -> Trace:
    """Free each tensor right after its last use (`del`), so the allocator can reuse memory as eager does."""
    live = _names_used(trace.output)
    out: list[BoundSymbol] = []
    for bsym in reversed(trace.bsyms):
        used = [x for x in tree_leaves((bsym.args, [v for _, v in bsym.kwargs])) if isinstance(x, TensorProxy)]
        dead = {x.name: x for x in used if x.name not in live}
        if dead:
            out.append(BoundSymbol(DEL, tuple(dead.values()), (), None))
        live |= set(dead)
        out.append(bsym)
    return trace.with_("Freeing values after their last use", bsyms=tuple(reversed(out)))
