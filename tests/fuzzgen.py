"""Random programs over the supported ops, for differential fuzzing against eager PyTorch (issue 6).

A program is data: input templates (each tensor dim is a size variable "A".."D" or the literal 1), a list of
`Step`s (each a kind and its source lines) and the names it returns. `Program.source()` prints it as a Python
function, which is what runs eagerly and what is compiled, so a failure report is a runnable reproducer.

The generator draws every choice from a `Chooser`: `RandomChooser` (a seeded `random.Random`, for
bench/fuzz.py) or `DataChooser` (hypothesis draws, for tests/test_fuzz.py, which also shrinks failures).
It tracks a template per value so that most programs respect the shape rules (broadcasts, matmul inner dims,
reshapes with -1); calls that break them on purpose (a perturbed dim, a rank change) check that the compiled
function raises what eager raises.
"""

from __future__ import annotations

import contextlib
import linecache
import random
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

VARS = ("A", "B", "C", "D")
SIZES = (2, 0, 1, 3, 4, 5, 7)  # simplest first: hypothesis shrinks towards the front
INTS = (2, 0, 1, 3, -1, 4, 5)
FLOATS = (0.5, 2.0, -1.5, 1.0)
UNARY = ("tanh", "neg", "abs", "sigmoid", "exp", "relu")
REDUCE = ("sum", "mean", "amax")
KINDS = ("unary", "scalar", "int_scalar", "float_scalar", "binary", "reduce", "matmul", "reshape", "slice",
         "branch_shape", "branch_int", "loop", "int_var", "inplace", "container", "isinstance_branch",
         "try_op", "grad_block", "with_block")  # fmt: skip
GRAD_MODES = (
    "torch.no_grad()",
    "torch.enable_grad()",
    "torch.set_grad_enabled(False)",
    "torch.set_grad_enabled({n} > 0)",
)


class Swallow:
    """A context manager whose exit swallows RuntimeError (a handler, for the may-raise checks in its block)."""

    def __enter__(self) -> Swallow:
        return self

    def __exit__(self, kind: Any, value: Any, tb: Any) -> bool:
        return kind is RuntimeError


class Quiet:
    """A context manager whose exit returns None (errors in its block propagate)."""

    def __enter__(self) -> Quiet:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


@contextlib.contextmanager
def catching() -> Any:
    try:
        yield
    except RuntimeError:
        pass


@contextlib.contextmanager
def passing() -> Any:
    yield


CONTEXTS = {"Swallow": Swallow, "Quiet": Quiet, "catching": catching, "passing": passing, "contextlib": contextlib}
WITH_FORMS = ("Swallow()", "Quiet()", "catching()", "passing()", "contextlib.nullcontext()")


