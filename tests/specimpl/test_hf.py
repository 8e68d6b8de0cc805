"""The Hugging Face wrapper: KV cache, ragged batches, rollback, loading checks, greedy equality.

Nothing is downloaded: random models are built from local configs and the shipped tiny pair is
read from specimpl/assets/tiny_pair.
"""
from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")

from specimpl import SamplingConfig  # noqa: E402
from specimpl.autoregressive import autoregressive_generate  # noqa: E402
from specimpl.hf import (HFModel, NonCausalModelError, VocabularyMismatchError, _probe_causal, load_pair,  # noqa: E402
                         load_tiny_pair, tiny_pair_prompts)
from specimpl.hf_drafts import NoiseMixtureDraft, TemperedDraft, early_exit_draft  # noqa: E402
from specimpl.speculative import speculative_generate  # noqa: E402

GREEDY = SamplingConfig(greedy=True)


def _tiny_llama(layers=2, vocab=50, seed=0):
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                                        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                        bos_token_id=0, eos_token_id=1, pad_token_id=2)).eval()


def _tiny_gpt2(vocab=50, seed=0):
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(seed)
    return GPT2LMHeadModel(GPT2Config(vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=256,
                                      bos_token_id=0, eos_token_id=1)).eval()


@pytest.fixture(scope="module")
def pair():
    torch.set_num_threads(1)
    return load_tiny_pair()


@pytest.fixture(params=["llama", "gpt2"])
def random_model(request):
    return HFModel(_tiny_llama() if request.param == "llama" else _tiny_gpt2(), name=request.param)


@torch.no_grad()
def _full_logits(model, seq):
    return model(input_ids=torch.tensor([seq])).logits[0].double()  # (len, V), no cache; HFModel returns float64


# --------------------------------------------------------------------------- cache mechanics
def test_ragged_forward_rollback_select_match_uncached(random_model):
    """Random ragged feeds (n_new < T rows padded), rollbacks and row selection: every valid logit
    equals the uncached forward of that row's sequence."""
    m = random_model
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 50, (L,), generator=g).tolist() for L in (1, 5, 9, 3)]
    st = m.prefill(prompts)
    seqs = [p[:-1] for p in prompts]
    worst = 0.0
    for step in range(24):
        B = len(seqs)
        T = int(torch.randint(1, 5, (1,), generator=g))
        toks = torch.randint(0, 50, (B, T), generator=g)
        n = torch.randint(0, T + 1, (B,), generator=g) if step % 3 else torch.full((B,), T)
        out = m.forward(st, toks, n)  # (B, T, V)
        for b in range(B):
            nb = int(n[b])
            seqs[b] += toks[b, :nb].tolist()
            if nb:
                ref = _full_logits(m.model, seqs[b])[-nb:]
                worst = max(worst, float((ref - out[b, :nb]).abs().max()))
        if step % 4 == 3:
            keep = torch.tensor([max(0, len(s) - int(torch.randint(0, 3, (1,), generator=g))) for s in seqs])
            m.rollback(st, keep)
            seqs = [s[:int(k)] for s, k in zip(seqs, keep)]
        if step == 12:
            idx = torch.tensor([2, 0, 3])
            st = m.select(st, idx)
            seqs = [seqs[i] for i in idx.tolist()]
        assert st.lengths.tolist() == [len(s) for s in seqs]
    assert worst < 1e-4, worst


@pytest.mark.parametrize("arch", ["mistral", "qwen2-mixed"])
def test_sliding_window_models_match_uncached(arch):
    """Sliding-window attention (all layers: Mistral; mixed layer types: Qwen2) through our 4D masks."""
    from transformers import MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM
    torch.manual_seed(0)
    common = dict(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, sliding_window=4, max_position_embeddings=256)
    if arch == "mistral":
        model = MistralForCausalLM(MistralConfig(**common)).eval()
    else:
        model = Qwen2ForCausalLM(Qwen2Config(use_sliding_window=True, max_window_layers=1, **common)).eval()
        assert "sliding_attention" in model.config.layer_types
    m = HFModel(model, name=arch)
    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 50, (L,), generator=g).tolist() for L in (1, 5, 9, 3)]
    st = m.prefill(prompts)
    seqs = [p[:-1] for p in prompts]
    for _ in range(6):  # 6 x up to 3 tokens: well past the window of 4
        toks = torch.randint(0, 50, (4, 3), generator=g)
        n = torch.randint(1, 4, (4,), generator=g)
        out = m.forward(st, toks, n)
        for b in range(4):
            nb = int(n[b])
            seqs[b] += toks[b, :nb].tolist()
            torch.testing.assert_close(out[b, :nb], _full_logits(model, seqs[b])[-nb:], atol=1e-4, rtol=1e-4)


