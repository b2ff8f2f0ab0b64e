"""Every hand-written rule against the generic path, over OpInfo's samples (issue 21 item 6).

    python bench/rules_vs_generic.py [--samples 4] [--jobs 2] [--rules NAME,...] [--max-cases 4]
                                     [--timeout 120] [--json FILE] [--report FILE]

A hand rule is a torch-level op with a hand-written decomposition (specengine/ops/ltorch*.py), registered with
`torchop` (specengine/ops/registry.py): its torch callables map to it in `registry.TORCH_TABLE`, and its methods
and operators are bound on TensorProxy. For each rule, its cases (below) run twice through
`specengine.compile(fn, dynamic=True)` next to eager (tests/opinfo_run.py decides each sample's outcome):

- hand: as the engine stands;
- generic: the rule removed for the run (`without_rule`): its callables are popped from TORCH_TABLE, so
  dispatch takes the generic path (ops/generic.py: torch's meta kernel on symbolic sizes); its methods are
  deleted from TensorProxy, so `x.m()` falls back to the generic method. A dunder (`__radd__`, `__getitem__`)
  has no generic fallback in the engine (Python looks operators up on the type, never through `__getattr__`):
  the bench binds the generic method in its place, to measure what a fallback would give, and the verdict
  keeps the rule for the operator regardless.

Measured per run: the samples' outcomes against eager (pass / unsupported / crash / wrong), cache misses over
the sequence of samples, the guards of all cache entries (sum of len(guards)), the symbols those guards pin to a
constant (an equality of one symbol with a number), the sizes torch's kernels pinned (kernel_decisions.PINS),
and, in a second compile with the reference nvFuser executor (the CPU stand-in that claims exactly what
nvFuser claims), how many ops of the computation the fusing executor claims.

A rule's cases: OpInfo ops (float32, CPU, first --samples samples) whose function is one of the rule's
callables (or whose in-place variant is, for in-place rules), then OpInfo ops whose trace reaches the rule at
top level (found by a first pass over all of op_db with the rule symbols' calls recorded), fewest other rules
first, up to --max-cases; and hand-written probes (PROBES) for rules that no OpInfo sample reaches (operators,
integer-only ops, sym_min, torch state).

Verdict: KEEP where the generic path is worse on any measure (more guards, misses or pins, a worse outcome
against eager, fewer ops a fusing executor takes), or where the rule binds an operator (no generic fallback), or
where no case reaches it (with the structural reason); DELETE where the generic path is equal or better on
every measure and matches eager on every sample.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import json
import multiprocessing
import os
import signal
import sys
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any, Callable

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT / "tests"))

import opinfo_run as R  # noqa: E402

OUTCOME_RANK = {o: i for i, o in enumerate(R.OUTCOMES)}


def _engine_module(name: str) -> Any:
    """specengine.trace.<name>, or where it moved (specengine.ir.<name>, specengine.capture.<name>)."""
    for pkg in ("specengine.trace", "specengine.ir", "specengine.capture"):
        try:
            return importlib.import_module(f"{pkg}.{name}")
        except ImportError:
            continue
    return None


# ---------------------------------------------------------------------------------------------------------------
# The rules.


def _registry() -> Any:
    import specengine  # noqa: F401 - loads every ltorch module (they register themselves)
    from specengine.ops import ltorch, registry  # noqa: F401

    return registry


def _proxy_class() -> type:
    return _registry().TensorProxy


def _method_symbol(value: Any) -> Any:
    """The Symbol a TensorProxy attribute made by registry._as_method calls, else None."""
    fn = value
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            content = cell.cell_contents
        except ValueError:
            continue
        if type(content).__name__ == "Symbol":
            return content
    return None


def rules() -> dict[str, dict]:
    """{rule key (the symbol's name): its symbol, torch callables, bound methods, source file and function}."""
    registry = _registry()
    out: dict[str, dict] = {}
    for fn, sym in registry.TORCH_TABLE.items():
        r = out.setdefault(sym.name, {"sym": sym, "fns": [], "methods": []})
        assert r["sym"] is sym, f"two symbols named {sym.name}"
        r["fns"].append(fn)
    for name, value in vars(_proxy_class()).items():
        sym = _method_symbol(value)
        if sym is not None and sym.name in out and out[sym.name]["sym"] is sym:
            out[sym.name]["methods"].append(name)
    for r in out.values():
        r.update(_source(r["sym"]))
        r["callables"] = sorted({_callable_name(f) for f in r["fns"]})
    return out


def _callable_name(fn: Any) -> str:
    for ns, mod in (("torch.Tensor", "torch.Tensor"), ("F", "torch.nn.functional"), ("torch", "torch")):
        obj = importlib.import_module(mod) if mod != "torch.Tensor" else __import__("torch").Tensor
        name = getattr(fn, "__name__", None)
        if name and getattr(obj, name, None) is fn:
            return f"{ns}.{name}"
    mod = getattr(fn, "__module__", None) or ""
    return f"{mod.replace('specengine.executors.torchex', 'tex')}.{getattr(fn, '__name__', repr(fn))}".lstrip(".")


def _source(sym: Any) -> dict:
    meta = sym.meta
    try:
        file = Path(inspect.getsourcefile(meta)).name
        lines, line = inspect.getsourcelines(meta)
    except (TypeError, OSError):
        return {"file": "?", "function": sym.name, "line": 0, "has_kept": False, "kept_text": ""}
    qual = meta.__qualname__
    if "<locals>" in qual:  # made by a factory (_unary, _binary, ...): the factory's name, with the op's
        factory = qual.split(".<locals>")[0]
        function = f"{factory}({sym.name})"
        fsrc = inspect.getsource(sys.modules[meta.__module__].__dict__[factory])
        kept = [x.strip() for x in fsrc.splitlines() if "# kept:" in x]
    else:
        function = meta.__name__
        src = Path(inspect.getsourcefile(meta)).read_text().splitlines()
        above = []
        i = line - 2
        while i >= 0 and (src[i].strip().startswith(("#", "@")) or src[i].strip().startswith(")")):
            above.append(src[i])
            i -= 1
        kept = [x.strip() for x in above + lines[:3] if "# kept:" in x]
    text = kept[0][kept[0].index("# kept:") + len("# kept:") :].strip() if kept else ""
    return {"file": file, "function": function, "line": line, "has_kept": bool(kept), "kept_text": text}


@contextlib.contextmanager
def without_rule(sym: Any):
    """The rule removed for the duration: its callables leave TORCH_TABLE (the generic path takes them); its
    methods leave TensorProxy (the generic method takes them); its dunders get the generic method bound (the
    engine has no fallback for them: see the module docstring). Everything is put back on exit."""
    from specengine.ops.generic import generic_method

    registry = _registry()
    cls = _proxy_class()
    table = {f: s for f, s in registry.TORCH_TABLE.items() if s is sym}
    attrs = {n: v for n, v in vars(cls).items() if _method_symbol(v) is sym}
    for f in table:
        del registry.TORCH_TABLE[f]
    for name in attrs:
        if name.startswith("__"):
            fallback = generic_method(name)
            if fallback is not None:
                setattr(cls, name, fallback)
            else:
                delattr(cls, name)
        else:
            delattr(cls, name)
    try:
        yield
    finally:
        registry.TORCH_TABLE.update(table)
        for name, value in attrs.items():
            setattr(cls, name, value)


# ---------------------------------------------------------------------------------------------------------------
# Probes: rules that OpInfo's float32 samples do not reach.


def _sample(*args: Any, **kwargs: Any) -> Any:
    from torch.testing._internal.opinfo.core import SampleInput

    return SampleInput(args[0], args=args[1:], kwargs=kwargs)


def _probe_samples(name: str) -> tuple[Callable, list]:
    import torch

    g = torch.Generator().manual_seed(0)

    def f(*shape: int) -> Any:
        return torch.randn(*shape, generator=g)

    def i(*shape: int) -> Any:
        return torch.randint(-8, 8, shape, generator=g)

    def b(*shape: int) -> Any:
        return torch.randint(0, 2, shape, generator=g).bool()

    shapes = ((3, 4), (5, 4), (5, 1), (2, 3, 4))
    ints = [_sample(i(*s), i(*s[-1:])) for s in shapes]
    floats = [_sample(f(*s)) for s in shapes]
    F = torch.nn.functional
    sized = [_sample(f(*s)) for s in shapes]
    P: dict[str, Callable[[], tuple[Callable, list]]] = {
        "sym_min": lambda: (lambda x, y: torch.zeros(torch.sym_min(x.shape[0], y.shape[0])) + x.sum(),
                    [_sample(f(3), f(5)), _sample(f(6), f(2)), _sample(f(4), f(4)), _sample(f(7), f(9))]),
        "sym_max": lambda: (lambda x, y: torch.zeros(torch.sym_max(x.shape[0], y.shape[0])) + x.sum(),
                    [_sample(f(3), f(5)), _sample(f(6), f(2)), _sample(f(4), f(4)), _sample(f(7), f(9))]),
        "rdiv": lambda: (lambda x: 2 / x, floats),
        "rpow": lambda: (lambda x: 2 ** x, floats),
        "rmatmul": lambda: (lambda x, w: w.__rmatmul__(x), [_sample(f(3, 4), f(4, 2)), _sample(f(5, 4), f(4, 3)),
                                                    _sample(f(2, 3, 4), f(4, 1)), _sample(f(4), f(4, 2))]),
        "invert": lambda: (lambda x: ~x, [_sample(i(*s)) for s in shapes]),
        "rand": lambda: (lambda x: 3 & x, [_sample(i(*s)) for s in shapes]),
        "ror": lambda: (lambda x: 3 | x, [_sample(i(*s)) for s in shapes]),
        "rxor": lambda: (lambda x: 3 ^ x, [_sample(i(*s)) for s in shapes]),
        "rfloordiv": lambda: (lambda x: 7 // x, floats),
        "rmod": lambda: (lambda x: 7 % x, floats),
        "bitwise_and": lambda: (lambda x, y: x & y, ints),
        "bitwise_or": lambda: (lambda x, y: x | y, ints),
        "bitwise_xor": lambda: (lambda x, y: x ^ y, ints),
        "bitwise_not": lambda: (lambda x: torch.bitwise_not(x), [_sample(i(*s)) for s in shapes]),
        "bitwise_and_": lambda: (lambda x, y: x.__iand__(y), ints),
        "bitwise_or_": lambda: (lambda x, y: x.__ior__(y), ints),
        "bitwise_xor_": lambda: (lambda x, y: x.__ixor__(y), ints),
        "floor_divide_": lambda: (lambda x, y: x.__ifloordiv__(y), [_sample(f(*s), f(*s[-1:])) for s in shapes]),
        "remainder_": lambda: (lambda x, y: x.__imod__(y), [_sample(f(*s), f(*s[-1:])) for s in shapes]),
        "masked_fill_": lambda: (lambda x, m: x.masked_fill_(m, 0.5), [_sample(f(*s), b(*s[-1:])) for s in shapes]),
        "clamp_": lambda: (lambda x: x.clamp_(-0.5, 0.5), floats),
        "clamp_min_": lambda: (lambda x: x.clamp_min_(-0.5), floats),
        "clamp_max_": lambda: (lambda x: x.clamp_max_(0.5), floats),
        "fill_": lambda: (lambda x: x.fill_(1.5), floats),
        "fill_view": lambda: (lambda x: (x[1:].fill_(2.0), x + 0)[1], floats),
        "zero_": lambda: (lambda x: x.zero_(), floats),
        "zero_view": lambda: (lambda x: (x[:, :1].zero_(), x.t().zero_(), x + 0)[2], floats),
        "copy_": lambda: (lambda x, y: x.copy_(y), [_sample(f(*s), f(*s[-1:])) for s in shapes]),
        "copy_view": lambda: (lambda x, y: (x[0].copy_(y), x + 0)[1], [_sample(f(*s), f(*s[1:])) for s in shapes]),
        "add_": lambda: (lambda x, y: x.add_(y, alpha=2), [_sample(f(*s), f(*s[-1:])) for s in shapes]),
        "sub_": lambda: (lambda x, y: x.sub_(y), [_sample(f(*s), f(*s[-1:])) for s in shapes]),
        "mul_": lambda: (lambda x, y: x.mul_(y), [_sample(f(*s), f(*s[-1:])) for s in shapes]),
        "div_": lambda: (lambda x, y: x.div_(y), [_sample(f(*s), f(*s[-1:])) for s in shapes]),
        "setitem": lambda: (lambda x, v: x.__setitem__((slice(1, None), 0), v) or x,
                    [_sample(f(*s), f(*(s[0] - 1,) + s[2:])) for s in shapes]),
        "getitem": lambda: (lambda x: x[1:, 0], floats),
        "assert_async": lambda: (lambda x: torch._assert_async((x.abs() >= 0).all()) or x + 1, floats),
        "manual_seed": lambda: (lambda x: (torch.manual_seed(3), x + torch.rand_like(x))[1], floats),
        "get_rng_state": lambda: (lambda x: x + torch.get_rng_state().float().sum(), floats),
        "set_rng_state": lambda: (lambda x: torch.set_rng_state(torch.get_rng_state()) or x + 1, floats),
        "cuda_manual_seed": lambda: (lambda x: (torch.cuda.manual_seed(3), x + 1)[1], floats),
        "cuda_manual_seed_all": lambda: (lambda x: (torch.cuda.manual_seed_all(3), x + 1)[1], floats),
        "cuda_get_rng_state": lambda: (lambda x: x + torch.cuda.get_rng_state().float().sum(), floats),
        "cuda_set_rng_state": lambda: (lambda x: torch.cuda.set_rng_state(torch.get_rng_state()) or x + 1, floats),
        "torch_dropout_train": lambda: (lambda x: torch.dropout(x, 0.5, True), floats),
        "contiguous": lambda: (lambda x: x.t().contiguous(), floats[:3]),
        "contiguous_write_after": lambda: (_write_after_contiguous,
                                   [_sample(torch.arange(float(torch.Size(s).numel())).reshape(s))
                                    for s in ((2, 3), (1, 3), (0, 2), (2, 2))]),
        "contiguous_write_through": lambda: (_write_through_contiguous,
                                     [_sample(torch.arange(float(torch.Size(s).numel())).reshape(s))
                                      for s in ((2, 3), (1, 3), (3, 1), (0, 0), (2, 2))]),
        "tensor_where": lambda: (lambda x, m: x.where(m, 0.0), [_sample(f(*s), b(*s[-1:])) for s in shapes]),
        "to_float": lambda: (lambda x: x.float(), [_sample(i(*s)) for s in shapes]),
        "type_as": lambda: (lambda x, y: x.type_as(y), [_sample(f(*s), i(2)) for s in shapes[:2]]
                    + [_sample(i(*s), f(2).double()) for s in shapes[2:]]),
        "tensor": lambda: (lambda x: x + torch.tensor([1.0, 2.0, 3.0, 4.0]), sized),
        "tensor_symbolic": lambda: (lambda x: torch.tensor([x.shape[0], 2 * x.shape[-1], 7]) * x.sum(),
                            [_sample(f(*s)) for s in ((3, 4), (5, 2), (6, 6), (2, 9))]),
        "embedding": lambda: (lambda idx, w: F.embedding(idx, w),
                      [_sample(torch.randint(0, 10, s, generator=g), f(10, 3)) for s in ((4,), (2, 5), (7,), (3, 3))]),
        "embedding_padding": lambda: (lambda idx, w: F.embedding(idx, w, padding_idx=0),
                              [_sample(torch.randint(0, n, s, generator=g), f(n, 3))
                               for n, s in ((10, (4,)), (6, (2, 5)), (12, (7,)), (5, (3, 3)))]),
        "embedding_max_norm": lambda: (lambda idx, w: (F.embedding(idx, w, max_norm=1.0), w + 0),
                               [_sample(torch.randint(0, n, s, generator=g), 3 * f(n, 3))
                                for n, s in ((10, (4,)), (6, (2, 5)), (12, (7,)), (5, (3, 3)))]),
        "torch_embedding": lambda: (lambda w, idx: torch.embedding(w, idx),
                            [_sample(f(n, 3), torch.randint(0, n, s, generator=g))
                             for n, s in ((10, (4,)), (6, (2, 5)), (12, (7,)), (5, (3, 3)))]),
        "torch_group_norm": lambda: (lambda x: torch.group_norm(x, 2),
                             [_sample(f(*s)) for s in ((2, 4, 3), (3, 6, 5), (1, 2, 1), (4, 8))]),
        "torch_dropout": lambda: (lambda x: torch.dropout(x, 0.0, True) + torch.dropout(x, 0.5, False), floats),
        "cross_entropy": lambda: (lambda x, t: F.cross_entropy(x, t),
                          [_sample(f(n, 5), torch.randint(0, 5, (n,), generator=g)) for n in (3, 4, 1, 6)]),
        "mse_loss": lambda: (lambda x, y: F.mse_loss(x, y), [_sample(f(*s), f(*s)) for s in shapes]),
        "scaled_dot_product_attention": lambda: (
            lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
            [_sample(f(2, 2, t, 8), f(2, 2, t, 8), f(2, 2, t, 8)) for t in (3, 5, 1, 7)]),
        "linspace": lambda: (lambda x: torch.linspace(0, 1, x.shape[0]) + x, [_sample(f(n)) for n in (3, 5, 1, 8)]),
        "arange": lambda: (lambda x: torch.arange(x.shape[0]) + x, [_sample(f(n)) for n in (3, 5, 1, 8)]),
        "mm_errors": lambda: (lambda a, b: torch.mm(a, b),
                      [_sample(f(3, 4), f(4, 5)), _sample(f(3, 2), f(3, 4)), _sample(f(2, 3), f(3, 2)),
                       _sample(f(2, 3), f(3, 2).double()), _sample(f(4, 1), f(2, 4)), _sample(f(5, 3), f(3, 1))]),
        "bmm_mixed_empty": lambda: (lambda a, b: torch.bmm(a, b),
                            [_sample(f(2, 0, 3), f(2, 3, 4).double()), _sample(f(2, 3, 0), f(2, 0, 4).double()),
                             _sample(f(2, 3, 2), f(2, 2, 4).double()), _sample(f(3, 0, 2), f(3, 2, 5).double()),
                             _sample(f(2, 3, 2), f(2, 2, 4))]),
        "nonzero_use": lambda: (lambda x: x.flatten()[torch.nonzero(x.flatten() > 0)[:, 0]].sum() + torch.nonzero(x).shape[1],
                        sized),
        "nonzero_tuple": lambda: (lambda x: torch.nonzero(x > 0, as_tuple=True), sized),
        "argwhere_use": lambda: (lambda x: torch.argwhere(x > 0).sum(0), sized),
        "gpt": lambda: (_gpt(False), [_sample(torch.randint(0, 64, s, generator=g)) for s in ((1, 5), (2, 7), (1, 3), (2, 9))]),
        "gpt_sdpa": lambda: (_gpt(True), [_sample(torch.randint(0, 64, s, generator=g))
                                  for s in ((1, 5), (2, 7), (1, 3), (2, 9))]),
    }  # fmt: skip
    return P[name]()


def _write_after_contiguous(x: Any) -> Any:  # as tests/test_mutation.py
    v = x.t()
    w = v.contiguous()  # a copy where v is not contiguous, v itself where it is
    v.mul_(2)
    return x + 0, w + 0


def _write_through_contiguous(x: Any) -> Any:  # as tests/test_mutation.py
    w = x.t().contiguous()
    w.add_(1)
    return x + 0, w + 0


def _gpt(sdpa: bool) -> Callable:
    """specengine/examples/gpt.py's small GPT (2 layers, width 32) on token ids, eval mode, no grad."""
    import torch

    from specengine.examples.gpt import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(sdpa=sdpa)).eval()

    def gpt(idx: Any) -> Any:
        with torch.no_grad():
            return model(idx)

    return gpt


# Probes named as a rule serve that rule; PROBES_FOR adds others (soundness cases, errors, the small GPT).
PROBE_NAMES = (
    "sym_min", "sym_max", "rdiv", "rpow", "rmatmul", "invert", "rand", "ror", "rxor", "rfloordiv", "rmod",
    "bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_and_", "bitwise_or_", "bitwise_xor_",
    "floor_divide_", "remainder_", "masked_fill_", "clamp_", "clamp_min_", "clamp_max_", "fill_", "zero_", "copy_",
    "add_", "sub_", "mul_", "div_", "setitem", "getitem", "assert_async", "manual_seed", "get_rng_state",
    "set_rng_state", "cuda_manual_seed", "cuda_manual_seed_all", "cuda_get_rng_state", "cuda_set_rng_state",
    "contiguous", "tensor_where",
    "to_float", "type_as", "tensor", "embedding", "torch_embedding", "torch_group_norm", "torch_dropout",
    "cross_entropy", "mse_loss", "scaled_dot_product_attention", "linspace", "arange",
)  # fmt: skip
PROBE_VALUES_UNCHECKED = {"torch_dropout_train"}  # random values: compared by dtype and shape only
_GPT_RULES = ("embedding", "matmul", "layer_norm", "linear", "split", "masked_fill", "softmax", "gelu", "view",
              "transpose", "arange", "add", "getitem")  # fmt: skip
PROBES_FOR: dict[str, tuple[str, ...]] = {
    "contiguous": ("contiguous_write_after", "contiguous_write_through"),
    "fill_": ("fill_view",),
    "zero_": ("zero_view",),
    "copy_": ("copy_view",),
    "tensor": ("tensor_symbolic",),
    "embedding": ("embedding_padding", "embedding_max_norm"),
    "mm": ("mm_errors",),
    "bmm": ("bmm_mixed_empty",),
    "nonzero": ("nonzero_use", "nonzero_tuple"),
    "argwhere": ("argwhere_use",),
    "torch_dropout": ("torch_dropout_train",),
    "scaled_dot_product_attention": ("gpt_sdpa",),
}
for _r in _GPT_RULES:
    PROBES_FOR[_r] = (*PROBES_FOR.get(_r, ()), "gpt")


def probes_of(rule: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(((rule,) if rule in PROBE_NAMES else ()) + PROBES_FOR.get(rule, ())))


# ---------------------------------------------------------------------------------------------------------------
# Runs (in worker processes).

_OPS: dict = {}
_RULES: dict = {}
_HITS: set = set()


def _init() -> None:
    import logging

    import torch

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    for name in ("torch._dynamo", "torch._subclasses.fake_tensor", "specengine"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    _OPS.update(R.ops_by_name())
    _RULES.update(rules())
    _record_top_level_calls()


def _record_top_level_calls() -> None:
    """Symbol.__call__ notes each rule symbol called at the top of a trace (by the program, not by a rule)."""
    syms = {id(r["sym"]): name for name, r in _RULES.items()}
    symbol_cls = type(next(iter(_RULES.values()))["sym"])
    ctx = getattr(sys.modules[symbol_cls.__module__], "context", None) or _engine_module("context")
    original = symbol_cls.__call__

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        name = syms.get(id(self))
        if name is not None:
            state = ctx.current()
            if state is not None and len(getattr(state, "scopes", ())) == 1:
                _HITS.add(name)
        return original(self, *args, **kwargs)

    symbol_cls.__call__ = call


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout()


def _case_fn(case: dict) -> tuple[Callable, list, dict, bool, str]:
    """(function, samples, tolerance, compare values?, label)."""
    if case["kind"] == "probe":
        fn, samples = _probe_samples(case["probe"])
        values = case["probe"] not in PROBE_VALUES_UNCHECKED
        return fn, samples, dict(R.DEFAULT_TOL), values, f"probe:{case['probe']}"
    op = _OPS[case["op"]]
    fn = R._op_fn(op.op if case["variant"] == "op" else op.inplace_variant)
    values = case["op"] not in R.VALUES_UNCHECKED
    return (
        fn,
        R.samples_of(op, case["n"]),
        R.tolerance(op),
        values,
        case["op"] + ("" if case["variant"] == "op" else f" ({case['variant']})"),
    )


def _pins(entries: list) -> int:
    """Symbols pinned to a constant by the entries' guards (`x.shape[0] == 4`)."""
    n = 0
    for e in entries:
        pinned = set()
        for g in e.guards:
            ex = g.expr
            if ex.op == "rel" and ex.args[0] == "==":
                lhs, rhs = ex.args[1], ex.args[2]
                if (lhs.is_const or rhs.is_const) and len(ex.free_symbols()) == 1:
                    pinned |= ex.free_symbols()
        n += len(pinned)
    return n


def _fused(entries: list) -> int:
    """Ops of the computations that the fusing executor claimed (in each entry's claiming trace)."""
    n = 0
    for e in entries:
        for t in e.traces:
            if str(getattr(t, "provenance", "")).startswith("Claiming"):
                n += sum(1 for b in t.bsyms if b.sym.module == "nvfuser")
    return n


def _run_samples(cfn: Callable, fn: Callable, samples: list, tol: dict, values: bool, unsupported: tuple) -> dict:
    counts = dict.fromkeys(R.OUTCOMES, 0)
    worst, detail = "pass", ""
    for s in samples:
        outcome, why = R.run_sample(cfn, fn, s, tol, values, unsupported)
        counts[outcome] += 1
        if OUTCOME_RANK[outcome] > OUTCOME_RANK[worst]:
            worst, detail = outcome, why
    return {"counts": counts, "outcome": worst, "detail": detail}


def _measure(case: dict, timeout_s: int, fusing: bool = True) -> dict:
    import specengine
    from specengine.executors.nvfuser import NvFuserExecutor

    K = _engine_module("kernel_decisions")
    fn, samples, tol, values, label = _case_fn(case)
    out: dict = {"label": label, "samples": len(samples)}
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout_s)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kpins0 = sum(K.PINS.values()) if K is not None else 0
            cfn, misses, unsupported = R._compiled("specengine", fn)
            out.update(_run_samples(cfn, fn, samples, tol, values, unsupported))
            entries = specengine.cache_entries(cfn)
            out.update(
                misses=misses(),
                guards=sum(len(e.guards) for e in entries),
                pins=_pins(entries),
                kernel_pins=(sum(K.PINS.values()) - kpins0) if K is not None else None,
            )
            if not fusing:
                return out
            nv = specengine.compile(fn, dynamic=True, executors=[NvFuserExecutor("reference"), "torch"])
            nvr = _run_samples(nv, fn, samples, tol, values, unsupported)
            out.update(fused=_fused(specengine.cache_entries(nv)), nv_outcome=nvr["outcome"], nv_detail=nvr["detail"])
    except _Timeout:
        out.update(outcome="crash", detail=f"timeout after {timeout_s} s", counts={}, misses=-1, guards=-1, pins=-1,
                   fused=-1)  # fmt: skip
    except Exception as e:  # noqa: BLE001 - samples that cannot be made, etc.
        out.update(outcome="crash", detail=f"bench: {type(e).__name__}: {R._line(e)}", counts={}, misses=-1,
                   guards=-1, pins=-1, fused=-1)  # fmt: skip
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return out


def discover_task(job: tuple) -> dict:
    """Which rules an OpInfo op's samples reach at top level (hand rules in place)."""
    name, n, timeout_s = job
    _HITS.clear()
    start = time.perf_counter()
    _measure({"kind": "opinfo", "op": name, "variant": "op", "n": n}, timeout_s, fusing=False)
    return {"op": name, "rules": sorted(_HITS), "seconds": round(time.perf_counter() - start, 2)}


def compare_task(job: tuple) -> dict:
    """One case of one rule, with the rule (hand) and without it (generic)."""
    rule, case, timeout_s = job
    sym = _RULES[rule]["sym"]
    _HITS.clear()
    hand = _measure(case, timeout_s)
    reached = rule in _HITS
    with without_rule(sym):
        _HITS.clear()
        generic = _measure(case, timeout_s)
        still = rule in _HITS  # reached anyway (another path calls the symbol directly)
    return {"rule": rule, "case": case, "hand": hand, "generic": generic, "reached": reached, "still_hand": still}


def _pool_map(task: Callable, jobs_list: list, jobs: int, timeout_s: int, what: str) -> list:
    ctx = multiprocessing.get_context("spawn")
    results = []
    with ctx.Pool(jobs, initializer=_init, maxtasksperchild=40) as pool:
        pending = [(j, pool.apply_async(task, (j,))) for j in jobs_list]
        for k, (j, res) in enumerate(pending):
            try:
                results.append(res.get(timeout=3 * timeout_s + 120))
            except Exception as e:  # noqa: BLE001 - a worker that died or hung
                results.append({"job": repr(j)[:200], "error": f"worker: {e!r}"})
            if (k + 1) % 50 == 0:
                print(f"  {what}: {k + 1}/{len(pending)}", file=sys.stderr, flush=True)
    return results


# ---------------------------------------------------------------------------------------------------------------
# Cases, verdicts and the report.


def select_cases(all_rules: dict, reached_by: dict[str, list[str]], n: int, max_cases: int) -> dict[str, list]:
    """Per rule: OpInfo ops of its callables, then ops reaching it, fewest other rules first; then probes."""
    ops = R.ops_by_name()
    rules_of_op: dict[str, int] = Counter()
    for names in reached_by.values():
        for name in names:
            rules_of_op[name] += 1
    cases: dict[str, list] = {}
    for rule, r in all_rules.items():
        fns = set(r["fns"])
        chosen: list[dict] = []
        direct = [name for name, op in sorted(ops.items()) if op.op in fns]
        inplace = [name for name, op in sorted(ops.items()) if getattr(op, "inplace_variant", None) in fns]
        for name in direct[:max_cases]:
            chosen.append({"kind": "opinfo", "op": name, "variant": "op", "n": n})
        for name in inplace[: max(0, max_cases - len(chosen))]:
            chosen.append({"kind": "opinfo", "op": name, "variant": "inplace", "n": n})
        picked = {c["op"] for c in chosen}
        others = sorted((x for x in reached_by.get(rule, []) if x not in picked),
                        key=lambda x: (rules_of_op[x], x != rule, x))  # fmt: skip
        for name in others[: max(0, max_cases - len(chosen))]:
            chosen.append({"kind": "opinfo", "op": name, "variant": "op", "n": n})
        for name in probes_of(rule):
            chosen.append({"kind": "probe", "probe": name})
        cases[rule] = chosen
    return cases


def _measures(m: dict) -> dict:
    """Per run, the measures where lower is better (fused is negated: more ops for a fusing executor is better)."""
    c = m.get("counts") or {}
    failed = sum(v for k, v in c.items() if k != "pass") if c else m.get("samples", 0)
    return {"fails": failed, "guards": max(m.get("guards", 0), 0), "misses": max(m.get("misses", 0), 0),
            "pins": max(m.get("pins", 0), 0), "fused": -max(m.get("fused", 0), 0),
            "nv_fails": int(m.get("nv_outcome", "pass") != "pass")}  # fmt: skip


_WORDS = {"fails": "samples failing against eager", "guards": "guards", "misses": "misses", "pins": "pins",
          "fused": "ops a fusing executor takes", "nv_fails": "cases failing under the fusing executor"}  # fmt: skip


def comparable(x: dict) -> bool:
    """Whether a case's costs (guards, misses, pins, fused ops) compare: the same samples pass in both modes, with
    and without the fusing executor (a refused sample compiles no entry, which would read as a saving)."""
    h, g = x["hand"], x["generic"]
    return (h.get("counts") or None) == (g.get("counts") or None) and h.get("nv_outcome") == g.get("nv_outcome")


def verdict(r: dict, runs: list[dict]) -> tuple[str, str]:
    """("KEEP" / "DELETE" / "KEEP?", the measured reason). Hand wins a measure where the generic path is worse in
    total over the rule's cases, or in any one case (then that case is named)."""
    ok = [x for x in runs if "hand" in x and x.get("reached")]
    operators = sorted({m for m in r["methods"] if m.startswith("__")}
                       | {f.split(".")[-1] for f in r["callables"] if f.split(".")[-1].startswith("__")})  # fmt: skip
    op_reason = f"an operator ({', '.join(operators[:3])}): dunders have no generic fallback" if operators else ""
    structural = _structural_reason(r)
    if not ok:
        return ("KEEP" if op_reason else "KEEP?"), (op_reason or structural or "not reached by OpInfo's samples or a "
                                                    "probe: unmeasured") + " (no case reaches it)"  # fmt: skip
    wins, losses = [], []
    for k, word in _WORDS.items():
        cases = ok if k in ("fails", "nv_fails") else [x for x in ok if comparable(x)]
        hs = [_measures(x["hand"]) for x in cases]
        gs = [_measures(x["generic"]) for x in cases]
        th, tg = sum(h[k] for h in hs), sum(g[k] for g in gs)
        sign = -1 if k == "fused" else 1
        if tg > th:
            if k == "fused":
                wins.append(f"fusible prims ({-th} {word} vs {-tg})")
            elif k == "fails":
                wrong = sum((x["generic"].get("counts") or {}).get("wrong", 0) for x in ok)
                wins.append(f"generic fails {tg} samples vs {th}" + (f" ({wrong} wrong results)" if wrong else ""))
            else:
                wins.append(f"fewer {word} ({th} vs {tg})")
        else:
            worse = [(x, h, g) for x, h, g in zip(cases, hs, gs) if g[k] > h[k]]
            if worse:
                x, h, g = worse[0]
                wins.append(
                    f"{'fusible prims' if k == 'fused' else 'fewer ' + word} on {x['hand']['label']} "
                    f"({sign * h[k]} vs {sign * g[k]})"
                )
            if tg < th:
                losses.append(f"{'fewer ' + word if k == 'fused' else 'more ' + word} ({sign * th} vs {sign * tg})")
    samples = sum(x["hand"]["samples"] for x in ok)
    where = f" over {samples} samples ({len(ok)} cases)"
    loss = f" [hand loses: {'; '.join(losses)}]" if losses else ""
    if op_reason:
        return "KEEP", op_reason + ("; " + "; ".join(wins) + where if wins else "") + loss
    if structural and r["file"] == "ltorch_checks.py":  # torch state: the reason stands whatever the CPU measures
        return "KEEP", structural + ("; measured: " + "; ".join(wins) + where if wins else "") + loss
    if wins:
        return "KEEP", "; ".join(wins) + where + loss
    if structural:
        return "KEEP", structural + " (measures equal" + where + ")" + loss
    g_bad = sum((x["generic"].get("counts") or {}).get(k, 0) for x in ok for k in ("crash", "wrong"))
    if g_bad:
        return "KEEP?", f"generic crashes or is wrong on {g_bad} samples, as the hand rule" + where + loss
    return "DELETE", "generic equal or better" + (f"; the hand rule has {'; '.join(losses)}" if losses else "") + where


def _structural_reason(r: dict) -> str:
    name = r["sym"].name
    if r["file"] == "ltorch_checks.py":
        extra = "; CUDA state: not measurable on this CPU machine" if name.startswith("cuda_") else ""
        return (
            "torch state or a run-time check reproduced by the computation on every call (the generic path "
            "runs it once, at trace time, or refuses it)" + extra
        )
    if name in ("sym_min", "sym_max"):
        return "symbolic int min/max stay symbolic (the generic path has no tensor op to run)"
    return ""


def _comment(v: str, why: str, cases: list[dict]) -> str:
    """The proposed one-line `# kept:` text: the reason without the hand's losses, samples named by their source."""
    if v == "DELETE":
        return "delete"
    text = why.split(" [hand loses")[0]
    src = "OpInfo's samples" if any(c["kind"] == "opinfo" for c in cases) else "the probes"
    if any(c["kind"] == "probe" for c in cases) and src == "OpInfo's samples":
        src = "OpInfo's samples and probes"
    import re

    text = re.sub(r" over \d+ samples \(\d+ cases\)", f" over {src}", text)
    return "# kept: " + text


def _cell(m: dict, key: str) -> str:
    v = m.get(key)
    return "-" if v is None or v == -1 else str(v)


def build_table(all_rules: dict, runs: dict[str, list]) -> list[dict]:
    rows = []
    for rule, r in sorted(all_rules.items(), key=lambda kv: (kv[1]["file"], kv[1]["line"], kv[0])):
        rr = runs.get(rule, [])
        ok = [x for x in rr if "hand" in x and x.get("reached")]

        same = [x for x in ok if comparable(x)]

        def tot(side: str, key: str, ok: list = same) -> str:
            vals = [x[side].get(key) for x in ok]
            vals = [v for v in vals if isinstance(v, int) and v >= 0]
            return str(sum(vals)) if vals else "-"

        def fails(side: str, ok: list = ok) -> tuple:
            c = Counter()
            details = []
            for x in ok:
                for k, v in (x[side].get("counts") or {}).items():
                    if k != "pass" and v:
                        c[k] += v
                if x[side].get("outcome") != "pass" and x[side].get("detail"):
                    details.append(f"{x[side]['label']}: {x[side]['detail'][:140]}")
            return (", ".join(f"{v} {k}" for k, v in sorted(c.items())) or "0"), details

        hf, hd = fails("hand")
        gf, gd = fails("generic")
        v, why = verdict(r, rr)
        rows.append({
            "rule": f"{r['file']}:{r['function']}", "line": r["line"], "name": rule, "callables": r["callables"],
            "methods": sorted(r["methods"]), "has_kept": r["has_kept"], "kept_text": r["kept_text"],
            "cases": [x["hand"]["label"] for x in ok], "unreached": [x["case"] for x in rr if not x.get("reached")],
            "incomparable": [x["hand"]["label"] for x in ok if not comparable(x)],
            "samples": sum(x["hand"]["samples"] for x in ok),
            "guards": (tot("hand", "guards"), tot("generic", "guards")),
            "misses": (tot("hand", "misses"), tot("generic", "misses")),
            "pins": (tot("hand", "pins"), tot("generic", "pins")),
            "kernel_pins": tot("generic", "kernel_pins"),
            "fused": (tot("hand", "fused"), tot("generic", "fused")),
            "fails": (hf, gf), "hand_details": hd, "generic_details": gd,
            "still_hand": any(x.get("still_hand") for x in ok), "verdict": v, "reason": why,
            "comment": _comment(v, why, [x["case"] for x in ok]),
        })  # fmt: skip
    return rows


def render(rows: list[dict], config: dict) -> str:
    keep = sum(r["verdict"] == "KEEP" for r in rows)
    dele = sum(r["verdict"] == "DELETE" for r in rows)
    unk = len(rows) - keep - dele
    lines = [
        "# Hand rules against the generic path", "",
        f"OpInfo float32 CPU, dynamic=True, {config['samples']} samples per op, up to {config['max_cases']} OpInfo "
        f"ops per rule, plus probes; commit {config['commit']}; {config['seconds']:.0f} s.", "",
        f"{len(rows)} rules: {keep} KEEP, {dele} DELETE, {unk} unmeasured (KEEP?).", "",
        "Columns: guards, misses, pins (symbols pinned to a constant by the guards) and fused (ops the reference "
        "nvFuser executor claims) are sums, hand/generic, over the rule's cases whose samples pass or fail alike in "
        "both modes (a sample refused in one mode compiles no entry there); fails: samples not matching eager "
        "(unsupported/crash/wrong) over all cases, hand/generic.", "",
        "| rule (file:function) | torch callables | samples | guards h/g | misses h/g | pins h/g | fused h/g | "
        "fails h/g | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in rows:
        calls = ", ".join(r["callables"] + [m for m in r["methods"] if m.startswith("__")])
        lines.append(
            f"| {r['rule']} | {calls} | {r['samples']} | {'/'.join(r['guards'])} | {'/'.join(r['misses'])} | "
            f"{'/'.join(r['pins'])} | {'/'.join(r['fused'])} | {r['fails'][0]} / {r['fails'][1]} | "
            f"**{r['verdict']}**: {r['reason']} |"
        )
    lines += [
        "",
        "## Proposed comments",
        "",
        "One line per rule, above its `@torchop` (or in its factory): `# kept: <reason>`, or delete.",
        "",
    ]
    for r in rows:
        now = f"now: `# kept: {r['kept_text']}`" if r["has_kept"] else "now: no `# kept:` comment"
        lines.append(f"- `{r['rule']}` (line {r['line']}; {now})")
        lines.append(f"    - proposed: `{r['comment']}`" if r["comment"] != "delete" else "    - proposed: **delete**")
    lines += ["", "## Cases and failures per rule", ""]
    for r in rows:
        lines.append(f"- `{r['rule']}`: cases {', '.join(r['cases']) or 'none'}"
                     + (f"; not reached: {len(r['unreached'])}" if r["unreached"] else "")
                     + (f"; costs not compared (samples fail in one mode only): {', '.join(r['incomparable'])}"
                        if r["incomparable"] else "")
                     + (f"; kernel pins (generic) {r['kernel_pins']}" if r["kernel_pins"] not in ("-", "0") else "")
                     + ("; the symbol is still reached with the rule removed (called directly)" if r["still_hand"] else ""))  # fmt: skip
        for d in r["hand_details"][:3]:
            lines.append(f"    - hand: {d}")
        for d in r["generic_details"][:3]:
            lines.append(f"    - generic: {d}")
    return "\n".join(lines) + "\n"


def _commit() -> str:
    import subprocess

    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT,
                              check=True).stdout.strip()  # fmt: skip
    except Exception:  # noqa: BLE001
        return "unknown"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=4)
    p.add_argument("--max-cases", type=int, default=4, help="OpInfo ops per rule (default 4)")
    p.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, 8))
    p.add_argument("--timeout", type=int, default=120, help="seconds per run")
    p.add_argument("--rules", default="", help="comma-separated rule names (default: all)")
    p.add_argument(
        "--discovery",
        default=str(BENCH / "results_rules_discovery.json"),
        help="cache of the first pass (which OpInfo ops reach which rules); reused when present",
    )
    p.add_argument("--json", default=str(BENCH / "results_rules_vs_generic.json"))
    p.add_argument("--report", default="")
    p.add_argument("--from-json", default="", help="re-render the table from an earlier --json file (no runs)")
    a = p.parse_args()
    start = time.perf_counter()
    warnings.simplefilter("ignore")
    all_rules = rules()
    if a.from_json:
        old = json.loads(Path(a.from_json).read_text())
        return _write(build_table(all_rules, old["runs"]), old["config"], old["runs"], a)
    if a.rules:
        wanted = set(a.rules.split(","))
        all_rules = {k: v for k, v in all_rules.items() if k in wanted}
    disc_path = Path(a.discovery)
    if disc_path.exists() and json.loads(disc_path.read_text()).get("samples") == a.samples:
        discovery = json.loads(disc_path.read_text())["ops"]
    else:
        names = sorted(R.ops_by_name())
        print(f"first pass: {len(names)} OpInfo ops", file=sys.stderr, flush=True)
        found = _pool_map(discover_task, [(n, a.samples, a.timeout) for n in names], a.jobs, a.timeout, "first pass")
        discovery = {d["op"]: d["rules"] for d in found if "op" in d}
        disc_path.write_text(json.dumps({"samples": a.samples, "ops": discovery}, indent=1))
    reached_by: dict[str, list[str]] = {}
    for op, rs in discovery.items():
        for rule in rs:
            reached_by.setdefault(rule, []).append(op)
    cases = select_cases(all_rules, reached_by, a.samples, a.max_cases)
    jobs = [(rule, c, a.timeout) for rule, cs in cases.items() for c in cs]
    print(f"{len(jobs)} cases over {len(all_rules)} rules", file=sys.stderr, flush=True)
    done = _pool_map(compare_task, jobs, a.jobs, a.timeout, "cases")
    runs: dict[str, list] = {}
    for job, d in zip(jobs, done):
        runs.setdefault(job[0], []).append(d if "hand" in d else {"case": job[1], **d})
    config = {"samples": a.samples, "max_cases": a.max_cases, "commit": _commit(),
              "seconds": time.perf_counter() - start}  # fmt: skip
    return _write(build_table(all_rules, runs), config, runs, a)


def _write(rows: list[dict], config: dict, runs: dict, a: argparse.Namespace) -> int:
    text = render(rows, config)
    print(text)
    Path(a.json).write_text(json.dumps({"config": config, "rows": rows, "runs": runs}, indent=1, default=repr))
    if a.report:
        Path(a.report).parent.mkdir(parents=True, exist_ok=True)
        Path(a.report).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
