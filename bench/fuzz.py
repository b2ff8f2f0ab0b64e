"""Differential fuzzing against eager, longer than CI runs it (issue 6).

    python bench/fuzz.py --programs 10000 [--seed 0] [--jobs N] [--time-limit S] [--report FILE]

Program i is generated from a `random.Random` seeded with (seed, i), by the same generator as tests/test_fuzz.py
(tests/fuzzgen.py), and every call of its call sequence runs eagerly and under dynamic=True, False and None
(tests/fuzzrun.py). Prints exactly one line on stdout:

    programs=<n> calls=<n> wrong=<n> crashes=<n> misses/call=<x.xxx>

"wrong": an output (or a mutated input) differs from eager, or the exception type differs. "crashes": an engine
error (a SpecEngineError, including UnsupportedOpError, which the generator avoids, or an internal error such as
AttributeError raised by the engine's code) where eager did not raise it, or cache counters that lie. Failures
(each with the program as Python and its calls) go to stderr, the first few, and all of them to --report.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from fuzzgen import RandomChooser, gen_calls, gen_program  # noqa: E402
from fuzzrun import Tally, program_seed, run_case  # noqa: E402

_CHUNK = 10


def run_chunk(job: tuple[int, int, int]) -> Tally:
    """Programs [start, stop) of the run with `seed`."""
    seed, start, stop = job
    tally = Tally()
    for i in range(start, stop):
        ch = RandomChooser(program_seed(seed, i))
        program = gen_program(ch)
        before = len(tally.failures)
        run_case(program, gen_calls(ch, program), tally)
        tally.failures[before:] = [f"program {i} (seed {seed}):\n{f}" for f in tally.failures[before:]]
    return tally


def fuzz(programs: int, seed: int, jobs: int, time_limit: float | None) -> Tally:
    jobs_list = [(seed, s, min(s + _CHUNK, programs)) for s in range(0, programs, _CHUNK)]
    total, deadline = Tally(), None if time_limit is None else time.monotonic() + time_limit
    if jobs <= 1:
        results = map(run_chunk, jobs_list)
        pool = None
    else:
        pool = multiprocessing.Pool(jobs)
        results = pool.imap(run_chunk, jobs_list)
    try:
        for tally in results:
            total.merge(tally)
            if deadline is not None and time.monotonic() > deadline:
                break
    finally:
        if pool is not None:
            pool.terminate()
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes (default: all CPUs)")
    parser.add_argument("--time-limit", type=float, default=None, help="stop after this many seconds")
    parser.add_argument("--report", default=None, help="write every failure to this file")
    args = parser.parse_args()
    total = fuzz(args.programs, args.seed, args.jobs, args.time_limit)
    for failure in total.failures[:5]:
        print(failure, end="\n\n", file=sys.stderr)
    if args.report:
        with open(args.report, "w") as f:
            f.write("\n\n".join(total.failures) + "\n")
    print(total.line())


if __name__ == "__main__":
    main()
