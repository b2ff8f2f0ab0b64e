"""Fast pytree leaf maps over the values of bound symbols (compile-time hot paths of tracing and the passes).

The arguments and outputs of bound symbols are nearly always flat: proxies, numbers, symbolic expressions and
constants in tuples and lists. `map_leaves` and `leaves` walk plain tuples, lists and dicts directly, and
hand any other pytree node (namedtuples, torch.Size, OrderedDict, registered containers) to
`torch.utils._pytree`, so they give exactly `torch.utils._pytree`'s results (with slices' bounds looked into,
as in `specengine.ir.symbol`), without a pytree dispatch per leaf.
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any, Callable

from torch.utils import _pytree as pytree

_leaf_types: dict[type, bool] = {}
_registered = [-1]  # len(SUPPORTED_NODES) when _leaf_types was filled: a new registration clears it


_BUILTIN_LEAVES = frozenset({int, float, bool, complex, str, bytes, type(None), type(Ellipsis)})


_NODES = pytree.SUPPORTED_NODES  # (a dict torch updates in place)
_leaf_set: set[type] = set(_BUILTIN_LEAVES)  # the types found to be leaves (cleared with _leaf_types)


def _is_leaf_type(t: type) -> bool:
    """Whether torch's pytree treats values of type `t` as leaves (cached per type)."""
    if t in _BUILTIN_LEAVES:
        return True
    _check_registrations()
    leaf = _leaf_types.get(t)
    if leaf is None:
        node = namedtuple if pytree.is_namedtuple_class(t) else t
        leaf = _leaf_types[t] = node not in pytree.SUPPORTED_NODES
        if leaf and t is not slice:  # (a slice's bounds are looked into)
            _leaf_set.add(t)
    return leaf


def _check_registrations() -> None:
    if len(_NODES) != _registered[0]:
        _leaf_types.clear()
        _leaf_set.intersection_update(_BUILTIN_LEAVES)
        _registered[0] = len(_NODES)


def _is_slice(v: Any) -> bool:
    return isinstance(v, slice)


def map_leaves(fn: Callable[[Any], Any], x: Any) -> Any:
    """`fn` applied to every leaf of `x` (slices' bounds included), containers rebuilt as pytree would."""
    t = type(x)
    if t is tuple or t is list:
        if len(_NODES) != _registered[0]:
            _check_registrations()
        known = _leaf_set  # (elements of known leaf types mapped here: no call per leaf)
        out = [fn(v) if type(v) in known else map_leaves(fn, v) for v in x]
        return tuple(out) if t is tuple else out
    if t is slice:
        return slice(map_leaves(fn, x.start), map_leaves(fn, x.stop), map_leaves(fn, x.step))
    if t is dict:
        return {k: map_leaves(fn, v) for k, v in x.items()}
    if _is_leaf_type(t):
        return fn(x)

    def leaf(v: Any) -> Any:
        return slice(*(map_leaves(fn, c) for c in (v.start, v.stop, v.step))) if isinstance(v, slice) else fn(v)

    return pytree.tree_map(leaf, x, is_leaf=_is_slice)


def leaves(x: Any, out: list | None = None) -> list[Any]:
    """The leaves of `x` in pytree order (slices' bounds included)."""
    out = [] if out is None else out
    t = type(x)
    if t is tuple or t is list:
        if len(_NODES) != _registered[0]:
            _check_registrations()
        known = _leaf_set
        for v in x:
            if type(v) in known:
                out.append(v)
            else:
                leaves(v, out)
    elif t is slice:
        leaves((x.start, x.stop, x.step), out)
    elif t is dict:
        leaves(list(x.values()), out)
    elif _is_leaf_type(t):
        out.append(x)
    else:
        for v in pytree.tree_leaves(x, is_leaf=_is_slice):
            leaves(v, out) if type(v) is slice else out.append(v)
    return out
