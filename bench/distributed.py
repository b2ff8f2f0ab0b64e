"""DDP training step on 2 CPU ranks (gloo): eager DDP, specengine DDP and torch.compile DDP in one run.

Each rank trains the example GPT with SGD; per-rank batch sizes differ (rank r: batch + r) and the sequence length
changes every step, as real data loaders do. Measured per engine: the first steps (compiles included) and the
median time of a training step (forward, backward with DDP's bucketed all-reduces, optimizer step) after warm-up,
with the ratio to eager, and each rank's compile count. specengine: `model.forward = specengine.compile(
model.forward, dynamic=True)` then DDP (the recommended order). torch.compile: `model.compile(dynamic=True)` then
DDP (its docs' order; DDPOptimizer splits the graph at bucket boundaries). A benchmark, not a test: it prints figures
and asserts nothing.

    python bench/distributed.py [--layers 2] [--width 128] [--batch 8] [--seq 64] [--steps 20] [--no-torch-compile]
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import specengine
from specengine.examples.gpt import GPT, GPTConfig

WARMUP = 3  # steps not timed: compiles (each rank sees a few sequence lengths first)


def _batches(args: argparse.Namespace, rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(rank)
    out = []
    for step in range(WARMUP + args.steps):
        t = args.seq - (step * 7 + rank * 3) % (args.seq // 2)
        idx = torch.randint(0, args.vocab, (args.batch + rank, t + 1), generator=g)
        out.append((idx[:, :-1], idx[:, 1:]))
    return out


def _model(args: argparse.Namespace, engine: str) -> tuple[torch.nn.Module, torch.nn.Module, object]:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=args.vocab, block_size=args.seq, n_layer=args.layers, n_head=4, n_embd=args.width)
    model = GPT(cfg)
    counter = None
    if engine == "specengine":
        model.forward = counter = specengine.compile(model.forward, dynamic=True)
    elif engine == "torch.compile":
        model.compile(dynamic=True)
    return DDP(model, bucket_cap_mb=args.bucket_mb), model, counter


def _run(args: argparse.Namespace, rank: int, engine: str) -> dict:
    ddp, model, counter = _model(args, engine)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times = []
    dist.barrier()
    for x, y in _batches(args, rank):
        start = time.perf_counter()
        logits = ddp(x)
        F.cross_entropy(logits.reshape(-1, args.vocab), y.reshape(-1)).backward()
        opt.step()
        opt.zero_grad()
        times.append(time.perf_counter() - start)
    dist.barrier()
    compiles = specengine.cache_misses(counter) if counter is not None else None
    if engine == "torch.compile":
        compiles = _dynamo_frames()
    return {"first_s": sum(times[:WARMUP]), "step_ms": statistics.median(times[WARMUP:]) * 1e3, "compiles": compiles}


def _dynamo_frames() -> int | None:
    try:
        from torch._dynamo.utils import counters  # lazy: only for the peer's figures

        return int(counters["stats"]["unique_graphs"])
    except Exception:  # noqa: BLE001 - a counter that moved: reported as unknown
        return None


def worker(args: argparse.Namespace) -> None:
    rank = args.rank
    dist.init_process_group("gloo", init_method=f"file://{args.dir}/store", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=600))  # fmt: skip
    torch.set_num_threads(args.threads)
    engines = ["eager", "specengine"] + ([] if args.no_torch_compile else ["torch.compile"])
    rows = {}
    for engine in engines:
        try:
            rows[engine] = _run(args, rank, engine)
        except Exception as e:  # noqa: BLE001 - an engine that fails is reported in its row
            rows[engine] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"}
            break  # the other rank may wait in a collective
    gathered = [None, None]
    dist.all_gather_object(gathered, rows)
    if rank == 0:
        _report(args, gathered)
    dist.destroy_process_group()


def _report(args: argparse.Namespace, ranks: list[dict]) -> None:
    print(f"GPT {args.layers} layers, width {args.width}, batch {args.batch}+rank, seq <= {args.seq}, "
          f"{args.steps} timed steps, 2 ranks (gloo, {args.threads} thread each), bucket_cap_mb={args.bucket_mb}")  # fmt: skip
    print("| engine | first 3 steps (s) | step (ms), median | vs eager | compiles per rank |")
    print("| --- | --- | --- | --- | --- |")
    eager = max((r.get("eager", {}).get("step_ms", 0.0) for r in ranks), default=0.0)
    for engine in ranks[0]:
        r0, r1 = ranks[0][engine], ranks[1].get(engine, {})
        if "error" in r0 or "error" in r1:
            print(f"| {engine} | failed: {r0.get('error') or r1.get('error')} | | | |")
            continue
        step = max(r0["step_ms"], r1["step_ms"])  # the step ends when the slower rank's all-reduce does
        ratio = f"{(eager or 0) / step:.2f}x" if eager else ""
        first = max(r0["first_s"], r1["first_s"])
        compiles = "-" if engine == "eager" else f"{r0['compiles']}, {r1['compiles']}"
        print(f"| {engine} | {first:.2f} | {step:.1f} | {ratio} | {compiles} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=512)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--bucket-mb", type=float, default=1.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--dir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rank is not None:
        worker(args)
        return
    with tempfile.TemporaryDirectory() as directory:
        procs = [subprocess.Popen([sys.executable, __file__, *sys.argv[1:], "--rank", str(r), "--dir", directory],
                                  env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}) for r in range(2)]  # fmt: skip
        codes = [p.wait() for p in procs]
    sys.exit(max(codes))


if __name__ == "__main__":
    main()
