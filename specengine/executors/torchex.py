"""The torch executor: runs every op with eager PyTorch and needs no constants.

Torch-level ops run as the torch callable they replace (`torch.add`, `torch.Tensor.view`); primitives
run through their registered torch implementation; the few calls torch has no function for run as
`tex.<name>` (`ops/runtime.py`).
"""

from __future__ import annotations

from specengine.executors.protocol import Claim
from specengine.ir.symbol import BoundSymbol, Symbol
from specengine.ops.registry import torch_print_name


class TorchExecutor:
    """Claims every op that has a torch implementation."""

    name = "torch"

    def __init__(self) -> None:
        self._impls: dict[Symbol, Symbol] = {}

    def claim(self, bsym: BoundSymbol) -> Claim | None:
        if bsym.sym.impl is None:
            return None
        impl = self._impls.get(bsym.sym)
        if impl is None:
            impl = self._impls[bsym.sym] = _impl_symbol(bsym.sym)
        return Claim(impl)


def _impl_symbol(sym: Symbol) -> Symbol:
    """A symbol that prints as the callable it runs, e.g. `torch.add`; prims without one print as prims."""
    try:
        module, name = torch_print_name(sym.impl)
    except ValueError:
        return sym
    return Symbol(name, module, impl=sym.impl)


torch_executor = TorchExecutor()
