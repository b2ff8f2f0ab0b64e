"""Hugging Face models across processes (issue 23): a tiny GPT-2 and Llama compiled in one process are served from
disk in a new one with 0 traces, and a module attribute the trace read, changed in the new process, retraces.

Their prologues compare library modules, classes and registries by content (prologue/contents.py); the disk cache
names what those hold by path (persist/places.py). Skipped when transformers is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("transformers")

REPO = Path(__file__).resolve().parent.parent
FAMILIES = ("gpt2", "llama")

PRELUDE = """
import json, os, sys
import torch
torch.set_num_threads(1)
import specengine
from specengine.examples.hf import FAMILIES
R = {}

def run(name):
    family = FAMILIES[name]
    model = family.build()
    cfn = specengine.compile(model)
    inputs = family.inputs(2, 8)
    with torch.no_grad():
        out, ref = cfn(**inputs), model(**inputs)
    R[name] = {"equal": bool(torch.equal(getattr(out, family.output), getattr(ref, family.output))),
               "misses": specengine.cache_misses(cfn), "hits": specengine.cache_hits(cfn),
               "origins": [e.stats.get("origin") for e in specengine.cache_entries(cfn)],
               "not_saved": [e.stats.get("not_saved") for e in specengine.cache_entries(cfn)]}
"""


def _run(tmp: Path, code: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECENGINE_")}
    env.update(SPECENGINE_CACHE_DIR=str(tmp / "cache"), XDG_CONFIG_HOME=str(tmp / "cfg"), SPECENGINE_LOGS="cache",
               HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))  # fmt: skip
    script = PRELUDE + textwrap.dedent(code) + "\nprint('RESULT ' + json.dumps(R))\n"
    p = subprocess.run([sys.executable, "-c", script], cwd=tmp, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    result = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")][-1][len("RESULT ") :])
    result["log"] = p.stderr
    return result


def _why(log: str) -> str:
    """The cache log's lines other than loads (rejections and their reasons), for a failure's message."""
    return "\n".join(ln for ln in log.splitlines() if "] loaded " not in ln)[-6000:]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("hf")
    r = _run(tmp, f"for name in {FAMILIES!r}:\n    run(name)\n")
    for name in FAMILIES:
        assert r[name]["misses"] == 1 and r[name]["equal"], r[name]
        assert r[name]["not_saved"] == [None], (name, r[name]["not_saved"], r["log"][-2000:])
    return tmp


def test_tiny_gpt2_and_llama_are_served_from_disk_with_no_trace(written):
    r = _run(written, f"for name in {FAMILIES!r}:\n    run(name)\n")
    for name in FAMILIES:
        got = (r[name]["misses"], r[name]["hits"], r[name]["origins"])
        assert got == (0, 1, ["disk"]), f"{name}: {got}\n" + _why(r["log"])  # the cache log's rejections, in full
        assert r[name]["equal"]


def test_a_module_attribute_changed_in_the_new_process_retraces(written):
    r = _run(
        written,
        """
        from transformers.models.gpt2 import modeling_gpt2
        original = modeling_gpt2.eager_attention_forward
        modeling_gpt2.eager_attention_forward = lambda *args, **kwargs: original(*args, **kwargs)
        run("gpt2")
        """,
    )
    assert (r["gpt2"]["misses"], r["gpt2"]["origins"]) == (1, ["trace"]), r["log"][-3000:]
    assert r["gpt2"]["equal"]
    assert "eager_attention_forward" in r["log"] and "changed" in r["log"]
