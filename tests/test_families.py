"""transformers families beyond the tested nine (issue 25), from tiny configs, over batch sizes 1, 2, 3: equal to
eager with the optimal compile count. SegFormer (batch norm's size-1 tests, interpolate): one compile over batch
and image sizes. RWKV: its Python loop over time steps (`for i in range(seq_length)`) unrolls, so each length is its
own program (guard `input_ids.shape[1] == T`, `index, a concrete int is needed (range)`): one compile per distinct
length and none per batch size (its state's batch was pinned too)."""

from __future__ import annotations

import os

import pytest
import torch
from helpers import counts

import specengine

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")


def _sweep(model, calls, make):
    model.eval()
    cfn = specengine.compile(model, dynamic=True)
    with torch.no_grad():
        for call in calls:
            kwargs = make(*call)
            expected = model(**kwargs)[0]  # (eager first, as users do: its first call sets attributes on the model)
            torch.testing.assert_close(cfn(**kwargs)[0], expected, atol=1e-4, rtol=1e-4)
    return cfn


def test_segformer_compiles_once_over_batch_and_image_sizes():
    torch.manual_seed(0)
    config = transformers.SegformerConfig(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
                                          num_attention_heads=[1, 2], decoder_hidden_size=16, patch_sizes=[3, 3],
                                          strides=[2, 2], num_labels=3)  # fmt: skip
    calls = [(1, 16), (2, 16), (1, 24), (3, 8)]
    cfn = _sweep(transformers.SegformerForSemanticSegmentation(config), calls,
                 lambda b, h: {"pixel_values": torch.randn(b, 3, h, h)})  # fmt: skip
    assert counts(cfn) == (1, len(calls) - 1), specengine.recompile_reasons(cfn)


def test_rwkv_compiles_once_per_length_never_per_batch():
    torch.manual_seed(0)
    config = transformers.RwkvConfig(vocab_size=99, hidden_size=16, num_hidden_layers=2, attention_hidden_size=16,
                                     intermediate_size=24, context_length=32, use_cache=False)  # fmt: skip
    calls = [(1, 3), (2, 3), (3, 3), (1, 1), (2, 1)]
    cfn = _sweep(transformers.RwkvForCausalLM(config), calls, lambda b, t: {"input_ids": torch.randint(1, 99, (b, t))})
    assert counts(cfn) == (2, 3), specengine.recompile_reasons(cfn)
    assert [str(g) for g in specengine.last_guards(cfn) if "input_ids" in str(g)] == ["input_ids.shape[1] == 1"]


def test_deberta_v2_with_a_mask_compiles_once_over_batch_sizes():
    """`view(-1, heads, T, T)`'s -1 is `B*heads*T*T // (heads*T*T)`: related back to B (an exact quotient), the
    masked_fill broadcast needs no guard `input_ids.shape[0] == 1` (it was a second entry for batch 1)."""
    torch.manual_seed(0)
    config = transformers.DebertaV2Config(vocab_size=99, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                          intermediate_size=24, max_position_embeddings=64, position_buckets=8,
                                          max_relative_positions=16)  # fmt: skip

    def make(b, t):
        mask = torch.ones(b, t, dtype=torch.long)
        mask[:, -1] = 0  # padding in every row
        return {"input_ids": torch.randint(1, 99, (b, t)), "attention_mask": mask}

    calls = [(1, 6), (2, 6), (3, 6), (1, 9), (2, 4)]
    cfn = _sweep(transformers.DebertaV2Model(config), calls, make)
    assert counts(cfn) == (1, len(calls) - 1), specengine.recompile_reasons(cfn)
    assert not any(g.startswith(("input_ids.shape[0] ==", "attention_mask.shape[0] ==", "2*"))
                   for g in map(str, specengine.last_guards(cfn)))  # fmt: skip
