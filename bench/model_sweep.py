"""Every transformers family and torchvision classification model, from tiny configs: specengine beside torch.compile.

Families come from transformers' auto-model mappings (causal LM, then seq2seq LM, then image classification, then
the base model of text families: one class per model type) and from torchvision's classification builders
(`torchvision.models.list_models`, when torchvision imports). Each model is built from its config class's defaults
with sizes shrunk by name (layers, hidden, heads, FFN, vocabulary, experts, image: `tiny_overrides`), then called as
users call it (`model(input_ids=..., attention_mask=...)` with left padding, `decoder_input_ids=` for
encoder-decoders, `pixel_values=...`) over B in 1..3 x T in 5, 8, 17 (images: B in 1..3 x three image sizes where
the model takes any size, else its one size), with `specengine.compile(model, dynamic=True)` and with
`torch.compile(model, backend=<eager backend that counts graphs>)` side by side. Per family it prints: works (every
call returned), wrong (calls whose output differs from eager's), compiles (specengine: cache misses; torch.compile:
graphs handed to the backend, graph breaks included), first call s, and the root cause of a failure (the exception
type and first line; a SpecEngineError's own text). A benchmark: it prints a table and asserts nothing.

    python bench/model_sweep.py [--families llama,bert,resnet18] [--quick] [--source hf|tv|all] [--limit N]
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import signal
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # configs only: nothing is downloaded

import specengine  # noqa: E402
from specengine.errors import SpecEngineError  # noqa: E402

TEXT_SHAPES = [(b, t) for b in (1, 2, 3) for t in (5, 8, 17)]
QUICK_TEXT_SHAPES = [(1, 5), (2, 8), (3, 17)]
IMAGE_SIZES = (32, 48, 64)
MAX_PARAMS = 30_000_000  # after shrinking; larger models are skipped (CPU time)
VOCAB = 256

# (regex on a config field's name, the value it takes if the default is larger): first match wins
_SHRINK: list[tuple[str, int]] = [
    (r"(num_)?(hidden_|encoder_|decoder_|text_)?layers$|^n_layers?$|^num_blocks$|_layers$", 2),
    (r"num_key_value_heads|n_kv_heads|kv_heads|multi_query_group_num|num_kv_heads", 2),
    (r"(attention_)?heads$|^n_head$|num_heads", 4),
    (r"^head_dim$|^d_kv$|^attention_head_size$|^kv_channels$|head_size$", 16),
    (r"intermediate_size|ffn_dim|^d_ff$|^n_inner$|^hidden_dim$|_ffn_size$|mlp_dim$|ffn_hidden_size", 128),
    (
        r"^hidden_size(_global)?$|^d_model$|^n_embd$|^dim$|^embed_dim$|^embedding_size$|^d_embed$|^emb_size$|^word_embed",
        64,
    ),
    (r"^vocab_size$|^n_vocab$|_group_vocab$", VOCAB),
    (r"max_position_embeddings|^n_positions$|^n_ctx$|max_seq_len|max_sequence_length|^seq_length$", 128),
    (r"num_experts_per_tok|^top_k$|moe_top_k|num_selected_experts|experts_per_token", 2),
    (r"num_(local_|routed_)?experts$|^n_routed_experts$|^moe_num_experts$", 4),
    (r"^image_size$", 32),
    (r"^patch_size$", 8),
    (r"^d_state$|^state_size$|^ssm_state_size$", 16),
    (r"^num_buckets$|^relative_attention_num_buckets$", 8),
    (r"^attention_window$|^sliding_window$|^window_size$", 8),
    (r"^rotary_dim$", 8),
]
# fields that must agree with the layer count, which no name rule can shrink
_PER_LAYER: dict[str, Callable[[int], dict]] = {
    "gpt_neo": lambda n: {"attention_types": [[["global", "local"], n // 2]] if n % 2 == 0 else [[["global"], n]]},
}


def tiny_overrides(config_cls: Any, layers: int = 2) -> dict[str, Any]:
    """Keyword arguments that shrink `config_cls`'s defaults: each int field whose name matches a `_SHRINK` rule and
    whose default is larger takes the rule's value (`layers` for the layer counts); token ids at or past the new
    vocabulary become small ids; each nested config (`sub_configs`: an encoder, a decoder, a text tower) is shrunk
    by the same rules and passed as a dict."""
    defaults = config_cls().to_dict()
    out = _shrink(defaults, layers)
    for key, sub_cls in (getattr(config_cls, "sub_configs", None) or {}).items():
        if isinstance(defaults.get(key), dict) and isinstance(sub_cls, type):
            if small := _shrink(defaults[key], layers):
                out[key] = {**defaults[key], **small}
    if "hidden_size" in out and "head_dim" in defaults and defaults["head_dim"] is None:
        out["head_dim"] = 16
    return out | _PER_LAYER.get(getattr(config_cls, "model_type", ""), lambda n: {})(layers)


def _shrink(defaults: dict[str, Any], layers: int) -> dict[str, Any]:
    """The `_SHRINK` rules and the token-id fix on one config's `to_dict()`."""
    out: dict[str, Any] = {}
    for key, value in defaults.items():
        if isinstance(value, bool) or not isinstance(value, int):
            continue
        for i, (pattern, small) in enumerate(_SHRINK):
            small = layers if i == 0 else small
            if re.search(pattern, key):
                if value > small:
                    out[key] = small
                break
    vocab = out.get("vocab_size", defaults.get("vocab_size"))
    for key, value in defaults.items():
        if key.endswith("_token_id") and isinstance(value, int) and not isinstance(value, bool) and vocab:
            if value >= vocab:
                out[key] = 1 if "pad" not in key else 0
    return out


