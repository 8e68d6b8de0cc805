"""A transformers Llama checkpoint (safetensors) as a float32 GGUF file that llama.cpp runs.

    python -m harness.samples.engines.gguf_export tiny tiny_target.gguf

    from harness.samples.engines.gguf_export import export_gguf
    export_gguf("specimpl/assets/tiny_pair/target", "tiny_target.gguf")

What is written (the layout of llama.cpp's own ``convert_hf_to_gguf.py`` for ``LlamaForCausalLM``):

* every weight in float32 (``general.file_type`` = ALL_F32), so that llama.cpp's forward runs on the
  very numbers the float64 scorer reads (the shipped pair stores float16: the cast is exact);
* the query and key projections permuted from Hugging Face's rotate-half layout to the interleaved
  pairs of llama.cpp's rotary embedding (:func:`permute_rotary`);
* no ``output.weight`` when the input and output embeddings are tied: llama.cpp then reuses
  ``token_embd.weight``;
* the tokenizer as a byte-level ``gpt2`` vocabulary: the model's own token strings, in id order (ids are
  kept exactly: token i of the GGUF is token i of the checkpoint), added special tokens as CONTROL.
  llama.cpp refuses a ``gpt2`` vocabulary without merges, so a checkpoint whose BPE has none (the shipped
  byte-level tokenizer) gets one merge of two special tokens (:data:`SENTINEL_MERGE_NOTE`), which never
  fires: BPE starts from single characters and no merge builds a special token, so llama.cpp's
  tokenizer maps text to its bytes exactly as the checkpoint's does.

Only the plain Llama architecture with default rotary embeddings is supported; anything else is refused
with the config key and value that are not (scipy-style ValueError), before the output is touched.  The
file is written to a temporary name beside ``out`` and renamed into place: no half-written GGUF.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from harness.core.models import resolve_model
from specimpl.errors import check_arg

__all__ = ["GGUFVocabulary", "gguf_vocabulary", "permute_rotary", "llama_tensors", "export_gguf",
           "SENTINEL_MERGE_NOTE", "main"]

ARCH = "llama"
SENTINEL_MERGE_NOTE = ("merge of the first two special tokens: never applied (BPE builds no special token), "
                       "present because llama.cpp requires a non-empty merges list for gpt2 vocabularies")
# HF name (after "model.layers.{i}.") -> GGUF name (after "blk.{i}.")
_LAYER_TENSORS = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
_GLOBAL_TENSORS = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
                   "lm_head.weight": "output.weight"}


@dataclass(frozen=True)
class GGUFVocabulary:
    """``tokens[i]``: the checkpoint's string of token id i (byte-level characters); ``types[i]`` a
    ``gguf.TokenType`` value; ``merges`` "left right" strings; special ids (None when absent)."""

    tokens: tuple
    types: tuple
    merges: tuple
    bos: Optional[int]
    eos: Optional[int]
    pad: Optional[int]
    sentinel_merge: bool


def _read_json(path: Path, what: str) -> dict:
    check_arg(path.is_file(), what, str(path), "an existing file")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"`{what}` must be valid JSON; got {str(path)!r} ({e})") from None


def gguf_vocabulary(model_dir, vocab_size: int, config: dict) -> GGUFVocabulary:
    """The byte-level BPE vocabulary of ``model_dir/tokenizer.json`` in id order, checked to cover ids
    0 .. vocab_size - 1 exactly once."""
    import gguf
    tj = _read_json(Path(model_dir) / "tokenizer.json", "tokenizer.json")
    model = tj.get("model", {})
    check_arg(model.get("type") == "BPE", "tokenizer.json: model.type", model.get("type"), "'BPE'")
    pre = tj.get("pre_tokenizer") or {}
    check_arg(pre.get("type") == "ByteLevel", "tokenizer.json: pre_tokenizer.type", pre.get("type"),
              "'ByteLevel' (a byte-level BPE)")
    by_id, special = {}, set()
    for s, i in model.get("vocab", {}).items():
        by_id.setdefault(int(i), []).append(s)
    for a in tj.get("added_tokens", []):
        by_id.setdefault(int(a["id"]), []).append(a["content"])
        if a.get("special", False):
            special.add(int(a["id"]))
    bad = sorted(i for i in range(vocab_size) if len(set(by_id.get(i, []))) != 1)
    extra = sorted(i for i in by_id if not 0 <= i < vocab_size)
    check_arg(not bad and not extra, "tokenizer.json", {"ids without exactly one string": bad[:5], "out of range": extra[:5]},
              f"one string for each id 0..{vocab_size - 1} (config.vocab_size)")
    tokens = tuple(by_id[i][0] for i in range(vocab_size))
    types = tuple(int(gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL) for i in range(vocab_size))
    merges = tuple(m if isinstance(m, str) else " ".join(m) for m in model.get("merges", []))
    sentinel = not merges
    if sentinel:
        sp = sorted(special)
        check_arg(len(sp) >= 2, "tokenizer.json: added_tokens", sp, "at least two special tokens when the BPE has "
                  "no merges (one merge of two special tokens stands in for the list llama.cpp requires)")
        merges = (f"{tokens[sp[0]]} {tokens[sp[1]]}",)

    def special_id(key):
        v = config.get(key)
        return int(v) if isinstance(v, int) and 0 <= v < vocab_size else None
    return GGUFVocabulary(tokens, types, merges, special_id("bos_token_id"), special_id("eos_token_id"),
                          special_id("pad_token_id"), sentinel)


def permute_rotary(w: np.ndarray, n_head: int) -> np.ndarray:
    """Rows of a query/key projection (n_head * head_dim, in) from Hugging Face's rotate-half order
    (first half of each head's dims paired with the second half) to llama.cpp's interleaved pairs."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _check_config(config: dict) -> None:
    check_arg(config.get("model_type") == "llama", "config.json: model_type", config.get("model_type"),
              "'llama' (only the plain Llama architecture is exported)")
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    kind = rope.get("rope_type", rope.get("type", "default"))
    check_arg(kind == "default", "config.json: rope type", kind, "'default' (no rotary scaling)")
    for key in ("attention_bias", "mlp_bias"):
        check_arg(not config.get(key, False), f"config.json: {key}", config.get(key), "false")
    check_arg(config.get("hidden_act", "silu") == "silu", "config.json: hidden_act", config.get("hidden_act"), "'silu'")


def llama_tensors(model_dir, config: dict) -> Iterator[tuple[str, np.ndarray]]:
    """(GGUF name, float32 array) of every weight of ``model_dir/model.safetensors`` (HF layout), q/k permuted."""
    from safetensors import safe_open
    path = Path(model_dir) / "model.safetensors"
    check_arg(path.is_file(), "model.safetensors", str(path), "an existing file (sharded checkpoints are not supported)")
    n_head, n_kv = int(config["num_attention_heads"]), int(config.get("num_key_value_heads") or config["num_attention_heads"])
    with safe_open(str(path), "pt") as f:
        for name in f.keys():
            w = f.get_tensor(name).float().numpy()
            if name in _GLOBAL_TENSORS:
                if name == "lm_head.weight" and config.get("tie_word_embeddings", False):
                    continue
                yield _GLOBAL_TENSORS[name], w
                continue
            parts = name.split(".", 3)  # model, layers, i, rest
            check_arg(len(parts) == 4 and parts[:2] == ["model", "layers"] and parts[3] in _LAYER_TENSORS,
                      "model.safetensors: tensor", name, "a Llama weight (embed_tokens, layers.N.*, norm, lm_head)")
            if parts[3] == "self_attn.q_proj.weight":
                w = permute_rotary(w, n_head)
            elif parts[3] == "self_attn.k_proj.weight":
                w = permute_rotary(w, n_kv)
            yield f"blk.{int(parts[2])}.{_LAYER_TENSORS[parts[3]]}", w


def _rope_theta(config: dict) -> float:
    rope = config.get("rope_parameters") or {}
    return float(rope.get("rope_theta", config.get("rope_theta", 10000.0)))


def _write_hparams(w, config: dict, name: str) -> None:
    import gguf
    n_head = int(config["num_attention_heads"])
    head_dim = int(config.get("head_dim") or config["hidden_size"] // n_head)
    w.add_name(name)
    w.add_context_length(int(config.get("max_position_embeddings", 2048)))
    w.add_embedding_length(int(config["hidden_size"]))
    w.add_block_count(int(config["num_hidden_layers"]))
    w.add_feed_forward_length(int(config["intermediate_size"]))
    w.add_head_count(n_head)
    w.add_head_count_kv(int(config.get("num_key_value_heads") or n_head))
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(_rope_theta(config))
    w.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-6)))
    w.add_vocab_size(int(config["vocab_size"]))
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))


