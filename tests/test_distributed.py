"""Compiled modules inside DDP and FSDP2, in every order users write them (2 ranks, gloo, CPU).

One run of two processes (`python tests/test_distributed.py RANK DIR`) trains a small GPT in each scenario below and
in the same scenario eagerly, with per-rank batch sizes and sequence lengths that change every step, gradient
accumulation (a `no_sync` micro-step, FSDP2's `set_requires_gradient_sync(False)`), several DDP buckets and a process
group timeout so that a hang fails fast. Each rank saves what it saw; the tests compare every loss, every micro-step's
gradients, the final parameters, the state_dict keys and the compile counts with the eager run.
"""

from __future__ import annotations

import datetime
import os
import pathlib
import subprocess
import sys
import traceback
from typing import Any, Callable

import pytest
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import specengine
from specengine.examples.gpt import GPT, GPTConfig

CFG = GPTConfig(vocab_size=32, block_size=16, n_layer=2, n_head=2, n_embd=16)
STEPS, MICRO = 3, 2
BUCKET_MB = 0.002  # about 500 floats: several buckets
TIMEOUT_S = 120  # the process group's: a rank stuck in a collective fails within it


def _batches(rank: int, sizes: list[int] | None = None) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """Per step, per micro-step: (tokens, targets); batch and sequence length differ per rank, step and micro-step."""
    g = torch.Generator().manual_seed(100 + rank)
    out = []
    for step in range(STEPS):
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


def _model(checkpointed: bool = False) -> GPT:
    torch.manual_seed(0)
    return _CheckpointedGPT(CFG) if checkpointed else GPT(CFG)


def _local(t: torch.Tensor | None) -> torch.Tensor | None:
    if t is None:
        return None
    return (t.to_local() if hasattr(t, "to_local") else t).detach().clone()


def _train(wrapped: torch.nn.Module, params: torch.nn.Module, batches: list, no_sync: Callable) -> dict[str, Any]:
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
    return {"losses": losses, "grads": grads, "params": final, "keys": sorted(wrapped.state_dict())}


def _ddp_sync(ddp: Any) -> Callable:
    import contextlib

    return lambda skip: ddp.no_sync() if skip else contextlib.nullcontext()


def _fsdp_sync(root: Any) -> Callable:
    import contextlib

    @contextlib.contextmanager
    def ctx(skip: bool):
        root.set_requires_gradient_sync(not skip)
        yield

    return ctx


def _ddp(module: torch.nn.Module) -> DDP:
    return DDP(module, bucket_cap_mb=BUCKET_MB)


def _compiles(*compiled: Any) -> list[int]:
    return [specengine.cache_misses(c) for c in compiled]


def _ddp_scenarios(rank: int) -> dict[str, Callable[[], tuple[dict, list[int]]]]:
    batches = _batches(rank)

    def eager():
        model = _model()
        ddp = _ddp(model)
        return _train(ddp, model, batches, _ddp_sync(ddp)), []

    def forward_then_ddp():  # the recommended order
        model = _model()
        model.forward = specengine.compile(model.forward, dynamic=True)
        ddp = _ddp(model)
        return _train(ddp, model, batches, _ddp_sync(ddp)), _compiles(model.forward)

    def ddp_of_compiled():
        model = _model()
        compiled = specengine.compile(model, dynamic=True)
        ddp = _ddp(compiled)
        return _train(ddp, model, batches, _ddp_sync(ddp)), _compiles(compiled)

    def compiled_ddp():
        model = _model()
        ddp = _ddp(model)
        compiled = specengine.compile(ddp, dynamic=True)
        return _train(compiled, model, batches, _ddp_sync(compiled)), _compiles(compiled)

    def compiled_replicate():
        from torch.distributed._composable.replicate import replicate

        model = _model()
        replicate(model, bucket_cap_mb=BUCKET_MB)
        compiled = specengine.compile(model, dynamic=True)
        return _train(compiled, model, batches, lambda skip: _nullcontext()), _compiles(compiled)

    def eager_replicate():
        from torch.distributed._composable.replicate import replicate

        model = _model()
        replicate(model, bucket_cap_mb=BUCKET_MB)
        return _train(model, model, batches, lambda skip: _nullcontext()), []

    def checkpointed():  # activation checkpointing inside the compiled forward
        model = _model(checkpointed=True)
        model.forward = specengine.compile(model.forward, dynamic=True)
        ddp = _ddp(model)
        return _train(ddp, model, batches, _ddp_sync(ddp)), _compiles(model.forward)

    def automatic_dynamic():  # pytorch's test_compiler_collectives_automatic_dynamic_tensor
        model = _model()
        model.forward = specengine.compile(model.forward)
        ddp = _ddp(model)
        sizes = [[5, 8, 6], [6, 6, 3]][rank]
        return _train(ddp, model, _batches(rank, sizes), _ddp_sync(ddp)), _compiles(model.forward)

    def automatic_dynamic_eager():
        model = _model()
        ddp = _ddp(model)
        sizes = [[5, 8, 6], [6, 6, 3]][rank]
        return _train(ddp, model, _batches(rank, sizes), _ddp_sync(ddp)), []

    return {k: v for k, v in locals().items() if callable(v) and k not in ("batches", "rank")}


