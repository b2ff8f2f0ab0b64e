"""`save_cache(path)` / `load_cache(path)`: every entry of the disk cache in one signed file, for shipping a cache
with a model. Each entry inside keeps its own signature, checked again when the bundle is unpacked."""

from __future__ import annotations

import os

from specengine.config import config
from specengine.persist import store
from specengine.persist.signing import Rejected, decode, encode, read_private, signing_key


def _layout_dir() -> str:
    if not config.cache_dir:
        raise ValueError("specengine.config.cache_dir (SPECENGINE_CACHE_DIR) is not set")
    return store.root(os.path.abspath(os.path.expanduser(config.cache_dir)))


def save_cache(path: str) -> int:
    """Write every valid entry of `config.cache_dir` into one signed bundle at `path`; returns how many files."""
    layout_dir, key = _layout_dir(), signing_key()
    files = {}
    for file, _, _ in store.all_files(layout_dir):
        try:
            data = read_private(file)
            kind = "dynamic" if os.path.basename(file) == "dynamic" + store.SUFFIX else "entry"
            decode(data, kind, key)
        except Rejected:
            continue
        files[os.path.relpath(file, layout_dir)] = data.decode("utf-8")
    folder, name = os.path.split(os.path.abspath(path))
    store.write_atomic(folder, name, encode("bundle", {"files": files}, key))
    return len(files)


def load_cache(path: str) -> int:
    """Unpack a bundle written by `save_cache` (signed with the same key) into `config.cache_dir`; returns how many
    files. Raises ValueError for a bundle that does not verify."""
    layout_dir, key = _layout_dir(), signing_key()
    with open(path, "rb") as f:
        data = f.read()
    try:
        files = decode(data, "bundle", key)["files"]
    except Rejected as e:
        raise ValueError(f"not a valid specengine cache bundle: {e}") from None
    count = 0
    for rel, text in files.items():
        program, _, name = rel.partition("/")
        if not (program.isalnum() and name.endswith(store.SUFFIX) and "/" not in name and not name.startswith(".")):
            continue
        raw = text.encode("utf-8")
        try:
            decode(raw, "dynamic" if name == "dynamic" + store.SUFFIX else "entry", key)
        except Rejected:
            continue
        store.write_atomic(store.private_dir(os.path.join(layout_dir, program)), name, raw)
        count += 1
    return count
