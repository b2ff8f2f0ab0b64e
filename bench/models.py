"""Hugging Face transformers families (tiny configs): compiles over a sweep, first call, cached call, generation.

For each family of specengine/examples/hf.py, in one run: compiles over the sweep B in (1, 2, 3) x T in (5, 8, 17)
(image batch sizes for ViT) for specengine (dynamic=True) and torch.compile (a counting backend that runs the graphs
it receives as they are, so its figures are Dynamo's tracing, not inductor); first-call seconds for both; the
cached-call time against eager at B=2, T=17. For generation (`model.generate(..., max_new_tokens=16,
do_sample=False)` with the model's forward compiled and a DynamicCache): compiles and ms per token against eager,
and whether the tokens equal eager's. A benchmark, not a test: it prints figures and asserts nothing.

    python bench/models.py [--quick] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import specengine  # noqa: E402
from specengine.examples.hf import FAMILIES, available  # noqa: E402

QUICK_FAMILIES = ("gpt2", "bert")


def _counting_backend() -> tuple[Any, list]:
    graphs: list = []

    def backend(gm: Any, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    return backend, graphs


def _shapes(family: Any, quick: bool) -> list[tuple[int, int]]:
    batches, seqs = ((1, 2), (5, 17)) if quick else ((1, 2, 3), (5, 8, 17))
    return [(b, 0) for b in batches] if family.images else [(b, t) for b in batches for t in seqs]


def _interleaved_ms(fns: dict, inputs: dict, reps: int) -> dict:
    """The minimum ms per call of each engine (the figure least disturbed by other load), engines interleaved."""
    times: dict = {k: [] for k in fns}
    for _ in range(reps):
        for key, fn in fns.items():
            start = time.perf_counter()
            fn(**inputs)
            times[key].append(time.perf_counter() - start)
    return {k: min(v) * 1e3 for k, v in times.items()}


def _sweep(fn: Any, family: Any, shapes: list) -> float:
    """Runs the sweep; returns the first call's seconds."""
    start = time.perf_counter()
    fn(**family.inputs(*shapes[0]))
    first = time.perf_counter() - start
    for b, t in shapes[1:]:
        fn(**family.inputs(b, t))
    return first


def bench_family(name: str, quick: bool) -> dict:
    family = FAMILIES[name]
    model = family.build()
    shapes = _shapes(family, quick)
    row: dict[str, Any] = {"family": name, "shapes": len(shapes)}
    with torch.no_grad():
        # torch.compile first: once specengine watches the model's config objects, dynamo traces their bumping
        # __setattr__ and guards on the counter (one more recompile for gpt2 and bert)
        torch._dynamo.reset()
        backend, graphs = _counting_backend()
        dyn = torch.compile(model, backend=backend)
        row["tc_first_s"] = _sweep(dyn, family, shapes)
        row["tc_compiles"] = len(graphs)
        spec = specengine.compile(model, dynamic=True)
        try:
            row["spec_first_s"] = _sweep(spec, family, shapes)
            row["spec_compiles"] = specengine.cache_misses(spec)
        except Exception as e:  # noqa: BLE001 - reported in the table
            row["spec_error"] = f"{type(e).__name__}: {str(e)[:120]}"
        inputs = family.inputs(2, 17)
        fns = {"eager": model, "spec": spec, "tc": dyn}
        if "spec_error" in row:
            del fns["spec"]
        for fn in fns.values():
            fn(**inputs)
        ms = _interleaved_ms(fns, inputs, 5 if quick else 30)
        row.update({f"{k}_ms": v for k, v in ms.items()})
    return row


