"""Every benchmark in one run: specengine against eager, torch.compile and (optionally) Lightning Thunder.

Sections, each run in a child process of this one (so that one crash or timeout cannot take the others down):

1. overhead   per-call overhead of a cached call (seed, a 5-op elementwise chain, a 2-layer MLP; tiny CPU tensors)
2. scenarios  compile counts and wrong results over a scenario suite (bench/scenarios.py)
3. dispatch   dispatch cost with 1, 10 and 100 cache entries
4. gpt        first-call latency and steady-state forward time of a GPT-2-small-shaped model (tests/gpt.py)
5. solver     the share of compile time spent in z3 (from sections 2 and 4)
6. hotpath    cached-call time / eager of a 32-layer width-4 GPT (bench/module_overhead.py) and of the seed
7. models     Hugging Face transformers families (tiny configs): compiles, first call, cached call, generate

Prints one markdown table per section to stdout (progress goes to stderr) and writes a JSON copy to
bench/results.json (or --json PATH). All figures come from the same run on the same machine; ratios are to
eager. Lightning Thunder's columns say "not installed" when `import thunder` fails. A benchmark, not a test:
it prints figures and asserts nothing about speed.

    python bench/run_all.py [--quick] [--json PATH] [--sections overhead,scenarios,dispatch,gpt,models]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import timeit
import warnings
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import torch

import specengine

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))  # bench/ modules, also when this file is imported rather than run

import peers  # noqa: E402
import scenarios  # noqa: E402
from overhead import seed  # noqa: E402

SECTIONS = ("overhead", "scenarios", "dispatch", "gpt", "hotpath", "models")
TIMEOUT_S = {True: {"overhead": 170, "scenarios": 170, "dispatch": 170, "gpt": 170, "hotpath": 170, "models": 300},
             False: {"overhead": 900, "scenarios": 900, "dispatch": 900, "gpt": 1500, "hotpath": 600,
                     "models": 1500}}  # fmt: skip


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def quiet() -> None:
    """Keep the logs of peers (dynamo's failed fake-tensor runs of calls that raise eagerly too) off the output."""
    warnings.simplefilter("ignore")
    for name in ("torch._subclasses.fake_tensor", "torch._dynamo", "torch._inductor", "specengine"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


# --- 1. per-call overhead ------------------------------------------------------------------------------------


def chain5(a, b):
    return ((a + b) * a - b).exp() * 0.5


def mlp(x, w1, b1, w2, b2):
    return torch.relu(x @ w1 + b1) @ w2 + b2


def overhead_programs() -> list[tuple[str, Callable, tuple]]:
    torch.manual_seed(0)
    r = torch.randn
    return [
        ("seed `a * b.size(0)`, (2,2)", seed, (r(2, 2), r(2, 2))),
        ("5-op elementwise chain, (4,4)", chain5, (r(4, 4), r(4, 4))),
        ("2-layer MLP, x (2,8), hidden 16, out 4", mlp, (r(2, 8), r(8, 16), r(16), r(16, 4), r(4))),
    ]


def overhead_engines() -> list[peers.Engine]:
    return [peers.eager(), peers.spec(True), peers.spec(None), peers.torch_compile(True, counting=False),
            peers.torch_compile(None, counting=False), peers.thunder("symbolic values"),
            peers.thunder("constant values")]  # fmt: skip


def section_overhead(quick: bool) -> dict:
    torch.set_num_threads(1)
    repeat, number = (10, 500) if quick else (20, 2000)
    engines = overhead_engines()
    rows = []
    for label, fn, args in overhead_programs():
        expected = fn(*args)
        cells: dict[str, dict] = {}
        live: dict[str, Callable] = {}
        for engine in engines:
            if engine.unavailable:
                cells[engine.key] = {"unavailable": engine.unavailable}
                continue
            try:
                start = time.perf_counter()
                cfn = engine.build(fn)
                torch.testing.assert_close(cfn(*args), expected)
                cells[engine.key] = {"first_call_s": time.perf_counter() - start}
                for _ in range(200):
                    cfn(*args)
                live[engine.key] = cfn
            except Exception as e:  # noqa: BLE001 - a failing engine is reported in its cell
                cells[engine.key] = {"error": peers.error_text(e)}
        samples: dict[str, list[float]] = {k: [] for k in live}
        for _ in range(repeat):  # engines interleaved, so that load on the machine affects each alike
            for key, cfn in live.items():
                samples[key].append(timeit.timeit(lambda cfn=cfn, args=args: cfn(*args), number=number) / number * 1e6)
        for key, cfn in live.items():
            cells[key].update(us=min(samples[key]), median_us=statistics.median(samples[key]),
                              compiles=next(e for e in engines if e.key == key).count(cfn))  # fmt: skip
        for engine in engines:
            log(f"  {label} / {engine.label}: {cells[engine.key]}")
        rows.append({"program": label, "cells": cells})
    return {"engines": {e.key: e.label for e in engines}, "rows": rows, "repeat": repeat, "number": number}


# --- 2. scenarios --------------------------------------------------------------------------------------------


def scenario_engines() -> list[peers.Engine]:
    return [peers.spec(True), peers.spec(None), peers.torch_compile(True, counting=True),
            peers.torch_compile(None, counting=True), peers.thunder("symbolic values"),
            peers.thunder("constant values")]  # fmt: skip


def section_scenarios(quick: bool) -> dict:
    torch.set_num_threads(1)
    engines = scenario_engines()
    _warm_up(engines)  # one-time imports would otherwise count as the first scenario's compile time
    return scenarios.run_suite(engines, quick, log)


# --- 3. dispatch ---------------------------------------------------------------------------------------------


def dispatch_f(a, b):
    return a * b


def _dispatch_one(engine: peers.Engine, n_entries: int, number: int) -> dict:
    """bench/dispatch.py's measurement, for any engine: one function compiled for `n_entries` static shapes.

    oldest/newest: a cached call on the first or last shape compiled, minus the computation alone (specengine:
    `dispatch.measure`, the entry's computation; torch.compile: the FX graph its counting backend received;
    Thunder: eager). round robin: calls cycling through all the shapes, minus eager on the same shapes.
    """
    from dispatch import measure

    graphs: list[Callable] = []
    if engine.key == "tc_static":
        from torch import _dynamo

        peers.raise_dynamo_limits()
        _dynamo.reset()

        def backend(gm, example_inputs):
            graphs.append(gm.forward)
            return gm.forward

        cfn = torch.compile(dispatch_f, backend=backend, dynamic=False)
        count = lambda: len(graphs)  # noqa: E731
    else:
        cfn = engine.build(dispatch_f)
        count = lambda: engine.count(cfn)  # noqa: E731
    inputs = [(torch.randn(k + 1, 2), torch.randn(k + 1, 2)) for k in range(n_entries)]
    for a, b in inputs:
        cfn(a, b)
    compiles = count()
    if engine.key == "spec_static":
        out: dict[str, Any] = measure(n_entries, number)
    else:
        out = {}
        for label, idx in (("oldest", 0), ("newest", -1)):
            a, b = inputs[idx]
            call = _best(lambda a=a, b=b: cfn(a, b), number)
            comp = graphs[idx] if graphs else dispatch_f
            out[label] = call - _best(lambda a=a, b=b, comp=comp: comp(a, b), number)
        out["call"] = _best(lambda: cfn(*inputs[-1]), number)
    rounds = max(1, number // n_entries)

    def round_robin(fn: Callable) -> Callable:
        def run() -> None:
            for a, b in inputs:
                fn(a, b)

        return run

    out["rr_call"] = _best(round_robin(cfn), rounds) / n_entries
    out["rr_lookup"] = out["rr_call"] - _best(round_robin(dispatch_f), rounds) / n_entries
    out["compiles"] = compiles
    if count() != compiles:
        out["note"] = f"recompiled while timing ({compiles} -> {count()})"
    return out


def _best(fn: Callable, number: int) -> float:
    fn()
    return min(timeit.repeat(fn, repeat=5, number=number)) / number * 1e6


def section_dispatch(quick: bool) -> dict:
    torch.set_num_threads(1)
    number = 1000 if quick else 20000
    engines = [peers.spec(False), peers.torch_compile(False, counting=True), peers.thunder("constant values")]
    engines[1].label += ", counting backend"
    rows = []
    for engine in engines:
        for n in (1, 10, 100):
            if engine.unavailable:
                cell: dict[str, Any] = {"unavailable": engine.unavailable}
            else:
                try:
                    cell = _dispatch_one(engine, n, number)
                except Exception as e:  # noqa: BLE001
                    cell = {"error": peers.error_text(e)}
            log(f"  {engine.label}, {n} entries: {cell}")
            rows.append({"engine": engine.key, "label": engine.label, "entries": n, **cell})
    return {"rows": rows, "number": number}


# --- 4. GPT first call and steady state ----------------------------------------------------------------------


def _warm_up(engines: list[peers.Engine]) -> None:
    """One trivial compile per engine, so that one-time imports and initialization are not a model's first call."""
    for engine in engines:
        if not engine.unavailable:
            try:
                engine.build(lambda x: x * 2 + 1)(torch.randn(3))
            except Exception:  # noqa: BLE001 - the model's own compile reports the failure
                pass


def section_gpt(quick: bool, vocab: int, threads: int) -> dict:
    gpt = scenarios.load_test_gpt()
    # 1 thread by default: when other processes share the cores, OpenMP threads waiting for each other make
    # every engine several times slower, and unevenly so.
    torch.set_num_threads(threads)
    if quick:
        cfg = gpt.GPTConfig(vocab_size=256, block_size=64, n_layer=2, n_head=4, n_embd=64)
        shape, shape2, iters = (2, 32), (3, 17), 20  # batch 2 first: no size-1 recompile in the smoke test
    else:
        cfg = gpt.gpt2_small_config(vocab_size=vocab)
        shape, shape2, iters = (1, 64), (2, 33), 20
    torch.manual_seed(0)
    model = gpt.GPT(cfg).eval()
    idx, idx2 = torch.randint(0, cfg.vocab_size, shape), torch.randint(0, cfg.vocab_size, shape2)
    engines = [peers.spec(True), peers.torch_compile(True, counting=False), peers.thunder("symbolic values")]
    _warm_up(engines)
    rows: dict[str, dict] = {}
    live: dict[str, Callable] = {}
    with torch.no_grad():
        start = time.perf_counter()
        ref = model(idx)
        rows["eager"] = {"label": "eager", "first_call_s": time.perf_counter() - start}
        ref2 = model(idx2)
        live["eager"] = model
        for engine in engines:
            row: dict[str, Any] = {"label": engine.label}
            rows[engine.key] = row
            if engine.unavailable:
                row["unavailable"] = engine.unavailable
                continue
            try:
                start = time.perf_counter()
                cfn = engine.build(model)
                out = cfn(idx)
                row["first_call_s"] = time.perf_counter() - start
                row["matches_eager"] = _matches(out, ref)
                if isinstance(cfn, (specengine.CompiledFunction, specengine.CompiledModule)):
                    row["stats"] = dict(specengine.cache_entries(cfn)[0].stats)
                start = time.perf_counter()
                out2 = cfn(idx2)
                row["second_shape_s"] = time.perf_counter() - start
                row["matches_eager"] = row["matches_eager"] and _matches(out2, ref2)
                row["compiles"] = engine.count(cfn)
                live[engine.key] = cfn
            except Exception as e:  # noqa: BLE001 - e.g. an op specengine does not support yet
                row["error"] = peers.error_text(e)
            log(f"  GPT {engine.label}: {row}")
        times: dict[str, list[float]] = {k: [] for k in live}
        for fn in live.values():
            fn(idx)
        for _ in range(iters):  # interleaved, so that load on the machine affects every engine alike
            for key, fn in live.items():
                start = time.perf_counter()
                fn(idx)
                times[key].append(time.perf_counter() - start)
    for key, ts in times.items():
        rows[key]["steady_ms"] = statistics.median(ts) * 1e3
        rows[key]["steady_min_ms"] = min(ts) * 1e3
    config = {k: getattr(cfg, k) for k in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd")}
    params = sum(p.numel() for p in model.parameters())
    return {"config": config, "params": params, "shape": shape, "shape2": shape2, "iters": iters, "rows": rows,
            "threads": torch.get_num_threads()}  # fmt: skip


def _matches(got: Any, expected: Any) -> bool:
    try:
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    except Exception:  # noqa: BLE001
        return False
    return True


# --- running the sections ------------------------------------------------------------------------------------


# --- 6. hot path: module structure guards and the seed ---------------------------------------------------------


def section_hotpath(quick: bool) -> dict:
    import module_overhead
    from overhead import best_us

    gpt = module_overhead.measure(32, repeat=3 if quick else 7, number=10 if quick else 100)
    a, b = torch.randn(2, 2), torch.randn(1, 2)
    cfn = specengine.compile(seed, dynamic=True)
    repeat, number = (5, 2000) if quick else (7, 20000)
    seed_eager, seed_spec = best_us(seed, (a, b), repeat, number), best_us(cfn, (a, b), repeat, number)
    return {"gpt": gpt, "seed": {"eager_us": seed_eager, "specengine_us": seed_spec, "ratio": seed_spec / seed_eager}}


def render_hotpath(res: dict) -> list[str]:
    out = ["### 6. Hot path: cached-call time / eager", ""]
    if err := _section_error(res):
        return out + [err, ""]
    g, s = res["gpt"], res["seed"]
    out += table(["program", "eager us/call", "specengine us/call", "specengine / eager", "goal"],
                 [[f"GPT, {g['layers']} layers of width 4 (bench/module_overhead.py)", f"{g['eager_us']:.0f}",
                   f"{g['specengine_us']:.0f}", f"{g['ratio']:.2f}x", "<= 0.9x"],
                  ["seed a * b.size(0) (bench/overhead.py)", f"{s['eager_us']:.2f}", f"{s['specengine_us']:.2f}",
                   f"{s['ratio']:.2f}x", "<= 1.4x"]])  # fmt: skip
    return out + ["", "Both measured in this section's process, specengine with dynamic=True, 1 thread.", ""]


def run_child(section: str, opts: argparse.Namespace) -> None:
    quiet()
    if section == "overhead":
        result = section_overhead(opts.quick)
    elif section == "scenarios":
        result = section_scenarios(opts.quick)
    elif section == "dispatch":
        result = section_dispatch(opts.quick)
    elif section == "hotpath":
        result = section_hotpath(opts.quick)
    elif section == "models":
        import models  # bench/models.py

        result = models.run(opts.quick)
    else:
        result = section_gpt(opts.quick, opts.vocab, opts.gpt_threads)
    Path(opts.out).write_text(json.dumps(result, default=str))


def run_section(section: str, opts: argparse.Namespace, env: dict, workdir: Path) -> dict:
    out = workdir / f"{section}.json"
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", section, "--out", str(out), "--vocab",
           str(opts.vocab), "--gpt-threads", str(opts.gpt_threads)] + (["--quick"] if opts.quick else [])  # fmt: skip
    timeout = TIMEOUT_S[opts.quick][section]
    log(f"[{section}] running (timeout {timeout} s)")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=sys.stderr, start_new_session=True)
    try:
        rc = proc.wait(timeout=timeout)
        error = None if rc == 0 else f"failed (exit status {rc})"
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the child and its compile workers: the group this run started
        proc.wait()
        error = f"timed out after {timeout} s"
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result: dict[str, Any] = json.loads(out.read_text()) if error is None and out.exists() else {}
    if error is None and not result:
        error = "failed (no result)"
    result["_run"] = {"wall_s": wall, "cpu_s": cpu, "error": error}
    log(f"[{section}] {'done' if error is None else error} in {wall:.1f} s wall, {cpu:.1f} s CPU")
    return result


def machine() -> dict:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import z3

        z3v = z3.get_version_string()
    except Exception:  # noqa: BLE001
        z3v = "unknown"
    from importlib.metadata import version

    return {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "torch": torch.__version__, "z3": z3v, "specengine": version("specengine"),
            "thunder": peers.thunder_version()}  # fmt: skip


# --- markdown ------------------------------------------------------------------------------------------------


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def _section_error(result: dict) -> str | None:
    err = result.get("_run", {}).get("error")
    return f"**section {err}** (see stderr above)" if err else None


def render_overhead(res: dict) -> list[str]:
    out = ["### 1. Per-call overhead of a cached call", ""]
    if err := _section_error(res):
        return out + [err, ""]
    engines = res["engines"]
    rows = []
    for row in res["rows"]:
        base = row["cells"].get("eager", {}).get("us")
        cells = [row["program"]]
        for key in engines:
            c = row["cells"][key]
            if "unavailable" in c:
                cells.append(c["unavailable"])
            elif "error" in c:
                cells.append(c["error"])
            elif key == "eager" or not base:
                cells.append(f"{c['us']:.2f}")
            else:
                cells.append(f"{c['us']:.2f} ({c['us'] / base:.2f}x)")
        rows.append(cells)
    out += table(["program"] + list(engines.values()), rows)
    return out + ["", f"us/call: the best of {res['repeat']} timings of {res['number']} calls each, engines "
                      "interleaved, 1 thread; in parentheses the ratio to eager (lower is better). torch.compile "
                      "uses its default backend (inductor).", ""]  # fmt: skip


def _scenario_cell(r: dict, notes: list[str]) -> str:
    if "unavailable" in r:
        return r["unavailable"]
    if r.get("build_error"):
        return f"error: {r['build_error']}"
    if r.get("unsupported"):
        return r["unsupported"]
    misses = "?" if r["misses"] is None else r["misses"]
    cell = f"{misses} / {r['wrong']}"
    if r.get("breaks"):
        cell += f" ({r['breaks']} graph break{'s' if r['breaks'] > 1 else ''})"
    for e in r["errors"]:  # one footnote per distinct error text
        if e not in notes:
            notes.append(e)
        cell += f" [{notes.index(e) + 1}]"
    return cell


def render_scenarios(res: dict) -> list[str]:
    out = ["### 2. Compile counts and wrong results (misses / wrong)", ""]
    if err := _section_error(res):
        return out + [err, ""]
    engines = res["engines"]
    notes: list[str] = []
    rows = []
    totals = {k: [0, 0, 0] for k in engines}  # misses, wrong, scenarios with an error or unsupported op
    for sc in res["scenarios"]:
        cells = [sc["name"], sc["what"], str(sc["calls"])]
        for key in engines:
            r = sc["results"][key]
            cells.append(_scenario_cell(r, notes))
            if "unavailable" not in r:
                totals[key][0] += r.get("misses") or 0
                totals[key][1] += r.get("wrong", 0)
                totals[key][2] += bool(r.get("unsupported") or r.get("build_error"))
        rows.append(cells)
    calls = sum(sc["calls"] for sc in res["scenarios"])
    total = ["**total**", f"{len(res['scenarios'])} scenarios", str(calls)]
    for key in engines:
        if all("unavailable" in sc["results"][key] for sc in res["scenarios"]):
            total.append(res["scenarios"][0]["results"][key]["unavailable"] if res["scenarios"] else "n/a")
        else:
            m, w, u = totals[key]
            total.append(f"**{m} / {w}**" + (f" ({u} unsupported)" if u else ""))
    rows.append(total)
    out += table(["scenario", "what", "calls"] + list(engines.values()), rows)
    out += ["", "misses = compiles (specengine: cache misses; torch.compile: graphs handed to a counting backend "
                "that runs them as is, so a graph break counts too; Thunder: `thunder.cache_misses`). wrong = calls "
                "whose result differs from eager under `torch.testing.assert_close`, or where exactly one of eager and "
                "the engine raised (an `UnsupportedOpError` is shown as unsupported instead). Recompile limits are "
                "raised to 1000 everywhere. Lower is better. The data-dependent scenarios (masks, `.item()`, unique, "
                "MoE routing) run torch.compile with `capture_scalar_outputs=True` and "
                "`capture_dynamic_output_shape_ops=True` (except the 'dynamo defaults' row); graph breaks it takes "
                "are counted beside its graphs."]  # fmt: skip
    if notes:
        out += ["", "Errors (where the engine raised and eager did not, or the result differed):", ""]
        out += [f"[{i}] {n}  " for i, n in enumerate(notes, 1)]
    return out + [""]


def render_dispatch(res: dict) -> list[str]:
    out = ["### 3. Dispatch as the cache grows", ""]
    if err := _section_error(res):
        return out + [err, ""]
    base: dict[str, float] = {}
    rows = []
    for r in res["rows"]:
        cells = [r["label"], str(r["entries"])]
        if "unavailable" in r or "error" in r:
            rows.append(cells + [r.get("unavailable") or r["error"]] + [""] * 5)
            continue
        worst = max(r["oldest"], r["newest"])
        if r["entries"] == 1:
            base[r["engine"]] = max(r["newest"], 1e-9)
        ratio = f"{worst / base[r['engine']]:.2f}" if r["engine"] in base else "n/a"
        rows.append(cells + [f"{r['call']:.2f}", f"{r['oldest']:.2f} / {r['newest']:.2f}", ratio,
                             f"{r['rr_call']:.2f} / {r['rr_lookup']:.2f}",
                             str(r.get("compiles", "?")) + (f" ({r['note']})" if r.get("note") else "")])  # fmt: skip
    out += table(["engine", "entries", "call us (newest)", "lookup us: oldest / newest entry",
                  "worst lookup x 1-entry", "round robin: call / lookup us", "compiles"], rows)  # fmt: skip
    return out + ["", f"One function `a * b` compiled for 1, 10 and 100 static shapes; cached calls on (1,2) to "
                      f"(100,2) tensors ({res['number']} calls per timing, best of 5, 1 thread). lookup = a cached "
                      "call minus the computation alone (specengine: the entry's computation, as bench/dispatch.py; "
                      "torch.compile: the FX graph its counting backend received; Thunder: eager). Round robin: calls "
                      "cycling through every compiled shape, lookup = minus eager on the same shapes.", ""]  # fmt: skip


def render_gpt(res: dict) -> list[str]:
    out = ["### 4. GPT: first call and steady state", ""]
    if err := _section_error(res):
        return out + [err, ""]
    rows_in = res["rows"]
    eager = rows_in["eager"].get("steady_min_ms")
    rows = []
    for key, r in rows_in.items():
        if "unavailable" in r or "error" in r:
            rows.append([r["label"], r.get("unavailable") or r["error"]] + [""] * 6)
            continue
        st = r.get("stats")
        stages = (f"{st['trace_s'] * 1e3:.0f} / {st['solve_s'] * 1e3:.0f} / {st['codegen_s'] * 1e3:.0f}"
                  if st else "")  # fmt: skip
        steady, best = r.get("steady_ms"), r.get("steady_min_ms")
        ratio = f"{best / eager:.3f}" if best and eager else ""
        speed = f"{eager / best:.3f}" if best and eager else ""
        second = f"{r['second_shape_s']:.3f}" if "second_shape_s" in r else ""
        checks = "" if key == "eager" else f"{r.get('compiles', '?')}, {'yes' if r.get('matches_eager') else 'NO'}"
        rows.append([r["label"], f"{r['first_call_s']:.2f}", stages, second,
                     f"{steady:.2f} ({best:.2f})" if steady else "", ratio, speed, checks])  # fmt: skip
    out += table(["engine", "first call s", "trace / solve / codegen ms", f"then a call at {tuple(res['shape2'])} s",
                  f"steady ms at {tuple(res['shape'])}: median (min)", "time x eager",
                  "speed vs eager (eager / engine)", "compiles, matches eager"], rows)  # fmt: skip
    cfg = res["config"]
    return out + ["", f"tests/gpt.py GPT: {cfg['n_layer']} layers, width {cfg['n_embd']}, {cfg['n_head']} heads, "
                      f"vocabulary {cfg['vocab_size']} ({res['params'] / 1e6:.1f} M parameters), eval mode, no_grad, "
                      f"{res['threads']} thread(s). First call = compile + run at {tuple(res['shape'])}, after one "
                      f"trivial compile per engine (one-time initialization excluded); then one call at "
                      f"{tuple(res['shape2'])} (compiles is the count after it). Steady state: "
                      f"{res['iters']} calls per engine, engines interleaved; the ratios use the minimum, the figure "
                      "least disturbed by other load on the machine. torch.compile uses inductor.", ""]  # fmt: skip


def render_solver(scen: dict, gpt: dict) -> list[str]:
    out = ["### 5. Solver share: z3 time / compile time (specengine)", ""]
    if _section_error(scen) and _section_error(gpt):
        return out + ["**no data** (sections 2 and 4 failed)", ""]
    rows = []
    sums = {k: dict.fromkeys(("compile_s", "z3_s", "z3_calls", "max"), 0.0) for k in ("spec_dyn", "spec_auto")}

    def cells(st: dict | None) -> list[str]:
        if not st or not st.get("compile_s"):
            return ["no entry", "", "", ""]
        share = st["z3_s"] / st["compile_s"] * 100
        return [f"{st['compile_s'] * 1e3:.1f}", f"{st['z3_s'] * 1e3:.1f} ({int(st['z3_calls'])})", f"{share:.1f}%",
                f"{st.get('z3_max_query_s', 0.0) * 1e3:.2f}"]  # fmt: skip

    def add(key: str, st: dict | None) -> None:
        if st and st.get("compile_s"):
            s = sums[key]
            s["compile_s"] += st["compile_s"]
            s["z3_s"] += st["z3_s"]
            s["z3_calls"] += st["z3_calls"]
            s["max"] = max(s["max"], st.get("z3_max_query_s", 0.0))

    for sc in scen.get("scenarios", []):
        st = {k: sc["results"].get(k, {}).get("stats") for k in sums}
        for k, v in st.items():
            add(k, v)
        rows.append([sc["name"]] + cells(st["spec_dyn"]) + cells(st["spec_auto"])[:3])
    g = gpt.get("rows", {}).get("spec_dyn", {}).get("stats")
    if g:
        add("spec_dyn", g)
        rows.append([f"GPT ({gpt['config']['n_layer']} layers, width {gpt['config']['n_embd']}), first compile"]
                    + cells(g) + ["", "", ""])  # fmt: skip
    overall = {k: {**s, "z3_max_query_s": s["max"]} for k, s in sums.items()}
    rows.append(["**overall**"] + cells(overall["spec_dyn"]) + cells(overall["spec_auto"])[:3])
    out += table(["compile", "dynamic=True: compile ms", "z3 ms (queries)", "z3 share", "slowest query ms",
                  "dynamic=None: compile ms", "z3 ms (queries)", "z3 share"], rows)  # fmt: skip
    return out + ["", "Summed over every entry a scenario compiled (entries later replaced by a subsuming one "
                      "included). compile = trace + solve (z3 included) + codegen.", ""]  # fmt: skip


def render_models(res: dict) -> list[str]:
    import models  # bench/models.py

    head, *rest = models.render(res) if not _section_error(res) else ["", _section_error(res), ""]
    return ["### 7. Hugging Face transformers models (tiny configs)", *rest]


def _init() -> dict:
    """The one-time cost of a fresh process (bench/compile.py's measurement, in subprocesses)."""
    import compile as compile_bench  # bench/compile.py

    try:
        return compile_bench.measure_init()
    except Exception as e:  # noqa: BLE001 - reported in the table instead
        return {"error": repr(e)}


def render_init(r: dict) -> list[str]:
    if "init_s" not in r:
        return [f"Init: not measured ({r.get('error', 'not run')}).", ""]
    return [f"Init (one-time cost of a fresh process, best of 3): `import torch` {r['import_torch_s']:.2f} s; beyond "
            f"it, `import specengine` {r['import_specengine_s']:.2f} s + the seed's first compile "
            f"{r['first_compile_s']:.2f} s = **{r['init_s']:.2f} s** (goal <= 0.30 s).", ""]  # fmt: skip


def render(meta: dict, results: dict[str, dict]) -> str:
    m = meta["machine"]
    lines = [f"## specengine benchmarks ({'--quick' if meta['quick'] else 'full run'})", "",
             f"`{meta['command']}` on {m['cpu']} ({m['cores']} cores), {m['platform']}; Python {m['python']}, "
             f"torch {m['torch']}, z3 {m['z3']}, specengine {m['specengine']}, Lightning Thunder: {m['thunder']}. "
             f"{meta['date']}; {meta['wall_s']:.0f} s wall in all.", ""]  # fmt: skip
    lines += render_init(meta.get("init") or {})
    empty: dict = {"_run": {"error": "not run"}}
    get = lambda s: results.get(s, empty)  # noqa: E731
    lines += render_overhead(get("overhead"))
    lines += render_scenarios(get("scenarios"))
    lines += render_dispatch(get("dispatch"))
    lines += render_gpt(get("gpt"))
    lines += render_solver(get("scenarios"), get("gpt"))
    lines += render_hotpath(get("hotpath"))
    lines += render_models(get("models"))
    runs = ", ".join(f"{s} {r['_run']['wall_s']:.0f} s ({r['_run']['cpu_s']:.0f} s CPU)"
                     for s, r in results.items())  # fmt: skip
    lines += [f"Section times: {runs}.", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and few repetitions (CI smoke test)")
    parser.add_argument("--json", default=str(BENCH / "results.json"), help="where to write the JSON copy")
    parser.add_argument("--sections", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}")
    parser.add_argument("--vocab", type=int, default=50257, help="GPT-2-small vocabulary (8192 if memory is tight)")
    parser.add_argument("--gpt-threads", type=int, default=1, help="torch threads for the GPT section (default 1)")
    parser.add_argument("--child", choices=SECTIONS, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        run_child(opts.child, opts)
        return 0
    sections = [s for s in opts.sections.split(",") if s]
    if unknown := set(sections) - set(SECTIONS):
        parser.error(f"unknown sections {sorted(unknown)}")
    start = time.perf_counter()
    workdir = Path(tempfile.mkdtemp(prefix="specengine-bench-"))
    # A fresh inductor cache for this run: torch.compile's compile times do not depend on earlier runs.
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(workdir / "inductor")}
    results: dict[str, dict] = {}
    try:
        for section in sections:
            results[section] = run_section(section, opts, env, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    meta = {"quick": opts.quick, "command": "python bench/run_all.py" + (" --quick" if opts.quick else ""),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
            "init": _init(), "wall_s": time.perf_counter() - start}  # fmt: skip
    markdown = render(meta, results)
    print(markdown)
    Path(opts.json).write_text(json.dumps({"meta": meta, "sections": results, "markdown": markdown}, indent=1))
    log(f"JSON written to {opts.json}")
    failed = [s for s, r in results.items() if r["_run"]["error"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
