"""The signing key of the disk cache and the signed file format (HMAC-SHA256, compared in constant time).

A file is `SPECENGINE-CACHE 1\\n`, a header line of JSON (format, kind, payload length and SHA-256), the payload
(JSON text) and a trailer line with the HMAC-SHA256 of everything before it, in hex. Nothing else is ever read
from a file: no pickle, no marshal, no eval.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import stat
from typing import Any

from specengine.config import config

MAGIC = b"SPECENGINE-CACHE 1\n"
FORMAT = 1
_KEY_BYTES = 32


class Rejected(Exception):
    """A file that must not be used; the message is the reason the `cache` log records."""


def key_file() -> str:
    """The per-user key file: `$XDG_CONFIG_HOME/specengine/cache.key` (`~/.config` when unset)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "specengine", "cache.key")


def signing_key() -> bytes:
    """The secret entries are signed with: `config.cache_key`, else `SPECENGINE_CACHE_KEY` (hex), else the per-user
    key file, created on first use (mode 0o600, in a 0o700 directory, outside the cache directory).

    Raises:
        Rejected: the key is malformed, or the key file is not the user's own or is readable by others.
    """
    configured = config.cache_key if config.cache_key is not None else os.environ.get("SPECENGINE_CACHE_KEY")
    if configured:
        return _parse_key(configured)
    path = key_file()
    if not os.path.exists(path):
        _create_key_file(path)
    return _parse_key(_read_private(path, 0o077).decode("ascii").strip())


def _parse_key(value: bytes | str) -> bytes:
    if isinstance(value, bytes):
        key = value
    else:
        try:
            key = bytes.fromhex(value.strip())
        except ValueError:
            raise Rejected("the cache key is not hex (SPECENGINE_CACHE_KEY or config.cache_key)") from None
    if len(key) < 16:
        raise Rejected("the cache key is shorter than 16 bytes")
    return key


def _create_key_file(path: str) -> None:
    """Write a fresh key atomically: a private temp file, linked to `path` only if no other process made it first."""
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, secrets.token_hex(_KEY_BYTES).encode("ascii") + b"\n")
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # fails if another process created it meanwhile: theirs is used
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)


def _read_private(path: str, forbidden: int) -> bytes:
    """Read a regular file of ours, opened without following links, with none of the `forbidden` mode bits."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise Rejected(f"cannot open {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Rejected(f"{path} is not a regular file")
        if st.st_uid != os.geteuid():
            raise Rejected(f"{path} belongs to another user (uid {st.st_uid})")
        if st.st_mode & forbidden:
            raise Rejected(f"{path} has mode {stat.S_IMODE(st.st_mode):o} (others may change it)")
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_private(path: str) -> bytes:
    """A cache file's bytes: regular, ours, not group- or world-writable (else `Rejected`)."""
    return _read_private(path, 0o022)


def encode(kind: str, payload: dict[str, Any], key: bytes) -> bytes:
    """A signed file holding `payload` (JSON)."""
    body = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode("utf-8")
    header = {"format": FORMAT, "kind": kind, "length": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    signed = MAGIC + json.dumps(header, sort_keys=True).encode("ascii") + b"\n" + body
    return signed + b"\n" + hmac.new(key, signed, hashlib.sha256).hexdigest().encode("ascii") + b"\n"


def decode(data: bytes, kind: str, key: bytes) -> dict[str, Any]:
    """The payload of a signed file, after checking its magic, length, digest and HMAC (else `Rejected`)."""
    if not data.startswith(MAGIC):
        raise Rejected("not a specengine cache file (bad magic)")
    if len(data) < 66 or data[-66:-65] != b"\n" or data[-1:] != b"\n":
        raise Rejected("truncated (no signature)")
    signed, mac = data[:-66], data[-65:-1]
    expected = hmac.new(key, signed, hashlib.sha256).hexdigest().encode("ascii")
    if not hmac.compare_digest(mac, expected):
        raise Rejected("bad signature (another key, or the file was changed)")
    head, sep, body = signed[len(MAGIC) :].partition(b"\n")
    try:
        header = json.loads(head)
    except ValueError:
        raise Rejected("corrupt header") from None
    if not sep or header.get("format") != FORMAT or header.get("kind") != kind:
        raise Rejected(f"format {header.get('format')!r}/{header.get('kind')!r}, expected {FORMAT}/{kind}")
    if header.get("length") != len(body) or header.get("sha256") != hashlib.sha256(body).hexdigest():
        raise Rejected("corrupt payload (length or digest)")
    try:
        return json.loads(body)
    except ValueError:
        raise Rejected("corrupt payload (JSON)") from None
