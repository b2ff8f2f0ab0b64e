"""Generator of torch call spellings for every op with a rule (issue 22 part 4; tests/test_signatures.py).

For every torch callable that has a hand-written rule (`ops/registry.py`'s TORCH_TABLE, and the Tensor methods
bound to rules) and a sample call (PyTorch's OpInfo samples, or `EXTRA_SAMPLES` where OpInfo has none), the
generator binds the sample to torch's own signature (the aten schemas, `inspect` for Python functions) and writes
it in every spelling that eager accepts: the first k positional arguments positionally and the rest by keyword,
for every k (`torch.sum(input=x, dim=0)`, `torch.mul(x, other=2.0)`, `x.reshape(shape=s)`), and in spellings
eager refuses: an unknown keyword, an argument given twice (both TypeError).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.utils import _pytree as pytree

from specengine.ops import signatures
from specengine.ops.registry import TORCH_TABLE


@dataclass
class Spelling:
    """One way to write a call: `fn(*args, **kwargs)`; `label` says which (e.g. "input=, dim="); `valid`: eager
    accepts the spelling (False: an unknown keyword or an argument given twice, where eager raises TypeError)."""

    fn: Callable
    args: tuple
    kwargs: dict = field(default_factory=dict)
    label: str = ""
    valid: bool = True

    def inputs(self) -> list[torch.Tensor]:
        """The tensors of the call, which the program takes as arguments (not closed over)."""
        return [x for x in pytree.tree_leaves((self.args, self.kwargs)) if isinstance(x, torch.Tensor)]

    def program(self) -> Callable:
        """`lambda *tensors: fn(...)` with the call's tensors as the program's arguments."""
        spec = pytree.tree_flatten((self.args, self.kwargs))[1]
        leaves = pytree.tree_leaves((self.args, self.kwargs))
        slots = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
        fn = self.fn

        def call(*tensors: Any) -> Any:
            filled = list(leaves)
            for i, t in zip(slots, tensors):
                filled[i] = t
            args, kwargs = pytree.tree_unflatten(filled, spec)
            return fn(*args, **kwargs)

        return call

    def __str__(self) -> str:
        return f"{signatures.public_name(self.fn)}[{self.label}]"


def rule_callables() -> list[Callable]:
    """Every torch callable with a rule whose signature the table knows (operators and `*args` functions aside)."""
    fns = [fn for fn in TORCH_TABLE if signatures.overloads(fn) and signatures.public_name(fn).startswith("torch.")]
    return sorted(dict.fromkeys(fns), key=signatures.public_name)


def _positional_names(fn: Callable, args: tuple, kwargs: dict) -> tuple[signatures.Overload, dict] | None:
    """The overload that binds the sample call (first fitting, as `signatures.bind` chooses) and the name -> value map."""
    for ov in signatures.overloads(fn):
        try:
            form = signatures._bind_one(fn, ov, args, kwargs)
        except TypeError:
            continue
        if signatures._fits_all(ov, form):
            named = dict(zip((p.name for p in ov.positional), form[0]))
            return ov, {**named, **form[1]}
    return None


def _given(fn: Callable, args: tuple, kwargs: dict) -> tuple[dict, list[str], dict, int] | None:
    """The sample's values by name, the positional parameters it gives (in order), the keyword-only ones it gives,
    and how many leading ones are always positional (a method's self); None where no overload binds it."""
    bound = _positional_names(fn, args, kwargs)
    if bound is None:
        return None
    ov, values = bound
    names = [p.name for p in ov.positional if p.name in values]
    keyword_only = {p.name: values[p.name] for p in ov.params if p.kw_only and p.name in values}
    return values, names, keyword_only, 1 if signatures._is_method(fn) else 0


def spellings(fn: Callable, args: tuple, kwargs: dict) -> list[Spelling]:
    """The sample `fn(*args, **kwargs)` in every positional/keyword split eager accepts, and two it refuses."""
    given = _given(fn, args, kwargs)
    if given is None:
        return []
    values, names, keyword_only, first = given
    out = []
    for k in range(first, len(names) + 1):
        if k == len(names) and not keyword_only:
            continue  # all positional: the plain spelling, not what this generator is about
        pos = tuple(values[n] for n in names[:k])
        kw = {**{n: values[n] for n in names[k:]}, **keyword_only}
        out.append(Spelling(fn, pos, kw, ", ".join([f"{k} positional"] + [f"{n}=" for n in kw])))
    pos = tuple(values[n] for n in names)
    out.append(Spelling(fn, pos, {**keyword_only, "no_such_argument": 1}, "unknown keyword", valid=False))
    if len(names) > first:  # (the first: torch's deprecated signatures, e.g. `sub(input, alpha, other)`, take others)
        dup = {**keyword_only, names[first]: values[names[first]]}
        out.append(Spelling(fn, pos, dup, f"{names[first]} twice", valid=False))
    return out


# the numpy names torch's argument parser accepts for these parameters, in a builtin's signature
NUMPY_NAMES = {"dim": ("axis",), "keepdim": ("keepdims",), "input": ("x", "a", "x1"), "other": ("x2",)}


def numpy_spellings(fn: Callable, args: tuple, kwargs: dict) -> list[Spelling]:
    """The sample with every parameter after `self` by keyword and each that has numpy names spelled by one of them
    (`torch.sum(x=t, axis=0, keepdims=True)`), one spelling per alias; and with such a parameter given positionally
    and by its numpy name, which eager refuses."""
    given = _given(fn, args, kwargs)
    if given is None:
        return []
    values, names, keyword_only, first = given
    aliased = [n for n in names[first:] + list(keyword_only) if n in NUMPY_NAMES]
    out = []
    for i in range(max((len(NUMPY_NAMES[n]) for n in aliased), default=0)):
        spelled = {n: NUMPY_NAMES[n][min(i, len(NUMPY_NAMES[n]) - 1)] for n in aliased}
        kw = {spelled.get(n, n): values[n] for n in names[first:] + list(keyword_only)}
        out.append(Spelling(fn, tuple(values[n] for n in names[:first]), kw, ", ".join(f"{k}=" for k in kw)))
    twice = [n for n in names[first:] if n in NUMPY_NAMES]
    if twice:
        alias = NUMPY_NAMES[twice[0]][0]
        pos = tuple(values[n] for n in names)
        out.append(Spelling(fn, pos, {**keyword_only, alias: values[twice[0]]}, f"{twice[0]} positional and {alias}=: twice",
                            valid=False))  # fmt: skip
    return out


def deprecated_spellings(fn: Callable, args: tuple, kwargs: dict) -> list[Spelling]:
    """The sample in each of torch's deprecated signatures of `fn` (torchgen's deprecated.yaml, as
    `signatures._deprecated_entries` reads it: `torch.add(x, 2, y)`, `x.addmm(2, a, 3, b, c)`), all positional and
    with the last argument by keyword. Values the sample leaves at their default (`alpha`) are 2."""
    bound = _positional_names(fn, args, kwargs)
    name = getattr(fn, "__name__", "")
    if bound is None or not signatures.has_deprecated(fn):
        return []
    ov, values = bound
    values = {("self" if k == "input" else k): v for k, v in values.items()}
    out = []
    for schema, aten_args in signatures._deprecated_entries()[name]:
        names = [p.name for p in ov.params if p.name != "out"]
        by_aten = dict(zip(aten_args, ["self" if n == "input" else n for n in names]))
        old = signatures._schema_overload(schema, signatures._is_method(fn), False)
        if old is None or len(names) != len(aten_args):
            continue
        call = [values.get(by_aten.get(p.name, ""), 2) for p in old.params]
        out.append(Spelling(fn, tuple(call), {}, f"deprecated {schema}"))
        last = old.params[-1].name
        out.append(Spelling(fn, tuple(call[:-1]), {"input" if last == "self" else last: call[-1]},
                            f"deprecated {schema}, {last}="))  # fmt: skip
    return out


def _x(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


# Sample calls for callables with a rule that OpInfo has no sample for (or none that fits their rule's forms).
EXTRA_SAMPLES: dict[Callable, Callable[[], tuple[tuple, dict]]] = {
    F.relu: lambda: ((_x(3, 4),), {"inplace": False}),
    F.softmax: lambda: ((_x(3, 4),), {"dim": -1}),
    F.log_softmax: lambda: ((_x(3, 4),), {"dim": 1}),
    F.dropout: lambda: ((_x(3, 4),), {"p": 0.5, "training": False}),
    F.layer_norm: lambda: ((_x(3, 4), (4,)), {"eps": 1e-5}),
    F.mse_loss: lambda: ((_x(3, 4), _x(3, 4)), {"reduction": "sum"}),
    F.cross_entropy: lambda: ((_x(3, 5), torch.tensor([0, 4, 2])), {"reduction": "mean"}),
    torch.where: lambda: ((_x(3, 4) > 0, _x(3, 4), _x(3, 4)), {}),
    torch.Tensor.where: lambda: ((_x(3, 4), _x(3, 4) > 0, _x(3, 4)), {}),
    torch.sum: lambda: ((_x(3, 4), 0), {"keepdim": True}),
    torch.clamp: lambda: ((_x(3, 4),), {"min": -0.5, "max": 0.5}),
    torch.Tensor.reshape: lambda: ((_x(3, 4), (4, 3)), {}),
    torch.Tensor.view: lambda: ((_x(3, 4), (12,)), {}),
    torch.maximum: lambda: ((_x(3, 4), _x(3, 4)), {}),
    torch.pow: lambda: ((_x(3, 4), 2), {}),
    torch.add: lambda: ((_x(3, 4), 1), {"alpha": 2}),
    torch.mul: lambda: ((_x(3, 4), 2.0), {}),
    # in place (on the program's own copy of its inputs)
    torch.Tensor.add_: lambda: ((_x(3, 4), _x(3, 4)), {"alpha": 2}),
    torch.Tensor.sub_: lambda: ((_x(3, 4), _x(3, 4)), {"alpha": 2}),
    torch.Tensor.mul_: lambda: ((_x(3, 4), _x(3, 4)), {}),
    torch.Tensor.div_: lambda: ((_x(3, 4), 2.0), {"rounding_mode": "floor"}),
    torch.Tensor.floor_divide_: lambda: ((_x(3, 4), 2.0), {}),
    torch.Tensor.remainder_: lambda: ((_x(3, 4), 2.0), {}),
    torch.Tensor.clamp_: lambda: ((_x(3, 4), -0.5), {"max": 0.5}),
    torch.clamp_: lambda: ((_x(3, 4), -0.5), {"max": 0.5}),
    torch.Tensor.clamp_min_: lambda: ((_x(3, 4), 0.1), {}),
    torch.clamp_min_: lambda: ((_x(3, 4), 0.1), {}),
    torch.Tensor.clamp_max_: lambda: ((_x(3, 4), 0.1), {}),
    torch.clamp_max_: lambda: ((_x(3, 4), 0.1), {}),
    torch.Tensor.clip: lambda: ((_x(3, 4), -0.5), {"max": 0.5}),
    torch.clip: lambda: ((_x(3, 4), -0.5), {"max": 0.5}),
    torch.Tensor.clip_: lambda: ((_x(3, 4), -0.5), {"max": 0.5}),
    torch.clip_: lambda: ((_x(3, 4), -0.5), {"max": 0.5}),
    torch.Tensor.fill_: lambda: ((_x(3, 4), 2.0), {}),
    torch.Tensor.zero_: lambda: ((_x(3, 4),), {}),
    torch.Tensor.masked_fill_: lambda: ((_x(3, 4), _x(3, 4) > 0, 0.0), {}),
    torch.Tensor.copy_: lambda: ((_x(3, 4), _x(3, 4)), {"non_blocking": False}),
    # integers and bools
    torch.bitwise_and: lambda: ((torch.arange(6), torch.arange(6) % 4), {}),
    torch.Tensor.bitwise_and: lambda: ((torch.arange(6), 3), {}),
    torch.Tensor.bitwise_and_: lambda: ((torch.arange(6), 3), {}),
    torch.bitwise_or: lambda: ((torch.arange(6), torch.arange(6) % 4), {}),
    torch.Tensor.bitwise_or: lambda: ((torch.arange(6), 3), {}),
    torch.Tensor.bitwise_or_: lambda: ((torch.arange(6), 3), {}),
    torch.bitwise_xor: lambda: ((torch.arange(6), torch.arange(6) % 4), {}),
    torch.Tensor.bitwise_xor: lambda: ((torch.arange(6), 3), {}),
    torch.Tensor.bitwise_xor_: lambda: ((torch.arange(6), 3), {}),
    torch.bitwise_not: lambda: ((torch.arange(6) > 2,), {}),
    torch.Tensor.bitwise_not: lambda: ((torch.arange(6),), {}),
    # others
    torch.relu: lambda: ((_x(3, 4),), {}),
    torch.Tensor.relu: lambda: ((_x(3, 4),), {}),
    torch.Tensor.type_as: lambda: ((_x(3, 4), torch.arange(3)), {}),
    torch.concat: lambda: (([_x(2, 4), _x(3, 4)],), {"dim": 0}),
    torch.nonzero: lambda: ((_x(3, 4) > 0,), {}),
    torch.Tensor.nonzero: lambda: ((_x(3, 4) > 0,), {}),
    torch.eye: lambda: ((3, 4), {"dtype": torch.float64}),
    torch.empty: lambda: (((2, 3),), {"dtype": torch.float64}),
    torch.layer_norm: lambda: ((_x(3, 4), (4,)), {"eps": 1e-3}),
    torch.group_norm: lambda: ((_x(2, 4, 3), 2), {"eps": 1e-3}),
    torch.rms_norm: lambda: ((_x(3, 4), (4,)), {"eps": 1e-3}),
    torch.embedding: lambda: ((_x(5, 4), torch.tensor([[0, 2], [4, 1]])), {"padding_idx": 0}),
    F.embedding: lambda: ((torch.tensor([[0, 2], [4, 1]]), _x(5, 4)), {"padding_idx": 0}),
    F.scaled_dot_product_attention: lambda: ((_x(2, 3, 4), _x(2, 3, 4), _x(2, 3, 4)), {"is_causal": True}),
    torch.dropout: lambda: ((_x(3, 4), 0.5, False), {}),
}


def opinfo_samples() -> dict[Callable, list[tuple[tuple, dict]]]:
    """OpInfo's float32 CPU samples (the first 2 per op), by the function and method variants of each op."""
    from torch.testing._internal.common_methods_invocations import op_db

    found: dict[Callable, list] = {}
    for op in op_db:
        if torch.float32 not in op.supported_dtypes("cpu"):
            continue
        variants = [v for v in (op.op, op.method_variant) if v is not None and v in TORCH_TABLE]
        if not variants:
            continue
        torch.manual_seed(0)
        samples = list(itertools.islice(op.sample_inputs("cpu", torch.float32, requires_grad=False), 2))
        for v in variants:
            first = 1 if signatures._is_method(v) else 0
            calls = [((s.input, *s.args), dict(s.kwargs)) for s in samples if first == 0 or torch.is_tensor(s.input)]
            found.setdefault(v, []).extend(calls)
    return found


def samples(fn: Callable, from_opinfo: dict) -> list[tuple[tuple, dict]]:
    extra = EXTRA_SAMPLES.get(fn)
    return ([extra()] if extra else []) + list(from_opinfo.get(fn, []))
