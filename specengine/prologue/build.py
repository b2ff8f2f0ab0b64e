"""Builds the check list of a prologue from input specs, a solution and the global state."""

from __future__ import annotations

import collections
import itertools
import math
from typing import Any

import torch
from torch.utils import _pytree as pytree

from specengine.codegen import signature_source
from specengine.constraints import expr as E
from specengine.constraints.floats import FloatExpr
from specengine.constraints.solver import Solution
from specengine.ir.literals import literal, show, source_key
from specengine.ops.outside import reach
from specengine.prologue.codegen import Check, Guard, Prologue
from specengine.prologue.contents import Contents, needs_contents
from specengine.prologue.external import _ABSENT, ObjGuard, fail_source, has_value_semantics
from specengine.prologue.inputs import (
    AliasSpec,
    ConstSpec,
    FloatSpec,
    InputSpecs,
    IntSpec,
    NodeSpec,
    ObjectSpec,
    TensorSpec,  # fmt: skip
)


class _Steps:
    def __init__(self, specs: InputSpecs):
        self.specs = specs
        self.steps: list = []
        self.glb: dict[str, Any] = {"torch": torch, "math": math}  # math: sign-aware float pins (floats.same)
        self._names: dict[int, str] = {}  # id(value) -> the first name of glb holding it (values live in glb)
        self._indexed = 0  # how many of glb's items _names has seen (glb only grows: new names come last)

    def name(self, value: Any, hint: str) -> str:
        """A global holding `value` (types, dtypes, constants), named after `hint` where that is free."""
        glb = self.glb
        if len(glb) != self._indexed:
            for k, v in itertools.islice(glb.items(), self._indexed, None):
                self._names.setdefault(id(v), k)
            self._indexed = len(glb)
        known = self._names.get(id(value))
        if known is not None and glb.get(known) is value:  # (else a name given another value since: a new name)
            return known
        key = f"_{hint}"
        while key in glb:
            key = f"_{hint}{len(glb)}"
        glb[key] = value
        return key

    def check(
        self, fail: str, text: str, *values: tuple[str, str], provenance: str = "", indexed: bool = False,
        describe: bool = False,
    ) -> None:  # fmt: skip
        self.steps.append(Check(fail, text, tuple(values), provenance, indexed, describe))


def _type_check(st: _Steps, spec: Any, expected: type) -> None:
    st.check(f"type({spec.local}) is not {st.name(expected, expected.__name__)}", f"type({spec.path}) is {expected.__name__}",
             (f"type({spec.path})", f"type({spec.local})"))  # fmt: skip


def _unpack(st: _Steps, spec: Any) -> None:
    """Type and structure checks, then locals for children, recursively."""
    if isinstance(spec, TensorSpec):
        _type_check(st, spec, spec.type)
        _tensor_checks(st, spec)
    elif isinstance(spec, IntSpec):
        _type_check(st, spec, int)
    elif isinstance(spec, FloatSpec):
        _type_check(st, spec, float)
    elif isinstance(spec, ConstSpec):
        _const_check(st, spec)
    elif isinstance(spec, AliasSpec):
        st.check(f"{spec.local} is not {spec.of}", f"{spec.path} is the same {spec.what} as an earlier argument",
                 (f"{spec.path} is that tensor", f"{spec.local} is {spec.of}"))  # fmt: skip
    elif isinstance(spec, (NodeSpec, ObjectSpec)):
        _node_checks(st, spec) if isinstance(spec, NodeSpec) else _object_checks(st, spec)
        for key, c in zip(spec.keys, spec.children):
            st.steps.append(f"{c.local} = {spec.local}{key}")
            _unpack(st, c)


def _distinct_check(st: _Steps, tensors: list, what: str = "tensor arguments") -> None:
    """Arguments that were distinct objects are distinct again (`a is b` in the program was False)."""
    if len(tensors) == 2:
        a, b = tensors
        st.check(
            f"{a.local} is {b.local}", f"{a.path} is not {b.path}", (f"{a.path} is {b.path}", f"{a.local} is {b.local}")
        )
    elif len(tensors) > 2:
        ids = "".join(f"id({t.local}), " for t in tensors)
        st.check(f"len({{{ids}}}) != {len(tensors)}", f"the {what} are distinct objects")


