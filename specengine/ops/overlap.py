"""Memory overlap of in-place writes: eager's errors, raised where eager raises them.

torch's TensorIterator refuses a write whose output has internal overlap (`x.expand(2, 3).add_(1)`: "more than one
element of the written-to tensor refers to a single memory location") or partially overlaps one of its inputs
(`x.t().sub_(x)`: "some elements of the input tensor and the written-to tensor refer to a single memory location");
a full overlap (the same elements with the same strides) is allowed. The check is made on strides and storage offsets,
which specengine does not trace. So the rules of in-place ops ask here, before their other checks (eager's order):
the layouts of the tensors involved are rebuilt for the example sizes by replaying, on meta tensors, the ops that made
them, from each input's example strides and storage (distinct inputs that share a storage share a meta storage).
Factories are not run (a contiguous tensor of their shape stands in), nor ops that name a device. First, without
running anything, the storages a tensor may share are found from torch's aten schemas (an op whose schema returns
no alias makes a new tensor, which has no internal overlap); where the written tensor is such a tensor and shares
nothing with a source, nothing is replayed.

Like a broadcast, the check is made on the example only: the torch op itself raises eager's error at run time for
other inputs, in program order. Where an exception handler in the user's frames observes the op, every size the
layouts depend on is pinned with a guard (and a root input's contiguity checked by the prologue), so the check goes
the same way for every input the entry serves; where a layout cannot be rebuilt there, the op is refused (also where
the answer depends on what the prologue does not check: a non-contiguous input's strides, the stride of a size-1 dim,
whether distinct inputs share memory). Not seen there: distinct inputs that share memory in a later call only.
"""

from __future__ import annotations

import bisect
import functools
from typing import Any

import torch

from specengine.constraints import expr as E
from specengine.ir import context, leaves, proxies
from specengine.ir.proxies import NumberProxy, TensorProxy, unsupported
from specengine.ops.layouts import example_layout

PARTIAL = ("unsupported operation: some elements of the input tensor and the written-to tensor refer to a single "
           "memory location. Please clone() the tensor before performing the operation.")  # fmt: skip
INTERNAL = ("unsupported operation: more than one element of the written-to tensor refers to a single memory "
            "location. Please clone() the tensor before performing the operation.")  # fmt: skip
_UNIT = "the strides of an input's size-1 dims, which the prologue does not check; clone() the inputs"
_MAX_REPLAY = 4000  # bound symbols replayed per trace at most: beyond, layouts are unknown
_MAY_RETURN_SELF = frozenset(
    {
        "type_as",
        "atleast_1d",
        "atleast_2d",
        "atleast_3d",
        "dropout",
        "alpha_dropout",
        "feature_dropout",
        "feature_alpha_dropout",
        "_unsafe_view",
    }
)  # (schemas say new)


class _Unknown(Exception):
    """A layout that cannot be rebuilt (a data-dependent size, an op that meta tensors cannot run)."""


