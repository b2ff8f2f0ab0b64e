"""`torch.func.vmap` (and `jacrev`, built on it) of a compiled function: the function sees one example, as eager.

Under vmap the compiled function is called with functorch's batched tensors, whose sizes are one example's; its
trace is that example's, and the computation's torch ops run batched, as eager's do. So an entry traced under vmap
serves a direct call of one example's sizes, and the other way round.

Generated: programs (elementwise ops that read a size, reductions, a `-1` view, ops on torch's generic path, a
matmul with a closed-over weight, a module) x vmap's `in_dims` (0 and 1) x call sequences mixing vmapped calls of
batch 3, 1 and 2 and direct calls, over per-example sizes 2, 0 and 1, so an entry made one way is offered a call
made the other way. Each call is compared with eager's `vmap` (or direct call); the counts are exact: one entry
(every program here is symbolic in the example's size, 0 included), every other call a hit.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import counts
from torch import nn

import specengine

torch.manual_seed(0)
_W = torch.randn(4, 3)
_LINEAR = nn.Linear(4, 3)
PROGRAMS = {
    "scaled_sin": lambda x: x.sin() * x.shape[0],
    "softmax_sum": lambda x: torch.softmax(x, -1).sum(0),
    "view": lambda x: x.reshape(-1, 2).flip(0),
    "pad": lambda x: F.pad(x, (1, 2)),
    "hardtanh_pool": lambda x: F.avg_pool1d(F.hardtanh(x).unsqueeze(1), 2),
    "matmul_weight": lambda x: x @ _W,
    "module": lambda x: _LINEAR(x),
}
SEQUENCES = {  # (batch or None for a direct call, per-example size)
    "vmap_first": [(3, 2), (1, 0), (None, 2), (2, 1), (None, 0), (3, 1)],
    "direct_first": [(None, 2), (3, 2), (None, 1), (1, 0), (2, 0)],
}


def _call(fn, batch, n: int, in_dim: int):
    if batch is None:
        return fn(torch.randn(n, 4))
    x = torch.randn(batch, n, 4) if in_dim == 0 else torch.randn(n, batch, 4)
    return torch.func.vmap(fn, in_dims=in_dim)(x)


@pytest.mark.parametrize("in_dim", (0, 1))
@pytest.mark.parametrize("sequence", SEQUENCES)
@pytest.mark.parametrize("name", PROGRAMS)
def test_vmap_of_a_compiled_function_is_eagers(name: str, sequence: str, in_dim: int) -> None:
    fn = PROGRAMS[name]
    cfn = specengine.compile(fn, dynamic=True)
    for i, (batch, n) in enumerate(SEQUENCES[sequence]):
        torch.manual_seed(i)
        want = _call(fn, batch, n, in_dim)
        torch.manual_seed(i)
        torch.testing.assert_close(_call(cfn, batch, n, in_dim), want)
    assert counts(cfn) == (1, len(SEQUENCES[sequence]) - 1)  # (symbolic in the example's size, empty included)


def test_jacrev_of_a_compiled_function_is_eagers() -> None:
    def f(x):
        return torch.tanh(x @ _W).sum(-1) * x.shape[0]

    cfn = specengine.compile(f, dynamic=True)
    for n in (2, 0, 1, 3):
        x = torch.randn(n, 4)
        torch.testing.assert_close(torch.func.jacrev(cfn)(x), torch.func.jacrev(f)(x))
    assert counts(cfn) == (1, 3)


def test_a_memory_format_vmap_cannot_query_raises_eagers_error() -> None:
    def f(x):
        return x * 2 if x.is_contiguous(memory_format=torch.channels_last) else x

    cfn = specengine.compile(f, dynamic=True)
    x = torch.randn(2, 1, 3, 4, 4)
    with pytest.raises(RuntimeError, match="is_contiguous inside of vmap") as want:
        torch.func.vmap(f)(x)
    with pytest.raises(RuntimeError, match="is_contiguous inside of vmap") as got:
        torch.func.vmap(cfn)(x)
    assert type(got.value) is type(want.value)
    assert specengine.cache_entries(cfn) == []
