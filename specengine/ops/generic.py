"""The generic op path: any torch callable without a hand-written rule runs torch's own meta kernel.

The proxies become meta tensors whose sizes are `torch.SymInt`s over our nodes (`ir/symnode.py`), so the
kernel computes symbolic output sizes and every decision it takes becomes one of our constraints. Where an aten
op has no meta kernel, its decomposition (`torch._decomp`, which holds `torch._refs`) runs instead. The result
is one bound symbol that the torch executor runs as the real torch op.

Data-dependent aten ops (tagged `dynamic_output_shape` or `data_dependent_output`: unique, bincount,
repeat_interleave with tensor repeats, ...) run torch's own fake rules (ops/fake_rules.py): their sizes are unbacked
symbols, read from the real op's output by the computation.

Refused with UnsupportedOpError (never a crash, never a wrong result): data-dependent ops torch has no fake rule
for, data-dependent values a kernel makes but no output carries, `out=`, results
that are not tensors (a Python value could depend on the real tensor's strides), in-place ops that change a
tensor's metadata (`t_`, `resize_`), tensors closed over from outside, and kernels that fail only on symbolic
sizes. In-place ops (found by the meta tensors' version counters) run in place, in program order, like the
hand-written ones. Output strides are not modelled: our proxies carry sizes, dtype and device only, and every
stand-in is contiguous, so nothing downstream reads the meta kernel's layout.
"""

from __future__ import annotations

import contextlib
import itertools
import math
from typing import Any, Callable

import torch
import torch._decomp
from torch._dispatch.python import enable_python_dispatcher
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from specengine.constraints import expr as E
from specengine.errors import UnsupportedOpError
from specengine.ir import context, proxies
from specengine.ir import kernel_decisions as K
from specengine.ir import shape_env as SE
from specengine.ir import symnode as S
from specengine.ir.literals import as_torch_reads
from specengine.ir.proxies import NumberProxy, Proxy, TensorProxy, unsupported
from specengine.ir.symbol import Symbol, tree_leaves
from specengine.ir.trace import format_value
from specengine.ops import fake_rules, kernel_memo, runtime
from specengine.ops.signatures import public_name
from specengine.patching import original

_DATA_DEPENDENT_TAGS = tuple(getattr(torch.Tag, t) for t in ("dynamic_output_shape", "data_dependent_output")
                      if hasattr(torch.Tag, t))  # fmt: skip
_VALUE_RESULTS = (torch.dtype, torch.device, torch.layout, torch.memory_format, type(None))
# ops whose bool answer depends only on what a stand-in shares with every tensor a proxy stands for (its TensorImpl
# kind: dense and strided): `Module.to` / `_apply` asks it of each parameter
_STATIC_BOOLS = frozenset({"torch._has_compatible_shallow_copy_type"})
# ops whose outputs never require grad in eager (`x.detach()`, `torch.full_like(x, v)`): the generic path would
# otherwise give them the inputs' requires_grad
_NOT_DIFFERENTIABLE = frozenset(("detach", "detach_", "full_like", "rand_like", "randn_like", "randint_like",
                                 "empty_like", "zeros_like", "ones_like"))  # fmt: skip
_SYMBOLS: dict[tuple, Symbol] = {}
_DTYPE_PREDICATES = frozenset({"is_floating_point", "is_complex", "is_signed"})
_EMPTY_STRIDED = torch.ops.aten.empty_strided.default
_SIZE = torch.ops.aten.size.default
_VIEWS = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default, torch.ops.aten._reshape_alias.default)
_RANDOM_TAG = getattr(torch.Tag, "nondeterministic_seeded", None)
_aten = torch.ops.aten
_INDEX_OPS = {_aten.index, _aten.index_put, _aten.index_put_, _aten._index_put_impl_, _aten._unsafe_index,
              _aten._unsafe_index_put}  # fmt: skip
_pending: list[Any] = []


