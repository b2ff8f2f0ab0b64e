"""torch.distributed's machinery is called, never traced.

DDP's forward (buffer broadcast, reducer bookkeeping, `no_sync`), the forward hooks of FSDP2 (`fully_shard`: all-gather,
reshard, reduce-scatter), of `replicate` and of the composable `checkpoint`, and the collectives are Python with side
effects on other ranks. A trace that recorded them would skip them on a cached call, or bake one rank's decision into
an entry. So:

- `specengine.compile` runs such a module's own call eagerly and compiles the module inside (`compiled_module.py`);
- a submodule that FSDP2 manages, inside a compiled module, is an opaque call of the trace (`opaque_calls`): its
  hooks run eagerly on every call, and its parameters (sharded outside its call) are not inputs
  (`prologue/state.py`); its outputs come from a nested trace of its forward that sees what FSDP2 presents to it
  (`_Sharding`: a mixed precision policy's dtypes, the compute device under CPU offload);
- a compile whose function would call another module that torch.distributed manages (a DDP, a `replicate`d module)
  is refused before anything runs (`refuse_managed`), naming the module: its code would run on proxies;
- any other torch.distributed code that user code calls while tracing (`dist.all_reduce(t)`, the Python functional
  collectives, `dist.barrier()`) is refused where it is called (`coverage.py` calls `refuse_call`), except the
  queries of the process group (`get_rank()`, `get_world_size()`, `dist.group.WORLD`, ...), whose answers are fixed
  for the process. The functional collective ops themselves (`torch.ops._c10d_functional.all_reduce`, `wait_tensor`)
  are ops of the computation: they run on every call, in program order.

A collective refused here never ran: the refusal is raised as its frame starts.
"""

from __future__ import annotations

import functools
import re
import sys
import threading
import types
import weakref
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch

from specengine.errors import SpecEngineError, UnsupportedOpError
from specengine.ir import context
from specengine.ir.proxies import Proxy, TensorProxy, unsupported
from specengine.ir.symbol import Symbol, tree_leaves, tree_map
from specengine.prologue.state import sharded
from specengine.provenance import _is_internal

_TORCH = torch.__file__.rsplit("/", 1)[0]
_DIRS = (_TORCH + "/distributed/", _TORCH + "/nn/parallel/distributed.py")
QUERIES = frozenset({"get_rank", "get_world_size", "is_initialized", "is_available", "get_backend",
                     "get_process_group_ranks", "get_global_rank", "get_group_rank", "is_torchelastic_launched",
                     "get_node_local_rank", "is_nccl_available", "is_gloo_available", "is_mpi_available", "WORLD",
                     "group_name"})  # fmt: skip


def distributed_code(code: Any) -> bool:
    """Whether a code object is torch.distributed's (DDP's forward, FSDP2's and replicate's hooks, collectives)."""
    return getattr(code, "co_filename", "").startswith(_DIRS)


def _code_of(fn: Any) -> Any:
    for _ in range(16):
        if isinstance(fn, types.MethodType):
            fn = fn.__func__
        elif hasattr(fn, "__wrapped__"):
            fn = fn.__wrapped__
        else:
            break
    return getattr(fn, "__code__", None)


def distributed_hooks(module: torch.nn.Module) -> bool:
    """Whether torch.distributed registered forward hooks on `module` (fully_shard, replicate, composable checkpoint)."""
    hooks = list(module._forward_pre_hooks.values()) + list(module._forward_hooks.values())
    return any(distributed_code(_code_of(h)) for h in hooks)


def data_parallel(module: Any) -> bool:
    """Whether `module` is a DistributedDataParallel (whose forward is torch.distributed's code)."""
    ddp = getattr(sys.modules.get("torch.nn.parallel"), "DistributedDataParallel", None)
    return ddp is not None and isinstance(module, ddp)


def managed(module: torch.nn.Module) -> str | None:
    """What torch.distributed does on a call of `module`, or None: DDP's forward, or forward hooks."""
    if data_parallel(module) or distributed_code(_code_of(type(module).forward)):
        return f"{type(module).__name__}'s forward is torch.distributed's"
    if distributed_hooks(module):
        return "torch.distributed registered forward hooks on it (fully_shard, replicate or checkpoint)"
    return None


