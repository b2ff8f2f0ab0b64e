"""`Module.to` / `.float()` / `.cpu()` / `.type()` inside `forward` (capture/writes.py `on_apply`): a conversion
that leaves every parameter and buffer as it is does what eager's does, nothing (HF SwitchTransformers'
router calls `self.classifier.to(self.dtype)` on every call); one that would change a parameter is refused by name
and leaves the module as it was. A generator: module kinds x conversions x where it is called (a child reassigned,
the module itself, a child not reassigned), over sizes 2, 0, 1, 3 with exact counts."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import specengine

KINDS = {
    "linear": lambda: nn.Linear(4, 4),
    "layer norm": lambda: nn.LayerNorm(4),
    "batch norm (buffers)": lambda: nn.BatchNorm1d(4).eval(),
    "sequential": lambda: nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 4)),
}
NO_OPS = {
    "to(dtype)": lambda m: m.to(torch.float32),
    "to(device, dtype)": lambda m: m.to("cpu", torch.float32),
    "to(device=)": lambda m: m.to(device=torch.device("cpu")),
    "float()": lambda m: m.float(),
    "cpu()": lambda m: m.cpu(),
    "type(float32)": lambda m: m.type(torch.float32),
}
CHANGES = {
    "double()": lambda m: m.double(),
    "half()": lambda m: m.half(),
    "to(float64)": lambda m: m.to(torch.float64),
    "type(float32) of int buffers": lambda m: m.type(torch.float32),
}
PLACES = ("child reassigned", "child", "self")


class Holder(nn.Module):
    def __init__(self, kind: str, conversion, place: str):
        super().__init__()
        self.inner = KINDS[kind]()
        self.conversion, self.place = conversion, place

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.place == "child reassigned":
            self.inner = self.conversion(self.inner)
        elif self.place == "child":
            self.conversion(self.inner)
        else:
            assert self.conversion(self) is self
        return self.inner(x)


def _pair(kind: str, conversion, place: str) -> tuple[Holder, Holder]:
    model, ref = Holder(kind, conversion, place), Holder(kind, conversion, place)
    ref.load_state_dict(model.state_dict())
    return model, ref


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("conversion", list(NO_OPS))
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_conversion_that_changes_nothing_is_eagers(kind, conversion, place):
    probe = KINDS[kind]()
    dtypes = [t.dtype for t in probe.state_dict().values()]
    if [t.dtype for t in NO_OPS[conversion](probe).state_dict().values()] != dtypes:
        pytest.skip("eager's conversion changes a buffer (`type(float32)` of num_batches_tracked): the test below")
    model, ref = _pair(kind, NO_OPS[conversion], place)
    cfn = specengine.compile(model, dynamic=True)
    for n in (2, 0, 1, 3):
        x = torch.randn(n, 4)
        torch.testing.assert_close(cfn(x), ref(x))
        assert model.inner is not None and next(model.parameters()).dtype == torch.float32
    misses = 2 if kind == "batch norm (buffers)" else 1  # (BatchNorm1d checks more than one value per channel)
    assert specengine.cache_misses(cfn) == misses and specengine.cache_hits(cfn) == 4 - misses


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("conversion", list(CHANGES))
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_conversion_that_changes_a_parameter_is_refused_and_changes_nothing(kind, conversion, place):
    if conversion.startswith("type") and kind != "batch norm (buffers)":
        pytest.skip("no int buffer: the conversion changes nothing (the test above)")
    model, _ = _pair(kind, CHANGES[conversion], place)
    before = {k: (v.dtype, v.clone()) for k, v in model.state_dict().items()}
    inner = model.inner
    cfn = specengine.compile(model, dynamic=True)
    with pytest.raises(specengine.UnsupportedOpError, match=r"\.to\(\) .*changing .* inside the compiled function"):
        cfn(torch.randn(2, 4))
    assert model.inner is inner and specengine.cache_misses(cfn) == 0
    for k, v in model.state_dict().items():
        assert v.dtype == before[k][0] and torch.equal(v, before[k][1])
