"""Compiled modules inside DDP and FSDP2, in every order users write them (2 ranks, gloo, CPU).

One run of two processes (`python tests/test_distributed.py RANK DIR`) trains a small GPT in each scenario below and
in the same scenario eagerly, with per-rank batch sizes and sequence lengths that change every step, gradient
accumulation (a `no_sync` micro-step, FSDP2's `set_requires_gradient_sync(False)`), several DDP buckets and a process
group timeout so that a hang fails fast. Each rank saves what it saw; the tests compare every loss, every micro-step's
gradients, the final parameters, the state_dict keys, a model reloaded from the state_dict and the compile counts
with the eager run, bit for bit.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import os
import pathlib
import subprocess
import sys
import time
import traceback
from typing import Any, Callable

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present
from torch.nn.parallel import DistributedDataParallel as DDP

import specengine
from specengine import api
from specengine.examples.gpt import GPT, GPTConfig

CFG = GPTConfig(vocab_size=32, block_size=16, n_layer=2, n_head=2, n_embd=16)
STEPS, MICRO = 3, 2
BUCKET_MB = 0.002  # about 500 floats: several buckets
TIMEOUT_S = 120  # the process group's: a rank stuck in a collective fails within it
SHORT_TIMEOUT_S, SLOW_COMPILE_S = 1.5, 2.0  # a process group whose timeout is shorter than a compile
PROBE = torch.arange(12).reshape(2, 6) % CFG.vocab_size  # the input of a model reloaded from a state_dict


def _batches(rank: int, sizes: list[int] | None = None) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """Per step, per micro-step: (tokens, targets); batch and sequence length differ per rank, step and micro-step."""
    g = torch.Generator().manual_seed(100 + rank)
    out = []
    for step in range(len(sizes) if sizes else STEPS):
        micro = []
        for m in range(MICRO):
            b = sizes[step] if sizes else 1 + rank + (step + m) % 3
            t = 4 if sizes else 3 + 2 * rank + step + m
            idx = torch.randint(0, CFG.vocab_size, (b, t + 1), generator=g)
            micro.append((idx[:, :-1], idx[:, 1:]))
        out.append(micro)
    return out


class _CheckpointedGPT(GPT):
    """Activation checkpointing: each block's activations are recomputed in the backward."""

    def forward(self, idx):
        pos = torch.arange(0, idx.shape[1], dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
        return self.lm_head(self.ln_f(x))


def _model(kind: str = "gpt") -> GPT:
    torch.manual_seed(0)
    model = _CheckpointedGPT(CFG) if kind == "checkpointed" else GPT(CFG)
    if kind == "unused":
        model.unused = torch.nn.Linear(3, 3)  # never called: DDP(find_unused_parameters=True) marks it ready
    return model


def _local(t: torch.Tensor | None) -> torch.Tensor | None:
    if t is None:
        return None
    return (t.to_local() if hasattr(t, "to_local") else t).detach().clone()


def _reloaded(state: dict) -> torch.Tensor:
    """A checkpoint round trip: the state_dict saved, loaded into a fresh eager model, which then runs `PROBE`."""
    buffer = io.BytesIO()
    torch.save({k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in state.items()}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    consume_prefix_in_state_dict_if_present(loaded, "module.")  # DDP's own prefix (eager DDP's too)
    fresh = _model("unused" if "unused.weight" in loaded else "gpt")
    fresh.load_state_dict(loaded)  # strict: the keys are the original model's
    with torch.no_grad():
        return fresh(PROBE)


def _train(wrapped: Any, params: torch.nn.Module, batches: list, no_sync: Callable) -> dict[str, Any]:
    """Steps of SGD with gradient accumulation: `no_sync(flag)` is a context manager for the micro-steps."""
    opt = torch.optim.SGD(params.parameters(), lr=0.1)
    losses, grads = [], []
    for micro in batches:
        for i, (x, y) in enumerate(micro):
            with no_sync(i < len(micro) - 1):
                logits = wrapped(x)
                loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
                loss.backward()
            losses.append(loss.detach().clone())
            grads.append({n: _local(p.grad) for n, p in params.named_parameters()})
        opt.step()
        opt.zero_grad()
    final = {n: _local(p) for n, p in params.named_parameters()}
    state = wrapped.state_dict()
    return {"losses": losses, "grads": grads, "params": final, "keys": sorted(state), "reloaded": _reloaded(state)}


def _compiles(counted: list) -> list[int]:
    return [specengine.cache_misses(c) for c in counted]


# Every DDP order: (the module called, the DDP it runs, the compiled objects whose compiles are counted).
def _ddp_order(order: str, model: torch.nn.Module, **kw: Any) -> tuple[Any, DDP, list]:
    kw.setdefault("bucket_cap_mb", BUCKET_MB)
    if order == "eager":
        ddp = DDP(model, **kw)
        return ddp, ddp, []
    if order == "forward":  # the recommended order: the forward compiled, then DDP
        model.forward = specengine.compile(model.forward, dynamic=kw.pop("dynamic", True))
        ddp = DDP(model, **kw)
        return ddp, ddp, [model.forward]
    if order == "module":  # DDP(specengine.compile(model))
        compiled = specengine.compile(model, dynamic=True)
        ddp = DDP(compiled, **kw)
        return ddp, ddp, [compiled]
    assert order == "wrapper"  # specengine.compile(DDP(model)): DDP's forward stays eager
    compiled = specengine.compile(DDP(model, **kw), dynamic=True)
    return compiled, compiled, [compiled]


def _ddp_run(order: str, kind: str = "gpt", sizes: Any = None, **kw: Any) -> Callable[[int], tuple[dict, list]]:
    """A DDP order's training; under `static_graph=True` every micro-step synchronizes (eager DDP's reducer fails
    an internal assert on `no_sync` before its graph is recorded)."""

    def run(rank: int) -> tuple[dict, list]:
        model = _model(kind)
        wrapped, ddp, counted = _ddp_order(order, model, **kw)
        batches = _batches(rank, sizes[rank] if sizes else None)
        accumulate = not kw.get("static_graph")
        sync = lambda skip: ddp.no_sync() if skip and accumulate else contextlib.nullcontext()  # noqa: E731
        return _train(wrapped, model, batches, sync), _compiles(counted)

    return run


def _join_run(order: str) -> Callable[[int], tuple[dict, list]]:
    """Uneven inputs under `ddp.join()`: rank 0 runs out of batches a step early; its all-reduces are shadowed."""

    def run(rank: int) -> tuple[dict, list]:
        model = _model()
        wrapped, ddp, counted = _ddp_order(order, model)
        batches = [[b] for micro in _batches(rank) for b in micro][: 3 + rank]
        with ddp.join():
            out = _train(wrapped, model, batches, lambda skip: contextlib.nullcontext())
        return out, _compiles(counted)

    return run


def _replicate_run(order: str) -> Callable[[int], tuple[dict, list]]:
    """`replicate` (DDP as composable hooks): "wrapper" compiles the replicated module (its hooks stay eager),
    "module" replicates a compiled module."""

    def run(rank: int) -> tuple[dict, list]:
        from torch.distributed._composable.replicate import replicate

        model = _model()
        wrapped = specengine.compile(model, dynamic=True) if order == "module" else model
        replicate(wrapped, bucket_cap_mb=BUCKET_MB)
        if order == "wrapper":
            wrapped = specengine.compile(model, dynamic=True)
        counted = [] if order == "eager" else [wrapped]
        return _train(wrapped, model, _batches(rank), lambda skip: contextlib.nullcontext()), _compiles(counted)

    return run


def _fsdp_run(order: str, kind: str = "gpt", **policies: Any) -> Callable:
    """FSDP2: each block sharded (with `policies`), then the root; `order` says what is compiled, and when."""

    def run(rank: int) -> tuple[dict, list]:
        from torch.distributed.fsdp import fully_shard

        model = _model(kind)
        root, counted = model, []
        if order == "module":  # fully_shard(specengine.compile(model)): compiled first, then everything sharded
            root = specengine.compile(model, dynamic=True)
            counted = [root]
        for blk in model.h:
            if order == "blocks":  # torchtitan's order: each block's forward compiled, then the block sharded
                blk.forward = specengine.compile(blk.forward, dynamic=True)
                counted.append(blk.forward)
            fully_shard(blk, **policies)
        sharded = fully_shard(root)  # (the CompiledModule under "module")
        if order == "root":  # specengine.compile(fully_shard(model)): sharded blocks are opaque calls of the trace
            root = specengine.compile(root, dynamic=True)
            counted = [root]

        @contextlib.contextmanager
        def sync(skip: bool):
            sharded.set_requires_gradient_sync(not skip)
            yield

        return _train(root, model, _batches(rank), sync), _compiles(counted)

    return run


def _slow_compile_run(rank: int) -> tuple[dict, list]:
    """Every compile takes SLOW_COMPILE_S, longer than the process group's timeout. Rank 0 sees batch sizes 3, 5
    (a recompile at step 2) and rank 1 3, 3 (a hit at step 2): rank 1 waits in DDP's all-reduce while rank 0
    recompiles. It does not time out: its timeout was extended after its own first compile."""
    group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=SHORT_TIMEOUT_S))
    compile_entry = api.compile_entry

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(SLOW_COMPILE_S)
        return compile_entry(*args, **kwargs)

    api.compile_entry = slow
    try:
        out, compiles = _ddp_run("forward", sizes=[[3, 5], [3, 3]], dynamic=None, process_group=group)(rank)
    finally:
        api.compile_entry = compile_entry
    dist.barrier(group)
    return out, compiles


