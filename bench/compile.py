"""Compile-time budget: seconds spent tracing, solving (z3 included) and generating code.

Runs the foundation test programs and a stack of 12 attention+MLP blocks (all weights symbolic under
dynamic=True), and prints each compile's stage times, its z3 share and its slowest z3 query.
Goals: z3 at most 20% of compile time, no single query over 100 ms. A benchmark, not a test.

`--layers 8,16,32,64` sweeps the example GPT (width 32, 2 heads, dynamic=True, (2, 17) inputs, after a
warm-up compile) over layer counts: every stage (the frontend's walks as their own column; the per-event cost
of its coverage tracer and C-call watcher, measured with them switched off, after the table), the z3 time and query count, the slowest query, ms per layer
and the growth ratio t(2n)/t(n) (goal: at most 2.1, i.e. linear), then a GPT-2-small first call (12 layers,
width 768; goal <= 0.35 s). "init" is the one-time cost of a fresh process: `import specengine, torch` and the
seed function's first compile, measured in a subprocess that writes bytecode, against `import torch` alone (goal:
<= 0.3 s beyond); the full garbage collection that torch's import leaves due (about 50 ms, paid by whichever import
or call allocates next) is collected and printed first, so that it is not charged to specengine's import.

    python bench/compile.py [--blocks 12] [--layers 8,16,32,64] [--no-gpt2] [--clock wall|cpu] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from contextlib import contextmanager

import torch

import specengine
from specengine.capture import calls, coverage


def layer_norm(x):
    mu = x.mean(-1, keepdim=True)
    d = x - mu
    return d / ((d * d).mean(-1, keepdim=True) + 1e-5) ** 0.5


def attention_mlp(x, w, n_head):
    b, t, c = x.shape
    hd = c // n_head
    h = layer_norm(x)
    q, k, v = ((h @ w[name]).view(b, t, n_head, hd).transpose(1, 2) for name in ("q", "k", "v"))
    att = (q @ k.transpose(-2, -1)) * hd**-0.5
    att = (att - att.amax(-1, keepdim=True)).exp()
    att = att / att.sum(-1, keepdim=True)
    y = (att @ v).transpose(1, 2).reshape(b, t, c)
    x = x + y @ w["o"]
    return x + (layer_norm(x) @ w["fc"]).relu() @ w["proj"]


def stack(x, blocks, n_head):
    for w in blocks:
        x = attention_mlp(x, w, n_head)
    return x


def make_blocks(n: int, c: int) -> list[dict[str, torch.Tensor]]:
    shapes = {"q": (c, c), "k": (c, c), "v": (c, c), "o": (c, c), "fc": (c, 4 * c), "proj": (4 * c, c)}
    return [{k: torch.randn(*s) * 0.05 for k, s in shapes.items()} for _ in range(n)]


PROGRAMS = {
    "seed": (lambda a, b: a * b.size(0), lambda: (torch.randn(3, 2), torch.randn(3, 2))),
    "branch": (lambda a: a * 2 if a.shape[0] > 2 else a * 3, lambda: (torch.randn(4),)),
    "view": (lambda a: a.view(a.shape[0] * a.shape[1], a.shape[2] * a.shape[3]), lambda: (torch.randn(2, 3, 4, 5),)),
    "reshape": (lambda a: a.reshape(-1, 4), lambda: (torch.randn(3, 8),)),
    "matmul": (lambda a, b: a @ b, lambda: (torch.randn(2, 3), torch.randn(3, 4))),
}


def report(name: str, stats: dict) -> None:
    total = stats["compile_s"]
    share = stats["z3_s"] / total if total else 0.0
    print(f"{name:22} {stats['trace_s'] * 1e3:9.1f} {stats['solve_s'] * 1e3:9.1f} {stats['codegen_s'] * 1e3:9.1f} "
          f"{total * 1e3:9.1f} {stats['z3_calls']:6d} {share * 100:6.1f}% {stats['z3_max_query_s'] * 1e3:9.2f}")  # fmt: skip


_INIT_SCRIPT = """
import time
start = time.perf_counter()
import torch
t_torch = time.perf_counter()
import gc
gc.collect()  # the full collection torch's import leaves due (~50 ms): paid by whatever allocates next
t_gc = time.perf_counter()
import specengine
t_import = time.perf_counter()
cfn = specengine.compile(lambda a, b: a * b.size(0), dynamic=True)
cfn(torch.randn(3, 2), torch.randn(3, 2))
t_first = time.perf_counter()
print(t_torch - start, t_gc - t_torch, t_import - t_gc, t_first - t_import)
"""


def measure_init(repeat: int = 3) -> dict[str, float]:
    """The one-time cost of a fresh process (best of `repeat` subprocesses): import torch, import specengine,
    and the seed function's first compile and call."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # (a user's process reads .pyc)
    best = None
    for _ in range(repeat + 1):  # (the first run may write the bytecode)
        out = subprocess.run([sys.executable, "-c", _INIT_SCRIPT], capture_output=True, text=True, check=True, env=env)
        row = [float(v) for v in out.stdout.split()]
        best = row if best is None or sum(row) < sum(best) else best
    torch_s, gc_s, import_s, first_s = best
    return {"import_torch_s": torch_s, "torch_gc_s": gc_s, "import_specengine_s": import_s,
            "first_compile_s": first_s, "init_s": import_s + first_s}  # fmt: skip


