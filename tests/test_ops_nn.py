"""The neural-network ops against eager PyTorch over a sweep of sizes (the structure of test_ops.py).

Each OpCase is a function and input templates: a tuple of sizes is a float32 tensor, `T(...)` a tensor of another
dtype or value range, and N, M (sizes) and K (an int argument) come from SWEEP (sizes 0, 1, 2 and larger). Every
call is compared with eager (the same exception type where eager raises), as are the traced output's dtype and
shape and the values of the entry's decomposition into prims. Dropout in training mode is random: it is checked
against eager under the same seed, and statistically.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

import pytest
import torch
import torch.nn.functional as F
from helpers import run_both

import specengine
from specengine.ir import passes
from specengine.ir.proxies import TensorProxy
from specengine.ir.symbol import tree_leaves

pytestmark = pytest.mark.filterwarnings("ignore:Using a target size", "ignore:Mismatch dtype", "ignore:size_average")

N, M, K = "n", "m", "k"
SWEEP = [(2, 3, 1), (0, 2, 0), (1, 1, -1), (2, 0, 3), (5, 4, 2), (1, 5, 7), (3, 1, -4), (4, 4, 4)]
BF16, F64, I64 = torch.bfloat16, torch.float64, torch.int64


@dataclass(frozen=True)
class T:
    """A tensor spec: sizes (ints or N/M) and dtype; ints are drawn from [low, high)."""

    shape: tuple
    dtype: torch.dtype = torch.float32
    low: int = -5
    high: int = 6


def idx(*shape: Any, high: int = 4, low: int = 0, dtype: torch.dtype = I64) -> T:
    return T(shape, dtype, low, high)


@dataclass(frozen=True)
class OpCase:
    """`one_miss`: nothing depends on sizes, so one compile per template serves every size (0 and 1 included);
    `static`: also swept with dynamic=False."""

    name: str
    fn: Callable
    templates: list
    one_miss: bool = False
    static: bool = False
    xfail: str | None = None


def _fill(spec: Any, env: dict) -> Any:
    if isinstance(spec, str):
        return env[spec]
    if isinstance(spec, tuple):
        spec = T(spec)
    if not isinstance(spec, T):
        return spec
    shape = tuple(env.get(s, s) for s in spec.shape)
    if spec.dtype.is_floating_point:
        return torch.randn(shape).to(spec.dtype)
    if spec.dtype is torch.bool:
        return torch.randint(0, 2, shape).bool()
    return torch.randint(spec.low, spec.high, shape, dtype=spec.dtype)


def _signature(args: list) -> tuple:
    return tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else a for a in args)


def calls_by_template(case: OpCase) -> list[list[list]]:
    out, seen = [], set()
    for template in case.templates:
        calls = []
        for n, m, k in SWEEP:
            args = [_fill(s, {N: n, M: m, K: k}) for s in template]
            if _signature(args) not in seen:
                seen.add(_signature(args))
                calls.append(args)
        out.append(calls)
    return out


def calls_of(case: OpCase) -> list[list]:
    return [args for calls in calls_by_template(case) for args in calls]


_FLAT: dict = {}


def flat_call(cfn: Any, args: list) -> tuple[Any, Any]:
    """The entry that ran last (its final trace) and the output of its prims-only trace on `args`."""
    prologue = specengine.last_prologue(cfn)
    entry = next(e for e in specengine.cache_entries(cfn) if e.prologue is prologue)
    final = entry.traces[-1]
    values = {}
    for param, value in zip(final.params, prologue.fn(*args)):
        values[param.name] = value
        if isinstance(param, TensorProxy):
            values.update({d.args[0]: size for d, size in zip(param.dims, value.shape) if d.op == "sym"})
    if entry not in _FLAT:
        specialized = next(t for t in entry.traces if t.provenance.startswith("Specialization"))
        flat = passes.flatten(specialized)
        _FLAT[entry] = (flat.params, flat.python_callable())
    params, fn = _FLAT[entry]
    return (final, values), fn(*(values[p.name] for p in params))


def check_entry(cfn: Any, args: list, out: Any) -> None:
    """Output proxies have the real outputs' dtype and shape; the prims-only trace computes the same values."""
    (final, values), flat_out = flat_call(cfn, args)
    for proxy, value in zip(tree_leaves(final.output), tree_leaves(out)):
        if isinstance(proxy, TensorProxy):
            assert proxy.dtype == value.dtype, f"traced {proxy.dtype}, eager {value.dtype}"
            assert tuple(d.eval(values) for d in proxy.dims) == tuple(value.shape), f"{proxy} vs {value.shape}"
    torch.testing.assert_close(flat_out, out, equal_nan=True)