class Examples:
    """Meta tensors with the example layouts of a trace's tensors, and what each depends on (memoized).

    A proxy may stand for several tensors in turn: an op that returns its input proxy (`contiguous`, a `to` that
    changes nothing) rebinds its name at run time to what the op returns, a copy or the same tensor. So a layout
    is that of a proxy as bound by one bound symbol: the last one before a point of the trace that returns it,
    skipping in-place ops (which return the tensor they write)."""

    def __init__(self, state: Any):
        self.state = state
        self.memo: dict[tuple, tuple] = {}  # (id(proxy), id(binding bsym) or 0) -> (proxy, bsym, meta, deps)
        self.free_memo: dict[tuple, tuple] = {}  # the same keys -> (proxy, bsym, overlap_free)
        self.root_memo: dict[tuple, frozenset] = {}  # the same keys -> roots() (the memo above keeps the bsyms alive)
        self.defs: dict[int, list[int]] = {}  # id(proxy) -> positions of the top-level bound symbols returning it
        self.top: list = state.scopes[0]  # (appended to while tracing)
        self.indexed = 0  # top-level bound symbols indexed so far
        self.open: list = []  # the bound symbols of the open decompositions, in order (positions after the top's)
        self.nested: dict[int, list[int]] = {}  # as `defs`, for `open`
        self.storages: dict[Any, torch.UntypedStorage] = {}  # example storage key -> its meta storage
        self.replayed = 0

    def sync(self) -> None:
        """Index the bound symbols recorded since the last check."""
        top = self.top
        for i in range(self.indexed, len(top)):
            for out in top[i].flat_outs():
                if isinstance(out, TensorProxy):
                    self.defs.setdefault(id(out), []).append(i)
        self.indexed = len(top)
        self.open = [b for scope in self.state.scopes[1:] for b in scope]
        self.nested = {}
        for i, bsym in enumerate(self.open, len(top)):
            for out in bsym.flat_outs():
                if isinstance(out, TensorProxy):
                    self.nested.setdefault(id(out), []).append(i)

    def _at(self, pos: int) -> Any:
        return self.top[pos] if pos < len(self.top) else self.open[pos - len(self.top)]

    def of(self, proxy: TensorProxy, before: int | None = None) -> tuple[torch.Tensor | None, tuple]:
        """(meta tensor with the example layout of `proxy` as bound before position `before` (default: now), or None
        where unknown; what that layout depends on: the int Exprs of sizes, and the names of the inputs whose strides
        and storage it starts from)."""

        def compute(p: TensorProxy, pos: int, bsym: Any) -> tuple:
            try:
                meta, deps = self._root(p) if bsym is None else self._replay(bsym, pos, p)
            except Exception:  # noqa: BLE001 - _Unknown, or a layout meta tensors cannot take: unknown
                meta, deps = None, ()
            return (p, bsym, meta, deps)

        hit = self._walk(self.memo, proxy, before, _tensor_args, compute)
        return hit[2], hit[3]

    def roots(self, proxy: TensorProxy, before: int | None = None) -> frozenset:
        """The tensors (as bound) whose storage `proxy` may share now (or before position `before`), found without
        running anything: an op that makes a new tensor (by its aten schema) is a root; through any other op, the
        roots of its tensor inputs."""

        def compute(p: TensorProxy, pos: int, bsym: Any) -> frozenset:
            if bsym is None:  # an input: distinct inputs may share a storage
                layout = self._input_layout(p)
                return frozenset([("storage", layout[0]) if layout is not None else self._key(p, pos)])
            if _fresh(bsym):
                return frozenset([self._key(p, pos)])
            return frozenset().union(*(self.root_memo[self._key(a, self._binding(a, pos))] for a in _tensor_args(bsym)))

        return self._walk(self.root_memo, proxy, before, lambda b: [] if _fresh(b) else _tensor_args(b), compute)

    def _walk(self, memo: dict, proxy: TensorProxy, before: int | None, inputs: Any, compute: Any) -> Any:
        """`compute(proxy, position, binding bsym or None)` for `proxy` as bound before `before`, memoized in `memo`,
        after the values it reads for `inputs(bsym)` (as bound before it). Without recursion: each input binds earlier
        than the op reading it, so there is no cycle."""
        goal = self._binding(proxy, len(self.top) + len(self.open) if before is None else before)
        stack = [(proxy, goal)]
        while stack:
            p, pos = stack[-1]
            key = self._key(p, pos)
            if key in memo:
                stack.pop()
                continue
            bsym = self._at(pos) if pos >= 0 else None
            needed = [] if bsym is None else [(a, self._binding(a, pos)) for a in inputs(bsym)]
            missing = [n for n in needed if self._key(*n) not in memo]
            if missing:
                stack.extend(missing)
                continue
            memo[key] = compute(p, pos, bsym)
            stack.pop()
        return memo[self._key(proxy, goal)]

    def overlap_free(self, proxy: TensorProxy) -> bool:
        """Whether `proxy` has no internal overlap whatever the sizes, by the ops that made it (no example is run):
        an op's allocation, a view that takes a subset of such a tensor, or a composite of such tensors."""

        def inputs(bsym: Any) -> list:
            """The tensors whose freedom decides the op's output's: none where it is decided already."""
            name = _impl_name(bsym)
            if not bsym.sym.pure or _allocates(name) or _computes(bsym, name):
                return []
            if name in _SUBSET_VIEWS:
                return _tensor_args(bsym)[:1]  # (the base: an index tensor of `getitem` is not viewed)
            return _tensor_args(bsym) if _fresh_name(name) else []  # (a composite: free where its inputs are)

        def compute(p: TensorProxy, pos: int, bsym: Any) -> tuple:
            if bsym is None or not bsym.sym.pure:
                return (p, bsym, False)  # (an input: its strides are the prologue's question)
            name = _impl_name(bsym)
            if _allocates(name) or _computes(bsym, name):
                return (p, bsym, True)
            needed = inputs(bsym)  # (none for any other op: not known to be free)
            free = bool(needed) and all(self.free_memo[self._key(a, self._binding(a, pos))][2] for a in needed)
            return (p, bsym, free)  # (holding the bound symbol: the key is its id)

        return self._walk(self.free_memo, proxy, None, inputs, compute)[2]

    def binding_now(self, proxy: TensorProxy) -> int:
        return self._binding(proxy, len(self.top) + len(self.open))

    def key_now(self, proxy: TensorProxy) -> tuple:
        return self._key(proxy, self.binding_now(proxy))

    def _key(self, proxy: TensorProxy, pos: int) -> tuple:
        return (id(proxy), id(self._at(pos)) if pos >= 0 else 0)

    def _binding(self, proxy: TensorProxy, before: int) -> int:
        """The position of the bound symbol that last bound `proxy` before `before`, not counting in-place ops; -1 where
        none did (an input)."""
        positions = self.defs.get(id(proxy), []) + self.nested.get(id(proxy), [])
        k = bisect.bisect_left(positions, before)
        while k > 0:
            bsym = self._at(positions[k - 1])
            if bsym.sym.pure or not any(a is proxy for a in bsym.flat_args()):
                return positions[k - 1]
            k -= 1  # an in-place op: the tensor it writes, as bound before it
        return -1

    def _input_layout(self, proxy: TensorProxy) -> tuple | None:
        layout = self.state.facts.layouts.get(proxy.name)
        for p, t, _ in self.state.facts.lifted:
            if p is proxy:
                layout = example_layout(t)
        return layout

    def _root(self, proxy: TensorProxy) -> tuple[torch.Tensor, tuple]:
        layout = self._input_layout(proxy)
        if layout is None:
            raise _Unknown
        key, offset, strides, nbytes, _ = layout
        sizes = [self._int(d) for d in proxy.dims]
        storage = self.storages.get(key)
        if storage is None:
            storage = self.storages[key] = torch.UntypedStorage(nbytes, device="meta")
        with torch._C.DisableTorchFunction():
            meta = torch.empty(0, dtype=proxy.dtype, device="meta").set_(storage, offset, sizes, strides)
        named = (proxy.name,) if proxy.name in self.state.facts.layouts else ()  # (not a lifted tensor: guarded)
        return meta, tuple(d for d in proxy.dims if not d.is_const) + named

    def _replay(self, bsym: Any, pos: int, proxy: TensorProxy) -> tuple[torch.Tensor, tuple]:
        self.replayed += 1
        if self.replayed > _MAX_REPLAY or not bsym.sym.pure or bsym.sym.impl is None:
            raise _Unknown
        if not _tensor_args(bsym):  # a factory: never run (it would allocate, and draw random numbers)
            return self._made(bsym, proxy)
        deps: list = []
        args = leaves.map_leaves(lambda v: self._concrete(v, pos, deps), (bsym.args, bsym.kwargs_dict))
        if "device" in args[1] or any(isinstance(v, torch.device) for v in leaves.leaves(args)):
            raise _Unknown  # (it could make a tensor on a real device)
        try:
            with torch._C.DisableTorchFunction():
                out = bsym.sym.impl(*args[0], **args[1])
        except Exception as e:  # an op that meta tensors cannot run (data-dependent, another device)
            raise _Unknown from e
        metas = [m for m in leaves.leaves(out) if isinstance(m, torch.Tensor)]
        outs = _tensor_outs(bsym)
        if len(metas) != len(outs):
            raise _Unknown
        found, unique = None, tuple(dict.fromkeys(deps))  # each once: a chain of ops must not repeat its inputs' deps
        for o, m in zip(outs, metas):
            if tuple(m.shape) != tuple(self._int(d) for d in o.dims) or m.device.type != "meta":
                raise _Unknown  # (not what the trace computed: the replay is not to be trusted)
            if o is proxy:
                found = m
            else:
                self.memo.setdefault((id(o), id(bsym)), (o, bsym, m, unique))
        if found is None:
            raise _Unknown
        return found, unique

    def _made(self, bsym: Any, proxy: TensorProxy) -> tuple[torch.Tensor, tuple]:
        """A factory's tensor: contiguous, in a storage of its own (unless it names strides or a memory format)."""
        name = _impl_name(bsym)
        if "memory_format" in bsym.kwargs_dict or "strided" in name or len(_tensor_outs(bsym)) != 1:
            raise _Unknown
        with torch._C.DisableTorchFunction():
            meta = torch.empty([self._int(d) for d in proxy.dims], dtype=proxy.dtype, device="meta")
        return meta, tuple(d for d in proxy.dims if not d.is_const)

    def _concrete(self, v: Any, pos: int, deps: list) -> Any:
        if isinstance(v, TensorProxy):
            _, _, meta, more = self.memo[self._key(v, self._binding(v, pos))]  # (made before the replay)
            if meta is None:
                raise _Unknown
            deps.extend(more)
            return meta
        if isinstance(v, NumberProxy):
            if v.python_type is int or v.python_type is bool:
                deps.append(v.expr)
                return v.python_type(self._int(v.expr))
            raise _Unknown  # (a symbolic float: no op that makes a view takes one)
        if isinstance(v, E.Expr):
            deps.append(v)
            return self._int(v)
        if isinstance(v, tuple) and type(v) is not tuple:  # x.shape (a SymSize)
            return tuple(self._concrete(x, pos, deps) for x in v)
        if isinstance(v, torch.Tensor):  # a real tensor: its layout, in a storage of its own
            return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
        return v

    def _int(self, e: E.Expr) -> int:
        decider = self.state.decider
        if decider.unbacked.mentions(e):
            raise _Unknown  # a data-dependent size has no example value (only a stand-in)
        try:
            return int(e.eval(decider.hints))
        except Exception as error:  # (a value without an example)
            raise _Unknown from error


