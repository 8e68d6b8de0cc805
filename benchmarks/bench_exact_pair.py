"""The real-model certificate's draw rate: sequences per second of the reference sampler on the exact pair.

Workload: :func:`harness.verify.exactmodel.exact_model_draw` of ``specimpl.speculative_generate`` on the shipped
exact transformer pair with default.toml's ``[real_model.exact]`` settings (2 ragged prompts alternating, J = 4
tokens, k = 4, batches of 2,048 rows), ``BENCH_EXACT_SEQUENCES`` sequences a call (default 16,384), one torch
thread (as a verify worker runs).  The tokens counted are the J generated per sequence; ``sequences_per_s`` is
what `make verify` pays per worker for the certificate's 2 x 278,528 sequences.  One warm-up call (model loading).
"""
import os
import tomllib

import pytest
import torch

from harness.core.threads import with_threads
from harness.laws.scenarios import SCENARIO_DIR
from harness.verify.exactmodel import exact_model_draw, load_exact_model_spec
from specimpl.speculative import speculative_generate

SEQUENCES = int(os.environ.get("BENCH_EXACT_SEQUENCES", "16384"))
SPEC = load_exact_model_spec(tomllib.loads((SCENARIO_DIR / "default.toml").read_text())["real_model"]["exact"])


def _draw():
    return with_threads(1, lambda: exact_model_draw(speculative_generate, SPEC, n_sequences=SEQUENCES, seed=1))


def test_exact_pair_draw_rate(benchmark):
    with torch.inference_mode():
        d = benchmark.pedantic(_draw, rounds=3, iterations=1, warmup_rounds=1)
    benchmark.extra_info.update(tokens=SEQUENCES * SPEC.n_tokens, role="exact_pair", sequences=SEQUENCES,
                                what=f"exact pair: reference sampler, {SEQUENCES:,} sequences of J = {SPEC.n_tokens}, "
                                     f"batches of {SPEC.batch_size}, 1 thread")
    assert d.n_sequences == SEQUENCES