class RandomChooser:
    """Choices from a seeded `random.Random` (reproducible from the seed)."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)

    def choice(self, seq: Sequence) -> Any:
        return seq[self.rng.randrange(len(seq))]

    def integer(self, lo: int, hi: int) -> int:
        return self.rng.randint(lo, hi)

    def chance(self, p: float) -> bool:
        return self.rng.random() < p


class DataChooser:
    """Choices drawn by hypothesis (`draw` of a composite strategy); shrinks towards simple programs.

    Integers are drawn as bits (`st.booleans()`): hypothesis's integer strategies sometimes draw constants found
    in the loaded modules, which would make even a derandomized run depend on the code base and on which tests
    ran before. Hypothesis favours the first option of a choice; a rotation drawn once per example spreads that
    favour over every option (it shrinks to 0, the written order).
    """

    def __init__(self, draw: Callable):
        from hypothesis import strategies as st

        self.draw, self.bit = draw, st.booleans()
        self.rotation = self.integer(0, 255)

    def choice(self, seq: Sequence) -> Any:
        return seq[(self.integer(0, len(seq) - 1) + self.rotation) % len(seq)]

    def integer(self, lo: int, hi: int) -> int:
        bits = 0
        for _ in range((hi - lo).bit_length()):
            bits = bits * 2 + self.draw(self.bit)
        return lo + bits % (hi - lo + 1)

    def chance(self, p: float) -> bool:
        return self.integer(0, 99) >= 100 - round(p * 100)  # shrinks to False


@dataclass(frozen=True)
class Step:
    kind: str
    lines: tuple[str, ...]


@dataclass(frozen=True)
class Program:
    tensors: tuple[tuple, ...]  # a template per tensor input: size-variable names or 1
    n_ints: int
    n_floats: int
    steps: tuple[Step, ...]
    outputs: tuple[str, ...]

    @property
    def grad_ok(self) -> bool:
        """Programs with grad-mode blocks are called with inputs that require grad (unless they mutate inputs)."""
        kinds = {step.kind for step in self.steps}
        return "grad_block" in kinds and "inplace" not in kinds

    @property
    def params(self) -> list[str]:
        return ([f"x{i}" for i in range(len(self.tensors))] + [f"n{i}" for i in range(self.n_ints)]
                + [f"f{i}" for i in range(self.n_floats)])  # fmt: skip

    def source(self) -> str:
        body = [line for step in self.steps for line in step.lines]
        ret = ", ".join(self.outputs)
        lines = [f"def prog({', '.join(self.params)}):", *("    " + b for b in body), f"    return {ret}"]
        return "\n".join(lines) + "\n"

    def function(self) -> Callable:
        """The program as a Python function; its source is registered in linecache (tracebacks show it)."""
        source = self.source()
        filename = f"<fuzz-{abs(hash(source)):x}>"
        linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
        namespace: dict[str, Any] = {"torch": torch, **CONTEXTS}
        exec(compile(source, filename, "exec"), namespace)
        return namespace["prog"]


@dataclass(frozen=True)
class Call:
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[torch.dtype, ...]
    ints: tuple[int, ...]
    floats: tuple[float, ...]
    grad: bool = False  # the tensors require grad (outputs' requires_grad and the gradients are compared)

    def inputs(self, seed: int) -> list:
        g = torch.Generator().manual_seed(seed)
        tensors = [torch.randn(s, generator=g, dtype=d).requires_grad_(self.grad)
                   for s, d in zip(self.shapes, self.dtypes)]  # fmt: skip
        return [*tensors, *self.ints, *self.floats]

    def __str__(self) -> str:
        shapes = ", ".join(f"{tuple(s)}:{str(d).removeprefix('torch.')}" for s, d in zip(self.shapes, self.dtypes))
        grad = " requires_grad" if self.grad else ""
        return f"tensors [{shapes}]{grad} ints {list(self.ints)} floats {list(self.floats)}"


def broadcast(a: tuple, b: tuple, fresh: Callable[[], str]) -> tuple:
    """The template of a broadcast; dims that are neither equal nor 1 become an opaque (fresh) term."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    return tuple(x if x == y or y == 1 else y if x == 1 else fresh() for x, y in zip(a, b))


def compatible(a: tuple, b: tuple) -> bool:
    n = min(len(a), len(b))
    return all(x == y or 1 in (x, y) for x, y in zip(a[len(a) - n :], b[len(b) - n :]))