def run_sweep(fn: Callable, calls: list[list], dynamic: bool) -> Any:
    cfn = specengine.compile(fn, dynamic=dynamic)
    for repeat in range(2):
        misses = specengine.cache_misses(cfn)
        for args in calls:
            out = run_both(fn, cfn, args)
            if not isinstance(out, Exception):
                check_entry(cfn, args, out)
        assert repeat == 0 or specengine.cache_misses(cfn) == misses, "a repeated call missed"
    return cfn


def _raises(fn: Callable, args: list) -> bool:
    try:
        fn(*args)
    except Exception:  # noqa: BLE001
        return True
    return False


def _same(name: str, fn: Callable, templates: list, static: bool = False) -> OpCase:
    return OpCase(name, fn, templates, one_miss=True, static=static)


# Embedding: indices of any shape; the weight's sizes are symbolic too.

W = (4, M)
EMBEDDING = [
    _same("embedding", lambda i, w: F.embedding(i, w), [(idx(N), W), (idx(N, M), W), (idx(), W)], static=True),
    _same("embedding-i32", lambda i, w: F.embedding(i, w), [(idx(N, 2, dtype=torch.int32), W)]),
    _same("embedding-padding", lambda i, w: (F.embedding(i, w, 1), F.embedding(i, w, padding_idx=-4)), [(idx(N), W)]),
    _same("embedding-padding-oob", lambda i, w: F.embedding(i, w, padding_idx=4), [(idx(N), W)]),
    _same("embedding-padding-oob-neg", lambda i, w: F.embedding(i, w, padding_idx=-5), [(idx(N), W)]),
    OpCase("embedding-padding-symbolic", lambda i, w: F.embedding(i, w, padding_idx=w.shape[0] - 1), [(idx(N), W)]),
    _same("embedding-index-out-of-range", lambda i, w: F.embedding(i, w), [(idx(N, low=4, high=6), W)]),
    _same("embedding-bad-indices", lambda i, w: F.embedding(i, w), [((N,), W), (idx(N, dtype=torch.int16), W)]),
    _same("embedding-bad-weight", lambda i, w: F.embedding(i, w), [(idx(N), (4,)), (idx(N), (4, 2, M))]),
    _same("embedding-int-weight", lambda i, w: F.embedding(i, w), [(idx(N), idx(4, M, high=9))]),
    _same("embedding-bf16", lambda i, w: F.embedding(i, w, scale_grad_by_freq=True), [(idx(N), T(W, BF16))]),
    _same("torch.embedding", lambda i, w: torch.embedding(w, i), [(idx(N, M), W)]),
]

# Normalization.