def _slow_compile_eager(rank: int) -> tuple[dict, list]:
    return _ddp_run("eager", sizes=[[3, 5], [3, 3]])(rank)


AUTO_SIZES = [[5, 8, 6], [6, 6, 3]]  # per rank, per step: pytorch's test_compiler_collectives_automatic_dynamic_tensor

# name: (run, the eager run it must equal, compiles per rank (rank 0's, rank 1's))
TRAINING: dict[str, tuple[Callable, str | None, list]] = {
    "ddp-eager": (_ddp_run("eager"), None, [[], []]),
    "ddp-forward-then-ddp": (_ddp_run("forward"), "ddp-eager", [[1], [1]]),
    "ddp-of-compiled-module": (_ddp_run("module"), "ddp-eager", [[1], [1]]),
    "ddp-compiled-wrapper": (_ddp_run("wrapper"), "ddp-eager", [[1], [1]]),
    "ddp-checkpointed": (_ddp_run("forward", "checkpointed"), "ddp-eager", [[1], [1]]),
    "ddp-unused-eager": (_ddp_run("eager", "unused", find_unused_parameters=True), None, [[], []]),
    "ddp-unused": (_ddp_run("module", "unused", find_unused_parameters=True), "ddp-unused-eager", [[1], [1]]),
    "ddp-static-graph-eager": (_ddp_run("eager", static_graph=True), None, [[], []]),
    "ddp-static-graph": (_ddp_run("wrapper", static_graph=True), "ddp-static-graph-eager", [[1], [1]]),
    "ddp-join-eager": (_join_run("eager"), None, [[], []]),
    "ddp-join": (_join_run("wrapper"), "ddp-join-eager", [[1], [1]]),
    # pytorch's test_compiler_collectives_automatic_dynamic_tensor: the same number of compiles, no collective
    "ddp-automatic-dynamic-eager": (_ddp_run("eager", sizes=AUTO_SIZES), None, [[], []]),
    "ddp-automatic-dynamic": (
        _ddp_run("forward", sizes=AUTO_SIZES, dynamic=None),
        "ddp-automatic-dynamic-eager",
        [[2], [2]],
    ),
    "ddp-slow-compile-eager": (_slow_compile_eager, None, [[], []]),
    "ddp-slow-compile": (_slow_compile_run, "ddp-slow-compile-eager", [[2], [1]]),
    "replicate-eager": (_replicate_run("eager"), None, [[], []]),
    "replicate-compiled-wrapper": (_replicate_run("wrapper"), "replicate-eager", [[1], [1]]),
    "replicate-of-compiled-module": (_replicate_run("module"), "replicate-eager", [[1], [1]]),
    "fsdp-eager": (_fsdp_run("eager"), None, [[], []]),
    "fsdp-blocks-compiled-then-sharded": (_fsdp_run("blocks"), "fsdp-eager", [[1, 1], [1, 1]]),
    "fsdp-root-compiled-with-sharded-blocks": (_fsdp_run("root"), "fsdp-eager", [[1], [1]]),
    "fsdp-of-compiled-module": (_fsdp_run("module"), "fsdp-eager", [[1], [1]]),
    "fsdp-checkpointed-eager": (_fsdp_run("eager", "checkpointed"), None, [[], []]),
    "fsdp-checkpointed-blocks": (_fsdp_run("blocks", "checkpointed"), "fsdp-checkpointed-eager", [[1, 1], [1, 1]]),
    "fsdp-checkpointed-root": (_fsdp_run("root", "checkpointed"), "fsdp-checkpointed-eager", [[1], [1]]),
}


