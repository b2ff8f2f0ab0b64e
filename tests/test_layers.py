"""The package's structure: no import cycle between specengine modules (imports inside functions included), and
imports inside functions only for the lazy heavy dependencies. The layers contract itself is `lint-imports`
(pyproject.toml), run by CI beside ruff; here it is checked too, through grimp, on which import-linter is built."""

from __future__ import annotations

import ast
import pathlib

import grimp
import pytest

import specengine

ROOT = pathlib.Path(specengine.__file__).parent
LAZY = (
    "z3",
    "sympy",
    "nvfuser_direct",
    "transformers",
    "torch._dynamo",
    "torch._refs",
)  # kept out of `import specengine`


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("specengine", cache_dir=None)  # every import statement, also inside functions


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.find_modules_directly_imported_by(w)))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_the_import_graph_has_no_cycle(graph: grimp.ImportGraph) -> None:
    assert len(graph.modules) > 90
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle(graph: grimp.ImportGraph) -> None:
    graph = graph.copy() if hasattr(graph, "copy") else grimp.build_graph("specengine", cache_dir=None)
    graph.add_import(importer="specengine.errors", imported="specengine.ir.context")  # ir -> errors already
    assert ["specengine.errors", "specengine.ir.context"] in _cycles(graph)


def test_the_layers_contract_is_kept(graph: grimp.ImportGraph) -> None:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    config = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c for c in config if c["type"] == "layers"]
    assert not layers.get("ignore_imports")
    levels = [
        grimp.Layer(*(f"specengine.{m.strip()}" for m in level.split("|")), independent=True)
        for level in layers["layers"]
    ]  # fmt: skip
    assert graph.find_illegal_dependencies_for_layers(layers=levels) == set()


def _local_imports() -> list[tuple[str, int, str, str]]:
    """(file, line, imported module, the line's text) of each import inside a function."""
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        text = path.read_text()
        lines, todo = text.splitlines(), [(ast.parse(text), False)]
        while todo:
            node, inside = todo.pop()
            for child in ast.iter_child_nodes(node):
                if inside and isinstance(child, (ast.Import, ast.ImportFrom)):
                    name = child.module if isinstance(child, ast.ImportFrom) else child.names[0].name
                    out.append((str(path.relative_to(ROOT)), child.lineno, name or "", lines[child.lineno - 1]))
                todo.append((child, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))))
    return out


def test_imports_inside_functions_are_only_the_lazy_heavy_ones_and_say_so() -> None:
    found = _local_imports()
    assert [f for f in found if not f[2].startswith(LAZY)] == []
    assert [f for f in found if "lazy:" not in f[3]] == []