def _mutable_checks(st: _Steps, specs: InputSpecs) -> None:
    """Lists, dicts and plain objects passed in (each traced as one shadow) are distinct, as they were, and none
    is an object the program reaches from outside its arguments (a module's attribute...), which it would not
    see through the shadow."""
    mutables = [spec for spec, _ in specs.mutables.values()]
    _distinct_check(st, mutables, "lists, dicts and objects passed in")
    if specs.outside_ids:
        outside = st.name(specs.outside_ids, "outside_ids")
        for m in mutables:
            st.check(f"id({m.local}) in {outside}", f"{m.path} is not an object reachable from outside the arguments",
                     (f"{m.path} is such an object", f"id({m.local}) in {outside}"))  # fmt: skip


def _node_checks(st: _Steps, spec: NodeSpec) -> None:
    """The container's type, then its structure: a length, a key list, or pytree's flatten context."""
    _type_check(st, spec, spec.type)
    x, p = spec.local, spec.path
    if spec.type in (list, tuple):
        st.check(f"len({x}) != {len(spec.children)}", f"len({p}) == {len(spec.children)}", (f"len({p})", f"len({x})"))
    elif isinstance(spec.context, list) and issubclass(spec.type, dict) and spec.type is not collections.defaultdict:
        keys = st.name(list(spec.context), "keys")
        st.check(f"list({x}) != {keys}", f"list({p}) == {list(spec.context)!r}", (f"list({p})", f"list({x})"))
    elif spec.node_type is not collections.namedtuple:
        flatten = st.name(pytree.SUPPORTED_NODES[spec.node_type].flatten_fn, "flatten")
        context = st.name(spec.context, "context")
        st.check(f"{flatten}({x})[1] != {context}", f"the pytree context of {p} is unchanged")


def _object_checks(st: _Steps, spec: ObjectSpec) -> None:
    """A plain object: its class, and the names of its attributes (their values are its children)."""
    _type_check(st, spec, spec.type)
    attrs = st.name(frozenset(k[1:] for k in spec.keys), "attrs")
    st.check(f"{spec.local}.__dict__.keys() != {attrs}", f"the attributes of {spec.path} are {[k[1:] for k in spec.keys]}",
             (f"list(vars({spec.path}))", f"list({spec.local}.__dict__)"))  # fmt: skip


def _tensor_checks(st: _Steps, spec: TensorSpec) -> None:
    x, p = spec.local, spec.path
    st.check(
        f"{x}.dtype is not {st.name(spec.dtype, str(spec.dtype).removeprefix('torch.'))}",
        f"{p}.dtype is {spec.dtype}",
        (f"{p}.dtype", f"{x}.dtype"),
    )
    dev = spec.device
    if dev.type == "cpu":
        fail = f"not {x}.is_cpu"
    elif dev.type == "cuda":
        fail = f"not {x}.is_cuda or {x}.get_device() != {dev.index or 0}"
    else:
        fail = f"{x}.device != {st.name(dev, 'device')}"
    st.check(fail, f"{p}.device == {str(dev)!r}", (f"{p}.device", f"{x}.device"))
    st.check(f"{x}.ndim != {len(spec.symbols)}", f"{p}.ndim == {len(spec.symbols)}", (f"{p}.ndim", f"{x}.ndim"))
    strided = st.name(torch.strided, "strided")
    st.check(f"{x}.layout is not {strided}", f"{p}.layout is torch.strided", (f"{p}.layout", f"{x}.layout"))
    rg = f"{'not ' if spec.requires_grad else ''}{x}.requires_grad"
    st.check(rg, f"{p}.requires_grad is {spec.requires_grad}", (f"{p}.requires_grad", f"{x}.requires_grad"))


