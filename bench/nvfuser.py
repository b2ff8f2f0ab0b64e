"""nvFuser workloads on one GPU: LayerNorm, softmax and GELU(x @ W + b), three sizes each.

For each, prints milliseconds for eager, torch.compile (dynamic=True) and specengine (nvFuser executor), the
ratios (eager / specengine, torch.compile / specengine: above 1 is faster), the number of nvFuser regions of
the entry, and the achieved bandwidth (bytes the fusion must read and write, over specengine's time) as a
fraction of 4.3 TB/s (device-to-device copies on the H200). GELU(x@W+b) includes its matmul, so its bandwidth
figure is not a memory-bound one. Goals: at least 0.9x torch.compile, and at least 70% of bandwidth on the
memory-bound fusions. Exits quietly without CUDA.

    python bench/nvfuser.py [--quick]
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F

import specengine

PEAK_BYTES_PER_S = 4.3e12


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def softmax(x):
    return torch.softmax(x, -1)


def gelu_linear(x, w, b):
    return F.gelu(x @ w + b)


def workloads(quick: bool) -> list:
    sizes = [(4096, 1024), (8192, 4096), (16384, 8192)][: 2 if quick else 3]
    out = []
    for rows, cols in sizes:
        x = torch.randn(rows, cols, device="cuda")
        w, b = torch.randn(cols, device="cuda"), torch.randn(cols, device="cuda")
        out.append(("layer_norm", layer_norm, (x, w, b), 2 * x.numel() * 4))
        out.append(("softmax", softmax, (x,), 2 * x.numel() * 4))
        wm = torch.randn(cols, 1024, device="cuda") * 0.02
        out.append(("gelu(x@W+b)", gelu_linear, (x, wm, torch.randn(1024, device="cuda")), 2 * rows * 1024 * 4))
    return out


def time_ms(fn, args, iters: int = 20) -> float:
    for _ in range(3):
        fn(*args)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn(*args)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    opts = parser.parse_args()
    if not torch.cuda.is_available():
        print("CUDA not available: nothing to measure")
        return
    print(f"{'workload':14} {'shape':>14} {'eager ms':>9} {'compile ms':>10} {'spec ms':>8} {'x eager':>8} "
          f"{'x compile':>9} {'% of BW':>8} {'regions':>7}")  # fmt: skip
    for name, fn, args, nbytes in workloads(opts.quick):
        shape = "x".join(map(str, args[0].shape))
        try:
            eager = time_ms(fn, args)
            compiled = time_ms(torch.compile(fn, dynamic=True), args)
            cfn = specengine.compile(fn, dynamic=True)
            ours = time_ms(cfn, args)
        except Exception as e:  # noqa: BLE001 - report and go on with the next workload
            print(f"{name:14} {shape:>14} failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
            continue
        regions = sum(b.sym.module == "nvfuser" for b in specengine.last_traces(cfn)[-1].bsyms)
        bw = nbytes / (ours * 1e-3) / PEAK_BYTES_PER_S
        print(f"{name:14} {shape:>14} {eager:9.3f} {compiled:10.3f} {ours:8.3f} {eager / ours:8.2f} "
              f"{compiled / ours:9.2f} {bw * 100:7.1f}% {regions:>7}")  # fmt: skip
        sys.stdout.flush()


if __name__ == "__main__":
    main()
