"""Hugging Face models from tiny configs, called the ways users call them, compiled against eager.

For every family in specengine/examples/hf.py: `specengine.compile(model, dynamic=True)` called over batch sizes and
sequence lengths 1, 2 and more (`sizes`), with padded attention masks (`mask`), with labels= and backward in
train/eval/train modes, grads against eager (`grad`; eval-mode grads compared exactly), train mode after every
dropout is set to 0 between calls (`train_p0`: loss and every grad), output_hidden_states / output_attentions /
return_dict toggled per call (`flags`: eager's output type, keys and tensors), use_cache=True and past_key_values fed
back (`cache`), `model.forward = specengine.compile(model.forward, dynamic=True)` under model.generate (greedy, with
a mask, use_cache=False, two beams, scores: `generate`, `gen_more`), model.config fields changed between calls
(`config`), parameters changed in place, hooks added and removed, submodules and parameters replaced, model.double()
(`mutate`), train() after eval() with dropout (`dropout`), set_attn_implementation('eager') then
output_attentions (`attn_impl`), gradient checkpointing on/off and frozen parameters (`ckpt`), and CPU bfloat16
autocast (`autocast`). Where eager raises, the compiled call must raise the same type (`eageronly`: eager raised, the
compiled call took the library's is_compiling() path and returned). A benchmark, not a test: it prints a table
(correct / WRONG / CRASH / refusal / eageronly / n/a, misses and hits).

    python bench/probe_models.py [family[,family]] [check[,check]]     # all of both by default (~5 min)
"""

from __future__ import annotations

import os
import sys
import time
import traceback
import warnings

os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402

import specengine  # noqa: E402
from specengine.errors import SpecEngineError, UnsupportedOpError  # noqa: E402
from specengine.examples.hf import FAMILIES, MORE_FAMILIES  # noqa: E402

ALL = {**FAMILIES, **MORE_FAMILIES}


def leaves(x):
    if hasattr(x, "to_tuple"):
        x = x.to_tuple()
    out = []

    def walk(v):
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (tuple, list)):
            for e in v:
                walk(e)
        elif isinstance(v, dict):
            for e in v.values():
                walk(e)
        elif hasattr(v, "layers"):
            for layer in v.layers:
                for e in vars(layer).values():
                    if isinstance(e, torch.Tensor):
                        out.append(e)
        elif hasattr(v, "to_tuple"):
            walk(v.to_tuple())

    walk(x)
    return out


def same(out, ref):
    assert type(out) is type(ref), (type(out), type(ref))
    if hasattr(ref, "keys"):
        assert list(out.keys()) == list(ref.keys()), (list(out.keys()), list(ref.keys()))
    if isinstance(ref, tuple):
        assert len(out) == len(ref), (len(out), len(ref))
    lo, lr = leaves(out), leaves(ref)
    assert len(lo) == len(lr), (len(lo), len(lr))
    for a, b in zip(lo, lr):
        torch.testing.assert_close(a, b, equal_nan=True, atol=1e-4, rtol=1e-4)


def sizes(f):
    return [(1, 1), (1, 2), (2, 1), (2, 2), (2, 5), (3, 8)] if not f.images else [(1, 0), (2, 0), (3, 0)]


def nomask(inp):
    return {k: v for k, v in inp.items() if k != "attention_mask"}


def c_sizes(f, m):
    cfn = specengine.compile(m, dynamic=True)
    with torch.no_grad():
        for b, t in sizes(f):
            inp = nomask(f.inputs(b, t))
            same(cfn(**inp), m(**inp))
    return cfn


def c_mask(f, m):
    if f.images or "attention_mask" not in f.inputs(1, 3):
        return None
    cfn = specengine.compile(m, dynamic=True)
    with torch.no_grad():
        for b, t in [(2, 3), (2, 5), (3, 8), (1, 4)]:
            inp = f.inputs(b, t)
            inp["attention_mask"][-1, -1:] = 0 if f.name in ("bert", "distilbert") else 1
            same(cfn(**inp), m(**inp))
    return cfn


def labels_of(f, inp):
    if f.name in ("gpt2", "llama", "mixtral", "qwen2"):
        return inp["input_ids"]
    if f.name == "t5":
        return inp["decoder_input_ids"]
    return None


