"""A memory-bound target with the tiny target's output law: function-preserving widening of a Llama model.

Why: on the shipped tiny pair (:func:`specimpl.hf.load_tiny_pair`) a forward costs little more than the
per-call overhead, so scoring k + 1 tokens costs far more than scoring one and speculation barely pays.
On the hardware speculation is used on, decoding at small batch is memory-bound: a forward streams every
weight once, whatever the number of tokens.  This module builds a target with hundreds of millions of
parameters whose logits equal the trained tiny target's (to float round-off), so the tiny draft's
acceptance against it is the real one while its cost is a large model's.

The construction (Net2Net-style, Chen et al. 2016), for a Llama decoder with RMSNorm, width factor r
(hidden size, heads and MLP width all multiplied by r) and ``extra_layers`` appended layers:

    residual stream   h' = [h, h, ..., h] (r copies).  RMSNorm of h' equals RMSNorm of h copied (the mean
                      of squares is unchanged), so norm weights are copied r times.
    read from h'      (q, k, v, gate, up, lm_head) W' = [W, ..., W] / r along the input axis: W' h' = W h.
    heads, MLP units  r copies of each (rows of q, k, v, gate, up copied): copies compute equal values.
    write to h'       (o, down) rows copied r times (each copy of the stream receives the same update),
                      columns (the copied heads / units) divided by r: the r copies sum to the original.
    embedding         copied r times along the hidden axis; untied from the head (lm_head = embed' / r).
    extra layers      decoder layers whose output projections (o_proj, down_proj) are zero, so that the
                      residual passes through unchanged; their other weights are copies of the last
                      widened layer.  Dense kernels do the same work for zero weights: the cost is real.

On this project's CPU, PyTorch's default float32 linear layers take a matrix-vector path for one token and
a repacking GEMM for two or more, so that scoring 2 tokens cost about 1.8 times scoring one even at 337M
parameters.  :func:`prepack_mkldnn` converts the linear layers to oneDNN's pre-packed layout (as CPU
inference engines do): the weights are reordered once, and scoring k + 1 tokens then costs far less than
k + 1 single-token calls, yet still 2.5x one call at batch 1.  :mod:`harness.speedup.membound.skinny_linear` (the membound
suite's default, ``prepack = "skinny"``) goes further: a weight-streaming kernel under which 3 tokens cost
1.2x one.  Same weights, same outputs to float round-off; the target-only baseline uses the same converted
model.

r is a power of two, so the divisions are exact; the sums run in another order than the tiny model's, so
logits agree to float round-off (tests/speedup/test_widen.py checks it at r = 2).

Built models are cached under ``build/membound_pair/<key>/target`` (``config.json``, ``model.safetensors``
in float32, the tiny target's tokenizer files); ``<key>`` is a hash of the tiny target's files, the
settings and the source of the functions that write the files, so a cached model is reused only for the
same inputs (announced on stderr); concurrent builds write private folders and rename.  Nothing here is committed: the model is hundreds of MB.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Optional

import torch

from harness.speedup.membound.skinny_linear import replace_linears, use_skinny_linear
from specimpl.errors import check_arg
from specimpl.hf import TINY_PAIR_DIR

__all__ = ["apply_prepack", "PREPACKS", "prepack_mkldnn", "replace_linears", "widen_state_dict", "widened_config", "build_widened", "membound_dir", "BUILD_DIR", "DEFAULT_WIDTH",
           "DEFAULT_EXTRA_LAYERS", "parameter_count"]

BUILD_DIR = Path(__file__).resolve().parents[3] / "build" / "membound_pair"
DEFAULT_WIDTH = 8  # hidden 256 -> 2048, 4 -> 32 heads, MLP 512 -> 4096
DEFAULT_EXTRA_LAYERS = 4  # 4 trained + 4 pass-through layers: ~337M parameters, ~1.35 GB in float32
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")

_READ = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj")
_WRITE = ("self_attn.o_proj", "mlp.down_proj")
_NORMS = ("input_layernorm", "post_attention_layernorm")


def _check_settings(width: int, extra_layers: int) -> None:
    check_arg(isinstance(width, int) and width >= 1 and width & (width - 1) == 0, "width", width,
              "a power of two >= 1 (the divisions by width must be exact)")
    check_arg(isinstance(extra_layers, int) and extra_layers >= 0, "extra_layers", extra_layers, "an integer >= 0")


def widened_config(config: dict, width: int, extra_layers: int) -> dict:
    """The widened model's config.json (a dict) from the tiny one's."""
    _check_settings(width, extra_layers)
    check_arg(config.get("model_type") == "llama", "config", config.get("model_type"), "a Llama config")
    out = dict(config)
    hd = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    out.update(hidden_size=config["hidden_size"] * width, intermediate_size=config["intermediate_size"] * width,
               num_attention_heads=config["num_attention_heads"] * width,
               num_key_value_heads=config.get("num_key_value_heads", config["num_attention_heads"]) * width,
               head_dim=hd, num_hidden_layers=config["num_hidden_layers"] + extra_layers,
               tie_word_embeddings=False, dtype="float32")
    return out


def _heads_tile(w: torch.Tensor, r: int, axis: int) -> torch.Tensor:
    """r copies along ``axis`` (copy-major: [w, w, ..., w])."""
    reps = [1] * w.dim()
    reps[axis] = r
    return w.repeat(*reps)


def _widen_layer(sd: dict, i: int, r: int) -> dict:
    """Layer i's widened tensors, keyed by their names under ``model.layers.{i}.``."""
    pre = f"model.layers.{i}."
    out = {}
    for name in _NORMS:
        out[f"{name}.weight"] = _heads_tile(sd[pre + name + ".weight"], r, 0)  # (r H,)
    for name in _READ:
        w = sd[pre + name + ".weight"]  # (out, H)
        out[f"{name}.weight"] = _heads_tile(_heads_tile(w, r, 0), r, 1) / r  # (r out, r H)
    for name in _WRITE:
        w = sd[pre + name + ".weight"]  # (H, in)
        out[f"{name}.weight"] = _heads_tile(_heads_tile(w, r, 0), r, 1) / r  # (r H, r in)
    return out