def test_rollback_then_rescore_equals_fresh(pair):
    """Score k+1 tokens, roll back to a prefix, score different tokens: logits equal a fresh state's."""
    target, _ = pair
    prompts = tiny_pair_prompts(6, length=40, min_length=10, seed=3)
    g = torch.Generator().manual_seed(0)
    st = target.prefill(prompts)
    junk = torch.randint(0, 256, (6, 5), generator=g)
    target.forward(st, junk)
    keep = st.lengths - torch.tensor([5, 4, 3, 2, 1, 0])
    target.rollback(st, keep)
    new = torch.randint(0, 256, (6, 5), generator=g)
    again = target.forward(st, new)  # (6, 5, V)
    fresh_prompts = [p[:-1] + junk[b, :b].tolist() + [0] for b, p in enumerate(prompts)]
    fresh = target.prefill(fresh_prompts)  # same consumed prefix, built without the rollback
    assert fresh.lengths.tolist() == keep.tolist()
    ref = target.forward(fresh, new)
    torch.testing.assert_close(again, ref, atol=1e-4, rtol=1e-4)


def test_batch1_and_uniform_fast_paths_match_scatter_path(pair):
    """Equal-length rows (slice writes) and one row alone give the logits of the ragged scatter path."""
    target, _ = pair
    prompts = tiny_pair_prompts(3, length=24, seed=5)
    st = target.prefill(prompts)
    st.uniform = False  # force the scatter path on the same data
    toks = torch.tensor([[p[-1], 10, 32, 35] for p in prompts])
    scatter = target.forward(st, toks)
    st2 = target.prefill(prompts)
    assert st2.uniform
    torch.testing.assert_close(target.forward(st2, toks), scatter, atol=1e-5, rtol=1e-5)
    st3 = target.prefill(prompts[1:2])
    torch.testing.assert_close(target.forward(st3, toks[1:2]), scatter[1:2], atol=1e-5, rtol=1e-5)


def test_early_exit_draft_is_truncated_target(pair):
    target, _ = pair
    d = early_exit_draft(target, 2)
    assert d.model.model.layers[0] is target.model.model.layers[0]  # shared, not copied
    assert len(target.model.model.layers) == target.num_layers  # target untouched
    prompts = tiny_pair_prompts(2, length=16, seed=1)
    x = torch.tensor(prompts)
    with torch.no_grad():
        hs = target.model(input_ids=x, output_hidden_states=True).hidden_states
        ref = target.model.lm_head(target.model.model.norm(hs[2]))[:, -1]  # (2, V)
    st = d.prefill(prompts)
    out = d.forward(st, x[:, -1:])[:, 0]
    torch.testing.assert_close(out, ref.double(), atol=1e-4, rtol=1e-4)


