"""The z3 pathologies of issue 26: first compile of Swin (tiny config), Bloom's decode step under generate, and a
resnet18-shaped conv stack (torch.nn layers), with their z3 time and slowest query. A benchmark, not a test.

    python bench/z3_pathologies.py [swin,bloom,convnet]

Prints, per model: compile seconds (each entry), z3 queries, z3 seconds, the slowest query (ms) and the most z3
work one query took (resource units; `config.solver_rlimit` bounds it). SPECENGINE_LOGS=solver logs every query.
"""

from __future__ import annotations

import os
import sys
import time
import warnings

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402

import specengine  # noqa: E402


def swin() -> list[dict]:
    from transformers import SwinConfig, SwinModel

    cfg = SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4)
    model = SwinModel(cfg).eval()
    cfn = specengine.compile(model, dynamic=True)
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(cfn(pixel_values=x).last_hidden_state, model(pixel_values=x).last_hidden_state)
    return [e.stats for e in specengine.cache_entries(cfn)]


def bloom() -> list[dict]:
    from transformers import BloomConfig, BloomForCausalLM

    model = BloomForCausalLM(BloomConfig(vocab_size=128, hidden_size=64, n_layer=2, n_head=4)).eval()
    model.generation_config.pad_token_id = 0
    ids = torch.randint(1, 128, (2, 5))
    ref = model.generate(ids, max_new_tokens=4, do_sample=False)
    model.forward = specengine.compile(model.forward, dynamic=True)
    assert torch.equal(model.generate(ids, max_new_tokens=4, do_sample=False), ref)
    return [e.stats for e in specengine.cache_entries(model.forward)]


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
        return torch.relu(out + (x if self.down is None else self.down(x)))


def convnet() -> list[dict]:
    """resnet18's layer shapes (channels divided by 8), stride-2 convs and pools nesting floor divisions."""
    widths = [8, 16, 32, 64]
    layers: list[nn.Module] = [
        nn.Conv2d(3, 8, 7, 2, 3, bias=False),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = 8
    for i, w in enumerate(widths):
        layers += [_Block(cin, w, 1 if i == 0 else 2), _Block(w, w, 1)]
        cin = w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10)]
    model = nn.Sequential(*layers).eval()
    cfn = specengine.compile(model, dynamic=True)
    with torch.no_grad():
        for size in (64, 96):
            x = torch.randn(2, 3, size, size)
            torch.testing.assert_close(cfn(x), model(x), atol=1e-4, rtol=1e-4)
    return [e.stats for e in specengine.cache_entries(cfn)]


MODELS = {"swin": swin, "bloom": bloom, "convnet": convnet}


def main() -> None:
    names = sys.argv[1].split(",") if len(sys.argv) > 1 else list(MODELS)
    torch.manual_seed(0)
    print(f"solver_rlimit {specengine.config.solver_rlimit}")
    print(f"{'model':8s} {'wall s':>7s} {'compile s (per entry)':>24s} {'z3 calls':>8s} {'z3 s':>6s} "
          f"{'max query ms':>12s} {'max work':>8s}")  # fmt: skip
    for name in names:
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            stats = MODELS[name]()
        wall = time.perf_counter() - start
        compiles = ", ".join(f"{s['compile_s']:.2f}" for s in stats)
        calls = sum(s["z3_calls"] for s in stats)
        z3_s = sum(s["z3_s"] for s in stats)
        worst = max(s["z3_max_query_s"] for s in stats) * 1e3
        work = max(s.get("z3_max_query_work", 0) for s in stats)
        print(f"{name:8s} {wall:7.2f} {compiles:>24s} {calls:8d} {z3_s:6.2f} {worst:12.1f} {work:8d}")


if __name__ == "__main__":
    main()
