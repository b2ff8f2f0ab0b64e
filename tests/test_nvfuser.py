"""nvFuser executor: regions, requests and guards through real traces on the CPU (reference backend);
CUDA tests run the same programs through nvfuser_direct and are skipped without CUDA or nvFuser."""

from __future__ import annotations

import importlib.util

import pytest
import torch
from helpers import counts, guards, run_both

import specengine
from specengine.executors.nvfuser import NvFuserExecutor, nvfuser_available
from specengine.executors.nvfuser.regions import group


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


cuda = pytest.mark.skipif(
    not torch.cuda.is_available() or importlib.util.find_spec("nvfuser_direct") is None,
    reason="needs CUDA and nvfuser_direct",
)


@pytest.mark.cuda
@cuda
def test_cuda_block_sweep_through_nvfuser():
    cfn = specengine.compile(block, dynamic=True)
    for b, t in ((1, 1), (2, 7), (3, 16), (5, 33)):
        run_both(block, cfn, [x.cuda() for x in block_inputs(b, t)])
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
