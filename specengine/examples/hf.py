"""Tiny Hugging Face transformers models (2 layers, hidden 64, random weights): nothing is downloaded.

Used by tests/test_transformers.py and bench/models.py. Each family builds its model from a config with a fixed
seed and makes the keyword inputs users pass (`input_ids=..., attention_mask=...`, or `pixel_values=...`).

    from specengine.examples.hf import FAMILIES
    family = FAMILIES["llama"]
    model = family.build()
    out = model(**family.inputs(batch=2, seq=17))
    getattr(out, family.output)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # build from configs only; never reach the Hub

VOCAB, HIDDEN, LAYERS, HEADS = 128, 64, 2, 4


@dataclass(frozen=True)
class Family:
    """A model family: its tiny model, a call's keyword inputs at (batch, seq), and the output to compare."""

    name: str
    make: Callable[[], Any]
    inputs: Callable[[int, int], dict]
    output: str  # the ModelOutput attribute to compare with eager
    images: bool = False  # `seq` is ignored: inputs are images of a fixed size
    generates: bool = False

    def build(self, seed: int = 0) -> torch.nn.Module:
        torch.manual_seed(seed)
        return self.make().eval()


def _text(batch: int, seq: int, seed: int = 1) -> dict:
    g = torch.Generator().manual_seed(seed + 100 * batch + seq)
    ids = torch.randint(0, VOCAB, (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    if seq > 2:
        mask[0, :2] = 0 if batch > 1 else 1  # left padding in the first row
    return {"input_ids": ids, "attention_mask": mask}


def _seq2seq(batch: int, seq: int) -> dict:
    out = _text(batch, seq)
    out["decoder_input_ids"] = _text(batch, max(seq // 2, 1), seed=2)["input_ids"]
    return out


def _images(batch: int, seq: int) -> dict:
    g = torch.Generator().manual_seed(batch)
    return {"pixel_values": torch.randn(batch, 3, 32, 32, generator=g)}


def _common() -> dict:
    return {"vocab_size": VOCAB, "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 1}


def _gpt2() -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel  # lazy: transformers is an optional test dependency

    return GPT2LMHeadModel(GPT2Config(n_layer=LAYERS, n_embd=HIDDEN, n_head=HEADS, n_positions=128, **_common()))


def _llama() -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM  # lazy: transformers is an optional test dependency

    config = LlamaConfig(num_hidden_layers=LAYERS, hidden_size=HIDDEN, intermediate_size=128, num_attention_heads=HEADS,
                         num_key_value_heads=2, max_position_embeddings=128, **_common())  # fmt: skip
    return LlamaForCausalLM(config)


def _bert() -> Any:
    from transformers import BertConfig, BertModel  # lazy: transformers is an optional test dependency

    config = BertConfig(num_hidden_layers=LAYERS, hidden_size=HIDDEN, intermediate_size=128, num_attention_heads=HEADS,
                        max_position_embeddings=128, vocab_size=VOCAB)  # fmt: skip
    return BertModel(config)


def _t5() -> Any:
    from transformers import T5Config, T5ForConditionalGeneration  # lazy: transformers is an optional test dependency

    config = T5Config(num_layers=LAYERS, d_model=HIDDEN, d_ff=128, num_heads=HEADS, d_kv=16, decoder_start_token_id=0,
                      **_common())  # fmt: skip
    return T5ForConditionalGeneration(config)


def _vit() -> Any:
    from transformers import ViTConfig, ViTModel  # lazy: transformers is an optional test dependency

    config = ViTConfig(num_hidden_layers=LAYERS, hidden_size=HIDDEN, intermediate_size=128, num_attention_heads=HEADS,
                       image_size=32, patch_size=8)  # fmt: skip
    return ViTModel(config, add_pooling_layer=False)


def _mixtral() -> Any:
    from transformers import MixtralConfig, MixtralForCausalLM  # lazy: transformers is an optional test dependency

    config = MixtralConfig(num_hidden_layers=LAYERS, hidden_size=HIDDEN, intermediate_size=128,
                           num_attention_heads=HEADS, num_key_value_heads=2, num_local_experts=4,
                           num_experts_per_tok=2, max_position_embeddings=128, **_common())  # fmt: skip
    return MixtralForCausalLM(config)


def _distilbert() -> Any:
    from transformers import DistilBertConfig, DistilBertModel  # lazy: transformers is an optional test dependency

    config = DistilBertConfig(n_layers=LAYERS, dim=HIDDEN, hidden_dim=128, n_heads=HEADS, vocab_size=VOCAB,
                              max_position_embeddings=128)  # fmt: skip
    return DistilBertModel(config)


def _qwen2() -> Any:
    from transformers import Qwen2Config, Qwen2ForCausalLM  # lazy: transformers is an optional test dependency

    config = Qwen2Config(num_hidden_layers=LAYERS, hidden_size=HIDDEN, intermediate_size=128, num_attention_heads=HEADS,
                         num_key_value_heads=2, max_position_embeddings=128, **_common())  # fmt: skip
    return Qwen2ForCausalLM(config)


def _whisper() -> Any:
    from transformers import WhisperConfig, WhisperModel  # lazy: transformers is an optional test dependency

    config = WhisperConfig(encoder_layers=LAYERS, decoder_layers=LAYERS, d_model=HIDDEN, encoder_attention_heads=HEADS,
                           decoder_attention_heads=HEADS, encoder_ffn_dim=128, decoder_ffn_dim=128, num_mel_bins=16,
                           max_source_positions=32, max_target_positions=64, decoder_start_token_id=0,
                           **_common())  # fmt: skip
    return WhisperModel(config)


def _audio(batch: int, seq: int) -> dict:
    g = torch.Generator().manual_seed(batch)
    features = torch.randn(batch, 16, 64, generator=g)  # (mel bins, 2 * max_source_positions frames)
    return {"input_features": features, "decoder_input_ids": _text(batch, seq)["input_ids"]}


FAMILIES: dict[str, Family] = {
    "gpt2": Family("gpt2", _gpt2, _text, "logits", generates=True),
    "llama": Family("llama", _llama, _text, "logits", generates=True),
    "bert": Family("bert", _bert, _text, "last_hidden_state"),
    "t5": Family("t5", _t5, _seq2seq, "logits"),
    "vit": Family("vit", _vit, _images, "last_hidden_state", images=True),
}
MORE_FAMILIES: dict[str, Family] = {
    "mixtral": Family("mixtral", _mixtral, _text, "logits", generates=True),  # mixture of experts
    "qwen2": Family("qwen2", _qwen2, _text, "logits", generates=True),
    "distilbert": Family("distilbert", _distilbert, _text, "last_hidden_state"),
    "whisper": Family("whisper", _whisper, _audio, "last_hidden_state"),  # audio encoder-decoder
}


def available() -> bool:
    """Whether transformers can be imported."""
    try:
        import transformers  # noqa: F401 - lazy: transformers is an optional test dependency
    except ImportError:
        return False
    return True
