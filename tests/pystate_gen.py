"""Programs that read Python state from outside their tensors, for issue 22's read-set matrix.

A program is one cell of the cross product

    kind (what is read: a set, a deque, a partial, a class, a function, ...)
    x place (where it is reached: an argument, a global, a closure variable, a module attribute, a class
      attribute, a default, a bound `self`'s attribute, an item of a container)
    x read (how: attribute, item, iteration, len, in, call, isinstance, truthiness, arithmetic)
    x change (between calls: rebinding, in-place mutation at depth 1 and 2, class mutation, code or defaults
      replacement, an equal object built anew, a change and its undo).

`Case.source()` prints it as a runnable module (the kind's builder, the place, `f`), so a failure report is a
reproducer. `run_case` runs it eagerly and under each dynamic mode, with the change applied between calls, and
says `pass`, `refused: <reason>` or `FAIL: <why>`: the results must equal eager's, an equal object built anew must
hit, a change and its undo must hit the first entry again, and a changed read must miss or be refused.
`tests/test_pystate_matrix.py` runs a seeded sample in CI; `bench/pystate_matrix.py` runs all of it and writes
docs/python-semantics.md's tables.
"""

from __future__ import annotations

import itertools
import linecache
import random
from dataclasses import dataclass
from typing import Any

import torch

import specengine
from specengine.errors import SpecEngineError

READS = ("attr", "item", "iter", "len", "in", "call", "isinstance", "truth", "arith")
CHANGES = ("rebind", "mutate1", "mutate2", "class", "code", "defaults", "anew", "undo")
PLACES = ("arg", "global", "closure", "module", "classattr", "default", "self", "item")
MODES = (True, False, None)


@dataclass(frozen=True)
class Kind:
    """An object kind: `setup` (module-level source, defining `build(n)`: the object in state n; 2 is first,
    3 the changed state), its reads (`{o}` is the place) and its in-place changes (`T` is the object; each a
    (do, undo) pair of statements)."""

    name: str
    setup: str
    reads: dict
    changes: dict
    anew: bool = True  # an equal object built anew must hit (False: `==` is `is` for the kind, so it is another
    # value: a function, a class, an instance of a user class; it may miss, and must give eager's result)


_MAPPING_READS = {"item": "{o}['z'][0]", "iter": "sum(1 for _ in {o})", "len": "len({o})", "in": "('k2' in {o})",
                  "truth": "(1 if {o} else 0)", "arith": "len({o}) * {o}['k1']"}  # fmt: skip
_MAPPING_BUILD = "{**{f'k{i}': i for i in range(n)}, 'z': [n]}"
_MAPPING_CHANGES = {"mutate1": ("_saved = dict(T); T.clear(); T.update(_fresh(3))", "T.clear(); T.update(_saved)"),
                    "mutate2": ("T['z'][0] = 3", "T['z'][0] = 2")}  # fmt: skip
_SEQ_READS = {"item": "{o}[-1][0]", "iter": "sum(1 for _ in {o})", "len": "len({o})", "in": "(2 in {o})",
              "truth": "(1 if {o} else 0)", "arith": "len({o}) + {o}[-1][0] * 10"}  # fmt: skip


def _mapping(name: str, ctor: str, extra: str = "", reads: dict | None = None) -> Kind:
    setup = f"{extra}def _fresh(n):\n    return {ctor}({_MAPPING_BUILD})\n\nbuild = _fresh\n"
    r = {**_MAPPING_READS, "isinstance": f"isinstance({{o}}, {ctor})", **(reads or {})}
    return Kind(name, setup, r, _MAPPING_CHANGES)


