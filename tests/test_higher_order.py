"""Higher-order ops and torch.func transforms in a compiled function (issue 25): `associative_scan` (Mamba's path
under is_compiling()), `torch.cond`, `while_loop` and `torch.vmap` / `torch.func.vmap` never run on proxies; each is
one op running torch's eager implementation (capture/higher_order.py).

A generator: programs x batch/length sizes incl. 1 and 2, equal to eager (or to the plain-torch recurrence where
eager itself would call torch.compile), at one compile; a function closing over a value of the call is refused.
"""

from __future__ import annotations

import os

import pytest
import torch
from helpers import counts

import specengine
from specengine.errors import UnsupportedOpError

os.environ.setdefault("HF_HUB_OFFLINE", "1")
SIZES = [(1, 1), (2, 1), (1, 2), (2, 2), (3, 5), (1, 5)]  # (batch, length)


def combine(left, right):  # Mamba's: state_t = a_t * state_(t-1) + b_t
    a_left, b_left = left
    a_right, b_right = right
    return a_left * a_right, a_right * b_left + b_right


def scan(a, b):
    from torch._higher_order_ops.associative_scan import associative_scan  # (as Mamba imports it, per call)

    _, states = associative_scan(combine, (a, b), dim=1, combine_mode="generic")
    return states.sum(-1) + 1


def scan_reference(a, b):
    state, out = torch.zeros_like(b[:, 0]), []
    for t in range(a.shape[1]):
        state = a[:, t] * state + b[:, t]
        out.append(state)
    return torch.stack(out, 1).sum(-1) + 1


def cond_tensor(a, b):
    return torch.cond(a.sum() > 0, lambda x, y: x * y, lambda x, y: x - y, (a, b)) + 1


def cond_reference(a, b):
    return (a * b if a.sum() > 0 else a - b) + 1  # (eager torch.cond itself calls torch.compile)


def cond_size(a, b):
    return torch.cond(a.shape[1] > 1, lambda x, y: x + y, lambda x, y: x * 2, (a, b))


def vmapped(a, b):
    return torch.vmap(lambda x, y: (x * y).sum(0))(a, b) * 2


def func_vmapped(a, b):
    return torch.func.vmap(torch.dot, in_dims=(0, 0))(a.reshape(a.shape[0], -1), b.reshape(b.shape[0], -1))


def loop(a, b):
    from torch._higher_order_ops.while_loop import while_loop

    def cond_fn(i, x):
        return i < 3

    def body_fn(i, x):
        return i + 1, x * 0.5 + 1

    return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.long), a))[1] + b


PROGRAMS = {"associative_scan": (scan, scan_reference), "cond_tensor": (cond_tensor, cond_reference),
            "cond_size": (cond_size, cond_size), "vmap": (vmapped, vmapped), "func_vmap": (func_vmapped, func_vmapped),
            "while_loop": (loop, None)}  # fmt: skip
MISSES = {"cond_size": 2}  # a size predicate is a branch: length 1 and longer are two programs


def _loop_reference(a, b):
    x = a
    for _ in range(3):
        x = x * 0.5 + 1
    return x + b


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_higher_order_op_is_one_op_at_one_compile(name):
    fn, reference = PROGRAMS[name]
    reference = reference or _loop_reference
    cfn = specengine.compile(fn, dynamic=True)
    for b, t in SIZES:
        a, v = torch.rand(b, t, 3), torch.randn(b, t, 3)
        torch.testing.assert_close(cfn(a, v), reference(a, v))
    misses = MISSES.get(name, 1)
    assert counts(cfn) == (misses, len(SIZES) - misses), specengine.recompile_reasons(cfn)


def test_a_function_closing_over_a_value_of_the_call_is_refused():
    def fn(a, b):
        scale = a.shape[1] * 2.0
        return torch.vmap(lambda x: x * scale)(a) + b

    cfn = specengine.compile(fn, dynamic=True)
    with pytest.raises(UnsupportedOpError, match="closing over"):
        cfn(torch.randn(2, 3), torch.randn(2, 3))


def test_mamba_runs_equal_to_eager_over_batch_and_length():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.MambaConfig(vocab_size=99, hidden_size=16, num_hidden_layers=1, state_size=4, expand=2,
                                      conv_kernel=3, use_cache=False)  # fmt: skip
    model = transformers.MambaForCausalLM(config).eval()
    cfn = specengine.compile(model, dynamic=True)
    calls = [(1, 5), (2, 5), (1, 1), (3, 2), (2, 8)]
    with torch.no_grad():
        for b, t in calls:
            ids = torch.randint(1, 99, (b, t))
            torch.testing.assert_close(cfn(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-4, rtol=1e-4)
    assert counts(cfn) == (1, len(calls) - 1), specengine.recompile_reasons(cfn)
