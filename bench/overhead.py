"""Per-call overhead of a cached call of the seed function `a * b.size(0)` on (2, 2) CPU tensors.

Measures eager, specengine (dynamic=True) and torch.compile(dynamic=True) in the same run and prints
microseconds per call and the ratio to eager. A benchmark, not a test: it prints figures, asserts nothing.

    python bench/overhead.py [--repeat 7] [--number 20000]
"""

from __future__ import annotations

import argparse
import platform
import timeit
import warnings

import torch

import specengine


def seed(a, b):
    return a * b.size(0)


def best_us(fn, args, repeat: int, number: int) -> float:
    for _ in range(200):
        fn(*args)
    times = timeit.repeat(lambda: fn(*args), repeat=repeat, number=number)
    return min(times) / number * 1e6


def torch_compiled(fn):
    try:
        import torch._dynamo

        torch._dynamo.reset()
        return torch.compile(fn, dynamic=True)
    except Exception as e:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
        warnings.warn(f"torch.compile unavailable: {e}", stacklevel=1)
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=20000)
    opts = parser.parse_args()
    torch.set_num_threads(1)
    a, b = torch.randn(2, 2), torch.randn(1, 2)
    engines = {"eager": seed, "specengine": specengine.compile(seed, dynamic=True)}
    tc = torch_compiled(seed)
    if tc is not None:
        engines["torch.compile(dynamic=True)"] = tc
    results = {}
    for name, fn in engines.items():
        try:
            torch.testing.assert_close(fn(a, b), seed(a, b))
            results[name] = best_us(fn, (a, b), opts.repeat, opts.number)
        except Exception as e:  # noqa: BLE001
            results[name] = None
            print(f"{name}: failed ({type(e).__name__}: {e})")
    print(f"seed a * b.size(0), (2,2) CPU tensors; torch {torch.__version__}, Python {platform.python_version()}")
    print(f"{'engine':32} {'us/call':>9} {'x eager':>8}")
    for name, us in results.items():
        if us is not None:
            print(f"{name:32} {us:9.2f} {us / results['eager']:8.2f}")


if __name__ == "__main__":
    main()
