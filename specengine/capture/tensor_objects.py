"""Tensors as Python objects inside a compiled function: autograd flags, backward, parameters, attributes.

Each construct behaves as eager (an op of the computation, so every call does it) or is refused naming it:

- `x.requires_grad_(b)` and `x.requires_grad = b`: an op that sets the flag on the call's tensor (an input's flag
  changes for the caller too, as eager); later ops see the new flag. Eager's errors are raised while tracing where
  the trace knows the answer (an integer dtype; `False` on a tensor computed from ones that require grad); on an
  input that requires grad the op itself raises eager's error where the call's tensor is not a leaf.
- `x.retain_grad()`, `x.backward(...)`, `torch.autograd.backward(...)`: ops run on the call's tensors (gradients
  accumulate into the leaves' `.grad` on every call, as eager); eager's errors for a tensor that does not require
  grad and for an implicit gradient of a non-scalar (a guard on its size) are raised while tracing.
- `torch.autograd.grad(outputs, inputs, ...)`: an op whose results have the inputs' shapes, dtypes and devices;
  `allow_unused=True` without `materialize_grads=True` (a result may be None) and `is_grads_batched` are refused.
- `nn.Parameter(t, requires_grad)` of a traced tensor: an op making a Parameter of the call's tensor (a leaf,
  detached, of class Parameter).
- `x.attr = v` (a Python attribute, or `x.grad = v`): an op that sets it on the call's tensor; reading it later in
  the function gives `v` as traced (symbolic where `v` is). A Python attribute that the function did not set is
  missing, as on a plain tensor (`AttributeError`, `hasattr` False, `getattr`'s default). A Python attribute read
  from an input tensor (an argument, a module's parameter: `x.scale` set by the caller, `getattr`, `hasattr`,
  `x.__dict__`, `vars(x)`) is a guarded value: the prologue checks that each call's tensor has the value the trace
  read, or lacks the attribute as it did (a change misses); a value without value semantics (a tensor, a list) is
  refused by name, as is an attribute of a tensor closed over from outside (checked by an op on every call where
  the trace took it to be missing). Assigning another Tensor attribute (`x.data`, `x.grad_fn`) is refused.
- `x.nbytes`, `x.itemsize`: symbolic (`numel * itemsize`, a static fact of the dtype).
- `x.is_leaf`: known for tensors that do not require grad and for ones the function made; refused for an input
  that requires grad. `x.grad`, `x.grad_fn`, `x.retains_grad` (autograd state): refused unless set in the function.
"""

from __future__ import annotations

import itertools
import os
import sys
import warnings
import weakref
from typing import Any

import torch
from torch.utils import _pytree as pytree

from specengine.capture.effect_ops import record
from specengine.errors import UnsupportedOpError
from specengine.ir import context
from specengine.ir.literals import type_name
from specengine.ir.proxies import NumberProxy, TensorProxy, unsupported
from specengine.ir.symbol import Symbol, tree_leaves
from specengine.ops import registry
from specengine.prologue.external import _ABSENT as ABSENT_ATTR
from specengine.prologue.external import has_value_semantics
from specengine.provenance import _is_internal, user_frame

_SPECENGINE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_API = os.path.join(_SPECENGINE, "api.py")
_SLOTS = frozenset(("name", "epoch", "dims", "dtype", "device", "requires_grad", "tensor_type"))
_names = itertools.count()


class _ByProxy:
    """A table keyed by traced tensors, by identity (a proxy's `==` is a traced op), dropping dead ones."""

    def __init__(self):
        self.table: dict[int, tuple] = {}

    def get(self, proxy: TensorProxy) -> Any:
        held = self.table.get(id(proxy))
        return held[1] if held is not None and held[0]() is proxy else None

    def setdefault(self, proxy: TensorProxy, value: Any) -> Any:
        held = self.get(proxy)
        if held is None:
            key = id(proxy)
            self.table[key] = (weakref.ref(proxy, lambda _, k=key: self.table.pop(k, None)), value)
            held = value
        return held


