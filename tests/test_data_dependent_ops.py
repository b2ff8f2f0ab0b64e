"""Data-dependent ops (issue 14) over sweeps of data: one compile per sweep, results equal to eager, and the
run-time checks' errors (type and the user's line) for a call whose data contradicts a decision."""

from __future__ import annotations

import pytest
import torch
from helpers import counts, run_both

import specengine
from specengine.examples import data_dependent as dd

SIZES = (0, 1, 2, 7)


def _ints(n: int, high: int, seed: int) -> torch.Tensor:
    return torch.randint(0, high, (n,), generator=torch.Generator().manual_seed(seed))


def _data(n: int) -> list[torch.Tensor]:
    """Int tensors of n elements: all equal, few distinct values, all distinct (mostly)."""
    return [torch.zeros(n, dtype=torch.long), _ints(n, 3, n), _ints(n, 1000, n + 1)]


def _sweep(fn, calls) -> specengine.CompiledFunction:
    cfn = specengine.compile(fn, dynamic=True)
    for args in calls:
        run_both(fn, cfn, list(args))
    return cfn


def _once(cfn, calls) -> None:
    assert counts(cfn) == (1, len(calls) - 1), specengine.recompile_reasons(cfn)


UNIQUE = [
    ("sorted", lambda x: torch.unique(x)),
    ("counts", lambda x: torch.unique(x, return_counts=True)),
    ("inverse", lambda x: torch.unique(x, return_inverse=True)),
    ("inverse and counts", lambda x: torch.unique(x, sorted=True, return_inverse=True, return_counts=True)),
    ("method", lambda x: x.unique(return_counts=True)[1] * 2),
    ("consecutive", lambda x: torch.unique_consecutive(x, return_counts=True)),
]


@pytest.mark.parametrize("fn", [f for _, f in UNIQUE], ids=[n for n, _ in UNIQUE])
def test_unique_over_data_and_sizes(fn):
    calls = [(x,) for n in SIZES for x in _data(n)]
    _once(_sweep(fn, calls), calls)


def test_unique_rows():
    def f(x):
        values, inverse, counts = torch.unique(x, dim=0, return_inverse=True, return_counts=True)
        return values.sum(1), inverse, counts

    calls = [(x.view(-1, 2) % 2,) for n in (0, 2, 6) for x in _data(2 * n)]
    _once(_sweep(f, calls), calls)


def test_unique_counts_feed_a_reduction():
    def f(x):
        values, counts = torch.unique(x, return_counts=True)
        return (values * counts).sum(), counts.float().mean()

    calls = [(x,) for n in (1, 2, 7) for x in _data(n)]
    _once(_sweep(f, calls), calls)


def test_repeat_interleave_with_tensor_repeats():
    def f(x, r):
        return torch.repeat_interleave(x, r, dim=0) * 2

    calls = [(torch.randn(n, 3), r) for n in SIZES for r in (_ints(n, 1, 0), _ints(n, 3, n), torch.full((n,), 2))]
    _once(_sweep(f, calls), calls)


def test_repeat_interleave_of_repeats_alone():
    def f(r):
        return torch.repeat_interleave(r) + 1  # [0]*r[0] + [1]*r[1] + ...

    calls = [(r,) for n in SIZES for r in (_ints(n, 1, 0), _ints(n, 4, n))]
    _once(_sweep(f, calls), calls)


def test_topk_with_k_from_item():
    def f(x, k):
        values, indices = x.topk(k.item())
        return values.sum(0), indices

    calls = [(torch.randn(5, 4), torch.tensor(k)) for k in (0, 1, 2, 4)]
    cfn = _sweep(f, calls)
    _once(cfn, calls)
    with pytest.raises(RuntimeError):  # k > the dim's size: a run-time check, as eager raises
        cfn(torch.randn(5, 4), torch.tensor(5))
    assert specengine.cache_misses(cfn) == 1


def test_arange_of_item():
    calls = [(torch.tensor(n),) for n in (3, 0, 1, 2, 9)]
    cfn = _sweep(dd.arange_item, calls)
    _once(cfn, calls)
    with pytest.raises(RuntimeError):  # eager: "upper bound and lower bound inconsistent with step sign"
        cfn(torch.tensor(-2))
    assert specengine.cache_misses(cfn) == 1


def test_split_by_counts_tolist():
    def f(x, counts):
        return [piece.sum(0) for piece in x.split(counts.tolist())]

    calls = [(torch.randn(6, 2), torch.tensor(c)) for c in ([6, 0, 0], [2, 2, 2], [0, 1, 5], [0, 0, 6])]
    cfn = _sweep(f, calls)
    _once(cfn, calls)