class Gen:
    """Builds one program; `values` maps each tensor name to its template."""

    def __init__(self, ch: Any):
        self.ch = ch
        self.values: dict[str, tuple] = {}
        self.ints: list[str] = []
        self.floats: list[str] = []
        self.steps: list[Step] = []
        self.counter = 0

    def fresh(self, prefix: str = "#") -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def out(self) -> str:
        return self.fresh("v")

    def tensor(self) -> str:
        names = list(self.values)
        return names[-1] if self.ch.chance(0.4) else self.ch.choice(names)

    def add(self, kind: str, lines: list[str], out: str | None = None, template: tuple | None = None) -> None:
        self.steps.append(Step(kind, tuple(lines)))
        if out is not None:
            self.values[out] = template

    # Int and float atoms.

    def int_atom(self) -> str:
        forms = ["const", "shape"] + (["int"] * 2 if self.ints else [])
        form = self.ch.choice(forms)
        if form == "int":
            return self.ch.choice(self.ints)
        ranked = [n for n, t in self.values.items() if t]
        if form == "const" or not ranked:
            return str(self.ch.choice((2, 0, 1, 3, -1, -2)))
        x = self.ch.choice(ranked)
        d = self.ch.integer(-len(self.values[x]), len(self.values[x]) - 1)
        return self.ch.choice((f"{x}.shape[{d}]", f"{x}.size({d})", f"len({x})", f"{x}.numel()"))

    def int_expr(self) -> str:
        a = self.int_atom()
        form = self.ch.choice(("atom", "add", "mul", "floordiv", "mod", "sub", "min", "div_by"))
        k = self.ch.choice((1, 2, 3))
        return {
            "atom": a, "add": f"{a} + {k}", "mul": f"{a} * {k}", "floordiv": f"{a} // {k}", "mod": f"{a} % {k}",
            "sub": f"{a} - {self.int_atom()}", "min": f"min({a}, {k + 1})", "div_by": f"{k + 2} // ({a})",
        }[form]  # fmt: skip

    def same_shape(self, x: str) -> str:
        """An expression with the template of `x` (both arms of a branch use these)."""
        return self.ch.choice((f"{x} * 2", f"{x}.tanh()", f"{x} + {x}", f"{x} - 1.5", f"torch.sigmoid({x})",
                               f"{x} / 3", f"{x}.abs()", f"{x} * {x}"))  # fmt: skip

    # Steps. Each adds one Step and, for tensor results, the output's template.

    def unary(self) -> None:
        x, op, o = self.tensor(), self.ch.choice(UNARY), self.out()
        text = f"torch.{op}({x})" if self.ch.chance(0.3) else f"{x}.{op}()"
        self.add("unary", [f"{o} = {text}"], o, self.values[x])

    def scalar(self) -> None:
        x, op, o = self.tensor(), self.ch.choice(("*", "+", "-", "/", "**")), self.out()
        c = self.ch.choice((2, -1, 0.5, 3, 1.5, 0)) if op != "**" else self.ch.choice((2, 3))
        text = f"{c} {op} {x}" if op != "**" and self.ch.chance(0.3) else f"{x} {op} {c}"
        self.add("scalar", [f"{o} = {text}"], o, self.values[x])

    def int_scalar(self) -> None:
        x, op, o = self.tensor(), self.ch.choice(("*", "+", "-", "/")), self.out()
        self.add("int_scalar", [f"{o} = {x} {op} ({self.int_expr()})"], o, self.values[x])

    def float_scalar(self) -> None:
        if not self.floats:
            return self.scalar()
        x, f, o = self.tensor(), self.ch.choice(self.floats), self.out()
        text = self.ch.choice((f"{x} * {f}", f"{f} - {x}", f"{x} + {f} * 2"))
        self.add("float_scalar", [f"{o} = {text}"], o, self.values[x])

    def binary(self) -> None:
        x, op, o = self.tensor(), self.ch.choice(("+", "*", "-", "/", "max")), self.out()
        partners = [n for n, t in self.values.items() if compatible(self.values[x], t)]
        if self.ch.chance(0.15):
            partners = list(self.values)  # maybe incompatible: broadcasts only for some sizes
        y = self.ch.choice(partners)
        text = f"torch.maximum({x}, {y})" if op == "max" else f"{x} {op} {y}"
        self.add("binary", [f"{o} = {text}"], o, broadcast(self.values[x], self.values[y], self.fresh))

    def reduce(self) -> None:
        x, op, o = self.tensor(), self.ch.choice(REDUCE), self.out()
        t = self.values[x]
        form = self.ch.choice(("dim", "all", "dims", "keepdim")) if t else "all"
        if form == "all":
            self.add("reduce", [f"{o} = {x}.{op}()"], o, ())
            return
        d = self.ch.integer(-len(t), len(t) - 1)
        dims = {d % len(t)}
        if form == "dims" and len(t) >= 2:
            dims.add((d + 1) % len(t))
        keep = form == "keepdim"
        arg = f"({', '.join(map(str, sorted(dims)))},)" if len(dims) > 1 else str(d)
        text = f"torch.{op}({x}, {arg}, keepdim={keep})" if self.ch.chance(0.3) else f"{x}.{op}({arg}, keepdim={keep})"
        template = tuple(1 if i in dims else s for i, s in enumerate(t)) if keep else \
            tuple(s for i, s in enumerate(t) if i not in dims)  # fmt: skip
        self.add("reduce", [f"{o} = {text}"], o, template)

    def matmul(self) -> None:
        ranked = [n for n, t in self.values.items() if t]
        if not ranked:
            return self.unary()
        x, o = self.ch.choice(ranked), self.out()
        tx = self.values[x]
        partners = [n for n, t in self.values.items() if t and (t[0] if len(t) == 1 else t[-2]) == tx[-1]]
        if partners and self.ch.chance(0.8):
            y = self.ch.choice(partners)
            ty = self.values[y]
        else:
            y = f"{x}.mT" if len(tx) >= 2 else x
            ty = tx[:-2] + (tx[-1], tx[-2]) if len(tx) >= 2 else tx
        self.add("matmul", [f"{o} = {x} @ {y}" if self.ch.chance(0.7) else f"{o} = torch.matmul({x}, {y})"], o,
                 matmul_template(tx, ty, self.fresh))  # fmt: skip

    def reshape(self) -> None:
        x, o = self.tensor(), self.out()
        t = self.values[x]
        forms = ["flat", "minus_k", "unsqueeze"] + (["keep0", "transpose", "view_last", "prod01"] if t else [])
        form = self.ch.choice(forms)
        k = self.ch.choice((2, 1, 3))
        d = self.ch.integer(-len(t) - 1, len(t))
        text, template = {
            "flat": (f"{x}.reshape(-1)", (self.fresh(),)),
            "minus_k": (f"{x}.reshape(-1, {k})", (self.fresh(), k)),
            "unsqueeze": (f"{x}.unsqueeze({d})", t[: d % (len(t) + 1)] + (1,) + t[d % (len(t) + 1) :]),
            "keep0": (f"{x}.reshape({x}.shape[0], -1)", (t[0], self.fresh()) if t else ()),
            "transpose": (f"{x}.transpose(0, -1)", (t[-1:] + t[1:-1] + t[:1]) if len(t) > 1 else t),
            "view_last": (f"{x}.view(-1, {x}.shape[-1])", (self.fresh(), t[-1]) if t else ()),
            "prod01": (f"{x}.reshape({x}.shape[0] * {x}.shape[-1], -1)", (self.fresh(), self.fresh())),
        }[form]
        self.add("reshape", [f"{o} = {text}"], o, template)

    def slice(self) -> None:
        x, o = self.tensor(), self.out()
        t = self.values[x]
        if not t:
            return self.add("slice", [f"{o} = {x}[None]"], o, (1,))
        a, b = (self._bound(self.ch.choice(("None", "const", "int"))) for _ in range(2))
        form = self.ch.choice(("dim0", "dim1", "index", "last_index", "none", "step"))
        if form == "dim1" and len(t) < 2:
            form = "dim0"
        i = self.int_atom() if self.ch.chance(0.5) else self.ch.choice(("0", "-1", "1"))
        text, template = {
            "dim0": (f"{x}[{a}:{b}]", (self.fresh(),) + t[1:]),
            "dim1": (f"{x}[:, {a}:{b}]", (t[0], self.fresh()) + t[2:]),
            "index": (f"{x}[{i}]", t[1:]),
            "last_index": (f"{x}[..., {i}]", t[:-1]),
            "none": (f"{x}[:, None]", t[:1] + (1,) + t[1:]),
            "step": (f"{x}[::{self.ch.choice((2, 3))}]", (self.fresh(),) + t[1:]),
        }[form]
        self.add("slice", [f"{o} = {text}"], o, template)

    def _bound(self, form: str) -> str:
        if form == "None":
            return ""
        return self.int_atom() if form == "int" else str(self.ch.choice((1, -1, 2, 0, -2, 3)))

    def _branch(self, kind: str, cond: str) -> None:
        y, o = self.tensor(), self.out()
        t = self.values[y]
        if t and self.ch.chance(0.3):  # arms that reduce dim 0 differently (the else arm may raise)
            then, other = f"{y}.sum(0)", self.ch.choice((f"{y}[0]", f"{y}.amax(0)", f"{y}.mean(0)"))
            t = t[1:]
        else:
            then, other = self.same_shape(y), self.same_shape(y)
        self.add(kind, [f"if {cond}:", f"    {o} = {then}", "else:", f"    {o} = {other}"], o, t)

    def branch_shape(self) -> None:
        ranked = [n for n, t in self.values.items() if t]
        if not ranked:
            return self.branch_int()
        x = self.ch.choice(ranked)
        d = self.ch.integer(0, len(self.values[x]) - 1)
        lhs = self.ch.choice((f"{x}.shape[{d}]", f"{x}.numel()", f"{x}.shape[{d}] * 2 - {x}.shape[-1]"))
        rhs = self.ch.choice(("2", "1", "0", "3", self.int_atom()))
        self._branch("branch_shape", f"{lhs} {self.ch.choice(('>', '==', '<=', '!=', '>='))} {rhs}")

    def branch_int(self) -> None:
        if not self.ints:
            return self.branch_shape() if any(self.values.values()) else self.unary()
        n = self.ch.choice(self.ints)
        cond = self.ch.choice((f"{n} > {self.ch.choice((1, 0, 2))}", f"{n} % 2 == 0", f"{n} == {self.int_atom()}"))
        self._branch("branch_int", cond)

    def loop(self) -> None:
        x, o = self.tensor(), self.out()
        bound = self.ch.choice(("int", "min", "shape", "const"))
        n = self.ch.choice(self.ints) if self.ints else "2"
        ranked = [m for m, t in self.values.items() if t]
        count = {"int": n, "min": f"min({n}, 3)", "const": "2",
                 "shape": f"{ranked[0]}.shape[0]" if ranked else "2"}[bound]  # fmt: skip
        body = self.ch.choice((f"{o} = {o} * 0.5 + i", f"{o} = ({o} - i).tanh()", f"{o} = {o} + {o}.sum() * i"))
        self.add("loop", [f"{o} = {x}", f"for i in range({count}):", f"    {body}"], o, self.values[x])

    def int_var(self) -> None:
        m = self.fresh("m")
        self.add("int_var", [f"{m} = {self.int_expr()}"])
        self.ints.append(m)

    def try_op(self) -> None:
        """A may-raise op (a broadcast, a reshape, a view, narrow, an index, a matmul) inside try/except: its checks
        on the sizes must be guarded both ways. Both arms give a 0-d result."""
        x, o = self.tensor(), self.out()
        t, y = self.values[x], self.ch.choice(list(self.values))
        inputs = [n for n in self.values if n.startswith("x")]
        forms = ["binary", "reshape", "matmul"] + (["narrow", "index"] if t else []) + (["view"] if x in inputs else [])
        k, i = self.ch.choice((2, 3, 1)), self.int_atom() if self.ch.chance(0.5) else self.ch.choice(("0", "1", "-1"))
        op = {"binary": f"({x} {self.ch.choice(('+', '*', '-'))} {y})", "reshape": f"{x}.reshape(-1, {k})",
              "view": f"{x}.view(-1, {k})", "narrow": f"{x}.narrow(0, {i}, {k})", "index": f"{x}[{i}]",
              "matmul": f"({x} @ {y})" if t and self.values[y] else f"({x} + {y})"}[self.ch.choice(forms)]  # fmt: skip
        caught = self.ch.choice(("RuntimeError", "(RuntimeError, IndexError)", "Exception", "IndexError"))
        lines = ["try:", f"    {o} = {op}.sum()", f"except {caught}:", f"    {o} = {x}.sum() * 2"]
        if self.ch.chance(0.3):
            lines[2:2] = ["    if 0 > 1:", "        raise ValueError"]  # an explicit raise nearby
        self.add("try_op", lines, o, ())

    def grad_block(self) -> None:
        """Ops under a grad-mode change (inputs of some calls require grad: outputs and gradients are compared)."""
        x, o = self.tensor(), self.out()
        mode = self.ch.choice(GRAD_MODES).format(n=self.ch.choice(self.ints) if self.ints else "1")
        body = self.same_shape(x)
        if self.ch.chance(0.3):
            body = f"{body} if torch.is_grad_enabled() else {x} - 1"
        self.add("grad_block", [f"with {mode}:", f"    {o} = {body}", f"{o} = {o} + {x}"], o, self.values[x])

    def with_block(self) -> None:
        """A may-raise op (a broadcast, a reshape) inside `with` a user context manager: guarded both ways where
        the manager's exit may swallow the error, unguarded (eager's error at run time) where it cannot."""
        x, o = self.tensor(), self.out()
        y = self.ch.choice(list(self.values))
        op = self.ch.choice((f"({x} + {y})", f"({x} * {y})", f"{x}.reshape(-1, {self.ch.choice((2, 3))})"))
        lines = [f"{o} = {x}.sum() * 2", f"with {self.ch.choice(WITH_FORMS)}:", f"    {o} = {op}.sum()"]
        self.add("with_block", lines, o, ())

    def inplace(self) -> None:
        x = self.tensor()
        op = self.ch.choice(("add_", "mul_", "sub_", "div_"))
        same = [n for n, t in self.values.items() if t == self.values[x] and n != x]
        arg = self.ch.choice(same) if same and self.ch.chance(0.4) else str(self.ch.choice((2, 0.5, 1, -1)))
        self.add("inplace", [f"{x}.{op}({arg})"])

    # Python constructs (issue 11): containers keyed by sizes, type queries.

    def container(self) -> None:
        """A dict, set, tuple or table keyed by a size, the shape or a string of it (hashing and str pin sizes)."""
        x, o = self.tensor(), self.out()
        t = self.values[x]
        key = f"{x}.shape[{self.ch.integer(-len(t), len(t) - 1)}]" if t and self.ch.chance(0.7) else self.int_atom()
        form = self.ch.choice(("get", "set_len", "in_set", "table", "tuple_index", "str_key", "shape_str"))
        text = {
            "get": f"{x} * {{0: 1.5, 2: -1.0, 3: 2.0}}.get({key}, 0.5)",
            "set_len": f"{x} * len(set({x}.shape))",
            "in_set": f"({x} * 2 if {key} in {{0, 2, 3}} else {x} - 1)",
            "table": f"{x} * {{(2, 3): 2.0, (1,): -1.0, (): 3.0, (0, 2): 0.5}}.get(tuple({x}.shape), 1.0)",
            "tuple_index": f"{x} * (1.0, 2.0, -1.0)[({self.int_expr()}) % 3]",
            "str_key": f'{x} * {{"2": 2.0, "1": 3.0, "0": -1.0}}.get(f"{{{key}}}", 1.0)',
            "shape_str": f'{x} * {{"torch.Size([2, 3])": 2.0, "torch.Size([1])": 3.0}}.get(str({x}.shape), 1.0)',
        }[form]  # fmt: skip
        self.add("container", [f"{o} = {text}"], o, t)

    def isinstance_branch(self) -> None:
        """Type queries as library code writes them: isinstance of tensors, shapes, sizes and numbers; hasattr."""
        x = self.tensor()
        t = self.values[x]
        if self.ints and t and self.ch.chance(0.3):  # transformers' logits_to_keep
            n, keep, o = self.ch.choice(self.ints), self.fresh("keep"), self.out()
            lines = [f"{keep} = slice(-{n}, None) if isinstance({n}, int) else {n}", f"{o} = {x}[{keep}]"]
            return self.add("isinstance_branch", lines, o, (self.fresh(),) + t[1:])
        conds = [f"isinstance({x}, torch.Tensor)", f"torch.is_tensor({x})", f"isinstance({x}.shape, torch.Size)",
                 f"hasattr({x}, 'jax')", f"isinstance({x}, (int, float))", f"isinstance({x}.ndim, int)"]  # fmt: skip
        conds += [f"isinstance({x}.shape[0], int)", f"isinstance({x}.size(-1), float)"] if t else []
        conds += [f"isinstance({n}, int)" for n in self.ints] + [f"isinstance({n}, bool)" for n in self.ints]
        conds += [f"isinstance({f}, float)" for f in self.floats] + [f"isinstance({f}, int)" for f in self.floats]
        cond = self.ch.choice(conds)
        if self.ch.chance(0.3) and t:
            cond = f"{cond} and {x}.shape[0] {self.ch.choice(('>', '=='))} 1"
        self._branch("isinstance_branch", cond)