def _mixed_precision() -> dict[str, Any]:
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return {"mp_policy": MixedPrecisionPolicy(param_dtype=torch.bfloat16, output_dtype=torch.float32)}


def _cpu_offload() -> dict[str, Any]:
    from torch.distributed.fsdp import CPUOffloadPolicy

    return {"offload_policy": CPUOffloadPolicy(pin_memory=False)}


for _name, _policies in (("mixed-precision", _mixed_precision), ("cpu-offload", _cpu_offload)):
    TRAINING[f"fsdp-{_name}-eager"] = (lambda rank, p=_policies: _fsdp_run("eager", **p())(rank), None, [[], []])
    TRAINING[f"fsdp-{_name}-root"] = (lambda rank, p=_policies: _fsdp_run("root", **p())(rank),
                                      f"fsdp-{_name}-eager", [[1], [1]])  # fmt: skip


def _refused(call: Callable[[], Any]) -> Callable[[int], tuple[dict, list]]:
    def run(rank: int) -> tuple[dict, list]:
        try:
            call()
            return {"error": ""}, []
        except specengine.SpecEngineError as e:
            return {"error": f"{type(e).__name__}: {e}"}, []

    return run


def _ddp_inside() -> Any:  # a DDP called by a compiled function: refused before DDP's forward runs
    ddp = DDP(_model(), bucket_cap_mb=BUCKET_MB)
    return specengine.compile(lambda x: ddp(x) * 2, dynamic=True)(torch.zeros(2, 3, dtype=torch.long))


