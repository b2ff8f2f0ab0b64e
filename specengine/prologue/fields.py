"""What a structure fingerprint sees (`prologue/structure.py`): config objects and their fields, containers and
their contents, each value by value or identity, and the objects a guard's stamp (`prologue/stamps.py`) compares on
every call."""

from __future__ import annotations

import argparse
import collections
import sys
import types
from typing import Any

import torch

from specengine.ir.literals import exact_key, show
from specengine.prologue.external import has_value_semantics
from specengine.prologue.stamps import Stamp

_MISSING = object()


def is_config_object(v: Any) -> bool:
    """An instance of a user class whose state is its `__dict__` or its `__slots__` (a dataclass, a
    `PretrainedConfig`, ...); containers (a namedtuple, a dict subclass) are not."""
    cls = type(v)
    if isinstance(v, (torch.Tensor, torch.nn.Module, type, types.ModuleType, types.FunctionType, types.MethodType,
                      tuple, list, dict, set, frozenset)):  # fmt: skip
        return False
    mod = getattr(cls, "__module__", "") or ""
    engine = mod.startswith("specengine") and not mod.startswith("specengine.examples")
    if engine or mod.startswith(("builtins", "torch")):
        return False
    return type(getattr(v, "__dict__", None)) is dict or bool(_slots(cls))


def _slots(cls: type) -> list[str]:
    names = []
    for c in cls.__mro__:
        slots = vars(c).get("__slots__", ())
        names += [n for n in ([slots] if isinstance(slots, str) else slots) if n not in ("__dict__", "__weakref__")]
    return names


def object_fields(obj: Any) -> dict:
    """A config object's state: its `__dict__` and the slots that are set."""
    state = getattr(obj, "__dict__", None)
    out = dict(state) if type(state) is dict else {}
    for name in _slots(type(obj)):
        value = getattr(obj, name, _MISSING)
        if value is not _MISSING:
            out[name] = value
    return out


def config_tree(values: Any, depth: int = 2) -> list:
    """The config objects among `values` and those they hold, up to `depth` levels below, each once."""
    todo = [(v, 0) for v in values if is_config_object(v)]
    seen: dict[int, Any] = {}
    while todo:
        obj, d = todo.pop()
        if id(obj) not in seen:
            seen[id(obj)] = obj
            if d < depth:
                todo.extend((v, d + 1) for v in object_fields(obj).values() if is_config_object(v))
    return list(seen.values())


