"""Programs that iterate what they reach from outside, for issue 22 part 2 (calls the tracer cannot see).

A program is one cell of the cross product

    kind (what is iterated: an iterator that lives across calls, `itertools.count`, `iter(list)`, a generator, a
      generator expression, `map`, a dict's key iterator, `iter(range)`; or an iterable container, a list, a
      tuple, a range, a dict)
    x place (where it is reached: an argument, a global, a closure variable, a module attribute, an attribute of a
      global object, an item of a global list, a default)
    x use (how it is advanced: a `for` loop, `next`, `zip`, `itertools.islice` summed, unpacking)

and the change between calls is the program's own: each call advances an iterator, so eager's second call sees the
next values. An iterator is refused (the error names it and the program's line; the compile leaves no entry and a
C iterator whose type can be put back is where it was); a container passes, equals eager and hits on the second
call. `Case.source()` prints a runnable reproducer; `matrix()` gives docs/python-semantics.md's table.
"""

from __future__ import annotations

import linecache
import types
from dataclasses import dataclass
from typing import Any

import torch

import specengine
from specengine.errors import UnsupportedOpError

ITERATORS = {
    "count": "itertools.count(1)",
    "list_iterator": "iter([1, 2, 3, 4, 5, 6])",
    "range_iterator": "iter(range(1, 100))",
    "generator": "_gen()",
    "genexpr": "(i for i in range(1, 100))",
    "map": "map(abs, range(1, 100))",
    "dict_keyiterator": "iter({i: 0 for i in range(1, 50)})",
}
CONTAINERS = {"list": "[1, 2, 3]", "tuple": "(1, 2, 3)", "range": "range(1, 4)", "dict": "{1: 0, 2: 0}"}
KINDS = {**ITERATORS, **CONTAINERS}
USES = {
    "for": "for v in {o}:\n        break",
    "next": "v = next({o})",
    "zip": "v = [a for a, _ in zip({o}, range(1))][0]",
    "islice": "v = sum(itertools.islice({o}, 2))",
    "unpack": "v, _ = itertools.islice({o}, 2)",
}
PLACES = ("arg", "global", "closure", "module", "attr", "item", "default")
MODES = (True, False, None)
_SETUP = "import itertools\n\n\ndef _gen():\n    i = 0\n    while True:\n        i += 1\n        yield i\n\n\n"


@dataclass(frozen=True)
class Case:
    kind: str
    place: str
    use: str
    mode: Any = True

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.place}-{self.use}-{self.mode}"

    def source(self) -> str:
        o = {"arg": "o", "global": "O", "closure": "o", "module": "mod.O", "attr": "CFG.o", "item": "BOX[0]",
             "default": "o"}[self.place]  # fmt: skip
        params = {"arg": "x, o", "default": "x, o=O"}.get(self.place, "x")
        body = USES[self.use].format(o=o)
        fn = f"def f({params}):\n    {body}\n    return x * v\n"
        if self.place == "closure":
            fn = "def outer(o):\n" + "".join(f"    {line}\n" for line in fn.splitlines()) + "    return f\n"
        return f"{_SETUP}O = {KINDS[self.kind]}\n\n\n{fn}"

    def namespace(self) -> dict:
        filename = f"<unseen-gen-{self.name}>"
        src = self.source()
        linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
        ns: dict = {"__name__": "unseen_gen_case"}
        exec(compile(src, filename, "exec"), ns)
        ns["mod"] = types.ModuleType("unseen_gen_mod")
        ns["mod"].O = ns["O"]
        ns["CFG"] = types.SimpleNamespace(o=ns["O"])
        ns["BOX"] = [ns["O"]]
        if self.place == "closure":
            ns["f"] = ns["outer"](ns["O"])
        return ns


def applicable(kind: str, use: str) -> bool:
    return not (kind in CONTAINERS and use == "next")  # (`next` of a container raises TypeError in eager)


def all_cases(modes: tuple = MODES) -> list[Case]:
    cells = [(k, p, u) for k in KINDS for p in PLACES for u in USES if applicable(k, u)]
    return [Case(k, p, u, modes[i % len(modes)]) for i, (k, p, u) in enumerate(cells)]


def _position(o: Any) -> Any:
    return o.__reduce__() if hasattr(o, "__setstate__") else None


def run_case(case: Case) -> str:
    """`pass`, `refused: <reason>` or `FAIL: <why>` (see the module docstring)."""
    ns = case.namespace()
    f, o = ns["f"], ns["O"]
    extra = (o,) if case.place == "arg" else ()
    x = torch.arange(3.0)
    cfn = specengine.compile(f, dynamic=case.mode)
    before = _position(o)
    try:
        got = [cfn(x, *extra) for _ in range(2)]
    except UnsupportedOpError as e:
        if case.kind in CONTAINERS:
            return f"FAIL: a container refused: {e}"
        if "<unseen-gen-" not in e.where:
            return f"FAIL: the error does not name the program's line: {e}"
        if specengine.cache_misses(cfn) or specengine.cache_hits(cfn):
            return "FAIL: a refused compile left an entry"
        if _position(o) != before:
            return "FAIL: the iterator was left advanced"
        return f"refused: {e.op}"
    if case.kind in ITERATORS:
        return f"FAIL: an iterator that lives across calls was baked in: {[g.tolist() for g in got]}"
    want = [f(x, *extra) for _ in range(2)]
    if not all(torch.equal(a, b) for a, b in zip(got, want)):
        return f"FAIL: {[g.tolist() for g in got]} != eager {[w.tolist() for w in want]}"
    misses, hits = specengine.cache_misses(cfn), specengine.cache_hits(cfn)
    return "pass" if (misses, hits) == (1, 1) else f"FAIL: misses/hits {misses}/{hits}"


def matrix(cases: list[Case]) -> dict[tuple[str, str], str]:
    """(kind, use) -> `pass` / `refused` / `FAIL` over the places, for the docs' table."""
    out: dict[tuple[str, str], set] = {}
    for c in cases:
        r = run_case(c).split(":")[0]
        out.setdefault((c.kind, c.use), set()).add(r)
    return {k: "FAIL" if "FAIL" in v else "/".join(sorted(v)) for k, v in out.items()}


def table(cells: dict[tuple[str, str], str]) -> str:
    lines = ["| kind \\ use | " + " | ".join(USES) + " |", "|---" * (len(USES) + 1) + "|"]
    for k in KINDS:
        lines.append(f"| {k} | " + " | ".join(cells.get((k, u), "n/a") for u in USES) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    cases = all_cases()
    results = [(c, run_case(c)) for c in cases]
    fails = [(c, r) for c, r in results if r.startswith("FAIL")]
    for c, r in fails:
        print(c.name, r)
    print(f"{len(cases)} programs, {len(cases) - len(fails)} pass or refused as specified, {len(fails)} fail")
    print(table(matrix(cases)))
