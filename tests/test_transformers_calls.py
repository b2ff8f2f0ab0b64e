"""Hugging Face models called the ways users call them, beyond plain forward sweeps (bench/probe_models.py probes
the rest): here, the call styles where the probe found the compiled model diverging from eager.

Skipped when transformers is not installed (it is in the `test` extra).
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import specengine  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


def test_autocast_linear_without_bias_on_a_lower_precision_input():
    """F.linear(bfloat16 input, float32 weight, no bias) under CPU autocast: autocast casts the weight. The fake
    kernel accepts the mixed dtypes uncast, so "no cast" matched eager's output dtype and the op raised."""
    lin = torch.nn.Linear(4, 4, bias=False)

    def f(x):
        return lin(torch.nn.functional.scaled_dot_product_attention(x, x, x))

    cfn = specengine.compile(f, dynamic=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for t in (3, 0, 1, 2, 5):
            x = torch.randn(2, t, 4)
            out, ref = cfn(x), f(x)
            assert out.dtype is ref.dtype is torch.bfloat16
            torch.testing.assert_close(out, ref)
    assert specengine.cache_misses(cfn) == 1  # sequence lengths 0, 1 and 2 too: one size-generic entry
    assert specengine.cache_hits(cfn) == 4


def test_llama_under_autocast():
    """Llama's attention output (sdpa, bfloat16 under autocast) into o_proj (no bias, float32 weight)."""
    pytest.importorskip("transformers")
    from specengine.examples.hf import FAMILIES

    family = FAMILIES["llama"]
    model = family.build()
    cfn = specengine.compile(model, dynamic=True)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        for b, t in ((2, 4), (1, 6)):
            ids = family.inputs(b, t)["input_ids"]
            out, ref = cfn(input_ids=ids).logits, model(input_ids=ids).logits
            assert out.dtype is ref.dtype is torch.bfloat16
            torch.testing.assert_close(out.float(), ref.float(), atol=0.05, rtol=0.05)
    assert specengine.cache_misses(cfn) == 1
