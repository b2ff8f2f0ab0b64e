"""Everything the traced code read from outside its arguments: the globals and closure variables of the functions
it ran (the compiled function, its helpers, the methods of its modules' classes) and attributes of imported
modules. `prologue/external.py` says how each is guarded."""

from __future__ import annotations

import types
from typing import Any

from specengine.capture import module_reads
from specengine.ir.proxies import Proxy
from specengine.prologue.external import _ABSENT, captured_values, user_class, user_function


def captured_transitively(target: Any, modules: list, ran: Any = None, limit: int = 64) -> list:
    """The globals and closure variables read by `target`, by the user functions it reaches through them (helpers,
    recursively) and by the methods of the user classes of `modules`' trees and of a bound method's `self`
    (`forward` first): `effects.captured_values` entries, each (holder, name) once. At most `limit` functions are
    scanned after `target` and its helpers. Then those read by the rest of the user code that ran while tracing
    (`ran`, a `coverage.Coverage`: methods of objects passed in, callbacks, helpers past the limit)."""
    classes = {c for m in modules for s in m.modules() for c in type(s).__mro__ if user_class(c)}
    owner = getattr(target, "__self__", None)
    classes |= {c for c in type(owner).__mro__ if user_class(c)} if owner is not None else set()
    ordered = sorted(classes, key=lambda c: (str(c.__module__), c.__qualname__, id(c)))  # (a set's order is ids')
    methods = [f for c in ordered for f in vars(c).values() if isinstance(f, types.FunctionType)]
    if ran is not None:  # a method that did not run read nothing (what ran is all the user code that ran)
        methods = [f for f in methods if f.__code__ in ran.codes]
    methods.sort(key=lambda f: f.__name__ != "forward")
    out: list = []
    seen: set = set()
    done: dict[int, Any] = {}
    for roots in ([target], methods):
        todo, scanned = list(roots), 0
        while todo and scanned < limit:
            fn = todo.pop(0)
            if id(fn) in done:
                continue
            done[id(fn)] = fn
            scanned += 1
            for kind, name, value, holder in captured_values(fn):
                if _add(out, seen, kind, name, value, holder) and user_function(value):
                    todo.insert(0, value)  # a helper before the next method
    if ran is not None:
        covered = {f.__code__ for f in done.values() if hasattr(f, "__code__")}
        for entry in ran.captured(covered, _proxy_free):
            _add(out, seen, *entry)
        for entry in module_reads.captured(ran.codes, ran.free_modules, _ABSENT):  # `mymod.SCALE`, as a global
            _add(out, seen, *entry)
    return out


def _add(out: list, seen: set, kind: str, name: Any, value: Any, holder: Any) -> bool:
    key = (id(holder), name if kind == "global" else name[0])  # ("attr": a module's __dict__ and the attribute)
    if key in seen:
        return False
    seen.add(key)
    out.append((kind, name, value, holder))
    return True


def _proxy_free(value: Any) -> bool:
    """A closure variable of a function made before tracing (one made while tracing may hold traced values)."""
    values = value.values() if type(value) is dict else value if type(value) in (list, tuple) else (value,)
    return not any(isinstance(v, Proxy) for v in values)
