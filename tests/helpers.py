"""Shared test helpers: run a compiled function next to eager and compare."""

from __future__ import annotations

from typing import Any, Callable

import torch

import specengine


def make(spec: Any) -> Any:
    """A tuple of ints is a random float tensor of that shape; anything else passes through."""
    if isinstance(spec, tuple) and all(type(s) is int for s in spec):
        return torch.randn(*spec)
    return spec


def run_both(fn: Callable, cfn: Callable, args: list) -> Any:
    """Call eager and compiled; outputs must match, or both must raise the same exception type."""
    try:
        expected = fn(*args)
    except Exception as e:  # noqa: BLE001 - eager's exception is the expectation
        try:
            cfn(*args)
        except Exception as got:  # noqa: BLE001
            assert type(got) is type(e), f"eager raised {type(e).__name__}: {e}; compiled raised {got!r}"
            return e
        raise AssertionError(f"eager raised {e!r} but the compiled function returned") from e
    got = cfn(*args)
    torch.testing.assert_close(got, expected, equal_nan=True)
    return got


def sweep(fn: Callable, calls: list[list], dynamic: Any = True, **kw: Any):
    """Compile `fn`, run every call against eager; returns the compiled function."""
    cfn = specengine.compile(fn, dynamic=dynamic, **kw)
    for call in calls:
        run_both(fn, cfn, [make(a) for a in call])
    return cfn


def counts(cfn) -> tuple[int, int]:
    return specengine.cache_misses(cfn), specengine.cache_hits(cfn)


def guards(cfn) -> list[str]:
    return [str(g) for g in specengine.last_guards(cfn)]