X2, X3 = (N, M), (N, 2, M)
LAST = lambda x: x.shape[-1:]  # noqa: E731
NORMS = [
    _same("layer_norm", lambda x: F.layer_norm(x, LAST(x)), [(X2,), (X3,), (T(X2, F64),)], static=True),
    _same("layer_norm-affine", lambda x, w, b: F.layer_norm(x, LAST(x), w, b), [(X2, (M,), (M,))], static=True),
    _same("layer_norm-2d-eps", lambda x, w: F.layer_norm(x, x.shape[-2:], w, eps=1e-2), [(X3, (2, M))]),
    _same("layer_norm-bias-only", lambda x, b: F.layer_norm(x, [x.shape[1]], bias=b), [(X2, (M,))]),
    _same(
        "layer_norm-bf16", lambda x, w: F.layer_norm(x, LAST(x), w), [(T(X2, BF16), (M,)), (T(X2, BF16), T((M,), BF16))]
    ),
    _same("layer_norm-const-shape", lambda x: F.layer_norm(x, [3]), [((N, 3),)], static=True),
    OpCase("layer_norm-const-shape-mismatch", lambda x: F.layer_norm(x, (3,)), [(X2,), (X3,)]),
    OpCase("layer_norm-weight-mismatch", lambda x, w: F.layer_norm(x, LAST(x), w), [(X2, (3,)), (X2, (1, M))]),
    _same("layer_norm-errors", lambda x: F.layer_norm(x, []), [(X2,)]),
    _same("layer_norm-int", lambda x: F.layer_norm(x, LAST(x)), [(idx(N, M),)]),
    _same("layer_norm-mixed", lambda x, w: F.layer_norm(x, LAST(x), w), [(X2, T((M,), F64)), (T(X2, F64), (M,))]),
    _same(
        "layer_norm-mixed-bias", lambda x, w, b: F.layer_norm(x, LAST(x), w, b), [(T(X2, BF16), T((M,), BF16), (M,))]
    ),
    _same("torch.layer_norm", lambda x, w: torch.layer_norm(x, LAST(x), w, None, 1e-3), [(X3, (M,)), (X2, None)]),
    _same("rms_norm", lambda x: F.rms_norm(x, LAST(x)), [(X2,), (X3,), (T(X2, F64),), (T(X2, BF16),)], static=True),
    _same("rms_norm-weight", lambda x, w: F.rms_norm(x, x.shape[-2:], w, eps=1e-3), [(X3, (2, M))]),
    _same("rms_norm-mixed", lambda x, w: F.rms_norm(x, LAST(x), w), [(T(X2, BF16), (M,)), (X2, T((M,), F64))]),
    _same("torch.rms_norm", lambda x, w: torch.rms_norm(x, LAST(x), w), [(X2, (M,)), (X3, None)]),
    OpCase("rms_norm-errors", lambda x, w: F.rms_norm(x, (3,), w), [(X2, (3,)), ((N, 3), (2,)), (idx(N, 3), None)]),
    _same("group_norm", lambda x: F.group_norm(x, 2), [((N, 4, M),), ((N, 6),), (T((N, 4, M), F64),)], static=True),
    _same("group_norm-affine", lambda x, w, b: F.group_norm(x, 2, w, b, 1e-3), [((N, 4, M), (4,), (4,))]),
    _same("group_norm-bf16", lambda x, w: F.group_norm(x, 2, w), [(T((N, 4, M), BF16), (4,))]),
    _same("group_norm-symbolic-channels", lambda x, w: F.group_norm(x, 2, w), [((N, M, 3), (M,))]),
    OpCase("group_norm-int-groups", lambda x, k: F.group_norm(x, k), [((N, 4, 2), K)]),
    _same("group_norm-one-value", lambda x: F.group_norm(x, 2), [((1, 2),), ((1, 2, 1),)]),
    _same("group_norm-errors", lambda x: F.group_norm(x, 2), [((N,),), ((N, 3),), (idx(N, 4),)]),
    OpCase("group_norm-bad-params", lambda x, w: F.group_norm(x, 2, None, w), [((N, 4), (3,)), ((N, 4), T((4,), F64))]),
    _same("torch.group_norm", lambda x, w: torch.group_norm(x, 2, w), [((N, 4, M), (4,))]),
    _same("torch.group_norm-one-value", lambda x: torch.group_norm(x, 2), [((1, 2),), ((1, 2, 1),)]),
]

# Dropout where it is deterministic: not training, p = 0, p = 1, errors.