def _write_vocab(w, vocab: GGUFVocabulary, add_bos: bool) -> None:
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(list(vocab.tokens))
    w.add_token_types(list(vocab.types))
    w.add_token_merges(list(vocab.merges))
    for value, add in ((vocab.bos, w.add_bos_token_id), (vocab.eos, w.add_eos_token_id), (vocab.pad, w.add_pad_token_id)):
        if value is not None:
            add(value)
    w.add_add_bos_token(bool(add_bos and vocab.bos is not None))
    w.add_add_eos_token(False)
    if vocab.sentinel_merge:
        w.add_string("specverify.merges_note", SENTINEL_MERGE_NOTE)


def export_gguf(model_dir, out, *, add_bos: bool = True, name: Optional[str] = None) -> Path:
    """Write the Llama checkpoint in ``model_dir`` (config.json, tokenizer.json, model.safetensors) as a
    float32 GGUF at ``out``; returns ``out``.  ``add_bos``: llama.cpp prepends the checkpoint's BOS to
    text prompts (the project's prompts start with it: :func:`specimpl.hf.tiny_pair_prompts`)."""
    import gguf
    model_dir, out = Path(model_dir), Path(out)
    check_arg(model_dir.is_dir(), "model_dir", str(model_dir), "a checkpoint folder")
    config = _read_json(model_dir / "config.json", "config.json")
    _check_config(config)
    vocab = gguf_vocabulary(model_dir, int(config["vocab_size"]), config)
    tensors = list(llama_tensors(model_dir, config))  # read (and checked) before the output is touched
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        w = gguf.GGUFWriter(str(tmp), ARCH)
        _write_hparams(w, config, name or model_dir.name)
        _write_vocab(w, vocab, add_bos)
        for tname, arr in tensors:
            w.add_tensor(tname, np.ascontiguousarray(arr, dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.samples.engines.gguf_export", description=__doc__.split("\n")[0])
    ap.add_argument("model_dir", help="a Llama checkpoint folder (config.json, tokenizer.json, model.safetensors) or a "
                                      "shipped name (tiny, exact-markov, ...)")
    ap.add_argument("out", help="the GGUF file to write")
    ap.add_argument("--no-add-bos", action="store_true", help="llama.cpp does not prepend BOS to text prompts")
    args = ap.parse_args(argv)
    try:
        path = export_gguf(resolve_model(args.model_dir, "model_dir"), args.out, add_bos=not args.no_add_bos)
    except (ValueError, KeyError) as e:  # UsageError (an unknown model name) is a ValueError
        print(f"gguf_export: {e}", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
