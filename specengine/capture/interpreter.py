"""Tracing: run the user's function on proxies and record a Trace."""

from __future__ import annotations

import inspect
import os
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch
from torch.utils import _pytree as pytree

from specengine.capture import (
    calls,
    compiling,
    coverage,
    distributed,
    effects,
    module_reads,
    mutations,
    objects,
    torch_settings,
    unbound_methods,
    writes,
)
from specengine.capture.exceptions import check_caught, walks_stop_at
from specengine.capture.outside_reads import captured_transitively
from specengine.capture.state import CaptureState
from specengine.capture.torchstate import SET_AUTOCAST
from specengine.codegen import callable_target
from specengine.constraints import expr as E
from specengine.constraints.decide import Decider
from specengine.constraints.floats import FloatExpr
from specengine.errors import UnsupportedOpError
from specengine.ir.context import tracing
from specengine.ir.proxies import (
    NumberProxy,
    TensorProxy,
    as_traced,
    concrete_number,
    tensor_isinstance,
    unflatten_size,
)
from specengine.ir.recording import InputFacts, NameGen
from specengine.ir.trace import Trace
from specengine.ops import layouts, ltorch, outside  # noqa: F401 - they register ops and Tensor attributes
from specengine.ops.registry import TraceMode
from specengine.prologue.classes import ClassGuard
from specengine.prologue.contents import needs_contents
from specengine.prologue.external import ObjGuard, has_value_semantics, unwrap, user_class
from specengine.prologue.fields import config_objects_of, names_read
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
from specengine.prologue.structure import ObjectsGuard, StructureGuard


def _proxy(spec: Any, names: NameGen, hints: dict[str, int], shadows: objects.Shadows,
           made: dict[str, Any] | None = None, static: dict[str, E.Expr] | None = None) -> Any:  # fmt: skip
    """The proxy of an input; a size in `static` (module state's pinned sizes) is its constant: the prologue checks
    it all the same (the solver pins every symbol whose range is one value), and a trace over a convnet's kernel
    sizes as symbols carried them through every later size (EfficientNet: 1500 symbols in one spatial size)."""
    made = {} if made is None else made  # local -> tensor proxy, for arguments passed twice (AliasSpec)
    if isinstance(spec, TensorSpec):
        dims = tuple(static.get(s) or E.sym(s) if static else E.sym(s) for s in spec.symbols)
        proxy = TensorProxy(names.reserve(spec.local), dims, spec.dtype, spec.device, spec.requires_grad, spec.type)
        made[spec.local] = shadows.param(proxy)
        return proxy
    if isinstance(spec, AliasSpec):
        return made[spec.of]  # the same proxy, or the same shadow
    if isinstance(spec, IntSpec):
        return shadows.param(NumberProxy(names.reserve(spec.symbol), E.sym(spec.symbol), hints[spec.symbol], int))
    if isinstance(spec, FloatSpec):
        expr = FloatExpr("sym", (spec.symbol,))
        return shadows.param(NumberProxy(names.reserve(spec.symbol), expr, hints[spec.symbol], float))
    if isinstance(spec, NodeSpec):
        node = pytree.SUPPORTED_NODES[spec.node_type]
        children = [_proxy(c, names, hints, shadows, made, static) for c in spec.children]
        if spec.node_type is torch.Size:  # a SymSize where a size is symbolic
            return shadows.container(spec, unflatten_size(children, None))
        value = _rebuilt(spec, children) if spec.state is not None else node.unflatten_fn(children, spec.context)
        made[spec.local] = shadows.container(spec, value)
        return made[spec.local]
    if isinstance(spec, ObjectSpec):
        made[spec.local] = shadows.object(spec, [_proxy(c, names, hints, shadows, made, static) for c in spec.children])
        return made[spec.local]
    assert isinstance(spec, ConstSpec)
    shadows.constant(spec)
    return as_traced(spec.value)  # `max` passed in is the `max` the function's code sees (`op is max`)


