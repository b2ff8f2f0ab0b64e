"""The generic op path: torch's meta kernels on SymInts over our nodes (specengine/ir/symnode.py, ops/generic.py).

The SymNode protocol is tested directly (arithmetic, constants, decisions with provenance, pins counted); then
ops without a hand-written rule are swept over sizes 0, 1, 2 and larger against eager, with exact miss counts.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers import counts, guards, run_both

import specengine
from specengine.constraints import expr as E
from specengine.constraints.decide import Decider
from specengine.ir import kernel_decisions as K
from specengine.ir import shape_env as SE
from specengine.ir import symnode as S
from specengine.ir.context import tracing
from specengine.ir.recording import NameGen, TraceState


@pytest.fixture
def state():
    decider = Decider({"s0": 5, "s1": 3, "s2": 1}, {"s0": (0, None), "s1": (0, None), "s2": (0, None)})
    st = TraceState(decider, NameGen())
    with tracing(st):
        yield st


def _si(name: str):
    return S.symint(E.sym(name))


def test_arithmetic_is_canonical_and_records_nothing(state):
    a, b = _si("s0"), _si("s1")
    assert S.expr_of(a + b * 2 - 1) is E.sub(E.add(E.sym("s0"), E.mul(E.sym("s1"), 2)), 1)
    assert S.expr_of(-a) is E.neg(E.sym("s0"))
    assert S.expr_of(torch.sym_max(a, b)) is E.maximum(E.sym("s0"), E.sym("s1"))
    assert S.expr_of(torch.sym_min(a, 3)) is E.minimum(E.sym("s0"), 3)
    assert S.expr_of(a**2) is E.mul(E.sym("s0"), E.sym("s0"))
    assert S.expr_of(torch.sym_sum([a, b, 4])) is E.add(E.add(E.sym("s0"), E.sym("s1")), 4)
    assert S.expr_of(a * 0 + 7) is E.const(7)
    assert str(a) == "s0" and isinstance(a + 0, torch.SymInt)
    assert state.decider.constraints == []


def test_division_checks_the_divisor_and_floors(state):
    a, b = _si("s0"), _si("s1")
    assert S.expr_of(a // b) is E.floordiv(E.sym("s0"), E.sym("s1"))
    assert S.expr_of(a % 2) is E.mod(E.sym("s0"), 2)
    assert [str(c.expr) for c in state.decider.constraints] == ["s1 != 0"]


def test_decisions_become_constraints_with_provenance(state):
    a, b = _si("s0"), _si("s1")
    with K.running_op("torch.foo"):
        assert bool(a > b)
        assert not (a == 1)
    recorded = state.decider.constraints
    assert [str(c.expr) for c in recorded] == ["s0 > s1", "s0 != 1"]
    assert recorded[0].provenance.op == "torch.foo"
    assert recorded[0].provenance.where.startswith("test_generic_ops.py:")
    assert "s0 > s1" in recorded[0].provenance.reason
    assert bool(a > b)  # implied: decided again without a second constraint
    assert len(state.decider.constraints) == 2


def test_guard_int_pins_and_is_counted(state):
    K.PINS.clear()
    with K.running_op("torch.bar"):
        assert int(_si("s0")) == 5
        assert float(_si("s1")) == 3.0  # sym_float pins too
    assert [str(c.expr) for c in state.decider.constraints] == ["s0 == 5", "s1 == 3"]
    assert K.pin_report() == {"torch.bar": 2}


@pytest.mark.filterwarnings("ignore:guard_size_oblivious")
def test_statically_known_true_and_guard_or_false(state):
    from torch.fx.experimental.symbolic_shapes import guard_or_false, guard_size_oblivious, statically_known_true

    a = _si("s0")
    assert not statically_known_true(a > 2)  # not implied: answered False, nothing recorded
    assert state.decider.constraints == []
    assert statically_known_true(a >= 0)  # implied by the range
    assert guard_or_false(a > 2)  # decided: recorded
    assert statically_known_true(a > 2)
    assert guard_size_oblivious(_si("s2") == 1)  # our sizes are backed: an ordinary decision
    assert [str(c.expr) for c in state.decider.constraints] == ["s0 > 2", "s2 == 1"]


def test_constants_and_state_queries(state):
    a = _si("s0")
    node = a.node
    assert node.is_int() and node.is_symbolic() and not node.is_constant() and node.has_hint()
    assert node.maybe_as_int() is None and node.hint == 5
    c = node.wrap_int(4)
    assert c.is_constant() and c.maybe_as_int() == 4 and c.constant_int() == 4
    assert node.wrap_bool(True).maybe_as_bool() is True
    assert node.wrap_float(0.5).maybe_as_float() == 0.5
    assert S.symint(E.const(3)) == 3 and type(S.symint(E.const(3))) is int


def test_layout_predicates_record_nothing(state):
    from torch._prims_common import compute_elementwise_output_strides, is_contiguous

    m = torch.empty([_si("s0"), _si("s1")], device="meta")
    assert is_contiguous(m) and not is_contiguous(m.t())  # torch's Python layout predicates: by the hints
    assert str(compute_elementwise_output_strides(m.t())[1]) == "max(1, s1)"
    node, sizes, strides = m.shape[0].node, list(m.shape), list(m.stride())
    assert node.is_contiguous(sizes, strides).maybe_as_bool() is True  # the C++ protocol's predicates too
    assert node.is_contiguous(sizes[::-1], strides).maybe_as_bool() is False
    assert state.decider.constraints == []


def test_unbacked_sizes_from_the_shape_env(state):
    from torch.fx.experimental.symbolic_shapes import _constrain_range_for_size, has_free_unbacked_symbols

    u = S.SHAPE_ENV.create_unbacked_symint()  # what torch's fake rules ask for
    name = str(u)
    assert name in state.decider.unbacked.symbols and has_free_unbacked_symbols(u)
    _constrain_range_for_size(u, max=7)
    info = state.decider.unbacked.symbols[name]
    assert (info.lo, info.hi) == (0, 7) and info.size_like
    assert (u >= 0).node.statically_known_true() and (u <= 7).node.statically_known_true()
    assert not (u >= 1).node.guard_or_false()  # not provable: the safe default, no check
    assert state.decider.constraints == [] and state.pending == []
    with pytest.raises(SE.DataDependentError):
        S.SHAPE_ENV.create_unbacked_symbool()


# Ops through the generic path, against eager, with exact miss counts.

SIZES = [0, 1, 2, 5]


def _sweep(fn, make, sizes=SIZES):
    def call(*args):
        return fn(*args)

    cfn = specengine.compile(call, dynamic=True)
    for n in sizes:
        run_both(fn, cfn, make(n))
    return cfn


CASES = [
    # name, fn, inputs for size n, expected misses over SIZES
    ("acos", torch.acos, lambda n: [torch.rand(n, 3)], 1),
    ("tan method", lambda a: a.tan(), lambda n: [torch.randn(n, 3)], 1),
    ("sinh", torch.sinh, lambda n: [torch.randn(3, n)], 1),
    ("leaky_relu", lambda a: F.leaky_relu(a, 0.2), lambda n: [torch.randn(n, 2)], 1),
    ("elu", F.elu, lambda n: [torch.randn(2, n)], 1),
    ("sort", lambda a: torch.sort(a, 0), lambda n: [torch.randn(n, 3)], 1),
    ("cumprod", lambda a: torch.cumprod(a, 1), lambda n: [torch.randn(3, n)], 1),  # (its `== 0`/`== 1` tests: guard_or_false)
    ("diagonal", lambda a: a.diagonal(), lambda n: [torch.randn(n, 3)], 1),
    ("pad", lambda a: F.pad(a, (1, 2)), lambda n: [torch.randn(2, n)], 1),
    ("fft.rfft", torch.fft.rfft, lambda n: [torch.randn(2, n + 1)], 1),
    ("conv1d", F.conv1d, lambda n: [torch.randn(n, 2, 6), torch.randn(4, 2, 3)], 1),
    ("conv2d", F.conv2d, lambda n: [torch.randn(2, 3, n + 3, 4), torch.randn(5, 3, 3, 3)], 1),
    ("addmm", torch.addmm, lambda n: [torch.randn(n, 4), torch.randn(n, 3), torch.randn(3, 4)], 1),
    ("index", lambda a, i: a[i], lambda n: [torch.randn(n + 1, 3), torch.zeros(n, dtype=torch.long)], 1),
    ("index_put", lambda a, i, v: a.clone().index_put_((i,), v), lambda n: [torch.randn(4, 3),
                                                                            torch.arange(n), torch.randn(n, 3)], 1),
    # (its decomposition views (n, 2, 3) as (2n, 3): no per-dim size questions since issue 25, so 0 and 1 share)
    ("repeat_interleave", lambda a: a.repeat_interleave(2, 0), lambda n: [torch.randn(n, 3)], 1),
    ("max_pool2d", lambda a: F.max_pool2d(a, 2), lambda n: [torch.randn(1, 2, n + 2, 4)], 1),
]  # fmt: skip


@pytest.mark.parametrize("name, fn, make, misses", CASES, ids=[c[0] for c in CASES])
def test_generic_op_sweep(name, fn, make, misses):
    cfn = _sweep(fn, make)
    assert counts(cfn) == (misses, len(SIZES) - misses), guards(cfn)


def test_topk_guards_k_against_the_size():
    cfn = _sweep(lambda a: torch.topk(a, 2, 0), lambda n: [torch.randn(n, 3)], [2, 3, 7, 1])
    assert counts(cfn) == (1, 2)  # k <= n is a guard; for n = 1 the retrace raises eager's error
    assert guards(cfn) == ["args[0].shape[0] >= 2"]


def test_interpolate_pins_the_size_and_reports_it():
    K.PINS.clear()
    cfn = _sweep(lambda a: F.interpolate(a, scale_factor=1.5), lambda n: [torch.randn(1, 2, n + 1)], [1, 2, 2])
    assert counts(cfn) == (2, 1)  # floor(1.5 * n): the float is read to make a size
    assert K.pin_report().get("torch.nn.functional.interpolate", 0) >= 1


def test_floats_that_only_feed_data_pin_nothing():
    """adaptive pooling divides by a float of the window size, and a scale of 2 makes `2*n` exactly: no pin."""
    K.PINS.clear()
    for fn in (lambda a: F.interpolate(a, scale_factor=2), lambda a: F.adaptive_avg_pool1d(a, 1)):
        cfn = _sweep(fn, lambda n: [torch.randn(1, 2, n + 1)], [1, 2, 4])
        assert counts(cfn) == (1, 2)
    assert K.pin_report() == {}


# data-dependent: one_hot without num_classes has no fake rule in torch
@pytest.mark.parametrize("fn", [lambda a: F.one_hot(a.long().abs())])
def test_data_dependent_ops_raise_unsupported(fn):
    cfn = specengine.compile(lambda a: fn(a), dynamic=True)
    with pytest.raises(specengine.UnsupportedOpError):
        cfn(torch.randn(4))


def test_out_and_shape_changing_inplace_are_refused():
    cfn = specengine.compile(lambda a, b: torch.acos(a, out=b), dynamic=True)
    a, b = torch.rand(3), torch.empty(3)
    assert cfn(a, b) is b  # out= of the result's shape: the op, copied into b
    torch.testing.assert_close(b, torch.acos(a))
    with pytest.raises(specengine.UnsupportedOpError, match="out="):  # b would be resized
        cfn(torch.rand(3), torch.empty(2))
    with pytest.raises(specengine.UnsupportedOpError, match="in place"):
        specengine.compile(lambda a: a.clone().t_(), dynamic=True)(torch.rand(3, 2))


def test_inplace_generic_op_runs_in_place_on_inputs():
    def f(a):
        a.acos_()
        return a * 2

    x = torch.rand(4)
    expected = torch.acos(x) * 2
    cfn = specengine.compile(f, dynamic=True)
    got = cfn(x)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(x, expected / 2)


def test_batch_norm_updates_running_stats_like_eager():
    def f(a, m, v):
        return F.batch_norm(a, m, v, training=True)

    cfn = specengine.compile(f, dynamic=True)
    for n in (4, 2):
        args = [torch.randn(n, 3, 5), torch.zeros(3), torch.ones(3)]
        ref = [t.clone() for t in args]
        torch.testing.assert_close(cfn(*args), f(*ref))
        torch.testing.assert_close(args[1:], ref[1:])


def test_real_errors_keep_eagers_type():
    cfn = specengine.compile(lambda a, w: F.conv2d(a, w), dynamic=True)
    with pytest.raises(RuntimeError):
        cfn(torch.randn(1, 3, 5, 5), torch.randn(2, 4, 3, 3))


def test_trace_prints_the_torch_op_and_runs():
    cfn = specengine.compile(lambda a: torch.linalg.vector_norm(torch.special.expit(a), dim=0), dynamic=True)
    x = torch.randn(3, 2)
    torch.testing.assert_close(cfn(x), torch.linalg.vector_norm(torch.special.expit(x), dim=0))
    text = str(specengine.last_traces(cfn)[-1])
    assert "torch.linalg.vector_norm(" in text and "torch.special.expit(" in text


def test_tensor_properties_and_dtype_predicates():
    cfn = specengine.compile(lambda a: a.mH * 2 if torch.is_floating_point(a) else a, dynamic=True)
    x = torch.randn(3, 2)
    torch.testing.assert_close(cfn(x), x.mH * 2)
    assert "tex.tensor_attr(a, 'mH')" in str(specengine.last_traces(cfn)[-1])


def test_seeding_inside_the_function_runs_on_every_call():
    from torch.testing._utils import wrapper_set_seed  # seeds 42, then restores the caller's RNG state

    def f(a):
        return wrapper_set_seed(F.dropout, a, 0.5) + torch.rand_like(a)

    cfn = specengine.compile(f, dynamic=True)
    for n in (8, 8, 9):
        x = torch.randn(n)
        torch.manual_seed(1)
        expected, state = f(x), torch.get_rng_state()
        torch.manual_seed(1)
        torch.testing.assert_close(cfn(x), expected)
        assert torch.equal(torch.get_rng_state(), state)
    assert counts(cfn) == (1, 2)


def test_a_number_proxys_node_is_our_symnode(state):
    from specengine.ir.proxies import NumberProxy

    n = NumberProxy("n", E.sym("s0"), 5, int)
    assert type(n.node) is S.ExprNode and n.node.expr_ is E.sym("s0") and n.node.hint == 5
    assert n.node.is_nested_int() is False


def test_torch_refs_decide_on_number_proxies():
    """torch.broadcast_shapes reached through a reference taken at import (as OpInfo does): torch's `_refs` read
    the nodes of the sizes, and decide on them."""
    from torch.functional import broadcast_shapes

    def fn(shape, n):
        return broadcast_shapes(shape, n)

    cfn = specengine.compile(fn, dynamic=True)
    for shape, n in [((5, 1), 5), ((3, 1), 2), ((2, 1), 0), ((1, 1), 7), ((4, 1), 1), ((2, 3), 2)]:
        run_both(fn, cfn, [shape, n])
    assert counts(cfn) == (3, 2)  # n is 1 or not; the first size is 1 or not


def test_in_place_ops_are_seen_by_their_schema_not_only_by_version_counters():
    """Where torch's dispatch-key TLS excludes ADInplaceOrView, versions do not move (seen in a process after
    torch.quantile with a symbolic q): an in-place op without a rule must still run, not be taken for a no-op."""

    def fn(x):
        return x.clone().sinh_()

    with torch._C._AutoDispatchBelowADInplaceOrView():
        cfn = specengine.compile(fn, dynamic=True)
        for n in SIZES:
            run_both(fn, cfn, [torch.randn(n)])
    assert counts(cfn) == (1, 3)  # as outside the guard (its kernel's `== 0`/`== 1` tests: guard_or_false, default)
