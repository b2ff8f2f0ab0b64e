"""`python -m specengine cache --info [DIR]` and `python -m specengine cache --clear [DIR]`."""

from __future__ import annotations

import argparse
import os
import sys

from specengine.config import config
from specengine.persist import store
from specengine.persist.signing import key_file


def info(cache_dir: str) -> str:
    """A summary of a cache directory: where, how many programs, entries and bytes, the size bound, the key."""
    layout_dir = os.path.join(cache_dir, store.LAYOUT)
    files = store.all_files(layout_dir) if os.path.isdir(layout_dir) else []
    programs = {os.path.dirname(p) for p, _, _ in files}
    entries = [f for f in files if not f[0].endswith("dynamic" + store.SUFFIX)]
    total = sum(size for _, size, _ in files)
    try:
        store.check_private_dir(cache_dir)
        safety = "private (owned by you, writable by no one else)"
    except store.UnsafeDirectory as e:
        safety = f"NOT USED: {e}"
    key = "SPECENGINE_CACHE_KEY" if os.environ.get("SPECENGINE_CACHE_KEY") else key_file()
    return "\n".join([
        f"cache directory: {cache_dir} ({safety})",
        f"programs: {len(programs)}, entries: {len(entries)}, bytes: {total} (bound {config.cache_max_bytes})",
        f"signing key: {key}",
    ])  # fmt: skip


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m specengine cache", description="The specengine disk cache.")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--info", action="store_true", help="summarize the cache directory")
    group.add_argument("--clear", action="store_true", help="delete every entry of the cache directory")
    parser.add_argument("dir", nargs="?", default=config.cache_dir, help="default: $SPECENGINE_CACHE_DIR")
    args = parser.parse_args(argv)
    if not args.dir:
        parser.error("no directory given and SPECENGINE_CACHE_DIR is not set")
    cache_dir = os.path.abspath(os.path.expanduser(args.dir))
    if args.info:
        print(info(cache_dir))
        return 0
    try:
        removed = store.clear(cache_dir)
    except store.UnsafeDirectory as e:
        print(f"not cleared: {e}", file=sys.stderr)
        return 1
    print(f"removed {removed} files from {cache_dir}")
    return 0
