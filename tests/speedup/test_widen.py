"""The widened (memory-bound) target: same logits as the tiny target, bigger, cached by content."""
import json

import pytest
import torch

from harness.speedup.membound.widen import build_widened, parameter_count, widen_state_dict, widened_config
from specimpl.hf import TINY_PAIR_DIR, HFModel, load_tiny_pair


@pytest.fixture(scope="module")
def small_widened(tmp_path_factory):
    """Width 2 and one pass-through layer: a fast stand-in for the real build (width 8, 4 extra layers)."""
    d = tmp_path_factory.mktemp("membound")
    return build_widened(width=2, extra_layers=1, build_dir=d, quiet=True), d


def test_widened_logits_equal_the_tiny_targets(small_widened):
    path, _ = small_widened
    wide = HFModel.from_pretrained(path, local_files_only=True)
    tiny, _ = load_tiny_pair()
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 259, (3, 20), generator=g)  # (B, T)
    with torch.no_grad():
        a = tiny.model(input_ids=tokens, use_cache=False).logits  # (B, T, V)
        b = wide.model(input_ids=tokens, use_cache=False).logits
    assert a.shape == b.shape
    assert torch.allclose(a, b, rtol=1e-4, atol=1e-4 * float(a.abs().max()))
    # and through the cached, incremental path the samplers use
    sa, sb = tiny.prefill(tokens[:, :10]), wide.prefill(tokens[:, :10])
    la, lb = tiny.forward(sa, tokens[:, 9:14]), wide.forward(sb, tokens[:, 9:14])  # (B, 5, V)
    assert torch.allclose(la, lb, rtol=1e-4, atol=1e-4 * float(la.abs().max()))


def test_widened_model_is_bigger_as_configured(small_widened):
    path, _ = small_widened
    tiny_cfg = json.loads((TINY_PAIR_DIR / "target" / "config.json").read_text())
    cfg = json.loads((path / "config.json").read_text())
    assert cfg["hidden_size"] == 2 * tiny_cfg["hidden_size"] and cfg["num_hidden_layers"] == 5
    assert cfg["num_attention_heads"] == 2 * tiny_cfg["num_attention_heads"] and not cfg["tie_word_embeddings"]
    wide = HFModel.from_pretrained(path, local_files_only=True)
    assert sum(p.numel() for p in wide.model.parameters()) == parameter_count(cfg)
    # the default build is large: hundreds of millions of parameters, <= 1.5 GB in float32
    big = widened_config(tiny_cfg, 8, 4)
    assert 2e8 < parameter_count(big) and 4 * parameter_count(big) <= 1.5e9


def test_build_is_cached_by_content_and_reuse_is_announced(small_widened, capsys):
    path, d = small_widened
    mtime = (path / "model.safetensors").stat().st_mtime_ns
    again = build_widened(width=2, extra_layers=1, build_dir=d)
    assert again == path and (path / "model.safetensors").stat().st_mtime_ns == mtime
    assert "reusing" in capsys.readouterr().err
    other = build_widened(width=2, extra_layers=0, build_dir=d, quiet=True)
    assert other != path and other.parent.parent == path.parent.parent


def test_pass_through_layers_write_nothing():
    tiny_cfg = json.loads((TINY_PAIR_DIR / "target" / "config.json").read_text())
    from safetensors.torch import load_file
    sd = widen_state_dict(load_file(str(TINY_PAIR_DIR / "target" / "model.safetensors")), tiny_cfg, 2, 1)
    assert float(sd["model.layers.4.self_attn.o_proj.weight"].abs().max()) == 0.0
    assert float(sd["model.layers.4.mlp.down_proj.weight"].abs().max()) == 0.0
    assert float(sd["model.layers.4.mlp.up_proj.weight"].abs().max()) > 0.0


@pytest.mark.parametrize("bad", [3, 0, -2, 2.0])
def test_width_must_be_a_power_of_two(bad):
    with pytest.raises(ValueError, match="width"):
        widened_config({"model_type": "llama"}, bad, 0)


def test_prepacked_model_gives_the_same_logits(small_widened):
    from harness.speedup.membound.widen import prepack_mkldnn
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this PyTorch build has no oneDNN")
    path, _ = small_widened
    a, b = (HFModel.from_pretrained(path, local_files_only=True) for _ in range(2))
    prepack_mkldnn(b)
    assert any(type(m).__name__ == "MkldnnLinear" for m in b.model.modules())
    tokens = torch.randint(0, 259, (2, 9), generator=torch.Generator().manual_seed(1))  # (B, T)
    sa, sb = a.prefill(tokens[:, :6]), b.prefill(tokens[:, :6])
    la, lb = a.forward(sa, tokens[:, 5:]), b.forward(sb, tokens[:, 5:])  # (B, 4, V)
    assert torch.allclose(la, lb, rtol=1e-4, atol=1e-4 * float(la.abs().max()))
