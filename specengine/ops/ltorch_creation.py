"""Creation ops with symbolic sizes: arange, zeros/ones/full/empty and their *_like and new_* forms, eye."""

from __future__ import annotations

__all__: list[str] = []
