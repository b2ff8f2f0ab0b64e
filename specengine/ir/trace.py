"""Traces: a function's recorded bound symbols, printed as runnable Python."""

from __future__ import annotations

import math
import operator
import re
import types
from dataclasses import dataclass, replace
from typing import Any, Callable

import torch

from specengine.codegen import exec_source
from specengine.constraints.expr import Expr
from specengine.constraints.floats import FloatExpr
from specengine.ir.literals import Constants, literal, numpy_array, type_name
from specengine.ir.proxies import NumberProxy, Proxy, TensorProxy
from specengine.ir.symbol import BoundSymbol, Symbol, tree_leaves

HEADER = (
    "import math\n"
    "import operator\n"
    "import torch\n"
    "from specengine.ops import prims, ltorch\n"
    "from specengine.ops import runtime as tex\n"
)


DEL = Symbol("del", "", pure=False)  # prints as `del a, b`: frees values after their last use


_MODULES: dict[str, Any] = {"math": math, "operator": operator, "torch": torch}  # + the ops layer's (print_module)


def print_module(name: str, module: Any) -> None:
    """Let traces name `module` as `name` (the ops layer's `prims`, `ltorch` and `tex`, as HEADER imports them)."""
    _MODULES[name] = module


def trace_globals() -> dict[str, Any]:
    """The globals a printed trace runs with (the same names HEADER imports)."""
    return dict(_MODULES)


@dataclass(frozen=True, eq=False)
class Trace:
    """A straight-line program. `str(trace)` is runnable Python that defines `name`."""

    name: str
    params: tuple
    bsyms: tuple[BoundSymbol, ...]
    output: Any
    provenance: str

    def with_(self, provenance: str, **changes: Any) -> Trace:
        """A new trace (passes never mutate their input), stamped with the pass that made it."""
        return replace(self, provenance=provenance, **changes)

    def python(self) -> str:
        return TracePrinter(self).render()

    def constants(self) -> dict[str, Any]:
        """The globals that `str(trace)` reads its non-literal constants from (`_c0`, ...): run the source with
        `trace_globals() | trace.constants()`."""
        printer = TracePrinter(self)
        printer.render()
        return dict(printer.consts.values)

    def __str__(self) -> str:
        return self.python()

    def python_callable(self) -> Callable:
        """The trace as a Python function (source registered in linecache).

        Symbols of executors outside specengine print as `<module>.<name>`; their callables are bound
        under those names.
        """
        glb = trace_globals()
        for bsym in self.bsyms:
            module = bsym.sym.module
            if module and module not in glb:
                glb[module] = types.SimpleNamespace()
            if module and isinstance(glb[module], types.SimpleNamespace):
                setattr(glb[module], bsym.sym.name, bsym.sym.impl)
        printer = TracePrinter(self)
        source = printer.render()
        return exec_source(source, self.name, {**glb, **printer.consts.values})


def format_value(x: Any, consts: Constants | None = None) -> str:
    """Python source for an argument value: a literal only for exact builtin constants; any other constant is a
    global named through `consts` (by reference: its `repr` never reaches the source). Real tensors are refused."""
    if isinstance(x, NumberProxy):
        if isinstance(x.expr, FloatExpr):
            return x.expr.to_python()  # float arithmetic is not recorded as ops: print the expression
        return literal(x.expr.value) if x.expr.is_const else x.name
    if isinstance(x, Proxy):
        return x.name
    if isinstance(x, (Expr, FloatExpr)):
        return x.to_python()
    text = literal(x)
    if text is not None:
        return text
    if isinstance(x, (torch.dtype, torch.memory_format, torch.layout)):
        return str(x)
    if type(x) is torch.device:
        return f"torch.device({str(x)!r})"
    if isinstance(x, tuple) and type(x).__module__ == "torch.return_types":
        return f"torch.return_types.{type(x).__name__}(({', '.join(format_value(v, consts) for v in x)},))"
    traced = type(x) in (tuple, list, dict) or (isinstance(x, (tuple, list, dict)) and _holds_traced(x))
    if traced and isinstance(x, tuple):  # (a subclass holding proxies, such as a shape, prints as a tuple)
        inner = ", ".join(format_value(v, consts) for v in x)
        return f"({inner},)" if len(x) == 1 else f"({inner})"
    if traced and isinstance(x, list):
        return "[" + ", ".join(format_value(v, consts) for v in x) + "]"
    if traced:
        return "{" + ", ".join(f"{format_value(k, consts)}: {format_value(v, consts)}" for k, v in x.items()) + "}"
    if type(x) is slice:
        return f"slice({format_value(x.start, consts)}, {format_value(x.stop, consts)}, {format_value(x.step, consts)})"
    if isinstance(x, torch.Tensor):
        raise TypeError(f"cannot print a {type_name(type(x))} in a trace (only proxies)")
    name = (consts if consts is not None else Constants()).name(x)
    if numpy_array(x):  # a fresh copy per call of the contents the prologue checked (the caller's may change)
        return f"{name}.copy()"
    return name