def _rebuilt(spec: NodeSpec, children: list) -> Any:
    """A user container argument (a `ModelOutput`) with proxies for its leaves, built from its recorded state: its
    own `__init__`/`__post_init__` never sees a proxy (eager never runs them either: the caller built it)."""
    items, attrs = spec.state
    obj = spec.type.__new__(spec.type)
    if items:
        setitem = next(b for b in spec.type.__mro__ if b.__module__ in ("builtins", "collections")).__setitem__
        for key, i in items:
            setitem(obj, key, children[i])
    for name, i in attrs:
        object.__setattr__(obj, name, None if i is None else children[i])
    return obj


def _call_args(signature: inspect.Signature, values: list) -> tuple[list, dict]:
    args, kwargs = [], {}
    for p, v in zip(signature.parameters.values(), values):
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            args.extend(v)
        elif p.kind is inspect.Parameter.VAR_KEYWORD:
            kwargs.update(v)
        elif p.kind is inspect.Parameter.KEYWORD_ONLY:
            kwargs[p.name] = v
        else:
            args.append(v)
    return args, kwargs


@contextmanager
def swapped_state(specs: InputSpecs, values: list) -> Iterator[None]:
    """Put proxies in place of the state tensors (module parameters, buffers, tensors read from outside the
    arguments) in every place that holds them while the program is traced; put the tensors back afterwards."""
    saved = []
    try:
        for spec, proxy in zip(specs.state, values):
            for slot in specs.slots.get(spec.local, ()) if isinstance(proxy, (TensorProxy, NumberProxy)) else ():
                saved.append((slot, slot.get()))
                slot.set(proxy)
        yield
    finally:
        for slot, old in reversed(saved):
            slot.set(old)


def _check_function(target: Callable) -> None:
    code = getattr(target, "__code__", None)
    if code is not None and code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        raise UnsupportedOpError("a generator function", f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}",
                                 "calling it only creates a generator; compile a function that returns its "
                                 "results (e.g. a list)")  # fmt: skip


def _named_values(args: list, kwargs: dict, roots: list) -> list:
    """The values the function is given and reads from outside, named for an error (`calls.watching`)."""
    named = [(f"argument {i}", v) for i, v in enumerate(args)] + [(f"argument {k!r}", v) for k, v in kwargs.items()]
    return named + [(f"the {kind} {name}", root[2]) for root in roots if len(root) == 4 for kind, name in [root[:2]]]


def _attribute_inputs(modules: list, promoted: frozenset) -> set[tuple[int, str]]:
    """(id(module), name) of the module attributes read as inputs on every call: tensors and promoted ints."""
    return {(id(sub), k) for m in modules for sub in m.modules() for k, v in vars(sub).items()
            if isinstance(v, torch.Tensor) or (id(sub), k) in promoted}  # fmt: skip


def _static_sizes(specs: InputSpecs) -> dict[str, E.Expr]:
    """Module state's sizes whose range is one value, as constants (see `_proxy`)."""
    return {s: E.const(lo) for s, (lo, hi) in specs.ranges.items()
            if lo is not None and lo == hi and s in specs.static_symbols}  # fmt: skip


def _input_proxies(specs: InputSpecs, names: Any, shadows: objects.Shadows) -> tuple[list, list]:
    """The proxies of the call's inputs and of module state (whose one-value sizes are constants)."""
    made: dict = {}
    values = [_proxy(p, names, specs.hints, shadows, made) for p in specs.params]
    static = _static_sizes(specs)  # (once: it reads every range)
    return values, [_proxy(p, names, specs.hints, shadows, static=static) for p in specs.state]


def _keep_what_ran(specs: InputSpecs, state: CaptureState, ran: Any) -> None:
    """What the trace saw of the user code and the inputs, for the retrace decisions, the prologue and the disk."""
    state.type_errors = ran.type_errors  # TypeErrors that reached user frames with handlers (coverage.py)
    state.identity_seen = ran.identity_seen  # user `is` that may have seen a symbolic bool (capture/identity.py)
    state.ran_codes = ran.codes  # the user code the trace ran (a disk cache re-checks its hashes: specengine/persist)
    specs.layout_facts = list(state.facts.layout_facts)
    specs.attr_facts = list(state.facts.attr_facts)
    specs.lifted = list(state.facts.lifted)  # tensors closed over from outside: inputs the prologue passes as they are