_ATTRDICT = "class AttrDict(dict):\n    def __getattr__(self, k):\n        return self[k]\n\n"
_FN = """def make_fn(n):
    box = [n]
    cell = n

    def g(a, c=n, *, kw=n):
        return a + c * 10 + kw * 100 + cell * 1000 + box[0] * 10000

    g.tag = n
    return g


def _make_alt():
    box = [0]
    cell = 0

    def g(a, c=0, *, kw=0):
        return a - c + box[0] * cell

    return g


_alt = _make_alt()
build = make_fn
"""
_FN_CHANGES = {"mutate1": ("T.tag = 3", "T.tag = 2"),
               "mutate2": ("T.__closure__[0].cell_contents[0] = 3", "T.__closure__[0].cell_contents[0] = 2"),
               "code": ("_saved = T.__code__; T.__code__ = _alt.__code__", "T.__code__ = _saved"),
               "defaults": ("T.__defaults__ = (3,); T.__kwdefaults__ = {'kw': 3}",
                            "T.__defaults__ = (2,); T.__kwdefaults__ = {'kw': 2}")}  # fmt: skip
_PARTIAL = """def scale(a, b, c=0, k=None):
    return a * 10 + b + c * 100 + k[0] * 1000


def _alt(a, b, c=0, k=None):
    return a - b


def build(n):
    return functools.partial(scale, n, k=[n])
"""
_CLASS = """def build(n):
    class K:
        v = n
        lst = [n]

        def meth(self, a):
            return a + self.v * 10 + self.lst[0] * 100

        def __len__(self):
            return self.v

        def __iter__(self):
            return iter(range(self.v))

    return K


def _alt(self, a):
    return a - 1
"""
_OBJ = """class P:
    SCALE = 1

    def __init__(self, n):
        self.v = n
        self.lst = [n]

    def get(self, a):
        return a + self.v * 10 + self.lst[0] * 100 + self.SCALE * 1000

    def __len__(self):
        return self.v


def _alt(self, a):
    return a - 1


build = P
"""
_SLOTS = """class S:
    __slots__ = ("v", "lst")
    SCALE = 1

    def __init__(self, n):
        self.v = n
        self.lst = [n]

    def get(self, a):
        return a + self.v * 10 + self.lst[0] * 100 + self.SCALE * 1000


def _alt(self, a):
    return a - 1


build = S
"""
_BOUND = """class B:
    SCALE = 1

    def __init__(self, n):
        self.v = n
        self.lst = [n]

    def m(self, a, c=1):
        return a + self.v * 10 + self.lst[0] * 100 + self.SCALE * 1000 + c * 10000


def _alt(self, a, c=1):
    return a - 1


_OBJS = {}


def build(n):
    return _OBJS.setdefault(n, B(n)).m
"""
_MODULE = """def build(n):
    m = types.ModuleType(f"pystate_mod_{n}")
    m.v = n
    m.lst = [n]
    exec("def fn(a):\\n    return a + v * 10", vars(m))
    return m


def _alt(a):
    return a - 1
"""
_OBJ_READS = {"attr": "{o}.v", "item": "{o}.lst[0]", "call": "{o}.get(1)", "isinstance": "isinstance({o}, P)",
              "len": "len({o})", "truth": "(1 if {o} else 0)", "arith": "{o}.v * 3 + {o}.lst[0]"}  # fmt: skip
_OBJ_CHANGES = {"mutate1": ("T.v = 3", "T.v = 2"), "mutate2": ("T.lst[0] = 3", "T.lst[0] = 2"),
                "class": ("type(T).SCALE = 7", "type(T).SCALE = 1"),
                "code": ("_saved = type(T).get; type(T).get = _alt", "type(T).get = _saved")}  # fmt: skip

