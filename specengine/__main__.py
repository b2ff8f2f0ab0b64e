"""`python -m specengine`: a short demo on an embedded example GPT.

It compiles the GPT with `dynamic=True`, sweeps batch sizes and sequence lengths, and prints the head of
the final trace, the prologue's guards, the miss count and a timing table against eager.
"""

from __future__ import annotations

import sys
import time

import torch

import specengine
from specengine.examples.gpt import GPT, GPTConfig
from specengine.persist import cli

SIZES = [(b, t) for b in (1, 2, 4) for t in (1, 8, 17, 32)]


def _best_ms(fn, *args, repeat: int = 5) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args)
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def main() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=128, block_size=64, n_layer=2, n_head=4, n_embd=64)).eval()
    cfn = specengine.compile(model, dynamic=True)
    rows = []
    with torch.no_grad():
        for b, t in SIZES:
            idx = torch.randint(0, 128, (b, t))
            start = time.perf_counter()
            out = cfn(idx)
            first = (time.perf_counter() - start) * 1e3
            torch.testing.assert_close(out, model(idx))
            rows.append((b, t, first, _best_ms(model, idx), _best_ms(cfn, idx)))
    final = specengine.last_traces(cfn)[-1]
    print("=== head of the final computation trace ===")
    print("\n".join(str(final).splitlines()[:24]) + "\n  ...")
    print("=== prologue guards ===")
    guards = specengine.last_guards(cfn)
    static = [g for g in guards if str(g).startswith("self.")]
    for g in guards:
        if g not in static:
            print(f"  {g}    # {g.provenance}")
    print(f"  ... and {len(static)} guards pinning parameter and buffer shapes (static by default)")
    print("=== counts ===")
    print(f"{len(SIZES)} shapes over B in (1, 2, 4) x T in (1, 8, 17, 32), timing runs included: "
          f"misses={specengine.cache_misses(cfn)} hits={specengine.cache_hits(cfn)}")  # fmt: skip
    print("=== timing (ms; first call includes the compile) ===")
    print(f"{'B':>3} {'T':>4} {'first call':>11} {'eager':>8} {'specengine':>11} {'x eager':>8}")
    for b, t, first, eager, ours in rows:
        print(f"{b:>3} {t:>4} {first:11.2f} {eager:8.3f} {ours:11.3f} {ours / eager:8.2f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["cache"]:  # python -m specengine cache --info | --clear [DIR]
        sys.exit(cli.main(sys.argv[2:]))
    main()
