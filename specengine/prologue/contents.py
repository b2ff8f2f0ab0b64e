"""Content fingerprints of the objects a trace reads through (issue 22, the read set).

A trace bakes in what it read from an object, not only which object it was: the items of a set or a deque, what a
`functools.partial` binds (`.func`, `.args`, `.keywords`), a class's namespace and the containers its attributes
hold, a function's code, defaults, keyword defaults, closure cells and attributes, a bound method's `__func__` and
`__self__`, the slots or `__dict__` of an object. Each such object that the prologue would otherwise compare by
identity gets a `Contents` check instead: `key(value)` is its fingerprint, a nested tuple in which

- values with value semantics are compared by type and value (floats by `repr`: `-0.0`, `nan`);
- containers (list, tuple, deque, set, frozenset, dict, mapping proxies, and their subclasses, with the instance
  `__dict__` of a subclass), partials and bound methods are compared by contents only, so an equal one built anew
  (a new partial, a new bound method of the same function and object, a list rebuilt equal) is served;
- objects whose identity is observable (`==` is `is` for them): user functions, user classes, instances of user
  classes, are compared by identity *and* contents (a function's `__code__` replaced, a class attribute changed, a
  list held by a class attribute appended to, an object's field or slot assigned);
- everything else (library functions and classes, modules, tensors, library objects) by identity.

Computing the key costs a walk, so each check is gated by a stamp taken with it: the identities of what the walk
read through (`__code__`, `__defaults__`, `__kwdefaults__`, closure cells, a partial's parts, slots, the items of
lists, deques and sets), CPython's dict version tags (PEP 509, `prologue/stamps.py`) for the dicts it read and type
version tags (`prologue/classes.py`) for the classes. Per call: the same object and an unchanged stamp is a match;
otherwise the key is computed again and compared (a new, equal object then becomes the stamped one).
"""

from __future__ import annotations

import collections
import ctypes
import functools
import operator
import sys
import types
from typing import Any

import torch

from specengine.ir.literals import exact_key, show
from specengine.prologue import classes, stamps
from specengine.prologue.external import has_value_semantics, user_class, user_function, user_module_object

_DEPTH = 4  # levels of containers and objects below the read object
_CONTAINERS = (list, tuple, dict, set, frozenset, collections.deque, types.MappingProxyType)
_is = operator.is_
_value = operator.attrgetter("value")
_SKIP_CLASS_KEYS = frozenset({"__dict__", "__weakref__", "__doc__", "__module__", "__qualname__"})


def needs_contents(v: Any) -> bool:
    """Whether an object the trace read is compared by its fingerprint rather than by identity alone."""
    if isinstance(v, types.ModuleType):
        return user_module_object(v)
    if has_value_semantics(v) or isinstance(v, (torch.Tensor, torch.nn.Module)):
        return False
    if isinstance(v, (*_CONTAINERS, functools.partial, types.MethodType)):
        return True
    if isinstance(v, types.FunctionType):
        return user_function(v)
    if isinstance(v, type):
        return user_class(v) and not issubclass(v, (torch.nn.Module, type)) and _user_module(v)
    return _user_instance(v)


def _user_module(cls: type) -> bool:
    mod = getattr(cls, "__module__", "") or ""
    top = mod.partition(".")[0]
    return top not in sys.stdlib_module_names and top not in ("torch", "specengine", "typing", "abc", "builtins")


def _user_instance(v: Any) -> bool:
    """An instance of a user class whose state is its `__dict__` or its slots (not a module, a function...)."""
    cls = type(v)
    if not _user_module(cls) or isinstance(v, (type, types.FunctionType, types.MethodType, torch.nn.Module)):
        return False
    return isinstance(getattr(v, "__dict__", None), dict) or bool(_slots(cls))


def _slots(cls: type) -> tuple:
    names: list = []
    for c in cls.__mro__:
        s = vars(c).get("__slots__", ())
        names += [n for n in ([s] if isinstance(s, str) else s) if n not in ("__dict__", "__weakref__")]
    return tuple(names)


