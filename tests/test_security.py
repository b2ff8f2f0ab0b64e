"""Generated code comes only from the engine's own traces (issue 6).

No pickle, no eval: the one `exec` of the engine is `specengine.codegen.exec_source`, which compiles the prologues,
computations and dispatch keys the engine prints itself. A user's strings (argument values, dict keys, defaults)
reach generated code only as values held in its globals or as `repr` literals, never as code.
"""

from __future__ import annotations

import ast
import builtins
import linecache
import pathlib

import pytest
import torch
from helpers import counts

import specengine

ROOT = pathlib.Path(specengine.__file__).parent
FORBIDDEN_MODULES = {"pickle", "cPickle", "marshal", "shelve", "dill", "cloudpickle", "joblib"}
PAYLOAD = "__import__('builtins').__setattr__('PWNED', 1) or __import__('os').system('echo pwned')"


def _calls(tree: ast.AST):
    """(name of the called builtin, enclosing function) for every call of exec, eval, compile or __import__."""
    parents = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in (
            "exec", "eval", "compile", "__import__"
        ):  # fmt: skip
            scope = node
            while scope in parents and not isinstance(scope, ast.FunctionDef):
                scope = parents[scope]
            yield node.func.id, getattr(scope, "name", "<module>")


def test_the_engine_has_no_pickle_no_eval_and_one_exec():
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module.split(".")[0]]
            assert not FORBIDDEN_MODULES & set(names), f"{rel} imports {names}"
            if isinstance(node, ast.Attribute) and node.attr in ("load", "loads"):
                assert not (isinstance(node.value, ast.Name) and node.value.id in ("torch", "pickle")), rel
        found += [(rel, name, scope) for name, scope in _calls(tree)]
    assert sorted(found) == [("codegen.py", "compile", "exec_source"), ("codegen.py", "exec", "exec_source")]


def _generated_sources(before: set) -> dict[str, str]:
    return {k: "".join(v[2]) for k, v in linecache.cache.items() if k.startswith("<specengine-") and k not in before}


def _assert_payload_is_never_code(sources: dict[str, str]) -> None:
    """The payload may appear in generated source only inside string literals."""
    assert sources
    for name, source in sources.items():
        tree = ast.parse(source)
        for node in ast.walk(tree):
            assert not (isinstance(node, ast.Name) and node.id == "__import__"), f"{name}:\n{source}"
            assert not (isinstance(node, ast.Attribute) and node.attr in ("system", "__setattr__")), source


@pytest.fixture
def generated():
    before = set(linecache.cache)
    yield lambda: _generated_sources(before)
    assert not hasattr(builtins, "PWNED")


@pytest.mark.parametrize("dynamic", [True, False, None])
def test_a_string_argument_is_guarded_by_value_and_never_executed(dynamic, generated, capfd):
    def f(a, s):
        return a * len(s)

    cfn = specengine.compile(f, dynamic=dynamic)
    x = torch.randn(3)
    for s in (PAYLOAD, PAYLOAD, PAYLOAD + " ", PAYLOAD):
        torch.testing.assert_close(cfn(x, s), x * len(s))
    assert counts(cfn) == (2, 2)  # guarded by value: another string is another entry
    prologue = str(specengine.cache_entries(cfn)[0].prologue)
    assert "s != _const" in prologue and "__import__" not in prologue  # compared with a held value, not inlined
    _assert_payload_is_never_code(generated())
    assert "pwned" not in capfd.readouterr().out


def test_strings_in_keys_defaults_and_names_stay_data(generated, capfd):
    key = f"'] + {PAYLOAD} + d['"

    def g(d, scale=PAYLOAD):
        return d[key] * len(scale), d["n"] + 1

    g.__name__ = f"g(); {PAYLOAD} #"
    cfn = specengine.compile(g, dynamic=True)
    for n in (2, 3, 3):
        d = {key: torch.randn(2), "n": n}
        out, expected = cfn(d), g(d)
        torch.testing.assert_close(out, expected)
    assert counts(cfn) == (1, 2)
    sources = generated()
    _assert_payload_is_never_code(sources)
    assert any(repr(key) in s for s in sources.values())  # the key is printed as a literal, escaped by repr
    assert "pwned" not in capfd.readouterr().out


def test_a_module_attribute_with_code_in_its_name_stays_data(generated):
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer(f"w{PAYLOAD}".replace(".", "_"), torch.ones(3))
            self.mode = PAYLOAD

        def forward(self, x):
            return x * len(self.mode) + getattr(self, f"w{PAYLOAD}".replace(".", "_"))

    m = M()
    cfn = specengine.compile(m, dynamic=True)
    x = torch.randn(3)
    torch.testing.assert_close(cfn(x), m(x))
    _assert_payload_is_never_code(generated())


@pytest.mark.parametrize("newline", ["\n", "\r", "\r\n", "\x0c\n", "\u2028"])
def test_a_filename_with_code_after_a_newline_stays_a_comment(newline, generated, capfd):
    """The computation prints the user's file and line above each op: a code object's filename (any string
    `compile()` was given) must not end that comment and add a line of code."""
    glb: dict = {}
    exec(compile("def f(x):\n    return x * 2\n", f"evil{newline}  {PAYLOAD}{newline}  #", "exec"), glb)
    cfn = specengine.compile(glb["f"], dynamic=True)
    for n in (2, 0, 1, 3):
        torch.testing.assert_close(cfn(torch.ones(n)), torch.ones(n) * 2)
    assert counts(cfn) == (1, 3)
    _assert_payload_is_never_code(generated())
    assert "pwned" not in capfd.readouterr().out


_FORBIDDEN_NAMES = ["import", "__import__", "exec", "eval", "compile", "open", "breakpoint", "__builtins__",
                    "__globals__", "__subclasses__", "__code__", "__reduce__", "globals", "locals"]  # fmt: skip


@pytest.mark.parametrize("name", _FORBIDDEN_NAMES)
@pytest.mark.parametrize("where", ["prologue", "computation"])
def test_an_entry_source_naming_a_builtin_that_reaches_outside_is_rejected(name, where):
    """The load's source check (defence behind the signature): every forbidden name, at the start, middle and end
    of a line, is a Rejected entry; a longer identifier that contains it (`reopen`, `evaluate`) is not."""
    from specengine.persist.entries import _HEADER_LINES, _check_source
    from specengine.persist.signing import Rejected

    header = "\n".join(_HEADER_LINES) + "\n\n" if where == "computation" else ""
    for body in (
        f"def f(x):\n  return {name}(x)\n",
        f"def f(x):\n  y = x.{name}\n  return y\n",
        f"def f(x):\n  return x\n{name}",
    ):
        with pytest.raises(Rejected, match="names"):
            _check_source(header + body, imports=where == "computation")
    _check_source(header + f"def f(x):\n  re{name}d = x\n  return re{name}d\n", imports=where == "computation")


def test_only_the_prologue_guard_on_the_compiled_function_code_may_name_code():
    from specengine.persist.entries import _check_source
    from specengine.persist.signing import Rejected

    _check_source("def p(f):\n  if _func_0.__code__ is not _code1: return None\n", imports=False)
    for body in ("  if a_func_0.__code__ is not _code1: return None", "  c = _func_0.__code__", "  _f.__code__"):
        with pytest.raises(Rejected, match="__code__"):
            _check_source("def p(f):\n" + body + "\n", imports=False)
