"""Int module attributes that `forward` assigns become symbolic inputs (capture/writes.py `Promote`), found in one
trace however many there are: a generator of module trees (1 to 3 modules, each assigning 1 or 2 ints in one of
several ways) over sizes 2, 0, 1, 3, 2. Values and attributes equal eager's after every call; exact counts; the
first compile traces twice (once to find the attributes, once with them inputs), every later miss once."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

import specengine
from specengine import api

# (how an attribute changes, its start value): each reads the input or the attribute itself
WAYS = {
    "+= 1": (lambda m, a, x: m.__dict__[a] + 1, 0),
    "= rows": (lambda m, a, x: x.shape[0], 5),
    "*= 2 while small": (lambda m, a, x: m.__dict__[a] * 2 if m.__dict__[a] < 8 else m.__dict__[a], 1),
    "= rows + self": (lambda m, a, x: x.shape[0] + m.__dict__[a], 3),
}


class Part(nn.Module):
    def __init__(self, ways: tuple[str, ...]):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.ways = ways
        for i, w in enumerate(ways):
            setattr(self, f"a{i}", WAYS[w][1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for i, w in enumerate(self.ways):
            setattr(self, f"a{i}", WAYS[w][0](self, f"a{i}", x))
        return self.lin(x) * sum(getattr(self, f"a{i}") for i in range(len(self.ways)))


class Tree(nn.Module):
    def __init__(self, parts: list[tuple[str, ...]]):
        super().__init__()
        self.parts = nn.ModuleList(Part(w) for w in parts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for p in self.parts:
            x = p(x).tanh()
        return x


TREES = [list(t) for k in (1, 2, 3) for t in itertools.islice(
    itertools.product(WAYS, repeat=k), 0, None, 3 ** (k - 1))]  # fmt: skip
TREES = [[(w,) for w in t] for t in TREES] + [[("+= 1", "= rows"), ("*= 2 while small", "= rows + self")]]


def _state(m: nn.Module) -> list[int]:
    return [getattr(p, f"a{i}") for p in m.parts for i in range(len(p.ways))]


@pytest.mark.parametrize("parts", TREES, ids=lambda t: " | ".join(",".join(w) for w in t))
def test_every_assigned_int_is_found_in_one_trace(parts, monkeypatch):
    traced = []
    real = api.trace_function
    monkeypatch.setattr(api, "trace_function", lambda *a, **k: traced.append(1) or real(*a, **k))
    model, ref = Tree(parts), Tree(parts)
    ref.load_state_dict(model.state_dict())
    cfn = specengine.compile(model, dynamic=True)
    for n in (2, 0, 1, 3, 2):
        x = torch.randn(n, 3)
        torch.testing.assert_close(cfn(x), ref(x))
        assert _state(model) == _state(ref)
        assert all(type(v) is int for v in _state(model))
    misses, hits = specengine.cache_misses(cfn), specengine.cache_hits(cfn)
    assert misses + hits == 5
    assert len(traced) == misses + 1  # the first compile: one trace that finds them all, one with them inputs


def test_an_error_after_the_assignment_is_eagers():
    class Fails(nn.Module):
        def __init__(self):
            super().__init__()
            self.steps = 0
            self.calls = 0

        def forward(self, x):
            self.steps += 1
            self.calls += 1
            if x.shape[0] == 3:
                raise ValueError("three rows")
            return x * self.steps

    model = Fails()
    cfn = specengine.compile(model, dynamic=True)
    torch.testing.assert_close(cfn(torch.ones(2, 1)), torch.ones(2, 1))
    with pytest.raises(ValueError, match="three rows"):
        cfn(torch.ones(3, 1))
    assert model.steps == 1 and model.calls == 1  # a failed compile leaves the module as it was
    torch.testing.assert_close(cfn(torch.ones(2, 1)), torch.full((2, 1), 2.0))
    assert model.steps == 2
