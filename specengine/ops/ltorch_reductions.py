"""More reductions: prod, var/std, amin, max/min with indices, argmax/argmin, all/any, softmax family, cumsum."""

from __future__ import annotations

__all__: list[str] = []
