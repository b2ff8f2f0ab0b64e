"""Torch's own signatures bind every call to an op with a rule (issue 22 part 4; ops/signatures.py).

Generated (tests/siggen.py): every torch callable with a rule, on OpInfo's samples (or the generator's own), in every
positional/keyword split that torch's schema allows, with numpy's names for `dim`, `keepdim`, `input` and `other`
(`x.sum(axis=0, keepdims=True)`, which torch's parser accepts), in torch's deprecated signatures
(`torch.add(x, 2, y)`), and with an unknown keyword and an argument given twice. Each
spelling must do what eager does: the same values, or the same exception type where eager raises; where the
engine refuses the plain positional call (UnsupportedOpError), a keyword spelling is refused the same way.
"""

from __future__ import annotations

import inspect
import warnings

import pytest
import torch
import torch.nn.functional as F

import specengine
from specengine.ops import signatures
from specengine.ops.registry import TORCH_TABLE

pytest.importorskip("expecttest")  # OpInfo imports numpy and expecttest (the `test` extra)

import siggen  # noqa: E402

VALUES_UNCHECKED = {"torch.empty", "torch.empty_like", "torch.Tensor.new_empty", "torch.rand_like", "torch.randn_like"}

_FNS = siggen.rule_callables()


@pytest.fixture(scope="module")
def opinfo() -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return siggen.opinfo_samples()


def _run(call: siggen.Spelling, compiled: bool) -> tuple[object, BaseException | None]:
    inputs = [t.clone() for t in call.inputs()]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn = specengine.compile(call.program(), dynamic=False) if compiled else call.program()
            return fn(*inputs), None
    except Exception as e:  # noqa: BLE001 - compared by type below
        return None, e


def _same(name: str, got: object, expected: object) -> None:
    if name in VALUES_UNCHECKED:
        got, expected = (torch.utils._pytree.tree_map(lambda t: torch.zeros_like(t) if torch.is_tensor(t) else t, v)
                         for v in (got, expected))  # fmt: skip
    torch.testing.assert_close(got, expected, equal_nan=True)


@pytest.mark.parametrize("fn", _FNS, ids=signatures.public_name)
def test_every_spelling_matches_eager(fn, opinfo):
    name = signatures.public_name(fn)
    calls = siggen.samples(fn, opinfo)[:2]
    if not calls:
        pytest.skip("no sample call")
    checked = 0
    for args, kwargs in calls:
        reference = siggen.Spelling(fn, args, kwargs, "as sampled")
        _, ref_error = _run(reference, compiled=True)
        for call in siggen.spellings(fn, args, kwargs) + siggen.numpy_spellings(fn, args, kwargs) + \
                siggen.deprecated_spellings(fn, args, kwargs):  # fmt: skip
            expected, eager_error = _run(call, compiled=False)
            got, error = _run(call, compiled=True)
            checked += 1
            if eager_error is None and error is None:
                _same(name, got, expected)
            elif eager_error is None and (call.label.startswith("deprecated") or call.label.endswith("twice")):
                assert isinstance(error, specengine.UnsupportedOpError) and "deprecated" in str(error), (call, error)
            elif eager_error is None:
                assert isinstance(ref_error, specengine.SpecEngineError) and type(error) is type(ref_error), (
                    f"{call}: eager gives a result; the engine raised {error!r} (the sampled spelling: {ref_error!r})"
                )
            else:
                assert type(error) is type(eager_error) or isinstance(error, specengine.SpecEngineError), (
                    f"{call}: eager raised {eager_error!r}, the engine {error!r}"
                )
                if not call.valid:
                    assert isinstance(error, TypeError), (call, error)
    if not checked:
        pytest.skip("the sample binds no aten schema (a Python-only signature: passed on as written)")


def _rule_accepts(rule: inspect.Signature, ov: signatures.Overload) -> bool:
    kwargs = {p.name: None for p in ov.params if p.kw_only and p.name != "out"}
    try:
        rule.bind(*[None] * len(ov.positional), **kwargs)
    except TypeError:
        return False
    return True


def test_rules_take_torchs_keyword_only_names():
    """Statically, for every callable with a rule and every signature torch has for it: the rule takes all of
    torch's positional parameters positionally and its keyword-only ones by torch's names (where it takes the
    overload at all: by arity)."""
    wrong = []
    for fn in _FNS:
        rule = inspect.signature(TORCH_TABLE[fn].meta)
        sigs = signatures.overloads(fn)
        if not any(_rule_accepts(rule, ov) for ov in sigs):
            wrong.append(f"{signatures.public_name(fn)}: {rule} takes none of {[ov.params for ov in sigs][:2]}")
    assert not wrong, "\n".join(wrong)


# The issue's cases, each under the three dynamic modes with exact miss counts.
x, y = torch.randn(3, 4), torch.randn(3, 4)
ISSUE_CASES = {
    "mul other=": lambda x, y: torch.mul(x, other=2.0),
    "add other= alpha=": lambda x, y: torch.add(x, other=1, alpha=2),
    "pow exponent=": lambda x, y: torch.pow(x, exponent=2),
    "maximum other=": lambda x, y: torch.maximum(x, other=y),
    "sum input= dim=": lambda x, y: torch.sum(input=x, dim=0),
    "clamp input= min= max=": lambda x, y: torch.clamp(input=x, min=-0.5, max=0.5),
    "reshape shape=": lambda x, y: x.reshape(shape=(x.shape[1], -1)),
    "view size=": lambda x, y: x.view(size=(-1,)),
    "permute dims=": lambda x, y: x.permute(dims=(1, 0)),
    "F.softmax input= dim=": lambda x, y: F.softmax(input=x, dim=-1),
    "F.relu input= inplace=": lambda x, y: F.relu(input=x * 1, inplace=True),
    "F.layer_norm": lambda x, y: F.layer_norm(input=x, normalized_shape=(x.shape[-1],), eps=1e-3),
    "where input= other=": lambda x, y: torch.where(x > 0, input=x, other=y),
    "x.where condition=": lambda x, y: x.where(condition=x > 0, other=y),
    "x.sum dim= keepdim=": lambda x, y: x.sum(dim=1, keepdim=True),
    "x.to dtype=": lambda x, y: x.to(dtype=torch.float64),
    "x.to copy= memory_format=": lambda x, y: x.to(torch.float64, copy=False, memory_format=torch.preserve_format),
    "x.add other= alpha=": lambda x, y: x.add(other=y, alpha=3),
    "transpose dim0= dim1=": lambda x, y: x.transpose(dim1=0, dim0=1),
    "cat tensors= dim=": lambda x, y: torch.cat(tensors=[x, y], dim=1),
    "matmul other=": lambda x, y: torch.matmul(x, other=y.T),
    "mul out=None": lambda x, y: torch.mul(x, y, out=None),
}


