"""Side effects as ops (issue 22, part 8): `print`, `warnings.warn`, `logging` calls and `torch.set_printoptions` in
the compiled function run on every call, in program order, with that call's values.

A generator: effect kinds (print, warnings.warn with each category, logging at each level and through `Logger.log`,
a disabled level included, `torch.set_printoptions`) x arguments (a constant, a size, a shape, an int input, a
float input, an f-string, a %-format, a tensor) x the three dynamic modes, over a call sequence of sizes 0, 1, 2
that hits and misses. Each call's captured output (stdout, the warnings recorded, the log records, the print
options) equals eager's for the same call, and the hit/miss counts are exact: arguments passed as values are
symbolic (no guard: the counts of the same program without the effect), formatted ones (f-string, `%`) pin what
they format (the counts of the program that pins it with `str`). A tensor among the arguments is refused.
"""

from __future__ import annotations

import copy
import logging
import warnings

import pytest
import torch

import specengine
from specengine.capture import effect_strings
from specengine.errors import UnsupportedOpError

CALLS = [(0, 1, 0.5), (1, 1, 0.5), (2, 2, 1.5), (2, 2, 1.5), (1, 3, 2.5), (0, 1, 0.5)]  # (size, n, s)
MODES = (True, None, False)
# misses of `x * n + s` over CALLS: one entry (dynamic), static then promoted (automatic), per distinct call (static)
PLAIN_MISSES = {True: 1, None: 3, False: 4}


class CustomWarning(UserWarning):
    pass


LOG = logging.getLogger("effect_ops_test")
WARN_CATEGORIES = {"user": UserWarning, "deprecation": DeprecationWarning, "runtime": RuntimeWarning,
                   "custom": CustomWarning}  # fmt: skip
LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR,
              "critical": logging.CRITICAL, "log25": 25}  # fmt: skip
KINDS = ["print", *(f"warn-{c}" for c in WARN_CATEGORIES), *(f"log-{lv}" for lv in LOG_LEVELS), "printoptions"]

# argument kind -> (value for print and warn, (msg, *args) for logging, printoptions kwargs); None: not applicable
ARGS = {
    "constant": (lambda x, n, s: "hello", lambda x, n, s: ("hello",), lambda x, n, s: {"precision": 3}),
    "size": (lambda x, n, s: x.shape[0], lambda x, n, s: ("size %s", x.shape[0]),
             lambda x, n, s: {"precision": x.shape[0]}),
    "shape": (lambda x, n, s: x.shape, lambda x, n, s: ("shape %s", x.shape), lambda x, n, s: {"edgeitems": n}),
    "int": (lambda x, n, s: n, lambda x, n, s: ("n %d", n), lambda x, n, s: {"precision": n, "threshold": n + 5}),
    "float": (lambda x, n, s: s, lambda x, n, s: ("s %.3f", s), None),
    "fstring": (lambda x, n, s: f"size {x.shape[0]} n {n}", lambda x, n, s: (f"size {x.shape[0]} n {n}",), None),
    "fstring_inline": (None, None, None),  # written in the effect's call itself: see emit_inline
    "percent": (lambda x, n, s: "size %d" % x.shape[0], lambda x, n, s: ("size %d" % x.shape[0],), None),  # noqa: UP031
    "tensor": (lambda x, n, s: x, lambda x, n, s: ("t %s", x), lambda x, n, s: {"precision": x}),
}  # fmt: skip
PINNED = {"fstring": lambda x, n, s: str(x.shape[0]) + str(n), "percent": lambda x, n, s: str(x.shape[0])}


def emit_inline(kind: str, x, n, s) -> None:
    """f-strings passed straight to the effect: their sizes and numbers stay symbolic (capture/effect_strings.py)."""
    if kind == "print":
        print(f"size {x.shape[0]} n={n:>3} s={s:.2f} {n > 1}", f"{n}")
    elif kind.startswith("warn-"):
        warnings.warn(f"size {x.shape[0]} n={n}", WARN_CATEGORIES[kind[5:]], stacklevel=1)
    elif kind == "log-log25":
        LOG.log(25, f"size {x.shape[0]} n={n}")
    elif kind == "log-debug":
        LOG.debug(f"size {x.shape[0]} n={n} s={s}")
    elif kind == "log-info":
        LOG.info(f"size {x.shape[0]} n={n} s={s}")
    elif kind == "log-warning":
        LOG.warning(f"size {x.shape[0]} n={n} s={s}")
    elif kind == "log-error":
        LOG.error(f"size {x.shape[0]} n={n} s={s}")
    else:
        LOG.critical(f"size {x.shape[0]} n={n} s={s}")