def refuse_managed(fn: Callable, modules: list) -> list:
    """Refuse a compile whose function would call a module that torch.distributed manages, before it runs: its
    hooks would run on proxies and touch distributed state. `modules` are the module roots of the inputs; the bound
    `self` of a compiled `forward` runs its own hooks eagerly, outside the trace. Returns the modules FSDP2 manages
    inside a root, each with what FSDP2 does around its call (`_Sharding`): their calls are opaque calls of the trace
    (`opaque_calls`)."""
    bound_self = getattr(fn, "__self__", None) if isinstance(fn, types.MethodType) else None
    opaque = []
    for root_path, _, root in modules:
        for qual, sub in root.named_modules():
            if qual and sharded(sub):
                opaque.append((sub, _Sharding(sub, f"{root_path}.{qual}")))
                continue
            why = None if sub is bound_self else managed(sub)
            if why is not None:
                path = f"{root_path}.{qual}" if qual else root_path
                raise SpecEngineError(
                    f"specengine cannot compile a call of {path} ({type(sub).__name__}): {why}, and that code must run "
                    "eagerly on every call, which a trace through it would not do (issue 24: calls of such modules "
                    "are not yet opaque calls of a trace). Compile the modules inside instead: "
                    "`blk.forward = specengine.compile(blk.forward)` (or `specengine.compile(blk)`) before "
                    "`fully_shard(blk)`, or `specengine.compile(model)` before wrapping it in DDP."
                )
    return opaque


class _Sharding:
    """What FSDP2 does around a call of a module it manages, as the nested trace must see it: the dtype and device of
    each unsharded parameter (a mixed precision policy's `param_dtype`, the compute device under CPU offload), the
    cast of floating inputs (`cast_forward_inputs` with a `param_dtype`) and of floating outputs (`output_dtype`)."""

    def __init__(self, module: torch.nn.Module, path: str):
        try:
            state = module._get_fsdp_state()
            mp = state._mp_policy
            self.params = {}  # (id(owner module), name) -> (dtype, device) of the unsharded parameter
            for group in state._fsdp_param_groups:
                for fp in group.fsdp_params:
                    info = fp._module_info
                    orig, cast = fp.sharded_param.dtype, fp.mp_policy.param_dtype  # as FSDPParam.init_dtype_attrs
                    view = (cast if cast is not None and orig.is_floating_point else orig, torch.device(fp.device))
                    for owner, name in zip([info.module, *info.shared_modules],
                                           [info.param_name, *info.shared_param_names]):  # fmt: skip
                        self.params[(id(owner), name)] = view
            self.inputs = mp.param_dtype if mp.cast_forward_inputs else None
            self.outputs = mp.output_dtype
        except AttributeError as e:  # FSDP2's state changed shape: do not guess
            raise SpecEngineError(
                f"specengine cannot compile a call of {path} ({type(module).__name__}): fully_shard manages it with "
                f"a state that specengine does not know ({e}), so the outputs of its call are unknown (issue 24). "
                "Compile its forward before sharding it instead: `blk.forward = specengine.compile(blk.forward)`, "
                "then `fully_shard(blk, ...)`."
            ) from None

    def cast_inputs(self, tree: Any) -> Any:
        dtype = self.inputs
        if dtype is None:
            return tree
        return tree_map(lambda t: t.to(dtype) if isinstance(t, TensorProxy) and t.dtype.is_floating_point else t, tree)

    def output_dtype(self, dtype: torch.dtype) -> torch.dtype:
        return self.outputs if self.outputs is not None and dtype.is_floating_point else dtype


@contextmanager
def opaque_calls(fn: Callable, modules: list) -> Iterator[None]:
    """While tracing, a call of a module that FSDP2 manages inside the compiled one is one op of the trace: the
    computation calls the module through `Module.__call__` on every call, so FSDP2's all-gather, reshard and
    reduce-scatter hooks run eagerly, as in eager. Its outputs come from its `forward` run on proxies of its
    parameters and buffers (their unsharded shapes), whose decisions are guards and whose ops are dropped. Other
    modules that torch.distributed manages are refused (`refuse_managed`)."""
    installed = []
    try:
        for sub, sharding in refuse_managed(fn, modules):
            d = sub.__dict__
            installed.append((d, d.get("_compiled_call_impl")))
            call = functools.partial(_opaque_call, sub, sharding)
            dict.__setitem__(d, "_compiled_call_impl", call)  # Module.__call__'s hook
        yield
    finally:
        for d, old in reversed(installed):
            dict.__setitem__(d, "_compiled_call_impl", old)


_symbols: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_local = threading.local()  # .outputs: the outputs of the module call being recorded


def _symbol(module: torch.nn.Module) -> Symbol:
    sym = _symbols.get(module)
    if sym is None:
        name = re.sub(r"\W", "_", f"call_{type(module).__name__}_{id(module):x}")
        ref = weakref.ref(module)
        sym = _symbols[module] = Symbol(name, "module_calls", meta=lambda *a, **k: _local.outputs.pop(),
                                        impl=lambda *a, **k: ref()(*a, **k), pure=False)  # fmt: skip
    return sym


