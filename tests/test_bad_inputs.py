"""The bad-input catalogue (issue 6): each case is a good call, a bad call, then the good call again.

The bad call raises the expected exception type with a message matching the expected pattern (the same type eager
raises, where eager raises); the failure leaves no half-made entry (misses and entries unchanged), and the same
compiled function then serves the good call from its entry. A second table lists inputs that look unusual but are
supported: each gets an entry of its own and matches eager.

Decisions (see README, "Python side effects"): `print` of a tensor's data and assigning a global are rejected with
UnsupportedOpError where they happen (the print would format data; the assignment would run only while tracing); in-place ops on inputs are supported and visible as in
eager; recursion is traced through; a generator expression consumed inside the function is supported, returning a
generator (or compiling a generator function) is rejected.
"""

from __future__ import annotations

import re
import sys
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import pytest
import torch

import specengine

T = torch.randn
COUNTER = 0
BUFFER = torch.zeros(3)


@dataclass
class Case:
    id: str
    fn: Callable
    good: tuple  # a good call's arguments
    bad: tuple  # the bad call's arguments
    exc: type
    match: str
    bad_kwargs: dict = field(default_factory=dict)
    eager: bool = True  # eager raises the same exception type (False: eager runs; the engine rejects clearly)


def seed(a, b):
    return a * b.size(0)


def add(a, b):
    return a + b


def flagged(a, flag):
    return a * 2 if not flag else _BAD[flag](a)


def _print(a):
    print("value", a)  # (`print("shape", a.shape)` is an op of the computation: capture/effect_ops.py)
    return a


def _global(a):
    global COUNTER
    COUNTER = COUNTER + 1
    return a


_BAD: dict[str, Callable] = {
    "item": lambda a: (a.add_(1), a * 2 if a.sum().item() > 0 else a)[1],  # a data branch after an input write
    "tolist": lambda a: a * len(a.reshape(1, -1).tolist()),  # 2-D
    "nonzero": lambda a: a * int(len(torch.nonzero(a))),  # a data-dependent size pinned
    "bool": lambda a: (a.add_(1), a * 2 if a.sum() > 0 else a)[1],  # as "item", through Tensor.__bool__
    "print": _print,
    "global": _global,
    "closed_over_inplace": lambda a: BUFFER.add_(a),
    "generator": lambda a: (a * i for i in range(2)),
    "format": lambda a: f"{a}",
    "cuda": lambda a: a + torch.zeros(a.shape, device="cuda"),
}


def generator_fn(a, n):
    yield a * n


def by_int(a, n):
    return a[n] if n < 100 else a.sum(n - 100)


def reshape(a, n):
    return a.reshape(-1, n)


def recurse(a, n):
    return a if n == 0 else recurse(a + 1, n - 1)


