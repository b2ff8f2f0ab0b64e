"""Issue 22's read-set matrix: every program of `tests/pystate_gen.py` (object kinds x places x reads x changes)
under the three dynamic modes against eager. Prints, per kind, a table of reads x changes whose cells count the
programs (over the places) that pass, are refused with a reason, or FAIL; `--docs` writes the same tables into
docs/python-semantics.md between its `pystate-matrix` markers, so that the spec and the tests cannot drift apart.

    python bench/pystate_matrix.py [--kinds set,deque] [--failures] [--docs] [--json FILE] [--jobs N] [--from-json FILE]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from pystate_gen import CHANGES, KINDS, READS, all_cases, run_case  # noqa: E402

DOCS = os.path.join(HERE, "..", "docs", "python-semantics.md")
BEGIN, END = "<!-- pystate-matrix:begin -->", "<!-- pystate-matrix:end -->"


def outcome_class(out: str) -> str:
    return "pass" if out == "pass" else "refused" if out.startswith("refused") else "FAIL"


def run(kinds: list[str], jobs: int = 1) -> dict:
    cases = [c for c in all_cases() if c.kind in kinds]
    warnings.simplefilter("ignore")
    if jobs > 1:
        import multiprocessing  # lazy: only with --jobs

        with multiprocessing.get_context("fork").Pool(jobs) as pool:
            outs = pool.map(run_case, cases, chunksize=8)
    else:
        outs = [run_case(c) for c in cases]
    return {c.name: o for c, o in zip(cases, outs)}


def cell(counts: collections.Counter) -> str:
    if not counts:
        return "-"
    parts = [f"{counts[k]} {k}" for k in ("pass", "refused", "FAIL") if counts[k]]
    return ", ".join(parts)


def tables(results: dict) -> str:
    """One markdown table per kind: reads x changes, each cell the programs' outcomes over the places."""
    grid: dict = collections.defaultdict(collections.Counter)
    reasons: dict = collections.defaultdict(collections.Counter)
    for name, out in results.items():
        kind, _, read, change = name.split("-")
        grid[(kind, read, change)][outcome_class(out)] += 1
        if out.startswith("refused"):
            reasons[kind][out.removeprefix("refused: ")[:80]] += 1
    lines = []
    for kind in KINDS:
        if not any(k[0] == kind for k in grid):
            continue
        lines += [f"**{kind}**", "", "| read \\ change | " + " | ".join(CHANGES) + " |",
                  "| --- |" + " --- |" * len(CHANGES)]  # fmt: skip
        for read in READS:
            if any(grid.get((kind, read, c)) for c in CHANGES):
                lines.append(f"| {read} | " + " | ".join(cell(grid.get((kind, read, c), collections.Counter()))
                                                         for c in CHANGES) + " |")  # fmt: skip
        for reason, n in reasons[kind].most_common(3):
            lines.append(f"\nRefused ({n}): {reason}")
        lines.append("")
    return "\n".join(lines)


def totals(results: dict) -> collections.Counter:
    return collections.Counter(outcome_class(o) for o in results.values())


def write_docs(text: str) -> None:
    with open(DOCS) as f:
        doc = f.read()
    start, end = doc.index(BEGIN) + len(BEGIN), doc.index(END)
    with open(DOCS, "w") as f:
        f.write(doc[:start] + "\n" + text + "\n" + doc[end:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--failures", action="store_true", help="list every failing program")
    parser.add_argument("--docs", action="store_true", help="write docs/python-semantics.md's tables")
    parser.add_argument("--json", help="write {program: outcome} to this file")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--from-json", help="print (and with --docs write) the matrix of an earlier --json run")
    opts = parser.parse_args()
    if opts.from_json:
        with open(opts.from_json) as f:
            results = json.load(f)
    else:
        results = run(opts.kinds.split(","), opts.jobs)
    text = tables(results)
    print(text)
    t = totals(results)
    print(f"programs={sum(t.values())} pass={t['pass']} refused={t['refused']} FAIL={t['FAIL']}")
    if opts.failures:
        for name, out in sorted(results.items()):
            if outcome_class(out) == "FAIL":
                print(f"{name}: {out}")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    if opts.docs:
        write_docs(text)


if __name__ == "__main__":
    main()
