"""generate() with the forward compiled: compiles per call pattern and tokens against eager, over decoder families.

`model.forward = specengine.compile(model.forward, dynamic=True)`, then a series of generations of several batch
sizes and prompt lengths (left-padded masks), greedy and sampling (the same seed for eager and compiled), each
compared token for token with eager's `generate()`. The goal (issue 25) is 2 compiles, prefill and decode, for the
whole series; a generation without an attention mask is another call pattern (2 more). Models are the sweep's
tiny configs (bench/model_sweep.py). A benchmark: it prints a table and asserts nothing.

    python bench/generate_sweep.py [--families llama,starcoder2,rwkv] [--new 12]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
import warnings
from dataclasses import dataclass

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import model_sweep  # noqa: E402 - bench/model_sweep.py

import specengine  # noqa: E402

# a mixture of experts (qwen2_moe, olmoe), sliding windows (mistral, starcoder2), recurrent (rwkv, mamba)
FAMILIES = ("llama", "gpt2", "mistral", "starcoder2", "qwen2_moe", "olmoe", "gemma2", "gptj", "bloom", "falcon",
            "stablelm", "olmo2", "gpt_neo", "rwkv", "mamba")  # fmt: skip
OVERRIDES = {"starcoder2": {"sliding_window": 8}}  # its default is no window: 8 is crossed during generation
SERIES = ((2, 5, False), (1, 7, False), (3, 4, True), (2, 9, True), (1, 3, False))  # batch, prompt, sampling


def prompt(batch: int, seq: int, vocab: int) -> dict:
    """Token ids with the first row left-padded by 2 (every batch size: the same call pattern)."""
    g = torch.Generator().manual_seed(10 * batch + seq)
    ids = torch.randint(2, min(vocab, model_sweep.VOCAB), (batch, seq), generator=g)
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[0, :2] = 0
    return {"input_ids": ids, "attention_mask": mask}


def generate(model: torch.nn.Module, inputs: dict, new: int, sample: bool) -> torch.Tensor:
    torch.manual_seed(1234)  # sampling: the same draws for eager and compiled
    kw = {"do_sample": True, "top_k": 0, "top_p": 1.0} if sample else {"do_sample": False}
    return model.generate(**inputs, max_new_tokens=new, min_new_tokens=new, pad_token_id=0, **kw)


@dataclass
class GenRow:
    family: str
    generations: int = 0
    equal: int = 0
    compiles: int = 0
    first_s: float = 0.0
    error: str = ""
    guard: str = ""  # the recompile reason after the second compile, if any
    last_guards: tuple = ()  # the newest entry's guards


def run_family(name: str, new: int, series: tuple = SERIES, layers: int = 2) -> GenRow:
    """The series of generations of one family, compiled and eager; compiles, equal tokens, recompile reasons."""
    row = GenRow(name)
    try:
        model, eager = (model_sweep.hf_model(name, layers, **OVERRIDES.get(name, {})) for _ in range(2))
    except Exception as e:  # noqa: BLE001 - not buildable from a tiny config
        row.error = "build: " + model_sweep.root_cause(e)
        return row
    vocab = model.config.vocab_size
    model.forward = cfn = specengine.compile(model.forward, dynamic=True)
    with torch.no_grad():
        try:
            for i, (b, t, sample) in enumerate(series):
                inputs = prompt(b, t, vocab)
                start = time.perf_counter()
                out = generate(model, inputs, new, sample)
                if i == 0:
                    row.first_s = time.perf_counter() - start
                row.generations += 1
                row.equal += bool(torch.equal(out, generate(eager, inputs, new, sample)))
        except Exception as e:  # noqa: BLE001 - reported in the table
            row.error = model_sweep.root_cause(e)
    row.compiles = specengine.cache_misses(cfn)
    reasons = specengine.recompile_reasons(cfn)
    row.last_guards = tuple(str(g) for g in specengine.cache_entries(cfn)[-1].guards) if row.compiles else ()
    row.guard = " / ".join(short(r) for r in reasons[1:3])  # the first reason is the decode entry's (prefill's fails)
    return row


def short(reason: str) -> str:
    """A recompile reason without the prefill entry's failures (a cache layer's attributes, the call's keywords,
    `state is None`) and without tensor values: the decode entry's failed guard."""
    text = re.sub(r"tensor\(\[.*?\]\)\]?", "<tensor>", " ".join(reason.split()))
    text = re.sub(r"the attributes of .*? failed: list\(vars\(.*?\)\) = \[.*?\]", "", text)
    text = re.sub(r"list\(kwargs\) == .*? failed: list\(kwargs\) = \[.*?\]", "", text)
    text = re.sub(r"\S+ is None failed: \S+ = (\[<tensor>, )*<tensor>\]?", "", text)
    return " ".join(text.split())[:300]


def render(row: GenRow) -> str:
    cells = [row.family, f"{row.equal}/{row.generations}", str(row.compiles), f"{row.first_s:.1f}",
             row.error or row.guard]  # fmt: skip
    return "| " + " | ".join(c.replace("|", "/") for c in cells) + " |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", help=f"comma-separated model types (default: {','.join(FAMILIES)})")
    parser.add_argument("--new", type=int, default=12, help="new tokens per generation (default 12)")
    opts = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    series = ", ".join(f"B={b} T={t} {'sampling' if s else 'greedy'}" for b, t, s in SERIES)
    print(f"torch {torch.__version__}; generations: {series}; {opts.new} new tokens each\n")
    print("| family | tokens equal | compiles | first generate s | error, or the guard that recompiled |")
    print("| --- | --- | --- | --- | --- |", flush=True)
    for name in opts.families.split(",") if opts.families else FAMILIES:
        print(render(run_family(name, opts.new)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
