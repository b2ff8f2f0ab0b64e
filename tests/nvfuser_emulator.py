"""A CPU stand-in for `nvfuser_direct` (tests only): a FusionDefinition that records the calls a plan
replays and `execute`s them with torch, following the semantics of the Fuser 0.2.36 bindings that the
lowering relies on: define_tensor's shape (-1 symbolic, 1 broadcast, else static) and contiguity checked
against each input as nvFuser validates them, broadcast_in_dim's -1 (keep the input extent), slice's
normalization, sum/prod's dtype, max/min without one, ops.size. Install with `install(monkeypatch)`.
"""

from __future__ import annotations

import math
import types
from typing import Any

import torch

_DTYPES = {"Float": torch.float32, "Double": torch.float64, "Half": torch.float16, "BFloat16": torch.bfloat16,
           "Int": torch.int64, "Int32": torch.int32, "Bool": torch.bool, "Null": None}  # fmt: skip
_TORCH = {"truediv": torch.true_divide, "logical_and": torch.logical_and, "logical_or": torch.logical_or}


class DataType:
    pass


for _name in _DTYPES:
    setattr(DataType, _name, ("DataType", _name))


class Val:
    def __init__(self, index: int):
        self.index = index


class FusionDefinition:
    def __init__(self):
        self.program: list[tuple] = []  # (fn, args, kwargs)
        self.inputs: list[tuple] = []  # (value index, define kwargs)
        self.outputs: list[int] = []
        outer = self

        class Ops:
            def __getattr__(self, name: str) -> Any:
                return lambda *a, **k: outer._add("ops." + name, a, k)

        self.ops = Ops()

    def __enter__(self) -> FusionDefinition:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def _add(self, fn: str, args: tuple, kwargs: dict) -> Val:
        self.program.append((fn, args, kwargs))
        return Val(len(self.program) - 1)

    def define_tensor(self, **kwargs: Any) -> Val:
        v = self._add("define_tensor", (), kwargs)
        self.inputs.append((v.index, kwargs))
        return v

    def define_scalar(self, **kwargs: Any) -> Val:
        v = self._add("define_scalar", (), kwargs)
        self.inputs.append((v.index, kwargs))
        return v

    def add_output(self, v: Val) -> None:
        self.outputs.append(v.index)

    def execute(self, inputs: list) -> list[torch.Tensor]:
        assert len(inputs) == len(self.inputs), "execute got another number of inputs than were defined"
        env: dict[int, Any] = {}
        for (index, spec), value in zip(self.inputs, inputs):
            _check_input(spec, value)
            env[index] = value
        for index, (fn, args, kwargs) in enumerate(self.program):
            if index not in env:
                env[index] = _run(fn, _resolve(args, env), _resolve(kwargs, env))
        return [env[i].clone() if env[i] is _input_of(env, i, self) else env[i] for i in self.outputs]


def _input_of(env: dict, i: int, fd: FusionDefinition) -> Any:
    return env[i] if i in {index for index, _ in fd.inputs} else None


def _resolve(x: Any, env: dict) -> Any:
    if isinstance(x, Val):
        return env[x.index]
    if isinstance(x, tuple) and len(x) == 2 and x[0] == "DataType":
        return _DTYPES[x[1]]
    if isinstance(x, dict):
        return {k: _resolve(v, env) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_resolve(v, env) for v in x)
    return x


def _check_input(spec: dict, value: Any) -> None:
    if "shape" not in spec:  # a scalar
        kind = spec["dtype"][1]
        want = {"Int": int, "Double": float, "Bool": bool}[kind]
        assert type(value) is want or (want is float and type(value) is int), f"scalar {value!r} is not {kind}"
        return
    assert isinstance(value, torch.Tensor) and value.dtype is _DTYPES[spec["dtype"][1]], (spec, value.dtype)
    assert value.ndim == len(spec["shape"]) == len(spec["contiguity"])
    expected = 1
    for size, stride, want, flag in reversed(list(zip(value.shape, value.stride(), spec["shape"], spec["contiguity"]))):
        if want != -1:
            assert size == want, f"a {'broadcast' if want == 1 else 'static'} dim of {want} got size {size}"
        if want == 1:
            assert flag is None, "a broadcast dim has contiguity None"
            continue
        assert flag is not None
        if size > 1:  # as nvFuser's validateAllocationSizesAndStrides
            assert not flag or stride == expected, f"contiguity True but stride {stride} != {expected}"
            expected = stride * size