_attrs = _ByProxy()  # per traced tensor: the Python attributes the function set on it (read back while tracing)
_leaves = _ByProxy()  # tensors the function made leaves (requires_grad_, Parameter): True
_ABSENT = object()  # key of the attribute names checked missing, in a tensor's `_attrs`
_NON_LEAF = ("you can only change requires_grad flags of leaf variables. If you want to use a computed variable "
             "in a subgraph that doesn't require differentiation use var_no_grad = var.detach().")  # fmt: skip
_NO_GRAD_FN = "element {} of tensors does not require grad and does not have a grad_fn"
_AUTOGRAD_STATE = ("grad", "grad_fn", "retains_grad", "_base", "_version", "data", "output_nr", "_grad_fn")


def _made_by_op(proxy: TensorProxy) -> Any:
    """The bound symbol of this trace that made `proxy`, or None (an input, a parameter, a lifted tensor)."""
    for bsym in reversed(context.require().bsyms):
        if any(o is proxy for o in bsym.flat_outs()):
            return bsym
    return None


def is_leaf(proxy: TensorProxy) -> bool | None:
    """Whether the tensor is an autograd leaf: None where only the call's tensor knows (an input that requires
    grad)."""
    if not proxy.requires_grad or _leaves.get(proxy):
        return True
    made = _made_by_op(proxy)
    if made is None:
        return None
    return bool(made.kwargs_dict.get("requires_grad"))  # a factory's `requires_grad=True` makes a leaf


def _flag(value: Any, op: str) -> bool:
    if isinstance(value, NumberProxy):
        value = bool(value)  # pinned (predicate)
    if not isinstance(value, bool):
        raise TypeError(f"{op}(): argument 'requires_grad' must be bool, not {type(value).__name__}")
    return value


def requires_grad_(self: TensorProxy, requires_grad: Any = True) -> TensorProxy:
    """`x.requires_grad_(b)`: an op of the computation (see the module docstring)."""
    return _set_requires_grad(self, _flag(requires_grad, "requires_grad_"), setter=False)


def _set_requires_grad(self: TensorProxy, b: bool, setter: bool) -> TensorProxy:
    """`x.requires_grad_(b)`, or `x.requires_grad = b` (`setter`: eager refuses it on any non-leaf)."""
    if b and not (self.dtype.is_floating_point or self.dtype.is_complex):
        raise RuntimeError("only Tensors of floating point and complex dtype can require gradients")
    leaf = is_leaf(self)
    if setter and leaf is False:
        raise RuntimeError("you can only change requires_grad flags of leaf variables.")
    if b == self.requires_grad and not (setter and leaf is None):
        return self  # changes nothing, on a leaf or not
    if not b and leaf is False:
        raise RuntimeError(_NON_LEAF)
    if setter:  # (on an input that requires grad, the call's tensor decides: eager's error where it is no leaf)
        record("set_requires_grad", lambda t: setattr(t, "requires_grad", b), (self,), {}, tensors=True)
    else:
        record("requires_grad_", lambda t: t.requires_grad_(b), (self,), {}, tensors=True)
    object.__setattr__(self, "requires_grad", b)
    if b:
        _leaves.setdefault(self, True)
    return self


def retain_grad(self: TensorProxy) -> None:
    """`x.retain_grad()`: an op, so the call's tensor keeps its `.grad` after a backward."""
    if not self.requires_grad:
        raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
    record("retain_grad", lambda t: t.retain_grad(), (self,), {}, tensors=True)
    _attrs.setdefault(self, {})["retains_grad"] = True


def _check_roots(tensors: list, grads: list | None) -> None:
    for i, t in enumerate(tensors):
        if not isinstance(t, TensorProxy):
            raise unsupported("a backward of a tensor closed over from outside", "pass it as an argument")
        if not t.requires_grad:
            raise RuntimeError(_NO_GRAD_FN.format(i))
        if (grads is None or grads[i] is None) and t.numel() != 1:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")


def _as_list(x: Any) -> list:
    return [x] if isinstance(x, torch.Tensor) else list(x)


def backward(self: TensorProxy, gradient: Any = None, retain_graph: Any = None, create_graph: bool = False,
             inputs: Any = None) -> None:  # fmt: skip
    """`loss.backward(...)`: an op run on the call's tensors (gradients accumulate as in eager)."""
    autograd_backward(self, gradient, retain_graph, create_graph, inputs=inputs)