def emit(kind: str, arg: str, x, n, s) -> None:
    if arg == "fstring_inline":
        return emit_inline(kind, x, n, s)
    value, log_args, options = ARGS[arg]
    if kind == "print":
        print("value:", value(x, n, s), "end", sep=" | ")
    elif kind.startswith("warn-"):
        level = 2 if kind == "warn-custom" else 1  # 2: the location is the compiled function's line
        warnings.warn(value(x, n, s), WARN_CATEGORIES[kind[5:]], stacklevel=level)
    elif kind == "log-log25":
        LOG.log(25, *log_args(x, n, s))
    elif kind.startswith("log-"):
        getattr(LOG, kind[4:])(*log_args(x, n, s))
    else:
        torch.set_printoptions(**options(x, n, s))


def program(kind: str, arg: str):
    def fn(x, n, s):
        y = x * n
        emit(kind, arg, x, n, s)
        return y + s

    return fn


def baseline(arg: str):
    """The same program without the effect, pinning what a formatted argument pins."""

    def fn(x, n, s):
        if arg in PINNED:
            PINNED[arg](x, n, s)
        return x * n + s

    return fn


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.seen = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((record.levelname, record.name, record.getMessage(), record.filename, record.lineno,
                          record.funcName))  # fmt: skip


@pytest.fixture
def captured(capsys):
    handler = Records()
    LOG.addHandler(handler)
    LOG.setLevel(logging.INFO)  # debug is a disabled level
    LOG.propagate = False
    options = copy.copy(torch._tensor_str.PRINT_OPTS.__dict__)
    try:
        yield capsys, handler
    finally:
        LOG.removeHandler(handler)
        torch._tensor_str.PRINT_OPTS.__dict__.update(options)


def _run(fn, capsys, handler, kind: str) -> list:
    """Output of each call of CALLS: stdout, warnings, log records and print options after it."""
    out = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")  # once per location and text: the registry matters, as in eager
        for size, n, s in CALLS:
            torch.manual_seed(0)
            result = fn(torch.randn(size), n, s)
            opts = dict(torch._tensor_str.PRINT_OPTS.__dict__) if kind == "printoptions" else None
            warned = [(str(w.message), w.category, w.filename, w.lineno) for w in caught]
            caught.clear()
            out.append((result.tolist(), capsys.readouterr().out, warned, list(handler.seen), opts))
            handler.seen.clear()
    return out


def _applies(kind: str, arg: str) -> bool:
    return not (kind == "printoptions" and ARGS[arg][2] is None and arg != "tensor")


@pytest.mark.parametrize("dynamic", MODES, ids=lambda d: f"dynamic={d}")
@pytest.mark.parametrize("arg", list(ARGS))
@pytest.mark.parametrize("kind", KINDS)
def test_effect_runs_on_every_call_as_eager(kind, arg, dynamic, captured):
    if not _applies(kind, arg):
        pytest.skip("set_printoptions takes no string or float here")
    capsys, handler = captured
    fn = program(kind, arg)
    cfn = specengine.compile(fn, dynamic=dynamic)
    if arg == "tensor":
        with pytest.raises(UnsupportedOpError, match=r"of a tensor is not supported .*test_effect_ops.py:\d+"):
            cfn(torch.randn(2), 1, 0.5)
        assert specengine.cache_misses(cfn) == 0 and capsys.readouterr().out == "" and not handler.seen
        return
    expected = _run(fn, capsys, handler, kind)
    assert _run(cfn, capsys, handler, kind) == expected
    seen = [bool(out or warned or records or opts) for _, out, warned, records, opts in expected]
    assert all(seen) if kind in ("print", "printoptions") or kind.startswith("log-") and kind != "log-debug" else True
    assert any(seen) == (kind != "log-debug")  # a disabled level logs nothing; the others show
    base = specengine.compile(baseline(arg), dynamic=dynamic)
    for size, n, s in CALLS:
        base(torch.randn(size), n, s)
    misses = specengine.cache_misses(cfn)
    assert (misses, specengine.cache_hits(cfn)) == (specengine.cache_misses(base), len(CALLS) - misses)
    if arg not in PINNED:
        assert misses == PLAIN_MISSES[dynamic]  # values passed as arguments are symbolic: no guard