def test_noise_and_temperature_variants(pair):
    _, draft = pair
    prompts = tiny_pair_prompts(2, length=16, seed=2)
    st = draft.prefill(prompts)
    base = draft.forward(st, torch.tensor([[p[-1]] for p in prompts]))
    q = torch.softmax(base, -1)
    for eps in (0.0, 0.3, 1.0):
        m = NoiseMixtureDraft(draft, eps)
        torch.testing.assert_close(torch.softmax(m.transform(base), -1), (1 - eps) * q + eps / q.shape[-1],
                                   atol=1e-6, rtol=1e-5)
        r = NoiseMixtureDraft(draft, eps, "random", seed=3)
        torch.testing.assert_close(torch.softmax(r.transform(base), -1), (1 - eps) * q + eps * r.log_r.exp(),
                                   atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(TemperedDraft(draft, 2.0).transform(base), base / 2)


# --------------------------------------------------------------------------- greedy equality
def _report_mismatch(target, prompts, a, b):
    """For the first mismatching position print the target's two competing logits (near-tie or bug?)."""
    diff = (a != b).nonzero()
    i, t = (int(v) for v in diff[0])
    seq = prompts[i] + a[i, :t].tolist()
    logits = _full_logits(target.model, seq)[-1]
    x, y = int(a[i, t]), int(b[i, t])
    return (f"{len(diff)} mismatching tokens; first at prompt {i} position {t}: speculative {x} "
            f"(logit {float(logits[x]):.6f}) vs reference {y} (logit {float(logits[y]):.6f})")


def test_greedy_speculative_equals_target_greedy_on_128_prompts(pair):
    target, draft = pair
    prompts = tiny_pair_prompts(128, length=48, min_length=8, seed=11)  # ragged lengths
    spec = speculative_generate(target, draft, prompts, k=4, max_new_tokens=32, config=GREEDY)
    ref = autoregressive_generate(target, prompts, max_new_tokens=32, config=GREEDY)
    assert spec.lengths.tolist() == [32] * 128
    assert torch.equal(spec.tokens, ref.tokens), _report_mismatch(target, prompts, spec.tokens, ref.tokens)
    # at least some drafts were rejected, so rollback was exercised
    tot = spec.stats.totals()
    assert 0 < tot["accepted"] < tot["drafted"]


def test_greedy_matches_transformers_generate(pair):
    """An implementation we did not write: transformers' own greedy generate, prompt by prompt."""
    target, draft = pair
    prompts = tiny_pair_prompts(6, length=40, min_length=5, seed=12)
    spec = speculative_generate(target, draft, prompts, k=3, max_new_tokens=24, config=GREEDY)
    for i, p in enumerate(prompts):
        out = target.model.generate(input_ids=torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                    do_sample=False, max_new_tokens=24, min_new_tokens=24, eos_token_id=None,
                                    pad_token_id=0)
        assert out[0, len(p):].tolist() == spec.tokens[i].tolist(), f"prompt {i}"


def test_ragged_batch_equals_batch_one(pair):
    target, draft = pair
    prompts = tiny_pair_prompts(8, length=40, min_length=3, seed=13)
    batch = speculative_generate(target, draft, prompts, k=4, max_new_tokens=20, config=GREEDY)
    for i, p in enumerate(prompts):
        one = speculative_generate(target, draft, [p], k=4, max_new_tokens=20, config=GREEDY)
        assert one.tokens[0].tolist() == batch.tokens[i].tolist(), f"prompt {i}"


def test_sampling_is_reproducible_and_respects_eos(pair):
    target, draft = pair
    prompts = tiny_pair_prompts(4, length=20, seed=14)
    cfg = SamplingConfig(temperature=1.0)
    a = speculative_generate(target, draft, prompts, k=3, max_new_tokens=16, config=cfg,
                             generator=torch.Generator().manual_seed(5), eos_token_id=10)
    b = speculative_generate(target, draft, prompts, k=3, max_new_tokens=16, config=cfg,
                             generator=torch.Generator().manual_seed(5), eos_token_id=10)
    assert torch.equal(a.tokens, b.tokens)
    for row, n in zip(a.tokens, a.lengths):
        toks = row[:int(n)].tolist()
        assert 10 not in toks[:-1] and all(t == -1 for t in row[int(n):].tolist())


# --------------------------------------------------------------------------- loading errors
def _save_config_only(path, model, tokenizer=None):
    """A checkpoint directory with config (and tokenizer) but NO weights: loading must fail on the
    checks, before any weight is read."""
    path.mkdir(parents=True, exist_ok=True)
    model.config.save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return path


def test_missing_path_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="name_or_path"):
        HFModel.from_pretrained(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="name_or_path"):
        load_pair(tmp_path / "nope", tmp_path / "nope2")


def test_vocab_size_mismatch_before_loading_weights(tmp_path):
    t = _save_config_only(tmp_path / "t", _tiny_llama(vocab=50))
    d = _save_config_only(tmp_path / "d", _tiny_llama(vocab=60))
    with pytest.raises(VocabularyMismatchError, match="vocabulary size 60.*50"):
        load_pair(t, d)


