"""Values that do not come from the inputs: constant factories and tensors closed over from outside.

- A torch call without a proxy among its arguments and without a tensor among them (`torch.linspace(0, 1, 5)`,
  `torch.tensor([1.0, 2.0])`, `torch.scalar_tensor(3)`, `torch.rand(3)`) that returns a tensor is a *constant
  factory*: it is recorded as an op of the trace, so that the computation creates a fresh tensor on every call
  (as eager does; a random one draws from the generator then). Its output's metadata comes from running it once
  while tracing, with the CPU generator's state restored afterwards.
- A real tensor that the traced code reads from outside its inputs (a global, a closure variable, an attribute
  of a plain object) is *lifted*: it becomes an input of the computation with static sizes, and the prologue
  passes that very tensor and checks its version (`t._version`), dtype and shape, so that an in-place change
  outside (or a rebinding, through the identity guards on captured values) compiles a new entry.

Both apply only to calls made by user code (or by torch's Python code that user code called); specengine's own
helpers run torch eagerly while tracing and are left alone.
"""

from __future__ import annotations

import contextvars
import sys
import types
from typing import Any, Callable

import torch

from specengine.ir import context
from specengine.ir.literals import show
from specengine.ir.proxies import NumberProxy, Proxy, TensorProxy, is_outside_tensor, unsupported
from specengine.ir.symbol import Symbol, tree_leaves, tree_map
from specengine.ir.trace import format_value
from specengine.ops.number_tensors import note_constant
from specengine.provenance import _is_internal

_FACTORIES: dict[tuple[Callable, bool], Symbol] = {}
_TORCH_DIR = torch.__file__.rsplit("/", 1)[0] + "/"


def called_from_user(depth: int = 2) -> bool:
    """Whether the torch call being dispatched was made by user code (torch's own Python frames are skipped)."""
    frame = sys._getframe(depth)
    while frame is not None and frame.f_code.co_filename.startswith(_TORCH_DIR):
        frame = frame.f_back
    return frame is not None and not _is_internal(frame.f_code.co_filename)


def real_tensors(tree: Any) -> list[torch.Tensor]:
    """The tensors in `tree` that are neither proxies nor meta stand-ins."""
    return [x for x in tree_leaves(tree) if is_outside_tensor(x) and not x.is_meta]


def lift(tree: Any) -> Any:
    """`tree` with each real tensor replaced by its lifted input proxy (see the module docstring); `tree` itself
    when it holds none (containers are not rebuilt)."""
    if not real_tensors(tree):
        return tree
    state = context.require()

    def fn(x: Any) -> Any:
        if is_outside_tensor(x) and not x.is_meta:
            return lifted_proxy(state, x)
        return x

    return tree_map(fn, tree)


def lifted_proxy(state: Any, t: torch.Tensor) -> TensorProxy:
    """The proxy standing for the real tensor `t` in this trace (one per tensor object)."""
    for proxy, tensor, _ in state.facts.lifted:
        if tensor is t:
            return proxy
    if t.layout is not torch.strided or t.is_quantized or type(t) not in (torch.Tensor, torch.nn.Parameter):
        raise unsupported(f"a {t.layout} or subclass tensor closed over from outside", "pass it as an argument")
    path = find_path(t, state.outside_roots)
    if path is None and isinstance(t, torch.nn.Parameter):
        raise unsupported("a parameter reached other than through its module (an optimizer's param_groups, a "
                          "container of modules in a global)", "run optimizer steps, zero_grad and backward "
                          "outside the compiled function; pass modules directly (a global, an argument, an "
                          "attribute)")  # fmt: skip
    if path is None:
        raise unsupported("a tensor closed over from outside that is not reached from the function's globals or "
                          "closure variables", "pass the tensor as an argument")  # fmt: skip
    proxy = TensorProxy(state.names.fresh("closed"), tuple(t.shape), t.dtype, t.device, t.requires_grad)
    state.facts.lifted.append((proxy, t, path))
    return proxy


_MAX_DEPTH = 3


def find_path(t: torch.Tensor, roots: list) -> tuple | None:
    """(root object, steps) by which the program reached `t`: a global or closure variable holding it through dicts
    (str or int keys), lists, tuples and plain objects' attributes, a few levels deep; None if none does."""
    for kind, name, value, holder in roots:
        root, first = (holder, ("item", name)) if kind == "global" else (holder[name[0]], ("attr", "cell_contents"))
        steps = _search(t, value, _MAX_DEPTH)
        if steps is not None:
            return root, (first, *steps)
    return None