def _const_check(st: _Steps, spec: ConstSpec) -> None:
    """A constant argument: exact builtins by type and value (floats by sign and NaN too), numbers of other types
    (an int subclass, a numpy scalar) by type and base value, anything else (an Enum member too) by identity. Texts
    show values without calling their methods (`literals.show`)."""
    v, x, p = spec.value, spec.local, spec.path
    shown = show(v)
    if v is None or isinstance(v, bool) or v is Ellipsis:
        st.check(f"{x} is not {shown}", f"{p} is {shown}", (p, x))
    elif type(v) is torch.device:  # (devices are equal, not identical, from one tensor to the next)
        st.check(f"type({x}) is not torch.device or {x} != {st.name(v, 'device')}", f"{p} == {v!r}", (p, x))
    elif type(v) is float and (v != v or v == 0.0):  # NaN is unequal to itself; -0.0 == 0.0 (`copysign` tells)
        same = (
            f"{x} != {x}"
            if v != v
            else f"{x} == 0.0 and {st.name(math.copysign, 'copysign')}(1.0, {x}) == {math.copysign(1.0, v)}"
        )
        st.check(f"type({x}) is not float or not ({same})", f"{p} is {shown}", (p, x))
    elif type(v) in (int, float, str, bytes):
        st.check(f"type({x}) is not {type(v).__name__} or {x} != {st.name(v, 'const')}", f"{p} == {shown}", (p, x))
    elif has_value_semantics(v):  # complex (signed zeros), devices, slices, torch.Size, int subclasses, numpy scalars
        st.check(fail_source(x, v, st.name), f"{p} == {shown}", (p, x))
    elif needs_contents(v):
        _contents_check(st, x, p, v)
    else:
        st.check(f"{x} is not {st.name(v, 'obj')}", f"{p} is the object seen at compile time ({shown})", (p, x))


def _contents_check(st: _Steps, read: str, text: str, value: Any) -> None:
    """An object the trace read through (a set, a partial, a class, a helper function...): its fingerprint."""
    guard = st.name(Contents(value, text), "contents")
    st.check(f"not {guard}({read})", f"{text} has the contents seen at compile time", ("", f"{guard}.explain({read})"),
             describe=True)  # fmt: skip


def _symbol_sources(specs: InputSpecs) -> dict[str, tuple[Any, int | None]]:
    """symbol -> (spec, dim) for tensor dims, (spec, None) for int inputs."""
    out: dict[str, tuple[Any, int | None]] = {}
    for leaf in specs.leaves():
        if isinstance(leaf, TensorSpec):
            out.update({s: (leaf, d) for d, s in enumerate(leaf.symbols)})
        else:
            out[leaf.symbol] = (leaf, None)
    return out


def _read_symbols(st: _Steps, needed: set[str], pinned: dict[str, int]) -> None:
    """Read each needed tensor's shape once; check constant dims; bind the remaining symbols to locals."""
    sources = _symbol_sources(st.specs)
    tensors = [leaf for leaf in st.specs.leaves() if isinstance(leaf, TensorSpec)]
    state = st.specs.static_symbols
    static = {t.local for t in tensors if t.symbols and all(s in pinned and s in state for s in t.symbols)}
    for t in tensors:
        if t.local in static:  # module state: one comparison of the whole shape
            shape = torch.Size(pinned[s] for s in t.symbols)
            st.check(f"{t.local}.shape != {st.name(shape, 'shape')}", f"{t.path}.shape == {tuple(shape)}",
                     (f"{t.path}.shape", f"tuple({t.local}.shape)"))  # fmt: skip
        elif any(s in needed or s in pinned for s in t.symbols):
            st.steps.append(f"{t.local}_shape = {t.local}.shape")
    for s, v in pinned.items():
        spec, d = sources[s]
        if d is not None and spec.local in static:
            continue
        local = f"{spec.local}_shape[{d}]" if d is not None else spec.local
        st.check(f"{local} != {v}", f"{st.specs.sources[s]} == {v}", (st.specs.sources[s], local),
                 provenance="constant dim" if d is not None else "constant int",
                 indexed=s not in st.specs.static_symbols)  # fmt: skip  # the index key leaves module state out
    for s in sorted(needed - set(pinned), key=lambda s: E.sym(s).sort_key):
        spec, d = sources[s]
        if d is not None:
            st.steps.append(f"{s} = {spec.local}_shape[{d}]")
        elif spec.local != s:
            st.steps.append(f"{s} = {spec.local}")