def matmul_template(tx: tuple, ty: tuple, fresh: Callable[[], str]) -> tuple:
    if len(tx) == 1 and len(ty) == 1:
        return ()
    if len(tx) == 1:
        return ty[:-2] + ty[-1:]
    if len(ty) == 1:
        return tx[:-1]
    return broadcast(tx[:-2], ty[:-2], fresh) + (tx[-2], ty[-1])


def gen_program(ch: Any, max_steps: int = 8) -> Program:
    """A random program: 1-3 tensor inputs, 0-2 int inputs, 0-1 float input, 1-`max_steps` steps."""
    g = Gen(ch)
    n_tensors, n_ints, n_floats = ch.integer(1, 3), ch.integer(0, 2), int(ch.chance(0.25))
    templates = []
    for i in range(n_tensors):
        rank = ch.choice((2, 1, 3, 0)) if ch.chance(0.9) else 0
        template = tuple(1 if ch.chance(0.12) else ch.choice(VARS) for _ in range(rank))
        templates.append(template)
        g.values[f"x{i}"] = template
    g.ints = [f"n{i}" for i in range(n_ints)]
    g.floats = [f"f{i}" for i in range(n_floats)]
    for _ in range(ch.integer(1, max_steps)):
        getattr(g, ch.choice(KINDS))()
    tensors = list(g.values)
    outputs = [tensors[-1]]
    if ch.chance(0.3):
        outputs.append(ch.choice(tensors))
    if ch.chance(0.15):
        outputs.append(g.int_expr())
    return Program(tuple(templates), n_ints, n_floats, tuple(g.steps), tuple(outputs))


