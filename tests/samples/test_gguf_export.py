"""The GGUF export of a Llama checkpoint (harness/samples/engines/gguf_export.py): the shipped tiny target converts,
and reads back with the expected names, shapes, float32 data, vocabulary and hyperparameters.  Needs only
the ``gguf`` package (the ``llama`` extra); skipped without it."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

gguf = pytest.importorskip("gguf", reason="the `gguf` package is not installed (pip install -e '.[llama]')")

from harness.samples.engines.gguf_export import export_gguf, main, permute_rotary  # noqa: E402
from specimpl.hf import TINY_PAIR_DIR  # noqa: E402

TARGET = TINY_PAIR_DIR / "target"


@pytest.fixture(scope="module")
def reader(tmp_path_factory):
    path = export_gguf(TARGET, tmp_path_factory.mktemp("gguf") / "target.gguf")
    return gguf.GGUFReader(str(path))


def _field(r, key):
    return r.fields[key].contents()


def test_tensors_names_shapes_and_float32_data(reader):
    from safetensors.numpy import load_file
    hf = load_file(str(TARGET / "model.safetensors"))
    cfg = json.loads((TARGET / "config.json").read_text())
    t = {x.name: x for x in reader.tensors}
    L, H, F, V = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    expected = {"token_embd.weight": (V, H), "output_norm.weight": (H,)}
    for i in range(L):
        expected.update({f"blk.{i}.attn_norm.weight": (H,), f"blk.{i}.ffn_norm.weight": (H,),
                         f"blk.{i}.attn_q.weight": (H, H), f"blk.{i}.attn_k.weight": (H, H),
                         f"blk.{i}.attn_v.weight": (H, H), f"blk.{i}.attn_output.weight": (H, H),
                         f"blk.{i}.ffn_gate.weight": (F, H), f"blk.{i}.ffn_up.weight": (F, H),
                         f"blk.{i}.ffn_down.weight": (H, F)})
    assert {n: tuple(x.data.shape) for n, x in t.items()} == expected  # tied: no output.weight
    assert all(x.tensor_type == gguf.GGMLQuantizationType.F32 for x in t.values())
    np.testing.assert_array_equal(t["token_embd.weight"].data, hf["model.embed_tokens.weight"].astype(np.float32))
    np.testing.assert_array_equal(t["blk.2.ffn_down.weight"].data, hf["model.layers.2.mlp.down_proj.weight"].astype(np.float32))
    q = hf["model.layers.1.self_attn.q_proj.weight"].astype(np.float32)
    np.testing.assert_array_equal(t["blk.1.attn_q.weight"].data, permute_rotary(q, cfg["num_attention_heads"]))
    assert not np.array_equal(t["blk.1.attn_q.weight"].data, q)  # the permutation did something


def test_vocabulary_and_hyperparameters(reader):
    tok = json.loads((TARGET / "tokenizer.json").read_text())
    strings = {i: s for s, i in tok["model"]["vocab"].items()} | {a["id"]: a["content"] for a in tok["added_tokens"]}
    assert _field(reader, "tokenizer.ggml.model") == "gpt2"
    assert _field(reader, "tokenizer.ggml.tokens") == [strings[i] for i in range(259)]
    types = _field(reader, "tokenizer.ggml.token_type")
    assert types[:256] == [int(gguf.TokenType.NORMAL)] * 256 and types[256:] == [int(gguf.TokenType.CONTROL)] * 3
    assert _field(reader, "tokenizer.ggml.merges") == ["<bos> <eos>"]  # the one sentinel merge
    assert (_field(reader, "tokenizer.ggml.bos_token_id"), _field(reader, "tokenizer.ggml.eos_token_id")) == (256, 257)
    assert _field(reader, "general.architecture") == "llama"
    assert _field(reader, "general.file_type") == int(gguf.LlamaFileType.ALL_F32)
    assert _field(reader, "llama.attention.head_count") == 4 and _field(reader, "llama.block_count") == 4
    assert _field(reader, "llama.rope.dimension_count") == 64 and _field(reader, "llama.rope.freq_base") == 10000.0


def _rope_halves(x, pos, theta=10000.0):  # Hugging Face: rotate_half over (first half, second half)
    d = x.shape[-1]
    f = pos * theta ** (-np.arange(0, d, 2) / d)
    cos, sin = np.concatenate([np.cos(f)] * 2), np.concatenate([np.sin(f)] * 2)
    rot = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], -1)
    return x * cos + rot * sin


def _rope_pairs(x, pos, theta=10000.0):  # llama.cpp (LLAMA_ROPE_TYPE_NORM): consecutive pairs (2i, 2i+1)
    d = x.shape[-1]
    f = pos * theta ** (-np.arange(0, d, 2) / d)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2], out[..., 1::2] = a * np.cos(f) - b * np.sin(f), a * np.sin(f) + b * np.cos(f)
    return out


def test_permuted_projection_gives_the_same_attention_scores():
    rng = np.random.default_rng(0)
    n_head, d, width = 2, 8, 5
    wq, wk, x = rng.normal(size=(n_head * d, width)), rng.normal(size=(n_head * d, width)), rng.normal(size=(2, width))
    def scores(rope, wq, wk):
        q = rope((wq @ x[0]).reshape(n_head, d), 3.0)
        k = rope((wk @ x[1]).reshape(n_head, d), 1.0)
        return (q * k).sum(-1)  # (n_head,)
    hf = scores(_rope_halves, wq, wk)
    np.testing.assert_allclose(scores(_rope_pairs, permute_rotary(wq, n_head), permute_rotary(wk, n_head)), hf, rtol=1e-12)
    assert not np.allclose(scores(_rope_pairs, wq, wk), hf)  # without the permutation the scores differ


def test_refuses_other_architectures_before_writing(tmp_path, capsys):
    src = tmp_path / "not_llama"
    shutil.copytree(TARGET, src)
    cfg = json.loads((src / "config.json").read_text())
    (src / "config.json").write_text(json.dumps(cfg | {"model_type": "gpt2"}))
    out = tmp_path / "x.gguf"
    with pytest.raises(ValueError, match="model_type.*'gpt2'"):
        export_gguf(src, out)
    assert main([str(src), str(out)]) == 2
    assert "config.json: model_type" in capsys.readouterr().err
    assert not out.exists() and list(tmp_path.glob(".x.gguf*")) == []
