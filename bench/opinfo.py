"""PyTorch's OpInfo database through specengine and torch.compile, all ops (issue 12).

    python bench/opinfo.py [--samples 4 | --all-samples] [--reference] [--ops NAME,...] [--jobs N]
                           [--timeout S] [--json FILE] [--baseline FILE] [--write-baseline] [--no-torch-compile]

Every op of `op_db` that supports float32 on CPU runs its first samples (4 by default; `--all-samples`: all of
them; `--reference`: reference_inputs as well as sample_inputs) through `specengine.compile(fn, dynamic=True)`
and through `torch.compile(fn, backend=<the eager backend, counting graphs>, dynamic=True)`, each next to
eager on clones of the same inputs (tests/opinfo_run.py says how outcomes are decided). Prints:

- the counts per engine: pass / unsupported / crash / wrong, out of the testable ops (ops whose samples could
  be made), from the same run;
- the crashes and wrong results, one line each with the failure;
- per op: specengine's outcome and cache misses over its samples, torch.compile's beside them;
- against the baseline (bench/opinfo_baseline.json, same sample settings only): ops that passed there and no
  longer pass, and ops that pass but with more cache misses than there.

Writes the report as JSON (bench/opinfo_results.json or --json). `--write-baseline` also writes it to the
baseline file. Exit status 1 when there is a wrong result or a regression against the baseline.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent / "tests"))

import opinfo_run as R  # noqa: E402

ENGINES = ("specengine", "torch.compile")
_OPS: dict = {}


def _init() -> None:
    import logging
    import warnings

    import torch

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    for name in ("torch._dynamo", "torch._inductor", "torch._subclasses.fake_tensor", "specengine"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    _OPS.update(R.ops_by_name())


def _task(job: tuple) -> dict:
    name, engine, n, reference, timeout_s = job
    return R.run_op(_OPS[name], engine, n, reference, timeout_s).to_json()


def run_all(names: list[str], engines: tuple, n: int | None, reference: bool, jobs: int, timeout_s: int) -> dict:
    """{op: {engine: result}} for every op and engine; a worker that dies counts as a crash of its op."""
    ctx = multiprocessing.get_context("spawn")
    results: dict = {name: {} for name in names}
    with ctx.Pool(jobs, initializer=_init, maxtasksperchild=50) as pool:
        pending = [((name, engine), pool.apply_async(_task, ((name, engine, n, reference, timeout_s),)))
                   for engine in engines for name in names]  # fmt: skip
        for i, ((name, engine), res) in enumerate(pending):
            try:
                results[name][engine] = res.get(timeout=2 * timeout_s + 120)
            except Exception as e:  # noqa: BLE001 - a worker that died or hung
                results[name][engine] = R.OpResult(name, "crash", 0, 0, {}, f"worker: {e!r}").to_json()
            if (i + 1) % 50 == 0:
                print(f"  {i + 1}/{len(pending)} runs", file=sys.stderr, flush=True)
    return results


def summary(results: dict, engine: str) -> dict:
    outcomes = Counter(r[engine]["outcome"] for r in results.values() if engine in r)
    testable = sum(v for k, v in outcomes.items() if k != "untestable")
    return {"testable": testable, **{o: outcomes.get(o, 0) for o in R.OUTCOMES}}


def compare_baseline(results: dict, baseline: dict) -> list[str]:
    """Ops that passed in the baseline and no longer pass, or pass with more misses."""
    out = []
    for name, old in sorted(baseline["ops"].items()):
        old, new = old.get("specengine"), results.get(name, {}).get("specengine")
        if not old or not new or old["outcome"] != "pass":
            continue
        if new["outcome"] != "pass":
            out.append(f"{name}: passed in the baseline, now {new['outcome']}: {new['detail']}")
        elif new["misses"] > old["misses"]:
            out.append(f"{name}: {new['misses']} cache misses, {old['misses']} in the baseline")
    return out


def report(results: dict, engines: tuple, config: dict, regressions: list[str] | None) -> str:
    lines = [f"OpInfo, float32 CPU, dynamic=True, {config['samples_desc']}", ""]
    lines += ["| engine | testable | pass | unsupported | crash | wrong |", "|---|---|---|---|---|---|"]
    for engine in engines:
        s = summary(results, engine)
        pct = 100 * s["pass"] / max(s["testable"], 1)
        lines.append(f"| {engine} | {s['testable']} | {s['pass']} ({pct:.0f}%) | {s['unsupported']} | "
                     f"{s['crash']} | {s['wrong']} |")  # fmt: skip
    for engine in engines:
        bad = [(n, r[engine]) for n, r in sorted(results.items()) if r[engine]["outcome"] in ("crash", "wrong")]
        if bad:
            lines += ["", f"{engine}: crashes and wrong results"]
            lines += [f"  {r['outcome']:6} {n}: {r['detail'][:200]}" for n, r in bad]
    lines += ["", "per op: outcome and cache misses over its samples"]
    lines.append(f"  {'op':44} " + " ".join(f"{e:>24}" for e in engines))
    for name, r in sorted(results.items()):
        cells = " ".join(f"{r[e]['outcome'] + ' ' + str(r[e]['misses']):>24}" for e in engines)
        lines.append(f"  {name:44} {cells}")
    if regressions is not None:
        lines += ["", f"against the baseline: {len(regressions)} regressions"]
        lines += [f"  {r}" for r in regressions]
    return "\n".join(lines)


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=BENCH, check=True).stdout.strip()  # fmt: skip
    except Exception:  # noqa: BLE001
        return "unknown"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=4, help="samples per op (default 4)")
    p.add_argument("--all-samples", action="store_true", help="every sample of every op")
    p.add_argument("--reference", action="store_true", help="reference_inputs as well as sample_inputs")
    p.add_argument("--ops", default="", help="comma-separated op names (default: all)")
    p.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, 8))
    p.add_argument("--timeout", type=int, default=120, help="seconds per op and engine")
    p.add_argument("--json", default=str(BENCH / "opinfo_results.json"))
    p.add_argument("--baseline", default=str(BENCH / "opinfo_baseline.json"))
    p.add_argument("--write-baseline", action="store_true")
    p.add_argument("--no-torch-compile", action="store_true")
    a = p.parse_args()
    n = None if a.all_samples else a.samples
    engines = ENGINES[:1] if a.no_torch_compile else ENGINES
    names = sorted(R.op_name(op) for op in R.testable_ops())
    if a.ops:
        wanted = set(a.ops.split(","))
        names = [x for x in names if x in wanted]
    desc = ("all samples" if n is None else f"{n} samples per op") + (" + reference inputs" if a.reference else "")
    config = {"samples": n, "reference": a.reference, "samples_desc": desc, "commit": _commit()}
    start = time.time()
    results = run_all(names, engines, n, False, a.jobs, a.timeout)
    if a.reference:
        ref = run_all(names, engines, n, True, a.jobs, a.timeout)
        results = {k: {e: _merge(results[k][e], ref[k][e]) for e in engines} for k in names}
    config["seconds"] = round(time.time() - start, 1)
    regressions = None
    base_path = Path(a.baseline)
    if base_path.exists() and not a.write_baseline:
        baseline = json.loads(base_path.read_text())
        same = {k: baseline["config"].get(k) for k in ("samples", "reference")} == {
            "samples": n,
            "reference": a.reference,
        }
        regressions = compare_baseline(results, baseline) if same else None
    text = report(results, engines, config, regressions)
    print(text)
    doc = {"config": config, "summary": {e: summary(results, e) for e in engines}, "ops": results}
    Path(a.json).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    if a.write_baseline:
        base_path.write_text(baseline_json(doc))
    print(f"\n{len(names)} ops in {config['seconds']} s; report: {a.json}", file=sys.stderr)
    return 1 if summary(results, "specengine")["wrong"] or regressions else 0


def baseline_json(doc: dict) -> str:
    """The baseline: config, summary and per op and engine only the outcome and misses (one line per op)."""
    keep = ("outcome", "misses")
    ops = {n: {e: {k: r[k] for k in keep} for e, r in sorted(v.items())} for n, v in sorted(doc["ops"].items())}
    lines = [f"  {json.dumps(n)}: {json.dumps(v, sort_keys=True)}" for n, v in ops.items()]
    head = {"config": doc["config"], "summary": doc["summary"]}
    return json.dumps(head, sort_keys=True)[:-1] + ', "ops": {\n' + ",\n".join(lines) + "\n}}\n"


def _merge(a: dict, b: dict) -> dict:
    """One op's result over sample_inputs and reference_inputs together."""
    rank = {o: i for i, o in enumerate(("untestable",) + R.OUTCOMES)}
    worst = a if rank[a["outcome"]] >= rank[b["outcome"]] else b
    counts = {k: a["counts"].get(k, 0) + b["counts"].get(k, 0) for k in R.OUTCOMES}
    return {**worst, "samples": a["samples"] + b["samples"], "misses": a["misses"] + b["misses"], "counts": counts}


if __name__ == "__main__":
    sys.exit(main())
