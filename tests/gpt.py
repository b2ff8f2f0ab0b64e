"""The GPT used by the tests lives in the package (the demo and the benchmarks compile it too)."""

from specengine.examples.gpt import GPT, MLP, Block, CausalSelfAttention, GPTConfig, gpt2_small_config

__all__ = ["GPT", "Block", "CausalSelfAttention", "GPTConfig", "MLP", "gpt2_small_config"]
