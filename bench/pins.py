"""Over-specialization by torch's kernels on the generic op path: per op, how many sizes its kernel pinned.

A kernel that calls `guard_int` (or converts a symbolic size to a float, or reads a symbolic float input) pins the
value with an equality guard: sound, but each new value recompiles. This runs OpInfo ops through specengine
(tests/opinfo_run.py, the same samples as bench/opinfo.py) and prints `specengine.ir.symnode.pin_report()`,
the candidates for a hand-written rule, with the kinds of pins.

    python bench/pins.py [--samples 2] [--ops NAME,...]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import opinfo_run as R  # noqa: E402

from specengine.ir import kernel_decisions as K  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--samples", type=int, default=2)
    p.add_argument("--ops", default="", help="comma-separated OpInfo names (default: all)")
    args = p.parse_args()
    warnings.simplefilter("ignore")
    ops = R.ops_by_name()
    names = [n for n in args.ops.split(",") if n] or sorted(ops)
    for name in names:
        R.run_op(ops[name], "specengine", args.samples, False, 60)
    kinds: dict[str, Counter] = {}
    for (op, kind), n in K.PINS.items():
        kinds.setdefault(op, Counter())[kind] += n
    report = K.pin_report()
    print(f"{len(report)} torch ops pinned sizes over {len(names)} OpInfo ops ({args.samples} samples each)")
    for op, n in report.items():
        print(f"  {n:4d}  {op:55s} {dict(kinds[op])}")
    layout = sum(K.LAYOUT_DECISIONS.values())
    print(f"layout questions answered by the hints without a guard: {layout} (in {len(K.LAYOUT_DECISIONS)} ops)")


if __name__ == "__main__":
    main()
