"""Compile-time budget: seconds spent tracing, solving (z3 included) and generating code.

Runs the foundation test programs and a stack of 12 attention+MLP blocks (all weights symbolic under
dynamic=True), and prints each compile's stage times, its z3 share and its slowest z3 query.
Goals: z3 at most 20% of compile time, no single query over 100 ms. A benchmark, not a test.

    python bench/compile.py [--blocks 12]
"""

from __future__ import annotations

import argparse

import torch

import specengine


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=12)
    opts = parser.parse_args()
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