def _attr_key(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("tensor",)  # an input, read and checked on every call
    if has_value_semantics(value):
        return ("value", exact_key(value), show(value))
    return ("id", id(value))


def _shown(key: Any) -> str:
    if key is None:
        return "absent"
    if key[0] == "items":
        return "other contents"
    if key[0] == "value":
        return key[2]
    return {"tensor": "a tensor", "id": "an object"}[key[0]] + ("" if key[0] == "tensor" else f" (id {key[1]})")


_DEPTH = 3  # config objects and containers below a module attribute or a root object
_CONTAINERS = (list, tuple, dict, set, frozenset, collections.OrderedDict, collections.defaultdict, collections.deque)
# library classes whose state is the user's data (other library objects keep caches of their own: a logger)
PLAIN_LIBRARY = (types.SimpleNamespace, argparse.Namespace, collections.UserDict, collections.UserList)


class Graph:
    """The walk behind a fingerprint: each value by `_attr_key`, the fields of the config objects among them, and
    the contents of the lists, tuples, dicts and sets among them (three levels deep). It collects what the guard's
    stamp (`prologue/stamps.py`) compares on every call: the objects whose `__dict__` matters (`owners`), the
    dicts, lists and sets reached, and the slotted objects."""

    def __init__(self, keep: list | None, names: frozenset | None = None):
        self.keep = keep
        self.names = names  # the attribute names the traced code names: other module attributes' contents are not read
        self.out: dict[str, Any] = {}
        self.owners: list = []
        self.dicts: list = []
        self.seqs: list = []
        self.slotted: list = []
        self._seen: set[int] = set()  # config objects and containers already listed (under their first path)

    def stamp(self) -> Stamp:
        return Stamp(self.owners, self.dicts, self.seqs, self.slotted)

    def walk(self, path: str, value: Any, depth: int, contents: bool = True) -> None:
        self.out[path] = _attr_key(value)
        if self.keep is not None:
            self.keep.append(value)
        if depth < _DEPTH and id(value) not in self._seen and (contents or type(value) not in _CONTAINERS):
            if is_config_object(value):
                self._seen.add(id(value))
                self.fields(path, value, depth)
            elif type(value) in _CONTAINERS and not has_value_semantics(value):
                self._seen.add(id(value))
                self._contents(path, value, depth)

    def fields(self, path: str, obj: Any, depth: int) -> None:
        """A config object's fields; the contents of its containers only for user classes (a library object's own
        containers are caches: a logger's level cache)."""
        if type(getattr(obj, "__dict__", None)) is dict:
            self.owners.append(obj)
        slots = _slots(type(obj))
        if slots:
            self.slotted.append((obj, tuple(slots)))
        plain = _user_data(obj)
        for field, value in object_fields(obj).items():
            if plain or type(value) not in _CONTAINERS:
                self.walk(f"{path}.{field}", value, depth + 1)
            else:
                self.out[f"{path}.{field}"] = _attr_key(value)
                if self.keep is not None:
                    self.keep.append(value)

    def _contents(self, path: str, value: Any, depth: int) -> None:
        """A container's items: by value where they have value semantics, else by identity (`_attr_key`)."""
        if isinstance(value, dict):
            self.dicts.append(value)
            items = list(dict.items(value))
            keys: tuple = tuple((_attr_key(k), _attr_key(v)) for k, v in items)
        else:
            if isinstance(value, (list, set, collections.deque)):
                self.seqs.append(value)
            items = list(enumerate(value))
            keys = tuple(_attr_key(v) for _, v in items)
            if isinstance(value, (set, frozenset)):
                keys = tuple(sorted(keys, key=_sort_text))
        self.out[f"the contents of {path}"] = _contents_key(value, keys)
        for k, v in items:
            if self.keep is not None:
                self.keep.append(k)
            self.walk(f"{path}[{show(k)}]", v, depth + 1)


def _sort_text(key: tuple) -> tuple:
    """An order of set items' keys that calls no method of theirs: the text shown for values, else the id."""
    return (key[0], key[2] if key[0] == "value" else str(key[1:]))


def _user_data(obj: Any) -> bool:
    mod = getattr(type(obj), "__module__", "") or ""
    return isinstance(obj, PLAIN_LIBRARY) or mod.partition(".")[0] not in sys.stdlib_module_names


def _contents_key(value: Any, keys: tuple) -> tuple:
    """By value, shown as the container, where every item (and key) has value semantics; else the items' keys."""
    leaves = [k for kv in keys for k in kv] if isinstance(value, dict) else list(keys)
    if all(k[0] == "value" for k in leaves):
        if isinstance(value, dict):
            return ("value", type(value), "{" + ", ".join(f"{k[2]}: {v[2]}" for k, v in keys) + "}")
        return ("value", type(value), "[" + ", ".join(k[2] for k in keys) + "]")
    return ("items", type(value), keys)


def _first_change(expected: dict, actual: dict, what: str) -> str:
    for k in list(expected) + [k for k in actual if k not in expected]:
        if actual.get(k) != expected.get(k):
            return _message(k, expected.get(k), actual.get(k))
    return f"{what} is unchanged"


def names_read(codes: Any) -> frozenset | None:
    """The attribute names that `codes` (the user code that ran while tracing, nested code included) load by name
    or hold as string constants (`getattr(self, "acts")`); None where one reads attributes in bulk (`vars(self)`,
    `self.__dict__`), which any name may be."""
    out: set = set()
    todo = list(codes)
    while todo:
        code = todo.pop()
        if "vars" in code.co_names or "__dict__" in code.co_names:
            return None
        out.update(code.co_names)
        for c in code.co_consts:
            if isinstance(c, str):
                out.add(c)
            elif isinstance(c, types.CodeType):
                todo.append(c)
    return frozenset(out)


def config_objects_of(values: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The config objects among `(path, value)` pairs (not modules: those are guarded with their trees), and the
    mutable containers whose items are not all values (`ACTS = [torch.relu]`, `TABLE = {"k": obj}`: changed in
    place between calls; containers of values are compared by contents elsewhere)."""
    return [(p, v) for p, v in values if is_config_object(v) or _objects_container(v)]


def _objects_container(v: Any) -> bool:
    if type(v) not in _CONTAINERS or type(v) in (tuple, frozenset):
        return type(v) in (tuple, frozenset) and not has_value_semantics(v) and any(map(_objects_container, v))
    items = tuple(dict.items(v)) if isinstance(v, dict) else tuple(v)
    return not has_value_semantics(items)


def _message(what: str, expected: Any, actual: Any) -> str:
    if ":" in what or "items" in (expected or ("",))[:1]:
        return f"{what} is unchanged failed: {what} changed"
    if isinstance(expected, tuple) and expected[0] == "value" and expected[1][0] is bool:
        return f"{what} is {expected[2]} failed: {what} = {_shown(actual)}"
    if expected is None:
        return f"{what} is absent failed: {what} = {_shown(actual)}"
    if expected[0] == "value":
        return f"{what} == {expected[2]} failed: {what} = {_shown(actual)}"
    return f"{what} is the object seen at compile time failed: {what} = {_shown(actual)}"