def bench_generate(name: str, quick: bool) -> dict:
    family = FAMILIES[name]
    model = family.build()
    inputs, new = family.inputs(2, 5), 8 if quick else 16
    row: dict[str, Any] = {"family": name, "new_tokens": new}
    with torch.no_grad():
        start = time.perf_counter()
        ref = model.generate(**inputs, max_new_tokens=new, min_new_tokens=new, do_sample=False)
        row["eager_ms_per_token"] = (time.perf_counter() - start) * 1e3 / new
        torch._dynamo.reset()
        backend, graphs = _counting_backend()
        engines = {"tc": lambda f: torch.compile(f, backend=backend)}  # first: see bench_family
        engines["spec"] = lambda f: specengine.compile(f, dynamic=True)
        for key, wrap in engines.items():
            model.forward = compiled = wrap(model.forward)
            try:
                model.generate(**inputs, max_new_tokens=new, min_new_tokens=new, do_sample=False)  # warm: compiles
                start = time.perf_counter()
                out = model.generate(**inputs, max_new_tokens=new, min_new_tokens=new, do_sample=False)
                row[f"{key}_ms_per_token"] = (time.perf_counter() - start) * 1e3 / new
                row[f"{key}_equal"] = bool(torch.equal(out, ref))
                row[f"{key}_compiles"] = specengine.cache_misses(compiled) if key == "spec" else len(graphs)
            except Exception as e:  # noqa: BLE001 - reported in the table
                row[f"{key}_error"] = f"{type(e).__name__}: {str(e)[:120]}"
            finally:
                del model.forward
    return row


def run(quick: bool, threads: int = 1) -> dict:
    if not available():
        return {"unavailable": "transformers is not installed"}
    torch.set_num_threads(threads)
    names = QUICK_FAMILIES if quick else tuple(FAMILIES)
    gens = ("llama",) if quick else tuple(n for n in FAMILIES if FAMILIES[n].generates)
    return {"threads": threads, "families": [bench_family(n, quick) for n in names],
            "generate": [bench_generate(n, quick) for n in gens]}  # fmt: skip


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    return lines + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def _ratio(row: dict, key: str) -> str:
    if f"{key}_ms" not in row:
        return row.get(f"{key}_error", "n/a")
    return f"{row[f'{key}_ms']:.2f} ({row[f'{key}_ms'] / row['eager_ms']:.2f}x)"


def render(res: dict) -> list[str]:
    out = ["### Hugging Face transformers models (tiny configs)", ""]
    if "unavailable" in res:
        return out + [res["unavailable"], ""]
    rows = []
    for r in res["families"]:
        spec = r.get("spec_error") or f"{r['spec_compiles']} / {r['spec_first_s']:.2f}"
        rows.append([r["family"], str(r["shapes"]), spec, f"{r['tc_compiles']} / {r['tc_first_s']:.2f}",
                     f"{r['eager_ms']:.2f}", _ratio(r, "spec"), _ratio(r, "tc")])  # fmt: skip
    out += _table(["family", "shapes", "specengine: compiles / first call s", "torch.compile: compiles / first call s",
                   "eager ms (B=2, T=17)", "specengine ms (x eager)", "torch.compile ms (x eager)"], rows)  # fmt: skip
    rows = []
    for r in res["generate"]:
        cells = [r["family"], str(r["new_tokens"]), f"{r['eager_ms_per_token']:.2f}"]
        for key in ("spec", "tc"):
            if f"{key}_error" in r:
                cells.append(r[f"{key}_error"])
                continue
            ms = r[f"{key}_ms_per_token"]
            cells.append(f"{r[f'{key}_compiles']} / {ms:.2f} ({ms / r['eager_ms_per_token']:.2f}x) / "
                         f"{'yes' if r[f'{key}_equal'] else 'NO'}")  # fmt: skip
        rows.append(cells)
    out += ["", "Generation: `model.forward = engine(model.forward)`, greedy, B=2, prompt of 5 tokens:", ""]
    out += _table(["family", "new tokens", "eager ms/token", "specengine: compiles / ms per token / tokens equal",
                   "torch.compile: compiles / ms per token / tokens equal"], rows)  # fmt: skip
    return out + ["", f"{res['threads']} thread(s), eval mode, no_grad. Compiles: specengine cache misses; "
                      "torch.compile: graphs handed to a counting backend (graph breaks count too), which runs them "
                      "as they are, so its times are Dynamo's. Cached-call times are the minimum of the calls, engines interleaved. Generation times are "
                      "of a second generate() (the first one compiles).", ""]  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 families, fewer shapes and repetitions")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    opts = parser.parse_args()
    print("\n".join(render(run(opts.quick, opts.threads))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
