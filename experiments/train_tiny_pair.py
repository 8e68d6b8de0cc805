"""Train the shipped tiny target/draft pair on the Python standard library's source, byte-level.

    .venv/bin/python experiments/train_tiny_pair.py [--config experiments/tiny_pair.toml]
                     [--out specimpl/assets/tiny_pair] [--minutes M] [--threads N]

Corpus: the files ``sysconfig.get_paths()["stdlib"]/*.py`` of the running interpreter, sorted by
name (every machine has them; record of the exact files and their SHA-256 goes to train_log.json).
Vocabulary: bytes 0..255 plus <bos>=256, <eos>=257, <pad>=258; the tokenizer files are written
locally with `tokenizers` (nothing is downloaded).

1. target: LlamaForCausalLM (4 layers, width 256), next-token cross-entropy plus a small auxiliary
   loss at the early exits (hidden state after layers 1 and 2 through the final norm and head), so
   a truncated target makes a usable early-exit draft (``specimpl.hf_drafts``);
2. draft: LlamaForCausalLM (1 layer, width 128), distilled from the trained target.

Reproducible from the seed in the config (same interpreter's stdlib, same thread count); the
``minutes`` cap stops training early if the machine is slow, and the log says so.  Weights are
saved with ``save_pretrained(safe_serialization=True)`` in the config's storage dtype.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import sys
import sysconfig
import time
import tomllib
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode map (so a ByteLevel tokenizer has id == byte)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def build_tokenizer(cfg: dict):
    """A byte-level fast tokenizer whose token id equals the byte value; specials at 256..258."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {ch: b for b, ch in bytes_to_unicode().items()}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    t = cfg["tokens"]
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>")
    assert fast.convert_tokens_to_ids(["<bos>", "<eos>", "<pad>"]) == [t["bos"], t["eos"], t["pad"]]
    return fast


def load_corpus(cfg: dict):
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(stdlib.glob(cfg["corpus"]["glob"]))
    if not files:
        raise SystemExit(f"no files match {cfg['corpus']['glob']!r} under {stdlib}")
    eos = cfg["tokens"]["eos"]
    train, valid, record = [], [], []
    n_train = 0
    for i, f in enumerate(files):
        data = f.read_bytes()
        record.append({"file": f.name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()})
        arr = np.frombuffer(data, dtype=np.uint8).astype(np.int64)
        if i % cfg["corpus"]["valid_every"] == cfg["corpus"]["valid_every"] - 1:
            valid.append(arr)
            valid.append(np.array([eos]))
        elif n_train < cfg["corpus"]["max_bytes"]:
            train.append(arr)
            train.append(np.array([eos]))
            n_train += len(arr) + 1
    return np.concatenate(train), np.concatenate(valid), {"stdlib": str(stdlib), "files": record}


def batches(data: np.ndarray, batch: int, seq_len: int, rng: np.random.Generator, bos: int) -> torch.Tensor:
    starts = rng.integers(0, len(data) - seq_len, size=batch)
    x = np.stack([data[s:s + seq_len] for s in starts])  # (batch, seq_len)
    x = np.concatenate([np.full((batch, 1), bos), x], 1)  # (batch, seq_len + 1) every window opens with <bos>
    return torch.from_numpy(x)


def make_model(cfg: dict, part: str, max_pos: int):
    from transformers import LlamaConfig, LlamaForCausalLM
    m, t = cfg[part], cfg["tokens"]
    conf = LlamaConfig(vocab_size=t["vocab_size"], hidden_size=m["hidden"], intermediate_size=m["intermediate"],
                       num_hidden_layers=m["layers"], num_attention_heads=m["heads"], num_key_value_heads=m["heads"],
                       max_position_embeddings=max_pos, bos_token_id=t["bos"], eos_token_id=t["eos"],
                       pad_token_id=t["pad"], tie_word_embeddings=True, rms_norm_eps=1e-5)
    return LlamaForCausalLM(conf)


def lr_at(step: int, m: dict) -> float:
    if step < m["warmup"]:
        return m["lr"] * (step + 1) / m["warmup"]
    frac = (step - m["warmup"]) / max(1, m["steps"] - m["warmup"])
    return m["lr"] * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))


@torch.no_grad()
def evaluate(model, valid: np.ndarray, seq_len: int, bos: int, n_windows: int = 32) -> float:
    """Mean next-byte cross-entropy (nats) on fixed validation windows."""
    rng = np.random.default_rng(0)
    x = batches(valid, n_windows, seq_len, rng, bos)
    model.eval()
    logits = model(input_ids=x[:, :-1]).logits
    model.train()
    return float(F.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten()))


