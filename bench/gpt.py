"""GPT-2-small-shaped model (12 layers, width 768, 12 heads): first-call latency and steady-state forward.

Measured in the same run: specengine (dynamic=True) and torch.compile(dynamic=True) first-call latency
(specengine's split into trace, solve and codegen), and steady-state forward time against eager (goal:
at least 0.98x eager's speed). A benchmark, not a test: it prints figures and asserts nothing.

    python bench/gpt.py [--vocab 50257] [--layers 12] [--batch 1] [--seq 64] [--no-torch-compile]
"""

from __future__ import annotations

import argparse
import time

import torch

import specengine
from specengine.examples.gpt import GPT, gpt2_small_config


def best_ms(fn, idx, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn(idx)
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def first_call_s(fn, idx) -> float:
    start = time.perf_counter()
    fn(idx)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (1: steadier on a shared machine)")
    parser.add_argument("--no-torch-compile", action="store_true")
    opts = parser.parse_args()
    torch.set_num_threads(opts.threads)
    torch.manual_seed(0)
    cfg = gpt2_small_config(opts.vocab)
    cfg.n_layer = opts.layers
    model = GPT(cfg).eval()
    idx = torch.randint(0, opts.vocab, (opts.batch, opts.seq))
    engines = {"eager": model, "specengine": specengine.compile(model, dynamic=True)}
    if not opts.no_torch_compile:
        engines["torch.compile(dynamic=True)"] = torch.compile(model, dynamic=True)
    with torch.no_grad():
        eager_out = model(idx)
        rows = {name: [first_call_s(fn, idx)] for name, fn in engines.items()}
        torch.testing.assert_close(engines["specengine"](idx), eager_out, atol=1e-4, rtol=1e-4)
        for _ in range(2):  # interleaved rounds: load on the machine affects every engine alike
            for name, fn in engines.items():
                rows[name][1:] = [min(rows[name][1:] + [best_ms(fn, idx, opts.repeat)])]
    stats = specengine.cache_entries(engines["specengine"])[0].stats
    eager_ms = rows["eager"][1]
    print(f"GPT: {cfg.n_layer} layers, width {cfg.n_embd}, {cfg.n_head} heads, vocab {cfg.vocab_size}; "
          f"input ({opts.batch}, {opts.seq}); torch {torch.__version__}, {torch.get_num_threads()} threads")  # fmt: skip
    print(f"specengine first call: trace {stats['trace_s']:.2f} s, solve {stats['solve_s']:.2f} s "
          f"(z3 {stats['z3_s']:.2f} s, {stats['z3_calls']} queries), codegen {stats['codegen_s']:.2f} s")  # fmt: skip
    print(f"{'engine':30} {'first call s':>12} {'forward ms':>11} {'speed vs eager':>15}")
    for name, (first, ms) in rows.items():
        print(f"{name:30} {first:12.2f} {ms:11.2f} {eager_ms / ms:14.3f}x")


if __name__ == "__main__":
    main()