@functools.cache
def _aten_overloads(name: str) -> tuple:
    """The overloads of `torch.ops.aten.<name>`, or () where there is no such aten op."""
    packet = getattr(torch.ops.aten, name, None) if name.isidentifier() else None
    try:
        return tuple(getattr(packet, o) for o in packet.overloads()) if packet is not None else ()
    except Exception:  # noqa: BLE001 - not an aten op
        return ()


@functools.cache
def _fresh_name(name: str) -> bool:
    """Whether torch's op of this name returns a new tensor: no overload that writes nothing returns an alias."""
    schemas = [o._schema for o in _aten_overloads(name)] if name not in _MAY_RETURN_SELF else []
    pure = [sc for sc in schemas if not sc.is_mutable]
    return bool(pure) and not any(r.alias_info is not None for sc in pure for r in sc.returns)


@functools.cache
def _allocates(name: str) -> bool:
    """Whether torch's op of this name returns tensors it allocated, without internal overlap: fresh, no overload
    composed of other ops (a composite, such as einsum, may return a view of an input), no strides given."""
    return _fresh_name(name) and "strided" not in name and not any(map(_composite, _aten_overloads(name)))


def _composite(overload: Any) -> bool:
    try:
        return overload.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd)
    except RuntimeError:  # an overload without a kernel table (TorchScript's list `mul.left_t`): no tensor op
        return False


