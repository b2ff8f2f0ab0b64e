"""The persistent, portable, signed disk cache (README "Persistent cache").

`Disk` is one compiled target's directory `<cache_dir>/v1/<program key>/`: `load()` reads, verifies and rebuilds
its entries, `save()` writes a traced entry when every prologue global has a recipe, `dynamic()`/`save_dynamic()`
keep the automatic-dynamic decisions. Every failure to load is a miss with a reason in the `cache` log topic.
Modules: `signing` (key, signed format), `store` (directories, atomic writes, eviction), `keys` (code hashes,
program key), `recipes` and `guards` (prologue globals across processes), `entries` (an entry as data), `bundle`
(`save_cache`/`load_cache`), `cli` (`python -m specengine cache`).
"""

from __future__ import annotations

import os
import threading
import warnings
from typing import Any

from specengine.config import config
from specengine.logs import topic
from specengine.persist import keys, store
from specengine.persist.entries import Loaded, Material, entry_payload, load_entry
from specengine.persist.guards import StructureDiffers
from specengine.persist.recipes import NoRecipe, decode_value, encode_value
from specengine.persist.signing import Rejected, decode, encode, read_private, signing_key

__all__ = ["Disk", "Loaded", "Material", "open_program", "NoRecipe"]

log = topic("cache")
_warned: set[str] = set()
_lock = threading.Lock()


def _warn_once(message: str) -> None:
    log.warning(message)
    with _lock:
        if message in _warned:
            return
        _warned.add(message)
    warnings.warn(f"specengine: {message}; the disk cache is not used", RuntimeWarning, stacklevel=4)


class Disk:
    """The disk cache of one compiled target (one program key)."""

    def __init__(self, layout_dir: str, folder: str, key: bytes, fn: Any, module: Any):
        self.layout_dir, self.folder, self.key, self.fn, self.module = layout_dir, folder, key, fn, module
        self.pending: list[str] = []  # entries whose structure guard differed at load (`retry`)

    def load(self) -> list[Loaded]:
        """Every entry of this program that verifies and whose guards rebuild; the others are logged misses."""
        return self._load(store.entry_files(self.folder))

    def retry(self) -> list[Loaded]:
        """The entries not loaded earlier because the module's structure differed, that now load (the first call
        assigned the attribute they were saved with: `self.last = ...`)."""
        paths, self.pending = self.pending, []
        return self._load(paths)

    def _load(self, paths: list[str]) -> list[Loaded]:
        out = []
        for path in paths:
            try:
                payload = decode(read_private(path), "entry", self.key)
                out.append(load_entry(payload, self.fn, self.module))
                store.touch(path)
            except StructureDiffers as e:
                self.pending.append(path)
                log.info("not loaded %s (tried again after a later miss): %s", path, e)
            except Rejected as e:
                log.info("not loaded %s: %s", path, e)
            except Exception as e:  # noqa: BLE001 - a damaged entry is a miss, never an error of the user's call
                log.info("not loaded %s: %s: %s", path, type(e).__name__, e)
            else:
                log.info("loaded %s", path)
        return out

    def save(self, prologue: Any, index: Any, guards: list, material: Material) -> tuple[str | None, str | None]:
        """Write one traced entry; returns (path, None), or (None, why it was not saved)."""
        try:
            payload = entry_payload(self.fn, self.module, prologue, index, guards, material)
        except NoRecipe as e:
            log.info("not saved: %s", e)
            return None, str(e)
        except Exception as e:  # noqa: BLE001 - saving must never fail the user's call
            log.warning("not saved: internal error %s: %s", type(e).__name__, e, exc_info=True)
            return None, f"internal error: {type(e).__name__}: {e}"
        data = encode("entry", payload, self.key)
        try:
            if len(data) > config.cache_max_bytes:
                return None, f"the entry ({len(data)} bytes) is larger than config.cache_max_bytes"
            store.evict(self.layout_dir, config.cache_max_bytes, len(data))
            path = store.write_atomic(self.folder, payload["key"] + store.SUFFIX, data)
        except OSError as e:
            log.info("not saved: %s", e)
            return None, f"write failed: {e}"
        if path in self.pending:
            self.pending.remove(path)  # (this process traced it: no second copy)
        log.info("saved %s", path)
        return path, None

    def dynamic(self) -> tuple[frozenset, dict]:
        """The automatic-dynamic decisions of earlier processes: (sources made symbolic, first values seen)."""
        path = os.path.join(self.folder, "dynamic" + store.SUFFIX)
        if not os.path.exists(path):
            return frozenset(), {}
        try:
            d = decode(read_private(path), "dynamic", self.key)
            return frozenset(d["dynamic"]), {k: decode_value(v) for k, v in d["seen"].items()}
        except (Rejected, KeyError, TypeError, ValueError) as e:
            log.info("dynamic decisions not loaded %s: %s", path, e)
            return frozenset(), {}

    def save_dynamic(self, dynamic: frozenset, seen: dict) -> None:
        """Persist the automatic-dynamic decisions (the sizes and ints that changed between calls)."""
        try:
            data = {"dynamic": sorted(dynamic), "seen": {k: encode_value(v) for k, v in seen.items()}}
            store.write_atomic(self.folder, "dynamic" + store.SUFFIX, encode("dynamic", data, self.key))
        except (NoRecipe, OSError) as e:
            log.info("dynamic decisions not saved: %s", e)


_ENGINE: dict[str, str] = {}  # engine_stat() -> engine_hash(), in this process


def _engine(layout_dir: str, key: bytes) -> str:
    """`keys.engine_hash()`, memoized in a signed file of the cache directory under `keys.engine_stat()`, so that a
    new process does not read and hash every engine source file before its first call."""
    stat = keys.engine_stat()
    if stat in _ENGINE:
        return _ENGINE[stat]
    path = os.path.join(layout_dir, store.ENGINE_MEMO)
    try:
        d = decode(read_private(path), "engine", key)
        if d["stat"] == stat and isinstance(d["hash"], str):
            _ENGINE[stat] = d["hash"]
            return d["hash"]
    except (OSError, Rejected, KeyError, TypeError) as e:
        log.debug("engine hash not read from %s: %s", path, e)
    _ENGINE[stat] = found = keys.engine_hash()
    try:
        store.write_atomic(layout_dir, store.ENGINE_MEMO, encode("engine", {"stat": stat, "hash": found}, key))
    except OSError as e:
        log.info("engine hash not saved: %s", e)
    return found


def open_program(fn: Any, module: Any, dynamic: bool | None, executors: list[str]) -> Disk | None:
    """The disk cache of a compiled target, or None: off (`config.cache_dir` unset), an unsafe directory or key
    (warned once), or a target without a portable identity (a lambda, a partial)."""
    cache_dir = config.cache_dir
    if not cache_dir:
        return None
    try:
        layout_dir = store.root(os.path.abspath(os.path.expanduser(cache_dir)))
        key = signing_key()
    except (store.UnsafeDirectory, Rejected) as e:
        _warn_once(str(e))
        return None
    except OSError as e:
        _warn_once(f"cannot use the cache directory {cache_dir}: {e}")
        return None
    program = keys.program_key(fn, dynamic, executors, _engine(layout_dir, key))
    if program is None:
        log.info("no disk cache for %r: it has no module and qualname", fn)
        return None
    try:
        folder = store.private_dir(os.path.join(layout_dir, program))
    except (store.UnsafeDirectory, OSError) as e:
        _warn_once(str(e))
        return None
    return Disk(layout_dir, folder, key, fn, module)
