"""A subset of bench/model_sweep.py in CI: transformers families from tiny configs (1 layer), run through the sweep's
own code (`model_sweep.sweep_engine`), equal to eager, one compile each over batch sizes 2, 1, 3 and three lengths.

Skipped when transformers is not installed (it is in the `test` extra).
"""

from __future__ import annotations

import os
import sys

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("transformers")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))

import generate_sweep  # noqa: E402 - bench/generate_sweep.py
import model_sweep  # noqa: E402 - bench/model_sweep.py

import specengine  # noqa: E402

# decoders (a mixture of experts, a sliding window, parallel attention, ALiBi), encoders, an encoder-decoder
FAMILIES = ("llama", "gpt2", "mistral", "qwen2_moe", "gemma", "phi", "opt", "bloom", "falcon", "roberta", "electra",
            "bart")  # fmt: skip
SHAPES = [(2, 5), (1, 8), (3, 6)]  # batch 1 after batch 2 is served by the same entry; decoder lengths 2, 4, 3


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("name", FAMILIES)
def test_family_compiles_once_equal_to_eager(name):
    case = model_sweep.hf_cases(quick=True)[name]
    case.build = lambda: model_sweep.hf_model(name, layers=1)
    case.shapes = SHAPES
    model = case.build()
    with torch.no_grad():
        refs = [model(**case.inputs(model, b, t)) for b, t in SHAPES]
        cfn = specengine.compile(model, dynamic=True)
        run = model_sweep.sweep_engine(cfn, case, model, refs, lambda: specengine.cache_misses(cfn))
    assert run.error == "" and run.works
    assert run.wrong == 0
    assert (specengine.cache_misses(cfn), specengine.cache_hits(cfn)) == (1, len(SHAPES) - 1)


def test_tiny_overrides_shrink_by_name():
    from transformers import LlamaConfig

    kw = model_sweep.tiny_overrides(LlamaConfig, layers=1)
    assert kw["num_hidden_layers"] == 1 and kw["hidden_size"] == 64 and kw["vocab_size"] == model_sweep.VOCAB
    assert all(v < model_sweep.VOCAB for k, v in kw.items() if k.endswith("_token_id"))


def test_tiny_overrides_shrink_nested_configs():
    """Blt's encoder, decoder and global transformers are nested configs (and its hash embedding has 500002 rows
    per group): unshrunk, building it allocated 12 GB."""
    from transformers import BltConfig

    kw = model_sweep.tiny_overrides(BltConfig, layers=2)
    assert kw["encoder_hash_byte_group_vocab"] == model_sweep.VOCAB
    for sub in ("encoder_config", "decoder_config", "global_config"):
        assert kw[sub]["hidden_size"] == 64 and kw[sub]["num_hidden_layers"] <= 2
    config = BltConfig(**kw)
    assert config.global_config.hidden_size == 64 and config.encoder_config.hidden_size_global == 64


@pytest.mark.parametrize("name", ["llama", "qwen2_moe", "starcoder2"])
def test_generations_compile_twice_equal_to_eager(name):
    """Generations of batch 2, 1 and 3, greedy and sampling, prompts of 5, 7, 4 (left-padded: one call pattern):
    prefill and decode, 2 compiles in all (Llama's batch 1 after 2 was a third: a guard from a slice's max(n, 0)).
    Starcoder2 (window 8) decodes before and after its window fills: its cache branches on the Python ints
    (`is_full = self.cumulative_length >= self.sliding_window`, cache_utils.py), so a third entry is the optimum."""
    series = ((2, 5, False), (1, 7, True), (3, 4, False))
    row = generate_sweep.run_family(name, new=4, series=series, layers=1)
    assert row.error == ""
    assert (row.equal, row.generations) == (3, 3)
    if name != "starcoder2":
        assert row.compiles == 2
        return
    assert row.compiles == 3
    full = "kwargs['cache'].layers[0].cumulative_length >= kwargs['cache'].layers[0].sliding_window"
    assert full in row.last_guards


def test_longformer_runs_its_chunked_attention_as_users_call_it():
    """Longformer's `torch.div(seq_len, w, rounding_mode="trunc")` sizes (number tensors), `as_strided` over
    `x.stride()` (strides read at run time) and `if is_index_global_attn.flatten().any().item():` (speculated):
    equal to eager; its own `if padding_len > 0:` (a sequence length not a multiple of the window) is the second
    entry, the optimum for a tracing JIT (torch.compile: 17 graphs over the sweep)."""
    case = model_sweep.hf_cases(quick=True)["longformer"]
    model = model_sweep.hf_model("longformer", layers=1)
    shapes = [(2, 5), (1, 8), (3, 6), (2, 16)]  # padded, not padded, padded, not padded
    with torch.no_grad():
        refs = [model(**case.inputs(model, b, t)) for b, t in shapes]
        cfn = specengine.compile(model, dynamic=True)
        case.shapes = shapes
        run = model_sweep.sweep_engine(cfn, case, model, refs, lambda: specengine.cache_misses(cfn))
    assert run.error == "" and run.works and run.wrong == 0
    assert (specengine.cache_misses(cfn), specengine.cache_hits(cfn)) == (2, 2)
    assert "%8 > 0" in specengine.recompile_reasons(cfn)[0]


def test_longformer_global_attention_is_data_dependent_not_an_entry_per_count():
    """`global_attention_mask` marks tokens that attend everywhere: Longformer gathers them with `nonzero` and views
    its output as `len(is_local_index_global_attn_nonzero[0]), -1` (the length of an unbacked size: symbolic, was
    refused). Calls with 1, 2 and 3 global tokens at other places (and batch sizes) are equal to eager; the number
    of global tokens is data, not an entry; a call with none takes the other side of Longformer's
    `if is_index_global_attn.flatten().any().item():` and its other data branches, entries of their own (taken by
    speculation: the first call compiles two; the call with one global token takes two more data branches the other
    way, an entry each)."""
    model = model_sweep.hf_model("longformer", layers=1).eval()
    calls = [(2, 8, [0]), (1, 8, [0, 3]), (3, 16, [1, 2, 7]), (1, 16, [5]), (2, 8, [])]
    cfn = specengine.compile(model, dynamic=True)
    torch.manual_seed(0)
    with torch.no_grad():
        for b, t, where in calls:
            ids = torch.randint(0, model.config.vocab_size, (b, t))
            mask = torch.ones(b, t, dtype=torch.long)
            glob = torch.zeros(b, t, dtype=torch.long)
            glob[:, where] = 1
            kwargs = {"input_ids": ids, "attention_mask": mask, "global_attention_mask": glob}
            torch.testing.assert_close(cfn(**kwargs)[0], model(**kwargs)[0])
    assert (specengine.cache_misses(cfn), specengine.cache_hits(cfn)) == (4, 3)
