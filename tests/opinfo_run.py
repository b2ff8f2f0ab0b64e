"""PyTorch's OpInfo database run through a compiler, sample by sample (tests/test_opinfo.py, bench/opinfo.py).

Each op of `op_db` that supports float32 on CPU is "testable". One compiled function per op (`dynamic=True`)
runs the op's first samples (`sample_inputs`, and `reference_inputs` on request) next to eager, on separate
clones of the inputs; outputs and inputs after the call (in-place ops) are compared with
`torch.testing.assert_close` at the op's own float32 tolerances (its `toleranceOverride` decorators for CPU,
the loosest of them) or assert_close's defaults. A sample's outcome:

- pass: the same values (or, where eager raises, an exception of the same type);
- unsupported: the engine raised a SpecEngineError (UnsupportedOpError: no rule yet) that eager did not;
- crash: any other exception where eager succeeds, or another exception type than eager's;
- wrong: different values, or a result where eager raises.

An op's outcome is its worst sample's (wrong > crash > unsupported > pass). Random ops are seeded the same
before both calls; ops whose values are random or uninitialized (`empty`, `rand_like`, dropout, ...) are
compared by dtype and shape only.
"""

from __future__ import annotations

import itertools
import signal
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import torch
from torch.utils import _pytree as pytree

OUTCOMES = ("pass", "unsupported", "crash", "wrong")
_RANK = {o: i for i, o in enumerate(OUTCOMES)}
SEED = 1234
DEFAULT_TOL = {"atol": 1e-5, "rtol": 1.3e-6}  # assert_close's float32 defaults

# Values are random or uninitialized: compared by dtype and shape only.
VALUES_UNCHECKED = {
    "bernoulli", "cauchy", "empty", "empty_like", "empty_permuted", "empty_strided", "exponential", "geometric",
    "log_normal", "multinomial", "new_empty", "new_empty_strided", "nn.functional.alpha_dropout",
    "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
    "nn.functional.feature_alpha_dropout.with_train", "nn.functional.rrelu", "normal", "normal.in_place",
    "normal.number_mean", "rand_like", "randint", "randint_like", "randn", "randn_like", "uniform",
}  # fmt: skip


@dataclass
class OpResult:
    """One op's outcome over its samples; `misses`: compilations (cache misses) over those samples."""

    name: str
    outcome: str
    samples: int
    misses: int
    counts: dict = field(default_factory=dict)  # outcome -> samples
    detail: str = ""  # the worst sample's failure, one line
    seconds: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


def op_name(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def testable_ops() -> list:
    from torch.testing._internal.common_methods_invocations import op_db

    return [op for op in op_db if torch.float32 in op.supported_dtypes("cpu")]


def ops_by_name() -> dict[str, Any]:
    return {op_name(op): op for op in testable_ops()}


def samples_of(op: Any, n: int | None, reference: bool = False) -> list:
    """The op's first `n` float32 CPU samples (all if n is None), generated under a fixed seed."""
    torch.manual_seed(0)
    gen = op.reference_inputs if reference else op.sample_inputs
    return list(itertools.islice(gen("cpu", torch.float32, requires_grad=False), n))


def tolerance(op: Any) -> dict:
    """The loosest float32 tolerance among the op's CPU toleranceOverride decorators, else the defaults."""
    from torch.testing._internal.common_device_type import toleranceOverride

    tol = dict(DEFAULT_TOL)
    for info in op.decorators:
        if getattr(info, "device_type", None) not in (None, "cpu"):
            continue
        for deco in getattr(info, "decorators", ()):
            if isinstance(deco, toleranceOverride) and torch.float32 in deco.d:
                t = deco.d[torch.float32]
                tol = {"atol": max(tol["atol"], t.atol), "rtol": max(tol["rtol"], t.rtol)}
    return tol


def _clone(x: Any) -> Any:
    return x.clone() if isinstance(x, torch.Tensor) else x


def _call(fn: Callable, sample: Any) -> tuple[Any, Any]:
    """(result or the exception raised, the inputs after the call); inputs are fresh clones."""
    inputs = pytree.tree_map(_clone, (sample.input, sample.args, sample.kwargs))
    torch.manual_seed(SEED)
    try:
        return fn(inputs[0], *inputs[1], **inputs[2]), inputs
    except Exception as e:  # noqa: BLE001 - the exception is the result to compare
        return e, inputs


def _leaves(x: Any) -> list:
    return pytree.tree_leaves(x)


def compare(got: Any, expected: Any, tol: dict, values: bool = True) -> None:
    """Raise AssertionError unless `got` matches `expected` (leaf by leaf)."""
    g, e = _leaves(got), _leaves(expected)
    assert len(g) == len(e), f"{len(g)} output leaves, eager has {len(e)}"
    for a, b in zip(g, e):
        if isinstance(b, torch.Tensor):
            assert isinstance(a, torch.Tensor), f"got {type(a).__name__}, eager returned a tensor"
            assert (a.dtype, a.shape, a.layout) == (b.dtype, b.shape, b.layout), (
                f"got {a.dtype} {tuple(a.shape)} {a.layout}, eager {b.dtype} {tuple(b.shape)} {b.layout}"
            )
            if values:
                torch.testing.assert_close(a, b, equal_nan=True, **tol)
        elif isinstance(b, (int, float, complex)) and not isinstance(b, bool) and isinstance(a, (int, float, complex)):
            assert type(a) is type(b), f"got {type(a).__name__}, eager {type(b).__name__}"
            if values:
                torch.testing.assert_close(a, b, equal_nan=True, **tol)
        else:
            assert type(a) is type(b) and (a == b or not values), f"got {a!r}, eager {b!r}"


def run_sample(cfn: Callable, fn: Callable, sample: Any, tol: dict, values: bool, unsupported: tuple) -> tuple:
    """(outcome, detail) of one sample."""
    expected, eager_inputs = _call(fn, sample)
    got, inputs = _call(cfn, sample)
    if isinstance(expected, Exception):
        if isinstance(got, type(expected)):
            return "pass", ""
        if isinstance(got, Exception):
            kind = "unsupported" if isinstance(got, unsupported) else "crash"
            return kind, f"eager raised {type(expected).__name__}; got {type(got).__name__}: {_line(got)}"
        return "wrong", f"eager raised {type(expected).__name__}: {_line(expected)}; compiled returned"
    if isinstance(got, Exception):
        return ("unsupported" if isinstance(got, unsupported) else "crash"), f"{type(got).__name__}: {_line(got)}"
    try:
        compare((got, inputs), (expected, eager_inputs), tol, values)
    except Exception as e:  # noqa: BLE001 - assert_close raises AssertionError, odd outputs other errors
        return "wrong", f"{type(e).__name__}: {_line(e)}"
    return "pass", ""


def _line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:300]


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout()