KINDS: dict[str, Kind] = {
    k.name: k
    for k in (
        Kind("list", "def build(n):\n    return [*range(n), [n]]\n",
             {**_SEQ_READS, "isinstance": "isinstance({o}, list)"},
             {"mutate1": ("_saved = list(T); T[:] = [*range(3), [3]]", "T[:] = _saved"),
              "mutate2": ("T[-1][0] = 3", "T[-1][0] = 2")}),
        Kind("tuple", "def build(n):\n    return (*range(n), [n])\n",
             {**_SEQ_READS, "isinstance": "isinstance({o}, tuple)"},
             {"mutate2": ("T[-1][0] = 3", "T[-1][0] = 2")}),
        Kind("deque", "def build(n):\n    return collections.deque([*range(n), [n]])\n",
             {**_SEQ_READS, "isinstance": "isinstance({o}, collections.deque)"},
             {"mutate1": ("_saved = list(T); T.clear(); T.extend([*range(3), [3]])", "T.clear(); T.extend(_saved)"),
              "mutate2": ("T[-1][0] = 3", "T[-1][0] = 2")}),
        Kind("set", "def build(n):\n    return set(range(n))\n",
             {"iter": "sum({o})", "len": "len({o})", "in": "(2 in {o})", "isinstance": "isinstance({o}, set)",
              "truth": "(1 if {o} else 0)", "arith": "len({o} | {{9}})"},
             {"mutate1": ("T.add(2)", "T.discard(2)")}),
        _mapping("dict", "dict"),
        _mapping("attrdict", "AttrDict", _ATTRDICT, {"attr": "{o}.z[0] + {o}.k1"}),
        _mapping("ordereddict", "collections.OrderedDict"),
        Kind("mappingproxy", "_BACK = {}\n\n\ndef build(n):\n    d = " + _MAPPING_BUILD + "\n    p = types.MappingProxyType(d)"
             "\n    _BACK[id(p)] = d\n    return p\n",
             {**_MAPPING_READS, "isinstance": "isinstance({o}, types.MappingProxyType)"},
             {"mutate1": ("_d = _BACK[id(T)]; _d['k2'] = 2", "del _BACK[id(T)]['k2']"),
              "mutate2": ("T['z'][0] = 3", "T['z'][0] = 2")}),
        Kind("partial", _PARTIAL,
             {"attr": "{o}.args[0]", "item": "{o}.keywords['k'][0]", "call": "{o}(1)",
              "isinstance": "isinstance({o}, functools.partial)", "truth": "(1 if {o} else 0)",
              "arith": "{o}(1) * 2 + len({o}.args)"},
             {"mutate1": ("T.keywords['k'] = [3]", "T.keywords['k'] = [2]"),
              "mutate2": ("T.keywords['k'][0] = 3", "T.keywords['k'][0] = 2"),
              "code": ("_saved = T.func.__code__; T.func.__code__ = _alt.__code__", "T.func.__code__ = _saved"),
              "defaults": ("T.func.__defaults__ = (5, None)", "T.func.__defaults__ = (0, None)")}),
        Kind("class", _CLASS,
             {"attr": "{o}.v", "item": "{o}.lst[0]", "call": "{o}().meth(1)", "isinstance": "isinstance({o}(), {o})",
              "iter": "sum({o}())", "len": "len({o}())", "truth": "(1 if {o} else 0)", "arith": "{o}.v * {o}.lst[0]"},
             {"mutate1": ("T.v = 3", "T.v = 2"), "mutate2": ("T.lst[0] = 3", "T.lst[0] = 2"),
              "class": ("T.extra = 1; T.v = 3", "del T.extra; T.v = 2"),
              "code": ("_saved = T.meth; T.meth = _alt", "T.meth = _saved")}, anew=False),
        Kind("object", _OBJ, _OBJ_READS, _OBJ_CHANGES, anew=False),
        Kind("slots", _SLOTS, {**_OBJ_READS, "isinstance": "isinstance({o}, S)", "len": "len({o}.lst)"},
             _OBJ_CHANGES, anew=False),
        Kind("function", _FN,
             {"attr": "{o}.tag", "call": "{o}(1)", "isinstance": "callable({o})", "truth": "(1 if {o} else 0)",
              "arith": "{o}(1) + {o}.tag"}, _FN_CHANGES, anew=False),
        Kind("boundmethod", _BOUND,
             {"attr": "{o}.__self__.v", "item": "{o}.__self__.lst[0]", "call": "{o}(1)",
              "isinstance": "callable({o})", "truth": "(1 if {o} else 0)", "arith": "{o}(1) * 2"},
             {"mutate1": ("T.__self__.v = 3", "T.__self__.v = 2"),
              "mutate2": ("T.__self__.lst[0] = 3", "T.__self__.lst[0] = 2"),
              "class": ("B.SCALE = 7", "B.SCALE = 1"),
              "code": ("_saved = T.__func__.__code__; T.__func__.__code__ = _alt.__code__",
                       "T.__func__.__code__ = _saved"),
              "defaults": ("T.__func__.__defaults__ = (5,)", "T.__func__.__defaults__ = (1,)")}),
        Kind("module", _MODULE,
             {"attr": "{o}.v", "item": "{o}.lst[0]", "call": "{o}.fn(1)",
              "isinstance": "isinstance({o}, types.ModuleType)", "arith": "{o}.v * {o}.lst[0]"},
             {"mutate1": ("T.v = 3", "T.v = 2"), "mutate2": ("T.lst[0] = 3", "T.lst[0] = 2"),
              "code": ("_saved = T.fn.__code__; T.fn.__code__ = _alt.__code__", "T.fn.__code__ = _saved")},
             anew=False),
    )
}  # fmt: skip