# composites that compute their result (never return an input's view), given at least this many tensors
_COMPUTES = {"matmul": 2, "linear": 2, "einsum": 2}  # (einsum of one operand may return a view of it)

# views whose elements are distinct memory wherever their base's are (a subset of it, reordered or regrouped)
_SUBSET_VIEWS = frozenset({
    "reshape", "view", "view_as", "reshape_as", "getitem", "transpose", "t", "permute", "unsqueeze", "squeeze",
    "narrow", "select", "flatten", "unflatten", "movedim", "moveaxis", "swapaxes", "swapdims", "split", "chunk",
    "unbind", "tensor_split", "split_with_sizes", "diagonal", "contiguous", "alias", "detach",
})  # fmt: skip


def _computes(bsym: Any, name: str) -> bool:
    return name in _COMPUTES and len(_tensor_args(bsym)) >= _COMPUTES[name]


def _fresh(bsym: Any) -> bool:
    """Whether a bound symbol makes new tensors (their storage shares nothing with its inputs)."""
    return bsym.sym.pure and _fresh_name(_impl_name(bsym))


def _impl_name(bsym: Any) -> str:
    return getattr(bsym.sym.impl, "__name__", "") or ""


def _tensor_outs(bsym: Any) -> list:
    return [o for o in bsym.flat_outs() if isinstance(o, TensorProxy)]


def _tensor_args(bsym: Any) -> list:
    return [a for a in bsym.flat_args() if isinstance(a, TensorProxy)]