def run_op(op: Any, engine: str, n: int | None = 4, reference: bool = False, timeout_s: int = 0) -> OpResult:
    """Run the op's samples through `engine` ("specengine" or "torch.compile"), within `timeout_s` (0: none)."""
    name, start = op_name(op), time.perf_counter()
    try:
        samples = samples_of(op, n, reference)
    except Exception as e:  # noqa: BLE001 - an op whose samples cannot be made here is not testable
        return OpResult(name, "untestable", 0, 0, {}, f"samples: {type(e).__name__}: {_line(e)}")
    fn = _op_fn(op.op)
    cfn, misses, unsupported = _compiled(engine, fn)
    values, tol = name not in VALUES_UNCHECKED, tolerance(op)
    counts = dict.fromkeys(OUTCOMES, 0)
    worst, detail = "pass", ""
    old = signal.signal(signal.SIGALRM, _alarm) if timeout_s else None
    signal.alarm(timeout_s)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for sample in samples:
                outcome, why = run_sample(cfn, fn, sample, tol, values, unsupported)
                counts[outcome] += 1
                if _RANK[outcome] > _RANK[worst]:
                    worst, detail = outcome, why
    except _Timeout:
        worst, detail = "crash", f"timeout after {timeout_s} s"
    finally:
        signal.alarm(0)
        if old is not None:
            signal.signal(signal.SIGALRM, old)
    return OpResult(name, worst, len(samples), misses(), counts, detail, round(time.perf_counter() - start, 3))


def _op_fn(op: Callable) -> Callable:
    def fn(*args: Any, **kwargs: Any) -> Any:
        return op(*args, **kwargs)

    return fn


def _compiled(engine: str, fn: Callable) -> tuple[Callable, Callable[[], int], tuple]:
    """(compiled fn, its miss counter, the exception types that mean "unsupported")."""
    if engine == "specengine":
        import specengine

        cfn = specengine.compile(fn, dynamic=True)
        return cfn, lambda: specengine.cache_misses(cfn), (specengine.SpecEngineError,)
    if engine == "torch.compile":
        import torch._dynamo
        from torch._dynamo.testing import CompileCounter

        torch._dynamo.reset()
        for limit in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit"):
            if hasattr(torch._dynamo.config, limit):
                setattr(torch._dynamo.config, limit, 10**6)
        counter = CompileCounter()  # the eager backend, counting the graphs it is handed
        cfn = torch.compile(fn, backend=counter, dynamic=True)
        return cfn, lambda: counter.frame_count, ()
    raise ValueError(f"unknown engine {engine!r}")