def _run(fn: str, args: tuple, kwargs: dict) -> Any:
    name = fn[4:]
    if name in _SPECIAL:
        return _SPECIAL[name](*args, **kwargs)
    if not any(isinstance(a, torch.Tensor) for a in args):  # scalar arithmetic (sizes)
        return _SCALAR[name](*args)
    torch_fn = _TORCH.get(name) or getattr(torch, name)
    # Python numbers as 0-d tensors: the same type promotion (they never promote a tensor's dtype category)
    return torch_fn(*(a if isinstance(a, torch.Tensor) else torch.tensor(a) for a in args))


_SCALAR = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "sub": lambda a, b: a - b,
           "minimum": min, "maximum": max}  # fmt: skip


def _broadcast_in_dim(arg: torch.Tensor, shape: list, broadcast_dims: list) -> torch.Tensor:
    sizes = [arg.shape[broadcast_dims.index(j)] if s == -1 else s for j, s in enumerate(shape)]
    view = [1] * len(shape)
    for i, d in enumerate(broadcast_dims):
        view[d] = arg.shape[i]
    return arg.reshape(view).expand(sizes)


def _slice(arg: torch.Tensor, start_indices: list, end_indices: list) -> torch.Tensor:
    out = arg
    for d, (s, e) in enumerate(zip(start_indices, end_indices)):
        n = arg.shape[d]
        s = max(0, s + n if s < 0 else s)
        e = max(s, min(n, e + n if e < 0 else e))
        out = out.narrow(d, s, e - s)
    return out


def _reduce(fn: Any) -> Any:
    def run(arg: torch.Tensor, dims: list, keepdim: bool, dtype: Any = None) -> torch.Tensor:
        assert dims, "No reduction axis specified"
        if fn in ("sum", "prod"):
            dtype = dtype or (arg.dtype if arg.dtype.is_floating_point else torch.int64)
            x = arg.to(dtype)
            if fn == "sum":
                return x.sum(dims, keepdim=keepdim, dtype=dtype)
            for d in sorted(dims, reverse=True):
                x = x.prod(d, keepdim=keepdim, dtype=dtype)
            return x
        assert dtype is None, "max/min take no dtype"
        empty = any(arg.shape[d] == 0 for d in dims)
        if empty:
            shape = [n for i, n in enumerate(arg.shape) if i not in dims]
            return torch.full(shape, -math.inf if fn == "max" else math.inf, dtype=arg.dtype)
        return (torch.amax if fn == "max" else torch.amin)(arg, dims, keepdim=keepdim)

    return run


_SPECIAL = {
    "cast": lambda arg, dtype: arg.to(dtype),
    "size": lambda arg, dim: arg.shape[dim],
    "set": lambda x: x.clone(),
    "broadcast_in_dim": _broadcast_in_dim,
    "reshape": lambda arg, new_shape: arg.reshape(new_shape),
    "permute": lambda arg, dims: arg.permute(dims),
    "slice": _slice,
    "cat": lambda tensors, dim: torch.cat(tensors, dim),
    "iota": lambda length, start, step, dtype: torch.arange(length, dtype=dtype) * step + start,
    "full": lambda shape, fill_value, dtype: torch.full(shape, fill_value, dtype=dtype),
    "sum": _reduce("sum"), "prod": _reduce("prod"), "max": _reduce("max"), "min": _reduce("min"),
}  # fmt: skip


def install(monkeypatch: Any) -> None:
    """Make `import nvfuser_direct` give this module (its DataType and FusionDefinition)."""
    module = types.ModuleType("nvfuser_direct")
    module.DataType = DataType
    module.FusionDefinition = FusionDefinition
    monkeypatch.setitem(__import__("sys").modules, "nvfuser_direct", module)
