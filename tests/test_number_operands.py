"""torch functions called on Python numbers only (`torch.div(seq_len, w, rounding_mode="trunc")`, as Longformer
does): eager wraps the first number in a 0-dim tensor; the engine does the same with a symbolic literal, so a size
stays symbolic. Generated: functions x operand kinds (a size, an int input, a float input, a constant) x dynamic
modes, over sizes 0, 1, 2 and more, against eager (values, dtypes, and the exception type where eager raises).
"""

from __future__ import annotations

import itertools

import pytest
import torch

import specengine

FUNCTIONS = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "true_divide": torch.true_divide,
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "add_alpha": lambda a, b: torch.add(a, b, alpha=2), "maximum": torch.maximum, "atan2": torch.atan2,
}  # fmt: skip
OPERANDS = {
    "size": lambda x, k, f: x.shape[0],
    "size_plus": lambda x, k, f: x.shape[0] + 3,
    "int": lambda x, k, f: k,
    "float": lambda x, k, f: f,
    "const": lambda x, k, f: 3,
}
SIZES = (2, 0, 1, 5)


@pytest.mark.parametrize("dynamic", [True, None])
@pytest.mark.parametrize("fn,left,right", list(itertools.product(FUNCTIONS, OPERANDS, ["size", "const", "float"])))
def test_numbers_only(fn, left, right, dynamic):
    op, a, b = FUNCTIONS[fn], OPERANDS[left], OPERANDS[right]

    def prog(x, k, f):
        return x + 1, op(a(x, k, f), b(x, k, f) if right != "size" else b(x, k, f) + 1)

    cfn = specengine.compile(prog, dynamic=dynamic)
    for n in SIZES:
        args = (torch.ones(n), n + 2, n + 0.5)
        try:
            ref = prog(*args)
        except Exception as e:  # noqa: BLE001 - the engine must raise the same type
            with pytest.raises(type(e)):
                cfn(*args)
            return
        out = cfn(*args)
        assert out[1].dtype == ref[1].dtype and out[1].shape == ref[1].shape
        torch.testing.assert_close(out[1], ref[1], equal_nan=True)
    expected = 1 if dynamic else 2  # automatic: the first entry pins every input; the second call's change is symbolic
    assert specengine.cache_misses(cfn) == expected
    assert specengine.cache_hits(cfn) == len(SIZES) - expected
