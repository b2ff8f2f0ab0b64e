"""Hugging Face transformers models as users call them (tiny configs, offline): outputs, sweeps, generation.

Skipped when transformers is not installed (it is in the `test` extra).
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("transformers")

import specengine  # noqa: E402
from specengine.examples.hf import FAMILIES, MORE_FAMILIES  # noqa: E402
from specengine.ir.proxies import Proxy  # noqa: E402

BATCHES, SEQS = (1, 2, 3), (5, 8, 17)


pytestmark = pytest.mark.usefixtures("one_thread")


def sweep(family) -> list[tuple[int, int]]:
    return [(b, 0) for b in BATCHES] if family.images else [(b, t) for b in BATCHES for t in SEQS]


@pytest.mark.parametrize("name", list(FAMILIES))
def test_family_sweep_compiles_once(name):
    family = FAMILIES[name]
    model = family.build()
    cfn = specengine.compile(model, dynamic=True)
    with torch.no_grad():
        for b, t in sweep(family):
            inputs = family.inputs(b, t)
            out, ref = cfn(**inputs), model(**inputs)
            assert type(out) is type(ref)
            torch.testing.assert_close(getattr(out, family.output), getattr(ref, family.output), equal_nan=True)
    assert specengine.cache_misses(cfn) == 1
    assert specengine.cache_hits(cfn) == len(sweep(family)) - 1


@pytest.mark.parametrize("name", list(MORE_FAMILIES))
def test_more_families_compile_once(name):
    """Mixture of experts, audio, another decoder and encoder: three shapes each, one compile."""
    family = MORE_FAMILIES[name]
    model = family.build()
    cfn = specengine.compile(model, dynamic=True)
    with torch.no_grad():
        for b, t in ((1, 5), (2, 8), (3, 17)):
            inputs = family.inputs(b, t)
            out, ref = cfn(**inputs), model(**inputs)
            assert type(out) is type(ref)
            torch.testing.assert_close(getattr(out, family.output), getattr(ref, family.output), equal_nan=True)
    assert specengine.cache_misses(cfn) == 1


def _cache_tensors(cache) -> list:
    return [v for layer in cache.layers for v in vars(layer).values()]


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_generate_with_dynamic_cache(name):
    family = FAMILIES[name]
    model = family.build()
    inputs = family.inputs(2, 5)
    with torch.no_grad():
        ref = model.generate(**inputs, max_new_tokens=16, do_sample=False)
        model.forward = cfn = specengine.compile(model.forward, dynamic=True)
        out = model.generate(**inputs, max_new_tokens=16, do_sample=False)
        assert torch.equal(out, ref)
        assert specengine.cache_misses(cfn) <= 2  # prefill, then every decode step (the cache grows: no recompile)
        misses = specengine.cache_misses(cfn)
        again = model.generate(**family.inputs(3, 8), max_new_tokens=16, do_sample=False)
        del model.forward
        assert torch.equal(again, model.generate(**family.inputs(3, 8), max_new_tokens=16, do_sample=False))
    assert specengine.cache_misses(cfn) == misses  # another prompt and batch size: served by the same entries


def test_greedy_loop_without_cache_compiles_once():
    family = FAMILIES["llama"]
    model = family.build()
    cfn = specengine.compile(model, dynamic=True)
    ids = ref = family.inputs(2, 4)["input_ids"]
    with torch.no_grad():
        for _ in range(6):
            ids = torch.cat([ids, cfn(input_ids=ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)], 1)
            ref = torch.cat([ref, model(input_ids=ref, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(ids, ref)
    assert specengine.cache_misses(cfn) == 1


def test_failed_compile_leaves_no_proxy_in_cache_or_model():
    from transformers import DynamicCache

    family = FAMILIES["llama"]
    model = family.build()

    def step(input_ids, cache):
        out = model(input_ids=input_ids, past_key_values=cache, use_cache=True)
        return out.logits.tolist()  # data-dependent: the compile fails after the cache was updated

    cache = DynamicCache(config=model.config)
    with torch.no_grad(), pytest.raises(specengine.UnsupportedOpError):
        specengine.compile(step, dynamic=True)(family.inputs(1, 5)["input_ids"], cache)
    assert not any(isinstance(v, Proxy) for v in _cache_tensors(cache))
    assert all(type(p) is torch.nn.Parameter for p in model.parameters())
    assert cache.get_seq_length() == 0


def test_encoder_decoder_generate_two_compiles():
    """generate() passes `encoder_outputs=BaseModelOutput(...)`: the input is rebuilt around proxies from its own
    state, without running its `__post_init__` on them (it iterated a proxy with no trace active)."""
    family = FAMILIES["t5"]
    model, eager = family.build().eval(), family.build().eval()
    model.forward = cfn = specengine.compile(model.forward, dynamic=True)
    calls = 0
    with torch.no_grad():
        for b, t, new in ((2, 7, 4), (1, 5, 6), (3, 2, 3)):  # batch 1 after 2 is served by the same entries
            ids = torch.randint(1, 100, (b, t), generator=torch.Generator().manual_seed(b * t))
            kw = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "max_new_tokens": new, "do_sample": False}
            out, ref = model.generate(**kw), eager.generate(**kw)
            assert torch.equal(out, ref)
            calls += out.shape[1] - 1  # one forward per generated token (the decoder starts from one token)
    assert specengine.cache_misses(cfn) == 2  # the first decode step (no cache yet), then every later step
    assert specengine.cache_hits(cfn) == calls - 2