def _dense(t: torch.Tensor) -> bool:
    return bool(torch.ops.aten.is_non_overlapping_and_dense(t))  # (TensorImpl's flag, which MemoryOverlap reads)


def _status(a: torch.Tensor, b: torch.Tensor) -> str:
    """torch's get_overlap_status (aten/src/ATen/MemoryOverlap.cpp) of two tensors with example layouts: "full"
    and "partial" where their strides decide it, "partial by range" where their element ranges do."""
    if a is b:
        return "same"
    if a.numel() == 0 or b.numel() == 0:
        return "no"
    if not (_dense(a) and _dense(b)):
        return "too hard"
    if not torch._C._is_alias_of(a, b):
        return "no"
    a0, b0 = a.storage_offset() * a.element_size(), b.storage_offset() * b.element_size()
    a1, b1 = a0 + a.numel() * a.element_size(), b0 + b.numel() * b.element_size()
    if a0 == b0 and a1 == b1:
        return "full" if a.stride() == b.stride() else "partial"
    return "partial by range" if a0 < b1 and b0 < a1 else "no"


def _examples(state: Any) -> Examples:
    if state.facts.examples is None:
        state.facts.examples = Examples(state)
    return state.facts.examples


def check_write(dst: TensorProxy, srcs: tuple = (), op: str = "", internal: bool = True, expand: bool = False,
                same_data: bool = False) -> None:  # fmt: skip
    """Raise eager's overlap error where the write of `op` into `dst` (reading the tensors of `srcs`) has one.

    `internal`: the output must not have internal overlap; `expand`: each source is expanded to `dst`'s shape first,
    as setitem does; `same_data`: a source that is exactly `dst`'s elements (after that) makes the op do nothing (copy_).
    """
    srcs = tuple(s for s in srcs if isinstance(s, TensorProxy) and s is not dst)
    if not isinstance(dst, TensorProxy) or (not srcs and not internal):
        return
    state = context.require()
    ex = _examples(state)
    ex.sync()
    observed = state.observed()
    mine = ex.roots(dst)  # only what may overlap: a view written, or sharing storage with a source
    srcs = tuple(s for s in srcs if mine & ex.roots(s))
    internal = internal and mine != {ex.key_now(dst)} and not ex.overlap_free(dst)
    internal = internal and not _contiguous_input(state, ex, dst, observed)
    if not srcs and not internal:  # (a tensor an op made has no internal overlap)
        return
    d, deps = ex.of(dst)
    metas = [ex.of(s) for s in srcs]
    if d is None or any(m is None for m, _ in metas):
        if observed:
            raise _refusal(op, "strides that specengine cannot rebuild here; clone() the inputs")
        return
    if observed:
        _pin(state, deps + tuple(x for _, more in metas for x in more), op)
    with torch._C.DisableTorchFunction():
        if expand:
            metas = [(_expanded(m, d.shape), more) for m, more in metas]
        if same_data and any(_same_data(d, m) for m, _ in metas):
            if observed and _unit_dims(state, deps + tuple(x for _, more in metas for x in more)):
                raise _refusal(op, _UNIT)
            return
        if internal and torch._debug_has_internal_overlap(d) == 1:
            raise RuntimeError(INTERNAL)
        for m, more in metas:
            status = _status(d, m)
            if observed and status in ("full", "partial") and _unit_dims(state, deps + more):
                raise _refusal(op, _UNIT)
            if status.startswith("partial"):
                raise RuntimeError(PARTIAL)


def _contiguous_input(state: Any, ex: Examples, proxy: TensorProxy, observed: bool) -> bool:
    """An input contiguous in the example (and, where a handler observes the check, in every call the entry serves:
    the prologue checks it) has no internal overlap, whatever its sizes."""
    if not (observed and ex.binding_now(proxy) < 0 and state.facts.contiguity.get(proxy.name, False)):
        return False
    state.facts.contiguous.add(proxy.name)
    return True


