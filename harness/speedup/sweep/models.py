"""The models a sweep cell names: the shipped tiny pair, the widened (memory-bound) target, random Llama shapes."""
from __future__ import annotations

import json

import torch

from harness.speedup.membound.widen import apply_prepack, build_widened
from specimpl.errors import check_arg
from specimpl.hf import TINY_PAIR_DIR, HFModel, load_tiny_pair
from specimpl.hf_drafts import tiny_pair_variants, variant_names

__all__ = ["SHAPES", "resolve_model", "tiny_model", "widened_model", "tiny_model_names", "check_tiny_names",
           "check_model_specs"]

_PAIRS: dict = {}

_WIDE: dict = {}

# Llama-shaped architectures for cost curves with random weights (timing does not depend on weights).
SHAPES = {
    "llama-1.1b": dict(hidden_size=2048, num_hidden_layers=22, num_attention_heads=32, num_key_value_heads=4,
                       intermediate_size=5632, vocab_size=32000),  # TinyLlama-1.1B
    "llama-160m": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, num_key_value_heads=12,
                       intermediate_size=3072, vocab_size=32000),  # JackFram/llama-160m
    "llama-68m": dict(hidden_size=768, num_hidden_layers=2, num_attention_heads=12, num_key_value_heads=12,
                      intermediate_size=3072, vocab_size=32000),  # JackFram/llama-68m
}


# -- models -----------------------------------------------------------------------------------------
def _dtype(name: str):
    check_arg(name in ("float32", "float16", "bfloat16", "float64"), "dtype", name,
              "'float32', 'float16', 'bfloat16' or 'float64'")
    return getattr(torch, name)


def tiny_model_names() -> list[str]:
    """What :func:`tiny_model` takes: 'target' and the draft variants of the shipped pair (from its config alone)."""
    layers = json.loads((TINY_PAIR_DIR / "target" / "config.json").read_text())["num_hidden_layers"]
    return ["target", *variant_names(layers)]


def check_tiny_names(key: str, names) -> None:
    """A suite's list of tiny-pair models (``key``, e.g. 'real.drafts'), before any cell runs; ValueError naming it."""
    known = tiny_model_names()
    check_arg(isinstance(names, list) and len(names) > 0 and all(isinstance(n, str) for n in names), key, names,
              "a non-empty list of tiny-pair model names")
    bad = [n for n in names if n not in known]
    check_arg(not bad, key, names, f"names among {known} ({bad} unknown)")


def check_model_specs(key: str, specs) -> None:
    """A list of :func:`resolve_model` specs ('tiny:<name>', 'random:<shape>') before any cell runs."""
    check_arg(isinstance(specs, list) and len(specs) > 0 and all(isinstance(m, str) for m in specs), key, specs,
              "a non-empty list of 'tiny:<name>' or 'random:<shape>'")
    tiny, bad = tiny_model_names(), []
    for m in specs:
        kind, _, name = m.partition(":")
        if not ((kind == "tiny" and name in tiny) or (kind == "random" and name in SHAPES)):
            bad.append(m)
    check_arg(not bad, key, specs, f"'tiny:<name>' with a name among {tiny}, or 'random:<shape>' with a shape among "
                                   f"{sorted(SHAPES)} ({bad} unknown)")


def tiny_model(name: str, device: str, dtype: str):
    """The shipped tiny pair's target ('target'), or a draft variant (names of specimpl.hf_drafts.tiny_pair_variants)."""
    key = (str(device), dtype)
    if key not in _PAIRS:
        _PAIRS.clear()  # one pair in memory at a time
        _PAIRS[key] = load_tiny_pair(device=device, dtype=_dtype(dtype))
    target, draft = _PAIRS[key]
    if name == "target":
        return target
    return tiny_pair_variants(target, draft, [name])[name]


def widened_model(width: int, extra_layers: int, device: str, dtype: str, prepack: str = "none"):
    """The widened target of :mod:`harness.speedup.membound.widen` (built on first use, cached on disk by content; one in
    memory), its linear layers converted as ``prepack`` says (:func:`harness.speedup.membound.widen.apply_prepack`)."""
    key = (width, extra_layers, str(device), dtype, prepack)
    if key not in _WIDE:
        _WIDE.clear()
        path = build_widened(width, extra_layers)
        model = HFModel.from_pretrained(path, dtype=_dtype(dtype), device=device, local_files_only=True)
        _WIDE[key] = apply_prepack(model, prepack)
    return _WIDE[key]


def _random_hf(shape: str, device: str, dtype: str, seed: int):
    """A Llama-shaped causal LM with random weights (for cost curves only)."""
    check_arg(shape in SHAPES, "shape", shape, f"one of {sorted(SHAPES)}")
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    conf = LlamaConfig(**SHAPES[shape], max_position_embeddings=4096)
    with torch.device(device):
        net = LlamaForCausalLM(conf).to(_dtype(dtype)).eval()
    return HFModel(net, name=f"random-{shape}", logits_dtype=torch.float32)


def resolve_model(spec: str, device: str, dtype: str = "float32", seed: int = 0):
    """'tiny:<variant>' (shipped pair) or 'random:<shape>' (random weights, see SHAPES)."""
    kind, _, name = spec.partition(":")
    if kind == "tiny":
        return tiny_model(name, device, dtype)
    if kind == "random":
        return _random_hf(name, device, dtype, seed)
    raise ValueError(f"`model` must be 'tiny:<variant>' or 'random:<shape>'; got {spec!r}")
