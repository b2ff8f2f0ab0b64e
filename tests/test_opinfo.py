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
    "__getitem__",
    "__radd__",
    "__rmod__",
    "__rmul__",
    "__rsub__",
    "abs",
    "acos",
    "add",
    "addmm",
    "all",
    "amax",
    "amin",
    "any",
    "arange",
    "argmax",
    "argmin",
    "argwhere",
    "asin",
    "atan2",
    "baddbmm",
    "bmm",
    "broadcast_shapes",
    "cat",
    "ceil",
    "cfloat",
    "chunk",
    "clamp",
    "clamp_max",
    "clamp_min",
    "clone",
    "contiguous",
    "cos",
    "cosh",
    "cumprod",
    "cumsum",
    "diagonal",
    "div.floor_rounding",
    "div.no_rounding_mode",
    "dot",
    "einsum",
    "empty",
    "empty_like",
    "eq",
    "erf",
    "exp",
    "exp2",
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
    "index_put",
    "index_select",
    "isclose",
    "isinf",
    "isnan",
    "item",
    "le",
    "lerp",
    "linalg.vector_norm",
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
    "masked_select",
    "matmul",
    "max.binary",
    "max.reduction_with_dim",
    "maximum",
    "mean",
    "min.binary",
    "min.reduction_with_dim",
    "minimum",
    "mm",
    "movedim",
    "mul",
    "mv",
    "nansum",
    "ne",
    "neg",
    "new_empty",
    "new_full",
    "new_ones",
    "new_zeros",
    "nn.functional.batch_norm",
    "nn.functional.conv1d",
    "nn.functional.conv2d",
    "nn.functional.cross_entropy",
    "nn.functional.dropout",
    "nn.functional.elu",
    "nn.functional.embedding",
    "nn.functional.gelu",
    "nn.functional.group_norm",
    "nn.functional.hardtanh",
    "nn.functional.interpolate.nearest",
    "nn.functional.layer_norm",
    "nn.functional.leaky_relu",
    "nn.functional.linear",
    "nn.functional.max_pool2d",
    "nn.functional.mse_loss",
    "nn.functional.nll_loss",
    "nn.functional.pad.constant",
    "nn.functional.relu",
    "nn.functional.rms_norm",
    "nn.functional.silu",
    "nn.functional.softplus",
    "nonzero",
    "ones",
    "ones_like",
    "outer",
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
    "scatter",
    "select",
    "sigmoid",
    "sign",
    "signal.windows.bartlett",
    "signal.windows.general_hamming",
    "signal.windows.hamming",
    "signal.windows.kaiser",
    "sin",
    "sinh",
    "softmax",
    "sort",
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
    "tan",
    "tanh",
    "to",
    "topk",
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
    "narrow",
    "sparse.sampled_addmm",
]


@pytest.fixture(scope="module")
def ops() -> dict:
    return R.ops_by_name()


@pytest.fixture(scope="module")
def baseline() -> dict:
    return json.loads(BASELINE.read_text())["ops"]


@pytest.mark.parametrize("name", PASSING + NOT_YET)
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
