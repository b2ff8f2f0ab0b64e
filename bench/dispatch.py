"""Dispatch cost as the cache grows: one function compiled with dynamic=False for 1, 10 and 100 shapes.

Prints, for each cache size, the per-call time of a cached call and the lookup time (the call minus the
computation alone), for the oldest and the newest entry. Goal: at 100 entries, at most 1.2x the 1-entry
lookup. A benchmark, not a test.

    python bench/dispatch.py [--number 20000]
"""

from __future__ import annotations

import argparse
import timeit

import torch

import specengine


def f(a, b):
    return a * b


def best_us(fn, number: int) -> float:
    fn()
    return min(timeit.repeat(fn, repeat=5, number=number)) / number * 1e6


def measure(n_entries: int, number: int) -> dict[str, float]:
    cfn = specengine.compile(f, dynamic=False, recompile_limit=1000)
    inputs = [(torch.randn(k + 1, 2), torch.randn(k + 1, 2)) for k in range(n_entries)]
    for a, b in inputs:
        cfn(a, b)
    assert specengine.cache_misses(cfn) == n_entries
    out = {}
    for label, (a, b) in (("oldest", inputs[0]), ("newest", inputs[-1])):
        call = best_us(lambda a=a, b=b: cfn(a, b), number)
        entry = specengine.cache_entries(cfn)[0 if label == "oldest" else -1]
        args = entry.prologue.fn(a, b)
        computation = best_us(lambda c=entry.computation, args=args: c(*args), number)
        out[label] = call - computation
    out["call"] = best_us(lambda: cfn(*inputs[-1]), number)
    assert specengine.cache_misses(cfn) == n_entries
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20000)
    opts = parser.parse_args()
    torch.set_num_threads(1)
    results = {n: measure(n, opts.number) for n in (1, 10, 100)}
    base = results[1]["newest"]
    print(f"{'entries':>8} {'call us':>8} {'lookup us (oldest)':>19} {'lookup us (newest)':>19} {'x 1-entry':>10}")
    for n, r in results.items():
        worst = max(r["oldest"], r["newest"])
        print(f"{n:>8} {r['call']:8.2f} {r['oldest']:19.2f} {r['newest']:19.2f} {worst / base:10.2f}")


if __name__ == "__main__":
    main()
