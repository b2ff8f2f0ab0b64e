"""Indexed dispatch, and replacement of entries that a newer entry subsumes."""

from __future__ import annotations

import pytest
import torch
from helpers import counts, guards, run_both

import specengine
from specengine.constraints.solver import Solver


def f(a, b):
    return a * b


def test_entries_pinning_values_are_found_through_the_index():
    cfn = specengine.compile(f, dynamic=False)
    shapes = [(k, 3) for k in range(20)]
    for s in shapes:
        run_both(f, cfn, [torch.randn(*s), torch.randn(*s)])
    assert counts(cfn) == (20, 0)
    cache = cfn._cache
    assert len(cache.indexes) == 1 and cache.scan == ()
    ((key_fn, index),) = cache.indexes
    assert len(index) == 20
    # Only the entry under the matching key may run: break every other entry's prologue.
    target = specengine.cache_entries(cfn)[7]

    def boom(*args, **kwargs):
        raise AssertionError("dispatch ran a prologue the index ruled out")

    for values in list(index):
        if index[values][0][2] is not target:
            index[values] = ((boom, None, None),)
    a, b = torch.randn(7, 3), torch.randn(7, 3)
    torch.testing.assert_close(cfn(a, b), a * b)
    assert counts(cfn) == (20, 1) and specengine.last_prologue(cfn) is target.prologue


def test_index_key_skips_inputs_of_another_structure():
    cfn = specengine.compile(f, dynamic=False)
    run_both(f, cfn, [torch.randn(2, 3), torch.randn(2, 3)])
    run_both(f, cfn, [torch.randn(2, 3), 2.0])  # b has no .shape: the index key fails, dispatch goes on
    run_both(f, cfn, [torch.randn(2, 3), 2.0])
    assert counts(cfn) == (2, 1)
    src = specengine.cache_entries(cfn)[0].index[0]
    assert "a_shape = a.shape" in src and "b_shape = b.shape" in src


def test_dynamic_entries_are_scanned():
    cfn = specengine.compile(f, dynamic=True)
    run_both(f, cfn, [torch.randn(2, 3), torch.randn(2, 3)])
    assert cfn._cache.indexes == () and len(cfn._cache.scan) == 1


def test_a_new_entry_that_subsumes_an_old_one_replaces_it(monkeypatch):
    def g(x):
        return x * 2 if x.shape[0] > 2 else x

    cfn = specengine.compile(g, dynamic=True)
    real_solve = Solver.solve
    monkeypatch.setattr(Solver, "solve", Solver.full_specialization)  # what a z3 failure gives
    run_both(g, cfn, [torch.randn(4)])  # fully specialized, x.shape[0] == 4
    assert guards(cfn) == ["x.shape[0] == 4"]
    monkeypatch.setattr(Solver, "solve", real_solve)
    run_both(g, cfn, [torch.randn(5)])  # x.shape[0] > 2 subsumes x.shape[0] == 4
    assert counts(cfn) == (2, 0)
    (entry,) = specengine.cache_entries(cfn)
    assert [str(g) for g in entry.guards] == ["x.shape[0] > 2"]
    run_both(g, cfn, [torch.randn(4)])
    assert counts(cfn) == (2, 1)


@pytest.mark.parametrize("dynamic", [True, False])
def test_disjoint_entries_are_kept(dynamic):
    def g(x):
        return x * 2 if x.shape[0] > 2 else x

    cfn = specengine.compile(g, dynamic=dynamic)
    for n in (4, 1, 0, 2):
        run_both(g, cfn, [torch.randn(n)])
    assert len(specengine.cache_entries(cfn)) == specengine.cache_misses(cfn) == (2 if dynamic else 4)
