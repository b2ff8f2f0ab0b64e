"""The disk cache's file system layer: private directories, atomic writes, checked reads, LRU eviction.

Layout: `<cache_dir>/v1/<program key>/<entry digest>.se` (one signed file per entry) and `.../dynamic.se` (the
automatic-dynamic decisions). Directories are created 0o700 and must belong to the effective user and be writable
by no one else; files are written as exclusive temp files (0o600) and `os.replace`d, so a reader never sees a
partial file and concurrent writers of one entry are harmless. Eviction runs under `flock(<cache_dir>/v1/.lock)`.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import stat
from typing import Iterator

LAYOUT = "v1"
SUFFIX = ".se"
ENGINE_MEMO = "engine" + SUFFIX  # the memoized engine hash (persist/__init__._engine), beside the programs


class UnsafeDirectory(Exception):
    """The cache directory is not private to this user: no disk cache in this process."""


def check_private_dir(path: str) -> None:
    """`path` is a real directory, owned by the effective user, not group- or world-writable."""
    try:
        st = os.lstat(path)
    except OSError as e:
        raise UnsafeDirectory(f"cannot stat {path}: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        st = os.stat(path)  # a link the user made to a directory of theirs is fine: its target is checked
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeDirectory(f"{path} is not a directory")
    if st.st_uid != os.geteuid():
        raise UnsafeDirectory(f"{path} belongs to another user (uid {st.st_uid})")
    if st.st_mode & 0o022:
        raise UnsafeDirectory(f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):o})")


def private_dir(path: str) -> str:
    """Create `path` (0o700 for each level made) and check it; returns it."""
    if not os.path.isdir(path):
        os.makedirs(path, mode=0o700, exist_ok=True)
    check_private_dir(path)
    return path


def root(cache_dir: str) -> str:
    """The checked layout directory `<cache_dir>/v1`."""
    private_dir(cache_dir)
    return private_dir(os.path.join(cache_dir, LAYOUT))


def write_atomic(folder: str, name: str, data: bytes) -> str:
    """Write `data` to `folder/name` through an exclusive 0o600 temp file and `os.replace`."""
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    final = os.path.join(folder, name)
    os.replace(tmp, final)
    return final


def entry_files(folder: str) -> list[str]:
    """The entry files of one program directory (a missing directory has none)."""
    try:
        names = [e.name for e in os.scandir(folder) if e.name.endswith(SUFFIX) and e.name != "dynamic" + SUFFIX]
    except OSError:
        return []
    return [os.path.join(folder, n) for n in sorted(names)]


def touch(path: str) -> None:
    """Mark a file as used now (least recently used files are evicted first)."""
    with contextlib.suppress(OSError):
        os.utime(path)


@contextlib.contextmanager
def locked(layout_dir: str) -> Iterator[None]:
    """An exclusive lock on the layout directory (eviction and clearing)."""
    fd = os.open(os.path.join(layout_dir, ".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def all_files(layout_dir: str) -> list[tuple[str, int, float]]:
    """(path, size, mtime) of every cache file of ours under the layout directory."""
    out = []
    try:
        programs = [e for e in os.scandir(layout_dir) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return out
    for program in programs:
        try:
            files = list(os.scandir(program.path))
        except OSError:
            continue
        for f in files:
            if f.name.endswith(SUFFIX) and f.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    st = f.stat(follow_symlinks=False)
                    if st.st_uid == os.geteuid():
                        out.append((f.path, st.st_size, st.st_mtime))
    return out


def evict(layout_dir: str, max_bytes: int, incoming: int) -> int:
    """Delete least recently used files until `incoming` more bytes fit within `max_bytes`; returns how many."""
    removed = 0
    with locked(layout_dir):
        files = sorted(all_files(layout_dir), key=lambda f: f[2])
        total = sum(size for _, size, _ in files)
        for path, size, _ in files:
            if total + incoming <= max_bytes:
                break
            with contextlib.suppress(OSError):
                os.unlink(path)
                total -= size
                removed += 1
    return removed


def clear(cache_dir: str) -> int:
    """Delete every cache file of ours under `cache_dir`; returns how many (files of others are left alone)."""
    layout_dir = os.path.join(cache_dir, LAYOUT)
    if not os.path.isdir(layout_dir):
        return 0
    check_private_dir(layout_dir)
    removed = 0
    with locked(layout_dir):
        for path, _, _ in all_files(layout_dir):
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed += 1
        for e in os.scandir(layout_dir):
            if e.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.rmdir(e.path)  # only when empty
            elif e.name == ENGINE_MEMO and e.is_file(follow_symlinks=False) and e.stat().st_uid == os.geteuid():
                with contextlib.suppress(OSError):
                    os.unlink(e.path)  # (not an entry: not counted)
    return removed