@pytest.mark.parametrize("dynamic", [None, True, False])
@pytest.mark.parametrize("case", list(ISSUE_CASES))
def test_issue_spellings(case, dynamic):
    f = ISSUE_CASES[case]
    cf = specengine.compile(f, dynamic=dynamic)
    for n in (0, 1, 2, 5):
        a, b = torch.randn(n, 4), torch.randn(n, 4)
        torch.testing.assert_close(cf(a, b), f(a, b))
    assert specengine.cache_misses(cf) == (1 if dynamic is True else 2 if dynamic is None else 4)


REFUSED_SPELLINGS = {
    "unknown keyword": lambda x: torch.mul(x, bogus=2),
    "method unknown keyword": lambda x: x.sum(dims=0),
    "given twice": lambda x: torch.mul(x, 2, other=3),
    "input twice": lambda x: torch.clamp(x, max=1, input=x),
    "missing": lambda x: torch.transpose(x, dim1=0),
    "memory_format positionally": lambda x: x.to(torch.float64, False, False, torch.preserve_format, copy=False),
    "number for a tensor-only parameter": lambda x: x.max(other=2),
    "F function unknown keyword": lambda x: F.softmax(x, axis=0),
    "too many positional": lambda x: torch.transpose(x, 0, 1, dim1=2),
}


@pytest.mark.parametrize("case", list(REFUSED_SPELLINGS))
def test_refused_spellings_raise_eagers_type(case):
    f = REFUSED_SPELLINGS[case]
    with pytest.raises(Exception) as eager:
        f(torch.randn(3, 4))
    cf = specengine.compile(f)
    with pytest.raises(type(eager.value)):
        cf(torch.randn(3, 4))
    assert specengine.cache_misses(cf) == 0 and not specengine.cache_entries(cf)


# Programs written with numpy's names, beside the same program with torch's: over sizes that change what a
# compile may assume, each must give eager's values and the counts of torch's spelling.
NUMPY_PAIRS = {
    "cat axis=": (lambda x: torch.cat([x, x], axis=1), lambda x: torch.cat([x, x], dim=1)),
    "sum axis= keepdims=": (
        lambda x: torch.sum(x, axis=0, keepdims=True),
        lambda x: torch.sum(x, dim=0, keepdim=True),
    ),
    "x.mean axis=": (lambda x: x.mean(axis=-1), lambda x: x.mean(dim=-1)),
    "x.amax axis=": (lambda x: x.amax(axis=1, keepdims=True), lambda x: x.amax(dim=1, keepdim=True)),
    "max axis=": (lambda x: torch.max(x, axis=1).values, lambda x: torch.max(x, dim=1).values),
    "softmax x= axis=": (lambda x: torch.softmax(x=x, axis=1), lambda x: torch.softmax(input=x, dim=1)),
    "stack axis=": (lambda x: torch.stack([x, x], axis=0), lambda x: torch.stack([x, x], dim=0)),
    "add x1= x2=": (lambda x: torch.add(x1=x, x2=x), lambda x: torch.add(input=x, other=x)),
    "x.cumsum axis=": (lambda x: x.cumsum(axis=1), lambda x: x.cumsum(dim=1)),
    "x.std axis=": (lambda x: x.std(axis=1, keepdims=True), lambda x: x.std(dim=1, keepdim=True)),
}


@pytest.mark.parametrize("case", list(NUMPY_PAIRS))
def test_numpy_names_follow_torchs_spelling_over_sizes(case):
    numpy_style, torch_style = (specengine.compile(f, dynamic=True) for f in NUMPY_PAIRS[case])
    for n in (2, 0, 1, 3, 2):
        x = torch.randn(n, 3)
        expected = NUMPY_PAIRS[case][1](x)
        torch.testing.assert_close(numpy_style(x), expected, equal_nan=True)
        torch.testing.assert_close(torch_style(x), expected, equal_nan=True)
    assert specengine.cache_misses(numpy_style) == specengine.cache_misses(torch_style)
    assert specengine.cache_hits(numpy_style) == specengine.cache_hits(torch_style)
    assert specengine.cache_misses(numpy_style) + specengine.cache_hits(numpy_style) == 5


def test_numpy_name_beside_its_parameter_is_eagers_type_error():
    x = torch.randn(2, 3)
    for fn in (
        lambda x: torch.sum(x, 0, axis=1),
        lambda x: x.sum(0, axis=1),
        lambda x: torch.sum(x, dim=0, axis=1),
    ):
        with pytest.raises(TypeError, match="unexpected keyword argument 'axis'"):
            fn(x)
        with pytest.raises(TypeError, match="unexpected keyword argument 'axis'"):
            specengine.compile(fn, dynamic=True)(x)
