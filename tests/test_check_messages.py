"""A check's message that formats sizes pins nothing (issue 25): `torch._assert(cond, f"... got {x.shape}")`, as
torchvision's ViT writes it on every call, is read only where the check fails.

A generator: checks (`torch._assert`, `torch._check` with a string message) x spellings of the message (f-string of
a size, of a shape, with a spec, `%s`, `.format`, `str()` joined by `+`, `repr()`) x the three dynamic modes, over
sizes 0, 1, 2 and larger: equal to eager with the counts of the same program without the check's message (a
dynamic entry serves every size). A check that fails raises eager's error type with eager's message. A message
that does not go straight to the check (kept in a variable first) pins what it formats, as before.
"""

from __future__ import annotations

import pytest
import torch
from helpers import counts

import specengine

SIZES = [(0, 4), (1, 4), (2, 4), (2, 4), (5, 4), (1, 4)]
MISSES = {True: 1, None: 2, False: 4}  # one entry / static then promoted / one per distinct shape

# how the message is spelled, written inline in the check's call (a message passed straight to it stays lazy)
SPELLINGS = {
    "fstring_size": 'f"expected 4 columns, got {x.shape[1]} (rows {x.shape[0]})"',
    "fstring_shape": 'f"expected (n, 4), got {x.shape}"',
    "fstring_spec": 'f"rows {x.shape[0]:>5d} {x.shape[0] / 2:.1f} {x.shape!r}"',
    "percent": '"rows %s" % x.shape[0]',
    "format": '"rows {} of {}".format(x.shape[0], x.shape)',
    "str_plus": '"rows " + str(x.shape[0]) + " " + str(x.shape)',
    "repr": '"rows " + repr(x.shape[0])',
}
CHECKS = {"assert": "torch._assert", "check": "torch._check"}


def program(kind: str, spelling: str):
    source = f"def fn(x):\n    {CHECKS[kind]}(x.shape[1] == 4, {SPELLINGS[spelling]})\n    return x * 2 + x.shape[0]\n"
    namespace = {"torch": torch}
    exec(compile(source, f"<check-{kind}-{spelling}>", "exec"), namespace)  # noqa: S102 - the generated program
    return namespace["fn"]


@pytest.mark.parametrize("dynamic", [True, None, False])
@pytest.mark.parametrize("spelling", list(SPELLINGS))
@pytest.mark.parametrize("kind", ["assert", "check"])
def test_a_passing_checks_message_pins_nothing(kind, spelling, dynamic):
    fn = program(kind, spelling)
    cfn = specengine.compile(fn, dynamic=dynamic)
    for shape in SIZES:
        x = torch.randn(shape)
        torch.testing.assert_close(cfn(x), fn(x))
    assert counts(cfn) == (MISSES[dynamic], len(SIZES) - MISSES[dynamic])
    assert all("columns" not in str(g) and g.provenance.op not in ("format", "str", "repr")
               for g in specengine.last_guards(cfn))  # fmt: skip


@pytest.mark.parametrize("spelling", list(SPELLINGS))
@pytest.mark.parametrize("kind", ["assert", "check"])
def test_a_failing_check_raises_eagers_error_and_message(kind, spelling):
    fn = program(kind, spelling)
    cfn = specengine.compile(fn, dynamic=True)
    cfn(torch.randn(2, 4))
    for shape in [(3, 5), (1, 5), (0, 3)]:
        x = torch.randn(shape)
        with pytest.raises(Exception) as eager:
            fn(x)
        with pytest.raises(type(eager.value)) as got:
            cfn(x)
        assert str(got.value).splitlines()[0] == str(eager.value)  # (then where the trace raised it)
    cfn(torch.randn(7, 4))
    assert counts(cfn)[1] == 1  # the entry for passing checks still serves


def test_a_message_kept_before_the_check_pins_what_it_formats():
    def fn(x):
        message = f"rows {x.shape[0]}"
        torch._assert(x.shape[1] == 4, message)
        return x + 1

    cfn = specengine.compile(fn, dynamic=True)
    for shape in [(1, 4), (2, 4), (2, 4)]:
        x = torch.randn(shape)
        torch.testing.assert_close(cfn(x), fn(x))
    assert counts(cfn) == (2, 1)  # the string is a constant of the trace: its size is pinned


def test_library_style_check_in_a_module_compiles_once():
    """torchvision's ViT encoder: `torch._assert(input.dim() == 3, f"... got {input.shape}")` on every call."""

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, input):
            torch._assert(input.dim() == 3, f"Expected (batch_size, seq_length, hidden_dim) got {input.shape}")
            n, t, _ = input.shape
            torch._assert(t == input.shape[1], f"Wrong length! Expected {t} but got {input.shape[1]}!")
            return self.lin(input)

    m = Encoder()
    cfn = specengine.compile(m, dynamic=True)
    for b, t in [(1, 1), (2, 3), (0, 2), (3, 5)]:
        x = torch.randn(b, t, 4)
        torch.testing.assert_close(cfn(x), m(x))
    assert counts(cfn) == (1, 3)