def c_grad(f, m):
    if labels_of(f, f.inputs(2, 4)) is None:
        return None
    cfn = specengine.compile(m, dynamic=True)
    for mode in ("train", "eval", "train"):
        getattr(m, mode)()
        for b, t in [(2, 4), (1, 6)]:
            inp = f.inputs(b, t)
            inp["labels"] = labels_of(f, inp)
            torch.manual_seed(0)
            m.zero_grad()
            ref = m(**inp)
            ref.loss.backward()
            g_ref = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
            torch.manual_seed(0)
            m.zero_grad()
            out = cfn(**inp)
            out.loss.backward()
            g = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
            if mode == "eval":
                torch.testing.assert_close(out.loss, ref.loss)
                assert g.keys() == g_ref.keys(), set(g) ^ set(g_ref)
                for n in g:
                    torch.testing.assert_close(g[n], g_ref[n], atol=1e-4, rtol=1e-4, msg=n)
            else:
                # dropout is 0.1 in configs: rng may differ -> compare only if p=0? compare structure
                assert g.keys() == g_ref.keys(), set(g) ^ set(g_ref)
                assert type(out) is type(ref)
    m.eval()
    return cfn


def c_train_p0(f, m):
    """Train mode, then every Dropout's p set to 0 between calls: loss and grads must equal eager's."""
    if labels_of(f, f.inputs(2, 4)) is None:
        return None
    cfn = specengine.compile(m, dynamic=True)
    m.train()
    inp = f.inputs(2, 5)
    inp["labels"] = labels_of(f, inp)
    cfn(**inp).loss.backward()
    for mod in m.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
        for a in ("dropout", "attention_dropout"):
            if isinstance(getattr(mod, a, None), float):
                setattr(mod, a, 0.0)
    for attr in ("attention_dropout", "dropout_rate", "attn_pdrop", "resid_pdrop", "embd_pdrop"):
        if hasattr(m.config, attr):
            setattr(m.config, attr, 0.0)
    for b, t in [(2, 5), (3, 7)]:
        inp = f.inputs(b, t)
        inp["labels"] = labels_of(f, inp)
        m.zero_grad()
        ref = m(**inp)
        ref.loss.backward()
        g_ref = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
        m.zero_grad()
        out = cfn(**inp)
        out.loss.backward()
        g = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
        torch.testing.assert_close(out.loss, ref.loss)
        torch.testing.assert_close(out.logits, ref.logits)
        assert g.keys() == g_ref.keys(), set(g) ^ set(g_ref)
        for n in g:
            torch.testing.assert_close(g[n], g_ref[n], atol=1e-4, rtol=1e-4, msg=n)
    m.eval()
    return cfn


def c_gen_more(f, m):
    """generate with padded attention_mask, with use_cache=False, and sampling-free beam search."""
    if not f.generates:
        return None
    inp = f.inputs(3, 6)
    calls = [
        dict(max_new_tokens=3, do_sample=False),
        dict(max_new_tokens=3, do_sample=False, use_cache=False),
        dict(max_new_tokens=3, do_sample=False, num_beams=2),
        dict(max_new_tokens=2, do_sample=False, output_scores=True, return_dict_in_generate=True),
    ]
    with torch.no_grad():
        refs = [m.generate(**inp, **kw) for kw in calls]
        fwd = m.forward
        m.forward = cfn = specengine.compile(m.forward, dynamic=True)
        try:
            outs = [m.generate(**inp, **kw) for kw in calls]
        finally:
            m.forward = fwd
    for o, r in zip(outs[:3], refs[:3]):
        assert torch.equal(o, r), (o, r)
    assert torch.equal(outs[3].sequences, refs[3].sequences)
    for a, b in zip(outs[3].scores, refs[3].scores):
        torch.testing.assert_close(a, b)
    return cfn


def c_flags(f, m):
    cfn = specengine.compile(m, dynamic=True, recompile_limit=16)  # 6 flag sets (x2 for t5: decoder length 1)
    combos = [
        {},
        {"output_hidden_states": True},
        {"output_attentions": True},
        {"return_dict": False},
        {"output_hidden_states": True, "return_dict": False},
        {},
        {"output_attentions": True, "output_hidden_states": True},
    ]
    with torch.no_grad():
        for kw in combos:
            for b, t in [(2, 5), (1, 3)]:
                inp = nomask(f.inputs(b, t))
                inp.update(kw)
                same(cfn(**inp), m(**inp))
    return cfn


def c_cache(f, m):
    if not f.generates:
        return None
    cfn = specengine.compile(m, dynamic=True)
    with torch.no_grad():
        inp = nomask(f.inputs(2, 5))
        o, r = cfn(**inp, use_cache=True), m(**inp, use_cache=True)
        same(o, r)
        for _step in range(3):
            nxt = r.logits[:, -1:].argmax(-1)
            o2 = cfn(input_ids=nxt, past_key_values=o.past_key_values, use_cache=True)
            r2 = m(input_ids=nxt, past_key_values=r.past_key_values, use_cache=True)
            same(o2, r2)
            o, r = o2, r2
    return cfn


