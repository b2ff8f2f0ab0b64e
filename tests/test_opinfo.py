"""PyTorch's OpInfo database through specengine (issue 12): a fixed subset of ops, 4 samples each.

float32 on CPU, `dynamic=True`, compared with eager at the op's tolerances (tests/opinfo_run.py decides the
outcomes: pass, unsupported, crash, wrong). Ops in PASSING must pass, with no more cache misses over their samples
than in bench/opinfo_baseline.json; every op here must be free of crashes and wrong results (an unsupported op
raises UnsupportedOpError with its reason). `python bench/opinfo.py` runs all ops.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("expecttest")  # OpInfo imports numpy and expecttest (the `test` extra)
pytest.importorskip("numpy")

import opinfo_run as R  # noqa: E402

BASELINE = Path(__file__).resolve().parent.parent / "bench" / "opinfo_baseline.json"

# Ops that pass (the baseline's, near-duplicate variants left out to keep CI short, and those fixed since).
PASSING = [
    "T",
    "__radd__",
    "__rmod__",
    "__rmul__",
    "__rsub__",
    "abs",
    "add",
    "all",
    "amax",
    "amin",
    "any",
    "arange",
    "argmax",
    "argmin",
    "atan2",
    "baddbmm",
    "bmm",
    "cat",
    "ceil",
    "chunk",
    "clamp",
    "clamp_max",
    "clamp_min",
    "contiguous",
    "cos",
    "cumsum",
    "div.floor_rounding",
    "div.no_rounding_mode",
    "einsum",
    "empty",
    "empty_like",
    "eq",
    "erf",
    "exp",
    "expand",
    "expand_as",
    "expm1",
    "eye",
    "flatten",
    "flip",
    "floor",
    "floor_divide",
    "fmod",
    "full",
    "full_like",
    "gather",
    "ge",
    "gt",
    "index_select",
    "isinf",
    "isnan",
    "le",
    "lerp",
    "linspace",
    "log",
    "log1p",
    "log2",
    "log_softmax",
    "logical_and",
    "logical_not",
    "logical_or",
    "logical_xor",
    "logspace",
    "logsumexp",
    "lt",
    "mT",
    "masked.mean",
    "masked.sum",
    "masked_fill",
    "matmul",
    "max.binary",
    "max.reduction_with_dim",
    "maximum",
    "mean",
    "min.binary",
    "min.reduction_with_dim",
    "minimum",
    "mm",
    "mul",
    "ne",
    "neg",
    "new_empty",
    "new_full",
    "new_ones",
    "new_zeros",
    "nn.functional.cross_entropy",
    "nn.functional.dropout",
    "nn.functional.embedding",
    "nn.functional.gelu",
    "nn.functional.group_norm",
    "nn.functional.layer_norm",
    "nn.functional.linear",
    "nn.functional.mse_loss",
    "nn.functional.relu",
    "nn.functional.rms_norm",
    "nn.functional.silu",
    "nn.functional.softplus",
    "ones",
    "ones_like",
    "permute",
    "pow",
    "prod",
    "reciprocal",
    "remainder",
    "repeat",
    "reshape",
    "roll",
    "round",
    "round.decimals_3",
    "rsqrt",
    "rsub",
    "scalar_tensor",
    "sigmoid",
    "sign",
    "signal.windows.bartlett",
    "signal.windows.general_hamming",
    "signal.windows.hamming",
    "signal.windows.kaiser",
    "sin",
    "softmax",
    "split",
    "sqrt",
    "squeeze",
    "stack",
    "std",
    "std_mean",
    "sub",
    "sum",
    "t",
    "take_along_dim",
    "tanh",
    "to",
    "transpose",
    "tril",
    "triu",
    "true_divide",
    "trunc",
    "unbind",
    "unflatten",
    "unsqueeze",
    "var",
    "var_mean",
    "view",
    "where",
    "zeros",
    "zeros_like",
]

# Ops that do not pass yet (no rule) or crashed in the baseline: they must raise UnsupportedOpError cleanly
# until they pass; move each to PASSING when it does.
NOT_YET = [
    "__getitem__",
    "acos",
    "addmm",
    "asin",
    "broadcast_shapes",
    "cfloat",
    "clone",
    "cosh",
    "cumprod",
    "diagonal",
    "dot",
    "exp2",
    "index_put",
    "isclose",
    "item",
    "linalg.vector_norm",
    "movedim",
    "mv",
    "nansum",
    "narrow",
    "nn.functional.batch_norm",
    "nn.functional.conv1d",
    "nn.functional.conv2d",
    "nn.functional.elu",
    "nn.functional.hardtanh",
    "nn.functional.interpolate.nearest",
    "nn.functional.leaky_relu",
    "nn.functional.max_pool2d",
    "nn.functional.nll_loss",
    "nn.functional.pad.constant",
    "outer",
    "scatter",
    "select",
    "sinh",
    "sort",
    "sparse.sampled_addmm",
    "tan",
    "topk",
]


# Crashes in the baseline still being fixed (issue 12): expected to fail until then.
KNOWN_CRASHES = {"broadcast_shapes"}  # torch._refs needs a SymNode (the generic path)


def _params() -> list:
    xfail = pytest.mark.xfail(strict=True, reason="crashes in the baseline")
    return [pytest.param(n, marks=[xfail] if n in KNOWN_CRASHES else []) for n in PASSING + NOT_YET]


@pytest.fixture(scope="module")
def ops() -> dict:
    return R.ops_by_name()


@pytest.fixture(scope="module")
def baseline() -> dict:
    return json.loads(BASELINE.read_text())["ops"]


@pytest.mark.parametrize("name", _params())
def test_opinfo(name: str, ops: dict, baseline: dict) -> None:
    result = R.run_op(ops[name], "specengine", n=4, timeout_s=60)
    assert result.outcome not in ("crash", "wrong"), f"{name}: {result.outcome}: {result.detail}"
    if name in PASSING:
        assert result.outcome == "pass", f"{name}: {result.outcome}: {result.detail}"
        before = baseline[name]["specengine"]
        if before["outcome"] == "pass":
            assert result.misses <= before["misses"], f"{name}: {result.misses} misses, {before['misses']} before"


def test_subset_names(ops: dict) -> None:
    """Every op named here exists in this torch's op_db, once."""
    names = PASSING + NOT_YET
    assert len(set(names)) == len(names)
    assert [n for n in names if n not in ops] == []