def _nullcontext() -> Any:
    import contextlib

    return contextlib.nullcontext()


def _fsdp_scenarios(rank: int) -> dict[str, Callable[[], tuple[dict, list[int]]]]:
    from torch.distributed.fsdp import fully_shard

    batches = _batches(rank)

    def fsdp_eager():
        model = _model()
        for blk in model.h:
            fully_shard(blk)
        fully_shard(model)
        return _train(model, model, batches, _fsdp_sync(model)), []

    def fsdp_blocks():  # torchtitan's order: compile each block, then shard it
        model = _model()
        for blk in model.h:
            blk.forward = specengine.compile(blk.forward, dynamic=True)
            fully_shard(blk)
        fully_shard(model)
        return _train(model, model, batches, _fsdp_sync(model)), _compiles(*(b.forward for b in model.h))

    def fsdp_root_eager():
        model = _model()
        fully_shard(model)
        return _train(model, model, batches, _fsdp_sync(model)), []

    def fsdp_of_compiled():  # fully_shard(specengine.compile(model)): the root's hooks stay eager
        model = _model()
        compiled = fully_shard(specengine.compile(model, dynamic=True))
        return _train(compiled, model, batches, _fsdp_sync(compiled)), _compiles(compiled)

    def compiled_fsdp_root():  # specengine.compile(fully_shard(model)): the root's hooks stay eager
        model = _model()
        fully_shard(model)
        compiled = specengine.compile(model, dynamic=True)
        return _train(compiled, model, batches, _fsdp_sync(model)), _compiles(compiled)

    def fsdp_checkpointed():
        model = _model(checkpointed=True)
        for blk in model.h:
            blk.forward = specengine.compile(blk.forward, dynamic=True)
            fully_shard(blk)
        fully_shard(model)
        return _train(model, model, batches, _fsdp_sync(model)), _compiles(*(b.forward for b in model.h))

    def fsdp_checkpointed_eager():
        model = _model(checkpointed=True)
        for blk in model.h:
            fully_shard(blk)
        fully_shard(model)
        return _train(model, model, batches, _fsdp_sync(model)), []

    def compiled_sharded_root():  # sharded blocks inside a compiled root: opaque calls, their hooks eager
        model = _model()
        for blk in model.h:
            fully_shard(blk)
        fully_shard(model)
        compiled = specengine.compile(model, dynamic=True)
        return _train(compiled, model, batches, _fsdp_sync(model)), _compiles(compiled)

    def sharded_after_compile():  # compiled first, then the blocks and the CompiledModule sharded
        model = _model()
        compiled = specengine.compile(model, dynamic=True)
        for blk in model.h:
            fully_shard(blk)
        fully_shard(compiled)
        return _train(compiled, model, batches, _fsdp_sync(compiled)), _compiles(compiled)

    def compiled_sharded_root_checkpointed():
        model = _model(checkpointed=True)
        for blk in model.h:
            fully_shard(blk)
        fully_shard(model)
        compiled = specengine.compile(model, dynamic=True)
        return _train(compiled, model, batches, _fsdp_sync(model)), _compiles(compiled)

    def mixed_precision_refused():  # an opaque call under a policy that changes dtypes: refused at compile()
        from torch.distributed.fsdp import MixedPrecisionPolicy

        model = _model()
        for blk in model.h:
            fully_shard(blk, mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16))
        fully_shard(model)
        try:
            specengine.compile(model, dynamic=True)
            return {"error": ""}, []
        except specengine.SpecEngineError as e:
            return {"error": f"{type(e).__name__}: {e}"}, []

    return {k: v for k, v in locals().items() if callable(v) and k not in ("batches", "rank", "fully_shard")}


