"""Stamps: cheap per-call evidence that Python objects are as they were, for the writes no Python hook sees.

`Module.__setattr__` and a config class's `__setattr__` are wrapped to bump `structure.EPOCH`, and a watched
module's dicts are `WatchedDict`s, but some writes bypass every Python-level hook: `object.__setattr__(obj, k, v)`
stores into the instance dict with CPython's `PyDict_SetItem`, which ignores a dict subclass's `__setitem__` (so
does `dict.__setitem__(obj.__dict__, k, v)`); `object.__setattr__(obj, "__dict__", d)` replaces the dict without
writing to it; `cfg.layers.append(x)` changes a list that nothing watches. A stamp catches all of them, per call:

- each object's `__dict__` is still the dict it had (`vars(o) is d`);
- each dict (the objects' `__dict__`s and dicts they hold) has the version tag it had. CPython gives every dict a
  version tag (PEP 509, `PyDictObject.ma_version_tag`) that takes a new, never reused value on every change, by
  whatever path. It is read through a `ctypes` view of the dict, whose layout and behaviour are checked once per
  process on a probe (as `prologue/classes.py` does for type version tags); where the check fails (another
  interpreter) each dict's items are compared by identity instead: slower, equally sound;
- each list and set holds the same items (by identity, in order), and each slotted object the same slot values.

A stamp that matches proves that nothing changed; one that does not sends the guard to its exact comparison
(`structure.py`), which then takes a new stamp if the state is still the one the entry was compiled for.
"""

from __future__ import annotations

import ctypes
import operator
from typing import Any, Iterable

_TAG_OFFSET = 24  # offsetof(PyDictObject, ma_version_tag) on 64-bit CPython 3.10-3.13 (after ma_used)
_MISSING = object()
_value = operator.attrgetter("value")
_is = operator.is_


def _layout_ok() -> bool:
    """Whether a dict's version tag can be read at `_TAG_OFFSET` and changes on every write to an instance dict,
    through `object.__setattr__`, `__dict__[k]`, `del` and `dict.update`."""
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        return False

    class Probe:
        pass

    try:
        probe = Probe()
        probe.a = 1
        d = vars(probe)
        if ctypes.c_void_p.from_address(id(d) + 8).value != id(dict):  # ob_type
            return False
        if ctypes.c_ssize_t.from_address(id(d) + 16).value != len(d):  # ma_used
            return False
        tag = ctypes.c_uint64.from_address(id(d) + _TAG_OFFSET)
        seen = [tag.value]
        for write in (lambda: object.__setattr__(probe, "a", 2), lambda: object.__setattr__(probe, "b", 3),
                      lambda: d.__setitem__("a", 4), lambda: delattr(probe, "b"), lambda: d.update(a=5),
                      lambda: setattr(probe, "a", 6)):  # fmt: skip
            write()
            if tag.value in seen:
                return False
            seen.append(tag.value)
        return vars(probe) is d and seen[0] != 0
    except Exception:  # noqa: BLE001 - any surprise: fall back to comparing items
        return False


TAGS_READABLE = _layout_ok()


def _tag_reader(d: dict) -> ctypes.c_uint64:
    return ctypes.c_uint64.from_address(id(d) + _TAG_OFFSET)


def _same_items(d: dict, saved: tuple) -> bool:
    if len(d) != len(saved):
        return False
    return all(k is k2 and v is v2 for (k, v), (k2, v2) in zip(dict.items(d), saved))


class Stamp:
    """The state of `owners` (objects whose `__dict__` matters: modules, config objects), `dicts` (other dicts they
    hold), `seqs` (lists and sets they hold) and `slotted` ((object, slot names) pairs), as cheap evidence.

    `snapshot()` takes it (holding every object it compares by identity, so no id is reused); `matches(state)`
    says whether nothing changed since; `fresh()` compares with the last `arm()`."""

    def __init__(self, owners: Iterable[Any] = (), dicts: Iterable[dict] = (), seqs: Iterable[Any] = (),
                 slotted: Iterable[tuple[Any, tuple]] = ()):  # fmt: skip
        self.owners = tuple({id(o): o for o in owners}.values())
        own = {id(vars(o)) for o in self.owners}
        self.dicts = tuple(d for d in {id(d): d for d in dicts}.values() if id(d) not in own)
        self.seqs = tuple({id(s): s for s in seqs}.values())
        self.slotted = tuple(slotted)
        self.seen = self.snapshot()

    def __len__(self) -> int:
        return len(self.owners) + len(self.dicts) + len(self.seqs) + len(self.slotted)

    def snapshot(self) -> tuple:
        own = tuple(map(vars, self.owners))
        dicts = own + self.dicts
        if TAGS_READABLE:
            readers: tuple | None = tuple(map(_tag_reader, dicts))
            evidence: tuple = tuple(map(_value, readers))
        else:
            readers, evidence = None, tuple((d, tuple(dict.items(d))) for d in dicts)
        seqs = tuple(map(tuple, self.seqs))
        slots = tuple(tuple(getattr(o, n, _MISSING) for n in names) for o, names in self.slotted)
        return own, readers, evidence, seqs, slots

    def matches(self, state: tuple) -> bool:
        own, readers, evidence, seqs, slots = state
        if not all(map(_is, map(vars, self.owners), own)):
            return False
        if readers is not None:
            if tuple(map(_value, readers)) != evidence:
                return False
        elif not all(_same_items(d, saved) for d, saved in evidence):
            return False
        for s, saved in zip(self.seqs, seqs):
            if len(s) != len(saved) or not all(map(_is, s, saved)):
                return False
        for (o, names), saved in zip(self.slotted, slots):
            if not all(map(_is, (getattr(o, n, _MISSING) for n in names), saved)):
                return False
        return True

    def fresh(self) -> bool:
        return self.matches(self.seen)

    def arm(self) -> None:
        self.seen = self.snapshot()
