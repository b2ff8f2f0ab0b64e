"""The first compile in a fresh process against the second: `nn.Sequential(nn.Linear(4, 4), nn.LeakyReLU(0.2))`.

The first trace of a process imports a few hundred modules lazily (torch's symbolic shapes import sympy, mpmath and
more). Their import-time code is library code: it must not be guarded as the program's (issue 22, part 7). This
runs a child process per measurement and prints, for the first and the second compile in that process: the
compile time, the modules imported by it, the cached call's cost (microseconds, best of a few repeats) and the
prologue's length in characters. A benchmark, not a test: it prints figures and asserts nothing.

    python bench/cold_compile.py [--repeat 5] [--number 200]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

_CHILD = r"""
import json, sys, time, timeit
import torch, torch.nn as nn
import specengine

repeat, number = int(sys.argv[1]), int(sys.argv[2])
torch.set_num_threads(1)
out = []
for _ in range(2):
    m = nn.Sequential(nn.Linear(4, 4), nn.LeakyReLU(0.2))
    cm = specengine.compile(m)
    x = torch.randn(2, 4)
    before = len(sys.modules)
    t0 = time.perf_counter()
    cm(x)
    compile_s = time.perf_counter() - t0
    imported = len(sys.modules) - before
    with torch.no_grad():
        eager_us = min(timeit.repeat(lambda: m(x), repeat=repeat, number=number)) / number * 1e6
    cached_us = min(timeit.repeat(lambda: cm(x), repeat=repeat, number=number)) / number * 1e6
    torch.testing.assert_close(cm(x), m(x))
    out.append({"compile_s": compile_s, "imported": imported, "cached_us": cached_us, "eager_us": eager_us,
                "prologue_chars": len(str(specengine.last_prologue(cm))), "misses": specengine.cache_misses(cm),
                "hits": specengine.cache_hits(cm)})
print(json.dumps(out))
"""


def measure(repeat: int = 5, number: int = 200, env: dict | None = None) -> list[dict]:
    """The figures of the first and the second compile in one fresh child process."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    done = subprocess.run([sys.executable, "-c", _CHILD, str(repeat), str(number)], capture_output=True, text=True,
                          env=env, cwd=root, check=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--number", type=int, default=200)
    opts = parser.parse_args()
    first, second = measure(opts.repeat, opts.number)
    print("nn.Sequential(nn.Linear(4, 4), nn.LeakyReLU(0.2)), (2, 4) input, CPU, one thread, a fresh process")
    print(f"{'compile':8} {'compile s':>10} {'modules':>8} {'us/call':>9} {'x eager':>8} {'x 2nd':>7} {'prologue':>9}")
    for name, r in (("first", first), ("second", second)):
        print(f"{name:8} {r['compile_s']:10.2f} {r['imported']:8d} {r['cached_us']:9.1f} "
              f"{r['cached_us'] / r['eager_us']:8.2f} {r['cached_us'] / second['cached_us']:7.2f} "
              f"{r['prologue_chars']:9d}")  # fmt: skip


if __name__ == "__main__":
    main()
