"""Backend flags read as attributes: `torch.backends.cudnn.deterministic`, `torch.backends.cuda.matmul.allow_tf32`...

They are not functions that `torch_settings` can wrap, so while any thread traces:

- reads go through wrappers of `torch.backends.ContextProp.__get__` (every `PropModule` flag: cudnn, mkldnn,
  miopen, `torch.backends.fp32_precision`), of `cuBLASModule.__getattr__` (`torch.backends.cuda.matmul.*`) and of
  the scaled-dot-product backend getters (`torch.backends.cuda.flash_sdp_enabled()`, ...): each read is noted on
  the tracing state as `("backends.cudnn.deterministic", ())`, and the prologue calls the flag's own C getter
  (`real_getter`), only where the trace read it;
- torch's C getters called directly (`torch._C._get_cudnn_enabled()`, `_get_deterministic_algorithms()`, ...) are
  wrapped in `torch._C` and noted as the flag or torch getter they are the getter of, or under their own name;
- writes (`torch.backends.cudnn.benchmark = True`, `with torch.backends.cudnn.flags(...)`, the matmul flags, the
  sdp setters) are refused, as `torch_settings` refuses setters: the change would happen only while tracing. The
  C setters themselves are wrapped too (`torch._C._set_cudnn_benchmark(True)` called directly), and every flag
  is compared before and after tracing.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import torch
import torch.backends
import torch.backends.cuda
import torch.backends.cudnn
import torch.backends.mkldnn

from specengine.capture.setting_reads import _SPECENGINE, _quiet, note_read, quiet
from specengine.ir import context
from specengine.ir.proxies import unsupported

_MATMUL = ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_fp16_reduced_precision_reduction_split_k",
           "allow_bf16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction_split_k",
           "allow_fp16_accumulation", "fp32_precision")  # fmt: skip
_C_GETTERS = {
    "allow_tf32": torch._C._get_cublas_allow_tf32,
    "allow_fp16_accumulation": getattr(torch._C, "_get_cublas_allow_fp16_accumulation", None),
}
_SDP = ("flash_sdp_enabled", "mem_efficient_sdp_enabled", "math_sdp_enabled", "cudnn_sdp_enabled")
_SETTER_PREFIXES = (
    "_set_cudnn_",
    "_set_cublas_",
    "_set_mkldnn_",
    "_set_onednn_",
    "_set_miopen_",
    "_set_sdp_use_",
    "_set_fp32_precision_setter",
    "_set_cpu_allow_fp16_reduced_precision_reduction",
    "_set_deterministic_",
    "_set_float32_matmul_precision",
    "_set_default_dtype",
    "_set_default_tensor_type",
    "_set_nnpack_enabled",
    "_set_math_sdp_",
    "_set_sdp_priority_order",
    "_set_blas_preferred_backend",
    "_set_linalg_preferred_backend",
    "_set_rocm_fa_preferred_backend",
    "_set_qengine",
)
# The C getters of these settings, called directly (`torch._C._get_cudnn_enabled()`): each read is noted under
# the flag or torch getter it is the getter of where there is one (`backends.cudnn.enabled`), else as
# `_C._get_nnpack_enabled`; the prologue calls the C getter.
_GETTER_PREFIXES = ("_get_cudnn_", "_get_cublas_", "_get_mkldnn_", "_get_onednn_", "_get_miopen_", "_get_nnpack_",
                    "_get_deterministic_", "_get_float32_matmul_precision", "_get_fp32_precision_getter",
                    "_get_cpu_allow_fp16_reduced_precision_reduction", "_get_flash_sdp_enabled",
                    "_get_mem_efficient_sdp_enabled", "_get_math_sdp_", "_get_cudnn_sdp_enabled",
                    "_get_fa3_sdp_enabled", "_get_overrideable_sdp_enabled", "_get_sdp_priority_order",
                    "_get_blas_preferred_backend", "_get_linalg_preferred_backend", "_get_rocm_fa_preferred_backend",
                    "_get_qengine")  # fmt: skip
_NOT_FLAGS = ("_get_cudnn_batch_norm_reserve_space_size",)  # functions of their arguments
_TORCH_GETTERS = {"_get_deterministic_algorithms": "are_deterministic_algorithms_enabled",
                  "_get_deterministic_algorithms_warn_only": "is_deterministic_algorithms_warn_only_enabled",
                  "_get_float32_matmul_precision": "get_float32_matmul_precision"}  # fmt: skip
_prop_get, _prop_set = torch.backends.ContextProp.__get__, torch.backends.ContextProp.__set__
_cublas = type(torch.backends.cuda.matmul)
_cublas_get, _cublas_set = _cublas.__getattr__, _cublas.__setattr__
_saved_c: dict[str, Callable] = {}
_saved_sdp: dict[str, Callable] = {}
_REAL_C = {n: getattr(torch._C, n) for n in dir(torch._C) if n.startswith(_GETTER_PREFIXES) and n not in _NOT_FLAGS}


@functools.lru_cache(maxsize=1)
def _props() -> dict[int, tuple[str, Any]]:
    """id(ContextProp) -> (name, the prop), for every PropModule flag loaded."""
    out = {}
    for mod in [m for m in list(sys.modules.values()) if isinstance(m, torch.backends.PropModule)] + [torch.backends]:
        for attr, prop in vars(type(mod)).items():
            if isinstance(prop, torch.backends.ContextProp):
                out[id(prop)] = (f"{mod.__name__.removeprefix('torch.')}.{attr}", prop)
    return out


def flags() -> dict[str, Callable[[], Any]]:
    """Every flag: its name (as noted in reads) -> its getter (a C function, or a partial of one)."""
    out = {name: prop.getter for name, prop in _props().values()}
    out.update({f"backends.cuda.matmul.{a}": _C_GETTERS.get(a) or functools.partial(_cublas_get, torch.backends.cuda.matmul, a)
                for a in _MATMUL})  # fmt: skip
    out.update({f"backends.cuda.{n}": getattr(torch.backends.cuda, n) for n in _SDP if hasattr(torch.backends.cuda, n)})
    named = {id(g) for g in out.values()}
    out.update({f"_C.{n}": g for n, g in _REAL_C.items() if id(g) not in named and n not in _TORCH_GETTERS})
    return out


@functools.lru_cache(maxsize=1)
def _c_names() -> dict[str, str]:
    """C getter name -> the name its reads are noted under (a flag whose getter it is, a torch getter, or its own)."""
    by_id = {id(g): name for name, g in flags().items()}
    return {n: _TORCH_GETTERS.get(n) or by_id.get(id(g), f"_C.{n}") for n, g in _REAL_C.items()}


_FLAGS: dict[str, Callable] = {}


def real_getter(name: str) -> Callable | None:
    if not _FLAGS:
        _FLAGS.update(flags())
    return _FLAGS.get(name)


def is_attribute(name: str) -> bool:
    return real_getter(name) is not None and not name.endswith(_SDP) and not name.startswith("_C.")


def held_getter(value: Any) -> str | None:
    """The name reads are noted under, where `value` is one of the C getters (a function holds it itself)."""
    return next((_c_names()[n] for n, g in _REAL_C.items() if g is value), None)


def snapshot() -> tuple:
    """Every flag's value (compared before and after tracing)."""
    if not _FLAGS:
        _FLAGS.update(flags())
    return tuple((name, _value(getter)) for name, getter in _FLAGS.items())