def build_prologue(name: str, specs: InputSpecs, solution: Solution, returns: list[str], comp_symbols: set[str],
                   grad_enabled: bool, default_dtype: torch.dtype | None,
                   contiguous: set[str] = frozenset(), reads: tuple = ()) -> tuple[Prologue, list[Guard]]:  # fmt: skip
    """The prologue of one entry and its guards (printed over input names).

    Args:
        name: the prologue's function name (the user's function name, so arity errors read naturally).
        specs: the inputs the entry was traced with.
        solution: the solved constraints.
        returns: locals the prologue returns, in the computation's parameter order.
        comp_symbols: symbols the computation needs.
        grad_enabled: the grad mode the entry was traced under.
        default_dtype: the default dtype, if the trace depends on it.
        contiguous: input tensors (locals) whose contiguity an executor specialized on.
        reads: global torch settings the trace read, `(name, args, value, getter, text)` (capture/torch_settings.py's
            `resolved`: `getter(*args)` reads it now, `text` names it for people).
    """
    st = _Steps(specs)
    for p in specs.params:
        _unpack(st, p)
    _distinct_check(st, [t for t in specs.leaves(state=False) if isinstance(t, TensorSpec)])
    _mutable_checks(st, specs)
    st.glb.update(specs.roots)
    _structure_checks(st, specs.structure)  # before the state reads: they rely on the structure
    for p in specs.state:
        st.steps.append(f"{p.local} = {specs.access.get(p.local, p.path)}")
        _unpack(st, p)
    for leaf in specs.leaves():
        if isinstance(leaf, TensorSpec) and leaf.local in contiguous:
            st.check(f"{leaf.local}.is_contiguous() is not {leaf.contiguous}", f"{leaf.path}.is_contiguous() is "
                     f"{leaf.contiguous}", (f"{leaf.path}.is_contiguous()", f"{leaf.local}.is_contiguous()"))  # fmt: skip

    _captured_checks(st, specs.captured)
    _external_checks(st, specs.external)
    _lifted_checks(st, specs.lifted)
    _layout_checks(st, specs.layout_facts)
    _attr_checks(st, specs.attr_facts)
    unpinned = [g for g in solution.guards if not _is_pin(g.expr, solution.pinned)]
    needed = set(comp_symbols).union(*(g.expr.free_symbols() for g in unpinned))
    _read_symbols(st, needed, dict(solution.pinned))
    src = specs.sources.__getitem__
    guards = [Guard(g, g.expr.to_python(src)) for g in solution.guards]
    for g in unpinned:
        values = tuple((src(s), s) for s in sorted(g.expr.free_symbols(), key=lambda s: E.sym(s).sort_key))
        st.check(_fail_source(g.expr), g.expr.to_python(src), *values, provenance=str(g.provenance))
    _global_state_checks(st, grad_enabled, default_dtype)
    _settings_checks(st, reads)
    signature = signature_source(specs.signature, st.glb)
    return Prologue(name, st.steps, returns, st.glb, signature), guards


def _fail_source(expr: Any) -> str:
    """Python that is true when the guard fails. A guard that divides fails where a divisor is 0, instead of raising:
    tracing recorded `d != 0` before each division by `d`, but the solver may drop it as implied by a guard that
    divides by `d` (z3 leaves division by 0 unspecified)."""
    if isinstance(expr, FloatExpr):
        return expr.negate().to_python()
    zero = [f"{d.to_python()} == 0" for d in E.divisors(expr)]
    return " or ".join([*zero, E.not_(expr).to_python()])


def _structure_checks(st: _Steps, guards: list) -> None:
    """One counter comparison per module root (the tree is walked only when a watched module changed) and one
    tuple of class version tags per set of classes (prologue/structure.py, prologue/classes.py)."""
    for g in guards:
        fail, text = g.prologue_check(st.name)
        st.check(fail, text, ("", f"{st.name(g, 'guard')}.explain()"), describe=True)


def _captured_checks(st: _Steps, captured: list) -> None:
    """Globals and closure variables the trace read keep their values (by value where the type has value semantics,
    else by identity), or the entry does not apply. The compiled function's own holders are `_user_globals` and
    `_user_cells`; those of the helpers it calls get names of their own."""
    st.glb.setdefault("_absent", _ABSENT)
    for kind, name, value, holder in captured:  # holder: a function's globals dict, or its closure
        if isinstance(value, torch.Tensor):
            continue  # a state input (prologue/state.py), read on every call
        if kind == "global":
            glb = "_user_globals" if st.glb.setdefault("_user_globals", holder) is holder else st.name(holder, "glb")
            where, text = f"{glb}.get({source_key(name)}, _absent)", f"global {name}"
        elif kind == "attr":  # an attribute of an imported module (capture/module_reads.py): its __dict__'s entry
            where, text = f"{st.name(holder, 'mod')}.get({source_key(name[0])}, _absent)", name[1]
        else:
            cells = "_user_cells" if st.glb.setdefault("_user_cells", holder) is holder else st.name(holder, "cells")
            where, text = f"{cells}[{name[0]}].cell_contents", f"closure variable {name[1]}"
        _object_check(st, where, text, value, kind == "cell" and name[2:] == ("ran",) and type(value) in _LOGS)


