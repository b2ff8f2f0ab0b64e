"""Neural-network ops: embedding, norms, dropout, scaled_dot_product_attention, losses."""

from __future__ import annotations

__all__: list[str] = []
