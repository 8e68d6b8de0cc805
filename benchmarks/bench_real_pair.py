"""The real-model PIT draw rate: sequences per second of the reference sampler on the shipped tiny pair, scored.

Workload: :func:`harness.verify.realmodel.real_model_draw` of ``specimpl.speculative_generate`` on the tiny pair
with default.toml's ``[real_model]`` settings (T = 64 tokens, k = 4, ragged prompts of 8-48 bytes, batches of 256),
``BENCH_REAL_SEQUENCES`` sequences a call (default 256: one batch), one torch thread (as a verify worker runs):
drawing *and* the target's scoring for the PIT.
``sequences_per_s`` is what `make verify` pays per worker for each of its tiny-pair runs (384 sequences of the
sampler under test, 256 + 768 + 323 of the controls).  One warm-up call (model loading).
"""
import os
import tomllib

import torch

from harness.core.threads import with_threads
from harness.laws.scenarios import SCENARIO_DIR
from harness.verify.realmodel import load_real_model_spec, real_model_draw, tiny_pair
from specimpl.speculative import speculative_generate

SEQUENCES = int(os.environ.get("BENCH_REAL_SEQUENCES", "256"))
SPEC = load_real_model_spec(tomllib.loads((SCENARIO_DIR / "default.toml").read_text())["real_model"])


def _draw():
    return with_threads(1, lambda: real_model_draw(
        speculative_generate, n_sequences=SEQUENCES, max_new_tokens=SPEC.max_new_tokens, k=SPEC.k, config=SPEC.config,
        prompt_lengths=SPEC.prompt_lengths, batch_size=SPEC.batch_size, seed=1, progress=False))


def test_real_pair_draw_rate(benchmark):
    tiny_pair()  # loaded as verify loads it: outside torch.inference_mode
    with torch.inference_mode():
        d = benchmark.pedantic(_draw, rounds=3, iterations=1, warmup_rounds=1)
    benchmark.extra_info.update(tokens=SEQUENCES * SPEC.max_new_tokens, role="real_pair", sequences=SEQUENCES,
                                what=f"tiny pair: reference sampler + PIT scoring, {SEQUENCES:,} sequences of "
                                     f"T = {SPEC.max_new_tokens}, batches of {SPEC.batch_size}, 1 thread")
    assert d.n_sequences == SEQUENCES and d.u.shape == (SEQUENCES, SPEC.max_new_tokens)