def autograd_backward(tensors: Any, grad_tensors: Any = None, retain_graph: Any = None, create_graph: bool = False,
                      grad_variables: Any = None, inputs: Any = None) -> None:  # fmt: skip
    """`torch.autograd.backward(...)`: an op run on the call's tensors."""
    roots = _as_list(tensors)
    grads = None if grad_tensors is None else _as_list(grad_tensors)
    _check_roots(roots, grads)
    for t in tree_leaves(inputs):
        if isinstance(t, TensorProxy) and not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    record("backward", lambda *a, **k: torch.autograd.backward(*a, **k), (roots,),
           {"grad_tensors": grads, "retain_graph": retain_graph, "create_graph": create_graph, "inputs": inputs},
           tensors=True)  # fmt: skip


def _grad_meta(outputs: Any, inputs: Any, grad_outputs: Any = None, retain_graph: Any = None,
               create_graph: bool = False, only_inputs: bool = True, allow_unused: Any = None,
               is_grads_batched: bool = False, materialize_grads: bool = False) -> tuple:  # fmt: skip
    if is_grads_batched:
        raise unsupported("torch.autograd.grad(is_grads_batched=True)", "call it outside the compiled function")
    if allow_unused and not materialize_grads:
        raise unsupported("torch.autograd.grad(allow_unused=True)", "whether a gradient is None is not traced; "
                          "pass materialize_grads=True (zeros for unused inputs)")  # fmt: skip
    outs, ins = _as_list(outputs), _as_list(inputs)
    grads = None if grad_outputs is None else _as_list(grad_outputs)
    _check_roots(outs, grads)
    for t in ins:
        if not isinstance(t, TensorProxy) or not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    wants = bool(create_graph) and torch.is_grad_enabled()
    names = context.require().names
    return tuple(TensorProxy(names.fresh("t"), t.dims, t.dtype, t.device, wants) for t in ins)


GRAD = Symbol("grad", "torch.autograd", meta=_grad_meta, impl=torch.autograd.grad, pure=False)
registry.TORCH_TABLE[torch.autograd.grad] = GRAD
registry.TORCH_TABLE[torch.autograd.backward] = Symbol(
    "backward", "torch.autograd", meta=autograd_backward, impl=torch.autograd.backward, pure=False
)


def parameter(cls: type, data: TensorProxy, requires_grad: Any = True) -> TensorProxy:
    """`nn.Parameter(t)` of a traced tensor: an op making a Parameter (a leaf sharing `t`'s data) on every call."""
    b = _flag(requires_grad, "Parameter")
    if b and not (data.dtype.is_floating_point or data.dtype.is_complex):
        raise RuntimeError("Only Tensors of floating point and complex dtype can require gradients")
    state = context.require()
    out = TensorProxy(state.names.fresh("t"), data.dims, data.dtype, data.device, b, cls)
    sym = Symbol(f"parameter_{next(_names)}", "tensors", meta=lambda t: out, impl=lambda t: cls(t, b), pure=False)
    state.record(sym, (data,), {})
    _leaves.setdefault(out, True)
    return out


_real_parameter_new = torch.nn.Parameter.__dict__["__new__"].__func__


def _parameter_new(cls: type, data: Any = None, requires_grad: Any = True) -> Any:
    if isinstance(data, TensorProxy) and context.current() is not None:
        return parameter(cls, data, requires_grad)
    return _real_parameter_new(cls, data, requires_grad)


_parameter_new_static = staticmethod(_parameter_new)


# Python attributes of traced tensors

_base_getattr = TensorProxy.__getattr__
_PROXY_ONLY = frozenset(n for n in dir(TensorProxy) if not hasattr(torch.Tensor, n)) | _SLOTS


def _read_only_attributes() -> frozenset:
    """The Tensor attributes that eager refuses to assign (`x.shape = ...`: AttributeError)."""
    t, out = torch.empty(0), set()
    for name, attr in vars(torch._C.TensorBase).items():
        if type(attr).__name__ == "getset_descriptor":
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # (`volatile` warns that it does nothing)
                    setattr(t, name, getattr(t, name))
            except AttributeError:
                out.add(name)
            except Exception:  # noqa: BLE001, S110 - writable, with conditions: refused below as not traced
                pass
    return frozenset(out)