DROPOUT = [
    _same("dropout-eval", lambda x: F.dropout(x, 0.5, training=False), [(X2,), (idx(N),)], static=True),
    _same("dropout-p0", lambda x: (F.dropout(x, 0.0), torch.dropout(x, 0.0, True)), [(X2,), (idx(N),)]),
    _same("dropout-p1", lambda x: F.dropout(x, p=1.0), [(X2,), (idx(N),), (T((N,), torch.bool),)]),
    _same("torch.dropout-eval", lambda x: torch.dropout(x, 0.3, False), [(X2,)]),
    _same("dropout-bad-p", lambda x: F.dropout(x, 1.5, False), [(X2,)]),
    _same("torch.dropout-bad-p", lambda x: torch.dropout(x, -0.5, False), [(X2,)]),
    OpCase("dropout-int-training", lambda x: F.dropout(x, 0.5), [(idx(N),), (T((N,), torch.bool),)]),
]

# Attention: (B, H, T, D) and (B, T, D) with symbolic sizes.

Q4, KV4, V4 = (N, 2, M, 3), (N, 2, M, 3), (N, 2, M, 4)
SDPA = F.scaled_dot_product_attention
ATTENTION = [
    _same("sdpa", lambda q, k, v: SDPA(q, k, v), [(Q4, KV4, V4), ((N, M, 3), (N, M, 3), (N, M, 4))], static=True),
    _same("sdpa-causal", lambda q, k, v: SDPA(q, k, v, is_causal=True), [(Q4, KV4, V4), ((M, 3), (M, 3), (M, 2))]),
    _same("sdpa-causal-tq-tk", lambda q, k, v: SDPA(q, k, v, is_causal=True), [((2, N, 3), (2, M, 3), (2, M, 4))]),
    _same("sdpa-bool-mask", lambda q, k, v, m: SDPA(q, k, v, m), [(Q4, KV4, V4, T((M, M), torch.bool))]),
    _same("sdpa-float-mask", lambda q, k, v, m: SDPA(q, k, v, attn_mask=m), [(Q4, KV4, V4, (N, 1, M, M))]),
    _same("sdpa-scale", lambda q, k, v: (SDPA(q, k, v, scale=0.3), SDPA(q, k, v, scale=-2.0)), [(Q4, KV4, V4)]),
    _same("sdpa-broadcast-batch", lambda q, k, v: SDPA(q, k, v), [((N, 2, M, 3), (1, 2, 3, 3), (1, 1, 3, 4))]),
    _same("sdpa-zero-dim", lambda q, k, v: SDPA(q, k, v, is_causal=True), [((2, 3, N), (2, M, N), (2, M, 3))]),
    _same("sdpa-gqa", lambda q, k, v: SDPA(q, k, v, enable_gqa=True), [((N, 4, M, 3), KV4, (N, 1, M, 4))]),
    _same("sdpa-dtypes", lambda q, k, v: SDPA(q, k, v, is_causal=True), [(T(Q4, BF16), T(KV4, BF16), T(V4, BF16)),
                                                                          (T(Q4, F64), T(KV4, F64), T(V4, F64))]),
    _same("sdpa-bf16-float-mask", lambda q, k, v, m: SDPA(q, k, v, m),
          [(T(Q4, BF16), T(KV4, BF16), T(V4, BF16), (M, M))]),
    _same("sdpa-mask-and-causal", lambda q, k, v: SDPA(q, k, v, q[0, 0] > 0, is_causal=True), [(Q4, Q4, V4)]),
    _same("sdpa-bad-mask", lambda q, k, v, m: SDPA(q, k, v, m), [(Q4, KV4, V4, T((M, M), F64)),
                                                                 (Q4, KV4, V4, T((M,), torch.bool)),
                                                                 (Q4, KV4, V4, T((), torch.bool)),
                                                                 (Q4, KV4, V4, T((3, N, 2, M, M), torch.bool))]),
    OpCase("sdpa-bad-inputs", lambda q, k, v: SDPA(q, k, v), [((N, 3), (N, 2), (N, 4)), ((N, 3), (M, 3), (N, 4)),
                                                             ((3,), (3,), (3,)), (idx(N, 3), idx(N, 3), idx(N, 3)),
                                                             ((N, 3), T((N, 3), F64), (N, 3))]),
    OpCase("sdpa-mask-mismatch", lambda q, k, v, m: SDPA(q, k, v, m), [(Q4, KV4, V4, T((3, M), torch.bool))]),
    OpCase("sdpa-gqa-mismatch", lambda q, k, v: SDPA(q, k, v, enable_gqa=True), [((2, 3, N, 3), (2, M, N, 3),
                                                                                  (2, M, N, 2))]),
]  # fmt: skip

