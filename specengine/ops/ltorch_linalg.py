"""Linear algebra: mm, bmm, linear, baddbmm, einsum."""

from __future__ import annotations

__all__: list[str] = []