def print_init() -> None:
    r = measure_init()
    print(f"init (fresh process with bytecode, best of 3): import torch {r['import_torch_s']:.2f} s, then the "
          f"garbage collection its import leaves due {r['torch_gc_s']:.3f} s (collected before the rest: without it, "
          f"whatever allocates next pays it); beyond them: import specengine {r['import_specengine_s']:.3f} s "
          f"(goal <= 0.1 s) + seed's first compile {r['first_compile_s']:.3f} s (goal <= 0.2 s) "
          f"= {r['init_s']:.3f} s (goal <= 0.30 s)")  # fmt: skip


def gpt_first_call(n_layer: int, n_embd: int, n_head: int, vocab: int = 64, block: int = 64) -> tuple[float, dict]:
    from specengine.examples.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=vocab, block_size=block, n_layer=n_layer, n_head=n_head, n_embd=n_embd)).eval()
    cfn = specengine.compile(model, dynamic=True)
    idx = torch.randint(0, vocab, (2, 17))
    with torch.no_grad():
        start = time.perf_counter()
        cfn(idx)
        first = time.perf_counter() - start
    return first, specengine.cache_entries(cfn)[0].stats


@contextmanager
def hooks_off():
    """The coverage tracer and the C-call watcher set up but switched off at once: what their per-event cost is,
    by difference (a measurement only: traces made so are not checked)."""
    saved = coverage.collecting, calls.watching

    def off(cm):
        @contextmanager
        def wrapped(*args, **kwargs):
            with cm(*args, **kwargs) as value:
                sys.settrace(None)
                sys.setprofile(None)
                yield value

        return wrapped

    coverage.collecting, calls.watching = off(saved[0]), off(saved[1])
    try:
        yield
    finally:
        coverage.collecting, calls.watching = saved


def print_hooks(n: int, repeat: int = 2) -> None:
    """The frontend's per-event hooks at `n` layers: the first call with them on and off (best of `repeat`)."""
    on = min(gpt_first_call(n, 32, 2)[0] for _ in range(repeat))
    with hooks_off():
        off = min(gpt_first_call(n, 32, 2)[0] for _ in range(repeat))
    print(f"frontend hooks (coverage tracer, C-call watcher) at {n} layers: {(on - off) * 1e3:.0f} ms "
          f"({(on - off) / on * 100:.0f}% of the first call: {on:.3f} s on, {off:.3f} s off)")  # fmt: skip


