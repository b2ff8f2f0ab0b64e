"""The nvFuser executor: fuses claimed prims into regions, each run as one nvFuser FusionDefinition.

Claiming, region forming, needs-constant requests and each region's fusion plan (plan.py) are pure Python
(CPU-testable); only replaying a plan on `nvfuser_direct` needs CUDA (lowering.py, imported lazily). The
"reference" backend claims exactly the same prims (on any device) and runs each region's prims with torch:
it is used on machines without CUDA or nvFuser, and to check regions and plans against eager.
"""

from __future__ import annotations

import functools
import importlib.util
from typing import Any, Callable

import torch

from specengine.constraints import unbacked
from specengine.executors.nvfuser.claims import broadcast_requests, is_fusible, lowerable, tensor_inputs
from specengine.executors.nvfuser.lowering import check_sizes, lower, size_checks, size_env
from specengine.executors.nvfuser.plan import build_plan
from specengine.executors.nvfuser.regions import Region, form_regions, region_symbol
from specengine.executors.protocol import Claim
from specengine.ir.symbol import BoundSymbol, Symbol
from specengine.ir.trace import Trace
from specengine.ops import prims

__all__ = ["NvFuserExecutor", "nvfuser_available"]

DECLINED_DECOMPOSITIONS = frozenset({"view"})


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
        if (bsym.may_raise and not _checked_at_run_time(bsym)) or not is_fusible(bsym) or not lowerable(bsym):
            return None
        if self.backend == "nvfuser" and not all(t.device.type == "cuda" for t in _tensors(bsym)):
            return None
        impl = self._impls.get(bsym.sym)
        if impl is None:
            sym = bsym.sym
            impl = self._impls[sym] = Symbol(sym.name, "nvfuser", impl=sym.impl, is_prim=True, tags=sym.tags)
        requests = broadcast_requests(bsym)
        if any(unbacked.may_mention(r) for r in requests):
            return None  # whether a data-dependent size is 1 cannot be a compile-time constant: torch broadcasts it
        return Claim(impl, needs_constant=requests, needs_contiguous=tuple(tensor_inputs(bsym)))

    def declines_decomposition(self, bsym: BoundSymbol) -> bool:
        """Ops that must raise eager's error at run time run as torch's op: `Tensor.view` where strides do not
        allow the view (its decomposition, a reshape, would not), and ops checked only on the example sizes
        (`may_raise`) unless their decomposition is elementwise ops and broadcasts, whose validity the region
        checks on each call (lowering.broadcast_checks)."""
        if bsym.sym.name in DECLINED_DECOMPOSITIONS:
            return True
        return bsym.may_raise and not all(_checked_at_run_time(b) for b in bsym.subsymbols)

    def fusion_pass(self, trace: Trace, contiguous: dict[str, bool] | None = None) -> Trace:
        """Group claimed prims into regions; each region becomes one call.

        `contiguous`: the contiguity the prologue checks, per input tensor of the computation (by name)."""
        return form_regions(trace, _is_claimed, lambda region: self._region_call(region, contiguous or {}))

    def _region_call(self, region: Region, contiguous: dict[str, bool]) -> BoundSymbol:
        impl = self._build(region, contiguous)
        outputs = tuple(region.outputs)
        return BoundSymbol(region_symbol(region, impl), tuple(region.inputs), (), outputs, tuple(region.bsyms),
                           region.bsyms[0].source)  # fmt: skip

    def _build(self, region: Region, contiguous: dict[str, bool]) -> Callable:
        if self.backend == "nvfuser":
            return lower(region, contiguous)
        return reference_callable(region, contiguous)


def _is_claimed(bsym: BoundSymbol) -> bool:
    return bsym.sym.module == "nvfuser"


def _checked_at_run_time(bsym: BoundSymbol) -> bool:
    """Elementwise prims, broadcasts and reshapes: where they are invalid for an input (incompatible or
    negative sizes, another numel), the region raises eager's error before running the fusion."""
    return bsym.sym.name in ("broadcast_in_dim", "reshape") or "elementwise" in bsym.sym.tags


def _tensors(bsym: BoundSymbol) -> list:
    return tensor_inputs(bsym) + [o for o in bsym.flat_outs() if hasattr(o, "device")]


def reference_callable(region: Region, contiguous: dict[str, bool]) -> Callable[..., Any]:
    """The region as a Python function running its prims with torch (its source is inspectable). Its
    `plan` is the fusion plan nvFuser would replay (every input the prologue does not check taken as
    contiguous); `plan_for(contiguous)` builds it for other contiguities."""
    bsyms = tuple(b.with_(sym=prims.PRIMS[b.sym.name]) for b in region.bsyms)
    trace = Trace(f"fusion{region.index}", tuple(region.inputs), bsyms, tuple(region.outputs), "nvFuser region")
    prims_fn = trace.python_callable()
    checks = size_checks(region)

    def fn(*args: Any) -> Any:
        if checks:  # what the nvFuser backend checks (torch's expand takes a size of -1 as "keep")
            check_sizes(checks, size_env(region, args))
        return prims_fn(*args)

    unchecked = {x.name: True for x in region.inputs if hasattr(x, "dims") and x.name not in contiguous}
    fn.plan = build_plan(region, {**unchecked, **contiguous})
    fn.plan_for = lambda known: build_plan(region, known)
    fn.region = region
    fn.prims = prims_fn
    return fn