@walks_stop_at
def trace_function(fn: Callable, specs: InputSpecs, decider: Decider) -> tuple[Trace, CaptureState]:
    """Run `fn` on proxies made from `specs`; every decision on a symbol goes through `decider`.

    Returns:
        The trace (its parameters are the tensor and int leaves of the inputs) and the tracing state.
    """
    start = time.perf_counter()
    state, shadows = _new_state(specs, decider), objects.Shadows()
    names = state.names
    values, state_values = _input_proxies(specs, names, shadows)
    args, kwargs = _call_args(specs.signature, values)
    target = unwrap(callable_target(fn))[0]  # the function under partials and bound methods
    _check_function(target)
    state.outside_roots = effects.captured_values(target) + module_reads.roots(target)  # where outside tensors are
    modules = [m for _, _, m in specs.modules]
    inputs = _attribute_inputs(modules, specs.promoted)
    plain = [d for k, d in specs.roots.items() if k.startswith("_obj_")]  # bound `self` of plain objects
    with (
        distributed.opaque_calls(fn, specs.modules),  # (refuses other managed modules before any hook runs)
        tracing(state),
        compiling.compiling(),
        TraceMode(),
        tensor_isinstance(),
        swapped_state(specs, state_values),
        effects.checked(target) as writers,
        unbound_methods.swapped(target),
    ):
        found = mutations.roots(modules, plain, shadows.outside, target)
        written: dict = {}  # module dicts user code may write: snapshotted by coverage, compared by module_reads
        with (
            module_reads.unchanged(written, writers),
            writes.recording(modules, inputs, specs.promoted) as recorder,
            writes.objects_unchanged(plain, target),
            shadows.constants_unchanged(),
            mutations.unchanged(found, target) as walk,
            coverage.collecting(state, written) as ran,  # the user code that runs (external.py guards its reads)
            calls.watching(state, ran.is_user, _named_values(args, kwargs, state.outside_roots)),  # its C calls
            mutations.caches_cleared(ran),  # lru caches filled while tracing hold proxies
        ):
            writers.ran = ran  # (which globals this thread may write: the user code that ran in it)
            mutations.check_not_aliased(specs, walk, shadows.rebuilt)
            user_start = time.perf_counter()
            args, kwargs = _concrete_args(args, kwargs, decider)
            out = outside.lift(unbound_methods.call_user(fn, args, kwargs))  # a real tensor returned: its proxy
            state.sync_torch_state()  # a change the function did not undo: the computation leaves it too
            user_end = time.perf_counter()
        specs.writes = recorder.writes
        if specs.writes:  # module attributes `forward` assigned: the computation also returns their values
            out = (out, tuple(w.value for w in specs.writes))
        state.output_plan = objects.plan_outputs(out, shadows)
    params, out = _finish(specs, state, (target, modules, plain), shadows, ran, out)
    state.frontend_s = (user_start - start) + (time.perf_counter() - user_end)  # the walks around the user's call
    return Trace("computation", params, tuple(state.bsyms), out, "Tracing"), state


def _concrete_args(args: tuple, kwargs: dict, decider: Decider) -> tuple[tuple, dict]:
    """A retrace's arguments: number arguments are real (each pinned by a guard); sizes stay as the shape gives."""
    if not decider.concrete:
        return args, kwargs
    return tuple(concrete_number(v, decider) for v in args), {k: concrete_number(v, decider) for k, v in kwargs.items()}


def _finish(specs: InputSpecs, state: CaptureState, reached: tuple, shadows: objects.Shadows, ran: Any,
            out: Any) -> tuple[tuple, Any]:  # fmt: skip
    """After the user's call: refusals it caught, autocast reads, the guards of what it read from outside
    (`reached`: the target function, its modules and plain objects); the trace's parameters and outputs."""
    check_caught(state)
    _note_autocast_reads(state)
    if state.output_plan is not None:
        out = tuple(state.output_plan.leaves)
    target, modules, plain = reached
    _guard_outside_reads(specs, state, target, modules, plain, shadows.outside, ran)
    _keep_what_ran(specs, state, ran)
    params = tuple(shadows.params)  # the inputs' proxies as created (tracing may have changed what holds them)
    return params + tuple(proxy for proxy, _, _ in state.facts.lifted), out