# Losses.

LOGITS, LOGITS3 = (N, 5), (N, 5, M)
CE = lambda *a, **kw: F.cross_entropy(*a, **kw)  # noqa: E731
IGNORED = lambda t: torch.where(t < 0, -100, t)  # noqa: E731 - negative targets become the default ignore_index
POSITIVE = lambda w: w.abs() + 0.5  # noqa: E731
CROSS_ENTROPY = [
    _same("cross_entropy", lambda x, t: CE(x, t), [(LOGITS, idx(N, high=5)), (LOGITS3, idx(N, M, high=5))], True),
    _same("cross_entropy-none-sum", lambda x, t: (CE(x, t, reduction="none"), CE(x, t, reduction="sum")),
          [(LOGITS, idx(N, high=5)), (LOGITS3, idx(N, M, high=5)), ((5,), idx(high=5))]),
    _same("cross_entropy-unbatched", lambda x, t: CE(x, t), [((5,), idx(high=5)), ((5,), idx(1, high=5))]),
    _same("cross_entropy-ignore", lambda x, t: (CE(x, IGNORED(t)), CE(x, t, ignore_index=2, reduction="none")),
          [(LOGITS, idx(N, low=-2, high=5)), (LOGITS3, idx(N, M, low=-3, high=5)), ((5,), idx(low=-2, high=5))]),
    _same("cross_entropy-ignore-out-of-range", lambda x, t: CE(x, t, ignore_index=5), [(LOGITS, idx(N, high=6))]),
    _same("cross_entropy-weight", lambda x, t, w: (CE(x, IGNORED(t), POSITIVE(w)),
                                                   CE(x, t.abs(), w, reduction="none"),
                                                   CE(x, t.abs(), w, reduction="sum")),
          [(LOGITS, idx(N, low=-2, high=5), (5,)), (LOGITS3, idx(N, M, low=-2, high=5), (5,))]),
    _same("cross_entropy-smoothing", lambda x, t, w: (CE(x, IGNORED(t), label_smoothing=0.2),
                                                      CE(x, IGNORED(t), POSITIVE(w), label_smoothing=0.1),
                                                      CE(x, t.abs(), w, reduction="sum", label_smoothing=0.3),
                                                      CE(x, IGNORED(t), reduction="none", label_smoothing=1.0)),
          [(LOGITS, idx(N, low=-2, high=5), (5,)), (LOGITS3, idx(N, M, low=-2, high=5), (5,))]),
    _same("cross_entropy-probs", lambda x, p, w: (CE(x, p), CE(x, p, reduction="none"), CE(x, p, w, reduction="sum"),
                                                  CE(x, p, w, label_smoothing=0.25)),
          [(LOGITS, LOGITS, (5,)), (LOGITS3, LOGITS3, (5,)), ((5,), (5,), (5,)), (T(LOGITS, F64), LOGITS, (5,)),
           (T(LOGITS, BF16), T(LOGITS, BF16), T((5,), BF16)), (T(LOGITS, BF16), LOGITS, (5,))]),
    _same("cross_entropy-symbolic-classes", lambda x, t: CE(x, t, reduction="sum"), [((N, M), idx(N, high=1))]),
    _same("cross_entropy-dtypes", lambda x, t: (CE(x, t), CE(x, t, label_smoothing=0.1)),
          [(T(LOGITS, BF16), idx(N, high=5)), (T(LOGITS, F64), idx(N, high=5, dtype=torch.uint8))]),
    _same("cross_entropy-legacy", lambda x, t: CE(x, t, size_average=False), [(LOGITS, idx(N, high=5))]),
    OpCase("cross_entropy-target-errors", lambda x, t: CE(x, t), [(LOGITS, idx(M)), (LOGITS, idx(N, 2)),
                                                                  (LOGITS, idx(N, dtype=torch.int32)),
                                                                  (LOGITS3, idx(N, 3)), (LOGITS3, (N, M)),
                                                                  ((5,), idx(N, high=5)), ((), idx()), ((), ()),
                                                                  (LOGITS, idx(N, 5)), (idx(N, 5), idx(N)),
                                                                  (idx(N, 5), (N, 5))]),
    OpCase("cross_entropy-weight-errors", lambda x, t, w: CE(x, t, w),
           [(LOGITS, idx(N), (4,)), (LOGITS, idx(N), (5, 1)), (LOGITS, idx(N), T((5,), F64)),
            (LOGITS3, idx(N, M), (M,)), (LOGITS, LOGITS, (M,))]),
    _same("cross_entropy-bad-reduction", lambda x, t: CE(x, t, reduction="avg"), [(LOGITS, idx(N))]),
    _same("cross_entropy-probs-ignore-index", lambda x: CE(x, x, ignore_index=1), [(LOGITS,)]),
    _same("cross_entropy-bad-smoothing", lambda x, t: CE(x, t, label_smoothing=1.5), [(LOGITS, idx(N))]),
    _same("cross_entropy-smoothing-errors", lambda x, t: CE(x, t, label_smoothing=2.0), [(LOGITS, LOGITS)]),
    _same("cross_entropy-unbatched-smoothing", lambda x, t: CE(x, t, label_smoothing=0.1), [((5,), idx(1))]),
]  # fmt: skip