def _expanded(m: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """The value of `dst[key] = value` as torch copies it (python_variable_indexing.cpp's copy_to): as it is where
    the shapes agree, else without its leading size-1 dims, expanded."""
    if m.shape == shape:
        return m
    k = 0
    while k < m.dim() and m.shape[k] == 1:
        k += 1
    return m.view(m.shape[k:]).expand(shape)


def _same_data(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (torch._C._is_alias_of(a, b) and a.storage_offset() == b.storage_offset() and a.stride() == b.stride()
            and a.shape == b.shape and a.dtype == b.dtype)  # fmt: skip


def _unit_dims(state: Any, deps: tuple) -> bool:
    """Whether an input the layouts start from has a dim of size 1 (its stride is free: it tells a full overlap from
    a partial one, and the prologue does not check it)."""
    return any(isinstance(x, str) and 1 in state.facts.layouts[x][4] for x in deps)


def _refusal(op: str, why: str) -> Exception:
    return unsupported(f"Tensor.{op} inside try", f"whether the write overlaps its inputs depends on {why}, or move "
                       "the op out of the try")  # fmt: skip


def _pin(state: Any, deps: tuple, op: str) -> None:
    """A handler observes the check: pin the sizes the layouts depend on; the prologue checks that the inputs they
    start from are contiguous (their strides are then given by their sizes)."""
    names = [x for x in dict.fromkeys(deps) if isinstance(x, str)]
    storages = [state.facts.layouts[n][0] for n in names]
    if len(set(storages)) < len(storages):
        raise _refusal(op, "whether distinct inputs share memory, which the prologue does not check; clone() them")
    for name in names:
        if not state.facts.contiguity.get(name, False):
            raise _refusal(op, f"the strides of the non-contiguous input {name}; call .contiguous() on it first")
        state.facts.contiguous.add(name)
    for e in dict.fromkeys(x for x in deps if not isinstance(x, str)):
        state.pin(e, op, "an exception handler in the function observes whether the write overlaps its inputs")


_WRITES = frozenset({"copy_to", "setitem_mask"})  # prims whose only effect is writing their first tensor argument
_CHECKS = frozenset({"assert_all", "check_sym", "check_speculation", "check_divisor"})  # raise or do nothing


def _only_writes(bsym: Any) -> bool:
    """Whether every impure prim an op is made of writes a tensor or checks, and it has at least one; an impure op
    without a decomposition (the generic path's `x[idx] = v`, `x.index_put_(...)`) by torch's own schema: an aten
    op that is not random (`nondeterministic_seeded`) only writes its mutable arguments."""
    if bsym.sym.pure:
        return True
    if bsym.sym.is_prim:
        return bsym.sym.name in _WRITES or bsym.sym.name in _CHECKS
    if not bsym.subsymbols:
        return _deterministic_write(bsym.sym.name)
    return all(_only_writes(s) for s in bsym.subsymbols)


def _did_nothing(bsym: Any) -> bool:
    """An impure torch-level op that returned its input with no decomposition and cannot write it (no in-place
    form, no mutable aten schema): `F.dropout(x, training=False)`, impure only where it draws. (The generic path's
    `x.index_add_(...)` also returns its input without a decomposition: it wrote it.)"""
    name = bsym.sym.name
    if bsym.sym.is_prim or bsym.subsymbols or not any(bsym.output is a for a in bsym.args):
        return False
    return not (name.endswith("_") or name == "__setitem__" or _mutable_schema(name))


def _mutable_schema(name: str) -> bool:
    return any(o._schema.is_mutable for o in _aten_overloads(name))  # (not an aten op: only the `_` spelling tells)


def _deterministic_write(name: str) -> bool:
    name = "index_put_" if name == "__setitem__" else name  # (Tensor.__setitem__ writes through index_put_ / copy_)
    overloads = _aten_overloads(name) if name.endswith("_") else ()
    return bool(overloads) and not any(torch.Tag.nondeterministic_seeded in o.tags for o in overloads)


def writes_fresh(state: Any, bsym: Any, pos: int) -> bool:
    """Whether a top-level impure op (at position `pos`) is unobservable when the computation runs it again: it only
    writes (or checks), and the tensor it writes (its first) may share no memory with an input (a parameter, a
    buffer, an argument), by its roots as bound before the op (ir/speculation.py asks this)."""
    if bsym.sym.is_prim and bsym.sym.name in _CHECKS:
        return True
    if _did_nothing(bsym):
        return True
    if not _only_writes(bsym):
        return False
    ex = _examples(state)
    ex.sync()
    assert ex.top[pos] is bsym  # (ex.top is the trace's top level, state.bsyms)
    written = _tensor_args(bsym)[:1]  # (in-place ops and setitem write their first tensor; reading inputs is fine)
    return bool(written) and not any(key[0] == "storage" or key[1] == 0 for key in ex.roots(written[0], pos))


proxies.HOOKS.writes_fresh = writes_fresh