def _show(text: str) -> str:
    return text


def _printer(text: str) -> None:
    print(text)


def _length(x, n, s):
    return x * len(_show(f"{n}"))  # a placeholder would have another length


def _compared(x, n, s):
    return x * 2 if _show(f"{n}") == "2" else x * 3


def _parsed(x, n, s):
    return x * int(f"{n}")  # int() of a placeholder raises: traced again, pinned


def _through_helper(x, n, s):
    _printer(f"size {x.shape[0]} n {n}")  # reaches print from another frame: pinned
    return x * n


def _printed_through_a_call(x, n, s):
    print(_show(f"n {n}"))  # the placeholder reaches print, but from another call: traced again, pinned
    return x * n


def _measured_then_printed(x, n, s):
    print(len(f"n {n}"), f"{n}")  # len() of the placeholder: it never reaches an effect, traced again, pinned
    return x * n


def _kept(x, n, s):
    text = f"n {n}"
    print(text)  # stored first: pinned
    return x * n


@pytest.mark.parametrize(
    "fn",
    [_length, _compared, _parsed, _through_helper, _printed_through_a_call, _measured_then_printed, _kept],
    ids=lambda f: f.__name__,
)
@pytest.mark.parametrize("dynamic", MODES, ids=lambda d: f"dynamic={d}")
def test_an_fstring_that_is_not_only_printed_pins_its_values(fn, dynamic, captured):
    capsys, handler = captured
    cfn = specengine.compile(fn, dynamic=dynamic)
    assert _run(cfn, capsys, handler, "print") == _run(fn, capsys, handler, "print")

    def pinning(x, n, s):  # the same program, pinning with str() what the f-string formats
        if fn is _through_helper:
            str(x.shape[0])
        return str(n), x * n + s

    base = specengine.compile(pinning, dynamic=dynamic)
    for size, n, s in CALLS:
        base(torch.randn(size), n, s)
    assert specengine.cache_misses(cfn) == specengine.cache_misses(base)
    if fn in (_printed_through_a_call, _measured_then_printed):  # a placeholder was made, escaped, and its site pinned
        assert any(code is fn.__code__ for code, _ in effect_strings.PINNED)
    assert specengine.cache_misses(cfn) == {True: 4 if fn is _through_helper else 3, None: 4, False: 4}[dynamic]


def _warn_in_try(x, n, s):
    try:
        warnings.warn("careful", stacklevel=1)
    except UserWarning:
        return x * 0
    return x * n


def _warn_under_own_filters(x, n, s):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.warn("hidden", stacklevel=1)
    return x * n


def _log_exception(x, n, s):
    try:
        raise ValueError("boom")
    except ValueError:
        LOG.exception("failed")  # the user's line is named, not logging's
    return x * n


@pytest.mark.parametrize(
    ("fn", "match"),
    [
        (_warn_in_try, r"warnings.warn inside a try block"),
        (_warn_under_own_filters, r"warnings.warn under warnings filters set inside the compiled function"),
        (_log_exception, r"Logger.exception with exc_info"),
    ],
    ids=lambda v: getattr(v, "__name__", ""),
)
def test_effects_whose_outcome_the_trace_cannot_see_are_refused_by_name(fn, match, captured):
    capsys, handler = captured
    cfn = specengine.compile(fn)
    with pytest.raises(UnsupportedOpError, match=match + r".*\(at test_effect_ops.py:\d+\)"):
        cfn(torch.ones(2), 1, 0.5)
    assert specengine.cache_misses(cfn) == 0 and capsys.readouterr().out == "" and not handler.seen