def gen_calls(ch: Any, program: Program, max_calls: int = 7) -> tuple[Call, ...]:
    """A sequence of calls: fresh sizes (0, 1 and 2 are frequent), repeats, dtype changes, perturbed dims."""
    calls: list[Call] = []
    for _ in range(ch.integer(2, max_calls)):
        if calls and ch.chance(0.25):
            prev = ch.choice(calls)
            calls.append(prev if ch.chance(0.6) else _flip_dtypes(prev))
            continue
        sizes = {v: ch.choice(SIZES) for v in VARS}
        if ch.chance(0.3):
            sizes = {v: ch.choice((0, 1, 2)) for v in VARS}
        shapes = [[sizes[d] if isinstance(d, str) else d for d in t] for t in program.tensors]
        if shapes and ch.chance(0.15):  # break the template: a broadcast, matmul or reshape may now fail
            s = ch.choice(shapes)
            if s:
                s[ch.integer(0, len(s) - 1)] = ch.choice(SIZES)
        if shapes and ch.chance(0.05):  # a rank change
            ch.choice(shapes).insert(0, ch.choice((1, 2)))
        dtype = ch.choice((torch.float32, torch.float64))
        dtypes = [dtype if not ch.chance(0.1) else ch.choice((torch.float32, torch.float64)) for _ in shapes]
        ints = tuple(ch.choice(INTS) for _ in range(program.n_ints))
        floats = tuple(ch.choice(FLOATS) for _ in range(program.n_floats))
        grad = program.grad_ok and ch.chance(0.5)
        calls.append(Call(tuple(tuple(s) for s in shapes), tuple(dtypes), ints, floats, grad))
    return tuple(calls)


def _flip_dtypes(call: Call) -> Call:
    flip = {torch.float32: torch.float64, torch.float64: torch.float32}
    return Call(call.shapes, tuple(flip[d] for d in call.dtypes), call.ints, call.floats, call.grad)
