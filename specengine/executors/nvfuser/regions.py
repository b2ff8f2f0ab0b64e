"""Fusion regions: maximal groups of nvFuser-claimed bound symbols that respect data dependencies.

A claimed op joins the current region unless it depends on the region through an op outside it (that
would make a cycle); the regions and the other ops are then ordered topologically, keeping program order
where free. Each region becomes one bound symbol that calls a fusion.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any, Callable

from specengine.constraints import expr as E
from specengine.constraints.floats import FloatExpr
from specengine.ir.proxies import NumberProxy, Proxy, TensorProxy
from specengine.ir.symbol import BoundSymbol, Symbol, tree_leaves
from specengine.ir.trace import Trace


@dataclass
class Region:
    """A group of claimed bound symbols, its inputs (proxies and symbols) and its outputs."""

    index: int
    bsyms: list[BoundSymbol]
    inputs: list[Any]
    outputs: list[TensorProxy]


def _names(values: Any) -> set[str]:
    out = set()
    for x in tree_leaves(values):
        if isinstance(x, Proxy):
            out.add(x.name)
        elif isinstance(x, (E.Expr, FloatExpr)):
            out |= x.free_symbols()
    return out


def _outs(b: BoundSymbol) -> set[str]:
    return {o.name for o in b.flat_outs() if isinstance(o, Proxy)}


def _ins(b: BoundSymbol) -> set[str]:
    return _names((b.args, [v for _, v in b.kwargs]))


def group(bsyms: tuple[BoundSymbol, ...], claimed: Callable[[BoundSymbol], bool]) -> list[int]:
    """A region id per bound symbol (-1 for unclaimed ones).

    `tainted` holds what unclaimed ops computed from the open region: a claimed op reading it would close a
    cycle through the outside, so it starts a new region instead.
    """
    ids, current, members_out, tainted = [], -1, set(), set()
    for i, b in enumerate(bsyms):
        ins = _ins(b)
        if not claimed(b):
            ids.append(-1)
            if ins & (members_out | tainted):
                tainted |= _outs(b)
            if getattr(b.sym.impl, "torch_state", False):
                current = -1  # a grad-mode or autocast change: no region spans it (ops keep their side of it)
            continue
        if current < 0 or ins & tainted:
            current, members_out, tainted = i, set(), set()
        ids.append(current)
        members_out |= _outs(b)
    return ids


def form_regions(
    trace: Trace, claimed: Callable[[BoundSymbol], bool], make_call: Callable[[Region], BoundSymbol]
) -> Trace:
    """Replace groups of claimed bound symbols by one call each, in a dependency-respecting order."""
    bsyms = trace.bsyms
    ids = group(bsyms, claimed)
    members: dict[int, list[int]] = {}
    for i, r in enumerate(ids):
        members.setdefault(r if r >= 0 else -1 - i, []).append(i)
    nodes = list(members.items())
    producer = {name: key for key, idx in nodes for i in idx for name in _outs(bsyms[i])}
    deps = {
        key: {producer[n] for i in idx for n in _ins(bsyms[i]) if producer.get(n, key) != key} for key, idx in nodes
    }
    order = _toposort({key: min(idx) for key, idx in nodes}, deps)
    out, n = [], 0
    for key in order:
        idx = members[key]
        if key < 0:
            out.append(bsyms[idx[0]])
            continue
        outside = _names(trace.output).union(*(_ins(b) for i, b in enumerate(bsyms) if i not in idx))
        out.append(make_call(_region(n, [bsyms[i] for i in idx], outside)))
        n += 1
    return trace.with_("Fusion regions", bsyms=tuple(out))


def _toposort(first: dict[int, int], deps: dict[int, set[int]]) -> list[int]:
    users: dict[int, list[int]] = {k: [] for k in first}
    for k, ds in deps.items():
        for d in ds:
            users[d].append(k)
    waiting = {k: len(ds) for k, ds in deps.items()}
    ready = [(first[k], k) for k, c in waiting.items() if c == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, k = heapq.heappop(ready)
        order.append(k)
        for u in users[k]:
            waiting[u] -= 1
            if waiting[u] == 0:
                heapq.heappush(ready, (first[u], u))
    assert len(order) == len(first), "fusion regions formed a cycle"
    return order


def _region(index: int, bsyms: list[BoundSymbol], used: set[str]) -> Region:
    """The region's inputs (tensors from outside, symbols its sizes and scalars use) and outputs (what `used`
    needs)."""
    produced, inputs, seen = set(), [], set()
    for b in bsyms:
        for x in tree_leaves((b.args, [v for _, v in b.kwargs])):
            key = x.name if isinstance(x, Proxy) else None
            if isinstance(x, TensorProxy) and key not in produced and key not in seen:
                seen.add(key)
                inputs.append(x)
            elif isinstance(x, (E.Expr, FloatExpr)) and not x.is_const:
                for s, kind in sorted(_typed_symbols(x).items()):
                    if s not in seen:
                        seen.add(s)
                        inputs.append(NumberProxy(s, E.sym(s) if kind is int else FloatExpr("sym", (s,)), 0, kind))
        produced |= _outs(b)
    internal_only = {o for b in bsyms for o in _outs(b)} - used
    outputs = [o for b in bsyms for o in b.flat_outs() if isinstance(o, TensorProxy) and o.name not in internal_only]
    return Region(index, bsyms, inputs, outputs)


def _typed_symbols(x: E.Expr | FloatExpr) -> dict[str, type]:
    """The free symbols of `x`, each with its Python type (float symbols appear in FloatExprs as "sym")."""
    if isinstance(x, E.Expr):
        return dict.fromkeys(x.free_symbols(), int)
    if x.op == "sym":
        return {x.args[0]: float}
    if x.op == "int":
        return dict.fromkeys(x.args[0].free_symbols(), int)
    out: dict[str, type] = {}
    for a in x.args:
        if isinstance(a, (E.Expr, FloatExpr)):
            out.update(_typed_symbols(a))
    return out


def region_symbol(region: Region, impl: Callable) -> Symbol:
    return Symbol(f"fusion{region.index}", "nvfuser", impl=impl)
