"""A GPT (tests/gpt.py) compiled once for every batch size and sequence length, against eager."""

from __future__ import annotations

import re

import pytest
import torch
from gpt import GPT, GPTConfig
from helpers import counts

import specengine

SIZES = [(b, t) for b in (1, 2, 3, 5) for t in (1, 7, 16, 33)]


def _models(sdpa: bool) -> tuple[GPT, GPT]:
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=64, block_size=64, n_layer=2, n_head=2, n_embd=32, sdpa=sdpa)
    model, ref = GPT(cfg), GPT(cfg)
    ref.load_state_dict(model.state_dict())
    return model, ref


@pytest.mark.parametrize("sdpa", [False, True], ids=["manual-attention", "sdpa"])
def test_gpt_one_miss_over_batch_and_sequence_sweep(sdpa):
    model, ref = _models(sdpa)
    cfn = specengine.compile(model, dynamic=True)
    for b, t in SIZES:
        idx = torch.randint(0, 64, (b, t))
        out = cfn(idx)
        torch.testing.assert_close(out, ref(idx))
    assert counts(cfn) == (1, len(SIZES) - 1)
    guards = [str(g) for g in specengine.last_guards(cfn)]
    assert not [g for g in guards if re.fullmatch(r"idx\.shape\[\d\] (==|!=) \d+", g)]  # no size is pinned
    assert all(g.startswith("self.") for g in guards if "idx" not in g)  # static parameter shapes


@pytest.mark.parametrize("sdpa", [False, True], ids=["manual-attention", "sdpa"])
def test_gpt_gradients_match_eager(sdpa):
    model, ref = _models(sdpa)
    cfn = specengine.compile(model, dynamic=True)
    for b, t in ((2, 7), (3, 16)):
        idx = torch.randint(0, 64, (b, t))
        targets = torch.randint(0, 64, (b, t))
        loss = torch.nn.functional.cross_entropy(cfn(idx).flatten(0, 1), targets.flatten())
        ref_loss = torch.nn.functional.cross_entropy(ref(idx).flatten(0, 1), targets.flatten())
        torch.testing.assert_close(loss, ref_loss)
        loss.backward()
        ref_loss.backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, msg=name)
        model.zero_grad(), ref.zero_grad()
    assert counts(cfn) == (1, 1)


def test_gpt_in_eval_mode_is_a_new_entry_and_weights_are_inputs():
    model, ref = _models(False)
    cfn = specengine.compile(model, dynamic=True)
    idx = torch.randint(0, 64, (2, 5))
    cfn(idx)
    model.eval(), ref.eval()
    torch.testing.assert_close(cfn(idx), ref(idx))
    with torch.no_grad():
        model.lm_head.weight.mul_(2)
        ref.lm_head.weight.mul_(2)
    torch.testing.assert_close(cfn(idx), ref(idx))
    assert counts(cfn) == (2, 1)
