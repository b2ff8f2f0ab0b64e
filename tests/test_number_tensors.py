"""Number tensors (ops/number_tensors.py): a 0-d int64 tensor computed from Python ints only is a known int.

Generated: sources of the tensor (torch.div with each rounding mode, floor_divide, add, torch.tensor, `//` of a
literal) x arithmetic on it (none, `+ 1`, `2 *`, `(+ 3) - 1`, double negation) x consumers (a factory's size, a
method factory's size, a view's size, `torch.full`, `int()`, `.item()`) x the three dynamic modes. Each program
has a twin that computes the same value with Python ints: outputs equal eager's over sizes 2, 0, 1, 3, 2, and the
miss and hit counts equal the twin's (the tensor form specializes no more than the int form).
"""

from __future__ import annotations

import itertools

import pytest
import torch
from helpers import counts

import specengine
from specengine.errors import UnsupportedOpError

SIZES = (2, 0, 1, 3, 2)
MODES = (True, None, False)

SOURCES = {  # (number tensor of m, the twin's int); m = x.size(1) // 2 is the batch x.size(0)
    "div_trunc": ("torch.div(x.size(1), 2, rounding_mode='trunc')", "x.size(1) // 2"),
    "div_floor": ("torch.div(x.size(1), 2, rounding_mode='floor')", "x.size(1) // 2"),
    "floor_divide": ("torch.floor_divide(x.size(1), 2)", "x.size(1) // 2"),
    "add": ("torch.add(x.size(1) // 2, 0)", "x.size(1) // 2 + 0"),
    "tensor": ("torch.tensor(x.size(1) // 2)", "x.size(1) // 2"),
    "floordiv_op": ("torch.tensor(x.size(1)) // 2", "x.size(1) // 2"),
}
CHAINS = {"none": "{t}", "plus": "{t} + 1", "rmul": "2 * {t}", "sub": "({t} + 3) - 1", "neg": "-(-{t})"}
CONSUMERS = {
    "zeros": "torch.zeros((c, 2))",  # (varargs `torch.zeros(c, 2)`: torch's parser refuses tensor-likes there)
    "new_zeros": "x.new_zeros((c, 3))",
    "view": "x.new_ones(c, 4).view(c, 2, 2)",
    "full": "torch.full((2, c), 1.5)",
    "int": "x * int(c)",
    "item": "x + c.item()",
}


def _program(source: str, chain: str, consumer: str, twin: bool):
    start = SOURCES[source][twin]
    src = f"def f(x):\n    c = {CHAINS[chain].format(t=start)}\n    return {CONSUMERS[consumer]}\n"
    if twin:
        src = src.replace("c.item()", "c")
    glb = {"torch": torch}
    exec(compile(src, f"<gen {source} {chain} {consumer} twin={twin}>", "exec"), glb)
    return glb["f"]


def _run(f, dynamic) -> tuple[int, int]:
    cf = specengine.compile(f, dynamic=dynamic)
    for n in SIZES:
        x = torch.randn(n, 2 * n)
        torch.testing.assert_close(cf(x), f(x))
    return counts(cf)


CASES = list(itertools.product(SOURCES, CHAINS, CONSUMERS))


@pytest.mark.parametrize("dynamic", MODES, ids=lambda d: f"dynamic={d}")
@pytest.mark.parametrize("source, chain, consumer", CASES, ids=["-".join(c) for c in CASES])
def test_number_tensor_as_its_int(source, chain, consumer, dynamic):
    got = _run(_program(source, chain, consumer, twin=False), dynamic)
    assert got == _run(_program(source, chain, consumer, twin=True), dynamic)


def test_symbolic_size_from_a_number_tensor_needs_one_entry():
    f = _program("div_trunc", "none", "view", twin=False)
    assert _run(f, True) == (1, len(SIZES) - 1)


def test_int_of_a_number_tensor_pins_only_its_value():
    f = _program("div_trunc", "plus", "int", twin=False)  # x * int(m + 1): one entry per m (sizes 2, 0, 1, 3)
    assert _run(f, True) == (4, 1)


def test_changed_in_place_it_is_tensor_data_again():
    def f(x):
        c = torch.div(x.size(1), 2, rounding_mode="trunc")
        c.add_(1)  # the known value is stale now: a size made of it is data, refused by name
        return torch.zeros(c, 2)

    x = torch.randn(2, 4)
    assert f(x).shape == (3, 2)
    with pytest.raises((UnsupportedOpError, TypeError)):
        specengine.compile(f, dynamic=True)(x)


def test_float_results_are_not_numbers():
    def f(x):
        return x.view(x.size(0), torch.div(x.size(1), 2), 2)  # a float tensor: eager raises TypeError

    x = torch.randn(2, 4)
    with pytest.raises(TypeError) as eager:
        f(x)
    with pytest.raises(type(eager.value)):
        specengine.compile(f, dynamic=True)(x)


DATA_CONSUMERS = {  # a 0-d tensor of data where torch reads an int: its value, read at run time (no guard)
    "arange": lambda x, k: torch.arange(k) * 2,
    "narrow": lambda x, k: x.narrow(0, 0, k) + 1,
    "narrow_start": lambda x, k: x.narrow(0, k, x.size(0) - k) + 1,
    "new_zeros": lambda x, k: x.new_zeros((k, 2)),
    "view": lambda x, k: x[:k].reshape(-1).view(k, 2),
}


@pytest.mark.parametrize("consumer", DATA_CONSUMERS)
def test_a_tensor_of_data_as_an_int_is_read_at_run_time(consumer):
    use = DATA_CONSUMERS[consumer]

    def f(x, m):
        k = m.long().sum()  # data: how many are set
        return use(x, k)

    cf = specengine.compile(f, dynamic=True)
    for n, hot in [(4, 2), (4, 0), (5, 1), (3, 3), (2, 2)]:
        x, m = torch.randn(n, 2), torch.arange(n) < hot
        torch.testing.assert_close(cf(x, m), f(x, m))
    assert counts(cf) == (1, 4), specengine.recompile_reasons(cf)  # data never recompiles here