def _search(t: torch.Tensor, value: Any, depth: int) -> tuple | None:
    if value is t:
        return ()
    if depth == 0 or isinstance(value, (torch.Tensor, torch.nn.Module, type)) or callable(value):
        return None
    if isinstance(value, dict):
        children = [(("item", k), v) for k, v in value.items() if type(k) in (str, int)]
    elif isinstance(value, (list, tuple)):
        children = [(("item", i), v) for i, v in enumerate(value)]
    elif hasattr(value, "__dict__") and not isinstance(value, types.ModuleType):
        children = [(("attr", k), v) for k, v in vars(value).items()]
    else:
        return None
    for step, child in children:
        found = _search(t, child, depth - 1)
        if found is not None:
            return (step, *found)
    return None


_MISSING = object()


def reach(root: Any, steps: tuple) -> Any:
    """Follow `steps` from `root` (the prologue's identity check of a lifted tensor); a missing link gives a sentinel."""
    try:
        for kind, key in steps:
            root = root[key] if kind == "item" else getattr(root, key)
    except (KeyError, IndexError, AttributeError, TypeError):
        return _MISSING
    return root


def constant_factory(func: Callable, args: tuple, kwargs: dict, random: bool = False) -> Any:
    """Run `func`; if it returns a tensor, record it as an op of the trace instead (see the module docstring)."""
    gen = torch.default_generator  # (its own methods: torch.get_rng_state is traced while tracing)
    before = gen.get_state()
    try:
        out = func(*args, **kwargs)
        drew = random or not torch.equal(gen.get_state(), before)
    finally:
        gen.set_state(before)
    if not isinstance(out, torch.Tensor) or out.is_meta:
        return out if not drew else func(*args, **kwargs)  # (a random non-tensor: draw as eager does)
    if out.layout is not torch.strided or type(out) is not torch.Tensor:
        raise unsupported(f"{_name(func)} returning a {out.layout} tensor", "create it outside the compiled function")
    _printable(func, args, kwargs)
    sym = _FACTORIES.get((func, drew))
    if sym is None:
        sym = _FACTORIES[(func, drew)] = _factory_symbol(func, drew)
    state = context.require()
    if out.dtype.is_floating_point or out.dtype.is_complex:
        if "dtype" not in kwargs:
            state.facts.read_default_dtype()
    token = _example.set(out)
    try:
        proxy = state.record(sym, args, kwargs)
    finally:
        _example.reset(token)
    if not drew and out.ndim == 0 and out.dtype is torch.int64 and not _has_tensor((args, kwargs)):
        note_constant(proxy, int(out))  # `torch.div(8, 4, rounding_mode="trunc")`: a number tensor (its value)
    return proxy


_example: contextvars.ContextVar[torch.Tensor] = contextvars.ContextVar("specengine_factory_example")


def pinned_factory(func: Callable, args: tuple, kwargs: dict) -> Any:
    """A torch call without a rule whose only symbolic arguments are numbers: each is pinned (a guard records its
    value), then it is a constant factory."""
    reason = f"{_name(func)} has no symbolic rule: its number arguments are constants"

    def pin(x: Any) -> Any:
        if isinstance(x, NumberProxy):
            return x._value(_name(func), reason) if x.python_type is not float else float(x)
        return x

    args, kwargs = tree_map(pin, (args, kwargs))
    return constant_factory(func, args, kwargs)


def _factory_symbol(func: Callable, random: bool) -> Symbol:
    module, name = _print_path(func)

    def meta(*args: Any, **kwargs: Any) -> TensorProxy:
        out = _example.get()
        return TensorProxy(context.require().names.fresh("t"), tuple(out.shape), out.dtype, out.device,
                           out.requires_grad)  # fmt: skip

    return Symbol(name, module, meta=meta, impl=func, pure=not random)


def _printable(func: Callable, args: tuple, kwargs: dict) -> None:
    try:
        format_value((args, kwargs))
    except TypeError as e:
        raise unsupported(f"{_name(func)} with these arguments", f"{e}; create the tensor outside the compiled "
                          "function and pass it as an argument") from None  # fmt: skip


def _print_path(func: Callable) -> tuple[str, str]:
    name = _name(func)
    module, _, short = name.rpartition(".")
    return module or "torch", short


def _name(func: Callable) -> str:
    return torch.overrides.resolve_name(func) or getattr(func, "__name__", None) or show(func)


def has_proxy(tree: Any) -> bool:
    return any(isinstance(x, Proxy) for x in tree_leaves(tree))


def _has_tensor(tree: Any) -> bool:
    return any(isinstance(x, torch.Tensor) for x in tree_leaves(tree))
