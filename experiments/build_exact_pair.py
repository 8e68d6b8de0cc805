"""Build the exact-law pairs: two tiny Llama target/draft pairs over a 16-token vocabulary, small enough
that the law of the first J generated tokens can be enumerated exactly (V**J prefixes) in float64.

    .venv/bin/python experiments/build_exact_pair.py [--out specimpl/assets/exact_pair] [--check]

Writes, under ``--out`` (default ``specimpl/assets/exact_pair``):

* ``target/``, ``draft/``: LlamaForCausalLM, 2 layers (draft: 1), hidden 64, 2 heads of head_dim 32,
  tied embeddings, float32 safetensors.  The target is trained briefly on a random *second-order*
  Markov source over the letters a..m (so its next-token law depends on more than the last token and
  attention matters); the draft is smaller (1 layer, MLP width 64), trained for fewer steps on a perturbed
  source, 0.7 x the target's + 0.3 x another random table (close but different: a confident draft that is
  sometimes wrong; per-position acceptance sum_x min(p, q) ~0.65).
* ``markov_target/``, ``markov_draft/``: the same architecture with every attention output projection
  ``o_proj`` equal to zero (frozen at 0 during training).  The attention then adds exactly 0 to the
  residual stream, at every position, in any precision, so the logits are a function of the current
  token's embedding alone: the law of a generated sequence is a Markov chain whose (V, V) transition
  matrix is one forward pass over the V tokens.  Position (RoPE) plays no part.  Trained on a random
  first-order Markov source (the Markov draft: 1 layer, on 0.6 x source + 0.4 x another table).
* ``build_info.json``: the settings, per-model parameter counts and the SHA-256 of every weight file.

Vocabulary (one token per id, the same for all four models): ids 0..12 = "a".."m", 13 = <s> (BOS),
14 = </s> (EOS), 15 = <pad>.  The tokenizer is a byte-level BPE with no merges (each letter is its own
byte-level symbol, so a letter string tokenizes one id per character) -- the layout that
``harness.samples.engines.gguf_export`` (llama.cpp) accepts -- with the three specials as added tokens.
Training sequences open with <s> and contain letters only: the specials are possible but rare outputs
(together <= 6e-4 per token for the targets, <= 5e-3 for the drafts), so engines under test should run with
EOS ignored (the exact laws treat EOS as an ordinary token).

Why head_dim 32 (not 16): vLLM's Triton attention backend (the one that takes float32) requires
head_size >= 32; FlashAttention takes head_size % 8 == 0 but only float16/bfloat16.

Deterministic: numpy and torch seeded, one CPU thread, float32; rerunning gives byte-identical
safetensors on the same machine and software (``--check`` rebuilds into a temporary directory and
compares SHA-256).  Bit-identity across CPUs with different vector units or BLAS builds is not promised.
Runs in well under 2 minutes on one core.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from specimpl.hf import load_pair

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "specimpl" / "assets" / "exact_pair"

LETTERS = "abcdefghijklm"  # ids 0..12
N_LETTERS = len(LETTERS)
BOS, EOS, PAD = 13, 14, 15
VOCAB_SIZE = 16
SEED = 20260401

# shapes: hidden 64 = 2 heads x head_dim 32 for every model
ARCH = dict(hidden=64, heads=2, head_dim=32, max_positions=2048)
# name -> source order, layers, MLP width, training steps, seed offset, zero o_proj, and `mix`: the model
# is trained on (1 - mix) * source + mix * (another random table of the same order) -- a draft that is
# confident but sometimes wrong, rather than merely undertrained
MODELS = {
    "target": dict(order=2, layers=2, intermediate=128, steps=500, seed=1, zero_o_proj=False, mix=0.0),
    "draft": dict(order=2, layers=1, intermediate=64, steps=300, seed=2, zero_o_proj=False, mix=0.3),
    "markov_target": dict(order=1, layers=2, intermediate=128, steps=300, seed=3, zero_o_proj=True, mix=0.0),
    "markov_draft": dict(order=1, layers=1, intermediate=64, steps=200, seed=4, zero_o_proj=True, mix=0.4),
}
TRAIN = dict(batch=64, seq_len=32, lr=3e-3, warmup=20, weight_decay=0.01)
# Dirichlet concentration of the source's rows over the 13 letters (smaller: lower entropy)
SOURCE_ALPHA = {1: 0.25, 2: 0.25}


# ---------------------------------------------------------------------------------------------
# The source
# ---------------------------------------------------------------------------------------------
def source_table(order: int, alpha: float, seed: int) -> np.ndarray:
    """Transition table of a random Markov source of the given order over the letters.

    Returns (14,)*order + (13,): the law of the next letter given the last ``order`` symbols, where
    context index 13 stands for <s> (the start of the sequence, or "before it")."""
    if order not in (1, 2):
        raise ValueError(f"`order` must be 1 or 2; got {order!r}")
    rng = np.random.default_rng(seed)
    shape = (N_LETTERS + 1,) * order
    return rng.dirichlet(np.full(N_LETTERS, alpha), size=shape)  # (*shape, 13)


def sample_batch(table: np.ndarray, batch: int, seq_len: int, rng: np.random.Generator) -> torch.Tensor:
    """``batch`` sequences of <s> followed by ``seq_len`` letters from the source (batch, seq_len + 1)."""
    order = table.ndim - 1
    cdf = np.cumsum(table, axis=-1)  # (*ctx, 13)
    ctx = [np.full(batch, BOS) for _ in range(order)]  # the last `order` symbols, <s> = 13
    out = np.empty((batch, seq_len + 1), dtype=np.int64)
    out[:, 0] = BOS
    for t in range(1, seq_len + 1):
        c = cdf[tuple(ctx)]  # (batch, 13)
        u = rng.random(batch)[:, None]  # (batch, 1)
        x = np.minimum((c < u * c[:, -1:]).sum(1), N_LETTERS - 1)  # (batch,) inverse-CDF draw
        out[:, t] = x
        ctx = ctx[1:] + [x]
    return torch.from_numpy(out)


# ---------------------------------------------------------------------------------------------
# Models and training
# ---------------------------------------------------------------------------------------------
def make_model(layers: int, intermediate: int, zero_o_proj: bool):
    """A freshly initialised (seeded by the caller) float32 LlamaForCausalLM over the 16-token vocabulary."""
    conf = LlamaConfig(vocab_size=VOCAB_SIZE, hidden_size=ARCH["hidden"], intermediate_size=intermediate,
                       num_hidden_layers=layers, num_attention_heads=ARCH["heads"],
                       num_key_value_heads=ARCH["heads"], head_dim=ARCH["head_dim"],
                       max_position_embeddings=ARCH["max_positions"], bos_token_id=BOS, eos_token_id=EOS,
                       pad_token_id=PAD, tie_word_embeddings=True, rms_norm_eps=1e-5)
    model = LlamaForCausalLM(conf).float()
    if zero_o_proj:
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.data.zero_()
            layer.self_attn.o_proj.weight.requires_grad_(False)
    return model


def lr_at(step: int, steps: int) -> float:
    """Linear warm-up, then cosine decay to 10 % of the peak rate."""
    lr, warm = TRAIN["lr"], TRAIN["warmup"]
    if step < warm:
        return lr * (step + 1) / warm
    frac = (step - warm) / max(1, steps - warm)
    return lr * (0.1 + 0.45 * (1 + np.cos(np.pi * min(frac, 1.0))))


def train(model, table: np.ndarray, steps: int, seed: int) -> list[float]:
    """AdamW on next-token cross-entropy over fresh source batches; returns the loss every 50 steps."""
    rng = np.random.default_rng(seed)
    params = [p for p in model.parameters() if p.requires_grad]  # a frozen o_proj stays exactly 0
    opt = torch.optim.AdamW(params, lr=TRAIN["lr"], betas=(0.9, 0.95), weight_decay=TRAIN["weight_decay"])
    model.train()
    losses = []
    for step in range(steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps)
        x = sample_batch(table, TRAIN["batch"], TRAIN["seq_len"], rng)  # (batch, seq_len + 1)
        logits = model(input_ids=x[:, :-1]).logits  # (batch, seq_len, V)
        loss = F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        if step % 50 == 0 or step == steps - 1:
            losses.append(round(float(loss.detach()), 4))
    model.eval()
    return losses


def build_model(name: str, tables: dict, others: dict) -> tuple:
    """Train model ``name`` of :data:`MODELS` from its own seed; returns (model, losses)."""
    spec = MODELS[name]
    torch.manual_seed(SEED + spec["seed"])
    model = make_model(spec["layers"], spec["intermediate"], spec["zero_o_proj"])
    o, mix = spec["order"], spec["mix"]
    table = (1 - mix) * tables[o] + mix * others[o] if mix else tables[o]
    losses = train(model, table, spec["steps"], SEED + 100 + spec["seed"])
    if spec["zero_o_proj"]:
        assert all(float(layer.self_attn.o_proj.weight.abs().max()) == 0.0 for layer in model.model.layers)
    return model, losses


# ---------------------------------------------------------------------------------------------
# Tokenizer and files
# ---------------------------------------------------------------------------------------------
def build_tokenizer():
    """Byte-level BPE without merges: ids 0..12 the letters, 13..15 the special tokens (added tokens)."""
    tok = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(LETTERS)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    ids = fast.convert_tokens_to_ids(["<s>", "</s>", "<pad>"])
    if ids != [BOS, EOS, PAD] or len(fast) != VOCAB_SIZE:
        raise RuntimeError(f"tokenizer layout: specials at {ids}, {len(fast)} tokens; expected "
                           f"{[BOS, EOS, PAD]} and {VOCAB_SIZE}")
    return fast


def write_tokenizer_config(d: Path) -> None:
    """A tokenizer_config.json that transformers 4.x (vLLM) and 5.x both read: the generic fast class."""
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
           "pad_token": "<pad>", "add_bos_token": False, "add_eos_token": False,
           "clean_up_tokenization_spaces": False, "model_max_length": ARCH["max_positions"]}
    (d / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def save(model, tok, d: Path) -> None:
    """config.json, generation_config.json, model.safetensors (float32), tokenizer.json, tokenizer_config.json."""
    d.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    tok.save_pretrained(d)
    write_tokenizer_config(d)
    gen = {"bos_token_id": BOS, "eos_token_id": EOS, "pad_token_id": PAD}  # no sampling defaults
    (d / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")
    for extra in ("special_tokens_map.json", "chat_template.jinja"):
        if (d / extra).exists():
            (d / extra).unlink()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def build_all(out: Path) -> dict:
    """Train and save the four models under ``out``; returns the build record (also build_info.json)."""
    torch.set_num_threads(1)
    tables = {o: source_table(o, SOURCE_ALPHA[o], SEED + 10 * o) for o in (1, 2)}
    others = {o: source_table(o, SOURCE_ALPHA[o], SEED + 10 * o + 5) for o in (1, 2)}  # the drafts' perturbation
    tok = build_tokenizer()
    info = {"seed": SEED, "vocab": list(LETTERS) + ["<s>", "</s>", "<pad>"], "arch": ARCH, "train": TRAIN,
            "source_alpha": SOURCE_ALPHA, "models": {}}
    for name, spec in MODELS.items():
        model, losses = build_model(name, tables, others)
        save(model, tok, out / name)
        f = out / name / "model.safetensors"
        info["models"][name] = {**spec, "params": sum(p.numel() for p in model.parameters()),
                                "bytes": f.stat().st_size, "sha256": sha256(f), "losses": losses}
        print(f"{name}: {info['models'][name]['params']} params, {f.stat().st_size} bytes, "
              f"loss {losses[0]} -> {losses[-1]}, sha256 {info['models'][name]['sha256'][:16]}", flush=True)
    (out / "build_info.json").write_text(json.dumps(info, indent=2) + "\n")
    return info


# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------
def check_built(out: Path) -> None:
    """Load both pairs through specimpl.hf (config, tokenizer and causality checks), check the token
    layout, the sizes and the Markov models' zero o_proj."""
    for t, d in (("target", "draft"), ("markov_target", "markov_draft")):
        target, _ = load_pair(out / t, out / d, local_files_only=True)
        enc = target.tokenizer("abm", add_special_tokens=False)["input_ids"]
        if enc != [0, 1, 12] or target.vocab_size != VOCAB_SIZE:
            raise RuntimeError(f"{t}: 'abm' encodes to {enc}, vocab {target.vocab_size}")
    for name, spec in MODELS.items():
        f = out / name / "model.safetensors"
        if f.stat().st_size >= 1 << 20:
            raise RuntimeError(f"{name}: {f.stat().st_size} bytes (limit 1 MiB)")
        w = load_file(str(f))
        if any(v.dtype != torch.float32 for v in w.values()):
            raise RuntimeError(f"{name}: not all tensors are float32")
        o = [v for k, v in w.items() if k.endswith("o_proj.weight")]
        if spec["zero_o_proj"] and any(bool(v.any()) for v in o):
            raise RuntimeError(f"{name}: a nonzero o_proj in a Markov model")


def check_reproducible(info: dict) -> None:
    """Rebuild into a temporary directory and compare every weight file's SHA-256."""
    with tempfile.TemporaryDirectory() as tmp:
        again = build_all(Path(tmp))
    diff = [n for n in MODELS if again["models"][n]["sha256"] != info["models"][n]["sha256"]]
    if diff:
        raise RuntimeError(f"rebuild differs for {diff}: not reproducible on this machine")
    print("rebuild: identical SHA-256 for all four models", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(DEFAULT_OUT))
    ap.add_argument("--check", action="store_true", help="also rebuild in a temporary directory and compare SHA-256")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    out = Path(args.out)
    info = build_all(out)
    check_built(out)
    if args.check:
        check_reproducible(info)
    print(f"done in {time.monotonic() - t0:.1f} s; wrote {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
