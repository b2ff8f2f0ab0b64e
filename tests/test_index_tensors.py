"""Advanced indexing with integer tensors (ops/ltorch_index.py): eager's results, and no guard on broadcasting."""

from __future__ import annotations

import pytest
import torch

import specengine

CASES = {
    "rows": (lambda a, i, j: a[i], (5, 3), ((4,), (1,))),
    "pairs": (lambda a, i, j: a[i, j], (5, 3), ((4, 1), (1, 6))),
    "after slice": (lambda a, i, j: a[:, i], (5, 3, 2), ((4,), (1,))),
    "split by slice": (lambda a, i, j: a[i, :, j], (5, 3, 2), ((4,), (4,))),
    "ellipsis": (lambda a, i, j: a[..., i], (5, 3, 2), ((7, 1), (1,))),
    "None first": (lambda a, i, j: a[None, i, j], (5, 3, 2), ((2,), (1,))),
    "None between": (lambda a, i, j: a[i, None, j], (5, 3, 2), ((2,), (2,))),
    "mask grid": (lambda a, i, j: a[i[:, None, None, None], j[None, None, None, :]], (5, 3), ((4,), (6,))),
}


@pytest.mark.parametrize("name", list(CASES))
def test_integer_tensor_index(name):
    fn, shape, index_shapes = CASES[name]
    cfn = specengine.compile(fn, dynamic=True)
    for n in (1, 2, 0, 3):  # index sizes 1, 2, 0 and 3: one entry (a size of 1 broadcasts without a guard)
        a = torch.randn(*shape)
        i, j = (torch.randint(0, 2, tuple(d if d == 1 else d * n for d in s)) for s in index_shapes)
        ref = fn(a, i, j)
        out = cfn(a, i, j)
        assert out.shape == ref.shape and torch.equal(out, ref)
    assert specengine.cache_misses(cfn) == 1 and specengine.cache_hits(cfn) == 3
    assert specengine.last_guards(cfn) == []


def test_out_of_range_index_raises_like_eager():
    cfn = specengine.compile(lambda a, i: a[i], dynamic=True)
    cfn(torch.randn(3), torch.tensor([0, 2]))
    with pytest.raises(IndexError):
        cfn(torch.randn(3), torch.tensor([0, 3]))
    assert specengine.cache_misses(cfn) == 1