def widen_state_dict(sd: dict, config: dict, width: int, extra_layers: int) -> dict:
    """The widened model's float32 state dict from the tiny Llama's (``sd``: name -> tensor)."""
    _check_settings(width, extra_layers)
    r, L = width, config["num_hidden_layers"]
    sd = {k: v.to(torch.float32) for k, v in sd.items()}  # float16 -> float32 and r = 2^j divisions: exact
    emb = sd["model.embed_tokens.weight"]  # (V, H)
    out = {"model.embed_tokens.weight": _heads_tile(emb, r, 1),  # (V, r H)
           "lm_head.weight": _heads_tile(sd.get("lm_head.weight", emb), r, 1) / r,  # (V, r H)
           "model.norm.weight": _heads_tile(sd["model.norm.weight"], r, 0)}
    last = None
    for i in range(L):
        last = _widen_layer(sd, i, r)
        out.update({f"model.layers.{i}.{k}": v for k, v in last.items()})
    for j in range(L, L + extra_layers):
        for k, v in last.items():
            is_write = any(k.startswith(w) for w in _WRITE)
            out[f"model.layers.{j}.{k}"] = torch.zeros_like(v) if is_write else v.clone()
    return {k: v.contiguous() for k, v in out.items()}


def parameter_count(config: dict) -> int:
    """Parameters of a (bias-free, untied) Llama config."""
    H, I, V, L = config["hidden_size"], config["intermediate_size"], config["vocab_size"], config["num_hidden_layers"]
    hd = config.get("head_dim") or H // config["num_attention_heads"]
    nh, nkv = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    per_layer = H * hd * (2 * nh + 2 * nkv) + 3 * H * I + 2 * H
    return L * per_layer + 2 * V * H + H


def _key(src: Path, width: int, extra_layers: int) -> str:
    h = hashlib.sha256()
    for name in ("config.json", "model.safetensors") + _TOKENIZER_FILES:
        p = src / name
        h.update(name.encode() + b"\0" + (p.read_bytes() if p.exists() else b"<absent>") + b"\0")
    h.update(json.dumps({"width": width, "extra_layers": extra_layers}, sort_keys=True).encode())
    for fn in (widened_config, widen_state_dict, _widen_layer, _heads_tile):  # the code that makes the files
        h.update(inspect.getsource(fn).encode())
    h.update(repr((_READ, _WRITE, _NORMS, _TOKENIZER_FILES)).encode())
    return h.hexdigest()[:16]


