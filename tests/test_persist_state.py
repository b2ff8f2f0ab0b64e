"""The disk cache across processes (issue 23) for programs with state: module attributes that `forward` assigns
(replayed from disk after every call, as eager assigns them) and tensors closed over from outside (found again at
their place in the new process, their current values read); an argument that could be an object reached from
outside is not saved, with the reason. Each scenario is a fresh process importing the program from its own
directory (tests/test_persist_processes.py's helpers)."""

from __future__ import annotations

import textwrap

from test_persist_processes import _program, _run

COUNTER = """
def counter(name="counter", before=None):
    m, ref = prog.make_counter(), prog.make_counter()
    if before:
        before(m), before(ref)
    c, same = specengine.compile(m), []
    for n in (2, 2, 0, 1, 2):
        x = torch.linspace(-1, 1, 4 * n).reshape(n, 4)
        same.append(bool(torch.equal(c(x), ref(x))) and m.steps == ref.steps and bool(torch.equal(m.last, ref.last))
                    and bool(torch.equal(m.running, ref.running)))
    R[name] = {"same": same, "misses": specengine.cache_misses(c), "hits": specengine.cache_hits(c),
                    "origins": [e.stats.get("origin") for e in specengine.cache_entries(c)],
                    "not_saved": [e.stats.get("not_saved") for e in specengine.cache_entries(c)]}
"""


def test_module_attribute_writes_are_replayed_from_disk(tmp_path):
    w = _run(tmp_path, _program(tmp_path / "writer"), COUNTER + "counter()")["counter"]
    assert all(w["same"]) and w["misses"] >= 1 and w["not_saved"] == [None] * len(w["origins"]), w
    r = _run(tmp_path, _program(tmp_path / "reader"), COUNTER + "counter()")["counter"]
    assert all(r["same"]) and r["misses"] == 0 and r["hits"] == 5 and set(r["origins"]) == {"disk"}, r
    # in one new process: another step count is a symbolic input (served); another gain must retrace
    both = """
        counter("steps", lambda m: setattr(m, "steps", 7))
        counter("gain", lambda m: setattr(m, "gain", 2.0))
    """
    r = _run(tmp_path, _program(tmp_path / "r2"), COUNTER + textwrap.dedent(both))
    assert all(r["steps"]["same"]) and r["steps"]["misses"] == 0, r["steps"]
    assert all(r["gain"]["same"]) and r["gain"]["misses"] >= 1, r["gain"]
    assert "the module structure differs: self.gain" in r["log"]


CLOSED = """
def closed():
    for name in ("from_table", "from_holder", "listed_fn"):
        for n in (2, 0, 1):
            x = torch.linspace(-1, 1, 4 * n).reshape(n, 4)
            run(name, specengine.compile(getattr(prog, name)), getattr(prog, name), x)
"""


def _closed(r: dict, misses: int) -> None:
    for name in ("from_table", "from_holder", "listed_fn"):
        assert r[name]["equal"] and r[name]["misses"] == misses, (name, r[name], r["log"][-2000:])
        assert r[name]["not_saved"] == [None] * len(r[name]["not_saved"]), (name, r[name])


def test_tensors_closed_over_from_outside_are_read_from_disk(tmp_path):
    code = CLOSED + "closed()\nrun('count_of', specengine.compile(prog.count_of), prog.count_of, X, [1, 2])"
    w = _run(tmp_path, _program(tmp_path / "writer"), code)
    _closed(w, 1)
    assert "the argument lst (a list) could be one of the" in w["count_of"]["not_saved"][0], w["count_of"]
    # new values at the same places (rebound, changed in place): read by the computation, served from disk
    values = """
        prog.TABLE["w"] = torch.full((4,), 7.0)
        prog.HOLDER.w.mul_(-2)
        prog.box[0] = torch.ones(4)
        closed()
    """
    _closed(_run(tmp_path, _program(tmp_path / "r2"), CLOSED + textwrap.dedent(values)), 0)
    # another shape or dtype at those places: each entry misses, and the retrace is right
    shapes = """
        prog.TABLE["w"] = torch.ones(1, 4)
        prog.HOLDER.w = torch.ones(4, dtype=torch.float64)
        prog.box[0] = torch.ones(1, 4)
        closed()
    """
    r = _run(tmp_path, _program(tmp_path / "r3"), CLOSED + textwrap.dedent(shapes))
    _closed(r, 1)
    assert "a tensor closed over from outside changed" in r["log"]
