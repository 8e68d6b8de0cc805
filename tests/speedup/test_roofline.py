"""The roofline cost model (harness.speedup.roofline.model), its speedup model, the fidelity table and its figures."""
from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.speedup import costmodel as cm
from harness.speedup.roofline.model import (ConfigError, ModelShape, Roofline, calibrate, forward_cost, hardware_names,
                              load_hardware)
from harness.speedup.roofline.speedup import PairCosts, crossover_batch, speedup, speedup_table, tokens_per_round
from specimpl.hf import TINY_PAIR_DIR

REPO = Path(__file__).resolve().parents[2]
LLAMA7B = dict(hidden_size=4096, num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
               intermediate_size=11008, vocab_size=32000, torch_dtype="float16")


def _safetensors_numel(path: Path) -> int:
    b = path.read_bytes()
    n = struct.unpack("<Q", b[:8])[0]
    head = json.loads(b[8:8 + n])
    return sum(math.prod(v["shape"]) for k, v in head.items() if k != "__metadata__")


@pytest.mark.parametrize("role", ["target", "draft"])
def test_parameter_count_from_config_equals_the_shipped_weights(role):
    shape = ModelShape.from_config(TINY_PAIR_DIR / role)
    assert shape.params == _safetensors_numel(TINY_PAIR_DIR / role / "model.safetensors")


def test_llama7b_shape_counts():
    s = ModelShape.from_dict(LLAMA7B)
    assert s.params == pytest.approx(6.74e9, rel=1e-3)  # Llama-2-7B: 6,738,415,616 parameters
    assert s.kv_bytes_per_token == 32 * 2 * 32 * 128 * 2