def _opaque_call(module: torch.nn.Module, sharding: _Sharding, *args: Any, **kwargs: Any) -> Any:
    state = context.current()
    if state is None or not any(isinstance(x, Proxy) for x in tree_leaves((args, kwargs))):
        if state is not None:
            raise unsupported(f"a call of {type(module).__name__} (managed by FSDP2) without traced inputs",
                              "pass it a tensor computed by the compiled function")  # fmt: skip
        return module._call_impl(*args, **kwargs)  # another thread, not tracing: the module's own call
    _local.outputs = [_nested_forward(state, module, sharding, args, kwargs)]
    return state.record(_symbol(module), args, kwargs)


def _nested_forward(state: Any, module: torch.nn.Module, sharding: _Sharding, args: tuple, kwargs: dict) -> Any:
    """The outputs of `module(*args)`: fresh proxies shaped by its `forward` run on proxies of its tensors as FSDP2
    presents them to it (unsharded, in the policy's dtype, on the compute device), on its inputs and outputs cast as
    FSDP2's hooks cast them."""
    saved = []
    try:
        for sub in module.modules():
            for table in (sub._parameters, sub._buffers):
                for k, t in list(table.items()):
                    if isinstance(t, torch.Tensor) and not isinstance(t, Proxy):
                        cls = torch.nn.Parameter if isinstance(t, torch.nn.Parameter) else torch.Tensor
                        dtype, device = sharding.params.get((id(sub), k), (t.dtype, t.device))
                        proxy = TensorProxy(state.names.fresh("w"), tuple(t.shape), dtype, device, t.requires_grad,
                                            cls)  # fmt: skip
                        saved.append((table, k, t))
                        dict.__setitem__(table, k, proxy)
        pending = len(state.pending) + len(state.pending_binds)
        state.scopes.append([])  # forward's ops: dropped (the module runs itself)
        try:
            args, kwargs = sharding.cast_inputs((args, kwargs))
            out = type(module).forward(module, *args, **kwargs)
        finally:
            state.scopes.pop()
    finally:
        for table, k, t in reversed(saved):
            dict.__setitem__(table, k, t)
    if len(state.pending) + len(state.pending_binds) != pending:
        raise unsupported(f"data-dependent values in {type(module).__name__}.forward (managed by FSDP2)",
                          "compute them outside the sharded module")  # fmt: skip
    grad = torch.is_grad_enabled() and (any(isinstance(a, TensorProxy) and a.requires_grad for a in tree_leaves(
        (args, kwargs))) or any(p.requires_grad for p in module.parameters()))  # fmt: skip

    def fresh(t: Any) -> Any:
        if isinstance(t, TensorProxy):
            dtype = sharding.output_dtype(t.dtype)
            return TensorProxy(state.names.fresh("t"), t.dims, dtype, t.device, grad and dtype.is_floating_point)
        if t is not None:
            raise unsupported(f"{type(module).__name__}.forward (managed by FSDP2) returning a {type(t).__name__}",
                              "return tensors only")  # fmt: skip
        return t

    return tree_map(fresh, out)


def refuse_call(frame: types.FrameType) -> None:
    """Called as a torch.distributed frame starts while tracing: refuse it where user code called it (through
    torch's own frames, such as `Module.__call__` running hooks), unless it is a query of the process group. A
    frame that torch.distributed, an import or specengine itself called runs."""
    code, back = frame.f_code, frame.f_back
    if code.co_name in QUERIES or code.co_name == "<module>" or (back is not None and distributed_code(back.f_code)):
        return
    while back is not None and back.f_code.co_filename.startswith(_TORCH) and back.f_code.co_name != "<module>":
        back = back.f_back
    caller = "<frozen" if back is None else back.f_code.co_filename
    if caller.startswith("<frozen") or back.f_code.co_name == "<module>" or _is_internal(caller):
        return
    raise UnsupportedOpError(_called(frame), f"{back.f_code.co_filename}:{back.f_lineno}",
                             "torch.distributed code (a collective, DDP or FSDP machinery) is not traced: call it "
                             "outside the compiled function, or compile the module that the distributed wrapper "
                             "holds")  # fmt: skip


def _called(frame: types.FrameType) -> str:
    """The function a frame runs, named as the user called it (through a decorator: the function it wraps)."""
    code = frame.f_code
    for name in code.co_freevars:
        fn = frame.f_locals.get(name)
        if isinstance(fn, types.FunctionType) and distributed_code(fn.__code__):
            return f"{fn.__module__}.{fn.__qualname__}"
    return f"{frame.f_globals.get('__name__', 'torch.distributed')}.{getattr(code, 'co_qualname', code.co_name)}"
