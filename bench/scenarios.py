"""The scenario suite of bench/run_all.py: functions plus sequences of inputs, run by each engine against eager.

For each (scenario, engine) it counts compiles (misses) and wrong results. A result is wrong when it differs
from eager's under `torch.testing.assert_close` (default tolerances, NaN equal to NaN), or when exactly one of
eager and the engine raises. An `UnsupportedOpError` where eager succeeds is reported as such ("unsupported: <op>"),
not as a wrong result.
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from peers import Engine, error_text

import specengine

ROOT = Path(__file__).resolve().parent.parent


def load_test_gpt() -> Any:
    """The GPT of tests/gpt.py: `specengine.examples.gpt`, which tests/gpt.py re-exports, or else tests/gpt.py
    itself, loaded by path (`import gpt` could find bench/gpt.py instead)."""
    try:
        return importlib.import_module("specengine.examples.gpt")
    except ImportError:
        pass
    name = "specengine_tests_gpt"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / "gpt.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@dataclass
class Scenario:
    name: str
    fn: Callable
    calls: list[tuple]  # positional arguments of each call, in order
    what: str  # what the scenario exercises, for the table
    peer_config: dict = field(default_factory=dict)  # torch._dynamo.config settings for torch.compile's runs


# --- the functions -------------------------------------------------------------------------------------------


def seed(a, b):
    return a * b.size(0)


def branch_shape(a):
    return a * 2 if a.shape[0] > 2 else a * 3


def branch_int(x, n):
    return x * n if n > 3 else x - n


def broadcast_add(a, b):
    return a + b


def reshape_minus_one(a):
    return a.reshape(-1, 4)


def sum_dim0(x):
    return (x * 2).sum(0)


def squeeze0(x):
    return x.squeeze(0) + 1


def str_arg(x, mode):
    return x * 2 if mode == "double" else x + 1


def bool_arg(x, flag):
    return x.relu() if flag else -x


def float_branch(x, s):
    return x * s if s > 1.0 else x - s


def int_loop(x, n):
    for i in range(n):
        x = x + i
    return x


def int_scale(x, n):
    return x * n + n


def matmul_chain(a, b, c):
    return (a @ b) @ c


def view_products(a):
    return a.view(a.shape[0] * a.shape[1], a.shape[2] * a.shape[3])


def mlp(x, w1, b1, w2, b2):
    return torch.relu(x @ w1 + b1) @ w2 + b2


def normalize_last(x):
    return (x - x.mean(-1, keepdim=True)) / math.sqrt(x.shape[-1])


# --- the suite -----------------------------------------------------------------------------------------------


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


def _mlp_args(b: int, d: int, h: int, o: int) -> tuple:
    return (_r(b, d), _r(d, h), _r(h), _r(h, o), _r(o))


def build(quick: bool) -> list[Scenario]:
    """The suite; under `quick`, the GPT sweeps use a subset of the shapes (same functions, same model)."""
    torch.manual_seed(0)
    gpt = load_test_gpt()
    model = gpt.GPT(gpt.GPTConfig()).eval()
    vocab = model.cfg.vocab_size
    batches, lengths = ((1, 3), (1, 7, 16)) if quick else ((1, 2, 3, 5), (1, 7, 16, 33))
    bc = [((1, 3), (4, 3)), ((4, 3), (1, 3)), ((5, 3), (5, 3)), ((1, 3), (1, 3)), ((4, 3), (2, 3))]
    scenarios = [
        Scenario("seed", seed, [(_r(2, 2), _r(1, 2))] + [(_r(n, 2), _r(n, 2)) for n in range(3, 7)],
                 "a * b.size(0)"),
        Scenario("branch on a shape", branch_shape, [(_r(n),) for n in (4, 5, 1, 2, 7)],
                 "a.shape[0] > 2"),
        Scenario("branch on an int", branch_int, [(_r(3), n) for n in (5, 6, 2, 3, 9)], "n > 3"),
        Scenario("broadcasts that change", broadcast_add, [(_r(*a), _r(*b)) for a, b in bc],
                 "(1,3)+(4,3), (4,3)+(1,3), (5,3)+(5,3), (1,3)+(1,3), (4,3)+(2,3) raises"),
        Scenario("reshape with -1", reshape_minus_one,
                 [(_r(*s),) for s in ((2, 8), (3, 8), (5, 4), (0, 8), (1, 4), (2, 2), (3, 2))],
                 "a.reshape(-1, 4); numel 6 raises"),
        Scenario("sizes 0 and 1 (sum)", sum_dim0, [(_r(n, 3),) for n in (0, 1, 2, 5, 1, 0)], "(x * 2).sum(0)"),
        Scenario("size 1 that matters", squeeze0, [(_r(*s),) for s in ((1, 3), (2, 3), (1, 4), (3, 4))],
                 "x.squeeze(0)"),
        Scenario("normalize, sizes 0/1/n", normalize_last, [(_r(2, n),) for n in (1, 4, 0, 7)],
                 "x - x.mean(-1) / sqrt(x.shape[-1])"),
        Scenario("string argument", str_arg,
                 [(_r(n), m) for n, m in ((3, "double"), (3, "inc"), (4, "double"), (5, "inc"))], 'mode == "double"'),
        Scenario("bool argument", bool_arg, [(_r(n), f) for n, f in ((3, True), (3, False), (4, True), (5, False))],
                 "x.relu() if flag else -x"),
        Scenario("float scalar with a branch", float_branch, [(_r(3), s) for s in (1.5, 2.0, 1.5, -0.3)],
                 "s > 1.0; s = 1.5, 2.0, 1.5, -0.3"),
        Scenario("int loop", int_loop, [(_r(3), n) for n in (2, 3, 2, 4)], "for i in range(n)"),
        Scenario("int arithmetic", int_scale, [(_r(3), n) for n in (2, 3, 4, 7)], "x * n + n"),
        Scenario("matmul chain", matmul_chain,
                 [(_r(2, 3), _r(3, 4), _r(4, 5)), (_r(5, 6), _r(6, 7), _r(7, 1)), (_r(1, 0), _r(0, 2), _r(2, 3)),
                  (_r(2, 3), _r(4, 4), _r(4, 5))],
                 "(a @ b) @ c; last call mismatched, raises"),
        Scenario("view with shape products", view_products,
                 [(_r(*s),) for s in ((2, 3, 4, 5), (1, 2, 3, 4), (3, 3, 1, 2))], "view(s0*s1, s2*s3)"),
        Scenario("2-layer MLP, batch sweep", mlp, [_mlp_args(b, 8, 16, 4) for b in (1, 2, 3, 5, 8)],
                 "x @ w1 + b1, relu, @ w2 + b2"),
        Scenario("GPT batch sweep", model, [(torch.randint(0, vocab, (b, 7)),) for b in batches],
                 f"tests/gpt.py tiny; B in {batches}, T = 7"),
        Scenario("GPT sequence sweep", model, [(torch.randint(0, vocab, (2, t)),) for t in lengths],
                 f"tests/gpt.py tiny; B = 2, T in {lengths}"),
        Scenario("GPT B x T grid", model,
                 [(torch.randint(0, vocab, (b, t)),) for b in batches for t in lengths],
                 f"tests/gpt.py tiny; {len(batches)} x {len(lengths)} shapes"),
    ]  # fmt: skip
    return scenarios + data_dependent()


# Data-dependent sizes (issue 14): the same shapes, different data. torch.compile gets the settings it needs to
# capture them; what it still cannot capture shows as graph breaks.
_CAPTURE = {"capture_scalar_outputs": True, "capture_dynamic_output_shape_ops": True}


def data_dependent() -> list[Scenario]:
    from specengine.examples import data_dependent as dd

    torch.manual_seed(0)
    masks = dd.mask_sweep(16)
    moe = dd.TopKRouting(dim=8, n_experts=4, k=2).eval()
    densities = "masks all False, all True, random 1/2, random 1/10, one True"
    return [
        Scenario("mask density: x[mask].sum()", dd.masked_sum, [(_r(16), m) for m in masks],
                 f"x (16,); {densities}", _CAPTURE),
        Scenario("x[mask] * 2, then sum(0)", dd.masked_scale_reduce, [(_r(16, 4), m) for m in masks],
                 f"x (16, 4), mask (16,); {densities}", _CAPTURE),
        Scenario("nonzero -> index_select", dd.nonzero_index_select, [(_r(16, 4), m) for m in masks],
                 f"x.index_select(0, nonzero(mask)); {densities}", _CAPTURE),
        Scenario("torch.arange(t.item())", dd.arange_item, [(torch.tensor(n),) for n in (3, 0, 1, 7, 2)],
                 "t = 3, 0, 1, 7, 2", _CAPTURE),
        Scenario("unique counts", dd.unique_counts,
                 [(torch.randint(0, r, (32,)),) for r in (1, 4, 1000, 2)],
                 "torch.unique(x, return_counts=True); x (32,) ints in [0, 1), [0, 4), [0, 1000), [0, 2)",
                 _CAPTURE),
        Scenario("MoE top-2 routing", moe, [(x,) for x in dd.routing_sweep(moe, 16)],
                 "4 experts (Linear 8x8), 16 tokens; topk, bincount, split(counts.tolist()); 4 routings",
                 _CAPTURE),
        Scenario("x[mask].sum(), sizes and densities", dd.masked_sum,
                 [(_r(n), m) for n in (16, 0, 1, 2) for m in dd.mask_sweep(n, seed=n)[:3]],
                 "x (n,), n = 16, 0, 1, 2; masks all False, all True, random 1/2", _CAPTURE),
        Scenario("MoE routing, token counts", moe, [(x,) for t in (16, 5, 1) for x in dd.routing_sweep(moe, t, t)],
                 "as above; 16, 5, 1 tokens x 4 routings", _CAPTURE),
        Scenario("MoE routing, dynamo defaults", moe, [(x,) for x in dd.routing_sweep(moe, 16)],
                 "as 'MoE top-2 routing', torch.compile without the capture settings", {}),
    ]  # fmt: skip


# --- running -------------------------------------------------------------------------------------------------


def _outcome(fn: Callable, args: tuple) -> tuple[bool, Any]:
    try:
        return True, fn(*args)
    except Exception as e:  # noqa: BLE001 - an exception is an outcome to compare
        return False, e


def _mismatch(expected: tuple[bool, Any], got: tuple[bool, Any]) -> str | None:
    """Why `got` differs from eager's `expected` outcome; None when they agree."""
    (ok_e, e), (ok_g, g) = expected, got
    if not ok_e and not ok_g:
        return None
    if ok_e and not ok_g:
        return error_text(g)
    if not ok_e:
        return f"returned where eager raised {type(e).__name__}"
    try:
        torch.testing.assert_close(g, e, equal_nan=True)
    except Exception as err:  # noqa: BLE001 - any difference is a wrong result
        return "differs from eager: " + " ".join(str(err).split())[:120]
    return None


