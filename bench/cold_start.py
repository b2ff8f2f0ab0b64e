"""Cold start with the persistent cache (issue 23): a new process's first call served from disk, against a trace
and against a warm call, with each figure beside its goal or anchor, in one run.

Each measurement runs in a fresh child process (`--child`): first with an empty cache directory (specengine cold:
it traces and saves), then again (specengine from disk: 0 traces). The example GPT (width 128, 2 layers, a 16x64
batch) and GPT-2 small (12 layers, width 768, a 1x64 batch; `--no-gpt2` skips it) are measured under
`torch.no_grad()`. In the same run, `torch.compile` on the same programs: cold (its process saves
`torch.compiler.save_cache_artifacts()`), then in a new process with an empty Inductor cache directory that loads
them (`torch.compiler.load_cache_artifacts`), so only the Mega-Cache carries over; `--no-torch-compile` skips it.
Torch's own first call in a new process is slower than its warm calls (page faults, lazy kernel and library set-up):
the eager row shows that floor, and a last child loads from disk after one eager call of the model, so its ratio
is the load's own overhead.
Children run as a user's process does, with bytecode caches: PYTHONDONTWRITEBYTECODE is dropped from their
environment unless `--no-bytecode`.

    python bench/cold_start.py [--no-gpt2] [--no-torch-compile] [--repeat 5] [--threads 1] [--no-bytecode]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

MODELS = {
    "gpt-d128": dict(vocab_size=128, block_size=64, n_layer=2, n_head=4, n_embd=128, batch=16, seq=64),
    "gpt2-small": dict(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768, batch=1, seq=64),
}


def child(model: str, engine: str, repeat: int, threads: int, artifacts: str) -> dict:
    """One fresh process: import times, the first call, the best warm call, traces and modules imported."""
    t0 = time.perf_counter()
    import torch  # noqa: PLC0415 - timed

    t1 = time.perf_counter()
    import specengine  # noqa: PLC0415 - timed
    from specengine.examples.gpt import GPT, GPTConfig  # noqa: PLC0415

    t2 = time.perf_counter()
    torch.set_num_threads(threads)
    spec = dict(MODELS[model])
    batch, seq = spec.pop("batch"), spec.pop("seq")
    torch.manual_seed(0)
    m = GPT(GPTConfig(**spec)).eval()
    idx = torch.randint(0, spec["vocab_size"], (batch, seq))
    if engine.startswith("specengine"):
        fn = specengine.compile(m)
        if engine == "specengine-after-eager":  # torch's own first-call costs paid before the timed call
            with torch.no_grad():
                m(idx)
    elif engine == "eager":
        fn = m
    else:
        loaded = bool(artifacts and os.path.exists(artifacts))
        if loaded:
            with open(artifacts, "rb") as f:
                torch.compiler.load_cache_artifacts(f.read())
        fn = torch.compile(m)
    with torch.no_grad():
        before = set(sys.modules)
        s = time.perf_counter()
        fn(idx)
        first = time.perf_counter() - s
        imported = sorted(n for n in set(sys.modules) - before if n in ("z3", "torch._refs", "sympy"))
        warm = []
        for _ in range(repeat):
            s = time.perf_counter()
            fn(idx)
            warm.append(time.perf_counter() - s)
    out = {"import_torch": t1 - t0, "import_specengine": t2 - t1, "first": first, "warm": min(warm),
           "imported": imported}  # fmt: skip
    if engine.startswith("specengine"):
        out["traces"] = specengine.cache_misses(fn)
        out["origin"] = sorted({e.stats["origin"] for e in specengine.cache_entries(fn)})
    elif engine != "eager":
        out["loaded"] = loaded
    if engine == "torch.compile" and artifacts and not loaded:
        saved = torch.compiler.save_cache_artifacts()
        if saved is not None:
            with open(artifacts, "wb") as f:
                f.write(saved[0])
    return out


def _spawn(model: str, engine: str, env: dict, args: argparse.Namespace, artifacts: str = "") -> dict:
    cmd = [sys.executable, __file__, "--child", model, engine, str(args.repeat), str(args.threads), artifacts]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        return {"error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"}
    return json.loads(p.stdout.strip().splitlines()[-1])


def _ms(v: float) -> str:
    return f"{v * 1e3:.1f} ms"


def measure(model: str, args: argparse.Namespace, base_env: dict) -> list[tuple[str, str, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**base_env, "SPECENGINE_CACHE_DIR": os.path.join(tmp, "cache"), "XDG_CONFIG_HOME": os.path.join(tmp, "cfg"),
               "TORCHINDUCTOR_CACHE_DIR": os.path.join(tmp, "inductor")}  # fmt: skip
        cold = _spawn(model, "specengine", env, args)
        disk = _spawn(model, "specengine", env, args)
        rows = []
        if "error" in cold or "error" in disk:
            return [(f"{model}: specengine", cold.get("error", "") or disk.get("error", ""), "")]
        over = disk["first"] - disk["warm"]
        rows += [
            (f"{model}: import torch / import specengine (beyond torch)",
             f"{disk['import_torch']:.2f} s / {disk['import_specengine']:.2f} s", "specengine <= 0.2 s"),
            (f"{model}: specengine cold first call (trace, {cold['traces']} trace)", _ms(cold["first"]), ""),
            (f"{model}: specengine first call from disk ({disk['traces']} traces, {'/'.join(disk['origin'])})",
             _ms(disk["first"]), "0 traces"),
            (f"{model}: warm call", _ms(disk["warm"]), ""),
            (f"{model}: from disk / warm", f"{disk['first'] / disk['warm']:.2f}x, +{_ms(over)}",
             "<= 1.5x (gpt-d128); <= +100 ms (gpt2-small); Mega-Cache +780 ms, precompile ~300 ms"),
            (f"{model}: modules the disk load imported", ", ".join(disk["imported"]) or "none", "no z3, torch._refs"),
        ]  # fmt: skip
        eager = _spawn(model, "eager", env, args)
        if "error" not in eager:  # torch's own first call in a new process: the floor of any first call
            rows.append((f"{model}: eager first call in a new process / eager warm",
                         f"{eager['first'] / eager['warm']:.2f}x, +{_ms(eager['first'] - eager['warm'])}",
                         "the floor of the ratio above"))  # fmt: skip
        after = _spawn(model, "specengine-after-eager", env, args)
        if "error" not in after:  # the load's own cost: one eager call first pays torch's first-call costs
            rows.append((f"{model}: from disk / warm, after one eager call in that process ({after['traces']} traces)",
                         f"{after['first'] / after['warm']:.2f}x, +{_ms(after['first'] - after['warm'])}",
                         "the disk load's own overhead"))  # fmt: skip
        if not args.no_torch_compile:
            rows += _torch_compile_rows(model, args, env, tmp, over)
        return rows


def _torch_compile_rows(model: str, args: argparse.Namespace, env: dict, tmp: str, ours: float) -> list:
    """torch.compile cold, then a new process with a fresh Inductor cache that loads the Mega-Cache artifacts."""
    art = os.path.join(tmp, "megacache.bin")
    tc_cold = _spawn(model, "torch.compile", {**env, "TORCHINDUCTOR_CACHE_DIR": os.path.join(tmp, "ind1")}, args, art)
    tc_mega = _spawn(model, "torch.compile", {**env, "TORCHINDUCTOR_CACHE_DIR": os.path.join(tmp, "ind2")}, args, art)
    rows = []
    for name, r in (("cold", tc_cold), ("with Mega-Cache", tc_mega)):
        if "error" in r:
            rows.append((f"{model}: torch.compile {name} first call", r["error"], ""))
            continue
        over = r["first"] - r["warm"]
        anchor = f"specengine from disk: +{_ms(ours)}" if name != "cold" else ""
        rows.append((f"{model}: torch.compile {name} first call (warm {_ms(r['warm'])})",
                     f"{_ms(r['first'])}, +{_ms(over)} over warm", anchor))  # fmt: skip
    if "error" not in tc_mega:
        rows.append(
            (f"{model}: Mega-Cache artifacts loaded", "yes" if tc_mega.get("loaded") else "no (none saved)", "")
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    parser.add_argument("--no-gpt2", action="store_true")
    parser.add_argument("--no-torch-compile", action="store_true")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-bytecode", dest="bytecode", action="store_false",
                        help="keep PYTHONDONTWRITEBYTECODE for the children, if it is set")  # fmt: skip
    args = parser.parse_args()
    if args.child:
        model, engine, repeat, threads, artifacts = args.child
        print(json.dumps(child(model, engine, int(repeat), int(threads), artifacts)))
        return
    # children run as a user's process does: with bytecode caches (an environment that sets
    # PYTHONDONTWRITEBYTECODE compiles every module from source on each import, about 0.2 s more here)
    drop = ("PYTHONDONTWRITEBYTECODE",) if args.bytecode else ()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECENGINE_") and k not in drop}
    if "PYTHONDONTWRITEBYTECODE" in env:
        print("note: PYTHONDONTWRITEBYTECODE is set: imports compile from source (--no-bytecode)")
    rows = []
    for model in ["gpt-d128"] + ([] if args.no_gpt2 else ["gpt2-small"]):
        rows += measure(model, args, env)
    print("| figure | measured | goal / anchor |\n| --- | --- | --- |")
    for r in rows:
        print(f"| {r[0]} | {r[1]} | {r[2]} |")


if __name__ == "__main__":
    main()
