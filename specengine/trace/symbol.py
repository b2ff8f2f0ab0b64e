"""`specengine.trace.symbol.Symbol`, the README's executor example before the IR moved to `specengine.ir.symbol`."""

from specengine.ir.symbol import BoundSymbol, Symbol

__all__ = ["BoundSymbol", "Symbol"]
