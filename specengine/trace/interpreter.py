"""Tracing: run the user's function on proxies and record a Trace."""

from __future__ import annotations

import inspect
import os
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch
from torch.utils import _pytree as pytree

from specengine.codegen import callable_target
from specengine.constraints import expr as E
from specengine.constraints.decide import Decider
from specengine.constraints.floats import FloatExpr
from specengine.errors import UnsupportedOpError
from specengine.prologue.inputs import ConstSpec, FloatSpec, InputSpecs, IntSpec, NodeSpec, ObjectSpec, TensorSpec
from specengine.trace import compiling, effects, objects
from specengine.trace.context import NameGen, TraceState, tracing
from specengine.trace.proxies import NumberProxy, TensorProxy, tensor_isinstance, unflatten_size
from specengine.trace.trace import Trace


def _proxy(spec: Any, names: NameGen, hints: dict[str, int], shadows: objects.Shadows) -> Any:
    if isinstance(spec, TensorSpec):
        dims = tuple(E.sym(s) for s in spec.symbols)
        proxy = TensorProxy(names.reserve(spec.local), dims, spec.dtype, spec.device, spec.requires_grad, spec.type)
        return shadows.param(proxy)
    if isinstance(spec, IntSpec):
        return shadows.param(NumberProxy(names.reserve(spec.symbol), E.sym(spec.symbol), hints[spec.symbol], int))
    if isinstance(spec, FloatSpec):
        expr = FloatExpr("sym", (spec.symbol,))
        return shadows.param(NumberProxy(names.reserve(spec.symbol), expr, hints[spec.symbol], float))
    if isinstance(spec, NodeSpec):
        node = pytree.SUPPORTED_NODES[spec.node_type]
        children = [_proxy(c, names, hints, shadows) for c in spec.children]
        if spec.node_type is torch.Size:  # a SymSize where a size is symbolic
            return shadows.container(spec, unflatten_size(children, None))
        return shadows.container(spec, node.unflatten_fn(children, spec.context))
    if isinstance(spec, ObjectSpec):
        return shadows.object(spec, [_proxy(c, names, hints, shadows) for c in spec.children])
    assert isinstance(spec, ConstSpec)
    shadows.constants.add(id(spec.value))
    return spec.value


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
def swapped_state(module: torch.nn.Module | None, specs: tuple, values: list) -> Iterator[None]:
    """Put proxies in place of a module's parameters and buffers while it is traced (tied ones too)."""
    if module is None:
        yield
        return
    by_id = {}
    for qual, t in [*module.named_parameters(remove_duplicate=False), *module.named_buffers(remove_duplicate=False)]:
        by_id.setdefault(id(t), []).append(qual)
    proxies = {s.path: v for s, v in zip(specs, values) if isinstance(v, TensorProxy)}
    saved = []
    for tensors in (list(module.named_parameters()), list(module.named_buffers())):
        for qual, t in tensors:
            proxy = proxies.get(_path_of(qual, module))
            for q in by_id[id(t)]:
                owner, name = _owner(module, q)
                table = owner._parameters if name in owner._parameters else owner._buffers
                saved.append((table, name, table[name]))
                table[name] = proxy
    try:
        yield
    finally:
        for table, name, old in reversed(saved):
            table[name] = old


def _path_of(qual: str, module: torch.nn.Module) -> str:
    from specengine.prologue.inputs import module_path

    owner, name = _owner(module, qual)
    return module_path(qual, "_parameters" if name in owner._parameters else "_buffers")


def _owner(module: torch.nn.Module, qual: str) -> tuple[torch.nn.Module, str]:
    *path, name = qual.split(".")
    for part in path:
        module = module._modules[part]
    return module, name


def _check_function(target: Callable) -> None:
    code = getattr(target, "__code__", None)
    if code is not None and code.co_flags & (inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR):
        raise UnsupportedOpError("a generator function", f"{os.path.basename(code.co_filename)}:{code.co_firstlineno}",
                                 "calling it only creates a generator; compile a function that returns its "
                                 "results (e.g. a list)")  # fmt: skip


def trace_function(fn: Callable, specs: InputSpecs, decider: Decider) -> tuple[Trace, TraceState]:
    """Run `fn` on proxies made from `specs`; every decision on a symbol goes through `decider`.

    Returns:
        The trace (its parameters are the tensor and int leaves of the inputs) and the tracing state.
    """
    from specengine.ops import ltorch  # noqa: F401 - registers the torch-level ops
    from specengine.ops.registry import TraceMode

    names = NameGen()
    state = TraceState(decider, names)
    shadows = objects.Shadows()
    values = [_proxy(p, names, specs.hints, shadows) for p in specs.params]
    state_values = [_proxy(p, names, specs.hints, shadows) for p in specs.state]
    args, kwargs = _call_args(specs.signature, values)
    target = callable_target(fn)
    _check_function(target)
    with (
        tracing(state),
        compiling.compiling(),
        TraceMode(),
        tensor_isinstance(),
        swapped_state(specs.module, specs.state, state_values),
        effects.checked(target),
    ):
        out = fn(*args, **kwargs)
        state.output_plan = objects.plan_outputs(out, shadows)
    if state.output_plan is not None:
        out = tuple(state.output_plan.leaves)
    specs.captured = effects.captured_values(target)  # their values are baked in: the prologue guards them
    params = tuple(shadows.params)  # the inputs' proxies as created (tracing may have changed what holds them)
    return Trace("computation", params, tuple(state.bsyms), out, "Tracing"), state