def op_name(func: Callable) -> str:
    """The name a trace prints for `func` (it resolves from the trace's `torch` global), e.g. torch.linalg.inv."""
    if isinstance(func, torch._ops.OpOverload):
        return f"torch.ops.{func.namespace}.{func._opname}.{func._overloadname}"
    if isinstance(func, torch._ops.OpOverloadPacket):
        return f"torch.ops.{func._qualified_op_name.replace('::', '.')}"
    name = torch.overrides.resolve_name(func)
    if name is None or _resolve(name) is not func:
        name = next((f"{ns}.{func.__name__}" for ns in _NAMESPACES if _resolve(f"{ns}.{getattr(func, '__name__', '')}")
                     is func), None)  # fmt: skip
    if name is None or _resolve(name) is not func:
        raise unsupported(public_name(func), "it has no symbolic rule and no printable torch name")
    return name


_NAMESPACES = ("torch", "torch.Tensor", "torch.nn.functional", "torch.linalg", "torch.special", "torch.fft",
               "torch._C._nn", "torch._C._linalg", "torch._C._special", "torch._C._fft", "tex")  # fmt: skip


def _resolve(path: str) -> Any:
    """The object a trace's `torch.x.y` (or `tex.x`) names."""
    head, *parts = path.split(".")
    if head == "torch" and len(parts) == 2 and parts[0] == "Tensor":
        return original(torch.Tensor, parts[1])  # (not a dispatcher that a trace swapped in)
    obj: Any = runtime if head == "tex" else torch
    for part in parts:
        obj = getattr(obj, part, None)
    return obj


def _symbol(func: Callable, name: str, pure: bool, unbacked: bool = False) -> Symbol:
    """The generic bound symbol of `func`; tagged "unbacked" where it makes unbacked symbols (never merged)."""
    sym = _SYMBOLS.get((func, pure, unbacked))
    if sym is None:
        module, _, short = name.rpartition(".")
        tags = frozenset({"generic", "unbacked"} if unbacked else {"generic"})
        sym = Symbol(short, module, meta=lambda *a, **k: _pending.pop(), impl=func, pure=pure, tags=tags)
        _SYMBOLS[(func, pure, unbacked)] = sym
    return sym


class _MetaMode(TorchDispatchMode):
    """Runs data-dependent aten ops by torch's fake rules; a decomposition where an op has no meta kernel; notes
    random ops."""

    random = False  # an aten op draws random numbers: the call is impure (never merged or dropped, kept in order)
    device = torch.device("cpu")  # the device of the call's tensors (some fake rules depend on it)

    def __init__(self) -> None:
        super().__init__()
        self.written: set[int] = set()  # ids of the tensors an aten op writes in place (by its schema)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func._schema.is_mutable:
            self._note_writes(func, args, kwargs)
        if _RANDOM_TAG is not None and _RANDOM_TAG in func.tags:
            self.random = True
        if any(tag in func.tags for tag in _DATA_DEPENDENT_TAGS) and not _integer_indexing(func, args):
            K.untranslated("a data-dependent op")
            return fake_rules.run(self, func, args, kwargs, self.device)
        if func is _SIZE:  # called back from a C++ composite (cov); torch's own call on our SymInts asserts
            return list(args[0].shape)
        if func is _EMPTY_STRIDED:  # strides are not modelled: a contiguous stand-in needs no storage-size guards
            return torch.empty(args[0], dtype=kwargs.get("dtype"), device="meta")
        if func in _VIEWS:
            return _contiguous_view(args[0], args[1])
        try:
            return func(*args, **kwargs)
        except NotImplementedError:
            decomposition = _decompositions().get(func)
            if decomposition is None:
                raise
            with self:
                return decomposition(*args, **kwargs)

    def _note_writes(self, func: Any, args: tuple, kwargs: dict) -> None:
        """(Not the version counters alone: they stop moving where torch's dispatch-key TLS excludes ADInplaceOrView.)"""
        for i, arg in enumerate(func._schema.arguments):
            if arg.alias_info is not None and arg.alias_info.is_write:
                value = args[i] if i < len(args) else kwargs.get(arg.name)
                for t in value if isinstance(value, (list, tuple)) else (value,):
                    if isinstance(t, torch.Tensor):
                        self.written.add(id(t))