def membound_dir(width: int = DEFAULT_WIDTH, extra_layers: int = DEFAULT_EXTRA_LAYERS, src: Optional[Path] = None,
                 build_dir: Optional[Path] = None) -> Path:
    """Where the widened target of these settings lives (built or not): ``<build_dir>/<key>/target``."""
    _check_settings(width, extra_layers)
    src = Path(src) if src is not None else TINY_PAIR_DIR / "target"
    return Path(build_dir or BUILD_DIR) / f"w{width}_x{extra_layers}_{_key(src, width, extra_layers)}" / "target"


def build_widened(width: int = DEFAULT_WIDTH, extra_layers: int = DEFAULT_EXTRA_LAYERS, src: Optional[Path] = None,
                  build_dir: Optional[Path] = None, quiet: bool = False) -> Path:
    """Build (or reuse, announced) the widened target; returns its directory (loadable by HFModel)."""
    from safetensors.torch import load_file, save_file
    src = Path(src) if src is not None else TINY_PAIR_DIR / "target"
    out = membound_dir(width, extra_layers, src, build_dir)
    if (out / "model.safetensors").exists() and (out / "config.json").exists():
        if not quiet:
            print(f"membound: reusing the widened target built earlier for the same inputs: {out}", file=sys.stderr)
        return out
    config = json.loads((src / "config.json").read_text())
    wide = widened_config(config, width, extra_layers)
    sd = widen_state_dict(load_file(str(src / "model.safetensors")), config, width, extra_layers)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".target.", dir=out.parent))  # private: concurrent builds do not collide
    save_file(sd, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    del sd
    (tmp / "config.json").write_text(json.dumps(wide, indent=2, sort_keys=True) + "\n")
    for name in _TOKENIZER_FILES:
        if (src / name).exists():
            shutil.copy2(src / name, tmp / name)
    (tmp / "build_info.json").write_text(json.dumps(
        {"source": "specimpl/assets/tiny_pair/target", "width": width, "extra_layers": extra_layers,
         "parameters": parameter_count(wide), "construction": "harness.speedup.membound.widen (function-preserving widening)"},
        indent=2, sort_keys=True) + "\n")
    try:
        tmp.rename(out)  # complete or absent: nothing half-written under the final name
    except OSError:  # another process finished the same build first: keep its (identical) files
        shutil.rmtree(tmp, ignore_errors=True)
    if not quiet:
        print(f"membound: built the widened target ({parameter_count(wide) / 1e6:.0f}M parameters) in {out}",
              file=sys.stderr)
    return out


PREPACKS = ("none", "mkldnn", "skinny")  # how a target's linear layers run (see apply_prepack)


def apply_prepack(model, kind: str):
    """``model`` with its linear layers as ``kind`` says: 'none' (PyTorch's default), 'mkldnn' (oneDNN's
    pre-packed layout, :func:`prepack_mkldnn`) or 'skinny' (the weight-streaming kernel of
    :mod:`harness.speedup.membound.skinny_linear`); returns ``model``."""
    check_arg(kind in PREPACKS, "prepack", kind, f"one of {list(PREPACKS)}")
    if kind == "mkldnn":
        return prepack_mkldnn(model)
    if kind == "skinny":
        return use_skinny_linear(model)
    return model


def prepack_mkldnn(model):
    """Replace every ``torch.nn.Linear`` of ``model`` (an :class:`specimpl.hf.HFModel`, float32, on the CPU)
    by ``torch.utils.mkldnn.MkldnnLinear`` (weights reordered once into oneDNN's layout); returns ``model``."""
    from torch.utils.mkldnn import MkldnnLinear
    check_arg(torch.backends.mkldnn.is_available(), "prepack", "mkldnn", "a PyTorch build with oneDNN (mkldnn)")
    check_arg(str(model.device) == "cpu", "model.device", str(model.device), "'cpu' (oneDNN pre-packing is for CPUs)")

    def make(linear):
        check_arg(linear.weight.dtype == torch.float32, "model dtype", linear.weight.dtype, "torch.float32")
        return MkldnnLinear(linear, torch.float32)
    return replace_linears(model, make)


