"""Footguns: ordinary Python on traced values, in the spirit of tinygrad's test_jit_footguns.

One test per construct of docs/python-semantics.md. Each call sequence offers an entry compiled for one call an
input that it must not serve; every call is compared with eager and the exact number of compiles is asserted.
Sections belong to the classes of issue 11; helpers add their own sections.
"""

from __future__ import annotations

import torch
from helpers import counts, sweep

# ---------------------------------------------------------------------------------------------------------------
# Type queries (isinstance, torch.is_tensor, hasattr, torch.Size)
# ---------------------------------------------------------------------------------------------------------------


def test_hasattr_of_a_missing_attribute_is_false():
    def f(x):
        if hasattr(x, "jax"):  # transformers' is_jax_jitting asks this of every tensor
            return x.jax()
        return x + 1 if hasattr(x, "shape") and hasattr(x, "add") else x

    cfn = sweep(f, [[(0,)], [(1,)], [(2,)]])
    assert counts(cfn) == (1, 2)


def test_getattr_with_a_default_of_a_missing_attribute():
    def f(x):
        return x * getattr(x, "scale_factor", 3)

    cfn = sweep(f, [[(2,)], [(1,)]])
    assert counts(cfn) == (1, 1)


def test_isinstance_of_a_symbolic_int_is_int():
    def f(x, k):  # transformers' causal LMs: logits_to_keep
        keep = slice(-k, None) if isinstance(k, int) else k
        return x[:, keep] * 2

    cfn = sweep(f, [[(2, 5), 1], [(2, 5), 2], [(2, 5), 0], [(2, 5), 3]])
    assert counts(cfn) == (2, 2)  # -0 keeps everything: k == 0 is its own entry


def test_isinstance_of_a_traced_tensor_and_of_a_symbolic_float():
    def f(x, s):
        if torch.is_tensor(x) and isinstance(x, torch.Tensor) and isinstance(s, float) and not isinstance(s, int):
            return x * s
        return x

    cfn = sweep(f, [[(2,), 1.5], [(0,), 2.5], [(1,), -0.0]])
    assert counts(cfn) == (1, 2)


def test_isinstance_of_a_bool_from_a_comparison():
    def f(x):
        b = x.shape[0] > 1
        return x * 2 if isinstance(b, bool) and isinstance(b, int) and b else x - 1

    cfn = sweep(f, [[(2,)], [(3,)], [(1,)], [(0,)]])
    assert counts(cfn) == (2, 2)
