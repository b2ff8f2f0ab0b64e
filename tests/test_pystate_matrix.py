"""Issue 22's read set, by generator: programs reading each object kind from each place, in each way, with each
change between calls (`tests/pystate_gen.py`), under the three dynamic modes against eager, with exact miss counts
(an equal object built anew hits; a change and its undo hits the first entry again; a changed read misses or is
refused). CI runs a seeded sample that covers every (kind, read, change) cell it can; `bench/pystate_matrix.py` runs
all of them and writes docs/python-semantics.md's tables.
"""

from __future__ import annotations

import os
import re
import warnings

import pytest
from pystate_gen import CHANGES, KINDS, PLACES, READS, Case, all_cases, run_case, sample

SAMPLE = 480  # x 3 modes; about 25 s of CPU (2 min on the loaded 2-core machine)
_DOCS = os.path.join(os.path.dirname(__file__), "..", "docs", "python-semantics.md")


@pytest.mark.parametrize("chunk", range(6))
def test_sampled_programs_match_eager_with_exact_misses(chunk):
    warnings.simplefilter("ignore")
    cases = sample(SAMPLE, seed=22)[chunk::6]
    failures = [f"{c.name}: {out}\n{c.source()}" for c in cases if (out := run_case(c)).startswith("FAIL")]
    assert not failures, failures[0]


def test_the_generator_covers_every_kind_place_read_and_change():
    cases = all_cases()
    assert {c.kind for c in cases} == set(KINDS)
    assert {c.place for c in cases} == set(PLACES)
    assert {c.read for c in cases} == set(READS)
    assert {c.change for c in cases} == set(CHANGES)
    for c in cases[:: max(1, len(cases) // 200)]:  # every program is valid Python
        c.namespace()
    assert len(sample(SAMPLE, seed=22)) == SAMPLE


def test_the_docs_tables_name_the_generators_rows_and_columns():
    with open(_DOCS) as f:
        doc = f.read()
    body = doc[doc.index("<!-- pystate-matrix:begin -->") : doc.index("<!-- pystate-matrix:end -->")]
    assert "| read \\ change | " + " | ".join(CHANGES) + " |" in body
    assert set(re.findall(r"^\*\*(\w+)\*\*$", body, re.M)) == set(KINDS)
    assert set(re.findall(r"^\| (\w+) \|", body, re.M)) <= set(READS)


def test_a_case_prints_as_a_runnable_module():
    c = Case("partial", "closure", "call", "anew")
    assert "functools.partial" in c.source() and "def f(x)" in c.source()
    assert c.namespace()["f"] is not None
