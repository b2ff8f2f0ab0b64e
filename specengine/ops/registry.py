"""The table from torch callables to specengine symbols, and the torch-function mode used while tracing."""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode

from specengine.errors import UnsupportedOpError
from specengine.ir import context, proxies
from specengine.ir.literals import as_torch_reads
from specengine.ir.proxies import TensorProxy, is_outside_tensor, is_proxy, unsupported
from specengine.ir.symbol import Symbol, tree_leaves
from specengine.ops import outside, signatures
from specengine.ops.generic import generic_call, generic_method
from specengine.patching import original

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
    if getattr(fn, "__module__", None) == "specengine.ops.runtime":
        return "tex", name
    raise ValueError(f"{fn!r} has no printable name")


def _spell(func: Callable, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The call as torch binds it (ops/signatures.py: positional parameters positionally, in torch's order,
    keyword-only ones by name; TypeError where eager raises it), so that a rule sees every spelling eager accepts
    in one form. `out=None` is no argument."""
    args, kwargs = signatures.bind(func, args, kwargs)
    if "out" in kwargs and kwargs["out"] is None:
        kwargs = {k: v for k, v in kwargs.items() if k != "out"}
    return args, kwargs


def _as_method(sym: Symbol, name: str) -> Callable:
    torch_method = original(torch.Tensor, name)

    def method(self: TensorProxy, *args: Any, **kwargs: Any) -> Any:
        args, kwargs = as_torch_reads(args, kwargs, sym.name in _DATA_METHODS)  # (an IntEnum size: what torch reads)
        if any(is_outside_tensor(a) for a in args) or any(is_outside_tensor(v) for v in kwargs.values()):
            args, kwargs = outside.lift((args, kwargs))  # `x * C`: C, closed over from outside, becomes an input
        if (kwargs or signatures.has_deprecated(torch_method)) and torch_method is not None:
            (self, *args), kwargs = _spell(torch_method, (self, *args), kwargs)
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
            setattr(TensorProxy, m, _as_method(sym, m))
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


# torch functions that read their arguments as data: a numpy scalar there keeps its dtype (torch.tensor(np.float64(1)))
_DATA = frozenset({torch.tensor, torch.as_tensor, torch.asarray, torch.Tensor.new_tensor})
_DATA_METHODS = frozenset({"new_tensor"})


def has_proxy(tree: Any) -> bool:
    return any(map(is_proxy, tree_leaves(tree)))


# functionals with a hand-written out-of-place rule whose `inplace=True` is the in-place op (nn.ReLU(inplace=True))
_INPLACE_VARIANTS = {torch.nn.functional.relu: torch.relu_, torch.nn.functional.silu: torch._C._nn.silu_}


def dispatch_torch(func: Callable, args: tuple, kwargs: dict) -> Any:
    """Route a torch call seen while tracing to its symbol; calls without proxies run eagerly.

    An in-place op on a real tensor (one closed over from outside) would mutate it only while tracing, never on
    cached calls: it is rejected. (Meta tensors are the stand-ins that decompositions run torch's checks on.)
    """
    if context.current() is None and not has_proxy((args, kwargs)):
        return func(*args, **kwargs)  # outside tracing (code run by an import while tracing): eager torch
    args, kwargs = as_torch_reads(args, kwargs, func in _DATA)  # numbers, strings of other types: what torch reads
    sym = TORCH_TABLE.get(func)
    if (kwargs or signatures.has_deprecated(func)) and (sym is not None or func in _INPLACE_VARIANTS):
        if kwargs.get("out") is not None:
            return generic_call(func, args, kwargs)  # the generic path writes `out=` (or refuses it)
        args, kwargs = _spell(func, args, kwargs)
    if func in _INPLACE_VARIANTS and (kwargs.get("inplace") is True or args[1:2] == (True,)):
        func, args, kwargs = _INPLACE_VARIANTS[func], args[:1], {}  # F.relu(x, inplace=True): torch.relu_(x)
        sym = TORCH_TABLE.get(func)
    if sym is not None and not sym.pure and args and is_outside_tensor(args[0]) and not args[0].is_meta:
        name = torch.overrides.resolve_name(func) or sym.name
        raise unsupported(f"{name} on a tensor closed over from outside",
                          "it would mutate the tensor only while tracing; pass the tensor as an argument")  # fmt: skip
    if func not in ALWAYS_TRACED and not has_proxy((args, kwargs)):
        if context.current() is None or not outside.called_from_user(3):
            return func(*args, **kwargs)  # specengine's own helpers (on meta stand-ins, or constants)
        if not outside.real_tensors((args, kwargs)):
            return outside.constant_factory(func, args, kwargs, random=func in _RANDOM)  # drawn per call
    if outside.real_tensors((args, kwargs)) and context.current() is not None and outside.called_from_user(3):
        args, kwargs = outside.lift((args, kwargs))  # tensors closed over from outside become inputs
    if sym is not None:
        return sym(*args, **kwargs)
    method = _tensor_method(func, args)
    if method is not None:
        return method(*args, **kwargs)
    try:
        return generic_call(func, args, kwargs)  # no hand-written rule: torch's meta kernel decides
    except UnsupportedOpError:
        if any(isinstance(x, TensorProxy) for x in tree_leaves((args, kwargs))) or not outside.called_from_user(3):
            raise
    return outside.pinned_factory(func, args, kwargs)  # e.g. torch.linspace(0, 1, n) on CPU: n pinned with a guard


def _tensor_method(func: Callable, args: tuple) -> Callable | None:
    """A Tensor method or property reached through torch's dispatch (`torch.Tensor.__rsub__(x, 2)`, `C.shape` of a
    lifted tensor): the proxy's own implementation of it, the same table as bound calls use."""
    if not args or not isinstance(args[0], TensorProxy):
        return None
    name = getattr(func, "__name__", None)
    owner = getattr(func, "__self__", None)
    if name == "__get__" and getattr(owner, "__objclass__", None) is torch._C.TensorBase:  # a property
        prop = owner.__name__
        return lambda self, *_: getattr(self, prop)
    if name is None or not (getattr(func, "__objclass__", None) is torch._C.TensorBase or
                            getattr(torch.Tensor, name, None) is func):  # fmt: skip
        return None
    method = getattr(TensorProxy, name, None)
    return method if callable(method) else None


class TraceMode(TorchFunctionMode):
    """Captures `torch.*` calls while tracing, including those with no proxy among their arguments."""

    def __torch_function__(self, func: Callable, types: Any, args: tuple = (), kwargs: dict | None = None):
        return dispatch_torch(func, args, kwargs or {})


proxies.HOOKS.dispatch_torch = dispatch_torch
proxies.HOOKS.fallback_method = generic_method
