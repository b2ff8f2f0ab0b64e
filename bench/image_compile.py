"""Compile time of every model the sweep builds (issue 26's "no model over 2 s"), in CPU seconds.

Each transformers image family (`bench/model_sweep.hf_model`, tiny config), each text family (`--source text`:
called as the sweep calls it, B=2, T=8, left-padded) and each torchvision classification model
(`model_sweep.tv_cases`: 10 classes, random weights, the fixed-size ViT, Swin and MaxViT at 32; when torchvision
imports) is compiled with `specengine.compile(model, dynamic=True)` and called once on a batch of 2 at one image
size. Per model it prints the compile's CPU seconds (trace, solve, codegen: the entries' own statistics), the first
call's, eager's call on the same input for scale, whether the output equals eager's, the slowest z3 query and the
number of traces; a model whose eager call fails at that size (a fixed-size model, a config that does not run) is
shown with eager's error. A benchmark: it prints a table and asserts nothing.

    python bench/image_compile.py [--source hf|text|tv|all] [--families a,b] [--after NAME] [--size 32] [--limit-s 60]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import Any

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # configs only: nothing is downloaded
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import model_sweep  # noqa: E402

import specengine  # noqa: E402


class _Timeout(Exception):
    pass


def _alarm(*_: object) -> None:
    raise _Timeout


def _models(source: str, families: list[str] | None) -> list[tuple[str, str]]:
    out = []
    if source in ("hf", "text", "all"):
        cases = model_sweep.hf_cases(quick=True)
        if source != "text":
            out += [(n, "hf") for n, c in cases.items() if c.inputs is model_sweep._image_inputs]
        if source != "hf":
            out += [(n, "text") for n, c in cases.items() if c.inputs is not model_sweep._image_inputs]
    if source in ("tv", "all"):
        tv = model_sweep.tv_cases(quick=True)
        if not tv:
            print("torchvision does not import here: no torchvision rows")
        out += [(n, "tv") for n in tv]
    return [(n, s) for n, s in out if families is None or n in families]


def _build(name: str, source: str) -> torch.nn.Module:
    if source in ("hf", "text"):
        return model_sweep.hf_model(name).eval()
    return model_sweep.tv_cases(quick=True)[name].build()


def _call(model: torch.nn.Module, source: str, x: Any) -> torch.Tensor:
    out = model(pixel_values=x) if source == "hf" else model(**x) if source == "text" else model(x)
    if hasattr(out, "logits"):
        return out.logits
    return out if isinstance(out, torch.Tensor) else out[0]  # (a base model's output: its first tensor)


def row(name: str, source: str, size: int, limit_s: int) -> str:
    """One model's line of the table."""
    try:
        model = _build(name, source)
    except Exception as e:  # noqa: BLE001 - a config that does not build: reported
        return f"{name:24s} {source}  (not built: {type(e).__name__})"
    params = sum(p.numel() for p in model.parameters())
    if params > model_sweep.MAX_PARAMS:  # (as the sweep: CPU time, memory)
        return f"{name:24s} {source}  (n/a: {params / 1e6:.0f}M parameters after shrinking)"
    if source == "text":
        try:
            x: Any = model_sweep._text_inputs(model, 2, 8)
        except Exception as e:  # noqa: BLE001 - a model without token inputs (its config's vocabulary is empty)
            return f"{name:24s} {source}  (no token inputs: {type(e).__name__}: {str(e)[:60]})"
    else:
        size = 32 if source == "tv" and name.startswith(("vit_", "swin", "maxvit")) else size  # (fixed-size models)
        x = torch.randn(2, getattr(getattr(model, "config", None), "num_channels", 3), size, size)
    with torch.no_grad():
        t = time.process_time()
        try:
            ref = _call(model, source, x)
        except Exception as e:  # noqa: BLE001 - eager's own failure at this size
            return f"{name:24s} {source}  (eager fails on these inputs: {type(e).__name__}: {str(e)[:60]})"
        eager_s = time.process_time() - t
        cfn = specengine.compile(model, dynamic=True)
        signal.alarm(limit_s)
        t = time.process_time()
        try:
            out = _call(cfn, source, x)
        except _Timeout:
            return f"{name:24s} {source}  over {limit_s} s"
        except Exception as e:  # noqa: BLE001 - reported
            return f"{name:24s} {source}  failed: {type(e).__name__}: {str(e)[:80]}"
        finally:
            signal.alarm(0)
        first = time.process_time() - t
    entries = specengine.cache_entries(cfn)
    compile_s = sum(e.stats.get("compile_s", 0.0) for e in entries)
    z3_ms = max((e.stats.get("z3_max_query_s", 0.0) for e in entries), default=0.0) * 1e3
    equal = out.shape == ref.shape and torch.allclose(out, ref, atol=1e-4, rtol=1e-4)
    return (f"{name:24s} {source}  {compile_s:8.2f} {first:8.2f} {eager_s:8.3f}  {'yes' if equal else 'NO ':5s}"
            f" {z3_ms:8.1f} {len(entries):3d}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", choices=("hf", "text", "tv", "all"), default="hf")
    parser.add_argument("--families", help="comma-separated names (default: all)")
    parser.add_argument("--after", help="resume: only the families after this one")
    parser.add_argument("--size", type=int, default=32, help="image size (default 32)")
    parser.add_argument("--limit-s", type=int, default=60, help="seconds per compile before giving up")
    args = parser.parse_args()
    signal.signal(signal.SIGALRM, _alarm)
    models = _models(args.source, args.families.split(",") if args.families else None)
    if args.after:
        names = [n for n, _ in models]
        if args.after not in names:
            parser.error(f"--after {args.after}: not a family of --source {args.source}")
        models = models[names.index(args.after) + 1 :]
    print(f"{'model':24s} src  compile s  first s  eager s  equal  z3 max ms  traces")
    for name, source in models:
        print(row(name, source, args.size, args.limit_s), flush=True)


if __name__ == "__main__":
    main()
