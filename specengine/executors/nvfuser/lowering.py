"""Running fusion plans on `nvfuser_direct` (imported lazily: the only code here that needs CUDA).

`replay` issues a plan's calls on a FusionDefinition, nothing more. `lower` returns the region's callable:
one FusionDefinition per contiguity pattern of the region's input tensors that the prologue does not check
(tensors computed by other executors, e.g. a matmul's output: each call reads their `is_contiguous()`);
for the inputs of the computation the prologue fixes it. nvFuser reuses its kernels across sizes itself.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from specengine.constraints import expr as E
from specengine.executors.nvfuser.plan import DType, FusionPlan, Ref, build_plan
from specengine.executors.nvfuser.regions import Region
from specengine.ir.proxies import TensorProxy


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
    from nvfuser_direct import DataType, FusionDefinition  # lazy: nvFuser is an optional CUDA-only extra

    with FusionDefinition() as fd:
        replay(plan, fd, DataType)
    return fd


def plan_inputs(plan: FusionPlan, names: list[str], args: tuple) -> list[Any]:
    """The arguments of `execute`: tensors by position, scalars evaluated over the region's arguments."""
    env = dict(zip(names, args))
    return [args[i.position] if i.position is not None else i.expr.eval(env) for i in plan.inputs]


def size_checks(region: Region) -> list[tuple]:
    """The size conditions that the trace took from the example sizes and nvFuser would not raise eager's
    error for: a broadcast input size is 1 or the target, target sizes are not negative, a reshape keeps the
    numel. Each is (kind, *exprs, output dim); the region checks them on each call."""
    out: list[tuple] = []
    for b in region.bsyms:
        if b.sym.name not in ("broadcast_in_dim", "reshape"):
            continue
        x, shape = b.args[0], [E.as_expr(s) for s in b.args[1]]
        out += [("negative", t, j) for j, t in enumerate(shape) if not t.is_const]
        if b.sym.name == "reshape":
            numel, target = math.prod(x.dims, start=E.const(1)), math.prod(shape, start=E.const(1))
            if numel is not target:
                out.append(("numel", numel, target, shape))
            continue
        for i, d in enumerate(x.dims):
            t = shape[b.args[2][i]]
            if d is not t and not (d.is_const and (d.value == 1 or t.is_const)):
                out.append(("broadcast", d, t, b.args[2][i]))
    return out


def check_sizes(checks: list, env: dict) -> None:
    for kind, *rest in checks:
        if kind == "negative" and rest[0].eval(env) < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {rest[0].eval(env)}")
        if kind == "numel" and rest[0].eval(env) != rest[1].eval(env):
            shape = [s.eval(env) for s in rest[2]]
            raise RuntimeError(f"shape '{shape}' is invalid for input of size {rest[0].eval(env)}")
        if kind == "broadcast":
            size, target = rest[0].eval(env), rest[1].eval(env)
            if size != 1 and size != target:
                raise RuntimeError(f"The expanded size of the tensor ({target}) must match the existing size "
                                   f"({size}) at non-singleton dimension {rest[2]}.")  # fmt: skip


def size_env(region: Region, args: tuple) -> dict[str, Any]:
    """The region's arguments by name, and each symbol that is a size of an input tensor."""
    env = {x.name: a for x, a in zip(region.inputs, args)}
    for x, a in zip(region.inputs, args):
        if isinstance(x, TensorProxy):
            env.update((d.args[0], n) for d, n in zip(x.dims, a.shape) if d.op == "sym")
    return env


def lower(region: Region, contiguous: dict[str, bool]) -> Callable[..., tuple]:
    """A callable running `region` with nvFuser; it takes the region's inputs (tensors and symbols).

    `contiguous`: the contiguity the prologue checks, per input tensor of the computation."""
    names = [x.name for x in region.inputs]
    unknown = [i for i, x in enumerate(region.inputs) if isinstance(x, TensorProxy) and x.name not in contiguous]
    fusions: dict[tuple, tuple[FusionPlan, Any]] = {}
    checks = size_checks(region)

    def plan_for(pattern: tuple) -> FusionPlan:
        known = dict(contiguous)
        known.update((names[i], c) for i, c in zip(unknown, pattern))
        return build_plan(region, known)

    def run(*args: Any) -> tuple:
        if checks:
            check_sizes(checks, size_env(region, args))
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