# where the object is reached: (setup lines after `build`, the expression `f` reads, the target the changes name,
# the parameter list of `f`)
_PLACES = {
    "arg": ("ARG = build(2)", "o", "ARG", "x, o"),
    "global": ("G = build(2)", "G", "G", "x"),
    "closure": None,  # f is made by a factory (below)
    "module": ("M = types.ModuleType('pystate_place')\nM.o = build(2)", "M.o", "M.o", "x"),
    "classattr": ("class H:\n    o = build(2)", "H.o", "H.o", "x"),
    "default": ("", "o", "f.__defaults__[0]", "x, o=build(2)"),
    "self": None,  # a method of an object holding it
    "item": ("BOX = [build(2)]", "BOX[0]", "BOX[0]", "x"),
}


@dataclass(frozen=True)
class Case:
    kind: str
    place: str
    read: str
    change: str

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.place}-{self.read}-{self.change}"

    def target(self) -> str:
        return {"closure": "f.__closure__[0].cell_contents", "self": "h.o"}.get(self.place) or _PLACES[self.place][2]

    def source(self) -> str:
        k = KINDS[self.kind]
        expr = k.reads[self.read]
        head = f"import collections\nimport functools\nimport types\n\nimport torch\n\n{k.setup}\n\n"
        if self.place == "closure":
            body = f"def _outer():\n    o = build(2)\n\n    def f(x):\n        return x + ({expr.format(o='o')})\n\n" \
                   "    return f\n\n\nf = _outer()\n"  # fmt: skip
        elif self.place == "self":
            body = f"class H:\n    def __init__(self, o):\n        self.o = o\n\n    def run(self, x):\n" \
                   f"        return x + ({expr.format(o='self.o')})\n\n\nh = H(build(2))\nf = h.run\n"  # fmt: skip
        else:
            setup, o, _, params = _PLACES[self.place]
            body = f"{setup}\n\n\ndef f({params}):\n    return x + ({expr.format(o=o)})\n"
        return head + body

    def namespace(self) -> dict:
        source = self.source()
        filename = f"<pystate-{self.name}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        ns: dict[str, Any] = {"__name__": f"pystate_{self.name.replace('-', '_')}"}
        exec(compile(source, filename, "exec"), ns)
        return ns

    def steps(self) -> list[tuple[str, str]]:
        """(statement run before the call, its label) for the calls after the first."""
        k, t = KINDS[self.kind], self.target()
        rebind = "f.__defaults__ = ({v},)" if self.place == "default" else f"{t} = {{v}}"
        if self.change == "rebind":
            return [(rebind.format(v="build(3)"), "rebound")]
        if self.change == "anew":
            return [(rebind.format(v="build(2)"), "anew")]
        if self.change == "undo":
            do, undo = k.changes.get("mutate1") or (f"_orig = {t}; " + rebind.format(v="build(3)"), None)
            undo = undo if undo is not None else rebind.format(v="_orig")
            return [(f"T = {t}\n{do.replace('; ', chr(10))}", "changed"), (f"T = {t}\n{undo.replace('; ', chr(10))}",
                                                                           "undone")]  # fmt: skip
        do, _ = k.changes[self.change]
        return [(f"T = {t}\n{do.replace('; ', chr(10))}", "changed")]