def _new_state(specs: InputSpecs, decider: Decider) -> CaptureState:
    """The tracing state, with what run-time checks and layout rules need to know of the inputs."""
    tensors = [s for s in specs.leaves() if isinstance(s, TensorSpec)]
    facts = InputFacts(formats={s.local: s.formats for s in tensors},
                       contiguity={t.local: t.contiguous for t in tensors},
                       layouts={k: v for k, v in specs.layouts.items() if v is not None},
                       tensor_attrs={s.local: s.attrs for s in tensors if s.attrs})  # fmt: skip
    return CaptureState(decider, NameGen(), facts, dict(specs.sources))  # s0 -> 'x.shape[0]': for run-time checks


def _guard_outside_reads(specs: InputSpecs, state: CaptureState, target: Callable, modules: list, plain: list,
                         constants: list, ran: Any) -> None:  # fmt: skip
    """What the trace read outside its inputs is baked in: the prologue guards it (globals, closure variables,
    module attributes, config objects, containers, classes, torch getters held by the function)."""
    specs.captured = captured_transitively(target, modules, ran)
    _guard_config_objects(specs, plain, constants, ran)
    _guard_containers(specs)
    _guard_captured_classes(specs)
    torch_settings.note_captured(state, specs.captured)


def _guard_captured_classes(specs: InputSpecs) -> None:
    """Classes read as globals or closure variables (`_Scale.factor`, `Registry.table`): their namespaces, as for
    the classes of modules (a version tag per call; prologue/classes.py)."""
    classes = [v for _, _, v, _ in specs.captured
               if isinstance(v, type) and not issubclass(v, type) and user_class(v) and not needs_contents(v)]  # fmt: skip
    if classes:
        specs.structure.append(ClassGuard(classes, "the classes read as globals"))


def _guard_config_objects(specs: InputSpecs, plain: list, constants: list, ran: Any) -> None:
    """Config objects read as globals, closure variables or attributes of a bound `self`, or passed in as constants
    (objects that are not plain, guarded by identity): their fields. The module structure guards keep the contents
    of the containers the code that ran may read (`ran`: what ran while tracing)."""
    names = names_read(ran.codes)
    for g in specs.structure:
        if isinstance(g, StructureGuard):
            g.restrict(names)

    named = [(_captured_text(c), c[2]) for c in specs.captured]
    named += [(f"self.{k}", v) for d in plain for k, v in d.items()] + constants
    found = config_objects_of([(p, v) for p, v in named if not needs_contents(v)])  # else: a fingerprint
    if found:
        specs.structure.append(ObjectsGuard(found))


def _guard_containers(specs: InputSpecs) -> None:
    """A list or dict of values with value semantics read as a global or a module attribute (`CFG["scale"]`,
    `mymod.ORDER[0]`) can change in place between calls: its contents are compared on every call (its identity is
    guarded with the other captured values). Not closure variables: a list a closure appends to (a log) would
    recompile every call."""
    for c in specs.captured:
        value = c[2]
        if c[0] != "cell" and type(value) in (list, dict):
            contents = tuple(value.items()) if type(value) is dict else tuple(value)
            if has_value_semantics(contents):
                key = f"_held_{id(value)}"
                read = f"tuple({key}.items())" if type(value) is dict else f"tuple({key})"
                specs.external.append(ObjGuard(read, f"the contents of {_captured_text(c)}", contents, {key: value}))


def _captured_text(c: tuple) -> str:
    return f"global {c[1]}" if c[0] == "global" else c[1][1] if c[0] == "attr" else f"closure variable {c[1][1]}"


def _note_autocast_reads(state: CaptureState) -> None:
    """An autocast region inside the function casts to the autocast dtypes of its entry, unless it names one."""
    if any(b.sym is SET_AUTOCAST for b in state.bsyms):
        for device, _, dtype in state.entry_torch_state[2]:
            state.note_global_read(("get_autocast_dtype", (device,)), dtype)