def _contiguous_view(a: torch.Tensor, shape: Any) -> torch.Tensor:
    """A view of `a` as `shape` (a kernel's view, `_unsafe_view`, `_reshape_alias`), with contiguous strides.
    Whether the real tensor can be viewed depends on its strides, which are not modelled (the real op raises at run
    time where it cannot, as for the view rule of ops/ltorch_views.py): torch's view algorithm would ask, per pair
    of dims, whether a size equals another (`B*T == T`: is the batch 1), for sizes alone it does not depend on. The
    size questions that do decide the shape are torch's own infer_size's (the -1, numel preserved)."""
    shape = torch._prims_common.infer_size(shape, a.numel())
    return a.as_strided(shape, torch._prims_common.make_contiguous_strides_for(shape), a.storage_offset())


def _integer_indexing(func: Any, args: tuple) -> bool:
    """aten.index / index_put are tagged dynamic for boolean masks only; integer indices have static sizes."""
    if func.overloadpacket not in _INDEX_OPS or len(args) < 2:
        return False
    indices = [i for i in args[1] if i is not None]
    return all(isinstance(i, torch.Tensor) and not (i.dtype is torch.bool or i.dtype is torch.uint8) for i in indices)


def _decompositions() -> dict:
    return torch._decomp.decomposition_table


class _Stand_ins:
    """The meta stand-ins of one call's arguments, and the proxies they stand for; `rename` maps each size to
    what the stand-in holds (a memoized run's placeholders, ops/kernel_memo.py)."""

    def __init__(self, rename: Callable[[E.Expr], E.Expr] | None = None) -> None:
        self.tensors: list[tuple[torch.Tensor, TensorProxy, int]] = []  # (meta, proxy, version before)
        self.rename = rename

    def dims(self, proxy: TensorProxy) -> tuple:
        return proxy.dims if self.rename is None else tuple(self.rename(d) for d in proxy.dims)

    def convert(self, x: Any) -> Any:
        if isinstance(x, TensorProxy):
            with torch._C.DisableTorchFunction(), torch.inference_mode(False):  # (a version counter: `pure`)
                meta = torch.empty([S.symint(d) for d in self.dims(x)], dtype=x.dtype, device="meta")
            self.tensors.append((meta, x, meta._version))
            return meta
        if isinstance(x, NumberProxy):
            return self._number(x)
        if isinstance(x, tuple) and type(x) is not tuple and not hasattr(x, "_fields"):  # x.shape (a SymSize)
            return tuple(self.convert(v) for v in x)
        if isinstance(x, torch.Tensor):
            raise unsupported("a tensor closed over from outside", "pass the tensor as an argument")
        return x

    def _number(self, x: NumberProxy) -> Any:
        if x.python_type is float:
            return S.symfloat_input(x.hint, S.pin_float(x.expr, x.hint))
        if x.python_type is bool or x.expr.is_bool:
            return bool(x)
        return S.symint(x.expr if self.rename is None else self.rename(x.expr))


def _device(device: Any) -> torch.device:
    return device if isinstance(device, torch.device) else torch.device(device)


def _call_device(kwargs: dict, tensors: list[TensorProxy]) -> torch.device:
    """The device of a call's new tensors: its `device=`, else its first tensor argument's, else the CPU."""
    if kwargs.get("device") is not None:
        return _device(kwargs["device"])
    return tensors[0].device if tensors else torch.device("cpu")


