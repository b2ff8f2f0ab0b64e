"""`python -m specengine`: a short demo on an embedded example.

It compiles a small function with a shape branch and a reshape, calls it on a few shapes, and prints the
traces, the prologue, the guards and the cache counts.
"""

from __future__ import annotations

import torch

import specengine


def example(x, w):
    h = (x @ w).relu()
    if h.shape[0] > 2:
        h = h * h.shape[0]
    return h.reshape(-1, 2).sum(0)


def main() -> None:
    cfn = specengine.compile(example, dynamic=True)
    w = torch.randn(4, 6)
    for n in (4, 5, 8, 1, 2):
        x = torch.randn(n, 4)
        torch.testing.assert_close(cfn(x, w), example(x, w))
    first, *_, final = specengine.last_traces(cfn)
    print("=== first computation trace (as traced) ===")
    print(first)
    print("=== final computation trace (as run) ===")
    print(final)
    print("=== prologue of the entry that served the last call ===")
    print(specengine.last_prologue(cfn))
    print("=== guards ===")
    for g in specengine.last_guards(cfn):
        print(f"  {g}    # {g.provenance}")
    print("=== counts ===")
    print(f"calls on sizes 4, 5, 8, 1, 2: misses={specengine.cache_misses(cfn)} hits={specengine.cache_hits(cfn)}")
    for reason in specengine.recompile_reasons(cfn):
        print(f"recompiled because: {reason}")


if __name__ == "__main__":
    main()