def _value(getter: Callable) -> Any:
    try:
        return getter()
    except Exception:  # noqa: BLE001 - a flag this build cannot read (or a getter of arguments)
        return None


def _note(name: str, value: Any, args: tuple = ()) -> None:
    state = context.current()
    if state is None or _quiet.get() or sys._getframe(2).f_code.co_filename.startswith(_SPECENGINE):
        return
    note_read(state, name, args, value)


def _refuse(what: str) -> None:
    if context.current() is not None:
        raise unsupported(f"setting {what} inside a compiled function", "the change would happen only while "
                          "tracing, never on cached calls; set it outside the compiled function")  # fmt: skip


def _traced_prop_get(self: Any, obj: Any, objtype: Any = None) -> Any:
    value = _prop_get(self, obj, objtype)
    seen = _props().get(id(self))
    if seen is not None:
        _note(seen[0], value)
    return value


def _traced_prop_set(self: Any, obj: Any, value: Any) -> None:
    seen = _props().get(id(self))
    _refuse(f"torch.{seen[0]}" if seen else "a torch.backends flag")
    return _prop_set(self, obj, value)


def _traced_cublas_get(self: Any, name: str) -> Any:
    with quiet():  # (the C getter it calls is this very read)
        value = _cublas_get(self, name)
    _note(f"backends.cuda.matmul.{name}", value)
    return value


def _traced_cublas_set(self: Any, name: str, value: Any) -> None:
    _refuse(f"torch.backends.cuda.matmul.{name}")
    return _cublas_set(self, name, value)


def _sdp_getter(name: str, real: Callable) -> Callable:
    def getter() -> Any:
        with quiet():
            value = real()
        _note(f"backends.cuda.{name}", value)
        return value

    getter.__name__ = name
    getter.__wrapped__ = real
    return getter


def _c_getter(name: str, real: Callable) -> Callable:
    def getter(*args: Any) -> Any:
        value = real(*args)
        if context.current() is not None:
            _note(_c_names()[name], value, args)
        return value

    getter.__name__ = name
    getter.__wrapped__ = real
    return getter


def _c_setter(name: str, real: Callable) -> Callable:
    def setter(*args: Any, **kwargs: Any) -> Any:
        _refuse(f"torch._C.{name}(...)")
        return real(*args, **kwargs)

    setter.__name__ = name
    setter.__wrapped__ = real
    return setter


def install() -> None:
    """Wrap the readers and writers (called with `torch_settings.install`, when the first trace starts)."""
    torch.backends.ContextProp.__get__, torch.backends.ContextProp.__set__ = _traced_prop_get, _traced_prop_set
    _cublas.__getattr__, _cublas.__setattr__ = _traced_cublas_get, _traced_cublas_set
    for name in dir(torch._C):
        if name.startswith(_SETTER_PREFIXES) and name not in _saved_c:
            _saved_c[name] = getattr(torch._C, name)
            setattr(torch._C, name, _c_setter(name, _saved_c[name]))
        elif name in _REAL_C and name not in _saved_c and getattr(torch._C, name) is _REAL_C[name]:
            _saved_c[name] = _REAL_C[name]
            setattr(torch._C, name, _c_getter(name, _REAL_C[name]))
    for name in _SDP:
        real = getattr(torch.backends.cuda, name, None)
        if real is not None and name not in _saved_sdp:
            _saved_sdp[name] = real
            setattr(torch.backends.cuda, name, _sdp_getter(name, real))


def uninstall() -> None:
    torch.backends.ContextProp.__get__, torch.backends.ContextProp.__set__ = _prop_get, _prop_set
    _cublas.__getattr__, _cublas.__setattr__ = _cublas_get, _cublas_set
    for saved, owner in ((_saved_c, torch._C), (_saved_sdp, torch.backends.cuda)):
        for name, real in saved.items():
            if getattr(getattr(owner, name), "__wrapped__", None) is real:
                setattr(owner, name, real)
        saved.clear()
