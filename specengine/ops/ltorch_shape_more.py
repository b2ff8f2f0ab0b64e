"""More shape ops: contiguous, repeat, split/chunk/unbind, cat/stack, narrow, gather family, tril/triu, roll, flip."""

from __future__ import annotations

__all__: list[str] = []
