"""Symbols (ops) and bound symbols (an op applied to proxies in a trace)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable

from specengine.ir import context, leaves
from specengine.provenance import Provenance


@dataclass(frozen=True, eq=False)
class Symbol:
    """An op: a primitive with a meta function, or a torch-level op with a decomposition into prims.

    Calling a symbol while tracing records a BoundSymbol; outside tracing it runs eagerly with `impl`.
    """

    name: str
    module: str
    meta: Callable | None = None
    impl: Callable | None = None
    is_prim: bool = False
    pure: bool = True
    tags: frozenset = field(default_factory=frozenset)

    @property
    def print_name(self) -> str:
        return f"{self.module}.{self.name}" if self.module else self.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        state = context.current()
        if state is None:
            return self.impl(*args, **kwargs)
        return state.record(self, args, kwargs)

    def __repr__(self) -> str:
        return f"Symbol({self.print_name})"


@dataclass(frozen=True, eq=False)
class BoundSymbol:
    """One op application in a trace. A torch-level op keeps its decomposition as `subsymbols`.

    `may_raise` marks an op whose validity was checked on the example sizes without a guard (an unguarded
    broadcast): for later inputs the op itself raises eager's error, so it runs even when its result is unused.
    """

    sym: Symbol
    args: tuple
    kwargs: tuple[tuple[str, Any], ...]
    output: Any
    subsymbols: tuple[BoundSymbol, ...] = ()
    source: Provenance | None = None
    may_raise: bool = False  # checked only on the example sizes: raises at run time where it fails (never DCE'd)

    @property
    def kwargs_dict(self) -> dict[str, Any]:
        return dict(self.kwargs)

    def flat_args(self) -> list[Any]:
        return tree_leaves((self.args, [v for _, v in self.kwargs]))

    def flat_outs(self) -> list[Any]:
        return tree_leaves(self.output)

    def with_(self, **changes: Any) -> BoundSymbol:
        if not changes.keys() <= _FIELDS:
            return replace(self, **changes)  # (raises TypeError naming the unknown field)
        out = _new(BoundSymbol)
        out.__dict__.update(self.__dict__, **changes)  # (no dataclass machinery: see _copy)
        return out

    def map_values(self, fn: Callable[[Any], Any]) -> BoundSymbol:
        """A copy with `fn` applied to every leaf of args, kwargs, output and subsymbols."""
        return _copy(
            self,
            tree_map(fn, self.args),
            tuple((k, tree_map(fn, v)) for k, v in self.kwargs),
            tree_map(fn, self.output),
            tuple(s.map_values(fn) for s in self.subsymbols),
        )


_new = object.__new__
_FIELDS = frozenset(("sym", "args", "kwargs", "output", "subsymbols", "source", "may_raise"))


def _copy(b: BoundSymbol, args: tuple, kwargs: tuple, output: Any, subsymbols: tuple) -> BoundSymbol:
    """`replace(b, args=..., kwargs=..., output=..., subsymbols=...)` without the dataclass machinery (the passes
    copy every bound symbol of a trace, decompositions included: a frozen dataclass's __init__ sets each field
    through object.__setattr__)."""
    out = _new(BoundSymbol)
    out.__dict__.update(sym=b.sym, args=args, kwargs=kwargs, output=output, subsymbols=subsymbols, source=b.source,
                        may_raise=b.may_raise)  # fmt: skip
    return out


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    """torch's pytree map that also looks inside slices (whose bounds may be symbolic)."""
    return leaves.map_leaves(fn, tree)


def tree_leaves(tree: Any) -> list[Any]:
    """torch's pytree leaves, looking inside slices."""
    return leaves.leaves(tree)