MSE = [
    _same("mse_loss", lambda x, y: F.mse_loss(x, y), [(X2, X2), (X3, X3), ((), ())], static=True),
    _same("mse_loss-reductions", lambda x, y: (F.mse_loss(x, y, reduction="sum"), F.mse_loss(x, y, reduction="none"),
                                               F.mse_loss(x, y, reduce=False)), [(X2, X2)]),
    _same("mse_loss-broadcast", lambda x, y: F.mse_loss(x, y), [(X2, (M,)), ((N, 1), (1, M)), ((), (N,))]),
    _same("mse_loss-mismatch", lambda x, y: F.mse_loss(x, y), [((N, 3), (4,)), ((N, M), (M, 1))]),
    _same("mse_loss-dtypes", lambda x, y: F.mse_loss(x, y),
          [(X2, T(X2, F64)), (idx(N), (N,)), (T(X2, BF16), T(X2, BF16)), (idx(N), idx(N)),
           (T((N,), torch.bool), T((N,), torch.bool))]),
    _same("mse_loss-weight", lambda x, y, w: (F.mse_loss(x, y, weight=w.abs()), F.mse_loss(x, y, "sum", weight=w),
                                              F.mse_loss(x, y, reduction="none", weight=w)),
          [(X2, X2, X2), (X2, (M,), X2)]),
    _same("mse_loss-weight-errors", lambda x, y, w: F.mse_loss(x, y, weight=w), [(X2, X2, (M,))]),
    _same("mse_loss-bad-reduction", lambda x, y: F.mse_loss(x, y, reduction="avg"), [(X2, X2)]),
    _same("mse_loss-bad-reduction-weight", lambda x, y: F.mse_loss(x, y, reduction="avg", weight=x), [(X2, X2)]),
]  # fmt: skip

CASES = EMBEDDING + NORMS + DROPOUT + ATTENTION + CROSS_ENTROPY + MSE


