"""An entry as data and back: the prologue's check list and global recipes, the computation's source and executor
symbols, the index key, the guard texts, and the code hashes of every user function the trace ran."""

from __future__ import annotations

import gc
import re
import sys
import types
from dataclasses import astuple
from typing import Any, NamedTuple

from specengine.capture.tensor_objects import absent_check
from specengine.capture.writes import with_writes
from specengine.codegen import exec_source
from specengine.ir.trace import trace_globals
from specengine.persist import keys
from specengine.persist.guards import describe_guards, rebuild_guards
from specengine.persist.outputs import describe_plan, rebuild, rebuild_steps, wrap
from specengine.persist.recipes import (
    Context,
    NoRecipe,
    context,
    decode_constant,
    decode_value,
    describe,
    encode_constant,
    encode_value,
    resolve,
)
from specengine.persist.signing import Rejected
from specengine.persist.writes import describe_writes, rebuild_writes
from specengine.prologue.build import INDEX_BUILTINS
from specengine.prologue.codegen import Check, Guard, Prologue

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEADER_LINES = ["import math", "import operator", "import torch", "from specengine.ops import prims, ltorch",
                 "from specengine.ops import runtime as tex"]  # fmt: skip


class Material(NamedTuple):
    """What a compile knows that the entry itself does not keep: kept on a traced entry until it is saved."""

    specs: Any
    ran_codes: dict
    final: Any  # the final trace
    plan: Any  # capture.objects.OutputPlan, or None where the output is plain


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
    ctx = context(fn, module)
    ctx.guards, ctx.captured, ctx.lifted = list(specs.structure), list(specs.captured), list(specs.lifted)
    payload: dict[str, Any] = {"guards": describe_guards(specs.structure, ctx)}
    payload["writes"] = describe_writes(specs.writes, ctx)
    used = _used_names(prologue)
    used_text = "\n".join([prologue.source] + [s.fail for s in prologue.steps if isinstance(s, Check)])
    recipes = {}
    for name, value in prologue.globals.items():
        if name not in used:
            continue
        if value is specs.outside_ids and specs.outside_ids:
            recipes[name] = _outside_ids(specs)
            continue
        recipes[name] = describe(value, ctx)
        if recipes[name][0] == "value" and isinstance(value, (list, set, dict)) and _identity_checked(name, used_text):
            raise NoRecipe(
                f"a {type(value).__name__} guarded by identity and not found as a global or closure variable"
            )
    steps = [list(astuple(s)) if isinstance(s, Check) else s for s in prologue.steps]
    payload["prologue"] = {"name": prologue.name, "sig": prologue._sig, "returns": list(prologue._returns),
                           "steps": steps, "globals": recipes}  # fmt: skip
    payload["computation"] = _computation(m.final)
    payload["output"] = None if m.plan is None else describe_plan(m.plan, ctx)
    payload["index"] = _index(index, ctx)
    payload["guard_texts"] = [g.text for g in guards]
    payload["codes"] = sorted(_ran(m.ran_codes))
    payload["packages"] = _versions(_modules_named(payload))
    payload["key"] = keys.digest(payload)  # content-addressed: two processes tracing this entry write one file
    return payload


def _outside_ids(specs: Any) -> list:
    """The prologue checks that no mutable argument is an object reachable from outside (process-local ids). Where
    every mutable argument is the call's own `**kwargs` dict, made fresh by each call, the check never fails: an
    empty set keeps it. Otherwise the entry is not saved."""
    fresh = {p.name for p in specs.signature.parameters.values() if p.kind is p.VAR_KEYWORD}
    passed = [(spec.path, type(value).__name__) for spec, value in specs.mutables.values() if spec.path not in fresh]
    if not passed or _never_passed(specs, fresh):
        return ["value", encode_value(frozenset())]
    what = ", ".join(f"{path} (a {kind})" for path, kind in sorted(passed))
    same = sorted({t.__name__ for t in specs.outside_types if t.__name__ in {kind for _, kind in passed}})
    reached = f"{len(specs.outside_ids)} mutable objects" + (f" ({', '.join(same)} among them)" if same else "")
    raise NoRecipe(f"the argument {what} could be one of the {reached} that the program reaches from outside its "
                   "arguments (globals, closures, module attributes); the prologue checks it is none of them by "
                   "their ids in this process, which name nothing in another one (TODO(issue 23): re-walk them at "
                   "load). To have the entry saved, pass an argument of a type the program does not also reach "
                   "from outside (a tuple instead of a list it does not change)")  # fmt: skip


def _never_passed(specs: Any, fresh: set) -> bool:
    """Whether no object reached from outside can be a mutable argument: the prologue checks each one's exact type,
    and none of those objects has that type (the compiled function itself, a class...). The check of ids can then
    never fail, and an empty set keeps it."""
    for spec, value in specs.mutables.values():
        if spec.path not in fresh and (
            getattr(spec, "type", None) is not type(value) or type(value) in specs.outside_types
        ):
            return False
    return True


def _identity_checked(name: str, text: str) -> bool:
    return re.search(rf"\bis (not )?{re.escape(name)}\b|\b{re.escape(name)} is\b", text) is not None


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
    constants = {name: encode_constant(v) for name, v in final.constants().items()}
    return {"name": final.name, "source": final.python(), "namespaces": spaces, "constants": constants}


def _symbol_recipe(module: str, name: str, impl: Any) -> list:
    """An executor symbol `<module>.<name>` whose callable is that attribute itself, or an effect op whose callable
    carries a recipe (capture/effect_ops.record)."""
    recipe = getattr(impl, "recipe", None)
    if module == "effects" and isinstance(recipe, list) and recipe and recipe[0] in _EFFECTS:
        return ["effect", *recipe]
    try:
        found = module.split(".")[0] == "torch" and _find_attr(module, name) is impl
    except (LookupError, AttributeError):
        found = False
    if not found:
        raise NoRecipe(f"the executor symbol {module}.{name}")
    return ["attr", module, name]


