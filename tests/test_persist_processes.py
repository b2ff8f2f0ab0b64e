"""The disk cache across processes (issue 23): a writer process traces and saves; each scenario is a fresh reader
process that imports a copy of the program from another directory, sometimes edited, and must serve from disk with
0 traces, or retrace with results equal to eager, and never run a file it should not trust."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PROG = Path(__file__).resolve().parent / "persist_progs" / "prog.py"

PRELUDE = """
import json, os, sys
import torch
import specengine
import prog
R = {}
X = torch.linspace(-2, 2, 12).reshape(3, 4)

def run(name, cfn, eager, *args):
    out = cfn(*args)
    R[name] = {"equal": bool(torch.equal(out, eager(*args))), "misses": specengine.cache_misses(cfn),
               "hits": specengine.cache_hits(cfn),
               "origins": [e.stats.get("origin") for e in specengine.cache_entries(cfn)],
               "saved": [e.stats["saved_to"] for e in specengine.cache_entries(cfn) if "saved_to" in e.stats] or [None],
               "not_saved": [e.stats.get("not_saved") for e in specengine.cache_entries(cfn)]}

def train(name, dynamic=None):
    net, ref = prog.make_net(), prog.make_net()
    cnet = specengine.compile(net, dynamic=dynamic)
    for _ in range(2):
        cnet(X).square().sum().backward()
        ref(X).square().sum().backward()
    grads = all(torch.equal(a.grad, b.grad) for a, b in zip(net.parameters(), ref.parameters()))
    run(name, cnet, ref, X)
    R[name]["grads_equal"] = grads

def standard():
    run("f", specengine.compile(prog.f), prog.f, X, 3)
    run("k", specengine.compile(prog.k), prog.k, X)
    run("closure", specengine.compile(prog.closure_fn), prog.closure_fn, X)
    net = prog.make_net()
    with torch.no_grad():
        run("net", specengine.compile(net), net, X)
    train("train")