def _with_out(func: Callable, name: str, args: tuple, kwargs: dict) -> Any:
    """`op(..., out=t)` (spectral_norm's `normalize(..., out=v)`): the op, then copied into `t`, which is returned;
    where `t` would be resized or cast (a shape or dtype other than the result's), refused."""
    out = kwargs["out"]
    result = (
        generic_call(func, args, {k: v for k, v in kwargs.items() if k != "out"}) if isinstance(out, Proxy) else None
    )
    if not (isinstance(out, TensorProxy) and isinstance(result, TensorProxy) and out.dtype == result.dtype
            and out.ndim == result.ndim and all(_same_size(a, b, name) for a, b in zip(out.dims, result.dims))):  # fmt: skip
        raise unsupported(f"{name}(out=...)", "assign the result instead of passing out=")
    return proxies.HOOKS.dispatch_torch(torch.Tensor.copy_, (out, result), {})


def _same_size(a: Any, b: Any, name: str) -> bool:
    return a == b or context.require().decide(E.eq(a, b), name, "out= is written without resizing")


def generic_call(func: Callable, args: tuple, kwargs: dict) -> Any:
    """Trace `func(*args, **kwargs)` through torch's meta kernel; raises UnsupportedOpError where it cannot."""
    state = context.require()
    paused = _runs_no_user_code(func, args, kwargs) and state.pause_user_code()
    try:
        return _generic_call(func, args, kwargs)
    finally:
        if paused:
            state.resume_user_code()


_PLAIN = (TensorProxy, NumberProxy, bool, int, float, complex, str, type(None), torch.dtype, torch.device,
          torch.layout, torch.memory_format, type(Ellipsis))  # fmt: skip
_DRAWS = ("rand", "bernoulli", "multinomial", "normal", "poisson", "dropout", "rrelu", "uniform", "random",
          "exponential", "geometric", "cauchy", "seed", "rng", "gumbel")  # fmt: skip


def _runs_no_user_code(func: Callable, args: tuple, kwargs: dict) -> bool:
    """Whether the generic path's work on `func` reaches only torch's and the engine's code, so that the watchers
    of user code (line coverage, C calls: they cost a Python call per frame) may pause: an aten or prims op, or a
    function of torch's (or the engine's) own, that draws no random numbers, on plain arguments (no callable,
    iterator, module or tensor subclass that could call back into the program)."""
    if isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        name = func.name() if isinstance(func, torch._ops.OpOverload) else func._qualified_op_name
        if name.partition("::")[0] not in ("aten", "prims"):
            return False  # a custom op: its fake kernel may be the user's
    else:
        owner = getattr(func, "__objclass__", None)
        module = getattr(func, "__module__", None) or getattr(owner, "__module__", None) or ""
        if not (module == "torch" or module.startswith(("torch.", "specengine."))):
            return False
        name = getattr(func, "__name__", "")
    if any(d in name for d in _DRAWS):
        return False
    return all(isinstance(x, _PLAIN) or type(x) in (torch.Tensor, torch.nn.Parameter)
               for x in tree_leaves((args, kwargs)))  # fmt: skip


def _generic_call(func: Callable, args: tuple, kwargs: dict) -> Any:
    name = op_name(func)
    if name.rpartition(".")[2] in _DTYPE_PREDICATES and len(args) == 1 and isinstance(args[0], TensorProxy):
        with torch._C.DisableTorchFunction():  # a fact of the dtype
            return getattr(torch.empty((), dtype=args[0].dtype, device="meta"), name.rpartition(".")[2])()
    if kwargs.get("out") is not None:
        return _with_out(func, name, args, kwargs)
    _check_printable(name, (args, kwargs))
    args, kwargs = context.require().autocast_args(name, func, args, kwargs)  # (the kernel runs on the casts)
    call = kernel_memo.Call(func, args, kwargs)
    if call.key is not None:
        found = kernel_memo.replay(call, name)
        if found is not None:
            run, real = found
            device = _call_device(kwargs, call.tensors)
            result = _build(name, run.outputs, run.spec, call.tensors, device, run.pure, kwargs, real)
            return _finish(func, name, args, kwargs, result, run.pure, call.tensors, False)
        memoized = _memoized_run(func, name, args, kwargs, call)
        if memoized is not None:
            return _finish(func, name, args, kwargs, *memoized)
    return _finish(func, name, args, kwargs, *_run(func, name, args, kwargs, _Stand_ins()))


