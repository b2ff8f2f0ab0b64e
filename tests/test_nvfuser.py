"""nvFuser executor: regions, requests, guards and fusion plans through real traces on the CPU (reference
backend, which claims exactly what nvFuser claims); a recorder checks that replay issues exactly a plan's calls.
CUDA tests run the same programs through nvfuser_direct and are skipped without CUDA or nvFuser."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from helpers import counts, guards, run_both

import specengine
from specengine.constraints import expr as E
from specengine.examples.gpt import GPT, Block, GPTConfig
from specengine.executors.nvfuser import NvFuserExecutor, nvfuser_available
from specengine.executors.nvfuser.lowering import plan_inputs, replay
from specengine.executors.nvfuser.plan import DType, Ref
from specengine.executors.nvfuser.regions import group
from specengine.ir.proxies import TensorProxy


def ref():
    return [NvFuserExecutor("reference"), "torch"]


def fusions(cfn):
    final = specengine.last_traces(cfn)[-1]
    return [b for b in final.bsyms if b.sym.module == "nvfuser"]


def layer_norm(x):
    mu = x.mean(-1, keepdim=True)
    d = x - mu
    return d / ((d * d).mean(-1, keepdim=True) + 1e-5) ** 0.5


def block(x, wq, wk, wv, wo, w1, w2):
    b, t, c = x.shape
    h = layer_norm(x)
    q, k, v = ((h @ w).view(b, t, 2, c // 2).transpose(1, 2) for w in (wq, wk, wv))
    att = (q @ k.transpose(-2, -1)) * 0.5
    att = (att - att.amax(-1, keepdim=True)).exp()
    att = att / att.sum(-1, keepdim=True)
    x = x + (att @ v).transpose(1, 2).reshape(b, t, c) @ wo
    return x + (layer_norm(x) @ w1).relu() @ w2


def block_inputs(b, t, c=8):
    ws = [torch.randn(c, c) * 0.2 for _ in range(4)] + [torch.randn(c, 4 * c) * 0.2, torch.randn(4 * c, c) * 0.2]
    return [torch.randn(b, t, c)] + ws


def test_regions_of_an_attention_mlp_block():
    cfn = specengine.compile(block, dynamic=True, executors=ref())
    for b, t in ((2, 5), (3, 7), (2, 2)):
        run_both(block, cfn, block_inputs(b, t))
    assert counts(cfn) == (1, 2)
    regions = fusions(cfn)
    # matmuls stay with torch; the ops between them fuse: ln_1; the q/k/v views and transposes; the softmax;
    # the attention output's transpose and reshape; the residual add with ln_2; the relu (with the residual's
    # broadcast); the final residual add
    assert len(regions) == 7
    final = specengine.last_traces(cfn)[-1]
    assert sum(1 for b in final.bsyms if b.sym.print_name == "torch.matmul") == 8
    softmax = next(r for r in regions if any(s.sym.name == "exp" for s in r.subsymbols))
    assert {s.sym.name for s in softmax.subsymbols} >= {"amax", "sub", "exp", "sum", "div", "broadcast_in_dim"}
    assert "nvfuser.fusion" in str(final) and "# t" in str(final)  # each region's prims print under its call


def test_broadcast_requests_become_guards_and_one_miss_per_pattern():
    def f(a, b):
        return ((a + b).relu() * 2).sum(1) + a.mean()

    cfn = specengine.compile(f, dynamic=True, executors=ref())
    for n in (3, 5, 2, 9):
        run_both(f, cfn, [torch.randn(n, 4), torch.randn(1, 4)])
    assert counts(cfn) == (1, 3)
    assert guards(cfn) == ["b.shape[0] == 1", "a.shape[0] != 1", "a.shape[1] != 1", "b.shape[1] != 1"]
    prov = specengine.last_guards(cfn)[0].provenance
    assert prov.op == "broadcast_in_dim" and prov.reason == "the nvfuser executor needs a constant"
    run_both(f, cfn, [torch.randn(3, 4), torch.randn(3, 4)])  # another broadcast pattern: a new entry
    assert counts(cfn) == (2, 3)
    assert len(fusions(cfn)) == 1


def test_without_nvfuser_the_same_program_has_no_broadcast_guards():
    def f(a, b):
        return ((a + b).relu() * 2).sum(1)

    cfn = specengine.compile(f, dynamic=True)
    for sa, sb in (((3, 4), (1, 4)), ((3, 4), (3, 4))):
        run_both(f, cfn, [torch.randn(*sa), torch.randn(*sb)])
    assert counts(cfn) == (1, 1) and guards(cfn) == []


def test_contiguity_is_a_prologue_check():
    def f(a):
        return a * 2 + 1

    cfn = specengine.compile(f, dynamic=True, executors=ref())
    run_both(f, cfn, [torch.randn(3, 4)])
    assert "a.is_contiguous() is not True" in str(specengine.last_prologue(cfn))
    run_both(f, cfn, [torch.randn(4, 3).t()])
    assert counts(cfn) == (2, 0)
    assert specengine.recompile_reasons(cfn) == ["a.is_contiguous() is True failed: a.is_contiguous() = False"]


def test_shape_queries_inside_a_region_are_scalar_inputs():
    def f(x):
        return (x * x.shape[1]).reshape(x.shape[0] * x.shape[1]) + 1

    cfn = specengine.compile(f, dynamic=True, executors=ref())
    for n, m in ((2, 3), (4, 5), (0, 3)):
        run_both(f, cfn, [torch.randn(n, m)])
    (region,) = fusions(cfn)
    assert [getattr(a, "name", None) for a in region.args] == ["x", "s1", "s0"]
    assert counts(cfn) == (1, 2)


def test_regions_respect_dependencies_through_unfused_ops():
    # c depends on the matmul, which depends on the first fused op: c cannot join the first region.
    def f(a, w):
        h = a * 2
        m = h @ w
        return (m + 1) * 3, h - 1

    cfn = specengine.compile(f, dynamic=True, executors=ref())
    run_both(f, cfn, [torch.randn(3, 4), torch.randn(4, 5)])
    final = specengine.last_traces(cfn)[-1]
    names = [b.sym.print_name for b in final.bsyms if b.sym.name != "del"]
    assert names == ["nvfuser.fusion0", "torch.matmul", "nvfuser.fusion1"]
    claimed = [b.sym.module == "nvfuser" for b in specengine.last_traces(cfn)[-2].bsyms]
    assert len(set(group(specengine.last_traces(cfn)[-2].bsyms, lambda b: b.sym.module == "nvfuser"))) >= 2
    assert any(claimed)


def test_default_executors_on_this_machine():
    cfn = specengine.compile(lambda x: x + 1)
    names = [e.name for e in cfn._options.executors]
    assert names == (["nvfuser", "torch"] if nvfuser_available() else ["torch"])


# Fusion plans: what the nvFuser backend would define, built from the region and the solution alone.


def served_entry(cfn):
    prologue = specengine.last_prologue(cfn)
    return next(e for e in specengine.cache_entries(cfn) if e.prologue is prologue)


def plans(cfn):
    """The fusion plans of the entry that served the last call."""
    return [b.sym.impl.plan for b in served_entry(cfn).traces[-1].bsyms if b.sym.module == "nvfuser"]


def defined(cfn, key="shape"):
    return [d[key] for p in plans(cfn) for d in p.defined_tensors()]


def test_broadcast_flags_per_dim_over_a_sweep_from_size_1():
    def f(a, b):
        return a + b

    cfn = specengine.compile(f, dynamic=True, executors=ref())
    # (a, b) shapes -> (misses, hits, the define_tensor shapes): 1 = broadcast, -1 = symbolic
    expected = [
        ((1, 4), (1, 4), (1, 0, [[1, -1], [1, -1]])),
        ((3, 4), (1, 4), (2, 0, [[-1, -1], [1, -1]])),  # a's dim 0 was 1 on the first call: not broadcast now
        ((5, 4), (1, 4), (2, 1, [[-1, -1], [1, -1]])),
        ((1, 4), (1, 4), (2, 2, [[1, -1], [1, -1]])),
        ((2, 1), (1, 3), (3, 2, [[-1, 1], [1, -1]])),
        ((2, 5), (2, 5), (4, 2, [[-1, -1], [-1, -1]])),
        ((7, 1), (1, 6), (4, 3, [[-1, 1], [1, -1]])),
    ]
    for sa, sb, (misses, hits, shapes) in expected:
        run_both(f, cfn, [torch.randn(*sa), torch.randn(*sb)])
        assert counts(cfn) == (misses, hits)
        assert defined(cfn) == shapes
        # broadcast exactly where the entry's trace has the constant 1
        (region,) = [b for b in served_entry(cfn).traces[-1].bsyms if b.sym.module == "nvfuser"]
        inputs = [x for x in region.args if isinstance(x, TensorProxy)]
        assert shapes == [[1 if d is E.const(1) else -1 for d in x.dims] for x in inputs]


def test_nothing_in_a_plan_depends_on_the_first_call():
    def f(x, y):
        return (x * 2 + 1).sum(-1) * y.mean()

    seen = []
    for first in ((1, 1), (3, 5), (1, 7), (0, 2)):
        cfn = specengine.compile(f, dynamic=True, executors=ref())
        run_both(f, cfn, [torch.randn(*first), torch.randn(4)])
        seen.append([str(p) for p in plans(cfn)])
        for later in ((2, 3), (1, 1), (6, 1)):
            run_both(f, cfn, [torch.randn(*later), torch.randn(4)])
        assert counts(cfn) == (1, 3)
    assert seen[0] == seen[1] == seen[2] == seen[3]
    assert defined(cfn) == [[-1, -1], [-1]]


def test_dtypes_of_inputs_casts_and_declined_dtypes():
    def f(a, b, c, d):
        return a * 2, (b.float() + 1).to(torch.bfloat16), c & (a > 0), d.double().sum(0)

    args = [torch.randint(-3, 3, (3, 4), dtype=torch.int32), torch.randn(3, 4).bfloat16(),
            torch.rand(3, 4) > 0.5, torch.randn(3, 4, dtype=torch.float64)]  # fmt: skip
    cfn = specengine.compile(f, dynamic=True, executors=ref())
    run_both(f, cfn, args)
    assert sorted(str(t) for t in defined(cfn, "dtype")) == sorted(
        ["DataType.Int32", "DataType.BFloat16", "DataType.Bool", "DataType.Double"]
    )
    casts = [dict(c.kwargs)["dtype"] for p in plans(cfn) for c in p.calls if c.fn == "ops.cast"]
    assert DType("Float") in casts and DType("BFloat16") in casts

    def g(x):
        return x * 2 + 1

    for dt in (torch.int8, torch.int16, torch.uint8):  # no nvFuser DataType: declined at claim time
        cg = specengine.compile(g, dynamic=True, executors=ref())
        run_both(g, cg, [torch.ones(3, dtype=dt)])
        assert fusions(cg) == []


def test_contiguity_comes_from_the_prologue_check():
    def f(a, b):
        return a * 2 + b

    cfn = specengine.compile(f, dynamic=True, executors=ref())
    run_both(f, cfn, [torch.randn(3, 4), torch.randn(1, 4)])
    assert defined(cfn, "contiguity") == [[True, True], [None, True]]
    assert defined(cfn, "stride_order") == [[], []]
    run_both(f, cfn, [torch.randn(4, 3).t(), torch.randn(1, 4)])
    assert counts(cfn) == (2, 0)
    assert defined(cfn, "contiguity") == [[False, False], [None, True]]
    assert "a.is_contiguous() is not False" in str(specengine.last_prologue(cfn))


def test_unchecked_inputs_get_one_plan_per_contiguity():
    # the matmul's output is no input of the computation: the prologue cannot check it; the region's callable
    # reads its contiguity on each call and builds the plan for it
    def f(a, w):
        return (a @ w).relu() + 1

    cfn = specengine.compile(f, dynamic=True, executors=ref())
    run_both(f, cfn, [torch.randn(3, 4), torch.randn(4, 5)])
    (region,) = fusions(cfn)
    impl = region.sym.impl
    assert defined(cfn, "contiguity") == [[True, True]]
    (t,) = [x.name for x in region.args if isinstance(x, TensorProxy)]
    assert impl.plan_for({t: False}).defined_tensors()[0]["contiguity"] == [False, False]


def test_reduction_dtypes():
    def f(i, b, x):
        return i.sum(1), b.sum(0), x.amax(1), x.amin(0), i.prod(0), x.sum(1, dtype=torch.float64)

    args = [torch.randint(-3, 3, (3, 4), dtype=torch.int32), torch.rand(3, 4) > 0.5, torch.randn(3, 4)]
    cfn = specengine.compile(f, dynamic=True, executors=ref())
    run_both(f, cfn, args)
    reductions = [(c.fn, dict(c.kwargs)) for p in plans(cfn) for c in p.calls
                  if c.fn in ("ops.sum", "ops.prod", "ops.max", "ops.min")]  # fmt: skip
    sums = [(fn, k["dtype"]) for fn, k in reductions if fn in ("ops.sum", "ops.prod")]
    assert sorted(sums, key=str) == sorted([("ops.sum", DType("Int")), ("ops.sum", DType("Int")),
                                            ("ops.prod", DType("Int")), ("ops.sum", DType("Double"))], key=str)  # fmt: skip
    assert sorted(fn for fn, k in reductions if "dtype" not in k) == ["ops.max", "ops.min"]


def test_an_empty_reduction_emits_no_reduction():
    def f(x):
        return x.sum(0) * 2, x.amax(0)

    cfn = specengine.compile(f, dynamic=True, executors=ref())
    run_both(f, cfn, [torch.tensor(3.0)])
    (plan,) = plans(cfn)
    assert plan.ops() == ["mul", "set"]  # the amax of a 0-d tensor is the tensor: copied into an output


def test_logical_xor_is_ne_of_bools_and_bitwise_ops_on_bools_are_logical():
    def f(a, b):
        return torch.logical_xor(a, b), (a > 0) ^ (b > 0), torch.logical_not(a)

    cfn = specengine.compile(f, dynamic=True, executors=ref())
    run_both(f, cfn, [torch.randn(3, 4), torch.randn(3, 4).round()])
    (plan,) = plans(cfn)
    assert "logical_xor" not in plan.ops() and "bitwise_xor" not in plan.ops()
    assert plan.ops().count("ne") == 2 and plan.ops().count("cast") == 3


def test_slices_with_a_step_or_constant_end_before_start_are_declined():
    from specengine.executors.nvfuser.claims import lowerable
    from specengine.ir.symbol import BoundSymbol
    from specengine.ops import prims

    x = TensorProxy("x", (E.sym("s0"), 4), torch.float32, torch.device("cpu"), False)
    out = TensorProxy("t0", (E.sym("s0"), 2), torch.float32, torch.device("cpu"), False)
    ok = BoundSymbol(prims.slice, (x, (0, 1), (E.sym("s0"), 3), (1, 1)), (), out)
    assert lowerable(ok)
    for starts, ends, steps in (((0, 0), (E.sym("s0"), 4), (1, 2)), ((0, 3), (E.sym("s0"), 1), (1, 1)),
                                ((0, -1), (E.sym("s0"), 4), (1, 1))):  # fmt: skip
        assert not lowerable(BoundSymbol(prims.slice, (x, starts, ends, steps), (), out))

    def f(x):
        return x[:, 1:3] * 2

    cfn = specengine.compile(f, dynamic=True, executors=ref())
    for n in (1, 0, 5):
        run_both(f, cfn, [torch.randn(n, 4)])
    (plan,) = plans(cfn)
    (call,) = [c for c in plan.calls if c.fn == "ops.slice"]
    stop = dict(call.kwargs)["end_indices"][0]  # a dim taken whole ends at the input's own extent
    assert plan.calls[stop.index].fn == "ops.size"


def test_scalars_are_defined_by_type():
    def f(x, n: int, s: float):
        return x * n * s + (n > 2), x * n

    cfn = specengine.compile(f, dynamic=True, executors=ref())
    for n in (3, 1, 4):
        run_both(f, cfn, [torch.randn(3, 2), n, 0.5])
    (plan,) = plans(cfn)
    kinds = [dict(c.kwargs)["dtype"] for c in plan.calls if c.fn == "define_scalar"]
    assert sorted(map(str, kinds)) == ["DataType.Bool", "DataType.Double", "DataType.Int"]
    assert counts(cfn) == (1, 2)


def test_sizes_are_taken_inside_the_fusion_and_softmax_is_one_region():
    def f(x):
        return torch.softmax(x, -1) * x.shape[1]

    cfn = specengine.compile(f, dynamic=True, executors=ref())
    for shape in ((2, 5), (1, 3), (4, 0)):
        run_both(f, cfn, [torch.randn(*shape)])
    assert counts(cfn) == (1, 2)
    (plan,) = plans(cfn)
    assert [c.fn for c in plan.calls if c.fn.startswith("define")] == ["define_tensor"]  # no scalar inputs
    assert {"max", "exp", "sum", "truediv", "size"} <= set(plan.ops())


def test_cat_and_iota_are_claimed():
    def f(x):
        return torch.cat([x, x * 2], 1) + torch.arange(6), torch.arange(x.shape[0], dtype=torch.float32) + 1

    cfn = specengine.compile(f, dynamic=True, executors=ref())
    for shape in ((2, 3), (1, 3), (0, 3)):
        run_both(f, cfn, [torch.randn(*shape)])
    ops = [op for p in plans(cfn) for op in p.ops()]
    assert {"cat", "iota"} <= set(ops)
    # an arange over a symbolic size was checked on the example only (may_raise): torch runs it, and raises
    assert [b.sym.print_name for b in specengine.last_traces(cfn)[-1].bsyms].count("torch.arange") == 1


def test_size_checks_raise_eagers_errors():
    # broadcasts and reshapes checked only on the example sizes: the region checks them on each call
    from specengine.executors.nvfuser.lowering import size_checks, size_env

    def f(a, b, k: int):
        return (a + b) * 2, a.repeat(k, 1)

    cfn = specengine.compile(f, dynamic=True, executors=ref())
    run_both(f, cfn, [torch.randn(3, 4), torch.randn(3, 4), 2])
    regions = fusions(cfn)
    checks = [c for r in regions for c in size_checks(r.sym.impl.region)]
    assert {"broadcast", "negative"} <= {c[0] for c in checks}  # repeat's reshape keeps the numel: no check
    (r,) = [r for r in regions if any(c[0] == "broadcast" for c in size_checks(r.sym.impl.region))]
    names = {x.name: i for i, x in enumerate(r.args)}
    args = [torch.randn(3, 4) if isinstance(x, TensorProxy) else 3 for x in r.args]
    args[names["b"]] = torch.randn(5, 4)
    from specengine.executors.nvfuser.lowering import check_sizes

    with pytest.raises(RuntimeError, match="must match"):
        check_sizes(size_checks(r.sym.impl.region), size_env(r.sym.impl.region, tuple(args)))


def test_training_gpt_block_with_grad_gets_no_region_on_grad_tensors():
    blk = Block(GPTConfig(n_embd=16, n_head=2, block_size=16)).train()
    cfn = specengine.compile(blk, dynamic=True, executors=ref())
    x = torch.randn(2, 5, 16, requires_grad=True)
    out = cfn(x)
    final = specengine.last_traces(cfn)[-1]
    for region in fusions(cfn):  # only the causal mask (a buffer) may fuse: nothing that needs autograd
        tensors = [t for t in list(region.args) + list(region.output) if isinstance(t, TensorProxy)]
        assert not any(t.requires_grad for t in tensors)
    assert any(b.sym.print_name == "torch.layer_norm" for b in final.bsyms)
    out.sum().backward()
    expected_grads = [p.grad.clone() for p in blk.parameters()] + [x.grad.clone()]
    for p in list(blk.parameters()) + [x]:
        p.grad = None
    blk(x).sum().backward()
    for got, want in zip(expected_grads, [p.grad for p in blk.parameters()] + [x.grad]):
        torch.testing.assert_close(got, want)
    with torch.no_grad():  # without grad mode the same block fuses
        run_both(blk, cfn, [x])
    assert len(fusions(cfn)) > 3


class Recorder:
    """A fake FusionDefinition: records each call (resolved arguments) and returns a token for its result."""

    def __init__(self):
        self.log = []
        outer = self

        class Ops:
            def __getattr__(self, name):
                return lambda *a, **k: outer._record("ops." + name, a, k)

        self.ops = Ops()

    def _record(self, fn, args, kwargs):
        self.log.append((fn, args, kwargs))
        return ("value", len(self.log) - 1)

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        return lambda *a, **k: self._record(name, a, k)


class FakeDataType:
    def __getattr__(self, name):
        return ("DataType", name)


def test_replay_issues_exactly_the_plans_calls():
    def f(x, w, n: int):
        return torch.softmax(x * n, -1) + w, x.reshape(-1).sum(0, dtype=torch.float64)

    cfn = specengine.compile(f, dynamic=True, executors=ref())
    args = [torch.randn(3, 4), torch.randn(1, 4), 2]
    run_both(f, cfn, args)
    (plan,) = plans(cfn)
    fd = replay(plan, Recorder(), FakeDataType())

    def resolved(v):
        if isinstance(v, Ref):
            return ("value", v.index)
        if isinstance(v, DType):
            return ("DataType", v.name)
        return [resolved(x) for x in v] if isinstance(v, list) else v

    assert fd.log == [(c.fn, tuple(resolved(a) for a in c.args), {k: resolved(v) for k, v in c.kwargs})
                      for c in plan.calls]  # fmt: skip
    assert [fn for fn, _, _ in fd.log].count("add_output") == 2
    # execute's inputs: the tensors in definition order, then the scalar inputs evaluated from the arguments
    (region,) = fusions(cfn)
    values = {"x": args[0], "w": args[1], "n": 2, "s0": 3, "s1": 4, "s3": 4}
    inputs = plan_inputs(plan, [a.name for a in region.args], tuple(values[a.name] for a in region.args))
    assert len(inputs) == sum(c.fn.startswith("define") for c in plan.calls)
    assert inputs[-1] == 2 and all(isinstance(t, torch.Tensor) for t in inputs[:2])


OP_DATABASE = (
    "test_ops",
    "test_ops_elementwise",
    "test_ops_reductions",
    "test_ops_nn",
    "test_ops_shape_creation_linalg",
)


# Cases that differ from eager for reasons outside the nvFuser executor, or only on the emulator.
KNOWN = {
    "logsumexp-all": "torch.logsumexp(x, ()) raises in eager where numel > 0; its decomposition returns "
    "(ltorch_reductions records no check): the torch executor raises only because it runs torch's op",
    "sdpa-bad-inputs": "an empty product with mismatched inner sizes: eager's matmul raises; the decomposition "
    "for empty products (ltorch_linalg) records no check, so a fusing executor returns zeros",
    "layer_norm-bf16": "emulator only: a 1x1 layer norm is rounding noise amplified by 1/sqrt(eps); the CPU "
    "decomposition's nn_fma is one rounding, the emulator's mul + add two",
}


def op_cases(modules=OP_DATABASE, known=()):
    """The op database's cases (not those expected to fail), each with the harness of its module; `known`
    names cases of KNOWN that are expected to fail here."""
    import importlib

    out = []
    for name in modules:
        module = importlib.import_module(name)
        for c in module.CASES:
            marks = [pytest.mark.xfail(reason=KNOWN[c.name])] if c.name in known else []
            if not c.xfail:
                out.append(pytest.param((module, c), id=f"{name[5:] or 'ops'}-{c.name}", marks=marks))
    return out


def op_calls(case, per_template=None):
    """The calls of a case (sizes 0, 1, 2 and larger); `per_template`: the first ones of each template."""
    module, case = case
    return [args for calls in module.calls_by_template(case) for args in calls[:per_template]]


@pytest.mark.parametrize("case", op_cases(("test_ops",)))
def test_op_database_through_the_reference_backend(case):
    # the reference backend claims exactly what nvFuser claims and builds every region's plan while compiling
    fn = case[1].fn
    cfn = specengine.compile(fn, dynamic=True, executors=ref())
    for args in op_calls(case):
        run_both(fn, cfn, args)


cuda = pytest.mark.skipif(
    not torch.cuda.is_available() or importlib.util.find_spec("nvfuser_direct") is None,
    reason="needs CUDA and nvfuser_direct",
)


def _cuda(x):
    return x.cuda() if isinstance(x, torch.Tensor) else x


@pytest.mark.cuda
@cuda
@pytest.mark.parametrize("case", op_cases(known=("logsumexp-all", "sdpa-bad-inputs")))
def test_cuda_op_database_through_nvfuser(case):
    fn = case[1].fn
    calls = [[_cuda(a) for a in args] for args in op_calls(case, per_template=4)]  # sizes 0, 1 and 2 among them
    cfn = specengine.compile(fn, dynamic=True, executors=("nvfuser", "torch"))
    for args in calls:
        run_both(fn, cfn, args)


@pytest.mark.cuda
@cuda
def test_cuda_block_sweep_from_size_1():
    cfn = specengine.compile(block, dynamic=True)
    # one entry traced at (1, 1) serves every later size: nothing in its fusions may be a broadcast of size 1
    for b, t in ((1, 1), (2, 7), (3, 16), (5, 33), (1, 1)):
        run_both(block, cfn, [x.cuda() for x in block_inputs(b, t)])
    assert counts(cfn) == (1, 4)
    assert fusions(cfn)


@pytest.mark.cuda
@cuda
def test_cuda_gpt_one_miss_while_broadcast_pattern_stays():
    model = GPT(GPTConfig()).cuda().eval()
    cfn = specengine.compile(model, dynamic=True)
    with torch.no_grad():
        for b, t in ((2, 8), (3, 16), (4, 33), (2, 64)):
            run_both(model, cfn, [torch.randint(0, 64, (b, t), device="cuda")])
    assert counts(cfn) == (1, 3)
    assert fusions(cfn)


@pytest.mark.cuda
@cuda
def test_cuda_one_miss_while_broadcast_pattern_stays():
    def f(a, b):
        return ((a + b).relu() * 2).sum(1)

    cfn = specengine.compile(f, dynamic=True)
    for n in (3, 5, 64, 1000):
        run_both(f, cfn, [torch.randn(n, 4, device="cuda"), torch.randn(1, 4, device="cuda")])
    assert counts(cfn) == (1, 3)


@pytest.mark.cuda
@cuda
def test_cuda_sweep_from_size_1_is_not_stuck_on_broadcast():
    def f(x, y):
        return (x * 2 + 1).sum(-1) * y.mean()

    cfn = specengine.compile(f, dynamic=True)
    for shape in ((1, 1), (3, 5), (1, 7), (6, 1), (0, 2)):
        run_both(f, cfn, [torch.randn(*shape, device="cuda"), torch.randn(4, device="cuda")])
    assert counts(cfn) == (1, 4)


@pytest.mark.cuda
@cuda
def test_cuda_noncontiguous_inputs_and_intermediates():
    def f(a, x):
        return a * 2 + 1, x[::2] * 3  # x[::2] runs as torch's getitem: a strided view no prologue checks

    cfn = specengine.compile(f, dynamic=True)
    for n in (6, 1, 7):
        for a in (torch.randn(n, 5, device="cuda"), torch.randn(5, n, device="cuda").t()):
            run_both(f, cfn, [a, torch.randn(n, 4, device="cuda")])
    assert counts(cfn) == (2, 4)  # one entry per contiguity of `a`


class EmulatedNvFuser(NvFuserExecutor):
    """The nvFuser backend's lowering (plans replayed on a FusionDefinition, one per contiguity pattern) on
    the CPU stand-in of nvfuser_direct in nvfuser_emulator.py."""

    def __init__(self):
        super().__init__("reference")

    def _build(self, region, contiguous):
        from specengine.executors.nvfuser.lowering import lower

        return lower(region, contiguous)


@pytest.mark.parametrize("case", op_cases(known=("logsumexp-all", "sdpa-bad-inputs", "layer_norm-bf16")))
def test_op_database_through_replayed_plans_on_an_emulated_fusion_definition(case, monkeypatch):
    import nvfuser_emulator

    nvfuser_emulator.install(monkeypatch)
    fn = case[1].fn
    cfn = specengine.compile(fn, dynamic=True, executors=[EmulatedNvFuser(), "torch"])
    for args in op_calls(case, per_template=3):  # sizes 0, 1 and 2 among them
        run_both(fn, cfn, args)