def sweep(layers: list[int], gpt2: bool) -> None:
    gpt_first_call(1, 32, 2)  # warm-up compile: one-time imports and caches
    print(f"{'layers':>6} {'first s':>8} {'compile':>8} {'trace ms':>9} {'(front)':>8} {'solve ms':>9} {'codegen':>8} "
          f"{'z3 ms':>8} {'z3 #':>5} {'z3 %':>6} {'max q ms':>9} {'ms/layer':>9} {'ratio':>6}")  # fmt: skip
    prev = None
    for n in layers:
        first, st = gpt_first_call(n, 32, 2)
        ratio = f"{first / prev[1]:6.2f}" if prev and prev[0] * 2 == n else f"{'':6}"
        print(f"{n:6d} {first:8.3f} {st['compile_s']:8.3f} {st['trace_s'] * 1e3:9.1f} {st['frontend_s'] * 1e3:8.1f} "
              f"{st['solve_s'] * 1e3:9.1f} "
              f"{st['codegen_s'] * 1e3:8.1f} {st['z3_s'] * 1e3:8.1f} {st['z3_calls']:5d} "
              f"{st['z3_s'] / st['compile_s'] * 100:5.1f}% {st['z3_max_query_s'] * 1e3:9.2f} "
              f"{first / n * 1e3:9.2f} {ratio}")  # fmt: skip
        prev = (n, first)
    print(
        "ratio: t(n)/t(n/2) of the first call (goal <= 2.1); goals: <= 15 ms/layer at 64 layers, "
        "z3 <= 20%, no query over 100 ms; (front): the frontend's walks within trace (inputs described, "
        "watchers set up and checked, mutation walks, fingerprints)"
    )
    print_hooks(layers[-1])
    if gpt2:
        first, st = gpt_first_call(12, 768, 12, vocab=50257, block=1024)
        print(f"GPT-2 small (12 layers, width 768) first call: {first:.3f} s (goal <= 0.35 s); trace "
              f"{st['trace_s'] * 1e3:.0f} ms (frontend walks {st['frontend_s'] * 1e3:.0f} ms), solve {st['solve_s'] * 1e3:.0f} ms, codegen {st['codegen_s'] * 1e3:.0f} ms, "
              f"z3 {st['z3_s'] * 1e3:.0f} ms ({st['z3_calls']} queries)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=12)
    parser.add_argument("--layers", type=str, default=None, help="comma-separated layer counts of the GPT sweep")
    parser.add_argument("--no-gpt2", action="store_true", help="skip the GPT-2-small first call of the sweep")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: every time in CPU seconds of the calling thread (steadier on a loaded machine)")  # fmt: skip
    parser.add_argument(
        "--threads", type=int, default=1, help="torch intra-op threads (1: steadier on a shared machine)"
    )
    opts = parser.parse_args()
    torch.set_num_threads(opts.threads)
    if opts.clock == "cpu":
        time.perf_counter = time.thread_time  # the compile stages are timed with time.perf_counter
    print_init()
    if opts.layers:
        sweep([int(v) for v in opts.layers.split(",")], not opts.no_gpt2)
        return
    print(f"{'program':22} {'trace ms':>9} {'solve ms':>9} {'codegen':>9} {'total ms':>9} {'z3 #':>6} "
          f"{'z3 %':>7} {'max q ms':>9}")  # fmt: skip
    warm = specengine.compile(lambda a: a + 1, dynamic=True)
    warm(torch.randn(2))
    report("(warm-up: first compile)", specengine.cache_entries(warm)[0].stats)
    for name, (fn, make) in PROGRAMS.items():
        cfn = specengine.compile(fn, dynamic=True)
        cfn(*make())
        report(name, specengine.cache_entries(cfn)[0].stats)
    x, blocks = torch.randn(2, 8, 16), make_blocks(opts.blocks, 16)
    cfn = specengine.compile(stack, dynamic=True)
    torch.testing.assert_close(cfn(x, blocks, 2), stack(x, blocks, 2))
    report(f"{opts.blocks} attn+MLP blocks", specengine.cache_entries(cfn)[0].stats)
    print(f"guards of the block stack: {len(specengine.last_guards(cfn))}")


if __name__ == "__main__":
    main()
