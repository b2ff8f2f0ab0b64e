"""Longformer's chunking (issue 25).

`hidden_states.view(n, torch.div(t, 2 * w, rounding_mode="trunc"), ...)` takes a 0-d tensor as a size: a number tensor
(ops/number_tensors.py), so the size stays symbolic (one compile). `as_strided(size, stride)` built from `x.stride()`
of a computed tensor needs strides, which traced tensors do not carry: UnsupportedOpError naming the op, the user's
line and the alternative; the alternative (unfold) runs at one compile, equal to eager.
"""

from __future__ import annotations

import pytest
import torch
from helpers import counts

import specengine
from specengine.errors import UnsupportedOpError


def chunk_with_tensor_size(x):
    return x.view(x.size(0), torch.div(x.size(1), 4, rounding_mode="trunc"), 4, x.size(2))


def chunk_as_strided(x):
    h = x.view(x.size(0), x.size(1) // 4, 4, x.size(2))
    size, stride = list(h.size()), list(h.stride())
    size[1], stride[1] = size[1] * 2 - 1, stride[1] // 2
    return h.as_strided(size=size, stride=stride)


def chunk_unfold(x):  # Longformer's onnx_export path: the same windows
    return x.unfold(1, 4, 2).transpose(2, 3)


@pytest.mark.parametrize("fn, match", [(chunk_as_strided, "Tensor.stride.*unfold")])
def test_refused_by_name_with_the_alternative(fn, match):
    x = torch.randn(2, 8, 3)
    fn(x)  # eager runs it
    with pytest.raises(UnsupportedOpError, match=match) as e:
        specengine.compile(fn, dynamic=True)(x)
    assert "test_size_tensors_and_strides.py" in str(e.value)


def test_the_alternatives_run_at_one_compile():
    def numbers(x):
        return x.view(x.size(0), x.size(1) // 4, 4, x.size(2)) * 2

    for fn in (numbers, chunk_unfold, chunk_with_tensor_size):
        cfn = specengine.compile(fn, dynamic=True)
        for b, t in [(1, 4), (2, 8), (1, 12), (3, 16)]:
            x = torch.randn(b, t, 3)
            torch.testing.assert_close(cfn(x), fn(x))
        assert counts(cfn) == (1, 3), specengine.recompile_reasons(cfn)