@dataclass
class Case:
    """One family: how to build its model, its inputs at (batch, size), the sizes to sweep, and its source."""

    name: str
    source: str  # "hf" or "tv"
    build: Callable[[], torch.nn.Module]
    inputs: Callable[[torch.nn.Module, int, int], dict]
    shapes: list[tuple[int, int]] = field(default_factory=list)


def _text_inputs(model: torch.nn.Module, batch: int, seq: int) -> dict:
    g = torch.Generator().manual_seed(100 * batch + seq)
    vocab = getattr(model.config, "vocab_size", VOCAB) or VOCAB
    ids = torch.randint(2, min(vocab, VOCAB), (batch, seq), generator=g)
    params = inspect.signature(model.forward).parameters
    out = {"input_ids": ids}
    if "attention_mask" in params:
        mask = torch.ones(batch, seq, dtype=torch.long)
        if batch > 1 and seq > 2:
            mask[0, :2] = 0  # left padding in the first row
        out["attention_mask"] = mask
    if getattr(model.config, "is_encoder_decoder", False) and "decoder_input_ids" in params:
        out["decoder_input_ids"] = ids[:, : max(seq // 2, 1)].flip(0)
    return out


def _image_inputs(model: torch.nn.Module, batch: int, size: int) -> dict:
    g = torch.Generator().manual_seed(batch * 1000 + size)
    channels = getattr(getattr(model, "config", None), "num_channels", 3)
    pixels = torch.randn(batch, channels, size, size, generator=g)
    return {"pixel_values": pixels} if hasattr(model, "config") else {"x": pixels}


def _hf_class_for(model_type: str) -> tuple[str, str] | None:
    """(task, class name) for a model type: causal LM, seq2seq LM, image classification, else a text base model."""
    from transformers.models.auto import modeling_auto as m  # lazy: transformers is optional

    for task, names in (("causal-lm", m.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES),
                        ("seq2seq", m.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES),
                        ("image", m.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES),
                        ("base", m.MODEL_MAPPING_NAMES)):  # fmt: skip
        name = names.get(model_type)
        if isinstance(name, (tuple, list)):
            name = name[0]
        if name:
            return task, name
    return None


def _hf_build(model_type: str, class_name: str, layers: int = 2, **extra: Any) -> Callable[[], torch.nn.Module]:
    """The builder of `class_name` from `model_type`'s tiny config (`extra`: more config fields)."""

    def build() -> torch.nn.Module:
        import transformers  # lazy: transformers is optional
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        config_cls = CONFIG_MAPPING[model_type]

        def make(fields: dict) -> torch.nn.Module:
            config = config_cls(**{**fields, **extra})
            torch.manual_seed(0)
            return getattr(transformers, class_name)(config).eval()

        small = tiny_overrides(config_cls, layers)
        flat = {k: v for k, v in small.items() if not isinstance(v, dict)}  # (dicts: the nested configs)
        try:
            return make(small)
        except Exception:  # a nested config whose shrunk fields disagree (stage names, per-layer lists)
            if flat == small:
                raise
        return make(flat)

    return build


def hf_model(model_type: str, layers: int = 2, **extra: Any) -> torch.nn.Module:
    """One transformers family's model (causal LM where it has one) from its tiny config, in eval mode."""
    found = _hf_class_for(model_type)
    if found is None:
        raise KeyError(f"no model class for {model_type!r}")
    return _hf_build(model_type, found[1], layers, **extra)()


def hf_cases(quick: bool) -> dict[str, Case]:
    """One case per transformers model type that has a causal-LM, seq2seq, image-classification or base class."""
    try:
        from transformers.models.auto import modeling_auto as m  # lazy: transformers is optional
    except ImportError:
        return {}
    types = list(m.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES) + list(m.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES)
    types += list(m.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES) + list(m.MODEL_MAPPING_NAMES)
    cases: dict[str, Case] = {}
    for model_type in dict.fromkeys(types):
        found = _hf_class_for(model_type)
        if found is None:
            continue
        task, class_name = found
        image = task == "image"
        shapes = [(b, 32) for b in (1, 2, 3)] if image else (QUICK_TEXT_SHAPES if quick else TEXT_SHAPES)
        cases[model_type] = Case(model_type, "hf", _hf_build(model_type, class_name),
                                 _image_inputs if image else _text_inputs, shapes)  # fmt: skip
    return cases


def tv_cases(quick: bool) -> dict[str, Case]:
    """torchvision's classification builders (10 classes, random weights), at three image sizes."""
    try:
        import torchvision  # lazy: torchvision is optional (not installed beside every torch)
    except Exception:  # noqa: BLE001 - a torchvision built for another torch fails at import in many ways
        return {}
    sizes = (32, 64) if quick else IMAGE_SIZES
    cases: dict[str, Case] = {}
    for name in torchvision.models.list_models(module=torchvision.models):

        def build(name: str = name) -> torch.nn.Module:
            torch.manual_seed(0)
            extra = {"image_size": 32} if name.startswith("vit_") else {}
            return torchvision.models.get_model(name, weights=None, num_classes=10, **extra).eval()

        fixed = name.startswith(("vit_", "swin", "maxvit"))
        shapes = [(b, 32 if fixed else s) for b in (1, 2, 3) for s in (sizes if not fixed else (32,))]
        cases[name] = Case(name, "tv", build, _image_inputs, shapes if not quick else shapes[:: len(sizes)])
    return cases


class _Timeout(BaseException):
    """A family over its time (a BaseException: an engine's `except Exception` around a kernel must not take it)."""


@dataclass
class Run:
    """One engine's sweep of one family."""

    works: bool = False
    wrong: int = 0
    compiles: int = 0
    first_s: float = 0.0
    error: str = ""


def root_cause(e: BaseException) -> str:
    """The exception's type and first line (a SpecEngineError's text names the op and the user's line)."""
    lines = str(e).strip().splitlines()
    text = lines[0] if lines else ""
    if isinstance(e, SpecEngineError):
        text = " ".join(line.strip() for line in lines[:2])
    return f"{type(e).__name__}: {text}"[:220]


def _first_tensor(out: Any) -> torch.Tensor | None:
    for key in ("logits", "last_hidden_state", "prediction_logits"):
        value = getattr(out, key, None)
        if isinstance(value, torch.Tensor):
            return value
    if isinstance(out, torch.Tensor):
        return out
    leaves = [x for x in torch.utils._pytree.tree_leaves(out) if isinstance(x, torch.Tensor)]
    return leaves[0] if leaves else None


def equal(out: Any, ref: Any) -> bool:
    """Whether the compiled output matches eager's (its main tensor: logits, last hidden state or the first)."""
    a, b = _first_tensor(out), _first_tensor(ref)
    if a is None or b is None:
        return a is b
    try:
        torch.testing.assert_close(a, b, equal_nan=True, atol=1e-4, rtol=1e-4)
    except AssertionError:
        return False
    return True


def counting_backend() -> tuple[Callable, list]:
    """torch.compile's "eager" backend (runs the graphs Dynamo hands it as they are), counting them."""
    graphs: list = []

    def backend(gm: Any, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm.forward

    return backend, graphs


def sweep_engine(fn: Callable, case: Case, model: torch.nn.Module, refs: list, count: Callable[[], int]) -> Run:
    """Calls `fn` over the case's shapes, comparing with eager's outputs `refs`."""
    run = Run()
    try:
        for i, (b, s) in enumerate(case.shapes):
            start = time.perf_counter()
            out = fn(**case.inputs(model, b, s))
            if i == 0:
                run.first_s = time.perf_counter() - start
            run.wrong += not equal(out, refs[i])
        run.works = True
    except _Timeout:
        run.error = "over the time limit (--timeout)"
    except Exception as e:  # noqa: BLE001 - reported in the table
        run.error = root_cause(e)
    run.compiles = count()
    return run


@dataclass
class Row:
    """One family's result: both engines' runs, or why it was not run (`skip`)."""

    name: str
    source: str
    spec: Run | None = None
    tc: Run | None = None
    skip: str = ""


def run_case(case: Case, engines: tuple[str, ...] = ("spec", "tc"), timeout: int = 0) -> Row:
    """Builds the family's model, runs eager for reference, then each engine over the sweep (`timeout` seconds each
    when given)."""
    row = Row(case.name, case.source)
    try:
        model = case.build()
        params = sum(p.numel() for p in model.parameters())
        if params > MAX_PARAMS:
            row.skip = f"{params / 1e6:.0f}M parameters after shrinking"
            return row
        with torch.no_grad():
            refs = [model(**case.inputs(model, b, s)) for b, s in case.shapes]
    except Exception as e:  # noqa: BLE001 - the family cannot be built or run eagerly from a tiny config
        row.skip = "eager: " + root_cause(e)
        return row
    with torch.no_grad():
        if "tc" in engines:  # first: see bench/models.py (dynamo would guard on specengine's config watchers)
            torch._dynamo.reset()
            backend, graphs = counting_backend()
            compiled = torch.compile(model, backend=backend)
            with _Alarm(timeout):
                row.tc = sweep_engine(compiled, case, model, refs, lambda: len(graphs))
            torch._dynamo.reset()
        if "spec" in engines:
            cfn = specengine.compile(model, dynamic=True)
            with _Alarm(timeout):
                row.spec = sweep_engine(cfn, case, model, refs, lambda: specengine.cache_misses(cfn))
    return row


@dataclass
class _Alarm:
    seconds: int

    def __enter__(self) -> None:
        if not self.seconds:
            return

        def fire(*_: Any) -> None:
            raise _Timeout()

        self.old = signal.signal(signal.SIGALRM, fire)
        signal.alarm(self.seconds)

    def __exit__(self, *exc: Any) -> None:
        if not self.seconds:
            return
        signal.alarm(0)
        signal.signal(signal.SIGALRM, self.old)


def all_cases(quick: bool, source: str) -> dict[str, Case]:
    cases: dict[str, Case] = {}
    if source in ("hf", "all"):
        cases.update(hf_cases(quick))
    if source in ("tv", "all"):
        cases.update(tv_cases(quick))
    return cases


def sweep(names: list[str] | None, quick: bool, source: str = "all", limit: int = 0,
          timeout: int = 300) -> Iterator[Row]:  # fmt: skip
    """Runs the chosen families (all by default), one row each, as they finish."""
    cases = all_cases(quick, source)
    chosen = [cases[n] for n in names if n in cases] if names else list(cases.values())
    for n in names or []:
        if n not in cases:
            yield Row(n, "?", skip="not a transformers model type or torchvision builder here")
    for case in chosen[: limit or None]:
        yield run_case(case, timeout=timeout)


def _cells(run: Run | None) -> list[str]:
    if run is None:
        return ["", "", "", ""]
    works = "yes" if run.works else "no"
    return [works, str(run.wrong), str(run.compiles), f"{run.first_s:.2f}" if run.first_s else "-"]


HEADER = ["family", "source", "works", "wrong", "compiles", "first call s", "torch.compile works", "wrong",
          "graphs", "first call s", "root cause of a failure"]  # fmt: skip


def render(row: Row) -> str:
    if row.skip:
        cells = [row.name, row.source, "n/a", "", "", "", "", "", "", "", row.skip]
    else:
        cause = row.spec.error if row.spec and row.spec.error else ""
        if row.tc and row.tc.error:
            cause += ("; " if cause else "") + "torch.compile: " + row.tc.error
        cells = [row.name, row.source, *_cells(row.spec), *_cells(row.tc), cause]
    return "| " + " | ".join(c.replace("|", "/") for c in cells) + " |"


def summary(rows: list[Row]) -> str:
    ran = [r for r in rows if not r.skip]
    one = sum(1 for r in ran if r.spec and r.spec.works and r.spec.compiles == 1)
    works = sum(1 for r in ran if r.spec and r.spec.works)
    wrong = sum(r.spec.wrong for r in ran if r.spec)
    tc_works = sum(1 for r in ran if r.tc and r.tc.works)
    return (f"{len(rows)} families, {len(ran)} run ({len(rows) - len(ran)} not runnable from a tiny config or "
            f"skipped): specengine works on {works} ({one} at 1 compile), {wrong} wrong outputs; torch.compile works "
            f"on {tc_works}.")  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", help="comma-separated model types / torchvision names (default: all)")
    parser.add_argument("--quick", action="store_true", help="3 shapes per family instead of 9")
    parser.add_argument("--source", choices=("hf", "tv", "all"), default="all")
    parser.add_argument("--limit", type=int, default=0, help="at most this many families")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per engine and family")
    opts = parser.parse_args()
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    names = opts.families.split(",") if opts.families else None
    print(f"torch {torch.__version__}; torch.compile with an eager backend that counts graphs; 1 thread\n")
    print("| " + " | ".join(HEADER) + " |\n|" + "|".join(" --- " for _ in HEADER) + "|", flush=True)
    rows = []
    for row in sweep(names, opts.quick, opts.source, opts.limit, opts.timeout):
        rows.append(row)
        print(render(row), flush=True)
    print("\n" + summary(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
