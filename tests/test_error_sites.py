"""Errors name the user's line and the public name of the callable (issue 22 part 9).

A generator of failing programs: each kind of failure (an unsupported callable, a bad shape, a data-dependent
branch or read, a torch setting changed, a library that fails inside, a deprecated torch signature, a host read of
tensor data (`tolist`, `print`, numpy), autograd state, a clock read) placed in each context (the compiled
function itself, a helper in another file, an nn.Module's forward, a nested closure, user code that a library calls
back: `copy.deepcopy` calling `__deepcopy__`), written to files so that the failing line is known. Each must raise
eager's exception type where eager raises (else a SpecEngineError) with a message (and notes) that names the
user's file:line of the failing statement, never a library's file or `<traced function>`, and, for a callable,
its public name (`torch.autograd.grad`, never `<function grad at 0x...>`). Nothing is cached.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import re
import sys

import pytest
import torch

import specengine
from specengine import provenance

# kind -> (statement, the public name the message must contain or "", eager's exception type or None: an engine
# refusal where eager succeeds)
KINDS = {
    "unsupported callable": (
        "g = torch.autograd.grad((x * x).sum(), x, allow_unused=True)",
        "torch.autograd.grad",
        None,
    ),
    "unsupported method": ("n = x.numpy()", "torch.Tensor.numpy", None),
    "bad shape": ("x = x.view(7, -1)", "", RuntimeError),
    "data-dependent branch": ("x = (x.add_(1), x + 1 if x.sum() > 0 else x)[1]", "", None),  # (not speculated)
    "data-dependent read": ("v = float(x.sum())", "float()", None),
    "setting changed": ("torch.set_default_dtype(torch.get_default_dtype())", "torch.set_default_dtype", None),
    "library fails inside": ("c = copy.deepcopy([x])", "copy.deepcopy", None),
    "bad keyword": ("x = torch.mul(x, no_such_argument=2)", "", TypeError),
    "deprecated signature": ("x = x.add(x.sum(), other=x)", "torch.Tensor.add", None),
    "tolist": ("v = x.tolist()", "tolist", None),
    "autograd state": ("g = x.grad", "Tensor.grad", None),
    "print tensor data": ("print(x)", "print", None),
    "clock": ("t = __import__('time').monotonic_ns()", "time.monotonic_ns", None),
    "numpy of a tensor": ("a = __import__('numpy').asarray(x)", "", None),
    "bad dtype": ("x = x.to(dtype=3)", "", TypeError),
}

_HEADER = "import copy\nimport torch\nimport torch.nn as nn\n"

# context -> (the program's source with {stmt} where the failing statement goes, the helper file's source or None,
# which file holds the failing line: "prog" or "helper")
CONTEXTS = {
    "compiled function": ("def f(x):\n    {stmt}\n    return x\n", None, "prog"),
    "helper in another file": (
        "from {helper} import step\n\ndef f(x):\n    return step(x)\n",
        "def step(x):\n    {stmt}\n    return x\n",
        "helper",
    ),  # fmt: skip
    "nn.Module forward": (
        "class M(nn.Module):\n    def forward(self, x):\n        {stmt}\n        return x\n\nf = M()\n",
        None,
        "prog",
    ),  # fmt: skip
    "nested closure": (
        "def f(x):\n    def inner(x):\n        {stmt}\n        return x\n    return inner(x) * 1\n",
        None,
        "prog",
    ),  # fmt: skip
    "called back by a library": (
        "class Holder:\n    def __init__(self, x):\n        self.x = x\n\n"
        "    def __deepcopy__(self, memo):\n        x = self.x\n        {stmt}\n"
        "        return x\n\ndef f(x):\n    return copy.deepcopy(Holder(x))\n",
        None,
        "prog",
    ),  # fmt: skip
    "inside an installed library": (  # the library's file is under site-packages (simulated): its caller is named
        "from {helper} import step\n\ndef f(x):\n    return step(x)  # calls the library\n",
        "def step(x):\n    {stmt}\n    return x\n",
        "library caller",
    ),  # fmt: skip
}

LIBRARY_FILES = ("copy.py", "functools.py", "module.py", "<traced function>", "<function ", "<unknown>")
_counter = itertools.count()


def _write(directory, name: str, source: str) -> str:
    directory.mkdir(exist_ok=True)
    path = directory / f"{name}.py"
    path.write_text(_HEADER + source)
    return str(path)


def _program(tmp_path, kind: str, context: str, monkeypatch=None):
    """The compiled program and the user's file:line that its error must name (an installed library's caller)."""
    stmt = KINDS[kind][0]
    prog_src, helper_src, where = CONTEXTS[context]
    n = next(_counter)
    helper = f"errsite_helper_{n}"
    lib = tmp_path / "site-packages"
    if where == "library caller":
        monkeypatch.setattr(provenance, "_INSTALLED", (*provenance._INSTALLED, str(lib) + os.sep))
    if helper_src is not None:
        _write(lib, helper, helper_src.format(stmt=stmt))
    path = _write(tmp_path, f"errsite_prog_{n}", prog_src.format(stmt=stmt, helper=helper))
    sys.path[:0] = [str(tmp_path), str(lib)]
    try:
        spec = importlib.util.spec_from_file_location(f"errsite_prog_{n}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        del sys.path[:2]
    if where == "helper":
        path = str(lib / f"{helper}.py")
    marker = "# calls the library" if where == "library caller" else stmt
    lines = open(path).read().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if text.strip() == marker or text.endswith(marker))
    return module.f, f"{os.path.basename(path)}:{line}"


def _text(e: BaseException) -> str:
    return "\n".join([str(e), *getattr(e, "__notes__", ())])


@pytest.mark.parametrize("context", list(CONTEXTS))
@pytest.mark.parametrize("kind", list(KINDS))
def test_error_names_users_line_and_public_name(tmp_path, monkeypatch, kind, context):
    f, site = _program(tmp_path, kind, context, monkeypatch)
    _, public, eager_type = KINDS[kind]
    x = torch.randn(3, 4, requires_grad=kind == "unsupported callable")
    if eager_type is not None:
        with pytest.raises(eager_type):
            f(x.detach().requires_grad_(x.requires_grad))
    cf = specengine.compile(f)
    with pytest.raises(Exception) as info:
        cf(x)
    e = info.value
    if eager_type is not None:
        assert type(e) is eager_type, f"eager raises {eager_type.__name__}; the engine {e!r}"
    else:
        assert isinstance(e, specengine.SpecEngineError), repr(e)
    text = _text(e)
    assert site in text, f"expected {site} in: {text}"
    assert not any(lib in text for lib in LIBRARY_FILES), text
    assert context != "inside an installed library" or not re.search(r"errsite_helper_\d+\.py", text), text
    assert public in text, f"expected {public!r} in: {text}"
    assert specengine.cache_misses(cf) == 0 and not specengine.cache_entries(cf)


def test_generated_programs_run_eagerly_when_fixed(tmp_path, monkeypatch):
    """The generator's programs are valid Python whose only failure is the statement (a harmless one runs)."""
    for context in CONTEXTS:
        KINDS["harmless"] = ("x = x * 1", "", None)
        try:
            f, _ = _program(tmp_path, "harmless", context, monkeypatch)
        finally:
            del KINDS["harmless"]
        torch.testing.assert_close(specengine.compile(f)(torch.ones(2)), f(torch.ones(2)))


