"""The table from torch callables to specengine symbols, and the torch-function mode used while tracing."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from specengine.ops.generic import generic_call, generic_method
from specengine.trace import proxies
from specengine.trace.proxies import Proxy, TensorProxy, is_outside_tensor, unsupported
from specengine.trace.symbol import Symbol, tree_leaves

TORCH_TABLE: dict[Callable, Symbol] = {}
ALWAYS_TRACED: set[Callable] = set()  # e.g. creation ops: traced even when no argument is a proxy

_NAMESPACES = (
    ("torch", torch),
    ("torch.Tensor", torch.Tensor),
    ("torch.nn.functional", torch.nn.functional),
)


def torch_print_name(fn: Callable) -> tuple[str, str]:
    """(module, name) under which `fn` can be printed in a trace, e.g. ("torch", "add")."""
    name = getattr(fn, "__name__", None)
    for module, ns in _NAMESPACES:
        if name is not None and getattr(ns, name, None) is fn:
            return module, name
    if getattr(fn, "__module__", None) == "specengine.executors.torchex":
        return "tex", name
    raise ValueError(f"{fn!r} has no printable name")


def _as_method(sym: Symbol) -> Callable:
    def method(self: TensorProxy, *args: Any, **kwargs: Any) -> Any:
        return sym(self, *args, **kwargs)

    method.__name__ = sym.name
    return method


def torchop(
    *torch_fns: Callable,
    name: str | None = None,
    methods: tuple[str, ...] = (),
    impl: Callable | None = None,
    pure: bool = True,
    always_traced: bool = False,
):
    """Define a torch-level op: the decorated function is its decomposition into prims.

    Args:
        torch_fns: torch callables that map to this op while tracing.
        name: the op's name (default: the function's name).
        methods: TensorProxy methods and operators bound to this op.
        impl: what the torch executor calls (default: the first of `torch_fns`).
        pure: False for ops that mutate an argument (never removed or merged by passes).
        always_traced: trace calls even without a proxy argument (creation ops such as `torch.zeros(3)`),
            so they are computed in the trace instead of becoming constant tensors.

    Returns:
        A decorator that returns the op's Symbol.
    """

    def deco(decomposition: Callable) -> Symbol:
        sym = Symbol(name or decomposition.__name__, "ltorch", meta=decomposition, impl=impl or torch_fns[0], pure=pure)
        for fn in torch_fns:
            TORCH_TABLE[fn] = sym
            if always_traced:
                ALWAYS_TRACED.add(fn)
        for m in methods:
            setattr(TensorProxy, m, _as_method(sym))
        return sym

    return deco


_RANDOM = {getattr(ns, n) for ns, names in (
    (torch, ("rand", "randn", "randint", "randperm", "rand_like", "randn_like", "randint_like", "bernoulli",
             "multinomial", "normal", "poisson", "dropout", "alpha_dropout", "feature_dropout", "rrelu")),
    (torch.Tensor, ("uniform_", "normal_", "bernoulli_", "random_", "exponential_", "geometric_", "cauchy_",
                    "log_normal_", "bernoulli", "multinomial")),
    (torch.nn.functional, ("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout",
                           "rrelu", "gumbel_softmax")),
) for n in names if hasattr(ns, n)}  # fmt: skip


def has_proxy(tree: Any) -> bool:
    return any(isinstance(x, Proxy) for x in tree_leaves(tree))


def dispatch_torch(func: Callable, args: tuple, kwargs: dict) -> Any:
    """Route a torch call seen while tracing to its symbol; calls without proxies run eagerly.

    An in-place op on a real tensor (one closed over from outside) would mutate it only while tracing, never on
    cached calls: it is rejected. (Meta tensors are the stand-ins that decompositions run torch's checks on.)
    """
    sym = TORCH_TABLE.get(func)
    if sym is not None and not sym.pure and args and is_outside_tensor(args[0]) and not args[0].is_meta:
        name = torch.overrides.resolve_name(func) or sym.name
        raise unsupported(f"{name} on a tensor closed over from outside",
                          "it would mutate the tensor only while tracing; pass the tensor as an argument")  # fmt: skip
    if func not in ALWAYS_TRACED and not has_proxy((args, kwargs)):
        if func in _RANDOM:
            name = torch.overrides.resolve_name(func) or repr(func)
            raise unsupported(f"{name} without a traced argument", "it would draw once, while tracing, and the "
                              "computation would reuse that tensor; draw it from a traced value (torch.rand_like(x)) or "
                              "outside the compiled function")  # fmt: skip
        return func(*args, **kwargs)
    if sym is not None:
        return sym(*args, **kwargs)
    return generic_call(func, args, kwargs)  # no hand-written rule: torch's meta kernel decides


class TraceMode(TorchFunctionMode):
    """Captures `torch.*` calls while tracing, including those with no proxy among their arguments."""

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None):
        return dispatch_torch(func, args, kwargs or {})


proxies.HOOKS.dispatch_torch = dispatch_torch
proxies.HOOKS.fallback_method = generic_method
