"""More elementwise ops: unary math, binary integer/logical ops, clamp, masked_fill, lerp, casts."""

from __future__ import annotations

__all__: list[str] = []