def case_params(cases: list[OpCase]) -> list:
    marks = lambda c: [pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else []  # noqa: E731
    return [pytest.param(c, id=c.name, marks=marks(c)) for c in cases]


@pytest.mark.parametrize("case", case_params(CASES))
def test_op_dynamic(case: OpCase) -> None:
    calls = calls_of(case)
    cfn = run_sweep(case.fn, calls, dynamic=True)
    assert specengine.cache_misses(cfn) <= len(calls)
    if case.one_miss:  # one entry per template (they differ in rank or dtype), whatever the sizes
        expected = sum(any(not _raises(case.fn, args) for args in t) for t in calls_by_template(case))
        assert specengine.cache_misses(cfn) == expected, f"guards: {specengine.last_guards(cfn)}"


@pytest.mark.parametrize("case", case_params([c for c in CASES if c.static]))
def test_op_static(case: OpCase) -> None:
    calls = calls_of(case)
    cfn = run_sweep(case.fn, calls, dynamic=False)
    assert specengine.cache_misses(cfn) == sum(not _raises(case.fn, args) for args in calls)


def test_every_case_name_is_unique() -> None:
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))


# Gradients: backward through the compiled function equals eager's.

GRADS = [
    OpCase("grad-embedding", lambda i, w: F.embedding(i, w, padding_idx=0), [(idx(N, M), W)]),
    OpCase("grad-layer_norm", lambda x, w, b: F.layer_norm(x, LAST(x), w, b), [(X3, (M,), (M,))]),
    OpCase("grad-rms_norm", lambda x, w: F.rms_norm(x, LAST(x), w), [(X2, (M,))]),
    OpCase("grad-group_norm", lambda x, w, b: F.group_norm(x, 2, w, b), [((N, 4, M), (4,), (4,))]),
    OpCase("grad-dropout-eval", lambda x: F.dropout(x, 0.2, training=False) * 2, [(X2,)]),
    OpCase("grad-sdpa", lambda q, k, v, m: SDPA(q, k, v, m) + SDPA(q, k, v, is_causal=True), [(Q4, KV4, V4, (M, M))]),
    OpCase("grad-cross_entropy",
           lambda x, t: CE(x, IGNORED(t), label_smoothing=0.1) + CE(x, t.abs(), reduction="none").sum(),
           [(LOGITS, idx(N, low=-3, high=5)), (LOGITS3, idx(N, M, high=5))]),
    OpCase("grad-cross_entropy-probs", lambda x, p: CE(x, p), [(LOGITS3, LOGITS3)]),
    OpCase("grad-mse_loss", lambda x, y: F.mse_loss(x, y) + F.mse_loss(x, y, reduction="none").sum(), [(X2, (M,))]),
]  # fmt: skip


def _grad_args(args: list) -> list:
    return [a.double().requires_grad_() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]


@pytest.mark.parametrize("case", case_params(GRADS))
def test_op_gradients(case: OpCase) -> None:
    cfn = specengine.compile(case.fn, dynamic=True)
    calls = [_grad_args(args) for args in calls_of(case)]
    for args in calls:
        if _raises(case.fn, args):
            continue
        inputs = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
        expected, got = case.fn(*args), cfn(*args)
        torch.testing.assert_close(got, expected, equal_nan=True)
        grad_out = torch.randn_like(expected)
        got_grads = torch.autograd.grad(got, inputs, grad_out, allow_unused=True)
        expected_grads = torch.autograd.grad(expected, inputs, grad_out, allow_unused=True)
        for g, e in zip(got_grads, expected_grads):
            torch.testing.assert_close(g, e, equal_nan=True)
    assert specengine.cache_misses(cfn) == sum(any(not _raises(case.fn, a) for a in t) for t in calls_by_template(case))


# Dropout in training mode: random, impure.