def _holds_traced(x: Any) -> bool:
    return any(isinstance(v, (Proxy, Expr, FloatExpr)) for v in tree_leaves(x))


def type_comment(x: Any) -> str:
    if isinstance(x, (TensorProxy, NumberProxy)):
        return f'{x.name}: "{x.type_string()}"'
    return ""


class TracePrinter:
    """Prints a trace: type comments, the user's source line above each op, subsymbols as comments."""

    def __init__(self, trace: Trace):
        self.trace = trace
        self.used = _used_names(trace)
        self.consts = Constants()

    def render(self) -> str:
        t = self.trace
        lines = [f"# Constructed by {t.provenance}", HEADER.rstrip("\n"), ""]
        lines.append(f"def {t.name}({', '.join(format_value(p, self.consts) for p in t.params)}):")
        lines += [f"  # {c}" for p in t.params if (c := type_comment(p))]
        restore = _state_restores(t.bsyms)
        indent = "    " if restore else "  "
        if restore:
            lines.append("  try:")
        last_source = None
        for bsym in t.bsyms:
            src = bsym.source
            if src is not None and (src.filename, src.lineno) != last_source:
                lines.append(f"\n{indent}# {_comment(src.filename)}:{src.lineno}: \t{_comment(src.source_line)}")
                last_source = (src.filename, src.lineno)
            lines += self.bsym_lines(bsym, indent, commented=False)
        lines.append(f"{indent}return {format_value(t.output, self.consts)}")
        if restore:  # the torch state the trace changed is set back to the caller's if an op raises
            lines.append("  except BaseException:")
            for b in restore:
                lines += self.bsym_lines(b, "    ", commented=False)
            lines.append("    raise")
        return "\n".join(lines) + "\n"

    def bsym_lines(self, bsym: BoundSymbol, indent: str, commented: bool) -> list[str]:
        if bsym.sym is DEL:
            return [f"{indent}del {', '.join(a.name for a in bsym.args)}"]
        args = [format_value(a, self.consts) for a in bsym.args]
        args += [f"{k}={format_value(v, self.consts)}" for k, v in bsym.kwargs]
        call = f"{bsym.sym.print_name}({', '.join(args)})"
        outs = self.format_outputs(bsym.output, commented)
        line = call if outs is None else f"{outs} = {call}"
        shown = [o for o in bsym.flat_outs() if commented or getattr(o, "name", None) in self.used]
        comments = [c for o in shown if (c := type_comment(o))]
        if comments:
            line += "  # " + ", ".join(comments)
        out = [indent + ("# " if commented else "") + line]
        for sub in bsym.subsymbols:
            out += self.bsym_lines(sub, indent + "  ", commented=True)
        return out

    def format_outputs(self, out: Any, commented: bool) -> str | None:
        if out is None:
            return None
        if isinstance(out, (tuple, list)):
            inner = [self.format_outputs(o, commented) or "_" for o in out]
            return f"({inner[0]},)" if len(inner) == 1 else f"({', '.join(inner)})"
        if isinstance(out, Proxy):
            if isinstance(out, NumberProxy) and out.expr.is_const:
                return "_"
            return out.name if commented or out.name in self.used else "_"
        return "_"


def _state_restores(bsyms: tuple[BoundSymbol, ...]) -> list[BoundSymbol]:
    """For the torch state changes of a trace (`tex.set_grad_enabled(False, entry=True)`), the calls that set each
    changed state back to its `entry` value, innermost first."""
    first: dict[tuple, BoundSymbol] = {}
    for b in bsyms:
        if getattr(b.sym.impl, "torch_state", False):
            entry = b.kwargs_dict["entry"]
            entry = entry if isinstance(entry, tuple) else (entry,)
            key = (b.sym.impl, *b.args[: len(b.args) - len(entry)])
            if key not in first:
                first[key] = b.with_(args=key[1:] + entry, kwargs=(), source=None)
    return list(reversed(first.values()))


def _used_names(trace: Trace) -> set[str]:
    used = {format_value(x) for x in tree_leaves(trace.output) if isinstance(x, Proxy)}
    used.update(s for x in tree_leaves(trace.output) if isinstance(x, (Expr, FloatExpr)) for s in x.free_symbols())
    for bsym in trace.bsyms:
        for x in bsym.flat_args():
            t = type(x)  # (by type first: a failed isinstance of a TensorProxy reads its `__class__` property)
            if t is Expr or t is FloatExpr:
                used.update(x.free_symbols())
            elif t is TensorProxy or isinstance(x, Proxy):
                used.add(x.name)
                if t is NumberProxy:
                    used.update(x.expr.free_symbols())
    return used


_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\x85\u2028\u2029]")


def _comment(text: str) -> str:
    """Text that stays one comment line (a filename or source line with a newline cannot end it and add code)."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], str(text))
