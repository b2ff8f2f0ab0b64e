"""The disk cache in one process (issue 23): settings, the signed format, the file-system safety layer, keys that
leave out paths and line numbers, reloading into a fresh compiled function, explain. Across processes:
tests/test_persist_processes.py."""

from __future__ import annotations

import enum
import os
import stat
import types
import warnings

import numpy as np
import pytest
import torch

import specengine
from specengine.persist import keys, signing, store

SCALE = 1.5


def scaled(x, n):
    return torch.cos(x) * n + SCALE


@pytest.fixture
def disk(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.delenv("SPECENGINE_CACHE_KEY", raising=False)
    monkeypatch.setattr(specengine.config, "cache_dir", str(tmp_path / "cache"))
    monkeypatch.setattr(specengine.config, "cache_key", None)
    return tmp_path


def _files(tmp_path) -> list:
    return sorted((tmp_path / "cache").rglob("*.se")) if (tmp_path / "cache").exists() else []


def test_off_by_default_and_per_function_opt_out(disk, monkeypatch):
    monkeypatch.delenv("SPECENGINE_CACHE_DIR", raising=False)
    assert specengine.config.__class__().cache_dir is None  # unset: no disk cache
    c = specengine.compile(scaled, cache=False)
    c(torch.ones(3), 2)
    assert not _files(disk) and specengine.cache_entries(c)[0].stats["origin"] == "trace"
    monkeypatch.setattr(specengine.config, "cache_dir", None)
    c = specengine.compile(scaled)
    c(torch.ones(3), 2)
    assert not _files(disk)


def test_a_fresh_compiled_function_loads_entries_and_serves_sizes_0_1_2(disk):
    sizes = (0, 1, 2, 5)
    first = specengine.compile(scaled, dynamic=True)
    for n in sizes:
        first(torch.ones(n), 3)
    assert _files(disk), "nothing saved"
    second = specengine.compile(scaled, dynamic=True)
    for n in sizes:
        x = torch.randn(n)
        torch.testing.assert_close(second(x, 3), scaled(x, 3), rtol=0, atol=0)
    assert specengine.cache_misses(second) == 0
    assert specengine.cache_hits(second) == len(sizes)
    assert {e.stats["origin"] for e in specengine.cache_entries(second)} == {"disk"}
    assert "loaded from" in specengine.explain(second)
    torch.testing.assert_close(second(torch.ones(2), 4), scaled(torch.ones(2), 4))  # a new int: symbolic
    assert specengine.cache_misses(second) == 0
    torch.testing.assert_close(second(torch.ones(2, 2), 4), scaled(torch.ones(2, 2), 4))  # another rank: a trace
    assert specengine.cache_misses(second) == 1


def test_files_and_directories_are_private(disk):
    specengine.compile(scaled)(torch.ones(2), 2)
    (entry,) = _files(disk)
    assert stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert stat.S_IMODE(entry.parent.stat().st_mode) == 0o700
    key = disk / "cfg" / "specengine" / "cache.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert not str(key).startswith(str(disk / "cache")), "the key must live outside the cache directory"


def test_a_key_file_others_can_read_disables_the_disk_cache(disk):
    specengine.compile(scaled)(torch.ones(2), 2)
    os.chmod(disk / "cfg" / "specengine" / "cache.key", 0o644)
    with pytest.warns(RuntimeWarning, match="mode 644"):
        c = specengine.compile(scaled)
        c(torch.ones(2), 2)
    assert specengine.cache_misses(c) == 1


def test_the_key_from_the_environment_signs_entries(disk, monkeypatch):
    monkeypatch.setenv("SPECENGINE_CACHE_KEY", "ab" * 32)
    specengine.compile(scaled)(torch.ones(2), 2)
    (entry,) = _files(disk)
    data = entry.read_bytes()
    assert signing.decode(data, "entry", bytes.fromhex("ab" * 32))["prologue"]["name"] == "scaled"
    with pytest.raises(signing.Rejected, match="bad signature"):
        signing.decode(data, "entry", bytes.fromhex("cd" * 32))
    monkeypatch.setenv("SPECENGINE_CACHE_KEY", "not hex")
    with pytest.warns(RuntimeWarning, match="not hex"):
        c = specengine.compile(scaled)
        c(torch.ones(2), 2)
    assert specengine.cache_misses(c) == 1


@pytest.mark.parametrize("damage", ["truncate", "flip", "kind", "length"])
def test_the_signed_format_rejects_damage(damage):
    key = b"k" * 32
    data = signing.encode("entry", {"a": [1, 2.5, "x"]}, key)
    assert signing.decode(data, "entry", key) == {"a": [1, 2.5, "x"]}
    if damage == "truncate":
        bad = data[:-10]
    elif damage == "flip":
        bad = data[:40] + bytes([data[40] ^ 1]) + data[41:]
    elif damage == "kind":
        bad = data
        with pytest.raises(signing.Rejected):
            signing.decode(bad, "bundle", key)
        return
    else:
        bad = data.replace(b'"length":', b'"length":1', 1)
    with pytest.raises(signing.Rejected):
        signing.decode(bad, "entry", key)


def test_reads_refuse_links_foreign_modes_and_non_files(tmp_path):
    good = tmp_path / "good.se"
    store.write_atomic(str(tmp_path), "good.se", b"data")
    assert signing.read_private(str(good)) == b"data"
    (tmp_path / "link.se").symlink_to(good)
    with pytest.raises(signing.Rejected):
        signing.read_private(str(tmp_path / "link.se"))
    os.chmod(good, 0o620)
    with pytest.raises(signing.Rejected, match="mode 620"):
        signing.read_private(str(good))
    os.chmod(tmp_path, 0o777)
    with pytest.raises(store.UnsafeDirectory, match="writable by others"):
        store.check_private_dir(str(tmp_path))
    os.chmod(tmp_path, 0o700)


def test_eviction_drops_the_least_recently_used_files_first(tmp_path):
    layout = store.root(str(tmp_path))
    folder = store.private_dir(os.path.join(layout, "p"))
    for i in range(5):
        path = store.write_atomic(folder, f"e{i}.se", b"x" * 100)
        os.utime(path, (1000 + i, 1000 + i))
    store.touch(os.path.join(folder, "e0.se"))  # used just now
    assert store.evict(layout, 350, 100) == 3
    assert sorted(os.listdir(folder)) == ["e0.se", "e4.se"]


def test_code_hashes_leave_out_paths_and_line_numbers():
    src = "def g(x, k=2):\n    y = x + 1\n    return y * k\n"
    here, there = {}, {}
    exec(compile(src, "/home/a/prog.py", "exec"), here)
    exec(compile("\n\n\n" + src, "/opt/b/other.py", "exec"), there)
    assert keys.code_hash(here["g"].__code__) == keys.code_hash(there["g"].__code__)
    assert keys.fingerprint(here["g"]) == keys.fingerprint(there["g"])
    changed = {}
    exec(compile(src.replace("+ 1", "+ 2"), "/home/a/prog.py", "exec"), changed)
    assert keys.code_hash(changed["g"].__code__) != keys.code_hash(here["g"].__code__)
    defaults = types.FunctionType(here["g"].__code__, here, "g", (3,))
    assert keys.fingerprint(defaults) != keys.fingerprint(here["g"])


class _Settings:
    def __init__(self):
        self.factor = 2.0


SETTINGS = _Settings()


def reads_an_object(x):
    return x * SETTINGS.factor


def test_config_objects_read_as_globals_are_compared_field_by_field_at_load(disk):
    c = specengine.compile(reads_an_object)
    torch.testing.assert_close(c(torch.ones(2)), torch.ones(2) * 2)
    assert _files(disk)
    again = specengine.compile(reads_an_object)
    torch.testing.assert_close(again(torch.ones(2)), torch.ones(2) * 2)
    assert specengine.cache_misses(again) == 0
    SETTINGS.factor = 3.0
    try:
        third = specengine.compile(reads_an_object)
        torch.testing.assert_close(third(torch.ones(2)), torch.ones(2) * 3)
        assert specengine.cache_misses(third) == 1
    finally:
        SETTINGS.factor = 2.0


def test_module_hooks_are_saved_by_content_and_a_changed_hook_misses(disk):
    def hooked(scale):
        torch.manual_seed(0)
        net = torch.nn.Linear(2, 2)
        net.register_forward_hook(lambda m, i, o: o * scale)
        return net

    x = torch.ones(3, 2)
    first = specengine.compile(hooked(2.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        first(x)
        assert specengine.cache_entries(first)[0].stats.get("not_saved") is None
        again, other = specengine.compile(hooked(2.0)), specengine.compile(hooked(3.0))
        torch.testing.assert_close(again(x), hooked(2.0)(x), rtol=0, atol=0)
        torch.testing.assert_close(other(x), hooked(3.0)(x), rtol=0, atol=0)  # another closure value: traced
    assert [e.stats["origin"] for e in specengine.cache_entries(again)] == ["disk"]
    assert (specengine.cache_misses(again), specengine.cache_misses(other)) == (0, 1)


class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b


def returns_an_object(x):
    return Pair(x + 1, {"double": x * 2})


def test_outputs_of_their_own_type_are_rebuilt_from_disk(disk):
    c = specengine.compile(returns_an_object)
    c(torch.ones(2))
    assert _files(disk)
    again = specengine.compile(returns_an_object)
    x = torch.arange(2.0)
    out = again(x)
    assert specengine.cache_misses(again) == 0
    assert type(out) is Pair and torch.equal(out.a, x + 1) and torch.equal(out.b["double"], x * 2)


class _Mode(enum.IntEnum):
    A = 2
    B = 3


_ARR = np.array([1.5, -0.0, 2.0], dtype=np.float32)


def _with_typed_constants(x, m):
    return x * m + torch.as_tensor(_ARR)


def _with_a_numpy_scalar(x, s):
    return x * s


def test_enum_members_and_numpy_constants_are_saved_by_type_and_checked_at_load(disk):
    """Constants held by reference (ir/literals.py) and content fingerprints of a user Enum class (prologue/contents.py)
    are saved as typed values and recipes; a new compiled function loads them, and a changed array retraces."""
    cases = (
        (_with_typed_constants, (_Mode.B,)),
        (_with_typed_constants, (_Mode.A,)),
        (_with_a_numpy_scalar, (np.float64(2.5),)),
    )
    for fn, extra in cases:
        c = specengine.compile(fn)
        for n in (0, 1, 2):
            c(torch.ones(n, 3), *extra)
        assert {e.stats.get("not_saved") for e in specengine.cache_entries(c)} == {None}
    for fn, extra in cases:
        again = specengine.compile(fn)
        for n in (0, 1, 2):
            x = torch.randn(n, 3)
            torch.testing.assert_close(again(x, *extra), fn(x, *extra), rtol=0, atol=0)
        assert specengine.cache_misses(again) == 0
        assert {e.stats["origin"] for e in specengine.cache_entries(again)} == {"disk"}
    old = _ARR.copy()
    _ARR[1] = 0.0  # -0.0 -> 0.0: another array for a guard comparing bytes
    try:
        third = specengine.compile(_with_typed_constants)
        x = torch.ones(2, 3)
        torch.testing.assert_close(third(x, _Mode.B), _with_typed_constants(x, _Mode.B), rtol=0, atol=0)
        assert specengine.cache_misses(third) == 1
    finally:
        _ARR[:] = old


def test_the_compiled_functions_own_code_guard_is_kept_in_a_loaded_entry(disk):
    c = specengine.compile(scaled)
    c(torch.ones(2), 3)
    again = specengine.compile(scaled)
    again(torch.ones(2), 3)
    assert specengine.cache_misses(again) == 0
    assert ".__code__ is not _" in str(specengine.last_prologue(again))  # (never dropped)


class Counter:
    def __init__(self):
        self.n = 1


SEEN: list = []


def appends(x, log, d, c):
    log.append(x.shape[0])
    d["sum"] = x.sum()
    c.n = c.n + len(log)
    return x * c.n


def reads_a_global_list(x, log):
    log.append(len(SEEN))
    return x + len(log)


@pytest.mark.parametrize("n", [0, 1, 2])
def test_list_dict_and_object_arguments_and_their_write_backs_are_saved_and_replayed(disk, n):
    def call(fn):
        log, d, c = [7], {"a": 1}, Counter()
        out = fn(torch.arange(float(n)), log, d, c)
        return out, log, d, c.n

    specengine.compile(appends)(*[torch.ones(n), [7], {"a": 1}, Counter()])
    fresh = specengine.compile(appends)
    (out, log, d, cn), (ref, rlog, rd, rcn) = call(fresh), call(appends)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    assert (log, cn, d.keys()) == (rlog, rcn, rd.keys()) and torch.equal(d["sum"], rd["sum"])
    assert (specengine.cache_misses(fresh), specengine.cache_hits(fresh)) == (0, 1)
    assert [e.stats["origin"] for e in specengine.cache_entries(fresh)] == ["disk"]


def test_an_argument_of_a_type_reached_from_outside_is_not_saved_and_explain_names_it(disk):
    c = specengine.compile(reads_a_global_list)
    torch.testing.assert_close(c(torch.ones(2), []), reads_a_global_list(torch.ones(2), []))
    reason = specengine.cache_entries(c)[0].stats["not_saved"]
    assert "the argument log (a list) could be one of the" in reason and "(list among them)" in reason, reason
    assert "reaches from outside its arguments" in reason and "a tuple instead of a list" in reason
    assert "not saved: the argument log (a list)" in specengine.explain(c)