class _Walk:
    """One fingerprint: the key, the objects it names by identity (kept alive, so no id is reused), and the stamp:
    tag readers (dicts, types), sequences compared item by item, (object, attribute names) compared by identity.
    With `flat` given, it also fills it with each leaf's path and shown value (for explaining a failed check)."""

    def __init__(self, flat: dict | None = None) -> None:
        self.keep: list = []
        self.tags: list = []
        self.seqs: list = []
        self.attrs: list = []
        self.exact = stamps.TAGS_READABLE and classes.TAGS_READABLE  # else: no stamp, the key every call
        self.flat = flat
        self._active: set = set()

    def leaf(self, path: str, k: Any, shown: Any) -> Any:
        if self.flat is not None:
            self.flat.setdefault(path, shown() if callable(shown) else shown)
        return k

    def ident(self, v: Any, path: str) -> tuple:
        self.keep.append(v)
        return self.leaf(path, ("id", id(v)), lambda: ("id", id(v), type(v).__name__))

    def dict_items(self, d: dict, depth: int, path: str, attrs: bool = False) -> tuple:
        self.tags.append(stamps._tag_reader(d))
        self.keep.append(d)
        self.leaf(f"{path}: keys", None, lambda: ("value", show(list(d))))
        at = (lambda k: f"{path}.{k if type(k) is str else show(k)}") if attrs else (lambda k: f"{path}[{show(k)}]")
        return tuple((self.key(k, depth, f"{path}: a key"), self.key(x, depth, at(k))) for k, x in dict.items(d))

    def key(self, v: Any, depth: int = 0, path: str = "") -> Any:
        t = type(v)
        if t in (int, str, bytes, bool, type(None)) or v is Ellipsis or v is NotImplemented:
            return self.leaf(path, (t, v), lambda: ("value", show(v)))
        if t in (float, complex):
            return self.leaf(path, exact_key(v), lambda: ("value", show(v)))
        if isinstance(v, torch.Tensor):  # an input, or lifted: the prologue checks the place that held it
            return ("tensor",)
        if t in (tuple, frozenset, torch.Size) and has_value_semantics(v):
            return self.leaf(path, (t, frozenset(map(self.key, v)) if t is frozenset else tuple(map(self.key, v))),
                             lambda: ("value", show(v)))  # fmt: skip
        if has_value_semantics(v):  # a device, a slice, a range
            key = (v.start, v.stop, v.step) if t is range else exact_key(v)  # (never the class's own repr)
            return self.leaf(path, ("value", t, key), lambda: ("value", show(v)))
        if depth > _DEPTH or id(v) in self._active or not needs_contents(v):
            return self.ident(v, path)
        self._active.add(id(v))
        try:
            return self._contents(v, t, depth + 1, path)
        finally:
            self._active.discard(id(v))

    def _contents(self, v: Any, t: type, depth: int, path: str) -> tuple:
        if isinstance(v, dict):
            return (t, self.dict_items(v, depth, path), self._instance_dict(v, t, depth, path))
        if isinstance(v, (list, tuple, collections.deque, set, frozenset)):
            if not isinstance(v, (tuple, frozenset)):
                self.seqs.append(v)
                self.keep.append(v)
            if isinstance(v, (set, frozenset)):
                inner: Any = frozenset(self.key(x, depth) for x in v)
                self.leaf(path, None, lambda: ("value", show(v)))
            else:
                self.leaf(f"len({path})", None, ("value", show(len(v))))
                inner = tuple(self.key(x, depth, f"{path}[{i}]") for i, x in enumerate(v))
            return (t, inner, self._instance_dict(v, t, depth, path))
        if t is types.MappingProxyType:
            self.seqs.append(v)  # its items by identity (no tag is reachable through the proxy)
            self.keep.append(v)
            self.leaf(f"{path}: keys", None, lambda: ("value", show(list(v))))
            return (t, tuple((self.key(k, depth), self.key(x, depth, f"{path}[{show(k)}]")) for k, x in v.items()))
        if isinstance(v, functools.partial):
            self.attrs.append((v, ("func", "args", "keywords")))
            self.keep.append(v)
            kw = v.keywords
            kw = self.dict_items(kw, depth, f"{path}.keywords") if type(kw) is dict else self.key(kw, depth)
            return (t, self.key(v.func, depth, f"{path}.func"), self.key(v.args, depth, f"{path}.args"), kw,
                    self._instance_dict(v, t, depth, path))  # fmt: skip
        if t is types.MethodType:
            return (t, self.key(v.__func__, depth, f"{path}.__func__"), self.key(v.__self__, depth, f"{path}.__self__"))
        if t is types.FunctionType:
            return self._function(v, depth, path)
        if isinstance(v, type):
            return self._class(v, depth, path)
        if isinstance(v, types.ModuleType):
            return self._module(v, depth, path)
        return self._object(v, t, depth, path)

    def _module(self, m: types.ModuleType, depth: int, path: str) -> tuple:
        """A user module: its attributes (not the dunders), the containers among them one level down."""
        d = vars(m)
        self.tags.append(stamps._tag_reader(d))
        self.keep.append(m)
        self.ident(m, f"{path}: the module")
        inner = max(depth, _DEPTH - 1)
        items = tuple((k, self.key(x, inner, f"{path}.{k}")) for k, x in dict.items(d)
                      if type(k) is str and not k.startswith("__"))  # fmt: skip
        return ("mod", id(m), items)

    def _instance_dict(self, v: Any, t: type, depth: int, path: str) -> Any:
        """A container subclass's instance attributes (an AttrDict's own fields), and its class."""
        if t in _CONTAINERS:
            return None
        d = getattr(v, "__dict__", None)
        return (self.key(t, depth, f"type({path})"), self.dict_items(d, depth, path, True) if type(d) is dict else None)

    def _function(self, f: types.FunctionType, depth: int, path: str, cells_deep: bool = True) -> tuple:
        self.attrs.append((f, ("__code__", "__defaults__", "__kwdefaults__", "__closure__")))
        self.ident(f, f"{path}: the function")
        self.ident(f.__code__, f"{path}.__code__")
        cells = []
        for i, c in enumerate(f.__closure__ or ()):
            self.attrs.append((c, ("cell_contents",)))
            try:
                where = f"{path}.__closure__[{i}].cell_contents"
                x = c.cell_contents
                cells.append(
                    self.key(x, depth, where) if cells_deep or has_value_semantics(x) else self.ident(x, where)
                )
            except ValueError:  # an empty cell
                cells.append(("empty",))
        kwd = f.__kwdefaults__
        return ("fn", id(f), id(f.__code__), self.key(f.__defaults__, depth, f"{path}.__defaults__"),
                self.dict_items(kwd, depth, f"{path}.__kwdefaults__") if type(kwd) is dict else None, tuple(cells),
                self.dict_items(f.__dict__, depth, path, True))  # fmt: skip

    def _class(self, cls: type, depth: int, path: str) -> tuple:
        getattr(cls, "__specengine_probe__", None)  # a lookup assigns the version tag the stamp reads
        self.tags.append(ctypes.c_uint.from_address(id(cls) + classes._TAG_OFFSET))
        self.ident(cls, f"{path}: the class")
        spaces = []
        for c in cls.__mro__:
            if c is object or not user_class(c):
                continue
            items = sorted((k, x) for k, x in vars(c).items() if type(k) is str and k not in _SKIP_CLASS_KEYS)
            self.leaf(f"{c.__name__}: attributes", None, ("value", show([k for k, _ in items])))
            members = tuple((k, self._member(c, k, x, depth, f"{c.__name__}.{k}")) for k, x in items)
            spaces.append((id(c), members))
        return ("cls", id(cls), tuple(map(id, cls.__mro__)), tuple(spaces))

    def _member(self, c: type, name: str, x: Any, depth: int, path: str) -> Any:
        """A class attribute; the closure cells of a method defined in the class body by identity (they hold what
        it logs to: a list its calls append to outside the trace must not make every call a new entry). A function
        made elsewhere and stored on the class (`H.helper = make_fn(2)`) keeps its cells' contents."""
        own = type(x) is types.FunctionType and x.__qualname__ == f"{c.__qualname__}.{name}"
        if own and needs_contents(x) and depth <= _DEPTH:
            return self._function(x, depth + 1, path, cells_deep=False)
        return self.key(x, depth, path)

    def _object(self, v: Any, t: type, depth: int, path: str) -> tuple:
        self.ident(v, f"{path}: the object")
        d = getattr(v, "__dict__", None)
        fields = self.dict_items(d, depth, path, True) if type(d) is dict else None
        slots = _slots(t)
        if slots:
            self.attrs.append((v, slots))
        values = tuple(self.key(getattr(v, n), depth, f"{path}.{n}") if hasattr(v, n)
                       else self.leaf(f"{path}.{n}", ("absent",), None) for n in slots)  # fmt: skip
        if type(d) is dict:
            self.attrs.append((v, ("__dict__",)))
        return ("obj", id(v), self.key(t, depth, f"type({path})"), fields, values)

    def evidence(self) -> tuple | None:
        """The stamp now; None where it cannot be trusted (a type without a version tag, no readable tags)."""
        if not self.exact:
            return None
        tags = tuple(map(_value, self.tags))
        if 0 in tags:
            return None
        seqs = tuple(tuple(s.values()) if type(s) is types.MappingProxyType else tuple(s) for s in self.seqs)
        attrs = tuple(tuple(getattr(o, n, _MISSING) for n in names) for o, names in self.attrs)
        return tags, seqs, attrs

    def matches(self, seen: tuple) -> bool:
        tags, seqs, attrs = seen
        if tuple(map(_value, self.tags)) != tags:
            return False
        for s, saved in zip(self.seqs, seqs):
            now = s.values() if type(s) is types.MappingProxyType else s
            if len(s) != len(saved) or not all(map(_is, now, saved)):
                return False
        for (o, names), saved in zip(self.attrs, attrs):
            if not all(map(_is, (getattr(o, n, _MISSING) for n in names), saved)):
                return False
        return True


