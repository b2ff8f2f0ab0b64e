"""The nvFuser executor: fuses claimed prims into regions, each run as one nvFuser FusionDefinition.

Claiming, region forming and needs-constant requests are pure Python (CPU-testable); lowering to
`nvfuser_direct` is imported lazily. With the "reference" backend each region runs its prims with torch
(used on machines without CUDA or nvFuser, and to check the regions against eager).
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any, Callable

import torch

from specengine.executors.nvfuser.claims import broadcast_requests, is_fusible, tensor_inputs
from specengine.executors.nvfuser.lowering import LOWERABLE
from specengine.executors.nvfuser.regions import Region, form_regions, region_symbol
from specengine.executors.protocol import Claim
from specengine.trace.symbol import BoundSymbol, Symbol
from specengine.trace.trace import Trace

__all__ = ["NvFuserExecutor", "nvfuser_available"]


@functools.cache
def nvfuser_available() -> bool:
    """Whether CUDA is available and `nvfuser_direct` is importable."""
    return torch.cuda.is_available() and importlib.util.find_spec("nvfuser_direct") is not None


class NvFuserExecutor:
    """Claims fusible prims (on CUDA tensors, unless `backend="reference"`) and fuses them into regions.

    Args:
        backend: "nvfuser" (lower regions to nvfuser_direct), "reference" (run regions' prims with torch;
            any device), or "auto" (nvfuser when available, else reference).
    """

    name = "nvfuser"

    def __init__(self, backend: str = "auto"):
        if backend not in ("auto", "nvfuser", "reference"):
            raise ValueError(f"unknown nvFuser backend {backend!r}")
        self.backend = ("nvfuser" if nvfuser_available() else "reference") if backend == "auto" else backend
        self._impls: dict[Symbol, Symbol] = {}

    def claim(self, bsym: BoundSymbol) -> Claim | None:
        if not is_fusible(bsym):
            return None
        if self.backend == "nvfuser" and (
            bsym.sym.name not in LOWERABLE
            or bsym.kwargs_dict.get("rounding_mode") is not None  # the lowering has true division only
            or not all(t.device.type == "cuda" for t in tensor_inputs(bsym))
        ):
            return None
        impl = self._impls.get(bsym.sym)
        if impl is None:
            sym = bsym.sym
            impl = self._impls[sym] = Symbol(sym.name, "nvfuser", impl=sym.impl, is_prim=True, tags=sym.tags)
        return Claim(impl, needs_constant=broadcast_requests(bsym), needs_contiguous=tuple(tensor_inputs(bsym)))

    def fusion_pass(self, trace: Trace) -> Trace:
        """Group claimed prims into regions; each region becomes one call."""
        return form_regions(trace, _is_claimed, self._region_call)

    def _region_call(self, region: Region) -> BoundSymbol:
        impl = self._build(region)
        outputs = tuple(region.outputs)
        return BoundSymbol(region_symbol(region, impl), tuple(region.inputs), (), outputs, tuple(region.bsyms),
                           region.bsyms[0].source)  # fmt: skip

    def _build(self, region: Region) -> Callable:
        if self.backend == "nvfuser":
            from specengine.executors.nvfuser.lowering import lower

            return lower(region)
        return reference_callable(region)


def _is_claimed(bsym: BoundSymbol) -> bool:
    return bsym.sym.module == "nvfuser"


def reference_callable(region: Region) -> Callable[..., Any]:
    """The region as a Python function running its prims with torch (its source is inspectable)."""
    from specengine.ops import prims

    bsyms = tuple(b.with_(sym=prims.PRIMS[b.sym.name]) for b in region.bsyms)
    trace = Trace(f"fusion{region.index}", tuple(region.inputs), bsyms, tuple(region.outputs), "nvFuser region")
    return trace.python_callable()