@pytest.mark.parametrize("context", ["compiled function", "nn.Module forward"])
def test_refusals_seen_after_the_call_name_the_function(tmp_path, context):
    """A random draw from Python's `random` is refused at the call (capture/calls.py), naming the statement's
    file:line; where it is seen only after the traced function returned, the function and its definition's
    file:line; never `<traced function>`."""
    KINDS["python random"] = ("v = __import__('random').random()", "", None)
    try:
        f, _ = _program(tmp_path, "python random", context)
    finally:
        del KINDS["python random"]
    cf = specengine.compile(f)
    with pytest.raises(specengine.UnsupportedOpError) as info:
        cf(torch.randn(3))
    text = _text(info.value)
    target = type(f).forward if isinstance(f, torch.nn.Module) else f
    code = target.__code__
    file = code.co_filename.rsplit("/", 1)[1]
    lines = {ln for _, _, ln in code.co_lines() if ln is not None}  # the draw's own line (seen at the call), or
    at_call = any(f"{file}:{ln}" in text for ln in lines) and "random.random()" in text
    assert at_call or (f"{file}:{code.co_firstlineno}" in text and target.__qualname__ in text), text  # the def
    assert not any(lib in text for lib in LIBRARY_FILES), text
    assert specengine.cache_misses(cf) == 0