@dataclass
class Result:
    misses: int | None = None
    wrong: int = 0
    calls: int = 0
    seconds: float = 0.0
    errors: list[str] = field(default_factory=list)  # distinct reasons for wrong results
    breaks: int | None = None  # torch.compile: graph breaks over the scenario's calls
    unsupported: str | None = None
    build_error: str | None = None
    stats: dict[str, float] = field(default_factory=dict)  # specengine: compile statistics summed over entries

    def to_json(self) -> dict:
        return dict(self.__dict__)


_STAT_KEYS = ("compile_s", "trace_s", "solve_s", "codegen_s", "z3_s", "z3_calls")


def run_scenario(scenario: Scenario, engine: Engine, expected: list[tuple[bool, Any]]) -> Result:
    res = Result(calls=len(scenario.calls))
    seen: set = set()  # specengine entries already accounted (a subsuming entry may drop older ones)
    totals = dict.fromkeys(_STAT_KEYS, 0.0)
    totals["z3_max_query_s"] = 0.0
    gc.collect()  # a collection of what earlier runs left (dynamo leaves a lot) would land in this one's times
    breaks_before = engine.breaks() if engine.breaks else 0
    start = time.perf_counter()
    with engine.settings(scenario.peer_config):
        try:
            cfn = engine.build(scenario.fn)
        except Exception as e:  # noqa: BLE001
            res.build_error = error_text(e)
            return res
        for args, exp in zip(scenario.calls, expected):
            got = _outcome(cfn, args)
            if exp[0] and isinstance(got[1], specengine.UnsupportedOpError):  # a refusal, not a wrong result
                res.unsupported = res.unsupported or error_text(got[1])
                continue
            why = _mismatch(exp, got)
            if why is not None:
                res.wrong += 1
                if why not in res.errors:
                    res.errors.append(why)
            _account(cfn, seen, totals)
    res.seconds = time.perf_counter() - start
    if engine.breaks:
        res.breaks = engine.breaks() - breaks_before
    try:
        res.misses = engine.count(cfn)
    except Exception:  # noqa: BLE001 - a count that cannot be read is reported as unknown
        res.misses = None
    if isinstance(cfn, (specengine.CompiledFunction, specengine.CompiledModule)):
        res.stats = totals
    return res