_MISSING = object()


def key(value: Any) -> Any:
    """`value`'s fingerprint (see the module docstring); for tests and entry keys."""
    return _Walk().key(value)


def key_and_objects(value: Any) -> tuple[Any, dict[int, Any]]:
    """`value`'s fingerprint and the objects it names by identity, by id (for the disk cache's portable form)."""
    walk = _Walk()
    k = walk.key(value)
    return k, {id(o): o for o in walk.keep}


class Contents:
    """The prologue's check of one object the trace read: `guard(v)` is True when `v` has the fingerprint seen at
    compile time. The same object (for a bound method: the same `__func__` and `__self__`) under an unchanged stamp
    matches without a walk."""

    def __init__(self, value: Any, text: str):
        self.text = text
        self.flat: dict = {}
        walk = _Walk(self.flat)
        self.expected = walk.key(value, 0, text)
        self.first = walk  # holds what the expected key names by identity
        self._arm(value, walk)

    def _arm(self, value: Any, walk: _Walk) -> None:
        self.obj, self.walk = value, walk
        self.parts = (value.__func__, value.__self__) if type(value) is types.MethodType else None
        self.seen = walk.evidence()

    def __call__(self, v: Any) -> bool:
        seen = self.seen
        if seen is not None and (
            v is self.obj
            or (
                self.parts is not None
                and type(v) is types.MethodType
                and v.__func__ is self.parts[0]
                and v.__self__ is self.parts[1]
            )
        ):
            if self.walk.matches(seen):
                return True
        walk = _Walk()
        if walk.key(v) != self.expected:
            return False
        self._arm(v, walk)
        return True

    def explain(self, v: Any) -> str:
        """The first changed part, as `<what> == <expected> failed: <what> = <actual>`."""
        actual: dict = {}
        _Walk(actual).key(v, 0, self.text)
        for path in [*self.flat, *(p for p in actual if p not in self.flat)]:
            old, new = self.flat.get(path), actual.get(path)
            if old != new:
                return _message(path, old, new)
        return f"{self.text} has the contents seen at compile time"


def _message(path: str, old: Any, new: Any) -> str:
    if ":" in path:  # a set of keys, the object itself
        what = path.partition(":")[0]
        if old is None:
            return f"{what} is unchanged failed: {path.partition(': ')[2]} appeared"
        if old[0] == "id":
            return f"{what} is the object seen at compile time failed: {what} is another {old[2]}"
        return f"{what} is unchanged failed: {path.partition(': ')[2]} = {new[1] if new else 'absent'}"
    if old is None:
        return f"{path} is absent failed: {path} = {_shown(new)}"
    if old[0] == "value":
        return f"{path} == {old[1]} failed: {path} = {_shown(new)}"
    return f"{path} is the object seen at compile time failed: {path} = {_shown(new)}"


def _shown(leaf: Any) -> str:
    if leaf is None:
        return "absent"
    return leaf[1] if leaf[0] == "value" else f"another {leaf[2]}"