_READ_ONLY = _read_only_attributes()


def _setattr(self: TensorProxy, name: str, value: Any) -> None:
    if name in _SLOTS and (context.current() is None or sys._getframe(1).f_code.co_filename.startswith(_SPECENGINE)):
        object.__setattr__(self, name, value)  # the engine's own fields
        return
    if name == "requires_grad":
        _set_requires_grad(self, _flag(value, "requires_grad"), setter=True)
        return
    if name in _READ_ONLY:
        raise AttributeError(f"attribute '{name}' of 'torch._C.TensorBase' objects is not writable")
    if name in _PROXY_ONLY or (hasattr(torch.Tensor, name) and name != "grad") or context.current() is None:
        raise unsupported(f"assigning Tensor.{name} inside the compiled function",
                          "it is not traced; use an op (x.copy_(v), x.detach()), or assign it outside")  # fmt: skip
    if name == "grad" and value is not None and not isinstance(value, TensorProxy):
        raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of type {type(value).__name__}")
    record(f"setattr_{name}", lambda t, v: setattr(t, name, v), (self, value), {}, tensors=True)
    _attrs.setdefault(self, {})[name] = value


def _getattr(self: TensorProxy, name: str) -> Any:
    attrs = _attrs.get(self)
    if attrs is not None and name in attrs:
        return attrs[name]
    if name == "__dict__" and context.current() is not None:  # (`vars(x)` too: a proxy has no instance dict)
        return _dict(self)
    if not name.startswith("__") and not hasattr(torch.Tensor, name) and context.current() is not None:
        caller = sys._getframe(1).f_code.co_filename
        if not _is_internal(caller) and _is_input(self):
            state = context.require()
            if self.name in state.facts.formats:  # an argument or module state: the prologue checks what was read
                _read_attr(self, name, (state.facts.tensor_attrs.get(self.name) or {}).get(name, ABSENT_ATTR))
                found = state.facts.tensor_attrs.get(self.name) or {}
                return found[name] if name in found else _base_getattr(self, name)  # (eager's AttributeError)
            if _an_example_has(name):
                raise unsupported(f"reading the Python attribute {name!r} of a tensor closed over from outside",
                                  "its value is not guarded; pass the tensor or the value as an argument")  # fmt: skip
            _check_absent(self, name, user_frame(name).where)
    return _base_getattr(self, name)


_inputs = _ByProxy()  # per traced tensor: whether it is an input (no op of the trace made it)


def _example_attrs(proxy: TensorProxy) -> dict | None:
    """The Python attributes of the input tensor that `proxy` stands for, as the call being compiled has them."""
    state = context.current()
    return None if state is None else state.facts.tensor_attrs.get(proxy.name)


def _read_attr(proxy: TensorProxy, name: str, value: Any) -> Any:
    """`x.name` of an input tensor: a value with value semantics (a number, a string, a tuple of them), or its
    absence, is what the trace reads, and the prologue checks that each call's tensor has it (a changed value, an
    attribute added or removed, misses); anything else (a tensor, a list, an object) is refused by name."""
    if value is not ABSENT_ATTR and not has_value_semantics(value):
        raise unsupported(f"reading the Python attribute {name!r} of an input tensor (a {type_name(type(value))})",
                          "only attributes with value semantics (numbers, strings, tuples of them) are guarded; "
                          "pass the value as an argument")  # fmt: skip
    facts = context.require().facts.attr_facts
    if (proxy.name, name, value) not in facts:
        facts.append((proxy.name, name, value))
    return value


def _dict(self: TensorProxy) -> dict:
    """`x.__dict__` / `vars(x)`: the attributes set inside the function and, of an input, all of its own, each read
    as `x.name` is (guarded by value), and the set of their names guarded too."""
    out = {k: v for k, v in (_attrs.get(self) or {}).items() if k is not _ABSENT}
    if not _is_input(self):
        return out  # made inside: what the function set on it
    state = context.require()
    if self.name not in state.facts.formats:
        raise unsupported("Tensor.__dict__ of a tensor closed over from outside", "its attributes are not guarded; "
                          "pass the tensor as an argument")  # fmt: skip
    found = state.facts.tensor_attrs.get(self.name) or {}
    for name, value in found.items():
        if name not in out:
            out[name] = _read_attr(self, name, value)
    key = (self.name, "__dict__ keys", tuple(sorted(found)))
    if key not in state.facts.attr_facts:
        state.facts.attr_facts.append(key)
    return out