def test_tokenizer_mismatch_before_loading_weights(tmp_path, pair):
    target, _ = pair
    tok = target.tokenizer
    other = transformers.PreTrainedTokenizerFast(tokenizer_object=tok.backend_tokenizer.__class__.from_str(
        tok.backend_tokenizer.to_str().replace('"<eos>"', '"<end>"')), bos_token="<bos>", eos_token="<end>",
        pad_token="<pad>")
    m = _tiny_llama(vocab=len(tok))
    t = _save_config_only(tmp_path / "t", m, tok)
    d = _save_config_only(tmp_path / "d", m, other)
    with pytest.raises(VocabularyMismatchError, match="different tokenizers"):
        load_pair(t, d)


def test_non_causal_models_are_rejected(tmp_path):
    from transformers import BertConfig, T5Config
    bert = tmp_path / "bert"
    BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
               intermediate_size=32).save_pretrained(bert)
    with pytest.raises(NonCausalModelError, match="bidirectional encoder"):
        HFModel.from_pretrained(bert)
    t5 = tmp_path / "t5"
    T5Config(vocab_size=50, d_model=32, num_layers=1, num_heads=2, d_ff=32).save_pretrained(t5)
    with pytest.raises(NonCausalModelError, match="encoder-decoder"):
        HFModel.from_pretrained(t5)


def test_causality_probe_catches_a_bidirectional_model():
    from transformers import BertConfig, BertLMHeadModel
    torch.manual_seed(0)
    bert = BertLMHeadModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=32, is_decoder=False)).eval()

    class Shim:
        model, vocab_size, device, name = bert, 50, torch.device("cpu"), "bert"
    with pytest.raises(NonCausalModelError, match="not causal"):
        _probe_causal(Shim)


def test_remote_code_is_off_unless_asked(tmp_path):
    d = tmp_path / "remote"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"model_type": "mystery", "auto_map": {"AutoConfig": "x.MysteryConfig"}}))
    with pytest.raises((ValueError, FileNotFoundError)):
        HFModel.from_pretrained(d)


def test_shipped_pair_is_small_and_matches():
    from specimpl.hf import TINY_PAIR_DIR
    total = sum(f.stat().st_size for f in TINY_PAIR_DIR.rglob("*") if f.is_file())
    assert total < 10 * 2**20, total
    assert (TINY_PAIR_DIR / "target" / "model.safetensors").exists()
    assert (TINY_PAIR_DIR / "draft" / "model.safetensors").exists()


# --------------------------------------------------------------------------- real-model bugs
@pytest.mark.parametrize("bug", ["kv_not_rolled_back", "ragged_shared_positions", "ragged_leaky_mask"])
def test_wrapper_bugs_break_greedy_equality(pair, bug):
    """Greedy equality alone already exposes each cache/mask/position bug on a ragged batch."""
    from harness.controls.hf import HF_BUGS
    target, draft = pair
    prompts = tiny_pair_prompts(16, length=40, min_length=4, seed=21)
    ref = autoregressive_generate(target, prompts, max_new_tokens=24, config=GREEDY)
    bad = HF_BUGS[bug](target, draft, prompts, k=4, max_new_tokens=24, config=GREEDY)
    assert not torch.equal(bad.tokens, ref.tokens)


def test_draft_cache_not_rolled_back_is_lossless_in_greedy(pair):
    """Only q changes (it is still the law the draft drew from): output identical, acceptance lower."""
    from harness.controls.hf import draft_no_rollback_generate
    target, draft = pair
    prompts = tiny_pair_prompts(16, length=40, min_length=4, seed=22)
    ref = speculative_generate(target, draft, prompts, k=4, max_new_tokens=24, config=GREEDY)
    ctl = draft_no_rollback_generate(target, draft, prompts, k=4, max_new_tokens=24, config=GREEDY)
    assert torch.equal(ctl.tokens, ref.tokens)
    assert ctl.stats.totals()["accepted"] < ref.stats.totals()["accepted"]



