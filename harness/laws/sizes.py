"""What an n-gram scenario's exact law and its accumulators take in memory, from its settings alone.

:func:`check_scenario_sizes` is called by :func:`harness.laws.scenarios.load_scenario` before any table is
built: each large array the run will hold is estimated from the merged scenario (and default.toml's
``[run]``: ``pit_bins``, ``max_chunk``) and checked against :func:`harness.core.limits.memory_budget`; one
that does not fit is exit 2 naming ``file: key`` (the key that sizes it), the value and the bytes.

The estimates (float64 / int64 entries, 8 bytes; V tokens, W = V + 1 symbols with PAD, C = V^(order-1)
contexts, N = max_new_tokens, J = joint_tokens):

    n-gram tables        C x V      per table; ~16 tables alive (target and draft, float32 and float64,
                                     warped and raw, the law's copies)
    round kernel         C^2 x (k + 1) x 2, and its work arrays (x3)         (ExactLaw.round_kernel)
    joint                W^J cells, at most JOINT_CELLS (ExactLaw.joint's own limit), and
                         (N - J - 1) x W^J windows per accumulator
    positions            N x (pit_bins + W + W^2 + C) per accumulator        (battery.Accumulator, law tables)
    one sampler call     max_chunk x N tokens in ~8 arrays (tokens, symbols, states, PITs, ...)
    its prompts          max_chunk x (P + N) token ids in ~3 arrays (the prompts, prompt + output, a copy), P = len(prompt)
    accumulators alive   ~4 (the run's, a shard's in flight, the baseline's, a merge)
"""
from __future__ import annotations

from pathlib import Path

from harness.core.limits import check_bytes
from harness.core.schema import fail

__all__ = ["JOINT_CELLS", "check_scenario_sizes"]

JOINT_CELLS = 1 << 20  # cells of a joint / window table at most (harness.laws.ngram.ExactLaw.joint's max_cells)
ENTRY = 8  # bytes of a float64 / int64 entry
TABLE_COPIES = 16
ACCUMULATORS = 4
CHUNK_ARRAYS = 8
PROMPT_ARRAYS = 3


def _order_key(own: dict) -> str:
    """The key that sizes the tables, as the scenario's own file names it (vocab_size if only it is set)."""
    t, d = own.get("target", {}), own.get("draft", {})
    if "order" in t:
        return "target.order"
    if "order" in d:
        return "draft.order"
    return "target.vocab_size" if "vocab_size" in t else "target.order"


def check_scenario_sizes(raw: dict, own: dict, run: dict, source: str) -> None:
    """UsageError (exit 2) naming ``source: key`` when a part of the scenario's law or accumulators would not
    fit in memory.  ``raw``: the merged scenario; ``own``: its file's own keys; ``run``: default.toml's [run]."""
    N, J, k = int(raw.get("max_new_tokens", 2)), int(raw.get("joint_tokens", 0)), int(raw.get("k", 1))
    pit_bins, max_chunk = int(run.get("pit_bins", 65536)), int(run.get("max_chunk", 200_000))
    if raw.get("builder", "ngram") == "ngram":
        t, d = raw.get("target", {}), raw.get("draft", {})
        V = int(t.get("vocab_size", 2))
        order = max(int(t.get("order", 1)), int(d.get("order", 1)) if d.get("kind") == "random" else 1)
        W, C = V + 1, V ** (order - 1)
        key = _order_key(own)
        value = t.get(key.split(".")[1]) if key.startswith("target.") else d.get("order")
        check_bytes(f"{source}: `{key}`", value, TABLE_COPIES * C * V * ENTRY,
                    f"n-gram tables of vocab_size^order = {V}^{order} entries")
        kernel = lambda k: 3 * C * C * (k + 1) * 2 * ENTRY  # noqa: E731
        why = "the exact law's round kernel, contexts^2 x (k + 1) x 2 = {}^2 x {} x 2 entries"
        check_bytes(f"{source}: `{key}`", value, kernel(1), why.format(C, 2))  # too large at k = 1: the contexts
        k_key, k_value = ("k", k) if "k" in own else (key, value)  # else k is, where the file sets it
        check_bytes(f"{source}: `{k_key}`", k_value, kernel(k), why.format(C, k + 1))
        if J >= 2 and W ** J > JOINT_CELLS:
            fail(source, "joint_tokens", J, f"an integer with (vocab_size + 1)^joint_tokens <= {JOINT_CELLS:,} "
                                            f"(here {W}^{J} = {W ** J:,} cells)")
    else:
        W, C, J = 1, 1, 0
    run_source = str(Path(source).with_name("default.toml"))  # [run]'s keys live there: a value too large for one
    check_bytes(f"{run_source}: `run.pit_bins`", pit_bins, ACCUMULATORS * pit_bins * ENTRY,  # position is theirs
                f"one position's PIT histogram of pit_bins entries, x{ACCUMULATORS} accumulators")
    check_bytes(f"{run_source}: `run.max_chunk`", max_chunk, CHUNK_ARRAYS * max_chunk * ENTRY,
                f"one sampler call of max_chunk = {max_chunk:,} sequences, one token each")
    per_position = ACCUMULATORS * (pit_bins + W + W * W + C + 1) * ENTRY
    check_bytes(f"{source}: `max_new_tokens`", N, N * per_position,
                f"per-position tables: max_new_tokens x (pit_bins = {pit_bins} + symbols^2 ...), x{ACCUMULATORS} "
                "accumulators")
    check_bytes(f"{source}: `max_new_tokens`", N, CHUNK_ARRAYS * max_chunk * N * ENTRY,
                f"one sampler call of max_chunk = {max_chunk:,} sequences x max_new_tokens tokens")
    prompt = raw.get("prompt", [0])
    P = len(prompt) if isinstance(prompt, (list, tuple)) else 1
    check_bytes(f"{source}: `prompt` length", P, PROMPT_ARRAYS * max_chunk * (P + N) * ENTRY,
                f"one sampler call's prompts, max_chunk = {max_chunk:,} sequences x (prompt + max_new_tokens) tokens")
    joint = W ** J if J >= 2 else 0
    key, value = ("max_new_tokens", N) if "max_new_tokens" in own else ("joint_tokens", J)
    check_bytes(f"{source}: `{key}`", value, ACCUMULATORS * (max(N - J - 1, 0) + 1) * joint * ENTRY,
                f"joint windows of (vocab_size + 1)^joint_tokens = {joint:,} cells at {max(N - J - 1, 0):,} offsets")