_LOGS = (list, dict, set, collections.deque)


def _object_check(st: _Steps, read: str, text: str, value: Any, identity: bool = False) -> None:
    if needs_contents(value) and not identity:  # read through: its fingerprint, not its identity (prologue/contents.py)
        _contents_check(st, read, text, value)
        return
    same = f"{text} is the object seen at compile time ({show(value)})"
    shown = f"{text} == {show(value)}" if has_value_semantics(value) else same
    st.check(fail_source(read, value, st.name), shown, (text, read))


def _external_checks(st: _Steps, guards: list[ObjGuard]) -> None:
    """Bound `self`, defaults, partial bindings, class configuration (see prologue/external.py)."""
    for g in guards:
        for k, v in g.names.items():
            st.glb.setdefault(k, v)
        _object_check(st, g.read, g.text, g.value, g.identity)


def _lifted_checks(st: _Steps, lifted: list) -> None:
    """Tensors closed over from outside (ops/outside.py) are passed as they are, so the computation reads their
    current values; the place the program found each one must still hold it, with the same shape and dtype."""
    for proxy, t, (root, steps) in lifted:
        x, shape = proxy.name, tuple(t.shape)
        st.steps.append(f"{x} = {st.name(t, x)}")
        read = f"{st.name(reach, 'reach')}({st.name(root, 'root')}, {st.name(steps, 'steps')})"
        text = "".join(f"[{show(k)}]" if kind == "item" else f".{k}" for kind, k in steps)
        st.check(f"{read} is not {x}", f"the tensor closed over as {x} is still reached as <root>{text}",
                 (f"<root>{text}", read))  # fmt: skip
        dtype = st.name(t.dtype, str(t.dtype).removeprefix("torch."))
        st.check(f"{x}.shape != {shape!r} or {x}.dtype is not {dtype}", f"the tensor closed over as {x} is "
                 f"{t.dtype} of shape {shape}", (f"{x}.shape", f"{x}.shape"))  # fmt: skip


def _layout_checks(st: _Steps, facts: list) -> None:
    """`x.is_contiguous(memory_format=...)` answers that the trace read (ops/layouts.py)."""
    for local, mf, value in facts:
        fmt = st.name(mf, str(mf).removeprefix("torch."))
        st.check(f"{local}.is_contiguous(memory_format={fmt}) is not {value}",
                 f"{local}.is_contiguous(memory_format={mf}) is {value}", (f"{local}.is_contiguous({mf})",
                 f"{local}.is_contiguous(memory_format={fmt})"))  # fmt: skip


def _attr_names(t: torch.Tensor) -> tuple:
    return tuple(sorted(t.__dict__))


def _attr_checks(st: _Steps, facts: list) -> None:
    """Python attributes read from input tensors (`x.scale` set by the caller) keep the values the trace read."""
    absent = st.name(_ABSENT, "absent")
    for local, attr, value in facts:
        if attr == "__dict__ keys":  # (`x.__dict__` read whole: no attribute added or removed)
            read = f"{st.name(_attr_names, 'attr_names')}({local})"
            st.check(
                fail_source(read, value, st.name), f"{local}.__dict__ has {show(value)}", (f"{local}.__dict__", read)
            )
            continue
        read = f"{local}.__dict__.get({literal(attr)}, {absent})"
        st.check(fail_source(read, value, st.name), f"{local}.{attr} == {show(value)}", (f"{local}.{attr}", read))


def _is_pin(e: E.Expr, pinned: dict[str, int]) -> bool:
    return (
        e.op == "rel"
        and e.args[0] == "=="
        and e.args[1].op == "sym"
        and e.args[1].args[0] in pinned
        and e.args[2].is_const
    )