def _functional_collective() -> Any:
    import torch.distributed._functional_collectives as fc

    return specengine.compile(lambda x: fc.all_reduce(x, "sum", dist.group.WORLD) + 1, dynamic=True)(torch.ones(3))


def _barrier() -> Any:
    return specengine.compile(lambda x: (dist.barrier(), x + 1)[1], dynamic=True)(torch.ones(2))


def _collective_refused(rank: int) -> tuple[dict, list]:
    def f(x):
        y = x * 2
        dist.all_reduce(y)
        return y + 1

    cf = specengine.compile(f, dynamic=True)
    out, _ = _refused(lambda: cf(torch.ones(3)))(rank)
    t = torch.full((2,), float(rank))
    dist.all_reduce(t)  # the refused collective never ran: the ranks are still in step
    return {**out, "sum": t.tolist(), "misses": specengine.cache_misses(cf)}, []


# name: (run, the error's class, words its message names)
REFUSED: dict[str, tuple[Callable, str, list[str]]] = {
    "ddp-inside-a-compiled-function": (_refused(_ddp_inside), "SpecEngineError", ["(DistributedDataParallel)"]),
    "collective": (_collective_refused, "UnsupportedOpError", ["all_reduce", "test_distributed.py"]),
    "barrier": (_refused(_barrier), "UnsupportedOpError", ["barrier", "test_distributed.py"]),
    "functional-collective": (_refused(_functional_collective), "UnsupportedOpError", ["_functional_collectives"]),
}


def _collective_op(compiled: bool) -> Callable[[int], tuple[dict, list]]:
    """A functional collective op: an op of the computation, run on every call, in program order."""

    def run(rank: int) -> tuple[dict, list]:
        group = dist.group.WORLD.group_name
        ops = torch.ops._c10d_functional

        def f(x):
            return ops.wait_tensor(ops.all_reduce(x * 2, "sum", group)) + 1

        cf = specengine.compile(f, dynamic=True) if compiled else f
        outs = [cf(torch.full((n,), float(rank + n))) for n in (3, 1, 2)]
        return {"outs": outs}, _compiles([cf] if compiled else [])

    return run


def _rank_query(rank: int) -> tuple[dict, list]:
    cf = specengine.compile(lambda x: x + dist.get_rank() + dist.get_world_size(), dynamic=True)
    return {"out": cf(torch.zeros(2)).tolist()}, _compiles([cf])


def _world_timeout(rank: int) -> tuple[dict, list]:
    from specengine.capture import pg_timeouts

    return {"timeout_s": pg_timeouts._timeout(dist.group.WORLD).total_seconds(), "longest": pg_timeouts._longest[0]}, []


OTHERS: dict[str, Callable] = {"collective-op-eager": _collective_op(False), "collective-op": _collective_op(True),
                               "rank-query": _rank_query, "world-timeout": _world_timeout}  # fmt: skip


