"""An entry as data and back: the prologue's check list and global recipes, the computation's source and executor
symbols, the index key, the guard texts, and the code hashes of every user function the trace ran."""

from __future__ import annotations

import re
import sys
import types
from dataclasses import astuple
from typing import Any, NamedTuple

from specengine.codegen import exec_source
from specengine.ir.trace import trace_globals
from specengine.persist import keys
from specengine.persist.guards import describe_guards, rebuild_guards
from specengine.persist.recipes import Context, NoRecipe, context, decode_value, describe, encode_value, resolve
from specengine.persist.signing import Rejected
from specengine.prologue.codegen import Check, Guard, Prologue

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_LINES = ["import math", "import operator", "import torch", "from specengine.ops import prims, ltorch",
                 "from specengine.ops import runtime as tex"]  # fmt: skip


class Material(NamedTuple):
    """What a compile knows that the entry itself does not keep: kept on a traced entry until it is saved."""

    specs: Any
    ran_codes: dict
    final: Any  # the final trace
    plain: bool  # the computation is the trace's function itself (no output plan, no module attribute writes)


class Loaded(NamedTuple):
    """An entry read from disk, for `api` to wrap in a CacheEntry."""

    prologue: Prologue
    computation: Any
    guards: list
    index: tuple | None
    key: str


def entry_payload(fn: Any, module: Any, prologue: Prologue, index: tuple | None, guards: list, m: Material) -> dict:
    """The entry as JSON data (NoRecipe where a part has no recipe)."""
    specs = m.specs
    if not m.plain:
        raise NoRecipe("the computation is wrapped (outputs of their own type, or module attribute writes)")
    if specs.lifted:
        raise NoRecipe("tensors closed over from outside the arguments")
    ctx = context(fn, module)
    ctx.guards = list(specs.structure)
    payload: dict[str, Any] = {"guards": describe_guards(specs.structure, ctx)}
    used = _used_names(prologue)
    recipes = {}
    for name, value in prologue.globals.items():
        if name not in used:
            continue
        if value is specs.outside_ids and specs.outside_ids:
            raise NoRecipe("the ids of objects reachable from outside the arguments")
        recipes[name] = describe(value, ctx)
    steps = [list(astuple(s)) if isinstance(s, Check) else s for s in prologue.steps]
    payload["prologue"] = {"name": prologue.name, "sig": prologue._sig, "returns": list(prologue._returns),
                           "steps": steps, "globals": recipes}  # fmt: skip
    payload["computation"] = _computation(m.final)
    payload["index"] = _index(index, ctx)
    payload["guard_texts"] = [g.text for g in guards]
    payload["codes"] = sorted(_ran(m.ran_codes))
    payload["packages"] = _versions(_modules_named(payload))
    payload["key"] = keys.digest(payload)  # content-addressed: two processes tracing this entry write one file
    return payload


def _used_names(prologue: Prologue) -> set[str]:
    text = [prologue.source] + [v for s in prologue.steps if isinstance(s, Check) for _, v in s.values]
    return set(_NAME.findall("\n".join(text)))


def _computation(final: Any) -> dict:
    spaces: dict[str, dict] = {}
    modules = trace_globals()  # symbols of these modules are called through the module itself
    for bsym in final.bsyms:
        module = bsym.sym.module
        if module and module not in modules:
            found = spaces.setdefault(module, {})
            if bsym.sym.name not in found:
                found[bsym.sym.name] = _symbol_recipe(module, bsym.sym.name, bsym.sym.impl)
    return {"name": final.name, "source": final.python(), "namespaces": spaces}


def _symbol_recipe(module: str, name: str, impl: Any) -> list:
    """An executor symbol `<module>.<name>` whose callable is that attribute itself."""
    try:
        found = module.split(".")[0] == "torch" and _find_attr(module, name) is impl
    except (LookupError, AttributeError):
        found = False
    if not found:
        raise NoRecipe(f"the executor symbol {module}.{name}")
    return ["attr", module, name]


def _find_attr(module: str, name: str) -> Any:
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        obj = sys.modules.get(".".join(parts[:i]))
        if obj is not None:
            for p in parts[i:]:
                obj = getattr(obj, p)
            return getattr(obj, name)
    raise LookupError(module)


def _index(index: tuple | None, ctx: Context) -> dict | None:
    if index is None:
        return None
    source, values, glb = index
    if set(glb) != {"self"} or (glb["self"] is not None and glb["self"] is not ctx.module):
        raise NoRecipe("an index key reading something other than the module")
    return {"source": source, "values": encode_value(values), "self": glb["self"] is not None}