def test_a_hub_id_fails_at_once_when_the_hub_cannot_be_reached(tmp_path, monkeypatch):
    """Issue 26 finding 8: load_pair('tiny/target') with no ./tiny spent 25 s in the hub client's retries.
    The hub here is a closed port of this machine (connection refused at once)."""
    from specimpl import hf
    monkeypatch.chdir(tmp_path)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy",
                "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:1")
    hf._hub_unreachable.cache_clear()
    try:
        assert hf._hub_unreachable().startswith("127.0.0.1:1: ConnectionRefusedError")
        seen = []
        real = hf._load_config_and_tokenizer
        monkeypatch.setattr(hf, "_load_config_and_tokenizer", lambda s, *a: seen.append(s) or real(s, *a))
        with pytest.raises(FileNotFoundError, match=r"got 'tiny/target': no such directory here \(no 'tiny'\), not "
                                                    r"in the Hugging Face cache, and the hub cannot be reached "
                                                    r"\(127.0.0.1:1: ConnectionRefusedError"):
            load_pair("tiny/target", "tiny/draft")
        assert seen == ["tiny/target"]  # the target's failure ends the call
    finally:
        hf._hub_unreachable.cache_clear()


def test_a_hub_or_proxy_that_accepts_and_never_answers_counts_as_unreachable(monkeypatch):
    """Issue 26 by-hand rerun (row 8c'): with HF_ENDPOINT (or HTTPS_PROXY) at a host that accepts the connection
    and never answers, the TCP-connect probe said reachable and the hub client waited >= 240 s (26 s through a
    proxy).  The probe is now a HEAD request answered within HUB_PROBE_TIMEOUT_S; a proxy that answers, even
    refusing the tunnel, still decides for itself."""
    import http.server
    import socket
    import threading
    import time

    from specimpl import hf
    for var in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(var, raising=False)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts (the kernel completes the handshake), never answers
    answering = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=answering.serve_forever, daemon=True).start()
    try:
        for endpoint, proxy, unreachable in (
                (f"http://127.0.0.1:{silent.getsockname()[1]}", None, True),
                (f"https://127.0.0.1:{silent.getsockname()[1]}", None, True),
                (f"http://127.0.0.1:{answering.server_address[1]}", None, False),
                ("https://huggingface.co", f"http://127.0.0.1:{silent.getsockname()[1]}", True),
                ("https://huggingface.co", f"http://127.0.0.1:{answering.server_address[1]}", False)):  # 501 to CONNECT
            monkeypatch.setenv("HF_ENDPOINT", endpoint)
            if proxy:
                monkeypatch.setenv("HTTPS_PROXY", proxy)
            hf._hub_unreachable.cache_clear()
            t0 = time.monotonic()
            why = hf._hub_unreachable()
            assert (why is not None) == unreachable, (endpoint, proxy, why)
            assert time.monotonic() - t0 < hf.HUB_PROBE_TIMEOUT_S + 3
            if unreachable:
                assert "no answer in 2 s" in why
    finally:
        answering.shutdown()
        silent.close()
        hf._hub_unreachable.cache_clear()


# --------------------------------------------------------------------------- fast paths: the same bytes
@pytest.mark.parametrize("shape", [(3, 2, 9, 4, 1), (5, 4, 16, 8, 5), (2, 1, 7, 3, 7)])
def test_ragged_cache_write_equals_a_scatter_along_the_slots(shape):
    """The ragged write (one row copy per new key, specimpl.hf_cache._write_rows) puts the bytes a scatter along
    the slot axis puts, contiguous buffer or not."""
    from specimpl.hf_cache import RaggedKVCache as Cache, _write_rows
    B, H, S, D, T = shape
    g = torch.Generator().manual_seed(sum(shape))
    for seed in range(3):
        buf = torch.randn(B, H, S, D, generator=g)
        new = torch.randn(B, H, T, D, generator=g).transpose(1, 2).contiguous().transpose(1, 2)  # strided, as RoPE's
        wi = torch.randint(0, S - T + 1, (B, 1), generator=g) + torch.arange(T)  # (B, T) slots of each row
        ref = buf.clone().scatter_(2, wi.view(B, 1, T, 1).expand(B, H, T, D), new)
        cache = Cache(1)
        cache.write_index = wi
        flat = cache.flat_index(B, H, S)
        assert flat is cache.flat_index(B, H, S)  # once per call
        fast = buf.clone()
        _write_rows(fast, new, flat)
        assert torch.equal(fast, ref)
        strided = buf.clone().transpose(0, 1).contiguous().transpose(0, 1)  # not contiguous: the scatter fallback
        _write_rows(strided, new, flat)
        assert torch.equal(strided, ref)