def _memoized_run(func: Callable, name: str, args: tuple, kwargs: dict, call: kernel_memo.Call) -> tuple | None:
    """The call's run on placeholder sizes, logged for later calls of its pattern; None (nothing recorded) where
    that run fails or reaches what it cannot translate (the kernel then runs on the real sizes, as it would)."""
    state = context.require()
    saved = state.checkpoint()
    t = call.translation()
    try:
        with K.translating(t):
            stand_ins = _Stand_ins(call.placeholder)
            result, pure, tensors, unbacked, outputs = _run(func, name, args, kwargs, stand_ins, t)
    except (Exception, K.Untranslated):  # noqa: BLE001 - the direct run raises what it raises
        state.restore(saved)
        return None
    if not unbacked and all(o[0] != "number" for o in outputs[0]):
        kernel_memo.store(call, t, *outputs, pure)
    return result, pure, tensors, unbacked


def _run(func: Callable, name: str, args: tuple, kwargs: dict, stand_ins: _Stand_ins,
         t: K.Translation | None = None) -> tuple:  # fmt: skip
    """The kernel run on `stand_ins` of the arguments: (result, pure, input proxies, whether it made unbacked
    sizes[, its outputs' descriptions and tree, under a translation])."""
    margs, mkwargs = pytree.tree_map(stand_ins.convert, (args, kwargs))
    tensors = [p for _, p, _ in stand_ins.tensors]
    mode = _MetaMode()
    device = mode.device = _call_device(kwargs, tensors)
    if mkwargs.get("device") is not None:
        mkwargs["device"] = "meta"
    before = fake_rules.symbols_before()
    with context.require().deferred():  # run-time checks the kernel decides follow the op (they read its sizes)
        out = _run_meta(func, name, margs, mkwargs, mode, translated=t is not None)
    pure = _check_mutations(name, stand_ins, mode.written) and not mode.random
    outputs = _describe(name, out, stand_ins)
    result = _build(name, *outputs, tensors, device, pure, kwargs, None if t is None else t.real)
    unbacked = fake_rules.bind_new_symbols(name, result, before)
    return (result, pure, tensors, unbacked) + ((outputs,) if t is not None else ())


def _finish(func: Callable, name: str, args: tuple, kwargs: dict, result: Any, pure: bool, tensors: list,
            unbacked: bool) -> Any:  # fmt: skip
    """Record the call (unless it returns its input itself, e.g. `contiguous` of a contiguous tensor)."""
    inputs = {id(p) for p in tensors}
    if pure and all(id(r) in inputs for r in pytree.tree_leaves(result) if isinstance(r, Proxy)):
        return result
    _pending.append(result)
    return context.require().record(_symbol(func, name, pure, unbacked), args, kwargs)


_opaque_names = itertools.count()


def opaque_call(name: str, run: Callable, meta: Callable, args: tuple) -> Any:
    """One op of the trace that calls `run(*args)` at run time (a higher-order op, a torch.func transform: see
    capture/higher_order.py); the sizes of its outputs are those of `meta(*args)` run on meta stand-ins through
    torch's kernels, each decision they take a constraint, as on the generic path."""
    stand_ins = _Stand_ins()
    margs = pytree.tree_map(stand_ins.convert, args)
    mode = _MetaMode()
    device = mode.device = _call_device({}, [p for _, p, _ in stand_ins.tensors])
    before = fake_rules.symbols_before()
    with context.require().deferred():
        out = _run_meta(meta, name, margs, {}, mode)
    result = _build(name, *_describe(name, out, stand_ins), [p for _, p, _ in stand_ins.tensors], device, True, {})
    unbacked = fake_rules.bind_new_symbols(name, result, before)
    _pending.append(result)
    module, _, short = name.rpartition(".")
    tags = frozenset({"generic", "unbacked"} if unbacked else {"generic"})
    sym = Symbol(f"{short}_{next(_opaque_names)}", module, meta=lambda *a: _pending.pop(), impl=run, tags=tags)
    return context.require().record(sym, args, {})