def applicable(kind: str, place: str, read: str, change: str) -> bool:
    k = KINDS[kind]
    if read not in k.reads:
        return False
    if change in ("rebind", "undo"):
        return True
    if change == "anew":
        return True
    return change in k.changes


def all_cases() -> list[Case]:
    return [Case(*c) for c in itertools.product(KINDS, PLACES, READS, CHANGES) if applicable(*c)]


def sample(n: int, seed: int) -> list[Case]:
    """`n` cases drawn by `seed`, covering every (kind, read, change) cell first."""
    rng = random.Random(seed)
    cases = all_cases()
    by_cell: dict = {}
    for c in cases:
        by_cell.setdefault((c.kind, c.read, c.change), []).append(c)
    first = [rng.choice(v) for v in by_cell.values()]
    rest = [c for c in cases if c not in set(first)]
    rng.shuffle(rest)
    return (first + rest)[:n]


def _call(fn: Any, case: Case, ns: dict, x: torch.Tensor) -> Any:
    return fn(x, ns["ARG"]) if case.place == "arg" else fn(x)


def _eager(case: Case, ns: dict, x: torch.Tensor) -> Any:
    try:
        return ("ok", _call(ns["f"], case, ns, x))
    except Exception as e:  # noqa: BLE001 - compared with the compiled function's
        return ("raised", type(e))


def run_case(case: Case, modes: tuple = MODES) -> str:
    """`pass`, `refused: <reason>` or `FAIL: <why>` (the worst over the modes)."""
    worst = "pass"
    for mode in modes:
        out = _run_mode(case, mode)
        if out.startswith("FAIL") or (out.startswith("refused") and worst == "pass"):
            worst = out
        if worst.startswith("FAIL"):
            break
    return worst


def _run_mode(case: Case, mode: Any) -> str:
    ns = case.namespace()
    cfn = specengine.compile(ns["f"], dynamic=mode)
    x = torch.ones(2)
    misses = []
    for stmt, label in [("", "first"), *case.steps()]:
        if stmt:
            try:
                exec(stmt, ns)
            except Exception as e:  # noqa: BLE001 - a generator bug, reported as such
                return f"FAIL: the generator's change raised {type(e).__name__}: {e}"
        cfn_now = cfn
        expected = _eager(case, ns, x)
        try:
            got = ("ok", _call(cfn_now, case, ns, x))
        except SpecEngineError as e:
            return "refused: " + _reason(e)
        except Exception as e:  # noqa: BLE001 - compared with eager's
            got = ("raised", type(e))
            if expected[0] != "raised":
                return f"FAIL: crash on the {label} call: {type(e).__name__}: {str(e)[:120]}"
        if expected[0] != got[0] or (got[0] == "ok" and not torch.equal(got[1], expected[1])) or (
                got[0] == "raised" and got[1] is not expected[1]):  # fmt: skip
            return f"FAIL: wrong on the {label} call (dynamic={mode}): {_shown(got)} != eager {_shown(expected)}"
        misses.append(specengine.cache_misses(cfn))
    if case.change == "anew" and KINDS[case.kind].anew and misses[-1] != 1:
        return f"FAIL: an equal object built anew missed (dynamic={mode})"
    if case.change == "undo" and misses[2] != misses[1]:
        return f"FAIL: the undone change missed (dynamic={mode}), misses {misses}"
    return "pass"


def _shown(r: tuple) -> str:
    return r[1].tolist().__repr__() if r[0] == "ok" else f"raised {r[1].__name__}"


def _reason(e: Exception) -> str:
    text = str(e).splitlines()[0] if str(e) else type(e).__name__
    return text[:100]
