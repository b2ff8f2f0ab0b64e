"""Longformer's chunking (issue 25).

`hidden_states.view(n, torch.div(t, 2 * w, rounding_mode="trunc"), ...)` takes a 0-d tensor as a size: a number tensor
(ops/number_tensors.py), so the size stays symbolic (one compile). `as_strided(size, stride)` built from `x.stride()`
reads the strides from the real tensor at run time (ops/ltorch_strides.py): one compile, equal to eager, whatever
layout the input has.
"""

from __future__ import annotations

import pytest
import torch
from helpers import counts

import specengine


def chunk_with_tensor_size(x):
    return x.view(x.size(0), torch.div(x.size(1), 4, rounding_mode="trunc"), 4, x.size(2))


def chunk_as_strided(x):
    h = x.view(x.size(0), x.size(1) // 4, 4, x.size(2))
    size, stride = list(h.size()), list(h.stride())
    size[1], stride[1] = size[1] * 2 - 1, stride[1] // 2
    return h.as_strided(size=size, stride=stride)


def chunk_unfold(x):  # Longformer's onnx_export path: the same windows
    return x.unfold(1, 4, 2).transpose(2, 3)


def test_the_alternatives_run_at_one_compile():
    def numbers(x):
        return x.view(x.size(0), x.size(1) // 4, 4, x.size(2)) * 2

    for fn in (numbers, chunk_unfold, chunk_with_tensor_size, chunk_as_strided):
        cfn = specengine.compile(fn, dynamic=True)
        for b, t in [(1, 4), (2, 8), (1, 12), (3, 16)]:
            x = torch.randn(b, t, 3)
            torch.testing.assert_close(cfn(x), fn(x))
        assert counts(cfn) == (1, 3), specengine.recompile_reasons(cfn)


LAYOUTS = {  # how the tensor whose strides are read was made
    "contiguous": lambda x: x,
    "transposed_input": lambda x: x.transpose(0, 1).contiguous().transpose(0, 1),
    "permuted_reshape": lambda x: x.permute(1, 0, 2).reshape(x.size(1), x.size(0), x.size(2)).transpose(0, 1),
    "sliced": lambda x: x[:, ::2] if x.size(1) > 1 else x,
}


def _windows(make):
    def f(x):
        h = make(x)
        size, stride = list(h.size()), list(h.stride())
        size[1], stride[1] = max(size[1] - 1, 0), stride[1]
        return h.as_strided(size, stride) * 2, h.stride(-1), h.stride()[0] * 3

    return f


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dynamic", [True, None, False], ids=lambda d: f"dynamic={d}")
def test_strides_are_read_at_run_time_for_every_layout(layout, dynamic):
    f = _windows(LAYOUTS[layout])
    cf = specengine.compile(f, dynamic=dynamic)
    sizes = [(2, 4, 3), (1, 6, 2), (3, 2, 1), (2, 4, 3), (2, 0, 3)]
    for s in sizes:
        x = torch.randn(*s)
        got, want = cf(x), f(x)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == want[1:]
    # no stride decision is a guard: the entries are those of the sizes (and of "sliced"'s own `if`)
    misses = {True: 1, None: 2, False: 4}[dynamic] + (layout == "sliced" and dynamic is not False)
    assert counts(cf) == (misses, len(sizes) - misses), specengine.recompile_reasons(cf)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_is_contiguous_of_a_computed_tensor_is_read_at_run_time(layout):
    """Eager's answer depends on sizes (a transpose of a (1, n) tensor is contiguous): read from the real tensor, a
    branch on it is speculated (one entry per side), its value returned is a bool."""
    make = LAYOUTS[layout]

    def f(x):
        h = make(x).transpose(1, 2)
        c = h.is_contiguous()
        return (h * 2 if c else h.contiguous() * 3), c

    cf = specengine.compile(f, dynamic=True)
    sizes = [(2, 4, 3), (2, 4, 1), (1, 1, 3), (2, 4, 3), (3, 2, 1)]
    sides = set()
    for s in sizes:
        x = torch.randn(*s)
        (got, c), (want, d) = cf(x), f(x)
        torch.testing.assert_close(got, want)
        assert c is d
        sides.add(d)
    misses = len(sides) + (layout == "sliced")  # ("sliced"'s own `if x.size(1) > 1`)
    assert specengine.cache_misses(cf) == misses, specengine.recompile_reasons(cf)
