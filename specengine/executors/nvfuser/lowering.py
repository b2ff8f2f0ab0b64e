"""Running fusion plans on `nvfuser_direct` (imported lazily: the only code here that needs CUDA).

`replay` issues a plan's calls on a FusionDefinition, nothing more. `lower` returns the region's callable:
one FusionDefinition per contiguity pattern of the region's input tensors that the prologue does not check
(tensors computed by other executors, e.g. a matmul's output: each call reads their `is_contiguous()`);
for the inputs of the computation the prologue fixes it. nvFuser reuses its kernels across sizes itself.
"""

from __future__ import annotations

from typing import Any, Callable

from specengine.executors.nvfuser.plan import DType, FusionPlan, Ref, build_plan
from specengine.executors.nvfuser.regions import Region
from specengine.trace.proxies import TensorProxy


def replay(plan: FusionPlan, fd: Any, data_type: Any) -> Any:
    """Issue every call of `plan` on `fd` (a FusionDefinition inside its `with` block, or a recorder);
    `data_type` is `nvfuser_direct.DataType`. Returns `fd`."""
    results: list[Any] = []

    def resolve(v: Any) -> Any:
        if isinstance(v, Ref):
            return results[v.index]
        if isinstance(v, DType):
            return getattr(data_type, v.name)
        if isinstance(v, list):
            return [resolve(x) for x in v]
        return v

    for call in plan.calls:
        target = getattr(fd.ops, call.fn[4:]) if call.fn.startswith("ops.") else getattr(fd, call.fn)
        results.append(target(*(resolve(a) for a in call.args), **{k: resolve(v) for k, v in call.kwargs}))
    return fd


def define(plan: FusionPlan) -> Any:
    """A FusionDefinition built from `plan`."""
    from nvfuser_direct import DataType, FusionDefinition

    with FusionDefinition() as fd:
        replay(plan, fd, DataType)
    return fd


def plan_inputs(plan: FusionPlan, names: list[str], args: tuple) -> list[Any]:
    """The arguments of `execute`: tensors by position, scalars evaluated over the region's arguments."""
    env = dict(zip(names, args))
    return [args[i.position] if i.position is not None else i.expr.eval(env) for i in plan.inputs]


def lower(region: Region, contiguous: dict[str, bool]) -> Callable[..., tuple]:
    """A callable running `region` with nvFuser; it takes the region's inputs (tensors and symbols).

    `contiguous`: the contiguity the prologue checks, per input tensor of the computation."""
    names = [x.name for x in region.inputs]
    unknown = [i for i, x in enumerate(region.inputs) if isinstance(x, TensorProxy) and x.name not in contiguous]
    fusions: dict[tuple, tuple[FusionPlan, Any]] = {}

    def plan_for(pattern: tuple) -> FusionPlan:
        known = dict(contiguous)
        known.update((names[i], c) for i, c in zip(unknown, pattern))
        return build_plan(region, known)

    def run(*args: Any) -> tuple:
        pattern = tuple(args[i].is_contiguous() for i in unknown)
        entry = fusions.get(pattern)
        if entry is None:
            plan = plan_for(pattern)
            entry = fusions[pattern] = (plan, define(plan))
        plan, fd = entry
        return tuple(fd.execute(plan_inputs(plan, names, args)))

    run.region = region  # inspectable: the prims the fusion was defined from
    run.plan = plan_for(tuple(True for _ in unknown))  # the plan when every unchecked input is contiguous
    run.plan_for = plan_for
    return run
