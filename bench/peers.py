"""The engines that bench/run_all.py compares: eager, specengine, torch.compile and Lightning Thunder (optional).

Each engine compiles a function (or an nn.Module) and reports its compile count. Thunder is imported lazily;
when it does not import, its engines are `unavailable` ("not installed") and every table prints that instead.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

import specengine

NOT_INSTALLED = "not installed"
RECOMPILE_LIMIT = 1000  # every engine may compile this often, so that counts are real, not capped


@dataclass
class Engine:
    """One column of the tables.

    Attributes:
        key: a short identifier (JSON keys).
        label: the column header.
        build: compiles a function or module; returns the callable to time and count.
        count: compiles (cache misses) of a callable that `build` returned, or None if unknown.
        unavailable: why the engine cannot run here (e.g. "not installed"), or None.
        settings: a context manager for a scenario's peer settings (torch.compile: `torch._dynamo.config`).
        breaks: graph breaks so far in this process (torch.compile), or None.
    """

    key: str
    label: str
    build: Callable[[Callable], Callable] = lambda fn: fn
    count: Callable[[Callable], int | None] = lambda cfn: 0
    unavailable: str | None = None
    settings: Callable[[dict], Any] = lambda config: contextlib.nullcontext()
    breaks: Callable[[], int] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def eager() -> Engine:
    return Engine("eager", "eager")


def spec(dynamic: bool | None) -> Engine:
    def build(fn: Callable) -> Callable:
        return specengine.compile(fn, dynamic=dynamic, recompile_limit=RECOMPILE_LIMIT)

    key = {True: "spec_dyn", None: "spec_auto", False: "spec_static"}[dynamic]
    return Engine(key, f"specengine(dynamic={dynamic})", build, specengine.cache_misses)


def raise_dynamo_limits(limit: int = RECOMPILE_LIMIT) -> None:
    """Raise torch._dynamo's recompile limits (the names changed across releases), so counts are not capped."""
    import torch._dynamo.config as cfg

    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, max(getattr(cfg, name), limit))


def torch_compile(dynamic: bool | None, counting: bool) -> Engine:
    """torch.compile with its default backend (inductor), or with a counting backend that runs the FX graph as is.

    With `counting`, the count is the number of graphs dynamo handed to the backend (one per compile, plus one
    per graph break). Without it, the count is dynamo's `unique_graphs` counter since the build.
    Every build calls `torch._dynamo.reset()`: dynamo caches on the code object, shared between builds.
    """
    import torch._dynamo
    import torch._dynamo.utils

    raise_dynamo_limits()
    counters: dict[int, tuple[Callable, list[int]]] = {}

    def build(fn: Callable) -> Callable:
        torch._dynamo.reset()
        counter = [0]
        if counting:

            def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
                counter[0] += 1
                return gm.forward

            cfn = torch.compile(fn, backend=backend, dynamic=dynamic)
        else:
            counter[0] = -torch._dynamo.utils.counters["stats"]["unique_graphs"]
            cfn = torch.compile(fn, dynamic=dynamic)
        counters[id(cfn)] = (cfn, counter)
        return cfn

    def count(cfn: Callable) -> int:
        counter = counters[id(cfn)][1]
        return counter[0] if counting else counter[0] + torch._dynamo.utils.counters["stats"]["unique_graphs"]

    def breaks() -> int:
        return sum(torch._dynamo.utils.counters["graph_break"].values())

    key = {True: "tc_dyn", None: "tc_auto", False: "tc_static"}[dynamic]
    return Engine(key, f"torch.compile(dynamic={dynamic})", build, count,
                  settings=lambda config: torch._dynamo.config.patch(**config), breaks=breaks)  # fmt: skip


def thunder_status() -> str | None:
    """None when `import thunder` works, else why not ("not installed", or the import error)."""
    if importlib.util.find_spec("thunder") is None:
        return NOT_INSTALLED
    try:
        importlib.import_module("thunder")
    except Exception as e:  # noqa: BLE001 - a peer that does not import is reported, never fatal
        return f"{NOT_INSTALLED} (import failed: {type(e).__name__}: {str(e)[:80]})"
    return None


def thunder(cache: str) -> Engine:
    """Lightning Thunder's `thunder.jit(fn, cache=...)`; "symbolic values" or "constant values"."""
    key = {"symbolic values": "thunder_sym", "constant values": "thunder_const"}[cache]
    label = f'thunder(cache="{cache}")'
    status = thunder_status()
    if status is not None:  # the full reason goes in the table's header line (thunder_version)
        return Engine(key, label, unavailable=NOT_INSTALLED if status == NOT_INSTALLED else "import failed")
    import thunder as th

    def count(cfn: Callable) -> int | None:
        try:
            return th.cache_misses(cfn)
        except Exception:  # noqa: BLE001 - an older thunder without the counter
            return None

    return Engine(key, label, lambda fn: th.jit(fn, cache=cache), count)


def thunder_version() -> str:
    status = thunder_status()
    if status is not None:
        return status
    return getattr(importlib.import_module("thunder"), "__version__", "unknown version")


def error_text(e: BaseException, limit: int = 160) -> str:
    """A one-line description of an exception for a table cell or a footnote."""
    if isinstance(e, specengine.UnsupportedOpError):
        return f"unsupported: {e.op}"
    text = " ".join(str(e).split())
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(e).__name__}: {text}"