_EFFECTS = {"absent": absent_check}  # effect ops rebuilt from their recipe: kind -> factory(*strings)


def _effect(r: list) -> Any:
    if r[0] not in _EFFECTS or not all(isinstance(x, str) for x in r[1:]):
        raise Rejected(f"effect op {r[:1]}")
    return _EFFECTS[r[0]](*r[1:])


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
    if set(glb) != {"self", *INDEX_BUILTINS} or (glb["self"] is not None and glb["self"] is not ctx.module):
        raise NoRecipe("an index key reading something other than the module")
    return {"source": source, "values": encode_value(values), "self": glb["self"] is not None}


_NESTED = ("<listcomp>", "<dictcomp>", "<setcomp>", "<genexpr>", "<lambda>")


def _ran(codes: dict) -> list[tuple[str, str, str]]:
    """(module, qualname, code hash) of the user code the trace ran. Comprehensions and lambdas are part of the hash
    of the code that defines them; generated functions (a dataclass's `__init__`) go by their function's name."""
    out = set()
    for code, glb in codes.items():
        module = glb.get("__name__") if isinstance(glb, dict) else None
        code_name = qualname = getattr(code, "co_qualname", code.co_name)
        if qualname.rpartition(".")[2] in _NESTED:
            continue
        if "<locals>" in qualname:  # a decorator's wrapper, a generated function: found by its function's name
            module, qualname = _function_name(code) or (module, qualname)
        if not isinstance(module, str):
            raise NoRecipe(f"user code without a module ({qualname})")
        out.add((module, qualname, code_name, keys.code_hash(code)))
    return [list(t) for t in out]


def _function_name(code: Any) -> tuple[str, str] | None:
    for f in gc.get_referrers(code):
        if isinstance(f, types.FunctionType) and f.__code__ is code and "<locals>" not in f.__qualname__:
            if isinstance(f.__module__, str):
                return f.__module__, f.__qualname__
    return None


_UNVERSIONED = ("torch", "specengine", "builtins", "__main__")  # torch and the engine are in the program key


def _modules_named(payload: dict) -> set[str]:
    """The modules whose classes, functions and code the entry names (their packages' versions are checked)."""
    mods = {r[1] for r in payload["prologue"]["globals"].values() if r[0] in ("object", "closure")}
    mods |= {c[0] for c in payload["codes"]}
    for g in payload["guards"]:
        if g["kind"] == "classes":
            mods |= {r[1] for r in g["classes"] if r[0] == "object"}  # (a module_type's class: in its structure)
        elif g["kind"] == "structure":
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
    for module, qualname, code_name, h in codes:
        code = keys.resolve_code(module, qualname, code_name)
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
    if payload["output"] is not None:
        n_params = len(p["returns"]) - len(payload["output"]["objects"])
        steps = rebuild_steps(payload["output"].get("steps", []), ctx)
        computation = wrap(computation, rebuild(payload["output"]["build"], ctx), steps, n_params)
    computation = with_writes(computation, rebuild_writes(payload.get("writes", []), ctx))
    index = None
    if payload["index"] is not None:
        i = payload["index"]
        _check_source(i["source"], imports=False)
        index = (i["source"], decode_value(i["values"]), {"self": module if i["self"] else None, **INDEX_BUILTINS})
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
                setattr(ns, name, _effect(r[1:]) if r[0] == "effect" else _find_attr(r[1], r[2]))
            except (LookupError, AttributeError):
                raise Rejected(f"executor symbol {r[1]}.{r[2]} not found") from None
    for name, r in c.get("constants", {}).items():
        if not (_NAME.fullmatch(name) and name.startswith("_c")) or name in glb:
            raise Rejected(f"constant name {name!r}")
        glb[name] = decode_constant(r)
    _check_source(c["source"], imports=True)
    return exec_source(c["source"], c["name"], glb)


_FUNC_CODE = re.compile(r"_func_\d+\.__code__ is (not )?_[A-Za-z0-9_]+\b")  # (a literal first: a fast scan)
_WORDS = ("import", "__import__", "exec", "eval", "compile", "open", "breakpoint", "__builtins__", "__globals__",
          "__subclasses__", "__code__", "__reduce__", "globals", "locals")  # fmt: skip
_FORBIDDEN = re.compile(r"\b(" + "|".join(_WORDS) + r")\b")


def _check_source(source: str, imports: bool) -> None:
    """Defence in depth behind the signature: engine-generated source imports nothing beyond the trace header and
    names none of the builtins that reach outside (a user string that happens to name one is only a miss)."""
    # the prologue may guard the compiled function's own code: `_func_0.__code__ is _code`
    body = source if imports or "__code__" not in source else _FUNC_CODE.sub(_own_code_guard, source)
    if imports:
        header, sep, body = source.partition("\n\ndef ")
        lines = [ln for ln in header.splitlines() if ln and not ln.startswith("#")]
        if not sep or lines != _HEADER_LINES:
            raise Rejected("the entry's computation has another header")
    # every match contains one of the words: `in` scans rule a source out about 10x faster than the regex
    found = any(w in body for w in _WORDS) and _FORBIDDEN.search(body)
    if found:
        raise Rejected(f"the entry's source names {found.group(0)!r}")


def _own_code_guard(m: re.Match) -> str:
    """'' for a `_func_N.__code__ is _name` that starts a name (the prologue's own guard), else the text kept."""
    before = m.string[m.start() - 1 : m.start()]
    return m.group(0) if before.isalnum() or before == "_" else ""