def divide(a, n):
    return a * (10 // n)


def no_cuda(reason):
    return pytest.mark.skipif(torch.cuda.is_available(), reason=reason)


def _no_cuda_error() -> tuple[type, str]:
    """Eager's error for a CUDA tensor where CUDA does not work, as torch raises it: a CPU build's AssertionError
    ('Torch not compiled with CUDA enabled'), a CUDA build's RuntimeError without a driver. (Where CUDA works the
    case is skipped.)"""
    try:
        if not torch.cuda.is_available():
            torch.zeros(1, device="cuda")
    except Exception as e:  # noqa: BLE001 - eager's error is the expectation
        return type(e), "^" + re.escape(str(e).splitlines()[0])
    return Exception, ""


UNSUPPORTED = specengine.UnsupportedOpError
CASES = [
    Case("missing-arg", seed, (T(2, 2), T(1, 2)), (T(2, 2),), TypeError,
         r"^seed\(\) missing 1 required positional argument: 'b'$"),
    Case("extra-arg", seed, (T(2, 2), T(1, 2)), (T(2, 2), T(1, 2), 3), TypeError,
         r"^seed\(\) takes 2 positional arguments but 3 were given$"),
    Case("unexpected-keyword", seed, (T(2, 2), T(1, 2)), (T(2, 2), T(1, 2)), TypeError,
         r"^seed\(\) got an unexpected keyword argument 'c'$", {"c": 1}),
    Case("keyword-twice", seed, (T(2, 2), T(1, 2)), (T(2, 2), T(1, 2)), TypeError,
         r"^seed\(\) got multiple values for argument 'b'$", {"b": 1}),
    Case("none-for-tensor", seed, (T(2, 2), T(1, 2)), (None, T(1, 2)), TypeError,
         r"unsupported operand type\(s\) for \*: 'NoneType' and 'int'"),
    Case("none-for-shaped-tensor", seed, (T(2, 2), T(1, 2)), (T(2, 2), None), AttributeError,
         r"'NoneType' object has no attribute 'size'"),
    Case("list-for-shaped-tensor", seed, (T(2, 2), T(1, 2)), (T(2, 2), [1, 2]), AttributeError,
         r"'list' object has no attribute 'size'"),
    Case("str-for-int", by_int, (T(3), 1), (T(3), "1"), TypeError, r"'<' not supported between instances of 'str'"),
    Case("broadcast", add, (T(3), T(3)), (T(3), T(4)), RuntimeError,
         r"The size of tensor a \(3\) must match the size of tensor b \(4\) at non-singleton dimension 0"),
    Case("broadcast-2d", add, (T(2, 3), T(3)), (T(2, 3), T(2)), RuntimeError,
         r"must match the size of tensor b \(2\) at non-singleton dimension 1"),
    Case("reshape-numel", reshape, (T(2, 8), 4), (T(3, 2), 4), RuntimeError,
         r"shape '\[-1, 4\]' is invalid for input of size 6"),
    Case("reshape-two-minus-one", reshape, (T(2, 8), 4), (T(2, 8), -1), RuntimeError,
         r"only one dimension can be inferred"),
    Case("reshape-ambiguous", reshape, (T(2, 8), 4), (T(0, 8), 0), RuntimeError,
         r"cannot reshape tensor of 0 elements into shape \[-1, 0\]"),
    Case("index-out-of-range", by_int, (T(6), 5), (T(3), 5), IndexError,
         r"index 5 is out of bounds for dimension 0 with size 3"),
    Case("negative-index-out-of-range", by_int, (T(6), -2), (T(3), -4), IndexError,
         r"index -4 is out of bounds for dimension 0 with size 3"),
    Case("dim-out-of-range", by_int, (T(3), 100), (T(3), 101), IndexError,
         r"Dimension out of range \(expected to be in range of \[-1, 0\], but got 1\)"),
    Case("matmul-inner-dims", lambda a, b: a @ b, (T(2, 3), T(3, 4)), (T(2, 3), T(4, 5)), RuntimeError,
         r"mat1 and mat2 shapes cannot be multiplied \(2x3 and 4x5\)"),
    Case("expand", lambda a: a.expand(2, 4), (T(4),), (T(3),), RuntimeError,
         r"The expanded size of the tensor \(4\) must match the existing size \(3\)"),
    Case("zero-division", divide, (T(3), 2), (T(3), 0), ZeroDivisionError, r"integer division or modulo by zero"),
    Case("item", flagged, (T(3), ""), (T(3), "item"), UNSUPPORTED, r"^a branch on data-dependent u0 \(item\(\) at "
         r"test_bad_inputs.py:\d+\) is not supported .*test_bad_inp.*cannot be taken by speculation: `add_`",
         eager=False),
    Case("tolist", flagged, (T(3), ""), (T(3), "tolist"), UNSUPPORTED, r"^Tensor.tolist is not supported", eager=False),
    Case("nonzero", flagged, (T(3), ""), (T(3), "nonzero"), UNSUPPORTED, r"^a concrete value of data-dependent u0 "
         r"\(rows of nonzero at test_bad_inputs.py:\d+\) is not supported", eager=False),
    Case("bool-of-tensor", flagged, (T(3), ""), (T(3), "bool"), UNSUPPORTED, r"^a branch on data-dependent u0 "
         r"\(item\(\) at test_bad_inputs.py:\d+\) is not supported .*cannot be taken by speculation: `add_`",
         eager=False),
    Case("format-tensor", flagged, (T(3), ""), (T(3), "format"), UNSUPPORTED, r"^format\(Tensor\) is not supported",
         eager=False),
    Case("print", flagged, (T(3), ""), (T(3), "print"), UNSUPPORTED,
         r"^print of a tensor is not supported by specengine \(at test_bad_inputs.py:\d+\): formatting tensor data",
         eager=False),
    Case("assign-global", flagged, (T(3), ""), (T(3), "global"), UNSUPPORTED,
         r"^assigning the global 'COUNTER' is not supported by specengine \(at test_bad_inputs.py:\d+\)", eager=False),
    Case("inplace-on-closed-over", flagged, (T(3), ""), (T(3), "closed_over_inplace"), UNSUPPORTED,
         r"add_ on a tensor closed over from outside", eager=False),
    Case("return-generator", flagged, (T(3), ""), (T(3), "generator"), UNSUPPORTED, r"^returning a generator",
         eager=False),
    Case("cuda-without-cuda", flagged, (T(3), ""), (T(3), "cuda"), *_no_cuda_error()),
    Case("unbounded-recursion", recurse, (T(3), 2), (T(3), -1), RecursionError, r"maximum recursion depth exceeded"),
]  # fmt: skip


def _marks(case: Case) -> list:
    return [no_cuda("CUDA is available: the call succeeds")] if case.id == "cuda-without-cuda" else []


def _state(cfn: Any) -> tuple:
    return specengine.cache_misses(cfn), tuple(specengine.cache_entries(cfn))


def _check_good(case: Case, cfn: Any) -> None:
    torch.testing.assert_close(cfn(*case.good), case.fn(*case.good))


@contextmanager
def recursion_limit(case: Case) -> Iterator[None]:
    """A low limit for the unbounded recursion, so that it fails fast, eagerly and compiled."""
    old = sys.getrecursionlimit()
    if case.id == "unbounded-recursion":
        sys.setrecursionlimit(len(traceback.extract_stack()) + 300)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


@pytest.mark.parametrize("dynamic", [True, None])
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=_marks(c)) for c in CASES])
def test_bad_input_raises_clearly_and_leaves_the_cache_whole(case, dynamic):
    cfn = specengine.compile(case.fn, dynamic=dynamic)
    _check_good(case, cfn)
    before, counter = _state(cfn), COUNTER
    with recursion_limit(case):
        if case.eager:
            with pytest.raises(case.exc):
                case.fn(*case.bad, **case.bad_kwargs)
        with pytest.raises(case.exc, match=case.match):
            cfn(*case.bad, **case.bad_kwargs)
    assert _state(cfn) == before  # no half-made entry: a failed compile changes nothing
    assert COUNTER == counter  # a rejected assignment is put back (capture/module_reads.py)
    hits = specengine.cache_hits(cfn)
    _check_good(case, cfn)
    assert _state(cfn) == before and specengine.cache_hits(cfn) == hits + 1  # served by the same entry
    assert torch.equal(BUFFER, torch.zeros(3))