def c_generate(f, m):
    if not f.generates:
        return None
    inp = f.inputs(2, 5)
    with torch.no_grad():
        ref = m.generate(**inp, max_new_tokens=4, do_sample=False)
        ref1 = m.generate(**f.inputs(1, 3), max_new_tokens=3, do_sample=False)
        fwd = m.forward
        m.forward = cfn = specengine.compile(m.forward, dynamic=True)
        try:
            out = m.generate(**inp, max_new_tokens=4, do_sample=False)
            out1 = m.generate(**f.inputs(1, 3), max_new_tokens=3, do_sample=False)
        finally:
            m.forward = fwd
    assert torch.equal(out, ref), (out, ref)
    assert torch.equal(out1, ref1), (out1, ref1)
    return cfn


def both(cfn, m, inp):
    try:
        ref = m(**inp)
    except Exception as e:
        try:
            cfn(**inp)
        except Exception as e2:
            assert type(e2) is type(e), f"eager raised {type(e).__name__}, compiled {type(e2).__name__}: {e2}"
            return
        raise EagerOnlyError(f"eager raised {type(e).__name__}: {e}; the compiled call returned") from e
    same(cfn(**inp), ref)


class EagerOnlyError(Exception):
    """Eager raised and the compiled call did not (a library's compile path, taken as is_compiling() is True)."""


def linears(m):
    return [(n, x) for n, x in m.named_modules() if isinstance(x, torch.nn.Linear)]


