"""Effects made by library code that the program calls (issue 22 parts 7 and 8), by generator.

who (the program's own code, or an installed library's function it calls) x effect (`warnings.warn`, a logging
call, `print`, a once-per-process logging helper such as transformers' `logger.warning_once`) x warnings filter
("default", "always") x the three dynamic modes, over three calls. The program's own effects are ops: each call
emits what eager emits. A library's effects are the library's: they run while tracing only
(docs/python-semantics.md, "Side effects"), so a compiled function emits them once where eager emits them on every
call, except where eager emits them once too (a warning under the "default" filter, which shows once per
location; a once-per-process helper). The library is a module in a temporary directory taken as site-packages.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
import warnings

import pytest
import torch
from helpers import counts

import specengine
from specengine.capture import library

_LIB = """
import functools, logging, warnings
LOG = logging.getLogger("se_fake_lib")

@functools.lru_cache(None)
def warning_once(msg):
    LOG.warning(msg)

def api(x, effect):
    if effect == "warn":
        warnings.warn("api is deprecated", FutureWarning, stacklevel=2)
    elif effect == "log":
        LOG.warning("api called")
    elif effect == "print":
        print("api called")
    else:
        warning_once("api called once")
    return x * 2
"""
WHO = ("program", "library")
EFFECTS = ("warn", "log", "print", "once")
FILTERS = ("default", "always")
MODES = (True, False, None)
LOG = logging.getLogger("se_program")


def _program_effect(effect: str) -> None:
    if effect == "warn":
        warnings.warn("api is deprecated", FutureWarning, stacklevel=1)
    elif effect == "log":
        LOG.warning("api called")
    elif effect == "print":
        print("api called")


@pytest.fixture
def fake_lib(tmp_path, monkeypatch):
    path = tmp_path / "se_fake_lib.py"
    path.write_text(_LIB)
    monkeypatch.setattr(library, "SITE", library.SITE + (str(tmp_path) + os.sep,))
    spec = importlib.util.spec_from_file_location("se_fake_lib", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setitem(sys.modules, "se_fake_lib", mod)
    return mod


class _Count(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.n += 1


def _emitted(fn, x, effect, filt, capsys) -> int:
    handler = _Count()
    for name in ("se_fake_lib", "se_program"):
        logging.getLogger(name).addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter(filt)
            outs = [fn(x) for _ in range(3)]  # (checked after: assert_close sets warnings filters)
    finally:
        for name in ("se_fake_lib", "se_program"):
            logging.getLogger(name).removeHandler(handler)
    for out in outs:
        torch.testing.assert_close(out, x * 2)
    printed = capsys.readouterr().out.count("api called")
    return len([m for m in w if issubclass(m.category, FutureWarning)]) + handler.n + printed


CASES = [(who, e, flt, MODES[i % 3]) for i, (who, e, flt) in enumerate(
    (who, e, flt) for who in WHO for e in EFFECTS for flt in FILTERS if not (who == "program" and e == "once"))]  # fmt: skip


@pytest.mark.parametrize("who,effect,filt,dynamic", CASES, ids=["-".join(map(str, c)) for c in CASES])
def test_library_effects_run_while_tracing_and_the_programs_on_every_call(fake_lib, who, effect, filt, dynamic,
                                                                         capsys):  # fmt: skip
    if who == "program":

        def f(x):
            _program_effect(effect)
            return x * 2
    else:

        def f(x):
            return fake_lib.api(x, effect)

    x = torch.arange(3.0)
    eager = _emitted(f, x, effect, filt, capsys)
    fake_lib.warning_once.cache_clear()
    cfn = specengine.compile(f, dynamic=dynamic)
    compiled = _emitted(cfn, x, effect, filt, capsys)
    once_in_eager = effect == "once" or (effect == "warn" and filt == "default")
    assert compiled == (eager if who == "program" or once_in_eager else 1), (eager, compiled)
    assert eager == (1 if once_in_eager else 3)
    assert counts(cfn)[0] == 1


def test_torchs_own_kernel_warning_runs_on_every_call():
    """`F.softmax(x)` without `dim` warns from torch's kernel, which the computation calls: on every call, as eager
    (attributed to specengine's line, not the program's)."""

    def f(x):
        return torch.nn.functional.softmax(x) * 1

    cfn = specengine.compile(f, dynamic=True)
    x = torch.arange(3.0)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):
            torch.testing.assert_close(cfn(x), f(x))
    assert len([m for m in w if "softmax" in str(m.message)]) == 6
