"""Examples that answer some of the solver's questions without z3.

The hints satisfy every constraint. Changing one symbol of them (and then each symbol that only one constraint
mentions, where an equality of that constraint gives its value) and finding every constraint still true is a
model: it proves that a constraint it falsifies is not implied by the others, or that a symbol it changes is not
pinned. An example never drops a guard or pins a symbol; where none is found, z3 decides as before.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from specengine.constraints import expr as E

Ranges = Mapping[str, tuple[int | None, int | None]]


class Examples:
    """Examples over one group of constraints (`exprs`), all true at `hints`."""

    def __init__(self, exprs: Sequence[E.Expr], hints: Mapping[str, int], ranges: Ranges):
        self.exprs = list(exprs)
        self.hints = hints
        self.ranges = ranges
        self.mentions: dict[str, list[int]] = {}
        for i, e in enumerate(self.exprs):
            for name in e.free_symbols():
                self.mentions.setdefault(name, []).append(i)
        self.usable = all(type(hints.get(s)) is int for s in self.mentions) and all(map(self._holds_at_hints, exprs))

    def refutes(self, i: int, kept: set[int]) -> bool:
        """Whether an example satisfies the ranges and every constraint of `kept` but `i`, and falsifies `i`
        (then `i` is not implied by the others)."""
        if not self.usable:
            return False
        for name in self.exprs[i].free_symbols():
            for value in self._values(name):
                env = {**self.hints, name: value}
                if _value(self.exprs[i], env) is False and self._repaired(env, name, kept, skip=i):
                    return True
        return self._refutes_jointly(i, kept)

    def _refutes_jointly(self, i: int, kept: set[int]) -> bool:
        """Every symbol of `i` scaled at once (`min(s2//8, s3//8) <= 4` needs both sizes to grow)."""
        names = sorted(self.exprs[i].free_symbols())
        if len(names) < 2:
            return False
        for k in (2, 3):
            env = dict(self.hints)
            for name in names:
                lo, hi = self.ranges.get(name, (None, None))
                value = k * self.hints[name]
                if (lo is None or value >= lo) and (hi is None or value <= hi):
                    env[name] = value
            if _value(self.exprs[i], env) is not False:
                continue
            touched = {j for name in names for j in self.mentions[name] if j in kept and j != i}
            if all(_value(self.exprs[j], env) is True for j in touched):
                return True
        return False

    def unpinned(self, names: Sequence[str], kept: set[int]) -> set[str]:
        """The symbols of `names` that some example satisfying every constraint of `kept` changes."""
        out: set[str] = set()
        if not self.usable:
            return out
        for name in names:
            for value in () if name in out else self._values(name):
                env = {**self.hints, name: value}
                if self._repaired(env, name, kept):
                    out |= {s for s in names if env.get(s, self.hints[s]) != self.hints[s]}
                    break
        return out

    def _values(self, name: str) -> list[int]:
        hint = self.hints[name]
        lo, hi = self.ranges.get(name, (None, None))
        out = []
        near = (hint + 1, hint - 1, 2 * hint, 2 * hint + 2, hint + 2, hint - 2, hint + 4, hint - 4, hint + 8, hint - 8)
        for v in (*near, hint + hint // 2, hint // 2, 0, 1, -1, -hint):
            if v != hint and v not in out and (lo is None or v >= lo) and (hi is None or v <= hi):
                out.append(v)
        return out

    def _repaired(self, env: dict, name: str, kept: set[int], skip: int | None = None) -> bool:
        """Whether every constraint of `kept` but `skip` that mentions `name` holds in `env`, after giving a symbol
        of each false one the value that one of its equalities asks for (checked against every constraint that
        mentions that symbol; `skip`'s symbols are never changed)."""
        changed, fixed = {name}, self.exprs[skip].free_symbols() if skip is not None else frozenset()
        for j in self.mentions[name]:
            if j != skip and j in kept and _value(self.exprs[j], env) is not True:
                repaired = self._repair(j, env, changed | fixed, kept, skip)
                if repaired is None:
                    return False
                changed.add(repaired)
        return True

    def _repair(self, j: int, env: dict, frozen: set, kept: set[int], skip: int | None) -> str | None:
        e = self.exprs[j]
        for atom in e.args if e.op == "or" else (e,):
            if atom.op != "rel" or atom.args[0] != "==":
                continue
            for target, other in ((atom.args[1], atom.args[2]), (atom.args[2], atom.args[1])):
                name = target.args[0] if target.op == "sym" else None
                if name is None or name in frozen or name in other.free_symbols():
                    continue
                value = _number(other, env)
                lo, hi = self.ranges.get(name, (None, None))
                if value is None or (lo is not None and value < lo) or (hi is not None and value > hi):
                    continue
                old, env[name] = env[name], value
                if _value(e, env) is True and all(
                    _value(self.exprs[k], env) is True for k in self.mentions[name] if k in kept and k != skip
                ):
                    return name
                env[name] = old
        return None

    def _holds_at_hints(self, e: E.Expr) -> bool:
        return _value(e, self.hints) is True


def _number(e: E.Expr, env: Mapping[str, int]) -> int | None:
    try:
        value = e.eval(env)
    except (ArithmeticError, ValueError, KeyError):
        return None
    return value if type(value) is int else None


def _value(e: E.Expr, env: Mapping[str, int]) -> bool | None:
    """`e` at `env`; None where it cannot be evaluated (a division by zero)."""
    try:
        return bool(e.eval(env))
    except (ArithmeticError, ValueError, KeyError):
        return None