def _check_printable(name: str, tree: Any) -> None:
    try:
        format_value(tree)
    except TypeError as e:
        raise unsupported(name, f"an argument cannot be written in a trace ({e})") from None


def _run_meta(func: Callable, name: str, margs: tuple, mkwargs: dict, mode: _MetaMode,
              translated: bool = False) -> Any:  # fmt: skip
    """The kernel's result: under torch's Python dispatcher first (Python meta kernels and decompositions for the
    C++ kernels that need concrete sizes), else plain C++ dispatch; an error is eager's if eager raises it too.
    (`translated`: a run on placeholder sizes, which stops at the first failure.)"""
    errors = []
    for python_dispatcher in (True, False):
        try:
            with K.running_op(name), torch._C.DisableTorchFunction(), _dispatcher(python_dispatcher), mode:
                return K.defaults_first(lambda: func(*margs, **mkwargs))
        except UnsupportedOpError:
            raise
        except SE.DataDependentError as e:
            raise unsupported(
                name, f"its output size is data-dependent ({e}); run it outside the compiled function"
            ) from None
        except Exception as e:  # noqa: BLE001 - decided below: eager's error, or a limit of the symbolic path
            if translated:
                raise
            errors.append(e)
    first = errors[0]
    symbolic_only = any(m in str(first) for m in _SYMBOLIC_FAILURES)
    if not symbolic_only and all(_eager_raises(func, margs, mkwargs, type(first), fill) for fill in (0, 1)):
        raise first
    why = f"{type(first).__name__}: {str(first).splitlines()[0] if str(first) else ''}"
    raise unsupported(name, f"its meta kernel fails on symbolic sizes ({why[:200]}); run it outside the compiled "
                      "function") from first  # fmt: skip


def _dispatcher(python: bool) -> Any:
    return enable_python_dispatcher() if python else contextlib.nullcontext()


_MAX_CHECK_NUMEL = 1 << 20


# C++ kernels that cannot take symbolic sizes: never an error of eager's
_SYMBOLIC_FAILURES = ("dispatch_on_subclass", "SymIntArrayRef expected to contain only concrete", "symbolic sizes")