def _collective_scenarios(rank: int) -> dict[str, Callable[[], tuple[dict, list[int]]]]:
    def ddp_inside_refused():  # a DDP called by a compiled function: refused before DDP's forward runs
        ddp = _ddp(_model())
        cf = specengine.compile(lambda x: ddp(x) * 2, dynamic=True)
        try:
            cf(torch.zeros(2, 3, dtype=torch.long))
            return {"error": ""}, []
        except specengine.SpecEngineError as e:
            return {"error": f"{type(e).__name__}: {e}"}, []

    def collective_refused():
        def f(x):
            y = x * 2
            dist.all_reduce(y)
            return y + 1

        cf = specengine.compile(f, dynamic=True)
        try:
            cf(torch.ones(3))
            error = ""
        except specengine.SpecEngineError as e:
            error = f"{type(e).__name__}: {e}"
        t = torch.full((2,), float(rank))
        dist.all_reduce(t)  # the refused collective never ran: the ranks are still in step
        return {"error": error, "sum": t.tolist(), "misses": specengine.cache_misses(cf)}, []

    def functional_refused():
        import torch.distributed._functional_collectives as fc

        cf = specengine.compile(lambda x: fc.all_reduce(x, "sum", dist.group.WORLD) + 1, dynamic=True)
        try:
            cf(torch.ones(3))
            return {"error": ""}, []
        except specengine.SpecEngineError as e:
            return {"error": f"{type(e).__name__}: {e}"}, []

    def collective_op():  # a functional collective op: an op of the computation, run on every call
        group = dist.group.WORLD.group_name
        ops = torch.ops._c10d_functional

        def f(x):
            return ops.wait_tensor(ops.all_reduce(x * 2, "sum", group)) + 1

        cf = specengine.compile(f, dynamic=True)
        outs = [cf(torch.full((n,), float(rank + n))) for n in (3, 1, 2)]
        return {"outs": outs}, _compiles(cf)

    def collective_op_eager():
        group = dist.group.WORLD.group_name
        ops = torch.ops._c10d_functional
        outs = [
            ops.wait_tensor(ops.all_reduce(torch.full((n,), float(rank + n)) * 2, "sum", group)) + 1 for n in (3, 1, 2)
        ]
        return {"outs": outs}, [1]

    def rank_query():
        cf = specengine.compile(lambda x: x + dist.get_rank() + dist.get_world_size(), dynamic=True)
        return {"out": cf(torch.zeros(2)).tolist()}, [specengine.cache_misses(cf)]

    return {"ddp_inside_refused": ddp_inside_refused, "collective_refused": collective_refused, "functional_refused": functional_refused,
            "collective_op": collective_op, "collective_op_eager": collective_op_eager, "rank_query": rank_query}  # fmt: skip


def worker(rank: int, directory: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{directory}/store", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=TIMEOUT_S))  # fmt: skip
    torch.set_num_threads(1)
    results: dict[str, Any] = {}
    scenarios = {**_ddp_scenarios(rank), **_fsdp_scenarios(rank), **_collective_scenarios(rank)}
    only = os.environ.get("SPECENGINE_DIST_ONLY")
    for name, run in scenarios.items():
        if only and name not in only.split(","):
            continue
        try:
            out, compiles = run()
            results[name] = {"out": out, "compiles": compiles}
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
    if isinstance(a, dict):
        assert a.keys() == b.keys(), what
        for k in a:
            _same(a[k], b[k], f"{what}[{k}]")
    elif isinstance(a, list):
        assert len(a) == len(b), what
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{what}[{i}]")
    elif isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=lambda m: f"{what}: {m}")
    else:
        assert a == b, f"{what}: {a} != {b}"