@pytest.mark.parametrize("field", ["hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                                   "vocab_size"])
def test_missing_config_field_names_file_and_field(tmp_path, field):
    cfg = {k: v for k, v in LLAMA7B.items() if k != field}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ConfigError) as e:
        ModelShape.from_config(tmp_path)
    assert field in str(e.value) and str(tmp_path / "config.json") in str(e.value)


@pytest.mark.parametrize("key,value", [("hidden_size", 0), ("num_hidden_layers", "32"), ("torch_dtype", "float7")])
def test_bad_config_value_is_named(key, value):
    with pytest.raises(ConfigError, match=key if key != "torch_dtype" else "dtype"):
        ModelShape.from_dict({**LLAMA7B, key: value}, where="x.json")


def test_every_hardware_file_loads_with_its_datasheet_numbers():
    want = {"h200": 4800, "h100": 3350, "a100": 2039, "rtx3090": 936, "a40": 696}
    names = hardware_names()
    assert set(want) | {"local"} <= set(names)
    for name in names:
        hw = load_hardware(name)
        assert hw.source and hw.bandwidth_gbps > 0 and hw.peak_tflops
    for name, bw in want.items():
        assert load_hardware(name).bandwidth_gbps == bw
    assert load_hardware("h100").peak_tflops["bfloat16"] == 989.0
    assert load_hardware("a100").peak_tflops["bfloat16"] == 312.0


def test_unknown_hardware_lists_the_known_ones():
    with pytest.raises(ConfigError, match="h100"):
        load_hardware("h1000")


def test_bad_hardware_field_is_named(tmp_path):
    p = tmp_path / "x.toml"
    p.write_text('name = "x"\nsource = "s"\nbandwidth_gbps = -1\noverhead_s = 0\n[peak_tflops]\nfloat32 = 1\n')
    with pytest.raises(ConfigError, match="bandwidth_gbps"):
        load_hardware(p)


def test_memory_bound_small_batch_and_compute_bound_large_batch():
    r = Roofline(ModelShape.from_dict(LLAMA7B), load_hardware("h100"))
    # batch 1: scoring 5 tokens costs about what one costs (weights dominate the bytes)
    assert r(5, 1, 128) / r(1, 1, 128) < 1.01
    assert forward_cost(r.shape, r.hw, 5, 1, 128).bound == "memory"
    # far past the ridge, T is linear in the tokens scored
    big = forward_cost(r.shape, r.hw, 8, 4096, 0)
    assert big.bound == "compute"
    assert r(16, 4096, 0) / r(8, 4096, 0) == pytest.approx(2.0, rel=0.02)


def test_ridge_point_matches_its_closed_form():
    s, hw = ModelShape.from_dict(LLAMA7B), load_hardware("a100")
    # n = 1 at L = 0: memory (W + B (kv + V lb)) / BW', compute B (2 P + 4 heads hd layers) / peak'; equal at B*:
    bw, pk = hw.bandwidth * hw.eff_bandwidth, hw.peak("float16") * hw.eff_compute
    per_row_flops = 2 * s.matmul_params + 4 * s.heads * s.head_dim * s.layers
    per_row_bytes = s.kv_bytes_per_token + s.vocab * s.logits_bytes
    closed = (s.weight_bytes / bw) / (per_row_flops / pk - per_row_bytes / bw)
    assert Roofline(s, hw).ridge_tokens(0.0) == pytest.approx(closed, rel=1e-3)


def test_calibrate_recovers_known_efficiencies():
    s = ModelShape.from_dict(LLAMA7B)
    d = ModelShape.from_dict({**LLAMA7B, "num_hidden_layers": 2, "hidden_size": 1024, "num_attention_heads": 8,
                              "num_key_value_heads": 8, "intermediate_size": 2816})
    true = replace(load_hardware("a40"), eff_bandwidth=0.55, eff_compute=0.35, overhead_s=3e-4)
    pts = [(m, n, B, L, float(Roofline(m, true)(n, B, L))) for m in (s, d) for n in (1, 4, 16) for B in (1, 16, 256)
           for L in (128, 1024)]
    cal = calibrate(load_hardware("a40"), pts, fit=("eff_bandwidth", "eff_compute", "overhead_s"))
    assert cal.hardware.eff_bandwidth == pytest.approx(0.55, rel=1e-3)
    assert cal.hardware.eff_compute == pytest.approx(0.35, rel=1e-3)
    assert cal.hardware.overhead_s == pytest.approx(3e-4, rel=1e-2)
    assert cal.max_abs_rel_err < 1e-3


def test_calibrate_on_whole_runs_recovers_known_efficiencies_and_a_step_fit_does_not():
    """Points measured as a fixed-length run's output over its wall time (a prefill of P tokens, then O steps):
    fitted as whole runs they give the machine back; read as decode steps they do not (the prefill, compute-bound
    at large B, would be charged to the steps).  Deterministic."""
    from harness.speedup.roofline.model import run_step_seconds
    s = ModelShape.from_dict(LLAMA7B)
    true = replace(load_hardware("a40"), eff_bandwidth=0.7, eff_compute=0.5, overhead_s=2e-3)
    run = (150, 96)
    pts = [(s, 1, B, 198, run_step_seconds(Roofline(s, true), 1, B, 198, run), run) for B in (1, 4, 8, 16, 24, 32)]
    fit = ("eff_bandwidth", "eff_compute", "overhead_s")
    cal = calibrate(load_hardware("a40"), pts, fit=fit)
    assert (cal.hardware.eff_bandwidth, cal.hardware.eff_compute) == (pytest.approx(0.7, rel=1e-3), pytest.approx(0.5, rel=1e-3))
    assert cal.hardware.overhead_s == pytest.approx(2e-3, rel=1e-2)
    steps = calibrate(load_hardware("a40"), [p[:5] for p in pts], fit=fit)
    assert abs(steps.hardware.eff_compute / 0.5 - 1) > 0.05 or abs(steps.hardware.overhead_s / 2e-3 - 1) > 0.05
    # one run by hand: (T_prefill(P, B) + (O - 1) T(1, B, L)) / O, the prefill's lm_head on one token per sequence
    r = Roofline(s, true)
    assert run_step_seconds(r, 1, 8, 198, run) == pytest.approx((float(r(150, 8, 0, prefill=True))
                                                                 + 95 * float(r(1, 8, 198))) / 96)
    full, pre = forward_cost(s, true, 150, 8, 0), forward_cost(s, true, 150, 8, 0, prefill=True)
    head = s.vocab * s.hidden
    assert full.flops - pre.flops == pytest.approx(2.0 * head * 149 * 8)
    assert full.bytes - pre.bytes == pytest.approx(8 * 149 * s.vocab * s.logits_bytes)


def test_whole_run_speedup_adds_both_prefills_and_the_engine_tax_by_hand():
    """rounds.row_speedup on a whole-run row: (T_t(P) + O t_ar) / (T_t(P) + T_d(P) + (O / E) t_round), t_round
    including the speculative engine's per-step cost c B (fidelity.spec_engine_tax: 1/off - 1/clean).
    Deterministic."""
    from harness.speedup.roofline.fidelity import spec_engine_tax
    from harness.speedup.roofline.rounds import round_seconds_of, row_speedup
    t = lambda n, B, L: 0.03 + 1e-5 * n * B  # noqa: E731
    d = lambda n, B, L: 0.01 + 1e-5 * n * B  # noqa: E731
    row = {"id": "r", "k": 2, "batch": 8, "context": 198, "prompt_tokens": 150, "output_tokens": 96,
           "spec_off_rates": [[32, 700.0, 800.0]]}
    c = spec_engine_tax(row)
    assert c == pytest.approx(1 / 700 - 1 / 800)
    costs = PairCosts(t, d, overhead_round_s=lambda k, B: c * B)
    e = 2.5
    rnd = round_seconds_of(costs, row, e)
    assert rnd == pytest.approx(d(2, 8, 198) + d(1, 8, 198) + t(3, 8, 198) + c * 8)
    want = (t(150, 8, 0) + 95 * t(1, 8, 198)) / (t(150, 8, 0) + d(150, 8, 0) + 95 / e * rnd)  # prefill emits token 1
    assert row_speedup(costs, row, e) == pytest.approx(want)
    with pytest.raises(ConfigError, match="spec_off_rates"):
        spec_engine_tax({**row, "spec_off_rates": [[32, 700.0]]})
    with pytest.raises(ConfigError, match="prompt_tokens"):
        row_speedup(costs, {**row, "prompt_tokens": 0}, e)


# -- the speedup model --------------------------------------------------------------------------------
def test_chain_tokens_per_round_equals_the_iid_formula():
    for a in (0.0, 0.3, 0.8, 0.99):
        for k in (1, 4, 8):
            assert tokens_per_round("chain", a, k) == pytest.approx(cm.expected_tokens(a, k))
    assert tokens_per_round("chain", [0.9, 0.5, 0.1], 3) == pytest.approx(1 + 0.9 + 0.45 + 0.045)


def test_tree_bound_above_chain_and_block_equals_chain():
    a = [0.7, 0.6, 0.5, 0.4]
    assert tokens_per_round("tree3", a, 4) > tokens_per_round("chain", a, 4)
    assert tokens_per_round("block", a, 4) == tokens_per_round("chain", a, 4)


def test_free_verification_and_free_draft_give_speedup_E():
    flat = PairCosts(lambda n, B, L: 0.01, lambda n, B, L: 0.0)
    assert speedup(flat, "chain", 0.8, 4, 1, 128) == pytest.approx(cm.expected_tokens(0.8, 4))


def test_speedup_equals_leviathan_with_constant_costs():
    c = 0.1
    costs = PairCosts(lambda n, B, L: 1.0, lambda n, B, L: c)
    # the draft's first call feeds 2 tokens but costs the same: t_round = k c + 1
    for k in (1, 3, 6):
        assert speedup(costs, "chain", 0.7, k, 1, 0) == pytest.approx(cm.analytic_speedup(0.7, c, k))


def test_crossover_interpolates_in_log_batch():
    assert crossover_batch([1, 4], [1.5, 0.5]) == pytest.approx(2.0)
    assert math.isnan(crossover_batch([1, 2, 4], [1.2, 1.1, 1.05]))
    assert math.isnan(crossover_batch([1, 2, 4], [0.9, 0.8, 0.7]))


def test_speculation_stops_paying_with_batch_on_a_gpu_roofline():
    s = ModelShape.from_dict(LLAMA7B)
    d = ModelShape.from_dict({**LLAMA7B, "num_hidden_layers": 2, "hidden_size": 768, "num_attention_heads": 12,
                              "num_key_value_heads": 12, "intermediate_size": 3072})
    hw = load_hardware("a100")
    t = speedup_table("x", PairCosts(Roofline(s, hw), Roofline(d, hw)), 0.8, ["chain"], [4], [1, 1024, 4096], [0])
    assert t.speedup.iloc[0] > 1.5 and t.speedup.iloc[-1] < 1.0
    assert list(t.goodput_ar) == sorted(t.goodput_ar)


# -- fidelity table -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def published():
    from harness.speedup.roofline.fidelity import fidelity_table, load_published
    pub = load_published()
    return pub, fidelity_table(pub)


def test_fidelity_rows_name_their_sources_and_inputs(published):
    _, t = published
    assert {"chen-ar", "specbench-a100", "a40-7b-k1-b1", "a40-7b-k1-b32"} <= set(t.id)
    assert t.source.str.len().min() > 0 and t.taken.str.len().min() > 0 and t.assumed.str.len().min() > 0
    inputs = set(t[t.is_input].id)
    assert inputs == {"chen-ar", "a40-7b-ar-b1", "a40-7b-ar-b32"}
    # a calibration input is reproduced as closely as its calibration fits its points (exactly when the fit has as
    # many fields as points; the A40 sweep fits 3 fields to 6 target-only runs); every other row is a prediction
    from harness.speedup.roofline.fidelity import _calibration_points, _calibration_shape
    from harness.speedup.roofline.model import load_hardware as lh
    pub, _ = published
    rows = {r["id"]: r for r in pub["row"]}
    for rid, err in t[t.is_input].set_index("id").rel_err.items():
        r = rows[rid]
        cal = calibrate(lh(r["hardware"]), _calibration_points(r, _calibration_shape(r, pub["_shapes"]), pub["_shapes"]),
                        fit=tuple(r.get("calibrate_fit", ["eff_bandwidth"])))
        assert abs(err) <= cal.max_abs_rel_err + 1e-9, rid


def test_a40_case_gains_at_batch_1_and_loses_at_batch_32(published):
    """The A40 sweep (7B FP16 target, its AWQ copy as draft, k = 1): measured 1.23x at batch 1 and 0.85x at 32;
    the model, calibrated on the target-only runs and the off-state run alone, predicts both signs."""
    _, t = published
    s = t.set_index("id").predicted
    assert s["a40-7b-k1-b1"] > 1.0 > s["a40-7b-k1-b32"]


def test_published_file_with_a_missing_field_is_named(tmp_path):
    from harness.speedup.roofline.fidelity import PUBLISHED, load_published
    text = PUBLISHED.read_text().replace('quantity = "ar_ms_per_token"\n', "", 1)
    p = tmp_path / "p.toml"
    p.write_text(text)
    with pytest.raises(ConfigError, match="'quantity' is missing"):
        load_published(p)


# -- figures --------------------------------------------------------------------------------------------
def _small_results(path: Path, source: str = "roofline") -> Path:
    from harness.core.provenance import atomic_write_csv, atomic_write_json
    s = ModelShape.from_dict(LLAMA7B)
    hw = load_hardware("a100")
    grid = speedup_table("x", PairCosts(Roofline(s, hw), Roofline(replace(s, layers=2), hw)), 0.8, ["chain", "tree2"],
                         [1, 4], [1, 64, 4096], [128]).assign(source=source)
    meta = {"commit": "0" * 40, "dirty": False, "seed": 0, "versions": {}, "machine": {}, "config": {"name": "t"}}
    atomic_write_csv(path / "roofline.csv", grid, meta)
    atomic_write_json(path / "meta.json", meta)
    return path


def test_roofline_figures_are_byte_reproducible(tmp_path):
    from harness.speedup.report.cli import make_report
    res = _small_results(tmp_path / "r")
    a = make_report(res, tmp_path / "a", formats=("png",))
    b = make_report(res, tmp_path / "b", formats=("png",))
    names = {"roofline_speedup_vs_batch", "roofline_optimal_k", "roofline_goodput"}
    assert names <= set(a)
    for n in names:
        assert Path(a[n][0]).read_bytes() == Path(b[n][0]).read_bytes()


def test_measured_on_gpu_marker():
    import pandas as pd
    from harness.speedup.report.roofline import marker
    assert "measured on GPU" in marker(pd.DataFrame({"source": ["measured-gpu"]}))
    assert "roofline" in marker(pd.DataFrame({"source": ["roofline"]}))


@pytest.mark.slow  # 29 s of `make test` (durations of stop 30's run): in `make test-slow`, which CI runs
def test_gpu_sweep_dry_run_on_cpu(tmp_path):
    """experiments/gpu_sweep.sh's pipeline without a GPU: the plan, T(n, B, L) of the tiny pair, the figures."""
    env = {"PY": sys.executable, "OUT": str(tmp_path / "sweep"), "ROOF_OUT": str(tmp_path / "roof"), "DRY_RUN": "1",
           "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path)}
    r = subprocess.run(["bash", str(REPO / "experiments" / "gpu_sweep.sh")], env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    for f in ("costs.csv", "roofline.csv", "roofline_vs_measured.csv", "meta.json",
              "figures/roofline_speedup_vs_batch.png"):
        assert (tmp_path / "roof" / f).is_file(), f


def test_measured_model_runs_on_roofline_costs_and_agrees_in_steady_state():
    """cost_frame plugs T(n, B, L) into harness.speedup.costmodel's measured model; with long runs and B = 1 its
    prediction tends to the steady-state S of roofline_speedup (prefill and the last round aside)."""
    from harness.speedup.roofline.speedup import cost_frame
    s = ModelShape.from_dict(LLAMA7B)
    hw = load_hardware("h100")
    costs = PairCosts(Roofline(s, hw), Roofline(replace(s, layers=2), hw))
    table = cm.CostTable(cost_frame(costs, [4], [1], 512))
    alphas = [0.8, 0.75, 0.7, 0.7]
    pred = cm.predict_measured(table, alphas, 1, 4000, 16, n_sim=50)
    assert pred.speedup == pytest.approx(speedup(costs, "chain", alphas, 4, 1, 512), rel=0.02)


def test_local_roofline_fits_the_committed_tiny_pair_profile():
    """The 'local' calibration on the committed profile (72 forwards of the tiny pair), with fixed probe
    numbers so nothing is timed: the roofline with per-layer overhead explains the profile to ~10 %."""
    import pandas as pd
    from harness.speedup.roofline.local import calibrate_local, profile_points, tiny_shape, TINY_SHAPES
    prof = pd.read_csv(REPO / "results" / "sweep" / "default" / "profiles.csv")
    pts = profile_points(prof, {m: tiny_shape(r) for m, r in TINY_SHAPES.items()})
    assert len(pts) == 72 and {p[0].name for p in pts} == {"tiny:target", "tiny:draft"}
    cal = calibrate_local(prof, {"bandwidth_gbps": 5.0, "peak_tflops_float32": 0.02})
    assert cal.points == 72
    assert cal.median_abs_rel_err < 0.15 and cal.max_abs_rel_err < 0.4


# -- published points: the terms added for them ------------------------------------------------------------
QWEN_MOE = {"hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
            "head_dim": 128, "intermediate_size": 6144, "num_experts": 128, "num_experts_per_tok": 8,
            "moe_intermediate_size": 768, "vocab_size": 151936}


def test_moe_verification_reads_the_experts_its_tokens_are_routed_to():
    s = ModelShape.from_dict(QWEN_MOE)
    dense = ModelShape.from_dict(LLAMA7B)
    assert s.experts_read(1) == pytest.approx(8.0)
    assert s.experts_read(16) == pytest.approx(128 * (1 - (120 / 128) ** 16))
    w1, w16 = s.weight_bytes_for(1), s.weight_bytes_for(16)
    assert w16 - w1 == pytest.approx(48 * (s.experts_read(16) - 8) * 3 * 2048 * 768 * 2)
    assert dense.weight_bytes_for(1) == dense.weight_bytes_for(64) == dense.weight_bytes
    # a token multiplies through its 8 experts only; all 128 are resident
    assert s.matmul_params < s.params / 5
    assert s.resident_bytes(1, 0) > 25 * s.weight_bytes_for(1) / 4


def test_moe_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="'moe_intermediate_size' must be an integer"):
        ModelShape.from_dict({**QWEN_MOE, "moe_intermediate_size": 0})
    with pytest.raises(ConfigError, match="'num_experts_per_tok' must be <= num_experts"):
        ModelShape.from_dict({**QWEN_MOE, "num_experts_per_tok": 200})


def test_eagle_tree_round_calls_and_acceptance_inputs():
    from harness.speedup.roofline.rounds import round_calls, row_tokens
    tree = {"id": "t", "k": 4, "method": "eagle-tree", "steps": 4, "topk": 4, "num_draft": 16}
    assert round_calls(tree, 2.55) == ([1, 4, 4, 4, 3], 16)
    assert round_calls({"id": "c", "k": 3}, 2.0) == ([2, 1, 1], 4)
    with pytest.raises(ConfigError, match="needs `topk`"):
        round_calls({"id": "x", "k": 2, "method": "eagle-tree", "steps": 2, "num_draft": 4}, 2.0)
    # vLLM's per-position rates are unconditional: E = 1 + their sum, not a chain of conditional alphas
    pos = [0.73, 0.52, 0.36, 0.23, 0.15, 0.09, 0.06, 0.03]
    assert row_tokens({"id": "p", "k": 8, "accepted_per_position": pos}) == pytest.approx(1 + sum(pos))
    assert row_tokens({"id": "a", "k": 8, "alpha": pos}) == pytest.approx(1 + np.cumprod(pos).sum())
    assert row_tokens({"id": "e", "k": 8, "tokens_per_round": 3.1, "alpha": 0.1}) == 3.1
    with pytest.raises(ConfigError, match="non-increasing"):
        row_tokens({"id": "q", "k": 2, "accepted_per_position": [0.5, 0.7]})


def test_published_speedups_many_sources_and_never_fitted(published):
    from harness.speedup.roofline.fidelity import fidelity_table, summary
    pub, t = published
    m = summary(t, None)
    assert m["speedups"] >= 20 and m["groups"] >= 4
    # a speculative figure is never an input: changing every measured speedup changes no prediction
    moved = {**pub, "row": [{**r, "measured": r["measured"] * 1.5} if r["quantity"] == "speedup" else r
                            for r in pub["row"]]}
    t2 = fidelity_table(moved)
    spec = t.quantity == "speedup"
    assert np.allclose(t[spec].predicted.fillna(-1), t2[spec].predicted.fillna(-1))


def test_moe_rows_lose_at_batch_1_only_with_the_expert_read_term(published):
    """SpecForge #339 measures S < 1 for Qwen3-30B-A3B with 16-60 verified tokens; the roofline gets the
    sign from the experts those tokens read: dense-active weights would predict a gain."""
    from unittest import mock
    from harness.speedup.roofline import model as rm
    from harness.speedup.roofline.fidelity import fidelity_table
    pub, t = published
    ids = ["specforge-tp2-b1-s7t4n16", "specforge-tp2-b1-s8t8n60", "specforge-tp2-b1-s6t4n12"]
    s = t.set_index("id").predicted
    assert all(s[i] < 1.0 for i in ids)
    orig = rm.ModelShape.weight_bytes_for
    with mock.patch.object(rm.ModelShape, "weight_bytes_for", lambda self, tokens: orig(self, 1)):
        s_flat = fidelity_table(pub).set_index("id").predicted
    assert all(s_flat[i] > 1.0 for i in ids)


def test_published_row_setup_is_inherited_and_a_missing_one_named(tmp_path):
    from harness.speedup.roofline.fidelity import PUBLISHED, load_published
    pub = load_published()
    r = {x["id"]: x for x in pub["row"]}["vllm-h100-eagle3-k4"]
    assert r["hardware"] == "h100" and r["calibrate"] == [[1, 7.07]] and r["draft"] == "eagle3-llama3.1-8b"
    p = tmp_path / "p.toml"
    p.write_text(PUBLISHED.read_text().replace('setup = "vllm-h100-l31-8b"', 'setup = "nope"', 1))
    with pytest.raises(ConfigError, match="`setup` 'nope' is not in"):
        load_published(p)


def test_long_context_gain_needs_the_drafts_bounded_cache(published):
    """MagicDec measures S > 1 at 32k context, B = 32-128 with a StreamingLLM self-draft (KV budget 512):
    the roofline gets the sign only because the draft reads its own 512-token cache (draft_context) while
    verification reads the full one; a draft charged the full 32k cache would be predicted to lose."""
    from harness.speedup.roofline.fidelity import fidelity_table
    pub, t = published
    ids = [i for i in t.id if i.startswith("magicdec") and "l31-8b" in i]
    assert len(ids) == 5
    s = t.set_index("id")
    assert all(s.predicted[i] > 1.0 and s.measured[i] > 1.0 for i in ids)
    full = {**pub, "row": [{k: v for k, v in r.items() if k != "draft_context"} for r in pub["row"]]}
    s_full = fidelity_table(full).set_index("id").predicted
    assert all(s_full[i] < 1.0 for i in ids)


def test_fidelity_figure_is_drawn_from_the_table_and_byte_reproducible(tmp_path):
    import pandas as pd
    from harness.core.provenance import atomic_write_csv, atomic_write_json
    from harness.speedup.report.cli import make_report
    res = tmp_path / "r"
    meta = {"commit": "0" * 40, "dirty": False, "seed": 0, "versions": {}, "machine": {}, "config": {"name": "t"}}
    t = pd.DataFrame({"id": ["a", "b", "c"], "quantity": ["speedup", "speedup", "c"], "group": ["x", "y", "x"],
                      "measured": [1.5, 0.8, 0.1], "predicted": [1.6, 1.1, 0.12], "sign_ok": [True, False, None]})
    atomic_write_csv(res / "fidelity_published.csv", t, meta)
    atomic_write_json(res / "meta.json", meta)
    a = make_report(res, tmp_path / "a", formats=("png",))
    b = make_report(res, tmp_path / "b", formats=("png",))
    assert "roofline_fidelity" in a and "roofline_speedup_vs_batch" not in a
    assert Path(a["roofline_fidelity"][0]).read_bytes() == Path(b["roofline_fidelity"][0]).read_bytes()


def test_published_picks_takes_off_when_every_k_loses_and_measures_the_gap():
    """experiments/published_picks.picks on a synthetic sweep: the model's pick is its largest predicted S with
    off = 1 among the choices, the gap is 1 - S_measured(pick) / S_measured(best).  Deterministic."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("published_picks", Path(__file__).resolve().parents[2]
                                                  / "experiments" / "published_picks.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    t = pd.DataFrame([  # pair x: batch 1 gains (model picks k = 2, best k = 1), batch 8 loses at every k
        {"id": "g-x-k1-b1", "group": "g", "quantity": "speedup", "k": 1, "batch": 1, "measured": 1.30, "predicted": 1.2},
        {"id": "g-x-k2-b1", "group": "g", "quantity": "speedup", "k": 2, "batch": 1, "measured": 1.20, "predicted": 1.4},
        {"id": "g-x-k1-b8", "group": "g", "quantity": "speedup", "k": 1, "batch": 8, "measured": 0.90, "predicted": 0.95},
        {"id": "g-x-k2-b8", "group": "g", "quantity": "speedup", "k": 2, "batch": 8, "measured": 0.80, "predicted": 1.05}])
    p = mod.picks(t, "g").set_index("batch")
    assert p.loc[1, "model pick"] == "k = 2" and p.loc[1, "measured best"] == "k = 1"
    assert p.loc[1, "gap"] == pytest.approx(1 - 1.2 / 1.3) and not p.loc[1, "right"]
    assert p.loc[8, "measured best"] == "off" and p.loc[8, "model pick"] == "k = 2"
    assert p.loc[8, "gap"] == pytest.approx(0.2)


def test_calibrate_pool_fits_every_model_of_the_machine_and_names_a_bad_entry(tmp_path, published):
    """The A40 rows fit one machine to the target-only runs of all four targets (pool.a40-vllm063) through
    row_costs (the rows give no `calibrate` of their own); every pool point is a target-only rate of the sweep's
    logs (1000 B / tok/s equals a tokens_per_s_ar input where one is listed); bad pool entries, an own
    `calibrate` beside the pool and an unknown pool field are refused by name.  Deterministic."""
    from harness.speedup.roofline.fidelity import PUBLISHED, _calibration_points, load_published, row_costs
    pub, t = published
    r = next(r for r in pub["row"] if r["id"] == "a40-7b-k1-b1")
    assert "calibrate" not in r and r["_pool"][1] == ("eff_bandwidth", "eff_compute", "overhead_s")
    pts = _calibration_points(r, pub["_shapes"][r["target"]], pub["_shapes"])
    assert len(pts) == 21 and len({p[0].name for p in pts}) == 4
    _, rt, _ = row_costs(r, pub["_shapes"])
    want = calibrate(load_hardware("a40"), pts, fit=r["_pool"][1]).hardware
    assert (rt.hw.eff_bandwidth, rt.hw.eff_compute, rt.hw.overhead_s) == (want.eff_bandwidth, want.eff_compute,
                                                                          want.overhead_s)
    assert rt.hw.eff_bandwidth != load_hardware("a40").eff_bandwidth
    ar = t.set_index("id").loc[["a40-7b-ar-b1", "a40-7b-ar-b32"]]
    assert ar.is_input.all()
    text = PUBLISHED.read_text()
    for old, new, msg in (('{model = "qwen2.5-3b", points', '{model = "qwen2.5-3b-typo", points', "pool.a40-vllm063"),
                          ("[[1, 13.55], [2, 14.24]", "[[1, 13.55, 2], [2, 14.24]", "pool.a40-vllm063"),
                          ("[[1, 13.55], [2, 14.24]", "[[0, 13.55], [2, 14.24]", "batch >= 1"),
                          ('[pool.a40-vllm063]\n', '[pool.a40-vllm063]\nweights = 1\n', "unknown field 'weights'"),
                          ('calibrate_pool = "a40-vllm063"', 'calibrate = [[1, 29.59]]\ncalibrate_pool = "a40-vllm063"',
                           "`calibrate` cannot be given with `calibrate_pool`")):
        p = tmp_path / "p.toml"
        p.write_text(text.replace(old, new, 1))
        with pytest.raises(ConfigError, match=msg.replace("[", r"\[").replace("(", r"\(")):
            load_published(p)


def test_each_a40_term_lowers_the_held_out_error(published):
    """Each term added for the A40 sweep (prefill in whole runs, the speculative engine's per-step cost, one
    machine fitted to all four targets) lowers the median |error| of its 60 speedups, none of them fitted;
    removed one at a time, the median rises (experiments/roofline_ablation.py prints the table).  Deterministic."""
    import importlib.util
    from harness.speedup.roofline.fidelity import fidelity_table
    spec = importlib.util.spec_from_file_location("roofline_ablation", Path(__file__).resolve().parents[2]
                                                  / "experiments" / "roofline_ablation.py")
    abl = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(abl)
    pub, t = published
    med = (lambda tab: float(tab[(tab.group == "a40-goodput") & (tab.quantity == "speedup")].rel_err.abs().median()))
    full = med(t)
    for variant in (abl.drop_fields(pub, "prompt_tokens", "output_tokens"), abl.drop_fields(pub, "spec_off_rates")):
        assert med(fidelity_table(variant)) > full + 0.01
    assert med(abl.own_runs_table(pub)) > full + 0.01
    with pytest.raises(ConfigError, match="do not separate eff_bandwidth"):  # the calibration rule refuses it
        fidelity_table(abl.own_runs_only(pub))


def test_spec_engine_tax_and_run_fields_refuse_bad_values():
    from harness.speedup.roofline.fidelity import spec_engine_tax
    from harness.speedup.roofline.rounds import row_run
    for bad in ([[32, 900.0, 868.0]], [[32, "714", 868.0]], [[32, True, 868.0]]):
        with pytest.raises(ConfigError, match="spec_off_rates"):
            spec_engine_tax({"id": "r", "spec_off_rates": bad})
    for P, O in ((150, None), (None, 96), (True, 96), (150, 1)):
        with pytest.raises(ConfigError, match="prompt_tokens"):
            row_run({"id": "r", "prompt_tokens": P, "output_tokens": O})
    assert row_run({"id": "r"}) is None


TERMS = Path(__file__).resolve().parents[2] / "harness" / "configs" / "fidelity" / "terms.toml"
DOC = Path(__file__).resolve().parents[2] / "docs" / "roofline.md"


def _doc_terms() -> dict:
    """term -> set of groups from the table under "The declared split" in docs/roofline.md."""
    text = DOC.read_text().split("**The declared split.**", 1)[1].split("\n\n", 2)[1]
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 2 and cells[0] not in ("term, rule or knob", "---"):
            out[cells[0]] = set() if cells[1].startswith("–") else {g.strip() for g in cells[1].split(",")}
    return out


def test_every_row_declares_its_split_and_a_source_sits_on_one_side(tmp_path, published):
    from harness.speedup.roofline.fidelity import PUBLISHED, SPLITS, load_published
    pub, t = published
    assert all(r["split"] in SPLITS for r in pub["row"])
    assert (t.groupby("group").split.nunique() == 1).all()
    assert {"calibration", "evaluation"} <= set(t.split)
    text = PUBLISHED.read_text()
    p = tmp_path / "p.toml"
    p.write_text(text.replace('[[row]]\nsplit = "calibration"\n', "[[row]]\n", 1))  # the first row loses its split
    with pytest.raises(ConfigError, match="'split' is missing"):
        load_published(p)
    p.write_text(text.replace('[[row]]\nsplit = "calibration"\nid = "vllm-h100-eagle1-k3"',
                              '[[row]]\nsplit = "evaluation"\nid = "vllm-h100-eagle1-k3"', 1))
    with pytest.raises(ConfigError, match="vllm-ekagra.*calibration or evaluation as a whole"):
        load_published(p)
    p.write_text(text.replace('split = "calibration"', 'split = "test"', 1))
    with pytest.raises(ConfigError, match="`split` must be one of"):
        load_published(p)


def test_every_term_is_chosen_by_calibration_sources_only(published):
    import tomllib
    pub, t = published
    side = dict(zip(t.group, t.split))
    terms = tomllib.loads(TERMS.read_text())["term"]
    assert len(terms) >= 10
    for name, term in terms.items():
        assert term["what"] and term["basis"], name
        for g in term["chosen_by"]:
            assert g in side, f"terms.toml: {name} names {g!r}, which is no group of published.toml"
            assert side[g] == "calibration", f"terms.toml: {name} was chosen by {g!r}, an evaluation source"
    # the docs say the same, term by term (a term added to one and not the other fails here)
    assert _doc_terms() == {name: set(term["chosen_by"]) for name, term in terms.items()}


def test_committed_headline_is_computed_from_evaluation_rows_only():
    from harness.speedup.roofline.fidelity import by_source, failures, summary
    res = Path(__file__).resolve().parents[2] / "results" / "roofline"
    t = pd.read_csv(res / "fidelity_published.csv", keep_default_na=False, na_values=[""])
    t["is_input"] = t.is_input.astype(str).str.lower() == "true"
    t["sign_ok"] = t.sign_ok.map(lambda v: None if v == "" or v is None else str(v).lower() == "true")
    t["fails_because"] = t.fails_because.fillna("")
    md = (res / "fidelity_published.md").read_text()
    ev, cal = summary(t, "evaluation"), summary(t, "calibration")
    head = md.split("Calibration rows", 1)[0]
    assert (f"Evaluation speedups predicted: {ev['speedups']} from {ev['groups']} sources; |error| median "
            f"{100 * ev['speedup_median']:.3g} %, worst {100 * ev['speedup_worst']:.3g} %") in head
    assert f"sign of S - 1 right at {ev['sign_right']} of {ev['speedups']}" in head
    assert f"{100 * ev['speedup_median_of_sources']:.3g} %" in head
    # the in-sample calibration figure is not the headline, and no calibration row is listed in the md
    assert ev["speedup_median"] != cal["speedup_median"]
    listed = {line.split("|")[1].strip() for line in md.splitlines() if line.startswith("| ")}
    assert not (set(t[t.split == "calibration"].id) & listed)
    assert {g for g, *_ in by_source(t, "evaluation")} == set(t[(t.split == "evaluation") & (t.quantity == "speedup")].group)
    # every failing evaluation row says why (missing information in the source, or a term the model lacks)
    assert set(failures(t).fails_because) <= {"source", "term"}
