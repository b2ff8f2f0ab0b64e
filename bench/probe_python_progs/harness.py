"""The probe harness (bench/probe_python.py): each program runs eagerly and compiled (dynamic=True and the default),
call by call; each call is classified against eager:

- correct: the same result (tensors by value, dtype and shape; Python values by type and value, -0.0 and NaN
  included), or the same exception type;
- wrong: a different result, or a result where eager raises (the worst);
- crash: an exception where eager returns that is not UnsupportedOpError, or another exception type than eager's;
- refused: UnsupportedOpError (acceptable: it names the construct);
- excessive: an input seen before (same shapes, dtypes, values) recompiled.

A program's class is its worst call's, over both modes."""

from __future__ import annotations

import copy
import dataclasses
import math
import traceback
import warnings

import torch

import specengine

PROGRAMS = []


def prog(*calls, name=None):
    def deco(fn):
        PROGRAMS.append((name or fn.__name__, fn, list(calls)))
        return fn

    return deco


def T(*s, dtype=torch.float32):
    """A tensor of the shape with values 1, 2, 3, ... (exact in every dtype used here)."""
    return (torch.arange(math.prod(s), dtype=torch.float64).reshape(s) + 1).to(dtype)


S1 = [(T(n),) for n in (4, 5, 0, 1, 2, 8, 9, 3, 4)]
S2 = [(T(n, m),) for n, m in ((2, 3), (3, 4), (0, 3), (1, 1), (4, 4), (2, 3), (6, 2), (1, 5), (3, 4))]


def _sig(a):
    if isinstance(a, torch.Tensor):
        return ("T", tuple(a.shape), str(a.dtype), a.requires_grad)
    if isinstance(a, float):
        return ("f", repr(a), math.copysign(1, a) if a == a else 0)
    if isinstance(a, (tuple, list)):
        return (type(a).__name__,) + tuple(_sig(x) for x in a)
    if isinstance(a, dict):
        return ("d",) + tuple((k, _sig(v)) for k, v in a.items())
    if dataclasses.is_dataclass(a):
        return (type(a).__name__,) + tuple(_sig(getattr(a, f.name)) for f in dataclasses.fields(a))
    return (type(a).__name__, repr(a))


def same(a, b, path="out"):
    if type(a) is not type(b):
        return f"{path}: type {type(a).__name__} vs eager {type(b).__name__} ({a!r} vs {b!r})"
    if isinstance(a, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"{path}: tensor {a.dtype}{tuple(a.shape)} vs eager {b.dtype}{tuple(b.shape)}"
        try:
            torch.testing.assert_close(a, b, equal_nan=True, rtol=1e-5, atol=1e-6)
        except AssertionError as e:
            return f"{path}: values differ: {str(e)[:200]}"
        return None
    if isinstance(a, (tuple, list)):
        if len(a) != len(b):
            return f"{path}: len {len(a)} vs eager {len(b)} ({a!r} vs {b!r})"
        for i, (x, y) in enumerate(zip(a, b)):
            r = same(x, y, f"{path}[{i}]")
            if r:
                return r
        return None
    if isinstance(a, dict):
        if list(a.keys()) != list(b.keys()):
            return f"{path}: keys {list(a)} vs eager {list(b)}"
        for k in a:
            r = same(a[k], b[k], f"{path}[{k!r}]")
            if r:
                return r
        return None
    if isinstance(a, (set, frozenset)):
        return None if a == b else f"{path}: {a!r} vs eager {b!r}"
    if dataclasses.is_dataclass(a):
        return same(dataclasses.astuple(a), dataclasses.astuple(b), path)
    if isinstance(a, float):
        if (a != a and b != b) or (a == b and math.copysign(1, a) == math.copysign(1, b)):
            return None
        return f"{path}: {a!r} vs eager {b!r}"
    return None if a == b else f"{path}: {a!r} vs eager {b!r}"


def _clone(args):
    def c(a):
        if isinstance(a, torch.Tensor):
            return a.detach().clone().requires_grad_(a.requires_grad)
        return copy.deepcopy(a)

    return [c(a) for a in args]


RANK = {"correct": 0, "excessive": 1, "refused": 2, "crash": 3, "wrong": 4}


def run_mode(fn, calls, dynamic):
    cfn = specengine.compile(fn, dynamic=dynamic)
    worst, notes, seen = "correct", [], set()
    for i, args in enumerate(calls):
        sig = tuple(_sig(a) for a in args)
        m0 = specengine.cache_misses(cfn)
        try:
            exp, eexc = fn(*_clone(args)), None
        except Exception as e:  # noqa: BLE001
            exp, eexc = None, e
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got, gexc = cfn(*_clone(args)), None
        except Exception as e:  # noqa: BLE001
            got, gexc = None, e
        cls, note = "correct", None
        if gexc is not None:
            if isinstance(gexc, specengine.UnsupportedOpError):
                cls, note = "refused", f"{type(gexc).__name__}: {str(gexc).splitlines()[0][:160]}"
            elif eexc is not None and type(gexc) is type(eexc):
                pass
            elif eexc is not None:
                cls = "crash"
                note = f"eager {type(eexc).__name__}({str(eexc)[:80]}) vs {type(gexc).__name__}({str(gexc)[:160]})"
            else:
                cls = "crash"
                tb = traceback.extract_tb(gexc.__traceback__)[-1]
                note = f"{type(gexc).__name__}: {str(gexc)[:200]} @{tb.filename.split('/')[-1]}:{tb.lineno}"
        elif eexc is not None:
            cls, note = (
                "wrong",
                f"eager raised {type(eexc).__name__}({str(eexc)[:80]}) but compiled returned {got!r:.80}",
            )
        else:
            r = same(got, exp)
            if r:
                cls, note = "wrong", r
        if cls == "correct" and sig in seen and specengine.cache_misses(cfn) > m0:
            cls, note = "excessive", f"call {i} seen before but recompiled (misses={specengine.cache_misses(cfn)})"
        seen.add(sig)
        if note:
            notes.append(f"call{i} {_short(args)}: {' '.join(note.split())}")
        if RANK[cls] > RANK[worst]:
            worst = cls
    return worst, notes, specengine.cache_misses(cfn), specengine.cache_hits(cfn)


def _short(args):
    out = []
    for a in args:
        if isinstance(a, torch.Tensor):
            out.append(f"T{tuple(a.shape)}{str(a.dtype)[6:]}")
        else:
            out.append(repr(a)[:30])
    return "(" + ", ".join(out) + ")"


def main(argv):
    sel = argv[1:] if len(argv) > 1 else None
    rows = []
    for name, fn, calls in PROGRAMS:
        if sel and not any(s in name for s in sel):
            continue
        res = {}
        for mode, dyn in (("dyn", True), ("auto", None)):
            try:
                res[mode] = run_mode(fn, calls, dyn)
            except Exception as e:  # noqa: BLE001
                res[mode] = ("crash", [f"harness: {type(e).__name__}: {e}"], -1, -1)
        worst = max((res[m][0] for m in res), key=RANK.get)
        rows.append((name, worst, res))
        print(
            f"{name:34s} {worst:9s} dyn={res['dyn'][0]}({res['dyn'][2]}m/{res['dyn'][3]}h) "
            f"auto={res['auto'][0]}({res['auto'][2]}m/{res['auto'][3]}h) calls={len(calls)}",
            flush=True,
        )
        for m in res:
            for n in res[m][1][:3]:
                print(f"    [{m}] {n}", flush=True)
    from collections import Counter

    print("SUMMARY", dict(Counter(r[1] for r in rows)), "of", len(rows))