def _check(ranks: list, name: str, eager: str, compiles: list[int]) -> None:
    got, ref = _result(ranks, name), _result(ranks, eager)
    for r in range(2):
        _same(got[r]["out"], ref[r]["out"], f"rank {r} {name}")
        assert got[r]["compiles"] == compiles, f"rank {r} {name}: compiles {got[r]['compiles']} != {compiles}"


def test_forward_compiled_then_ddp(ranks):
    _check(ranks, "forward_then_ddp", "eager", [1])


def test_ddp_of_a_compiled_module(ranks):
    _check(ranks, "ddp_of_compiled", "eager", [1])


def test_compiled_ddp_keeps_ddp_eager(ranks):
    _check(ranks, "compiled_ddp", "eager", [1])


def test_compiled_replicate_keeps_its_hooks_eager(ranks):
    _check(ranks, "compiled_replicate", "eager_replicate", [1])


def test_activation_checkpointing_in_ddp(ranks):
    _check(ranks, "checkpointed", "eager", [1])


def test_automatic_dynamic_ranks_agree(ranks):
    """Rank 0 sees batch sizes 5, 8, 6 and rank 1 6, 6, 3: the same number of compiles on both, no collective."""
    _check(ranks, "automatic_dynamic", "automatic_dynamic_eager", [2])


def test_fsdp2_blocks_compiled_then_sharded(ranks):
    _check(ranks, "fsdp_blocks", "fsdp_eager", [1, 1])


def test_fsdp2_of_a_compiled_module(ranks):
    _check(ranks, "fsdp_of_compiled", "fsdp_root_eager", [1])


def test_compiled_fsdp2_root(ranks):
    _check(ranks, "compiled_fsdp_root", "fsdp_root_eager", [1])


def test_activation_checkpointing_in_fsdp2(ranks):
    _check(ranks, "fsdp_checkpointed", "fsdp_checkpointed_eager", [1, 1])


def test_compiled_root_with_sharded_blocks(ranks):
    """The blocks FSDP2 manages are opaque calls of the root's trace: their hooks run eagerly on every call."""
    _check(ranks, "compiled_sharded_root", "fsdp_eager", [1])


def test_blocks_sharded_after_the_root_was_compiled(ranks):
    _check(ranks, "sharded_after_compile", "fsdp_eager", [1])


def test_activation_checkpointing_around_sharded_blocks_in_a_compiled_root(ranks):
    _check(ranks, "compiled_sharded_root_checkpointed", "fsdp_checkpointed_eager", [1])


def test_a_sharded_block_with_a_mixed_precision_policy_is_refused(ranks):
    for res in _result(ranks, "mixed_precision_refused"):
        assert res["out"]["error"].startswith("SpecEngineError"), res["out"]["error"]
        assert "self.h.0 (FSDPBlock)" in res["out"]["error"] and "mixed precision" in res["out"]["error"]


def test_a_ddp_called_by_a_compiled_function_is_refused_before_it_runs(ranks):
    for res in _result(ranks, "ddp_inside_refused"):
        assert res["out"]["error"].startswith("SpecEngineError"), res["out"]["error"]
        assert "(DistributedDataParallel)" in res["out"]["error"]


def test_a_collective_in_a_compiled_function_is_refused_and_never_runs(ranks):
    for res in _result(ranks, "collective_refused"):
        assert res["out"]["error"].startswith("UnsupportedOpError"), res["out"]["error"]
        assert "all_reduce" in res["out"]["error"] and "test_distributed.py" in res["out"]["error"]
        assert res["out"]["sum"] == [1.0, 1.0] and res["out"]["misses"] == 0


def test_a_python_functional_collective_is_refused(ranks):
    for res in _result(ranks, "functional_refused"):
        assert "_functional_collectives.all_reduce" in res["out"]["error"], res["out"]["error"]


def test_a_functional_collective_op_runs_on_every_call(ranks):
    _check(ranks, "collective_op", "collective_op_eager", [1])


def test_rank_queries_are_constants(ranks):
    for r, res in enumerate(_result(ranks, "rank_query")):
        assert res["out"]["out"] == [r + 2.0, r + 2.0] and res["compiles"] == [1]


if __name__ == "__main__":
    worker(int(sys.argv[1]), sys.argv[2])