def _is_input(proxy: TensorProxy) -> bool:
    known = _inputs.get(proxy)
    return known if known is not None else _inputs.setdefault(proxy, _made_by_op(proxy) is None)


def _an_example_has(name: str) -> bool:
    """Whether a tensor of the call being compiled (an argument, or a parameter or buffer of the compiled module) has
    the Python attribute `name` (read from the compile's frame: the trace itself sees proxies only)."""
    frame = sys._getframe(1)
    while frame is not None and not (frame.f_code.co_name == "compile_entry" and frame.f_code.co_filename == _API):
        frame = frame.f_back
    if frame is None:
        return False
    found = frame.f_locals
    leaves = pytree.tree_leaves((found.get("args"), found.get("kwargs")))
    module = found.get("fn")
    if isinstance(module, torch.nn.Module):
        leaves += [*module.parameters(), *module.buffers()]
    return any(isinstance(t, torch.Tensor) and name in getattr(t, "__dict__", ()) for t in leaves)


def _check_absent(proxy: TensorProxy, name: str, where: str) -> None:
    """A Python attribute read from an input tensor is taken to be missing (`hasattr` False, `getattr`'s default,
    as eager for a plain tensor); an op checks on every call that the call's tensor has no such attribute, and
    refuses the call if it has one (its value would not be guarded)."""
    checked = _attrs.setdefault(proxy, {}).setdefault(_ABSENT, set())
    if name in checked:
        return
    checked.add(name)

    def check(t: torch.Tensor) -> None:
        if name in getattr(t, "__dict__", ()):
            raise UnsupportedOpError(f"reading the Python attribute {name!r} of an input tensor", where, "the "
                                     "trace took it to be missing and its value is not guarded; pass the value as "
                                     "an argument, or set it inside the compiled function")  # fmt: skip

    record(f"check_no_attr_{name}", check, (proxy,), {}, tensors=True)


def _autograd_state(name: str) -> property:
    def get(self: TensorProxy) -> Any:
        attrs = _attrs.get(self)
        if attrs is not None and name in attrs:
            return attrs[name]
        if name == "grad" and not self.requires_grad and _made_by_op(self) is not None:
            return None  # a tensor computed inside that does not require grad has no gradient, as eager
        raise unsupported(f"Tensor.{name} inside the compiled function", "it is autograd state, which is not "
                          "traced: use torch.autograd.grad(...) inside the function, or read it outside")  # fmt: skip

    return property(get)


def _is_leaf(self: TensorProxy) -> bool:
    leaf = is_leaf(self)
    if leaf is None:
        raise unsupported("Tensor.is_leaf of an input that requires grad", "whether the caller's tensor is a leaf is "
                          "not guarded; read it outside the compiled function")  # fmt: skip
    return leaf


TensorProxy.__setattr__ = _setattr
TensorProxy.__getattr__ = _getattr
TensorProxy.requires_grad_ = requires_grad_
TensorProxy.retain_grad = retain_grad
TensorProxy.backward = backward
TensorProxy.nbytes = property(lambda self: self.numel() * self.dtype.itemsize)
TensorProxy.itemsize = property(lambda self: self.dtype.itemsize)
TensorProxy.is_leaf = property(_is_leaf)
TensorProxy.data = property(lambda self: self.detach())  # a detached tensor sharing the data, as eager's
for _name in ("grad", "grad_fn", "retains_grad"):
    setattr(TensorProxy, _name, _autograd_state(_name))


def install() -> None:
    """While any thread traces: `nn.Parameter(t)` of a traced tensor is an op (see `parameter`)."""
    if torch.nn.Parameter.__dict__["__new__"].__func__ is _real_parameter_new:
        torch.nn.Parameter.__new__ = _parameter_new_static


def uninstall() -> None:
    if torch.nn.Parameter.__dict__["__new__"] is _parameter_new_static:
        torch.nn.Parameter.__new__ = staticmethod(_real_parameter_new)