def _ran(codes: dict) -> list[tuple[str, str, str]]:
    out = set()
    for code, glb in codes.items():
        module = glb.get("__name__") if isinstance(glb, dict) else None
        qualname = getattr(code, "co_qualname", code.co_name)
        if not isinstance(module, str) or "<lambda>" in qualname or "<genexpr>" in qualname:
            if "<genexpr>" in qualname or "<lambda>" in qualname or "<listcomp>" in qualname:
                continue  # checked through the code that defines it (nested code objects are part of its hash)
            raise NoRecipe(f"user code without a module ({qualname})")
        out.add((module, qualname, keys.code_hash(code)))
    return [list(t) for t in out]


_UNVERSIONED = ("torch", "specengine", "builtins", "__main__")  # torch and the engine are in the program key


def _modules_named(payload: dict) -> set[str]:
    """The modules whose classes, functions and code the entry names (their packages' versions are checked)."""
    mods = {r[1] for r in payload["prologue"]["globals"].values() if r[0] in ("object", "closure")}
    mods |= {c[0] for c in payload["codes"]}
    for g in payload["guards"]:
        if g["kind"] == "classes":
            mods |= {r[1] for r in g["classes"]}
        else:
            mods |= {qual.split(":")[0] for qual, _ in g["fingerprint"][-1][1]}
    return mods


def _versions(modules: set[str]) -> dict[str, str | None]:
    """The `__version__` of each top-level package (library code the trace ran is not hashed: its version is)."""
    tops = {m.split(".")[0] for m in modules} - set(_UNVERSIONED)
    out = {}
    for top in sorted(tops):
        version = getattr(sys.modules.get(top), "__version__", None)
        out[top] = version if isinstance(version, str) else None
    return out


# ---- load --------------------------------------------------------------------------------------------------------


def check_codes(codes: list) -> None:
    """Every user function the trace ran still has the code it had (Rejected naming the first that changed)."""
    for module, qualname, h in codes:
        code = keys.resolve_code(module, qualname)
        if code is None:
            raise Rejected(f"{module}:{qualname} not found (code the trace ran)")
        if keys.code_hash(code) != h:
            raise Rejected(f"the code of {module}:{qualname} changed")


def load_entry(payload: dict, fn: Any, module: Any) -> Loaded:
    """Build an entry from verified data: code hashes, guards rebuilt on the live objects, globals by recipe."""
    check_codes(payload["codes"])
    versions = _versions(set(payload["packages"]))
    if versions != payload["packages"]:
        changed = sorted(k for k in versions if versions[k] != payload["packages"].get(k))
        raise Rejected(f"package versions changed: {', '.join(changed)}")
    ctx = context(fn, module)
    rebuild_guards(payload["guards"], ctx)
    p = payload["prologue"]
    glb = {name: resolve(r, ctx) for name, r in p["globals"].items()}
    steps = [Check(s[0], s[1], tuple(map(tuple, s[2])), *s[3:]) if isinstance(s, list) else s for s in p["steps"]]
    prologue = Prologue(p["name"], steps, p["returns"], glb, p["sig"])
    _check_source(prologue.source, imports=False)
    computation = _load_computation(payload["computation"])
    index = None
    if payload["index"] is not None:
        i = payload["index"]
        _check_source(i["source"], imports=False)
        index = (i["source"], decode_value(i["values"]), {"self": module if i["self"] else None})
    guards = [Guard(None, text) for text in payload["guard_texts"]]
    return Loaded(prologue, computation, guards, index, payload["key"])


def _load_computation(c: dict) -> Any:
    glb = trace_globals()
    for module, items in c["namespaces"].items():
        ns = glb.setdefault(module, types.SimpleNamespace())
        if not isinstance(ns, types.SimpleNamespace):
            raise Rejected(f"executor namespace {module} shadows a module")
        for name, r in items.items():
            try:
                setattr(ns, name, _find_attr(r[1], r[2]))
            except (LookupError, AttributeError):
                raise Rejected(f"executor symbol {r[1]}.{r[2]} not found") from None
    _check_source(c["source"], imports=True)
    return exec_source(c["source"], c["name"], glb)


_FORBIDDEN = re.compile(
    r"\b(import|__import__|exec|eval|compile|open|breakpoint|__builtins__|__globals__|"
    r"__subclasses__|__code__|__reduce__|globals|locals)\b"
)


def _check_source(source: str, imports: bool) -> None:
    """Defence in depth behind the signature: engine-generated source imports nothing beyond the trace header and
    names none of the builtins that reach outside (a user string that happens to name one is only a miss)."""
    body = source
    if imports:
        header, sep, body = source.partition("\n\ndef ")
        lines = [ln for ln in header.splitlines() if ln and not ln.startswith("#")]
        if not sep or lines != _HEADER_LINES:
            raise Rejected("the entry's computation has another header")
    if _FORBIDDEN.search(body):
        raise Rejected(f"the entry's source names {_FORBIDDEN.search(body).group(0)!r}")
