"""Per-call overhead of a cached call of a deep, narrow module: the example GPT with 32 layers of width 4.

At width 4 the arithmetic is negligible, so the time is all per-call overhead: in eager, `Module.__call__`
for each of the ~200 submodules; in specengine, the prologue (module-structure fingerprint, the parameters
read as inputs) and the computation. Prints microseconds per call and specengine / eager, measured in the
same run. A benchmark, not a test: it prints figures and asserts nothing.

    python bench/module_overhead.py [--layers 32] [--repeat 7] [--number 200]
"""

from __future__ import annotations

import argparse
import timeit

import torch

import specengine
from specengine.examples.gpt import GPT, GPTConfig


def model(layers: int = 32) -> GPT:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=16, block_size=8, n_layer=layers, n_head=2, n_embd=4)
    return GPT(cfg).eval()


def best_us(fn, args: tuple, repeat: int, number: int) -> float:
    for _ in range(5):
        fn(*args)
    return min(timeit.repeat(lambda: fn(*args), repeat=repeat, number=number)) / number * 1e6


def measure(layers: int = 32, repeat: int = 7, number: int = 200) -> dict:
    """Eager and specengine microseconds per cached call (one input shape), and their ratio."""
    torch.set_num_threads(1)
    m = model(layers)
    idx = torch.randint(0, 16, (1, 8))
    cm = specengine.compile(m, dynamic=True)
    with torch.no_grad():
        torch.testing.assert_close(cm(idx), m(idx))
        eager = best_us(m, (idx,), repeat, number)
        compiled = best_us(cm, (idx,), repeat, number)
    return {"layers": layers, "eager_us": eager, "specengine_us": compiled, "ratio": compiled / eager,
            "misses": specengine.cache_misses(cm)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=200)
    opts = parser.parse_args()
    r = measure(opts.layers, opts.repeat, opts.number)
    print(f"GPT, {r['layers']} layers of width 4, (1, 8) tokens, CPU, no_grad; torch {torch.__version__}")
    print(f"{'engine':12} {'us/call':>9} {'x eager':>8}")
    print(f"{'eager':12} {r['eager_us']:9.1f} {1.0:8.2f}")
    print(f"{'specengine':12} {r['specengine_us']:9.1f} {r['ratio']:8.2f}")


if __name__ == "__main__":
    main()