def _eager_raises(func: Callable, margs: tuple, mkwargs: dict, kind: type, fill: int) -> bool:
    """Whether eager raises `kind` on real tensors of the example sizes filled with `fill`; when it does for both
    0 and 1 (not a data-dependent error), the error is eager's."""
    if not issubclass(kind, (RuntimeError, ValueError, IndexError, TypeError)):
        return False
    hints = context.require().decider.hints
    total = [0]

    def real(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            sizes = [int(S.expr_of(s).eval(hints)) for s in x.shape]
            total[0] += math.prod(sizes)
            return torch.full(sizes, fill, dtype=x.dtype)
        if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return x.node.hint
        return "cpu" if isinstance(x, str) and x == "meta" else x

    try:
        with torch._C.DisableTorchFunction():
            rargs, rkwargs = pytree.tree_map(real, (margs, mkwargs))
            if total[0] > _MAX_CHECK_NUMEL:
                return False
            func(*rargs, **rkwargs)
    except Exception as e:  # noqa: BLE001 - any failure of the eager run settles it
        return isinstance(e, kind)
    return False


def _check_mutations(name: str, stand_ins: _Stand_ins, written: set[int]) -> bool:
    """Whether the call is pure; an in-place op must keep each mutated tensor's sizes and dtype."""
    pure = True
    for meta, proxy, version in stand_ins.tensors:
        # (sizes compared even when the version did not move: a Python meta kernel may resize without bumping it)
        if _dims(meta) != stand_ins.dims(proxy) or meta.dtype != proxy.dtype:
            raise unsupported(name, "it changes a tensor's shape or dtype in place; use the out-of-place op")
        pure = pure and meta._version == version and id(meta) not in written
    return pure


def _dims(meta: torch.Tensor) -> tuple:
    return tuple(S.expr_of(s) for s in meta.shape)


def _describe(name: str, out: Any, stand_ins: _Stand_ins) -> tuple[list, Any]:
    """The kernel's outputs, flat: ("input", k) for the k-th tensor argument itself, ("new", sizes, dtype) for a
    new tensor, ("value", v) for a dtype, device, ..., ("number", proxy) for `.item()` of an integer tensor; and
    their tree."""
    leaves, spec = pytree.tree_flatten(out)
    index = {id(meta): k for k, (meta, _, _) in enumerate(stand_ins.tensors)}
    outputs: list[tuple] = []
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor):
            k = index.get(id(leaf))
            outputs.append(("input", k) if k is not None else ("new", _dims(leaf), leaf.dtype))
        elif isinstance(leaf, _VALUE_RESULTS) or (type(leaf) is bool and name in _STATIC_BOOLS):
            outputs.append(("value", leaf))
        elif (number := fake_rules.number(leaf)) is not None:
            outputs.append(("number", number))
        else:
            raise unsupported(name, f"it returns a {type(leaf).__name__}, which the generic path does not trace "
                              "(it could depend on the real tensor's layout or data)")  # fmt: skip
    return outputs, spec


def _build(name: str, outputs: list, spec: Any, inputs: list[TensorProxy], device: torch.device, pure: bool,
           kwargs: dict, real: dict | None = None) -> Any:  # fmt: skip
    """The call's result from its outputs' descriptions (new sizes over placeholders where `real` is given)."""
    grad = torch.is_grad_enabled() and any(p.requires_grad for p in inputs)
    grad = (grad and name.rpartition(".")[2] not in _NOT_DIFFERENTIABLE) or kwargs.get("requires_grad") is True
    state = context.require()
    results = []
    for tag, *rest in outputs:
        if tag == "input":
            results.append(inputs[rest[0]])
        elif tag == "new":
            dims, dtype = rest
            dims = dims if real is None else kernel_memo.real_dims(dims, real)
            wants_grad = grad and (dtype.is_floating_point or dtype.is_complex)
            results.append(TensorProxy(state.names.fresh("t"), dims, dtype, device, wants_grad))
        else:
            results.append(rest[0])
    if not any(isinstance(r, Proxy) for r in results) and pure and name not in _STATIC_BOOLS:
        raise unsupported(name, "it returns no tensor")
    return pytree.tree_unflatten(results, spec)


class _Property:
    """A Tensor property without a rule (`x.mH`, `x.real`): its value through the generic path."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, proxy: TensorProxy, owner: Any = None) -> Any:
        return generic_call(runtime.tensor_attr, (proxy, self.name), {})


def generic_method(name: str) -> Any:
    """A Tensor method or property without a rule, as a descriptor binding to the proxy (or None)."""
    attr = original(torch.Tensor, name)  # (not a dispatcher that a trace swapped in)
    if attr is None:
        return None
    if isinstance(attr, (property, type(torch.Tensor.real))):
        return _Property(name)
    if callable(attr) and not isinstance(attr, type):

        def method(self: TensorProxy, *args: Any, **kwargs: Any) -> Any:
            args, kwargs = as_torch_reads(args, kwargs, name == "new_tensor")
            return generic_call(attr, (self, *args), kwargs)

        return method
    return None
