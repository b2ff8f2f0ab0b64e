"""Harness of bench/probe_modules.py: each probe runs eagerly and compiled (dynamic=True and the default).

A probe is `fn(C, R)`: `C(fn_or_module)` compiles (the identity when eager), `R(f, *args)` calls and records the
output or the exception type, `R.rec(...)` records values, `R.state(module)` records parameters, their grads,
buffers, training flags and plain attributes. Each mode starts from `torch.manual_seed(0)`; the records of a
compiled mode are compared with eager's: correct, WRONG (a record differs), crash (an exception eager did not
raise or of another type, or an internal error), refused (UnsupportedOpError).
"""

from __future__ import annotations

import traceback

import torch
import torch.utils._pytree as pytree

import specengine
from specengine import SpecEngineError, UnsupportedOpError

PROBES = []


def probe(fn):
    PROBES.append(fn)
    return fn


def snap(v):
    def one(t):
        if isinstance(t, torch.Tensor):
            return ("T", t.detach().clone(), t.requires_grad, tuple(t.shape), t.dtype)
        if isinstance(t, torch.Size):
            return ("S", tuple(t))
        return t

    try:
        return pytree.tree_map(one, v)
    except Exception:  # noqa: BLE001
        return repr(v)


class Refused(Exception):
    pass


class Rec:
    def __init__(self, C):
        self.C = C
        self.items = []

    def __call__(self, f, *a, **k):
        try:
            out = f(*a, **k)
        except UnsupportedOpError as e:
            raise Refused(str(e).splitlines()[0][:200]) from e
        except SpecEngineError as e:
            self.items.append(("raise", type(e).__name__, str(e)[:300]))
            return None
        except Exception as e:  # noqa: BLE001
            self.items.append(("raise", type(e).__name__, str(e)[:300]))
            return None
        self.items.append(("out", snap(out)))
        return out

    def rec(self, *v):
        self.items.append(("val", snap(v)))

    def state(self, m):
        """Parameters, their grads, buffers, training flags, plain attributes."""
        d = {}
        for n, p in m.named_parameters():
            d["p:" + n] = snap(p)
            d["g:" + n] = snap(p.grad)
        for n, b in m.named_buffers():
            d["b:" + n] = snap(b)
        for n, sub in m.named_modules():
            d["t:" + n] = sub.training
            for k, v in vars(sub).items():
                if not k.startswith("_") and isinstance(v, (int, float, str, bool, torch.Tensor, type(None))):
                    d["a:" + n + "." + k] = snap(v)
        self.items.append(("state", d))


def deep(x, y, path=""):
    if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
        if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
            return f"{path}: {type(x).__name__} vs {type(y).__name__}"
        try:
            torch.testing.assert_close(y, x, equal_nan=True, atol=1e-4, rtol=1e-4)
        except Exception as e:  # noqa: BLE001
            return f"{path}: {' '.join(str(e).split())[:300]}"
        return None
    if type(x) is not type(y):
        return f"{path}: {type(x).__name__} {x!r:.80} vs {type(y).__name__} {y!r:.80}"
    if isinstance(x, (list, tuple)):
        if len(x) != len(y):
            return f"{path}: len {len(x)} vs {len(y)}"
        for i, (a, b) in enumerate(zip(x, y)):
            d = deep(a, b, f"{path}[{i}]")
            if d:
                return d
        return None
    if isinstance(x, dict):
        if list(x) != list(y):
            return f"{path}: keys {list(x)} vs {list(y)}"
        for k in x:
            d = deep(x[k], y[k], f"{path}[{k!r}]")
            if d:
                return d
        return None
    if isinstance(x, float) and x != x and y != y:
        return None
    if x != y:
        return f"{path}: {x!r:.100} vs {y!r:.100}"
    return None


def compare(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x[0] == "raise" or y[0] == "raise":
            if x[:2] != y[:2]:
                return f"RAISE item {i}: eager {x[:3]} vs compiled {y[:3]}"
            continue
        d = deep(x, y, f"item {i}")
        if d:
            return d
    if len(a) != len(b):
        return f"record lengths {len(a)} vs {len(b)}"
    return None


def run_mode(p, mode):
    compiled = []

    def C(fn, **kw):
        if mode == "eager":
            return fn
        cfn = specengine.compile(fn, dynamic=mode, **kw)
        compiled.append(cfn)
        return cfn

    R = Rec(C)
    torch.manual_seed(0)
    dtype = torch.get_default_dtype()
    try:
        p(C, R)
        err = None
    except Refused as e:
        err = ("refused", str(e))
    except Exception as e:  # noqa: BLE001
        tb = traceback.format_exc().strip().splitlines()
        err = ("exc", f"{type(e).__name__}: {str(e)[:200]} @ {tb[-3].strip() if len(tb) > 2 else ''}")
    finally:
        torch.set_default_dtype(dtype)
        torch.set_grad_enabled(True)
    misses = sum(specengine.cache_misses(c) for c in compiled)
    hits = sum(specengine.cache_hits(c) for c in compiled)
    return R.items, err, misses, hits


def classify(p):
    ref, eerr, _, _ = run_mode(p, "eager")
    if eerr is not None:
        return {"eager": f"PROBE BROKEN: {eerr}"}
    res = {}
    for mode in (True, None):
        items, err, m, h = run_mode(p, mode)
        if err is not None and err[0] == "refused":
            res[mode] = ("refused", err[1], m, h)
            continue
        if err is not None:
            res[mode] = ("crash", err[1], m, h)
            continue
        diff = compare(ref, items)
        if diff is None:
            res[mode] = ("correct", "", m, h)
        elif diff.startswith("RAISE"):
            res[mode] = ("crash", diff, m, h)
        else:
            res[mode] = ("WRONG", diff, m, h)
    return res


def main(only=None):
    rows, tally = [], {}
    for p in PROBES:
        if only and not any(o in p.__name__ for o in only):
            continue
        res = classify(p)
        rows.append((p.__name__, res))
        if "eager" in res:
            print(f"{p.__name__:44s} {res['eager']}", flush=True)
            continue
        parts = []
        for mode in (True, None):
            c, msg, m, h = res[mode]
            tally[c] = tally.get(c, 0) + 1
            parts.append(f"{'dynamic=True' if mode else 'default'}: {c} ({m} compiles / {h} hits)")
        print(f"{p.__name__:44s} {' | '.join(parts)}", flush=True)
        for mode in (True, None):
            c, msg, m, h = res[mode]
            if c != "correct":
                print(f"    [{'dynamic=True' if mode else 'default'}] {msg[:240]}", flush=True)
    print(f"\n{len(rows)} programs x 2 modes: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())))
    return rows