@pytest.mark.parametrize("fn", [lambda x: F.dropout(x, 0.3), lambda x: torch.dropout(x, 0.3, True)], ids=["F", "torch"])
def test_dropout_training_matches_eager_under_the_same_seed(fn: Callable) -> None:
    cfn = specengine.compile(fn, dynamic=True)
    for shape in [(0, 3), (1, 1), (2, 3), (7, 5), (1, 9)]:
        x = torch.randn(shape)
        torch.manual_seed(1)
        expected = fn(x)
        torch.manual_seed(1)
        torch.testing.assert_close(cfn(x), expected)
        torch.manual_seed(1)
        torch.testing.assert_close(flat_call(cfn, [x])[1], expected)
    assert specengine.cache_misses(cfn) == 1


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_keep_rate_and_scale(p: float) -> None:
    x = torch.rand(300, 400) + 0.5
    cfn = specengine.compile(lambda x: F.dropout(x, p), dynamic=True)
    for out in (cfn(x), flat_call(cfn, [x])[1]):
        kept = out != 0
        assert abs(kept.float().mean().item() - (1 - p)) < 0.01
        torch.testing.assert_close(out[kept], x[kept] / (1 - p))


def test_two_dropouts_are_not_merged() -> None:
    x = torch.rand(50, 60) + 0.5
    cfn = specengine.compile(lambda x: (F.dropout(x, 0.5), F.dropout(x, 0.5), F.dropout(x, 0.5, False)))
    a, b, c = cfn(x)
    assert not torch.equal(a, b)
    assert c is x
    assert str(specengine.last_traces(cfn)[-1]).count("= torch.nn.functional.dropout(") == 3
    flat_a, flat_b, _ = flat_call(cfn, [x])[1]
    assert not torch.equal(flat_a, flat_b)


def test_dropout_training_gradient() -> None:
    x = torch.randn(20, 30, requires_grad=True)
    out = specengine.compile(lambda x: F.dropout(x, 0.4), dynamic=True)(x)
    g = torch.randn_like(out)
    (grad,) = torch.autograd.grad(out, x, g)
    torch.testing.assert_close(grad, torch.where(out != 0, g / 0.6, 0.0))


# What the engine cannot trace raises UnsupportedOpError naming the op and the user's line.


def _mask_index(x: torch.Tensor) -> torch.Tensor:
    x.mul_(1)
    return x if x[x > 0].shape[0] > 3 else -x  # the line the error must name


UNSUPPORTED = [
    ("data-dependent u0", lambda x: x * int(len(torch.nonzero(x)))),  # a data-dependent size pinned
    ("one_hot", lambda x: F.one_hot(x.long().abs())),  # data-dependent, and torch has no fake rule for it
    ("data-dependent u0", _mask_index),  # a branch on a data-dependent size, after an input write (no speculation)
    ("Tensor.tolist", lambda x: x.tolist()),  # 2-D
    ("embedding(max_norm", lambda x: F.embedding(x.long().abs(), x, max_norm=1.0)),
]


def test_attention_dropout_runs_torchs_op_drawing_on_every_call() -> None:
    def fn(q):
        return SDPA(q, q, q, dropout_p=0.5)

    cfn = specengine.compile(fn, dynamic=True)
    for n in (0, 1, 2, 5):
        q = torch.randn(2, n, 4)
        torch.manual_seed(0)
        expected = fn(q)
        torch.manual_seed(0)
        torch.testing.assert_close(cfn(q), expected)
    q = torch.randn(2, 8, 4)
    assert not torch.equal(cfn(q), cfn(q))  # a fresh dropout mask per call
    assert specengine.cache_misses(cfn) == 3  # torch's kernel decides on emptiness and L == 1, pins the head size


@pytest.mark.parametrize("op, fn", UNSUPPORTED, ids=[f"{op}-{i}" for i, (op, _) in enumerate(UNSUPPORTED)])
def test_unsupported_ops_name_the_op_and_line(op: str, fn: Callable) -> None:
    cfn = specengine.compile(fn, dynamic=True)
    with pytest.raises(specengine.UnsupportedOpError) as info:
        cfn(torch.randn(3, 3))
    message = str(info.value)
    code = fn.__code__
    line = code.co_firstlineno + (1 if fn is _mask_index else 0)
    assert op in message, message
    assert re.search(rf"test_ops_nn\.py:{line}\b", message), message