def train(model, cfg, part, data, valid, rng, deadline, log, teacher=None):
    from tqdm import tqdm
    m = cfg[part]
    opt = torch.optim.AdamW(model.parameters(), lr=m["lr"], betas=(0.9, 0.95), weight_decay=0.1)
    bos = cfg["tokens"]["bos"]
    model.train()
    history = []
    stopped_early = False
    step = 0
    bar = tqdm(range(m["steps"]), desc=f"train {part}", mininterval=10, file=sys.stderr)
    for step in bar:
        if time.monotonic() > deadline:
            stopped_early = True
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step, m)
        x = batches(data, m["batch"], m["seq_len"], rng, bos)  # (batch, seq_len + 1)
        inp, tgt = x[:, :-1], x[:, 1:]
        if part == "target":
            out = model(input_ids=inp, output_hidden_states=bool(m["exit_layers"]))
            loss = F.cross_entropy(out.logits.flatten(0, 1), tgt.flatten())
            for L in m["exit_layers"]:
                h = model.model.norm(out.hidden_states[L])  # (batch, seq_len, hidden) after layer L
                aux = F.cross_entropy(model.lm_head(h).flatten(0, 1), tgt.flatten())
                loss = loss + m["exit_weight"] * aux
        else:
            logits = model(input_ids=inp).logits  # (batch, seq_len, V)
            with torch.no_grad():
                p_t = torch.softmax(teacher(input_ids=inp).logits, -1)  # (batch, seq_len, V)
            logq = torch.log_softmax(logits, -1)
            soft = -(p_t * logq).sum(-1).mean()
            hard = F.cross_entropy(logits.flatten(0, 1), tgt.flatten())
            loss = m["distill_weight"] * soft + (1 - m["distill_weight"]) * hard
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 50 == 0 or step == m["steps"] - 1:
            history.append({"step": step, "loss": float(loss.detach()), "t": time.monotonic()})
            bar.set_postfix(loss=f"{float(loss.detach()):.3f}")
            print(f"[{part}] step {step} loss {float(loss.detach()):.4f}", file=log, flush=True)
    done = step + (0 if stopped_early else 1)
    return {"steps_done": done, "steps_planned": m["steps"], "stopped_early": stopped_early, "history": history}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=str(ROOT / "experiments" / "tiny_pair.toml"))
    ap.add_argument("--out", default=str(ROOT / "specimpl" / "assets" / "tiny_pair"))
    ap.add_argument("--minutes", type=float, default=None, help="wall-clock cap (overrides the config)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--steps-scale", type=float, default=1.0, help="scale every step count (smoke tests)")
    args = ap.parse_args(argv)
    cfg = tomllib.loads(Path(args.config).read_text())
    for part in ("target", "draft"):
        cfg[part]["steps"] = max(2, int(cfg[part]["steps"] * args.steps_scale))
    minutes = args.minutes if args.minutes is not None else cfg["minutes"]
    threads = args.threads if args.threads is not None else cfg["threads"]
    torch.set_num_threads(threads)
    torch.manual_seed(cfg["seed"])
    rng = np.random.default_rng(cfg["seed"])
    t0 = time.monotonic()
    deadline = t0 + 60 * minutes
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = sys.stdout

    data, valid, corpus = load_corpus(cfg)
    print(f"corpus: {len(corpus['files'])} files, train {len(data)} bytes, valid {len(valid)} bytes", flush=True)
    max_pos = cfg["save"]["max_position_embeddings"]

    target = make_model(cfg, "target", max_pos)
    t_info = train(target, cfg, "target", data, valid, rng, t0 + 60 * minutes * 0.72, log)
    target.eval()
    t_info["valid_nats_per_byte"] = evaluate(target, valid, cfg["target"]["seq_len"], cfg["tokens"]["bos"])
    for p in target.parameters():
        p.requires_grad_(False)

    torch.manual_seed(cfg["seed"] + 1)
    draft = make_model(cfg, "draft", max_pos)
    d_info = train(draft, cfg, "draft", data, valid, rng, deadline, log, teacher=target)
    draft.eval()
    d_info["valid_nats_per_byte"] = evaluate(draft, valid, cfg["draft"]["seq_len"], cfg["tokens"]["bos"])

    dtype = getattr(torch, cfg["save"]["dtype"])
    tok = build_tokenizer(cfg)
    for name, model in (("target", target), ("draft", draft)):
        d = out / name
        model.to(dtype).save_pretrained(d, safe_serialization=True)
        tok.save_pretrained(d)
    from harness.core.provenance import atomic_write_json, metadata
    info = metadata(cfg, cfg["seed"])
    info.update({"threads": threads, "minutes_cap": minutes, "wall_s": time.monotonic() - t0,
                 "target": t_info, "draft": d_info, "corpus": corpus,
                 "params": {"target": sum(p.numel() for p in target.parameters()),
                            "draft": sum(p.numel() for p in draft.parameters())}})
    atomic_write_json(out / "train_log.json", info)
    print(f"done in {info['wall_s']:.0f} s; valid nats/byte target {t_info['valid_nats_per_byte']:.3f}, "
          f"draft {d_info['valid_nats_per_byte']:.3f}; saved to {out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