"""


def _env(tmp: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECENGINE_")}
    env.update(SPECENGINE_CACHE_DIR=str(tmp / "cache"), XDG_CONFIG_HOME=str(tmp / "cfg"), SPECENGINE_LOGS="cache")
    env.update(extra)
    return env


def _program(where: Path, edits: dict[str, str] | None = None) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    text = PROG.read_text()
    for old, new in (edits or {}).items():
        assert old in text, old
        text = text.replace(old, new)
    (where / "prog.py").write_text(text)
    return where


def _start(tmp: Path, where: Path, code: str, **env: str) -> subprocess.Popen:
    script = PRELUDE + textwrap.dedent(code) + "\nprint('RESULT ' + json.dumps(R))\n"
    e = _env(tmp, **env)
    e["PYTHONPATH"] = os.pathsep.join([str(REPO), str(where)])
    return subprocess.Popen([sys.executable, "-c", script], cwd=where, env=e, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def _result(p: subprocess.Popen) -> dict:
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-3000:]
    line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1]
    result = json.loads(line[len("RESULT ") :])
    result["log"] = err
    return result


def _run(tmp: Path, where: Path, code: str, **env: str) -> dict:
    return _result(_start(tmp, where, code, **env))


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """A cache written by one process tracing every target of the program."""
    tmp = tmp_path_factory.mktemp("writer")
    r = _run(tmp, _program(tmp / "writer_checkout"), "standard()")
    for name in ("f", "k", "closure", "net", "train"):
        assert r[name]["misses"] == 1 and "trace" in r[name]["origins"], (name, r[name])
        assert r[name]["saved"][0] and r[name]["equal"], (name, r[name], r["log"][-3000:])
    assert r["train"]["grads_equal"]
    return tmp, r


def _copy(written: tuple[Path, dict], tmp: Path) -> Path:
    shutil.copytree(written[0] / "cache", tmp / "cache")
    shutil.copytree(written[0] / "cfg", tmp / "cfg")
    return tmp


def _entry(written: tuple[Path, dict], tmp: Path, name: str) -> Path:
    """The copy, under `tmp`, of the file the writer saved for target `name`."""
    return tmp / Path(written[1][name]["saved"][0]).relative_to(written[0])


def _expect(r: dict, traced: set[str]) -> None:
    for name in ("f", "k", "closure", "net", "train"):
        misses, origin = (1, "trace") if name in traced else (0, "disk")
        assert r[name]["misses"] == misses, (name, r[name], r["log"][-2000:])
        assert r[name]["equal"], (name, r[name])
        assert origin in r[name]["origins"], (name, r[name])
    assert r["train"]["grads_equal"]


def test_a_new_process_serves_every_entry_from_disk_with_no_trace(written, tmp_path):
    tmp = _copy(written, tmp_path)
    r = _run(
        tmp,
        _program(tmp / "elsewhere" / "checkout"),
        """
        standard()
        R["z3"] = "z3" in sys.modules
    """,
    )
    _expect(r, set())
    for name in ("f", "k", "closure", "net", "train"):
        assert set(r[name]["origins"]) == {"disk"} and r[name]["hits"] == (3 if name == "train" else 1)
    assert not r["z3"], "the load path imported z3"


def test_edited_code_closures_and_modules_retrace(written, tmp_path):
    tmp = _copy(written, tmp_path)
    edits = {"return helper(torch.relu(x)) * n + 1": "return helper(torch.relu(x)) * n + 2",  # the compiled fn
             "return torch.tanh(self.fc(x))": "return torch.sigmoid(self.fc(x))",  # a submodule's forward
             "closure_fn = make_closure(3.0)": "closure_fn = make_closure(4.0)"}  # fmt: skip
    r = _run(tmp, _program(tmp / "reader", edits), "standard()")
    _expect(r, {"f", "closure", "net", "train"})
    assert "changed" in r["log"] or "differs" in r["log"]


def test_edited_helpers_and_globals_retrace(written, tmp_path):
    tmp = _copy(written, tmp_path)
    edits = {"return x * 3.0": "return x * 3.5", "SCALE = 2.0": "SCALE = 5.0"}  # a helper the trace ran; a global
    r = _run(tmp, _program(tmp / "reader", edits), "standard()")
    _expect(r, {"f", "k"})
    assert "the code of prog:helper changed" in r["log"]


def test_another_torch_version_retraces(written, tmp_path):
    tmp = _copy(written, tmp_path)
    r = _run(tmp, _program(tmp / "reader"), "torch.__version__ = '0.0.1+other'\nstandard()")
    _expect(r, {"f", "k", "closure", "net", "train"})


def test_truncated_flipped_and_garbage_files_are_misses_and_are_rewritten(written, tmp_path):
    tmp = _copy(written, tmp_path)
    files = {name: _entry(written, tmp, name) for name in ("f", "k", "closure", "net")}
    data = files["f"].read_bytes()
    files["f"].write_bytes(data[: len(data) // 2])
    flipped = bytearray(files["k"].read_bytes())
    flipped[len(flipped) // 2] ^= 0x01
    files["k"].write_bytes(bytes(flipped))
    files["closure"].write_bytes(os.urandom(300))
    files["net"].write_bytes(b"")
    r = _run(tmp, _program(tmp / "reader"), "standard()")
    _expect(r, {"f", "k", "closure", "net"})
    assert "truncated" in r["log"] and "bad signature" in r["log"] and "bad magic" in r["log"]
    again = _run(tmp, _program(tmp / "reader2"), "standard()")  # the retraces wrote good entries in their place
    _expect(again, set())


def _inject(path: Path, step: str, key: bytes | None) -> None:
    """Add a step to the prologue of a saved entry and sign it again with `key` (None: keep the old signature)."""
    from specengine.persist import signing  # noqa: PLC0415 - test helper

    data = path.read_bytes()
    body = json.loads(data.split(b"\n", 2)[2][:-66])
    body["prologue"]["steps"].insert(0, step)
    if key is None:
        path.write_bytes(data.split(b"\n", 2)[0] + b"\n" + data.split(b"\n", 2)[1] + b"\n"
                         + json.dumps(body).encode() + data[-66:])  # fmt: skip
    else:
        path.write_bytes(signing.encode("entry", body, key))


def test_files_that_are_not_trusted_are_never_run(written, tmp_path):
    tmp = _copy(written, tmp_path)
    seed_step = "torch.manual_seed(4321)"
    _inject(_entry(written, tmp, "f"), seed_step, b"another key, not the user's one")  # signed with another key
    _inject(_entry(written, tmp, "k"), seed_step, None)  # edited after signing
    key = bytes.fromhex((tmp / "cfg" / "specengine" / "cache.key").read_text().strip())
    _inject(_entry(written, tmp, "closure"), "__import__('os').getpid()", key)  # signed, yet not engine code
    os.chmod(_entry(written, tmp, "net"), 0o666)  # writable by others
    foreign = _entry(written, tmp, "train")
    if os.geteuid() == 0:
        os.chown(foreign, 12345, 12345)  # owned by another user
    else:
        foreign.write_bytes(b"")
    r = _run(tmp, _program(tmp / "reader"), "standard()\nR['seed'] = torch.initial_seed()")
    _expect(r, {"f", "k", "closure", "net", "train"})
    assert r["seed"] != 4321
    assert "bad signature" in r["log"] and "names '__import__'" in r["log"] and "mode 666" in r["log"]


def test_a_directory_writable_by_others_is_not_used(written, tmp_path):
    tmp = _copy(written, tmp_path)
    os.chmod(tmp / "cache", 0o777)
    r = _run(tmp, _program(tmp / "reader"), "standard()")
    _expect(r, {"f", "k", "closure", "net", "train"})
    assert "writable by others" in r["log"]
    assert all(not r[n]["saved"][0] for n in ("f", "k")), "wrote into an unsafe directory"


def test_concurrent_writers_leave_a_cache_a_third_process_loads(tmp_path):
    bound = 400_000
    procs = [_start(tmp_path, _program(tmp_path / f"w{i}"), "standard()", SPECENGINE_CACHE_MAX_BYTES=str(bound))
             for i in range(2)]  # fmt: skip
    for p in procs:
        _result(p)
    r = _run(tmp_path, _program(tmp_path / "reader"), "standard()")
    _expect(r, set())
    total = sum(p.stat().st_size for p in (tmp_path / "cache").rglob("*.se"))
    assert total <= bound
    assert not list((tmp_path / "cache").rglob("*.tmp"))


def test_automatic_dynamic_decisions_persist(tmp_path):
    where = _program(tmp_path / "w")
    code = textwrap.dedent("""
        c = specengine.compile(prog.k)
        for n in SIZES:
            assert torch.equal(c(torch.ones(n, 2)), prog.k(torch.ones(n, 2)))
        R["misses"] = specengine.cache_misses(c)
    """)
    assert _run(tmp_path, where, "SIZES = (3, 4)\n" + code)["misses"] == 2
    for entry in (tmp_path / "cache").rglob("*.se"):
        if entry.name != "dynamic.se":
            entry.unlink()  # keep only the decisions: the next process traces, dynamic from its first call
    assert _run(tmp_path, _program(tmp_path / "r"), "SIZES = (5, 6, 0, 1, 2)\n" + code)["misses"] == 1


def test_bundles_and_the_command_line(written, tmp_path):
    tmp = _copy(written, tmp_path)
    r = _run(
        tmp,
        _program(tmp / "reader"),
        """
        from specengine.persist import store
        R["saved"] = specengine.save_cache(os.path.join(os.getcwd(), "bundle.sec"))
        R["cleared"] = store.clear(os.environ["SPECENGINE_CACHE_DIR"])
        R["loaded"] = specengine.load_cache(os.path.join(os.getcwd(), "bundle.sec"))
        standard()
    """,
    )
    assert r["saved"] == r["cleared"] == r["loaded"] == 5
    _expect(r, set())
    env = _env(tmp)
    env["PYTHONPATH"] = str(REPO)
    cli = [sys.executable, "-m", "specengine", "cache"]
    info = subprocess.run([*cli, "--info", str(tmp / "cache")], env=env, capture_output=True, text=True, check=True)
    assert "programs: 4, entries: 5" in info.stdout, info.stdout
    clear = subprocess.run([*cli, "--clear", str(tmp / "cache")], env=env, capture_output=True, text=True, check=True)
    assert "removed 5 files" in clear.stdout
    assert not list((tmp / "cache").rglob("*.se"))


def test_a_module_of_a_class_made_in_a_function_held_in_a_dict_attribute(tmp_path):
    """Its class is found as the type of the module at its path, its forward's closure on that class, the code it
    wraps inside it: served from disk with 0 traces, for sizes 0, 1, 2; an edit of the wrapped code retraces."""
    code = textwrap.dedent("""
        m = prog.make_rotating()
        c = specengine.compile(m, dynamic=True)
        with torch.no_grad():
            for n in (2, 0, 1):
                assert torch.equal(c(torch.ones(n, 4) * n), m(torch.ones(n, 4) * n))
            run("rot", c, m, X)
    """)
    first = _run(tmp_path, _program(tmp_path / "w"), code)["rot"]
    assert first["misses"] == 1 and first["saved"][0] and first["equal"], (first, first.get("not_saved"))
    again = _run(tmp_path, _program(tmp_path / "r"), code)
    assert (again["rot"]["misses"], again["rot"]["hits"], again["rot"]["origins"]) == (0, 4, ["disk"]), again["log"]
    edited = _run(tmp_path, _program(tmp_path / "e", {"-x[..., 1:]": "-2 * x[..., 1:]"}), code)
    assert edited["rot"]["misses"] == 1 and edited["rot"]["equal"], edited["log"][-2000:]
    assert "rotate changed" in edited["log"] or "not found" in edited["log"], edited["log"][-2000:]