def test_split_counts_that_do_not_sum_to_the_dim_raise_as_eager_does():
    def f(x, counts):
        return x.split(counts.tolist())

    cfn = specengine.compile(f, dynamic=True)
    cfn(torch.randn(6, 2), torch.tensor([1, 2, 3]))
    for bad in ([1, 2, 2], [4, 4, -2]):
        run_both(f, cfn, [torch.randn(6, 2), torch.tensor(bad)])  # RuntimeError, as eager
    assert specengine.cache_misses(cfn) == 1
    assert "prims.check_sym(u0 + u1 + u2 == s0" in str(specengine.last_traces(cfn)[-1])  # asserted after the split


def test_a_size_oblivious_decision_the_data_contradicts_is_its_own_entry():
    def f(x):
        return torch.unique(x).squeeze(0) * 2  # speculates the unique count is not 1 (else squeeze changes the rank)

    cfn = specengine.compile(f, dynamic=True)
    for x in (torch.tensor([3, 1, 3]), torch.tensor([], dtype=torch.long), torch.tensor([5, 6])):
        run_both(f, cfn, [x])
    assert specengine.cache_misses(cfn) == 1
    for x in (torch.tensor([4, 4]), torch.tensor([7]), torch.tensor([1, 2])):  # one unique value: a 0-d result
        run_both(f, cfn, [x])
    assert (specengine.cache_misses(cfn), specengine.cache_hits(cfn)) == (2, 4)  # (the call that misspeculated: a miss)


def test_bincount_through_the_generic_path():
    def f(x, w):
        return torch.bincount(x), torch.bincount(x, w, minlength=4)

    calls = [(x, torch.rand(n)) for n in (1, 2, 7) for x in _data(n)[:2]]
    _once(_sweep(f, calls), calls)


MASKED = [dd.masked_sum, dd.masked_scale_reduce, dd.nonzero_index_select]


@pytest.mark.parametrize("fn", MASKED, ids=[f.__name__ for f in MASKED])
def test_masks_of_every_density(fn):
    calls = [(torch.randn(n, 3) if fn is not dd.masked_sum else torch.randn(n), m)
             for n in SIZES for m in dd.mask_sweep(n, seed=n)]  # fmt: skip
    _once(_sweep(fn, calls), calls)


def test_moe_routing_compiles_once_over_routings_and_matches_eager():
    torch.manual_seed(0)
    model = dd.TopKRouting(dim=8, n_experts=4, k=2).eval()
    calls = [(x,) for t in (16, 5, 1) for x in dd.routing_sweep(model, t, seed=t)]
    cfn = specengine.compile(model, dynamic=True)
    with torch.no_grad():
        for args in calls:
            run_both(model, cfn, list(args))
    _once(cfn, calls)


MIXED_MASKS = [
    ("x[:, m]", lambda x, m: x[:, m] * 2, lambda n, m: (torch.randn(3, n), m)),
    ("x[m, 1:]", lambda x, m: x[m, 1:], lambda n, m: (torch.randn(n, 3), m)),
    ("x[m, 0]", lambda x, m: x[m, 0].sum(), lambda n, m: (torch.randn(n, 3), m)),
    ("index_put", lambda x, m: x.index_put((m,), torch.tensor(1.0)), lambda n, m: (torch.randn(n), m)),
]


@pytest.mark.parametrize("fn", [c[1] for c in MIXED_MASKS], ids=[c[0] for c in MIXED_MASKS])
def test_masks_mixed_with_other_indices_take_torchs_fake_rules(fn):
    make = {id(c[1]): c[2] for c in MIXED_MASKS}[id(fn)]
    # the largest size first: torch's index kernel asks guard_or_false(numel == 0), which an empty first call
    # answers with a guard (a second entry for empty inputs)
    calls = [(make(n, m)[0], m) for n in (7, 0, 1, 2) for m in dd.mask_sweep(n, seed=n)[:3]]
    _once(_sweep(fn, calls), calls)


def test_unique_inverse_and_counts_feed_indexing():
    def f(x):
        values, inverse, counts = torch.unique(x, return_inverse=True, return_counts=True)
        return values[inverse] - x, values[counts.argmax()], x.bincount().argmax()

    calls = [(x,) for n in (1, 2, 7) for x in _data(n)]
    _once(_sweep(f, calls), calls)


def test_detection_post_processing_keeps_the_top_k_of_what_a_threshold_keeps():
    def f(scores, boxes):
        keep = scores > 0.5
        kept, kept_boxes = scores[keep], boxes[keep]
        top, idx = kept.topk(torch.sym_min(3, kept.shape[0]))  # symbolic: min(3, u0)
        return kept_boxes[idx], top

    calls = [(torch.rand(n, generator=torch.Generator().manual_seed(n)), torch.randn(n, 4)) for n in (9, 0, 1, 2, 5)]
    _once(_sweep(f, calls), calls)


def test_sym_min_and_max_of_int_inputs_are_symbolic():
    def f(x, n):
        return x[: torch.sym_max(torch.sym_min(n, 4), 1)] * 2

    calls = [(torch.randn(6), n) for n in (3, 7, 0, 2)]
    cfn = _sweep(f, calls)
    _once(cfn, calls)