def test_the_catalogue_has_at_least_25_cases():
    assert len(CASES) >= 25 and len({c.id for c in CASES}) == len(CASES)


def test_a_generator_function_is_rejected_where_it_is_defined():
    cfn = specengine.compile(generator_fn, dynamic=True)
    for _ in range(2):
        with pytest.raises(UNSUPPORTED, match=r"^a generator function is not supported by specengine \(at test_bad_"):
            cfn(T(3), 2)
    assert _state(cfn) == (0, ())


def _inplace(a, b):
    a.mul_(2)
    b[0] = a.sum()
    return a + b


SUPPORTED = [
    # (id, fn, first call, second call): the second call gets an entry of its own and matches eager
    ("dtype-change", seed, (T(2, 2), T(1, 2)), (T(2, 2).double(), T(1, 2))),
    ("requires-grad-change", seed, (T(2, 2), T(1, 2)), (T(2, 2).requires_grad_(), T(1, 2))),
    ("list-for-tensor", seed, (T(2, 2), T(1, 2)), ([1, 2], T(1, 2))),  # list repetition, as in eager
    ("meta-device", seed, (T(2, 2), T(1, 2)), (torch.empty(2, 2, device="meta"), T(1, 2))),  # a non-CPU device
    ("inplace-on-inputs", _inplace, (T(3), T(3)), (T(4).double(), T(4).double())),
    ("recursion", recurse, (T(3), 2), (T(3), 3)),
    ("generator-expression", lambda a, n: sum(a * i for i in range(n)), (T(3), 2), (T(3), 3)),
    ("iterating-a-tensor", lambda a: tuple(r * 2 for r in a), (T(3, 2),), (T(4, 2),)),
]


@pytest.mark.parametrize(("fn", "first", "second"), [pytest.param(*c[1:], id=c[0]) for c in SUPPORTED])
def test_unusual_inputs_that_are_supported_get_their_own_entry(fn, first, second):
    cfn = specengine.compile(fn, dynamic=True)
    for args in (first, second, first, second):
        eager_args = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
                      for a in args]  # fmt: skip
        got_args = [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a
                    for a in args]  # fmt: skip
        expected, got = fn(*eager_args), cfn(*got_args)
        if isinstance(expected, torch.Tensor) and expected.is_meta:
            assert got.is_meta and got.shape == expected.shape and got.dtype == expected.dtype
        else:
            torch.testing.assert_close(got, expected)
            torch.testing.assert_close(got_args, eager_args)  # in-place mutation of inputs is visible as in eager
    assert specengine.cache_misses(cfn) == len(specengine.cache_entries(cfn)) == 2
    assert specengine.cache_hits(cfn) == 2


@pytest.mark.cuda
def test_a_cuda_tensor_after_a_cpu_entry_gets_its_own_entry():
    cfn = specengine.compile(seed, dynamic=True)
    for device in ("cpu", "cuda", "cpu", "cuda"):
        a, b = T(2, 2, device=device), T(1, 2, device=device)
        torch.testing.assert_close(cfn(a, b), seed(a, b))
    assert specengine.cache_misses(cfn) == 2