INDEX_BUILTINS = {"_se_type": type, "_se_int": int}  # (named apart from any parameter of the user's)


def build_index_key(fn_name: str, specs: InputSpecs, pinned: dict[str, int]) -> tuple[str, tuple, dict] | None:
    """Source of a function computing the pinned input values of a call, and this entry's values.

    Entries with the same source (and module) share one dispatch index: a dict from those values to entries, so
    dispatch finds them without running every prologue. Returns None when nothing is pinned.
    """
    sources = _symbol_sources(specs)
    # module state is checked by the prologue; the index is for what varies between calls: the inputs
    pins = sorted((s for s in pinned if s not in specs.static_symbols), key=lambda s: E.sym(s).sort_key)
    if not pins:
        return None
    lines, parts, read = [], [], set()
    for s in pins:
        spec, d = sources[s]
        if d is None:  # type-exact: an int subclass is never hashed or compared here (its __hash__ is user code)
            k = f"_se_k{len(lines)}"
            lines.append(f"  {k} = {spec.path}")
            parts.append(f"({k} if _se_type({k}) is _se_int else None)")
            continue
        if spec.path not in read:
            read.add(spec.path)
            lines.append(f"  {spec.local}_shape = {spec.path}.shape")
        parts.append(f"{spec.local}_shape[{d}]")
    glb: dict[str, Any] = {"self": specs.module, **INDEX_BUILTINS}
    body = "\n".join(lines + [f"  return ({''.join(p + ', ' for p in parts)})"])
    source = f"def {fn_name}_index_key{signature_source(specs.signature, glb)}:\n{body}\n"
    return source, tuple(pinned[s] for s in pins), glb


def _global_state_checks(st: _Steps, grad_enabled: bool, default_dtype: torch.dtype | None) -> None:
    """Grad mode, autocast (state and dtype per device type) and, when the trace used it, the default dtype."""
    grad = st.name(torch.is_grad_enabled, "is_grad_enabled")
    st.check(f"{'not ' if grad_enabled else ''}{grad}()", f"torch.is_grad_enabled() is {grad_enabled}",
             ("torch.is_grad_enabled()", f"{grad}()"))  # fmt: skip
    any_autocast = st.name(torch._C._is_any_autocast_enabled, "is_any_autocast_enabled")
    devices = sorted({leaf.device.type for leaf in st.specs.leaves() if isinstance(leaf, TensorSpec)} | {"cpu"})
    if not torch._C._is_any_autocast_enabled():
        st.check(f"{any_autocast}()", "autocast is disabled", ("autocast enabled", f"{any_autocast}()"))
    for dev in devices if torch._C._is_any_autocast_enabled() else ():
        enabled, dtype = torch.is_autocast_enabled(dev), torch.get_autocast_dtype(dev)
        on = st.name(torch.is_autocast_enabled, "is_autocast_enabled")
        get = st.name(torch.get_autocast_dtype, "get_autocast_dtype")
        st.check(f"{on}({dev!r}) is not {enabled} or {get}({dev!r}) is not {st.name(dtype, 'autocast_dtype')}",
                 f"torch.is_autocast_enabled({dev!r}) is {enabled} with dtype {dtype}",
                 ("autocast", f"({on}({dev!r}), {get}({dev!r}))"))  # fmt: skip
    if default_dtype is not None:
        getter = st.name(torch.get_default_dtype, "get_default_dtype")
        expected = st.name(default_dtype, str(default_dtype).removeprefix("torch."))
        st.check(f"{getter}() is not {expected}", f"torch.get_default_dtype() is {default_dtype}",
                 ("torch.get_default_dtype()", f"{getter}()"))  # fmt: skip


def _settings_checks(st: _Steps, reads: tuple) -> None:
    """Global torch settings that the trace read keep the values it read (`torch.get_float32_matmul_precision()`,
    `torch.backends.cudnn.deterministic`)."""
    for name, args, value, real_getter, text in reads:
        getter = st.name(real_getter, name.rpartition(".")[2])
        call = f"{getter}({', '.join(literal(a) or st.name(a, 'arg') for a in args)})"  # (never a user's repr)
        op = "is not" if isinstance(value, (bool, torch.dtype)) or value is None else "!="
        st.check(f"{call} {op} {st.name(value, 'setting')}", f"{text} == {show(value)}", (text, call))
