"""The generic op path pauses the watchers of user code (line coverage, C calls) while it works on an op that can
reach only torch's and the engine's code (`ops/generic.py: _runs_no_user_code`); issue 26: densenet161's trace
spent ~1.4 s of 2.2 s in those watchers' per-frame calls.

By a generator: generic ops x what the program does after the op (reads a global that then changes, calls a
getter whose value then changes, calls a clock, advances a global iterator) x the three dynamic modes, over sizes
2, 0, 1, 3, 2. Each program gives eager's values (or is refused by name) with the same counts as when the watchers
are never paused, and the op was in fact run paused. The predicate itself is checked on every kind of callable and
argument that could call back into the program."""

from __future__ import annotations

import itertools
import time
import types

import pytest
import torch
import torch.nn.functional as F
from helpers import counts

import specengine
from specengine import UnsupportedOpError
from specengine.ops import generic

OPS = {
    "F.relu_": "F.relu(x.clone(), inplace=True)",
    "F.max_pool1d": "F.max_pool1d(x.reshape(1, 1, -1), 1)",
    "F.hardswish": "F.hardswish(x)",
    "torch.flip": "torch.flip(x, [0])",
    "torch.logcumsumexp": "torch.logcumsumexp(x, 0)",
    "aten.sin.default": "torch.ops.aten.sin.default(x)",
    "aten.cos": "torch.ops.aten.cos(x)",
}
# what the program does after the op: (expression, kind); a "changes" kind is changed after the second call
USES = {
    "global read": ("K", "changes"),
    "getter": ("torch.get_num_threads()", "changes"),
    "clock": ("(time.time() % 3)", "refused"),
    "global iterator": ("next(COUNTER)", "refused"),
}
MODES = (True, False, None)
SIZES = (2, 0, 1, 3, 2)


def _program(op: str, use: str) -> types.FunctionType:
    src = f"def f(x):\n    y = {OPS[op]}\n    return y.reshape(-1) * {USES[use][0]}\n"
    glb = {"torch": torch, "F": F, "time": time, "K": 2, "COUNTER": itertools.count(), "__name__": "se_pause"}
    exec(compile(src, "<generic-pause>", "exec"), glb)
    return glb["f"]


def _change(f: types.FunctionType, use: str) -> None:
    if use == "global read":
        f.__globals__["K"] = 3
    else:
        torch.set_num_threads(torch.get_num_threads() + 1)


def _outcome(f, cfn, x) -> tuple:
    """("refused",), eager's exception type where both raise it, or ("value", shape) where the values agree."""
    try:
        got = cfn(x)
    except UnsupportedOpError:
        return ("refused",)
    except Exception as e:  # noqa: BLE001 - eager must raise the same
        with pytest.raises(type(e)):
            f(x)
        return ("raised", type(e).__name__)
    torch.testing.assert_close(got, f(x))
    return ("value", got.shape)


def _run(op: str, use: str, dynamic, pause: bool, monkeypatch) -> tuple[list, tuple]:
    """Outcomes (values or the refusal's type) of the sizes, and the counts."""
    seen: list[bool] = []
    real = generic._runs_no_user_code
    monkeypatch.setattr(generic, "_runs_no_user_code", lambda *a: seen.append(real(*a)) or (pause and seen[-1]))
    f = _program(op, use)
    cfn = specengine.compile(f, dynamic=dynamic)
    threads = torch.get_num_threads()
    out = []
    try:
        for i, n in enumerate(SIZES):
            if i == 2 and USES[use][1] == "changes":
                _change(f, use)
            out.append(_outcome(f, cfn, torch.arange(float(n))))
    finally:
        torch.set_num_threads(threads)
        monkeypatch.setattr(generic, "_runs_no_user_code", real)
    assert any(seen), "the op did not reach the generic path's pause"
    return out, counts(cfn)


CASES = [(o, u, m) for o in OPS for u in USES for m in MODES]


@pytest.mark.parametrize("op,use,dynamic", CASES, ids=[f"{o}-{u}-{m}" for o, u, m in CASES])
def test_a_paused_generic_op_changes_no_outcome(op, use, dynamic, monkeypatch):
    paused = _run(op, use, dynamic, True, monkeypatch)
    watched = _run(op, use, dynamic, False, monkeypatch)
    assert paused == watched
    outcomes, (misses, hits) = paused
    if USES[use][1] == "refused":
        assert all(o[0] in ("refused", "raised") for o in outcomes) and (misses, hits) == (0, 0)
    else:  # the change after the second call is seen: the entry for size 2 is not offered the last call
        values = sum(o[0] == "value" for o in outcomes)  # (a call eager's error ends while tracing counts neither)
        assert all(o[0] != "refused" for o in outcomes) and misses >= 2 and values <= misses + hits <= len(SIZES)


class _Sub(torch.Tensor):
    pass


def _user_fn(x):
    return x


_P = torch.empty(2)


@pytest.mark.parametrize(
    "func,args,expected",
    [
        (torch.ops.aten.sin.default, (_P,), True),
        (torch.ops.aten.sin, (_P,), True),
        (torch.cumsum, (_P, 0), True),
        (torch.Tensor.flip, (_P, [0]), True),
        (F.batch_norm, (_P, None, None), True),
        (torch.rand_like, (_P,), False),  # draws: the C-call watch compares the generator
        (F.dropout, (_P,), False),
        (_user_fn, (_P,), False),  # the program's own function
        (torch.cumsum, (_P.as_subclass(_Sub), 0), False),  # a subclass: its __torch_function__ is the user's
        (torch.cumsum, (_P, 0), True),
        (torch.Tensor.apply_, (_P, _user_fn), False),  # a callable argument
        (torch.cumsum, (_P, iter([0])), False),  # an iterator argument
        (torch.cumsum, (_P, torch.nn.Linear(1, 1)), False),  # a module
    ],
)
def test_the_predicate_pauses_only_where_no_user_code_can_run(func, args, expected):
    assert generic._runs_no_user_code(func, args, {}) is expected


def test_a_custom_op_is_never_paused():
    lib = torch.library.Library("se_pause_test", "FRAGMENT")
    lib.define("op(Tensor x) -> Tensor")
    assert generic._runs_no_user_code(torch.ops.se_pause_test.op.default, (_P,), {}) is False
    assert generic._runs_no_user_code(torch.ops.se_pause_test.op, (_P,), {}) is False