def worker(rank: int, directory: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{directory}/store", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))  # fmt: skip
    torch.set_num_threads(1)
    results: dict[str, Any] = {}
    runs = {**{k: v[0] for k, v in TRAINING.items()}, **{k: v[0] for k, v in REFUSED.items()}, **OTHERS}
    only = os.environ.get("SPECENGINE_DIST_ONLY")
    for name, run in runs.items():
        if only and name not in only.split(","):
            continue
        start = time.perf_counter()
        try:
            out, compiles = run(rank)
            results[name] = {"out": out, "compiles": compiles, "seconds": time.perf_counter() - start}
        except Exception:  # noqa: BLE001 - reported by the test of this scenario
            results[name] = {"error": traceback.format_exc()}
            break  # the other rank may be waiting in a collective: stop here (it times out)
        dist.barrier()
    torch.save(results, f"{directory}/rank{rank}.pt")
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    directory = str(tmp_path_factory.mktemp("dist"))
    root = str(pathlib.Path(__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, *sys.path])}
    procs = [subprocess.Popen([sys.executable, __file__, str(r), directory], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT) for r in range(2)]  # fmt: skip
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=600)[0].decode())
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("the ranks did not finish within 600 s")
    for r, p in enumerate(procs):
        assert p.returncode == 0, f"rank {r} failed:\n{logs[r][-4000:]}"
    return [torch.load(f"{directory}/rank{r}.pt") for r in range(2)]


def _result(ranks: list, name: str) -> list:
    out = []
    for r, res in enumerate(ranks):
        assert name in res, f"rank {r} did not run {name} (an earlier scenario failed: {list(res)})"
        assert "error" not in res[name], f"rank {r}, {name}:\n{res[name]['error']}"
        out.append(res[name])
    return out


def _same(a: Any, b: Any, what: str) -> None:
    """Equal bit for bit (a tensor: same dtype, shape and values)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), what
        for k in a:
            _same(a[k], b[k], f"{what}[{k}]")
    elif isinstance(a, list):
        assert len(a) == len(b), what
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{what}[{i}]")
    elif isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, atol=0, rtol=0, msg=lambda m: f"{what}: {m}")
    else:
        assert a == b, f"{what}: {a} != {b}"


@pytest.mark.parametrize("name", [k for k, v in TRAINING.items() if v[1] is not None])
def test_training_equals_eager(ranks: list, name: str) -> None:
    """Every loss, every micro-step's gradients, the final parameters, the state_dict keys and a model reloaded from
    the state_dict equal eager's on each rank; each rank compiles as often as expected."""
    _, eager, compiles = TRAINING[name]
    got, ref = _result(ranks, name), _result(ranks, eager)
    for r in range(2):
        _same(got[r]["out"], ref[r]["out"], f"rank {r} {name}")
        assert got[r]["compiles"] == compiles[r], f"rank {r} {name}: compiles {got[r]['compiles']} != {compiles[r]}"


@pytest.mark.parametrize("name", list(REFUSED))
def test_refused_before_it_runs(ranks: list, name: str) -> None:
    _, kind, words = REFUSED[name]
    for res in _result(ranks, name):
        error = res["out"]["error"]
        assert error.startswith(kind) and all(w in error for w in words), error


def test_a_refused_collective_never_ran(ranks: list) -> None:
    for res in _result(ranks, "collective"):
        assert res["out"]["sum"] == [1.0, 1.0] and res["out"]["misses"] == 0


def test_a_functional_collective_op_runs_on_every_call(ranks: list) -> None:
    got, ref = _result(ranks, "collective-op"), _result(ranks, "collective-op-eager")
    for r in range(2):
        _same(got[r]["out"], ref[r]["out"], f"rank {r}")
        assert got[r]["compiles"] == [1]


def test_rank_queries_are_constants(ranks: list) -> None:
    for r, res in enumerate(_result(ranks, "rank-query")):
        assert res["out"]["out"] == [r + 2.0, r + 2.0] and res["compiles"] == [1]


def test_a_compile_longer_than_the_timeout_does_not_time_out_the_waiting_rank(ranks: list) -> None:
    """The scenario ran (test_training_equals_eager compares it); here: rank 1 did wait longer than the timeout."""
    res = _result(ranks, "ddp-slow-compile")
    assert res[1]["seconds"] > 2 * SLOW_COMPILE_S > SHORT_TIMEOUT_S, res[1]["seconds"]


def test_timeouts_are_extended_from_their_own_value_not_cumulatively(ranks: list) -> None:
    """After many compiles, WORLD's timeout is its own plus distributed_timeout_factor times the longest compile (a slow one)."""
    for res in _result(ranks, "world-timeout"):
        out = res["out"]
        assert out["longest"] > SLOW_COMPILE_S, out
        assert out["timeout_s"] == pytest.approx(
            TIMEOUT_S + specengine.config.distributed_timeout_factor * out["longest"], abs=2e-3
        ), out


if __name__ == "__main__":
    worker(int(sys.argv[1]), sys.argv[2])