def c_mutate(f, m):
    cfn = specengine.compile(m, dynamic=True)
    inp = nomask(f.inputs(2, 4))
    lin = linears(m)
    with torch.no_grad():
        same(cfn(**inp), m(**inp))
        p = next(m.parameters())
        p.mul_(1.5)  # in-place param change
        same(cfn(**inp), m(**inp))
        name, mid = lin[len(lin) // 2]
        h = mid.register_forward_hook(lambda mod, i, o: o * 2)
        same(cfn(**inp), m(**inp))
        h.remove()
        same(cfn(**inp), m(**inp))
        h = mid.register_forward_pre_hook(lambda mod, i: (i[0] * 0.5,))
        same(cfn(**inp), m(**inp))
        h.remove()
        parent_name, _, attr = name.rpartition(".")
        parent = m.get_submodule(parent_name)
        new = torch.nn.Linear(mid.in_features, mid.out_features, bias=mid.bias is not None)
        setattr(parent, attr, new)
        same(cfn(**inp), m(**inp))
        new.weight.zero_()
        same(cfn(**inp), m(**inp))
        setattr(parent, attr, mid)
        same(cfn(**inp), m(**inp))
        mid.weight = torch.nn.Parameter(mid.weight * 3)
        same(cfn(**inp), m(**inp))
        m.double()
        inp2 = {k: (v.double() if v.is_floating_point() else v) for k, v in inp.items()}
        both(cfn, m, inp2)
    return cfn


def c_dropout(f, m):
    """Train mode must apply dropout (config default 0.1): compiled train output differs from eval."""
    cfn = specengine.compile(m, dynamic=True)
    inp = nomask(f.inputs(2, 6))
    out_name = f.output
    with torch.no_grad():
        ev = getattr(cfn(**inp), out_name)
        torch.testing.assert_close(ev, getattr(m(**inp), out_name))
        m.train()
        tr = getattr(cfn(**inp), out_name)
        tr_ref = getattr(m(**inp), out_name)
        if torch.allclose(tr_ref, ev):
            m.eval()
            return None  # no dropout in this config
        assert not torch.allclose(tr, ev), "compiled train output equals eval output (dropout ignored)"
        m.eval()
        torch.testing.assert_close(getattr(cfn(**inp), out_name), ev)
    return cfn


def c_config(f, m):
    cfn = specengine.compile(m, dynamic=True)
    inp = nomask(f.inputs(2, 4))
    with torch.no_grad():
        same(cfn(**inp), m(**inp))
        m.config.output_hidden_states = True
        both(cfn, m, inp)
        m.config.output_hidden_states = False
        both(cfn, m, inp)
        m.config.return_dict = False
        both(cfn, m, inp)
        m.config.return_dict = True
        both(cfn, m, inp)
        m.config.use_cache = not m.config.use_cache if hasattr(m.config, "use_cache") else None
        both(cfn, m, inp)
    return cfn


def c_attn_impl(f, m):
    cfn = specengine.compile(m, dynamic=True)
    inp = nomask(f.inputs(2, 4))
    with torch.no_grad():
        same(cfn(**inp), m(**inp))
        m.set_attn_implementation("eager")
        same(cfn(**inp), m(**inp))
        inp2 = dict(inp, output_attentions=True)
        same(cfn(**inp2), m(**inp2))
        m.set_attn_implementation("sdpa")
        same(cfn(**inp), m(**inp))
    return cfn


def c_ckpt(f, m):
    if labels_of(f, f.inputs(2, 4)) is None:
        return None
    if not m.supports_gradient_checkpointing:
        return None
    for mod in m.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
        for a in ("dropout", "attention_dropout"):
            if isinstance(getattr(mod, a, None), float):
                setattr(mod, a, 0.0)
    cfn = specengine.compile(m, dynamic=True)
    m.train()

    def step(fn):
        inp = f.inputs(2, 5)
        inp["labels"] = labels_of(f, inp)
        m.zero_grad()
        out = fn(**inp)
        out.loss.backward()
        return out.loss.detach(), {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}

    for phase in range(3):
        if phase == 1:
            m.gradient_checkpointing_enable()
        if phase == 2:
            m.gradient_checkpointing_disable()
            for p in m.parameters():
                p.requires_grad_(False)
            list(m.parameters())[-1].requires_grad_(True)
        (lr, gr), (lo, go) = step(m), step(cfn)
        torch.testing.assert_close(lo, lr)
        assert gr.keys() == go.keys(), (phase, set(gr) ^ set(go))
        for n in gr:
            torch.testing.assert_close(go[n], gr[n], atol=1e-4, rtol=1e-4, msg=n)
    m.eval()
    return cfn


def c_autocast(f, m):
    cfn = specengine.compile(m, dynamic=True)
    inp = nomask(f.inputs(2, 4))
    with torch.no_grad():
        same(cfn(**inp), m(**inp))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            o = cfn(**inp)
            r = m(**inp)
        lo, lr = leaves(o), leaves(r)
        assert [t.dtype for t in lo] == [t.dtype for t in lr], ([t.dtype for t in lo][:3], [t.dtype for t in lr][:3])
        for a, b in zip(lo, lr):
            torch.testing.assert_close(a.float(), b.float(), atol=0.1, rtol=0.1)
        same(cfn(**inp), m(**inp))
    return cfn


CHECKS = {
    "sizes": c_sizes,
    "mask": c_mask,
    "grad": c_grad,
    "flags": c_flags,
    "cache": c_cache,
    "generate": c_generate,
    "config": c_config,
    "train_p0": c_train_p0,
    "gen_more": c_gen_more,
    "mutate": c_mutate,
    "dropout": c_dropout,
    "attn_impl": c_attn_impl,
    "ckpt": c_ckpt,
    "autocast": c_autocast,
}


def run(name, check):
    f = ALL[name]
    m = f.build()
    t0 = time.time()
    try:
        cfn = CHECKS[check](f, m)
        if cfn is None:
            return "n/a", ""
        st = "correct"
        info = f"m={specengine.cache_misses(cfn)} h={specengine.cache_hits(cfn)}"
    except EagerOnlyError as e:
        st, info = "eageronly", str(e).splitlines()[0][:150]
    except UnsupportedOpError as e:
        st, info = "refusal", str(e).splitlines()[0][:150]
    except AssertionError as e:
        st, info = "WRONG", (str(e).splitlines() or [""])[0][:200]
        if os.environ.get("PROBE_TRACEBACK"):
            traceback.print_exc(file=sys.stderr)
    except Exception as e:
        st, info = (
            ("CRASH" if not isinstance(e, SpecEngineError) else "se-error"),
            f"{type(e).__name__}: {str(e).splitlines()[0][:150] if str(e) else ''}",
        )
        if os.environ.get("PROBE_TRACEBACK"):
            traceback.print_exc(file=sys.stderr)
    return st, f"{info} ({time.time() - t0:.1f}s)"


def main() -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    names = sys.argv[1].split(",") if len(sys.argv) > 1 and sys.argv[1] != "all" else list(ALL)
    checks = sys.argv[2].split(",") if len(sys.argv) > 2 else list(CHECKS)
    counts: dict[str, int] = {}
    print(f"{'family':10} {'check':9} {'result':8} misses/hits or error (time)")
    for n in names:
        for c in checks:
            st, info = run(n, c)
            counts[st] = counts.get(st, 0) + 1
            print(f"{n:10} {c:9} {st:8} {info}", flush=True)
    print(", ".join(f"{k}: {v}" for k, v in sorted(counts.items())))


if __name__ == "__main__":
    main()