def _account(cfn: Callable, seen: set, totals: dict) -> None:
    """Add the compile statistics of specengine entries not seen yet to `totals`."""
    if not isinstance(cfn, (specengine.CompiledFunction, specengine.CompiledModule)):
        return
    for entry in specengine.cache_entries(cfn):
        if entry not in seen:
            seen.add(entry)
            for k in _STAT_KEYS:
                totals[k] += entry.stats.get(k, 0.0)
            totals["z3_max_query_s"] = max(totals["z3_max_query_s"], entry.stats.get("z3_max_query_s", 0.0))


def run_suite(engines: list[Engine], quick: bool, log: Callable[[str], None] = print) -> dict:
    """{"scenarios": [{name, what, calls, results: {engine key: Result json}}], "engines": {key: label}}."""
    out = []
    for sc in build(quick):
        expected = [_outcome(sc.fn, args) for args in sc.calls]
        row = {"name": sc.name, "what": sc.what, "calls": len(sc.calls), "results": {}}
        for engine in engines:
            if engine.unavailable:
                row["results"][engine.key] = {"unavailable": engine.unavailable}
                continue
            res = run_scenario(sc, engine, expected)
            row["results"][engine.key] = res.to_json()
        log(f"  {sc.name}: " + ", ".join(f"{k}={_brief(v)}" for k, v in row["results"].items()))
        out.append(row)
    return {"scenarios": out, "engines": {e.key: e.label for e in engines}}


def _brief(r: dict) -> str:
    if "unavailable" in r:
        return "n/a"
    return f"{r['misses']}/{r['wrong']}"
