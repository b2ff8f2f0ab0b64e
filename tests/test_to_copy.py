"""`Tensor.to(..., copy=True)` always gives a new tensor, also where no conversion happens (it was refused).

By a generator: the ways of spelling a conversion (none, the same dtype, another dtype, the same device, another
tensor's dtype and device, a memory format) x copy given or not (positional or keyword) x what the program then
does with the result (writes into it, returns it beside the input, backpropagates through it), over sizes 2, 0, 1,
3: eager's values, eager's aliasing (the result is the input exactly where eager's is), the input unchanged by a
write into a copy, eager's gradients, eager's TypeError for a spelling its parser refuses, and one trace under
dynamic=True. (`x.to(memory_format=...)` without copy gives a new proxy where eager may give `x` itself: `y is x`
is not compared there; see the closing note.)"""

from __future__ import annotations

import pytest
import torch
from helpers import counts

import specengine

CONVERSIONS = {
    "nothing": ("", ""),
    "same dtype": ("torch.float32", "dtype=torch.float32"),
    "other dtype": ("torch.float64", "dtype=torch.float64"),
    "same device": ("'cpu'", "device='cpu'"),
    "other tensor": ("x", "x"),
    "memory format": ("", "memory_format=torch.contiguous_format"),
}
COPIES = {"absent": None, "keyword": "copy=True", "positional": "False, True", "keyword False": "copy=False"}
USES = ("write", "return", "backward")
SIZES = (2, 0, 1, 3)


def _call(conversion: str, copy: str) -> str:
    positional, keyword = CONVERSIONS[conversion]
    flag = COPIES[copy]
    if flag == "False, True":  # (non_blocking, copy) after the conversion given positionally
        return f"x.to({', '.join(p for p in (positional, flag) if p)})"
    return f"x.to({', '.join(p for p in (keyword, flag) if p)})"


def _program(call: str, use: str):
    body = {
        "write": f"    y = {call}\n    y.add_(1)\n    return x, y\n",
        "return": f"    y = {call}\n    return x, y, y is x\n"
        if "True" in call
        else f"    y = {call}\n    return x, y\n",  # (see the note on memory formats in the docstring)
        "backward": f"    return ({call} * 2).sum()\n",
    }[use]
    glb = {"torch": torch}
    exec(compile("def f(x):\n" + body, "<to-copy>", "exec"), glb)
    return glb["f"]


CASES = [
    (c, k, u) for c in CONVERSIONS for k in COPIES for u in USES if k != "positional" or CONVERSIONS[c][0]
]  # (flags alone positionally: `x.to(False, True)` is no copy)


@pytest.mark.parametrize("conversion,copy,use", CASES, ids=[f"{c}-{k}-{u}" for c, k, u in CASES])
def test_to_with_copy_is_eager(conversion, copy, use):
    f = _program(_call(conversion, copy), use)
    cfn = specengine.compile(f, dynamic=True)
    for n in SIZES:
        x = torch.arange(float(n), requires_grad=use == "backward")
        x_ref = x.detach().clone().requires_grad_(use == "backward")
        try:
            want = f(x_ref)
        except TypeError as e:  # eager's parser refuses the spelling (`x.to('cpu', False, True)`): so do we
            with pytest.raises(TypeError):
                cfn(x)
            assert counts(cfn) == (0, 0), e
            return
        got = cfn(x)
        torch.testing.assert_close(got, want)
        if use == "backward":
            got.backward()
            want.backward()
            torch.testing.assert_close(x.grad, x_ref.grad)
        elif use == "write":  # a write into a copy leaves the input as it was; into the input itself changes it
            torch.testing.assert_close(x, x_ref.detach())
    assert counts(cfn) == (1, len(SIZES) - 1)
